/* The expert provider: the only way model code reaches routed-expert weights.
 *
 * The MoE layer computes its router decision for the whole batch first, then
 * hands the provider the distinct experts it needs (begin).  The provider
 * plans hits and misses and starts all reads at once; the layer then takes
 * experts in whatever order they become ready (next), applies each to every
 * position that chose it, and finally sums per position in router-rank order,
 * so arrival order never changes a bit of the output.  The in-memory provider
 * (mem_provider.c) just points into RAM; the SSD-backed store swaps in here
 * without touching model code. */
#ifndef SLUICE_PROVIDER_H
#define SLUICE_PROVIDER_H

#include <stdint.h>

#include "util/err.h"

/* The tensors of one routed expert (up to this many per expert). */
enum { EXPERT_MAX_PARTS = 6 };

/* One expert's weights: parts[i] points at this expert's slice of the i-th
 * *_exps tensor of the layer, in the order the model registered them (e.g.
 * gate, up, down, then per-expert biases).  Valid until the matching end(). */
typedef struct {
    int32_t id;
    const void *parts[EXPERT_MAX_PARTS];
    /* SL_LAYOUT_* of each part (kernels.h): the in-RAM provider interleaves
     * Q8_0 experts; the caller zeroes the view, so a provider that never
     * sets it hands out GGUF rows */
    uint8_t layout[EXPERT_MAX_PARTS];
} expert_view;

typedef struct expert_provider expert_provider;

typedef struct {
    /* The router's decision at LAYER: N distinct expert ids.  Plans hits
     * and misses and starts every read before returning. */
    int (*begin)(expert_provider *p, int layer, const int32_t *ids, int n, sl_err *err);
    /* Blocks until one of the begun experts is ready, fills *v and returns
     * its index in the ids array; returns -1 once every expert has been
     * handed out, -2 on error (err set: a failed read is never skipped). */
    int (*next)(expert_provider *p, expert_view *v, sl_err *err);
    /* Optional (may be NULL): the layer is done with the expert at INDEX.
     * When a batch needs more experts than the cache holds, next() can
     * only hand out more after earlier ones are released, so a layer must
     * release each expert once applied to all its positions. */
    void (*release)(expert_provider *p, int index);
    /* The layer is finished; every expert it was given may be reused. */
    void (*end)(expert_provider *p, int layer);
    /* Optional (may be NULL): a prediction of the experts a later layer
     * will need, for prefetching.  Never changes results. */
    void (*hint)(expert_provider *p, int layer, const int32_t *ids, int n);
    void (*destroy)(expert_provider *p);
    /* Optional (may be NULL): how many of the begun experts next() would
     * hand out now without waiting for a read (a layer whose experts are
     * all ready can take them at once and run them together). */
    int (*ready)(expert_provider *p);
} expert_provider_ops;

struct expert_provider {
    const expert_provider_ops *ops;
};

#endif
