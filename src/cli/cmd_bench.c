/* sluice bench: prompt-processing and generation throughput, measured the way
 * llama-bench measures them.  ppP = one batch of P tokens into a fresh
 * session; tgN = N single-token evaluations from an empty session.  Tokens
 * are pseudo-random ids (fixed seed), so the numbers do not depend on a
 * tokenizer.  Each test runs once untimed (warm-up), then -r times. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/throttle.h"
#include "decode/rng.h"
#include "decode/sampler.h"
#include "decode/stats.h"
#include "experts/probe.h"
#include "experts/timeline_svg.h"
#include "tok/tokenizer.h"
#include "util/clock.h"

#define FAIL(...) (cli_fail(__VA_ARGS__), -1)

enum { MAX_THREAD_SETS = 16 };

typedef struct {
    const char *model;
    long p, n, reps;
    int threads[MAX_THREAD_SETS];
    int n_threads;
    bool json;
    const char *json_out; /* also write the JSON object here */
    engine_opts eo;       /* --mem, --io, ...: streaming benchmark */
    bool no_probe;
    bool cold;            /* streaming tg: no warm-up text */
    double throttle;      /* --throttle: bytes/s ceiling for expert reads (0: none) */
    const char *throttle_how; /* how it was applied, for the report */
    bool throttle_sim;    /* --throttle-sim: the store's simulated drive even as root */
    const char *timeline; /* --timeline FILE.svg */
} bench_args;

/* Streaming figures of one test (warm-up included, except for the text
 * decode: its timed steps only), from store counters. */
typedef struct {
    double bytes_per_token, hit_rate, io_wait_share, read_gbps, effective_gbps;
    double waste_share;          /* prefetched bytes never used / bytes loaded */
    double busy_share;           /* time with a read in flight / test time */
    double optimum_bytes_per_token; /* Belady's MIN over the same accesses (same history) */
    double demand_reads, demand_behind; /* demand read requests; ... that found a guess at the device */
} stream_figs;

typedef struct {
    int threads;
    const char *isa;
    double *pp, *tg; /* tokens/s per repetition */
    stream_figs spp, stg;
} bench_row;

static void usage(FILE *f)
{
    fprintf(f, "usage: sluice bench [--mem SIZE [--io MODE]] [-m MODEL.gguf] [-p 512] [-n 128] [-t N[,N...]] [-r 5] [--json]\n\n"
               "Measures prompt processing (ppP: one batch of P tokens into a fresh session) and text\n"
               "generation (tgN: N single-token steps) in tokens/s, like llama-bench; prints the median\n"
               "and standard deviation over R repetitions after one warm-up run.\n\n"
               "  -m, --model FILE     GGUF model (default: the bundled model)\n"
               "  -p, --n-prompt P     prompt tokens (default 512; 0 skips the pp test)\n"
               "  -n, --n-gen N        generated tokens (default 128; 0 skips the tg test)\n"
               "  -t, --threads LIST   thread counts, comma-separated (default: physical cores)\n"
               "  -r, --repetitions R  timed repetitions (default 5)\n"
               "      --json           print one JSON object (medians pp_tps / tg_tps and the settings)\n"
               "      --json-out FILE  print the table and write the JSON object to FILE\n"
               "      --no-probe       streaming: skip the raw disk bandwidth probe\n"
               "      --cold           streaming: start the text decode from an empty cache\n"
               "      --throttle RATE  streaming: cap reads at RATE bytes/s (e.g. 1G, 500M: decimal)\n"
               "                       through a blkio cgroup on the model's disk when root, else\n"
               "                       the store's simulated drive; the report adds the ceiling\n"
               "                       RATE / bytes per token\n"
               "      --throttle-sim   apply --throttle with the store's simulated drive even as root\n"
               "      --timeline F.svg streaming: draw the last repetition's decode, token by token and\n"
               "                       layer by layer (reads issued / landed, demand vs prefetch, expert\n"
               "                       compute, waits): whether the disk or the CPU set the pace\n\n"
               "With --mem (or --io, --pack) the experts stream from disk under that budget; the\n"
               "report adds bytes read per token, cache hit rate, I/O wait, and the raw O_DIRECT\n"
               "random-read bandwidth of the model's disk (expert-sized reads, queue depth 32), so\n"
               "it can print achieved / raw bandwidth and tokens/s against the I/O bound.\n"
               "When streaming, tgN is an honest decode: each repetition is the greedy continuation\n"
               "of a different real text, never seen before by the cache (which was warmed on\n"
               "another text, or is empty with --cold); only its N decode steps are timed and\n"
               "counted, and the report adds prefetch waste, disk busy share and the bytes the\n"
               "offline optimum (Belady) would have read for the same accesses.\n"
               "The heat file is neither read nor updated unless --heat-file is given: learned\n"
               "heat would only flatter the next run.\n\n%s",
            CLI_STREAM_HELP);
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

/* "1G", "500M", "1.5e9", "600MB/s": decimal bytes per second. */
static int parse_rate(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    double mul = *end == 'K' || *end == 'k' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' || *end == 'g' ? 1e9 : 1;
    if (mul > 1) end++;
    if (*end == 'B') end++;
    if (!strcmp(end, "/s")) end += 2;
    if (end == s || *end || !(v > 0)) return cli_fail("--throttle: expected a rate like 1G or 500M, got '%s'", s);
    *out = v * mul;
    return 0;
}

/* 0 ok, 1 help shown, -1 bad arguments (reported). */
static int parse_args(int argc, char **argv, bench_args *a)
{
    static const struct option LONGOPTS[] = {
        {"model", required_argument, 0, 'm'}, {"n-prompt", required_argument, 0, 'p'},
        {"n-gen", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
        {"repetitions", required_argument, 0, 'r'}, {"json", no_argument, 0, 'j'},
        {"json-out", required_argument, 0, 'o'}, {"no-probe", no_argument, 0, 'P'},
        {"cold", no_argument, 0, 'C'}, {"throttle", required_argument, 0, 'T'},
        {"timeline", required_argument, 0, 'L'}, {"throttle-sim", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},        CLI_STREAM_LONGOPTS, {0, 0, 0, 0},
    };
    *a = (bench_args){.p = 512, .n = 128, .reps = 5, .threads = {cpu_physical_cores()}, .n_threads = 1};
    optind = 1;
    opterr = 0;
    for (int opt; (opt = getopt_long(argc, argv, ":m:p:n:t:r:hb:", LONGOPTS, NULL)) != -1;) {
        int bad = 0;
        switch (opt) {
        case 'm': a->model = optarg; break;
        case 'p': bad = cli_parse_int("-p", optarg, 0, 1L << 20, &a->p); break;
        case 'n': bad = cli_parse_int("-n", optarg, 0, 1L << 20, &a->n); break;
        case 'r': bad = cli_parse_int("-r", optarg, 1, 1000, &a->reps); break;
        case 't': bad = parse_threads(optarg, a); break;
        case 'j': a->json = true; break;
        case 'o': a->json_out = optarg; break;
        case 'P': a->no_probe = true; break;
        case 'C': a->cold = true; break;
        case 'T': bad = parse_rate(optarg, &a->throttle); break;
        case 'L': a->timeline = optarg; break;
        case 'S': a->throttle_sim = true; break;
        case 'h': usage(stdout); return 1;
        case ':': return FAIL("option %s needs a value (sluice bench --help)", argv[optind - 1]);
        default:
            bad = cli_stream_option(opt, optarg, &a->eo);
            if (bad == 1) bad = 0;
            else if (bad == 0) {
                char b[64];
                return FAIL("unknown option %s (sluice bench --help)", cli_bad_option(argv, b, sizeof b));
            }
        }
        if (bad) return -1;
    }
    if (optind < argc) return FAIL("unexpected argument '%s' (sluice bench --help)", argv[optind]);
    /* The tests feed the same pseudo-random tokens every time: a heat file
     * would learn the benchmark itself and inflate the next run's hit rate. */
    if (!a->eo.heat_file) a->eo.no_heat = true;
    if (a->p == 0 && a->n == 0) return FAIL("nothing to measure: -p and -n are both 0");
    return 0;
}

/* ---- measurement ---- */

typedef struct {
    sl_model *model;
    const sl_engine *eng;
    sl_pool *pool;
    int32_t *toks; /* max(p, n) pseudo-random ids */
    float *logits;
    const bench_args *a;
    double tl_from, tl_to; /* the last text decode's timed steps */
    sl_err err;
} bench_ctx;

/* Seconds for one pp run (fresh session, one batch of p tokens); -1 on error. */
static double run_pp(bench_ctx *b)
{
    sl_session *s;
    session_opts so = engine_session_opts(b->eng);
    if (session_create_opts(&s, b->model, (int32_t)b->a->p, b->pool, &so, &b->err)) return -1;
    double t0 = sl_now();
    int rc = session_eval(s, b->toks, (int32_t)b->a->p, b->logits, false, &b->err);
    double dt = sl_now() - t0;
    session_free(s);
    return rc ? -1 : dt;
}

/* Seconds for one tg run (fresh session, n single-token steps); -1 on error. */
static double run_tg(bench_ctx *b)
{
    sl_session *s;
    session_opts so = engine_session_opts(b->eng);
    if (session_create_opts(&s, b->model, (int32_t)b->a->n, b->pool, &so, &b->err)) return -1;
    double t0 = sl_now();
    int rc = 0;
    for (long i = 0; i < b->a->n && rc == 0; i++) rc = session_eval(s, &b->toks[i], 1, b->logits, false, &b->err);
    double dt = sl_now() - t0;
    session_free(s);
    return rc ? -1 : dt;
}

static stream_figs figs_between(const store_stats *x, const store_stats *y, long tokens, double seconds);

/* ---- the honest streaming decode ---- */

/* Real text, written for this benchmark (never for a model's training):
 * the first warms the cache, each repetition continues another. */
static const char *const TEXTS[] = {
    "The ferry left the harbour a little after six, when the fog was still lying on the water and the gulls had "
    "not yet begun to argue over the fishing boats. Most of the passengers were workers going to the mainland.",
    "To make a simple loaf, mix five hundred grams of flour with a spoon of salt, a little yeast and warm water, "
    "then knead the dough for ten minutes until it is smooth and springs back when you press it.",
    "In the spring of that year the river rose higher than anyone in the valley could remember. The old bridge "
    "held, but the meadows below the mill were under water for three weeks, and the school was closed.",
    "A good map does not show everything. It leaves out what the traveller does not need, so that the roads, "
    "the rivers and the towns stand out clearly, and a stranger can find the way without asking.",
    "She opened the letter slowly, as if the words inside might change if she hurried. It was short, written in "
    "a careful hand, and it asked her to come back to the house by the lake before the end of the summer.",
    "Computers store numbers in binary, as strings of ones and zeros. A byte holds eight of these bits, enough "
    "for two hundred and fifty-six different values, which is why so many old limits are powers of two.",
    "The committee met every Tuesday in the back room of the library. They argued about the budget, the new "
    "roof and the opening hours, and every week the chairman promised that the next meeting would be shorter.",
    "High in the mountains the air is thin and the nights are cold even in August. Shepherds still bring their "
    "flocks up to the summer pastures, as their grandparents did, and come down again when the first snow falls.",
};
enum { N_TEXTS = sizeof TEXTS / sizeof TEXTS[0] };

/* Evaluates text T's tokens and then N greedy steps in a fresh session;
 * with X and Y, store counters around the timed decode steps (and the
 * access log position where they start in *FROM). */
static double text_decode(bench_ctx *b, int t, long n, store_stats *x, store_stats *y)
{
    const char *text = TEXTS[t % N_TEXTS];
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (vocab_tokenize(model_vocab(b->model), text, strlen(text), true, false, &ids, &n_ids, &b->err)) return -1;
    sl_session *s;
    session_opts so = engine_session_opts(b->eng);
    if (session_create_opts(&s, b->model, (int32_t)(n_ids + (size_t)n + 1), b->pool, &so, &b->err)) {
        free(ids);
        return -1;
    }
    int rc = session_eval(s, ids, (int32_t)n_ids, b->logits, false, &b->err);
    int32_t n_vocab = model_n_vocab(b->model);
    if (x && b->eng->store) expert_store_stats(b->eng->store, x);
    double t0 = sl_now();
    for (long i = 0; i < n && rc == 0; i++) {
        int32_t tok = sampler_argmax(b->logits, n_vocab);
        if (tok < 0) rc = sl_errf(&b->err, "bench: every logit is NaN after %ld tokens", i);
        else rc = session_eval(s, &tok, 1, b->logits, false, &b->err);
    }
    double dt = sl_now() - t0;
    if (x) b->tl_from = t0, b->tl_to = t0 + dt;
    if (y && b->eng->store) expert_store_stats(b->eng->store, y);
    session_free(s);
    free(ids);
    return rc ? -1 : dt;
}

/* The streaming tg test: unless --cold, a warm-up on TEXTS[0]; then each
 * repetition a different text, its decode steps timed and counted. */
static int measure_text(bench_ctx *b, long n, double *tps, stream_figs *f)
{
    if (!b->a->cold && text_decode(b, 0, n, NULL, NULL) < 0) return cli_fail("%s", b->err.msg);
    store_stats sum = {0};
    double secs = 0, opt = 0;
    for (long r = 0; r < b->a->reps; r++) {
        store_stats x, y;
        double dt = text_decode(b, 1 + (int)(r % (N_TEXTS - 1)), n, &x, &y);
        if (dt < 0) return cli_fail("%s", b->err.msg);
        tps[r] = dt > 0 ? (double)n / dt : 0;
        secs += dt;
        uint64_t ob, ol;
        sl_err e;
        if (expert_store_optimum_since(b->eng->store, x.accesses, &ob, &ol, &e) == 0) opt += (double)ob;
        sum.bytes_read += y.bytes_read - x.bytes_read, sum.hits += y.hits - x.hits;
        sum.misses += y.misses - x.misses, sum.read_busy_s += y.read_busy_s - x.read_busy_s;
        sum.io_wait_s += y.io_wait_s - x.io_wait_s;
        sum.demand_reads += y.demand_reads - x.demand_reads;
        sum.demand_behind_prefetch += y.demand_behind_prefetch - x.demand_behind_prefetch;
        sum.prefetch_wasted_bytes += y.prefetch_wasted_bytes - x.prefetch_wasted_bytes;
        sum.bytes_needed += (y.bytes_needed + y.prefetch_bytes) - (x.bytes_needed + x.prefetch_bytes);
    }
    store_stats zero = {0};
    long toks = n * b->a->reps;
    *f = figs_between(&zero, &sum, toks, secs);
    f->waste_share = sum.bytes_needed ? (double)sum.prefetch_wasted_bytes / (double)sum.bytes_needed : 0;
    f->busy_share = secs > 0 ? sum.read_busy_s / secs : 0;
    f->optimum_bytes_per_token = toks ? opt / (double)toks : 0;
    f->demand_reads = (double)sum.demand_reads, f->demand_behind = (double)sum.demand_behind_prefetch;
    return 0;
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

static void print_stream(const bench_args *a, const cli_model *cm, const bench_row *rows, const probe_result *pr);
static json_t *stream_json(const bench_args *a, const cli_model *cm, const bench_row *rows, const probe_result *pr);

static void print_table(const bench_args *a, const cli_model *cm, const bench_row *rows, const probe_result *pr)
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
    if (cm->eng.store) print_stream(a, cm, rows, pr);
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
static int print_json(const bench_args *a, const cli_model *cm, const bench_row *rows, const probe_result *pr, FILE *f)
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
    /* null in RAM, so a reader tells "not streaming" from "streamed nothing" */
    json_object_set_new(o, "streaming", cm->eng.store ? stream_json(a, cm, rows, pr) : json_null());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return cli_fail("cannot format the JSON output");
    fprintf(f, "%s\n", s);
    free(s);
    return 0;
}

static int write_json(const bench_args *a, const cli_model *cm, const bench_row *rows, const probe_result *pr)
{
    FILE *f = fopen(a->json_out, "w");
    if (!f) return cli_fail("cannot create %s", a->json_out);
    int rc = print_json(a, cm, rows, pr, f);
    if (fclose(f) != 0 && !rc) rc = cli_fail("cannot write %s", a->json_out);
    return rc;
}

/* ---- streaming report ---- */

/* Raw random-read bandwidth of the model's disk with reads the size of the
 * largest expert part, as deep as the store's queue. */
static int probe_disk(const cli_model *cm, probe_result *out)
{
    const expert_layout *L = model_expert_layout(cm->model);
    uint64_t part = 0;
    for (int l = 0; l < L->n_layers; l++)
        for (int p = 0; p < L->layer[l].n_parts; p++)
            if (L->layer[l].parts[p].bytes > part) part = L->layer[l].parts[p].bytes;
    sl_err err;
    if (disk_probe(model_gguf(cm->model)->parts[0].path, (uint32_t)part, 32, 3.0, out, &err))
        return cli_fail("%s", err.msg);
    return 0;
}

static void print_stream(const bench_args *a, const cli_model *cm, const bench_row *rows, const probe_result *pr)
{
    const sl_engine *e = &cm->eng;
    char b1[32], b2[32];
    printf("\nstreaming (%s, --mem %s: %lld of %lld experts cached):\n", store_io_name(e->io),
           cli_fmt_bytes(e->plan.total, b1, 32), (long long)e->plan.slots, (long long)e->plan.experts);
    printf("| threads | test     | expert bytes/token | optimum bytes/token | hit rate | prefetch waste | disk busy | I/O wait | read GB/s | effective GB/s |\n");
    printf("| ------: | -------- | -----------------: | ------------------: | -------: | -------------: | --------: | -------: | --------: | -------------: |\n");
    for (int i = 0; i < a->n_threads; i++)
        for (int k = 0; k < 2; k++) {
            const stream_figs *f = k ? &rows[i].stg : &rows[i].spp;
            long tok = k ? a->n : a->p;
            if (!tok) continue;
            char test[24];
            snprintf(test, sizeof test, "%s%ld", k ? "tg" : "pp", tok);
            char b3[32] = "-";
            if (f->optimum_bytes_per_token > 0) cli_fmt_bytes((uint64_t)f->optimum_bytes_per_token, b3, 32);
            char waste[16] = "-", busy[16] = "-";
            if (k) snprintf(waste, sizeof waste, "%.1f%%", 100 * f->waste_share), snprintf(busy, sizeof busy, "%.0f%%", 100 * f->busy_share);
            printf("| %7d | %-8s | %18s | %19s | %7.1f%% | %14s | %9s | %7.1f%% | %9.2f | %14.2f |\n", rows[i].threads,
                   test, cli_fmt_bytes((uint64_t)f->bytes_per_token, b2, 32), b3, 100 * f->hit_rate, waste, busy,
                   100 * f->io_wait_share, f->read_gbps, f->effective_gbps);
        }
    if (a->n && e->io != STORE_IO_MMAP)
        printf("tg%ld: greedy continuations of %ld real texts (one per repetition, none seen before), only the decode "
               "steps counted; cache %s\n",
               a->n, a->reps, a->cold ? "empty before the first (--cold)" : "warmed on another text first");
    if (a->throttle > 0)
        for (int i = 0; i < a->n_threads && a->n; i++) {
            const stream_figs *f = &rows[i].stg;
            double ceil = f->bytes_per_token > 0 ? a->throttle / f->bytes_per_token : 0;
            double tps = median(rows[i].tg, a->reps);
            char rate[32];
            if (a->throttle >= 1e8) snprintf(rate, sizeof rate, "%.2f GB/s", a->throttle / 1e9);
            else snprintf(rate, sizeof rate, "%.1f MB/s", a->throttle / 1e6);
            printf("t=%d tg, throttled to %s (%s): ceiling %.2f tok/s = rate / bytes per token, measured "
                   "%.2f (%.0f%% of it); bytes / optimum's %.2fx; %.0f of %.0f demand reads behind a prefetch\n",
                   rows[i].threads, rate, a->throttle_how, ceil, tps, ceil > 0 ? 100 * tps / ceil : 0,
                   f->optimum_bytes_per_token > 0 ? f->bytes_per_token / f->optimum_bytes_per_token : 0,
                   f->demand_behind, f->demand_reads);
        }
    if (!pr->gbps) return;
    printf("\nraw disk: %.2f GB/s (O_DIRECT random %s reads, depth %d, %.1f s%s)\n", pr->gbps,
           cli_fmt_bytes(pr->read_size, b1, 32), pr->depth, pr->seconds, pr->direct ? "" : ", NOT direct");
    for (int i = 0; i < a->n_threads && a->n; i++) {
        const stream_figs *f = &rows[i].stg;
        double bound = f->bytes_per_token > 0 ? pr->gbps * 1e9 / f->bytes_per_token : 0;
        double tps = median(rows[i].tg, a->reps);
        printf("t=%d tg: achieved / raw %.0f%% while reading, %.0f%% over the test; I/O bound %.2f tok/s, measured %.2f (%.0f%% of the bound)\n",
               rows[i].threads, 100 * f->read_gbps / pr->gbps, 100 * f->effective_gbps / pr->gbps, bound, tps,
               bound > 0 ? 100 * tps / bound : 0);
    }
}

static json_t *figs_json(const stream_figs *f)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "expert_bytes_per_token", f->bytes_per_token,
                     "hit_rate", f->hit_rate, "io_wait_share", f->io_wait_share, "read_gbps", f->read_gbps,
                     "effective_gbps", f->effective_gbps, "prefetch_waste_share", f->waste_share, "disk_busy_share",
                     f->busy_share, "optimum_bytes_per_token", f->optimum_bytes_per_token, "demand_reads",
                     f->demand_reads, "demand_behind_prefetch", f->demand_behind);
}

static json_t *stream_json(const bench_args *a, const cli_model *cm, const bench_row *rows, const probe_result *pr)
{
    const sl_engine *e = &cm->eng;
    json_t *per = json_array();
    for (int i = 0; i < a->n_threads; i++)
        json_array_append_new(per, json_pack("{s:i,s:o,s:o}", "threads", rows[i].threads, "pp", figs_json(&rows[i].spp),
                                             "tg", figs_json(&rows[i].stg)));
    double bound = rows[0].stg.bytes_per_token > 0 ? pr->gbps * 1e9 / rows[0].stg.bytes_per_token : 0;
    return json_pack("{s:s,s:s,s:I,s:I,s:I,s:f,s:f,s:f,s:s,s:b,s:o}", "io", store_io_name(e->io), "prefetch_admit",
                     pf_admit_name(e->opts.prefetch_admit), "mem",
                     (json_int_t)e->plan.total, "experts_cached", (json_int_t)e->plan.slots, "experts",
                     (json_int_t)e->plan.experts, "raw_gbps", pr->gbps, "tg_io_bound_tps", bound, "throttle_bps",
                     a->throttle, "throttle_how", a->throttle_how ? a->throttle_how : "none", "cold", a->cold,
                     "per_threads", per);
}

/* ---- command ---- */

static stream_figs figs_between(const store_stats *x, const store_stats *y, long tokens, double seconds)
{
    stream_figs f = {0};
    double read = (double)(y->bytes_read - x->bytes_read);
    double hits = (double)(y->hits - x->hits), lookups = hits + (double)(y->misses - x->misses);
    double busy = y->read_busy_s - x->read_busy_s;
    f.bytes_per_token = tokens ? read / (double)tokens : 0;
    f.hit_rate = lookups > 0 ? hits / lookups : 0;
    f.io_wait_share = seconds > 0 ? (y->io_wait_s - x->io_wait_s) / seconds : 0;
    f.read_gbps = busy > 0 ? read / busy / 1e9 : 0;
    f.effective_gbps = seconds > 0 ? read / seconds / 1e9 : 0;
    return f;
}

/* Runs one test, and with a store attached, its streaming figures.  In
 * mmap mode the page cache does the reading: bytes come from /proc/self/io
 * and there is no hit rate or I/O wait to report. */
static int measure_streamed(bench_ctx *b, double (*run)(bench_ctx *), long tokens, double *tps, stream_figs *f)
{
    store_stats x, y;
    if (b->eng->store) expert_store_stats(b->eng->store, &x);
    uint64_t io0 = engine_storage_read_bytes();
    double t0 = sl_now();
    if (measure(b, run, tokens, tps)) return -1;
    double dt = sl_now() - t0;
    if (!b->eng->store || !tokens) return 0;
    expert_store_stats(b->eng->store, &y);
    long n = tokens * (b->a->reps + 1);
    *f = figs_between(&x, &y, n, dt);
    if (b->eng->io == STORE_IO_MMAP) {
        double read = (double)(engine_storage_read_bytes() - io0);
        *f = (stream_figs){.bytes_per_token = read / (double)n, .effective_gbps = read / dt / 1e9};
    }
    return 0;
}

static int bench_threads(bench_ctx *b, int threads, bench_row *row)
{
    b->pool = pool_create(threads);
    if (!b->pool) return cli_fail("cannot start %d threads", threads);
    row->threads = pool_threads(b->pool);
    row->isa = kernels_isa_name(pool_isa(b->pool));
    bool text = b->eng->store && b->eng->io != STORE_IO_MMAP;
    int rc = measure_streamed(b, run_pp, b->a->p, row->pp, &row->spp) ||
             (text ? b->a->n && measure_text(b, b->a->n, row->tg, &row->stg)
                   : measure_streamed(b, run_tg, b->a->n, row->tg, &row->stg));
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
    /* the text decode's sessions hold a text (< 128 tokens) and N steps */
    long nt = a.p > a.n + 128 ? a.p : a.n + 128;
    int max_threads = 1;
    for (int i = 0; i < a.n_threads; i++) max_threads = a.threads[i] > max_threads ? a.threads[i] : max_threads;
    /* plan the budget for exactly the sessions the tests create */
    cli_model_opts mo = {.model_path = a.model, .model_only = true, .eo = a.eo, .n_ctx = (int32_t)nt,
                         .threads = max_threads};
    mo.eo.timeline = a.timeline != NULL;
    bool blkio = a.throttle > 0 && !a.throttle_sim && geteuid() == 0 && access("/sys/fs/cgroup/blkio", W_OK) == 0;
    if (a.throttle > 0 && !blkio) mo.eo.throttle_bps = a.throttle, a.throttle_how = "the store's simulated drive";
    if (cli_model_open(&cm, &mo)) return 1;
    cli_print_engine(&cm.eng, !a.json);
    blkio_throttle bt = {0};
    char why[400] = "", how[200];
    if (blkio) {
        const gguf_file *g = model_gguf(cm.model);
        const char *paths[16];
        int np = 0;
        for (uint32_t f = 0; f < g->n_parts && np < 16; f++) paths[np++] = g->parts[f].path;
        if (a.eo.pack) paths[np++] = a.eo.pack; /* the manifest's disk; drives on others need bench/multidrive.sh */
        if (blkio_throttle_start(&bt, paths, np, (uint64_t)a.throttle, why, sizeof why) || !bt.active) {
            cli_model_close(&cm);
            return cli_fail("--throttle: %s", why), 1;
        }
        snprintf(how, sizeof how, "blkio cgroup on %s", bt.devices);
        a.throttle_how = how;
    }
    bench_ctx b = {.model = cm.model, .eng = &cm.eng, .a = &a};
    bench_row rows[MAX_THREAD_SETS] = {{0}};
    /* A virtual or shared disk's speed drifts: probe on both sides of the
     * tests so that achieved / raw is not measured against a slow phase. */
    probe_result before = {0};
    if (cm.eng.store && !a.no_probe && probe_disk(&cm, &before)) {
        cli_model_close(&cm);
        return 1;
    }
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
    if (!rc && a.timeline) {
        size_t n_ev = 0;
        const store_event *ev = cm.eng.store ? expert_store_timeline(cm.eng.store, &n_ev) : NULL;
        char title[300], b1[32];
        snprintf(title, sizeof title, "%s: tg%ld, --mem %s (%lld of %lld experts cached)%s%s, %d threads, policy %s",
                 base_name(cm.path), a.n, cli_fmt_bytes(cm.eng.plan.total, b1, 32), (long long)cm.eng.plan.slots,
                 (long long)cm.eng.plan.experts, a.throttle > 0 ? ", throttled" : "", a.cold ? ", cold cache" : "",
                 a.threads[a.n_threads - 1],
                 cache_policy_name(a.eo.policy_set ? a.eo.policy : store_config_default(0).policy));
        sl_err e;
        if (!ev || !a.n) rc = cli_fail("--timeline: needs a streaming tg test (--mem and -n > 0)");
        else if (timeline_svg_write(a.timeline, ev, n_ev, b.tl_from, b.tl_to, title, 24, &e)) rc = cli_fail("%s", e.msg);
    }
    probe_result probe = {0};
    if (!rc && cm.eng.store && !a.no_probe) rc = probe_disk(&cm, &probe);
    double after = probe.gbps;
    if (before.gbps > probe.gbps) probe.gbps = before.gbps;
    if (!rc) rc = a.json ? print_json(&a, &cm, rows, &probe, stdout) : (print_table(&a, &cm, rows, &probe), 0);
    if (!rc && !a.json && probe.gbps > 0)
        printf("(raw disk probed before and after the tests: %.2f and %.2f GB/s; the higher is the reference)\n",
               before.gbps, after);
    if (!rc && a.json_out) rc = write_json(&a, &cm, rows, &probe);
    blkio_throttle_stop(&bt);
    for (int i = 0; i < a.n_threads; i++) free(rows[i].pp), free(rows[i].tg);
    free(b.toks);
    free(b.logits);
    cli_model_close(&cm);
    return rc ? 1 : 0;
}
