/* Raw random-read bandwidth of the disk under a file: O_DIRECT reads of a
 * given (expert-like) size at random aligned offsets, QUEUE_DEPTH in flight
 * through io_uring.  This is the ceiling streaming is measured against
 * ("achieved / raw bandwidth"), taken on the very file and disk in use. */
#ifndef SLUICE_PROBE_H
#define SLUICE_PROBE_H

#include <stdint.h>

#include "util/err.h"

typedef struct {
    double gbps;        /* 1e9 bytes per second */
    uint64_t bytes;
    double seconds;
    uint32_t read_size;
    int depth;
    int direct;         /* 0 if O_DIRECT was unavailable (then it's not raw) */
} probe_result;

int disk_probe(const char *path, uint32_t read_size, int depth, double seconds, probe_result *out, sl_err *err);

#endif
