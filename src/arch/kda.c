/* Kimi Delta Attention (Kimi-Linear's recurrent layers), as llama.cpp's
 * kimi-linear graph computes it: q, k, v projections each through its own
 * causal short convolution and SiLU, q and k L2-normalised per head, a
 * per-channel decay g = A[h] * softplus(f_b(f_a(x)) + dt_bias), beta =
 * sigmoid(W_beta x) per head, the gated delta rule over the layer's state,
 * then RMSNorm per head times sigmoid(g_b(g_a(x))) and the output
 * projection.  No positional encoding. */
#include <string.h>

#include "arch/delta.h"
#include "arch/sess.h"

/* The layer's state: the q, k and v convolution windows, then H matrices. */
uint64_t kda_state_bytes(const hparams *hp)
{
    uint64_t C = (uint64_t)hp->n_head * hp->ssm_d_state, d = (uint64_t)hp->ssm_d_state;
    return (3 * (uint64_t)(hp->ssm_d_conv - 1) * C + (uint64_t)hp->n_head * d * d) * sizeof(float);
}

typedef struct {
    sl_session *s;
    int il, T, H, d;
    int32_t pos0;
    int64_t mat_off;
    const float *q, *k, *v, *g, *beta; /* T x C (beta: T x H) */
    float *o, *tmp;                    /* T x C; H x d */
} kda_job;

/* One head through every token of the batch, in order. */
static void kda_task(void *ctx, int h, int thread)
{
    (void)thread;
    const kda_job *j = ctx;
    int64_t C = (int64_t)j->H * j->d, dd = (int64_t)j->d * j->d;
    for (int t = 0; t < j->T; t++) {
        const float *in = rstate_at(j->s->rs, j->il, j->pos0 + t) + j->mat_off + h * dd;
        float *out = rstate_at(j->s->rs, j->il, j->pos0 + t + 1) + j->mat_off + h * dd;
        int64_t r = t * C + (int64_t)h * j->d;
        dn_delta_step(j->s->aop, in, out, j->d, j->q + r, j->k + r, j->v + r, j->g + r, true,
                      j->beta[t * j->H + h], j->o + r, j->tmp + (int64_t)h * j->d);
    }
}

uint64_t kda_scratch_bytes(const hparams *hp, int64_t T)
{
    uint64_t C = (uint64_t)hp->n_head * hp->ssm_d_state, d = (uint64_t)hp->ssm_d_state;
    return (5 * (uint64_t)T * C + (uint64_t)T * (hp->n_head + 2 * d) + C) * sizeof(float);
}

int kda_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const layer_w *L = &s->m->layers[il];
    int T = b->T, H = hp->n_head, d = hp->ssm_d_state, K = hp->ssm_d_conv;
    int64_t C = (int64_t)H * d, W = (int64_t)(K - 1) * C;
    size_t n = (size_t)T * C;
    float *f = scr_get(s, SCR_LIN, kda_scratch_bytes(hp, T), err);
    if (!f) return -1;
    /* 5 T x C buffers: the projections (convolved in place), the decay,
     * whose buffer takes the output gate after the recurrence, the output */
    float *qkv = f, *g = qkv + 3 * n, *o = g + n;
    float *beta = o + n, *fa = beta + (size_t)T * H, *ga = fa + (size_t)T * d, *tmp = ga + (size_t)T * d;
    float *q = qkv, *k = qkv + n, *v = qkv + 2 * n;

    const sl_mat *w1[6] = {&L->wq, &L->wk, &L->wv, &L->ssm_beta, &L->ssm_f_a, &L->ssm_g_a};
    float *y1[6] = {q, k, v, beta, fa, ga};
    if (linear_many(s, 6, w1, xn, T, y1, err) || linear(s, &s->act[ACT_A], &L->ssm_f_b, NULL, fa, T, g, err))
        return -1;

    /* the convolutions, token by token through the windows in the state */
    for (int t = 0; t < T; t++) {
        const float *win = rstate_at(s->rs, il, b->pos0 + t);
        float *wout = rstate_at(s->rs, il, b->pos0 + t + 1);
        for (int c = 0; c < 3; c++) {
            float *y = qkv + c * n + (size_t)t * C;
            dn_conv_step(s->aop, L->ssm_conv[c], K, C, win + c * W, wout + c * W, y, y);
            dn_silu(y, C);
        }
        for (int h = 0; h < H; h++) {
            dn_l2_norm(q + (size_t)t * C + (size_t)h * d, d, hp->rms_eps);
            dn_l2_norm(k + (size_t)t * C + (size_t)h * d, d, hp->rms_eps);
        }
    }
    for (size_t i = 0; i < n; i++) g[i] = dn_softplus(g[i] + L->ssm_dt_b[i % (size_t)C]) * L->ssm_a[(i % (size_t)C) / (size_t)d];
    for (size_t i = 0; i < (size_t)T * H; i++) beta[i] = dn_sigmoid(beta[i]);

    kda_job j = {.s = s, .il = il, .T = T, .H = H, .d = d, .pos0 = b->pos0, .mat_off = 3 * W,
                 .q = q, .k = k, .v = v, .g = g, .beta = beta, .o = o, .tmp = tmp};
    run_tasks(s, H, kda_task, &j);

    /* output: RMSNorm per head, times sigmoid of the output gate g_b(g_a(x)) */
    float *g2 = g;
    if (linear(s, &s->act[ACT_B], &L->ssm_g_b, NULL, ga, T, g2, err)) return -1;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            float *oh = o + (size_t)t * C + (size_t)h * d;
            op_rms_norm(oh, oh, L->ssm_norm, d, hp->rms_eps);
        }
    for (size_t i = 0; i < n; i++) o[i] = o[i] * dn_sigmoid(g2[i]);
    return linear(s, &s->act[ACT_A], &L->wo, NULL, o, T, out, err);
}
