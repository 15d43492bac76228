/* Q8_0 weights interleaved by 16 rows (src/kernels/interleave.c): products
 * and row lookups give the bits of the same matrix in GGUF's row layout on
 * every ISA path, for any row range, token count and thread count, and
 * nothing outside the asked rows is written. */
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/kq.h"
#include "t.h"

static uint64_t rng_s = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}

/* Random Q8_0 rows: scales over a few binades, every quant value (-128 too). */
static void fill_q8_0(uint8_t *w, int64_t ne0, int64_t ne1)
{
    for (int64_t r = 0; r < ne1; r++)
        for (int64_t b = 0; b < ne0 / QK; b++) {
            blk_q8_0 blk;
            blk.d = fp32_to_fp16(ldexpf((float)(rnd() % 1000 + 1) / 1000.0f, -(int)(rnd() % 8)));
            for (int e = 0; e < QK; e++) blk.qs[e] = (int8_t)(rnd() & 0xff);
            memcpy(w + (size_t)r * (size_t)(ne0 / QK) * sizeof blk + (size_t)b * sizeof blk, &blk, sizeof blk);
        }
}

typedef struct {
    sl_mat rows, il;
    uint8_t *rbuf, *ibuf;
} pair;

static int pair_make(pair *p, int64_t ne0, int64_t ne1)
{
    size_t rb = (size_t)(ne0 / QK) * sizeof(blk_q8_0);
    p->rbuf = malloc(rb * (size_t)ne1);
    fill_q8_0(p->rbuf, ne0, ne1);
    p->rows = (sl_mat){.type = GGML_TYPE_Q8_0, .ne0 = ne0, .ne1 = ne1, .row_bytes = rb, .data = p->rbuf};
    p->il = p->rows;
    p->ibuf = malloc(mat_interleaved_bytes(&p->il));
    memcpy(p->ibuf, p->rbuf, rb * (size_t)ne1);
    p->il.data = p->ibuf;
    return mat_interleave(&p->il, p->ibuf);
}

static void pair_free(pair *p)
{
    free(p->rbuf);
    free(p->ibuf);
}

static void prep(sl_act *a, int64_t ne0, int T)
{
    float *x = malloc(sizeof(float) * (size_t)(ne0 * T));
    for (int64_t i = 0; i < ne0 * T; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 250.0f;
    sl_err err;
    if (act_prepare(a, GGML_TYPE_Q8_0, x, ne0, T, (size_t)ne0, NULL, &err)) T_CHECK(0, "%s", err.msg);
    free(x);
}

static const float SENTINEL = -12345.5f;

/* Rows [r0, r1) of both layouts on one ISA path: the same bits, and the
 * rows around the range untouched. */
static void check_range(const pair *p, const sl_act *a, int64_t r0, int64_t r1, sl_isa isa, const char *what)
{
    size_t n = (size_t)a->rows * (size_t)p->rows.ne1;
    float *y0 = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) y0[i] = y1[i] = SENTINEL;
    matmul_rows(&p->rows, a, y0, (size_t)p->rows.ne1, r0, r1, SL_ISA_SCALAR);
    matmul_rows(&p->il, a, y1, (size_t)p->rows.ne1, r0, r1, isa);
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        int64_t r = (int64_t)(i % (size_t)p->rows.ne1);
        if (memcmp(&y0[i], &y1[i], 4)) {
            T_CHECK(0, "%s: %lldx%lld T=%lld rows [%lld,%lld): token %zu row %lld: %.9g (rows, scalar) vs %.9g", what,
                    (long long)p->rows.ne0, (long long)p->rows.ne1, (long long)a->rows, (long long)r0, (long long)r1,
                    i / (size_t)p->rows.ne1, (long long)r, y0[i], y1[i]);
            bad = 1;
        } else if ((r < r0 || r >= r1) && y1[i] != SENTINEL) {
            T_CHECK(0, "%s: row %lld outside [%lld,%lld) written", what, (long long)r, (long long)r0, (long long)r1);
            bad = 1;
        }
    }
    free(y0);
    free(y1);
}

static void test_products(void)
{
    static const int64_t NE0[] = {32, 64, 256, 320};
    static const int64_t NE1[] = {1, 15, 16, 17, 33, 100};
    static const int TS[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 17};
    sl_isa top = kernels_isa_detected();
    t_begin("interleaved Q8_0 products equal the row layout's on every path");
    for (size_t i = 0; i < sizeof NE0 / sizeof *NE0; i++)
        for (size_t j = 0; j < sizeof NE1 / sizeof *NE1; j++) {
            pair p;
            T_CHECK(pair_make(&p, NE0[i], NE1[j]) == 0, "interleave %lldx%lld", (long long)NE0[i], (long long)NE1[j]);
            for (size_t k = 0; k < sizeof TS / sizeof *TS; k++) {
                sl_act a = {0};
                prep(&a, NE0[i], TS[k]);
                int64_t ne1 = NE1[j], mid0 = ne1 / 3, mid1 = ne1 - ne1 / 4;
                for (int isa = SL_ISA_SCALAR; isa <= (int)top; isa++) {
                    const char *nm = isa == SL_ISA_AVX512 ? "avx512" : isa == SL_ISA_AVX2 ? "avx2" : "scalar";
                    check_range(&p, &a, 0, ne1, (sl_isa)isa, nm);
                    if (mid1 > mid0) check_range(&p, &a, mid0, mid1, (sl_isa)isa, nm);
                }
                act_free(&a);
            }
            pair_free(&p);
        }
    t_end();
}

static void test_threads(void)
{
    t_begin("interleaved products on a pool of 2 equal one thread's");
    pair p;
    T_CHECK(pair_make(&p, 256, 1000) == 0, "interleave");
    sl_pool *pool = pool_create(2);
    for (int T = 1; T <= 10; T += 3) {
        sl_act a = {0};
        prep(&a, 256, T);
        size_t n = (size_t)T * 1000;
        float *y0 = malloc(sizeof(float) * n), *y1 = malloc(sizeof(float) * n);
        matmul(&p.rows, &a, y0, 1000, NULL);
        matmul(&p.il, &a, y1, 1000, pool);
        T_CHECK(!memcmp(y0, y1, sizeof(float) * n), "T=%d: 2 threads differ from the row layout", T);
        free(y0);
        free(y1);
        act_free(&a);
    }
    pool_destroy(pool);
    pair_free(&p);
    t_end();
}

static void test_rows_and_refusals(void)
{
    t_begin("interleaved row lookups equal the row layout's; other types are refused");
    pair p;
    T_CHECK(pair_make(&p, 96, 37) == 0, "interleave");
    float a[96], b[96];
    for (int64_t r = 0; r < 37; r++) {
        mat_get_row(&p.rows, r, a);
        mat_get_row(&p.il, r, b);
        T_CHECK(!memcmp(a, b, sizeof a), "row %lld differs", (long long)r);
    }
    T_CHECK(mat_interleaved_bytes(&p.rows) == 48 * p.rows.row_bytes, "37 rows take 3 groups of 16");
    T_CHECK(!mat_interleavable(&p.il), "an interleaved matrix is not interleaved again");
    T_CHECK(mat_interleave(&p.il, p.ibuf) == -1 && p.il.layout == SL_LAYOUT_Q8_0_R16, "second interleave refused");
    sl_mat q4 = {.type = GGML_TYPE_Q4_0, .ne0 = 64, .ne1 = 16, .row_bytes = 36, .data = p.rbuf};
    T_CHECK(!mat_interleavable(&q4) && mat_interleave(&q4, p.rbuf) == -1 && q4.layout == SL_LAYOUT_ROWS,
            "Q4_0 refused, unchanged");
    sl_mat other = p.rows;
    T_CHECK(mat_interleave(&other, p.ibuf) == -1, "a buffer other than the matrix's refused");
    pair_free(&p);
    t_end();
}

static void test_many(void)
{
    t_begin("mat_interleave_n lays out every matrix at its stride as mat_interleave does one");
    pair p;
    T_CHECK(pair_make(&p, 64, 32) == 0, "interleave");
    size_t one = 32 * p.rows.row_bytes, stride = one + 64;
    uint8_t *buf = calloc(3, stride);
    for (int i = 0; i < 3; i++) memcpy(buf + i * stride, p.rbuf, one);
    sl_mat w = p.rows;
    w.data = buf;
    T_CHECK(mat_interleave_n(&w, buf, 3, stride) == 0 && w.layout == SL_LAYOUT_Q8_0_R16, "interleave 3");
    for (int i = 0; i < 3; i++) {
        T_CHECK(!memcmp(buf + i * stride, p.ibuf, one), "matrix %d differs from mat_interleave's", i);
        for (size_t k = one; k < stride; k++) T_CHECK(buf[i * stride + k] == 0, "matrix %d: byte past it written", i);
    }
    free(buf);
    pair_free(&p);
    t_end();
}

/* The AVX-512 rewrite against the scalar one, byte for byte: every row
 * count of a group (missing rows zero), block counts from 1, random
 * quants and scales (the scale's bytes include NaN and inf patterns). */
static void test_paths(void)
{
    const char *name = "the AVX-512 interleave writes the scalar one's bytes for 1..16 rows";
    if (kernels_isa_detected() < SL_ISA_AVX512) {
        t_skip(name, "no AVX-512 on this CPU");
        return;
    }
    t_begin(name);
    const int64_t nbs[] = {1, 2, 7, 8, 24};
    for (size_t k = 0; k < sizeof nbs / sizeof *nbs; k++) {
        int64_t nb = nbs[k];
        size_t row_bytes = (size_t)nb * sizeof(blk_q8_0), bytes = 16 * row_bytes;
        uint8_t *src = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
        for (int nv = 1; nv <= 16 && src && a && b; nv++) {
            for (size_t i = 0; i < bytes; i++) src[i] = (uint8_t)rnd();
            memset(a, 0x5a, bytes), memset(b, 0xa5, bytes);
            kq_r16_interleave_scalar(a, src, nv, nb, row_bytes);
            kq_r16_interleave_avx512(b, src, nv, nb, row_bytes);
            T_CHECK(!memcmp(a, b, bytes), "%d rows of %lld blocks: the paths differ", nv, (long long)nb);
        }
        free(src), free(a), free(b);
    }
    t_end();
}

int main(void)
{
    (void)t_shared;
    test_paths();
    test_products();
    test_threads();
    test_rows_and_refusals();
    test_many();
    return t_done();
}
