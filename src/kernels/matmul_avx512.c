/* AVX-512 (F/BW/VL/DQ + VNNI) kernels.  They compute exactly the canonical
 * order of matmul.c: exact integer block sums (any instruction mix), then per
 * output element one fmadd per block, sequential over blocks; only the way
 * the integers are formed differs.  Lanes are output rows: a group of 16
 * rows shares each block's float work, and the per-row integer vectors are
 * folded into one vector of 16 row sums by an exact transpose-add.
 *
 * Weights are fed to vpdpbusd as unsigned bytes (w + off) and the activation
 * block sum times off is subtracted: Q8_0 takes two rows per vector (one
 * vpdpbusd per row pair and block), the nibble types four rows per vector
 * (low and high nibbles, two vpdpbusd per four rows). */
#include <immintrin.h>
#include <stdlib.h>

#include "kernels/kq.h"
#include "kernels/kq_iq.h"
#include "kernels/row_prefetch.h"

#define TT 4  /* tokens per tile */

/* GROUP(SEL, NT, ...) with the tile width NT a compile-time constant (1, 2,
 * 3 or the full width MAX, 4), so that each width gets its own fully
 * unrolled body. */
#define TILE_SWITCH(nt, MAX, GROUP, SEL, ...)         \
    switch (nt) {                                      \
    case 1: GROUP(SEL, 1, __VA_ARGS__); break;         \
    case 2: GROUP(SEL, 2, __VA_ARGS__); break;         \
    case 3: GROUP(SEL, 3, __VA_ARGS__); break;         \
    default: GROUP(SEL, MAX, __VA_ARGS__); break;      \
    }
#define TB 64 /* tokens per cache block */
/* The K-quant kernels unpack a row's superblock once per tile and use it for
 * every token of the tile: 8 tokens amortise that over twice the products. */
#define TTK 8
#define TILE_SWITCH8(nt, GROUP, SEL, ...)             \
    switch (nt) {                                      \
    case 1: GROUP(SEL, 1, __VA_ARGS__); break;         \
    case 2: GROUP(SEL, 2, __VA_ARGS__); break;         \
    case 3: GROUP(SEL, 3, __VA_ARGS__); break;         \
    case 4: GROUP(SEL, 4, __VA_ARGS__); break;         \
    case 5: GROUP(SEL, 5, __VA_ARGS__); break;         \
    case 6: GROUP(SEL, 6, __VA_ARGS__); break;         \
    case 7: GROUP(SEL, 7, __VA_ARGS__); break;         \
    default: GROUP(SEL, TTK, __VA_ARGS__); break;      \
    }

/* ---- exact integer transposes ---- */

/* p[k]: lanes 0-7 partial sums of row 2k, lanes 8-15 of row 2k+1.  Returns
 * the 16 row totals in row order. */
static inline __m512i red_pairs(const __m512i *p)
{
    __m512i u[4], w[2];
    #pragma GCC unroll 16
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]),
                                _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
    #pragma GCC unroll 16
    for (int k = 0; k < 2; k++)
        w[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * k], u[2 * k + 1]),
                                _mm512_unpackhi_epi64(u[2 * k], u[2 * k + 1]));
    __m512i z = _mm512_add_epi32(_mm512_shuffle_i32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_i32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i idx = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    return _mm512_permutexvar_epi32(idx, z);
}

/* v[i]: 16 partial sums of row i.  Returns the 16 row totals in row order. */
static inline __m512i red16(const __m512i *v)
{
    __m512i u[8], w[4], x[2];
    #pragma GCC unroll 16
    for (int k = 0; k < 8; k++)
        u[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                                _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    #pragma GCC unroll 16
    for (int k = 0; k < 4; k++)
        w[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * k], u[2 * k + 1]),
                                _mm512_unpackhi_epi64(u[2 * k], u[2 * k + 1]));
    #pragma GCC unroll 16
    for (int k = 0; k < 2; k++)
        x[k] = _mm512_add_epi32(_mm512_shuffle_i32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_i32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

static inline float hsum_tree16(__m512 v) /* the canonical l[i] += l[i+s], s = 8,4,2,1 */
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

static void store_group(float *y, size_t y_stride, int64_t r, int nt, int nv, const __m512 *acc)
{
    __mmask16 m = (__mmask16)((1u << nv) - 1);
    #pragma GCC unroll 16
    for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y + (size_t)t * y_stride + (size_t)r, m, acc[t]);
}

/* fp16 field at byte offset OFF of 16 rows: one gather (rows are row_bytes
 * apart; tail rows repeat the last valid one through the index vector). */
typedef struct {
    const uint8_t *base;
    __m512i idx;
} rowset;

static inline rowset rowset_make(const uint8_t *const *rows)
{
    int32_t o[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i++) o[i] = (int32_t)(rows[i] - rows[0]);
    rowset rs = {rows[0], _mm512_loadu_si512(o)};
    return rs;
}

static inline __m512 load_h16(const rowset *rs, size_t off)
{
    __m512i g = _mm512_i32gather_epi32(rs->idx, (const void *)(rs->base + off), 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* Same for a field that ends its block (Q6_K d): read the 4 bytes ending there. */
static inline __m512 load_h16_end(const rowset *rs, size_t off)
{
    __m512i g = _mm512_i32gather_epi32(rs->idx, (const void *)(rs->base + off - 2), 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
}

/* E8M0 exponent byte at OFF of 16 rows as kq_e8m0_half's bits, by one
 * gather and lane ops (sixteen scalar conversions stored to the stack and
 * read back as a vector stalled every block on store-to-load forwarding). */
static inline __m512 load_e8m0_half(const rowset *rs, size_t off)
{
    __m512i e = _mm512_i32gather_epi32(rs->idx, (const void *)(rs->base + off), 1);
    e = _mm512_and_si512(e, _mm512_set1_epi32(0xff));
    __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e); /* e = 0, 1: subnormal halves */
    __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(tiny, normal, sub));
}

/* ---- 32-element blocks with Q8_0 / Q8_1 activations ---- */

/* Q8_0 rows (2k, 2k+1), block b, as unsigned bytes w + 128. */
static inline __m512i w32_pair(const uint8_t *ra, const uint8_t *rb, int64_t b)
{
    const uint8_t *a = ra + b * 34 + 2, *c = rb + b * 34 + 2;
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                                   _mm256_loadu_si256((const __m256i *)c), 1);
    return _mm512_xor_si512(z, _mm512_set1_epi8((char)0x80));
}

static inline __m512 w32_scale(uint32_t type, const rowset *rs, const uint8_t *const *rows, int64_t b)
{
    switch (type) {
    case GGML_TYPE_Q8_0: return load_h16(rs, (size_t)b * 34);
    case GGML_TYPE_Q4_0: case GGML_TYPE_IQ4_NL: return load_h16(rs, (size_t)b * 18);
    case GGML_TYPE_Q4_1: return load_h16(rs, (size_t)b * 20);
    case GGML_TYPE_Q5_0: return load_h16(rs, (size_t)b * 22);
    case GGML_TYPE_Q5_1: return load_h16(rs, (size_t)b * 24);
    default: (void)rows; return load_e8m0_half(rs, (size_t)b * 17);
    }
}

static inline int w32_off(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return 8;
    case GGML_TYPE_Q5_0: return 16;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: return 0;
    default: return 128;
    }
}

/* Nibble types, 4 rows per vector: 128-lane j holds row 4q+j.  LO = the 16
 * low nibbles (elements 0-15), HI = the high ones (16-31), already mapped to
 * unsigned weight bytes (w + off). */
static inline __m512i quad16(const uint8_t *const *r4, size_t off)
{
    __m512i x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r4[0] + off)));
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(r4[1] + off)), 1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(r4[2] + off)), 2);
    return _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(r4[3] + off)), 3);
}

/* 5th bits of 4 rows: bits 0-15 of each qh word for LO, 16-31 for HI. */
static inline void quad_hbits(const uint8_t *const *r4, size_t off, __mmask64 *lo, __mmask64 *hi)
{
    uint64_t l = 0, h = 0;
    #pragma GCC unroll 16
    for (int j = 0; j < 4; j++) {
        uint32_t q;
        memcpy(&q, r4[j] + off, 4);
        l |= (uint64_t)(q & 0xffff) << (16 * j);
        h |= (uint64_t)(q >> 16) << (16 * j);
    }
    *lo = _cvtu64_mask64(l), *hi = _cvtu64_mask64(h);
}

static inline void w32_quad(uint32_t type, const uint8_t *const *r4, int64_t b, __m512i *lo, __m512i *hi)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    size_t bs = type == GGML_TYPE_Q4_1 ? 20 : type == GGML_TYPE_Q5_0 ? 22 : type == GGML_TYPE_Q5_1 ? 24
              : type == GGML_TYPE_MXFP4 ? 17 : 18;
    size_t qo = type == GGML_TYPE_Q4_1 ? 4 : type == GGML_TYPE_Q5_0 ? 6 : type == GGML_TYPE_Q5_1 ? 8
              : type == GGML_TYPE_MXFP4 ? 1 : 2;
    __m512i x = quad16(r4, (size_t)b * bs + qo);
    *lo = _mm512_and_si512(x, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
    if (type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1) {
        __mmask64 ml, mh;
        quad_hbits(r4, (size_t)b * bs + (type == GGML_TYPE_Q5_0 ? 2 : 4), &ml, &mh);
        *lo = _mm512_mask_add_epi8(*lo, ml, *lo, _mm512_set1_epi8(0x10));
        *hi = _mm512_mask_add_epi8(*hi, mh, *hi, _mm512_set1_epi8(0x10));
    } else if (type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_MXFP4) {
        const __m512i tab = type == GGML_TYPE_IQ4_NL
            ? _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141, (char)153,
                                                   (char)166, (char)181, (char)197, (char)217, (char)241))
            : _mm512_broadcast_i32x4(_mm_setr_epi8((char)128, (char)129, (char)130, (char)131, (char)132, (char)134,
                                                   (char)136, (char)140, (char)128, 127, 126, 125, 124, 122, 120, 116));
        *lo = _mm512_shuffle_epi8(tab, *lo);
        *hi = _mm512_shuffle_epi8(tab, *hi);
    }
}

/* z[q]: 128-lane j = 4 partial sums of row 4q+j.  Returns the 16 row totals. */
static inline __m512i red_quads(const __m512i *z)
{
    __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
    __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
    __m512i w = _mm512_add_epi32(_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1));
    /* 128-lane j of w: rows j, 4+j, 8+j, 12+j */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(idx, w);
}

static inline float h2f(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Activation-side work is done per block inside the group loop (a few ops
 * per 16 rows), so a call costs nothing per token beyond its products and
 * small row ranges stay cheap. */
static inline __attribute__((always_inline)) void
q32_group(uint32_t type, int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m512 *acc, int pf)
{
    int q81 = type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
    size_t bsz = q81 ? 36 : 34, qoff = q81 ? 4 : 2;
    rowset rs = rowset_make(rows);
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    size_t wsz = type == GGML_TYPE_Q8_0 ? 34 : type == GGML_TYPE_Q4_1 ? 20 : type == GGML_TYPE_Q5_0 ? 22
               : type == GGML_TYPE_Q5_1 ? 24 : type == GGML_TYPE_MXFP4 ? 17 : 18;
    const int off = w32_off(type);
    const __m512i offv = _mm512_set1_epi8((char)off);
    int quad = type != GGML_TYPE_Q8_0;
    for (int64_t b = 0; b < nb; b++) {
        __m512i wv[8];
        if (quad)
#pragma GCC unroll 16
            for (int q = 0; q < 4; q++) {
                if (pf) prefetch_next(rows, b, wsz, q, 4);
                w32_quad(type, rows + 4 * q, b, &wv[2 * q], &wv[2 * q + 1]);
            }
        else
#pragma GCC unroll 16
            for (int k = 0; k < 8; k++) {
                if (pf) prefetch_next(rows, b, wsz, k, 8);
                if (pf) prefetch_ahead_l1(rows, b, wsz, 2 * k, 2 * k + 2);
                wv[k] = w32_pair(rows[2 * k], rows[2 * k + 1], b);
            }
        __m512 dw = w32_scale(type, &rs, rows, b);
        __m512 mw = _mm512_setzero_ps();
        if (q81) mw = load_h16(&rs, (size_t)b * (type == GGML_TYPE_Q4_1 ? 20 : 24) + 2);
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            const uint8_t *ab = (const uint8_t *)x->data + (size_t)t * x->row_bytes + (size_t)b * bsz;
            __m512i s;
            if (quad) {
                __m512i alo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(ab + qoff)));
                __m512i ahi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(ab + qoff + 16)));
                /* start from -off * a lane by lane: the offset never reaches the sum */
                __m512i c0 = _mm512_setzero_si512();
                if (off)
                    c0 = _mm512_sub_epi32(c0, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c0, offv, alo), offv, ahi));
                __m512i z[4];
#pragma GCC unroll 16
                for (int q = 0; q < 4; q++) z[q] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c0, wv[2 * q], alo), wv[2 * q + 1], ahi);
                s = red_quads(z);
            } else {
                __m512i av = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(ab + qoff)));
                __m512i c0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offv, av));
                __m512i p[8];
#pragma GCC unroll 16
                for (int k = 0; k < 8; k++) p[k] = _mm512_dpbusd_epi32(c0, wv[k], av);
                s = red_pairs(p);
            }
            __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(h2f(ab)));
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc[t]);
            if (q81) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(h2f(ab + 2)), acc[t]);
        }
    }
}

#define Q32_KERNEL(NAME, TYPE) \
    static void NAME(int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m512 *acc, int pf) \
    { TILE_SWITCH(nt, TT, q32_group, TYPE, rows, x, nb, acc, pf); }
Q32_KERNEL(k_q8_0, GGML_TYPE_Q8_0)
Q32_KERNEL(k_q4_0, GGML_TYPE_Q4_0)
Q32_KERNEL(k_q4_1, GGML_TYPE_Q4_1)
Q32_KERNEL(k_q5_0, GGML_TYPE_Q5_0)
Q32_KERNEL(k_q5_1, GGML_TYPE_Q5_1)
Q32_KERNEL(k_iq4_nl, GGML_TYPE_IQ4_NL)
Q32_KERNEL(k_mxfp4, GGML_TYPE_MXFP4)

typedef void (*q32_fn)(int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m512 *acc, int pf);

static int rows_q32(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    q32_fn fn;
    switch (w->type) {
    case GGML_TYPE_Q8_0: fn = k_q8_0; break;
    case GGML_TYPE_Q4_0: fn = k_q4_0; break;
    case GGML_TYPE_Q4_1: fn = k_q4_1; break;
    case GGML_TYPE_Q5_0: fn = k_q5_0; break;
    case GGML_TYPE_Q5_1: fn = k_q5_1; break;
    case GGML_TYPE_IQ4_NL: fn = k_iq4_nl; break;
    default: fn = k_mxfp4; break;
    }
    int64_t nb = w->ne0 / 32;
    /* blocking: chunks of rows whose weights fit in L2, blocks of TB tokens
     * whose activations fit in L2, then row groups and token tiles (a
     * group's weights stay in L1 across tiles) */
    int64_t chunk = kq_row_chunk(w);
    for (int64_t c0 = r0; c0 < r1; c0 += chunk)
    for (int64_t tb = 0; tb < x->rows; tb += TB)
    for (int64_t r = c0; r < (c0 + chunk < r1 ? c0 + chunk : r1); r += 16) {
        const uint8_t *rows[16];
        int nv = kq_group_rows(w, r, r1, rows);
        int64_t te = tb + TB < x->rows ? tb + TB : x->rows;
        for (int64_t t0 = tb; t0 < te; t0 += TT) {
            int nt = (int)(te - t0 < TT ? te - t0 : TT);
            sl_act xt = *x;
            xt.data = (char *)x->data + (size_t)t0 * x->row_bytes;
            __m512 acc[TT];
            fn(nt, rows, &xt, nb, acc, t0 == 0); /* later tiles find the chunk in L2 */
            store_group(y + (size_t)t0 * y_stride, y_stride, r, nt, nv, acc);
        }
    }
    return 1;
}

/* ---- K-quants with Q8_K activations ---- */

/* sum_k dpwssd(maddubs(v[k], a[64k..]), scv[k]): 256 elements of one row. */
static inline __m512i dot4(const __m512i *v, const __m512i *scv, const int8_t *a)
{
    __m512i acc = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(v[0], _mm512_loadu_si512(a)), scv[0]);
    #pragma GCC unroll 16
    for (int k = 1; k < 4; k++) acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(v[k], _mm512_loadu_si512(a + 64 * k)), scv[k]);
    return acc;
}

/* The kernels read each token's Q8_K block directly (natural element order):
 * a call has no per-token setup, so small row ranges stay cheap. */
typedef const blk_q8_K *kact; /* one token's block b */

static inline void kact_fill(kact *ak, const sl_act *x, int nt, int64_t b)
{
    for (int t = 0; t < nt; t++) ak[t] = (const blk_q8_K *)((const char *)x->data + (size_t)t * x->row_bytes) + b;
}

/* Q4_K / Q5_K scales and mins of 16 rows at once (lanes = rows), from the
 * 12 packed bytes at +4: per row, sc 0-3 / 4-7 and mins 0-3 / 4-7 as bytes. */
typedef struct {
    __m512i ab_lo, ab_hi; /* qwords (sc0-3 | sc4-7 << 32): rows 4j,4j+1 | 4j+2,4j+3 in 128-lane j */
    __m512i c, dd;        /* mins 0-3, 4-7 (bytes), lanes = rows */
} k4sc;

static inline k4sc k4_scales16(const rowset *rs, size_t boff)
{
    __m512i u0 = _mm512_i32gather_epi32(rs->idx, (const void *)(rs->base + boff + 4), 1);
    __m512i u1 = _mm512_i32gather_epi32(rs->idx, (const void *)(rs->base + boff + 8), 1);
    __m512i u2 = _mm512_i32gather_epi32(rs->idx, (const void *)(rs->base + boff + 12), 1);
    const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i m2 = _mm512_set1_epi32(0x03030303);
    __m512i a = _mm512_and_si512(u0, m6);
    __m512i b = _mm512_or_si512(_mm512_and_si512(u2, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), m2), 4));
    k4sc k;
    k.c = _mm512_and_si512(u1, m6);
    k.dd = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), m2), 4));
    k.ab_lo = _mm512_unpacklo_epi32(a, b);
    k.ab_hi = _mm512_unpackhi_epi32(a, b);
    return k;
}

/* The 8 scale bytes of row i broadcast to every qword. */
static inline __m512i k4_bcast(const k4sc *k, int i)
{
    int q = 2 * (i / 4) + (i % 2) + ((i % 4) >= 2 ? 8 : 0);
    return _mm512_permutex2var_epi64(k->ab_lo, _mm512_set1_epi64(q), k->ab_hi);
}

/* M = sum_j min_j * (sum of the 32 activations of sub-block j), lanes = rows. */
static inline __m512i k4_mins(const k4sc *k, const int16_t *bs)
{
    const __m512i lo = _mm512_set1_epi32(0x00ff00ff);
    int16_t bs8[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) bs8[j] = (int16_t)(bs[2 * j] + bs[2 * j + 1]);
    int32_t p[4];
    #pragma GCC unroll 16
    for (int j = 0; j < 2; j++) {
        p[2 * j] = (int32_t)((uint16_t)bs8[4 * j] | (uint32_t)(uint16_t)bs8[4 * j + 2] << 16);
        p[2 * j + 1] = (int32_t)((uint16_t)bs8[4 * j + 1] | (uint32_t)(uint16_t)bs8[4 * j + 3] << 16);
    }
    __m512i m = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_and_si512(k->c, lo), _mm512_set1_epi32(p[0]));
    m = _mm512_dpwssd_epi32(m, _mm512_and_si512(_mm512_srli_epi32(k->c, 8), lo), _mm512_set1_epi32(p[1]));
    m = _mm512_dpwssd_epi32(m, _mm512_and_si512(k->dd, lo), _mm512_set1_epi32(p[2]));
    return _mm512_dpwssd_epi32(m, _mm512_and_si512(_mm512_srli_epi32(k->dd, 8), lo), _mm512_set1_epi32(p[3]));
}

/* Scale vectors for maddubs output (32 int16 lanes = 64 elements): lanes
 * 0-15 take sc[i0], lanes 16-31 sc[i1]; one byte shuffle of the broadcast
 * scale bytes (zeros for the high bytes). */
static inline __m512i sc_pair(__m512i bc, int i0, int i1)
{
    __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(0x8000 | i0)), _mm256_set1_epi16((short)(0x8000 | i1)), 1);
    return _mm512_shuffle_epi8(bc, idx);
}

/* One superblock of Q4_K / Q5_K for one row: integer S partials per token. */
static inline __attribute__((always_inline)) void
k45_row(int five, int nt, const uint8_t *blk, __m512i bc, const kact *ak, __m512i *s)
{
    const uint8_t *qs = blk + (five ? 48 : 16);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i v[4]; /* v[c] = elements 64c..64c+63: low nibbles of qs[32c..], then high */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        v[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
    }
    if (five) { /* bit j of qh[l] is the 5th bit of element 32j + l */
        __m256i h = _mm256_loadu_si256((const __m256i *)(blk + 16));
        __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i bitsel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))),
                                                _mm256_set1_epi8((char)(1 << (2 * c + 1))), 1);
            v[c] = _mm512_mask_add_epi8(v[c], _mm512_test_epi8_mask(hh, bitsel), v[c], _mm512_set1_epi8(0x10));
        }
    }
    __m512i scv[4] = {sc_pair(bc, 0, 1), sc_pair(bc, 2, 3), sc_pair(bc, 4, 5), sc_pair(bc, 6, 7)};
    #pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        s[16 * t] = dot4(v, scv, ak[t]->qs);
    }
}

static inline __attribute__((always_inline)) void
k45_group(int five, int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m512i *s, __m512 *acc, int pf)
{
    size_t bsz = five ? 176 : 144;
    rowset rs = rowset_make(rows);
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        k4sc k = k4_scales16(&rs, (size_t)b * bsz);
        kact ak[TTK];
        kact_fill(ak, x, nt, b);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (pf) prefetch_next(rows, b, bsz, i, 16);
            if (pf) prefetch_ahead_l1(rows, b, bsz, i, i + 1);
            k45_row(five, nt, rows[i] + (size_t)b * bsz, k4_bcast(&k, i), ak, s + i);
        }
        __m512 dw = load_h16(&rs, (size_t)b * bsz), dmin = load_h16(&rs, (size_t)b * bsz + 2);
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            __m512 da = _mm512_set1_ps(ak[t]->d);
            __m512i S = red16(s + 16 * t), M = k4_mins(&k, ak[t]->bsums);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(da, dw), _mm512_cvtepi32_ps(S), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(da, dmin), _mm512_cvtepi32_ps(M), acc[t]);
        }
    }
}

#define K45_KERNEL(NAME, FIVE) \
    static void NAME(int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m512i *s, __m512 *acc, int pf) \
    { TILE_SWITCH8(nt, k45_group, FIVE, rows, x, nb, s, acc, pf); }
K45_KERNEL(k_q4k, 0)
K45_KERNEL(k_q5k, 1)

/* Q6_K: S = sum_g sc_g * sum (v - 32) a, with v = 6-bit unsigned. */
/* 16-element-group types: scale vectors for the 4 maddubs outputs of a
 * superblock (vector k covers groups 4k..4k+3, 8 int16 lanes each). */
static inline void g16_scv(__m512i sc16, __m512i *scv)
{
    static const int16_t base[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    __m512i bi = _mm512_loadu_si512(base);
    #pragma GCC unroll 16
    for (int k = 0; k < 4; k++)
        scv[k] = _mm512_permutexvar_epi16(_mm512_add_epi16(bi, _mm512_set1_epi16((short)(4 * k))), sc16);
}

/* 2-bit quants of 64 bytes (ggml Q2_K/Q3_K layout) to 4 vectors of 64
 * elements in natural order: chunk n, shifts 2j for the two 32-element halves. */
static inline void q2_planes(const uint8_t *qs, __m512i *v)
{
    const __m512i m3 = _mm512_set1_epi8(3);
    #pragma GCC unroll 16
    for (int n = 0; n < 2; n++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * n));
        __m512i qq = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
        v[2 * n] = _mm512_and_si512(_mm512_srlv_epi16(qq, _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1)), m3);
        v[2 * n + 1] = _mm512_and_si512(_mm512_srlv_epi16(qq, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1)), m3);
    }
}


static inline void q6k_row(const uint8_t *blk, int nt, const kact *ak, __m512i *s)
{
    const blk_q6_K *q = (const blk_q6_K *)blk;
    __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)q->scales)));
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    __m512i v[4], scv[4];
    #pragma GCC unroll 16
    for (int c = 0; c < 2; c++) {
        __m512i ql = _mm512_loadu_si512(q->ql + 64 * c);
        __m256i h = _mm256_loadu_si256((const __m256i *)(q->qh + 32 * c));
        __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
        /* k = 0 | 1: qh bits 0-1 | 2-3 to bits 4-5;  k = 2 | 3: bits 4-5 | 6-7 */
        __m512i h01 = _mm512_and_si512(_mm512_sllv_epi16(hh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1)), m30);
        __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(hh, _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1)), m30);
        v[2 * c] = _mm512_or_si512(_mm512_and_si512(ql, m4), h01);
        v[2 * c + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h23);
        /* 8 int16 lanes per 16-element group: groups 8c..8c+3, then 8c+4..8c+7 */
        static const int16_t base[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
        __m512i bi = _mm512_loadu_si512(base);
        scv[2 * c] = _mm512_permutexvar_epi16(_mm512_add_epi16(bi, _mm512_set1_epi16((short)(8 * c))), sc16);
        scv[2 * c + 1] = _mm512_permutexvar_epi16(_mm512_add_epi16(bi, _mm512_set1_epi16((short)(8 * c + 4))), sc16);
    }
    __m256i scm = _mm256_slli_epi16(_mm512_castsi512_si256(sc16), 5); /* 32 * sc */
    #pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        __m256i corr = _mm256_madd_epi16(scm, _mm256_loadu_si256((const __m256i *)ak[t]->bsums));
        s[16 * t] = _mm512_sub_epi32(dot4(v, scv, ak[t]->qs), _mm512_zextsi256_si512(corr));
    }
}


static inline void q2k_row(const uint8_t *blk, int nt, const kact *ak, __m512i *s)
{
    __m128i sc = _mm_loadu_si128((const __m128i *)blk);
    __m512i scv[4], v[4];
    g16_scv(_mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(0x0f)))), scv);
    q2_planes(blk + 16, v);
    #pragma GCC unroll 16
    for (int t = 0; t < nt; t++) s[16 * t] = dot4(v, scv, ak[t]->qs);
}

/* Q2_K mins of 16 rows: M = sum_g (scales[g] >> 4) * bsums[g], lanes = rows. */
static inline __m512i q2k_mins(const rowset *rs, size_t boff, const int16_t *bs)
{
    const __m512i lo = _mm512_set1_epi32(0x00ff00ff), m4 = _mm512_set1_epi32(0x0f0f0f0f);
    __m512i m = _mm512_setzero_si512();
    #pragma GCC unroll 16
    for (int q = 0; q < 4; q++) {
        __m512i u = _mm512_i32gather_epi32(rs->idx, (const void *)(rs->base + boff + 4 * (size_t)q), 1);
        u = _mm512_and_si512(_mm512_srli_epi32(u, 4), m4); /* mins of groups 4q..4q+3 as bytes */
        int32_t p0 = (int32_t)((uint16_t)bs[4 * q] | (uint32_t)(uint16_t)bs[4 * q + 2] << 16);
        int32_t p1 = (int32_t)((uint16_t)bs[4 * q + 1] | (uint32_t)(uint16_t)bs[4 * q + 3] << 16);
        m = _mm512_dpwssd_epi32(m, _mm512_and_si512(u, lo), _mm512_set1_epi32(p0));
        m = _mm512_dpwssd_epi32(m, _mm512_and_si512(_mm512_srli_epi32(u, 8), lo), _mm512_set1_epi32(p1));
    }
    return m;
}

/* Q3_K: v = 2-bit + 4*hbit in 0..7, S = sum sc (v - 4) a = raw - 4 sum sc bsum. */
static inline void q3k_row(const uint8_t *blk, int nt, const kact *ak, __m512i *s)
{
    __m128i x = _mm_loadl_epi64((const __m128i *)(blk + 96));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
    uint32_t y;
    memcpy(&y, blk + 104, 4);
    __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)y), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    __m256i sc16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4))), _mm256_set1_epi16(32));
    __m512i scv[4], v[4];
    g16_scv(_mm512_castsi256_si512(sc16), scv);
    q2_planes(blk + 32, v);
    __m256i h = _mm256_loadu_si256((const __m256i *)blk);
    __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
    #pragma GCC unroll 16
    for (int k = 0; k < 4; k++) { /* vector k: hmask bits 2k (low half), 2k+1 (high half) */
        __m512i bitsel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * k))), _mm256_set1_epi8((char)(1 << (2 * k + 1))), 1);
        v[k] = _mm512_mask_add_epi8(v[k], _mm512_test_epi8_mask(hh, bitsel), v[k], _mm512_set1_epi8(4));
    }
    __m256i sc4 = _mm256_slli_epi16(sc16, 2);
    #pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        __m256i corr = _mm256_madd_epi16(sc4, _mm256_loadu_si256((const __m256i *)ak[t]->bsums));
        s[16 * t] = _mm512_sub_epi32(dot4(v, scv, ak[t]->qs), _mm512_zextsi256_si512(corr));
    }
}

/* IQ4_XS: |kv| times sign-adjusted activations (maddubs cannot take 8-bit
 * signed weights), scales ls - 32 per 32-element sub-block. */
/* IQ4_XS: |kv| times sign-adjusted activations (maddubs cannot take 8-bit
 * signed weights), scales ls - 32 per 32-element sub-block.  Vector c holds
 * sub-blocks 2c, 2c+1 in element order. */
static inline void iq4xs_row(const uint8_t *blk, int nt, const kact *ak, __m512i *s)
{
    uint16_t sh;
    uint32_t sl;
    memcpy(&sh, blk + 2, 2);
    memcpy(&sl, blk + 4, 4);
    uint64_t ls = _pdep_u64(sl, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(sh, 0x3030303030303030ull);
    __m512i bc = _mm512_set1_epi64((long long)ls);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)KV_IQ4NL));
    const __m512i m4 = _mm512_set1_epi8(0x0f), c32 = _mm512_set1_epi16(32);
    __m512i scv[4], kv[4];
    __mmask64 neg[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        scv[c] = _mm512_sub_epi16(sc_pair(bc, 2 * c, 2 * c + 1), c32);
        __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 8 + 32 * c));
        __m512i z = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
        z = _mm512_shuffle_i32x4(z, z, _MM_SHUFFLE(3, 1, 2, 0)); /* lo0 hi0 lo1 hi1 */
        kv[c] = _mm512_shuffle_epi8(tab, z);
        neg[c] = _mm512_movepi8_mask(kv[c]);
        kv[c] = _mm512_abs_epi8(kv[c]);
    }
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i a = _mm512_loadu_si512(ak[t]->qs + 64 * c);
            a = _mm512_mask_sub_epi8(a, neg[c], _mm512_setzero_si512(), a);
            acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(kv[c], a), scv[c]);
        }
        s[16 * t] = acc;
    }
}

static inline __attribute__((always_inline)) void
g16_group(uint32_t type, int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m512i *s, __m512 *acc, int pf)
{
    size_t bsz = ggml_type_get(type)->type_size;
    rowset rs = rowset_make(rows);
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        kact ak[TTK];
        kact_fill(ak, x, nt, b);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (pf) prefetch_next(rows, b, bsz, i, 16);
            if (pf && type == GGML_TYPE_Q6_K) prefetch_ahead_l1(rows, b, bsz, i, i + 1);
            const uint8_t *blk = rows[i] + (size_t)b * bsz;
            switch (type) {
            case GGML_TYPE_Q2_K: q2k_row(blk, nt, ak, s + i); break;
            case GGML_TYPE_Q3_K: q3k_row(blk, nt, ak, s + i); break;
            case GGML_TYPE_IQ4_XS: iq4xs_row(blk, nt, ak, s + i); break;
            default: q6k_row(blk, nt, ak, s + i); break;
            }
        }
        __m512 dw = type == GGML_TYPE_IQ4_XS ? load_h16(&rs, (size_t)b * bsz)
                    : load_h16_end(&rs, (size_t)b * bsz + (type == GGML_TYPE_Q2_K ? 80 : bsz - 2));
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            __m512 da = _mm512_set1_ps(ak[t]->d);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(da, dw), _mm512_cvtepi32_ps(red16(s + 16 * t)), acc[t]);
            if (type == GGML_TYPE_Q2_K) {
                __m512 dmin = load_h16_end(&rs, (size_t)b * bsz + 82);
                __m512i M = q2k_mins(&rs, (size_t)b * bsz, ak[t]->bsums);
                acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(da, dmin), _mm512_cvtepi32_ps(M), acc[t]);
            }
        }
    }
}

#define G16_KERNEL(NAME, TYPE) \
    static void NAME(int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m512i *s, __m512 *acc, int pf) \
    { TILE_SWITCH8(nt, g16_group, TYPE, rows, x, nb, s, acc, pf); }
G16_KERNEL(k_q2k, GGML_TYPE_Q2_K)
G16_KERNEL(k_q3k, GGML_TYPE_Q3_K)
G16_KERNEL(k_q6k, GGML_TYPE_Q6_K)
G16_KERNEL(k_iq4xs, GGML_TYPE_IQ4_XS)

static int rows_k(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    void (*fn)(int, const uint8_t *const *, const sl_act *, int64_t, __m512i *, __m512 *, int);
    switch (w->type) {
    case GGML_TYPE_Q2_K: fn = k_q2k; break;
    case GGML_TYPE_Q3_K: fn = k_q3k; break;
    case GGML_TYPE_Q4_K: fn = k_q4k; break;
    case GGML_TYPE_Q5_K: fn = k_q5k; break;
    case GGML_TYPE_Q6_K: fn = k_q6k; break;
    default: fn = k_iq4xs; break;
    }
    int64_t nb = w->ne0 / 256;
    __m512i s[16 * TTK]; /* per-row integer partials of one superblock */
    int64_t chunk = kq_row_chunk(w); /* blocking as in rows_q32 */
    for (int64_t c0 = r0; c0 < r1; c0 += chunk)
    for (int64_t tb = 0; tb < x->rows; tb += TB)
    for (int64_t r = c0; r < (c0 + chunk < r1 ? c0 + chunk : r1); r += 16) {
        const uint8_t *rows[16];
        int nv = kq_group_rows(w, r, r1, rows);
        int64_t te = tb + TB < x->rows ? tb + TB : x->rows;
        for (int64_t t0 = tb; t0 < te; t0 += TTK) {
            int nt = (int)(te - t0 < TTK ? te - t0 : TTK);
            sl_act xt = *x;
            xt.data = (char *)x->data + (size_t)t0 * x->row_bytes;
            __m512 acc[TTK];
            fn(nt, rows, &xt, nb, s, acc, t0 == 0);
            store_group(y + (size_t)t0 * y_stride, y_stride, r, nt, nv, acc);
        }
    }
    return 1;
}

/* ---- float weights: 16 lanes (element i in lane i%16), fixed tree ---- */

static inline __m512 ld_w(uint32_t type, const uint8_t *p, int64_t i)
{
    switch (type) {
    case GGML_TYPE_F32: return _mm512_loadu_ps((const float *)p + i);
    case GGML_TYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
    default:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i))), 16));
    }
}

static inline __m512 ld_w_tail(uint32_t type, const uint8_t *p, int64_t i, __mmask16 m)
{
    switch (type) {
    case GGML_TYPE_F32: return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    case GGML_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    default:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i)), 16));
    }
}

#define FR 4 /* rows per float tile */
#define FT 4 /* tokens per float tile */

/* FR rows x NT tokens, one canonical 16-lane accumulator per element; each
 * weight vector is loaded once and used for NT tokens.  Activations are in
 * the weight's type (F16/BF16 widen exactly), converted as they are loaded,
 * so a call has no per-token setup. */
static inline __attribute__((always_inline)) void
float_tile(uint32_t type, int nt, const uint8_t *const *rows, const uint8_t *const *xs, int64_t n, float *out /* [FT][FR] */)
{
    __m512 acc[FT][FR];
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 16
        for (int r = 0; r < FR; r++) acc[t][r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 wv[FR];
#pragma GCC unroll 16
        for (int r = 0; r < FR; r++) wv[r] = ld_w(type, rows[r], i);
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            __m512 xv = ld_w(type, xs[t], i);
#pragma GCC unroll 16
            for (int r = 0; r < FR; r++) acc[t][r] = _mm512_fmadd_ps(wv[r], xv, acc[t][r]);
        }
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            __m512 xv = ld_w_tail(type, xs[t], i, m);
#pragma GCC unroll 16
            for (int r = 0; r < FR; r++) acc[t][r] = _mm512_mask3_fmadd_ps(ld_w_tail(type, rows[r], i, m), xv, acc[t][r], m);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 16
        for (int r = 0; r < FR; r++) out[t * FR + r] = hsum_tree16(acc[t][r]);
}

#define FLOAT_KERNEL(NAME, TYPE) \
    static void NAME(int nt, const uint8_t *const *rows, const uint8_t *const *xs, int64_t n, float *out) \
    { TILE_SWITCH(nt, FT, float_tile, TYPE, rows, xs, n, out); }
FLOAT_KERNEL(k_f32, GGML_TYPE_F32)
FLOAT_KERNEL(k_f16, GGML_TYPE_F16)

typedef void (*tile_fn)(int nt, const uint8_t *const *rows, const uint8_t *const *xs, int64_t n, float *out);

/* Row chunks that stay in L2, token tiles of FT, row tiles of FR. */
static int rows_tiled(tile_fn fn, const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    int64_t n = w->ne0, T = x->rows;
    int64_t chunk = (int64_t)(262144 / (w->row_bytes ? w->row_bytes : 1)) & ~(int64_t)(FR - 1);
    if (chunk < FR) chunk = FR;
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        for (int64_t t0 = 0; t0 < T; t0 += FT) {
            int nt = (int)(T - t0 < FT ? T - t0 : FT);
            const uint8_t *xs[FT];
            for (int t = 0; t < nt; t++) xs[t] = (const uint8_t *)x->data + (size_t)(t0 + t) * x->row_bytes;
            for (int64_t r = c0; r < c1; r += FR) {
                const uint8_t *rows[FR];
                int nv = (int)(c1 - r < FR ? c1 - r : FR);
                for (int i = 0; i < FR; i++)
                    rows[i] = (const uint8_t *)w->data + (size_t)(r + (i < nv ? i : nv - 1)) * w->row_bytes;
                float out[FT * FR];
                fn(nt, rows, xs, n, out);
                for (int t = 0; t < nt; t++)
                    for (int i = 0; i < nv; i++) y[(size_t)(t0 + t) * y_stride + (size_t)(r + i)] = out[t * FR + i];
            }
        }
    }
    return 1;
}

static int rows_float(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    return rows_tiled(w->type == GGML_TYPE_F32 ? k_f32 : k_f16, w, x, y, y_stride, r0, r1);
}

/* ---- ggml's other float orders ---- */

/* F16, ggml vec_dot order: 4 accumulators x 16 lanes over 64-element steps. */
static float f16_vd_dot(const uint16_t *x, const uint16_t *y, int64_t n)
{
    __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t np = n & ~(int64_t)63, i = 0;
    for (; i < np; i += 64)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            s[j] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16 * j))),
                                   _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 16 * j))), s[j]);
    __m512 l = _mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3]));
    double sum = (double)hsum_tree16(l);
    for (; i < n; i++) sum += (double)(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
    return (float)sum;
}

static int rows_f16_vd(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < x->rows; t++) {
        const uint16_t *xa = (const uint16_t *)((const char *)x->data + (size_t)t * x->row_bytes);
        for (int64_t r = r0; r < r1; r++)
            y[(size_t)t * y_stride + (size_t)r] =
                f16_vd_dot((const uint16_t *)((const char *)w->data + (size_t)r * w->row_bytes), xa, w->ne0);
    }
    return 1;
}

/* VDPBF16PS emulated with FMAs (bit-exact, and independent of the CPU having
 * AVX512_BF16): inputs with a zero exponent count as signed zero, each lane
 * adds its odd product then its even one, results with a zero exponent flush
 * to signed zero. */
static inline __m512 daz_ftz(__m512 v)
{
    __mmask16 normal = _mm512_test_epi32_mask(_mm512_castps_si512(v), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), normal, v);
}

/* 32 bf16 values (masked to the first m) as even and odd f32 lanes, DAZ. */
static inline void bf16_split(const uint16_t *p, __mmask32 m, __m512 *ev, __m512 *od)
{
    __m512i v = _mm512_maskz_loadu_epi16(m, p);
    *ev = daz_ftz(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    *od = daz_ftz(_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u))));
}

static inline __m512 dpbf16(__m512 acc, __m512 xe, __m512 xo, __m512 ye, __m512 yo)
{
    acc = daz_ftz(_mm512_fmadd_ps(xo, yo, acc));
    return daz_ftz(_mm512_fmadd_ps(xe, ye, acc));
}

static inline __mmask32 mask32(int64_t left)
{
    return left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1);
}

/* One dpbf16 step: the instruction when the CPU has it, else its emulation
 * (both give the scalar path's bits; the oracle test checks the instruction
 * against ggml). */
static inline __m512 dp_step(int insn, __m512 acc, const uint16_t *w, const uint16_t *x, __mmask32 m)
{
    if (insn)
        return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_maskz_loadu_epi16(m, w), (__m512bh)_mm512_maskz_loadu_epi16(m, x));
    __m512 we, wo, xe, xo;
    bf16_split(w, m, &we, &wo);
    bf16_split(x, m, &xe, &xo);
    return dpbf16(acc, we, wo, xe, xo);
}

/* FR rows x NT tokens of BF16 in sgemm order (one accumulator per element,
 * 32-element steps, zero padding) or vec_dot order (two accumulators over
 * 64-element steps, double tail). */
static inline __attribute__((always_inline)) void
bf16_tile(int insn, int vd, int nt, const uint8_t *const *rows, const uint8_t *const *xs, int64_t n, float *out)
{
    __m512 c1[FT][FR], c2[FT][FR];
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 16
        for (int r = 0; r < FR; r++) c1[t][r] = c2[t][r] = _mm512_setzero_ps();
    int64_t i = 0;
    if (!vd) {
        for (; i < n; i += 32) {
            __mmask32 m = mask32(n - i);
#pragma GCC unroll 16
            for (int t = 0; t < nt; t++)
#pragma GCC unroll 16
                for (int r = 0; r < FR; r++)
                    c1[t][r] = dp_step(insn, c1[t][r], (const uint16_t *)rows[r] + i, (const uint16_t *)xs[t] + i, m);
        }
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++)
#pragma GCC unroll 16
            for (int r = 0; r < FR; r++) out[t * FR + r] = hsum_tree16(c1[t][r]);
        return;
    }
    for (; i + 64 <= n; i += 64)
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++)
#pragma GCC unroll 16
            for (int r = 0; r < FR; r++) {
                const uint16_t *w = (const uint16_t *)rows[r] + i, *x = (const uint16_t *)xs[t] + i;
                c1[t][r] = dp_step(insn, c1[t][r], w, x, 0xffffffffu);
                c2[t][r] = dp_step(insn, c2[t][r], w + 32, x + 32, 0xffffffffu);
            }
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 16
        for (int r = 0; r < FR; r++) {
            double sum = 0.0;
            sum += (double)hsum_tree16(c1[t][r]);
            sum += (double)hsum_tree16(c2[t][r]);
            const uint16_t *w = (const uint16_t *)rows[r], *x = (const uint16_t *)xs[t];
            for (int64_t k = i; k < n; k++) sum += (double)(bf16_to_fp32(w[k]) * bf16_to_fp32(x[k]));
            out[t * FR + r] = (float)sum;
        }
}

#define BF16_KERNEL(NAME, INSN, VD)                                                                       \
    static void NAME(int nt, const uint8_t *const *rows, const uint8_t *const *xs, int64_t n, float *out) \
    {                                                                                                     \
        switch (nt) {                                                                                     \
        case 1: bf16_tile(INSN, VD, 1, rows, xs, n, out); break;                                          \
        case 2: bf16_tile(INSN, VD, 2, rows, xs, n, out); break;                                          \
        case 3: bf16_tile(INSN, VD, 3, rows, xs, n, out); break;                                          \
        default: bf16_tile(INSN, VD, 4, rows, xs, n, out); break;                                         \
        }                                                                                                 \
    }
BF16_KERNEL(k_bf16_sg_i, 1, 0)
BF16_KERNEL(k_bf16_vd_i, 1, 1)
BF16_KERNEL(k_bf16_sg_e, 0, 0)
BF16_KERNEL(k_bf16_vd_e, 0, 1)

int kq_rows_bf16_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1, int insn)
{
    int vd = w->order == SL_ORDER_VEC_DOT;
    void (*fn)(int, const uint8_t *const *, const uint8_t *const *, int64_t, float *) =
        insn ? (vd ? k_bf16_vd_i : k_bf16_sg_i) : (vd ? k_bf16_vd_e : k_bf16_sg_e);
    return rows_tiled(fn, w, x, y, y_stride, r0, r1);
}

int kq_rows_avx512(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    switch (w->type) {
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
    case GGML_TYPE_IQ4_NL: case GGML_TYPE_MXFP4:
        return rows_q32(w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ4_XS:
        return rows_k(w, x, y, y_stride, r0, r1);
    case GGML_TYPE_F16:
        if (w->order == SL_ORDER_VEC_DOT) return rows_f16_vd(w, x, y, y_stride, r0, r1);
        return rows_float(w, x, y, y_stride, r0, r1);
    case GGML_TYPE_BF16:
        return kq_rows_bf16_avx512(w, x, y, y_stride, r0, r1, kq_cpu_has_avx512bf16());
    case GGML_TYPE_F32:
        if (w->order == SL_ORDER_VEC_DOT) return 0; /* scalar dot_f32_vd */
        return rows_float(w, x, y, y_stride, r0, r1);
    default:
        if (!kq_is_iq(w->type)) return 0;
        if (x->rows == 1 && kq_iq_one_token_256(w->type, kq_cpu_split512()))
            return kq_rows_iq_vl_avx512(w, x, y, y_stride, r0, r1);
        return kq_rows_iq_avx512(w, x, y, y_stride, r0, r1); /* iq_simd.h */
    }
}
