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

void kq_silu_avx512(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, v_silu16(_mm512_loadu_ps(x + i)));
}

void kq_swiglu_avx512(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(v_silu16(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
}
