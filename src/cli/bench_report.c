/* sluice bench's reports: the markdown table (with the streaming figures
 * under it), llama-bench's -o json / jsonl / csv (one record per test, the
 * same fields in each), and --json's one summary object. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/build_info.h"
#include "cli/cli.h"
#include "decode/stats.h"
#include "sluice.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(const double *v, long n)
{
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return NAN;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

static double mean(const double *v, long n)
{
    double m = 0;
    for (long i = 0; i < n; i++) m += v[i] / (double)n;
    return m;
}

double bench_stddev(const double *v, long n)
{
    if (n < 2) return 0;
    double m = mean(v, n), ss = 0;
    for (long i = 0; i < n; i++) ss += (v[i] - m) * (v[i] - m);
    return sqrt(ss / (double)(n - 1));
}

const char *bench_test_name(const bench_test *t, char *buf, int cap)
{
    if (t->kind == BENCH_PP) snprintf(buf, (size_t)cap, "pp%ld", t->p);
    else if (t->kind == BENCH_TG) snprintf(buf, (size_t)cap, "tg%ld", t->n);
    else snprintf(buf, (size_t)cap, "pp%ld+tg%ld", t->p, t->n);
    return buf;
}

/* The test's name, with the proposer for a drafted tg: "tg128+ngram". */
static const char *cell_name(const bench_cell *c, char *buf, int cap)
{
    bench_test_name(&c->test, buf, cap);
    if (c->draft) {
        size_t n = strlen(buf);
        snprintf(buf + n, (size_t)cap - n, "+%s", c->draft);
    }
    return buf;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static const char *kv_type(sl_kv_mode kv) { return kv == SL_KV_F32 ? "f32" : "f16"; }

/* ---- markdown ---- */

static void print_stream(const bench_report *r, int e);

/* The plain cell a drafted one pairs with: the engine opened just before
 * its own, same threads, batch and test. */
static const bench_cell *plain_of(const bench_report *r, const bench_cell *d)
{
    for (int i = 0; i < r->n_cells; i++) {
        const bench_cell *c = &r->cells[i];
        if (!c->draft && c->engine == d->engine - 1 && c->threads == d->threads && c->n_batch == d->n_batch &&
            c->test.kind == d->test.kind && c->test.n == d->test.n)
            return c;
    }
    return NULL;
}

static void print_drafts(const bench_report *r)
{
    long reps = r->a->reps;
    for (int i = 0; i < r->n_cells; i++) {
        const bench_cell *c = &r->cells[i], *p = plain_of(r, c);
        if (!c->draft_figs) continue;
        const json_t *f = c->draft_figs, *depth = json_object_get(f, "acceptance_by_depth");
        char test[48], by[160] = "";
        for (size_t d = 0, n = 0; d < json_array_size(depth) && n + 8 < sizeof by; d++)
            n += (size_t)snprintf(by + n, sizeof by - n, "%s%.0f%%", d ? " " : "",
                                  100 * json_real_value(json_array_get(depth, d)));
        double tp = p ? bench_median(p->tps, reps) : 0, td = bench_median(c->tps, reps);
        printf("%s, t=%d: %lld of %lld drafted tokens kept (%.1f%%; by depth %s); %.2fx the plain decode "
               "(%.2f vs %.2f t/s)\n", cell_name(c, test, sizeof test), c->threads,
               (long long)json_integer_value(json_object_get(f, "accepted")),
               (long long)json_integer_value(json_object_get(f, "proposed")),
               100 * json_real_value(json_object_get(f, "acceptance")), by[0] ? by : "-", tp > 0 ? td / tp : 0, td, tp);
    }
    printf("--draft: tg is the greedy continuation of %ld real texts, on an engine without and a fresh one with the "
           "draft; every drafted decode reproduced the plain one's tokens\n", reps);
}

static void print_table(const bench_report *r)
{
    const bench_args *a = r->a;
    bool show_b = a->n_batches > 0, show_mem = a->n_mems > 1;
    char name[sizeof r->path + sizeof r->arch + 4], size[32], par[32];
    snprintf(name, sizeof name, "%s (%s)", base_name(r->path), r->arch);
    cli_fmt_bytes(r->model_bytes, size, sizeof size);
    snprintf(par, sizeof par, "%.2f M", r->model_params / 1e6);
    printf("| %-32s | %10s | %9s | %-6s | %7s |%s%s %11s | %21s |\n", "model", "size", "params", "isa", "threads",
           show_b ? " n_batch |" : "", show_mem ? "        mem |" : "", "test", "t/s");
    printf("| %.32s | %.10s | %.9s | %.6s | %.7s |%s%s %.11s | %.21s |\n", "--------------------------------",
           "---------:", "--------:", "------", "------:", show_b ? " ------: |" : "",
           show_mem ? " ---------: |" : "", "----------:", "--------------------:");
    for (int i = 0; i < r->n_cells; i++) {
        const bench_cell *c = &r->cells[i];
        char test[48], ts[40], b[24] = "", mem[32] = "", m1[24];
        cell_name(c, test, sizeof test);
        /* the t/s cells hold a 2-byte "±": printf widths count bytes */
        snprintf(ts, sizeof ts, "%.2f ± %.2f", bench_median(c->tps, a->reps), bench_stddev(c->tps, a->reps));
        if (show_b) snprintf(b, sizeof b, " %7d |", c->n_batch);
        const bench_engine *e = &r->engines[c->engine];
        if (show_mem) snprintf(mem, sizeof mem, " %10s |", e->mem ? cli_fmt_bytes(e->mem, m1, sizeof m1) : "-");
        printf("| %-32s | %10s | %9s | %-6s | %7d |%s%s %11s | %22s |\n", name, size, par, c->isa, c->threads, b, mem,
               test, ts);
    }
    printf("\nt/s: median ± standard deviation over %ld runs (after one warm-up run)\n", a->reps);
    if (a->draft.draft) print_drafts(r);
    for (int e = 0; e < r->n_engines; e++)
        if (r->engines[e].streaming) print_stream(r, e);
}

static void print_stream_row(const bench_cell *c, bool show_b)
{
    const stream_figs *f = &c->sf;
    char test[48], b2[32], b3[32] = "-", waste[16] = "-", busy[16] = "-";
    cell_name(c, test, sizeof test);
    if (f->optimum_bytes_per_token > 0) cli_fmt_bytes((uint64_t)f->optimum_bytes_per_token, b3, 32);
    if (c->text) {
        snprintf(waste, sizeof waste, "%.1f%%", 100 * f->waste_share);
        snprintf(busy, sizeof busy, "%.0f%%", 100 * f->busy_share);
    }
    char b[24] = "";
    if (show_b) snprintf(b, sizeof b, " %7d |", c->n_batch);
    printf("| %7d |%s %-11s | %18s | %19s | %7.1f%% | %14s | %9s | %7.1f%% | %9.2f | %14.2f |\n", c->threads, b, test,
           cli_fmt_bytes((uint64_t)f->bytes_per_token, b2, 32), b3, 100 * f->hit_rate, waste, busy,
           100 * f->io_wait_share, f->read_gbps, f->effective_gbps);
}

static void print_rate(double bps, char *buf, size_t cap)
{
    if (bps >= 1e8) snprintf(buf, cap, "%.2f GB/s", bps / 1e9);
    else snprintf(buf, cap, "%.1f MB/s", bps / 1e6);
}

/* The ceilings a streaming tg test is measured against: the throttle's and
 * the raw disk's. */
static void print_bounds(const bench_report *r, const bench_engine *e, const bench_cell *c)
{
    const bench_args *a = r->a;
    const stream_figs *f = &c->sf;
    double tps = bench_median(c->tps, a->reps);
    if (a->throttle > 0) {
        double ceil = f->bytes_per_token > 0 ? a->throttle / f->bytes_per_token : 0;
        char rate[32];
        print_rate(a->throttle, rate, sizeof rate);
        printf("t=%d tg, throttled to %s (%s): ceiling %.2f tok/s = rate / bytes per token, measured "
               "%.2f (%.0f%% of it); bytes / optimum's %.2fx; %.0f of %.0f demand reads behind a prefetch\n",
               c->threads, rate, a->throttle_how, ceil, tps, ceil > 0 ? 100 * tps / ceil : 0,
               f->optimum_bytes_per_token > 0 ? f->bytes_per_token / f->optimum_bytes_per_token : 0,
               f->demand_behind, f->demand_reads);
    }
    if (!e->probe.gbps) return;
    double bound = f->bytes_per_token > 0 ? e->probe.gbps * 1e9 / f->bytes_per_token : 0;
    printf("t=%d tg: achieved / raw %.0f%% while reading, %.0f%% over the test; I/O bound %.2f tok/s, measured "
           "%.2f (%.0f%% of the bound)\n",
           c->threads, 100 * f->read_gbps / e->probe.gbps, 100 * f->effective_gbps / e->probe.gbps, bound, tps,
           bound > 0 ? 100 * tps / bound : 0);
}

static void print_stream(const bench_report *r, int ei)
{
    const bench_args *a = r->a;
    const bench_engine *e = &r->engines[ei];
    char b1[32];
    printf("\nstreaming (%s, --mem %s: %lld of %lld experts cached):\n", store_io_name(e->io),
           cli_fmt_bytes(e->plan.total, b1, 32), (long long)e->plan.slots, (long long)e->plan.experts);
    bool show_b = a->n_batches > 0, text = false;
    printf("| threads |%s test        | expert bytes/token | optimum bytes/token | hit rate | prefetch waste | disk busy "
           "| I/O wait | read GB/s | effective GB/s |\n", show_b ? " n_batch |" : "");
    printf("| ------: |%s ----------- | -----------------: | ------------------: | -------: | -------------: | --------: "
           "| -------: | --------: | -------------: |\n", show_b ? " ------: |" : "");
    for (int i = 0; i < r->n_cells; i++) {
        const bench_cell *c = &r->cells[i];
        if (c->engine == ei && c->streamed) print_stream_row(c, show_b), text |= c->text;
    }
    if (text)
        printf("tg: greedy continuations of %ld real texts (one per repetition, none seen before), only the decode "
               "steps counted; cache %s\n",
               a->reps, a->cold ? "empty before the first (--cold)" : "warmed on another text first");
    if (e->probe.gbps)
        printf("\nraw disk: %.2f GB/s (O_DIRECT random %s reads, depth %d, %.1f s%s)\n", e->probe.gbps,
               cli_fmt_bytes(e->probe.read_size, b1, 32), e->probe.depth, e->probe.seconds,
               e->probe.direct ? "" : ", NOT direct");
    for (int i = 0; i < r->n_cells; i++) {
        const bench_cell *c = &r->cells[i];
        if (c->engine == ei && c->streamed && c->test.kind == BENCH_TG) print_bounds(r, e, c);
    }
    if (e->probe.gbps)
        printf("(raw disk probed before and after the tests: %.2f and %.2f GB/s; the higher is the reference)\n",
               e->probe_before, e->probe_after);
}

/* ---- one record per test: -o json, jsonl, csv ---- */

static json_t *figs_json(const stream_figs *f)
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "expert_bytes_per_token", f->bytes_per_token,
                     "hit_rate", f->hit_rate, "io_wait_share", f->io_wait_share, "read_gbps", f->read_gbps,
                     "effective_gbps", f->effective_gbps, "prefetch_waste_share", f->waste_share, "disk_busy_share",
                     f->busy_share, "optimum_bytes_per_token", f->optimum_bytes_per_token, "demand_reads",
                     f->demand_reads, "demand_behind_prefetch", f->demand_behind);
}

/* The streaming settings and figures of one test, or null in RAM. */
static json_t *cell_stream_json(const bench_report *r, const bench_cell *c)
{
    const bench_engine *e = &r->engines[c->engine];
    if (!e->streaming || !c->streamed) return json_null();
    json_t *o = figs_json(&c->sf);
    double bound = c->sf.bytes_per_token > 0 ? e->probe.gbps * 1e9 / c->sf.bytes_per_token : 0;
    json_object_set_new(o, "io", json_string(store_io_name(e->io)));
    json_object_set_new(o, "experts_cached", json_integer((json_int_t)e->plan.slots));
    json_object_set_new(o, "experts", json_integer((json_int_t)e->plan.experts));
    json_object_set_new(o, "raw_gbps", json_real(e->probe.gbps));
    json_object_set_new(o, "io_bound_tps", c->test.kind == BENCH_TG ? json_real(bound) : json_null());
    json_object_set_new(o, "throttle_bps", json_real(r->a->throttle));
    return o;
}

static json_t *samples(const double *tps, long n, double tokens, bool ns)
{
    json_t *arr = json_array();
    for (long i = 0; i < n; i++)
        json_array_append_new(arr, ns ? json_integer(tps[i] > 0 ? (json_int_t)(tokens / tps[i] * 1e9) : 0)
                                      : json_real(tps[i]));
    return arr;
}

/* What the test fed the model: the text decode samples greedily. */
static const char *cell_input(const bench_cell *c)
{
    return c->text ? "real text, then greedy continuation" : "pseudo-random ids (seed 1234)";
}

/* One test as llama-bench's record (its field names where they exist). */
static json_t *cell_json(const bench_report *r, const bench_cell *c)
{
    const bench_args *a = r->a;
    const bench_engine *e = &r->engines[c->engine];
    char test[48];
    long p = c->test.kind == BENCH_TG ? 0 : c->test.p, n = c->test.kind == BENCH_PP ? 0 : c->test.n;
    double tokens = (double)(p + n);
    double avg = mean(c->tps, a->reps);
    json_t *o = json_object();
    json_object_set_new(o, "build_commit", json_string(cli_build_commit()));
    json_object_set_new(o, "sluice_version", json_string(SLUICE_VERSION));
    json_object_set_new(o, "model_filename", json_string(r->path));
    json_object_set_new(o, "model_type", json_string(r->arch));
    json_object_set_new(o, "model_size", json_integer((json_int_t)r->model_bytes));
    json_object_set_new(o, "model_n_params", json_integer((json_int_t)r->model_params));
    json_object_set_new(o, "n_ctx", json_integer(e->n_ctx));
    json_object_set_new(o, "n_batch", json_integer(c->n_batch));
    json_object_set_new(o, "n_threads", json_integer(c->threads));
    json_object_set_new(o, "isa", json_string(c->isa));
    json_object_set_new(o, "type_k", json_string(kv_type(e->kv)));
    json_object_set_new(o, "type_v", json_string(kv_type(e->kv)));
    json_object_set_new(o, "flash_attn", json_boolean(e->kv == SL_KV_F16_FLASH));
    json_object_set_new(o, "mem", e->mem ? json_integer((json_int_t)e->mem) : json_null());
    json_object_set_new(o, "n_prompt", json_integer(p));
    json_object_set_new(o, "n_gen", json_integer(n));
    json_object_set_new(o, "test", json_string(cell_name(c, test, sizeof test)));
    json_object_set_new(o, "input", json_string(cell_input(c)));
    json_object_set_new(o, "sampling", json_string(c->text ? "greedy" : "none"));
    json_object_set_new(o, "repetitions", json_integer(a->reps));
    json_object_set_new(o, "warmup", json_true());
    json_object_set_new(o, "avg_ns", json_integer(avg > 0 ? (json_int_t)(tokens / avg * 1e9) : 0));
    json_object_set_new(o, "avg_ts", json_real(avg));
    json_object_set_new(o, "stddev_ts", json_real(bench_stddev(c->tps, a->reps)));
    json_object_set_new(o, "median_ts", json_real(bench_median(c->tps, a->reps)));
    json_object_set_new(o, "samples_ns", samples(c->tps, a->reps, tokens, true));
    json_object_set_new(o, "samples_ts", samples(c->tps, a->reps, tokens, false));
    json_object_set_new(o, "streaming", cell_stream_json(r, c));
    json_object_set_new(o, "draft", c->draft_figs ? json_incref(c->draft_figs) : json_null());
    return o;
}

/* CSV: the record's scalars, then the streaming figures (empty in RAM). */
static const char *const CSV_TOP[] = {
    "build_commit", "sluice_version", "model_filename", "model_type", "model_size", "model_n_params", "n_ctx",
    "n_batch", "n_threads", "isa", "type_k", "type_v", "flash_attn", "mem", "n_prompt", "n_gen", "test", "input",
    "sampling", "repetitions", "warmup", "avg_ns", "avg_ts", "stddev_ts", "median_ts", "samples_ns", "samples_ts",
};
static const char *const CSV_STREAM[] = {
    "io", "experts_cached", "experts", "expert_bytes_per_token", "optimum_bytes_per_token", "hit_rate",
    "io_wait_share", "read_gbps", "effective_gbps", "prefetch_waste_share", "disk_busy_share", "demand_reads",
    "demand_behind_prefetch", "raw_gbps", "io_bound_tps", "throttle_bps",
};
static const char *const CSV_DRAFT[] = {
    "mode", "proposed", "accepted", "acceptance", "union_expert_bytes_per_accepted_token",
};
#define N_OF(x) (sizeof(x) / sizeof *(x))

/* A JSON value as one CSV field: strings quoted (quotes doubled), arrays
 * as one quoted comma-separated field, null empty. */
static void csv_field(const json_t *v, FILE *f)
{
    if (!v || json_is_null(v)) return;
    if (json_is_string(v)) {
        fputc('"', f);
        for (const char *s = json_string_value(v); *s; s++) {
            if (*s == '"') fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
        return;
    }
    if (json_is_array(v)) {
        fputc('"', f);
        for (size_t i = 0; i < json_array_size(v); i++) fputs(i ? "," : "", f), csv_field(json_array_get(v, i), f);
        fputc('"', f);
        return;
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(10));
    fputs(s ? s : "", f);
    free(s);
}

static void csv_header(FILE *f)
{
    for (size_t i = 0; i < N_OF(CSV_TOP); i++) fprintf(f, "%s%s", i ? "," : "", CSV_TOP[i]);
    for (size_t i = 0; i < N_OF(CSV_STREAM); i++) fprintf(f, ",%s", CSV_STREAM[i]);
    for (size_t i = 0; i < N_OF(CSV_DRAFT); i++) fprintf(f, ",draft_%s", CSV_DRAFT[i]);
    fputc('\n', f);
}

static void csv_row(const json_t *o, FILE *f)
{
    const json_t *st = json_object_get(o, "streaming");
    for (size_t i = 0; i < N_OF(CSV_TOP); i++) fputs(i ? "," : "", f), csv_field(json_object_get(o, CSV_TOP[i]), f);
    for (size_t i = 0; i < N_OF(CSV_STREAM); i++) fputc(',', f), csv_field(json_object_get(st, CSV_STREAM[i]), f);
    const json_t *d = json_object_get(o, "draft");
    for (size_t i = 0; i < N_OF(CSV_DRAFT); i++) fputc(',', f), csv_field(json_object_get(d, CSV_DRAFT[i]), f);
    fputc('\n', f);
}

static int print_records(const bench_report *r, FILE *f)
{
    json_t *all = json_array();
    for (int i = 0; i < r->n_cells; i++) json_array_append_new(all, cell_json(r, &r->cells[i]));
    int rc = 0;
    if (r->a->format == BENCH_OUT_CSV) {
        csv_header(f);
        for (size_t i = 0; i < json_array_size(all); i++) csv_row(json_array_get(all, i), f);
    } else if (r->a->format == BENCH_OUT_JSONL) {
        for (size_t i = 0; i < json_array_size(all) && !rc; i++) {
            char *s = json_dumps(json_array_get(all, i), JSON_COMPACT);
            rc = s ? (fprintf(f, "%s\n", s), 0) : cli_fail("cannot format the JSON output");
            free(s);
        }
    } else {
        char *s = json_dumps(all, JSON_INDENT(2));
        rc = s ? (fprintf(f, "%s\n", s), 0) : cli_fail("cannot format the JSON output");
        free(s);
    }
    json_decref(all);
    return rc;
}

/* ---- --json: one object, one -p/-n pair (cmd_bench refuses lists) ---- */

static const bench_cell *find_cell(const bench_report *r, int threads, bench_kind kind)
{
    for (int i = 0; i < r->n_cells; i++)
        if (r->cells[i].threads == threads && r->cells[i].test.kind == kind) return &r->cells[i];
    return NULL;
}

static json_t *tps_or_null(const bench_cell *c, long reps, double (*f)(const double *, long))
{
    return c ? json_real(f(c->tps, reps)) : json_null();
}

static json_t *row_json(const bench_report *r, int threads)
{
    long reps = r->a->reps;
    const bench_cell *pp = find_cell(r, threads, BENCH_PP), *tg = find_cell(r, threads, BENCH_TG);
    const bench_cell *any = pp ? pp : tg;
    json_t *o = json_object();
    json_object_set_new(o, "threads", json_integer(any->threads));
    json_object_set_new(o, "isa", json_string(any->isa));
    json_object_set_new(o, "pp_tps", tps_or_null(pp, reps, bench_median));
    json_object_set_new(o, "tg_tps", tps_or_null(tg, reps, bench_median));
    json_object_set_new(o, "pp_tps_sd", json_real(pp ? bench_stddev(pp->tps, reps) : 0));
    json_object_set_new(o, "tg_tps_sd", json_real(tg ? bench_stddev(tg->tps, reps) : 0));
    json_object_set_new(o, "pp_samples", pp ? samples(pp->tps, reps, 0, false) : json_null());
    json_object_set_new(o, "tg_samples", tg ? samples(tg->tps, reps, 0, false) : json_null());
    return o;
}

static json_t *legacy_stream_json(const bench_report *r)
{
    const bench_args *a = r->a;
    const bench_engine *e = &r->engines[0];
    json_t *per = json_array();
    stream_figs none = {0};
    for (int i = 0; i < a->n_threads; i++) {
        const bench_cell *pp = find_cell(r, a->threads[i], BENCH_PP), *tg = find_cell(r, a->threads[i], BENCH_TG);
        json_array_append_new(per, json_pack("{s:i,s:o,s:o}", "threads", a->threads[i], "pp",
                                             figs_json(pp ? &pp->sf : &none), "tg", figs_json(tg ? &tg->sf : &none)));
    }
    const bench_cell *tg0 = find_cell(r, a->threads[0], BENCH_TG);
    double bpt = tg0 ? tg0->sf.bytes_per_token : 0, bound = bpt > 0 ? e->probe.gbps * 1e9 / bpt : 0;
    return json_pack("{s:s,s:s,s:I,s:I,s:I,s:f,s:f,s:f,s:s,s:b,s:o}", "io", store_io_name(e->io), "prefetch_admit",
                     pf_admit_name(e->admit), "mem", (json_int_t)e->plan.total, "experts_cached",
                     (json_int_t)e->plan.slots, "experts", (json_int_t)e->plan.experts, "raw_gbps", e->probe.gbps,
                     "tg_io_bound_tps", bound, "throttle_bps", a->throttle, "throttle_how",
                     a->throttle_how[0] ? a->throttle_how : "none", "cold", a->cold, "per_threads", per);
}

/* The settings, the first thread count's results at top level, and every
 * thread count under "results". */
static json_t *legacy_json(const bench_report *r)
{
    const bench_args *a = r->a;
    const bench_engine *e = &r->engines[0];
    json_t *o = row_json(r, a->threads[0]), *all = json_array();
    json_object_set_new(o, "build_commit", json_string(cli_build_commit()));
    json_object_set_new(o, "model", json_string(r->path));
    json_object_set_new(o, "arch", json_string(r->arch));
    json_object_set_new(o, "model_size", json_integer((json_int_t)r->model_bytes));
    json_object_set_new(o, "model_n_params", json_integer((json_int_t)r->model_params));
    json_object_set_new(o, "p", json_integer(a->n_ps ? a->ps[0] : 0));
    json_object_set_new(o, "n", json_integer(a->n_ns ? a->ns[0] : 0));
    json_object_set_new(o, "reps", json_integer(a->reps));
    json_object_set_new(o, "n_ctx", json_integer(e->n_ctx));
    json_object_set_new(o, "n_batch", json_integer(r->cells[0].n_batch));
    json_object_set_new(o, "type_k", json_string(kv_type(e->kv)));
    json_object_set_new(o, "type_v", json_string(kv_type(e->kv)));
    json_object_set_new(o, "flash_attn", json_boolean(e->kv == SL_KV_F16_FLASH));
    const bench_cell *tg = find_cell(r, a->threads[0], BENCH_TG);
    json_object_set_new(o, "tg_input", tg ? json_string(cell_input(tg)) : json_null());
    json_object_set_new(o, "sampling", json_string(tg && tg->text ? "greedy" : "none"));
    json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)stats_peak_rss()));
    for (int i = 0; i < a->n_threads; i++) json_array_append_new(all, row_json(r, a->threads[i]));
    json_object_set_new(o, "results", all);
    /* null in RAM, so a reader tells "not streaming" from "streamed nothing" */
    json_object_set_new(o, "streaming", e->streaming ? legacy_stream_json(r) : json_null());
    return o;
}

static int print_legacy(const bench_report *r, FILE *f)
{
    json_t *o = legacy_json(r);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return cli_fail("cannot format the JSON output");
    fprintf(f, "%s\n", s);
    free(s);
    return 0;
}

int bench_print(const bench_report *r)
{
    if (r->a->json) return print_legacy(r, stdout);
    if (r->a->format != BENCH_OUT_MD) return print_records(r, stdout);
    print_table(r);
    return 0;
}

int bench_write_json(const bench_report *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return cli_fail("cannot create %s", path);
    int rc = print_legacy(r, f);
    if (fclose(f) != 0 && !rc) rc = cli_fail("cannot write %s", path);
    return rc;
}
