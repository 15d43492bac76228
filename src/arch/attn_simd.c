/* Scalar definition of the attention inner loops (see attn_simd.h). */
#include "arch/attn_simd.h"
#include "arch/conv_step.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

const attn_simd *attn_simd_avx512(void);
const attn_simd *attn_simd_avx2(void);

/* _mm512_reduce_add_ps as GCC expands it: halves, quarters, then pairs. */
float attn_tree16(const float *l)
{
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = l[i + 8] + l[i];
    for (int i = 0; i < 4; i++) b[i] = a[i + 4] + a[i];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* GGML_F32x16_REDUCE over the 4 accumulators, then the tree. */
static float fold64(float acc[4][16])
{
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; l++) acc[0][l] += acc[1][l];
    return attn_tree16(acc[0]);
}

float attn_dot_f32_tail(const float *x, const float *y, int np, int n, float sum)
{
    int c = n - np, plain = (c & ~7) + ((c & 7) >= 4 ? 4 : 0), i = np;
    for (; i < np + plain; i++) sum = sum + x[i] * y[i];
    for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
    return sum;
}

static float dot_f32(const float *x, const float *y, int n)
{
    int np = n & ~63;
    float acc[4][16] = {{0}};
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    return attn_dot_f32_tail(x, y, np, n, np ? fold64(acc) : 0.0f);
}

static float dot_f16(const uint16_t *x, const uint16_t *y, int n)
{
    int np = n & ~63;
    float acc[4][16] = {{0}};
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                int k = i + 16 * j + l;
                acc[j][l] = fmaf(fp16_to_fp32(x[k]), fp16_to_fp32(y[k]), acc[j][l]);
            }
    double sum = np ? fold64(acc) : 0.0;
    for (int i = np; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    return (float)sum;
}

static void mad_f16(uint16_t *acc, const uint16_t *v, float s, int n)
{
    for (int i = 0; i < n; i++) acc[i] = fp32_to_fp16(fmaf(fp16_to_fp32(v[i]), s, fp16_to_fp32(acc[i])));
}

static void scale_f16(uint16_t *acc, float s, int n)
{
    for (int i = 0; i < n; i++) acc[i] = fp32_to_fp16(fp16_to_fp32(acc[i]) * s);
}

static void axpy_f32(float *lane, const float *v, float w, int n)
{
    for (int i = 0; i < n; i++) lane[i] = fmaf(v[i], w, lane[i]);
}

static void axpy_f16(float *lane, const uint16_t *v, float w, int n)
{
    for (int i = 0; i < n; i++) lane[i] = fmaf(fp16_to_fp32(v[i]), w, lane[i]);
}

static void tree_rows(float *out, const float *lanes, int n)
{
    float l[16];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 16; k++) l[k] = lanes[(size_t)k * n + i];
        out[i] = attn_tree16(l);
    }
}

/* ggml_compute_forward_flash_attn_ext_f16_one_chunk for one query row:
 * online softmax with libm expf, the f16 value accumulator rescaled on
 * every new maximum, the sum updated with a fused multiply-add (as GCC
 * contracts it in ggml-cpu). */
void attn_flash_step(const attn_simd *ops, const uint16_t *k, const uint16_t *v, const uint16_t *q16, int dk, int dv,
                     float scale, uint16_t *acc, float *S, float *M)
{
    float s = ops->dot_f16(k, q16, dk) * scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > *M) {
        float mold = *M;
        *M = s;
        ms = expf(mold - *M);
        ops->scale_f16(acc, ms, dv);
    } else {
        vs = expf(s - *M);
    }
    ops->mad_f16(acc, v, vs, dv);
    *S = fmaf(*S, ms, vs);
}

void attn_flash_generic(const attn_simd *ops, const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride,
                        const uint16_t *q16, int dk, int dv, int n, float scale, float *out, uint16_t *acc,
                        float *work)
{
    (void)work;
    memset(acc, 0, sizeof(uint16_t) * (size_t)dv);
    float S = 0.0f, M = -INFINITY;
    for (int p = 0; p < n; p++)
        attn_flash_step(ops, k + (size_t)p * k_stride, v + (size_t)p * v_stride, q16, dk, dv, scale, acc, &S, &M);
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < dv; d++) out[d] = fp16_to_fp32(acc[d]) * inv;
}

size_t attn_tiled_floats(int dk, int dv)
{
    /* one tile of keys transposed to f32 (the SIMD paths), an accumulator
     * per row, the scores, S and M per row */
    return (size_t)ATTN_TILE * ((size_t)dk + (size_t)dv) + 3 * ATTN_TILE + 16;
}

void attn_tile_softmax(float *sc, float *acc, int dv, float *S, float *M)
{
    float tmax = -INFINITY;
    for (int j = 0; j < ATTN_TILE; j++) tmax = tmax > sc[j] ? tmax : sc[j]; /* ggml_vec_max_f32 */
    if (tmax == -INFINITY) { /* ggml skips the row: its scores become 0 */
        memset(sc, 0, sizeof(float) * ATTN_TILE);
        return;
    }
    float mnew = fmaxf(*M, tmax);
    if (mnew > *M) {
        float ms = expf(*M - mnew);
        for (int d = 0; d < dv; d++) acc[d] *= ms;
        *S *= ms;
    }
    *M = mnew;
    *S = (float)((double)*S + op_soft_max_sum(sc, sc, ATTN_TILE, mnew));
}

/* ggml_compute_forward_flash_attn_ext_tiled, one row at a time: the rows
 * of a tile never mix, a masked cell adds 0 * v (nothing: the accumulator
 * is never -0), and a tile this row does not see changes nothing, so a
 * row does not depend on the other rows of its tile. */
static void tiled_row(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const float *q, int n,
                      int dk, int dv, float scale, float *out, float *work)
{
    float *acc = work, *sc = work + dv;
    float S = 0.0f, M = -INFINITY;
    memset(acc, 0, sizeof(float) * (size_t)dv);
    for (int c0 = 0; c0 < n; c0 += ATTN_TILE) {
        int nt = n - c0 < ATTN_TILE ? n - c0 : ATTN_TILE;
        for (int j = 0; j < nt; j++) {
            const uint16_t *kp = k + (size_t)(c0 + j) * k_stride;
            float a = 0.0f;
            for (int d = 0; d < dk; d++) a = fmaf(fp16_to_fp32(kp[d]), q[d], a);
            sc[j] = a * scale;
        }
        for (int j = nt; j < ATTN_TILE; j++) sc[j] = -INFINITY;
        attn_tile_softmax(sc, acc, dv, &S, &M);
        for (int j = 0; j < nt; j++) {
            const uint16_t *vp = v + (size_t)(c0 + j) * v_stride;
            for (int d = 0; d < dv; d++) acc[d] = fmaf(fp16_to_fp32(vp[d]), sc[j], acc[d]);
        }
    }
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < dv; d++) out[d] = acc[d] * inv;
}

void attn_tiled_generic(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const float *q,
                        size_t q_stride, int rows, int n0, int dk, int dv, float scale, float *out, size_t out_stride,
                        float *work)
{
    for (int r = 0; r < rows; r++)
        tiled_row(k, k_stride, v, v_stride, q + (size_t)r * q_stride, n0 + r, dk, dv, scale,
                  out + (size_t)r * out_stride, work);
}

static const attn_simd scalar;

static void to_f16(uint16_t *dst, const float *src, int n)
{
    for (int i = 0; i < n; i++) dst[i] = fp32_to_fp16(src[i]);
}

static void flash(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const uint16_t *q16, int dk,
                  int dv, int n, float scale, float *out, uint16_t *acc, float *work)
{
    attn_flash_generic(&scalar, k, k_stride, v, v_stride, q16, dk, dv, n, scale, out, acc, work);
}

static const attn_simd scalar = {
    .dot_f16 = dot_f16, .dot_f32 = dot_f32, .mad_f16 = mad_f16, .scale_f16 = scale_f16,
    .to_f16 = to_f16, .axpy_f32 = axpy_f32, .axpy_f16 = axpy_f16, .tree_rows = tree_rows, .flash = flash,
    .tiled = attn_tiled_generic,
    .conv_step = conv_step_body, .rope = rope_apply,
};

const attn_simd *attn_simd_for(sl_isa isa)
{
    sl_isa cpu = kernels_isa_detected();
    if (isa >= SL_ISA_AVX512 && cpu >= SL_ISA_AVX512) return attn_simd_avx512();
    if (isa >= SL_ISA_AVX2 && cpu >= SL_ISA_AVX2) return attn_simd_avx2();
    return &scalar;
}
