/* Matrix products: the canonical per-element reduction order (the scalar
 * path below is its definition; the SIMD paths reproduce it bit for bit),
 * ISA dispatch, and the split of rows over the pool.
 *
 * Canonical order (docs/KERNELS.md):
 *  - quantised weights: per (super)block an exact integer sum S (and for
 *    types with mins an exact integer M), then per element, sequentially
 *    over blocks, acc = fmaf(dw*da, (float)S, acc) [and acc = fmaf(-(dmin*da),
 *    (float)M, acc), or acc = fmaf(m_w, s_a, acc) for Q4_1/Q5_1].
 *  - float weights (order SL_ORDER_SGEMM): F32/F16 16 lanes, element i into
 *    lane i%16 with fmaf, then the fixed tree l[i] += l[i+s] for s = 8, 4, 2,
 *    1; BF16 the same lanes fed by dpbf16 steps.  SL_ORDER_VEC_DOT follows
 *    ggml's vec_dot for F16/BF16 (dot_f16_vd, dot_bf16_vd). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kq_iq.h"

#define H2F fp16_to_fp32

/* ---- float weights ---- */

static float dot_f32(const void *w, const void *a, int64_t n)
{
    const float *x = w, *y = a;
    float l[16] = {0};
    for (int64_t i = 0; i < n; i++) l[i & 15] = fmaf(x[i], y[i], l[i & 15]);
    return kq_tree16(l);
}

/* ggml_vec_dot_f32 as GCC compiles it for AVX-512 (what llama.cpp's
 * mul_mat_id uses for F32 experts): 4 x 16 fused lanes over 64-blocks,
 * folded (0+2, 1+3, then 0+1) and reduced as _mm512_reduce_add_ps; the
 * tail's groups of 8 and 4 as rounded products added in order, the rest
 * fused. */
static float dot_f32_vd(const void *w, const void *a, int64_t n)
{
    const float *x = w, *y = a;
    int64_t np = n & ~(int64_t)63;
    float acc[4][16] = {{0}};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    float sum = 0.0f;
    if (np) {
        for (int l = 0; l < 16; l++) {
            acc[0][l] += acc[2][l];
            acc[1][l] += acc[3][l];
        }
        for (int l = 0; l < 16; l++) acc[0][l] += acc[1][l];
        float h[8], q[4];
        for (int l = 0; l < 8; l++) h[l] = acc[0][l + 8] + acc[0][l];
        for (int l = 0; l < 4; l++) q[l] = h[l + 4] + h[l];
        sum = (q[0] + q[2]) + (q[1] + q[3]);
    }
    int64_t c = n - np, plain = (c & ~7) + ((c & 7) >= 4 ? 4 : 0), i = np;
    for (; i < np + plain; i++) sum = sum + x[i] * y[i];
    for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
    return sum;
}

static float dot_f16(const void *w, const void *a, int64_t n)
{
    const uint16_t *x = w, *y = a;
    float l[16] = {0};
    for (int64_t i = 0; i < n; i++) l[i & 15] = fmaf(H2F(x[i]), H2F(y[i]), l[i & 15]);
    return kq_tree16(l);
}

/* ggml's F16 vec_dot (AVX-512F without FP16 arithmetic): 4 accumulators of
 * 16 lanes over 64-element steps, (s0+s2)+(s1+s3), tree, then the n mod 64
 * tail in double, rounded to float at the end. */
static float dot_f16_vd(const void *w, const void *a, int64_t n)
{
    const uint16_t *x = w, *y = a;
    float s[4][16] = {{0}}, l[16];
    int64_t np = n & ~(int64_t)63, i = 0;
    for (; i < np; i++) s[(i & 63) >> 4][i & 15] = fmaf(H2F(x[i]), H2F(y[i]), s[(i & 63) >> 4][i & 15]);
    for (int k = 0; k < 16; k++) l[k] = (s[0][k] + s[2][k]) + (s[1][k] + s[3][k]);
    double sum = (double)kq_tree16(l);
    for (; i < n; i++) sum += (double)(H2F(x[i]) * H2F(y[i]));
    return (float)sum;
}

/* VDPBF16PS semantics: bf16 inputs with a zero exponent count as zero, each
 * lane adds the odd product then the even one (products are exact in f32, so
 * each step is one fmaf), results with a zero exponent flush to zero. */
static float bf16_daz(uint16_t h)
{
    return (h & 0x7f80) ? bf16_to_fp32(h) : bf16_to_fp32((uint16_t)(h & 0x8000));
}

static float ftz(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if (!(u & 0x7f800000u)) u &= 0x80000000u;
    memcpy(&v, &u, 4);
    return v;
}

/* One 32-element dpbf16 step into 16 lanes; elements at or past n are 0. */
static void dpbf16_step(float *l, const uint16_t *x, const uint16_t *y, int64_t i0, int64_t n)
{
    for (int k = 0; k < 16; k++) {
        int64_t e = i0 + 2 * k;
        float xo = e + 1 < n ? bf16_daz(x[e + 1]) : 0.0f, yo = e + 1 < n ? bf16_daz(y[e + 1]) : 0.0f;
        float xe = e < n ? bf16_daz(x[e]) : 0.0f, ye = e < n ? bf16_daz(y[e]) : 0.0f;
        l[k] = ftz(fmaf(xo, yo, l[k]));
        l[k] = ftz(fmaf(xe, ye, l[k]));
    }
}

/* llamafile sgemm on AVX512_BF16 (tinyBLAS, KN = 32): dpbf16 steps, tree. */
static float dot_bf16(const void *w, const void *a, int64_t n)
{
    float l[16] = {0};
    for (int64_t i = 0; i < n; i += 32) dpbf16_step(l, w, a, i, n);
    return kq_tree16(l);
}

/* ggml's BF16 vec_dot on AVX512_BF16: two dpbf16 accumulators over
 * 64-element steps, each tree-summed into a double, tail in double. */
static float dot_bf16_vd(const void *w, const void *a, int64_t n)
{
    const uint16_t *x = w, *y = a;
    float c1[16] = {0}, c2[16] = {0};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        dpbf16_step(c1, x, y, i, n);
        dpbf16_step(c2, x, y, i + 32, n);
    }
    double sum = 0.0;
    sum += (double)kq_tree16(c1);
    sum += (double)kq_tree16(c2);
    for (; i < n; i++) sum += (double)(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return (float)sum;
}

/* ---- weights with Q8_0 activations ---- */

static int isum_nib(const uint8_t *qs, const int8_t *tab, const int8_t *a)
{
    int s = 0;
    for (int j = 0; j < 16; j++) s += tab[qs[j] & 0xf] * a[j] + tab[qs[j] >> 4] * a[j + 16];
    return s;
}

static const int8_t TAB_Q4_0[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

static float dot_q4_0(const void *w, const void *a, int64_t n)
{
    const blk_q4_0 *x = w;
    const blk_q8_0 *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++)
        acc = fmaf(H2F(x[i].d) * H2F(y[i].d), (float)isum_nib(x[i].qs, TAB_Q4_0, y[i].qs), acc);
    return acc;
}

static float dot_iq4_nl(const void *w, const void *a, int64_t n)
{
    const blk_iq4_nl *x = w;
    const blk_q8_0 *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++)
        acc = fmaf(H2F(x[i].d) * H2F(y[i].d), (float)isum_nib(x[i].qs, KV_IQ4NL, y[i].qs), acc);
    return acc;
}

static float dot_mxfp4(const void *w, const void *a, int64_t n)
{
    const blk_mxfp4 *x = w;
    const blk_q8_0 *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++)
        acc = fmaf(kq_e8m0_half(x[i].e) * H2F(y[i].d), (float)isum_nib(x[i].qs, KV_MXFP4, y[i].qs), acc);
    return acc;
}

static float dot_q8_0(const void *w, const void *a, int64_t n)
{
    const blk_q8_0 *x = w, *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int s = 0;
        for (int j = 0; j < QK; j++) s += x[i].qs[j] * y[i].qs[j];
        acc = fmaf(H2F(x[i].d) * H2F(y[i].d), (float)s, acc);
    }
    return acc;
}

static uint32_t qh32(const uint8_t *qh)
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* Sum of (5-bit quant + off) * a over one block. */
static int isum_q5(const uint8_t *qs, uint32_t qh, int off, const int8_t *a)
{
    int s = 0;
    for (int j = 0; j < 16; j++) {
        int x0 = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
        int x1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        s += (x0 + off) * a[j] + (x1 + off) * a[j + 16];
    }
    return s;
}

static float dot_q5_0(const void *w, const void *a, int64_t n)
{
    const blk_q5_0 *x = w;
    const blk_q8_0 *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++)
        acc = fmaf(H2F(x[i].d) * H2F(y[i].d), (float)isum_q5(x[i].qs, qh32(x[i].qh), -16, y[i].qs), acc);
    return acc;
}

/* ---- weights with Q8_1 activations ---- */

static float dot_q4_1(const void *w, const void *a, int64_t n)
{
    static const int8_t tab[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const blk_q4_1 *x = w;
    const blk_q8_1 *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        acc = fmaf(H2F(x[i].d) * H2F(y[i].d), (float)isum_nib(x[i].qs, tab, y[i].qs), acc);
        acc = fmaf(H2F(x[i].m), H2F(y[i].s), acc);
    }
    return acc;
}

static float dot_q5_1(const void *w, const void *a, int64_t n)
{
    const blk_q5_1 *x = w;
    const blk_q8_1 *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        acc = fmaf(H2F(x[i].d) * H2F(y[i].d), (float)isum_q5(x[i].qs, qh32(x[i].qh), 0, y[i].qs), acc);
        acc = fmaf(H2F(x[i].m), H2F(y[i].s), acc);
    }
    return acc;
}

/* ---- K-quants and IQ4_XS with Q8_K activations ---- */

static float dot_q2_K(const void *w, const void *a, int64_t n)
{
    const blk_q2_K *x = w;
    const blk_q8_K *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int S = 0, M = 0;
        for (int g = 0; g < 16; g++) { /* group g: elements 16g..16g+15 */
            const uint8_t *q = x[i].qs + 32 * (g / 8) + 16 * (g & 1);
            int shift = 2 * ((g / 2) & 3), s = 0;
            for (int l = 0; l < 16; l++) s += ((q[l] >> shift) & 3) * y[i].qs[16 * g + l];
            S += (x[i].scales[g] & 0xf) * s;
            M += (x[i].scales[g] >> 4) * y[i].bsums[g];
        }
        acc = fmaf(y[i].d * H2F(x[i].d), (float)S, acc);
        acc = fmaf(-(y[i].d * H2F(x[i].dmin)), (float)M, acc);
    }
    return acc;
}

static float dot_q3_K(const void *w, const void *a, int64_t n)
{
    const blk_q3_K *x = w;
    const blk_q8_K *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int S = 0;
        for (int g = 0; g < 16; g++) {
            int off = 16 * (g & 1), shift = 2 * ((g / 2) & 3), hbit = g / 2, s = 0;
            const uint8_t *q = x[i].qs + 32 * (g / 8) + off;
            for (int l = 0; l < 16; l++) {
                int v = ((q[l] >> shift) & 3) - ((x[i].hmask[off + l] >> hbit) & 1 ? 0 : 4);
                s += v * y[i].qs[16 * g + l];
            }
            S += kq_q3k_scale(x[i].scales, g) * s;
        }
        acc = fmaf(y[i].d * H2F(x[i].d), (float)S, acc);
    }
    return acc;
}

static float dot_q4_K(const void *w, const void *a, int64_t n)
{
    const blk_q4_K *x = w;
    const blk_q8_K *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int S = 0, M = 0;
        for (int j = 0; j < 8; j++) { /* sub-block j: elements 32j..32j+31 */
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            int shift = 4 * (j & 1), sc, m, s = 0;
            for (int l = 0; l < 32; l++) s += ((q[l] >> shift) & 0xf) * y[i].qs[32 * j + l];
            kq_scale_min_k4(j, x[i].scales, &sc, &m);
            S += sc * s;
            M += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        acc = fmaf(y[i].d * H2F(x[i].d), (float)S, acc);
        acc = fmaf(-(y[i].d * H2F(x[i].dmin)), (float)M, acc);
    }
    return acc;
}

static float dot_q5_K(const void *w, const void *a, int64_t n)
{
    const blk_q5_K *x = w;
    const blk_q8_K *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int S = 0, M = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            int shift = 4 * (j & 1), sc, m, s = 0;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0xf) | (((x[i].qh[l] >> j) & 1) << 4);
                s += v * y[i].qs[32 * j + l];
            }
            kq_scale_min_k4(j, x[i].scales, &sc, &m);
            S += sc * s;
            M += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        acc = fmaf(y[i].d * H2F(x[i].d), (float)S, acc);
        acc = fmaf(-(y[i].d * H2F(x[i].dmin)), (float)M, acc);
    }
    return acc;
}

static float dot_q6_K(const void *w, const void *a, int64_t n)
{
    const blk_q6_K *x = w;
    const blk_q8_K *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int S = 0;
        for (int g = 0; g < 16; g++) { /* elements 16g..: chunk c, quarter k, half h */
            int c = g / 8, k = (g / 2) & 3, h = g & 1, s = 0;
            const uint8_t *ql = x[i].ql + 64 * c + 32 * (k & 1) + 16 * h;
            const uint8_t *qh = x[i].qh + 32 * c + 16 * h;
            for (int l = 0; l < 16; l++) {
                int v = ((ql[l] >> (4 * (k / 2))) & 0xf) | (((qh[l] >> (2 * k)) & 3) << 4);
                s += (v - 32) * y[i].qs[16 * g + l];
            }
            S += x[i].scales[8 * c + 2 * k + h] * s;
        }
        acc = fmaf(y[i].d * H2F(x[i].d), (float)S, acc);
    }
    return acc;
}

static float dot_iq4_xs(const void *w, const void *a, int64_t n)
{
    const blk_iq4_xs *x = w;
    const blk_q8_K *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int S = 0;
        for (int ib = 0; ib < 8; ib++)
            S += kq_iq4xs_scale(&x[i], ib) * isum_nib(x[i].qs + 16 * ib, KV_IQ4NL, y[i].qs + 32 * ib);
        acc = fmaf(y[i].d * H2F(x[i].d), (float)S, acc);
    }
    return acc;
}

#define IQ_DOT(NAME, TYPE) \
    static float NAME(const void *w, const void *a, int64_t n) { return kq_dot_iq(TYPE, w, a, n); }
IQ_DOT(dot_iq1_s, GGML_TYPE_IQ1_S)
IQ_DOT(dot_iq1_m, GGML_TYPE_IQ1_M)
IQ_DOT(dot_iq2_xxs, GGML_TYPE_IQ2_XXS)
IQ_DOT(dot_iq2_xs, GGML_TYPE_IQ2_XS)
IQ_DOT(dot_iq2_s, GGML_TYPE_IQ2_S)
IQ_DOT(dot_iq3_xxs, GGML_TYPE_IQ3_XXS)
IQ_DOT(dot_iq3_s, GGML_TYPE_IQ3_S)
IQ_DOT(dot_tq1_0, GGML_TYPE_TQ1_0)
IQ_DOT(dot_tq2_0, GGML_TYPE_TQ2_0)

typedef float (*dot_fn)(const void *w, const void *a, int64_t n);

static dot_fn dot_for(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32: return dot_f32;
    case GGML_TYPE_F16: return dot_f16;
    case GGML_TYPE_BF16: return dot_bf16;
    case GGML_TYPE_Q4_0: return dot_q4_0;
    case GGML_TYPE_Q4_1: return dot_q4_1;
    case GGML_TYPE_Q5_0: return dot_q5_0;
    case GGML_TYPE_Q5_1: return dot_q5_1;
    case GGML_TYPE_Q8_0: return dot_q8_0;
    case GGML_TYPE_IQ4_NL: return dot_iq4_nl;
    case GGML_TYPE_MXFP4: return dot_mxfp4;
    case GGML_TYPE_Q2_K: return dot_q2_K;
    case GGML_TYPE_Q3_K: return dot_q3_K;
    case GGML_TYPE_Q4_K: return dot_q4_K;
    case GGML_TYPE_Q5_K: return dot_q5_K;
    case GGML_TYPE_Q6_K: return dot_q6_K;
    case GGML_TYPE_IQ4_XS: return dot_iq4_xs;
    case GGML_TYPE_IQ1_S: return dot_iq1_s;
    case GGML_TYPE_IQ1_M: return dot_iq1_m;
    case GGML_TYPE_IQ2_XXS: return dot_iq2_xxs;
    case GGML_TYPE_IQ2_XS: return dot_iq2_xs;
    case GGML_TYPE_IQ2_S: return dot_iq2_s;
    case GGML_TYPE_IQ3_XXS: return dot_iq3_xxs;
    case GGML_TYPE_IQ3_S: return dot_iq3_s;
    case GGML_TYPE_TQ1_0: return dot_tq1_0;
    case GGML_TYPE_TQ2_0: return dot_tq2_0;
    default: return NULL;
    }
}

void kq_rows_scalar(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    dot_fn dot = dot_for(w->type);
    if (w->order == SL_ORDER_VEC_DOT && w->type == GGML_TYPE_F16) dot = dot_f16_vd;
    if (w->order == SL_ORDER_VEC_DOT && w->type == GGML_TYPE_BF16) dot = dot_bf16_vd;
    if (w->order == SL_ORDER_VEC_DOT && w->type == GGML_TYPE_F32) dot = dot_f32_vd;
    for (int64_t t = 0; t < x->rows; t++) {
        const char *a = (const char *)x->data + (size_t)t * x->row_bytes;
        for (int64_t r = r0; r < r1; r++)
            y[(size_t)t * y_stride + (size_t)r] = dot((const char *)w->data + (size_t)r * w->row_bytes, a, w->ne0);
    }
}

static bool shapes_ok(const sl_mat *w, const sl_act *x)
{
    return dot_for(w->type) && x->vtype == kernels_vec_dot_type(w->type) && x->n == w->ne0;
}

int matmul_check(const sl_mat *w, const sl_act *x, sl_err *err)
{
    if (!dot_for(w->type))
        return sl_errf(err, "matmul: no dot product for weights of type %s", ggml_type_name(w->type));
    if (x->vtype != kernels_vec_dot_type(w->type) || x->n != w->ne0)
        return sl_errf(err, "matmul: activations of type %s x %lld do not fit weights of type %s x %lld (need %s)",
                       ggml_type_name(x->vtype), (long long)x->n, ggml_type_name(w->type), (long long)w->ne0,
                       ggml_type_name(kernels_vec_dot_type(w->type)));
    return 0;
}

/* A caller that skipped matmul_check (a bug): NaN outputs make it visible
 * without printing from here, and the sampler refuses all-NaN logits. */
static void fill_nan(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < x->rows; t++)
        for (int64_t r = r0; r < r1; r++) y[(size_t)t * y_stride + (size_t)r] = NAN;
    (void)w;
}

void matmul_rows(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1,
                 sl_isa isa)
{
    if (r1 <= r0 || x->rows <= 0) return;
    if (!shapes_ok(w, x)) {
        fill_nan(w, x, y, y_stride, r0, r1);
        return;
    }
    if (w->layout == SL_LAYOUT_Q8_0_R16) {
        if (isa >= SL_ISA_AVX512) kq_rows_r16_avx512(w, x, y, y_stride, r0, r1);
        else kq_rows_r16_scalar(w, x, y, y_stride, r0, r1);
        return;
    }
    if (isa >= SL_ISA_AVX512 && kq_rows_avx512(w, x, y, y_stride, r0, r1)) return;
    if (isa >= SL_ISA_AVX2 && kq_rows_avx2(w, x, y, y_stride, r0, r1)) return;
    kq_rows_scalar(w, x, y, y_stride, r0, r1);
}

enum { MM_TASKS = 1024 }; /* most tasks one product splits into (4 per thread of 256) */

typedef struct {
    const sl_mat *w;
    const sl_act *x;
    float *y;
    size_t y_stride;
    sl_isa isa;
    int64_t bound[MM_TASKS + 1]; /* task i computes rows [bound[i], bound[i + 1]) */
} mm_job;

static void mm_task(void *ctx, int task, int thread)
{
    (void)thread;
    const mm_job *j = ctx;
    matmul_rows(j->w, j->x, j->y, j->y_stride, j->bound[task], j->bound[task + 1], j->isa);
}

/* The codebook types, whose one-token products run at 5-9 GB/s of weights
 * on one core of this Zen 5, well below its memory's ~24: compute-bound. */
static bool compute_bound(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_TQ1_0: return true;
    default: return false;
    }
}

/* A guided task's rows when LEFT rows are not yet handed out to NT
 * threads: about 1/(2 NT) of them in whole 16-row groups, and at least 32
 * KiB of W's weights (below that a handover costs more than the balance it
 * buys). */
static int64_t guided_len(const sl_mat *w, int64_t left, int nt)
{
    int64_t len = ((left + 2 * nt - 1) / (2 * nt) + 15) & ~(int64_t)15;
    int64_t min_rows = ((32768 + (int64_t)w->row_bytes - 1) / (int64_t)w->row_bytes + 15) & ~(int64_t)15;
    return len < min_rows ? min_rows : len;
}

/* The row split of a product over NT threads into J->bound; returns the
 * number of tasks.  Memory-bound products take PER equal tasks per thread
 * (each handover costs the row prefetch its stream had built up).  A
 * compute-bound one-token product is split guided (guided_len), large
 * tasks first and small last, because on this host one
 * of two vCPUs often runs at half the other's speed for seconds and with
 * two equal tasks per thread the fast one then idled for a third of the
 * product (IQ2_XS 4096x4096 at 2 threads: 0.77x llama.cpp's). */
static int split_rows(mm_job *j, int nt, int per)
{
    int64_t rows = j->w->ne1, *b = j->bound;
    bool guided = j->x->rows <= 1 && compute_bound(j->w->type);
    int64_t even = ((rows + (int64_t)nt * per - 1) / ((int64_t)nt * per) + 15) & ~(int64_t)15;
    int n = 0;
    b[0] = 0;
    for (int64_t r = 0; r < rows;) {
        int64_t c = guided ? guided_len(j->w, rows - r, nt) : even;
        if (r + c > rows || n == MM_TASKS - 1) c = rows - r;
        r += c;
        b[++n] = r;
    }
    return n;
}

void matmul(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, sl_pool *pool)
{
    int nt = pool_threads(pool);
    sl_isa isa = pool_isa(pool);
    int64_t rows = w->ne1;
    double work = (double)w->row_bytes * (double)rows * (double)(x->rows > 0 ? x->rows : 1);
    if (nt <= 1 || rows < 32 || work < 65536.0) {
        matmul_rows(w, x, y, y_stride, 0, rows, isa);
        return;
    }
    /* a few tasks per thread balance uneven progress; chunks stay multiples
     * of 16 rows, the SIMD tile height */
    mm_job job = {.w = w, .x = x, .y = y, .y_stride = y_stride, .isa = isa};
    pool_run(pool, split_rows(&job, nt, x->rows > 1 ? 4 : 2), mm_task, &job);
}

/* ---- batches of products ---- */

typedef struct {
    int job;
    int64_t r0, r1;
} many_task;

typedef struct {
    const sl_matmul_job *jobs;
    const many_task *tasks;
    sl_isa isa;
} many_ctx;

static void many_run(void *ctx, int task, int thread)
{
    (void)thread;
    const many_ctx *c = ctx;
    const many_task *t = &c->tasks[task];
    const sl_matmul_job *j = &c->jobs[t->job];
    matmul_rows(j->w, j->x, j->y, j->y_stride, t->r0, t->r1, c->isa);
}

void matmul_many(const sl_matmul_job *jobs, int n_jobs, sl_pool *pool)
{
    int nt = pool_threads(pool);
    sl_isa isa = pool_isa(pool);
    if (n_jobs <= 0) return;
    double work = 0;
    int64_t rows = 0;
    for (int i = 0; i < n_jobs; i++) {
        work += (double)jobs[i].w->row_bytes * (double)jobs[i].w->ne1 * (double)(jobs[i].x->rows > 0 ? jobs[i].x->rows : 1);
        rows += jobs[i].w->ne1;
    }
    /* chunks of whole 16-row groups, about 4 per thread over the whole
     * batch; or guided (split_rows) when every product is a compute-bound
     * one-token one, at most twice as many */
    int64_t chunk = (rows / ((int64_t)nt * 4) + 15) & ~(int64_t)15;
    if (chunk < 16) chunk = 16;
    bool guided = true;
    for (int i = 0; i < n_jobs && guided; i++) guided = jobs[i].x->rows <= 1 && compute_bound(jobs[i].w->type);
    int64_t n_tasks = 0;
    for (int i = 0; i < n_jobs; i++) n_tasks += (jobs[i].w->ne1 + chunk - 1) / chunk;
    if (guided) n_tasks = 2 * n_tasks + (int64_t)nt * 8; /* a bound: the loop below stops at it */
    many_task local[256]; /* a decode step's experts fit: no allocation per call */
    many_task *tasks = nt <= 1 || work < 65536.0 || n_tasks >= INT32_MAX ? NULL
                       : n_tasks <= 256 ? local : malloc(sizeof *tasks * (size_t)n_tasks);
    if (!tasks) { /* one thread, tiny batch, or no memory: same results serially */
        for (int i = 0; i < n_jobs; i++)
            matmul_rows(jobs[i].w, jobs[i].x, jobs[i].y, jobs[i].y_stride, 0, jobs[i].w->ne1, isa);
        return;
    }
    int64_t k = 0, left = rows;
    for (int i = 0; i < n_jobs; i++) {
        int64_t ne1 = jobs[i].w->ne1;
        for (int64_t r = 0, len = chunk; r < ne1; r += len, left -= len) {
            if (guided) { /* a share of what is left in the whole batch, cut at the product's end */
                len = guided_len(jobs[i].w, left, nt);
                if (k == n_tasks - (n_jobs - i)) len = ne1 - r; /* keep a task for each product left */
            }
            if (len > ne1 - r) len = ne1 - r;
            tasks[k++] = (many_task){i, r, r + len};
        }
    }
    many_ctx c = {jobs, tasks, isa};
    pool_run(pool, (int)k, many_run, &c);
    if (tasks != local) free(tasks);
}
