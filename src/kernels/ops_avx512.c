/* SiLU / SwiGLU on AVX-512: the scalar definition in ops.c (ggml's AVX-512
 * ggml_v_expf, one lane at a time) sixteen lanes at a time, with the same
 * operations in the same order, so the results are identical bit for bit
 * (tests/test_kernels.c compares them with memcmp, NaN and overflow lanes
 * included).  n must be a multiple of 16: the caller does the libm tail. */
#include <immintrin.h>
#include <math.h>

#include "kernels/kq.h"

static inline __m512 v_expf16(__m512 x)
{
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (_mm512_kortestz(d, d)) return res;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
    return _mm512_mask_blend_ps(d, res, alt);
}

static inline __m512 v_silu16(__m512 x)
{
    __m512 e = v_expf16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

double kq_exp_sum_avx512(float *y, const float *x, int64_t n, float max)
{
    double sum = 0.0;
    const __m512 m = _mm512_set1_ps(max);
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __m512 e = v_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        _mm512_storeu_ps(y + i, e);
        sum += (double)_mm512_reduce_add_ps(e); /* GCC's order is kq_tree16's */
    }
    return sum;
}

/* Rows of Y STRIDE apart; the sum per lane in row order, products rounded. */
void kq_weighted_sum_avx512(float *out, const float *y, const float *w, int k, int64_t n, int64_t stride)
{
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __m512 o = _mm512_mul_ps(_mm512_loadu_ps(y + i), _mm512_set1_ps(w[0]));
        for (int j = 1; j < k; j++)
            o = _mm512_add_ps(o, _mm512_mul_ps(_mm512_loadu_ps(y + (size_t)j * (size_t)stride + (size_t)i),
                                               _mm512_set1_ps(w[j])));
        _mm512_storeu_ps(out + i, o);
    }
}

void kq_silu_avx512(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, v_silu16(_mm512_loadu_ps(x + i)));
}

void kq_swiglu_avx512(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(v_silu16(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
}

/* Two running maxima of 16 lanes each, every lane the first index of its
 * own maximum (a strictly greater value replaces it: NaN never does); the
 * answer is the least index among lanes holding the overall maximum. */
void kq_argmax_avx512(const float *x, int64_t n, float *max, int64_t *at)
{
    __m512 m0 = _mm512_set1_ps(*max), m1 = m0;
    __m512i i0 = _mm512_set1_epi32(-1), i1 = i0;
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_set1_epi32(16);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        __mmask16 g0 = _mm512_cmp_ps_mask(v0, m0, _CMP_GT_OQ), g1;
        m0 = _mm512_mask_mov_ps(m0, g0, v0), i0 = _mm512_mask_mov_epi32(i0, g0, idx);
        idx = _mm512_add_epi32(idx, step);
        g1 = _mm512_cmp_ps_mask(v1, m1, _CMP_GT_OQ);
        m1 = _mm512_mask_mov_ps(m1, g1, v1), i1 = _mm512_mask_mov_epi32(i1, g1, idx);
        idx = _mm512_add_epi32(idx, step);
    }
    if (i < n) { /* one more 16 */
        __m512 v0 = _mm512_loadu_ps(x + i);
        __mmask16 g0 = _mm512_cmp_ps_mask(v0, m0, _CMP_GT_OQ);
        m0 = _mm512_mask_mov_ps(m0, g0, v0), i0 = _mm512_mask_mov_epi32(i0, g0, idx);
    }
    float best = fmaxf(_mm512_reduce_max_ps(m0), _mm512_reduce_max_ps(m1));
    if (!(best > *max)) return;
    const __m512 b = _mm512_set1_ps(best);
    __mmask16 e0 = _mm512_cmp_ps_mask(m0, b, _CMP_EQ_OQ), e1 = _mm512_cmp_ps_mask(m1, b, _CMP_EQ_OQ);
    int32_t a0 = e0 ? _mm512_mask_reduce_min_epi32(e0, i0) : INT32_MAX;
    int32_t a1 = e1 ? _mm512_mask_reduce_min_epi32(e1, i1) : INT32_MAX;
    *max = best, *at = a0 < a1 ? a0 : a1;
}

/* The eight interleaved double sums of ops.c's sum_squares, one lane each:
 * the same float square and double add per element, in the same order. */
void kq_sumsq8_avx512(const float *x, int64_t n, double *s, float *tmin)
{
    __m512d acc = _mm512_loadu_pd(s);
    __m256 lo = _mm256_set1_ps(*tmin);
    for (int64_t i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), p = _mm256_mul_ps(v, v);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(p));
        lo = _mm256_mask_min_ps(lo, _mm256_cmp_ps_mask(p, _mm256_setzero_ps(), _CMP_GT_OQ), p, lo);
    }
    _mm512_storeu_pd(s, acc);
    float l[8];
    _mm256_storeu_ps(l, lo);
    *tmin = kq_min8(l, *tmin);
}

void kq_norm_apply_avx512(float *out, const float *x, float scale, const float *w, int64_t n)
{
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x + i), sc);
        _mm512_storeu_ps(out + i, w ? _mm512_mul_ps(y, _mm512_loadu_ps(w + i)) : y);
    }
}
