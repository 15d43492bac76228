/* The most any choice of K could gain from drafting on a given text, in RAM
 * (issue 9; docs/DRAFT.md, "How far any K policy can go").
 *
 * Input (stdin), one sequence per line: the prompt's length P, then the ids
 * of the prompt and of its greedy continuation (bench/draft_bound.sh makes
 * them with `sluice run --json`).  For every decode step of the
 * continuation (the tokens before it known, the last one pending) it
 * measures, on the target:
 *   - the plain step: one position;
 *   - a verification of K = 1..16 drafts: the pending token and the
 *     proposal's first K ids, as the engine would verify them, projecting
 *     the logit rows up to the first rejected draft only;
 * and records how many of each proposer's ids the text keeps: the n-gram
 * lookup's (sluice's, with its defaults), and with --draft the draft
 * model's greedy proposal (whose drafting is timed too, K = 1..16 after a
 * catch-up of one token, the cheapest a step can draft).  Each time is the
 * minimum over the repetitions: the bound is meant to be optimistic.
 *
 * Then, by dynamic programming over the steps, the fastest schedule an
 * oracle could choose (which proposer and which K at every step, knowing
 * in advance how many drafts will be kept), and fixed K = 1, 2, 4, 8, 16
 * (K drafts, or all the proposer has, whenever it has some; the source
 * picked as the engine's combined mode picks it), as speedups over the
 * plain steps' sum.  No policy that decides before verifying can beat the
 * oracle on these costs.
 *
 *   build/draft_bound TARGET [--draft DRAFT.gguf] [--draft-vocab N] [-t THREADS] [-r REPS] [--dump OUT.jsonl] < SEQS
 * (--draft-vocab as for run: the ids the draft proposes from, 0 auto, -1 all) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/model.h"
#include "decode/draft.h"
#include "decode/draft_model.h"
#include "kernels/pool.h"
#include "util/clock.h"

enum { KMAX = DRAFT_MAX, NSRC = 2, MAXSEQ = 4096, NPMIN = 4 };
static const float PMIN[NPMIN] = {0.3f, 0.5f, 0.7f, 0.9f};

typedef struct {
    int n;                         /* decode steps */
    double *plain;                 /* [n] */
    double (*verify)[NSRC][KMAX + 1]; /* [n][src][K]: pass over K + 1 positions */
    double (*draft)[KMAX + 1];     /* [n][K]: the draft model's drafting */
    int (*keep)[NSRC];             /* [n][src]: proposal ids the text keeps */
    int (*have)[NSRC];             /* [n][src]: proposal length (0: none) */
    int (*cut)[NPMIN];             /* [n][t]: the model's proposal length at --draft-p-min PMIN[t] */
    int32_t *match;                /* [n]: how far the lookup's match agrees (draft_proposal.match) */
} steps;

/* A pass over N positions and the ROWS logit rows read after it: a plain
 * step (1 and 1), or a verification (the rows up to its first rejected
 * draft: the engine projects a few more, src/decode/spec.c). */
static double timed_pass(sl_session *s, const int32_t *t, int n, int rows_read, float *rows, sl_err *err)
{
    double t0 = sl_now();
    if (session_eval_held(s, t, n, err) || session_logits(s, 0, rows_read, rows, err)) return -1;
    return sl_now() - t0;
}

static int step_yield(const steps *st, int j, int src, int k) { return 1 + (k < st->keep[j][src] ? k : st->keep[j][src]); }

static void keep_min(double *slot, double t) { *slot = *slot <= 0 || t < *slot ? t : *slot; }

static int kept(const int32_t *prop, int n, const int32_t *seq, int left)
{
    int k = 0;
    while (k < n && k < left && prop[k] == seq[k]) k++;
    return k;
}

/* The proposals of every step and the draft model's drafting times.  Apart
 * from the target's passes: a draft run between them would evict the
 * target's weights from the CPU's caches and flatter drafting. */
static int propose_all(draft_model *dm, draft_model *const *cut, const int32_t *seq, int p, int total, steps *st,
                       int32_t (*prop)[NSRC][KMAX], sl_err *err)
{
    for (int j = 0; j < st->n; j++) {
        int i = p + 1 + j; /* tokens [0, i) known, token i - 1 pending */
        st->have[j][0] = ngram_lookup(seq, (size_t)i, 1, 4, KMAX, prop[j][0], &st->match[j]);
        st->have[j][1] = 0;
        if (dm) {
            draft_proposal dp;
            for (int k = 1; k <= KMAX; k++) { /* after a catch-up of one token */
                if (draft_model_propose(dm, seq, (size_t)i - 1, 1, NULL, &dp, err)) return -1;
                double t = sl_now();
                if (draft_model_propose(dm, seq, (size_t)i, k, NULL, &dp, err)) return -1;
                keep_min(&st->draft[j][k], sl_now() - t);
            }
            st->have[j][1] = dp.n;
            memcpy(prop[j][1], dp.ids, sizeof(int32_t) * (size_t)dp.n);
            for (int t = 0; t < NPMIN; t++) { /* greedy too: a prefix of the proposal above */
                if (draft_model_propose(cut[t], seq, (size_t)i, KMAX, NULL, &dp, err)) return -1;
                st->cut[j][t] = dp.n < st->have[j][1] ? dp.n : st->have[j][1];
            }
        }
        for (int src = 0; src < NSRC; src++) st->keep[j][src] = kept(prop[j][src], st->have[j][src], seq + i, total - i);
    }
    return 0;
}

/* The target's plain steps, one after another as plain decoding runs them
 * (between verifications they would find the CPU's caches colder and
 * flatter drafting), then its verifications at every step. */
static int measure(sl_session *s, const int32_t *seq, int p, steps *st, int32_t (*prop)[NSRC][KMAX], float *rows,
                   sl_err *err)
{
    if (session_rewind(s, 0, err) || session_eval(s, seq, p, rows, false, err)) return -1;
    for (int j = 0; j < st->n; j++) {
        double t = timed_pass(s, seq + p + j, 1, 1, rows, err);
        if (t < 0) return -1;
        keep_min(&st->plain[j], t);
    }
    if (session_rewind(s, p, err)) return -1;
    for (int j = 0; j < st->n; j++) {
        int i = p + 1 + j; /* tokens [0, i) known, token i - 1 pending */
        int32_t batch[KMAX + 1];
        for (int src = 0; src < NSRC; src++) {
            batch[0] = seq[i - 1];
            for (int k = 1; k <= st->have[j][src]; k++) {
                batch[k] = prop[j][src][k - 1];
                double t = timed_pass(s, batch, k + 1, step_yield(st, j, src, k), rows, err);
                if (t < 0 || session_rewind(s, i - 1, err)) return -1;
                keep_min(&st->verify[j][src][k], t);
            }
        }
        if (session_eval(s, seq + i - 1, 1, rows, false, err)) return -1; /* advance */
    }
    return 0;
}

/* The cost and yield of step J with source SRC and K drafts (K = 0: plain). */
static double step_cost(const steps *st, int j, int src, int k)
{
    if (!k) return st->plain[j];
    return st->verify[j][src][k] + (src == 1 ? st->draft[j][k] : 0);
}


/* The source a fixed-K policy drafts from at step J, as the engine picks it
 * (combined mode: the lookup when it matched, the model otherwise); -1:
 * none. */
static int engine_src(const steps *st, int j, int srcs)
{
    if ((srcs & 1) && st->have[j][0] > 0) return 0;
    if ((srcs & 2) && st->have[j][1] > 0) return 1;
    return -1;
}

/* Time from step J on for SRCS (bit 0 the n-gram lookup, bit 1 the model).
 * FIXED_K < 0: the oracle's, the fastest choice of source and K (or a
 * plain step) at every step, knowing what each keeps; else a fixed policy:
 * FIXED_K drafts (or all the proposal has) whenever there is one. */
static double best_time(const steps *st, int srcs, int fixed_k, int pmin)
{
    double *f = calloc((size_t)st->n + 1, sizeof *f);
    if (!f) return -1;
    for (int j = st->n - 1; j >= 0; j--) {
        double best = st->plain[j] + f[j + 1];
        int fs = fixed_k < 0 ? -1 : engine_src(st, j, srcs);
        if (fs >= 0 && (fs != 1 || pmin < 0 || st->cut[j][pmin] > 0)) {
            int k = fixed_k < st->have[j][fs] ? fixed_k : st->have[j][fs];
            if (fs == 1 && pmin >= 0) k = st->cut[j][pmin];
            int next = j + step_yield(st, j, fs, k);
            best = step_cost(st, j, fs, k) + f[next > st->n ? st->n : next];
        }
        for (int src = 0; fixed_k < 0 && src < NSRC; src++)
            for (int k = 1; (srcs >> src & 1) && k <= st->have[j][src]; k++) {
                int next = j + step_yield(st, j, src, k);
                double c = step_cost(st, j, src, k) + f[next > st->n ? st->n : next];
                if (c < best) best = c;
            }
        f[j] = best;
    }
    double t = f[0];
    free(f);
    return t;
}

/* One line of SEQS into SEQ (P: the prompt's length); the ids it read, 0
 * at the end of the input, -1 for a line that is not "P id id ...". */
static int read_seq(int32_t *seq, int *p)
{
    int n = 0, c;
    int got = scanf("%d", p);
    if (got == EOF) return 0;
    if (got != 1) return -1;
    while ((c = getchar()) != EOF && c != '\n') {
        if (c == ' ' || c == '\t') continue;
        ungetc(c, stdin);
        int v;
        if (scanf("%d", &v) != 1 || v < 0 || n >= MAXSEQ) return -1;
        seq[n++] = v;
    }
    return n;
}

enum { NFIX = 5 }; /* K = 1, 2, 4, 8, 16 */

typedef struct {
    double plain, oracle[4], fixed[4][NFIX], pmin[4][NPMIN];
} totals;

/* Prints one sequence's bounds for the proposer set SRCS and adds them to TOT. */
static void report(const steps *st, int srcs, const char *label, totals *tot)
{
    double plain = 0, o = best_time(st, srcs, -1, -1);
    for (int j = 0; j < st->n; j++) plain += st->plain[j];
    if (srcs == 1) tot->plain += plain;
    tot->oracle[srcs] += o;
    printf("  %-7s oracle %.2fx |", label, plain / o);
    for (int f = 0, k = 1; f < NFIX; f++, k *= 2) {
        double t = best_time(st, srcs, k, -1);
        tot->fixed[srcs][f] += t;
        printf(" K=%d %.2fx", k, plain / t);
    }
    printf("\n");
    if (!(srcs & 2)) return;
    printf("  %-7s p-min", "");
    for (int m = 0; m < NPMIN; m++) {
        double t = best_time(st, srcs, 4, m);
        tot->pmin[srcs][m] += t;
        printf(" %.1f %.2fx", PMIN[m], plain / t);
    }
    printf("\n");
}

static void report_totals(const totals *t, bool model)
{
    printf("all sequences (plain steps %.1f ms):\n", t->plain * 1e3);
    static const char *names[4] = {"", "n-gram", "model", "both"};
    for (int srcs = 1; srcs <= (model ? 3 : 1); srcs++) {
        printf("  %-7s oracle %.2fx |", names[srcs], t->plain / t->oracle[srcs]);
        for (int f = 0, k = 1; f < NFIX; f++, k *= 2) printf(" K=%d %.2fx", k, t->plain / t->fixed[srcs][f]);
        printf("\n");
        if (!(srcs & 2)) continue;
        printf("  %-7s p-min", "");
        for (int m = 0; m < NPMIN; m++) printf(" %.1f %.2fx", PMIN[m], t->plain / t->pmin[srcs][m]);
        printf("\n");
    }
}

/* One JSON line per sequence for offline policy studies (--dump): per step
 * the plain time, the lookup's match length, each source's proposal length
 * and kept ids, its verification times by K and the model's drafting times. */
static void dump(FILE *f, const steps *st)
{
    fprintf(f, "{\"steps\":[");
    for (int j = 0; j < st->n; j++) {
        fprintf(f, "%s{\"plain\":%.9f,\"match\":%d,\"have\":[%d,%d],\"keep\":[%d,%d],\"verify\":[", j ? "," : "",
                st->plain[j], st->match[j], st->have[j][0], st->have[j][1], st->keep[j][0], st->keep[j][1]);
        for (int src = 0; src < NSRC; src++) {
            fprintf(f, "%s[", src ? "," : "");
            for (int k = 1; k <= st->have[j][src]; k++) fprintf(f, "%s%.9f", k > 1 ? "," : "", st->verify[j][src][k]);
            fprintf(f, "]");
        }
        fprintf(f, "],\"draft\":[");
        for (int k = 1; k <= st->have[j][1]; k++) fprintf(f, "%s%.9f", k > 1 ? "," : "", st->draft[j][k]);
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) return fprintf(stderr, "usage: %s TARGET [--draft D] [--draft-vocab N] [-t THREADS] [-r REPS] [--dump OUT] < SEQS\n", argv[0]), 2;
    const char *dpath = NULL, *dump_path = NULL;
    int threads = 1, reps = 3, vocab = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--draft")) dpath = argv[i + 1];
        else if (!strcmp(argv[i], "--draft-vocab")) vocab = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dump")) dump_path = argv[i + 1];
        else return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
    }
    if (threads < 1 || reps < 1) return fprintf(stderr, "bad -t or -r\n"), 2;
    FILE *df = dump_path ? fopen(dump_path, "w") : NULL;
    if (dump_path && !df) return fprintf(stderr, "%s: cannot write\n", dump_path), 1;
    sl_err err;
    sl_model *m;
    if (model_load(&m, argv[1], NULL, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    sl_pool *pool = pool_create(threads);
    session_opts so = {.kv_mode = SL_KV_F16_FLASH, .n_rollback = KMAX};
    sl_session *s;
    if (!pool || session_create_opts(&s, m, MAXSEQ + KMAX + 1, pool, &so, &err))
        return fprintf(stderr, "%s\n", pool ? err.msg : "no thread pool"), 1;
    draft_model *dm = NULL;
    if (dpath && draft_model_open(&dm, dpath, m, pool, MAXSEQ + KMAX + 1, 0, vocab, false, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    sampler_params greedy = {.temp = 0};
    if (dm && draft_model_set_sampling(dm, &greedy, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    draft_model *cut[NPMIN] = {0}; /* the same draft, stopping below PMIN[t] */
    for (int t = 0; dm && t < NPMIN; t++)
        if (draft_model_open(&cut[t], dpath, m, pool, MAXSEQ + KMAX + 1, PMIN[t], vocab, false, &err) ||
            draft_model_set_sampling(cut[t], &greedy, &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
    float *rows = malloc(sizeof(float) * (size_t)model_n_vocab(m) * (KMAX + 1));
    static int32_t seq[MAXSEQ];
    totals tot = {0};
    int p, total, nseq = 0;
    if (!rows) return fprintf(stderr, "out of memory\n"), 1;
    while ((total = read_seq(seq, &p)) != 0) {
        if (total < 0) return fprintf(stderr, "sequence %d: not a line of \"P id id ...\" (at most %d ids)\n", nseq, MAXSEQ), 1;
        if (p < 1 || p + 2 > total) return fprintf(stderr, "sequence %d: prompt length %d of %d ids\n", nseq, p, total), 1;
        steps st = {.n = total - p - 1};
        st.plain = calloc((size_t)st.n, sizeof *st.plain);
        st.verify = calloc((size_t)st.n, sizeof *st.verify);
        st.draft = calloc((size_t)st.n, sizeof *st.draft);
        st.keep = calloc((size_t)st.n, sizeof *st.keep);
        st.have = calloc((size_t)st.n, sizeof *st.have);
        st.cut = calloc((size_t)st.n, sizeof *st.cut);
        st.match = calloc((size_t)st.n, sizeof *st.match);
        if (!st.plain || !st.verify || !st.draft || !st.keep || !st.have || !st.cut || !st.match) return fprintf(stderr, "out of memory\n"), 1;
        int32_t(*prop)[NSRC][KMAX] = calloc((size_t)st.n, sizeof *prop);
        if (!prop) return fprintf(stderr, "out of memory\n"), 1;
        for (int r = 0; r < reps; r++)
            if (propose_all(dm, cut, seq, p, total, &st, prop, &err) || measure(s, seq, p, &st, prop, rows, &err))
                return fprintf(stderr, "%s\n", err.msg), 1;
        free(prop);
        printf("sequence %d (%d decode steps):\n", nseq++, st.n);
        report(&st, 1, "n-gram", &tot);
        if (dm) report(&st, 2, "model", &tot), report(&st, 3, "both", &tot);
        if (df) dump(df, &st);
        free(st.match), free(st.plain), free(st.verify), free(st.draft), free(st.keep), free(st.have), free(st.cut);
    }
    if (nseq > 1) report_totals(&tot, dm != NULL);
    if (df && fclose(df)) return fprintf(stderr, "%s: write failed\n", dump_path), 1;
    return 0;
}
