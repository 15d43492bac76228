/* Sessions: KV cache, scratch, and the evaluation driver (embedding lookup,
 * the architecture's layers, final norm and output projection).  Prompts run
 * in passes of up to n_batch tokens (session_opts); every layer sees the
 * whole pass at once, so a routed expert is fetched once per layer per pass,
 * and every block computes each position from its own rows and keys
 * 0..pos only, so the split never changes a bit. */
#include "arch/sess.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arch/attn.h"
#include "arch/ffn.h"
#include "arch/pilot.h"

void *scr_get(sl_session *s, int slot, size_t bytes, sl_err *err)
{
    if (bytes == 0) bytes = 1;
    if (bytes <= s->scr_cap[slot]) return s->scr[slot];
    size_t cap = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, cap);
    if (!p) return sl_errf(err, "out of memory (%zu bytes of scratch)", bytes), NULL;
    free(s->scr[slot]);
    s->scr[slot] = p;
    s->scr_cap[slot] = cap;
    return p;
}

void run_tasks(sl_session *s, int n_tasks, sl_task_fn fn, void *ctx)
{
    if (s->pool && n_tasks > 1) {
        pool_run(s->pool, n_tasks, fn, ctx);
        return;
    }
    for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
}

typedef struct {
    rows_fn fn;
    void *ctx;
    int n, shares;
} rows_job;

static void rows_task(void *ctx, int task, int thread)
{
    const rows_job *j = ctx;
    int i0 = (int)((int64_t)j->n * task / j->shares), i1 = (int)((int64_t)j->n * (task + 1) / j->shares);
    if (i1 > i0) j->fn(j->ctx, i0, i1, thread);
}

void run_rows(sl_session *s, int n, rows_fn fn, void *ctx)
{
    if (!s->pool || s->n_threads <= 1 || n < ROWS_PARALLEL) {
        if (n > 0) fn(ctx, 0, n, 0);
        return;
    }
    rows_job j = {.fn = fn, .ctx = ctx, .n = n, .shares = s->n_threads < n ? s->n_threads : n};
    pool_run(s->pool, j.shares, rows_task, &j);
}

void add_bias(float *y, const float *b, int T, int64_t n)
{
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++) y[t * n + i] += b[i];
}

enum { MM_MAX = 4 };

typedef struct {
    int n;
    const sl_mat *w[MM_MAX];
    const sl_act *x[MM_MAX];
    float *y[MM_MAX];
    size_t y_stride[MM_MAX];
    int64_t chunk[MM_MAX];
    int first[MM_MAX + 1]; /* first task of each product */
    sl_isa isa;
} mm_multi_job;

static void mm_multi_task(void *ctx, int task, int thread)
{
    (void)thread;
    const mm_multi_job *j = ctx;
    int i = 0;
    while (task >= j->first[i + 1]) i++;
    int64_t r0 = (int64_t)(task - j->first[i]) * j->chunk[i], r1 = r0 + j->chunk[i];
    if (r1 > j->w[i]->ne1) r1 = j->w[i]->ne1;
    matmul_rows(j->w[i], j->x[i], j->y[i], j->y_stride[i], r0, r1, j->isa);
}

int matmul_multi(sl_session *s, int n, const sl_mat *const *w, const sl_act *const *x, float *const *y,
                 const size_t *y_stride, sl_err *err)
{
    double work = 0;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        if (matmul_check(w[i], x[i], err)) return -1;
        work += (double)w[i]->row_bytes * (double)w[i]->ne1 * (double)(x[i]->rows > 0 ? x[i]->rows : 1);
        rows += w[i]->ne1;
    }
    sl_isa isa = pool_isa(s->pool);
    /* below ~16 KiB of weights a dispatch costs more than it saves */
    if (s->n_threads <= 1 || n > MM_MAX || work < 16384.0) {
        for (int i = 0; i < n; i++) matmul_rows(w[i], x[i], y[i], y_stride[i], 0, w[i]->ne1, isa);
        return 0;
    }
    mm_multi_job j = {.n = n, .isa = isa};
    int64_t want = (int64_t)s->n_threads * (x[0]->rows > 1 ? 4 : 2);
    int64_t per = (rows + want - 1) / want;
    per = (per + 15) & ~(int64_t)15;
    for (int i = 0; i < n; i++) {
        j.w[i] = w[i], j.x[i] = x[i], j.y[i] = y[i], j.y_stride[i] = y_stride[i];
        j.chunk[i] = per;
        j.first[i + 1] = j.first[i] + (int)((w[i]->ne1 + per - 1) / per);
    }
    run_tasks(s, j.first[n], mm_multi_task, &j);
    return 0;
}

/* linear with Y's rows STRIDE floats apart */
static int linear_strided(sl_session *s, sl_act *a, const sl_mat *w, const float *b, const float *x, int T, float *y,
                          size_t stride, sl_err *err)
{
    if (act_prepare(a, w->type, x, w->ne0, T, (size_t)w->ne0, s->pool, err)) return -1;
    const sl_act *xa = a;
    if (matmul_multi(s, 1, &w, &xa, &y, &stride, err)) return -1;
    if (b) add_bias(y, b, T, w->ne1);
    return 0;
}

int linear(sl_session *s, sl_act *a, const sl_mat *w, const float *b, const float *x, int T, float *y, sl_err *err)
{
    return linear_strided(s, a, w, b, x, T, y, (size_t)w->ne1, err);
}

int linear_many(sl_session *s, int n, const sl_mat *const *w, const float *x, int T, float *const *y, sl_err *err)
{
    for (int i0 = 0; i0 < n;) {
        /* the next products whose inputs fit in the three activations */
        sl_act *acts[3] = {&s->act[ACT_A], &s->act[ACT_B], &s->act[ACT_C]};
        uint32_t vt[3];
        int na = 0, m = 0;
        const sl_mat *ws[MM_MAX];
        const sl_act *xs[MM_MAX];
        float *ys[MM_MAX];
        size_t st[MM_MAX];
        for (; i0 + m < n && m < MM_MAX; m++) {
            const sl_mat *wi = w[i0 + m];
            uint32_t t = kernels_vec_dot_type(wi->type);
            int a = 0;
            while (a < na && vt[a] != t) a++;
            if (a == na) {
                if (na == 3) break;
                if (act_prepare(acts[na], wi->type, x, wi->ne0, T, (size_t)wi->ne0, s->pool, err)) return -1;
                vt[na++] = t;
            }
            ws[m] = wi, xs[m] = acts[a], ys[m] = y[i0 + m], st[m] = (size_t)wi->ne1;
        }
        if (matmul_multi(s, m, ws, xs, ys, st, err)) return -1;
        i0 += m;
    }
    return 0;
}

/* ------------------------------------------------------------ memory */

static uint64_t max3(uint64_t a, uint64_t b, uint64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* KV rows layer C keeps in a session of n_ctx tokens: every position, or
 * for a sliding window a ring big enough that a pass of n_batch tokens and
 * a rewind of n_rollback positions never overwrite a key still in view. */
static int32_t kv_rows(const layer_cache *c, int32_t n_ctx, int32_t n_batch, int32_t n_rollback)
{
    if (c->kind != LAYER_ATTN) return 0;
    if (c->window <= 0) return n_ctx;
    int64_t extra = n_batch > n_rollback ? n_batch : n_rollback;
    int64_t rows = ((int64_t)c->window + extra + 15) & ~(int64_t)15; /* keeps p % rows in p's 16-lane */
    return rows < n_ctx ? (int32_t)rows : n_ctx;
}

static int32_t batch_or_default(const session_opts *o)
{
    return o && o->n_batch > 0 ? o->n_batch : SESSION_DEFAULT_BATCH;
}

uint64_t session_kv_bytes(const sl_model *m, int32_t n_ctx, const session_opts *opts)
{
    const hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train;
    uint64_t elt = opts && opts->kv_mode == SL_KV_F32 ? 4 : 2, bytes = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        layer_cache c;
        arch_layer_cache(m, il, &c);
        int32_t rows = kv_rows(&c, n_ctx, batch_or_default(opts), opts ? opts->n_rollback : 0);
        bytes += (uint64_t)rows * (uint64_t)(c.k_row + c.v_row) * elt;
    }
    return bytes;
}

/* Width of the dense FFN if any layer has one: MoE files carry n_ff even
 * when every layer routes (qwen3moe writes n_ff_exp * n_used there). */
static uint64_t dense_ff(const hparams *hp)
{
    return hp->n_expert == 0 || hp->n_layer_dense_lead > 0 ? (uint64_t)hp->n_ff : 0;
}

/* The widest activation row any product of this model takes. */
static uint64_t widest_row(const hparams *hp)
{
    uint64_t w = max3((uint64_t)hp->n_embd, dense_ff(hp), (uint64_t)hp->n_ff_exp * (hp->n_expert_shared + 1));
    w = max3(w, (uint64_t)hp->n_head * hp->n_embd_head_v, (uint64_t)hp->n_head * hp->n_embd_head_v_mla);
    w = max3(w, (uint64_t)hp->n_head * hp->n_embd_head_k, (uint64_t)hp->n_head * hp->n_embd_head_k_mla);
    return max3(w, (uint64_t)hp->n_lora_q, (uint64_t)hp->n_lora_kv + hp->n_rot);
}

/* Mirrors every scr_get and act_prepare size in the blocks (attn.c, mla.c,
 * ffn.c, block.c, deepseek2.c) at their largest, T = n_batch tokens. */
uint64_t session_scratch_bytes(const sl_model *m, int32_t n_ctx, int32_t n_batch, int n_threads)
{
    const hparams *hp = &m->hp;
    uint64_t T = (uint64_t)(n_batch > 0 ? n_batch : SESSION_DEFAULT_BATCH), D = (uint64_t)hp->n_embd;
    uint64_t H = (uint64_t)hp->n_head, Hkv = (uint64_t)hp->n_head_kv, dk = (uint64_t)hp->n_embd_head_k;
    uint64_t dv = (uint64_t)hp->n_embd_head_v, K = (uint64_t)hp->n_expert_used, E = (uint64_t)hp->n_expert;
    uint64_t kvl = (uint64_t)hp->n_lora_kv, rot = (uint64_t)hp->n_rot, lq = (uint64_t)hp->n_lora_q;
    uint64_t F = max3(dense_ff(hp), (uint64_t)hp->n_ff_exp, (uint64_t)hp->n_ff_exp * hp->n_expert_shared);
    uint64_t qk = H * (dk > (uint64_t)hp->n_embd_head_k_mla ? dk : (uint64_t)hp->n_embd_head_k_mla);
    /* ffn.c's grouped experts take up to max(T, K) rows at a time */
    uint64_t TK = E && K > T ? K : T, R = TK * hp->n_ff_exp;
    uint64_t f = 0;
    f += 3 * T * D + T * (rot ? rot : 1);                                  /* X, XN, OUT, ROPE */
    f += T * qk + T * max3(Hkv * dk, kvl + rot, 0);                        /* Q, K */
    f += T * max3(Hkv * dv, H * (kvl + rot), 0) + T * H * max3(dv, kvl, 0); /* V, ATT */
    f += max3(T * max3(H * dk + Hkv * (dk + dv), F, H * (uint64_t)hp->n_embd_head_v_mla), R, 0); /* T1 */
    f += max3(dk + kvl, T * F, R) + max3(T * max3(F, lq, 0), R, 0) + T * max3(K * D, D, lq); /* T2, T3, T4 */
    uint64_t rw = E ? (uint64_t)moe_route_work_bytes(hp) / sizeof(float) + 1 : 0; /* moe_route's work */
    uint64_t thr = (uint64_t)(n_threads > 0 ? n_threads : 1);
    f += T * E + 3 * T * K + 3 * E + 32 + thr * (rw + 16);                 /* router, a work per thread */
    f += max3(2 * TK * D, T * H * max3(kvl, qk / (H ? H : 1), 0), 0) + TK * D; /* R_GATHER, R_ROWS */
    if (E) f += T * D + T * E + K + rw + 3 * T * K;                        /* the predictor's (pilot.c) */
    uint64_t bytes = f * sizeof(float) + (uint64_t)SCR_COUNT * 64;
    bytes += 3 * (T * widest_row(hp) * sizeof(float) + T * 64);           /* converted activations */
    bytes += (TK - T) * (widest_row(hp) * sizeof(float) + 64);             /* ACT_C of a K-row group */
    bytes += E * (sizeof(expert_view) + 1 + 3 * (sizeof(sl_mat) + sizeof(sl_matmul_job) + sizeof(sl_act))); /* R_VIEWS, R_JOBS */
    if (E) bytes += T * D * sizeof(float) + T * 64 + pilot_bytes(m);       /* ACT_P, the predictor's tables */
    size_t tmp = attn_tmp_floats(m, n_ctx > 0 ? n_ctx : hp->n_ctx_train);
    bytes += (uint64_t)(n_threads > 0 ? n_threads : 1) * (tmp * sizeof(float) + 64);
    if (m->ops->scratch_bytes) bytes += m->ops->scratch_bytes(m, n_ctx > 0 ? n_ctx : hp->n_ctx_train, (int32_t)T);
    return bytes;
}

uint64_t session_scratch_allocated(const sl_session *s)
{
    uint64_t b = 0;
    for (int i = 0; i < SCR_COUNT; i++) b += s->scr_cap[i];
    for (int i = 0; i < ACT_COUNT; i++) b += s->act[i].cap;
    return b + (uint64_t)s->n_threads * ((s->thr_tmp_n * sizeof(float) + 63) & ~(size_t)63);
}

/* ------------------------------------------------------ recurrent state */

/* Floats of state each layer keeps (0: not recurrent). */
static int64_t *layer_state_floats(const sl_model *m)
{
    int64_t *v = calloc((size_t)m->hp.n_layer, sizeof *v);
    for (int il = 0; v && il < m->hp.n_layer; il++) {
        layer_cache c;
        arch_layer_cache(m, il, &c);
        v[il] = c.kind == LAYER_RECURRENT ? (int64_t)(c.state_bytes / sizeof(float)) : 0;
    }
    return v;
}

uint64_t session_state_bytes(const sl_model *m)
{
    uint64_t b = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        layer_cache c;
        arch_layer_cache(m, il, &c);
        b += c.state_bytes;
    }
    return b;
}

static int32_t n_ckpt(const session_opts *o) { return o && o->n_checkpoints > 0 ? o->n_checkpoints : 1; }

uint64_t session_state_total_bytes(const sl_model *m, const session_opts *o)
{
    return session_state_bytes(m) * (uint64_t)rstate_n_states(o ? o->n_rollback : 0, n_ckpt(o));
}

static int create_rstate(sl_session *s, const session_opts *o, sl_err *err)
{
    if (session_state_bytes(s->m) == 0) return 0;
    int64_t *floats = layer_state_floats(s->m);
    if (!floats) return sl_errf(err, "out of memory");
    int rc = rstate_create(&s->rs, s->m->hp.n_layer, floats, o ? o->n_rollback : 0, n_ckpt(o), err);
    free(floats);
    return rc;
}

/* ------------------------------------------------------------ create */

static int alloc_kv(sl_session *s, const session_opts *opts, sl_err *err)
{
    const sl_model *m = s->m;
    s->kv = calloc((size_t)m->hp.n_layer, sizeof *s->kv);
    if (!s->kv) return sl_errf(err, "out of memory for the KV cache");
    for (int il = 0; il < m->hp.n_layer; il++) {
        kv_layer *L = &s->kv[il];
        arch_layer_cache(m, il, &L->c);
        L->rows = kv_rows(&L->c, s->n_ctx, s->n_batch, opts ? opts->n_rollback : 0);
        /* calloc: zeroed pages are mapped lazily, so a large n_ctx costs
         * memory only as positions fill */
        if (L->rows) {
            L->k = calloc((size_t)L->rows, (size_t)L->c.k_row * s->kv_elt);
            L->v = L->c.v_row ? calloc((size_t)L->rows, (size_t)L->c.v_row * s->kv_elt) : NULL;
            if (!L->k || (L->c.v_row && !L->v))
                return sl_errf(err, "out of memory for a KV cache of %d tokens", s->n_ctx);
        }
    }
    return 0;
}

int session_create_opts(sl_session **out, sl_model *m, int32_t n_ctx, sl_pool *pool, const session_opts *opts,
                        sl_err *err)
{
    *out = NULL;
    if (n_ctx <= 0) n_ctx = m->hp.n_ctx_train;
    sl_kv_mode mode = opts ? opts->kv_mode : SL_KV_F16_FLASH;
    sl_prefetch_mode pf = opts ? opts->prefetch : SL_PREFETCH_AUTO;
    if (mode != SL_KV_F16_FLASH && mode != SL_KV_F32 && mode != SL_KV_F16)
        return sl_errf(err, "unknown KV cache mode %d", (int)mode);
    if (pf != SL_PREFETCH_AUTO && pf != SL_PREFETCH_OFF && pf != SL_PREFETCH_NEXT)
        return sl_errf(err, "unknown prefetch mode %d", (int)pf);
    sl_session *s = calloc(1, sizeof *s);
    if (!s) return sl_errf(err, "out of memory");
    s->m = m;
    s->pool = pool;
    s->n_threads = pool_threads(pool);
    s->kv_mode = mode;
    s->aop = attn_simd_for(pool_isa(pool));
    s->n_ctx = n_ctx;
    s->kv_elt = mode == SL_KV_F32 ? 4 : 2;
    s->n_batch = opts && opts->n_batch > 0 ? opts->n_batch : SESSION_DEFAULT_BATCH;
    if (alloc_kv(s, opts, err) || pilot_create(&s->pilot, m, pf, err) || create_rstate(s, opts, err)) goto fail;
    s->thr_tmp_n = attn_tmp_floats(m, n_ctx);
    s->thr_tmp = aligned_alloc(64, ((s->thr_tmp_n * sizeof(float) + 63) & ~(size_t)63) * (size_t)s->n_threads);
    if (!s->thr_tmp) {
        sl_errf(err, "out of memory for attention scratch (n_ctx %d)", n_ctx);
        goto fail;
    }
    s->thr_tmp_n = ((s->thr_tmp_n * sizeof(float) + 63) & ~(size_t)63) / sizeof(float);
    *out = s;
    return 0;
fail:
    session_free(s);
    return -1;
}

int session_create(sl_session **out, sl_model *m, int32_t n_ctx, sl_pool *pool, sl_err *err)
{
    return session_create_opts(out, m, n_ctx, pool, NULL, err);
}

void session_free(sl_session *s)
{
    if (!s) return;
    if (s->kv)
        for (int il = 0; il < s->m->hp.n_layer; il++) {
            free(s->kv[il].k);
            free(s->kv[il].v);
        }
    free(s->kv);
    for (int i = 0; i < SCR_COUNT; i++) free(s->scr[i]);
    for (int i = 0; i < ACT_COUNT; i++) act_free(&s->act[i]);
    free(s->thr_tmp);
    pilot_free(s->pilot);
    rstate_free(s->rs);
    free(s);
}

int32_t session_pos(const sl_session *s) { return s->pos; }
int32_t session_n_ctx(const sl_session *s) { return s->n_ctx; }
int32_t session_n_batch(const sl_session *s) { return s->n_batch; }

void session_prefetch_stats(sl_session *s, sl_prefetch_stats *out) { pilot_stats(s->pilot, out); }

/* Attention rolls back by forgetting KV entries, as long as a windowed
 * layer's ring still holds the keys position POS will look at; recurrent
 * layers need a kept snapshot of their state (rstate.h).  Position 0, an
 * empty sequence, needs neither: it is always restorable. */
bool session_can_rewind(const sl_session *s, int32_t pos)
{
    if (pos < 0 || pos > s->pos) return false;
    if (pos == s->pos || pos == 0) return true;
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        const kv_layer *L = &s->kv[il];
        if (L->c.kind != LAYER_ATTN) continue;
        int32_t first = L->c.window > 0 ? pos - L->c.window + 1 : 0;
        if (first < s->pos - L->rows) return false; /* overwritten in the ring */
    }
    return !s->rs || rstate_can_rewind(s->rs, pos);
}

int session_rewind(sl_session *s, int32_t pos, sl_err *err)
{
    if (!session_can_rewind(s, pos))
        return sl_errf(err, "cannot rewind to position %d: the session holds %d tokens and keeps no state for it%s",
                       (int)pos, (int)s->pos, s->rs ? " (raise n_rollback or checkpoint the position)" : "");
    if (s->rs) rstate_rewind(s->rs, pos);
    s->pos = pos;
    return 0;
}

int session_checkpoint(sl_session *s, sl_err *err)
{
    (void)err;
    if (s->rs) rstate_checkpoint(s->rs);
    return 0;
}

int session_state_write(const sl_session *s, FILE *f, sl_err *err)
{
    return rstate_write(s->rs, s->pos, f, err);
}

int session_state_read(sl_session *s, FILE *f, sl_err *err)
{
    int32_t pos;
    if (rstate_read(s->rs, f, &pos, err)) return -1;
    if (pos > s->n_ctx) {
        if (s->rs) rstate_rewind(s->rs, 0);
        s->pos = 0;
        return sl_errf(err, "saved state is at position %d, beyond this session's context of %d", (int)pos,
                       (int)s->n_ctx);
    }
    s->pos = pos;
    return 0;
}

/* -------------------------------------------------------------- eval */

static int embed(sl_session *s, const int32_t *tokens, int T, float *x)
{
    const sl_model *m = s->m;
    for (int t = 0; t < T; t++) mat_get_row(&m->tok_embd, tokens[t], x + (size_t)t * m->hp.n_embd);
    return 0;
}

/* Final norm and output projection of rows [r0, r0 + n) of the stream. */
static int output(sl_session *s, const float *x, int r0, int n, float *logits, sl_err *err)
{
    const sl_model *m = s->m;
    int64_t d = m->hp.n_embd;
    float *xn = scr_get(s, SCR_XN, (size_t)n * d * sizeof(float), err);
    if (!xn) return -1;
    for (int i = 0; i < n; i++) op_rms_norm(xn + i * d, x + (r0 + i) * d, m->output_norm, d, m->hp.rms_eps);
    sl_mat w = m->output;
    w.ne1 = m->head_rows; /* model_set_head_rows */
    size_t V = (size_t)m->hp.n_vocab;
    if (linear_strided(s, &s->act[ACT_A], &w, NULL, xn, n, logits, V, err)) return -1;
    for (int i = 0; i < n; i++)
        for (size_t v = (size_t)w.ne1; v < V; v++) logits[(size_t)i * V + v] = -INFINITY;
    return 0;
}

/* DECODE: the evaluation is a single token (prediction statistics count only those). */
static int eval_ubatch(sl_session *s, const int32_t *tokens, int T, float *logits, int out_from, bool decode,
                       sl_err *err)
{
    const sl_model *m = s->m;
    const hparams *hp = &m->hp;
    float *x = scr_get(s, SCR_X, (size_t)T * hp->n_embd * sizeof(float), err);
    float *rope = scr_get(s, SCR_ROPE, (size_t)T * (hp->n_rot ? hp->n_rot : 1) * sizeof(float), err);
    if (!x || !rope) return -1;
    embed(s, tokens, T, x);
    for (int t = 0; t < T; t++) rope_cache(&hp->rope, s->pos + t, rope + (size_t)t * hp->n_rot);
    batch b = {.T = T, .pos0 = s->pos, .rope = rope};
    pilot_ubatch(s->pilot, tokens, T, decode);
    if (m->obs.tokens) m->obs.tokens(m->obs.ctx, tokens, T);
    for (int il = 0; il < hp->n_layer; il++)
        if (m->ops->layer(s, il, &b, err)) return -1;
    if (out_from < T && output(s, x, out_from, T - out_from, logits, err)) return -1;
    s->pos += T;
    return 0;
}

int session_eval(sl_session *s, const int32_t *tokens, int32_t n, float *logits, bool all, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    if (n <= 0) return sl_errf(err, "session_eval: no tokens");
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return sl_errf(err, "token id %d at index %d is out of range [0, %d)", tokens[i], i, hp->n_vocab);
    if (n > s->n_ctx - s->pos)
        return sl_errf(err, "context overflow: %d tokens in the cache + %d new exceed n_ctx %d", s->pos, n,
                       s->n_ctx);
    s->held = 0; /* the stream is about to be overwritten */
    /* one recurrent-state evaluation over every micro-batch: a failure in
     * any of them returns the session to where it started */
    int32_t pos0 = s->pos;
    if (s->rs) rstate_begin(s->rs, n);
    int rc = 0;
    for (int32_t off = 0; rc == 0 && off < n; off += s->n_batch) {
        int T = n - off < s->n_batch ? n - off : s->n_batch;
        bool last = off + T == n;
        int out_from = !logits ? T : all ? 0 : (last ? T - 1 : T);
        float *dst = !logits ? NULL : all ? logits + (size_t)off * hp->n_vocab : logits;
        rc = eval_ubatch(s, tokens + off, T, dst, out_from, n == 1, err);
    }
    if (s->rs) rstate_end(s->rs, rc == 0);
    if (rc) s->pos = pos0;
    return rc;
}

int session_eval_held(sl_session *s, const int32_t *tokens, int32_t n, sl_err *err)
{
    if (n > s->n_batch)
        return sl_errf(err, "session_eval_held: %d tokens exceed one pass of %d", (int)n, (int)s->n_batch);
    if (session_eval(s, tokens, n, NULL, false, err)) return -1;
    s->held = n;
    return 0;
}

int session_logits(sl_session *s, int32_t i0, int32_t n, float *logits, sl_err *err)
{
    if (i0 < 0 || n <= 0 || i0 > s->held - n)
        return sl_errf(err, "session_logits: rows [%d, %d) of a pass holding %d", (int)i0, (int)(i0 + n), (int)s->held);
    return output(s, s->scr[SCR_X], i0, n, logits, err);
}
