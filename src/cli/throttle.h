/* A known disk ceiling for benchmarks (sluice bench --throttle RATE): as
 * root, a cgroup-v1 blkio group that caps reads from the block devices
 * holding the given files (blkio.throttle.read_bps_device "MAJ:MIN
 * BYTES"), with this process moved into it; otherwise nothing here, and
 * the caller falls back to the store's simulated drive (store.h). */
#ifndef SLUICE_CLI_THROTTLE_H
#define SLUICE_CLI_THROTTLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    bool active;
    char dir[256];      /* the group's directory */
    char devices[128];  /* "254:0 8:16" */
} blkio_throttle;

/* Caps reads from the disks of PATHS[0..n) at BPS bytes/s.  Returns 0 and
 * t->active when the group is in place, 0 with !t->active (and WHY set)
 * when blkio cannot be used here (not root, no writable hierarchy), -1
 * (WHY set) when setting it up failed half-way. */
int blkio_throttle_start(blkio_throttle *t, const char *const *paths, int n, uint64_t bps, char *why, size_t cap);
/* Moves the process back to the root group and removes the group. */
void blkio_throttle_stop(blkio_throttle *t);

#endif
