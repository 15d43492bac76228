/* The gated delta net (Qwen3.5's linear-attention layers), as llama.cpp's
 * qwen35 graphs compute it: one projection to [q | k | v] through a causal
 * short convolution over all its channels and SiLU, q and k L2-normalised
 * per head, a scalar decay per value head g = A[j] * softplus(W_alpha x +
 * dt_bias) and beta = sigmoid(W_beta x), the gated delta rule (value head j
 * reads query/key head j mod n_k: tiled, not grouped), then RMSNorm per
 * head times SiLU(z) with z = W_gate x, and the output projection. */
#include <string.h>

#include "arch/delta.h"
#include "arch/sess.h"

/* The layer's state: the convolution window over all channels, then a matrix per value head. */
uint64_t gdn_state_bytes(const hparams *hp)
{
    uint64_t d = (uint64_t)hp->ssm_d_state, nk = (uint64_t)hp->ssm_n_group, nv = (uint64_t)hp->ssm_dt_rank;
    return ((uint64_t)(hp->ssm_d_conv - 1) * (2 * nk + nv) * d + nv * d * d) * sizeof(float);
}

typedef struct {
    sl_session *s;
    int il, T, nk, nv, d;
    int32_t pos0;
    int64_t mat_off, row;    /* the matrices' offset in the layer state; floats per token of qkv */
    const float *qkv, *g, *beta; /* T x row; T x nv; T x nv */
    float *o, *tmp;          /* T x nv*d; nv x d */
} gdn_job;

static void gdn_task(void *ctx, int h, int thread)
{
    (void)thread;
    const gdn_job *j = ctx;
    int64_t dd = (int64_t)j->d * j->d, hk = h % j->nk, vd = (int64_t)j->nv * j->d;
    for (int t = 0; t < j->T; t++) {
        const float *in = rstate_at(j->s->rs, j->il, j->pos0 + t) + j->mat_off + h * dd;
        float *out = rstate_at(j->s->rs, j->il, j->pos0 + t + 1) + j->mat_off + h * dd;
        const float *r = j->qkv + t * j->row;
        const float *q = r + hk * j->d, *k = r + (int64_t)j->nk * j->d + hk * j->d;
        const float *v = r + 2 * (int64_t)j->nk * j->d + (int64_t)h * j->d;
        dn_delta_step(j->s->aop, in, out, j->d, q, k, v, j->g + (int64_t)t * j->nv + h, false,
                      j->beta[(int64_t)t * j->nv + h], j->o + t * vd + (int64_t)h * j->d,
                      j->tmp + (int64_t)h * j->d);
    }
}

uint64_t gdn_scratch_bytes(const hparams *hp, int64_t T)
{
    uint64_t d = (uint64_t)hp->ssm_d_state, nv = (uint64_t)hp->ssm_dt_rank;
    uint64_t row = (2 * (uint64_t)hp->ssm_n_group + nv) * d, vd = nv * d;
    return ((uint64_t)T * (row + 2 * vd + 2 * nv) + vd) * sizeof(float);
}

int gdn_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const layer_w *L = &s->m->layers[il];
    int T = b->T, d = hp->ssm_d_state, nk = hp->ssm_n_group, nv = hp->ssm_dt_rank, K = hp->ssm_d_conv;
    int64_t row = (2 * (int64_t)nk + nv) * d, vd = (int64_t)nv * d;
    size_t tr = (size_t)T * row, tv = (size_t)T * vd, th = (size_t)T * nv;
    float *f = scr_get(s, SCR_LIN, gdn_scratch_bytes(hp, T), err);
    if (!f) return -1;
    float *qkv = f, *z = qkv + tr, *o = z + tv, *beta = o + tv, *g = beta + th, *tmp = g + th;

    const sl_mat *w[4] = {&L->wqkv, &L->ssm_gate, &L->ssm_beta, &L->ssm_alpha};
    float *y[4] = {qkv, z, beta, g};
    if (linear_many(s, 4, w, xn, T, y, err)) return -1;

    for (int t = 0; t < T; t++) {
        float *r = qkv + (size_t)t * row;
        dn_conv_step(s->aop, L->ssm_conv[0], K, row, rstate_at(s->rs, il, b->pos0 + t),
                     rstate_at(s->rs, il, b->pos0 + t + 1), r, r); /* in place */
        dn_silu(r, row);
        for (int h = 0; h < 2 * nk; h++) dn_l2_norm(r + (size_t)h * d, d, hp->rms_eps);
    }
    for (size_t i = 0; i < th; i++) {
        beta[i] = dn_sigmoid(beta[i]);
        g[i] = dn_softplus(g[i] + L->ssm_dt_b[i % (size_t)nv]) * L->ssm_a[i % (size_t)nv];
    }

    gdn_job j = {.s = s, .il = il, .T = T, .nk = nk, .nv = nv, .d = d, .pos0 = b->pos0,
                 .mat_off = (int64_t)(K - 1) * row, .row = row, .qkv = qkv, .g = g, .beta = beta, .o = o, .tmp = tmp};
    run_tasks(s, nv, gdn_task, &j);

    /* RMSNorm per head times SiLU(z) (ggml_silu over each token's row of z) */
    for (int t = 0; t < T; t++) {
        float *zt = z + (size_t)t * vd, *ot = o + (size_t)t * vd;
        dn_silu(zt, vd);
        for (int h = 0; h < nv; h++) op_rms_norm(ot + (size_t)h * d, ot + (size_t)h * d, L->ssm_norm, d, hp->rms_eps);
        for (int64_t i = 0; i < vd; i++) ot[i] = ot[i] * zt[i];
    }
    return linear(s, &s->act[ACT_A], &L->wo, NULL, o, T, out, err);
}
