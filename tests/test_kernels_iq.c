/* The codebook and ternary types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, TQ1_0, TQ2_0), without external data:
 *  - an element decoder written here from the block layouts (ggml-common.h
 *    as documented in docs/KERNELS.md), in double, independent of the
 *    kernels' code (only the codebooks themselves are shared; the ggml
 *    oracle test checks them against ggml);
 *  - mat_get_row against it, on random blocks including extreme scales;
 *  - products against the double sum of decoded weights times decoded Q8_K
 *    activations (bound from the float rounding count), and against the
 *    float activations within the activation quantisation error;
 *  - every ISA path, row split, tokens-per-call and thread count bit-identical
 *    to the scalar path, for row lengths 256 .. 4352 and a long row. */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/kq_iq.h"
#include "t.h"

static uint64_t rs = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return rs;
}
static double rndu(void) { return (double)(rnd() >> 11) * 0x1p-53; }

static const uint32_t TYPES[] = {GGML_TYPE_IQ1_S,   GGML_TYPE_IQ1_M, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S,
                                 GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S, GGML_TYPE_TQ1_0,   GGML_TYPE_TQ2_0};
#define NT (sizeof TYPES / sizeof TYPES[0])

static unsigned u16at(const uint8_t *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }
static unsigned long u32at(const uint8_t *p) { return (unsigned long)u16at(p) | (unsigned long)u16at(p + 2) << 16; }

static double half(unsigned h)
{
    int e = (int)(h >> 10) & 31, m = (int)(h & 1023);
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* Byte offset of the fp16 superblock scale (IQ1_M: none, it is spread over
 * the scale words). */
static int d_off(uint32_t t)
{
    return t == GGML_TYPE_TQ1_0 ? 52 : t == GGML_TYPE_TQ2_0 ? 64 : t == GGML_TYPE_IQ1_M ? -1 : 0;
}

static double block_d(uint32_t t, const uint8_t *b)
{
    if (t != GGML_TYPE_IQ1_M) return half(u16at(b + d_off(t)));
    unsigned h = 0;
    for (int k = 0; k < 4; k++) h |= (u16at(b + 48 + 2 * k) >> 12) << (4 * k);
    return half(h);
}

/* Sign of coordinate j from 7 stored bits: bit j, and for j = 7 the bit
 * that makes the group's count of minus signs even. */
static int sign7(unsigned bits, int j)
{
    int ones = 0;
    for (int k = 0; k < 7; k++) ones += (bits >> k) & 1;
    int neg = j < 7 ? (int)((bits >> j) & 1) : ones & 1;
    return neg ? -1 : 1;
}

static int gbyte(uint64_t g, int j) { return (int)((g >> (8 * j)) & 0xff); }

/* Element e (0..255) of one superblock, from the layout alone. */
static double ref_elem(uint32_t t, const uint8_t *b, int e)
{
    int ib = e / 32, l = (e % 32) / 8, j = e % 8;
    double d = block_d(t, b);
    switch (t) {
    case GGML_TYPE_IQ2_XXS: {
        unsigned long w = u32at(b + 6 + 8 * ib);
        int s = (int)(w >> 28);
        return d * (0.5 + s) / 4 * gbyte(kq_iq2xxs_grid[b[2 + 8 * ib + l]], j) * sign7((unsigned)(w >> (7 * l)) & 127, j);
    }
    case GGML_TYPE_IQ2_XS: {
        unsigned q = u16at(b + 2 + 2 * (4 * ib + l));
        int s = (b[66 + ib] >> (l < 2 ? 0 : 4)) & 15;
        return d * (0.5 + s) / 4 * gbyte(kq_iq2xs_grid[q & 511], j) * sign7(q >> 9, j);
    }
    case GGML_TYPE_IQ2_S: {
        int idx = b[2 + 4 * ib + l] | ((b[66 + ib] >> (2 * l)) & 3) << 8;
        int s = (b[74 + ib] >> (l < 2 ? 0 : 4)) & 15;
        return d * (0.5 + s) / 4 * gbyte(kq_iq2s_grid[idx], j) * ((b[34 + 4 * ib + l] >> j) & 1 ? -1 : 1);
    }
    case GGML_TYPE_IQ3_XXS: {
        unsigned long w = u32at(b + 66 + 4 * ib);
        int s = (int)(w >> 28);
        int g = gbyte(kq_iq3xxs_grid[b[2 + 8 * ib + 2 * l + j / 4]], j % 4);
        return d * (0.5 + s) / 2 * g * sign7((unsigned)(w >> (7 * l)) & 127, j);
    }
    case GGML_TYPE_IQ3_S: {
        int idx = b[2 + 8 * ib + 2 * l + j / 4] | ((b[66 + ib] >> (2 * l + j / 4)) & 1) << 8;
        int s = (b[106 + ib / 2] >> (ib % 2 ? 4 : 0)) & 15;
        return d * (1 + 2 * s) * gbyte(kq_iq3s_grid[idx], j % 4) * ((b[74 + 4 * ib + l] >> j) & 1 ? -1 : 1);
    }
    case GGML_TYPE_IQ1_S: {
        unsigned qh = u16at(b + 34 + 2 * ib);
        int idx = b[2 + 4 * ib + l] | ((qh >> (3 * l)) & 7) << 8;
        int g = (int8_t)gbyte(kq_iq1s_grid[idx], j), s = (qh >> 12) & 7;
        return d * (2 * s + 1) * (g + (qh & 0x8000 ? -0.125 : 0.125));
    }
    case GGML_TYPE_IQ1_M: {
        int nib = (b[32 + 2 * ib + l / 2] >> (l % 2 ? 4 : 0)) & 15;
        int idx = b[4 * ib + l] | (nib & 7) << 8, g = (int8_t)gbyte(kq_iq1s_grid[idx], j);
        int s = (u16at(b + 48 + 2 * (ib / 2)) >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
        return d * (2 * s + 1) * (g + (nib & 8 ? -0.125 : 0.125));
    }
    case GGML_TYPE_TQ1_0: { /* base-3 digits, most significant first, as a fixed-point fraction of 256 */
        int byte = e < 160 ? e % 32 : e < 240 ? 32 + (e - 160) % 16 : 48 + (e - 240) % 4;
        int digit = e < 160 ? e / 32 : e < 240 ? (e - 160) / 16 : (e - 240) / 4;
        int x = b[byte];
        for (int k = 0; k < digit; k++) x = (x * 3) % 256;
        return ((x * 3) / 256 - 1) * d;
    }
    default: { /* TQ2_0 */
        int c = e / 128, p = (e % 128) / 32, m = e % 32;
        return (((b[32 * c + m] >> (2 * p)) & 3) - 1) * d;
    }
    }
}

static const unsigned EDGE_D[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x1400, 0x3c00};

/* Random superblocks; with EDGES, every other block takes an extreme scale. */
static void fill(uint32_t t, uint8_t *p, size_t nblk, int edges)
{
    size_t bs = ggml_type_get(t)->type_size;
    for (size_t i = 0; i < nblk * bs; i++) p[i] = (uint8_t)rnd();
    for (size_t k = 0; k < nblk; k++) {
        uint8_t *b = p + k * bs;
        unsigned h = edges && (k & 1) ? EDGE_D[rnd() % (sizeof EDGE_D / sizeof EDGE_D[0])]
                                      : (unsigned)(0x1800 + rnd() % 0x1000) | (rnd() & 1 ? 0x8000 : 0);
        if (t == GGML_TYPE_IQ1_M)
            for (int q = 0; q < 4; q++) b[49 + 2 * q] = (uint8_t)((b[49 + 2 * q] & 0x0f) | ((h >> (4 * q)) & 15) << 4);
        else
            b[d_off(t)] = (uint8_t)h, b[d_off(t) + 1] = (uint8_t)(h >> 8);
    }
}

static void rand_x(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double g = rndu() + rndu() + rndu() - 1.5;
        x[i] = (float)(g * (i % 97 == 0 ? 8.0 : 1.0) * 1e-2);
    }
}

static double act_val(const sl_act *a, int64_t t, int64_t i)
{
    const blk_q8_K *y = (const blk_q8_K *)((const uint8_t *)a->data + (size_t)t * a->row_bytes) + i / 256;
    return (double)y->d * y->qs[i % 256];
}

static void test_dequant(void)
{
    for (size_t k = 0; k < NT; k++) {
        uint32_t t = TYPES[k];
        char name[96];
        snprintf(name, sizeof name, "%s: mat_get_row = layout decoder (incl. extreme scales)", ggml_type_name(t));
        t_begin(name);
        const int64_t n = 256 * 12, rows = 9;
        size_t rb = ggml_row_bytes(t, (uint64_t)n);
        uint8_t *w = malloc(rb * rows);
        fill(t, w, (size_t)(n / 256 * rows), 1);
        sl_mat m = {t, n, rows, rb, w, 0, SL_LAYOUT_ROWS};
        float out[256 * 12];
        for (int64_t r = 0; r < rows; r++) {
            mat_get_row(&m, r, out);
            for (int64_t i = 0; i < n; i++) {
                double ref = ref_elem(t, w + r * rb + (size_t)(i / 256) * (rb / (size_t)(n / 256)), (int)(i % 256));
                double err = fabs((double)out[i] - ref);
                if (!(err <= 3e-7 * fabs(ref) + 1e-45)) {
                    T_CHECK(0, "row %lld element %lld: %.9g vs %.9g", (long long)r, (long long)i, out[i], ref);
                    r = rows;
                    break;
                }
            }
        }
        free(w);
        t_end();
    }
}

static void test_dot(void)
{
    for (size_t k = 0; k < NT; k++) {
        uint32_t t = TYPES[k];
        char name[128];
        snprintf(name, sizeof name, "%s: products vs double reference (Q8_K and float activations)", ggml_type_name(t));
        t_begin(name);
        const int64_t n = 256 * 16, rows = 20, T = 3;
        size_t rb = ggml_row_bytes(t, (uint64_t)n), bs = ggml_type_get(t)->type_size;
        uint8_t *w = malloc(rb * rows);
        fill(t, w, (size_t)(n / 256 * rows), 0);
        for (int64_t r = 0; r < 4; r++) /* extreme scales, but finite products */
            for (int64_t b = 0; b < n / 256; b++) {
                uint8_t *blk = w + r * rb + (size_t)b * bs;
                unsigned h = EDGE_D[(size_t)(r * 5 + b) % (sizeof EDGE_D / sizeof EDGE_D[0])];
                if (t == GGML_TYPE_IQ1_M)
                    for (int q = 0; q < 4; q++) blk[49 + 2 * q] = (uint8_t)((blk[49 + 2 * q] & 0x0f) | ((h >> (4 * q)) & 15) << 4);
                else
                    blk[d_off(t)] = (uint8_t)h, blk[d_off(t) + 1] = (uint8_t)(h >> 8);
            }
        sl_mat m = {t, n, rows, rb, w, 0, SL_LAYOUT_ROWS};
        float *x = malloc(sizeof(float) * (size_t)(n * T)), y[20 * 3];
        rand_x(x, n * T);
        sl_act a = {0};
        sl_err err;
        T_CHECK(act_prepare(&a, t, x, n, T, (size_t)n, NULL, &err) == 0, "%s", err.msg);
        T_CHECK(a.vtype == GGML_TYPE_Q8_K, "activations are %s, not q8_K", ggml_type_name(a.vtype));
        matmul(&m, &a, y, rows, NULL);
        for (int64_t tt = 0; tt < T; tt++)
            for (int64_t r = 0; r < rows; r++) {
                double s = 0, mag = 0, sf = 0, qerr = 0;
                for (int64_t i = 0; i < n; i++) {
                    double wv = ref_elem(t, w + r * rb + (size_t)(i / 256) * bs, (int)(i % 256)), av = act_val(&a, tt, i);
                    s += wv * av, mag += fabs(wv * av), sf += wv * x[tt * n + i];
                    qerr += fabs(wv) * fabs(((const blk_q8_K *)((const uint8_t *)a.data + (size_t)tt * a.row_bytes))[i / 256].d) * 0.5;
                }
                double got = y[tt * rows + r], tol = (double)(n / 256 + 8) * 1.2e-7 * mag + 1e-38;
                T_CHECK(fabs(got - s) <= tol, "T%lld row %lld: %.9g vs %.9g (tol %.3g)", (long long)tt, (long long)r, got, s, tol);
                T_CHECK(fabs(got - sf) <= tol + fabs(qerr) * 1.01, "T%lld row %lld vs float activations: %.9g vs %.9g",
                        (long long)tt, (long long)r, got, sf);
            }
        act_free(&a);
        free(w), free(x);
        t_end();
    }
}

/* y of rows [0, rows) x T tokens on path ISA, in calls of PER tokens. */
static void run(const sl_mat *m, const float *x, int64_t T, int64_t per, sl_isa isa, float *y)
{
    sl_act a = {0};
    sl_err err;
    for (int64_t t0 = 0; t0 < T; t0 += per) {
        int64_t cnt = T - t0 < per ? T - t0 : per;
        act_prepare(&a, m->type, x + t0 * m->ne0, m->ne0, cnt, (size_t)m->ne0, NULL, &err);
        matmul_rows(m, &a, y + t0 * m->ne1, (size_t)m->ne1, 0, m->ne1, isa);
    }
    act_free(&a);
}

static void test_bit_identity(void)
{
    sl_isa max = kernels_isa_detected();
    sl_pool *p2 = pool_create(2), *p3 = pool_create(3);
    for (size_t k = 0; k < NT; k++) {
        uint32_t t = TYPES[k];
        char name[128];
        snprintf(name, sizeof name, "%s: isa paths, row lengths 256..4352, splits, T per call, threads identical",
                 ggml_type_name(t));
        t_begin(name);
        const int64_t rows = 37, T = 11;
        for (int64_t nb = 1; nb <= 17 + 1 && !t_cur.failed; nb++) {
            int64_t n = 256 * (nb <= 17 ? nb : 64);
            size_t rb = ggml_row_bytes(t, (uint64_t)n);
            uint8_t *w = malloc(rb * rows);
            fill(t, w, (size_t)(n / 256 * rows), 1);
            sl_mat m = {t, n, rows, rb, w, 0, SL_LAYOUT_ROWS};
            float *x = malloc(sizeof(float) * (size_t)(n * T));
            rand_x(x, n * T);
            size_t ysz = sizeof(float) * (size_t)(rows * T);
            float *ref = malloc(ysz), *y = malloc(ysz);
            run(&m, x, T, T, SL_ISA_SCALAR, ref);
            const int64_t pers[] = {1, 4, 5, T};
            for (int isa = SL_ISA_SCALAR; isa <= (int)max; isa++)
                for (int pi = 0; pi < 4; pi++) {
                    int64_t per = pers[pi];
                    memset(y, 0xff, ysz);
                    run(&m, x, T, per, (sl_isa)isa, y);
                    T_CHECK(memcmp(y, ref, ysz) == 0, "n=%lld: %s with %lld tokens per call differs from scalar",
                            (long long)n, kernels_isa_name((sl_isa)isa), (long long)per);
                }
            sl_act a = {0};
            sl_err err;
            act_prepare(&a, t, x, n, T, (size_t)n, NULL, &err);
            for (int isa = SL_ISA_AVX2; isa <= (int)max; isa++) { /* odd row splits */
                memset(y, 0xff, ysz);
                matmul_rows(&m, &a, y, (size_t)rows, 0, 3, (sl_isa)isa);
                matmul_rows(&m, &a, y, (size_t)rows, 3, 20, (sl_isa)isa);
                matmul_rows(&m, &a, y, (size_t)rows, 20, rows, (sl_isa)isa);
                T_CHECK(memcmp(y, ref, ysz) == 0, "n=%lld: %s split rows differ", (long long)n, kernels_isa_name((sl_isa)isa));
            }
            sl_pool *pools[2] = {p2, p3};
            for (int pi = 0; pi < 2; pi++) {
                memset(y, 0xff, ysz);
                matmul(&m, &a, y, (size_t)rows, pools[pi]);
                T_CHECK(memcmp(y, ref, ysz) == 0, "n=%lld: %d threads differ", (long long)n, pi + 2);
            }
            act_free(&a);
            free(w), free(x), free(ref), free(y);
        }
        t_end();
    }
    pool_destroy(p2);
    pool_destroy(p3);
}

/* Every sub-block scale at its largest odd factor and d = 1: the worst case
 * for the SIMD paths' 16-bit pair sums and 32-bit lanes. */
static void max_scales(uint32_t t, uint8_t *b)
{
    switch (t) {
    case GGML_TYPE_IQ2_XXS: for (int ib = 0; ib < 8; ib++) b[9 + 8 * ib] |= 0xf0; break;
    case GGML_TYPE_IQ2_XS: memset(b + 66, 0xff, 8); break;
    case GGML_TYPE_IQ2_S: memset(b + 74, 0xff, 8); break;
    case GGML_TYPE_IQ3_XXS: for (int ib = 0; ib < 8; ib++) b[69 + 4 * ib] |= 0xf0; break;
    case GGML_TYPE_IQ3_S: memset(b + 106, 0xff, 4); break;
    case GGML_TYPE_IQ1_S: for (int ib = 0; ib < 8; ib++) b[35 + 2 * ib] |= 0x70; break;
    case GGML_TYPE_IQ1_M: for (int q = 0; q < 4; q++) b[48 + 2 * q] = 0xff, b[49 + 2 * q] |= 0x0f; break;
    case GGML_TYPE_TQ1_0: memset(b, 0xff, 52); break; /* 0xff: five digits 2 */
    default: memset(b, 0xaa, 64); break;              /* TQ2_0: all 2 */
    }
    if (t == GGML_TYPE_IQ1_M)
        for (int q = 0; q < 4; q++) b[49 + 2 * q] = (uint8_t)((b[49 + 2 * q] & 0x0f) | ((0x3c00 >> (4 * q)) & 15) << 4);
    else
        b[d_off(t)] = 0x00, b[d_off(t) + 1] = 0x3c;
}

static void test_extremes(void)
{
    sl_isa max = kernels_isa_detected();
    for (size_t k = 0; k < NT; k++) {
        uint32_t t = TYPES[k];
        char name[128];
        snprintf(name, sizeof name, "%s: largest scales, activations +-127 along the weight signs: exact, every path",
                 ggml_type_name(t));
        t_begin(name);
        const int64_t n = 256 * 8, rows = 19;
        size_t rb = ggml_row_bytes(t, (uint64_t)n), bs = ggml_type_get(t)->type_size;
        uint8_t *w = malloc(rb * rows);
        fill(t, w, (size_t)(n / 256 * rows), 0);
        for (int64_t b = 0; b < n / 256 * rows; b++) max_scales(t, w + (size_t)b * bs);
        sl_mat m = {t, n, rows, rb, w, 0, SL_LAYOUT_ROWS};
        /* token r follows row r's signs: every product of that pair is positive */
        float *x = malloc(sizeof(float) * (size_t)(n * rows));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++)
                x[r * n + i] = ref_elem(t, w + r * rb + (size_t)(i / 256) * bs, (int)(i % 256)) < 0 ? -1.0f : 1.0f;
        sl_act a = {0};
        sl_err err;
        act_prepare(&a, t, x, n, rows, (size_t)n, NULL, &err);
        size_t ysz = sizeof(float) * (size_t)(rows * rows);
        float *ref = malloc(ysz), *y = malloc(ysz);
        matmul_rows(&m, &a, ref, (size_t)rows, 0, rows, SL_ISA_SCALAR);
        for (int64_t r = 0; r < rows && !t_cur.failed; r++) {
            double s = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                double wv = ref_elem(t, w + r * rb + (size_t)(i / 256) * bs, (int)(i % 256)), av = act_val(&a, r, i);
                s += wv * av, mag += fabs(wv * av);
            }
            double got = ref[r * rows + r];
            T_CHECK(fabs(got - s) <= 1e-6 * mag, "row %lld: %.9g vs %.9g", (long long)r, got, s);
        }
        for (int isa = SL_ISA_AVX2; isa <= (int)max; isa++) {
            memset(y, 0xff, ysz);
            matmul_rows(&m, &a, y, (size_t)rows, 0, rows, (sl_isa)isa);
            T_CHECK(memcmp(y, ref, ysz) == 0, "%s differs from scalar", kernels_isa_name((sl_isa)isa));
        }
        act_free(&a);
        free(w), free(x), free(ref), free(y);
        t_end();
    }
}

/* Rows longer than the SIMD paths' L2 chunk, several chunks per call. */
static void test_long_rows(void)
{
    sl_isa max = kernels_isa_detected();
    for (size_t k = 0; k < NT; k++) {
        uint32_t t = TYPES[k];
        char name[128];
        snprintf(name, sizeof name, "%s: 80 rows of 32768 (several L2 chunks), 9 tokens: every path = scalar",
                 ggml_type_name(t));
        t_begin(name);
        const int64_t n = 256 * 128, rows = 80, T = 9;
        size_t rb = ggml_row_bytes(t, (uint64_t)n);
        uint8_t *w = malloc(rb * rows);
        fill(t, w, (size_t)(n / 256 * rows), 1);
        sl_mat m = {t, n, rows, rb, w, 0, SL_LAYOUT_ROWS};
        float *x = malloc(sizeof(float) * (size_t)(n * T));
        rand_x(x, n * T);
        size_t ysz = sizeof(float) * (size_t)(rows * T);
        float *ref = malloc(ysz), *y = malloc(ysz);
        run(&m, x, T, T, SL_ISA_SCALAR, ref);
        for (int isa = SL_ISA_AVX2; isa <= (int)max; isa++) {
            memset(y, 0xff, ysz);
            run(&m, x, T, T, (sl_isa)isa, y);
            T_CHECK(memcmp(y, ref, ysz) == 0, "%s differs from scalar", kernels_isa_name((sl_isa)isa));
        }
        free(w), free(x), free(ref), free(y);
        t_end();
    }
}

static void test_supported(void)
{
    t_begin("codebook/ternary types: supported, Q8_K activations, rows of 256 only");
    float x[300] = {0};
    sl_act a = {0};
    for (size_t k = 0; k < NT; k++) {
        sl_err err = {{0}};
        T_CHECK(kernels_supports(TYPES[k]), "%s not supported", ggml_type_name(TYPES[k]));
        T_CHECK(kernels_vec_dot_type(TYPES[k]) == GGML_TYPE_Q8_K, "%s: vec_dot_type", ggml_type_name(TYPES[k]));
        T_CHECK(act_prepare(&a, TYPES[k], x, 288, 1, 288, NULL, &err) == -1 && strstr(err.msg, "multiple of 256"),
                "%s: row of 288 accepted (%s)", ggml_type_name(TYPES[k]), err.msg);
    }
    act_free(&a);
    t_end();
}

int main(void)
{
    (void)t_shared;
    test_supported();
    test_dequant();
    test_dot();
    test_bit_identity();
    test_extremes();
    test_long_rows();
    return t_done();
}
