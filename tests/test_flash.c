/* The default KV mode (f16 cache, flash attention) follows llama.cpp's CPU
 * backend in choosing its kernel by batch size: a pass of >= 64 positions
 * runs ggml's tiled flash kernel, smaller passes and decode the one-row
 * kernel (docs/ARCH.md).  On the bundled tinydraft (dense F16, head 64):
 *  - a 100-token pass gives the same bits on 1 and 3 threads and every ISA;
 *  - split at n_batch 64 the first pass (64 rows, tiled) equals the first 64
 *    rows of the whole pass, and the rest (36 rows, one-row kernel) equals
 *    decoding them one at a time after it;
 *  - the two kernels agree to within f16 rounding (a wrong tiled kernel
 *    would not), and they are not the same arithmetic;
 *  - the f32 mode stays batch-invariant at any size;
 *  - the one-row kernel over several query heads at once (flash_rows) gives
 *    each head the bits of the one-head kernel, on every ISA. */
#include <math.h>
#include <string.h>

#include "arch/attn_simd.h"
#include "arch/model.h"
#include "t.h"

enum { N = 100 };

static int32_t toks[N];

static float *logits(sl_model *m, sl_kv_mode kv, int n_batch, int threads, int isa, int step)
{
    int nv = model_n_vocab(m);
    sl_pool *pool = threads > 1 || isa >= 0 ? pool_create(threads) : NULL;
    if (pool && isa >= 0) pool_set_isa(pool, (sl_isa)isa);
    session_opts so = {.kv_mode = kv, .n_batch = n_batch};
    sl_session *s;
    sl_err err;
    float *lg = malloc(sizeof(float) * (size_t)nv * N);
    int rc = !lg || session_create_opts(&s, m, 128, pool, &so, &err);
    T_CHECK(rc == 0, "session: %s", err.msg);
    for (int i = 0; !rc && i < N; i += step) {
        int n = i + step > N ? N - i : step;
        rc = session_eval(s, toks + i, n, lg + (size_t)i * nv, true, &err);
        T_CHECK(rc == 0, "eval: %s", err.msg);
    }
    if (lg && !(rc && !s)) session_free(s);
    pool_destroy(pool);
    if (rc) free(lg);
    return rc ? NULL : lg;
}

static double max_rel(const float *a, const float *b, int nv, int r0, int r1)
{
    double worst = 0;
    for (int r = r0; r < r1; r++) {
        const float *x = a + (size_t)r * nv, *y = b + (size_t)r * nv;
        float lo = y[0], hi = y[0];
        double d = 0;
        for (int i = 0; i < nv; i++) lo = fminf(lo, y[i]), hi = fmaxf(hi, y[i]), d = fmax(d, fabs(x[i] - y[i]));
        worst = fmax(worst, d / (hi - lo));
    }
    return worst;
}

/* Random f16 keys, values and queries whose scores reach new maxima now
 * and then (so the accumulators are rescaled too); every shape the
 * one-row kernel's fast paths and fallbacks take. */
static void flash_rows_case(void)
{
    t_begin("flash: several query rows at once (flash_rows: heads, consecutive positions) = each alone, bit for bit, "
            "every ISA");
    enum { NMAX = 300, DMAX = 256 };
    static uint16_t k[NMAX * DMAX], v[NMAX * DMAX], q[ATTN_FLASH_ROWS * DMAX], acc[DMAX];
    static float out[2 * ATTN_FLASH_ROWS * DMAX], want[2 * ATTN_FLASH_ROWS * DMAX],
        work[3 * (NMAX + ATTN_FLASH_ROWS) * ATTN_FLASH_ROWS];
    uint32_t r = 12345;
    for (size_t i = 0; i < NMAX * DMAX; i++) {
        r = r * 1664525u + 1013904223u;
        k[i] = fp32_to_fp16(((float)(r >> 8) / 16777216.0f - 0.5f) * (float)(1 + (i / DMAX) % 7));
        r = r * 1664525u + 1013904223u;
        v[i] = fp32_to_fp16((float)(r >> 8) / 16777216.0f - 0.5f);
    }
    for (size_t i = 0; i < ATTN_FLASH_ROWS * DMAX; i++) {
        r = r * 1664525u + 1013904223u;
        q[i] = fp32_to_fp16((float)(r >> 8) / 16777216.0f - 0.5f);
    }
    static const int dks[] = {64, 128, 48}, dvs[] = {16, 32, 64, 128, 256, 40}, ns[] = {1, 5, 37, 296};
    const attn_simd *ref = attn_simd_for(SL_ISA_SCALAR);
    int cases = 0;
    for (int isa = SL_ISA_SCALAR; isa <= (int)kernels_isa_detected(); isa++) {
        const attn_simd *op = attn_simd_for((sl_isa)isa);
        if (!op->flash_rows) continue;
        for (size_t a = 0; a < sizeof dks / sizeof *dks; a++)
            for (size_t b = 0; b < sizeof dvs / sizeof *dvs; b++)
                for (size_t c = 0; c < sizeof ns / sizeof *ns; c++)
                    for (int nh = 2; nh <= ATTN_FLASH_ROWS; nh++)
                        for (int hg = 1; hg <= nh; hg++) { /* HG heads to a position; the positions consecutive */
                            if (nh % hg) continue;
                            int dk = dks[a], dv = dvs[b], n = ns[c];
                            size_t ts = (size_t)(hg + 1) * DMAX; /* a gap between positions' outputs */
                            for (int i = 0; i < nh; i++)
                                ref->flash(k, DMAX, v, DMAX, q + i * DMAX, dk, dv, n + i / hg, 0.125f,
                                           want + (size_t)(i / hg) * ts + (size_t)(i % hg) * DMAX, acc, work);
                            memset(out, 0xff, sizeof out);
                            op->flash_rows(k, DMAX, v, DMAX, q, DMAX, nh, hg, dk, dv, n, 0.125f, out, DMAX, ts, acc,
                                           work);
                            for (int i = 0; i < nh; i++) {
                                size_t o = (size_t)(i / hg) * ts + (size_t)(i % hg) * DMAX;
                                T_CHECK(!memcmp(out + o, want + o, sizeof(float) * (size_t)dv),
                                        "isa %d dk %d dv %d n %d: row %d of %d (%d a position) differs", isa, dk, dv,
                                        n, i, nh, hg);
                            }
                            cases++;
                        }
    }
    printf("# flash_rows: %d shapes checked against the scalar one-head kernel\n", cases);
    t_end();
}

int main(void)
{
    flash_rows_case();
    sl_model *m;
    sl_err err;
    if (model_load(&m, "models/tinydraft-f16.gguf", NULL, &err)) {
        printf("not ok flash: %s\n", err.msg);
        return 1;
    }
    int nv = model_n_vocab(m);
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 7919u + 464u) % 20000u);
    size_t row = sizeof(float) * (size_t)nv;

    t_begin("flash: a 100-token pass (tiled kernel) has the same bits on 1 and 3 threads and every ISA");
    float *ref = logits(m, SL_KV_F16_FLASH, 0, 1, -1, N);
    for (int isa = SL_ISA_SCALAR; ref && isa <= (int)kernels_isa_detected(); isa++) {
        float *a = logits(m, SL_KV_F16_FLASH, 0, 3, isa, N);
        T_CHECK(a && !memcmp(a, ref, row * N), "3 threads on %s differ", kernels_isa_name((sl_isa)isa));
        free(a);
    }
    t_end();

    t_begin("flash: passes of 64 (tiled) then 36 (one-row kernel) = the 64-row pass, then decoding one by one");
    float *split = logits(m, SL_KV_F16_FLASH, 64, 1, -1, N);
    float *dec = NULL;
    {
        /* the first 64 as one pass, then one token at a time */
        sl_session *s;
        session_opts so = {.kv_mode = SL_KV_F16_FLASH};
        dec = malloc(row * N);
        int rc = !dec || session_create_opts(&s, m, 128, NULL, &so, &err);
        if (!rc) {
            rc = session_eval(s, toks, 64, dec, true, &err);
            for (int i = 64; !rc && i < N; i++) rc = session_eval(s, toks + i, 1, dec + (size_t)i * nv, false, &err);
            session_free(s);
        }
        T_CHECK(rc == 0, "%s", err.msg);
    }
    T_CHECK(ref && split && !memcmp(split, ref, row * 64), "the first 64 rows differ from the whole pass's");
    T_CHECK(split && dec && !memcmp(split, dec, row * N), "the 36-row pass differs from decoding its tokens");
    t_end();

    t_begin("flash: the tiled and the one-row kernel agree to f16 rounding, and differ");
    float *one = logits(m, SL_KV_F16_FLASH, 0, 1, -1, 1);
    double d = ref && one ? max_rel(ref, one, nv, 0, N) : INFINITY;
    printf("# tiled (100-token pass) vs one token at a time: max|d|/R %.3g\n", d);
    T_CHECK(d < 2e-3, "max|d|/R %.3g", d);
    T_CHECK(d > 0, "the 100-token pass did not take the tiled kernel");
    t_end();

    t_begin("flash: the f32 mode stays batch-invariant at 100 tokens");
    float *f1 = logits(m, SL_KV_F32, 0, 1, -1, N), *f2 = logits(m, SL_KV_F32, 0, 1, -1, 1);
    T_CHECK(f1 && f2 && !memcmp(f1, f2, row * N), "one pass and one by one differ");
    t_end();

    free(ref);
    free(split);
    free(dec);
    free(one);
    free(f1);
    free(f2);
    model_free(m);
    return t_done();
}
