/* What rolling back recurrent state costs (issue 11): drafting verifies K+1
 * tokens at once and keeps a prefix, so the state after every verified
 * position must be restorable.  sluice keeps it in a ring (rstate.c): each
 * token's update is written into the next slot instead of in place, so a
 * snapshot costs no copy.  This measures, on a model with recurrent layers,
 * alternating and with medians:
 *   verify   one K+1-token evaluation with n_rollback 0 (no snapshots kept)
 *            and with n_rollback K (every position kept): the difference
 *            is the snapshots' cost;
 *   rewind   session_rewind to a position inside the last verification;
 *   replay   the alternative without snapshots: from a checkpoint at the
 *            start of the verification, restore and re-evaluate j accepted
 *            tokens (j = 1..K), which is what recompute would cost;
 * and prints the state's size (one snapshot) and what the ring holds.
 *
 *   build/bench_rollback MODEL [-t THREADS] [-k K] [-c CTX] [-r REPS]
 * The machine is shared: read the ratios of interleaved runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/model.h"
#include "util/clock.h"

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

static int32_t tok(int i) { return (int32_t)((i * 7919 + 13) % 2000); }

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [-t THREADS] [-k K] [-c CTX] [-r REPS]\n", argv[0]);
        return 2;
    }
    int threads = 2, K = 4, ctx = 256, reps = 9;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-k")) K = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) ctx = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    if (K < 1 || K > 64 || reps < 1 || reps > 99 || ctx < 64) return fprintf(stderr, "bad arguments\n"), 2;
    sl_err err;
    sl_model *m;
    if (model_load(&m, argv[1], NULL, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    uint64_t one = session_state_bytes(m);
    if (!one) fprintf(stderr, "note: %s has no recurrent layers; the figures show the attention-only case\n", argv[1]);
    sl_pool *pool = pool_create(threads);
    session_opts s0 = {.n_rollback = 0}, sk = {.n_rollback = K};
    sl_session *a, *b;
    if (session_create_opts(&a, m, ctx, pool, &s0, &err) || session_create_opts(&b, m, ctx, pool, &sk, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    int32_t warm = ctx / 4, t[65];
    for (int i = 0; i <= K; i++) t[i] = tok(warm + i);
    int32_t pre[1024];
    for (int i = 0; i < warm && i < 1024; i++) pre[i] = tok(i);
    if (session_eval(a, pre, warm, NULL, false, &err) || session_eval(b, pre, warm, NULL, false, &err) ||
        session_checkpoint(a, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    double v0[99], vk[99], rw[99], rp[64][99];
    for (int r = 0; r < reps; r++) {
        /* verify K+1 tokens without and with snapshots, then go back to warm */
        sl_session *first = r % 2 ? b : a, *second = r % 2 ? a : b; /* alternate the order */
        double t0 = sl_now();
        int rc = session_eval(first, t, K + 1, NULL, false, &err);
        double t1 = sl_now();
        rc |= session_eval(second, t, K + 1, NULL, false, &err);
        double t2 = sl_now();
        rc |= session_rewind(b, warm + 1 + (r % K), &err);
        double t3 = sl_now();
        v0[r] = r % 2 ? t2 - t1 : t1 - t0, vk[r] = r % 2 ? t1 - t0 : t2 - t1, rw[r] = t3 - t2;
        /* without snapshots: back to the checkpoint, then recompute j tokens */
        for (int j = 1; j <= K && !rc; j++) {
            double u0 = sl_now();
            rc |= session_rewind(a, warm, &err) || session_eval(a, t, j, NULL, false, &err);
            rp[j - 1][r] = sl_now() - u0;
        }
        rc |= session_rewind(a, warm, &err) || session_rewind(b, warm, &err);
        if (rc) return fprintf(stderr, "%s\n", err.msg), 1;
    }
    printf("model %s: recurrent state %.2f MiB per snapshot; ring of n_rollback + 2 = %d states = %.1f MiB "
           "(+1 checkpoint)\n",
           argv[1], one / 1048576.0, K + 2, (double)(K + 2) * one / 1048576.0);
    double m0 = median(v0, reps), mk = median(vk, reps);
    printf("verify %d tokens: %.2f ms without snapshots, %.2f ms keeping all %d (%+.1f%%)\n", K + 1, 1e3 * m0,
           1e3 * mk, K + 1, 100 * (mk - m0) / m0);
    printf("rewind into the verified positions: %.1f us\n", 1e6 * median(rw, reps));
    for (int j = 1; j <= K; j++)
        printf("recompute instead: restore the checkpoint + re-evaluate %d token%s: %.2f ms\n", j, j > 1 ? "s" : "",
               1e3 * median(rp[j - 1], reps));
    session_free(a);
    session_free(b);
    pool_destroy(pool);
    model_free(m);
    return 0;
}
