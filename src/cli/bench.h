/* sluice bench: the test matrix (cmd_bench.c measures it) and its reports
 * (bench_report.c prints them as llama-bench's -o formats). */
#ifndef SLUICE_CLI_BENCH_H
#define SLUICE_CLI_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "decode/spec_setup.h"
#include "engine/engine.h"
#include "experts/probe.h"

enum { BENCH_MAX_LIST = 16 };

typedef enum { BENCH_OUT_MD, BENCH_OUT_JSON, BENCH_OUT_JSONL, BENCH_OUT_CSV } bench_format;

/* ppP: P tokens as one batch into an empty session; tgN: N single-token
 * steps from an empty one; pgP,N: both in one session, timed together. */
typedef enum { BENCH_PP, BENCH_TG, BENCH_PG } bench_kind;

typedef struct {
    bench_kind kind;
    long p, n;
} bench_test;

typedef struct {
    const char *model;
    /* the matrix: every list crossed with every other (llama-bench's) */
    long ps[BENCH_MAX_LIST], ns[BENCH_MAX_LIST], pg[BENCH_MAX_LIST][2];
    int n_ps, n_ns, n_pg;
    int threads[BENCH_MAX_LIST];
    int n_threads;
    long batches[BENCH_MAX_LIST]; /* -b; none given: the engine's default */
    int n_batches;
    uint64_t mems[BENCH_MAX_LIST]; /* --mem; none given: as the other flags say */
    int n_mems;
    long reps;
    bench_format format;  /* -o */
    bool json;            /* --json: one summary object (one -p/-n pair) */
    const char *json_out; /* also write that object here */
    engine_opts eo;       /* --io, --pack, --kv, ...: the rest of the engine */
    bool no_probe;
    bool cold;            /* streaming tg: no warm-up text */
    double throttle;      /* --throttle: bytes/s ceiling for expert reads (0: none) */
    char throttle_how[200]; /* how it was applied, for the report (outlives the engines) */
    bool throttle_sim;    /* --throttle-sim: the store's simulated drive even as root */
    const char *timeline; /* --timeline FILE.svg */
    spec_setup_opts draft; /* --draft and its flags: tg runs without, then with it */
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

/* One engine the tests ran on: one per --mem value. */
typedef struct {
    uint64_t mem; /* the --mem it was opened with (0: none) */
    bool streaming;
    store_io io;
    mem_plan plan;
    pf_admit_mode admit;
    sl_kv_mode kv;
    bool drafted;                /* its tg tests draft (--draft); it runs no other test */
    int32_t n_ctx;
    probe_result probe;          /* the better of the two probes */
    double probe_before, probe_after;
} bench_engine;

/* One measured test of the matrix. */
typedef struct {
    int engine; /* index into bench_report.engines */
    int threads;
    const char *isa;
    int32_t n_batch;
    bench_test test;
    double *tps;      /* tokens/s per repetition */
    bool text;        /* tg as greedy continuations of real texts (streaming, or --draft) */
    const char *draft; /* drafted: the proposer ("ngram", "model", ...); NULL: not drafted */
    json_t *draft_figs; /* ... and its figures over the timed repetitions (spec_setup_json) */
    bool streamed;    /* sf holds figures */
    stream_figs sf;
} bench_cell;

typedef struct {
    const bench_args *a;
    char path[1024], arch[64];
    uint64_t model_bytes;
    double model_params;
    bench_engine engines[2 * BENCH_MAX_LIST]; /* one per --mem value, two with --draft */
    int n_engines;
    bench_cell *cells;
    int n_cells, cap_cells;
    /* the plain decodes' output, which every drafted decode of the same
     * text must reproduce (bench checks exactness as it measures) */
    struct bench_ref *refs;
    int n_refs;
} bench_report;

/* "pp512", "tg128", "pp512+tg128". */
const char *bench_test_name(const bench_test *t, char *buf, int cap);
double bench_median(const double *v, long n);
double bench_stddev(const double *v, long n);

/* Prints the report to stdout in a->format, or --json's object. */
int bench_print(const bench_report *r);
/* --json-out: the --json object into PATH. */
int bench_write_json(const bench_report *r, const char *path);

#endif
