/* Internal to src/kernels: ggml block layouts (ggml-common.h), the small
 * decoding helpers every path shares, and the per-ISA kernel entry points.
 * Blocks hold fp16 fields, so weight rows must be 2-byte aligned (GGUF data
 * is 32-byte aligned; every row size of these types is even). */
#ifndef SLUICE_KQ_H
#define SLUICE_KQ_H

#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

#define QK 32   /* elements per small block */
#define QKK 256 /* elements per K-quant superblock */

typedef struct { uint16_t d; uint8_t qs[16]; } blk_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } blk_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_1;
typedef struct { uint16_t d; int8_t qs[32]; } blk_q8_0;
typedef struct { uint16_t d, s; int8_t qs[32]; } blk_q8_1;
typedef struct { uint16_t d; uint8_t qs[16]; } blk_iq4_nl;
typedef struct { uint8_t e; uint8_t qs[16]; } blk_mxfp4;
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } blk_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } blk_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } blk_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } blk_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } blk_q6_K;
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } blk_iq4_xs;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } blk_q8_K;

_Static_assert(sizeof(blk_q4_0) == 18, "q4_0");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1");
_Static_assert(sizeof(blk_q8_0) == 34, "q8_0");
_Static_assert(sizeof(blk_q8_1) == 36, "q8_1");
_Static_assert(sizeof(blk_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(blk_mxfp4) == 17, "mxfp4");
_Static_assert(sizeof(blk_q2_K) == 84, "q2_K");
_Static_assert(sizeof(blk_q3_K) == 110, "q3_K");
_Static_assert(sizeof(blk_q4_K) == 144, "q4_K");
_Static_assert(sizeof(blk_q5_K) == 176, "q5_K");
_Static_assert(sizeof(blk_q6_K) == 210, "q6_K");
_Static_assert(sizeof(blk_iq4_xs) == 136, "iq4_xs");
_Static_assert(sizeof(blk_q8_K) == 292, "q8_K");

static const int8_t KV_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
static const int8_t KV_MXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* E8M0 exponent to 0.5 * 2^(e-127) (ggml_e8m0_to_fp32_half; kvalues are 2x). */
static inline float kq_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The 16 weight rows of the group at r; rows past r1 repeat the last valid
 * row (read, never stored).  Returns how many are valid. */
static inline int kq_group_rows(const sl_mat *w, int64_t r, int64_t r1, const uint8_t **rows)
{
    int nv = (int)(r1 - r < 16 ? r1 - r : 16);
    for (int i = 0; i < 16; i++)
        rows[i] = (const uint8_t *)w->data + (size_t)(r + (i < nv ? i : nv - 1)) * w->row_bytes;
    return nv;
}

/* Rows per L2-sized chunk (a multiple of the 16-row group): a chunk's
 * weights stay in L2 while every token block passes over them. */
static inline int64_t kq_row_chunk(const sl_mat *w)
{
    int64_t c = (int64_t)(393216 / (w->row_bytes ? w->row_bytes : 1)) & ~(int64_t)15;
    return c < 16 ? 16 : c;
}

/* All 8 Q4_K / Q5_K 6-bit scales and mins of a superblock at once, byte j =
 * sub-block j (the bit layout of kq_scale_min_k4, four bytes per step). */
static inline void kq_scales_mins_k4(const uint8_t *q, uint64_t *sc, uint64_t *mn)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, q, 4);
    memcpy(&u1, q + 4, 4);
    memcpy(&u2, q + 8, 4);
    uint32_t sh = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t mh = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    *sc = (u0 & 0x3f3f3f3fu) | (uint64_t)sh << 32;
    *mn = (u1 & 0x3f3f3f3fu) | (uint64_t)mh << 32;
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (ggml get_scale_min_k4). */
static inline void kq_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q3_K signed 6-bit scale of 16-element group j (0..15), already minus 32. */
static inline int kq_q3k_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* IQ4_XS 6-bit scale of sub-block ib (0..7), minus 32. */
static inline int kq_iq4xs_scale(const blk_iq4_xs *b, int ib)
{
    int ls = ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b->scales_h >> 2 * ib) & 3) << 4);
    return ls - 32;
}

/* SL_LAYOUT_Q8_0_R16: group g (rows 16g..16g+15, missing rows zero) fills
 * the 16 * row_bytes bytes where its rows were: first the nb blocks' fp16
 * scales (block b, row j at [16b + j]), then per block 8 vectors of 64
 * bytes, vector i holding elements 4i..4i+3 of rows 0..15 (row j at byte
 * 4j), each quant stored as q + 128. */
static inline size_t kq_r16_quant_off(int64_t nb) { return (size_t)nb * 32; }
static inline const uint8_t *kq_r16_group(const sl_mat *w, int64_t g)
{
    return (const uint8_t *)w->data + (size_t)g * 16 * w->row_bytes;
}
void kq_r16_block(const sl_mat *w, int64_t r, int64_t b, void *out);
/* Group DST (layout above) from its NV <= 16 rows at SRC, ROW_BYTES apart,
 * NB blocks each: the same bytes from both paths. */
void kq_r16_interleave_scalar(uint8_t *dst, const uint8_t *src, int nv, int64_t nb, size_t row_bytes);
void kq_r16_interleave_avx512(uint8_t *dst, const uint8_t *src, int nv, int64_t nb, size_t row_bytes);
void kq_rows_r16_scalar(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);
void kq_rows_r16_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);

/* Rows [r0, r1) of y = W x on one thread.  Each path returns 0 when it has no
 * kernel for this weight type, and the dispatcher falls back to the next one. */
void kq_rows_scalar(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);
int kq_rows_avx2(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);
int kq_rows_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1);

/* BF16 rows on AVX-512 with VDPBF16PS (insn) or its FMA emulation; tests
 * compare both with the scalar path. */
int kq_rows_bf16_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1, int insn);

/* Whether the CPU has AVX512_BF16 (only meaningful with SL_ISA_AVX512). */
int kq_cpu_has_avx512bf16(void);
/* Whether its 512-bit instructions run as two 256-bit halves (AMD family
 * 19h: Zen 4), where a 512-bit body built from lane shuffles and blends
 * can lose to the AVX2 one. */
int kq_cpu_split512(void);

/* Activation row conversion on AVX-512; 0 when the type has no SIMD form. */
int kq_act_row_avx512(uint32_t vtype, const float *x, void *dst, int64_t n);

/* SwiGLU over n elements (a multiple of 16 / 8): ops.c's definition on SIMD. */
void kq_swiglu_avx512(float *out, const float *g, const float *u, int64_t n);
void kq_swiglu_avx2(float *out, const float *g, const float *u, int64_t n);
void kq_silu_avx512(float *out, const float *x, int64_t n);
void kq_silu_avx2(float *out, const float *x, int64_t n);
/* op_weighted_sum over n, a multiple of 16 (8 for AVX2). */
void kq_weighted_sum_avx512(float *out, const float *y, const float *w, int k, int64_t n, int64_t stride);
void kq_weighted_sum_avx2(float *out, const float *y, const float *w, int k, int64_t n, int64_t stride);
/* y[i] = v_expf(x[i] - max) over n (a multiple of 16); returns the double
 * sum of each 16's kq_tree16, in order (op_soft_max_sum's full groups). */
double kq_exp_sum_avx512(float *y, const float *x, int64_t n, float max);
double kq_exp_sum_avx2(float *y, const float *x, int64_t n, float max);

/* The least of M and the 8 floats at L. */
static inline float kq_min8(const float *l, float m)
{
    for (int k = 0; k < 8; k++) m = l[k] < m ? l[k] : m;
    return m;
}
/* rms_norm's pieces (ops.c, sum_squares).  Over n, a multiple of 8:
 * S[k] += (double)(x * x) for the elements k mod 8, in order, and *TMIN
 * the least positive square below it. */
void kq_sumsq8_avx512(const float *x, int64_t n, double *s, float *tmin);
void kq_sumsq8_avx2(const float *x, int64_t n, double *s, float *tmin);
/* Over n, a multiple of 16 / 8: out = x * scale * w (w NULL: x * scale). */
void kq_norm_apply_avx512(float *out, const float *x, float scale, const float *w, int64_t n);
void kq_norm_apply_avx2(float *out, const float *x, float scale, const float *w, int64_t n);

/* Over n (a multiple of 16 / 8): the largest value above *MAX and the index
 * of its first occurrence into *MAX, *AT (unchanged when none is above). */
void kq_argmax_avx512(const float *x, int64_t n, float *max, int64_t *at);
void kq_argmax_avx2(const float *x, int64_t n, float *max, int64_t *at);

/* Canonical final reduction of the 16 float lanes used for F32/F16/BF16. */
static inline float kq_tree16(float *l)
{
    for (int s = 8; s >= 1; s >>= 1)
        for (int i = 0; i < s; i++) l[i] += l[i + s];
    return l[0];
}

#endif
