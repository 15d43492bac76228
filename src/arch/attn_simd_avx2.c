/* AVX2 attention inner loops: the 16-lane arithmetic of attn_simd.c carried
 * by pairs of 8-lane registers (lanes 0-7, 8-15), so results are identical
 * to the scalar and AVX-512 paths. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "arch/attn_simd.h"
#include "arch/conv_step.h"

#define CVT_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static __m256 ld8h(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* attn_tree16 of lanes lo (0-7) and hi (8-15). */
static float tree(__m256 lo, __m256 hi)
{
    __m256 a = _mm256_add_ps(hi, lo);
    __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    __m128 c = _mm_add_ps(b, _mm_shuffle_ps(b, b, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(c) + _mm_cvtss_f32(_mm_shuffle_ps(c, c, 1));
}

/* 64-blocks: accumulator j covers elements 16j..16j+15 as (lo, hi). */
static float fold(__m256 acc[8])
{
    __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    return tree(lo, hi);
}

static float dot_f16(const uint16_t *x, const uint16_t *y, int n)
{
    int np = n & ~63;
    double sum = 0.0;
    if (np) {
        __m256 acc[8];
        for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 8; j++) acc[j] = _mm256_fmadd_ps(ld8h(x + i + 8 * j), ld8h(y + i + 8 * j), acc[j]);
        sum = fold(acc);
    }
    for (int i = np; i < n; i++) {
        float a = _cvtsh_ss(x[i]), b = _cvtsh_ss(y[i]);
        sum += (double)(a * b);
    }
    return (float)sum;
}

static float dot_f32(const float *x, const float *y, int n)
{
    int np = n & ~63;
    float sum = 0.0f;
    if (np) {
        __m256 acc[8];
        for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 8; j++)
                acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), acc[j]);
        sum = fold(acc);
    }
    return attn_dot_f32_tail(x, y, np, n, sum);
}

static void mad_f16(uint16_t *acc, const uint16_t *v, float s, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r = _mm256_fmadd_ps(ld8h(v + i), vs, ld8h(acc + i));
        _mm_storeu_si128((__m128i *)(acc + i), _mm256_cvtps_ph(r, CVT_RNE));
    }
    for (; i < n; i++) acc[i] = _cvtss_sh(fmaf(_cvtsh_ss(v[i]), s, _cvtsh_ss(acc[i])), CVT_RNE);
}

static void scale_f16(uint16_t *acc, float s, int n)
{
    __m256 vs = _mm256_set1_ps(s);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(acc + i), _mm256_cvtps_ph(_mm256_mul_ps(ld8h(acc + i), vs), CVT_RNE));
    for (; i < n; i++) acc[i] = _cvtss_sh(_cvtsh_ss(acc[i]) * s, CVT_RNE);
}

static void to_f16(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), CVT_RNE));
    for (; i < n; i++) dst[i] = _cvtss_sh(src[i], CVT_RNE);
}

static void axpy_f32(float *lane, const float *v, float w, int n)
{
    __m256 vw = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(lane + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vw, _mm256_loadu_ps(lane + i)));
    for (; i < n; i++) lane[i] = fmaf(v[i], w, lane[i]);
}

static void axpy_f16(float *lane, const uint16_t *v, float w, int n)
{
    __m256 vw = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(lane + i, _mm256_fmadd_ps(ld8h(v + i), vw, _mm256_loadu_ps(lane + i)));
    for (; i < n; i++) lane[i] = fmaf(_cvtsh_ss(v[i]), w, lane[i]);
}

static void tree_rows(float *out, const float *lanes, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r[16];
        for (int l = 0; l < 16; l++) r[l] = _mm256_loadu_ps(lanes + (size_t)l * n + i);
        for (int l = 0; l < 8; l++) r[l] = _mm256_add_ps(r[l + 8], r[l]);
        for (int l = 0; l < 4; l++) r[l] = _mm256_add_ps(r[l + 4], r[l]);
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_add_ps(r[0], r[2]), _mm256_add_ps(r[1], r[3])));
    }
    for (; i < n; i++) {
        float l[16];
        for (int k = 0; k < 16; k++) l[k] = lanes[(size_t)k * n + i];
        out[i] = attn_tree16(l);
    }
}

static const attn_simd avx2;

static __m256 round16(__m256 x)
{
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, CVT_RNE));
}

/* As the AVX-512 flash(): scores, then the expf factors, then the f16
 * accumulator in registers (dv a multiple of 8, at most 128). */
static inline __attribute__((always_inline)) void accumulate(int nv, const uint16_t *v, size_t v_stride,
                                                             const float *ms, const float *vs, int n, float S,
                                                             float *out)
{
    __m256 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < nv; j++) acc[j] = _mm256_setzero_ps();
    for (int p = 0; p < n; p++) {
        const uint16_t *vp = v + (size_t)p * v_stride;
        if (ms[p] != 1.0f) {
            __m256 m = _mm256_set1_ps(ms[p]);
#pragma GCC unroll 16
            for (int j = 0; j < nv; j++) acc[j] = round16(_mm256_mul_ps(acc[j], m));
        }
        __m256 w = _mm256_set1_ps(vs[p]);
#pragma GCC unroll 16
        for (int j = 0; j < nv; j++) acc[j] = round16(_mm256_fmadd_ps(ld8h(vp + 8 * j), w, acc[j]));
    }
    __m256 inv = _mm256_set1_ps(S == 0.0f ? 0.0f : 1.0f / S);
#pragma GCC unroll 16
    for (int j = 0; j < nv; j++) _mm256_storeu_ps(out + 8 * j, _mm256_mul_ps(acc[j], inv));
}

static void flash(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const uint16_t *q16, int dk,
                  int dv, int n, float scale, float *out, uint16_t *acc16, float *work)
{
    if (dv % 8 || dv > 128) {
        attn_flash_generic(&avx2, k, k_stride, v, v_stride, q16, dk, dv, n, scale, out, acc16, work);
        return;
    }
    float *sc = work, *ms = work + n, *vs = work + 2 * (size_t)n;
    for (int p = 0; p < n; p++) sc[p] = dot_f16(k + (size_t)p * k_stride, q16, dk) * scale;
    float S = 0.0f, M = -INFINITY;
    for (int p = 0; p < n; p++) {
        if (sc[p] > M) {
            float mold = M;
            M = sc[p];
            ms[p] = expf(mold - M);
            vs[p] = 1.0f;
        } else {
            ms[p] = 1.0f;
            vs[p] = expf(sc[p] - M);
        }
        S = fmaf(S, ms[p], vs[p]);
    }
    switch (dv / 8) {
    case 4: accumulate(4, v, v_stride, ms, vs, n, S, out); break;
    case 8: accumulate(8, v, v_stride, ms, vs, n, S, out); break;
    case 16: accumulate(16, v, v_stride, ms, vs, n, S, out); break;
    default: accumulate(dv / 8, v, v_stride, ms, vs, n, S, out); break;
    }
}

/* the tiled flash kernel, 8 lanes (attn_tiled_simd.h) */
#define VT __m256
#define VW 8
#define VZERO() _mm256_setzero_ps()
#define VSET1(x) _mm256_set1_ps(x)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VLDH(p) ld8h(p)
#include "arch/attn_tiled_simd.h"

/* rope_apply's NEOX pairing, 8 pairs at a time (as the AVX-512 path):
 * (cos, sin) pairs split by in-lane shuffles and a cross-lane permute. */
static void rope(const rope_params *rp, const float *cache, float *x)
{
    int half = rp->n_rot / 2;
    if (!rope_pairs_halves(rp) || half % 8) {
        rope_apply(rp, cache, x);
        return;
    }
    for (int i = 0; i < half; i += 8) {
        __m256 p0 = _mm256_loadu_ps(cache + 2 * i), p1 = _mm256_loadu_ps(cache + 2 * i + 8);
        __m256 c = _mm256_shuffle_ps(p0, p1, _MM_SHUFFLE(2, 0, 2, 0)), s = _mm256_shuffle_ps(p0, p1, _MM_SHUFFLE(3, 1, 3, 1));
        c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(c), _MM_SHUFFLE(3, 1, 2, 0)));
        s = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)));
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + half);
        _mm256_storeu_ps(x + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(x + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
}

static const attn_simd avx2 = {
    .dot_f16 = dot_f16, .dot_f32 = dot_f32, .mad_f16 = mad_f16, .scale_f16 = scale_f16,
    .to_f16 = to_f16, .axpy_f32 = axpy_f32, .axpy_f16 = axpy_f16, .tree_rows = tree_rows, .flash = flash,
    .tiled = tiled,
    .conv_step = conv_step_body, .rope = rope,
};

const attn_simd *attn_simd_avx2(void)
{
    return &avx2;
}
