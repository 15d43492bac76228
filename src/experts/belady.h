/* Belady's MIN: the fewest misses any cache of C entries can have on a
 * known sequence of accesses (evict the entry whose next use is farthest).
 * The reference an online policy is measured against: sluice replay
 * --policy opt, and the "optimum" figures of a streaming run (store.h). */
#ifndef SLUICE_BELADY_H
#define SLUICE_BELADY_H

#include <stdint.h>

#include "util/err.h"

/* KEYS[0..n) in [0, n_keys) are accessed in order through a cache of
 * CAPACITY entries that starts empty; MISS[i] = 1 where access i misses
 * under MIN.  Every access is demanded, so a missed entry is always
 * loaded (and may be the next one evicted).  Returns the miss count, or
 * -1 (err set) when memory runs out. */
int64_t belady_misses(const int32_t *keys, int64_t n, int64_t n_keys, int64_t capacity, uint8_t *miss,
                      sl_err *err);

#endif
