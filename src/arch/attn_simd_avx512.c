/* AVX-512 attention inner loops: the same arithmetic as attn_simd.c (F16C
 * conversions are exact or round to nearest even like fp32_to_fp16; FMAs
 * are correctly rounded like fmaf), so results are identical. */
#include <immintrin.h>
#include <string.h>

#include "arch/attn_simd.h"

#define CVT_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static __m512 ld16h(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static __m512 ld16h_n(const uint16_t *p, int n)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p));
}

static float tree(__m512 v)
{
    float l[16];
    _mm512_storeu_ps(l, v);
    return attn_tree16(l);
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

static const attn_simd avx512 = {
    .dot_f16 = dot_f16, .dot_f32 = dot_f32, .mad_f16 = mad_f16, .scale_f16 = scale_f16,
    .axpy_f32 = axpy_f32, .axpy_f16 = axpy_f16, .tree_rows = tree_rows,
};

const attn_simd *attn_simd_avx512(void)
{
    return &avx512;
}
