/* Gated attention (Qwen3.5's full-attention layers), as llama.cpp's qwen35
 * graphs compute it: one projection gives each head's query and, after it,
 * an output gate ([q_h | gate_h] per head); q and k are RMS-normalised per
 * head before the rotation (IMRoPE, rope.c), GQA over the KV cache, then the
 * attention output times sigmoid(gate) and the output projection. */
#include "arch/gattn.h"

#include <math.h>
#include <string.h>

#include "arch/attn.h"

uint64_t gattn_scratch_bytes(const hparams *hp, int32_t n_batch)
{
    return (uint64_t)n_batch * 4 * (uint64_t)hp->n_head * (uint64_t)hp->n_embd_head_k * sizeof(float);
}

/* Per-head RMSNorm, then the rotation of the first n_rot values, in place. */
static void norm_rope(const sl_session *s, float *x, int T, int nh, const float *norm, const batch *b)
{
    const hparams *hp = &s->m->hp;
    int D = hp->n_embd_head_k;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            float *xh = x + ((size_t)t * nh + h) * D;
            op_rms_norm(xh, xh, norm, D, hp->rms_eps);
            s->aop->rope(&hp->rope, b->rope + (size_t)t * hp->n_rot, xh);
        }
}

int gattn_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const layer_w *L = &s->m->layers[il];
    int T = b->T, H = hp->n_head, Hkv = hp->n_head_kv, D = hp->n_embd_head_k;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * Hkv * D;
    float *qf = scr_get(s, SCR_LIN, sizeof(float) * 4 * nq, err);
    float *k = scr_get(s, SCR_K, sizeof(float) * nk, err), *v = scr_get(s, SCR_V, sizeof(float) * nk, err);
    float *att = scr_get(s, SCR_ATT, sizeof(float) * nq, err);
    if (!qf || !k || !v || !att) return -1;
    float *q = qf + 2 * nq, *gate = qf + 3 * nq;
    const sl_mat *w[3] = {&L->wq, &L->wk, &L->wv};
    float *y[3] = {qf, k, v};
    if (linear_many(s, 3, w, xn, T, y, err)) return -1;
    /* [q_h | gate_h] per head into q and sigmoid(gate) */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *r = qf + ((size_t)t * H + h) * 2 * D;
            memcpy(q + ((size_t)t * H + h) * D, r, sizeof(float) * (size_t)D);
        }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *r = qf + ((size_t)t * H + h) * 2 * D + D;
            float *g = gate + ((size_t)t * H + h) * D;
            for (int i = 0; i < D; i++) g[i] = 1.0f / (1.0f + expf(-r[i]));
        }
    norm_rope(s, q, T, H, L->q_norm, b);
    norm_rope(s, k, T, Hkv, L->k_norm, b);
    attn_heads(s, il, b, q, k, v, att);
    for (size_t i = 0; i < nq; i++) att[i] = att[i] * gate[i];
    return linear(s, &s->act[ACT_A], &L->wo, NULL, att, T, out, err);
}
