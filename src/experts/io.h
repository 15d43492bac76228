/* Asynchronous reads for the expert store.  A backend takes read requests
 * (fd, offset, length, destination, tag), keeps up to `depth` of them in
 * flight, and hands back completions one at a time in whatever order the
 * device finishes them.  Demand reads (prio 0) always go to the device
 * before queued prefetch reads (prio 1), and a prefetch read goes to its
 * device only into idle time: while no demand read is queued, nor in flight
 * on its device (st_dev: a pack's drives are separate devices), and with at
 * most `prefetch_depth` prefetch reads in flight there, so a demand read
 * that arrives waits behind at most that many (io_set_prefetch_depth).
 * Queued prefetch reads can be promoted to demand (the router asked for
 * them) or dropped (it did not).
 *
 *  - uring: io_uring (liburing), one ring, the caller reaps completions;
 *    reads are O_DIRECT, so nothing is cached twice (FIELD.md: mmap faults
 *    serialise the SSD at queue depth ~1; explicit parallel reads were 5x
 *    faster).
 *  - pread: a pool of threads doing pread(), for kernels without io_uring. */
#ifndef SLUICE_IO_H
#define SLUICE_IO_H

#include <stdint.h>

#include "util/err.h"

typedef struct {
    int fd;
    uint64_t off;
    uint32_t len;
    uint8_t prio;   /* 0 = demand, 1 = prefetch */
    void *dst;
    uint64_t tag;   /* returned with the completion */
} io_req;

/* A finished read: its tag and offset, the bytes read or -errno, and how
 * long reads of its fd have been at the device (handed to the kernel and
 * not landed; -1 where not measured), summed up to when this one landed:
 * a drive's busy time without the time its reads waited in the queue. */
typedef struct {
    uint64_t tag;
    uint64_t off;
    int64_t res;
    double busy_s;
} io_done;

typedef struct io_backend io_backend;

enum { IO_KEEP = 0, IO_PROMOTE = 1, IO_DROP = 2 };

/* What the device did, counted where reads go to it and come back (not
 * where the caller reaps them, which may be a whole layer's compute later). */
typedef struct {
    double busy_s;                   /* time with at least one read at the device */
    uint64_t demand_reads;           /* demand reads given to the device (promoted guesses included) */
    uint64_t demand_behind_prefetch; /* ... of which found a prefetch read already at the device */
} io_counters;
/* Two chunks: a demand read arriving behind them waits 2 MiB at most. */
enum { IO_DEFAULT_PREFETCH_DEPTH = 2 };

typedef struct {
    /* Queues N requests; they reach the device as depth allows.  All or
     * nothing: on failure (err set) none of them was queued, and every
     * request queued earlier still completes exactly once. */
    int (*submit)(io_backend *b, const io_req *reqs, int n, sl_err *err);
    /* Blocks for one completion.  Returns -1 (err set) if nothing is queued
     * or in flight. */
    int (*wait)(io_backend *b, io_done *d, sl_err *err);
    /* Like wait, but returns 0 at once when no read has completed yet
     * (1 when it handed one out, -1 on error). */
    int (*poll)(io_backend *b, io_done *d, sl_err *err);
    /* Requests queued or in flight. */
    int (*pending)(const io_backend *b);
    /* Visits every queued prefetch request not yet given to the device,
     * first with COUNT (may be NULL), then with DECIDE, which returns
     * IO_KEEP, IO_PROMOTE (moves it to the demand queue) or IO_DROP (it will
     * never be read or completed).  No request reaches the device between
     * the two passes, so what COUNT saw as queued still is. */
    void (*requeue)(io_backend *b, void (*count)(void *ctx, const io_req *r),
                    int (*decide)(void *ctx, const io_req *r), void *ctx);
    /* Most prefetch reads at one device at once (>= 1). */
    void (*set_prefetch_depth)(io_backend *b, int depth);
    /* The counters so far (io_counters). */
    void (*counters)(io_backend *b, io_counters *out);
    void (*destroy)(io_backend *b);
} io_ops;

struct io_backend {
    const io_ops *ops;
};

/* Creates an io_uring backend; fails (err set) where io_uring is unavailable. */
int io_uring_create(io_backend **out, int depth, sl_err *err);
/* Creates a pread thread-pool backend with N threads. */
int io_pread_create(io_backend **out, int threads, sl_err *err);

/* Simulated drives, for tests and benchmarks: reads of fds[i] are held
 * back so that fd delivers at most rates[i] bytes/s, one read after the
 * other like a drive of that bandwidth (each fd keeps a clock of when it
 * is next free).  Other fds are not held back. */
enum { IO_THROTTLE_MAX = 16 };
typedef struct {
    int n;
    int fds[IO_THROTTLE_MAX];
    double rates[IO_THROTTLE_MAX];
} io_throttle;

/* A pread backend (N threads) with the throttle T applied (copied). */
int io_pread_throttled_create(io_backend **out, int threads, const io_throttle *t, sl_err *err);

#endif
