/* AVX2 + FMA kernels, for CPUs without AVX-512 VNNI.  Same canonical order
 * as matmul.c (so the same bits): exact integer block sums formed with
 * maddubs/madd, folded over 8 rows by exact hadd transposes, then one fmadd
 * per block for each of 16 rows (two 8-lane vectors).  Float weights use the
 * 16 canonical lanes as two 8-lane accumulators. */
#include <immintrin.h>
#include <math.h>

#include "kernels/kq.h"
#include "kernels/kq_iq.h"
#include "kernels/row_prefetch.h"

/* ---- float weights ---- */

static inline __m256 ld8(uint32_t type, const uint8_t *p, int64_t i)
{
    switch (type) {
    case GGML_TYPE_F32: return _mm256_loadu_ps((const float *)p + i);
    case GGML_TYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    default:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))), 16));
    }
}

static float wval(uint32_t type, const uint8_t *p, int64_t i)
{
    switch (type) {
    case GGML_TYPE_F32: return ((const float *)p)[i];
    case GGML_TYPE_F16: return fp16_to_fp32(((const uint16_t *)p)[i]);
    default: return bf16_to_fp32(((const uint16_t *)p)[i]);
    }
}

#define FR 4

static inline __attribute__((always_inline)) void float_tile(uint32_t type, const uint8_t *const *rows, const uint8_t *xa,
                                                             int64_t n, float *out)
{
    __m256 lo[FR], hi[FR];
    #pragma GCC unroll 16
    for (int r = 0; r < FR; r++) lo[r] = hi[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = ld8(type, xa, i), x1 = ld8(type, xa, i + 8); /* activations share the weight type */
        #pragma GCC unroll 16
        for (int r = 0; r < FR; r++) {
            lo[r] = _mm256_fmadd_ps(ld8(type, rows[r], i), x0, lo[r]);
            hi[r] = _mm256_fmadd_ps(ld8(type, rows[r], i + 8), x1, hi[r]);
        }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < FR; r++) {
        float l[16];
        _mm256_storeu_ps(l, lo[r]);
        _mm256_storeu_ps(l + 8, hi[r]);
        for (int64_t k = i; k < n; k++) l[k & 15] = fmaf(wval(type, rows[r], k), wval(type, xa, k), l[k & 15]);
        out[r] = kq_tree16(l);
    }
}

#define FLOAT_KERNEL(NAME, TYPE)                                                                     \
    static void NAME(const uint8_t *const *rows, const uint8_t *xa, int64_t n, float *out)          \
    {                                                                                                \
        float_tile(TYPE, rows, xa, n, out);                                                          \
    }
FLOAT_KERNEL(k_f32, GGML_TYPE_F32)
FLOAT_KERNEL(k_f16, GGML_TYPE_F16)
FLOAT_KERNEL(k_bf16, GGML_TYPE_BF16)

static int rows_float(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    void (*fn)(const uint8_t *const *, const uint8_t *, int64_t, float *) =
        w->type == GGML_TYPE_F32 ? k_f32 : w->type == GGML_TYPE_F16 ? k_f16 : k_bf16;
    int64_t n = w->ne0;
    for (int64_t t = 0; t < x->rows; t++) {
        const uint8_t *xa = (const uint8_t *)x->data + (size_t)t * x->row_bytes;
        for (int64_t r = r0; r < r1; r += FR) {
            const uint8_t *rows[FR];
            int nv = (int)(r1 - r < FR ? r1 - r : FR);
            for (int i = 0; i < FR; i++)
                rows[i] = (const uint8_t *)w->data + (size_t)(r + (i < nv ? i : nv - 1)) * w->row_bytes;
            float out[FR];
            fn(rows, xa, n, out);
            for (int i = 0; i < nv; i++) y[(size_t)t * y_stride + (size_t)(r + i)] = out[i];
        }
    }
    return 1;
}

/* ---- BF16: VDPBF16PS steps emulated with FMAs (see matmul.c) ---- */

static inline __m256 daz_ftz8(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i zero_exp = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    return _mm256_blendv_ps(v, _mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_castsi256_ps(zero_exp));
}

/* One 32-element step for 16 lanes (lo: lanes 0-7, hi: 8-15). */
static inline void dp_step8(__m256 *lo, __m256 *hi, const uint16_t *w, const uint16_t *x)
{
    const __m256i himask = _mm256_set1_epi32((int)0xffff0000u);
    for (int h = 0; h < 2; h++) {
        __m256i wv = _mm256_loadu_si256((const __m256i *)(w + 16 * h));
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + 16 * h));
        __m256 we = daz_ftz8(_mm256_castsi256_ps(_mm256_slli_epi32(wv, 16)));
        __m256 wo = daz_ftz8(_mm256_castsi256_ps(_mm256_and_si256(wv, himask)));
        __m256 xe = daz_ftz8(_mm256_castsi256_ps(_mm256_slli_epi32(xv, 16)));
        __m256 xo = daz_ftz8(_mm256_castsi256_ps(_mm256_and_si256(xv, himask)));
        __m256 *l = h ? hi : lo;
        *l = daz_ftz8(_mm256_fmadd_ps(wo, xo, *l));
        *l = daz_ftz8(_mm256_fmadd_ps(we, xe, *l));
    }
}

static float tree2(__m256 lo, __m256 hi)
{
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    return kq_tree16(l);
}

static float bf16_dot8(const uint16_t *x, const uint16_t *y, int64_t n, int vd)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
    int64_t i = 0;
    if (!vd) {
        for (; i + 32 <= n; i += 32) dp_step8(&a0, &a1, x + i, y + i);
        if (i < n) { /* zero-padded last step */
            uint16_t px[32] = {0}, py[32] = {0};
            memcpy(px, x + i, sizeof(uint16_t) * (size_t)(n - i));
            memcpy(py, y + i, sizeof(uint16_t) * (size_t)(n - i));
            dp_step8(&a0, &a1, px, py);
        }
        return tree2(a0, a1);
    }
    for (; i + 64 <= n; i += 64) {
        dp_step8(&a0, &a1, x + i, y + i);
        dp_step8(&b0, &b1, x + i + 32, y + i + 32);
    }
    double sum = 0.0;
    sum += (double)tree2(a0, a1);
    sum += (double)tree2(b0, b1);
    for (; i < n; i++) sum += (double)(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return (float)sum;
}

static int rows_bf16(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    int vd = w->order == SL_ORDER_VEC_DOT;
    for (int64_t t = 0; t < x->rows; t++) {
        const uint16_t *xa = (const uint16_t *)((const char *)x->data + (size_t)t * x->row_bytes);
        for (int64_t r = r0; r < r1; r++)
            y[(size_t)t * y_stride + (size_t)r] =
                bf16_dot8((const uint16_t *)((const char *)w->data + (size_t)r * w->row_bytes), xa, w->ne0, vd);
    }
    return 1;
}

/* ---- token tiles ----
 * A row's block is decoded once and multiplied with up to TT tokens; the
 * integer sums and float steps per row and token stay those of the
 * canonical order, so tiling does not change the bits. */

#define TT 4  /* tokens per tile */
#define TB 64 /* tokens per cache block: their activations stay in L2 */

/* GROUP(SEL, NT, ...) with the tile width NT a compile-time constant. */
#define TILE_SWITCH(nt, GROUP, SEL, ...)          \
    switch (nt) {                                  \
    case 1: GROUP(SEL, 1, __VA_ARGS__); break;     \
    case 2: GROUP(SEL, 2, __VA_ARGS__); break;     \
    case 3: GROUP(SEL, 3, __VA_ARGS__); break;     \
    default: GROUP(SEL, TT, __VA_ARGS__); break;   \
    }

typedef void (*tile_fn)(int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m256 *acc, int pf);

/* A tile_fn NAME running GROUP(SEL, width, ...) at the tile width asked. */
#define TILE_KERNEL(NAME, GROUP, SEL)                                                                        \
    static void NAME(int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m256 *acc, int pf) \
    {                                                                                                        \
        TILE_SWITCH(nt, GROUP, SEL, rows, x, nb, acc, pf);                                                   \
    }

/* ---- 32-element blocks with Q8_0 / Q8_1 activations ---- */

/* 8 rows' 8-lane partial sums -> the 8 row totals in row order. */
static inline __m256i red8(const __m256i *p)
{
    __m256i h0 = _mm256_hadd_epi32(p[0], p[1]), h1 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i h2 = _mm256_hadd_epi32(p[4], p[5]), h3 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

static inline __m256i nib32(const uint8_t *q)
{
    __m128i x = _mm_loadu_si128((const __m128i *)q);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
}

static inline __m256i hbits32(const uint8_t *qh) /* bit j of the 32-bit word -> 0x10 in byte j */
{
    uint32_t h;
    memcpy(&h, qh, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                    _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                                     3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* The 32 weights of a block as bytes: unsigned (nibbles, 5-bit values) or,
 * for the types w32_signed names, signed (int8, table values). */
static inline __m256i w32(uint32_t type, const uint8_t *blk)
{
    switch (type) {
    case GGML_TYPE_Q8_0: return _mm256_loadu_si256((const __m256i *)(blk + 2));
    case GGML_TYPE_Q4_0: return nib32(blk + 2);
    case GGML_TYPE_Q4_1: return nib32(blk + 4);
    case GGML_TYPE_Q5_0: return _mm256_or_si256(nib32(blk + 6), hbits32(blk + 2));
    case GGML_TYPE_Q5_1: return _mm256_or_si256(nib32(blk + 8), hbits32(blk + 4));
    default: { /* IQ4_NL, MXFP4: table values */
        __m128i t = type == GGML_TYPE_IQ4_NL ? _mm_loadu_si128((const __m128i *)KV_IQ4NL)
                                             : _mm_loadu_si128((const __m128i *)KV_MXFP4);
        return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nib32(blk + (type == GGML_TYPE_IQ4_NL ? 2 : 1)));
    }
    }
}

static inline int w32_signed(uint32_t type)
{
    return type == GGML_TYPE_Q8_0 || type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_MXFP4;
}

static inline size_t bsz32(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_Q8_0: return 34;
    case GGML_TYPE_Q4_1: return 20;
    case GGML_TYPE_Q5_0: return 22;
    case GGML_TYPE_Q5_1: return 24;
    case GGML_TYPE_MXFP4: return 17;
    default: return 18;
    }
}

static inline int off32(uint32_t type)
{
    return type == GGML_TYPE_Q4_0 ? 8 : type == GGML_TYPE_Q5_0 ? 16 : 0;
}

static inline void scales8(uint32_t type, const uint8_t *const *rows, int64_t b, size_t off, __m256 *v)
{
    if (type == GGML_TYPE_MXFP4) {
        float d[16];
        #pragma GCC unroll 16
        for (int i = 0; i < 16; i++) d[i] = kq_e8m0_half(rows[i][b * 17]);
        v[0] = _mm256_loadu_ps(d), v[1] = _mm256_loadu_ps(d + 8);
        return;
    }
    uint16_t h[16];
    size_t bs = bsz32(type);
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i++) memcpy(&h[i], rows[i] + (size_t)b * bs + off, 2);
    v[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
    v[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 8)));
}



/* A tile of nt tokens against 16 rows, block by block: each row's block is
 * decoded once for the tile; acc[2 t + h] holds rows 8h..8h+7 of token t. */
static inline __attribute__((always_inline)) void
q32_group(uint32_t type, int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m256 *acc, int pf)
{
    int q81 = type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1, sgn = w32_signed(type);
    size_t bs = bsz32(type), abs_ = q81 ? 36 : 34, qoff = q81 ? 4 : 2;
    const __m256i ones = _mm256_set1_epi16(1);
    #pragma GCC unroll 8
    for (int i = 0; i < 2 * nt; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i a[TT];
        float da[TT], sa[TT];
        int corr[TT];
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const uint8_t *ab = (const uint8_t *)x->data + (size_t)t * x->row_bytes + (size_t)b * abs_;
            a[t] = _mm256_loadu_si256((const __m256i *)(ab + qoff));
            uint16_t h;
            memcpy(&h, ab, 2);
            da[t] = fp16_to_fp32(h);
            memcpy(&h, ab + 2, 2);
            sa[t] = q81 ? fp16_to_fp32(h) : 0.0f;
            corr[t] = 0;
            if (off32(type)) { /* off * sum(a): the weights were multiplied unsigned */
                __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), a[t]), ones);
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
                corr[t] = off32(type) * _mm_cvtsi128_si32(s4);
            }
        }
        __m256 dw[2], mw[2];
        scales8(type, rows, b, 0, dw);
        if (q81) scales8(type, rows, b, 2, mw);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i p[8 * TT];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                if (pf) prefetch_next(rows, b, bs, 8 * h + i, 16); /* later tiles find it in cache */
                __m256i w = w32(type, rows[8 * h + i] + (size_t)b * bs), u = sgn ? _mm256_abs_epi8(w) : w;
                #pragma GCC unroll 4
                for (int t = 0; t < nt; t++)
                    p[8 * t + i] = _mm256_madd_epi16(_mm256_maddubs_epi16(u, sgn ? _mm256_sign_epi8(a[t], w) : a[t]), ones);
            }
            #pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m256i S = red8(p + 8 * t);
                if (corr[t]) S = _mm256_sub_epi32(S, _mm256_set1_epi32(corr[t]));
                acc[2 * t + h] = _mm256_fmadd_ps(_mm256_mul_ps(dw[h], _mm256_set1_ps(da[t])), _mm256_cvtepi32_ps(S),
                                                 acc[2 * t + h]);
                if (q81) acc[2 * t + h] = _mm256_fmadd_ps(mw[h], _mm256_set1_ps(sa[t]), acc[2 * t + h]);
            }
        }
    }
}

TILE_KERNEL(t_q8_0, q32_group, GGML_TYPE_Q8_0)
TILE_KERNEL(t_q4_0, q32_group, GGML_TYPE_Q4_0)
TILE_KERNEL(t_q4_1, q32_group, GGML_TYPE_Q4_1)
TILE_KERNEL(t_q5_0, q32_group, GGML_TYPE_Q5_0)
TILE_KERNEL(t_q5_1, q32_group, GGML_TYPE_Q5_1)
TILE_KERNEL(t_iq4_nl, q32_group, GGML_TYPE_IQ4_NL)
TILE_KERNEL(t_mxfp4, q32_group, GGML_TYPE_MXFP4)


/* ---- K-quants and IQ4_XS with Q8_K activations ---- */

/* int16 scale vector: 8 lanes of s0 (first 16 elements of a 32), 8 of s1. */
static inline __m256i sc2(int s0, int s1)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)s1), _mm_set1_epi16((short)s0));
}

/* maddubs(u8 w, s8 a) times int16 scales, accumulated into 8 int32 lanes. */
static inline __m256i mac(__m256i acc, __m256i w, const int8_t *a, __m256i sc)
{
    __m256i p = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)a));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
}

/* Q2_K, Q3_K, Q6_K, IQ4_XS: a superblock is two halves of 128 elements,
 * each four 32-element vectors v[k] (elements 128n + 32k ...) with the int16
 * scales of their two 16-element groups.  Magnitudes are unsigned; IQ4_XS's
 * table values are signed (sign moved onto the activations). */
static inline __attribute__((always_inline)) void
g16_half(uint32_t type, const uint8_t *blk, int n, const int *sc, __m256i *v, __m256i *scv)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    if (type == GGML_TYPE_Q6_K) {
        const blk_q6_K *q = (const blk_q6_K *)blk;
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * n));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * n + 32));
        __m256i h = _mm256_loadu_si256((const __m256i *)(q->qh + 32 * n));
        v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
        v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
        v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
        v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
    } else if (type == GGML_TYPE_IQ4_XS) {
        const blk_iq4_xs *q = (const blk_iq4_xs *)blk;
        __m128i t = _mm_loadu_si128((const __m128i *)KV_IQ4NL);
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) v[k] = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nib32(q->qs + 64 * n + 16 * k));
    } else { /* Q2_K, Q3_K: 2-bit planes (+4 where Q3_K's high bit is set) */
        int three = type == GGML_TYPE_Q3_K;
        __m256i q = _mm256_loadu_si256((const __m256i *)(blk + (three ? 32 : 16) + 32 * n));
        __m256i hm = three ? _mm256_loadu_si256((const __m256i *)blk) : _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
            if (three) {
                __m256i bit = _mm256_set1_epi8((char)(1 << (4 * n + j)));
                v[j] = _mm256_add_epi8(v[j], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), _mm256_set1_epi8(4)));
            }
        }
    }
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        scv[k] = type == GGML_TYPE_IQ4_XS ? _mm256_set1_epi16((short)sc[4 * n + k]) : sc2(sc[8 * n + 2 * k], sc[8 * n + 2 * k + 1]);
}

/* The scales of a superblock (16 groups; IQ4_XS: 8 sub-blocks), and as int16
 * the factors of the activations' bsums: Q6_K 32 sc, Q3_K 4 sc (the offsets of
 * their unsigned values), Q2_K the mins (a term of its own). */
static inline __m256i g16_scales(uint32_t type, const uint8_t *blk, int *sc)
{
    int16_t f[16] = {0};
    #pragma GCC unroll 16
    for (int g = 0; g < 16; g++) {
        switch (type) {
        case GGML_TYPE_Q6_K: sc[g] = ((const blk_q6_K *)blk)->scales[g], f[g] = (int16_t)sc[g]; break;
        case GGML_TYPE_Q3_K: sc[g] = kq_q3k_scale(blk + 96, g), f[g] = (int16_t)sc[g]; break;
        case GGML_TYPE_Q2_K: sc[g] = blk[g] & 0xf, f[g] = (int16_t)(blk[g] >> 4); break;
        default: if (g < 8) sc[g] = kq_iq4xs_scale((const blk_iq4_xs *)blk, g); break;
        }
    }
    return _mm256_loadu_si256((const __m256i *)f);
}

/* Integer partials of one row's superblock against nt tokens: s[8 t]; the
 * Q2_K mins term partials in m[8 t]. */
static inline __attribute__((always_inline)) void
g16_row(uint32_t type, int nt, const uint8_t *blk, const blk_q8_K *const *ak, __m256i *s, __m256i *m)
{
    int sc[16], sgn = type == GGML_TYPE_IQ4_XS;
    __m256i f = g16_scales(type, blk, sc), acc[TT];
    #pragma GCC unroll 4
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_si256();
    #pragma GCC unroll 2
    for (int n = 0; n < 2; n++) {
        __m256i v[4], scv[4];
        g16_half(type, blk, n, sc, v, scv);
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i u = sgn ? _mm256_abs_epi8(v[k]) : v[k];
            #pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m256i a = _mm256_loadu_si256((const __m256i *)(ak[t]->qs + 128 * n + 32 * k));
                __m256i p = _mm256_maddubs_epi16(u, sgn ? _mm256_sign_epi8(a, v[k]) : a);
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p, scv[k]));
            }
        }
    }
    int shift = type == GGML_TYPE_Q6_K ? 5 : type == GGML_TYPE_Q3_K ? 2 : 0;
    #pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        if (type != GGML_TYPE_IQ4_XS) {
            __m256i fb = _mm256_madd_epi16(f, _mm256_loadu_si256((const __m256i *)ak[t]->bsums));
            if (shift) acc[t] = _mm256_sub_epi32(acc[t], _mm256_slli_epi32(fb, shift));
            else m[8 * t] = fb;
        }
        s[8 * t] = acc[t];
    }
}

static inline __attribute__((always_inline)) void
g16_group(uint32_t type, int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m256 *acc, int pf)
{
    size_t bsz = ggml_type_get(type)->type_size;
    size_t doff = type == GGML_TYPE_Q2_K ? 80 : type == GGML_TYPE_Q3_K ? 108 : type == GGML_TYPE_Q6_K ? 208 : 0;
    int mins = type == GGML_TYPE_Q2_K;
    #pragma GCC unroll 8
    for (int i = 0; i < 2 * nt; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const blk_q8_K *ak[TT];
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) ak[t] = (const blk_q8_K *)((const char *)x->data + (size_t)t * x->row_bytes) + b;
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i s[8 * TT], m[8 * TT];
            uint16_t hd[8], hm[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                const uint8_t *blk = rows[8 * h + i] + (size_t)b * bsz;
                if (pf) prefetch_next(rows, b, bsz, 8 * h + i, 16);
                g16_row(type, nt, blk, ak, s + i, m + i);
                memcpy(&hd[i], blk + doff, 2);
                if (mins) memcpy(&hm[i], blk + 82, 2);
            }
            __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
            #pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m256 da = _mm256_set1_ps(ak[t]->d), *a = &acc[2 * t + h];
                *a = _mm256_fmadd_ps(_mm256_mul_ps(da, dw), _mm256_cvtepi32_ps(red8(s + 8 * t)), *a);
                if (mins) {
                    __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hm));
                    *a = _mm256_fnmadd_ps(_mm256_mul_ps(da, dm), _mm256_cvtepi32_ps(red8(m + 8 * t)), *a);
                }
            }
        }
    }
}

TILE_KERNEL(t_q2k, g16_group, GGML_TYPE_Q2_K)
TILE_KERNEL(t_q3k, g16_group, GGML_TYPE_Q3_K)
TILE_KERNEL(t_q6k, g16_group, GGML_TYPE_Q6_K)
TILE_KERNEL(t_iq4xs, g16_group, GGML_TYPE_IQ4_XS)

/* ---- Q4_K / Q5_K in token tiles (nibbles, 6-bit scales, mins decoded once) ---- */


/* Integer partials of one row's superblock against nt tokens: s[8 t]. */
static inline __attribute__((always_inline)) void
k45_row(int five, int nt, const uint8_t *blk, uint64_t sc, const blk_q8_K *const *ak, __m256i *s)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const uint8_t *qs = blk + (five ? 48 : 16);
    __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    __m256i acc[TT];
    #pragma GCC unroll 4
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (five) {
            __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * c))), b1 = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), _mm256_set1_epi8(0x10)));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), _mm256_set1_epi8(0x10)));
        }
        __m256i s0 = _mm256_set1_epi16((short)((sc >> (16 * c)) & 0xff));
        __m256i s1 = _mm256_set1_epi16((short)((sc >> (16 * c + 8)) & 0xff));
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            acc[t] = mac(acc[t], lo, ak[t]->qs + 64 * c, s0);
            acc[t] = mac(acc[t], hi, ak[t]->qs + 64 * c + 32, s1);
        }
    }
    #pragma GCC unroll 4
    for (int t = 0; t < nt; t++) s[8 * t] = acc[t];
}

/* The 8 rows' mins terms M_i = sum_j m_ij (bsum_2j + bsum_2j+1) in row order;
 * mm[k] holds the mins of rows 2k and 2k+1 as int16, bp the token's 8 bsum
 * pairs in both halves. */
static inline __m256i k4_mins8(const __m256i *mm, __m256i bp)
{
    __m256i h01 = _mm256_hadd_epi32(_mm256_madd_epi16(mm[0], bp), _mm256_madd_epi16(mm[1], bp));
    __m256i h23 = _mm256_hadd_epi32(_mm256_madd_epi16(mm[2], bp), _mm256_madd_epi16(mm[3], bp));
    /* lanes now rows 0 2 4 6 | 1 3 5 7 */
    return _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(h01, h23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* acc[2 t + h]: rows 8h..8h+7 of token t. */
static inline __attribute__((always_inline)) void
k45_group(int five, int nt, const uint8_t *const *rows, const sl_act *x, int64_t nb, __m256 *acc, int pf)
{
    size_t bsz = five ? 176 : 144;
    #pragma GCC unroll 8
    for (int i = 0; i < 2 * nt; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const blk_q8_K *ak[TT];
        __m256i bp[TT];
        #pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            ak[t] = (const blk_q8_K *)((const char *)x->data + (size_t)t * x->row_bytes) + b;
            __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)ak[t]->bsums),
                                           _mm_loadu_si128((const __m128i *)(ak[t]->bsums + 8)));
            bp[t] = _mm256_broadcastsi128_si256(pairs);
        }
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i s[8 * TT];
            uint64_t mn[8];
            uint16_t hd[8], hm[8];
            #pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                const uint8_t *blk = rows[8 * h + i] + (size_t)b * bsz;
                if (pf) prefetch_next(rows, b, bsz, 8 * h + i, 16);
                uint64_t sc;
                kq_scales_mins_k4(blk + 4, &sc, &mn[i]);
                k45_row(five, nt, blk, sc, ak, s + i);
                memcpy(&hd[i], blk, 2);
                memcpy(&hm[i], blk + 2, 2);
            }
            __m256i mm[4];
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                mm[k] = _mm256_cvtepu8_epi16(_mm_set_epi64x((long long)mn[2 * k + 1], (long long)mn[2 * k]));
            __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
            __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hm));
            #pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m256 da = _mm256_set1_ps(ak[t]->d);
                __m256 *a = &acc[2 * t + h];
                *a = _mm256_fmadd_ps(_mm256_mul_ps(da, dw), _mm256_cvtepi32_ps(red8(s + 8 * t)), *a);
                *a = _mm256_fnmadd_ps(_mm256_mul_ps(da, dm), _mm256_cvtepi32_ps(k4_mins8(mm, bp[t])), *a);
            }
        }
    }
}


TILE_KERNEL(t_q4k, k45_group, 0)
TILE_KERNEL(t_q5k, k45_group, 1)

/* Chunks of rows whose weights fit in L2, blocks of TB tokens, then row
 * groups and token tiles (a group's weights stay in L1 across tiles). */
static int rows_tiled(tile_fn fn, const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0,
                      int64_t r1)
{
    int64_t nb = w->ne0 / ggml_type_get(w->type)->blck_size, chunk = kq_row_chunk(w);
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
            __m256 acc[2 * TT];
            fn(nt, rows, &xt, nb, acc, t0 == 0); /* later tiles find the chunk in L2 */
            for (int t = 0; t < nt; t++) {
                float out[16];
                _mm256_storeu_ps(out, acc[2 * t]);
                _mm256_storeu_ps(out + 8, acc[2 * t + 1]);
                memcpy(y + (size_t)(t0 + t) * y_stride + (size_t)r, out, sizeof(float) * (size_t)nv);
            }
        }
    }
    return 1;
}

int kq_rows_avx2(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    switch (w->type) {
    case GGML_TYPE_BF16:
        return rows_bf16(w, x, y, y_stride, r0, r1);
    case GGML_TYPE_F16:
        if (w->order == SL_ORDER_VEC_DOT) return 0;
        return rows_float(w, x, y, y_stride, r0, r1);
    case GGML_TYPE_F32:
        if (w->order == SL_ORDER_VEC_DOT) return 0; /* scalar dot_f32_vd */
        return rows_float(w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q4_K: return rows_tiled(t_q4k, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q5_K: return rows_tiled(t_q5k, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q8_0: return rows_tiled(t_q8_0, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q4_0: return rows_tiled(t_q4_0, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q4_1: return rows_tiled(t_q4_1, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q5_0: return rows_tiled(t_q5_0, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q5_1: return rows_tiled(t_q5_1, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_IQ4_NL: return rows_tiled(t_iq4_nl, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_MXFP4: return rows_tiled(t_mxfp4, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q2_K: return rows_tiled(t_q2k, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q3_K: return rows_tiled(t_q3k, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_Q6_K: return rows_tiled(t_q6k, w, x, y, y_stride, r0, r1);
    case GGML_TYPE_IQ4_XS: return rows_tiled(t_iq4xs, w, x, y, y_stride, r0, r1);
    default:
        return kq_is_iq(w->type) ? kq_rows_iq_avx2(w, x, y, y_stride, r0, r1) : 0; /* iq_simd.h */
    }
}
