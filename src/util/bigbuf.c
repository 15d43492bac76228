#include "util/bigbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

enum { HUGE_MIN = 1 << 20, HUGE_ALIGN = 2 << 20 };

void *sl_big_alloc(size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX - HUGE_ALIGN) return NULL;
    if (bytes < HUGE_MIN) return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    size_t len = (bytes + HUGE_ALIGN - 1) & ~(size_t)(HUGE_ALIGN - 1);
    void *p = aligned_alloc(HUGE_ALIGN, len);
#ifdef MADV_HUGEPAGE
    /* before the first touch, so the faults map huge pages directly */
    if (p) (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}
