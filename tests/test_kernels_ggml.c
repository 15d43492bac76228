/* Kernels against ggml itself, when a llama.cpp build is at hand
 * ($SLUICE_GGML_LIB, default ../llama.cpp/build/bin/libggml-cpu.so; the cases
 * skip otherwise).  ggml is loaded with dlopen and used only as an oracle:
 *  - act_prepare must equal ggml's from_float (quantize_row_q8_0/q8_1/q8_K,
 *    fp32->fp16/bf16) byte for byte;
 *  - mat_get_row must equal ggml's to_float (dequantize_row_*) bit for bit,
 *    on blocks made by ggml's own quantisers;
 *  - matmul must agree with ggml's vec_dot up to float summation order, and
 *    equal it bit for bit for the codebook / ternary types (IQ1-IQ3, TQ),
 *    whose float order sluice reproduces (docs/KERNELS.md), on ggml-made and
 *    on random blocks, on every ISA path. */
#include <dlfcn.h>
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kq.h"
#include "t.h"

typedef void (*from_float_t)(const float *x, void *y, int64_t k);
typedef void (*to_float_t)(const void *x, float *y, int64_t k);
typedef void (*vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);

struct traits_cpu {
    from_float_t from_float;
    vec_dot_t vec_dot;
    int vec_dot_type;
    int64_t nrows;
};
struct traits {
    const char *type_name;
    int64_t blck_size, blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    to_float_t to_float;
    from_float_t from_float_ref;
};

static struct {
    const struct traits_cpu *(*cpu)(int type);
    const struct traits *(*base)(int type);
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows, int64_t n_per_row,
                             const float *imatrix);
} G;

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return rs;
}
static float rndf(void) { return (float)((double)(rnd() >> 11) * 0x1p-53 * 2.0 - 1.0); }

static int load(void)
{
    const char *path = getenv("SLUICE_GGML_LIB");
    if (!path || !*path) path = "../llama.cpp/build/bin/libggml-cpu.so";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    G.cpu = (const struct traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
    G.base = (const struct traits *(*)(int))dlsym(h, "ggml_get_type_traits");
    *(void **)&G.quantize_chunk = dlsym(h, "ggml_quantize_chunk");
    if (!init || !G.cpu || !G.base || !G.quantize_chunk) return -1;
    init();
    return 0;
}

/* Inputs that stress the quantisers: mixed magnitudes, exact ties, zero and
 * tiny blocks, repeated extremes of both signs. */
static void make_inputs(float *x, int64_t n, int variant)
{
    for (int64_t i = 0; i < n; i++) {
        float v = rndf() * (float)ldexp(1.0, (int)(rnd() % 12) - 6);
        switch (variant % 6) {
        case 1: v = (float)((int)(rndf() * 300)) * 0.5f; break;       /* many exact .5 ties */
        case 2: v = (i / 32) % 3 == 0 ? 0.0f : v; break;              /* zero blocks */
        case 3: v = rndf() * 1e-30f; break;                           /* subnormal-ish scales */
        case 4: v = (i % 17 == 0) ? ((i & 1) ? 7.0f : -7.0f) : v; break; /* +-max ties */
        case 5: v = rndf() * 60000.0f; break;
        }
        x[i] = v;
    }
}

static void test_act_exact(void)
{
    static const struct { uint32_t wtype; const char *what; } cases[] = {
        {GGML_TYPE_Q4_0, "q8_0"}, {GGML_TYPE_Q4_1, "q8_1"}, {GGML_TYPE_Q4_K, "q8_K"},
        {GGML_TYPE_F16, "f16"},   {GGML_TYPE_BF16, "bf16"},
    };
    const int64_t n = 4096;
    float *x = malloc(sizeof(float) * n);
    uint8_t *ref = malloc(n * 4);
    sl_act a = {0};
    sl_err err;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[96];
        snprintf(name, sizeof name, "ggml oracle: act_prepare %s equals ggml from_float byte for byte", cases[c].what);
        t_begin(name);
        uint32_t vt = kernels_vec_dot_type(cases[c].wtype);
        T_CHECK((int)vt == G.cpu((int)cases[c].wtype)->vec_dot_type, "vec_dot_type %u vs ggml %d", vt,
                G.cpu((int)cases[c].wtype)->vec_dot_type);
        for (int v = 0; v < 60; v++) {
            make_inputs(x, n, v);
            T_CHECK(act_prepare(&a, cases[c].wtype, x, n, 1, (size_t)n, NULL, &err) == 0, "%s", err.msg);
            memset(ref, 0, n * 4);
            G.cpu((int)vt)->from_float(x, ref, n);
            if (memcmp(a.data, ref, a.row_bytes) != 0) {
                size_t k = 0;
                while (((uint8_t *)a.data)[k] == ref[k]) k++;
                T_CHECK(0, "variant %d: first difference at byte %zu (%02x vs ggml %02x)", v, k,
                        ((uint8_t *)a.data)[k], ref[k]);
                break;
            }
        }
        t_end();
    }
    act_free(&a);
    free(x), free(ref);
}

static const uint32_t QT[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                              GGML_TYPE_IQ4_NL, GGML_TYPE_MXFP4, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K,
                              GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_F16, GGML_TYPE_BF16,
                              GGML_TYPE_F32, GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS,
                              GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S, GGML_TYPE_TQ1_0, GGML_TYPE_TQ2_0};

static bool exact_order(uint32_t t)
{
    return t == GGML_TYPE_IQ1_S || t == GGML_TYPE_IQ1_M || t == GGML_TYPE_IQ2_XXS || t == GGML_TYPE_IQ2_XS ||
           t == GGML_TYPE_IQ2_S || t == GGML_TYPE_IQ3_XXS || t == GGML_TYPE_IQ3_S || t == GGML_TYPE_TQ1_0 ||
           t == GGML_TYPE_TQ2_0;
}

/* Every row of W times X on every ISA path equals ggml's vec_dot bit for bit. */
static void check_exact(const sl_mat *m, const sl_act *a, const char *what)
{
    float y[24], s;
    for (int isa = SL_ISA_SCALAR; isa <= (int)kernels_isa_detected(); isa++) {
        matmul_rows(m, a, y, (size_t)m->ne1, 0, m->ne1, (sl_isa)isa);
        for (int64_t r = 0; r < m->ne1; r++) {
            G.cpu((int)m->type)->vec_dot((int)m->ne0, &s, 0, (const uint8_t *)m->data + r * m->row_bytes, 0, a->data, 0, 1);
            if (memcmp(&s, &y[r], 4) != 0) {
                T_CHECK(0, "%s, isa %d, row %lld: %.9g vs ggml vec_dot %.9g", what, isa, (long long)r, y[r], s);
                return;
            }
        }
    }
}

static void test_weights(void)
{
    const int64_t n = 2048, rows = 24;
    float *src = malloc(sizeof(float) * n * rows), *out = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    float *xin = malloc(sizeof(float) * n), *imat = malloc(sizeof(float) * n);
    __builtin_cpu_init();
    const bool fp16_hw = __builtin_cpu_supports("avx512fp16");
    for (size_t k = 0; k < sizeof QT / sizeof QT[0]; k++) {
        uint32_t t = QT[k];
        char name[96];
        snprintf(name, sizeof name, "ggml oracle: %s get_row bit-exact, matmul ~ vec_dot", ggml_type_name(t));
        t_begin(name);
        size_t rb = ggml_row_bytes(t, (uint64_t)n);
        uint8_t *w = malloc(rb * rows);
        for (int64_t i = 0; i < n * rows; i++) src[i] = rndf() * 0.05f * (float)(1 + (i / n) % 4);
        for (int64_t i = 0; i < n; i++) imat[i] = 0.5f + (float)(rnd() % 1000) * 1e-3f;
        G.quantize_chunk((int)t, src, w, 0, rows, n, imat);
        sl_mat m = {t, n, rows, rb, w, SL_ORDER_SGEMM, SL_LAYOUT_ROWS};
        for (int64_t r = 0; r < rows; r++) {
            mat_get_row(&m, r, out);
            if (G.base((int)t)->to_float)
                G.base((int)t)->to_float(w + r * rb, ref, n);
            else
                memcpy(ref, w + r * rb, sizeof(float) * n);
            if (memcmp(out, ref, sizeof(float) * n) != 0) {
                T_CHECK(0, "row %lld differs from ggml to_float", (long long)r);
                break;
            }
        }
        sl_act a = {0};
        sl_err err;
        make_inputs(xin, n, 0);
        act_prepare(&a, t, xin, n, 1, (size_t)n, NULL, &err);
        float y[24];
        matmul(&m, &a, y, rows, NULL);
        double worst = 0;
        for (int64_t r = 0; r < rows; r++) {
            float s = 0;
            G.cpu((int)t)->vec_dot((int)n, &s, 0, w + r * rb, 0, a.data, 0, 1);
            mat_get_row(&m, r, out);
            double mag = 0;
            for (int64_t i = 0; i < n; i++) mag += fabs(out[i] * xin[i]);
            /* Summation order only: worst 5.3e-8 of sum|w x| over these types
             * (AVX-512, no FP16), bound 3e-7.  ggml built for AVX512-FP16
             * hardware accumulates F16 dot products in fp16
             * (GGML_F16x32_FMA = _mm512_fmadd_ph); sluice keeps f32 lanes. */
            double tol = (t == GGML_TYPE_F16 && fp16_hw ? 2e-3 : 3e-7) * mag;
            worst = fmax(worst, fabs(s - y[r]) / mag);
            T_CHECK(fabs(s - y[r]) <= tol + 1e-30, "row %lld: %.9g vs ggml %.9g", (long long)r, y[r], s);
        }
        printf("# %s: matmul vs ggml vec_dot, worst |d| / sum|w x| %.3g\n", ggml_type_name(t), worst);
        if (exact_order(t)) {
            for (int v = 0; v < 6; v++) {
                make_inputs(xin, n, v);
                act_prepare(&a, t, xin, n, 1, (size_t)n, NULL, &err);
                check_exact(&m, &a, "ggml-quantised blocks");
            }
            for (size_t i = 0; i < rb * rows; i++) w[i] = (uint8_t)rnd(); /* any bits, sane fp16 scales */
            for (int64_t b = 0; b < n / 256 * rows; b++) {
                size_t bs = rb / (size_t)(n / 256), at = t == GGML_TYPE_IQ1_M ? 0 : t == GGML_TYPE_TQ1_0 ? 52
                                                         : t == GGML_TYPE_TQ2_0 ? 64 : 0;
                uint16_t h = (uint16_t)(0x2000 + rnd() % 0x3000 + (rnd() & 1 ? 0x8000 : 0));
                if (t != GGML_TYPE_IQ1_M) memcpy(w + (size_t)b * bs + at, &h, 2);
            }
            check_exact(&m, &a, "random blocks");
        }
        /* the vec_dot order is ggml's vec_dot_bf16 on AVX512_BF16, bit for bit;
         * a CPU without it runs another ggml loop, which the order does not claim */
        if (t == GGML_TYPE_BF16 && kq_cpu_has_avx512bf16()) {
            m.order = SL_ORDER_VEC_DOT;
            matmul(&m, &a, y, rows, NULL);
            for (int64_t r = 0; r < rows; r++) {
                float sg = 0;
                G.cpu((int)t)->vec_dot((int)n, &sg, 0, w + r * rb, 0, a.data, 0, 1);
                T_CHECK(memcmp(&sg, &y[r], 4) == 0, "bf16 vec_dot order row %lld: %.9g vs ggml %.9g", (long long)r, y[r], sg);
            }
        }
        act_free(&a);
        free(w);
        t_end();
    }
    free(src), free(out), free(ref), free(xin), free(imat);
}

int main(void)
{
    (void)t_shared;
    if (load()) {
        t_skip("ggml oracle", "no llama.cpp build (set SLUICE_GGML_LIB to libggml-cpu.so)");
        return t_done();
    }
    test_act_exact();
    test_weights();
    return t_done();
}
