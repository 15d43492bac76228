/* Internal to src/kernels: the codebook types IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S and the ternary TQ1_0, TQ2_0 (ggml-common.h block
 * layouts; all are 256-element superblocks used with Q8_K activations).
 *
 * Their float order is ggml's x86 vec_dot (arch/x86/quants.c, AVX2 path,
 * which the goldens' machine ran): per superblock, 8 exact integer lane sums,
 * lane k holding the elements e with (e mod 32) / 4 == k (one 256-bit
 * register per 32-element sub-block, maddubs + madd), each lane accumulated
 * as acc[k] = fmaf(d, (float)L[k], acc[k]) with d = fp16(d_w) * d_a, then
 * the 8 lanes summed as ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) (hsum_float_8)
 * and multiplied by the format's constant (docs/KERNELS.md has the table).
 * Matching that order makes each product equal to ggml's bit for bit. */
#ifndef SLUICE_KQ_IQ_H
#define SLUICE_KQ_IQ_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kq.h"

typedef struct { uint16_t d; uint8_t qs[64]; } blk_iq2_xxs;                   /* qs as 32 uint16 */
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t scales[8]; } blk_iq2_xs; /* qs as 32 uint16 */
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } blk_iq2_s;
typedef struct { uint16_t d; uint8_t qs[96]; } blk_iq3_xxs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } blk_iq3_s;
typedef struct { uint16_t d; uint8_t qs[32]; uint8_t qh[16]; } blk_iq1_s;     /* qh as 8 uint16 */
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } blk_iq1_m;
typedef struct { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; } blk_tq1_0;
typedef struct { uint8_t qs[64]; uint16_t d; } blk_tq2_0;

_Static_assert(sizeof(blk_iq2_xxs) == 66, "iq2_xxs");
_Static_assert(sizeof(blk_iq2_xs) == 74, "iq2_xs");
_Static_assert(sizeof(blk_iq2_s) == 82, "iq2_s");
_Static_assert(sizeof(blk_iq3_xxs) == 98, "iq3_xxs");
_Static_assert(sizeof(blk_iq3_s) == 110, "iq3_s");
_Static_assert(sizeof(blk_iq1_s) == 50, "iq1_s");
_Static_assert(sizeof(blk_iq1_m) == 56, "iq1_m");
_Static_assert(sizeof(blk_tq1_0) == 54, "tq1_0");
_Static_assert(sizeof(blk_tq2_0) == 66, "tq2_0");

/* Codebooks (iq_grids.c): point i's coordinate j is byte j. */
extern const uint64_t kq_iq2xxs_grid[256], kq_iq2xs_grid[512], kq_iq2s_grid[1024], kq_iq1s_grid[2048];
extern const uint64_t kq_even_sign_bytes[128]; /* kq_even_signs as 8 bytes of +1 / -1 */
extern const uint32_t kq_iq3xxs_grid[256], kq_iq3s_grid[512];

#define IQ1_DELTA 0.125f /* IQ1_S / IQ1_M grid shift */

static inline uint32_t kq_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint16_t kq_le16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* IQ2_XXS / IQ2_XS / IQ3_XXS signs: 7 stored bits, the 8th makes the count
 * of negative elements in the group of 8 even. */
static inline uint8_t kq_even_signs(uint32_t s7)
{
    s7 &= 127;
    return (uint8_t)(s7 | (uint32_t)(__builtin_popcount(s7) & 1) << 7);
}

/* IQ1_M superblock scale: an fp16 spread over the top nibbles of its four
 * 16-bit scale words. */
static inline uint16_t kq_iq1m_d(const uint8_t *scales)
{
    uint16_t s0 = kq_le16(scales), s1 = kq_le16(scales + 2), s2 = kq_le16(scales + 4), s3 = kq_le16(scales + 6);
    return (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
}

/* TQ1_0 trit n (0..4) of a byte holding five: ((q * 3^n mod 256) * 3) >> 8. */
static inline int kq_trit(uint8_t q, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t v = (uint8_t)(q * pow3[n]);
    return (v * 3) >> 8;
}

/* hsum_float_8's tree. */
static inline float kq_red8(const float *a)
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* The product from the 8 lane accumulators (acc; IQ1_M: acc2 of the delta
 * part; IQ1_S: acc1 of the delta part), as ggml's vec_dot combines them.
 * Shared by the scalar and SIMD paths, so the last operations are the same
 * source (the files are C11: no fused multiply-add is formed implicitly). */
static inline float kq_iq_result(uint32_t type, const float *acc, const float *acc2, float acc1)
{
    switch (type) {
    case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S: return 0.125f * kq_red8(acc);
    case GGML_TYPE_IQ3_XXS: return 0.25f * kq_red8(acc);
    case GGML_TYPE_IQ1_S: return kq_red8(acc) + IQ1_DELTA * acc1;
    case GGML_TYPE_IQ1_M: return fmaf(kq_red8(acc2), IQ1_DELTA, kq_red8(acc));
    default: return kq_red8(acc); /* IQ3_S, TQ1_0, TQ2_0 */
    }
}

/* Whether TYPE is one of the types of this header. */
static inline int kq_is_iq(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_TQ1_0:
    case GGML_TYPE_TQ2_0:
        return 1;
    default:
        return 0;
    }
}

/* Scalar definition of one product (iq.c): W row of n elements (a multiple
 * of 256) with a Q8_K row. */
float kq_dot_iq(uint32_t type, const void *w, const void *a, int64_t n);
/* ggml's dequantize_row_* for these types (same float operations). */
void kq_dequant_iq(uint32_t type, const void *row, int64_t n, float *out);

/* Rows [r0, r1) on one thread; 0 when the path has no kernel for the type. */
int kq_rows_iq_avx2(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);
int kq_rows_iq_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);
/* The 256-bit body with AVX-512 VL + VNNI encodings (iq_vl_avx512.c). */
int kq_rows_iq_vl_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);
/* Whether the AVX-512 path decodes one token of TYPE through the 256-bit
 * body (kq_rows_iq_vl_avx512: the same integers, so the same bits;
 * docs/KERNELS.md): the types whose signs that body takes from a table
 * (IQ2_XXS, IQ2_XS, IQ3_XXS) ran 1.2-1.5x the 512-bit body's speed on a
 * Zen 5, and the ternary ones 1.2x where 512-bit operations run on 256-bit
 * halves (Zen 4: SPLIT512). */
static inline int kq_iq_one_token_256(uint32_t type, int split512)
{
    return type == GGML_TYPE_IQ2_XXS || type == GGML_TYPE_IQ2_XS || type == GGML_TYPE_IQ3_XXS ||
           (split512 && (type == GGML_TYPE_TQ1_0 || type == GGML_TYPE_TQ2_0));
}

#endif
