/* What the sluice commands hand sluice_open beyond the public options (the
 * library's own front end needs a few settings an embedder has no use for). */
#ifndef SLUICE_API_INT_H
#define SLUICE_API_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice.h"

typedef struct {
    int32_t n_ctx_cap; /* cap on the default context (0: 4096); the bundled models get 512 */
    bool verify;       /* check every pack record's checksum on read (--verify) */
    /* test hook for the expert store: a nonzero return fails that read */
    int (*fault)(void *ctx, uint32_t file, uint64_t off, uint32_t len);
    void *fault_ctx;
    int policy;             /* expert cache policy (cache.h), when policy_set (--cache-policy) */
    bool policy_set;
    const char *trace_out;  /* --trace-out: routing trace file (sluice_write_trace) */
    int prefetch_admit;     /* which guesses the store reads (experts/admit.h; 0: cost) */
} sluice_open_extra;

int sluice_open_ex(sluice **out, const sluice_options *o, const sluice_open_extra *x, char *err, size_t err_cap);

/* The reason generation stopped last, as the CLI's JSON names it ("eog",
 * "limit", "stop", "ctx", "caller"). */
const char *sluice_stop_name(sluice_stop s);

/* Writes the routing trace of everything evaluated so far to the
 * sluice_open_extra.trace_out file (a no-op without one; once). */
int sluice_write_trace(sluice *s, char *err, size_t err_cap);

#endif
