/* The multi-drive read scheduler: which drive reads the next chunk.
 *
 * An expert held on several drives is read in chunks, and every chunk goes
 * to the drive holding it that would finish it first: the one with the
 * smallest (bytes in flight + chunk) / rate.  Demand and prefetch reads go
 * through the same choice (FIELD.md: deltafin's unbalanced prefetch path
 * cost 24-33%).
 *
 * Rates are measured online, not configured: a drive's rate is the bytes
 * it completed divided by the time it was busy (had reads at the device),
 * both summed with exponential decay over windows of at least `window`
 * bytes (so recent behaviour dominates).  Busy time rather than per-read
 * latency, because with many reads queued a read's latency is mostly
 * waiting behind the others.  The busy time is the I/O backend's, counted
 * from when a read reaches the device (io_done.busy_s), not from planning
 * it: guesses held back for a drive's idle time, or demand reads queued
 * behind a full ring, are not the drive being slow (counted from planning,
 * a 600 MB/s drive measured 162-612 MB/s, docs/PACK.md).  Until a drive
 * has a measurement it is assumed as fast as the average measured drive
 * (or the prior when none is measured), so the first reads split evenly.
 *
 * The caller passes the busy times in, which keeps the scheduler a pure
 * function of its events: tests drive it with simulated drives. */
#ifndef SLUICE_SCHED_H
#define SLUICE_SCHED_H

#include <stdint.h>

#include "util/err.h"

typedef struct {
    double rate;          /* measured bytes/s (valid once samples > 0) */
    uint64_t inflight;    /* bytes submitted and not yet completed */
    uint64_t bytes;       /* bytes ever assigned */
    uint64_t reads;       /* chunks ever assigned */
    uint64_t samples;     /* rate measurements taken */
    double busy_s;        /* busy time in the current window */
    double busy_total;    /* busy time ever (the last one reported) */
    uint64_t window_bytes;/* bytes completed in the current window */
    double sum_bytes, sum_busy; /* decayed sums over closed windows */
} sched_drive;

typedef struct {
    int n;
    sched_drive *d;
    double prior;         /* bytes/s assumed before any measurement */
    uint64_t window;      /* bytes per rate sample */
    double alpha;         /* weight of the newest window in the decayed sums */
} drive_sched;

int sched_init(drive_sched *s, int n_drives, sl_err *err);
void sched_free(drive_sched *s);

/* Rate used for DRIVE's expected finish time: measured, else the mean of
 * the measured drives, else the prior. */
double sched_rate(const drive_sched *s, int drive);

/* Among the N candidate drives CAND, the one that would finish LEN more
 * bytes first; ties go to the earlier candidate.  -1 if N is 0. */
int sched_pick(const drive_sched *s, const uint32_t *cand, int n, uint64_t len);

/* LEN bytes were planned on DRIVE. */
void sched_submit(drive_sched *s, int drive, uint64_t len);
/* LEN bytes planned on DRIVE will not be read (dropped before the device). */
void sched_drop(drive_sched *s, int drive, uint64_t len);
/* LEN bytes completed on DRIVE, whose reads have been at the device for
 * BUSY_TOTAL seconds in all so far (< 0: not measured, the bytes count
 * without time). */
void sched_complete(drive_sched *s, int drive, uint64_t len, double busy_total);

#endif
