/* The engine: a model, its thread pool, one session, and where the routed
 * experts live: all in RAM, or streamed from SSD by the expert store under a
 * hard memory budget (--mem), with the heat file, the pinned tier and
 * multi-drive packs when asked.  `sluice run`, `chat`, `bench` and the
 * server all open models through here, so every command streams the same
 * way and reports the same figures. */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/model.h"
#include "experts/budget.h"
#include "experts/heat.h"
#include "experts/store.h"
#include "kernels/pool.h"

typedef struct {
    const char *model_path;
    int32_t n_ctx;            /* <= 0: the model's training context, at most n_ctx_cap */
    int32_t n_ctx_cap;        /* cap on the default context (0: none) */
    int threads;              /* <= 0: physical cores */
    int32_t n_batch;          /* tokens per layer-major pass; 0: default */
    sl_kv_mode kv_mode;
    sl_prefetch_mode prefetch; /* expert prediction (--prefetch) */
    bool prefetch_set;         /* else: auto when streaming, off in RAM (nothing to read ahead) */
    bool no_session;          /* load the model only */
    /* Where experts live.  Neither mem nor io_set: in RAM, unless the
     * model cannot fit in the memory available, then stream with a budget
     * of what is available (a note says so). */
    uint64_t mem;             /* --mem: hard budget for everything */
    store_io io;              /* used when streaming */
    bool io_set;              /* --io given: stream even without --mem */
    uint64_t pin;             /* --pin: pinned tier inside the cache */
    const char *heat_file;    /* NULL: the default location */
    bool no_heat;
    const char *pack;         /* multi-drive pack manifest, or NULL */
    bool verify;              /* check pack checksums on every read */
    cache_policy policy;      /* expert cache eviction (used when policy_set) */
    bool policy_set;
    const char *trace_out;    /* write the routing trace here (engine_write_trace) */
    pf_admit_mode prefetch_admit; /* which guesses the store reads (--prefetch-admit; 0: cost) */
    int32_t n_rollback;       /* positions a session can step back without a checkpoint (drafting) */
    double throttle_bps;      /* > 0: the store's simulated drive rate per file (bench --throttle) */
    bool timeline;            /* the store records a timeline (bench --timeline) */
    /* test hook, passed to the store */
    int (*fault)(void *ctx, uint32_t file, uint64_t off, uint32_t len);
    void *fault_ctx;
} engine_opts;

/* Streaming figures of a run (all zero when experts are in RAM). */
typedef struct {
    bool streaming;
    const char *io;           /* "uring", "pread", "mmap" or "ram" */
    uint64_t expert_bytes_read;
    uint64_t distinct_experts;
    uint64_t cache_hits, cache_misses;
    uint64_t read_retries;     /* expert loads read again from another copy after a failed read */
    double io_wait_s;
    double read_gbps;          /* expert bytes read / time spent reading */
    double prefill_read_amplification; /* prefill bytes read / bytes of distinct experts it used */
    uint64_t prefetch_used, prefetch_wasted_bytes;
    uint64_t demand_misses, prefetch_reads, prefetch_cancelled, prefetch_skipped;
    uint64_t demand_reads, demand_behind_prefetch; /* read requests (chunks); ... that found a guess at the device */
    uint64_t bytes_loaded;     /* experts read, demand + prefetch (no alignment) */
    uint64_t optimum_bytes, optimum_loads; /* Belady's MIN on the same accesses (0: not known) */
    double read_busy_s;        /* time with a read in flight */
    const char *policy;        /* cache policy name */
} engine_stream_stats;

typedef struct {
    sl_model *model;
    sl_pool *pool;
    sl_session *session;
    engine_opts opts;
    int32_t n_ctx, n_batch;
    bool streaming;
    store_io io;
    mem_plan plan;
    expert_provider *store;   /* owned by the model; NULL in RAM */
    heat_session heat;
    bool heat_on;
    struct trace_rec *trace;  /* --trace-out recorder, or NULL */
    bool trace_written;
    char note[1024];          /* warnings the user should see (auto-streaming, bad heat file) */
    char info[256];           /* what the heat did (pinned tier), for --stats */
    /* phase marks for the prefill figures */
    store_stats at_prompt_start, at_prompt_end;
    uint64_t storage_read_start, storage_read_prompt_end;
    double t_start;
} sl_engine;

int engine_open(sl_engine *e, const engine_opts *o, sl_err *err);
void engine_close(sl_engine *e);

/* Options for a session on this engine (KV type, batch, prediction) as
 * engine_open chose them, for callers that make more sessions (bench). */
session_opts engine_session_opts(const sl_engine *e);

/* The prompt starts / has been evaluated (for prefill amplification). */
void engine_mark_prompt_start(sl_engine *e);
void engine_mark_prompt_end(sl_engine *e);
/* Writes the routing trace to opts.trace_out (a no-op without it). */
int engine_write_trace(sl_engine *e, sl_err *err);
/* Once per forward pass: periodic heat saves. */
void engine_tick(sl_engine *e);

void engine_stream_stats_get(const sl_engine *e, engine_stream_stats *out);

/* Bytes this process has caused to be read from storage (/proc/self/io):
 * the only honest count in mmap mode, where page faults do the reading. */
uint64_t engine_storage_read_bytes(void);

/* What memory is available to this process: MemAvailable, capped by the
 * memory cgroup's remaining limit (v1 or v2). */
uint64_t engine_available_memory(void);

/* Plans --mem for MODEL_PATH without loading it (sluice inspect --mem). */
int engine_plan(const char *model_path, const engine_opts *o, mem_plan *plan, sl_err *err);

#endif
