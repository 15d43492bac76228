#include "experts/cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Per (layer, expert): where it lives and its decayed use count. */
typedef struct {
    int32_t slot;      /* -1 when not cached */
    uint32_t last;     /* token of the last use */
    float count;       /* decayed uses as of `last` */
    uint8_t hinted;    /* predicted for its layer's next turn (AHEAD) */
} key_rec;

typedef struct {
    int64_t key;       /* -1 when free */
    double prio;
    int32_t pins;
    int32_t hpos;      /* AHEAD: index in its layer's heap, or -1 */
    bool permanent;
} slot_rec;

struct expert_cache {
    cache_policy policy;
    int n_slots, n_layers, n_expert;
    int64_t n_keys;
    key_rec *keys;
    slot_rec *slots;
    int *free_list;
    int n_free;
    uint64_t uses;     /* LRU recency counter */
    uint32_t token;
    double decay;      /* per-token multiplier on counts */
    cache_counters ctr;
    /* AHEAD */
    int layer;         /* the layer whose router decided last */
    int32_t *heap;     /* [n_layers][n_expert]: unpinned, unhinted slots by prio */
    int32_t *heap_n;   /* [n_layers] */
    int32_t *hint_list;/* [n_layers][n_expert]: experts hinted per layer */
    int32_t *hint_n;   /* [n_layers] */
    double uses_total; /* for the base rate of a key with no history */
    double hint_prec;  /* EMA: share of hinted experts that were used */
    double miss_ratio; /* EMA: use rate of unhinted experts of a hinted layer / the layer's rate */
};

static const char *const POLICY_NAMES[CACHE_N_POLICIES] = {"lru", "lfru", "ahead", "opt"};

const char *cache_policy_name(cache_policy p) { return POLICY_NAMES[p]; }

int cache_policy_parse(const char *name)
{
    for (int i = 0; i < CACHE_N_POLICIES; i++)
        if (!strcasecmp(name, POLICY_NAMES[i])) return i;
    return -1;
}

int cache_create(expert_cache **out, int n_slots, int n_layers, int n_expert, cache_policy policy,
                 double half_life, sl_err *err)
{
    if (n_slots < 0 || n_layers <= 0 || n_expert <= 0)
        return sl_errf(err, "expert cache: bad geometry (%d slots, %d layers, %d experts)", n_slots, n_layers,
                       n_expert);
    if (policy == CACHE_OPT || (unsigned)policy >= CACHE_N_POLICIES)
        return sl_errf(err, "expert cache: policy '%s' needs the future; it exists only in trace replays",
                       (unsigned)policy < CACHE_N_POLICIES ? POLICY_NAMES[policy] : "?");
    expert_cache *c = calloc(1, sizeof *c);
    if (!c) return sl_errf(err, "expert cache: out of memory");
    c->policy = policy;
    c->n_slots = n_slots;
    c->n_layers = n_layers;
    c->n_expert = n_expert;
    c->n_keys = (int64_t)n_layers * n_expert;
    c->keys = calloc((size_t)c->n_keys, sizeof *c->keys);
    c->slots = calloc((size_t)n_slots + 1, sizeof *c->slots);
    c->free_list = calloc((size_t)n_slots + 1, sizeof *c->free_list);
    c->heap = malloc((size_t)c->n_keys * sizeof *c->heap);
    c->hint_list = malloc((size_t)c->n_keys * sizeof *c->hint_list);
    c->heap_n = calloc((size_t)n_layers, sizeof *c->heap_n);
    c->hint_n = calloc((size_t)n_layers, sizeof *c->hint_n);
    if (!c->keys || !c->slots || !c->free_list || !c->heap || !c->hint_list || !c->heap_n || !c->hint_n) {
        cache_free(c);
        return sl_errf(err, "expert cache: out of memory");
    }
    for (int64_t k = 0; k < c->n_keys; k++) c->keys[k].slot = -1;
    for (int s = 0; s < n_slots; s++) {
        c->slots[s].key = -1;
        c->slots[s].hpos = -1;
        c->free_list[c->n_free++] = n_slots - 1 - s;
    }
    c->decay = half_life > 0 ? pow(0.5, 1.0 / half_life) : 1.0;
    c->hint_prec = 0.75;
    c->miss_ratio = 0.3;
    *out = c;
    return 0;
}

void cache_free(expert_cache *c)
{
    if (!c) return;
    free(c->keys);
    free(c->slots);
    free(c->free_list);
    free(c->heap);
    free(c->heap_n);
    free(c->hint_list);
    free(c->hint_n);
    free(c);
}

int cache_slots(const expert_cache *c) { return c->n_slots; }
void cache_next_token(expert_cache *c) { c->token++; }

int cache_find(const expert_cache *c, int layer, int expert)
{
    return c->keys[(int64_t)layer * c->n_expert + expert].slot;
}

/* ---- AHEAD's per-layer heaps: min-heaps of slots by prio ---- */

static int key_layer(const expert_cache *c, int64_t key) { return (int)(key / c->n_expert); }

static int32_t *layer_heap(expert_cache *c, int layer) { return c->heap + (int64_t)layer * c->n_expert; }

static void heap_put(expert_cache *c, int32_t *h, int i, int slot)
{
    h[i] = slot;
    c->slots[slot].hpos = i;
}

static void heap_up(expert_cache *c, int32_t *h, int i)
{
    int slot = h[i];
    double p = c->slots[slot].prio;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (c->slots[h[up]].prio <= p) break;
        heap_put(c, h, i, h[up]);
        i = up;
    }
    heap_put(c, h, i, slot);
}

static void heap_down(expert_cache *c, int32_t *h, int n, int i)
{
    int slot = h[i];
    double p = c->slots[slot].prio;
    for (;;) {
        int l = 2 * i + 1, best = i;
        double bp = p;
        if (l < n && c->slots[h[l]].prio < bp) best = l, bp = c->slots[h[l]].prio;
        if (l + 1 < n && c->slots[h[l + 1]].prio < bp) best = l + 1;
        if (best == i) break;
        heap_put(c, h, i, h[best]);
        i = best;
    }
    heap_put(c, h, i, slot);
}

static void heap_remove(expert_cache *c, int slot)
{
    slot_rec *s = &c->slots[slot];
    int layer = key_layer(c, s->key), i = s->hpos;
    int32_t *h = layer_heap(c, layer);
    int last = h[--c->heap_n[layer]];
    s->hpos = -1;
    if (last == slot) return;
    heap_put(c, h, i, last);
    heap_up(c, h, i);
    heap_down(c, h, c->heap_n[layer], c->slots[last].hpos);
}

/* Puts SLOT in, takes it out of, or reorders it in its layer's heap after
 * any change of its key, pins, priority or hint. */
static void heap_sync(expert_cache *c, int slot)
{
    if (c->policy != CACHE_AHEAD) return;
    slot_rec *s = &c->slots[slot];
    bool want = s->key >= 0 && !s->pins && !s->permanent && !c->keys[s->key].hinted;
    if (s->hpos >= 0) heap_remove(c, slot);
    if (!want) return;
    int layer = key_layer(c, s->key);
    int32_t *h = layer_heap(c, layer);
    int i = c->heap_n[layer]++;
    heap_put(c, h, i, slot);
    heap_up(c, h, i);
}

/* ---- counts ---- */

/* Brings a key's decayed count up to now and adds one use. */
static double count_use(expert_cache *c, key_rec *k, double add)
{
    uint32_t age = c->token - k->last;
    k->count = (float)(k->count * pow(c->decay, age) + add);
    k->last = c->token;
    return k->count;
}

/* The decayed count compared at a common time.  All counts decay by the
 * same factor per token, so log(count) + last * ln(1/decay) orders keys
 * exactly as their counts would compare now, without rescanning. */
static double count_prio(const expert_cache *c, const key_rec *k, double count)
{
    return log(count > 1e-30 ? count : 1e-30) - (double)k->last * log(c->decay);
}

static void touch(expert_cache *c, int slot)
{
    slot_rec *s = &c->slots[slot];
    key_rec *k = &c->keys[s->key];
    double count = count_use(c, k, 1.0);
    c->uses_total += 1.0;
    s->prio = c->policy == CACHE_LRU ? (double)++c->uses : count_prio(c, k, count);
}

/* ---- AHEAD's estimate of the next use ---- */

/* Per-token use rate of KEY: its decayed count over the tokens that count
 * covers, pulled toward the average rate while its history is short. */
static double use_rate(const expert_cache *c, const key_rec *k)
{
    double window = c->decay < 1.0 ? 1.0 / (1.0 - c->decay) : (double)c->token + 1.0;
    double seen = (double)c->token + 1.0;
    if (seen < window) window = seen;
    double base = c->uses_total / (seen * (double)c->n_keys);
    if (base <= 0) base = 1.0 / (double)c->n_expert;
    double now = k->count * pow(c->decay, (double)(c->token - k->last));
    enum { PRIOR_TOKENS = 2 };
    double p = (now + PRIOR_TOKENS * base) / (window + PRIOR_TOKENS);
    return p < 1e-6 ? 1e-6 : p > 1.0 ? 1.0 : p;
}

/* Steps of the layer cycle until LAYER's next turn, seen from the layer
 * that routed last: 1 for the next layer, n_layers for that layer itself. */
static int steps_to(const expert_cache *c, int layer)
{
    return (layer - c->layer - 1 + 2 * c->n_layers) % c->n_layers + 1;
}

/* Expected steps until KEY is used: its next turn, then (1 - q) times the
 * mean gap n_layers / p (a geometric wait over later turns). */
static double next_use(const expert_cache *c, int64_t key)
{
    const key_rec *k = &c->keys[key];
    int layer = key_layer(c, key);
    double p = use_rate(c, k), q = p;
    if (k->hinted) q = c->hint_prec;
    else if (c->hint_n[layer]) q = p * c->miss_ratio;
    return steps_to(c, layer) + (1.0 - q) * (double)c->n_layers / p;
}

/* The unpinned slot whose expert is expected to be needed last: the
 * least-used expert of each layer is that layer's candidate. */
static int ahead_victim(const expert_cache *c, double *when)
{
    int best = -1;
    double far = -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->heap_n[l]) continue;
        int slot = c->heap[(int64_t)l * c->n_expert];
        double t = next_use(c, c->slots[slot].key);
        if (t > far) far = t, best = slot;
    }
    if (best < 0) /* only predicted experts left: the least used of them */
        for (int s = 0; s < c->n_slots; s++) {
            const slot_rec *r = &c->slots[s];
            if (r->key < 0 || r->pins || r->permanent) continue;
            double t = next_use(c, r->key);
            if (t > far) far = t, best = s;
        }
    *when = far;
    return best;
}

void cache_begin_layer(expert_cache *c, int layer, const int32_t *ids, int n)
{
    c->layer = layer;
    if (c->policy != CACHE_AHEAD) return;
    int nh = c->hint_n[layer];
    if (!nh) return;
    int32_t *list = c->hint_list + (int64_t)layer * c->n_expert;
    int used = 0;
    for (int i = 0; i < n; i++) used += c->keys[(int64_t)layer * c->n_expert + ids[i]].hinted;
    /* how good the predictions are, for the next ones */
    const double w = 1.0 / 32;
    c->hint_prec += w * ((double)used / nh - c->hint_prec);
    if (c->n_expert > nh) {
        double unhinted = (double)(n - used) / (c->n_expert - nh), all = (double)n / c->n_expert;
        if (all > 0) c->miss_ratio += w * (unhinted / all - c->miss_ratio);
    }
    c->hint_n[layer] = 0;
    for (int i = 0; i < nh; i++) {
        key_rec *k = &c->keys[(int64_t)layer * c->n_expert + list[i]];
        k->hinted = 0;
        if (k->slot >= 0) heap_sync(c, k->slot);
    }
}

void cache_hint(expert_cache *c, int layer, int expert)
{
    if (c->policy != CACHE_AHEAD) return;
    key_rec *k = &c->keys[(int64_t)layer * c->n_expert + expert];
    if (k->hinted) return;
    k->hinted = 1;
    c->hint_list[(int64_t)layer * c->n_expert + c->hint_n[layer]++] = expert;
    if (k->slot >= 0) heap_sync(c, k->slot);
}

double cache_hint_precision(const expert_cache *c) { return c->hint_prec; }

/* ---- hits, admits, eviction ---- */

void cache_hit(expert_cache *c, int slot)
{
    c->ctr.hits++;
    touch(c, slot);
    c->slots[slot].pins++;
    heap_sync(c, slot);
}

static int pick_victim(const expert_cache *c)
{
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        const slot_rec *r = &c->slots[s];
        if (r->pins || r->permanent) continue;
        if (best < 0 || r->prio < c->slots[best].prio) best = s;
    }
    return best;
}

/* Takes a free slot or evicts VICTIM for KEY. */
static int claim_slot(expert_cache *c, int64_t key, int victim, int64_t *evicted_key)
{
    int slot;
    *evicted_key = -1;
    if (c->n_free) {
        slot = c->free_list[--c->n_free];
    } else {
        slot = victim;
        slot_rec *v = &c->slots[slot];
        if (v->hpos >= 0) heap_remove(c, slot);
        c->keys[v->key].slot = -1;
        *evicted_key = v->key;
        c->ctr.evictions++;
    }
    c->slots[slot] = (slot_rec){.key = key, .pins = 1, .hpos = -1};
    c->keys[key].slot = slot;
    return slot;
}

/* The slot to evict next (-1: every slot pinned); *when gets AHEAD's
 * expected steps until its expert is needed. */
static int victim(const expert_cache *c, double *when)
{
    *when = 0;
    if (c->n_free) return -2;
    return c->policy == CACHE_AHEAD ? ahead_victim(c, when) : pick_victim(c);
}

int cache_admit(expert_cache *c, int layer, int expert, int64_t *evicted_key)
{
    double when;
    int v = victim(c, &when);
    *evicted_key = -1;
    if (v == -1) return -1;
    int slot = claim_slot(c, (int64_t)layer * c->n_expert + expert, v, evicted_key);
    c->ctr.misses++;
    touch(c, slot);
    return slot;
}

int cache_admit_prefetch(expert_cache *c, int layer, int expert, int64_t *evicted_key)
{
    int64_t key = (int64_t)layer * c->n_expert + expert;
    double when;
    int v = victim(c, &when);
    *evicted_key = -1;
    if (v == -1) return -1;
    if (c->policy == CACHE_AHEAD) {
        cache_hint(c, layer, expert);
        /* Belady's rule for an optional read: only displace an expert
         * expected to be needed later than this one */
        if (v >= 0 && when <= next_use(c, key)) return -1;
    }
    int slot = claim_slot(c, key, v, evicted_key);
    key_rec *k = &c->keys[key];
    double count = count_use(c, k, 0.0);
    c->slots[slot].prio = c->policy == CACHE_LRU ? (double)c->uses : count_prio(c, k, count);
    return slot;
}

void cache_pin(expert_cache *c, int slot)
{
    if (c->slots[slot].pins++ == 0) heap_sync(c, slot);
}

void cache_unpin(expert_cache *c, int slot)
{
    if (c->slots[slot].pins > 0 && --c->slots[slot].pins == 0) heap_sync(c, slot);
}

bool cache_pinned(const expert_cache *c, int slot) { return c->slots[slot].pins > 0; }

void cache_drop(expert_cache *c, int slot)
{
    slot_rec *s = &c->slots[slot];
    if (s->key < 0) return;
    if (s->hpos >= 0) heap_remove(c, slot);
    c->keys[s->key].slot = -1;
    *s = (slot_rec){.key = -1, .hpos = -1};
    c->free_list[c->n_free++] = slot;
}

void cache_seed(expert_cache *c, int layer, int expert, double prior)
{
    key_rec *k = &c->keys[(int64_t)layer * c->n_expert + expert];
    count_use(c, k, prior);
    if (k->slot >= 0 && c->policy != CACHE_LRU) {
        c->slots[k->slot].prio = count_prio(c, k, k->count);
        heap_sync(c, k->slot);
    }
}

void cache_set_permanent(expert_cache *c, int slot)
{
    c->slots[slot].permanent = true;
    heap_sync(c, slot);
}

cache_counters cache_get_counters(const expert_cache *c) { return c->ctr; }
