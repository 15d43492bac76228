#include "util/bigbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

enum { HUGE_MIN = 1 << 20, HUGE_PAGE = 2 << 20 };

/* Advises the whole 2 MiB pages of LEN bytes at P (2 MiB aligned) to use
 * huge pages, before the first touch, so the faults map huge pages
 * directly.  Only the whole ones: a huge page over the tail would make up
 * to 2 MiB of memory resident that the buffer does not use (and that
 * memory plans do not count). */
static void advise_huge(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
    size_t whole = len & ~(size_t)(HUGE_PAGE - 1);
    if (whole) (void)madvise(p, whole, MADV_HUGEPAGE);
#else
    (void)p, (void)len;
#endif
}

void *sl_big_alloc(size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX - HUGE_PAGE) return NULL;
    size_t len = (bytes + 63) & ~(size_t)63;
    if (bytes < HUGE_MIN) return aligned_alloc(64, len);
    void *p = NULL; /* posix_memalign: aligned_alloc wants len a multiple of the alignment */
    if (posix_memalign(&p, HUGE_PAGE, len) != 0) return NULL;
    advise_huge(p, len);
    return p;
}

void *sl_big_map(size_t bytes)
{
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096, len = (bytes + page - 1) & ~(page - 1);
    if (bytes == 0 || len < bytes || len > SIZE_MAX - HUGE_PAGE) return NULL;
    /* Over-map by one huge page and trim both ends: mmap only promises
     * 4 KiB alignment, and a huge page needs its 2 MiB one. */
    uint8_t *base = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > base) munmap(base, (size_t)(p - base));
    if (base + HUGE_PAGE > p) munmap(p + len, (size_t)(base + HUGE_PAGE - p));
    advise_huge(p, len);
    /* Resident now (what MAP_POPULATE did): a write faults each page in,
     * a huge page whole. */
    for (size_t off = 0; off < len; off += page) p[off] = 0;
    return p;
}
