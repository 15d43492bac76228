/* --kv-dir: finished conversations' contexts saved to disk (with
 * sluice_state_save), named by a hash of their tokens, so a conversation
 * continues after a restart without paying its prefill again.  The total
 * size is bounded; the least recently used files go first.  A file that is
 * damaged or of another model is ignored with a warning (and never loaded:
 * sluice_state_load checks the model identity and the checksum). */
#ifndef SLUICE_SERVER_KVDIR_H
#define SLUICE_SERVER_KVDIR_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "util/err.h"

typedef struct kvdir kvdir;

/* Opens DIR (created if missing) and indexes the files SL can load. */
int kvdir_open(kvdir **out, sluice *sl, const char *dir, uint64_t max_bytes, sl_err *err);
void kvdir_close(kvdir *k);

/* Restores into SL the saved context that shares the longest prefix with
 * IDS (N tokens) when it beats the HAVE tokens the context already shares;
 * returns the tokens it shares (HAVE when nothing better was loaded). */
size_t kvdir_restore(kvdir *k, sluice *sl, const int32_t *ids, size_t n, size_t have);

/* Saves SL's context (after a finished generation); saved contexts it
 * extends are removed, then the oldest until the total fits. */
void kvdir_save(kvdir *k, sluice *sl);

#endif
