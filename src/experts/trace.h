/* Expert-routing traces: which experts each token chose at each layer.
 * Read from the JSON schema of shared/traces (experts[t][l] = ids), used to
 * replay cache and prefetch policies offline. */
#ifndef SLUICE_TRACE_H
#define SLUICE_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "experts/cache.h"
#include "experts/heat.h"
#include "util/err.h"

typedef struct {
    int n_tokens, n_layers, n_expert, n_used;
    int16_t *ids; /* [n_tokens][n_layers][n_used] */
    /* Optional (traces written by sluice run --trace-out): the experts
     * the pilot predicted for each token and layer before its router ran,
     * -1 where fewer or none; NULL when the trace has none. */
    int16_t *pred; /* [n_tokens][n_layers][n_used] */
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
    bool hints;        /* give the cache the trace's predictions (if any) */
} replay_opts;

int trace_replay_ex(const route_trace *t, const replay_opts *o, cache_counters *out, sl_err *err);

/* Recording a trace of a live run (sluice run --trace-out), in the schema
 * above: one row per evaluated position (prompt, generated, and drafted
 * positions a verifier later rejected: every row is reads the store did),
 * the MoE layers only, plus "predicted" for single-token evaluations. */
typedef struct trace_rec trace_rec;

/* MOE[l]: model layer l routes experts (the trace's layers are these). */
int trace_rec_create(trace_rec **out, int n_layers, const bool *moe, int n_expert, int n_used, sl_err *err);
void trace_rec_free(trace_rec *r);
/* A batch of T positions is evaluated (before its layers). */
void trace_rec_tokens(trace_rec *r, const int32_t *tokens, int T);
/* Model layer LAYER routed the batch: T x K ids. */
void trace_rec_route(trace_rec *r, int layer, const int32_t *ids, int T, int K);
/* The pilot predicted N experts for LAYER (kept for 1-position batches). */
void trace_rec_hint(trace_rec *r, int layer, const int32_t *ids, int n);
int trace_rec_rows(const trace_rec *r);
/* Writes the JSON trace; MODEL names the GGUF (may be NULL). */
int trace_rec_write(const trace_rec *r, const char *path, const char *model, sl_err *err);

/* Records tokens [from, to) into R, each token one forward pass. */
void trace_record_heat(const route_trace *t, int from, int to, heat_recorder *r);

#endif
