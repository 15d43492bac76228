/* Expert-routing traces: which experts each token chose at each layer.
 * Read from the JSON schema of shared/traces (experts[t][l] = ids), used to
 * replay cache and prefetch policies offline. */
#ifndef SLUICE_TRACE_H
#define SLUICE_TRACE_H

#include <stdint.h>

#include "experts/cache.h"
#include "experts/heat.h"
#include "util/err.h"

typedef struct {
    int n_tokens, n_layers, n_expert, n_used;
    int16_t *ids; /* [n_tokens][n_layers][n_used] */
} route_trace;

int trace_load(route_trace *t, const char *path, sl_err *err);
void trace_free(route_trace *t);

static inline const int16_t *trace_at(const route_trace *t, int token, int layer)
{
    return t->ids + ((int64_t)token * t->n_layers + layer) * t->n_used;
}

/* Replays tokens [first, n_tokens) through a fresh cache of N_SLOTS slots
 * with POLICY; tokens before FIRST only warm the cache (and count nothing). */
int trace_replay(const route_trace *t, int n_slots, cache_policy policy, double half_life, int first,
                 cache_counters *out, sl_err *err);

/* A replay of tokens [start, end) (end 0: to the last token), counting from
 * FIRST on, optionally with heat: HEAT seeds the LFRU counts and PINNED
 * keys (layer * n_expert + expert) are loaded into permanent slots, part
 * of N_SLOTS, before the first token (those loads are not counted). */
typedef struct {
    int n_slots;
    cache_policy policy;
    double half_life;
    int start, first, end;
    const heat_table *heat;
    const int32_t *pinned;
    int n_pinned;
} replay_opts;

int trace_replay_ex(const route_trace *t, const replay_opts *o, cache_counters *out, sl_err *err);

/* Records tokens [from, to) into R, each token one forward pass. */
void trace_record_heat(const route_trace *t, int from, int to, heat_recorder *r);

#endif
