#include "util/bigbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

enum { HUGE_MIN = 1 << 20, HUGE_PAGE = 2 << 20 };

void *sl_big_alloc(size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX - HUGE_PAGE) return NULL;
    size_t len = (bytes + 63) & ~(size_t)63;
    if (bytes < HUGE_MIN) return aligned_alloc(64, len);
    void *p = NULL; /* posix_memalign: aligned_alloc wants len a multiple of the alignment */
    if (posix_memalign(&p, HUGE_PAGE, len) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    /* Before the first touch, so the faults map huge pages directly.  Only
     * the whole huge pages: a huge page over the tail would make up to 2 MiB
     * of memory resident that the buffer does not use (and that memory
     * plans do not count). */
    size_t whole = len & ~(size_t)(HUGE_PAGE - 1);
    if (whole) (void)madvise(p, whole, MADV_HUGEPAGE);
#endif
    return p;
}
