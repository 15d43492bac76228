#include "experts/trace.h"

#include <jansson.h>
#include <stdlib.h>

static int load_ids(route_trace *t, json_t *experts, const char *path, sl_err *err)
{
    size_t ti;
    json_t *tok;
    json_array_foreach(experts, ti, tok) {
        if (!json_is_array(tok) || (int)json_array_size(tok) != t->n_layers)
            return sl_errf(err, "%s: experts[%zu] must list %d layers", path, ti, t->n_layers);
        for (int l = 0; l < t->n_layers; l++) {
            json_t *set = json_array_get(tok, (size_t)l);
            if (!json_is_array(set) || (int)json_array_size(set) != t->n_used)
                return sl_errf(err, "%s: experts[%zu][%d] must hold %d ids", path, ti, l, t->n_used);
            for (int k = 0; k < t->n_used; k++) {
                json_int_t e = json_integer_value(json_array_get(set, (size_t)k));
                if (e < 0 || e >= t->n_expert)
                    return sl_errf(err, "%s: experts[%zu][%d][%d] = %lld out of range", path, ti, l, k,
                                   (long long)e);
                t->ids[((int64_t)ti * t->n_layers + l) * t->n_used + k] = (int16_t)e;
            }
        }
    }
    return 0;
}

int trace_load(route_trace *t, const char *path, sl_err *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return sl_errf(err, "%s:%d: %s", path, je.line, je.text);
    json_t *experts = json_object_get(root, "experts");
    t->n_layers = (int)json_integer_value(json_object_get(root, "n_layer"));
    t->n_expert = (int)json_integer_value(json_object_get(root, "n_expert"));
    t->n_used = (int)json_integer_value(json_object_get(root, "n_expert_used"));
    t->n_tokens = json_is_array(experts) ? (int)json_array_size(experts) : 0;
    int rc = 0;
    if (t->n_layers <= 0 || t->n_expert <= 0 || t->n_expert > 32767 || t->n_used <= 0 || !t->n_tokens)
        rc = sl_errf(err, "%s: needs n_layer, n_expert, n_expert_used and a non-empty experts array", path);
    if (!rc) {
        t->ids = malloc((size_t)t->n_tokens * t->n_layers * t->n_used * sizeof *t->ids);
        rc = t->ids ? load_ids(t, experts, path, err) : sl_errf(err, "%s: out of memory", path);
    }
    json_decref(root);
    if (rc) trace_free(t);
    return rc;
}

void trace_free(route_trace *t)
{
    free(t->ids);
    t->ids = NULL;
}

/* One layer of one token: pin what is used, admit misses, then unpin.
 * Returns the number of hits. */
static int replay_layer(expert_cache *c, const int16_t *ids, int n, int layer, int *slots)
{
    int hits = 0;
    for (int k = 0; k < n; k++) {
        int s = cache_find(c, layer, ids[k]);
        int64_t evicted;
        if (s >= 0) cache_hit(c, s), hits++;
        else s = cache_admit(c, layer, ids[k], &evicted);
        slots[k] = s;
    }
    for (int k = 0; k < n; k++)
        if (slots[k] >= 0) cache_unpin(c, slots[k]);
    return hits;
}

/* Loads the pinned keys into permanent slots of an empty cache. */
static int preload_pins(expert_cache *c, const replay_opts *o, int n_expert, sl_err *err)
{
    if (o->n_pinned > o->n_slots) return sl_errf(err, "trace: %d pinned experts exceed %d slots", o->n_pinned, o->n_slots);
    for (int i = 0; i < o->n_pinned; i++) {
        int64_t evicted;
        int s = cache_admit(c, o->pinned[i] / n_expert, o->pinned[i] % n_expert, &evicted);
        if (s < 0) return sl_errf(err, "trace: cannot pin expert key %d", o->pinned[i]);
        cache_unpin(c, s);
        cache_set_permanent(c, s);
    }
    return 0;
}

int trace_replay_ex(const route_trace *t, const replay_opts *o, cache_counters *out, sl_err *err)
{
    if (t->n_used > 64) return sl_errf(err, "trace: %d experts per token is more than supported", t->n_used);
    int end = o->end > 0 && o->end < t->n_tokens ? o->end : t->n_tokens;
    if (o->heat && (o->heat->n_layers != t->n_layers || o->heat->n_expert != t->n_expert))
        return sl_errf(err, "trace: heat is for %d x %d experts, the trace has %d x %d", o->heat->n_layers,
                       o->heat->n_expert, t->n_layers, t->n_expert);
    expert_cache *c;
    if (cache_create(&c, o->n_slots, t->n_layers, t->n_expert, o->policy, o->half_life, err)) return -1;
    if (o->heat) heat_seed_cache(o->heat, c, o->half_life);
    if (preload_pins(c, o, t->n_expert, err)) return cache_free(c), -1;
    int slots[64];
    *out = (cache_counters){0};
    uint64_t evict0 = cache_get_counters(c).evictions;
    for (int tok = o->start > 0 ? o->start : 0; tok < end; tok++) {
        if (tok == o->first) evict0 = cache_get_counters(c).evictions;
        cache_next_token(c);
        for (int l = 0; l < t->n_layers; l++) {
            int hits = replay_layer(c, trace_at(t, tok, l), t->n_used, l, slots);
            if (tok < o->first) continue;
            out->hits += (uint64_t)hits;
            out->misses += (uint64_t)(t->n_used - hits);
        }
    }
    out->evictions = cache_get_counters(c).evictions - evict0;
    cache_free(c);
    return 0;
}

int trace_replay(const route_trace *t, int n_slots, cache_policy policy, double half_life, int first,
                 cache_counters *out, sl_err *err)
{
    replay_opts o = {.n_slots = n_slots, .policy = policy, .half_life = half_life, .first = first};
    return trace_replay_ex(t, &o, out, err);
}

void trace_record_heat(const route_trace *t, int from, int to, heat_recorder *r)
{
    if (from < 0) from = 0;
    if (to > t->n_tokens) to = t->n_tokens;
    int32_t ids[64];
    for (int tok = from; tok < to; tok++)
        for (int l = 0; l < t->n_layers; l++) {
            const int16_t *s = trace_at(t, tok, l);
            int n = t->n_used < 64 ? t->n_used : 64;
            for (int k = 0; k < n; k++) ids[k] = s[k];
            heat_recorder_use(r, l, ids, n);
        }
}
