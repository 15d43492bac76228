/* Model benchmark: prefill and decode tokens/s of a GGUF model through
 * session_eval, on a fixed synthetic token sequence (token i = (i * 7919 +
 * 13) % 50000), fresh session per repetition, medians reported.
 *
 *   build/bench_model MODEL [-t THREADS] [-p N_PROMPT] [-n N_GEN] [-r REPS] [-kv f16|f32]
 * The machine is shared: compare ratios from interleaved runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arch/model.h"
#include "util/clock.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(sl_model *m, sl_pool *pool, const session_opts *so, const int32_t *toks, int np, int ng, double *pp,
               double *tg)
{
    sl_err err;
    sl_session *s;
    float *lg = malloc(sizeof(float) * (size_t)model_n_vocab(m));
    if (!lg || session_create_opts(&s, m, np + ng + 16, pool, so, &err)) {
        fprintf(stderr, "session: %s\n", lg ? err.msg : "out of memory");
        free(lg);
        return -1;
    }
    double t0 = sl_now();
    int rc = session_eval(s, toks, np, lg, false, &err);
    double t1 = sl_now();
    for (int i = 0; rc == 0 && i < ng; i++) rc = session_eval(s, toks + np + i, 1, lg, false, &err);
    double t2 = sl_now();
    if (rc) fprintf(stderr, "eval: %s\n", err.msg);
    *pp = np / (t1 - t0);
    *tg = ng / (t2 - t1);
    session_free(s);
    free(lg);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [-t THREADS] [-p N_PROMPT] [-n N_GEN] [-r REPS] [-kv f16|f32]\n", argv[0]);
        return 2;
    }
    int nt = 1, np = 128, ng = 64, reps = 5;
    session_opts so = {.kv_mode = SL_KV_F16_FLASH};
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) nt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) np = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) ng = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-kv")) so.kv_mode = strcmp(argv[i + 1], "f32") ? SL_KV_F16_FLASH : SL_KV_F32;
    }
    if (np < 1 || ng < 1 || reps < 1 || reps > 64 || nt < 1) return 2;
    sl_err err;
    sl_model *m;
    if (model_load(&m, argv[1], NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t *toks = malloc(sizeof *toks * (size_t)(np + ng));
    for (int i = 0; i < np + ng; i++) toks[i] = (int32_t)((i * 7919 + 13) % 50000);
    sl_pool *pool = pool_create(nt);
    double pp[64], tg[64];
    int rc = 0;
    for (int r = 0; r < reps && rc == 0; r++) rc = run(m, pool, &so, toks, np, ng, &pp[r], &tg[r]);
    if (rc == 0) {
        qsort(pp, (size_t)reps, sizeof *pp, cmp_d);
        qsort(tg, (size_t)reps, sizeof *tg, cmp_d);
        printf("sluice %s t=%d: prefill %d tok: %.1f t/s, decode %d tok: %.1f t/s (medians of %d)\n",
               strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1], nt, np, pp[reps / 2], ng, tg[reps / 2],
               reps);
    }
    pool_destroy(pool);
    free(toks);
    model_free(m);
    return rc ? 1 : 0;
}
