/* AVX-512 VNNI product with Q8_0 weights interleaved by 16 rows (interleave.c).  A
 * block's 16 x 32 weights are 8 vectors; each vpdpbusd multiplies one of
 * them by a broadcast dword of the token's activations, so the 16 block sums
 * accumulate in row order with no folding.  Weights are stored as q + 128
 * (vpdpbusd's unsigned operand); every sum starts from -128 times the
 * activation block's sum, so the offset never reaches it. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/kq.h"

#define TT 8 /* tokens per tile: 8 int and 8 float accumulators, 8 weight vectors */

typedef struct {
    int32_t corr; /* -128 * sum of the block's activations */
    float d;      /* the block's activation scale */
} r16_act;

static void prep_acts(const sl_act *x, int64_t nb, r16_act *out)
{
    for (int64_t t = 0; t < x->rows; t++) {
        const blk_q8_0 *a = (const blk_q8_0 *)((const char *)x->data + (size_t)t * x->row_bytes);
        for (int64_t b = 0; b < nb; b++) {
            int s = 0;
            for (int e = 0; e < QK; e++) s += a[b].qs[e];
            out[t * nb + b] = (r16_act){-128 * s, _cvtsh_ss(a[b].d)};
        }
    }
}

static inline int32_t ld32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* One group and NT tokens.  With few tokens a sum is split into NC
 * independent chains (integer adds: exact in any order), so the vpdpbusd
 * latency does not set the pace. */
static inline __attribute__((always_inline)) void
r16_group(const int nt, const uint8_t *g, int64_t nb, const uint8_t *a, size_t a_stride, const r16_act *ac,
          __m512 *acc, bool ahead)
{
    const int nc = nt >= 4 ? 1 : nt >= 2 ? 2 : 4;
    const uint8_t *q = g + kq_r16_quant_off(nb);
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    /* AHEAD: the next group is fetched into L1 while this one is
     * computed, a share of its lines at every block.  With a few tokens
     * the product is half compute-bound, and the core's own prefetchers
     * then let the loads of each block wait on L3: the 50257 x 256 head of
     * tinymoe, hot in L3, took 0.59 / 0.66 ms for 4 / 5 tokens against
     * 0.51 ms for one; fetched ahead, 0.50 / 0.52 (one token 0.49).  Past
     * a matrix's last group the fetches read what follows it, harmlessly. */
    const size_t group = (size_t)nb * 16 * sizeof(blk_q8_0);
    const size_t per = ahead ? (group / 64 + (size_t)nb - 1) / (size_t)nb : 0;
    for (int64_t b = 0; b < nb; b++) {
        const char *pf = (const char *)g + group + (size_t)b * per * 64;
        for (size_t l = 0; l < per; l++) _mm_prefetch(pf + l * 64, _MM_HINT_T0);
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + (size_t)b * 32)));
        __m512i wv[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) wv[i] = _mm512_loadu_si512(q + (size_t)b * 512 + (size_t)i * 64);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const uint8_t *ab = a + (size_t)t * a_stride + (size_t)b * sizeof(blk_q8_0) + 2;
            const r16_act *at = ac + (size_t)t * (size_t)nb + b;
            __m512i s[4];
            s[0] = _mm512_set1_epi32(at->corr);
#pragma GCC unroll 4
            for (int c = 1; c < nc; c++) s[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) s[i % nc] = _mm512_dpbusd_epi32(s[i % nc], wv[i], _mm512_set1_epi32(ld32(ab + 4 * i)));
#pragma GCC unroll 4
            for (int c = 1; c < nc; c++) s[0] = _mm512_add_epi32(s[0], s[c]);
            __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(at->d));
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[0]), acc[t]);
        }
    }
}

static void r16_tile(int nt, const uint8_t *g, int64_t nb, const uint8_t *a, size_t a_stride, const r16_act *ac,
                     __m512 *acc, bool ahead)
{
    switch (nt) { /* a compile-time width per case: fully unrolled bodies */
    case 1: r16_group(1, g, nb, a, a_stride, ac, acc, ahead); break;
    case 2: r16_group(2, g, nb, a, a_stride, ac, acc, ahead); break;
    case 3: r16_group(3, g, nb, a, a_stride, ac, acc, ahead); break;
    case 4: r16_group(4, g, nb, a, a_stride, ac, acc, ahead); break;
    case 5: r16_group(5, g, nb, a, a_stride, ac, acc, ahead); break;
    case 6: r16_group(6, g, nb, a, a_stride, ac, acc, ahead); break;
    case 7: r16_group(7, g, nb, a, a_stride, ac, acc, ahead); break;
    default: r16_group(TT, g, nb, a, a_stride, ac, acc, ahead); break;
    }
}

/* Rows [r0, r1): whole groups are computed, rows outside the range (or past
 * ne1) are not stored. */
static void r16_rows(const sl_mat *w, const sl_act *x, const r16_act *ac, float *y, size_t y_stride, int64_t r0,
                     int64_t r1)
{
    int64_t nb = w->ne0 / QK;
    int64_t g0 = r0 / 16, g1 = (r1 + 15) / 16;
    /* groups whose weights fit in L2 while every tile passes over them */
    int64_t chunk = (int64_t)(393216 / (16 * w->row_bytes));
    if (chunk < 1) chunk = 1;
    for (int64_t c0 = g0; c0 < g1; c0 += chunk)
        for (int64_t t0 = 0; t0 < x->rows; t0 += TT) {
            int nt = (int)(x->rows - t0 < TT ? x->rows - t0 : TT);
            const uint8_t *a = (const uint8_t *)x->data + (size_t)t0 * x->row_bytes;
            for (int64_t gi = c0; gi < (c0 + chunk < g1 ? c0 + chunk : g1); gi++) {
                __m512 acc[TT];
                /* the first tile brings the chunk's groups in; later ones find them in L2 */
                r16_tile(nt, kq_r16_group(w, gi), nb, a, x->row_bytes, ac + (size_t)t0 * (size_t)nb, acc, t0 == 0);
                uint32_t m = 0xffff;
                int64_t lo = r0 - 16 * gi, hi = r1 - 16 * gi;
                if (lo > 0) m &= 0xffffu << lo;
                if (hi < 16) m &= (1u << hi) - 1;
                for (int t = 0; t < nt; t++)
                    _mm512_mask_storeu_ps(y + (size_t)(t0 + t) * y_stride + (size_t)(16 * gi), (__mmask16)m, acc[t]);
            }
        }
}

void kq_rows_r16_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    int64_t nb = w->ne0 / QK;
    r16_act local[2048];
    size_t n = (size_t)x->rows * (size_t)nb;
    r16_act *ac = n <= 2048 ? local : malloc(n * sizeof *ac);
    if (!ac) { /* no memory for the activation sums: the same bits, slowly */
        kq_rows_r16_scalar(w, x, y, y_stride, r0, r1);
        return;
    }
    prep_acts(x, nb, ac);
    r16_rows(w, x, ac, y, y_stride, r0, r1);
    if (ac != local) free(ac);
}

/* Each output vector is one dword of every row's block: a gather per
 * vector from the 16 rows (masked: missing rows read as zero, as the
 * scalar path's zero blocks). */
void kq_r16_interleave_avx512(uint8_t *dst, const uint8_t *src, int nv, int64_t nb, size_t row_bytes)
{
    const __mmask16 m = nv >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nv) - 1);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)row_bytes));
    const __m512i zero = _mm512_setzero_si512(), flip = _mm512_set1_epi32((int)0x80808080u);
    uint8_t *q = dst + kq_r16_quant_off(nb);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + (size_t)b * sizeof(blk_q8_0);
        /* the scale and the block's first two quants: keep the scale */
        __m512i d = _mm512_mask_i32gather_epi32(zero, m, rows, blk, 1);
        _mm256_storeu_si256((__m256i *)(dst + (size_t)b * 32), _mm512_cvtepi32_epi16(d));
        for (int i = 0; i < QK / 4; i++) {
            __m512i v = _mm512_mask_i32gather_epi32(zero, m, rows, blk + 2 + 4 * i, 1);
            _mm512_storeu_si512(q + (size_t)b * 512 + (size_t)i * 64, _mm512_xor_si512(v, flip));
        }
    }
}
