/* Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) in llama.cpp's
 * absorbed form: the cache holds the compressed latent c (kv_lora_rank) and
 * the shared rotary key k_pe per token; each head's query is moved into the
 * latent space with k_b, attends over [c | k_pe] as one KV head, and the
 * result is expanded with v_b before the output projection. */
#include "arch/mla.h"

#include <string.h>

#include "arch/attn.h"

/* Per-head products y_h = W_h x_h for H heads, where W is a 3-D tensor of H
 * matrices {ne0, ne1} and x_h / y_h are strided views of the rows. */
typedef struct {
    const sl_mat *w;
    const sl_act *acts; /* H views */
    float *y;
    size_t y_stride, y_head;
    sl_isa isa;
} head_job;

static void head_task(void *ctx, int h, int thread)
{
    (void)thread;
    const head_job *j = ctx;
    sl_mat wh = *j->w;
    wh.data = (const char *)j->w->data + (size_t)h * j->w->ne1 * j->w->row_bytes;
    matmul_rows(&wh, &j->acts[h], j->y + (size_t)h * j->y_head, j->y_stride, 0, wh.ne1, j->isa);
}

/* x: T*H rows of n_in floats (row t*H + h at x + (t*H + h) * x_stride). */
static int head_matmul(sl_session *s, const sl_mat *w, int H, int T, const float *x, size_t x_stride, float *y,
                       size_t y_stride, size_t y_head, sl_err *err)
{
    sl_act *a = &s->act[ACT_C];
    if (act_prepare(a, w->type, x, w->ne0, (int64_t)T * H, x_stride, s->pool, err)) return -1;
    size_t rb = a->row_bytes;
    char *g = scr_get(s, SCR_R_GATHER, (size_t)T * H * rb, err);
    sl_act *views = scr_get(s, SCR_R_ROWS, sizeof(sl_act) * (size_t)H, err);
    if (!g || !views) return -1;
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++)
            memcpy(g + ((size_t)h * T + t) * rb, (const char *)a->data + ((size_t)t * H + h) * rb, rb);
        views[h] = (sl_act){.vtype = a->vtype, .n = a->n, .rows = T, .row_bytes = rb,
                            .data = g + (size_t)h * T * rb, .cap = 0};
    }
    if (matmul_check(w, &views[0], err)) return -1;
    head_job j = {.w = w, .acts = views, .y = y, .y_stride = y_stride, .y_head = y_head, .isa = pool_isa(s->pool)};
    run_tasks(s, H, head_task, &j);
    return 0;
}

/* The two products of the normalised input: the query (q_a, or wq in
 * "lite" files) into QA and the compressed KV [c | k_pe] into KVC, in one
 * dispatch and with one conversion of xn when their types agree. */
static int mla_inputs(sl_session *s, const layer_w *L, const float *xn, int T, float *qa, float *kvc, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const sl_mat *w[2] = {L->wq_a.data ? &L->wq_a : &L->wq, &L->wkv_a};
    sl_act *a = &s->act[ACT_A];
    if (act_prepare(a, w[0]->type, xn, hp->n_embd, T, (size_t)hp->n_embd, s->pool, err)) return -1;
    const sl_act *x[2] = {a, a};
    if (kernels_vec_dot_type(w[1]->type) != a->vtype) {
        if (act_prepare(&s->act[ACT_B], w[1]->type, xn, hp->n_embd, T, (size_t)hp->n_embd, s->pool, err)) return -1;
        x[1] = &s->act[ACT_B];
    }
    float *y[2] = {qa, kvc};
    size_t stride[2] = {(size_t)w[0]->ne1, (size_t)w[1]->ne1};
    if (matmul_multi(s, 2, w, x, y, stride, err)) return -1;
    return 0;
}

/* q (T x H x dkm): with q_lora, RMS-normalise q_a's output and apply q_b. */
static int mla_query(sl_session *s, const layer_w *L, float *qa, int T, float *q, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    if (!L->wq_a.data) return 0; /* wq wrote q directly */
    float *qn = scr_get(s, SCR_T4, (size_t)T * hp->n_lora_q * sizeof(float), err);
    if (!qn) return -1;
    for (int t = 0; t < T; t++)
        op_rms_norm(qn + (size_t)t * hp->n_lora_q, qa + (size_t)t * hp->n_lora_q, L->q_a_norm, hp->n_lora_q,
                    hp->rms_eps);
    return linear(s, &s->act[ACT_B], &L->wq_b, NULL, qn, T, q, err);
}

int mla_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err)
{
    const sl_model *m = s->m;
    const hparams *hp = &m->hp;
    const layer_w *L = &m->layers[il];
    int T = b->T, H = hp->n_head, kvl = hp->n_lora_kv, rope = hp->n_rot;
    int dkm = hp->n_embd_head_k_mla, nope = dkm - rope, vdim = hp->n_embd_head_v_mla, dk = kvl + rope;
    float *q = scr_get(s, SCR_Q, (size_t)T * H * dkm * sizeof(float), err);
    float *kvc = scr_get(s, SCR_K, (size_t)T * dk * sizeof(float), err);
    float *qf = scr_get(s, SCR_V, (size_t)T * H * dk * sizeof(float), err);
    float *att = scr_get(s, SCR_ATT, (size_t)T * H * kvl * sizeof(float), err);
    float *att2 = scr_get(s, SCR_T1, (size_t)T * H * vdim * sizeof(float), err);
    float *c = scr_get(s, SCR_T2, (size_t)kvl * sizeof(float), err);
    if (!q || !kvc || !qf || !att || !att2 || !c) return -1;
    float *qa = L->wq_a.data ? scr_get(s, SCR_T3, (size_t)T * hp->n_lora_q * sizeof(float), err) : q;
    if (!qa || mla_inputs(s, L, xn, T, qa, kvc, err) || mla_query(s, L, qa, T, q, err)) return -1;

    const kv_layer *kv = &s->kv[il];
    for (int t = 0; t < T; t++) {
        const float *rc = b->rope + (size_t)t * hp->n_rot;
        for (int h = 0; h < H; h++) {
            float *qh = q + ((size_t)t * H + h) * dkm;
            s->aop->rope(&hp->rope, rc, qh + nope);
            memcpy(qf + ((size_t)t * H + h) * dk + kvl, qh + nope, sizeof(float) * (size_t)rope);
        }
        float *row = kvc + (size_t)t * dk;
        s->aop->rope(&hp->rope, rc, row + kvl);
        op_rms_norm(c, row, L->kv_a_norm, kvl, hp->rms_eps);
        memcpy(row, c, sizeof(float) * (size_t)kvl);
        kv_store(s, (char *)kv->k + (size_t)(b->pos0 + t) * kv->c.k_row * s->kv_elt, row, dk);
    }
    /* absorbed query: q_nope of head h through k_b[h] into the latent space */
    if (head_matmul(s, &L->wk_b, H, T, q, (size_t)dkm, qf, (size_t)H * dk, (size_t)dk, err)) return -1;

    /* one KV head whose values are the first kvl elements of each key row */
    attn_pass p = {.k = kv->k, .v = kv->k, .k_stride = (size_t)kv->c.k_row, .v_stride = (size_t)kv->c.k_row,
                   .group = H, .q = qf, .att = att, .T = T, .H = H, .dk = dk, .dv = kvl, .pos0 = b->pos0,
                   .scale = hp->kq_scale};
    attn_run(s, &p);

    /* back from the latent space: v_b[h] per head, then the output projection */
    if (head_matmul(s, &L->wv_b, H, T, att, (size_t)kvl, att2, (size_t)H * vdim, (size_t)vdim, err)) return -1;
    return linear(s, &s->act[ACT_A], &L->wo, NULL, att2, T, out, err);
}
