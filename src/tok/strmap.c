/* String -> int32 hash map for token and merge lookups.  Slots hold only a
 * hash tag and the value; the key is fetched through a callback from the
 * vocabulary's own storage, so a 200k-token vocabulary costs 8 bytes a slot. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tok/tok_internal.h"

uint64_t tok_hash(const char *s, size_t len) { return XXH3_64bits(s, len); }

uint64_t tok_hash_pair(const char *a, size_t la, const char *b, size_t lb)
{
    return XXH3_64bits_withSeed(b, lb, XXH3_64bits(a, la));
}

int strmap_init(strmap *m, size_t expected)
{
    m->cap = 16;
    while (m->cap < expected * 2 && m->cap < (1u << 31)) m->cap <<= 1;
    m->n = 0;
    m->tag = calloc(m->cap, sizeof *m->tag);
    m->val = malloc(m->cap * sizeof *m->val);
    if (!m->tag || !m->val) {
        strmap_free(m);
        return -1;
    }
    return 0;
}

void strmap_free(strmap *m)
{
    free(m->tag);
    free(m->val);
    m->tag = NULL;
    m->val = NULL;
    m->cap = m->n = 0;
}

static uint32_t tag_of(uint64_t h) { return (uint32_t)(h >> 32) | 1u; }

static bool same_key(const strmap *m, uint32_t i, const char *s, size_t len, strmap_key_fn key_of,
                     const void *ctx)
{
    size_t kl;
    const char *k = key_of(ctx, m->val[i], &kl);
    return kl == len && !memcmp(k, s, len);
}

int32_t strmap_put(strmap *m, uint64_t h, int32_t val, const char *s, size_t len, strmap_key_fn key_of,
                   const void *ctx)
{
    uint32_t t = tag_of(h), mask = m->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        if (!m->tag[i]) {
            m->tag[i] = t;
            m->val[i] = val;
            m->n++;
            return -1;
        }
        if (m->tag[i] == t && same_key(m, i, s, len, key_of, ctx)) return m->val[i];
    }
}

int32_t strmap_get(const strmap *m, uint64_t h, const char *s, size_t len, strmap_key_fn key_of, const void *ctx)
{
    uint32_t t = tag_of(h), mask = m->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        if (!m->tag[i]) return -1;
        if (m->tag[i] == t && same_key(m, i, s, len, key_of, ctx)) return m->val[i];
    }
}
