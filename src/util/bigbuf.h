/* Large, read-mostly buffers (model weights, in-RAM experts). */
#ifndef SLUICE_BIGBUF_H
#define SLUICE_BIGBUF_H

#include <stddef.h>

/* BYTES bytes (rounded up to 64), 64-byte aligned, released with free().
 * Buffers of 1 MiB or more are 2 MiB aligned and their whole 2 MiB pages
 * are advised to use transparent huge pages: decode streams every weight
 * once per token, and with 4 KiB pages a page walk every 4 KiB costs
 * measurable bandwidth (docs/PERF.md).  The advice is a hint: where the
 * kernel refuses it, the buffer is ordinary memory.  No more memory becomes
 * resident than BYTES rounded to 4 KiB.  NULL when out of memory or BYTES
 * is 0. */
void *sl_big_alloc(size_t bytes);

/* BYTES bytes of zeroed memory, all resident on return (the expert cache's
 * slots: a budget counts them from the start), mapped at a 2 MiB boundary
 * with their whole 2 MiB pages advised to use transparent huge pages, as
 * sl_big_alloc's are.  Released with munmap(p, BYTES).  NULL when out of
 * memory or BYTES is 0. */
void *sl_big_map(size_t bytes);

#endif
