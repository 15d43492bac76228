/* sluice bench: prompt-processing and generation throughput, measured the way
 * llama-bench measures them.  ppP = one batch of P tokens into a fresh
 * session; tgN = N single-token evaluations from an empty session; pgP,N =
 * both in one session.  Tokens are pseudo-random ids (fixed seed), so the
 * numbers do not depend on a tokenizer.  Every list flag (-p, -n, -t, -b,
 * --mem) is crossed with the others; each test runs once untimed (warm-up),
 * then -r times.  The reports are in bench_report.c. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/throttle.h"
#include "decode/generate.h"
#include "decode/rng.h"
#include "decode/sampler.h"
#include "experts/timeline_svg.h"
#include "tok/tokenizer.h"
#include "util/clock.h"

#define FAIL(...) (cli_fail(__VA_ARGS__), -1)

static void usage(FILE *f)
{
    fprintf(f, "usage: sluice bench [-m MODEL.gguf] [-p 512] [-n 128] [-pg P,N] [-t N] [-b N] [--mem SIZE [--io MODE]]\n"
               "                    [-r 5] [-o md|json|jsonl|csv] [--json] [--draft D [--draft-max K ...]]\n\n"
               "Measures prompt processing (ppP: one batch of P tokens into an empty session) and text\n"
               "generation (tgN: N single-token steps) in tokens/s, like llama-bench; prints the median\n"
               "and standard deviation over R repetitions after one warm-up run.  -p, -n, -t, -b and\n"
               "--mem take comma-separated lists (and may be repeated); every combination is measured.\n\n"
               "  -m, --model FILE     GGUF model (default: the bundled model)\n"
               "  -p, --n-prompt P     prompt tokens (default 512; 0 skips the pp test)\n"
               "  -n, --n-gen N        generated tokens (default 128; 0 skips the tg test)\n"
               "  -pg P,N              also pp P then tg N in one session, timed together (repeatable)\n"
               "  -t, --threads LIST   thread counts (default: physical cores)\n"
               "  -b, --batch-size LIST  most prompt tokens per layer-major pass (default: the engine's)\n"
               "      --mem LIST       stream the experts under each budget in turn (the model is\n"
               "                       opened once per value)\n"
               "  -r, --repetitions R  timed repetitions (default 5)\n"
               "  -o, --output FMT     md (default: a table), json (an array of records), jsonl (one\n"
               "                       record per line) or csv; a record is one test with llama-bench's\n"
               "                       fields (build_commit, model_filename, n_threads, avg_ts, samples_ts...)\n"
               "                       and the streaming figures, null in RAM\n"
               "      --json           print one summary object instead (one -p/-n pair, any threads)\n"
               "      --json-out FILE  print the report and write the --json object to FILE\n"
               "      --no-probe       streaming: skip the raw disk bandwidth probe\n"
               "      --cold           streaming: start the text decode from an empty cache\n"
               "      --throttle RATE  streaming: cap reads at RATE bytes/s (e.g. 1G, 500M: decimal)\n"
               "                       through a blkio cgroup on the model's disk when root, else\n"
               "                       the store's simulated drive; the report adds the ceiling\n"
               "                       RATE / bytes per token\n"
               "      --throttle-sim   apply --throttle with the store's simulated drive even as root\n"
               "      --timeline F.svg streaming: draw the last repetition's decode, token by token and\n"
               "                       layer by layer (reads issued / landed, demand vs prefetch, expert\n"
               "                       compute, waits): whether the disk or the CPU set the pace (with\n"
               "                       --draft, the drafted decode's)\n"
               "      --draft D        speculative decoding (ngram, random or a draft GGUF): every tgN is\n"
               "                       measured twice, as the greedy continuation of real texts, on an\n"
               "                       engine without and then on a fresh one with the draft (same --mem:\n"
               "                       the draft model's RAM comes out of it, as in run); the drafted rows\n"
               "                       are tgN+MODE, with acceptance by depth and union expert bytes per\n"
               "                       token, and each drafted decode must reproduce the plain one's\n"
               "                       tokens (bench fails if not).  --draft-max, --draft-min,\n"
               "                       --draft-p-min, --draft-vocab, --ngram-min and --ngram-max as in run\n\n"
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

/* ---- arguments ---- */

typedef int (*item_parser)(const char *flag, const char *item, void *out);

static int item_count(const char *flag, const char *s, void *out)
{
    return cli_parse_int(flag, s, 0, 1L << 20, out);
}

static int item_threads(const char *flag, const char *s, void *out)
{
    long v;
    if (cli_parse_int(flag, s, 1, 1024, &v)) return -1;
    *(int *)out = (int)v;
    return 0;
}

static int item_batch(const char *flag, const char *s, void *out) { return cli_parse_int(flag, s, 1, 1L << 20, out); }

static int item_mem(const char *flag, const char *s, void *out)
{
    int64_t v = cli_parse_size(s);
    if (v <= 0) return FAIL("%s: expected a size like 6G, 512M or 1.5GiB, got '%s'", flag, s);
    *(uint64_t *)out = (uint64_t)v;
    return 0;
}

/* Appends the comma-separated items of S to LIST (COUNT items of ELEM
 * bytes so far); an empty item is an error, not skipped. */
static int parse_list(const char *flag, const char *s, void *list, size_t elem, int *count, item_parser one)
{
    for (const char *p = s;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item) return FAIL("%s: expected a value or a comma-separated list, got '%s'", flag, s);
        if (*count == BENCH_MAX_LIST) return FAIL("%s: at most %d values", flag, BENCH_MAX_LIST);
        memcpy(item, p, len), item[len] = 0;
        if (one(flag, item, (char *)list + (size_t)*count * elem)) return -1;
        ++*count;
        if (!end) return 0;
        p = end;
    }
}

/* -pg P,N: one pair per flag, as llama-bench. */
static int parse_pg(const char *s, bench_args *a)
{
    long v[BENCH_MAX_LIST];
    int n = 0;
    if (parse_list("-pg", s, v, sizeof *v, &n, item_count)) return -1;
    if (n != 2) return FAIL("-pg: expected prompt and generation counts like 512,128, got '%s'", s);
    if (a->n_pg == BENCH_MAX_LIST) return FAIL("-pg: at most %d pairs", BENCH_MAX_LIST);
    if (v[0] == 0 || v[1] == 0) return FAIL("-pg: both counts must be above 0, got '%s'", s);
    a->pg[a->n_pg][0] = v[0], a->pg[a->n_pg][1] = v[1], a->n_pg++;
    return 0;
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

static int parse_format(const char *s, bench_format *out)
{
    static const char *const NAMES[] = {"md", "json", "jsonl", "csv"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, NAMES[i])) return *out = (bench_format)i, 0;
    return FAIL("-o: expected md, json, jsonl or csv, got '%s'", s);
}

enum { OPT_PG = CLI_OPT_FIRST_FREE, OPT_JSON, OPT_JSON_OUT, OPT_NO_PROBE, OPT_COLD, OPT_THROTTLE, OPT_TIMELINE,
       OPT_THROTTLE_SIM };

/* One option; 0 ok, -1 bad (reported), 2 not a bench option. */
static int bench_option(int opt, const char *v, bench_args *a)
{
    switch (opt) {
    case 'm': a->model = v; return 0;
    case 'p': return parse_list("-p", v, a->ps, sizeof *a->ps, &a->n_ps, item_count);
    case 'n': return parse_list("-n", v, a->ns, sizeof *a->ns, &a->n_ns, item_count);
    case 't': return parse_list("-t", v, a->threads, sizeof *a->threads, &a->n_threads, item_threads);
    case 'b': case CLI_OPT_UBATCH:
        return parse_list("-b", v, a->batches, sizeof *a->batches, &a->n_batches, item_batch);
    case CLI_OPT_MEM: return parse_list("--mem", v, a->mems, sizeof *a->mems, &a->n_mems, item_mem);
    case 'r': return cli_parse_int("-r", v, 1, 1000, &a->reps);
    case 'o': return parse_format(v, &a->format);
    case OPT_PG: return parse_pg(v, a);
    case OPT_JSON: a->json = true; return 0;
    case OPT_JSON_OUT: a->json_out = v; return 0;
    case OPT_NO_PROBE: a->no_probe = true; return 0;
    case OPT_COLD: a->cold = true; return 0;
    case OPT_THROTTLE: return parse_rate(v, &a->throttle);
    case OPT_TIMELINE: a->timeline = v; return 0;
    case OPT_THROTTLE_SIM: a->throttle_sim = true; return 0;
    default: return 2;
    }
}

/* --draft: it changes only the tg tests, and needs one. */
static int finish_draft(const bench_args *a)
{
    sl_err e;
    if (spec_setup_check(&a->draft, &e)) return FAIL("--draft: %s", e.msg);
    if (a->json || a->json_out)
        return FAIL("--json%s describes one engine's tests; with --draft use -o json", a->json ? "" : "-out");
    for (int i = 0; i < a->n_ns; i++)
        if (a->ns[i]) return 0;
    return FAIL("--draft speeds up text generation: give a tg test (-n N > 0)");
}

/* What the parsed lists leave to check or default. */
static int finish_args(bench_args *a)
{
    if (a->n_ps == 0) a->ps[a->n_ps++] = 512;
    if (a->n_ns == 0) a->ns[a->n_ns++] = 128;
    if (a->n_threads == 0) a->threads[a->n_threads++] = cpu_physical_cores();
    /* The tests feed the same pseudo-random tokens every time: a heat file
     * would learn the benchmark itself and inflate the next run's hit rate. */
    if (!a->eo.heat_file) a->eo.no_heat = true;
    long work = a->n_pg;
    for (int i = 0; i < a->n_ps; i++) work += a->ps[i];
    for (int i = 0; i < a->n_ns; i++) work += a->ns[i];
    if (work == 0) return FAIL("nothing to measure: -p and -n are both 0");
    bool lists = a->n_ps > 1 || a->n_ns > 1 || a->n_batches > 1 || a->n_mems > 1 || a->n_pg;
    if ((a->json || a->json_out) && lists)
        return FAIL("--json%s describes one -p/-n pair on one -b and --mem; for lists and -pg use -o json",
                    a->json ? "" : "-out");
    if (a->timeline && a->n_mems > 1) return FAIL("--timeline draws one engine's decode: give one --mem value");
    return a->draft.draft ? finish_draft(a) : 0;
}

/* 0 ok, 1 help shown, -1 bad arguments (reported). */
static int parse_args(int argc, char **argv, bench_args *a)
{
    static const struct option LONGOPTS[] = {
        {"model", required_argument, 0, 'm'}, {"n-prompt", required_argument, 0, 'p'},
        {"n-gen", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
        {"batch-size", required_argument, 0, 'b'}, {"repetitions", required_argument, 0, 'r'},
        {"output", required_argument, 0, 'o'}, {"pg", required_argument, 0, OPT_PG},
        {"json", no_argument, 0, OPT_JSON}, {"json-out", required_argument, 0, OPT_JSON_OUT},
        {"no-probe", no_argument, 0, OPT_NO_PROBE}, {"cold", no_argument, 0, OPT_COLD},
        {"throttle", required_argument, 0, OPT_THROTTLE}, {"timeline", required_argument, 0, OPT_TIMELINE},
        {"throttle-sim", no_argument, 0, OPT_THROTTLE_SIM}, {"help", no_argument, 0, 'h'},
        CLI_DRAFT_LONGOPTS, CLI_STREAM_LONGOPTS, {0, 0, 0, 0},
    };
    *a = (bench_args){.reps = 5};
    optind = 1;
    opterr = 0;
    for (int opt; (opt = getopt_long(argc, argv, ":m:p:n:t:r:b:o:h", LONGOPTS, NULL)) != -1;) {
        if (opt == 'h') return usage(stdout), 1;
        if (opt == ':') return FAIL("option %s needs a value (sluice bench --help)", argv[optind - 1]);
        int rc = bench_option(opt, optarg, a);
        if (rc == 2) {
            rc = cli_draft_option(opt, optarg, &a->draft);
            if (rc == 0) rc = cli_stream_option(opt, optarg, &a->eo);
            if (rc == 0) {
                char b[64];
                return FAIL("unknown option %s (sluice bench --help)", cli_bad_option(argv, b, sizeof b));
            }
            rc = rc == 1 ? 0 : rc;
        }
        if (rc) return -1;
    }
    if (optind < argc) return FAIL("unexpected argument '%s' (sluice bench --help)", argv[optind]);
    return finish_args(a);
}

/* ---- measurement ---- */

typedef struct {
    sl_model *model;
    const sl_engine *eng;
    sl_pool *pool;
    int32_t n_batch;   /* this test's -b (0: the engine's) */
    bench_test test;
    int32_t *toks;     /* pseudo-random ids, as many as the longest test needs */
    float *logits;
    const bench_args *a;
    bench_report *r;
    int mem_i;         /* which --mem value the engine was opened with */
    spec_setup ss;     /* drafting, on the drafted engine */
    double tl_from, tl_to; /* the last text decode's timed steps */
    sl_err err;
} bench_ctx;

static int new_session(bench_ctx *b, int32_t n_ctx, sl_session **s)
{
    session_opts so = engine_session_opts(b->eng);
    if (b->n_batch > 0) so.n_batch = b->n_batch;
    return session_create_opts(s, b->model, n_ctx, b->pool, &so, &b->err);
}

/* Seconds for one run of the current test in session S, rewound to an
 * empty sequence first (position 0 is always restorable, recurrent state
 * included): P prompt tokens as one batch, then N single-token steps; -1
 * on error.  One session serves every repetition, as llama-bench keeps its
 * context and clears the memory, so the timed runs do not fault in a new
 * session's scratch pages (measured at 7% of a kimi-linear pp512). */
static double run_test(bench_ctx *b, sl_session *s)
{
    long p = b->test.kind == BENCH_TG ? 0 : b->test.p, n = b->test.kind == BENCH_PP ? 0 : b->test.n;
    if (session_rewind(s, 0, &b->err)) return -1;
    double t0 = sl_now();
    int rc = p ? session_eval(s, b->toks, (int32_t)p, b->logits, false, &b->err) : 0;
    for (long i = 0; i < n && rc == 0; i++) rc = session_eval(s, &b->toks[p + i], 1, b->logits, false, &b->err);
    double dt = sl_now() - t0;
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

/* Evaluates text T's tokens in a fresh session, then decodes N tokens
 * greedily past them (through the drafter when B drafts) with generate(),
 * as run does; only the decode is timed.  With X and Y, store counters
 * around it.  RES gets the ids. */
static double text_decode(bench_ctx *b, int t, long n, store_stats *x, store_stats *y, gen_result *res)
{
    const char *text = TEXTS[t % N_TEXTS];
    int32_t *ids = NULL, nv = model_n_vocab(b->model);
    size_t n_ids = 0;
    if (vocab_tokenize(model_vocab(b->model), text, strlen(text), true, false, &ids, &n_ids, &b->err)) return -1;
    sl_session *s = NULL;
    sl_sampler *smp = NULL;
    gen_seq q = {0};
    sampler_params sp = sampler_defaults();
    sp.temp = 0;
    int rc = new_session(b, (int32_t)(n_ids + (size_t)n + 2), &s);
    if (!rc) rc = seq_init(&q, s, nv, &b->err);
    if (!rc) rc = seq_push(&q, ids, n_ids, &b->err);
    if (!rc) rc = seq_eval(&q, &b->err);
    if (!rc) rc = sampler_create(&smp, &sp, nv, &b->err);
    if (!rc && b->ss.sp) rc = spec_setup_begin(&b->ss, smp, &b->err);
    double dt = -1;
    if (!rc) {
        if (x && b->eng->store) expert_store_stats(b->eng->store, x);
        /* N + 1 tokens: N evaluated after the text, the last one sampled only */
        gen_opts o = {.n_predict = (int32_t)n + 1, .ignore_eog = true};
        double t0 = sl_now();
        rc = generate(b->model, &q, smp, &o, NULL, b->ss.sp, res, &b->err);
        dt = sl_now() - t0;
        if (x) b->tl_from = t0, b->tl_to = t0 + dt;
        if (y && b->eng->store) expert_store_stats(b->eng->store, y);
    }
    sampler_free(smp);
    if (q.toks) seq_free(&q);
    session_free(s);
    free(ids);
    return rc ? -1 : dt;
}

/* The plain decode of a text (same --mem, threads and length) that a
 * drafted one must reproduce. */
struct bench_ref {
    int mem_i, threads, text;
    long n;
    int32_t *ids;
    size_t n_ids;
};

static struct bench_ref *find_ref(const bench_ctx *b, int text, long n)
{
    int threads = pool_threads(b->pool);
    for (int i = 0; i < b->r->n_refs; i++) {
        struct bench_ref *f = &b->r->refs[i];
        if (f->mem_i == b->mem_i && f->threads == threads && f->text == text && f->n == n) return f;
    }
    return NULL;
}

/* A plain decode becomes the reference; a drafted one is checked against it. */
static int check_exact(bench_ctx *b, int text, long n, gen_result *res)
{
    struct bench_ref *f = find_ref(b, text, n);
    if (!b->ss.sp) {
        if (f) return 0;
        struct bench_ref *g = realloc(b->r->refs, (size_t)(b->r->n_refs + 1) * sizeof *g);
        if (!g) return cli_fail("out of memory");
        b->r->refs = g;
        g[b->r->n_refs++] = (struct bench_ref){b->mem_i, pool_threads(b->pool), text, n, res->ids, res->n_ids};
        res->ids = NULL; /* kept */
        return 0;
    }
    if (!f) return 0;
    size_t i = 0;
    while (i < f->n_ids && i < res->n_ids && f->ids[i] == res->ids[i]) i++;
    if (i == f->n_ids && i == res->n_ids) return 0;
    return cli_fail("bench: the drafted decode of text %d differs from the plain one at token %zu (%d, plain %d): "
                    "speculative decoding changed the output",
                    text, i, i < res->n_ids ? res->ids[i] : -1, i < f->n_ids ? f->ids[i] : -1);
}

/* One repetition of the text decode: timed, checked, its drafting
 * counters added to SUM (NULL: not counted). */
static double text_rep(bench_ctx *b, int text, long n, store_stats *x, store_stats *y, spec_stats *sum)
{
    gen_result res = {0};
    double dt = text_decode(b, text, n, x, y, &res);
    if (dt >= 0 && b->ss.sp && sum) spec_stats_add(sum, spec_get_stats(b->ss.sp));
    if (dt >= 0 && check_exact(b, text, n, &res)) dt = -2;
    gen_result_free(&res);
    return dt;
}

/* The text tg test (streaming, or --draft): unless --cold, a warm-up on
 * TEXTS[0]; then each repetition a different text, its decode steps timed
 * and counted (with the drafting figures into C). */
static int measure_text(bench_ctx *b, long n, bench_cell *c)
{
    double *tps = c->tps;
    stream_figs *f = &c->sf;
    if (!b->a->cold) {
        double dt = text_rep(b, 0, n, NULL, NULL, NULL);
        if (dt < 0) return dt < -1 ? -1 : cli_fail("%s", b->err.msg);
    }
    spec_stats ds = {0};
    store_stats sum = {0};
    double secs = 0, opt = 0;
    for (long r = 0; r < b->a->reps; r++) {
        store_stats x = {0}, y = {0};
        double dt = text_rep(b, 1 + (int)(r % (N_TEXTS - 1)), n, &x, &y, &ds);
        if (dt < 0) return dt < -1 ? -1 : cli_fail("%s", b->err.msg);
        tps[r] = dt > 0 ? (double)n / dt : 0;
        secs += dt;
        uint64_t ob, ol;
        sl_err e;
        if (b->eng->store && expert_store_optimum_since(b->eng->store, x.accesses, &ob, &ol, &e) == 0) opt += (double)ob;
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
    if (b->ss.sp) c->draft = spec_setup_mode(&b->ss), c->draft_figs = spec_setup_json(&b->ss, &ds);
    return 0;
}

/* Warm-up, then reps timed runs as tokens/s into OUT. */
static int measure(bench_ctx *b, long tokens, double *out)
{
    sl_session *s;
    if (new_session(b, (int32_t)tokens, &s)) return cli_fail("%s", b->err.msg);
    for (long r = -1; r < b->a->reps; r++) {
        double dt = run_test(b, s);
        if (dt < 0) {
            session_free(s);
            return cli_fail("%s", b->err.msg);
        }
        if (r >= 0) out[r] = dt > 0 ? (double)tokens / dt : 0;
    }
    session_free(s);
    return 0;
}

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

/* Runs the current test, and with a store attached, its streaming figures.
 * In mmap mode the page cache does the reading: bytes come from
 * /proc/self/io and there is no hit rate or I/O wait to report. */
static int measure_streamed(bench_ctx *b, bench_cell *c)
{
    long tokens = (c->test.kind == BENCH_TG ? 0 : c->test.p) + (c->test.kind == BENCH_PP ? 0 : c->test.n);
    store_stats x, y;
    if (b->eng->store) expert_store_stats(b->eng->store, &x);
    uint64_t io0 = engine_storage_read_bytes();
    double t0 = sl_now();
    if (measure(b, tokens, c->tps)) return -1;
    double dt = sl_now() - t0;
    if (!b->eng->store) return 0;
    expert_store_stats(b->eng->store, &y);
    long n = tokens * (b->a->reps + 1);
    c->streamed = true;
    c->sf = figs_between(&x, &y, n, dt);
    if (b->eng->io == STORE_IO_MMAP) {
        double read = (double)(engine_storage_read_bytes() - io0);
        c->sf = (stream_figs){.bytes_per_token = read / (double)n, .effective_gbps = read / dt / 1e9};
    }
    return 0;
}

/* One cell: streaming tg is the text decode, the rest as llama-bench. */
static int measure_cell(bench_ctx *b, bench_cell *c)
{
    b->test = c->test;
    b->n_batch = c->n_batch;
    bool streamed = b->eng->store && b->eng->io != STORE_IO_MMAP;
    if (c->test.kind == BENCH_TG && (streamed || b->a->draft.draft)) {
        c->text = true, c->streamed = streamed;
        return measure_text(b, c->test.n, c);
    }
    return measure_streamed(b, c);
}

/* The tests of the matrix, in llama-bench's order: pp, tg, pg. */
static int list_tests(const bench_args *a, bench_test *out)
{
    int n = 0;
    for (int i = 0; i < a->n_ps; i++)
        if (a->ps[i]) out[n++] = (bench_test){BENCH_PP, a->ps[i], 0};
    for (int i = 0; i < a->n_ns; i++)
        if (a->ns[i]) out[n++] = (bench_test){BENCH_TG, 0, a->ns[i]};
    for (int i = 0; i < a->n_pg; i++) out[n++] = (bench_test){BENCH_PG, a->pg[i][0], a->pg[i][1]};
    return n;
}

static bench_cell *add_cell(bench_report *r)
{
    if (r->n_cells == r->cap_cells) {
        int cap = r->cap_cells ? 2 * r->cap_cells : 16;
        bench_cell *c = realloc(r->cells, (size_t)cap * sizeof *c);
        if (!c) return NULL;
        r->cells = c, r->cap_cells = cap;
    }
    bench_cell *c = &r->cells[r->n_cells];
    *c = (bench_cell){0};
    c->tps = calloc((size_t)r->a->reps, sizeof *c->tps);
    if (!c->tps) return NULL;
    r->n_cells++;
    return c;
}

/* Drafting on the drafted engine, on this thread count's pool. */
static int open_spec(bench_ctx *b, long nt)
{
    sl_err e;
    if (spec_setup_open(&b->ss, &b->a->draft, b->model, b->pool, (int32_t)nt, b->eng->store, !b->eng->trace, &e))
        return cli_fail("--draft %s: %s", b->a->draft.draft, e.msg);
    if (b->ss.note[0]) fprintf(stderr, "%s\n", b->ss.note);
    return 0;
}

/* Every -b and test at one thread count (a drafted engine: the tg tests). */
static int bench_threads(bench_ctx *b, bench_report *r, int threads, long nt)
{
    b->pool = pool_create(threads);
    if (!b->pool) return cli_fail("cannot start %d threads", threads);
    bool drafted = r->engines[r->n_engines - 1].drafted;
    bench_test tests[3 * BENCH_MAX_LIST];
    int n_tests = list_tests(b->a, tests), n_b = b->a->n_batches ? b->a->n_batches : 1;
    int rc = drafted ? open_spec(b, nt) : 0;
    for (int bi = 0; bi < n_b && !rc; bi++)
        for (int t = 0; t < n_tests && !rc; t++) {
            if (drafted && tests[t].kind != BENCH_TG) continue;
            bench_cell *c = add_cell(r);
            if (!c) {
                rc = cli_fail("out of memory");
                break;
            }
            c->engine = r->n_engines - 1, c->threads = pool_threads(b->pool);
            c->isa = kernels_isa_name(pool_isa(b->pool));
            c->n_batch = b->a->n_batches  ? (int32_t)b->a->batches[bi]
                         : b->eng->n_batch ? b->eng->n_batch
                                           : SESSION_DEFAULT_BATCH;
            c->test = tests[t];
            rc = measure_cell(b, c);
        }
    spec_setup_close(&b->ss);
    pool_destroy(b->pool);
    b->pool = NULL;
    return rc;
}

/* ---- the command ---- */

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

/* The context every test fits in: the text decode's sessions hold a text
 * (< 128 tokens) and N steps. */
static long max_ctx(const bench_args *a)
{
    long nt = 128;
    for (int i = 0; i < a->n_ps; i++) nt = a->ps[i] > nt ? a->ps[i] : nt;
    for (int i = 0; i < a->n_ns; i++) nt = a->ns[i] + 128 > nt ? a->ns[i] + 128 : nt;
    for (int i = 0; i < a->n_pg; i++) nt = a->pg[i][0] + a->pg[i][1] > nt ? a->pg[i][0] + a->pg[i][1] : nt;
    return nt;
}

static int max_int(const int *v, int n, int floor)
{
    for (int i = 0; i < n; i++) floor = v[i] > floor ? v[i] : floor;
    return floor;
}

static int draw_timeline(const bench_args *a, const cli_model *cm, const bench_ctx *b)
{
    size_t n_ev = 0;
    const store_event *ev = cm->eng.store ? expert_store_timeline(cm->eng.store, &n_ev) : NULL;
    if (!ev || !b->tl_to) return cli_fail("--timeline: needs a streaming tg test (--mem and -n > 0)");
    char title[300], b1[32];
    snprintf(title, sizeof title, "%s: tg%ld, --mem %s (%lld of %lld experts cached)%s%s, %d threads, policy %s",
             strrchr(cm->path, '/') ? strrchr(cm->path, '/') + 1 : cm->path, a->ns[a->n_ns - 1], cli_fmt_bytes(cm->eng.plan.total, b1, 32), (long long)cm->eng.plan.slots,
             (long long)cm->eng.plan.experts, a->throttle > 0 ? ", throttled" : "", a->cold ? ", cold cache" : "",
             a->threads[a->n_threads - 1],
             cache_policy_name(a->eo.policy_set ? a->eo.policy : store_config_default(0).policy));
    sl_err e;
    return timeline_svg_write(a->timeline, ev, n_ev, b->tl_from, b->tl_to, title, 24, &e) ? cli_fail("%s", e.msg) : 0;
}

/* Pseudo-random ids (fixed seed) and a logits buffer for the tests. */
static int alloc_inputs(bench_ctx *b, long nt)
{
    int32_t nv = model_n_vocab(b->model);
    b->toks = malloc((size_t)nt * sizeof *b->toks);
    b->logits = malloc((size_t)nv * sizeof *b->logits);
    if (!b->toks || !b->logits) return cli_fail("out of memory");
    sl_rng rng;
    rng_seed(&rng, 1234);
    for (long i = 0; i < nt; i++) b->toks[i] = (int32_t)(rng_u32(&rng) % (uint32_t)nv);
    return 0;
}

/* Probes, the thread counts, the timeline: everything on one open engine. */
static int bench_engine_run(const bench_args *a, cli_model *cm, bench_report *r, long nt, int mem_i, bool drafted)
{
    bench_engine *e = &r->engines[r->n_engines++];
    *e = (bench_engine){.mem = a->n_mems ? a->mems[mem_i] : a->eo.mem, .streaming = cm->eng.store != NULL,
                        .drafted = drafted,
                        .io = cm->eng.io, .plan = cm->eng.plan, .admit = cm->eng.opts.prefetch_admit,
                        .kv = cm->eng.opts.kv_mode, .n_ctx = (int32_t)nt};
    /* A virtual or shared disk's speed drifts: probe on both sides of the
     * tests so that achieved / raw is not measured against a slow phase. */
    probe_result before = {0}, after = {0};
    if (e->streaming && !a->no_probe && probe_disk(cm, &before)) return -1;
    bench_ctx b = {.model = cm->model, .eng = &cm->eng, .a = a, .r = r, .mem_i = mem_i};
    int rc = alloc_inputs(&b, nt);
    for (int i = 0; !rc && i < a->n_threads; i++) rc = bench_threads(&b, r, a->threads[i], nt);
    if (!rc && a->timeline) rc = draw_timeline(a, cm, &b);
    if (!rc && e->streaming && !a->no_probe) rc = probe_disk(cm, &after);
    e->probe = before.gbps > after.gbps ? before : after;
    e->probe_before = before.gbps, e->probe_after = after.gbps;
    free(b.toks);
    free(b.logits);
    return rc;
}

/* The blkio throttle on the model's disks, when --throttle runs as root. */
static int start_throttle(bench_args *a, const cli_model *cm, blkio_throttle *bt)
{
    const gguf_file *g = model_gguf(cm->model);
    const char *paths[16];
    int np = 0;
    char why[400] = "";
    for (uint32_t f = 0; f < g->n_parts && np < 15; f++) paths[np++] = g->parts[f].path;
    if (a->eo.pack) paths[np++] = a->eo.pack; /* the manifest's disk; drives on others need bench/multidrive.sh */
    if (blkio_throttle_start(bt, paths, np, (uint64_t)a->throttle, why, sizeof why) || !bt->active)
        return cli_fail("--throttle: %s", why);
    snprintf(a->throttle_how, sizeof a->throttle_how, "blkio cgroup on %s", bt->devices);
    return 0;
}

/* Opens the model for --mem value M (drafting or not) and runs the matrix on it. */
static int bench_one(bench_args *a, bench_report *r, long nt, int m, bool drafted, bool blkio)
{
    /* plan the budget for exactly the sessions the tests create */
    cli_model_opts mo = {.model_path = a->model, .model_only = true, .eo = a->eo, .n_ctx = (int32_t)nt,
                         .threads = max_int(a->threads, a->n_threads, 1)};
    if (a->n_mems) mo.eo.mem = a->mems[m];
    for (int i = 0; i < a->n_batches; i++)
        if (a->batches[i] > mo.eo.n_batch) mo.eo.n_batch = (int32_t)a->batches[i];
    mo.eo.timeline = a->timeline != NULL;
    mo.eo.throttle_bps = blkio ? 0 : a->throttle;
    if (drafted) {
        /* as run: the draft model's RAM comes out of the same budget */
        sl_err e;
        uint64_t reserve;
        mo.eo.n_rollback = DRAFT_MAX;
        if (spec_setup_reserve(&a->draft, &mo.eo.mem, (int32_t)nt, mo.threads, &reserve, &e))
            return cli_fail("--draft: %s", e.msg);
    }
    cli_model cm;
    if (cli_model_open(&cm, &mo)) return -1;
    cli_print_engine(&cm.eng, a->format == BENCH_OUT_MD && !a->json);
    if (r->n_engines == 0) {
        snprintf(r->path, sizeof r->path, "%s", cm.path);
        snprintf(r->arch, sizeof r->arch, "%s", model_arch(cm.model));
        model_size(cm.model, &r->model_bytes, &r->model_params);
    }
    blkio_throttle bt = {0};
    int rc = blkio ? start_throttle(a, &cm, &bt) : 0;
    if (!rc) rc = bench_engine_run(a, &cm, r, nt, m, drafted);
    blkio_throttle_stop(&bt);
    cli_model_close(&cm);
    return rc;
}

/* Opens the model once per --mem value (or once), and with --draft once
 * more after each, a fresh engine that drafts: both start from the same
 * cache state, so the pair differs only in drafting. */
static int bench_all(bench_args *a, bench_report *r)
{
    long nt = max_ctx(a);
    bool blkio = a->throttle > 0 && !a->throttle_sim && geteuid() == 0 && access("/sys/fs/cgroup/blkio", W_OK) == 0;
    if (a->throttle > 0 && !blkio)
        snprintf(a->throttle_how, sizeof a->throttle_how, "the store's simulated drive");
    int rc = 0;
    for (int m = 0; m < (a->n_mems ? a->n_mems : 1) && !rc; m++) {
        rc = bench_one(a, r, nt, m, false, blkio);
        if (!rc && a->draft.draft) rc = bench_one(a, r, nt, m, true, blkio);
    }
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a;
    int r = parse_args(argc, argv, &a);
    if (r) return r < 0 ? 2 : 0;
    bench_report rep = {.a = &a};
    int rc = bench_all(&a, &rep);
    if (!rc) rc = bench_print(&rep);
    if (!rc && a.json_out) rc = bench_write_json(&rep, a.json_out);
    for (int i = 0; i < rep.n_cells; i++) free(rep.cells[i].tps), json_decref(rep.cells[i].draft_figs);
    free(rep.cells);
    for (int i = 0; i < rep.n_refs; i++) free(rep.refs[i].ids);
    free(rep.refs);
    return rc ? 1 : 0;
}
