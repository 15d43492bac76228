/* Attention kernel (ggml's CPU arithmetic, see attn.h) and the standard
 * GQA attention block. */
#include "arch/attn.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------ the kernel */

/* Softmax of n scores as ggml_soft_max_ext does it over a KV length padded
 * to 16 (the padding holds -inf, i.e. masked cells, and contributes 0). */
static void softmax_padded(float *s, int n)
{
    int n16 = (n + 15) & ~15;
    for (int p = n; p < n16; p++) s[p] = -INFINITY;
    op_softmax(s, n16);
}

/* sum_p w[p] * v_p with position p in lane p % 16, then the lane tree: the
 * order of llamafile's sgemm for kqv.  With an f16 cache the weights are
 * rounded to f16 first, as ggml converts src1 to V's type. */
static void weighted_sum(const attn_src *a, const float *w, int n, float *out, float *lanes)
{
    int dv = a->dv;
    memset(lanes, 0, sizeof(float) * 16 * (size_t)dv);
    for (int p = 0; p < n; p++) {
        float *acc = lanes + (size_t)(p & 15) * dv;
        if (a->mode == SL_KV_F32) {
            a->op->axpy_f32(acc, (const float *)a->v + (size_t)p * a->v_stride, w[p], dv);
        } else {
            float wp = fp16_to_fp32(fp32_to_fp16(w[p]));
            a->op->axpy_f16(acc, (const uint16_t *)a->v + (size_t)p * a->v_stride, wp, dv);
        }
    }
    a->op->tree_rows(out, lanes, dv);
}

static void attn_softmax(const attn_src *a, const float *q, int n, float *out, float *tmp)
{
    int n16 = (n + 15) & ~15;
    float *s = tmp, *lanes = tmp + n16;
    if (a->mode == SL_KV_F32) {
        const float *k = a->k;
        for (int p = 0; p < n; p++) s[p] = a->op->dot_f32(k + (size_t)p * a->k_stride, q, a->dk) * a->scale;
    } else {
        uint16_t *q16 = (uint16_t *)(lanes + 16 * (size_t)a->dv);
        a->op->to_f16(q16, q, a->dk);
        const uint16_t *k = a->k;
        for (int p = 0; p < n; p++) s[p] = a->op->dot_f16(k + (size_t)p * a->k_stride, q16, a->dk) * a->scale;
    }
    softmax_padded(s, n);
    weighted_sum(a, s, n, out, lanes);
}

/* ggml's one-chunk flash attention (attn_simd.c) for NP consecutive query
 * positions (the first sees N keys; a position holds H query heads, dk
 * floats each in Q and dv in OUT) x HG query heads of one KV head; more
 * than one row through flash_rows. */
static void attn_flash(const attn_src *a, const float *q, int np, int hg, int H, int n, float *out, float *tmp)
{
    size_t tstride = (size_t)H * (size_t)a->dk;
    int nh = np * hg;
    size_t dk16 = ((size_t)a->dk + 31) & ~(size_t)31;
    uint16_t *q16 = (uint16_t *)tmp, *acc = q16 + (size_t)nh * dk16;
    float *work = tmp + ((size_t)nh * dk16 + (((size_t)a->dv + 31) & ~(size_t)31)) / 2;
    for (int i = 0; i < nh; i++)
        a->op->to_f16(q16 + i * dk16, q + (size_t)(i / hg) * tstride + (size_t)(i % hg) * a->dk, a->dk);
    if (nh > 1)
        a->op->flash_rows(a->k, a->k_stride, a->v, a->v_stride, q16, dk16, nh, hg, a->dk, a->dv, n, a->scale, out,
                          (size_t)a->dv, (size_t)H * (size_t)a->dv, acc, work);
    else
        a->op->flash(a->k, a->k_stride, a->v, a->v_stride, q16, a->dk, a->dv, n, a->scale, out, acc, work);
}

void attn_one(const attn_src *a, const float *q, int n, float *out, float *tmp)
{
    if (a->mode == SL_KV_F16_FLASH) attn_flash(a, q, 1, 1, 1, n, out, tmp);
    else attn_softmax(a, q, n, out, tmp);
}

size_t attn_tmp_floats(const sl_model *m, int32_t n_ctx)
{
    size_t dk = 0, dv = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        layer_cache c;
        arch_layer_cache(m, il, &c);
        if (c.kind != LAYER_ATTN) continue;
        if ((size_t)c.head_k > dk) dk = (size_t)c.head_k;
        if ((size_t)c.head_v > dv) dv = (size_t)c.head_v;
    }
    size_t n16 = ((size_t)n_ctx + 15) & ~(size_t)15;
    /* softmax: scores, 16 lanes of values, q in f16; flash: the rows' q
     * and an accumulator in f16, then per row scores and the two expf
     * factors */
    size_t soft = n16 + 16 * dv + dk, flash = (ATTN_FLASH_ROWS * (dk + 31) + dv + 64) / 2 + 3 * n16 * ATTN_FLASH_ROWS;
    size_t tiled = attn_tiled_floats((int)dk, (int)dv), most = soft > flash ? soft : flash;
    return (most > tiled ? most : tiled) + 64;
}

void kv_store(const sl_session *s, void *dst, const float *src, int n)
{
    if (s->kv_mode == SL_KV_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    s->aop->to_f16(dst, src, n);
}

/* ------------------------------------------------------- a whole pass */

typedef struct {
    sl_session *s;
    const attn_pass *p;
    int n_tiles; /* tiled: query tiles per head */
    int rows;    /* one-row kernel: query heads per task, all of one KV head */
    int pos;     /* and query positions per task */
} pass_job;

static void one_task(void *ctx, int task, int thread)
{
    const pass_job *j = ctx;
    const attn_pass *p = j->p;
    const sl_session *s = j->s;
    int per_t = p->H / j->rows, t = task / per_t * j->pos, h = task % per_t * j->rows, g = h / p->group;
    int np = p->T - t < j->pos ? p->T - t : j->pos;
    size_t elt = s->kv_elt;
    attn_src a = {
        .mode = s->kv_mode, .op = s->aop, .dk = p->dk, .dv = p->dv,
        .k = (const char *)p->k + (size_t)g * p->k_head * elt, .k_stride = p->k_stride,
        .v = (const char *)p->v + (size_t)g * p->v_head * elt, .v_stride = p->v_stride,
        .scale = p->scale,
    };
    const float *q = p->q + ((size_t)t * p->H + h) * p->dk;
    float *out = p->att + ((size_t)t * p->H + h) * p->dv, *tmp = s->thr_tmp + (size_t)thread * s->thr_tmp_n;
    if (j->rows * np > 1) attn_flash(&a, q, np, j->rows, p->H, p->pos0 + t + 1, out, tmp);
    else attn_one(&a, q, p->pos0 + t + 1, out, tmp);
}

/* What a one-row task takes, while every thread still gets a task.
 * Query heads: flash_rows keeps several heads' accumulators in flight
 * (their f16 roundings are latency-bound chains), the most that divides
 * the group, each group's heads reading one KV head.  Query positions
 * besides: where a KV head has fewer query heads than flash_rows holds
 * (tinymoe: 2 of 4), the next positions of a verification fill the rest,
 * sharing the keys' and values' loads (a position sees one key more than
 * the one before it). */
static void task_shape(const sl_session *s, const attn_pass *p, pass_job *j)
{
    j->rows = j->pos = 1;
    if (s->kv_mode != SL_KV_F16_FLASH || !s->aop->flash_rows) return;
    int r = p->group < ATTN_FLASH_ROWS ? p->group : ATTN_FLASH_ROWS;
    while (r > 1 && (p->group % r || p->T * (p->H / r) < s->n_threads)) r--;
    int n = ATTN_FLASH_ROWS / r;
    while (n > 1 && (n > p->T || (p->T + n - 1) / n * (p->H / r) < s->n_threads)) n--;
    j->rows = r, j->pos = n;
}

/* One head's tile of up to ATTN_TILE consecutive queries. */
static void tiled_task(void *ctx, int task, int thread)
{
    const pass_job *j = ctx;
    const attn_pass *p = j->p;
    const sl_session *s = j->s;
    int h = task / j->n_tiles, t0 = (task % j->n_tiles) * ATTN_TILE, g = h / p->group;
    int rows = p->T - t0 < ATTN_TILE ? p->T - t0 : ATTN_TILE;
    const uint16_t *k = (const uint16_t *)p->k + (size_t)g * p->k_head;
    const uint16_t *v = (const uint16_t *)p->v + (size_t)g * p->v_head;
    s->aop->tiled(k, p->k_stride, v, p->v_stride, p->q + ((size_t)t0 * p->H + h) * p->dk, (size_t)p->H * p->dk, rows,
                  p->pos0 + t0 + 1, p->dk, p->dv, p->scale, p->att + ((size_t)t0 * p->H + h) * p->dv,
                  (size_t)p->H * p->dv, s->thr_tmp + (size_t)thread * s->thr_tmp_n);
}

void attn_run(sl_session *s, const attn_pass *p)
{
    pass_job j = {.s = s, .p = p, .n_tiles = (p->T + ATTN_TILE - 1) / ATTN_TILE, .rows = 1};
    /* llama.cpp (ggml_compute_forward_flash_attn_ext_f16): tiled for >= Q
     * tile rows when dv is a multiple of the f32 vector width (16) */
    if (s->kv_mode == SL_KV_F16_FLASH && p->T >= ATTN_TILE && p->dv % 16 == 0)
        run_tasks(s, p->H * j.n_tiles, tiled_task, &j);
    else {
        task_shape(s, p, &j);
        run_tasks(s, (p->T + j.pos - 1) / j.pos * (p->H / j.rows), one_task, &j);
    }
}

/* ------------------------------------------------------- GQA block */

/* Q, K, V projections (fused or separate, with optional biases); the input
 * is converted once when the three weights share a vec_dot type. */
static int qkv_proj(sl_session *s, const layer_w *L, const float *xn, int T, float *q, float *k, float *v, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    int64_t nq = (int64_t)hp->n_head * hp->n_embd_head_k, nk = (int64_t)hp->n_head_kv * hp->n_embd_head_k;
    int64_t nv = (int64_t)hp->n_head_kv * hp->n_embd_head_v;
    sl_act *a = &s->act[ACT_A];
    if (L->wqkv.data) {
        float *qkv = scr_get(s, SCR_T1, (size_t)T * (nq + nk + nv) * sizeof(float), err);
        if (!qkv || linear(s, a, &L->wqkv, L->bqkv, xn, T, qkv, err)) return -1;
        for (int t = 0; t < T; t++) {
            const float *r = qkv + (size_t)t * (nq + nk + nv);
            memcpy(q + t * nq, r, sizeof(float) * nq);
            memcpy(k + t * nk, r + nq, sizeof(float) * nk);
            memcpy(v + t * nv, r + nq + nk, sizeof(float) * nv);
        }
        return 0;
    }
    if (act_prepare(a, L->wq.type, xn, hp->n_embd, T, (size_t)hp->n_embd, s->pool, err)) return -1;
    const sl_mat *w[3] = {&L->wq, &L->wk, &L->wv};
    const sl_act *x[3] = {a, a, a};
    float *y[3] = {q, k, v};
    size_t stride[3] = {(size_t)nq, (size_t)nk, (size_t)nv};
    for (int i = 1; i < 3; i++)
        if (kernels_vec_dot_type(w[i]->type) != a->vtype) {
            sl_act *b = &s->act[i == 1 ? ACT_B : ACT_C];
            if (act_prepare(b, w[i]->type, xn, hp->n_embd, T, (size_t)hp->n_embd, s->pool, err)) return -1;
            x[i] = b;
        }
    if (matmul_multi(s, 3, w, x, y, stride, err)) return -1;
    if (L->bq) add_bias(q, L->bq, T, nq);
    if (L->bk) add_bias(k, L->bk, T, nk);
    if (L->bv) add_bias(v, L->bv, T, nv);
    return 0;
}

/* Per-head RMS norm (qwen3's q_norm / k_norm) then RoPE, in place. */
typedef struct {
    const hparams *hp;
    const layer_w *L;
    const batch *b;
    const attn_simd *op;
    float *q, *k;
} heads_job;

/* The heads of positions [T0, T1) of X (NH per position): each normed (in
 * place: the sum of squares is taken before any element is written), then
 * rotated. */
static void norm_rope(const heads_job *j, float *x, int nh, const float *norm, int t0, int t1)
{
    const hparams *hp = j->hp;
    int dk = hp->n_embd_head_k;
    for (int t = t0; t < t1; t++)
        for (int h = 0; h < nh; h++) {
            float *xh = x + ((size_t)t * nh + h) * dk;
            if (norm) op_rms_norm(xh, xh, norm, dk, hp->rms_eps);
            j->op->rope(&hp->rope, j->b->rope + (size_t)t * hp->n_rot, xh);
        }
}

static void heads_rows(void *ctx, int t0, int t1, int thread)
{
    (void)thread;
    const heads_job *j = ctx;
    norm_rope(j, j->q, j->hp->n_head, j->L->q_norm, t0, t1);
    norm_rope(j, j->k, j->hp->n_head_kv, j->L->k_norm, t0, t1);
}

int attn_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err)
{
    const sl_model *m = s->m;
    const hparams *hp = &m->hp;
    const layer_w *L = &m->layers[il];
    int T = b->T, H = hp->n_head, Hkv = hp->n_head_kv, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    float *q = scr_get(s, SCR_Q, (size_t)T * H * dk * sizeof(float), err);
    float *k = scr_get(s, SCR_K, (size_t)T * Hkv * dk * sizeof(float), err);
    float *v = scr_get(s, SCR_V, (size_t)T * Hkv * dv * sizeof(float), err);
    float *att = scr_get(s, SCR_ATT, (size_t)T * H * dv * sizeof(float), err);
    if (!q || !k || !v || !att) return -1;
    if (qkv_proj(s, L, xn, T, q, k, v, err)) return -1;
    run_rows(s, T, heads_rows, &(heads_job){.hp = hp, .L = L, .b = b, .op = s->aop, .q = q, .k = k});
    attn_heads(s, il, b, q, k, v, att);
    return linear(s, &s->act[ACT_A], &L->wo, L->bo, att, T, out, err);
}

void attn_heads(sl_session *s, int il, const batch *b, const float *q, const float *k, const float *v, float *att)
{
    const hparams *hp = &s->m->hp;
    int T = b->T, H = hp->n_head, Hkv = hp->n_head_kv, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    const kv_layer *kv = &s->kv[il];
    for (int t = 0; t < T; t++) {
        size_t p = (size_t)(b->pos0 + t);
        kv_store(s, (char *)kv->k + p * kv->c.k_row * s->kv_elt, k + (size_t)t * Hkv * dk, Hkv * dk);
        kv_store(s, (char *)kv->v + p * kv->c.v_row * s->kv_elt, v + (size_t)t * Hkv * dv, Hkv * dv);
    }
    attn_pass p = {.k = kv->k, .v = kv->v, .k_stride = (size_t)kv->c.k_row, .v_stride = (size_t)kv->c.v_row,
                   .k_head = (size_t)dk, .v_head = (size_t)dv, .group = H / Hkv, .q = q, .att = att,
                   .T = T, .H = H, .dk = dk, .dv = dv, .pos0 = b->pos0, .scale = hp->kq_scale};
    attn_run(s, &p);
}
