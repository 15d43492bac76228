/* Compute kernels against independent references: block decoding written
 * from the ggml format description (byte offsets, per element, in double),
 * activation quantisers checked for their defining properties, fp16/bf16
 * conversions against a nearest-value search, and the numerics contract
 * (bit-identical results across ISA paths, batch sizes and thread counts). */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/kq.h"
#include "t.h"

/* ---- deterministic random numbers ---- */

static uint64_t rng_s = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}
static double rndu(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static float rndn(void) /* roughly normal */
{
    return (float)(rndu() + rndu() + rndu() + rndu() - 2.0) * 1.7f;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }

/* Independent fp16 decode: sign * mantissa * 2^exp in double. */
static double h2d(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* ---- reference element decoding (byte offsets from ggml-common.h) ---- */

static const int KV4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int KVFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static int nib32(const uint8_t *qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63, *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Value of element i of one block of type T, and the magnitude scale used
 * for tolerances (|d*q| + |min term|). */
static double ref_elem(uint32_t t, const uint8_t *b, int i, double *mag)
{
    double v = 0, d, mn, m2 = 0;
    int q, sc, m;
    switch (t) {
    case GGML_TYPE_Q4_0: v = h2d(rd16(b)) * (nib32(b + 2, i) - 8); break;
    case GGML_TYPE_Q4_1: v = h2d(rd16(b)) * nib32(b + 4, i); m2 = h2d(rd16(b + 2)); break;
    case GGML_TYPE_Q5_0: v = h2d(rd16(b)) * ((nib32(b + 6, i) | (int)((le32(b + 2) >> i) & 1) << 4) - 16); break;
    case GGML_TYPE_Q5_1:
        v = h2d(rd16(b)) * (nib32(b + 8, i) | ((le32(b + 4) >> i) & 1) << 4);
        m2 = h2d(rd16(b + 2));
        break;
    case GGML_TYPE_Q8_0: v = h2d(rd16(b)) * (int8_t)b[2 + i]; break;
    case GGML_TYPE_IQ4_NL: v = h2d(rd16(b)) * KV4NL[nib32(b + 2, i)]; break;
    case GGML_TYPE_MXFP4: v = ldexp(1.0, b[0] - 128) * KVFP4[nib32(b + 1, i)]; break;
    case GGML_TYPE_Q2_K: {
        int g = i / 16, n = i / 128, j = (i % 128) / 32, l = i % 32;
        q = (b[16 + 32 * n + l] >> (2 * j)) & 3;
        v = h2d(rd16(b + 80)) * (b[g] & 15) * q;
        m2 = -h2d(rd16(b + 82)) * (b[g] >> 4);
        break;
    }
    case GGML_TYPE_Q3_K: {
        int g = i / 16, n = i / 128, j = (i % 128) / 32, l = i % 32;
        q = (b[32 + 32 * n + l] >> (2 * j)) & 3;
        q -= ((b[l] >> (4 * n + j)) & 1) ? 0 : 4;
        int lo = g < 8 ? b[96 + g] & 15 : b[96 + g - 8] >> 4;
        int hi = (b[104 + g % 4] >> (2 * (g / 4))) & 3;
        v = h2d(rd16(b + 108)) * ((lo | hi << 4) - 32) * q;
        break;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        int j = i / 32, l = i % 32, five = t == GGML_TYPE_Q5_K;
        const uint8_t *qs = b + (five ? 48 : 16);
        q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
        if (five) q |= ((b[16 + l] >> j) & 1) << 4;
        k4_scale_min(b + 4, j, &sc, &m);
        d = h2d(rd16(b)), mn = h2d(rd16(b + 2));
        v = d * sc * q;
        m2 = -mn * m;
        break;
    }
    case GGML_TYPE_Q6_K: {
        int c = i / 128, r = i % 128, k = r / 32, l = r % 32;
        int lo = (b[64 * c + 32 * (k & 1) + l] >> (4 * (k / 2))) & 15;
        int hi = (b[128 + 32 * c + l] >> (2 * k)) & 3;
        v = h2d(rd16(b + 208)) * (int8_t)b[192 + 8 * c + 2 * k + l / 16] * ((lo | hi << 4) - 32);
        break;
    }
    case GGML_TYPE_IQ4_XS: {
        int ib = i / 32, l = i % 32;
        int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((rd16(b + 2) >> (2 * ib)) & 3) << 4);
        v = h2d(rd16(b)) * (ls - 32) * KV4NL[nib32(b + 8 + 16 * ib, l)];
        break;
    }
    }
    if (mag) *mag = fabs(v) + fabs(m2);
    return v + m2;
}

static const uint32_t QTYPES[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL, GGML_TYPE_MXFP4, GGML_TYPE_Q2_K,
                                  GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                  GGML_TYPE_IQ4_XS};
static const uint32_t FTYPES[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16};
#define NQ (sizeof QTYPES / sizeof QTYPES[0])

/* Byte offsets of the fp16 scale fields of a block. */
static int scale_fields(uint32_t t, int off[2])
{
    switch (t) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_IQ4_XS: off[0] = 0; return 1;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
        off[0] = 0, off[1] = 2; return 2;
    case GGML_TYPE_Q2_K: off[0] = 80, off[1] = 82; return 2;
    case GGML_TYPE_Q3_K: off[0] = 108; return 1;
    case GGML_TYPE_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

/* Scale values: mostly ordinary, plus zero, -0, subnormals, max magnitude. */
static uint16_t pick_scale(int edge)
{
    if (edge) {
        static const uint16_t e[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x83ff, 0x7bff, 0xfbff, 0x0400};
        return e[rnd() % 8];
    }
    float v = (float)(0.0005 + 0.05 * rndu());
    return fp32_to_fp16(rnd() & 1 ? -v : v);
}

/* Random blocks: random bytes, then sane (or edge) scale fields. */
static void fill_weights(uint32_t t, uint8_t *data, size_t bytes, int edges)
{
    const ggml_type_info *ti = ggml_type_get(t);
    for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)rnd();
    if (t == GGML_TYPE_F32) {
        for (size_t i = 0; i < bytes / 4; i++) {
            float f = rndn() * 0.1f;
            memcpy(data + 4 * i, &f, 4);
        }
        return;
    }
    if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        for (size_t i = 0; i < bytes / 2; i++) {
            float f = rndn() * 0.1f;
            wr16(data + 2 * i, t == GGML_TYPE_F16 ? fp32_to_fp16(f) : fp32_to_bf16(f));
        }
        return;
    }
    for (size_t b = 0; b < bytes / ti->type_size; b++) {
        uint8_t *blk = data + b * ti->type_size;
        int off[2], nf = scale_fields(t, off);
        for (int k = 0; k < nf; k++) wr16(blk + off[k], pick_scale(edges && rnd() % 3 == 0));
        if (t == GGML_TYPE_MXFP4) blk[0] = (uint8_t)(edges && rnd() % 3 == 0 ? rnd() % 3 : 100 + rnd() % 40);
    }
}

static double ref_weight(uint32_t t, const uint8_t *row, int64_t i, double *mag)
{
    const ggml_type_info *ti = ggml_type_get(t);
    if (t == GGML_TYPE_F32) {
        float f;
        memcpy(&f, row + 4 * i, 4);
        *mag = fabs(f);
        return f;
    }
    if (t == GGML_TYPE_F16) return *mag = fabs(h2d(rd16(row + 2 * i))), h2d(rd16(row + 2 * i));
    if (t == GGML_TYPE_BF16) {
        uint32_t u = (uint32_t)rd16(row + 2 * i) << 16;
        float f;
        memcpy(&f, &u, 4);
        *mag = fabs(f);
        return f;
    }
    return ref_elem(t, row + (size_t)(i / ti->blck_size) * ti->type_size, (int)(i % ti->blck_size), mag);
}

/* Dequantised activation element from sl_act (ggml block layouts). */
static double ref_act(const sl_act *a, int64_t t, int64_t i)
{
    const uint8_t *row = (const uint8_t *)a->data + (size_t)t * a->row_bytes;
    switch (a->vtype) {
    case GGML_TYPE_F32: { float f; memcpy(&f, row + 4 * i, 4); return f; }
    case GGML_TYPE_F16: return h2d(rd16(row + 2 * i));
    case GGML_TYPE_BF16: { uint32_t u = (uint32_t)rd16(row + 2 * i) << 16; float f; memcpy(&f, &u, 4); return f; }
    case GGML_TYPE_Q8_0: { const uint8_t *b = row + (i / 32) * 34; return h2d(rd16(b)) * (int8_t)b[2 + i % 32]; }
    case GGML_TYPE_Q8_1: { const uint8_t *b = row + (i / 32) * 36; return h2d(rd16(b)) * (int8_t)b[4 + i % 32]; }
    case GGML_TYPE_Q8_K: {
        const uint8_t *b = row + (i / 256) * 292;
        float d;
        memcpy(&d, b, 4);
        return (double)d * (int8_t)b[4 + i % 256];
    }
    }
    return NAN;
}

static void rand_acts(float *x, int64_t n, int scale_mix)
{
    for (int64_t i = 0; i < n; i++) x[i] = rndn() * (scale_mix ? (float)ldexp(1.0, (int)(rnd() % 9) - 4) : 1.0f);
}

typedef struct {
    uint32_t type;
    int64_t n, rows;
    uint8_t *data;
    sl_mat m;
} tmat;

static void tmat_make(tmat *tm, uint32_t type, int64_t n, int64_t rows, int edges)
{
    size_t rb = ggml_row_bytes(type, (uint64_t)n);
    tm->type = type, tm->n = n, tm->rows = rows;
    tm->data = malloc(rb * (size_t)rows + 64);
    fill_weights(type, tm->data, rb * (size_t)rows, edges);
    tm->m = (sl_mat){type, n, rows, rb, tm->data, SL_ORDER_SGEMM, SL_LAYOUT_ROWS};
}

/* ---- fp16 / bf16 ---- */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest fp16 by search over all finite positive halves, ties to even. */
static uint16_t ref_f2h(float f, const double *tab /* 0x7c00 entries: h -> value */)
{
    if (isnan(f)) return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    int lo = 0, hi = 0x7bff;
    while (lo < hi) { /* first h with tab[h] >= a */
        int mid = (lo + hi) / 2;
        if (tab[mid] >= a) hi = mid; else lo = mid + 1;
    }
    int h = lo;
    if (h > 0 && (a - tab[h - 1] < tab[h] - a || (a - tab[h - 1] == tab[h] - a && ((h - 1) & 1) == 0))) h--;
    return (uint16_t)(sign | h);
}

static void test_fp16(void)
{
    t_begin("fp16: all 65536 halves decode exactly and round-trip");
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_fp32((uint16_t)h);
        double r = h2d((uint16_t)h);
        if (isnan(r)) {
            T_CHECK(isnan(f), "h=%04x not NaN", h);
            T_CHECK(isnan(fp16_to_fp32(fp32_to_fp16(f))), "NaN h=%04x lost", h);
        } else {
            T_CHECK((double)f == r && !!signbit(f) == !!signbit(r), "h=%04x: %g vs %g", h, f, r);
            T_CHECK(fp32_to_fp16(f) == h, "round trip %04x -> %04x", h, fp32_to_fp16(f));
        }
    }
    t_end();

    t_begin("fp16: fp32 -> fp16 rounds to nearest even (search reference)");
    double *tab = malloc(0x7c00 * sizeof *tab);
    for (int h = 0; h < 0x7c00; h++) tab[h] = h2d((uint16_t)h);
    qsort(tab, 0x7c00, sizeof *tab, cmp_d); /* already sorted; asserts monotonic layout */
    static const float known[] = {1.0f, 65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f,
                                  0x1.000002p-25f, 0x1p-14f, 0x1.ffcp-15f, -0.0f, 1e-30f, 3.14159265f};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        T_CHECK(fp32_to_fp16(known[i]) == ref_f2h(known[i], tab), "%a -> %04x want %04x", known[i],
                fp32_to_fp16(known[i]), ref_f2h(known[i], tab));
    T_CHECK(fp32_to_fp16(1.0f) == 0x3c00 && fp32_to_fp16(65520.0f) == 0x7c00 && fp32_to_fp16(0x1p-25f) == 0 &&
                fp32_to_fp16(0x1.8p-24f) == 2 && fp32_to_fp16(-0.0f) == 0x8000,
            "known values");
    for (int k = 0; k < 300000; k++) {
        uint32_t u = (uint32_t)rnd();
        if (k & 1) u = (u & 0x80000000u) | (0x33000000u + u % (0x47800000u - 0x33000000u)); /* near half range */
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        uint16_t got = fp32_to_fp16(f), want = ref_f2h(f, tab);
        if (got != want) {
            T_CHECK(0, "%a -> %04x want %04x", f, got, want);
            break;
        }
    }
    free(tab);
    t_end();

    t_begin("bf16: round to nearest even, NaN stays NaN, decode exact");
    for (int k = 0; k < 300000; k++) {
        uint32_t u = (uint32_t)rnd();
        float f;
        memcpy(&f, &u, 4);
        uint16_t got = fp32_to_bf16(f);
        if (isnan(f)) {
            T_CHECK(isnan(bf16_to_fp32(got)), "NaN %08x lost", u);
            continue;
        }
        /* candidates: truncation and the next value up in magnitude */
        uint32_t t0 = u >> 16, t1 = t0 + 1;
        double a = fabs((double)f), v0 = fabs((double)bf16_to_fp32((uint16_t)t0));
        double v1 = (t1 & 0x7fff) >= 0x7f80 ? INFINITY : fabs((double)bf16_to_fp32((uint16_t)t1));
        if ((t1 & 0x7fff) == 0x7f80) v1 = ldexp(1.0, 128); /* rounding up to inf */
        uint16_t want = (uint16_t)(a - v0 < v1 - a || (a - v0 == v1 - a && !(t0 & 1)) ? t0 : t1);
        if ((t0 & 0x7fff) == 0x7f80) want = (uint16_t)t0; /* infinity itself */
        if (got != want) {
            T_CHECK(0, "%08x -> %04x want %04x", u, got, want);
            break;
        }
    }
    T_CHECK(fp32_to_bf16(1.0f) == 0x3f80 && bf16_to_fp32(0x3f80) == 1.0f, "1.0");
    T_CHECK(fp32_to_bf16(0x1.01p0f) == 0x3f80 && fp32_to_bf16(0x1.03p0f) == 0x3f82, "ties to even");
    t_end();
}

/* ---- activation quantisers ---- */

static void test_act_q8(void)
{
    sl_act a = {0};
    sl_err err;
    t_begin("act Q8_0: max-abs scale, round half to even, |err| <= d/2");
    float x[64];
    /* amax 127 -> id = 1: the quants are the rounded inputs themselves */
    float crafted[32] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.5f, -3.5f, 0.49999997f, 126.5f, -126.5f};
    memcpy(x, crafted, sizeof crafted);
    for (int i = 0; i < 32; i++) x[32 + i] = -0.001f * (float)i; /* second block: amax 0.031 */
    T_CHECK(act_prepare(&a, GGML_TYPE_Q8_0, x, 64, 1, 64, NULL, &err) == 0, "%s", err.msg);
    const uint8_t *b = a.data;
    static const int want[11] = {127, 0, 2, 2, 0, -2, 4, -4, 0, 126, -126};
    for (int i = 0; i < 11; i++) T_CHECK((int8_t)b[2 + i] == want[i], "q[%d]=%d want %d", i, (int8_t)b[2 + i], want[i]);
    T_CHECK(rd16(b) == fp32_to_fp16(1.0f), "d %04x", rd16(b));
    T_CHECK((int8_t)b[34 + 2 + 31] == -127, "block 2 max maps to -127");
    for (int rep = 0; rep < 200; rep++) {
        rand_acts(x, 64, 1);
        if (rep % 7 == 0) memset(x + 32, 0, 32 * sizeof(float)); /* zero block */
        act_prepare(&a, GGML_TYPE_Q8_0, x, 64, 1, 64, NULL, &err);
        for (int blk = 0; blk < 2; blk++) {
            const uint8_t *q = (const uint8_t *)a.data + 34 * blk;
            double amax = 0;
            for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(x[32 * blk + i]));
            T_CHECK(rd16(q) == fp32_to_fp16((float)(amax / 127.0)) || amax == 0, "scale");
            double d = amax / 127.0;
            int hit = 0;
            for (int i = 0; i < 32; i++) {
                int qi = (int8_t)q[2 + i];
                T_CHECK(fabs(qi * d - x[32 * blk + i]) <= d * 0.5000001 + 1e-30, "quant error");
                hit |= abs(qi) == 127;
            }
            T_CHECK(hit || amax == 0, "no quant reaches 127");
        }
    }
    t_end();

    t_begin("act Q8_1: s = fp16(d * sum(q))");
    rand_acts(x, 64, 0);
    T_CHECK(act_prepare(&a, GGML_TYPE_Q4_1, x, 64, 1, 64, NULL, &err) == 0, "%s", err.msg);
    T_CHECK(a.vtype == GGML_TYPE_Q8_1 && a.row_bytes == 72, "layout");
    for (int blk = 0; blk < 2; blk++) {
        const uint8_t *q = (const uint8_t *)a.data + 36 * blk;
        double amax = 0;
        int sum = 0;
        for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(x[32 * blk + i])), sum += (int8_t)q[4 + i];
        float d = (float)amax / 127.0f;
        T_CHECK(rd16(q) == fp32_to_fp16(d), "d");
        T_CHECK(rd16(q + 2) == fp32_to_fp16(d * (float)sum), "s %04x want %04x", rd16(q + 2), fp32_to_fp16(d * (float)sum));
    }
    t_end();

    t_begin("act Q8_K: iscale from the first largest value, bsums, zero block");
    float xk[512];
    rand_acts(xk, 512, 1);
    xk[3] = 50.0f, xk[7] = -50.0f; /* tie in magnitude: the first (+50) sets the sign */
    memset(xk + 256, 0, 256 * sizeof(float));
    T_CHECK(act_prepare(&a, GGML_TYPE_Q4_K, xk, 512, 1, 512, NULL, &err) == 0, "%s", err.msg);
    const uint8_t *k = a.data;
    float d;
    memcpy(&d, k, 4);
    T_CHECK(d == 1.0f / (-127.0f / 50.0f), "d %g", d);
    T_CHECK((int8_t)k[4 + 3] == -127 && (int8_t)k[4 + 7] == 127, "signs of the extremes");
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += (int8_t)k[4 + 16 * g + i];
        T_CHECK((int16_t)rd16(k + 260 + 2 * g) == s, "bsum %d", g);
    }
    for (int i = 0; i < 256; i++) T_CHECK(fabs((double)d * (int8_t)k[4 + i] - xk[i]) <= fabs(d) * 0.5000001, "quant error %d", i);
    memcpy(&d, k + 292, 4);
    T_CHECK(d == 0.0f, "zero block d");
    int nz = 0;
    for (int i = 0; i < 288; i++) nz |= k[292 + 4 + i];
    T_CHECK(!nz, "zero block quants/bsums");
    t_end();

    t_begin("act F16/BF16/F32 conversions and strided rows");
    float xs[3 * 40];
    rand_acts(xs, 120, 1);
    T_CHECK(act_prepare(&a, GGML_TYPE_F16, xs, 32, 3, 40, NULL, &err) == 0, "%s", err.msg);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 32; i++)
            T_CHECK(((uint16_t *)a.data)[r * 32 + i] == fp32_to_fp16(xs[r * 40 + i]), "f16 %d %d", r, i);
    act_prepare(&a, GGML_TYPE_BF16, xs, 32, 3, 40, NULL, &err);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 32; i++)
            T_CHECK(((uint16_t *)a.data)[r * 32 + i] == fp32_to_bf16(xs[r * 40 + i]), "bf16 %d %d", r, i);
    act_prepare(&a, GGML_TYPE_F32, xs, 32, 3, 40, NULL, &err);
    T_CHECK(a.vtype == GGML_TYPE_F32 && memcmp((float *)a.data + 32, xs + 40, 32 * 4) == 0, "f32 copy");
    t_end();
    act_free(&a);
}

/* Activations prepared for another type or length: matmul_check refuses
 * them with both shapes named (the engine checks every product first). */
static void test_shape_mismatch(void)
{
    t_begin("matmul_check: activations of another type or length are an error naming both");
    static uint8_t wq[8 * 34]; /* 8 rows of 32 q8_0 values (one 34-byte block each) */
    sl_mat w = {.type = GGML_TYPE_Q8_0, .ne0 = 32, .ne1 = 8, .row_bytes = 34, .data = wq};
    float x[64] = {0};
    sl_act a = {0};
    sl_err err = {{0}};
    T_CHECK(act_prepare(&a, GGML_TYPE_Q8_0, x, 32, 1, 32, NULL, &err) == 0, "%s", err.msg);
    T_CHECK(matmul_check(&w, &a, &err) == 0, "a fitting pair refused: %s", err.msg);
    T_CHECK(act_prepare(&a, GGML_TYPE_Q8_0, x, 64, 1, 64, NULL, &err) == 0, "%s", err.msg);
    T_CHECK(matmul_check(&w, &a, &err) == -1 && strstr(err.msg, "x 64") && strstr(err.msg, "x 32"),
            "length mismatch: %s", err.msg);
    T_CHECK(act_prepare(&a, GGML_TYPE_F32, x, 32, 1, 32, NULL, &err) == 0, "%s", err.msg);
    T_CHECK(matmul_check(&w, &a, &err) == -1 && strstr(err.msg, "f32") && strstr(err.msg, "q8_0"),
            "type mismatch: %s", err.msg);
    act_free(&a);
    t_end();
}

static void test_unsupported(void)
{
    t_begin("unsupported types: kernels_supports false, act_prepare names the type");
    static const uint32_t bad[] = {GGML_TYPE_Q8_K, GGML_TYPE_Q8_1, GGML_TYPE_NVFP4, GGML_TYPE_Q1_0,
                                   GGML_TYPE_Q2_0, GGML_TYPE_I8,   77};
    float x[256] = {0};
    sl_act a = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_err err = {{0}};
        T_CHECK(!kernels_supports(bad[i]), "type %u supported?", bad[i]);
        T_CHECK(act_prepare(&a, bad[i], x, 256, 1, 256, NULL, &err) == -1, "accepted %u", bad[i]);
        T_CHECK(strstr(err.msg, "unsupported") && strstr(err.msg, ggml_type_name(bad[i])), "message: %s", err.msg);
    }
    sl_err err = {{0}};
    T_CHECK(act_prepare(&a, GGML_TYPE_NVFP4, x, 256, 1, 256, NULL, &err) == -1 && strstr(err.msg, "nvfp4"),
            "nvfp4 message: %s", err.msg);
    T_CHECK(act_prepare(&a, GGML_TYPE_Q4_K, x, 100, 1, 100, NULL, &err) == -1 && strstr(err.msg, "multiple of 256"),
            "bad length message: %s", err.msg);
    act_free(&a);
    t_end();
}


/* ---- round trip: test-side quantisers -> mat_get_row ---- */

static uint16_t h16(double v) { return fp32_to_fp16((float)v); }
static uint16_t h16_up(double v) /* v >= 0: the fp16 value at or above v, so scale codes never clamp */
{
    uint16_t h = h16(v);
    return h2d(h) < v ? (uint16_t)(h + 1) : h;
}
static long clampl(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Encodes one block of type T from x (block_size floats); returns the
 * worst-case reconstruction error the encoding allows. */
static double enc_block(uint32_t t, const float *x, uint8_t *b)
{
    double amax = 0, mn = 1e30, mx = -1e30, err = 0;
    int bs = (int)ggml_type_get(t)->blck_size;
    for (int i = 0; i < bs; i++) amax = fmax(amax, fabs(x[i])), mn = fmin(mn, x[i]), mx = fmax(mx, x[i]);
    memset(b, 0, ggml_type_get(t)->type_size);
    switch (t) {
    case GGML_TYPE_Q8_0: {
        uint16_t dh = h16(amax / 127);
        double d = h2d(dh);
        wr16(b, dh);
        for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)clampl(d ? lrint(x[i] / d) : 0, -127, 127);
        return d * 0.5 + 1e-6 * amax;
    }
    case GGML_TYPE_Q4_0: {
        double m = 0;
        for (int i = 0; i < 32; i++) if (fabs(x[i]) > fabs(m)) m = x[i];
        uint16_t dh = h16(m / -8);
        double d = h2d(dh);
        wr16(b, dh);
        for (int i = 0; i < 32; i++) {
            long q = clampl(d ? lrint(x[i] / d) + 8 : 8, 0, 15);
            b[2 + i % 16] |= (uint8_t)(q << (i < 16 ? 0 : 4));
        }
        return fabs(d) * 1.0001 + 1e-6 * amax;
    }
    case GGML_TYPE_Q5_1: {
        uint16_t dh = h16((mx - mn) / 31), mh = h16(mn);
        double d = h2d(dh), m = h2d(mh);
        wr16(b, dh), wr16(b + 2, mh);
        uint32_t qh = 0;
        for (int i = 0; i < 32; i++) {
            long q = clampl(d ? lrint((x[i] - m) / d) : 0, 0, 31);
            b[8 + i % 16] |= (uint8_t)((q & 15) << (i < 16 ? 0 : 4));
            qh |= (uint32_t)(q >> 4) << i;
        }
        memcpy(b + 4, &qh, 4);
        return d * 0.5001 + fabs(m - mn) + 1e-6 * amax;
    }
    case GGML_TYPE_Q4_K: {
        double sc[8], mi[8], smax = 0, mmax = 0;
        for (int j = 0; j < 8; j++) {
            double lo = 0, hi = 0;
            for (int l = 0; l < 32; l++) lo = fmin(lo, x[32 * j + l]), hi = fmax(hi, x[32 * j + l]);
            sc[j] = (hi - lo) / 15, mi[j] = -lo;
            smax = fmax(smax, sc[j]), mmax = fmax(mmax, mi[j]);
        }
        uint16_t dh = h16_up(smax / 63), mh = h16_up(mmax / 63);
        double d = h2d(dh), dm = h2d(mh);
        wr16(b, dh), wr16(b + 2, mh);
        int S[8], M[8];
        for (int j = 0; j < 8; j++) {
            S[j] = (int)clampl(d ? lrint(ceil(sc[j] / d * 64) / 64) : 0, 0, 63); /* round up: keep the range */
            if (S[j] * d < sc[j]) S[j] = (int)clampl(S[j] + 1, 0, 63);
            M[j] = (int)clampl(dm ? lrint(ceil(mi[j] / dm)) : 0, 0, 63);
        }
        uint8_t *q6 = b + 4;
        for (int j = 0; j < 4; j++) {
            q6[j] = (uint8_t)((S[j] & 63) | ((S[j + 4] >> 4) << 6));
            q6[j + 4] = (uint8_t)((M[j] & 63) | ((M[j + 4] >> 4) << 6));
            q6[j + 8] = (uint8_t)((S[j + 4] & 15) | ((M[j + 4] & 15) << 4));
        }
        for (int j = 0; j < 8; j++) {
            double step = d * S[j], off = dm * M[j];
            for (int l = 0; l < 32; l++) {
                long q = clampl(step ? lrint((x[32 * j + l] + off) / step) : 0, 0, 15);
                b[16 + 32 * (j / 2) + l] |= (uint8_t)(q << (4 * (j % 2)));
            }
            err = fmax(err, step * 0.5 + fabs(off - mi[j]) + 1e-6 * amax);
        }
        return err * 1.0001;
    }
    case GGML_TYPE_Q6_K: {
        double gs[16], gmax = 0;
        for (int g = 0; g < 16; g++) {
            double a = 0;
            for (int l = 0; l < 16; l++) a = fmax(a, fabs(x[16 * g + l]));
            gs[g] = a / 31, gmax = fmax(gmax, gs[g]);
        }
        uint16_t dh = h16_up(gmax / 127);
        double d = h2d(dh);
        wr16(b + 208, dh);
        for (int g = 0; g < 16; g++) {
            long sc = clampl(d ? (long)ceil(gs[g] / d) : 0, 0, 127);
            b[192 + g] = (uint8_t)(int8_t)sc;
            double step = d * (double)sc;
            for (int l = 0; l < 16; l++) {
                int i = 16 * g + l, c = i / 128, r = i % 128, k = r / 32, ll = r % 32;
                long q = clampl(step ? lrint(x[i] / step) : 0, -32, 31) + 32;
                b[64 * c + 32 * (k & 1) + ll] |= (uint8_t)((q & 15) << (4 * (k / 2)));
                b[128 + 32 * c + ll] |= (uint8_t)((q >> 4) << (2 * k));
            }
            err = fmax(err, step * 0.5 + 1e-6 * amax);
        }
        return err * 1.0001;
    }
    case GGML_TYPE_Q3_K: {
        double gs[16], gmax = 0;
        for (int g = 0; g < 16; g++) {
            double a = 0;
            for (int l = 0; l < 16; l++) a = fmax(a, fabs(x[16 * g + l]));
            gs[g] = a / 3, gmax = fmax(gmax, gs[g]);
        }
        uint16_t dh = h16_up(gmax / 31);
        double d = h2d(dh);
        wr16(b + 108, dh);
        for (int g = 0; g < 16; g++) {
            long sc = clampl(d ? (long)ceil(gs[g] / d) : 0, 0, 31); /* stored as sc + 32 */
            int s6 = (int)sc + 32;
            if (g < 8) b[96 + g] |= (uint8_t)(s6 & 15);
            else b[96 + g - 8] |= (uint8_t)((s6 & 15) << 4);
            b[104 + g % 4] |= (uint8_t)((s6 >> 4) << (2 * (g / 4)));
            double step = d * (double)sc;
            for (int l = 0; l < 16; l++) {
                int i = 16 * g + l, n = i / 128, j = (i % 128) / 32, ll = i % 32;
                long q = clampl(step ? lrint(x[i] / step) : 0, -4, 3);
                long q2 = q >= 0 ? q : q + 4;
                b[32 + 32 * n + ll] |= (uint8_t)(q2 << (2 * j));
                if (q >= 0) b[ll] |= (uint8_t)(1 << (4 * n + j));
            }
            err = fmax(err, step * 0.5 + 1e-6 * amax);
        }
        return err * 1.0001;
    }
    default: /* IQ4_XS: nearest codebook value per element */ {
        double ss[8], smax = 0;
        for (int j = 0; j < 8; j++) {
            double a = 0;
            for (int l = 0; l < 32; l++) a = fmax(a, fabs(x[32 * j + l]));
            ss[j] = a / 127, smax = fmax(smax, ss[j]);
        }
        uint16_t dh = h16_up(smax / 31);
        double d = h2d(dh);
        wr16(b, dh);
        uint16_t sh = 0;
        for (int j = 0; j < 8; j++) {
            long ls = clampl(d ? (long)ceil(ss[j] / d) : 0, 0, 31) + 32;
            b[4 + j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
            sh |= (uint16_t)((ls >> 4) << (2 * j));
            double step = d * (double)(ls - 32);
            for (int l = 0; l < 32; l++) {
                int best = 0;
                for (int k = 1; k < 16; k++)
                    if (fabs(KV4NL[k] * step - x[32 * j + l]) < fabs(KV4NL[best] * step - x[32 * j + l])) best = k;
                b[8 + 16 * j + l % 16] |= (uint8_t)(best << (l < 16 ? 0 : 4));
            }
            err = fmax(err, step * 14.0001 + 1e-6 * amax); /* 127 - 113 at the positive end */
        }
        wr16(b + 2, sh);
        return err;
    }
    }
}

static void test_round_trip(void)
{
    static const uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_1, GGML_TYPE_Q3_K,
                                     GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        uint32_t t = types[k];
        char name[96];
        snprintf(name, sizeof name, "round trip %s: test-side encoder -> mat_get_row within the encoding's error", ggml_type_name(t));
        t_begin(name);
        const int64_t n = 1024;
        const ggml_type_info *ti = ggml_type_get(t);
        float x[1024], out[1024];
        uint8_t *row = malloc(ggml_row_bytes(t, n));
        for (int rep = 0; rep < 20; rep++) {
            rand_acts(x, n, rep & 1);
            if (rep == 3) memset(x, 0, sizeof x);
            double bound[1024];
            for (int64_t b = 0; b < n / (int64_t)ti->blck_size; b++) {
                double e = enc_block(t, x + b * ti->blck_size, row + b * ti->type_size);
                for (uint32_t i = 0; i < ti->blck_size; i++) bound[b * ti->blck_size + i] = e;
            }
            sl_mat m = {t, n, 1, ggml_row_bytes(t, n), row, SL_ORDER_SGEMM, SL_LAYOUT_ROWS};
            mat_get_row(&m, 0, out);
            for (int64_t i = 0; i < n; i++)
                if (!(fabs(out[i] - x[i]) <= bound[i])) {
                    T_CHECK(0, "rep %d elem %lld: %g vs %g (bound %g)", rep, (long long)i, out[i], x[i], bound[i]);
                    rep = 99;
                    break;
                }
        }
        free(row);
        t_end();
    }
}

/* ---- decoding and products against the double reference ---- */

static void test_get_row(void)
{
    for (size_t k = 0; k < NQ + 3; k++) {
        uint32_t t = k < NQ ? QTYPES[k] : FTYPES[k - NQ];
        char name[96];
        snprintf(name, sizeof name, "mat_get_row %s equals the element-wise reference", ggml_type_name(t));
        t_begin(name);
        tmat tm;
        tmat_make(&tm, t, 512, 3, 1);
        float out[512];
        for (int64_t r = 0; r < 3; r++) {
            mat_get_row(&tm.m, r, out);
            const uint8_t *row = tm.data + (size_t)r * tm.m.row_bytes;
            for (int i = 0; i < 512; i++) {
                double mag, want = ref_weight(t, row, i, &mag);
                double tol = mag * 0x1p-22 + 0x1p-148;
                if (!(fabs(out[i] - want) <= tol)) {
                    T_CHECK(0, "row %lld elem %d: %.9g want %.9g", (long long)r, i, out[i], want);
                    break;
                }
            }
        }
        free(tm.data);
        t_end();
    }
}

static void test_dot_vs_reference(void)
{
    for (size_t k = 0; k < NQ + 3; k++) {
        uint32_t t = k < NQ ? QTYPES[k] : FTYPES[k - NQ];
        char name[96];
        snprintf(name, sizeof name, "matmul %s vs double reference (quantised and float activations)", ggml_type_name(t));
        t_begin(name);
        const int64_t n = 1024, rows = 37, T = 3;
        tmat tm;
        tmat_make(&tm, t, n, rows, 1);
        float *x = malloc(sizeof(float) * (size_t)(n * T)), *y = malloc(sizeof(float) * (size_t)(rows * T));
        rand_acts(x, n * T, 1);
        memset(x + n, 0, sizeof(float) * 64); /* zero activation blocks */
        sl_act a = {0};
        sl_err err;
        T_CHECK(act_prepare(&a, t, x, n, T, (size_t)n, NULL, &err) == 0, "%s", err.msg);
        matmul(&tm.m, &a, y, (size_t)rows, NULL);
        for (int64_t tt = 0; tt < T; tt++)
            for (int64_t r = 0; r < rows; r++) {
                const uint8_t *row = tm.data + (size_t)r * tm.m.row_bytes;
                double exact = 0, mag = 0, fl = 0, qerr = 0;
                int q8_1 = a.vtype == GGML_TYPE_Q8_1;
                for (int64_t i = 0; i < n; i++) {
                    double wm, w = ref_weight(t, row, i, &wm), av = ref_act(&a, tt, i);
                    exact += w * av;
                    if (q8_1 && i % 32 == 0) { /* ggml uses the block's stored s = fp16(d*sum q) for the min term */
                        const uint8_t *wb = row + (size_t)(i / 32) * tm.m.row_bytes / (size_t)(n / 32);
                        const uint8_t *ab = (const uint8_t *)a.data + (size_t)tt * a.row_bytes + (size_t)(i / 32) * 36;
                        double m = h2d(rd16(wb + 2)), s = 0;
                        for (int j = 0; j < 32; j++) s += ref_act(&a, tt, i + j);
                        exact += m * (h2d(rd16(ab + 2)) - s);
                        mag += fabs(m * h2d(rd16(ab + 2)));
                    }
                    mag += (wm + fabs(w)) * fabs(av);
                    fl += w * x[tt * n + i];
                    qerr += fabs(w) * fabs(av - x[tt * n + i]);
                }
                double got = y[tt * rows + r];
                /* float work: one rounding per block scale product and per fma */
                double tol = mag * 4e-7 * sqrt((double)n / 32.0) + 1e-30;
                if (!(fabs(got - exact) <= tol)) {
                    T_CHECK(0, "t %lld row %lld: %.9g want %.9g (tol %.3g)", (long long)tt, (long long)r, got, exact, tol);
                    tt = T;
                    break;
                }
                /* against float activations: bounded by the quantisation error */
                T_CHECK(fabs(got - fl) <= qerr * 1.0001 + tol, "float-activation bound t %lld row %lld",
                        (long long)tt, (long long)r);
            }
        act_free(&a);
        free(x), free(y), free(tm.data);
        t_end();
    }
}

/* ---- numerics contract: bit identity ---- */

static void test_bit_identity(void)
{
    sl_isa max = kernels_isa_detected();
    sl_pool *p2 = pool_create(2), *p3 = pool_create(3);
    for (size_t k = 0; k < NQ + 6; k++) {
        uint32_t t = k < NQ ? QTYPES[k] : k < NQ + 3 ? FTYPES[k - NQ] : k == NQ + 3 ? GGML_TYPE_F16
                                                                     : k == NQ + 4 ? GGML_TYPE_BF16 : GGML_TYPE_F32;
        int vd = k >= NQ + 3;
        char name[128];
        snprintf(name, sizeof name, "bit identity %s%s: isa paths, T=1..9/64 per call, 1/2/3 threads", ggml_type_name(t),
                 vd ? " (vec_dot order)" : "");
        t_begin(name);
        const int64_t n = k < NQ ? 768 : 779 /* float rows need not be multiples of 16 */, rows = 83, T = 64;
        tmat tm;
        tmat_make(&tm, t, n, rows, 0);
        tm.m.order = vd ? SL_ORDER_VEC_DOT : SL_ORDER_SGEMM;
        float *x = malloc(sizeof(float) * (size_t)(n * T));
        rand_acts(x, n * T, 1);
        sl_act a = {0}, a1 = {0};
        sl_err err;
        act_prepare(&a, t, x, n, T, (size_t)n, NULL, &err);
        size_t ysz = sizeof(float) * (size_t)(rows * T);
        float *ref = malloc(ysz), *y = malloc(ysz);
        matmul_rows(&tm.m, &a, ref, (size_t)rows, 0, rows, SL_ISA_SCALAR);
        for (int isa = SL_ISA_SCALAR; isa <= (int)max; isa++) {
            memset(y, 0xff, ysz);
            matmul_rows(&tm.m, &a, y, (size_t)rows, 0, rows, (sl_isa)isa);
            T_CHECK(memcmp(y, ref, ysz) == 0, "%s differs from scalar", kernels_isa_name((sl_isa)isa));
            /* odd row splits */
            memset(y, 0xff, ysz);
            matmul_rows(&tm.m, &a, y, (size_t)rows, 0, 5, (sl_isa)isa);
            matmul_rows(&tm.m, &a, y, (size_t)rows, 5, 50, (sl_isa)isa);
            matmul_rows(&tm.m, &a, y, (size_t)rows, 50, rows, (sl_isa)isa);
            T_CHECK(memcmp(y, ref, ysz) == 0, "%s split rows differ", kernels_isa_name((sl_isa)isa));
            /* batch sizes 1..9 per call: every tile width of every kernel */
            for (int64_t per = 1; per <= 9; per++) {
                memset(y, 0xff, ysz);
                for (int64_t t0 = 0; t0 < T; t0 += per) {
                    int64_t cnt = T - t0 < per ? T - t0 : per;
                    act_prepare(&a1, t, x + t0 * n, n, cnt, (size_t)n, NULL, &err);
                    matmul_rows(&tm.m, &a1, y + t0 * rows, (size_t)rows, 0, rows, (sl_isa)isa);
                }
                T_CHECK(memcmp(y, ref, ysz) == 0, "%s T=%lld per call differs", kernels_isa_name((sl_isa)isa),
                        (long long)per);
            }
        }
        for (int isa = SL_ISA_SCALAR; isa <= (int)max; isa++) { /* activation conversion per ISA path */
            sl_pool *pi = pool_create(1);
            pool_set_isa(pi, (sl_isa)isa);
            act_prepare(&a1, t, x, n, T, (size_t)n, pi, &err);
            T_CHECK(memcmp(a1.data, a.data, a.row_bytes * (size_t)T) == 0, "act_prepare on %s differs",
                    kernels_isa_name((sl_isa)isa));
            pool_destroy(pi);
        }
        if (t == GGML_TYPE_BF16 && max >= SL_ISA_AVX512) /* the FMA emulation of VDPBF16PS, on any AVX-512 CPU */
            for (int insn = 0; insn <= kq_cpu_has_avx512bf16(); insn++) {
                memset(y, 0xff, ysz);
                kq_rows_bf16_avx512(&tm.m, &a, y, (size_t)rows, 0, rows, insn);
                T_CHECK(memcmp(y, ref, ysz) == 0, "bf16 %s differs from scalar", insn ? "vdpbf16ps" : "emulation");
            }
        sl_pool *pools[2] = {p2, p3};
        for (int pi = 0; pi < 2; pi++) {
            memset(y, 0xff, ysz);
            act_prepare(&a1, t, x, n, T, (size_t)n, pools[pi], &err);
            T_CHECK(a1.row_bytes == a.row_bytes && memcmp(a1.data, a.data, a.row_bytes * (size_t)T) == 0,
                    "act_prepare with %d threads differs", pi + 2);
            matmul(&tm.m, &a1, y, (size_t)rows, pools[pi]);
            T_CHECK(memcmp(y, ref, ysz) == 0, "%d threads differ", pi + 2);
        }
        act_free(&a), act_free(&a1);
        free(x), free(y), free(ref), free(tm.data);
        t_end();
    }
    pool_destroy(p2);
    pool_destroy(p3);
}

static void test_matmul_many(void)
{
    t_begin("matmul_many: a batch of experts equals separate matmul calls, any thread count");
    enum { NJ = 7 };
    static const uint32_t types[NJ] = {GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K, GGML_TYPE_F16,
                                       GGML_TYPE_Q4_0, GGML_TYPE_IQ4_XS, GGML_TYPE_BF16};
    tmat tm[NJ];
    sl_act a[NJ] = {{0}};
    sl_matmul_job jobs[NJ];
    float *y[NJ], *ref[NJ], x[512 * 3];
    sl_err err;
    rand_acts(x, 512 * 3, 1);
    for (int j = 0; j < NJ; j++) {
        int64_t rows = 16 + 37 * j;
        tmat_make(&tm[j], types[j], 512, rows, 0);
        act_prepare(&a[j], types[j], x, 512, 1 + j % 3, 512, NULL, &err);
        y[j] = calloc((size_t)(rows * 3), sizeof(float));
        ref[j] = calloc((size_t)(rows * 3), sizeof(float));
        matmul(&tm[j].m, &a[j], ref[j], (size_t)rows, NULL);
        jobs[j] = (sl_matmul_job){&tm[j].m, &a[j], y[j], (size_t)rows};
    }
    for (int th = 1; th <= 3; th++) {
        sl_pool *p = pool_create(th);
        for (int j = 0; j < NJ; j++) memset(y[j], 0xff, sizeof(float) * (size_t)(tm[j].rows * 3));
        matmul_many(jobs, NJ, p);
        for (int j = 0; j < NJ; j++)
            T_CHECK(memcmp(y[j], ref[j], sizeof(float) * (size_t)(tm[j].rows * a[j].rows)) == 0, "job %d, %d threads", j, th);
        pool_destroy(p);
    }
    for (int j = 0; j < NJ; j++) free(y[j]), free(ref[j]), free(tm[j].data), act_free(&a[j]);
    t_end();
}

/* One-token products of the compute-bound codebook types are split guided
 * (large tasks first, small last, matmul.c): the rows each task covers
 * change, the results may not. */
static void test_matmul_guided(void)
{
    t_begin("matmul and matmul_many, guided split of compute-bound one-token products: equal to one thread");
    enum { NJ = 4 };
    static const uint32_t types[NJ] = {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ1_M, GGML_TYPE_IQ3_S, GGML_TYPE_TQ1_0};
    tmat tm[NJ];
    sl_act a[NJ] = {{0}};
    sl_matmul_job jobs[NJ];
    float *y[NJ], *ref[NJ], x[512];
    sl_err err;
    rand_acts(x, 512, 7);
    for (int j = 0; j < NJ; j++) {
        int64_t rows = 600 + 333 * j; /* over 64 KiB each (else serial), a ragged end */
        tmat_make(&tm[j], types[j], 512, rows, 0);
        act_prepare(&a[j], types[j], x, 512, 1, 512, NULL, &err);
        y[j] = calloc((size_t)rows, sizeof(float));
        ref[j] = calloc((size_t)rows, sizeof(float));
        matmul(&tm[j].m, &a[j], ref[j], (size_t)rows, NULL);
        jobs[j] = (sl_matmul_job){&tm[j].m, &a[j], y[j], (size_t)rows};
    }
    for (int th = 2; th <= 5; th++) {
        sl_pool *p = pool_create(th);
        for (int j = 0; j < NJ; j++) memset(y[j], 0xff, sizeof(float) * (size_t)tm[j].rows);
        matmul_many(jobs, NJ, p);
        for (int j = 0; j < NJ; j++)
            T_CHECK(memcmp(y[j], ref[j], sizeof(float) * (size_t)tm[j].rows) == 0, "many: job %d, %d threads", j, th);
        for (int j = 0; j < NJ; j++) {
            memset(y[j], 0xff, sizeof(float) * (size_t)tm[j].rows);
            matmul(&tm[j].m, &a[j], y[j], (size_t)tm[j].rows, p);
            T_CHECK(memcmp(y[j], ref[j], sizeof(float) * (size_t)tm[j].rows) == 0, "matmul: job %d, %d threads", j, th);
        }
        pool_destroy(p);
    }
    for (int j = 0; j < NJ; j++) free(y[j]), free(ref[j]), free(tm[j].data), act_free(&a[j]);
    t_end();
}

/* ---- element-wise ops ---- */

static void test_ops(void)
{
    t_begin("op_rms_norm, op_softmax, op_swiglu vs double references");
    float x[200], w[200], out[200], g[200], u[200];
    rand_acts(x, 200, 1);
    rand_acts(w, 200, 0);
    double ss = 0;
    for (int i = 0; i < 200; i++) ss += (double)x[i] * x[i];
    double sc = 1.0 / sqrt(ss / 200 + 1e-5);
    op_rms_norm(out, x, w, 200, 1e-5f);
    for (int i = 0; i < 200; i++) T_CHECK(fabs(out[i] - x[i] * sc * w[i]) <= 1e-6 * fabs(x[i] * sc * w[i]) + 1e-30, "rms %d", i);
    op_rms_norm(out, x, NULL, 200, 1e-5f);
    for (int i = 0; i < 200; i++) T_CHECK(fabs(out[i] - x[i] * sc) <= 1e-6 * fabs(x[i] * sc), "rms nw %d", i);

    for (int n = 1; n <= 200; n += 37) {
        float s[200];
        rand_acts(s, n, 1);
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, s[i]);
        double e[200];
        for (int i = 0; i < n; i++) sum += e[i] = exp(s[i] - mx);
        op_softmax(s, n);
        for (int i = 0; i < n; i++) T_CHECK(fabs(s[i] - e[i] / sum) <= 1e-6 * e[i] / sum + 1e-12, "softmax n=%d i=%d", n, i);
    }

    rand_acts(g, 200, 1);
    rand_acts(u, 200, 0);
    g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f, g[3] = -0.0f, g[4] = 88.0f, g[5] = -104.0f;
    op_swiglu(out, g, u, 200);
    for (int i = 0; i < 200; i++) {
        double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        T_CHECK(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-37, "swiglu %d: %g vs %g", i, out[i], want);
    }
    T_CHECK(op_silu(0.0f) == 0.0f && fabsf(op_silu(1.0f) - 0.7310586f) < 1e-6f, "silu values");
    T_CHECK(op_silu(-200.0f) == -0.0f && op_silu(200.0f) == 200.0f, "silu extremes %g %g", op_silu(-200.0f), op_silu(200.0f));
    t_end();
}

/* ggml_compute_forward_rms_norm_f32 as written: squares summed in index
 * order in double, scale = 1/sqrtf(mean + eps), out = x * scale * w. */
static void ggml_rms_norm(float *out, const float *x, const float *w, int n, float eps)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int i = 0; i < n; i++) out[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

/* Whether a norm that summed the squares eight-way interleaved would give
 * other bits than ggml's: the vectors below must include such cases, or
 * the test could not tell a norm that always sums out of order. */
static bool order_matters(const float *x, const float *ref, int n, float eps)
{
    double s[8] = {0};
    for (int i = 0; i < n; i++) s[i % 8] += (double)(x[i] * x[i]);
    double sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int i = 0; i < n; i++)
        if (x[i] * scale != ref[i]) return true;
    return false;
}

/* X[0, N) (N a power of two, 16 or more) whose ordered double sum of squares
 * is 4^K (1 + 2^-24) exactly, a float tie that rounds to even, while every
 * 2^-54 4^K square after the first two, lost in order, adds up in other
 * lanes of an interleaved sum and tips the mean to the float above. */
static void tie_vector(float *x, int n, int k)
{
    x[0] = ldexpf(1.0f, k), x[1] = ldexpf(1.0f, k - 12);
    for (int i = 2; i < n; i++) x[i] = ldexpf(1.0f, k - 27);
}

/* op_rms_norm (which sums out of order when that is provably exact) gives
 * ggml's ordered-sum bits: activations-like values, tiny squares beside
 * large ones (where the order changes the sum), zeros, subnormals,
 * infinities and NaN, every length 1..300. */
static void test_norm_order(void)
{
    t_begin("op_rms_norm equals ggml's ordered double sum bit for bit on every path (values where the order matters included)");
    enum { N = 300 };
    float x[N], w[N], ref[N], out[N];
    rand_acts(w, N, 0);
    int mattered = 0;
    for (int n = 16; n <= 256; n *= 2)
        for (int k = -20; k <= 20; k += 5) {
            tie_vector(x, n, k);
            ggml_rms_norm(ref, x, NULL, n, 0.0f); /* an epsilon would move the tie */
            mattered += order_matters(x, ref, n, 0.0f);
            for (int isa = SL_ISA_SCALAR; isa <= (int)kernels_isa_detected(); isa++) {
                op_rms_norm_isa(out, x, NULL, n, 0.0f, (sl_isa)isa);
                T_CHECK(memcmp(out, ref, sizeof(float) * (size_t)n) == 0, "%s: tie vector n %d k %d",
                        kernels_isa_name((sl_isa)isa), n, k);
            }
        }
    T_CHECK(mattered >= 10, "an interleaved sum differs on only %d of the 45 tie vectors", mattered);
    for (int kind = 0; kind < 6; kind++)
        for (int n = 1; n <= N; n++) {
            for (int i = 0; i < n; i++) {
                float v = rndn();
                if (kind == 1 && rnd() % 7 == 0) v *= 0x1p-30f;          /* tiny squares among large */
                if (kind == 2) v = ldexpf(v, (int)(rnd() % 120) - 60);   /* a wide spread */
                if (kind == 3 && rnd() % 5 == 0) v = 0.0f;
                if (kind == 4 && rnd() % 9 == 0) v = ldexpf(v, -140);    /* subnormal squares */
                x[i] = v;
            }
            if (kind == 5) x[rnd() % (unsigned)n] = rnd() % 2 ? INFINITY : NAN;
            ggml_rms_norm(ref, x, w, n, 1e-6f);
            for (int isa = SL_ISA_SCALAR; isa <= (int)kernels_isa_detected(); isa++) {
                op_rms_norm_isa(out, x, w, n, 1e-6f, (sl_isa)isa);
                T_CHECK(memcmp(out, ref, sizeof(float) * (size_t)n) == 0, "%s: kind %d n %d",
                        kernels_isa_name((sl_isa)isa), kind, n);
            }
        }
    t_end();
}

/* The multi-row norm gives op_rms_norm's bits row by row. */
static void test_norm_rows(void)
{
    t_begin("op_rms_norm_rows equals op_rms_norm per row (1..9 rows, with and without weights)");
    enum { N = 2048 + 7 };
    static float x[9 * N], w[N], ref[9 * N], out[9 * N];
    rand_acts(x, 9 * N, 1);
    rand_acts(w, N, 0);
    for (int rows = 1; rows <= 9; rows++)
        for (int k = 0; k < 2; k++) {
            const float *wk = k ? w : NULL;
            for (int r = 0; r < rows; r++) op_rms_norm(ref + r * N, x + r * N, wk, N, 1e-6f);
            op_rms_norm_rows(out, x, wk, rows, N, 1e-6f);
            T_CHECK(memcmp(out, ref, sizeof(float) * (size_t)rows * N) == 0, "rows %d weights %d", rows, k);
        }
    t_end();
}

/* Index of the first of N floats whose bits differ, -1 if none. */
static int first_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4)) return (int)i;
    return -1;
}

/* SwiGLU on every SIMD path equals the scalar definition bit for bit: random
 * values, random bit patterns (NaN payloads, infinities, subnormals), the
 * exp overflow / underflow / subnormal ranges and the |n| = 192 cut-off of
 * ggml_v_expf, and a tail that is not a multiple of 16. */
static void test_swiglu_paths(void)
{
    t_begin("op_swiglu: scalar, avx2 and avx512 paths give the same bits");
    enum { N = 16 * 1024 + 13 };
    static float g[N], u[N], ref[N], out[N];
    uint64_t st = 99;
    for (int i = 0; i < N; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(st >> 32);
        float v;
        switch (i % 8) {
        case 0: memcpy(&v, &r, 4); break;                                /* any bit pattern */
        case 1: v = -140.0f + 280.0f * (float)(r >> 8) / 16777216.0f; break; /* exp range edges */
        case 2: v = 85.0f + 20.0f * (float)(r >> 8) / 16777216.0f; break;    /* subnormal exp(-g) */
        case 3: v = (i & 1 ? 1 : -1) * (133.0f + (float)(r >> 8) / 16777216.0f * 0.2f); break; /* |n| = 192 */
        default: v = -20.0f + 40.0f * (float)(r >> 8) / 16777216.0f;
        }
        g[i] = v;
        u[i] = 0.5f + (float)(r & 0xffff) / 65536.0f;
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-40f, -1e-40f, FLT_MAX, -FLT_MAX,
                              88.72284f, -88.72284f, 103.97208f, -103.97208f, 133.08457f, -133.08457f};
    for (size_t k = 0; k < sizeof specials / sizeof *specials; k++) g[7 + 37 * k] = specials[k];
    op_swiglu_isa(ref, g, u, N, SL_ISA_SCALAR);
    for (int isa = SL_ISA_AVX2; isa <= (int)kernels_isa_detected(); isa++) {
        memset(out, 0, sizeof out);
        op_swiglu_isa(out, g, u, N, (sl_isa)isa);
        int bad = first_diff(out, ref, N);
        T_CHECK(bad < 0, "%s differs at %d: g %a -> %a vs scalar %a", kernels_isa_name((sl_isa)isa), bad,
                bad < 0 ? 0.0 : (double)g[bad], bad < 0 ? 0.0 : (double)out[bad], bad < 0 ? 0.0 : (double)ref[bad]);
    }
    t_end();
    t_begin("op_silu_vec: scalar, avx2 and avx512 paths give the same bits (in place too)");
    op_silu_vec_isa(ref, g, N, SL_ISA_SCALAR);
    for (int i = 0; i < N; i++) { /* the definition: op_silu per full 16, libm expf for the tail */
        float want = i < N - N % 16 ? op_silu(g[i]) : g[i] / (1.0f + expf(-g[i]));
        if (memcmp(&want, &ref[i], 4)) {
            T_CHECK(0, "scalar silu at %d: %a vs %a", i, (double)ref[i], (double)want);
            break;
        }
    }
    for (int isa = SL_ISA_AVX2; isa <= (int)kernels_isa_detected(); isa++) {
        memcpy(out, g, sizeof out);
        op_silu_vec_isa(out, out, N, (sl_isa)isa);
        int bad = first_diff(out, ref, N);
        T_CHECK(bad < 0, "%s silu differs at %d: x %a -> %a vs scalar %a", kernels_isa_name((sl_isa)isa), bad,
                bad < 0 ? 0.0 : (double)g[bad], bad < 0 ? 0.0 : (double)out[bad], bad < 0 ? 0.0 : (double)ref[bad]);
    }
    t_end();
    t_begin("op_soft_max_sum: scalar, avx2 and avx512 paths give the same values and sum");
    /* the special values as they are (a NaN sum: any NaN), then finite
     * inputs only, where the sum's order shows in its bits */
    static float fin[N];
    for (int i = 0; i < N; i++) fin[i] = isfinite(g[i]) && fabsf(g[i]) < 1e30f ? g[i] : 1.0f;
    static const float maxes[] = {0.0f, 7.5f, -3.0f, 150.0f};
    for (int pass = 0; pass < 2; pass++)
    for (size_t mi = 0; mi < sizeof maxes / sizeof *maxes; mi++)
        for (int64_t n = N; n >= 1; n = n > 64 ? n / 5 : n - 7) {
            const float *xin = pass ? fin : g;
            double want = op_soft_max_sum_isa(ref, xin, n, maxes[mi], SL_ISA_SCALAR);
            for (int isa = SL_ISA_AVX2; isa <= (int)kernels_isa_detected(); isa++) {
                double got = op_soft_max_sum_isa(out, xin, n, maxes[mi], (sl_isa)isa);
                int bad = memcmp(&got, &want, sizeof got) && !(isnan(got) && isnan(want)) ? (int)n
                                                                                          : first_diff(out, ref, n);
                T_CHECK(bad < 0, "%s soft_max_sum n=%lld max=%g: differs at %d (sum %a vs %a)",
                        kernels_isa_name((sl_isa)isa), (long long)n, (double)maxes[mi], bad, got, want);
            }
        }
    t_end();
}

/* ---- pool ---- */

typedef struct {
    int *hits;
} hit_ctx;

static void hit_task(void *ctx, int task, int thread)
{
    (void)thread;
    __atomic_fetch_add(&((hit_ctx *)ctx)->hits[task], 1, __ATOMIC_RELAXED);
}

static void test_pool(void)
{
    t_begin("pool: every task runs exactly once, many dispatches, ISA clamping");
    T_CHECK(cpu_physical_cores() >= 1, "cores");
    sl_pool *p = pool_create(3);
    T_CHECK(p && pool_threads(p) == 3, "threads");
    int hits[100];
    hit_ctx c = {hits};
    for (int rep = 0; rep < 3000; rep++) {
        int n = 1 + rep % 100;
        memset(hits, 0, sizeof hits);
        pool_run(p, n, hit_task, &c);
        int bad = 0;
        for (int i = 0; i < n; i++) bad |= hits[i] != 1;
        if (bad) {
            T_CHECK(0, "rep %d: a task ran %s", rep, "not exactly once");
            break;
        }
    }
    pool_set_isa(p, SL_ISA_AVX512);
    T_CHECK(pool_isa(p) == kernels_isa_detected(), "clamp to detected");
    pool_set_isa(p, SL_ISA_SCALAR);
    T_CHECK(pool_isa(p) == SL_ISA_SCALAR, "scalar");
    T_CHECK(pool_threads(NULL) == 1 && pool_isa(NULL) == kernels_isa_detected(), "NULL pool");
    pool_destroy(p);
    sl_pool *d = pool_create(0);
    T_CHECK(d && pool_threads(d) == cpu_physical_cores(), "default = physical cores");
    pool_destroy(d);
    t_end();
}

/* The greedy pick, written from its definition: the first index of the
 * largest number, NaNs skipped; all -inf: the first -inf; none: -1. */
static int64_t argmax_ref(const float *x, int64_t n)
{
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++)
        if (x[i] == x[i] && (at < 0 || x[i] > x[at])) at = i;
    return at;
}

static void test_argmax(void)
{
    t_begin("op_argmax: every path picks the definition's index (ties, NaN, -inf, tails)");
    enum { N = 50257 };
    static float x[N];
    static const int64_t lens[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 100, 1000, N};
    uint64_t st = 7;
    int checked = 0;
    for (int kind = 0; kind < 9; kind++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            int64_t n = lens[li];
            for (int64_t i = 0; i < n; i++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(st >> 32);
                x[i] = kind == 6 ? -INFINITY : kind == 7 ? NAN : -10.0f + 20.0f * (float)(r >> 8) / 16777216.0f;
                if (kind == 8) x[i] = r & 1 ? NAN : -INFINITY; /* no number at all */
                if (kind == 2 && r % 5 == 0) x[i] = NAN;
                if (kind == 3) x[i] = (float)(r % 4); /* many ties of the maximum */
            }
            if (n > 0 && kind == 1) x[n - 1] = 11.0f;                 /* the last, in the tail */
            if (n > 0 && kind == 4) x[0] = 11.0f, x[n - 1] = 11.0f;   /* the first of two */
            if (n > 2 && kind == 5) x[n / 2] = INFINITY, x[n - 2] = INFINITY, x[1] = NAN;
            int64_t want = argmax_ref(x, n);
            if (want < 0)
                for (int64_t i = 0; i < n && want < 0; i++) want = x[i] == -INFINITY ? i : -1;
            for (int isa = SL_ISA_SCALAR; isa <= (int)kernels_isa_detected(); isa++) {
                int32_t got = op_argmax_isa(x, (int32_t)n, (sl_isa)isa);
                T_CHECK(got == want, "%s, kind %d, n %lld: %d, want %lld", kernels_isa_name((sl_isa)isa), kind,
                        (long long)n, got, (long long)want);
                checked++;
            }
        }
    T_CHECK(checked > 300, "%d cases", checked);
    t_end();
}

static void test_weighted_sum(void)
{
    t_begin("op_weighted_sum: every path gives the definition's bits (products rounded, added in row order)");
    enum { N = 2900, K = 9 };
    static float y[K * N], out[N];
    float w[K];
    uint64_t st = 11;
    for (int i = 0; i < K * N; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        y[i] = ldexpf((float)(int32_t)(st >> 32) / 2147483648.0f, (int)((st >> 20) % 24) - 12);
    }
    static const int64_t lens[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 256, 2880, N};
    int checked = 0;
    for (int k = 1; k <= K; k++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            int64_t n = lens[li];
            for (int j = 0; j < k; j++) w[j] = 1.0f / (float)(j + 3) - (j == 2 ? 0.4f : 0.0f);
            for (int isa = SL_ISA_SCALAR; isa <= (int)kernels_isa_detected(); isa++) {
                op_weighted_sum_isa(out, y, w, k, n, (sl_isa)isa);
                int bad = -1;
                for (int64_t i = 0; i < n && bad < 0; i++) {
                    float o = y[i] * w[0];
                    for (int j = 1; j < k; j++) {
                        float p = y[(size_t)j * (size_t)n + (size_t)i] * w[j];
                        o = o + p;
                    }
                    if (memcmp(&o, &out[i], sizeof o)) bad = (int)i;
                }
                T_CHECK(bad < 0, "%s, k %d, n %lld: first difference at %d", kernels_isa_name((sl_isa)isa), k,
                        (long long)n, bad);
                checked++;
            }
        }
    T_CHECK(checked >= 9 * 14, "%d cases", checked);
    t_end();
}

int main(void)
{
    (void)t_shared;
    if (kernels_isa_detected() < SL_ISA_AVX512)
        t_skip("bit identity on avx512", "CPU or OS lacks AVX-512 (F/BW/VL/DQ/VNNI)");
    if (kernels_isa_detected() < SL_ISA_AVX2) t_skip("bit identity on avx2", "CPU lacks AVX2/FMA/F16C");
    test_fp16();
    test_act_q8();
    test_unsupported();
    test_shape_mismatch();
    test_get_row();
    test_round_trip();
    test_dot_vs_reference();
    test_bit_identity();
    test_matmul_many();
    test_matmul_guided();
    test_ops();
    test_swiglu_paths();
    test_argmax();
    test_weighted_sum();
    test_norm_rows();
    test_norm_order();
    test_pool();
    return t_done();
}
