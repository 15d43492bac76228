/* Kernel benchmark: memory read bandwidth, matrix x vector (decode) GB/s of
 * weight bytes, and matrix x many tokens (prefill) GFLOP/s, per weight type,
 * ISA path and thread count.  Weights cycle through a working set larger
 * than the last-level cache so decode numbers are memory-bound.
 *
 *   build/bench_kernels [-t THREADS] [-w WORKSET_MB] [-q] [-a] [types...]
 * -q skips the 151936x2048 output matrix, -p times prefill only (T=16, an
 * MoE expert's share of a 512-token prompt, 64 and 512), -a also runs the AVX2 path, -g
 * also times ggml's vec_dot from ../llama.cpp/build/bin (or $SLUICE_GGML_LIB).
 * Prints one line per measurement; medians of several repetitions. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "util/clock.h"

static uint64_t rs = 12345;
static uint64_t rnd(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return rs;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

/* Best of n: other processes on the machine only ever slow a run down. */
static double best(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n - 1];
}

/* Random blocks with small finite scales (no NaN/inf/denormal slow paths). */
static void fill(uint32_t type, uint8_t *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t r = rnd();
        memcpy(p + i, &r, bytes - i < 8 ? bytes - i : 8);
    }
    const ggml_type_info *ti = ggml_type_get(type);
    uint16_t h = fp32_to_fp16(0.01f);
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
        for (size_t i = 0; i + 1 < bytes; i += 2) {
            uint16_t v = type == GGML_TYPE_F16 ? fp32_to_fp16((float)(rnd() % 1000) * 1e-4f - 0.05f)
                                               : fp32_to_bf16((float)(rnd() % 1000) * 1e-4f - 0.05f);
            memcpy(p + i, &v, 2);
        }
        return;
    }
    if (type == GGML_TYPE_F32) {
        for (size_t i = 0; i + 3 < bytes; i += 4) {
            float f = (float)(rnd() % 1000) * 1e-4f - 0.05f;
            memcpy(p + i, &f, 4);
        }
        return;
    }
    int offs[2] = {-1, -1};
    switch (type) {
    case GGML_TYPE_Q2_K: offs[0] = 80, offs[1] = 82; break;
    case GGML_TYPE_Q3_K: offs[0] = 108; break;
    case GGML_TYPE_Q6_K: offs[0] = 208; break;
    case GGML_TYPE_MXFP4: break;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: offs[0] = 0, offs[1] = 2; break;
    case GGML_TYPE_TQ1_0: offs[0] = 52; break;
    case GGML_TYPE_TQ2_0: offs[0] = 64; break;
    case GGML_TYPE_IQ1_M: break; /* d in the top nibbles of the scale words */
    default: offs[0] = 0;
    }
    for (size_t b = 0; b + ti->type_size <= bytes; b += ti->type_size) {
        if (type == GGML_TYPE_MXFP4) p[b] = 120;
        if (type == GGML_TYPE_IQ1_M)
            for (int q = 0; q < 4; q++) p[b + 49 + 2 * q] = (uint8_t)((p[b + 49 + 2 * q] & 0x0f) | ((h >> (4 * q)) & 15) << 4);
        for (int k = 0; k < 2; k++)
            if (offs[k] >= 0) memcpy(p + b + offs[k], &h, 2);
    }
}

typedef struct {
    const uint8_t *src;
    size_t bytes;
    double sums[64];
} bw_ctx;

static void bw_task(void *ctx, int task, int thread)
{
    bw_ctx *c = ctx;
    (void)thread;
    size_t per = c->bytes / 64, off = per * (size_t)task;
    const uint64_t *p = (const uint64_t *)(c->src + off);
    uint64_t a = 0, b = 0, d = 0, e = 0;
    for (size_t i = 0; i + 4 <= per / 8; i += 4) a += p[i], b ^= p[i + 1], d += p[i + 2], e ^= p[i + 3];
    c->sums[task] = (double)(a + b + d + e);
}

static double read_bw(sl_pool *pool, const uint8_t *buf, size_t bytes)
{
    bw_ctx c = {buf, bytes, {0}};
    double v[5];
    for (int r = 0; r < 5; r++) {
        double t = sl_now();
        pool_run(pool, 64, bw_task, &c);
        v[r] = (double)bytes / (sl_now() - t) / 1e9;
    }
    return best(v, 5);
}

static double memcpy_bw(uint8_t *dst, const uint8_t *src, size_t bytes)
{
    double v[5];
    for (int r = 0; r < 5; r++) {
        double t = sl_now();
        memcpy(dst, src, bytes);
        v[r] = 2.0 * (double)bytes / (sl_now() - t) / 1e9;
    }
    return best(v, 5);
}

/* Optional reference: ggml's own vec_dot (what llama.cpp runs per row for
 * the weight types it does not repack), loaded from a llama.cpp build. */
typedef void (*vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
struct ggml_traits_cpu {
    void (*from_float)(const float *, void *, int64_t);
    vec_dot_t vec_dot;
    int vec_dot_type;
    int64_t nrows;
};

static vec_dot_t ggml_vec_dot(uint32_t type)
{
    static void *h;
    if (!h) {
        const char *path = getenv("SLUICE_GGML_LIB");
        h = dlopen(path && *path ? path : "../llama.cpp/build/bin/libggml-cpu.so", RTLD_NOW | RTLD_LOCAL);
        if (!h) return NULL;
        void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
        if (init) init();
    }
    const struct ggml_traits_cpu *(*get)(int) = (const struct ggml_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
    return get ? get((int)type)->vec_dot : NULL;
}

static void bench_ggml_decode(uint32_t type, int64_t n, int64_t rows, size_t workset, int reps)
{
    vec_dot_t vd = ggml_vec_dot(type);
    if (!vd) return;
    size_t rb = ggml_row_bytes(type, (uint64_t)n), mb = rb * (size_t)rows;
    int nm = (int)(workset / mb);
    if (nm < 1) nm = 1;
    uint8_t *w = malloc(mb * (size_t)nm);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)rows);
    fill(type, w, mb * (size_t)nm);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(rnd() % 2000) * 1e-3f - 1.0f;
    sl_act a = {0};
    sl_err err;
    act_prepare(&a, type, x, n, 1, (size_t)n, NULL, &err);
    int iters = nm < 16 ? 16 : nm;
    double *v = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t = sl_now();
        for (int k = 0; k < iters; k++) {
            const uint8_t *m = w + (size_t)(k % nm) * mb;
            for (int64_t i = 0; i < rows; i++) vd((int)n, y + i, 0, m + (size_t)i * rb, 0, a.data, 0, 1);
        }
        v[r] = (double)mb * iters / (sl_now() - t) / 1e9;
    }
    printf("ggml    %-7s %6lldx%-5lld vec_dot thr=1 %s %7.2f GB/s best, %7.2f median\n", ggml_type_name(type),
           (long long)rows, (long long)n, nm == 1 ? "hot " : "cold", best(v, reps), median(v, reps));
    free(v), free(w), free(x), free(y);
    act_free(&a);
}

/* Decode: y = W x for successive matrices of a working set (cold weights). */
static void bench_decode(uint32_t type, int64_t n, int64_t rows, size_t workset, sl_pool *pool, int reps)
{
    size_t rb = ggml_row_bytes(type, (uint64_t)n), mb = rb * (size_t)rows;
    int nm = (int)(workset / mb);
    if (nm < 1) nm = 1;
    uint8_t *w = malloc(mb * (size_t)nm);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)rows);
    if (!w || !x || !y) {
        printf("  (out of memory for %s %lldx%lld)\n", ggml_type_name(type), (long long)rows, (long long)n);
        free(w), free(x), free(y);
        return;
    }
    fill(type, w, mb * (size_t)nm);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(rnd() % 2000) * 1e-3f - 1.0f;
    sl_act a = {0};
    sl_err err;
    act_prepare(&a, type, x, n, 1, (size_t)n, NULL, &err);
    int iters = nm < 16 ? 16 : nm;
    double *v = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t = sl_now();
        for (int k = 0; k < iters; k++) {
            sl_mat m = {type, n, rows, rb, w + (size_t)(k % nm) * mb, SL_ORDER_SGEMM, SL_LAYOUT_ROWS};
            matmul(&m, &a, y, (size_t)rows, pool);
        }
        v[r] = (double)mb * iters / (sl_now() - t) / 1e9;
    }
    double md = median(v, reps), bs = best(v, reps);
    printf("decode  %-7s %6lldx%-5lld %-6s thr=%d %s %7.2f GB/s best, %7.2f median  (%.1f us/matmul)\n",
           ggml_type_name(type), (long long)rows, (long long)n, kernels_isa_name(pool_isa(pool)), pool_threads(pool),
           nm == 1 ? "hot " : "cold", bs, md, (double)mb / bs / 1e3);
    free(v), free(w), free(x), free(y);
    act_free(&a);
}

/* Prefill: y = W X for T tokens, warm weights. */
static void bench_prefill(uint32_t type, int64_t n, int64_t rows, int64_t T, sl_pool *pool, int reps)
{
    size_t rb = ggml_row_bytes(type, (uint64_t)n), mb = rb * (size_t)rows;
    uint8_t *w = malloc(mb);
    float *x = malloc(sizeof(float) * (size_t)(n * T)), *y = malloc(sizeof(float) * (size_t)(rows * T));
    fill(type, w, mb);
    for (int64_t i = 0; i < n * T; i++) x[i] = (float)(rnd() % 2000) * 1e-3f - 1.0f;
    sl_act a = {0};
    sl_err err;
    sl_mat m = {type, n, rows, rb, w, SL_ORDER_SGEMM, SL_LAYOUT_ROWS};
    double *v = malloc(sizeof(double) * (size_t)reps), *va = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t = sl_now();
        act_prepare(&a, type, x, n, T, (size_t)n, pool, &err);
        double t1 = sl_now();
        matmul(&m, &a, y, (size_t)rows, pool);
        double t2 = sl_now();
        v[r] = 2.0 * (double)n * (double)rows * (double)T / (t2 - t1) / 1e9;
        va[r] = (t1 - t) * 1e3;
    }
    printf("prefill %-7s %6lldx%-5lld T=%-4lld %-6s thr=%d  %7.1f GFLOP/s best, %7.1f median  (act_prepare %.2f ms)\n",
           ggml_type_name(type), (long long)rows, (long long)n, (long long)T, kernels_isa_name(pool_isa(pool)),
           pool_threads(pool), best(v, reps), median(v, reps), median(va, reps));
    free(v), free(va), free(w), free(x), free(y);
    act_free(&a);
}

int main(int argc, char **argv)
{
    int max_threads = cpu_physical_cores(), quick = 0, all_isa = 0, vs_ggml = 0, prefill_only = 0;
    size_t workset = (size_t)1024 << 20;
    const char *types[32];
    int ntypes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) max_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) workset = (size_t)atol(argv[++i]) << 20;
        else if (!strcmp(argv[i], "-q")) quick = 1;
        else if (!strcmp(argv[i], "-a")) all_isa = 1;
        else if (!strcmp(argv[i], "-p")) prefill_only = 1;
        else if (!strcmp(argv[i], "-g")) vs_ggml = 1;
        else if (ntypes < 32) types[ntypes++] = argv[i];
    }
    if (!ntypes) types[0] = "q4_K", types[1] = "q8_0", types[2] = "q6_K", types[3] = "f16", ntypes = 4;
    printf("isa detected: %s, physical cores: %d, working set %zu MB\n", kernels_isa_name(kernels_isa_detected()),
           cpu_physical_cores(), workset >> 20);

    uint8_t *buf = malloc(workset), *dst = malloc(workset);
    memset(buf, 1, workset), memset(dst, 2, workset);
    for (int th = 1; th <= max_threads; th++) {
        sl_pool *p = pool_create(th);
        printf("memory  read %.2f GB/s (thr=%d)\n", read_bw(p, buf, workset), th);
        pool_destroy(p);
    }
    printf("memory  memcpy %.2f GB/s (read+write, 1 thread)\n", memcpy_bw(dst, buf, workset));
    free(dst), free(buf);

    static const int64_t shapes[][2] = {{768, 2048}, {2048, 768}, {4096, 4096}, {2048, 151936}};
    int nshapes = quick ? 3 : 4;
    for (int k = 0; k < ntypes; k++) {
        int type = ggml_type_from_name(types[k]);
        if (type < 0 || !kernels_supports((uint32_t)type)) {
            printf("skip %s: unsupported\n", types[k]);
            continue;
        }
        if (vs_ggml && !prefill_only) {
            bench_ggml_decode((uint32_t)type, 2048, 512, 1, 9);
            bench_ggml_decode((uint32_t)type, 2048, 768, workset, 5);
        }
        for (int th = 1; th <= max_threads; th++) {
            sl_pool *p = pool_create(th);
            for (int isa = kernels_isa_detected(); isa >= (all_isa ? 1 : (int)kernels_isa_detected()); isa--) {
                pool_set_isa(p, (sl_isa)isa);
                if (!prefill_only) {
                    bench_decode((uint32_t)type, 2048, 512, 1, p, 9); /* hot: in L2, compute-bound speed */
                    for (int s = 0; s < nshapes; s++)
                        bench_decode((uint32_t)type, shapes[s][0], shapes[s][1], workset, p, 7);
                } else {
                    bench_prefill((uint32_t)type, 2048, 2048, 16, p, 7);
                }
                bench_prefill((uint32_t)type, 2048, 768, 64, p, 5);
                bench_prefill((uint32_t)type, 2048, 2048, 512, p, 3);
            }
            pool_destroy(p);
        }
    }
    return 0;
}
