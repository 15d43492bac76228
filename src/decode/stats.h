/* Generation statistics: one struct, described by a field table, so that
 * the --json / --stats-json objects and the --stats lines all come from the
 * same place.  Adding a figure = one struct member + one row in FIELDS
 * (stats.c); every output picks it up. */
#ifndef SLUICE_STATS_H
#define SLUICE_STATS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double load_s;            /* opening the model (sluice_open), wall clock */
    int64_t prompt_tokens;    /* tokens evaluated for the prompt */
    int64_t cached_tokens;    /* prompt tokens reused from the context, not evaluated */
    int64_t generated_tokens; /* tokens in the output (an ending EOG excluded) */
    double prompt_s;          /* prompt evaluation, wall clock */
    double decode_s;          /* from the first sampled token to the last */
    int64_t decode_steps;     /* single-token evaluations in decode_s */
    double ttft_s;            /* start of prompt evaluation to first token */
    double prompt_tps;        /* prompt_tokens / prompt_s */
    double decode_tps;        /* decode_steps / decode_s */
    uint64_t peak_rss_bytes;  /* process high-water mark */
    /* streaming (zero when experts are in RAM) */
    int64_t streaming;        /* 1 when routed experts stream from disk */
    uint64_t expert_bytes_read;
    double expert_bytes_per_token;     /* expert_bytes_read / tokens evaluated */
    uint64_t distinct_experts;         /* distinct (layer, expert) pairs used */
    uint64_t cache_hits, cache_misses;
    uint64_t read_retries;             /* expert reads repeated from another copy after a failed read */
    double io_wait_s;                  /* time compute waited on reads */
    double compute_s;                  /* evaluation time not spent waiting */
    double read_gbps;                  /* bytes read / time reads were in flight */
    double prefill_read_amplification; /* prompt bytes read / bytes of distinct experts it used */
    uint64_t demand_misses;            /* experts read because the router asked (not prefetched) */
    uint64_t prefetch_reads;           /* experts read on a prediction */
    uint64_t prefetch_used;            /* ... that a router then asked for */
    uint64_t prefetch_wasted_bytes;    /* ... evicted without being used */
    uint64_t prefetch_cancelled;       /* guesses dropped before a byte was read (the router disagreed) */
    uint64_t prefetch_skipped;         /* guesses not read: not worth it (--prefetch-admit) or no slot to spare */
    uint64_t demand_reads;             /* demand read requests (chunks) given to the device */
    uint64_t demand_behind_prefetch;   /* ... that found a prefetch read already at the device */
    uint64_t expert_bytes_loaded;      /* bytes of the experts read (demand + prefetch, no alignment) */
    uint64_t optimum_bytes;            /* what Belady's MIN would have loaded for this run's accesses */
    double optimum_ratio;              /* expert_bytes_loaded / optimum_bytes */
    double disk_busy_fraction;         /* share of the evaluation time with a read in flight */
} gen_stats;

typedef enum { STAT_I64, STAT_U64, STAT_F64 } stat_kind;

typedef struct {
    const char *key;   /* JSON key */
    stat_kind kind;
    size_t offset;     /* in gen_stats */
    const char *label; /* for people; NULL = JSON only */
    const char *unit;
    int streaming;     /* printed only for streaming runs */
} stat_field;

/* The field table, in output order. */
const stat_field *stats_fields(size_t *n);

/* Peak resident set size of this process (getrusage), in bytes. */
uint64_t stats_peak_rss(void);

/* Fills the derived rates and the peak RSS. */
void stats_finish(gen_stats *st);

/* Adds every field of ST to the JSON object OBJ (returns -1 if out of memory). */
int stats_to_json(const gen_stats *st, json_t *obj);

/* A field's value as a double (for printing). */
double stats_value(const gen_stats *st, const stat_field *f);

#endif
