/* Attention inner loops: every ISA path equals the scalar definition bit
 * for bit on random data of many shapes, and the flash-attention row agrees
 * with a plain double-precision softmax attention within f16 accuracy. */
#include <math.h>
#include <stdint.h>

#include "arch/attn_simd.h"
#include "kernels/kernels.h"
#include "t.h"

static uint64_t rs = 0x243f6a8885a308d3ull;
static double rndu(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) * 0x1p-53;
}
static float rndf(void) { return (float)(rndu() * 2.0 - 1.0); }

static void fill16(uint16_t *x, int n, float scale)
{
    for (int i = 0; i < n; i++) x[i] = fp32_to_fp16(rndf() * scale);
}

static void fillf(float *x, int n)
{
    for (int i = 0; i < n; i++) x[i] = rndf();
}

static int same(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* Floats for the f16 conversion: every magnitude from float subnormals past
 * the f16 range, values exactly halfway between two halves (normal and
 * subnormal), and the specials. */
static void fill_cvt(float *x, int n)
{
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.996f,
                                    65520.0f, -65520.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-149f};
    for (int i = 0; i < n; i++) {
        int kind = (int)(rndu() * 4);
        float r = rndf();
        if (kind == 0) x[i] = special[(int)(rndu() * (sizeof special / sizeof *special))];
        else if (kind == 1) x[i] = ldexpf(r, (int)(rndu() * 200) - 150);
        else if (kind == 2) /* a tie: half an f16 ulp past an f16 */
            x[i] = ldexpf(1.0f + (float)(int)(rndu() * 1024) / 1024.0f + 0x1p-11f, (int)(rndu() * 40) - 24);
        else x[i] = r * 8.0f;
    }
}

static void primitives(const attn_simd *s, const attn_simd *o, const char *name)
{
    char title[96];
    snprintf(title, sizeof title, "attention primitives: %s equals scalar", name);
    t_begin(title);
    enum { N = 700 };
    static uint16_t x16[N], y16[N], a16[N], b16[N];
    static float xf[N], yf[N], la[16 * N], lb[16 * N], oa[N], ob[N];
    for (int n = 1; n < N; n += n < 80 ? 1 : 37) {
        fill16(x16, n, 4.0f), fill16(y16, n, 4.0f), fillf(xf, n), fillf(yf, n);
        float d1 = s->dot_f16(x16, y16, n), d2 = o->dot_f16(x16, y16, n);
        T_CHECK(same(&d1, &d2, 4), "dot_f16 n=%d: %a vs %a", n, d1, d2);
        d1 = s->dot_f32(xf, yf, n), d2 = o->dot_f32(xf, yf, n);
        T_CHECK(same(&d1, &d2, 4), "dot_f32 n=%d: %a vs %a", n, d1, d2);
        fill16(a16, n, 2.0f);
        memcpy(b16, a16, sizeof(uint16_t) * (size_t)n);
        float w = rndf();
        s->mad_f16(a16, x16, w, n), o->mad_f16(b16, x16, w, n);
        T_CHECK(same(a16, b16, 2 * (size_t)n), "mad_f16 n=%d", n);
        s->scale_f16(a16, w, n), o->scale_f16(b16, w, n);
        T_CHECK(same(a16, b16, 2 * (size_t)n), "scale_f16 n=%d", n);
        fill_cvt(oa, n);
        s->to_f16(a16, oa, n), o->to_f16(b16, oa, n);
        T_CHECK(same(a16, b16, 2 * (size_t)n), "to_f16 n=%d", n);
        for (int i = 0; i < n; i++) T_CHECK(a16[i] == fp32_to_fp16(oa[i]), "to_f16 n=%d [%d] %a", n, i, oa[i]);
        fillf(la, n);
        memcpy(lb, la, sizeof(float) * (size_t)n);
        s->axpy_f32(la, xf, w, n), o->axpy_f32(lb, xf, w, n);
        T_CHECK(same(la, lb, 4 * (size_t)n), "axpy_f32 n=%d", n);
        s->axpy_f16(la, x16, w, n), o->axpy_f16(lb, x16, w, n);
        T_CHECK(same(la, lb, 4 * (size_t)n), "axpy_f16 n=%d", n);
        fillf(la, 16 * n);
        s->tree_rows(oa, la, n), o->tree_rows(ob, la, n);
        T_CHECK(same(oa, ob, 4 * (size_t)n), "tree_rows n=%d", n);
        /* short convolution: N channels, 1..5 taps, in place as the mixers
         * call it (window and output overwrite their inputs) */
        int K = 1 + n % 5;
        fillf(la, n * K), fillf(lb, n * (K - 1) + 1), fillf(oa, n);
        memcpy(ob, oa, sizeof(float) * (size_t)n);
        memcpy(lb + 8 * N, lb, sizeof(float) * (size_t)(n * (K - 1) + 1));
        s->conv_step(la, K, n, lb, lb, oa, oa), o->conv_step(la, K, n, lb + 8 * N, lb + 8 * N, ob, ob);
        T_CHECK(same(oa, ob, 4 * (size_t)n) && same(lb, lb + 8 * N, 4 * (size_t)(n * (K - 1))),
                "conv_step n=%d K=%d", n, K);
    }
    t_end();
}

/* The rotation of every ISA against rope_apply: each pairing, rotated
 * sizes that fill a vector, leave a tail or stop short of the head, caches
 * of plain and YaRN-scaled angles over a wide range of positions. */
static void rope_cases(const attn_simd *o, const char *name)
{
    char title[96];
    snprintf(title, sizeof title, "rope: %s equals rope_apply", name);
    t_begin(title);
    static const int modes[] = {ROPE_MODE_NEOX, ROPE_MODE_NORM, ROPE_MODE_IMROPE, ROPE_MODE_MROPE};
    static const int sizes[] = {2, 4, 14, 16, 30, 32, 34, 48, 64, 80, 96, 128, 192, 256};
    float cache[256], a[300], b[300];
    for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (int c = 0; c < 8; c++) {
                rope_params rp = {.n_rot = sizes[si], .mode = modes[mi], .freq_base = c & 1 ? 1e6f : 10000.0f,
                                  .freq_scale = c & 2 ? 0.25f : 1.0f, .ext_factor = c & 2 ? 1.0f : 0.0f,
                                  .attn_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f, .n_ctx_orig = 4096,
                                  .sections = {11, 11, 10, 0}};
                rope_cache(&rp, (int32_t)(rndu() * (c < 4 ? 64 : 1 << 20)), cache);
                fillf(a, 300);
                for (int i = 0; i < 300; i++) a[i] *= 8.0f;
                memcpy(b, a, sizeof a);
                rope_apply(&rp, cache, a);
                o->rope(&rp, cache, b);
                T_CHECK(same(a, b, sizeof a), "mode %d n_rot %d case %d", rp.mode, rp.n_rot, c);
            }
    t_end();
}

/* Keys/values for n positions, row stride `stride` elements. */
static void flash_case(const attn_simd *s, const attn_simd *o, int dk, int dv, int n, int stride)
{
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)n * stride), *v = malloc(sizeof(uint16_t) * (size_t)n * stride);
    uint16_t q[1024], acc[1024];
    float oa[1024], ob[1024], *work = malloc(sizeof(float) * 3 * (size_t)n);
    fill16(k, n * stride, 1.0f), fill16(v, n * stride, 1.0f), fill16(q, dk, 1.0f);
    float scale = 1.0f / sqrtf((float)dk) * 3.0f;
    s->flash(k, (size_t)stride, v, (size_t)stride, q, dk, dv, n, scale, oa, acc, work);
    if (o) {
        o->flash(k, (size_t)stride, v, (size_t)stride, q, dk, dv, n, scale, ob, acc, work);
        T_CHECK(same(oa, ob, 4 * (size_t)dv), "flash dk=%d dv=%d n=%d differs from scalar", dk, dv, n);
    }
    /* plain softmax attention in double */
    double *p = malloc(sizeof(double) * (size_t)n), mx = -INFINITY, sum = 0, err = 0;
    for (int j = 0; j < n; j++) {
        double d = 0;
        for (int i = 0; i < dk; i++) d += (double)fp16_to_fp32(k[(size_t)j * stride + i]) * fp16_to_fp32(q[i]);
        p[j] = d * scale;
        mx = fmax(mx, p[j]);
    }
    for (int j = 0; j < n; j++) sum += p[j] = exp(p[j] - mx);
    for (int i = 0; i < dv; i++) {
        double r = 0;
        for (int j = 0; j < n; j++) r += p[j] / sum * fp16_to_fp32(v[(size_t)j * stride + i]);
        err = fmax(err, fabs(r - oa[i]));
    }
    /* the f16 accumulator rounds at every step: errors grow like sqrt(n) * 2^-12
     * in units of |v| (<= 1 here) */
    T_CHECK(err <= 2.5e-4 * sqrt((double)n) + 1e-3, "flash dk=%d dv=%d n=%d: error %.3g vs the double reference", dk,
            dv, n, err);
    free(p);
    free(k);
    free(v);
    free(work);
}

/* The tiled kernel: ROWS queries of one head from position N0 - 1 on.
 * Every ISA path equals the scalar one; every row equals the same row run
 * alone (tiles never mix rows, so llama.cpp's batch grouping cannot matter);
 * and each row agrees with double-precision softmax attention (f32
 * accumulation: far tighter than the f16 flash row). */
static void tiled_case(const attn_simd *s, const attn_simd *o, int dk, int dv, int n0, int rows, int stride)
{
    int n = n0 + rows - 1;
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)n * stride), *v = malloc(sizeof(uint16_t) * (size_t)n * stride);
    float *q = malloc(sizeof(float) * (size_t)rows * dk), *oa = malloc(sizeof(float) * (size_t)rows * dv);
    float *ob = malloc(sizeof(float) * (size_t)rows * dv), *work = malloc(sizeof(float) * attn_tiled_floats(dk, dv));
    fill16(k, n * stride, 1.0f), fill16(v, n * stride, 1.0f), fillf(q, rows * dk);
    float scale = 1.0f / sqrtf((float)dk) * 3.0f;
    s->tiled(k, (size_t)stride, v, (size_t)stride, q, (size_t)dk, rows, n0, dk, dv, scale, oa, (size_t)dv, work);
    if (o) {
        o->tiled(k, (size_t)stride, v, (size_t)stride, q, (size_t)dk, rows, n0, dk, dv, scale, ob, (size_t)dv, work);
        T_CHECK(same(oa, ob, 4 * (size_t)rows * dv), "tiled dk=%d dv=%d n0=%d rows=%d differs from scalar", dk, dv, n0,
                rows);
    }
    double *p = malloc(sizeof(double) * (size_t)n), err = 0;
    for (int r = 0; r < rows; r += r < 3 ? 1 : 7) {
        float one[1024];
        const attn_simd *x = o ? o : s;
        x->tiled(k, (size_t)stride, v, (size_t)stride, q + (size_t)r * dk, (size_t)dk, 1, n0 + r, dk, dv, scale, one,
                 (size_t)dv, work);
        T_CHECK(same(one, oa + (size_t)r * dv, 4 * (size_t)dv), "tiled row %d alone differs from it in a tile", r);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n0 + r; j++) {
            double d = 0;
            for (int i = 0; i < dk; i++) d += (double)fp16_to_fp32(k[(size_t)j * stride + i]) * q[r * dk + i];
            p[j] = d * scale;
            mx = fmax(mx, p[j]);
        }
        for (int j = 0; j < n0 + r; j++) sum += p[j] = exp(p[j] - mx);
        for (int i = 0; i < dv; i++) {
            double y = 0;
            for (int j = 0; j < n0 + r; j++) y += p[j] / sum * fp16_to_fp32(v[(size_t)j * stride + i]);
            err = fmax(err, fabs(y - oa[(size_t)r * dv + i]));
        }
    }
    T_CHECK(err <= 1e-5, "tiled dk=%d dv=%d n0=%d rows=%d: error %.3g vs the double reference", dk, dv, n0, rows, err);
    free(p);
    free(k);
    free(v);
    free(q);
    free(oa);
    free(ob);
    free(work);
}

int main(void)
{
    (void)t_shared;
    const attn_simd *scalar = attn_simd_for(SL_ISA_SCALAR);
    for (int isa = SL_ISA_AVX2; isa <= SL_ISA_AVX512; isa++) {
        char name[96];
        snprintf(name, sizeof name, "attention on the %s path", kernels_isa_name((sl_isa)isa));
        if ((int)kernels_isa_detected() < isa) {
            t_skip(name, "the CPU lacks this ISA");
            continue;
        }
        const attn_simd *simd = attn_simd_for((sl_isa)isa);
        primitives(scalar, simd, kernels_isa_name((sl_isa)isa));
        rope_cases(simd, kernels_isa_name((sl_isa)isa));
        t_begin(name);
        static const int shapes[][3] = {{64, 64, 1},    {64, 64, 37}, {64, 64, 300}, {128, 128, 90}, {48, 32, 50},
                                        {576, 512, 20}, {32, 32, 17}, {64, 48, 40},  {256, 256, 9},  {64, 40, 33}};
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            flash_case(scalar, simd, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][0] + 8);
        t_end();
        snprintf(name, sizeof name, "tiled flash attention on the %s path", kernels_isa_name((sl_isa)isa));
        t_begin(name);
        /* dk, dv, first row's cells, rows: partial tiles, exactly 64, several tiles, MLA widths */
        static const int tiles[][4] = {{64, 64, 1, 64},   {64, 64, 1, 1},    {128, 128, 10, 64}, {64, 64, 70, 64},
                                       {32, 32, 129, 17}, {576, 512, 1, 64}, {80, 64, 3, 64},    {64, 16, 200, 40}};
        for (size_t i = 0; i < sizeof tiles / sizeof *tiles; i++)
            tiled_case(scalar, simd, tiles[i][0], tiles[i][1], tiles[i][2], tiles[i][3], tiles[i][0] + 8);
        t_end();
    }
    return t_done();
}
