#include "experts/trace.h"

#include "experts/belady.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every token lists n_layers sets of n_used ids: checked before anything
 * is allocated, so the allocation is what the document holds, never what
 * its header claims. */
static int check_shape(const route_trace *t, json_t *experts, const char *path, sl_err *err)
{
    size_t ti;
    json_t *tok;
    json_array_foreach(experts, ti, tok) {
        if (!json_is_array(tok) || json_array_size(tok) != (size_t)t->n_layers)
            return sl_errf(err, "%s: experts[%zu] must list %d layers", path, ti, t->n_layers);
        for (int l = 0; l < t->n_layers; l++) {
            json_t *set = json_array_get(tok, (size_t)l);
            if (!json_is_array(set) || json_array_size(set) != (size_t)t->n_used)
                return sl_errf(err, "%s: experts[%zu][%d] must hold %d ids", path, ti, l, t->n_used);
        }
    }
    return 0;
}

static int load_ids(route_trace *t, json_t *experts, const char *path, sl_err *err)
{
    if (check_shape(t, experts, path, err)) return -1;
    t->ids = malloc((size_t)t->n_tokens * (size_t)t->n_layers * (size_t)t->n_used * sizeof *t->ids);
    if (!t->ids) return sl_errf(err, "%s: out of memory", path);
    size_t ti;
    json_t *tok;
    json_array_foreach(experts, ti, tok) {
        for (int l = 0; l < t->n_layers; l++) {
            json_t *set = json_array_get(tok, (size_t)l);
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

/* "predicted"[t][l]: at most n_used ids each, padded with -1. */
static int load_pred(route_trace *t, json_t *pred, const char *path, sl_err *err)
{
    if (!json_is_array(pred) || (int)json_array_size(pred) != t->n_tokens)
        return sl_errf(err, "%s: predicted must list %d tokens", path, t->n_tokens);
    size_t per = (size_t)t->n_layers * t->n_used;
    t->pred = malloc((size_t)t->n_tokens * per * sizeof *t->pred);
    if (!t->pred) return sl_errf(err, "%s: out of memory", path);
    for (size_t i = 0; i < (size_t)t->n_tokens * per; i++) t->pred[i] = -1;
    size_t ti;
    json_t *tok;
    json_array_foreach(pred, ti, tok) {
        if (!json_is_array(tok) || (int)json_array_size(tok) != t->n_layers)
            return sl_errf(err, "%s: predicted[%zu] must list %d layers", path, ti, t->n_layers);
        for (int l = 0; l < t->n_layers; l++) {
            json_t *set = json_array_get(tok, (size_t)l);
            if (!json_is_array(set) || (int)json_array_size(set) > t->n_used)
                return sl_errf(err, "%s: predicted[%zu][%d] must hold at most %d ids", path, ti, l, t->n_used);
            for (size_t k = 0; k < json_array_size(set); k++) {
                json_int_t e = json_integer_value(json_array_get(set, k));
                if (e < 0 || e >= t->n_expert)
                    return sl_errf(err, "%s: predicted[%zu][%d][%zu] = %lld out of range", path, ti, l, k,
                                   (long long)e);
                t->pred[ti * per + (size_t)l * t->n_used + k] = (int16_t)e;
            }
        }
    }
    return 0;
}

int trace_load(route_trace *t, const char *path, sl_err *err)
{
    t->ids = t->pred = NULL;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root && json_error_code(&je) == json_error_cannot_open_file)
        return sl_errf(err, "cannot open trace %s: %s", path, strerror(errno));
    if (!root) return sl_errf(err, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    json_t *experts = json_object_get(root, "experts");
    /* read wide, then bounded: a cast to int first would wrap a huge value into range */
    json_int_t nl = json_integer_value(json_object_get(root, "n_layer"));
    json_int_t ne = json_integer_value(json_object_get(root, "n_expert"));
    json_int_t nu = json_integer_value(json_object_get(root, "n_expert_used"));
    size_t nt = json_is_array(experts) ? json_array_size(experts) : 0;
    int rc = 0;
    if (nl <= 0 || nl > 65535 || ne <= 0 || ne > 32767 || nu <= 0 || nu > ne || !nt || nt > INT32_MAX)
        rc = sl_errf(err,
                     "%s: needs n_layer (1-65535), n_expert (1-32767), n_expert_used (1-n_expert) and a non-empty "
                     "experts array (n_layer %lld, n_expert %lld, n_expert_used %lld, %zu tokens)",
                     path, (long long)nl, (long long)ne, (long long)nu, nt);
    t->n_layers = (int)nl, t->n_expert = (int)ne, t->n_used = (int)nu, t->n_tokens = (int)nt;
    if (!rc) rc = load_ids(t, experts, path, err);
    json_t *pred = json_object_get(root, "predicted");
    if (!rc && pred) rc = load_pred(t, pred, path, err);
    json_decref(root);
    if (rc) trace_free(t);
    return rc;
}

void trace_free(route_trace *t)
{
    free(t->ids);
    free(t->pred);
    t->ids = t->pred = NULL;
}

/* One layer of one token: pin what is used, admit misses, then unpin.
 * Returns the number of hits. */
static int replay_layer(expert_cache *c, const int16_t *ids, int n, int layer, int *slots)
{
    int hits = 0;
    int32_t chosen[64];
    for (int k = 0; k < n; k++) chosen[k] = ids[k];
    cache_begin_layer(c, layer, chosen, n);
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

/* Belady's MIN over the replay range (heat and pins do not apply: it
 * already knows the future). */
static int replay_opt(const route_trace *t, const replay_opts *o, int end, cache_counters *out, sl_err *err)
{
    int start = o->start > 0 ? o->start : 0;
    int64_t per = (int64_t)t->n_layers * t->n_used, n = (end - start) * per;
    int32_t *keys = calloc((size_t)(n > 0 ? n : 1), sizeof *keys);
    uint8_t *miss = malloc((size_t)(n > 0 ? n : 1));
    if (!keys || !miss) return free(keys), free(miss), sl_errf(err, "trace: out of memory");
    for (int64_t i = 0; i < n; i++) {
        int64_t tok = start + i / per, l = (i % per) / t->n_used;
        keys[i] = (int32_t)(l * t->n_expert + t->ids[tok * per + i % per]);
    }
    int64_t rc = belady_misses(keys, n, (int64_t)t->n_layers * t->n_expert, o->n_slots, miss, err);
    *out = (cache_counters){0};
    int64_t from = o->first > start ? (o->first - start) * per : 0;
    for (int64_t i = from; rc >= 0 && i < n; i++) {
        if (miss[i]) out->misses++;
        else out->hits++;
    }
    out->evictions = 0;
    free(keys), free(miss);
    return rc < 0 ? -1 : 0;
}

/* Layer L's predictions for token TOK, made before L's router: hints. */
static void replay_hints(expert_cache *c, const route_trace *t, int tok, int l)
{
    if (!t->pred) return;
    const int16_t *p = t->pred + ((int64_t)tok * t->n_layers + l) * t->n_used;
    for (int k = 0; k < t->n_used; k++)
        if (p[k] >= 0) cache_hint(c, l, p[k]);
}

int trace_replay_ex(const route_trace *t, const replay_opts *o, cache_counters *out, sl_err *err)
{
    if (t->n_used > 64) return sl_errf(err, "trace: %d experts per token is more than supported", t->n_used);
    int end = o->end > 0 && o->end < t->n_tokens ? o->end : t->n_tokens;
    if (o->policy == CACHE_OPT) return replay_opt(t, o, end, out, err);
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
            if (o->hints) replay_hints(c, t, tok, l);
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

/* ---- recording ---- */

struct trace_rec {
    int n_layers, n_moe, n_expert, n_used;
    int *col;          /* [n_layers]: column of a MoE layer, or -1 */
    int32_t *layers;   /* [n_moe]: model layer of each column */
    int rows, cap, base, batch;
    bool failed;       /* out of memory once: the trace is incomplete */
    int32_t *tokens;   /* [cap] */
    int16_t *ids;      /* [cap][n_moe][n_used], -1 until routed */
    int16_t *pred;     /* [cap][n_moe][n_used], -1 where none */
};

int trace_rec_create(trace_rec **out, int n_layers, const bool *moe, int n_expert, int n_used, sl_err *err)
{
    if (n_layers <= 0 || n_expert <= 0 || n_expert > 32767 || n_used <= 0 || n_used > n_expert)
        return sl_errf(err, "trace: bad geometry (%d layers, %d experts, %d used)", n_layers, n_expert, n_used);
    trace_rec *r = calloc(1, sizeof *r);
    if (!r) return sl_errf(err, "trace: out of memory");
    r->col = malloc((size_t)n_layers * sizeof *r->col);
    r->layers = malloc((size_t)n_layers * sizeof *r->layers);
    if (!r->col || !r->layers) return trace_rec_free(r), sl_errf(err, "trace: out of memory");
    r->n_layers = n_layers, r->n_expert = n_expert, r->n_used = n_used;
    for (int l = 0; l < n_layers; l++) {
        r->col[l] = moe[l] ? r->n_moe : -1;
        if (moe[l]) r->layers[r->n_moe++] = l;
    }
    if (!r->n_moe) return trace_rec_free(r), sl_errf(err, "trace: the model has no MoE layer");
    *out = r;
    return 0;
}

void trace_rec_free(trace_rec *r)
{
    if (!r) return;
    free(r->col), free(r->layers), free(r->tokens), free(r->ids), free(r->pred);
    free(r);
}

static size_t row_ids(const trace_rec *r) { return (size_t)r->n_moe * r->n_used; }

static bool grow(trace_rec *r, int need)
{
    if (need <= r->cap) return true;
    int cap = r->cap ? r->cap : 256;
    while (cap < need) cap *= 2;
    int32_t *t = realloc(r->tokens, (size_t)cap * sizeof *t);
    if (t) r->tokens = t;
    int16_t *i = realloc(r->ids, (size_t)cap * row_ids(r) * sizeof *i);
    if (i) r->ids = i;
    int16_t *p = realloc(r->pred, (size_t)cap * row_ids(r) * sizeof *p);
    if (p) r->pred = p;
    if (!t || !i || !p) return false;
    r->cap = cap;
    return true;
}

void trace_rec_tokens(trace_rec *r, const int32_t *tokens, int T)
{
    if (r->failed || T <= 0) return;
    if (!grow(r, r->rows + T)) {
        r->failed = true;
        return;
    }
    r->base = r->rows, r->batch = T;
    for (int t = 0; t < T; t++) r->tokens[r->rows + t] = tokens[t];
    size_t n = (size_t)T * row_ids(r);
    for (size_t i = 0; i < n; i++) r->ids[(size_t)r->rows * row_ids(r) + i] = r->pred[(size_t)r->rows * row_ids(r) + i] = -1;
    r->rows += T;
}

void trace_rec_route(trace_rec *r, int layer, const int32_t *ids, int T, int K)
{
    if (r->failed || layer < 0 || layer >= r->n_layers || r->col[layer] < 0 || T != r->batch) return;
    int n = K < r->n_used ? K : r->n_used;
    for (int t = 0; t < T; t++) {
        int16_t *row = r->ids + (size_t)(r->base + t) * row_ids(r) + (size_t)r->col[layer] * r->n_used;
        for (int k = 0; k < n; k++) row[k] = (int16_t)ids[(size_t)t * K + k];
    }
}

void trace_rec_hint(trace_rec *r, int layer, const int32_t *ids, int n)
{
    if (r->failed || r->batch != 1 || layer < 0 || layer >= r->n_layers || r->col[layer] < 0) return;
    int16_t *row = r->pred + (size_t)r->base * row_ids(r) + (size_t)r->col[layer] * r->n_used;
    for (int k = 0; k < n && k < r->n_used; k++) row[k] = (int16_t)ids[k];
}

int trace_rec_rows(const trace_rec *r) { return r->rows; }

/* One row's sets as [[a,b,..],[..],..]; with SORTED the ids ascend (the
 * shared schema's order); -1 entries are left out. */
static void write_row(FILE *f, const trace_rec *r, const int16_t *row, bool sorted)
{
    fputc('[', f);
    for (int c = 0; c < r->n_moe; c++) {
        int16_t v[64];
        int n = 0;
        for (int k = 0; k < r->n_used && n < 64; k++)
            if (row[(size_t)c * r->n_used + k] >= 0) v[n++] = row[(size_t)c * r->n_used + k];
        for (int i = 1; sorted && i < n; i++)
            for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
                int16_t x = v[j];
                v[j] = v[j - 1], v[j - 1] = x;
            }
        fprintf(f, "%s[", c ? "," : "");
        for (int k = 0; k < n; k++) fprintf(f, "%s%d", k ? "," : "", v[k]);
        fputc(']', f);
    }
    fputc(']', f);
}

int trace_rec_write(const trace_rec *r, const char *path, const char *model, sl_err *err)
{
    if (r->failed) return sl_errf(err, "%s: trace incomplete (out of memory after %d positions)", path, r->rows);
    FILE *f = fopen(path, "w");
    if (!f) return sl_errf(err, "%s: cannot write the trace: %s", path, strerror(errno));
    fprintf(f, "{\"description\":\"sluice run --trace-out: experts[t][l] = sorted ids chosen for position t at MoE "
               "layer layers[l]; predicted[t][l] = the pilot's prediction for single-token evaluations\",\n");
    fputs("\"model\":\"", f);
    for (const char *p = model ? model : ""; *p; p++)
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if ((unsigned char)*p >= 0x20) fputc(*p, f);
    fprintf(f, "\",\n\"n_layer\":%d,\"n_expert\":%d,\"n_expert_used\":%d,\n\"layers\":[", r->n_moe, r->n_expert,
            r->n_used);
    for (int c = 0; c < r->n_moe; c++) fprintf(f, "%s%d", c ? "," : "", r->layers[c]);
    fputs("],\n\"token_ids\":[", f);
    for (int t = 0; t < r->rows; t++) fprintf(f, "%s%d", t ? "," : "", r->tokens[t]);
    fputs("],\n\"experts\":[", f);
    for (int t = 0; t < r->rows; t++) {
        if (t) fputs(",\n", f);
        write_row(f, r, r->ids + (size_t)t * row_ids(r), true);
    }
    fputs("],\n\"predicted\":[", f);
    for (int t = 0; t < r->rows; t++) {
        if (t) fputs(",\n", f);
        write_row(f, r, r->pred + (size_t)t * row_ids(r), false);
    }
    fputs("]}\n", f);
    int bad = ferror(f);
    if (fclose(f) || bad) return sl_errf(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}
