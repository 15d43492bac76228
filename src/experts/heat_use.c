/* Recording a run's expert uses, and using heat: pinned-tier choice and
 * LFRU seeding. */
#include "experts/heat.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Decay inside a run is exact but lazy: a use in pass p adds d^-p (the
 * running `scale`), and a snapshot multiplies by d^P, so each use weighs
 * d^(P-p) without touching every count every pass.  The scale is folded
 * back in long before it could overflow. */
struct heat_recorder {
    uint8_t id[HEAT_ID_BYTES];
    int n_layers, n_expert, last_layer;
    double half_life, decay; /* per pass */
    double scale;            /* d^-passes, up to renormalisation */
    double wsum;             /* sum of scale over passes */
    uint64_t passes;         /* since the last save */
    double *acc;             /* [n_layers * n_expert] */
};

int heat_recorder_create(heat_recorder **out, const uint8_t id[HEAT_ID_BYTES], int n_layers, int n_expert,
                         double half_life, sl_err *err)
{
    if (n_layers <= 0 || n_expert <= 0 || (int64_t)n_layers * n_expert > (1 << 24))
        return sl_errf(err, "heat: bad geometry %d layers x %d experts", n_layers, n_expert);
    heat_recorder *r = calloc(1, sizeof *r);
    if (r) r->acc = calloc((size_t)n_layers * (size_t)n_expert, sizeof *r->acc);
    if (!r || !r->acc) {
        heat_recorder_free(r);
        return sl_errf(err, "heat: out of memory");
    }
    memcpy(r->id, id, HEAT_ID_BYTES);
    r->n_layers = n_layers, r->n_expert = n_expert;
    r->last_layer = INT_MAX;
    r->half_life = half_life > 0 ? half_life : 0;
    r->decay = half_life > 0 ? pow(0.5, 1.0 / half_life) : 1.0;
    r->scale = 1.0;
    *out = r;
    return 0;
}

void heat_recorder_free(heat_recorder *r)
{
    if (!r) return;
    free(r->acc);
    free(r);
}

static void renormalise(heat_recorder *r)
{
    size_t n = (size_t)r->n_layers * (size_t)r->n_expert;
    for (size_t i = 0; i < n; i++) r->acc[i] /= r->scale;
    r->wsum /= r->scale;
    r->scale = 1.0;
}

static void new_pass(heat_recorder *r)
{
    r->passes++;
    r->scale /= r->decay;
    if (r->scale > 0x1p200) renormalise(r);
    r->wsum += r->scale;
}

void heat_recorder_use(heat_recorder *r, int layer, const int32_t *ids, int n)
{
    if (layer < 0 || layer >= r->n_layers) return;
    if (layer <= r->last_layer) new_pass(r);
    r->last_layer = layer;
    double *row = r->acc + (int64_t)layer * r->n_expert;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < r->n_expert) row[ids[i]] += r->scale;
}

uint64_t heat_recorder_pending(const heat_recorder *r) { return r->passes; }

int heat_recorder_snapshot(const heat_recorder *r, heat_table *delta, sl_err *err)
{
    if (heat_table_init(delta, r->id, r->n_layers, r->n_expert, err)) return -1;
    size_t n = (size_t)r->n_layers * (size_t)r->n_expert;
    for (size_t i = 0; i < n; i++) delta->count[i] = (float)(r->acc[i] / r->scale);
    delta->passes = r->passes;
    delta->weight = r->wsum / r->scale;
    delta->half_life = r->half_life;
    delta->created = delta->updated = (int64_t)time(NULL);
    return 0;
}

int heat_recorder_flush(heat_recorder *r, const char *path, sl_err *warn)
{
    heat_table delta;
    if (heat_recorder_snapshot(r, &delta, warn)) return -1;
    int rc = heat_save_merge(path, &delta, r->half_life, warn);
    heat_table_free(&delta);
    if (rc < 0) return rc;
    memset(r->acc, 0, (size_t)r->n_layers * (size_t)r->n_expert * sizeof *r->acc);
    r->scale = 1.0, r->wsum = 0, r->passes = 0;
    return rc;
}

/* ---- pinned tier ---- */

heat_pin_opts heat_pin_defaults(void) { return (heat_pin_opts){.min_passes = 512, .layer_cap = 0}; }

typedef struct {
    double rate;
    int32_t key;
} ranked;

static int by_rate_desc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->rate != y->rate) return x->rate < y->rate ? 1 : -1;
    return x->key < y->key ? -1 : x->key > y->key; /* deterministic ties */
}

/* Fills KEYS from the ranked list, at most PER_LAYER from any one layer. */
static int take_pins(const heat_table *h, const ranked *rk, int n_rk, int max, int per_layer, int32_t *keys,
                     double *share)
{
    int *taken = calloc((size_t)h->n_layers, sizeof *taken), n = 0;
    double uses = 0, all = 0;
    for (int i = 0; i < n_rk; i++) all += rk[i].rate;
    for (int i = 0; i < n_rk && n < max && taken; i++) {
        int layer = rk[i].key / h->n_expert;
        if (taken[layer] >= per_layer) continue;
        taken[layer]++;
        keys[n++] = rk[i].key;
        uses += rk[i].rate;
    }
    free(taken);
    *share = all > 0 ? uses / all : 0;
    return n;
}

int heat_pick_pins(const heat_table *h, int max, const heat_pin_opts *o, int32_t *keys, char *note, size_t cap)
{
    char dummy[8];
    if (!note) note = dummy, cap = sizeof dummy;
    if (max <= 0) return snprintf(note, cap, "no experts pinned: no pin budget"), 0;
    if (h->passes < o->min_passes)
        return snprintf(note, cap, "no experts pinned: %llu forward passes of history, %llu needed",
                        (unsigned long long)h->passes, (unsigned long long)o->min_passes),
               0;
    int64_t nk = (int64_t)h->n_layers * h->n_expert;
    ranked *rk = malloc((size_t)nk * sizeof *rk);
    if (!rk) return snprintf(note, cap, "no experts pinned: out of memory"), 0;
    int n_rk = 0;
    for (int64_t k = 0; k < nk; k++)
        if (h->count[k] > 0) rk[n_rk++] = (ranked){h->count[k] / (h->weight > 0 ? h->weight : 1), (int32_t)k};
    qsort(rk, (size_t)n_rk, sizeof *rk, by_rate_desc);
    int per_layer = o->layer_cap > 0 ? (int)ceil(o->layer_cap * max) : max;
    if (per_layer < 1) per_layer = 1;
    double share;
    int n = take_pins(h, rk, n_rk, max, per_layer, keys, &share);
    free(rk);
    snprintf(note, cap, "pinned %d experts (budget %d) from %llu forward passes; they took %.1f%% of recorded uses",
             n, max, (unsigned long long)h->passes, 100.0 * share);
    return n;
}

/* ---- LFRU seeding ---- */

/* Pseudo-passes at the layer's mean rate added to every expert, so a short
 * history cannot make a rarely seen expert look certain. */
static const double SEED_SHRINK_PASSES = 32;

void heat_seed_cache(const heat_table *h, expert_cache *c, double cache_half_life)
{
    if (h->weight <= 0) return;
    /* steady state of a count that gains `rate` per pass and decays by d */
    double gain = cache_half_life > 0 ? 1.0 / (1.0 - pow(0.5, 1.0 / cache_half_life)) : h->weight;
    for (int l = 0; l < h->n_layers; l++) {
        const float *row = h->count + (int64_t)l * h->n_expert;
        double sum = 0;
        for (int e = 0; e < h->n_expert; e++) sum += row[e];
        double mean = sum / h->weight / h->n_expert;
        for (int e = 0; e < h->n_expert; e++) {
            double rate = (row[e] + SEED_SHRINK_PASSES * mean) / (h->weight + SEED_SHRINK_PASSES);
            if (rate > 0) cache_seed(c, l, e, rate * gain);
        }
    }
}

/* ---- a run's heat ---- */

int heat_session_open(heat_session *s, const gguf_file *g, const char *path, int n_layers, int n_expert,
                      double half_life, sl_err *warn)
{
    *s = (heat_session){.save_every = HEAT_SAVE_EVERY};
    uint8_t id[HEAT_ID_BYTES];
    heat_model_id(g, id);
    int n = path ? snprintf(s->path, sizeof s->path, "%s", path) : 0;
    if (n < 0 || (size_t)n >= sizeof s->path) return sl_errf(warn, "heat disabled: path too long: %s", path);
    if (!path && heat_default_path(id, s->path, sizeof s->path, warn))
        return sl_err_wrap(warn, "heat disabled");
    if (heat_recorder_create(&s->rec, id, n_layers, n_expert, half_life, warn)) return sl_err_wrap(warn, "heat disabled");
    s->warned = heat_load(&s->table, s->path, id, n_layers, n_expert, warn) == HEAT_IGNORED;
    return s->warned;
}

static int session_save(heat_session *s, sl_err *warn)
{
    int rc = heat_recorder_flush(s->rec, s->path, warn);
    if (rc == 1 && s->warned) rc = 0; /* the file open() warned about, now replaced */
    if (rc >= 0) s->warned = 0;
    return rc;
}

int heat_session_tick(heat_session *s, sl_err *warn)
{
    if (!s->rec || heat_recorder_pending(s->rec) < s->save_every) return 0;
    return session_save(s, warn);
}

int heat_session_close(heat_session *s, sl_err *warn)
{
    int rc = s->rec && heat_recorder_pending(s->rec) ? session_save(s, warn) : 0;
    heat_recorder_free(s->rec);
    heat_table_free(&s->table);
    s->rec = NULL;
    return rc;
}
