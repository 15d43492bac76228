/* Linear-attention pieces (see delta.h), in ggml-cpu's arithmetic. */
#include "arch/delta.h"

#include <math.h>

#include "kernels/kernels.h"

void dn_conv_step(const attn_simd *op, const float *w, int K, int64_t C, const float *win_in, float *win_out,
                  const float *x, float *out)
{
    op->conv_step(w, K, C, win_in, win_out, x, out);
}

void dn_silu(float *x, int64_t n)
{
    op_silu_vec(x, x, n);
}

void dn_l2_norm(float *x, int n, float eps)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

float dn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

float dn_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

void dn_delta_step(const attn_simd *op, const float *s_in, float *s_out, int d, const float *q, const float *k,
                   const float *v, const float *g, bool per_channel, float beta, float *o, float *tmp)
{
    size_t dd = (size_t)d * (size_t)d;
    if (per_channel) { /* row j, element i (key dimension i) scaled by exp(g[i]) */
        for (int i = 0; i < d; i++) tmp[i] = expf(g[i]);
        for (int j = 0; j < d; j++) {
            const float *a = s_in + (size_t)j * d;
            float *b = s_out + (size_t)j * d;
            for (int i = 0; i < d; i++) b[i] = a[i] * tmp[i];
        }
    } else {
        float e = expf(g[0]);
        for (size_t i = 0; i < dd; i++) s_out[i] = s_in[i] * e;
    }
    for (int j = 0; j < d; j++) tmp[j] = (v[j] - op->dot_f32(s_out + (size_t)j * d, k, d)) * beta;
    for (int j = 0; j < d; j++) op->axpy_f32(s_out + (size_t)j * d, k, tmp[j], d);
    float scale = 1.0f / sqrtf((float)d);
    for (int j = 0; j < d; j++) o[j] = op->dot_f32(s_out + (size_t)j * d, q, d) * scale;
}

uint64_t dn_scratch_bytes(const sl_model *m, int32_t n_ctx, int32_t n_batch)
{
    (void)n_ctx;
    uint64_t best = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const layer_w *L = &m->layers[il];
        if (!L->recurrent) continue;
        uint64_t b = L->ssm_f_a.ne0 ? kda_scratch_bytes(&m->hp, n_batch) : gdn_scratch_bytes(&m->hp, n_batch);
        if (b > best) best = b;
    }
    return best + 64;
}
