/* The memory plan behind --mem: one hard budget covers everything sluice
 * holds (spine, KV cache, scratch, runtime overhead, the expert cache and
 * its metadata).  The expert cache gets what is left, in whole slots; a
 * budget that cannot hold the spine plus a minimal cache is refused with a
 * message that says what does not fit (FIELD.md: growing a cache into
 * memory the OS needs collapses throughput 3-8x, so the plan never
 * overcommits). */
#ifndef SLUICE_BUDGET_H
#define SLUICE_BUDGET_H

#include <stdint.h>

#include "util/err.h"

typedef struct {
    uint64_t total;        /* the budget (--mem) */
    uint64_t spine;        /* resident dense weights */
    uint64_t kv;           /* KV cache for n_ctx tokens */
    uint64_t state;        /* recurrent layers' state with its snapshots (0 without such layers) */
    uint64_t scratch;      /* activations and work buffers */
    uint64_t runtime;      /* code, libraries, stacks, allocator slack */
    uint64_t meta;         /* per-(layer, expert) records and the access log */
    uint64_t cache;        /* expert slots: slots * slot_bytes */
    uint64_t pin;          /* part of cache held by the pinned tier */
    uint64_t slot_bytes;
    int64_t slots;         /* experts the cache holds */
    int64_t experts;       /* routed experts in the model (layers x experts) */
    uint64_t unused;       /* budget left over (less than one slot) */
    int32_t n_ctx, n_batch; /* what KV and scratch were planned for */
} mem_plan;

typedef struct {
    uint64_t total, spine, kv, state, scratch;
    uint64_t slot_bytes;   /* one cache slot */
    int64_t experts;       /* routed experts in the model */
    int min_slots;         /* smallest useful cache (e.g. experts used per token) */
    uint64_t pin;          /* requested pinned tier (--pin) */
    int threads;
    uint64_t metadata;     /* bytes of GGUF metadata (vocabulary etc.) */
    uint64_t log;          /* the store's access log at its cap (store_log_entries) */
} mem_plan_in;

/* Overhead sluice reserves for itself outside the planned buffers. */
uint64_t mem_runtime_overhead(int threads, uint64_t metadata_bytes);

int mem_plan_make(mem_plan *p, const mem_plan_in *in, sl_err *err);

#endif
