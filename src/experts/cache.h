/* The expert cache: a fixed number of equal-size slots, each holding one
 * whole routed expert, keyed by (layer, expert).  This module only decides
 * *which* expert lives in which slot; the store owns the slot memory and the
 * I/O, and trace replays use the same decisions without any I/O.
 *
 * Eviction is pluggable.  LRU is the baseline.  LFRU (the default) is a
 * GreedyDual-style priority: on each use an expert's priority becomes
 * clock + its decayed use count, and evicting a slot raises the clock to the
 * victim's priority, so recently used experts and often used experts both
 * survive (FIELD.md: at a 3% cache, LRU 5% vs LFRU 29% hits).  Use counts
 * are kept per (layer, expert) even while the expert is not cached, in a
 * small fixed record, so a re-admitted hot expert keeps its history.
 * Slots pinned by the layer being computed are never evicted.
 *
 * AHEAD (docs/CACHE.md) is built for the access pattern of MoE decoding:
 * every token walks all layers in order, so an expert of layer l is next
 * wanted at layer l of a later token, and how many tokens later depends on
 * how popular it is.  It evicts the expert whose expected next use is
 * farthest: (steps until its layer comes round again) + n_layers x
 * (1 - q) / p, p its decayed per-token use rate, q the chance it is used at
 * that next opportunity (p, or the prefetch precision for an expert the
 * pilot predicted for the next layer, or the lower rate of the experts it
 * did not predict).  This approximates Belady's MIN, which evicts the
 * expert whose next use is farthest in the known future.  Counts per layer
 * are ordered by a heap, so a victim costs one look at each layer's
 * least-used expert: O(n_layers + log n) per miss, O(log n) per hit. */
#ifndef SLUICE_CACHE_H
#define SLUICE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

/* CACHE_OPT is offline only (trace replays, trace.h): Belady's MIN. */
typedef enum { CACHE_LRU = 0, CACHE_LFRU = 1, CACHE_AHEAD = 2, CACHE_OPT = 3 } cache_policy;
enum { CACHE_N_POLICIES = 4 };

typedef struct expert_cache expert_cache;

typedef struct {
    uint64_t hits, misses, evictions;
} cache_counters;

/* half_life: tokens after which an unused expert's count halves (LFRU). */
int cache_create(expert_cache **out, int n_slots, int n_layers, int n_expert, cache_policy policy,
                 double half_life, sl_err *err);
void cache_free(expert_cache *c);

const char *cache_policy_name(cache_policy p);
int cache_policy_parse(const char *name); /* -1 if unknown */

int cache_slots(const expert_cache *c);

/* Advances time by one token (decay unit). */
void cache_next_token(expert_cache *c);

/* The router of LAYER has decided (call before its hits and admits): AHEAD
 * measures distances in the layer cycle from here, and predictions made
 * for LAYER end (IDS, N: what it chose, scores them). */
void cache_begin_layer(expert_cache *c, int layer, const int32_t *ids, int n);

/* A prediction that (LAYER, EXPERT) will be used at LAYER's next turn:
 * AHEAD keeps it until then.  Other policies ignore it. */
void cache_hint(expert_cache *c, int layer, int expert);

/* Slot holding (layer, expert), or -1.  Does not count or touch. */
int cache_find(const expert_cache *c, int layer, int expert);

/* Records a use of a cached expert (a hit) and pins its slot. */
void cache_hit(expert_cache *c, int slot);

/* Finds a slot for (layer, expert), evicting the lowest-priority unpinned
 * slot if none is free; records a miss and pins the slot.  Returns -1 if
 * every slot is pinned.  *evicted_key gets the evicted key or -1. */
int cache_admit(expert_cache *c, int layer, int expert, int64_t *evicted_key);

/* Like cache_admit for a prefetch: no miss and no use are recorded, and
 * the slot keeps the key's current priority, so a wrong guess is among
 * the first evicted.  The slot comes back pinned.  Returns -1 when no slot
 * can be spared: every slot pinned, or (AHEAD) the expert that would be
 * evicted is expected to be needed sooner than the prefetched one. */
int cache_admit_prefetch(expert_cache *c, int layer, int expert, int64_t *evicted_key);

/* AHEAD's current estimate that a predicted expert is used (0..1). */
double cache_hint_precision(const expert_cache *c);

/* Pin counts: a pinned slot is never chosen for eviction. */
void cache_pin(expert_cache *c, int slot);
void cache_unpin(expert_cache *c, int slot);
bool cache_pinned(const expert_cache *c, int slot);

/* Drops (layer, expert) from its slot (e.g. after a failed read). */
void cache_drop(expert_cache *c, int slot);

/* Adds PRIOR to the use count of (layer, expert): seeds the policy with
 * heat learned in earlier runs. */
void cache_seed(expert_cache *c, int layer, int expert, double prior);

/* Marks a slot permanently resident (pinned tier). */
void cache_set_permanent(expert_cache *c, int slot);

cache_counters cache_get_counters(const expert_cache *c);

#endif
