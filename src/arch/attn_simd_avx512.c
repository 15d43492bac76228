/* AVX-512 attention inner loops: the same arithmetic as attn_simd.c (F16C
 * conversions are exact or round to nearest even like fp32_to_fp16; FMAs
 * are correctly rounded like fmaf), so results are identical. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "arch/attn_simd.h"
#include "arch/conv_step.h"

#define CVT_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static __m512 ld16h(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static __m512 ld16h_n(const uint16_t *p, int n)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p));
}

/* GCC expands _mm512_reduce_add_ps to exactly attn_tree16's order. */
static float tree(__m512 v)
{
    return _mm512_reduce_add_ps(v);
}

static float dot_f16(const uint16_t *x, const uint16_t *y, int n)
{
    int np = n & ~63;
    double sum = 0.0;
    if (np) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < np; i += 64) {
            a0 = _mm512_fmadd_ps(ld16h(x + i), ld16h(y + i), a0);
            a1 = _mm512_fmadd_ps(ld16h(x + i + 16), ld16h(y + i + 16), a1);
            a2 = _mm512_fmadd_ps(ld16h(x + i + 32), ld16h(y + i + 32), a2);
            a3 = _mm512_fmadd_ps(ld16h(x + i + 48), ld16h(y + i + 48), a3);
        }
        sum = tree(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
    }
    for (int i = np; i < n; i++) {
        float a = _cvtsh_ss(x[i]), b = _cvtsh_ss(y[i]);
        sum += (double)(a * b);
    }
    return (float)sum;
}

static float dot_f32(const float *x, const float *y, int n)
{
    int np = n & ~63;
    float sum = 0.0f;
    if (np) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < np; i += 64) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
        }
        sum = tree(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
    }
    return attn_dot_f32_tail(x, y, np, n, sum);
}

static void mad_f16(uint16_t *acc, const uint16_t *v, float s, int n)
{
    __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 r = _mm512_fmadd_ps(ld16h(v + i), vs, ld16h(acc + i));
        _mm256_storeu_si256((__m256i *)(acc + i), _mm512_cvtps_ph(r, CVT_RNE));
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_fmadd_ps(ld16h_n(v + i, n - i), vs, ld16h_n(acc + i, n - i));
        _mm256_mask_storeu_epi16(acc + i, k, _mm512_cvtps_ph(r, CVT_RNE));
    }
}

static void scale_f16(uint16_t *acc, float s, int n)
{
    __m512 vs = _mm512_set1_ps(s);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(acc + i), _mm512_cvtps_ph(_mm512_mul_ps(ld16h(acc + i), vs), CVT_RNE));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(acc + i, k, _mm512_cvtps_ph(_mm512_mul_ps(ld16h_n(acc + i, n - i), vs), CVT_RNE));
    }
}

static void to_f16(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), CVT_RNE));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), CVT_RNE));
    }
}

static void axpy_f32(float *lane, const float *v, float w, int n)
{
    __m512 vw = _mm512_set1_ps(w);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(lane + i, _mm512_fmadd_ps(_mm512_loadu_ps(v + i), vw, _mm512_loadu_ps(lane + i)));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, v + i), vw, _mm512_maskz_loadu_ps(k, lane + i));
        _mm512_mask_storeu_ps(lane + i, k, r);
    }
}

static void axpy_f16(float *lane, const uint16_t *v, float w, int n)
{
    __m512 vw = _mm512_set1_ps(w);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(lane + i, _mm512_fmadd_ps(ld16h(v + i), vw, _mm512_loadu_ps(lane + i)));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 r = _mm512_fmadd_ps(ld16h_n(v + i, n - i), vw, _mm512_maskz_loadu_ps(k, lane + i));
        _mm512_mask_storeu_ps(lane + i, k, r);
    }
}

/* out[i] = tree over the 16 rows: row pairs (l, l+8), then (l, l+4), then
 * (0,2), (1,3), then the last pair, exactly attn_tree16 per column. */
static void tree_rows(float *out, const float *lanes, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 r[16];
        for (int l = 0; l < 16; l++) r[l] = _mm512_loadu_ps(lanes + (size_t)l * n + i);
        for (int l = 0; l < 8; l++) r[l] = _mm512_add_ps(r[l + 8], r[l]);
        for (int l = 0; l < 4; l++) r[l] = _mm512_add_ps(r[l + 4], r[l]);
        __m512 t = _mm512_add_ps(_mm512_add_ps(r[0], r[2]), _mm512_add_ps(r[1], r[3]));
        _mm512_storeu_ps(out + i, t);
    }
    for (; i < n; i++) {
        float l[16];
        for (int k = 0; k < 16; k++) l[k] = lanes[(size_t)k * n + i];
        out[i] = attn_tree16(l);
    }
}

static const attn_simd avx512;

/* f32 -> f16 -> f32 in registers: the rounding ggml's f16 accumulator does. */
static __m512 round16(__m512 x)
{
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, CVT_RNE));
}

/* flash's score pass and softmax factors for one row: SC, MS, VS get n
 * floats each; returns S. */
static float flash_factors(const uint16_t *k, size_t k_stride, const uint16_t *q16, int dk, int n, float scale,
                           float *sc, float *ms, float *vs)
{
    int nq = dk / 16;
    __m512 q[64];
    for (int j = 0; j < nq; j++) q[j] = ld16h(q16 + 16 * j);
    for (int p = 0; p < n; p++) {
        const uint16_t *kp = k + (size_t)p * k_stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < nq; j += 4) {
            a0 = _mm512_fmadd_ps(ld16h(kp + 16 * j), q[j], a0);
            a1 = _mm512_fmadd_ps(ld16h(kp + 16 * j + 16), q[j + 1], a1);
            a2 = _mm512_fmadd_ps(ld16h(kp + 16 * j + 32), q[j + 2], a2);
            a3 = _mm512_fmadd_ps(ld16h(kp + 16 * j + 48), q[j + 3], a3);
        }
        sc[p] = tree(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3))) * scale;
    }
    float S = 0.0f, M = -INFINITY;
    for (int p = 0; p < n; p++) {
        if (sc[p] > M) {
            float mold = M;
            M = sc[p];
            ms[p] = expf(mold - M);
            vs[p] = 1.0f;
        } else {
            ms[p] = 1.0f;
            vs[p] = expf(sc[p] - M);
        }
        S = fmaf(S, ms[p], vs[p]);
    }
    return S;
}

/* One value position P of row H's accumulators (flash's order). */
static inline __attribute__((always_inline)) void accumulate_one(__m512 *acc, const __m512 *x, int nv, const float *ms,
                                                                 const float *vs, int p)
{
    if (ms[p] != 1.0f) {
        __m512 m = _mm512_set1_ps(ms[p]);
#pragma GCC unroll 16
        for (int j = 0; j < nv; j++) acc[j] = round16(_mm512_mul_ps(acc[j], m));
    }
    __m512 w = _mm512_set1_ps(vs[p]);
#pragma GCC unroll 16
    for (int j = 0; j < nv; j++) acc[j] = round16(_mm512_fmadd_ps(x[j], w, acc[j]));
}

/* The value pass of flash for NH rows at once (NH * NV <= 16): per row,
 * acc = f16(acc * ms) on a new maximum, then acc = f16(v * vs + acc), the
 * rows sharing each value load.  Rows come HG to a query position, the
 * positions consecutive: row h sees N + h / HG values and writes to OUT +
 * (h / HG) TSTRIDE + (h % HG) OUT_STRIDE; its factors are at WORK + 3 h W
 * (W = the last row's count).  Inlined with constant NH and NV so the
 * accumulators stay in registers. */
static inline __attribute__((always_inline)) void accumulate_rows(int nh, int nv, const uint16_t *v, size_t v_stride,
                                                                  const float *work, int n, int hg, const float *S,
                                                                  float *out, size_t out_stride, size_t tstride)
{
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < nh * nv; i++) acc[i] = _mm512_setzero_ps();
    __m512 x[16] = {0}; /* zeroed for the compiler, which cannot see nv <= 16 */
    int w = n + (nh - 1) / hg;
    for (int p = 0; p < w; p++) {
        const uint16_t *vp = v + (size_t)p * v_stride;
#pragma GCC unroll 16
        for (int j = 0; j < nv; j++) x[j] = ld16h(vp + 16 * j);
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++) {
            const float *ms = work + (size_t)(3 * h + 1) * w;
            if (p < n + h / hg) accumulate_one(acc + h * nv, x, nv, ms, ms + w, p);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < nh; h++) {
        __m512 inv = _mm512_set1_ps(S[h] == 0.0f ? 0.0f : 1.0f / S[h]);
        float *o = out + (size_t)(h / hg) * tstride + (size_t)(h % hg) * out_stride;
#pragma GCC unroll 16
        for (int j = 0; j < nv; j++) _mm512_storeu_ps(o + 16 * j, _mm512_mul_ps(acc[h * nv + j], inv));
    }
}

/* attn_flash_generic reorganised for throughput, with the same arithmetic
 * per position: all scores first (independent dot products), then the
 * running maximum, the expf factors and the sum, then the f16 accumulator
 * held in registers (dv a multiple of 16, at most 256).  WORK holds 3n
 * floats. */
static void flash(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const uint16_t *q16, int dk,
                  int dv, int n, float scale, float *out, uint16_t *acc16, float *work)
{
    if (dv % 16 || dv > 256 || dk % 64 || dk > 1024) {
        attn_flash_generic(&avx512, k, k_stride, v, v_stride, q16, dk, dv, n, scale, out, acc16, work);
        return;
    }
    float S = flash_factors(k, k_stride, q16, dk, n, scale, work, work + n, work + 2 * (size_t)n);
    switch (dv / 16) {
    case 1: accumulate_rows(1, 1, v, v_stride, work, n, 1, &S, out, 0, 0); break;
    case 2: accumulate_rows(1, 2, v, v_stride, work, n, 1, &S, out, 0, 0); break;
    case 4: accumulate_rows(1, 4, v, v_stride, work, n, 1, &S, out, 0, 0); break;
    case 8: accumulate_rows(1, 8, v, v_stride, work, n, 1, &S, out, 0, 0); break;
    default: accumulate_rows(1, dv / 16, v, v_stride, work, n, 1, &S, out, 0, 0); break;
    }
}

static void flash_rows(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const uint16_t *q16,
                       size_t dk16, int nh, int hg, int dk, int dv, int n, float scale, float *out, size_t out_stride,
                       size_t tstride, uint16_t *acc16, float *work)
{
    int nv = dv / 16, per = nv ? 16 / nv : 0; /* rows whose accumulators fit 16 registers */
    if (per > ATTN_FLASH_ROWS) per = ATTN_FLASH_ROWS;
    if (dv % 16 || dv > 256 || dk % 64 || dk > 1024 || per < 2 || nh < 2 || (hg < nh && hg > per)) {
        for (int h = 0; h < nh; h++)
            flash(k, k_stride, v, v_stride, q16 + h * dk16, dk, dv, n + h / hg, scale,
                  out + (size_t)(h / hg) * tstride + (size_t)(h % hg) * out_stride, acc16, work);
        return;
    }
    /* groups of whole positions (or of one position's heads when it has
     * more than fit): group h0 starts at position t0 = h0 / hg */
    int g = hg < nh ? per - per % hg : per;
    for (int h0 = 0; h0 < nh; h0 += g) {
        int m = nh - h0 < g ? nh - h0 : g, t0 = h0 / hg, n0 = n + t0, w = n0 + (m - 1) / hg;
        float S[ATTN_FLASH_ROWS];
        for (int h = 0; h < m; h++) {
            float *f = work + (size_t)3 * h * w;
            S[h] = flash_factors(k, k_stride, q16 + (h0 + h) * dk16, dk, n0 + h / hg, scale, f, f + w, f + 2 * (size_t)w);
        }
        float *o = out + (size_t)t0 * tstride + (size_t)(h0 % hg) * out_stride;
        switch (m * 16 + nv) {
        case 2 * 16 + 8: accumulate_rows(2, 8, v, v_stride, work, n0, hg, S, o, out_stride, tstride); break;
        case 2 * 16 + 4: accumulate_rows(2, 4, v, v_stride, work, n0, hg, S, o, out_stride, tstride); break;
        case 3 * 16 + 4: accumulate_rows(3, 4, v, v_stride, work, n0, hg, S, o, out_stride, tstride); break;
        case 4 * 16 + 4: accumulate_rows(4, 4, v, v_stride, work, n0, hg, S, o, out_stride, tstride); break;
        default: accumulate_rows(m, nv, v, v_stride, work, n0, hg, S, o, out_stride, tstride); break;
        }
    }
}

/* rope_apply's NEOX pairing, 16 pairs at a time: cache holds (cos, sin)
 * per pair, split into two vectors by a permute; x[i] = fma(x0, c, -(x1 *
 * s)) is one product and one fused multiply-subtract, x[i + n/2] = fma(x0,
 * s, x1 * c) one product and one fused multiply-add, as fmaf does them. */
static void rope(const rope_params *rp, const float *cache, float *x)
{
    if (!rope_pairs_halves(rp)) {
        rope_apply(rp, cache, x);
        return;
    }
    int half = rp->n_rot / 2;
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int i = 0; i < half; i += 16) {
        int m = half - i < 16 ? half - i : 16;
        __mmask16 k = (__mmask16)((1u << m) - 1);
        __mmask16 k0 = (__mmask16)(m >= 8 ? 0xffff : (1u << 2 * m) - 1), k1 = (__mmask16)(m > 8 ? (1u << 2 * (m - 8)) - 1 : 0);
        __m512 p0 = _mm512_maskz_loadu_ps(k0, cache + 2 * i), p1 = _mm512_maskz_loadu_ps(k1, cache + 2 * i + 16);
        __m512 c = _mm512_permutex2var_ps(p0, even, p1), s = _mm512_permutex2var_ps(p0, odd, p1);
        __m512 x0 = _mm512_maskz_loadu_ps(k, x + i), x1 = _mm512_maskz_loadu_ps(k, x + i + half);
        _mm512_mask_storeu_ps(x + i, k, _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
        _mm512_mask_storeu_ps(x + i + half, k, _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c)));
    }
}

/* the tiled flash kernel, 16 lanes (attn_tiled_simd.h) */
#define VT __m512
#define VW 16
#define VZERO() _mm512_setzero_ps()
#define VSET1(x) _mm512_set1_ps(x)
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VLDH(p) ld16h(p)
#include "arch/attn_tiled_simd.h"

static const attn_simd avx512 = {
    .dot_f16 = dot_f16, .dot_f32 = dot_f32, .mad_f16 = mad_f16, .scale_f16 = scale_f16,
    .to_f16 = to_f16, .axpy_f32 = axpy_f32, .axpy_f16 = axpy_f16, .tree_rows = tree_rows, .flash = flash,
    .flash_rows = flash_rows, .tiled = tiled,
    .conv_step = conv_step_body, .rope = rope,
};

const attn_simd *attn_simd_avx512(void)
{
    return &avx512;
}
