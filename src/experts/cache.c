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
} key_rec;

typedef struct {
    int64_t key;       /* -1 when free */
    double prio;
    int32_t pins;
    bool permanent;
} slot_rec;

struct expert_cache {
    cache_policy policy;
    int n_slots, n_expert;
    int64_t n_keys;
    key_rec *keys;
    slot_rec *slots;
    int *free_list;
    int n_free;
    uint64_t uses;     /* LRU recency counter */
    uint32_t token;
    double decay;      /* per-token multiplier on counts */
    cache_counters ctr;
};

static const char *const POLICY_NAMES[] = {"lru", "lfru"};

const char *cache_policy_name(cache_policy p) { return POLICY_NAMES[p]; }

int cache_policy_parse(const char *name)
{
    for (int i = 0; i < 2; i++)
        if (!strcasecmp(name, POLICY_NAMES[i])) return i;
    return -1;
}

int cache_create(expert_cache **out, int n_slots, int n_layers, int n_expert, cache_policy policy,
                 double half_life, sl_err *err)
{
    if (n_slots < 0 || n_layers <= 0 || n_expert <= 0)
        return sl_errf(err, "expert cache: bad geometry (%d slots, %d layers, %d experts)", n_slots, n_layers,
                       n_expert);
    expert_cache *c = calloc(1, sizeof *c);
    if (!c) return sl_errf(err, "expert cache: out of memory");
    c->policy = policy;
    c->n_slots = n_slots;
    c->n_expert = n_expert;
    c->n_keys = (int64_t)n_layers * n_expert;
    c->keys = calloc((size_t)c->n_keys, sizeof *c->keys);
    c->slots = calloc((size_t)n_slots + 1, sizeof *c->slots);
    c->free_list = calloc((size_t)n_slots + 1, sizeof *c->free_list);
    if (!c->keys || !c->slots || !c->free_list) {
        cache_free(c);
        return sl_errf(err, "expert cache: out of memory");
    }
    for (int64_t k = 0; k < c->n_keys; k++) c->keys[k].slot = -1;
    for (int s = 0; s < n_slots; s++) {
        c->slots[s].key = -1;
        c->free_list[c->n_free++] = n_slots - 1 - s;
    }
    c->decay = half_life > 0 ? pow(0.5, 1.0 / half_life) : 1.0;
    *out = c;
    return 0;
}

void cache_free(expert_cache *c)
{
    if (!c) return;
    free(c->keys);
    free(c->slots);
    free(c->free_list);
    free(c);
}

int cache_slots(const expert_cache *c) { return c->n_slots; }
void cache_next_token(expert_cache *c) { c->token++; }

int cache_find(const expert_cache *c, int layer, int expert)
{
    return c->keys[(int64_t)layer * c->n_expert + expert].slot;
}

/* Brings a key's decayed count up to now and adds one use. */
static double count_use(expert_cache *c, key_rec *k, double add)
{
    uint32_t age = c->token - k->last;
    k->count = (float)(k->count * pow(c->decay, age) + add);
    k->last = c->token;
    return k->count;
}

/* LFRU priority: the decayed count compared at a common time.  All counts
 * decay by the same factor per token, so log(count) + last * ln(1/decay)
 * orders slots exactly as their counts would compare now, without
 * rescanning; recency enters through the decay. */
static void touch(expert_cache *c, int slot)
{
    slot_rec *s = &c->slots[slot];
    key_rec *k = &c->keys[s->key];
    double count = count_use(c, k, 1.0);
    s->prio = c->policy == CACHE_LRU ? (double)++c->uses : log(count) - (double)k->last * log(c->decay);
}

void cache_hit(expert_cache *c, int slot)
{
    c->ctr.hits++;
    touch(c, slot);
    c->slots[slot].pins++;
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

/* Takes a free slot or evicts the lowest-priority unpinned one for KEY;
 * returns -1 when every slot is pinned. */
static int claim(expert_cache *c, int64_t key, int64_t *evicted_key)
{
    int slot;
    *evicted_key = -1;
    if (c->n_free) {
        slot = c->free_list[--c->n_free];
    } else {
        slot = pick_victim(c);
        if (slot < 0) return -1;
        slot_rec *v = &c->slots[slot];
        c->keys[v->key].slot = -1;
        *evicted_key = v->key;
        c->ctr.evictions++;
    }
    c->slots[slot] = (slot_rec){.key = key, .pins = 1};
    c->keys[key].slot = slot;
    return slot;
}

int cache_admit(expert_cache *c, int layer, int expert, int64_t *evicted_key)
{
    int slot = claim(c, (int64_t)layer * c->n_expert + expert, evicted_key);
    if (slot < 0) return -1;
    c->ctr.misses++;
    touch(c, slot);
    return slot;
}

int cache_admit_prefetch(expert_cache *c, int layer, int expert, int64_t *evicted_key)
{
    int64_t key = (int64_t)layer * c->n_expert + expert;
    int slot = claim(c, key, evicted_key);
    if (slot < 0) return -1;
    key_rec *k = &c->keys[key];
    double count = count_use(c, k, 0.0);
    c->slots[slot].prio = c->policy == CACHE_LRU ? (double)c->uses
                                                 : log(count > 1e-30 ? count : 1e-30) - (double)k->last * log(c->decay);
    return slot;
}

void cache_pin(expert_cache *c, int slot) { c->slots[slot].pins++; }
void cache_unpin(expert_cache *c, int slot)
{
    if (c->slots[slot].pins > 0) c->slots[slot].pins--;
}
bool cache_pinned(const expert_cache *c, int slot) { return c->slots[slot].pins > 0; }

void cache_drop(expert_cache *c, int slot)
{
    slot_rec *s = &c->slots[slot];
    if (s->key < 0) return;
    c->keys[s->key].slot = -1;
    *s = (slot_rec){.key = -1};
    c->free_list[c->n_free++] = slot;
}

void cache_seed(expert_cache *c, int layer, int expert, double prior)
{
    count_use(c, &c->keys[(int64_t)layer * c->n_expert + expert], prior);
}

void cache_set_permanent(expert_cache *c, int slot) { c->slots[slot].permanent = true; }

cache_counters cache_get_counters(const expert_cache *c) { return c->ctr; }
