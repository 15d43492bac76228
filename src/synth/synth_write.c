/* Streaming a synthetic model's tensor data.  Each tensor draws from its own
 * random stream (seed, tensor index), row after row, so the bytes depend on
 * the seed alone, never on buffer sizes.  Quantised matrices are generated
 * block by block straight into a 4 MiB chunk that the writer's background
 * thread drains while the next one is filled. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "synth/synth_gen.h"
#include "synth/synth_internal.h"

double synth_resid_var(uint32_t pos)
{
    return (double)EMBD_SIGMA * EMBD_SIGMA + (pos / 2) * (RESID_ATTN + RESID_FFN) + (pos % 2 ? RESID_ATTN : 0);
}

typedef struct {
    synth_job *j;
    synth_progress_fn fn;
    void *ud;
    uint64_t done, total, reported;
    uint8_t *buf;
    size_t cap;
    sl_err *err;
} wctx;

static int emit(wctx *x, const void *p, size_t n)
{
    if (gguf_w_write(x->j->w, p, n, x->err)) return -1;
    x->done += n;
    if (x->fn && x->done - x->reported >= (8u << 20)) {
        x->fn(x->ud, x->done, x->total);
        x->reported = x->done;
    }
    return 0;
}

/* ---- routing skew ---- */

/* rank_of[e]: expert e's popularity rank (0 = most popular) in layer L, a
 * seeded shuffle so the hot experts differ from layer to layer. */
static void popularity(const synth_job *j, int32_t L, uint32_t *rank_of)
{
    uint32_t n = j->c.shape.n_expert;
    sy_rng r;
    sy_rng_seed(&r, j->c.seed, 0x9000000ull + (uint64_t)L);
    for (uint32_t e = 0; e < n; e++) rank_of[e] = e;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t k = (uint32_t)(sy_next(&r) % (i + 1));
        uint32_t t = rank_of[i];
        rank_of[i] = rank_of[k], rank_of[k] = t;
    }
}

/* b_e = -S * beta * ln(rank_e + 1), centred over the experts. */
static void skew_biases(const synth_job *j, int32_t L, double beta, float *b)
{
    uint32_t n = j->c.shape.n_expert;
    uint32_t *rank_of = malloc(n * sizeof *rank_of);
    if (!rank_of) return;
    popularity(j, L, rank_of);
    double mean = 0;
    for (uint32_t e = 0; e < n; e++) mean += -j->c.route_skew * beta * log(rank_of[e] + 1.0) / n;
    for (uint32_t e = 0; e < n; e++) b[e] = (float)(-j->c.route_skew * beta * log(rank_of[e] + 1.0) - mean);
    free(rank_of);
}

/* ---- F32 tensors: norms, routers, selection biases ---- */

/* Residual position of a norm that reads the residual stream, else -1. */
static int32_t resid_pos(const synth_job *j, const synth_tensor *t)
{
    if (t->layer < 0) return strcmp(t->name, "output_norm.weight") == 0 ? 2 * (int32_t)j->c.shape.n_layer : -1;
    const char *base = strchr(strchr(t->name, '.') + 1, '.') + 1;
    if (strcmp(base, "attn_norm.weight") == 0) return 2 * t->layer;
    if (strcmp(base, "ffn_norm.weight") == 0 || strcmp(base, "post_attention_norm.weight") == 0)
        return 2 * t->layer + 1;
    return -1;
}

static void gen_norm(const synth_job *j, const synth_tensor *t, float *v, sy_rng *r)
{
    for (int64_t i = 0; i < t->ne[0]; i++) v[i] = t->gain * (1.0f + NORM_SPREAD * sy_gauss(r));
    int32_t pos = resid_pos(j, t);
    if (j->skew_dim < 0 || pos < 0) return;
    /* normed skew coordinate ~ x_k / rms(x) * w_k = 1 */
    double a = j->skew_a, rms = sqrt(synth_resid_var((uint32_t)pos) + a * a / j->c.shape.n_embd);
    v[j->skew_dim] = (float)(rms / a);
}

static void gen_router(const synth_job *j, const synth_tensor *t, float *v, sy_rng *r)
{
    int64_t n = t->ne[0], n_exp = t->ne[1];
    float sigma = 1.0f / sqrtf((float)n);
    for (int64_t i = 0; i < n * n_exp; i++) v[i] = sigma * sy_gauss(r);
    if (j->skew_dim < 0) return;
    float *b = malloc((size_t)n_exp * sizeof *b);
    if (!b) return;
    skew_biases(j, t->layer, BETA_LOGIT, b);
    for (int64_t e = 0; e < n_exp; e++) v[e * n + j->skew_dim] += b[e];
    free(b);
}

static int gen_f32(wctx *x, const synth_tensor *t, sy_rng *r)
{
    const synth_job *j = x->j;
    uint64_t n = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
    float *v = calloc(n, sizeof *v);
    if (!v) return sl_errf(x->err, "out of memory for tensor '%s'", t->name);
    if (t->role == SYNTH_NORM) gen_norm(j, t, v, r);
    else if (t->role == SYNTH_ROUTER) gen_router(j, t, v, r);
    else if (t->role == SYNTH_CONV)
        for (uint64_t i = 0; i < n; i++) v[i] = sy_gauss(r) / sqrtf((float)t->ne[0]);
    else if (t->role == SYNTH_SSM_A) /* stored already negated, as the converters do */
        for (uint64_t i = 0; i < n; i++) v[i] = -expf(logf(16.0f) * sy_unif(r));
    else if (t->role == SYNTH_BIAS)
        for (uint64_t i = 0; i < n; i++) v[i] = 0.05f * sy_gauss(r);
    else if (t->role == SYNTH_DT_BIAS) /* softplus^-1(dt) = log(expm1(dt)) */
        for (uint64_t i = 0; i < n; i++) v[i] = logf(expm1f(expf(logf(1e-3f) + logf(100.0f) * sy_unif(r))));
    else if (j->c.route_skew > 0) skew_biases(j, t->layer, BETA_SIGMOID, v); /* SYNTH_PROBS_B */
    int rc = emit(x, v, n * sizeof *v);
    free(v);
    return rc;
}

/* ---- matrices ---- */

static float sigma_of(const synth_job *j, const synth_tensor *t)
{
    if (t->role == SYNTH_EMBD) return EMBD_SIGMA;
    if (t->role == SYNTH_OUTPUT) return 1.0f / sqrtf((float)j->c.shape.n_embd);
    return t->gain / sqrtf((float)t->ne[0]);
}

/* The block of an embedding row holding the skew coordinate, quantised
 * from floats so that coordinate is exactly the large constant. */
static void embd_skew_block(const synth_job *j, const synth_tensor *t, uint8_t *row, sy_rng *r)
{
    const ggml_type_info *ti = ggml_type_get(t->type);
    float x[256];
    uint32_t bk = (uint32_t)j->skew_dim / ti->blck_size;
    for (uint32_t i = 0; i < ti->blck_size; i++) x[i] = EMBD_SIGMA * sy_gauss(r);
    x[(uint32_t)j->skew_dim % ti->blck_size] = j->skew_a;
    sy_quantize_blocks(t->type, x, row + (uint64_t)bk * ti->type_size, ti->blck_size);
}

static int gen_rows(wctx *x, const synth_tensor *t, sy_rng *r)
{
    const ggml_type_info *ti = ggml_type_get(t->type);
    uint64_t row_bytes = ggml_row_bytes(t->type, (uint64_t)t->ne[0]);
    uint64_t blocks = (uint64_t)t->ne[0] / ti->blck_size;
    uint64_t rows = (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    uint64_t per_chunk = x->cap / row_bytes;
    sy_gen gen;
    sy_gen_init(&gen, t->type, sigma_of(x->j, t), r);
    bool skew = t->role == SYNTH_EMBD && x->j->skew_dim >= 0;
    for (uint64_t done = 0; done < rows;) {
        uint64_t n = rows - done < per_chunk ? rows - done : per_chunk;
        for (uint64_t i = 0; i < n; i++) {
            uint8_t *row = x->buf + i * row_bytes;
            sy_gen_blocks(&gen, row, blocks, r);
            if (skew) embd_skew_block(x->j, t, row, r);
        }
        if (emit(x, x->buf, (size_t)(n * row_bytes))) return -1;
        done += n;
    }
    return 0;
}

int synth_job_write(synth_job *j, const char *path, synth_progress_fn progress, void *ud, sl_err *err)
{
    wctx x = {.j = j, .fn = progress, .ud = ud, .err = err};
    uint64_t max_row = 0;
    for (size_t i = 0; i < j->n_t; i++) {
        x.total += j->t[i].nbytes;
        uint64_t rb = ggml_row_bytes(j->t[i].type, (uint64_t)j->t[i].ne[0]);
        if (rb > max_row) max_row = rb;
    }
    x.cap = max_row > CHUNK_BYTES ? (size_t)max_row : CHUNK_BYTES;
    x.buf = malloc(x.cap);
    if (!x.buf) return sl_errf(err, "out of memory");
    int rc = gguf_w_open(j->w, path, err);
    for (size_t i = 0; i < j->n_t && !rc; i++) {
        const synth_tensor *t = &j->t[i];
        sy_rng r;
        sy_rng_seed(&r, j->c.seed, i + 1);
        bool f32 = synth_role_f32(t->role);
        rc = f32 ? gen_f32(&x, t, &r) : gen_rows(&x, t, &r);
        if (rc) sl_err_wrap(err, "tensor '%s'", t->name);
    }
    if (!rc) rc = gguf_w_close(j->w, err);
    if (!rc && progress) progress(ud, x.done, x.total);
    free(x.buf);
    return rc;
}
