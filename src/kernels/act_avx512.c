/* AVX-512 activation conversion.  Every operation here is an exactly rounded
 * IEEE operation also used by the scalar path (max, divide, multiply, round
 * to nearest even, fp16 RNE), so the bytes are identical to act.c's; the
 * test suite compares them. */
#include <immintrin.h>

#include "kernels/kq.h"

static void q8_0_row(const float *x, uint8_t *dst, int64_t nb, int q81)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    size_t bsz = q81 ? 36 : 34;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
        __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
        uint8_t *b = dst + (size_t)i * bsz;
        uint16_t dh = fp32_to_fp16(d);
        memcpy(b, &dh, 2);
        _mm_storeu_si128((__m128i *)(b + (q81 ? 4 : 2)), _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(b + (q81 ? 20 : 18)), _mm512_cvtsepi32_epi8(i1));
        if (q81) {
            int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
            uint16_t sh = fp32_to_fp16(d * (float)sum);
            memcpy(b + 2, &sh, 2);
        }
    }
}

static void q8_K_row(const float *x, blk_q8_K *y, int64_t nb)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < nb; i++, x += 256) {
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < 256; j += 16) m = _mm512_max_ps(m, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)));
        float amax = _mm512_reduce_max_ps(m);
        if (!(amax > 0.0f)) { /* all zero (the scalar path's "!amax") */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0; /* the first element of largest magnitude sets the sign */
        for (int j = 0; j < 256; j += 16) {
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                first = j + __builtin_ctz(hit);
                break;
            }
        }
        float iscale = -127.0f / x[first];
        __m512 is = _mm512_set1_ps(iscale);
        for (int g = 0; g < 16; g++) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), is));
            q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * g), _mm512_cvtsepi32_epi8(q));
            y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1.0f / iscale;
    }
}

int kq_act_row_avx512(uint32_t vtype, const float *x, void *dst, int64_t n)
{
    int64_t i = 0;
    switch (vtype) {
    case GGML_TYPE_Q8_0: q8_0_row(x, dst, n / 32, 0); return 1;
    case GGML_TYPE_Q8_1: q8_0_row(x, dst, n / 32, 1); return 1;
    case GGML_TYPE_Q8_K: q8_K_row(x, dst, n / 256); return 1;
    case GGML_TYPE_F16:
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)((uint16_t *)dst + i),
                                _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_fp16(x[i]);
        return 1;
    case GGML_TYPE_BF16:
        for (; i + 16 <= n; i += 16) {
            __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
            __m512i r = _mm512_srli_epi32(
                _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))), 16);
            __mmask16 nan = _mm512_cmp_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000), _MM_CMPINT_NLE);
            r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
            _mm256_storeu_si256((__m256i *)((uint16_t *)dst + i), _mm512_cvtepi32_epi16(r));
        }
        for (; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_bf16(x[i]);
        return 1;
    default:
        return 0;
    }
}
