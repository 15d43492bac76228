/* The SSD expert store: an expert provider that keeps a fixed RAM cache of
 * whole experts and reads misses straight from the GGUF (or split GGUF) with
 * O_DIRECT, through io_uring or a pread pool, or leaves everything to the
 * page cache (mmap mode, the baseline).
 *
 * Per layer, once the router has decided: hits are pinned, misses get slots
 * (evicting by the cache policy, never a slot the layer still needs) and all
 * their reads are submitted at once; next() hands out experts as they land.
 * Reads go into 4 KiB-aligned ranges covering each expert slice and the
 * views point inside them, so nothing is copied and unaligned slices work.
 * Output is bit-identical to the in-RAM provider: only timing changes. */
#ifndef SLUICE_STORE_H
#define SLUICE_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "experts/admit.h"
#include "experts/cache.h"
#include "experts/heat.h"
#include "experts/io.h"
#include "experts/layout.h"
#include "experts/provider.h"

typedef enum { STORE_IO_URING = 0, STORE_IO_PREAD = 1, STORE_IO_MMAP = 2 } store_io;

typedef struct {
    store_io io;
    uint64_t cache_bytes;  /* RAM for expert slots (ignored for mmap) */
    cache_policy policy;
    double half_life;      /* LFRU half-life in forward passes */
    int queue_depth;       /* reads in flight */
    int prefetch_depth;    /* prefetch reads in flight at most (0: io.h's default) */
    pf_admit_mode prefetch_admit; /* which guesses are worth a read (admit.h; default cost) */
    uint32_t chunk_bytes;  /* reads are split into chunks of at most this */
    /* Test hook (test builds only, util/fault.h: ignored in a release
     * build): may turn a completed read into an error (-errno). */
    int (*fault)(void *ctx, uint32_t file, uint64_t off, uint32_t len);
    void *fault_ctx;
    /* Heat (experts/heat.h), may be NULL: seeds the LFRU counts and picks
     * the pinned tier, which is read before the first token into permanent
     * slots taking up to pin_bytes of cache_bytes.  A table of another
     * geometry is ignored (see store_stats.heat_note). */
    const heat_table *heat;
    uint64_t pin_bytes;
    heat_pin_opts pin;
    heat_recorder *record; /* may be NULL: gets every begin()'s experts */
    /* Optional: read experts from this source (e.g. a multi-drive pack,
     * source_pack_create in pack.h) instead of the GGUF; size the cache
     * with source->ops->slot_bytes.  The store owns it from
     * expert_store_create on, even when creation fails. */
    struct expert_source *source;
    /* Simulated drive speeds (a pread backend that holds reads back,
     * io.h), for tests and for `bench --throttle` where no blkio cgroup
     * can be used.  throttle_bps, if > 0 and throttle is NULL: every file
     * of the source delivers at most that many bytes/s. */
    const io_throttle *throttle;
    double throttle_bps;
    bool timeline;         /* record events for expert_store_timeline (bench --timeline) */
    /* The access log behind the optimum figures holds at most this many
     * accesses (0: none kept, no optimum): when full it drops its older
     * half, so it never outgrows the memory plan however long the store
     * lives (a server) and always keeps the last half of it. */
    int64_t log_cap;
} store_config;
/* Access log entries worth keeping for contexts of N_CTX tokens on layout
 * L: two full contexts' accesses (a window of one context always fits). */
int64_t store_log_entries(const expert_layout *L, int32_t n_ctx);

typedef struct {
    uint64_t bytes_read;       /* bytes read from disk for experts (incl. alignment) */
    uint64_t bytes_needed;     /* bytes of the experts that missed */
    uint64_t bytes_requested;  /* bytes of every expert asked for (hits + misses) */
    uint64_t reads;            /* I/O requests completed */
    uint64_t hits, misses, evictions;
    uint64_t distinct;         /* distinct (layer, expert) pairs used so far */
    uint64_t distinct_bytes;   /* their bytes */
    double read_busy_s;        /* wall time with at least one read at the device */
    uint64_t layers;           /* begin() calls */
    double io_wait_s;          /* time next() blocked on I/O */
    uint64_t prefetch_issued;  /* experts read on a hint */
    uint64_t prefetch_bytes;
    uint64_t prefetch_used;    /* prefetched experts a demand then hit */
    uint64_t prefetch_late;    /* ... of which still loading at that moment */
    uint64_t prefetch_wasted_bytes; /* prefetched, evicted unused */
    uint64_t prefetch_failed;  /* prefetch reads that failed (re-read on demand) */
    uint64_t prefetch_cancelled; /* guesses the router disagreed with, dropped before any byte was read */
    uint64_t prefetch_promoted;  /* guesses the router confirmed while still queued: read as demand */
    uint64_t prefetch_skipped;   /* guesses not worth a read (the admission rule, or the cache had no room worth it) */
    uint64_t demand_reads;       /* demand read requests (chunks) given to the device */
    uint64_t demand_behind_prefetch; /* ... that found a prefetch read already at the device */
    /* the admission rule's current figures (admit.h): disk busy share with
     * needed reads, one expert's read time and one layer's compute time */
    double admit_busy, admit_read_s, admit_compute_s;
    uint64_t retries;          /* expert loads read again from another copy after a failure */
    uint64_t accesses;         /* experts asked for so far (the optimum's log position) */
    int slots;                 /* cache capacity in experts */
    cache_policy policy;
    uint64_t slot_bytes;
    int direct;                /* 1 if reads bypass the page cache (O_DIRECT) */
    int pinned;                /* experts in permanent slots, read at creation */
    char heat_note[200];       /* what the heat did: pins, or why none */
} store_stats;

const char *store_io_name(store_io io);
int store_io_parse(const char *name); /* -1 if unknown */

/* Sensible defaults: uring, AHEAD, 256 reads in flight, 1 MiB chunks, no heat. */
store_config store_config_default(uint64_t cache_bytes);

/* Bytes one cache slot needs for the largest expert of the layout. */
uint64_t store_slot_bytes(const expert_layout *L);

int expert_store_create(expert_provider **out, const expert_layout *L, const store_config *cfg, sl_err *err);
/* Only valid on a provider made by expert_store_create. */
void expert_store_stats(const expert_provider *p, store_stats *out);

/* What happened when (store_config.timeline): reads from submission to
 * landing (demand or prefetch; a dropped guess ends when dropped), each
 * expert's compute (handed out by next() until released), the time next()
 * waited for a read, and each layer from begin() to end().  Times are
 * sl_now() seconds. */
typedef enum { TL_READ_DEMAND, TL_READ_PREFETCH, TL_COMPUTE, TL_WAIT, TL_LAYER } tl_kind;
typedef struct {
    double t0, t1;
    int32_t layer, expert;
    uint8_t kind;    /* tl_kind */
    uint8_t dropped; /* a guess dropped before it was read */
} store_event;
const store_event *expert_store_timeline(const expert_provider *p, size_t *n);

/* Whether a slot holds (LAYER, EXPERT) or its read is in flight: what
 * begin() would count as a hit now (false in mmap mode). */
bool expert_store_holds(const expert_provider *p, int layer, int expert);
/* Whether a slot holds (LAYER, EXPERT) with its read landed: a pass that
 * needs an expert still in flight waits for it as for a miss. */
bool expert_store_resident(const expert_provider *p, int layer, int expert);

/* The store's expert source (e.g. a pack, for source_pack_stats); NULL in
 * mmap mode. */
const struct expert_source *expert_store_source(const expert_provider *p);

/* The offline optimum for this run so far: the expert loads and bytes
 * Belady's MIN (belady.h) would have needed for the same sequence of
 * begin()s with the same number of slots, from an empty cache and with no
 * prefetch (each expert's bytes as the layout has them, without the 4 KiB
 * alignment).  Compare with bytes_needed + prefetch_bytes. */
int expert_store_optimum(const expert_provider *p, uint64_t *bytes, uint64_t *loads, sl_err *err);
/* The same, counting only accesses from log position FROM on (an earlier
 * store_stats.accesses): the optimum for a window, with the history the log
 * still holds before it; an error once the log has dropped FROM. */
int expert_store_optimum_since(const expert_provider *p, uint64_t from, uint64_t *bytes, uint64_t *loads,
                               sl_err *err);

#endif
