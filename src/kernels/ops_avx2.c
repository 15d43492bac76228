/* SiLU / SwiGLU on AVX2+FMA: the same definition as ops.c and
 * ops_avx512.c (ggml's AVX-512 ggml_v_expf, which the goldens' machine ran),
 * eight lanes at a time.  AVX2 has no vscalefps: j * 2^n is formed as
 * (j * 2^n1) * 2^n2 with n = n1 + n2 and |n1|, |n2| <= 96, where the first
 * product is exact (j is in [0.5, 2), so it stays normal) and the second
 * rounds once, as scalef does; lanes with |n| > 192 are replaced anyway.
 * Identical bit for bit to the scalar path (tests/test_kernels.c).  n must
 * be a multiple of 8: the caller does the rest. */
#include <immintrin.h>
#include <math.h>

#include <string.h>

#include "kernels/kq.h"

static inline __m256 pow2i(__m256i k) /* 2^k for k in [-126, 127] */
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 v_expf8(__m256 x)
{
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 d = _mm256_cmp_ps(absn, _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    /* n is integral here unless |n| > 192 or NaN (those lanes are replaced
     * below, or stay NaN through j); clamp so the exponent fields stay valid */
    __m256 nc = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-192)), _mm256_set1_ps(192));
    __m256i ni = _mm256_cvtps_epi32(nc);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, pow2i(n1)), pow2i(n2));
    if (_mm256_testz_ps(d, d)) return res;
    const __m256 alt = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
    return _mm256_blendv_ps(res, alt, d);
}

static inline __m256 v_silu8(__m256 x)
{
    __m256 e = v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

double kq_exp_sum_avx2(float *y, const float *x, int64_t n, float max)
{
    double sum = 0.0;
    const __m256 m = _mm256_set1_ps(max);
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        float l[16];
        _mm256_storeu_ps(l, v_expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m)));
        _mm256_storeu_ps(l + 8, v_expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m)));
        memcpy(y + i, l, sizeof l);
        sum += (double)kq_tree16(l);
    }
    return sum;
}

/* As kq_weighted_sum_avx512, 8 lanes. */
void kq_weighted_sum_avx2(float *out, const float *y, const float *w, int k, int64_t n, int64_t stride)
{
    for (int64_t i = 0; i + 8 <= n; i += 8) {
        __m256 o = _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_set1_ps(w[0]));
        for (int j = 1; j < k; j++)
            o = _mm256_add_ps(o, _mm256_mul_ps(_mm256_loadu_ps(y + (size_t)j * (size_t)stride + (size_t)i),
                                               _mm256_set1_ps(w[j])));
        _mm256_storeu_ps(out + i, o);
    }
}

void kq_silu_avx2(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, v_silu8(_mm256_loadu_ps(x + i)));
}

void kq_swiglu_avx2(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(v_silu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
}

/* kq_argmax_avx512's scheme on 8 lanes. */
void kq_argmax_avx2(const float *x, int64_t n, float *max, int64_t *at)
{
    __m256 m = _mm256_set1_ps(*max);
    __m256i ix = _mm256_set1_epi32(-1), idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i step = _mm256_set1_epi32(8);
    for (int64_t i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), g = _mm256_cmp_ps(v, m, _CMP_GT_OQ);
        m = _mm256_blendv_ps(m, v, g);
        ix = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(ix), _mm256_castsi256_ps(idx), g));
        idx = _mm256_add_epi32(idx, step);
    }
    float mv[8];
    int32_t iv[8];
    _mm256_storeu_ps(mv, m);
    _mm256_storeu_si256((__m256i *)iv, ix);
    for (int l = 0; l < 8; l++)
        if (mv[l] > *max || (mv[l] == *max && iv[l] >= 0 && iv[l] < *at)) *max = mv[l], *at = iv[l];
}

/* kq_sumsq8_avx512 with the eight sums in two vectors of four. */
void kq_sumsq8_avx2(const float *x, int64_t n, double *s, float *tmin)
{
    __m256d a0 = _mm256_loadu_pd(s), a1 = _mm256_loadu_pd(s + 4);
    const __m256 inf = _mm256_set1_ps(INFINITY);
    __m256 lo = _mm256_set1_ps(*tmin);
    for (int64_t i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), p = _mm256_mul_ps(v, v);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
        __m256 pos = _mm256_blendv_ps(inf, p, _mm256_cmp_ps(p, _mm256_setzero_ps(), _CMP_GT_OQ));
        lo = _mm256_min_ps(pos, lo);
    }
    _mm256_storeu_pd(s, a0);
    _mm256_storeu_pd(s + 4, a1);
    float l[8];
    _mm256_storeu_ps(l, lo);
    *tmin = kq_min8(l, *tmin);
}

void kq_norm_apply_avx2(float *out, const float *x, float scale, const float *w, int64_t n)
{
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t i = 0; i + 8 <= n; i += 8) {
        __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + i), sc);
        _mm256_storeu_ps(out + i, w ? _mm256_mul_ps(y, _mm256_loadu_ps(w + i)) : y);
    }
}
