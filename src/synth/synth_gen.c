/* Block layouts follow ggml-common.h; the dequantisation each comment
 * quotes is what ggml computes, so the scales below give elements of the
 * requested standard deviation.  For a quant q uniform on 0..n-1 the centred
 * value q - c has mean (n-1)/2 - c and variance (n*n - 1)/12. */
#include "synth/synth_gen.h"

#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "gguf/ggml_type.h"
#include "kernels/kernels.h"

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sy_rng_seed(sy_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ splitmix(&stream);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
    for (int i = 0; i < 4; i++) r->lane[i] = splitmix(&x) | 1; /* xorshift state must not be 0 */
}

bool sy_type_supported(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_K: case GGML_TYPE_Q6_K: case GGML_TYPE_MXFP4: case GGML_TYPE_IQ4_NL:
        return true;
    default:
        return sy_type_low_bit(type);
    }
}

bool sy_type_low_bit(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_TQ1_0: case GGML_TYPE_TQ2_0:
        return true;
    default:
        return false;
    }
}

static void put_f16(uint8_t *p, float f)
{
    uint16_t h = fp32_to_fp16(f);
    memcpy(p, &h, 2);
}

/* N bytes (a multiple of 8) from the four xorshift64 lanes (13, 7, 17),
 * two lanes per SSE2 register where there is one. */
static void fill(uint8_t *p, size_t n, sy_rng *r)
{
#ifdef __SSE2__
    __m128i a = _mm_loadu_si128((const __m128i *)r->lane), b = _mm_loadu_si128((const __m128i *)(r->lane + 2));
    for (; n >= 32; n -= 32, p += 32) {
        a = _mm_xor_si128(a, _mm_slli_epi64(a, 13)), b = _mm_xor_si128(b, _mm_slli_epi64(b, 13));
        a = _mm_xor_si128(a, _mm_srli_epi64(a, 7)), b = _mm_xor_si128(b, _mm_srli_epi64(b, 7));
        a = _mm_xor_si128(a, _mm_slli_epi64(a, 17)), b = _mm_xor_si128(b, _mm_slli_epi64(b, 17));
        _mm_storeu_si128((__m128i *)p, a);
        _mm_storeu_si128((__m128i *)(p + 16), b);
    }
    _mm_storeu_si128((__m128i *)r->lane, a);
    _mm_storeu_si128((__m128i *)(r->lane + 2), b);
#else
    for (; n >= 32; n -= 32, p += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t *l = &r->lane[k];
            *l ^= *l << 13, *l ^= *l >> 7, *l ^= *l << 17;
            memcpy(p + 8 * k, l, 8);
        }
#endif
    for (int k = 0; n >= 8; n -= 8, p += 8, k++) {
        uint64_t *l = &r->lane[k];
        *l ^= *l << 13, *l ^= *l >> 7, *l ^= *l << 17;
        memcpy(p, l, 8);
    }
}

/* Nominal block scale d for elements of std SIGMA, from the quants' spread:
 *   q4_0 {d, qs[16]}: x = d (q - 8), q uniform 0..15: rms 4.64 d
 *   q5_0 {d, qh[4], qs[16]}: x = d (q - 16), q uniform 0..31: rms 9.25 d
 *   q8_0 {d, qs[32]}: x = d q, q uniform -127..127 (ggml's quantiser never
 *     emits -128): rms 73.6 d
 *   iq4_nl {d, qs[16]}: x = d kvalues_iq4nl[q], q uniform 0..15: rms 67.4 d
 *     (the fallback of the IQ1-IQ3 types for rows not a multiple of 256)
 *   q4_K {d, dmin, scales[12], qs[128]}: sub-block j is x = d sc_j q - dmin m_j
 *     with 6-bit sc, m as get_scale_min_k4 reads them; sc uniform 32..63
 *     (rms 48.4), dmin = 8 d and m_j = round(sc_j 15/16) centre q at 7.5:
 *     rms 4.61 * 48.4 d
 *   q6_K {ql[128], qh[64], scales[16], d}: x = d sc (q - 32), q uniform 0..63
 *     (rms 18.5), int8 sc uniform 64..127 (rms 97.6)
 * The codebook types from random bits (every bit pattern is a valid block;
 * codebook coordinates taken as uniform over their levels, 4-bit s uniform
 * 0..15, 3-bit s 0..7):
 *   iq2_xxs/xs/s: x = d (0.5 + s)/4 g, g in {8, 25, 43}: rms 2.308 * 29.09 d
 *   iq3_xxs: x = d (0.5 + s)/2 g, g in {4, 12, ..., 52, 62}: rms 4.616 * 37.29 d
 *   iq3_s: x = d (1 + 2s) g, g odd 1..15: rms 18.47 * 9.22 d
 *   iq1_s/m: x = d (2s + 1)(g +- 1/8), g in {-1, 0, 1}: rms 9.22 * 0.826 d
 *   tq1_0: x = d (t - 1), t uniform 0..2: rms 0.816 d; tq2_0 likewise once
 *     the unused code 3 is mapped to 1 (t - 1 in {-1, 0, 0, 1}): rms 0.707 d */
static float nominal_d(uint32_t type, float sigma)
{
    switch (type) {
    case GGML_TYPE_Q4_0: return sigma / 4.637f;
    case GGML_TYPE_Q5_0: return sigma / 9.247f;
    case GGML_TYPE_Q8_0: return sigma / 73.61f;
    case GGML_TYPE_IQ4_NL: return sigma / 67.44f;
    case GGML_TYPE_Q4_K: return sigma / (4.610f * 48.4f);
    case GGML_TYPE_Q6_K: return sigma / (18.47f * 97.6f);
    case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S: return sigma / (2.308f * 29.09f);
    case GGML_TYPE_IQ3_XXS: return sigma / (4.616f * 37.29f);
    case GGML_TYPE_IQ3_S: return sigma / (18.47f * 9.22f);
    case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: return sigma / (9.22f * 0.826f);
    case GGML_TYPE_TQ1_0: return sigma / 0.816f;
    case GGML_TYPE_TQ2_0: return sigma / 0.707f;
    default: return 0;
    }
}

/* q4_K's 12 packed bytes of 6-bit scales and mins for one block */
static void pack_q4_k_scales(uint64_t bits, uint8_t *s)
{
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(32 + ((bits >> (5 * j)) & 31));
        m[j] = (uint8_t)((sc[j] * 15 + 8) / 16);
    }
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

void sy_gen_init(sy_gen *g, uint32_t type, float sigma, sy_rng *r)
{
    g->type = type, g->sigma = sigma;
    float d = nominal_d(type, sigma);
    for (int i = 0; i < 16; i++) {
        float j = 0.75f + 0.5f * ((float)i + 0.5f) / 16.0f; /* real blocks' scales vary too */
        g->d[i] = fp32_to_fp16(d * j);
        g->dmin[i] = fp32_to_fp16(8.0f * d * j);
    }
    for (int i = 0; i < SY_PATTERNS; i++) {
        uint64_t bits[2] = {sy_next(r), sy_next(r)};
        if (type == GGML_TYPE_Q4_K) pack_q4_k_scales(bits[0], g->pat[i]);
        for (int j = 0; type == GGML_TYPE_Q6_K && j < 16; j++)
            g->pat[i][j] = (uint8_t)(64 + ((bits[j / 8] >> (6 * (j % 8))) & 63));
    }
}

/* Per block: 4 bits pick its d (and dmin), 6 bits its sub-block scales. */
static void gen_q4_k(const sy_gen *g, uint8_t *b, uint64_t n, sy_rng *r)
{
    uint8_t tmp[136];
    for (uint64_t i = 0; i < n; i++, b += 144) {
        fill(tmp, sizeof tmp, r);
        uint32_t d = tmp[128] & 15, pat = tmp[129] & (SY_PATTERNS - 1);
        memcpy(b, &g->d[d], 2);
        memcpy(b + 2, &g->dmin[d], 2);
        memcpy(b + 4, g->pat[pat], 12);
        memcpy(b + 16, tmp, 128);
    }
}

static void gen_q6_k(const sy_gen *g, uint8_t *b, uint64_t n, sy_rng *r)
{
    uint8_t tmp[200];
    for (uint64_t i = 0; i < n; i++, b += 210) {
        fill(tmp, sizeof tmp, r);
        memcpy(b, tmp, 192);
        memcpy(b + 192, g->pat[tmp[192] & (SY_PATTERNS - 1)], 16);
        memcpy(b + 208, &g->d[tmp[193] & 15], 2);
    }
}

/* 32-element blocks: scale, then the random payload (q4_0 16 bytes, q5_0
 * 4 + 16, q8_0 32); one more random byte picks the scale. */
static void gen_small(const sy_gen *g, uint8_t *b, uint64_t n, uint32_t size, sy_rng *r)
{
    uint32_t payload = size - 2;
    uint8_t tmp[40];
    for (uint64_t i = 0; i < n; i++, b += size) {
        fill(tmp, payload / 8 * 8 + 8, r);
        memcpy(b, &g->d[tmp[payload] & 15], 2);
        memcpy(b + 2, tmp, payload);
        if (g->type == GGML_TYPE_Q8_0)
            for (uint32_t k = 2; k < size; k++) b[k] = (uint8_t)(b[k] + (b[k] == 0x80));
    }
}

/* The codebook and ternary types: random payload, then the fp16 scale
 * (one more random byte picks it) where the layout keeps it: IQ1_M spreads
 * it over the top nibbles of its four scale words, TQ1_0 / TQ2_0 end with
 * it.  TQ2_0's code 3 (never written by ggml's quantiser) becomes 1. */
static void gen_low_bit(const sy_gen *g, uint8_t *b, uint64_t n, sy_rng *r)
{
    uint32_t size = (uint32_t)ggml_type_get(g->type)->type_size;
    uint8_t tmp[120];
    for (uint64_t i = 0; i < n; i++, b += size) {
        fill(tmp, (size + 8) / 8 * 8, r);
        memcpy(b, tmp, size);
        uint16_t h = g->d[tmp[size] & 15];
        if (g->type == GGML_TYPE_IQ1_M) {
            for (int q = 0; q < 4; q++) b[49 + 2 * q] = (uint8_t)((b[49 + 2 * q] & 0x0f) | ((h >> (4 * q)) & 15) << 4);
            continue;
        }
        memcpy(b + (g->type == GGML_TYPE_TQ1_0 ? 52 : g->type == GGML_TYPE_TQ2_0 ? 64 : 0), &h, 2);
        if (g->type == GGML_TYPE_TQ2_0)
            for (int k = 0; k < 64; k++) b[k] ^= (uint8_t)(((b[k] >> 1) & b[k] & 0x55) << 1);
    }
}

/* MXFP4 {e, qs[16]}: x = T[q] 2^(e - 128), T = twice the E2M1 values,
 * q uniform 0..15: rms sqrt(34.25) = 5.85 units.  The scale is a power of
 * two, so blocks take the exponent e or e + 1 with the probability that
 * gives SIGMA on average (real blocks' scales vary too). */
static const int8_t MXFP4_T[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void gen_mxfp4(const sy_gen *g, uint8_t *b, uint64_t n, sy_rng *r)
{
    float unit = g->sigma > 0 ? g->sigma / 5.852f : 1e-30f;
    int e = 128 + (int)floorf(log2f(unit));
    e = e < 1 ? 1 : e > 253 ? 253 : e;
    float ratio = unit / ldexpf(1.0f, e - 128), p = (ratio * ratio - 1.0f) / 3.0f; /* p 4u^2 + (1-p) u^2 */
    unsigned thr = (unsigned)(p * 256.0f + 0.5f);
    uint8_t tmp[24];
    for (uint64_t i = 0; i < n; i++, b += 17) {
        fill(tmp, sizeof tmp, r);
        b[0] = (uint8_t)(e + (tmp[16] < thr));
        memcpy(b + 1, tmp, 16);
    }
}

/* 32 floats as the nibbles of their nearest values d * T[q] (elements 0-15
 * in the low nibbles, 16-31 in the high ones, ggml's 32-element layout). */
static void nearest_nibbles(const float *x, const int8_t *T, float d, uint8_t *qs)
{
    uint8_t q[32];
    for (int i = 0; i < 32; i++) {
        int best = 0;
        for (int k = 1; k < 16; k++)
            if (fabsf(x[i] - T[k] * d) < fabsf(x[i] - T[best] * d)) best = k;
        q[i] = (uint8_t)best;
    }
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

/* Nearest-value MXFP4 of 32 floats: e from the largest magnitude (its
 * top value lands in 8..16 units, clamped to 12). */
static void quant_mxfp4(const float *x, uint8_t *b)
{
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    int e = amax > 0 ? (int)floorf(log2f(amax)) - 2 + 127 : 0;
    e = e < 0 ? 0 : e > 254 ? 254 : e;
    b[0] = (uint8_t)e;
    nearest_nibbles(x, MXFP4_T, ldexpf(1.0f, e - 128), b + 1);
}

void sy_gen_blocks(const sy_gen *g, void *dst, uint64_t n_blocks, sy_rng *r)
{
    uint8_t *b = dst;
    switch (g->type) {
    case GGML_TYPE_F32:
        for (uint64_t i = 0; i < n_blocks; i++) {
            float f = g->sigma * sy_gauss(r);
            memcpy(b + 4 * i, &f, 4);
        }
        break;
    case GGML_TYPE_F16:
        for (uint64_t i = 0; i < n_blocks; i++) put_f16(b + 2 * i, g->sigma * sy_gauss(r));
        break;
    case GGML_TYPE_Q4_0: gen_small(g, b, n_blocks, 18, r); break;
    case GGML_TYPE_Q5_0: gen_small(g, b, n_blocks, 22, r); break;
    case GGML_TYPE_Q8_0: gen_small(g, b, n_blocks, 34, r); break;
    case GGML_TYPE_IQ4_NL: gen_small(g, b, n_blocks, 18, r); break;
    case GGML_TYPE_Q4_K: gen_q4_k(g, b, n_blocks, r); break;
    case GGML_TYPE_Q6_K: gen_q6_k(g, b, n_blocks, r); break;
    case GGML_TYPE_MXFP4: gen_mxfp4(g, b, n_blocks, r); break;
    default:
        if (sy_type_low_bit(g->type)) gen_low_bit(g, b, n_blocks, r);
        break;
    }
}

/* ---- a plain quantiser ---- */

/* The element of largest magnitude, with its sign. */
static float signed_max(const float *x, int n)
{
    float m = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(m)) m = x[i];
    return m;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void quant_q4_0(const float *x, uint8_t *b)
{
    float d = signed_max(x, 32) / -8.0f;
    put_f16(b, d);
    float id = d != 0 ? 1.0f / d : 0;
    for (int j = 0; j < 16; j++) {
        int q0 = clampi((int)(x[j] * id + 8.5f), 0, 15), q1 = clampi((int)(x[j + 16] * id + 8.5f), 0, 15);
        b[2 + j] = (uint8_t)(q0 | (q1 << 4));
    }
}

static void quant_q5_0(const float *x, uint8_t *b)
{
    float d = signed_max(x, 32) / -16.0f;
    put_f16(b, d);
    float id = d != 0 ? 1.0f / d : 0;
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = clampi((int)(x[j] * id + 16.5f), 0, 31), q1 = clampi((int)(x[j + 16] * id + 16.5f), 0, 31);
        b[6 + j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
        qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    memcpy(b + 2, &qh, 4);
}

static void quant_q8_0(const float *x, uint8_t *b)
{
    float d = fabsf(signed_max(x, 32)) / 127.0f;
    put_f16(b, d);
    float id = d != 0 ? 1.0f / d : 0;
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)clampi((int)lrintf(x[j] * id), -127, 127);
}

static void quant_q4_k(const float *x, uint8_t *b)
{
    float scale[8], mn[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0, hi = x[32 * j];
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        scale[j] = (hi - lo) / 15.0f, mn[j] = -lo;
        max_scale = fmaxf(max_scale, scale[j]), max_min = fmaxf(max_min, mn[j]);
    }
    float d = fp16_to_fp32(fp32_to_fp16(max_scale / 63.0f)), dmin = fp16_to_fp32(fp32_to_fp16(max_min / 63.0f));
    put_f16(b, d);
    put_f16(b + 2, dmin);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi((int)lrintf(scale[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0 ? clampi((int)lrintf(mn[j] / dmin), 0, 63) : 0);
    }
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
    uint8_t *qs = b + 16;
    for (int j = 0; j < 8; j++) {
        float dl = d * sc[j], ml = dmin * m[j];
        for (int l = 0; l < 32; l++) {
            int q = dl > 0 ? clampi((int)lrintf((x[32 * j + l] + ml) / dl), 0, 15) : 0;
            uint8_t *p = &qs[32 * (j / 2) + l];
            *p = (uint8_t)(j % 2 ? (*p & 0x0F) | (q << 4) : q);
        }
    }
}

static void quant_q6_k(const float *x, uint8_t *b)
{
    float scale[16], max_scale = 0;
    for (int j = 0; j < 16; j++) {
        scale[j] = signed_max(x + 16 * j, 16) / -32.0f;
        if (fabsf(scale[j]) > fabsf(max_scale)) max_scale = scale[j];
    }
    float d = fp16_to_fp32(fp32_to_fp16(max_scale / -128.0f));
    put_f16(b + 208, d);
    int8_t sc[16];
    for (int j = 0; j < 16; j++) {
        sc[j] = (int8_t)(d != 0 ? clampi((int)lrintf(scale[j] / d), -128, 127) : 0);
        b[192 + j] = (uint8_t)sc[j];
    }
    uint8_t q[256];
    for (int i = 0; i < 256; i++) {
        float dl = d * sc[i / 16];
        q[i] = (uint8_t)(dl != 0 ? clampi((int)lrintf(x[i] / dl), -32, 31) + 32 : 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    memset(qh, 0, 64);
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *h = q + 128 * n + l;
            ql[64 * n + l] = (uint8_t)((h[0] & 15) | ((h[64] & 15) << 4));
            ql[64 * n + l + 32] = (uint8_t)((h[32] & 15) | ((h[96] & 15) << 4));
            qh[32 * n + l] = (uint8_t)((h[0] >> 4) | ((h[32] >> 4) << 2) | ((h[64] >> 4) << 4) | ((h[96] >> 4) << 6));
        }
}

static const int8_t IQ4NL_T[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Nearest-value IQ4_NL: the largest magnitude maps to the -127 entry. */
static void quant_iq4_nl(const float *x, uint8_t *b)
{
    float d = signed_max(x, 32) / -127.0f;
    put_f16(b, d);
    nearest_nibbles(x, IQ4NL_T, fp16_to_fp32(fp32_to_fp16(d)), b + 2);
}

void sy_quantize_blocks(uint32_t type, const float *x, void *dst, uint64_t n)
{
    uint8_t *b = dst;
    switch (type) {
    case GGML_TYPE_F32: memcpy(b, x, n * 4); break;
    case GGML_TYPE_F16: for (uint64_t i = 0; i < n; i++) put_f16(b + 2 * i, x[i]); break;
    case GGML_TYPE_Q4_0: for (uint64_t i = 0; i < n / 32; i++) quant_q4_0(x + 32 * i, b + 18 * i); break;
    case GGML_TYPE_Q5_0: for (uint64_t i = 0; i < n / 32; i++) quant_q5_0(x + 32 * i, b + 22 * i); break;
    case GGML_TYPE_Q8_0: for (uint64_t i = 0; i < n / 32; i++) quant_q8_0(x + 32 * i, b + 34 * i); break;
    case GGML_TYPE_IQ4_NL: for (uint64_t i = 0; i < n / 32; i++) quant_iq4_nl(x + 32 * i, b + 18 * i); break;
    case GGML_TYPE_Q4_K: for (uint64_t i = 0; i < n / 256; i++) quant_q4_k(x + 256 * i, b + 144 * i); break;
    case GGML_TYPE_Q6_K: for (uint64_t i = 0; i < n / 256; i++) quant_q6_k(x + 256 * i, b + 210 * i); break;
    case GGML_TYPE_MXFP4: for (uint64_t i = 0; i < n / 32; i++) quant_mxfp4(x + 32 * i, b + 17 * i); break;
    default: break;
    }
}
