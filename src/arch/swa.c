/* Sliding-window attention with sinks over a ring KV cache (see swa.h). */
#include "arch/swa.h"

#include <math.h>
#include <string.h>

#include "arch/attn.h"

typedef struct {
    sl_session *s;
    const kv_layer *kv;
    const float *q; /* T x (H * dk) */
    const float *sinks;
    float *att;     /* T x (H * dv) */
    int H, Hkv, dk, dv;
    int32_t pos0;
    float scale;
} swa_job;

/* One head's view of the cache: key / value of position p. */
typedef struct {
    const char *k, *v;
    size_t k_row, v_row; /* bytes per cache row */
    int32_t rows;
} ring;

static const void *ring_k(const ring *r, int32_t p) { return r->k + (size_t)(p % r->rows) * r->k_row; }
static const void *ring_v(const ring *r, int32_t p) { return r->v + (size_t)(p % r->rows) * r->v_row; }

/* Softmax attention (SL_KV_F32 / SL_KV_F16) over positions lo..i: scores at
 * lanes p - base (base = lo rounded down to 16, the cells before lo masked
 * to -inf as llama.cpp's mask does), ggml's soft_max with the sink, values
 * summed with position p in lane p % 16. */
static void softmax_window(const swa_job *j, const ring *r, const float *q, const float *sink, int32_t lo, int32_t i,
                           float *out, float *tmp)
{
    const sl_session *s = j->s;
    int32_t base = lo & ~15;
    int n = (int)(i - base + 1), n16 = (n + 15) & ~15, dk = j->dk, dv = j->dv;
    float *sc = tmp, *lanes = tmp + n16;
    uint16_t *q16 = (uint16_t *)(lanes + 16 * (size_t)dv);
    for (int p = 0; p < n16; p++) sc[p] = -INFINITY;
    if (s->kv_mode == SL_KV_F32) {
        for (int32_t p = lo; p <= i; p++) sc[p - base] = s->aop->dot_f32(ring_k(r, p), q, dk) * j->scale;
    } else {
        s->aop->to_f16(q16, q, dk);
        for (int32_t p = lo; p <= i; p++) sc[p - base] = s->aop->dot_f16(ring_k(r, p), q16, dk) * j->scale;
    }
    op_softmax_sink(sc, n16, sink);
    memset(lanes, 0, sizeof(float) * 16 * (size_t)dv);
    for (int32_t p = lo; p <= i; p++) {
        float *acc = lanes + (size_t)(p & 15) * dv;
        float w = sc[p - base];
        if (s->kv_mode == SL_KV_F32) {
            s->aop->axpy_f32(acc, ring_v(r, p), w, dv);
        } else {
            s->aop->axpy_f16(acc, ring_v(r, p), fp16_to_fp32(fp32_to_fp16(w)), dv);
        }
    }
    s->aop->tree_rows(out, lanes, dv);
}

/* ggml's one-row flash attention (attn_flash_generic's loop) over
 * positions lo..i, then the sink as ggml applies it: on the f32 copy of the
 * accumulator, a new maximum rescales it, and S = S * ms + vs. */
static void flash_window(const swa_job *j, const ring *r, const float *q, const float *sink, int32_t lo, int32_t i,
                         float *out, float *tmp)
{
    const attn_simd *op = j->s->aop;
    int dk = j->dk, dv = j->dv;
    uint16_t *q16 = (uint16_t *)tmp, *acc = q16 + ((dk + 31) & ~31);
    op->to_f16(q16, q, dk);
    memset(acc, 0, sizeof(uint16_t) * (size_t)dv);
    float S = 0.0f, M = -INFINITY;
    for (int32_t p = lo; p <= i; p++) attn_flash_step(op, ring_k(r, p), ring_v(r, p), q16, dk, dv, j->scale, acc, &S, &M);
    for (int d = 0; d < dv; d++) out[d] = fp16_to_fp32(acc[d]);
    if (sink) {
        float ms = 1.0f, vs = 1.0f;
        if (*sink > M) {
            ms = expf(M - *sink);
            for (int d = 0; d < dv; d++) out[d] *= ms;
        } else {
            vs = expf(*sink - M);
        }
        S = S * ms + vs;
    }
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < dv; d++) out[d] *= inv;
}

static void swa_task(void *ctx, int task, int thread)
{
    const swa_job *j = ctx;
    int t = task / j->H, h = task % j->H;
    int kvh = h / (j->H / j->Hkv);
    const sl_session *s = j->s;
    const kv_layer *kv = j->kv;
    size_t elt = s->kv_elt;
    ring r = {
        .k = (const char *)kv->k + (size_t)kvh * j->dk * elt, .v = (const char *)kv->v + (size_t)kvh * j->dv * elt,
        .k_row = (size_t)kv->c.k_row * elt, .v_row = (size_t)kv->c.v_row * elt, .rows = kv->rows,
    };
    int32_t i = j->pos0 + t, w = kv->c.window;
    int32_t lo = w > 0 && i - w + 1 > 0 ? i - w + 1 : 0;
    const float *q = j->q + ((size_t)t * j->H + h) * j->dk;
    const float *sink = j->sinks ? j->sinks + h : NULL;
    float *out = j->att + ((size_t)t * j->H + h) * j->dv;
    float *tmp = s->thr_tmp + (size_t)thread * s->thr_tmp_n;
    if (s->kv_mode == SL_KV_F16_FLASH) flash_window(j, &r, q, sink, lo, i, out, tmp);
    else softmax_window(j, &r, q, sink, lo, i, out, tmp);
}

void swa_heads(sl_session *s, int il, const batch *b, const float *q, const float *k, const float *v,
               const float *sinks, float *att)
{
    const hparams *hp = &s->m->hp;
    int T = b->T, H = hp->n_head, Hkv = hp->n_head_kv, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    const kv_layer *kv = &s->kv[il];
    for (int t = 0; t < T; t++) {
        size_t row = (size_t)((b->pos0 + t) % kv->rows);
        kv_store(s, (char *)kv->k + row * kv->c.k_row * s->kv_elt, k + (size_t)t * Hkv * dk, Hkv * dk);
        kv_store(s, (char *)kv->v + row * kv->c.v_row * s->kv_elt, v + (size_t)t * Hkv * dv, Hkv * dv);
    }
    swa_job j = {.s = s, .kv = kv, .q = q, .sinks = sinks, .att = att, .H = H, .Hkv = Hkv, .dk = dk, .dv = dv,
                 .pos0 = b->pos0, .scale = hp->kq_scale};
    run_tasks(s, T * H, swa_task, &j);
}
