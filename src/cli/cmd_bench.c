/* sluice bench: prompt-processing and generation throughput, measured the way
 * llama-bench measures them.  ppP = one batch of P tokens into a fresh
 * session; tgN = N single-token evaluations from an empty session.  Tokens
 * are pseudo-random ids (fixed seed), so the numbers do not depend on a
 * tokenizer.  Each test runs once untimed (warm-up), then -r times. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "decode/rng.h"
#include "decode/stats.h"

#define FAIL(...) (cli_fail(__VA_ARGS__), -1)

enum { MAX_THREAD_SETS = 16 };

typedef struct {
    const char *model;
    long p, n, reps;
    int threads[MAX_THREAD_SETS];
    int n_threads;
    bool json;
    const char *json_out; /* also write the JSON object here */
} bench_args;

typedef struct {
    int threads;
    const char *isa;
    double *pp, *tg; /* tokens/s per repetition */
} bench_row;

static void usage(FILE *f)
{
    fprintf(f, "usage: sluice bench [-m MODEL.gguf] [-p 512] [-n 128] [-t N[,N...]] [-r 5] [--json]\n\n"
               "Measures prompt processing (ppP: one batch of P tokens into a fresh session) and text\n"
               "generation (tgN: N single-token steps) in tokens/s, like llama-bench; prints the median\n"
               "and standard deviation over R repetitions after one warm-up run.\n\n"
               "  -m, --model FILE     GGUF model (default: the bundled model)\n"
               "  -p, --n-prompt P     prompt tokens (default 512; 0 skips the pp test)\n"
               "  -n, --n-gen N        generated tokens (default 128; 0 skips the tg test)\n"
               "  -t, --threads LIST   thread counts, comma-separated (default: physical cores)\n"
               "  -r, --repetitions R  timed repetitions (default 5)\n"
               "      --json           print one JSON object (medians pp_tps / tg_tps and the settings)\n"
               "      --json-out FILE  print the table and write the JSON object to FILE\n");
}

static int parse_threads(const char *s, bench_args *a)
{
    a->n_threads = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1024 || (*end && *end != ',') || a->n_threads == MAX_THREAD_SETS)
            return cli_fail("-t: expected thread counts like 2 or 1,2,4, got '%s'", s);
        a->threads[a->n_threads++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return a->n_threads ? 0 : cli_fail("-t: no thread count given");
}

/* 0 ok, 1 help shown, -1 bad arguments (reported). */
static int parse_args(int argc, char **argv, bench_args *a)
{
    static const struct option LONGOPTS[] = {
        {"model", required_argument, 0, 'm'}, {"n-prompt", required_argument, 0, 'p'},
        {"n-gen", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
        {"repetitions", required_argument, 0, 'r'}, {"json", no_argument, 0, 'j'},
        {"json-out", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0},
    };
    *a = (bench_args){.p = 512, .n = 128, .reps = 5, .threads = {cpu_physical_cores()}, .n_threads = 1};
    optind = 1;
    opterr = 0;
    for (int opt; (opt = getopt_long(argc, argv, ":m:p:n:t:r:h", LONGOPTS, NULL)) != -1;) {
        int bad = 0;
        switch (opt) {
        case 'm': a->model = optarg; break;
        case 'p': bad = cli_parse_int("-p", optarg, 0, 1L << 20, &a->p); break;
        case 'n': bad = cli_parse_int("-n", optarg, 0, 1L << 20, &a->n); break;
        case 'r': bad = cli_parse_int("-r", optarg, 1, 1000, &a->reps); break;
        case 't': bad = parse_threads(optarg, a); break;
        case 'j': a->json = true; break;
        case 'o': a->json_out = optarg; break;
        case 'h': usage(stdout); return 1;
        case ':': return FAIL("option %s needs a value (sluice bench --help)", argv[optind - 1]);
        default: return FAIL("unknown option %s (sluice bench --help)", argv[optind - 1]);
        }
        if (bad) return -1;
    }
    if (optind < argc) return FAIL("unexpected argument '%s' (sluice bench --help)", argv[optind]);
    if (a->p == 0 && a->n == 0) return FAIL("nothing to measure: -p and -n are both 0");
    return 0;
}

/* ---- measurement ---- */

typedef struct {
    sl_model *model;
    sl_pool *pool;
    int32_t *toks; /* max(p, n) pseudo-random ids */
    float *logits;
    const bench_args *a;
    sl_err err;
} bench_ctx;

/* Seconds for one pp run (fresh session, one batch of p tokens); -1 on error. */
static double run_pp(bench_ctx *b)
{
    sl_session *s;
    if (session_create(&s, b->model, (int32_t)b->a->p, b->pool, &b->err)) return -1;
    double t0 = stats_now();
    int rc = session_eval(s, b->toks, (int32_t)b->a->p, b->logits, false, &b->err);
    double dt = stats_now() - t0;
    session_free(s);
    return rc ? -1 : dt;
}

/* Seconds for one tg run (fresh session, n single-token steps); -1 on error. */
static double run_tg(bench_ctx *b)
{
    sl_session *s;
    if (session_create(&s, b->model, (int32_t)b->a->n, b->pool, &b->err)) return -1;
    double t0 = stats_now();
    int rc = 0;
    for (long i = 0; i < b->a->n && rc == 0; i++) rc = session_eval(s, &b->toks[i], 1, b->logits, false, &b->err);
    double dt = stats_now() - t0;
    session_free(s);
    return rc ? -1 : dt;
}

/* Warm-up, then reps timed runs as tokens/s into OUT. */
static int measure(bench_ctx *b, double (*run)(bench_ctx *), long tokens, double *out)
{
    if (tokens == 0) return 0;
    for (long r = -1; r < b->a->reps; r++) {
        double dt = run(b);
        if (dt < 0) return cli_fail("%s", b->err.msg);
        if (r >= 0) out[r] = dt > 0 ? (double)tokens / dt : 0;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, long n)
{
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return NAN;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

static double stddev(const double *v, long n)
{
    if (n < 2) return 0;
    double mean = 0, ss = 0;
    for (long i = 0; i < n; i++) mean += v[i] / (double)n;
    for (long i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
    return sqrt(ss / (double)(n - 1));
}

/* ---- output ---- */

static void model_size(const sl_model *m, uint64_t *bytes, double *params)
{
    const gguf_file *g = model_gguf(m);
    *bytes = 0, *params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        double ne = 1;
        for (uint32_t d = 0; d < t->n_dims && d < 4; d++) ne *= (double)t->ne[d];
        *bytes += t->nbytes, *params += ne;
    }
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void print_table(const bench_args *a, const cli_model *cm, const bench_row *rows)
{
    uint64_t bytes;
    double params;
    model_size(cm->model, &bytes, &params);
    char name[96], size[32], par[32];
    snprintf(name, sizeof name, "%s (%s)", base_name(cm->path), model_arch(cm->model));
    cli_fmt_bytes(bytes, size, sizeof size);
    snprintf(par, sizeof par, "%.2f M", params / 1e6);
    /* the t/s cells hold a 2-byte "±": printf widths count bytes */
    printf("| %-32s | %10s | %9s | %-6s | %7s | %8s | %21s |\n", "model", "size", "params", "isa", "threads", "test",
           "t/s");
    printf("| %.32s | %.10s | %.9s | %.6s | %.7s | %.8s | %.21s |\n", "--------------------------------",
           "---------:", "--------:", "------", "------:", "-------:", "--------------------:");
    for (int i = 0; i < a->n_threads; i++) {
        for (int k = 0; k < 2; k++) {
            long tok = k ? a->n : a->p;
            const double *v = k ? rows[i].tg : rows[i].pp;
            if (tok == 0) continue;
            char test[24], ts[40];
            snprintf(test, sizeof test, "%s%ld", k ? "tg" : "pp", tok);
            snprintf(ts, sizeof ts, "%.2f ± %.2f", median(v, a->reps), stddev(v, a->reps));
            printf("| %-32s | %10s | %9s | %-6s | %7d | %8s | %22s |\n", name, size, par, rows[i].isa,
                   rows[i].threads, test, ts);
        }
    }
    printf("\nt/s: median ± standard deviation over %ld runs (after one warm-up run)\n", a->reps);
}

static json_t *samples_json(const double *v, long n, long tokens)
{
    if (tokens == 0) return json_null();
    json_t *arr = json_array();
    for (long i = 0; i < n; i++) json_array_append_new(arr, json_real(v[i]));
    return arr;
}

static json_t *row_json(const bench_args *a, const bench_row *r)
{
    json_t *o = json_object();
    json_object_set_new(o, "threads", json_integer(r->threads));
    json_object_set_new(o, "isa", json_string(r->isa));
    json_object_set_new(o, "pp_tps", a->p ? json_real(median(r->pp, a->reps)) : json_null());
    json_object_set_new(o, "tg_tps", a->n ? json_real(median(r->tg, a->reps)) : json_null());
    json_object_set_new(o, "pp_tps_sd", json_real(a->p ? stddev(r->pp, a->reps) : 0));
    json_object_set_new(o, "tg_tps_sd", json_real(a->n ? stddev(r->tg, a->reps) : 0));
    json_object_set_new(o, "pp_samples", samples_json(r->pp, a->reps, a->p));
    json_object_set_new(o, "tg_samples", samples_json(r->tg, a->reps, a->n));
    return o;
}

/* One object: the settings, the first thread count's results at top level,
 * and every thread count under "results". */
static int print_json(const bench_args *a, const cli_model *cm, const bench_row *rows, FILE *f)
{
    json_t *o = row_json(a, &rows[0]), *all = json_array();
    json_object_set_new(o, "model", json_string(cm->path));
    json_object_set_new(o, "arch", json_string(model_arch(cm->model)));
    json_object_set_new(o, "p", json_integer(a->p));
    json_object_set_new(o, "n", json_integer(a->n));
    json_object_set_new(o, "reps", json_integer(a->reps));
    json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)stats_peak_rss()));
    for (int i = 0; i < a->n_threads; i++) json_array_append_new(all, row_json(a, &rows[i]));
    json_object_set_new(o, "results", all);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return cli_fail("cannot format the JSON output");
    fprintf(f, "%s\n", s);
    free(s);
    return 0;
}

static int write_json(const bench_args *a, const cli_model *cm, const bench_row *rows)
{
    FILE *f = fopen(a->json_out, "w");
    if (!f) return cli_fail("cannot create %s", a->json_out);
    int rc = print_json(a, cm, rows, f);
    if (fclose(f) != 0 && !rc) rc = cli_fail("cannot write %s", a->json_out);
    return rc;
}

/* ---- command ---- */

static int bench_threads(bench_ctx *b, int threads, bench_row *row)
{
    b->pool = pool_create(threads);
    if (!b->pool) return cli_fail("cannot start %d threads", threads);
    row->threads = pool_threads(b->pool);
    row->isa = kernels_isa_name(pool_isa(b->pool));
    int rc = measure(b, run_pp, b->a->p, row->pp) || measure(b, run_tg, b->a->n, row->tg);
    pool_destroy(b->pool);
    b->pool = NULL;
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a;
    int r = parse_args(argc, argv, &a);
    if (r) return r < 0 ? 2 : 0;
    cli_model cm;
    cli_model_opts mo = {.model_path = a.model, .model_only = true};
    if (cli_model_open(&cm, &mo)) return 1;
    long nt = a.p > a.n ? a.p : a.n;
    bench_ctx b = {.model = cm.model, .a = &a};
    bench_row rows[MAX_THREAD_SETS] = {{0}};
    b.toks = malloc((size_t)nt * sizeof *b.toks);
    b.logits = malloc((size_t)model_n_vocab(cm.model) * sizeof *b.logits);
    int rc = !b.toks || !b.logits ? cli_fail("out of memory") : 0;
    sl_rng rng;
    rng_seed(&rng, 1234);
    for (long i = 0; !rc && i < nt; i++) b.toks[i] = (int32_t)(rng_u32(&rng) % (uint32_t)model_n_vocab(cm.model));
    for (int i = 0; !rc && i < a.n_threads; i++) {
        rows[i].pp = calloc((size_t)a.reps, sizeof(double));
        rows[i].tg = calloc((size_t)a.reps, sizeof(double));
        rc = !rows[i].pp || !rows[i].tg ? cli_fail("out of memory") : bench_threads(&b, a.threads[i], &rows[i]);
    }
    if (!rc) rc = a.json ? print_json(&a, &cm, rows, stdout) : (print_table(&a, &cm, rows), 0);
    if (!rc && a.json_out) rc = write_json(&a, &cm, rows);
    for (int i = 0; i < a.n_threads; i++) free(rows[i].pp), free(rows[i].tg);
    free(b.toks);
    free(b.logits);
    cli_model_close(&cm);
    return rc ? 1 : 0;
}
