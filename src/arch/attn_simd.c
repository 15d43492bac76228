/* Scalar definition of the attention inner loops (see attn_simd.h). */
#include "arch/attn_simd.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

const attn_simd *attn_simd_avx512(void);
const attn_simd *attn_simd_avx2(void);

/* _mm512_reduce_add_ps as GCC expands it: halves, quarters, then pairs. */
float attn_tree16(const float *l)
{
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = l[i + 8] + l[i];
    for (int i = 0; i < 4; i++) b[i] = a[i + 4] + a[i];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* GGML_F32x16_REDUCE over the 4 accumulators, then the tree. */
static float fold64(float acc[4][16])
{
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; l++) acc[0][l] += acc[1][l];
    return attn_tree16(acc[0]);
}

float attn_dot_f32_tail(const float *x, const float *y, int np, int n, float sum)
{
    int c = n - np, plain = (c & ~7) + ((c & 7) >= 4 ? 4 : 0), i = np;
    for (; i < np + plain; i++) sum = sum + x[i] * y[i];
    for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
    return sum;
}

static float dot_f32(const float *x, const float *y, int n)
{
    int np = n & ~63;
    float acc[4][16] = {{0}};
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    return attn_dot_f32_tail(x, y, np, n, np ? fold64(acc) : 0.0f);
}

static float dot_f16(const uint16_t *x, const uint16_t *y, int n)
{
    int np = n & ~63;
    float acc[4][16] = {{0}};
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                int k = i + 16 * j + l;
                acc[j][l] = fmaf(fp16_to_fp32(x[k]), fp16_to_fp32(y[k]), acc[j][l]);
            }
    double sum = np ? fold64(acc) : 0.0;
    for (int i = np; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    return (float)sum;
}

static void mad_f16(uint16_t *acc, const uint16_t *v, float s, int n)
{
    for (int i = 0; i < n; i++) acc[i] = fp32_to_fp16(fmaf(fp16_to_fp32(v[i]), s, fp16_to_fp32(acc[i])));
}

static void scale_f16(uint16_t *acc, float s, int n)
{
    for (int i = 0; i < n; i++) acc[i] = fp32_to_fp16(fp16_to_fp32(acc[i]) * s);
}

static void axpy_f32(float *lane, const float *v, float w, int n)
{
    for (int i = 0; i < n; i++) lane[i] = fmaf(v[i], w, lane[i]);
}

static void axpy_f16(float *lane, const uint16_t *v, float w, int n)
{
    for (int i = 0; i < n; i++) lane[i] = fmaf(fp16_to_fp32(v[i]), w, lane[i]);
}

static void tree_rows(float *out, const float *lanes, int n)
{
    float l[16];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 16; k++) l[k] = lanes[(size_t)k * n + i];
        out[i] = attn_tree16(l);
    }
}

/* ggml_compute_forward_flash_attn_ext_f16_one_chunk for one query row:
 * online softmax with libm expf, the f16 value accumulator rescaled on
 * every new maximum, the sum updated with a fused multiply-add (as GCC
 * contracts it in ggml-cpu). */
void attn_flash_generic(const attn_simd *ops, const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride,
                        const uint16_t *q16, int dk, int dv, int n, float scale, float *out, uint16_t *acc,
                        float *work)
{
    (void)work;
    memset(acc, 0, sizeof(uint16_t) * (size_t)dv);
    float S = 0.0f, M = -INFINITY;
    for (int p = 0; p < n; p++) {
        float s = ops->dot_f16(k + (size_t)p * k_stride, q16, dk) * scale;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            float mold = M;
            M = s;
            ms = expf(mold - M);
            ops->scale_f16(acc, ms, dv);
        } else {
            vs = expf(s - M);
        }
        ops->mad_f16(acc, v + (size_t)p * v_stride, vs, dv);
        S = fmaf(S, ms, vs);
    }
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < dv; d++) out[d] = fp16_to_fp32(acc[d]) * inv;
}

static const attn_simd scalar;

static void flash(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const uint16_t *q16, int dk,
                  int dv, int n, float scale, float *out, uint16_t *acc, float *work)
{
    attn_flash_generic(&scalar, k, k_stride, v, v_stride, q16, dk, dv, n, scale, out, acc, work);
}

static const attn_simd scalar = {
    .dot_f16 = dot_f16, .dot_f32 = dot_f32, .mad_f16 = mad_f16, .scale_f16 = scale_f16,
    .axpy_f32 = axpy_f32, .axpy_f16 = axpy_f16, .tree_rows = tree_rows, .flash = flash,
};

const attn_simd *attn_simd_for(sl_isa isa)
{
    sl_isa cpu = kernels_isa_detected();
    if (isa >= SL_ISA_AVX512 && cpu >= SL_ISA_AVX512) return attn_simd_avx512();
    if (isa >= SL_ISA_AVX2 && cpu >= SL_ISA_AVX2) return attn_simd_avx2();
    return &scalar;
}
