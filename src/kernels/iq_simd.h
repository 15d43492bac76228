/* The SIMD products of the codebook and ternary types (kq_iq.h), written
 * once for both vector widths: iq_avx2.c and iq_vl_avx512.c include this
 * file with IQ_W 32 (one 32-element sub-block per __m256i), iq_avx512.c
 * with IQ_W 64 (two sub-blocks per __m512i).  Only the handful of
 * primitives below differ per width; decoding, the integer sums and the
 * float order are this one source.
 *
 * Bit-identity with the scalar definition (iq.c): per superblock the 8
 * lane sums L_k (k = (e mod 32) / 4) are exact integers whatever
 * instructions form them.  A maddubs of unsigned magnitudes (codebook
 * coordinate, trit) with sign-applied activations gives int16 pairs that
 * never saturate (largest: 2 * 62 * 127 = 15748, IQ3_XXS), and the
 * multiply-add by the int16 odd scales 2s+1 gives int32 lanes holding the
 * elements 4j..4j+3 of the vector, that is lane k of each sub-block;
 * AVX-512 adds its two halves.  Then, per lane and token, the scalar
 * path's fmaf(d, (float)L_k, acc_k) (one vfmadd on 8 lanes), and at the
 * end kq_iq_result, the scalar path's own function.
 *
 * Layout of the work: rows are processed one at a time (a row is a
 * contiguous stream, which the hardware prefetcher follows); each
 * superblock of a row is decoded once into registers (magnitudes, sign
 * masks, scale vectors) and used for a tile of up to IQ_TT tokens, so
 * prefill decodes each weight once per tile.  Row chunks that fit in L2
 * are swept once per token tile; the tile's activations stay in L1. */
#include <immintrin.h>

#include "kernels/kq_iq.h"

/* the decoders and the per-type bodies: one copy per type and tile width */
#define IQ_INLINE static inline __attribute__((always_inline))

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
/* IQ_VNNI: built with AVX-512 VL + VNNI (iq_avx512.c, iq_vl_avx512.c).
 * The 256-bit scale products then take vpdpwssd as the 512-bit ones do,
 * and a ternary digit is kept in the top two bits of its byte
 * (digit x 64: 0, 64, 128, unsigned for vpdpbusd; TQ1_0's rounding
 * averages leave it there, TQ2_0's shift puts it there) and vpdpbusd sums
 * the products straight into the int32 lanes (elements 4j..4j+3 of each
 * vector, the lanes maddubs + madd form): a shift and mask per vector and
 * the int16 add go.  Every product is a multiple of 64, so one arithmetic
 * shift by 6 per superblock (ternary_lanes) gives the same lane integers
 * (before it at most 32 x 128 x 127 per lane: no overflow). */
#define IQ_VNNI 1
#else
#define IQ_VNNI 0
#endif
#if IQ_W == 64 && !IQ_VNNI
#error "the 512-bit body assumes VNNI (the Makefile's AVX512_FLAGS)"
#endif

#if IQ_W == 64
typedef __m512i V;   /* 64 elements */
typedef __mmask64 S; /* one sign bit per element */
#define IQ_NV 4      /* vectors per superblock */
#define IQ_SB 2      /* sub-blocks per vector */
#define IQ_TT 8      /* tokens per tile */

static inline V v_zero(void) { return _mm512_setzero_si512(); }
static inline V v_load(const void *p) { return _mm512_loadu_si512(p); }
static inline V v_cat(const __m256i *c) { return _mm512_inserti64x4(_mm512_castsi256_si512(c[0]), c[1], 1); }
static inline V v_bytes(int b) { return _mm512_set1_epi8((char)b); }
static inline S s_bits(uint64_t b) { return _cvtu64_mask64(b); }
/* elements whose sign bit is set, negated (|a| <= 127: no wrap) */
static inline V v_signs(V a, S s) { return _mm512_mask_sub_epi8(a, s, _mm512_setzero_si512(), a); }
static inline V v_dot16(V acc, V p, V sc) { return _mm512_dpwssd_epi32(acc, p, sc); }
static inline V v_dot(V acc, V mag, V a, V sc) { return v_dot16(acc, _mm512_maddubs_epi16(mag, a), sc); }
/* int16 lanes whose bit in M is set, negated (scales: no wrap) */
static inline V v_neg16(V x, S m) { return _mm512_mask_sub_epi16(x, (__mmask32)m, _mm512_setzero_si512(), x); }
static inline S s_bits16(uint64_t b) { return _cvtu64_mask64(b); }
static inline V v_sum16(V acc, V mag, V a) { return _mm512_add_epi16(acc, _mm512_maddubs_epi16(mag, a)); }
static inline V v_dp4(V acc, V u, V a) { return _mm512_dpbusd_epi32(acc, u, a); }
/* int16 lane i of S (a sub-block's scale) across sub-block i's elements, for the two sub-blocks of vector v */
static inline V v_scales(__m128i s, int v)
{
    __m512i ctl = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(4 * v | (4 * v + 1) << 8))),
                                     _mm256_set1_epi16((short)((4 * v + 2) | (4 * v + 3) << 8)), 1);
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(s), ctl);
}
/* int16 lane j of S16 (a 16-element half-block's scale) across half-blocks 4v..4v+3 */
static inline V v_half_scales(__m256i s16, int v)
{
    __m128i h = v < 2 ? _mm256_castsi256_si128(s16) : _mm256_extracti128_si256(s16, 1);
    int a = 4 * v % 8;
    __m256i lo = _mm256_set_m128i(_mm_set1_epi16((short)((2 * a + 2) | (2 * a + 3) << 8)),
                                  _mm_set1_epi16((short)(2 * a | (2 * a + 1) << 8)));
    __m256i hi = _mm256_set_m128i(_mm_set1_epi16((short)((2 * a + 6) | (2 * a + 7) << 8)),
                                  _mm_set1_epi16((short)((2 * a + 4) | (2 * a + 5) << 8)));
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(h), _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}
static inline __m256i v_fold(V s) { return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)); }
#else
typedef __m256i V;
typedef __m256i S; /* +1 / -1 per byte, for vpsignb */
#define IQ_NV 8
#define IQ_SB 1
#define IQ_TT 4

static inline V v_zero(void) { return _mm256_setzero_si256(); }
static inline V v_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline V v_cat(const __m256i *c) { return c[0]; }
static inline V v_bytes(int b) { return _mm256_set1_epi8((char)b); }
static inline S s_bits(uint64_t b)
{
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                         3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)(uint32_t)b), sel), bit);
    return _mm256_or_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(1));
}
static inline V v_signs(V a, S s) { return _mm256_sign_epi8(a, s); }
#if IQ_VNNI /* the multiply-add and the add in one, the same int32 */
static inline V v_dot16(V acc, V p, V sc) { return _mm256_dpwssd_epi32(acc, p, sc); }
#else
static inline V v_dot16(V acc, V p, V sc) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc)); }
#endif
static inline V v_dot(V acc, V mag, V a, V sc) { return v_dot16(acc, _mm256_maddubs_epi16(mag, a), sc); }
/* For v_neg16: int16 lane i all ones where bit i of B is set. */
static inline S s_bits16(uint64_t b)
{
    const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                                          -32768);
    return _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16((short)b), bit), bit);
}
static inline V v_neg16(V x, S m) { return _mm256_sub_epi16(_mm256_xor_si256(x, m), m); }
static inline V v_sum16(V acc, V mag, V a) { return _mm256_add_epi16(acc, _mm256_maddubs_epi16(mag, a)); }
#if IQ_VNNI
static inline V v_dp4(V acc, V u, V a) { return _mm256_dpbusd_epi32(acc, u, a); }
#endif
static inline __m256i v_fold(V s) { return s; }
static inline V v_scales(__m128i s, int v)
{
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(s), _mm256_set1_epi16((short)(2 * v | (2 * v + 1) << 8)));
}
static inline V v_half_scales(__m256i s16, int v) /* half-blocks 2v, 2v+1 */
{
    __m128i h = v < 4 ? _mm256_castsi256_si128(s16) : _mm256_extracti128_si256(s16, 1);
    int a = 2 * v % 8;
    __m256i ctl = _mm256_set_m128i(_mm_set1_epi16((short)((2 * a + 2) | (2 * a + 3) << 8)),
                                   _mm_set1_epi16((short)(2 * a | (2 * a + 1) << 8)));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(h), ctl);
}
#endif

/* ---- one 32-element sub-block, decoded (the same code for both widths) ---- */

typedef struct {
    __m256i g;      /* magnitudes, unsigned bytes */
    uint32_t sg;    /* sign bit per element */
    uint32_t dsg;   /* IQ1_M: delta sign per int16 lane of element pairs */
    S sv;           /* AVX2, IQ2_XXS / IQ2_XS / IQ3_XXS: the signs as +1 / -1 bytes, from a table */
    int16_t s0, s1; /* odd scales 2s+1 of elements 0-15, 16-31 */
} sub32;

/* Bit scatters by shifts and masks, not pdep / pext: those are microcode
 * on AMD before Zen 3 (tens to hundreds of cycles, by the mask's bits),
 * which made IQ2_XXS 13x slower than ggml on a Zen 1 EPYC. */

/* 4 bytes each holding 7 sign bits in bits 0-6 -> the same with bit 7 set
 * where that makes the byte's count of minus signs even (kq_even_signs). */
static inline uint32_t even_signs_bytes(uint32_t b)
{
    uint32_t p = b ^ (b >> 4);
    p ^= p >> 2;
    p ^= p >> 1; /* bit 0 of each byte: parity of that byte */
    return b | (p & 0x01010101u) << 7;
}

/* The types whose sign groups keep 7 bits and a parity rule. */
#define SIGN_TABLE_TYPE(T) ((T) == GGML_TYPE_IQ2_XXS || (T) == GGML_TYPE_IQ2_XS || (T) == GGML_TYPE_IQ3_XXS)

#if IQ_W == 32
/* The four groups' signs with 7 stored bits each (S7(l)) as +1 / -1 bytes. */
#define EVEN_SIGNS_V(S7) \
    _mm256_setr_epi64x((long long)kq_even_sign_bytes[S7(0)], (long long)kq_even_sign_bytes[S7(1)], \
                       (long long)kq_even_sign_bytes[S7(2)], (long long)kq_even_sign_bytes[S7(3)])
#define TABLE_SIGNS(T) SIGN_TABLE_TYPE(T)
#else
#define TABLE_SIGNS(T) 0 /* AVX-512 applies sign bits as a mask */
#endif

/* 4 groups of 7 stored sign bits (bits 7l..7l+6) -> even_signs_bytes. */
static inline uint32_t even_signs4(uint32_t s28)
{
    return even_signs_bytes((s28 & 0x7fu) | (s28 << 1 & 0x7f00u) | (s28 << 2 & 0x7f0000u) | (s28 << 3 & 0x7f000000u));
}

/* IQ2_XXS / IQ3_XXS: the signs of a sub-block from the 4 x 7 stored bits
 * of SS (a table vector on AVX2, the bits on AVX-512). */
static inline void signs28(sub32 *c, uint32_t ss)
{
#if IQ_W == 32
#define S7(l) (ss >> 7 * (l) & 127)
    c->sv = EVEN_SIGNS_V(S7);
#undef S7
#else
    c->sg = even_signs4(ss);
#endif
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Grid points are fetched either by one gather or by scalar loads and
 * inserts, whichever measured faster per type on this machine (AMD Zen 4,
 * bench_kernels decode, 1 thread): scalar loads for IQ1_S, IQ2_XXS, IQ2_XS,
 * IQ2_S and IQ3_XXS (+20-40%), gathers for IQ3_S (scalar loads were 5-20%
 * slower there).  IQ1_M: scalar loads since it stopped applying signs (on
 * a Zen 5: 5% faster than gathers of 4, no slower than gathers of 8).
 * Later on that Zen 5, with indices from pdep (grid64_pdep), one 8-point
 * gather per vector ran IQ1 at 0.6x of scalar loads, and IQ3_S's AVX-512
 * body moved to scalar loads too (1.3x its gathers).
 * Indices must never go through a stack array read back as a vector (a
 * store-to-load forwarding stall per sub-block). */

/* Four 8-byte grid points by index q[l] | ((h >> STEP*l) & MASK) << 8,
 * l = 0..3 (the 8-bit low parts with their high bits packed STEP apart in
 * H), by scalar loads. */
static inline __m256i grid64s(const uint64_t *t, const uint8_t *q, int h, int step, int mask)
{
    return _mm256_setr_epi64x((long long)t[q[0] | (h & mask) << 8], (long long)t[q[1] | ((h >> step) & mask) << 8],
                              (long long)t[q[2] | ((h >> 2 * step) & mask) << 8],
                              (long long)t[q[3] | ((h >> 3 * step) & mask) << 8]);
}

#if IQ_W == 64
/* Every AVX-512 CPU has a fast pdep (the microcoded ones, AMD before Zen 3,
 * have no AVX-512), so there four 9- to 11-bit indices are built in one
 * register, 16 bits each, by deposits: the low bytes Q here, the high bits
 * H by the caller's deposit into bits 8 and up of each field (IQ1_S,
 * IQ1_M, IQ2_S; IQ3_S the same way with 4-byte points). */
static inline __m256i grid64_pdep(const uint64_t *t, uint32_t q, uint64_t h)
{
    uint64_t i = _pdep_u64(q, 0x00ff00ff00ff00ffull) | h;
    return _mm256_setr_epi64x((long long)t[i & 0xffff], (long long)t[i >> 16 & 0xffff],
                              (long long)t[i >> 32 & 0xffff], (long long)t[i >> 48]);
}
#endif

static inline __m256i grid32(const uint32_t *t, __m256i idx)
{
    return _mm256_i32gather_epi32((const int *)t, idx, 4);
}

/* Eight 4-byte points by 8-bit index, by scalar loads (IQ3_XXS: 3.6 -> 4.4
 * GB/s here; IQ3_S, whose indices carry a ninth bit, is faster gathered). */
static inline __m256i grid32s(const uint32_t *t, const uint8_t *q)
{
    return _mm256_setr_epi32((int)t[q[0]], (int)t[q[1]], (int)t[q[2]], (int)t[q[3]], (int)t[q[4]], (int)t[q[5]],
                             (int)t[q[6]], (int)t[q[7]]);
}

/* TQ1_0's digits without multiplies: byte products q * 3^k mod 256 by
 * byte adds (x3: x + x + x; x9: (x << 3, masked to the byte) + x), then the
 * digit ((x * 3) >> 8, kq_trit) as the top two bits of x' + (x' + 1) / 2
 * with x' = x - 1 saturated: two rounding averages, equal to the
 * definition for all 256 bytes (a 16-bit multiply form, even and odd bytes
 * apart, took twice the operations). */
static inline __m256i tq1_x3(__m256i x) { return _mm256_add_epi8(x, _mm256_add_epi8(x, x)); }
static inline __m256i tq1_x9(__m256i x)
{
    return _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(x, 3), _mm256_set1_epi8(-8)), x);
}
static inline __m256i tq1_digits(__m256i x)
{
    x = _mm256_subs_epu8(x, _mm256_set1_epi8(1));
    x = _mm256_avg_epu8(x, _mm256_avg_epu8(x, _mm256_setzero_si256()));
#if IQ_VNNI
    return _mm256_and_si256(x, _mm256_set1_epi8(-64));
#else
    return _mm256_and_si256(_mm256_srli_epi16(x, 6), _mm256_set1_epi8(3));
#endif
}

/* TQ1_0 elements 32k..32k+31 (layout in docs/KERNELS.md): qs[0..31] hold
 * digits 0-4 of elements 32n+m, qs[32..47] digits 0-4 of 160+16n+m, qh
 * digits 0-3 of 240+4n+j. */
static inline __m256i tq1_chunk(const uint8_t *b, int k)
{
    if (k < 5) {
        __m256i q = _mm256_loadu_si256((const __m256i *)b);
        __m256i p = k == 0 ? q : k == 1 ? tq1_x3(q) : k == 2 ? tq1_x9(q) : k == 3 ? tq1_x9(tq1_x3(q)) : tq1_x9(tq1_x9(q));
        return tq1_digits(p);
    }
    __m256i r = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + 32)));
    __m256i r13 = _mm256_blend_epi32(r, tq1_x3(r), 0xf0); /* [q2 | 3 q2] */
    if (k == 5) return tq1_digits(r13);
    if (k == 6) return tq1_digits(tq1_x9(r13));
    __m256i h = _mm256_set1_epi32((int)kq_le32(b + 48));
    h = _mm256_blend_epi32(h, tq1_x3(h), 0xaa);  /* x1, x3 in each 64 bits */
    h = _mm256_blend_epi32(h, tq1_x9(h), 0xcc);  /* x1, x3, x9, x27 */
    return tq1_digits(_mm256_blend_epi32(tq1_x9(tq1_x9(r13)), h, 0xf0)); /* [81 q2 | qh]: 9 q2 is chunk 6's */
}

#if IQ_W == 64
/* TQ1_0 on 512-bit vectors, the same operations: vector V holds elements
 * 64v..64v+63, that is chunks 2v, 2v+1 of tq1_chunk. */
static inline V tq1_x9v(V x)
{
    return _mm512_add_epi8(_mm512_and_si512(_mm512_slli_epi16(x, 3), v_bytes(-8)), x);
}

static inline V tq1_digitsv(V x)
{
    x = _mm512_subs_epu8(x, v_bytes(1));
    x = _mm512_avg_epu8(x, _mm512_avg_epu8(x, v_zero()));
    return _mm512_and_si512(x, v_bytes(-64)); /* digit x 64: IQ_VNNI */
}

IQ_INLINE V tq1_vec(const uint8_t *b, int v)
{
    const __mmask64 hi = 0xffffffff00000000ull, odd = 0xffff0000ffff0000ull;
    V q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b));   /* [q | q] */
    V q13 = _mm512_mask_add_epi8(q, hi, q, _mm512_add_epi8(q, q));          /* [q | 3q] */
    if (v == 0) return tq1_digitsv(q13);
    V q927 = tq1_x9v(q13);                                                   /* [9q | 27q] */
    if (v == 1) return tq1_digitsv(q927);
    V r = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(b + 32))); /* q2 in each lane */
    V r13 = _mm512_mask_add_epi8(r, odd, r, _mm512_add_epi8(r, r));          /* [q2, 3q2, q2, 3q2] */
    if (v == 2) return tq1_digitsv(_mm512_mask_blend_epi64(0xf0, tq1_x9v(q927), r13)); /* [81q | q2, 3q2] */
    V r927 = tq1_x9v(r13);                                                   /* [9q2, 27q2, ...] */
    V h = _mm512_set1_epi32((int)kq_le32(b + 48));                           /* qh in each 32 bits */
    h = _mm512_mask_add_epi8(h, 0xf0f0f0f0f0f0f0f0ull, h, _mm512_add_epi8(h, h)); /* x1, x3 per 64 bits */
    h = _mm512_mask_blend_epi64(0xaa, h, tq1_x9v(h));                        /* x1, x3, x9, x27 */
    V t = _mm512_mask_blend_epi64(0x30, r927, tq1_x9v(r927));                /* [9q2, 27q2, 81q2, .] */
    return tq1_digitsv(_mm512_mask_blend_epi64(0xc0, t, h));
}
#endif

/* Sub-block IB of each type's superblock B (layouts: docs/KERNELS.md). */
IQ_INLINE void sub_iq2_xxs(const uint8_t *b, int ib, sub32 *c)
{
    uint32_t idx = kq_le32(b + 2 + 8 * ib), ss = kq_le32(b + 6 + 8 * ib);
    c->g = _mm256_setr_epi64x((long long)kq_iq2xxs_grid[idx & 255], (long long)kq_iq2xxs_grid[(idx >> 8) & 255],
                              (long long)kq_iq2xxs_grid[(idx >> 16) & 255], (long long)kq_iq2xxs_grid[idx >> 24]);
    signs28(c, ss);
    c->s0 = c->s1 = (int16_t)(2 * (ss >> 28) + 1);
}

IQ_INLINE void sub_iq2_xs(const uint8_t *b, int ib, sub32 *c)
{
    uint64_t x = le64(b + 2 + 8 * ib); /* 4 x (9-bit index, 7 sign bits) */
    c->g = _mm256_setr_epi64x((long long)kq_iq2xs_grid[x & 511], (long long)kq_iq2xs_grid[(x >> 16) & 511],
                              (long long)kq_iq2xs_grid[(x >> 32) & 511], (long long)kq_iq2xs_grid[(x >> 48) & 511]);
    /* the sign bits 9-15 of each 16-bit group */
#if IQ_W == 32
#define S7(l) (x >> (16 * (l) + 9) & 127)
    c->sv = EVEN_SIGNS_V(S7);
#undef S7
#else
    c->sg = even_signs_bytes((uint32_t)((x >> 9 & 0x7f) | (x >> 17 & 0x7f00) | (x >> 25 & 0x7f0000) |
                                        (x >> 33 & 0x7f000000)));
#endif
    c->s0 = (int16_t)(2 * (b[66 + ib] & 15) + 1), c->s1 = (int16_t)(2 * (b[66 + ib] >> 4) + 1);
}

IQ_INLINE void sub_iq2_s(const uint8_t *b, int ib, sub32 *c)
{
    const uint8_t *q = b + 2 + 4 * ib;
    int h = b[66 + ib]; /* index bits 8-9 of group l: bits 2l, 2l+1 */
#if IQ_W == 64
    c->g = grid64_pdep(kq_iq2s_grid, kq_le32(q), _pdep_u64((unsigned)h, 0x0300030003000300ull));
#else
    c->g = grid64s(kq_iq2s_grid, q, h, 2, 3);
#endif
    c->sg = kq_le32(b + 34 + 4 * ib);
    c->s0 = (int16_t)(2 * (b[74 + ib] & 15) + 1), c->s1 = (int16_t)(2 * (b[74 + ib] >> 4) + 1);
}

IQ_INLINE void sub_iq3_xxs(const uint8_t *b, int ib, sub32 *c)
{
    uint32_t ss = kq_le32(b + 66 + 4 * ib);
    c->g = grid32s(kq_iq3xxs_grid, b + 2 + 8 * ib);
    signs28(c, ss);
    c->s0 = c->s1 = (int16_t)(2 * (ss >> 28) + 1);
}

IQ_INLINE void sub_iq3_s(const uint8_t *b, int ib, sub32 *c)
{
#if IQ_W == 64 /* pdep (grid64_pdep): eight 9-bit indices in two registers, scalar loads */
    uint64_t q = le64(b + 2 + 8 * ib);
    unsigned h = b[66 + ib];
    uint64_t i0 = _pdep_u64(q, 0x00ff00ff00ff00ffull) | _pdep_u64(h, 0x0100010001000100ull);
    uint64_t i1 = _pdep_u64(q >> 32, 0x00ff00ff00ff00ffull) | _pdep_u64(h >> 4, 0x0100010001000100ull);
    const uint32_t *t = kq_iq3s_grid;
    c->g = _mm256_setr_epi32((int)t[i0 & 0xffff], (int)t[i0 >> 16 & 0xffff], (int)t[i0 >> 32 & 0xffff],
                             (int)t[i0 >> 48], (int)t[i1 & 0xffff], (int)t[i1 >> 16 & 0xffff],
                             (int)t[i1 >> 32 & 0xffff], (int)t[i1 >> 48]);
#else
    /* index bit 8 of point k: bit k of qh */
    __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(b[66 + ib]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    hi = _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), 8);
    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * ib)));
    c->g = grid32(kq_iq3s_grid, _mm256_or_si256(lo, hi));
#endif
    c->sg = kq_le32(b + 74 + 4 * ib);
    c->s0 = c->s1 = (int16_t)(2 * ((b[106 + ib / 2] >> 4 * (ib & 1)) & 15) + 1);
}

/* The IQ1 grids hold -1, 0, 1: both types keep grid + 1 (0, 1, 2: unsigned,
 * so no signs to apply) and take the -1 back as minus scale x activation
 * pair sums (token_v). */
IQ_INLINE void sub_iq1_s(const uint8_t *b, int ib, sub32 *c)
{
    const uint8_t *q = b + 2 + 4 * ib;
    unsigned h = kq_le16(b + 34 + 2 * ib); /* index bits 8-10 of group l: bits 3l..3l+2 */
#if IQ_W == 64
    c->g = grid64_pdep(kq_iq1s_grid, kq_le32(q), _pdep_u64(h, 0x0700070007000700ull));
#else
    c->g = _mm256_add_epi8(grid64s(kq_iq1s_grid, q, (int)h, 3, 7), _mm256_set1_epi8(1));
#endif
    /* its scale and delta sign: decode_iq1_s, for all eight at once */
}

/* IQ1_M's delta sign flips the scale of its group's four int16 pair lanes. */
IQ_INLINE void sub_iq1_m(const uint8_t *b, int ib, sub32 *c)
{
    const uint8_t *q = b + 4 * ib;
    /* nibble l of h: index bits 8-10 of group l, then its delta sign */
    unsigned h = kq_le16(b + 32 + 2 * ib);
#if IQ_W == 64
    c->g = grid64_pdep(kq_iq1s_grid, kq_le32(q), _pdep_u64(h, 0x0f000f000f000f00ull) & 0x0700070007000700ull);
#else
    c->g = _mm256_add_epi8(grid64s(kq_iq1s_grid, q, (int)h, 4, 7), _mm256_set1_epi8(1));
#endif
#if IQ_W == 32 /* AVX-512: iq1m_delta_signs, a vector at once */
    c->dsg = (h >> 3 & 0x1111u) * 0xfu; /* bit 4l+3 -> lanes 4l..4l+3 */
#endif
    /* its two half-block scales: decode_iq1_m, all sixteen at once */
}

#if IQ_W == 64
/* IQ1_M's delta signs of vector V as a mask of its int16 lanes: lane
 * 16j + 4l + i (sub-block 2v + j, group l) takes bit 3 + 4 (l & 1) of qh
 * byte 4v + 2j + l / 2.  A byte shuffle puts that byte in the lane's high
 * byte, a shift moves the bit to bit 15, and movepi16 reads the 32 signs. */
static inline S iq1m_delta_signs(const uint8_t *b, int v)
{
    const V pick = _mm512_set_epi64(0x0303030303030303ll, 0x0303030303030303ll, 0x0202020202020202ll,
                                     0x0202020202020202ll, 0x0101010101010101ll, 0x0101010101010101ll, 0, 0);
    const V up = _mm512_set_epi64(0, 0x0004000400040004ll, 0, 0x0004000400040004ll, 0, 0x0004000400040004ll, 0,
                                  0x0004000400040004ll); /* l even: bit 3 (11 of the word) up by 4 */
    V h = _mm512_shuffle_epi8(_mm512_set1_epi32((int)kq_le32(b + 32 + 4 * v)), pick);
    return (S)_mm512_movepi16_mask(_mm512_sllv_epi16(h, up));
}
#endif

/* TQ2_0: element 128c + 32l + m is bits 2l of qs[32c + m]. */
static inline __m256i tq2_chunk(const uint8_t *b, int k)
{
    __m256i q = _mm256_loadu_si256((const __m256i *)(b + 32 * (k / 4)));
#if IQ_VNNI
    return _mm256_and_si256(_mm256_slli_epi16(q, 6 - 2 * (k % 4)), _mm256_set1_epi8(-64));
#else
    return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (k % 4)), _mm256_set1_epi8(3));
#endif
}

IQ_INLINE void chunk_of(uint32_t T, const uint8_t *b, int ib, sub32 *c)
{
    c->dsg = 0, c->sg = 0, c->s0 = c->s1 = 1;
    switch (T) {
    case GGML_TYPE_IQ2_XXS: sub_iq2_xxs(b, ib, c); break;
    case GGML_TYPE_IQ2_XS: sub_iq2_xs(b, ib, c); break;
    case GGML_TYPE_IQ2_S: sub_iq2_s(b, ib, c); break;
    case GGML_TYPE_IQ3_XXS: sub_iq3_xxs(b, ib, c); break;
    case GGML_TYPE_IQ3_S: sub_iq3_s(b, ib, c); break;
    case GGML_TYPE_TQ1_0: c->g = tq1_chunk(b, ib); break; /* no signs, scale 1 */
    default: c->g = tq2_chunk(b, ib); break;
    }
}

/* Sixteen half-block scales 2n+1 from the nibbles of 8 bytes at P (low
 * nibble first: IQ2_XS, IQ2_S), as int16 lanes, with vector ops. */
static inline __m256i nibble_scales(const uint8_t *p)
{
    const __m256i dup = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1, 4, -1, 4, -1, 5, -1,
                                         5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    const __m256i shl = _mm256_setr_epi16(256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16, 256, 16);
    __m256i x = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadl_epi64((const __m128i *)p)), dup);
    x = _mm256_and_si256(_mm256_srli_epi16(_mm256_mullo_epi16(x, shl), 8), _mm256_set1_epi16(15));
    return _mm256_or_si256(_mm256_slli_epi16(x, 1), _mm256_set1_epi16(1));
}

/* The types whose scales decode as one vector of half-block scales. */
IQ_INLINE int half_scales(uint32_t T, const uint8_t *b, __m256i *s16)
{
    if (T == GGML_TYPE_IQ2_XS) return *s16 = nibble_scales(b + 66), 1;
    if (T == GGML_TYPE_IQ2_S) return *s16 = nibble_scales(b + 74), 1;
    return 0;
}

/* The three kinds of magnitude the types multiply: ternary digits 0..2
 * (TQ: value = digit - 1, scale 1), IQ1's grid + 1 (0..2: the -1 comes back
 * through the activations' pair sums, no sign bits), and the rest, whose
 * per-element sign bits are applied to the activation bytes. */
static inline int is_ternary(uint32_t T) { return T == GGML_TYPE_TQ1_0 || T == GGML_TYPE_TQ2_0; }
static inline int is_iq1(uint32_t T) { return T == GGML_TYPE_IQ1_S || T == GGML_TYPE_IQ1_M; }
static inline int elem_signs(uint32_t T) { return !is_ternary(T) && !is_iq1(T); }

static inline float block_scale(uint32_t T, const uint8_t *b)
{
    switch (T) {
    case GGML_TYPE_IQ1_M: return _cvtsh_ss(kq_iq1m_d(b + 48));
    case GGML_TYPE_TQ1_0: return _cvtsh_ss(kq_le16(b + 52));
    case GGML_TYPE_TQ2_0: return _cvtsh_ss(kq_le16(b + 64));
    default: return _cvtsh_ss(kq_le16(b));
    }
}

/* What every vector of a superblock needs: its scales as one vector where
 * the type packs them so (decoding them per sub-block from scalars was
 * slower), IQ1_S's delta coefficients, the fp16 scale.  IQ1_S: scale bits
 * 12-14 and delta sign bit 15 of each qh word, straight from qh (building
 * the coefficients in a stack array and loading it as one vector stalled
 * every superblock on store-to-load forwarding).  IQ1_M: the sixteen 3-bit
 * half-block scales of the four scale words, in order. */
typedef struct {
    __m256i s16;  /* half-block scales 2s+1 (IQ1_M, IQ2_XS, IQ2_S) */
    __m128i sc;   /* IQ1_S: sub-block scales 2s+1 */
    __m256i coef; /* IQ1_S: int16 coef of sub-block i in lanes 2i, 2i+1 (pairs with bsums) */
    float d;      /* fp16 superblock scale */
} wpre;

IQ_INLINE void decode_pre(uint32_t T, const uint8_t *b, wpre *p)
{
    p->d = block_scale(T, b);
    if (T == GGML_TYPE_IQ1_S) {
        __m128i h = _mm_loadu_si128((const __m128i *)(b + 34));
        p->sc = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(h, 12), _mm_set1_epi16(7)), 1),
                             _mm_set1_epi16(1));
        __m128i neg = _mm_srai_epi16(h, 15);
        __m256i coef = _mm256_cvtepu16_epi32(_mm_sub_epi16(_mm_xor_si128(p->sc, neg), neg));
        p->coef = _mm256_or_si256(coef, _mm256_slli_epi32(coef, 16)); /* lanes 2i, 2i+1: sub-block i */
    } else if (T == GGML_TYPE_IQ1_M) {
        const __m256i words = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4,
                                               5, 6, 7, 6, 7, 6, 7, 6, 7);
        const __m256i shl = _mm256_setr_epi16(512, 64, 8, 1, 512, 64, 8, 1, 512, 64, 8, 1, 512, 64, 8, 1);
        __m256i x = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadl_epi64((const __m128i *)(b + 48))), words);
        x = _mm256_and_si256(_mm256_srli_epi16(_mm256_mullo_epi16(x, shl), 9), _mm256_set1_epi16(7)); /* bits 3k..3k+2 */
        p->s16 = _mm256_or_si256(_mm256_slli_epi16(x, 1), _mm256_set1_epi16(1));
    } else if (T == GGML_TYPE_IQ2_XS || T == GGML_TYPE_IQ2_S) {
        half_scales(T, b, &p->s16);
    }
}

/* Vector V of the superblock: magnitudes, signs (and IQ1_M's delta signs),
 * the scale of each element's sub-block or half-block. */
IQ_INLINE void decode_v(uint32_t T, const uint8_t *b, const wpre *p, int v, V *mag, V *scl, S *sgn, S *dsg)
{
    __m256i g[IQ_SB], sc[IQ_SB];
    uint64_t sg = 0;
#if IQ_W == 32
    S g_sv = _mm256_setzero_si256();
    uint32_t dg = 0;
#endif
#if IQ_W == 64
    if (T == GGML_TYPE_TQ1_0) { /* no signs, scale 1 */
        *mag = tq1_vec(b, v), *scl = v_zero();
        return;
    }
#endif
#pragma GCC unroll 2
    for (int j = 0; j < IQ_SB; j++) {
        int ib = v * IQ_SB + j;
        sub32 c;
        if (T == GGML_TYPE_IQ1_S) sub_iq1_s(b, ib, &c);
        else if (T == GGML_TYPE_IQ1_M) sub_iq1_m(b, ib, &c);
        else chunk_of(T, b, ib, &c);
        g[j] = c.g;
#if IQ_W == 32
        if (TABLE_SIGNS(T)) g_sv = c.sv;
#endif
        if (!is_iq1(T)) { /* the IQ1 types: no signs, scales per superblock */
            sc[j] = _mm256_set_m128i(_mm_set1_epi16(c.s1), _mm_set1_epi16(c.s0));
            sg |= (uint64_t)c.sg << 32 * j;
        }
#if IQ_W == 32
        if (T == GGML_TYPE_IQ1_M) dg = c.dsg;
#endif
    }
    *mag = v_cat(g);
#if IQ_W == 64
    if (is_iq1(T)) *mag = _mm512_add_epi8(*mag, v_bytes(1)); /* grid + 1, once per vector */
#endif
    if (T == GGML_TYPE_IQ1_S) *scl = v_scales(p->sc, v);
    else if (T == GGML_TYPE_IQ1_M || T == GGML_TYPE_IQ2_XS || T == GGML_TYPE_IQ2_S) *scl = v_half_scales(p->s16, v);
    else *scl = v_cat(sc);
#if IQ_W == 32
    if (TABLE_SIGNS(T)) *sgn = g_sv; /* one sub-block per vector */
    else
#endif
#if IQ_W == 64
    if (T == GGML_TYPE_IQ1_M) *dsg = iq1m_delta_signs(b, v);
#else
    if (T == GGML_TYPE_IQ1_M) *dsg = s_bits16(dg);
#endif
    else if (elem_signs(T)) *sgn = s_bits(sg);
}

/* ---- one superblock of one row, decoded for every token of a tile ---- */

typedef struct {
    V mag[IQ_NV], scl[IQ_NV];
    S sgn[IQ_NV], dsg[IQ_NV];
    wpre p;
} wdec;

IQ_INLINE void decode(uint32_t T, const uint8_t *b, wdec *w)
{
    decode_pre(T, b, &w->p);
#pragma GCC unroll 8
    for (int v = 0; v < IQ_NV; v++) decode_v(T, b, &w->p, v, &w->mag[v], &w->scl[v], &w->sgn[v], &w->dsg[v]);
}

static inline int32_t hsum_i32x8(__m256i v) /* exact, any order */
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The ternary types' lane sums L_k from the superblock's sums S (int16
 * pairs, or int32 lanes x 64 under IQ_VNNI) and the activations'
 * 16-element sums BS: value = trit - 1, so lane k -= bsum_2k + bsum_2k+1,
 * as ggml.  On 256 bits the int16 pairs take the bsums before widening
 * (|S| <= 8 x 2 x 254, |bsum| <= 16 x 127: no wrap), one operation less. */
IQ_INLINE __m256i ternary_lanes(V s, __m256i bs)
{
    const __m256i one = _mm256_set1_epi16(1);
#if IQ_VNNI
    return _mm256_sub_epi32(_mm256_srai_epi32(v_fold(s), 6), _mm256_madd_epi16(bs, one));
#else /* the AVX2 build: 256 bits */
    return _mm256_madd_epi16(_mm256_sub_epi16(s, bs), one);
#endif
}

/* Accumulators of one (row, token): the scalar path's acc, acc2, acc1. */
typedef struct {
    __m256 acc, acc2;
    float acc1;
} tacc;

/* The integer sums S (S2: IQ1_M's delta part, S1: the IQ1 types'
 * minus-scale sums) of one superblock and token into the token's float
 * accumulators, in the scalar path's order. */
IQ_INLINE void token_end(uint32_t T, const wpre *p, const blk_q8_K *a, V s, V s2, V s1, tacc *o)
{
    __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
    __m256i L = is_ternary(T) ? ternary_lanes(s, bs) : v_fold(s);
    if (is_iq1(T)) L = _mm256_sub_epi32(L, v_fold(s1));
    float d = p->d * a->d;
    o->acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(L), o->acc);
    if (T == GGML_TYPE_IQ1_M) o->acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(v_fold(s2)), o->acc2);
    if (T == GGML_TYPE_IQ1_S) o->acc1 = fmaf((float)hsum_i32x8(_mm256_madd_epi16(bs, p->coef)), d, o->acc1);
}

/* One vector of a decoded superblock times the token's bytes AV.  The
 * ternary types (scale 1, trits 0..2) sum the byte-pair products as int16
 * across the superblock and widen once in token_end: at most 8 x 2 x 2 x 128
 * = 4096 per lane, so the integer is the same and so is every bit after
 * (with VNNI, int32 lanes x 64 at once: IQ_VNNI). */
IQ_INLINE void token_v(uint32_t T, V mag, V scl, S sgn, S dsg, V av, V *s, V *s2, V *s1)
{
    if (is_ternary(T)) {
#if IQ_VNNI
        *s = v_dp4(*s, mag, av);
#else
        *s = v_sum16(*s, mag, av);
#endif
        return;
    }
    if (is_iq1(T)) { /* grid + 1 (sub_iq1_s); IQ1_M's delta sign on the scales */
        V pairs = v_sum16(v_zero(), v_bytes(1), av);
        *s = v_dot(*s, mag, av, scl);
        *s1 = v_dot16(*s1, pairs, scl);
        if (T == GGML_TYPE_IQ1_M) *s2 = v_dot16(*s2, pairs, v_neg16(scl, dsg));
        return;
    }
    *s = v_dot(*s, mag, v_signs(av, sgn), scl);
}

/* One decoded superblock times one token's Q8_K block. */
IQ_INLINE void token(uint32_t T, const wdec *w, const blk_q8_K *a, tacc *o)
{
    V s = v_zero(), s2 = v_zero(), s1 = v_zero();
#pragma GCC unroll 8
    for (int v = 0; v < IQ_NV; v++)
        token_v(T, w->mag[v], w->scl[v], w->sgn[v], w->dsg[v], v_load(a->qs + IQ_W * v), &s, &s2, &s1);
    token_end(T, &w->p, a, s, s2, s1, o);
}

static inline float tile_result(uint32_t T, const tacc *o)
{
    float l[8], l2[8];
    _mm256_storeu_ps(l, o->acc);
    _mm256_storeu_ps(l2, o->acc2);
    return kq_iq_result(T, l, l2, o->acc1);
}

/* One row times NT tokens (xs[t]: token t's Q8_K row), results to out[t]. */
IQ_INLINE void row_tile(uint32_t T, int nt, const uint8_t *row, int64_t nb, const blk_q8_K *const *xs, float *out)
{
    size_t bs = ggml_type_get(T)->type_size;
    tacc o[IQ_TT];
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) o[t].acc = o[t].acc2 = _mm256_setzero_ps(), o[t].acc1 = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        wdec w;
        decode(T, row + (size_t)b * bs, &w);
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) token(T, &w, xs[t] + b, &o[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) out[t] = tile_result(T, &o[t]);
}

/* One row times one token (decode): each vector is used as soon as it is
 * decoded, so the superblock never lives in registers whole (AVX2 has 16:
 * holding it spilled to the stack, a store and a load per vector). */
IQ_INLINE void row_one(uint32_t T, const uint8_t *row, int64_t nb, const blk_q8_K *x, float *out)
{
    size_t bs = ggml_type_get(T)->type_size;
    tacc o = {_mm256_setzero_ps(), _mm256_setzero_ps(), 0.0f};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * bs;
        wpre p;
        decode_pre(T, blk, &p);
        V s = v_zero(), s2 = v_zero(), s1 = v_zero();
#pragma GCC unroll 8
        for (int v = 0; v < IQ_NV; v++) {
            V mag, scl;
            S sgn = {0}, dsg = {0};
            decode_v(T, blk, &p, v, &mag, &scl, &sgn, &dsg);
            token_v(T, mag, scl, sgn, dsg, v_load(x[b].qs + IQ_W * v), &s, &s2, &s1);
        }
        token_end(T, &p, x + b, s, s2, s1, &o);
    }
    *out = tile_result(T, &o);
}

typedef void (*iq_tile_fn)(int nt, const uint8_t *row, int64_t nb, const blk_q8_K *const *xs, float *out);

/* Tile widths 1, 2, 4 (and 8): each its own unrolled body. */
#if IQ_TT == 8
#define IQ_TILE_8(T) case 8: row_tile(T, 8, row, nb, xs, out); break;
#else
#define IQ_TILE_8(T)
#endif
#define IQ_KERNEL(NAME, T)                                                                            \
    static void NAME(int nt, const uint8_t *row, int64_t nb, const blk_q8_K *const *xs, float *out) \
    {                                                                                                 \
        switch (nt) {                                                                                 \
        case 1: row_one(T, row, nb, xs[0], out); break;                                               \
        case 2: row_tile(T, 2, row, nb, xs, out); break;                                              \
        IQ_TILE_8(T)                                                                                  \
        default: row_tile(T, 4, row, nb, xs, out); break;                                             \
        }                                                                                             \
    }
IQ_KERNEL(k_iq1_s, GGML_TYPE_IQ1_S)
IQ_KERNEL(k_iq1_m, GGML_TYPE_IQ1_M)
IQ_KERNEL(k_iq2_xxs, GGML_TYPE_IQ2_XXS)
IQ_KERNEL(k_iq2_xs, GGML_TYPE_IQ2_XS)
IQ_KERNEL(k_iq2_s, GGML_TYPE_IQ2_S)
IQ_KERNEL(k_iq3_xxs, GGML_TYPE_IQ3_XXS)
IQ_KERNEL(k_iq3_s, GGML_TYPE_IQ3_S)
IQ_KERNEL(k_tq1_0, GGML_TYPE_TQ1_0)
IQ_KERNEL(k_tq2_0, GGML_TYPE_TQ2_0)

static iq_tile_fn tile_fn(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_IQ1_S: return k_iq1_s;
    case GGML_TYPE_IQ1_M: return k_iq1_m;
    case GGML_TYPE_IQ2_XXS: return k_iq2_xxs;
    case GGML_TYPE_IQ2_XS: return k_iq2_xs;
    case GGML_TYPE_IQ2_S: return k_iq2_s;
    case GGML_TYPE_IQ3_XXS: return k_iq3_xxs;
    case GGML_TYPE_IQ3_S: return k_iq3_s;
    case GGML_TYPE_TQ1_0: return k_tq1_0;
    case GGML_TYPE_TQ2_0: return k_tq2_0;
    default: return NULL;
    }
}

/* The widest tile width (a power of two <= IQ_TT) that fits LEFT tokens. */
static inline int tile_width(int64_t left)
{
    int nt = IQ_TT;
    while (nt > left) nt >>= 1;
    return nt;
}

int IQ_ROWS_FN(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    iq_tile_fn fn = tile_fn(w->type);
    if (!fn) return 0;
    int64_t nb = w->ne0 / QKK;
    int64_t l2rows = (int64_t)(393216 / (w->row_bytes ? w->row_bytes : 1)); /* rows whose weights fit in L2 */
    if (l2rows < 1) l2rows = 1;
    for (int64_t c0 = r0; c0 < r1; c0 += l2rows) {
        int64_t c1 = c0 + l2rows < r1 ? c0 + l2rows : r1;
        for (int64_t t0 = 0; t0 < x->rows;) {
            int nt = tile_width(x->rows - t0);
            const blk_q8_K *xs[IQ_TT];
            for (int t = 0; t < nt; t++) xs[t] = (const blk_q8_K *)((const char *)x->data + (size_t)(t0 + t) * x->row_bytes);
            for (int64_t r = c0; r < c1; r++) {
                float out[IQ_TT];
                fn(nt, (const uint8_t *)w->data + (size_t)r * w->row_bytes, nb, xs, out);
                for (int t = 0; t < nt; t++) y[(size_t)(t0 + t) * y_stride + (size_t)r] = out[t];
            }
            t0 += nt;
        }
    }
    return 1;
}
