#include "experts/belady.h"

#include <stdlib.h>

/* A max-heap of (next use, key) with stale entries skipped when popped:
 * an entry is current while its key is cached and still has that next use. */
typedef struct {
    int64_t when;
    int32_t key;
} entry;

static void push(entry *h, int64_t *n, entry e)
{
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t up = (i - 1) / 2;
        if (h[up].when >= e.when) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = e;
}

static entry pop(entry *h, int64_t *n)
{
    entry top = h[0], last = h[--*n];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, best = l;
        if (l >= *n) break;
        if (l + 1 < *n && h[l + 1].when > h[l].when) best = l + 1;
        if (h[best].when <= last.when) break;
        h[i] = h[best];
        i = best;
    }
    if (*n > 0) h[i] = last;
    return top;
}

int64_t belady_misses(const int32_t *keys, int64_t n, int64_t n_keys, int64_t capacity, uint8_t *miss,
                      sl_err *err)
{
    int64_t *next = malloc((size_t)(n > 0 ? n : 1) * sizeof *next);
    int64_t *seen = malloc((size_t)n_keys * sizeof *seen); /* next access of a key, then its current next use */
    uint8_t *cached = calloc((size_t)n_keys, 1);
    entry *heap = malloc((size_t)(n > 0 ? n : 1) * sizeof *heap);
    if (!next || !seen || !cached || !heap) {
        free(next), free(seen), free(cached), free(heap);
        return sl_errf(err, "belady: out of memory for %lld accesses", (long long)n);
    }
    const int64_t NEVER = INT64_MAX;
    for (int64_t k = 0; k < n_keys; k++) seen[k] = NEVER;
    for (int64_t i = n - 1; i >= 0; i--) next[i] = seen[keys[i]], seen[keys[i]] = i;
    int64_t n_heap = 0, n_cached = 0, misses = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t k = keys[i];
        miss[i] = !cached[k];
        if (miss[i]) {
            misses++;
            if (capacity <= 0) continue;
            while (n_cached >= capacity) {
                entry e = pop(heap, &n_heap);
                if (cached[e.key] && seen[e.key] == e.when) cached[e.key] = 0, n_cached--;
            }
            cached[k] = 1, n_cached++;
        }
        seen[k] = next[i];
        push(heap, &n_heap, (entry){next[i], k});
    }
    free(next), free(seen), free(cached), free(heap);
    return misses;
}
