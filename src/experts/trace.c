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

int trace_replay(const route_trace *t, int n_slots, cache_policy policy, double half_life, int first,
                 cache_counters *out, sl_err *err)
{
    if (t->n_used > 64) return sl_errf(err, "trace: %d experts per token is more than supported", t->n_used);
    expert_cache *c;
    if (cache_create(&c, n_slots, t->n_layers, t->n_expert, policy, half_life, err)) return -1;
    int slots[64];
    *out = (cache_counters){0};
    uint64_t evict0 = 0;
    for (int tok = 0; tok < t->n_tokens; tok++) {
        if (tok == first) evict0 = cache_get_counters(c).evictions;
        cache_next_token(c);
        for (int l = 0; l < t->n_layers; l++) {
            int hits = replay_layer(c, trace_at(t, tok, l), t->n_used, l, slots);
            if (tok < first) continue;
            out->hits += (uint64_t)hits;
            out->misses += (uint64_t)(t->n_used - hits);
        }
    }
    out->evictions = cache_get_counters(c).evictions - evict0;
    cache_free(c);
    return 0;
}
