/* Software prefetch of the next 16-row weight group, shared by the AVX2 and
 * AVX-512 kernels (only SSE's prefetch instruction is used). */
#ifndef SLUICE_ROW_PREFETCH_H
#define SLUICE_ROW_PREFETCH_H

#include <stddef.h>
#include <stdint.h>
#include <xmmintrin.h>

/* The L2 prefetch below lands the next group in L2, but the 16 rows of a
 * group are still 16 strided streams into L1, which the core's own
 * prefetchers follow badly: the loads of a memory-bound kernel (Q8_0, one
 * token) waited on L2 every block.  So rows [i0, i1) are also fetched into
 * L1 about 128 bytes ahead: blocks under a line every S-th block, S blocks
 * being about a line (now and then a line is left to the L2 copy), larger
 * ones a point every 64 bytes.  Kernels whose one-token speed is bound by
 * their arithmetic (the nibble types, Q2_K, Q3_K: hot and cold speed about
 * equal) are slowed by the extra instructions and do not call it. */
static inline __attribute__((always_inline)) void
prefetch_ahead_l1(const uint8_t *const *rows, int64_t b, size_t bsz, int i0, int i1)
{
    size_t d = (128 + bsz - 1) / bsz;
    if (bsz < 64) {
        if ((size_t)b % ((64 + bsz / 2) / bsz)) return;
        for (int r = i0; r < i1; r++) _mm_prefetch((const char *)rows[r] + ((size_t)b + d) * bsz + bsz - 1, _MM_HINT_T0);
        return;
    }
    for (size_t o = 0; o < bsz; o += 64)
        for (int r = i0; r < i1; r++) _mm_prefetch((const char *)rows[r] + ((size_t)b + d) * bsz + o, _MM_HINT_T0);
}

/* The 16 rows of a group are one contiguous chunk (rows[15] + row_bytes is
 * the next group).  While block b of this group is computed, fetch the b-th
 * slice of the next group's chunk, so it streams in sequentially one group
 * ahead instead of as 16 strided streams.  The slice is fetched in N parts,
 * part I before the I-th piece of the block's work, so the prefetches spread
 * over the computation instead of queueing for the L1 fill buffers at the
 * start of the block; into L2 (T1), since T0 prefetches hold those buffers
 * longer.  Measured, 1 thread, cold 768x2048 Q4_K: 8.3 GB/s without
 * prefetching, 9.9 with the whole slice at the block start (T1), 12.2 spread
 * over the 16 rows.  always_inline: as an ordinary function GCC finds it
 * pure (a prefetch has no side effects) and deletes the calls. */
static inline __attribute__((always_inline)) void
prefetch_next(const uint8_t *const *rows, int64_t b, size_t bsz, int i, int n)
{
    size_t row_bytes = (size_t)(rows[1] - rows[0]);
    if (row_bytes == 0) return; /* single-row tail group */
    const char *next = (const char *)rows[0] + 16 * row_bytes + (size_t)b * 16 * bsz;
    size_t nl = (16 * bsz + 63) / 64;
    for (size_t l = nl * (size_t)i / (size_t)n; l < nl * (size_t)(i + 1) / (size_t)n; l++)
        _mm_prefetch(next + 64 * l, _MM_HINT_T1);
}

#endif
