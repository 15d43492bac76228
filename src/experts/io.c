#include "experts/io.h"
#include "util/clock.h"
#include "util/fault.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- a two-class FIFO of requests not yet given to the device ---- */

typedef struct {
    io_req *q;
    int cap, head, n;
} fifo;

/* Most requests one backend holds at once (queued, in flight, completed and
 * not yet handed out): far above any store's need, low enough that no size
 * computation below can overflow. */
enum { IO_MAX_HELD = 1 << 24 };

/* Room for EXTRA more requests, so the pushes that follow cannot fail. */
static int fifo_reserve(fifo *f, int extra)
{
    if (extra < 0 || extra > IO_MAX_HELD - f->n) return -1;
    if (f->n + extra <= f->cap) return 0;
    int cap = f->cap ? f->cap : 64;
    while (cap < f->n + extra) cap *= 2;
    io_req *q = malloc((size_t)cap * sizeof *q);
    if (!q) return -1;
    for (int i = 0; i < f->n; i++) q[i] = f->q[(f->head + i) % f->cap];
    free(f->q);
    f->q = q, f->cap = cap, f->head = 0;
    return 0;
}

static int fifo_push(fifo *f, const io_req *r)
{
    if (f->n == f->cap && fifo_reserve(f, 1)) return -1;
    f->q[(f->head + f->n) % f->cap] = *r;
    f->n++;
    return 0;
}

static bool fifo_pop(fifo *f, io_req *r)
{
    if (!f->n) return false;
    *r = f->q[f->head];
    f->head = (f->head + 1) % f->cap;
    f->n--;
    return true;
}

typedef struct {
    fifo cls[2]; /* [prio] */
} queue;

static int queue_push(queue *q, const io_req *r) { return fifo_push(&q->cls[r->prio ? 1 : 0], r); }

/* Queues all N requests or (out of memory) none of them. */
static int queue_push_all(queue *q, const io_req *reqs, int n)
{
    int demand = 0;
    for (int i = 0; i < n; i++) demand += reqs[i].prio == 0;
    if (fifo_reserve(&q->cls[0], demand) || fifo_reserve(&q->cls[1], n - demand)) return -1;
    for (int i = 0; i < n; i++) queue_push(q, &reqs[i]); /* cannot fail now */
    return 0;
}

/* Applies DECIDE to every queued prefetch request, keeping their order. */
static void queue_requeue(queue *q, void (*count)(void *ctx, const io_req *r),
                          int (*decide)(void *ctx, const io_req *r), void *ctx)
{
    fifo *f = &q->cls[1];
    int n = f->n, kept = 0;
    for (int i = 0; count && i < n; i++) count(ctx, &f->q[(f->head + i) % f->cap]);
    for (int i = 0; i < n; i++) {
        io_req r = f->q[(f->head + i) % f->cap];
        int d = decide(ctx, &r);
        if (d == IO_PROMOTE) {
            r.prio = 0;
            if (fifo_push(&q->cls[0], &r) == 0) continue;
            r.prio = 1; /* no memory to move it: it stays a prefetch */
            d = IO_KEEP;
        }
        if (d == IO_KEEP) f->q[(f->head + kept++) % f->cap] = r;
    }
    f->n = kept;
}
static int queue_len(const queue *q) { return q->cls[0].n + q->cls[1].n; }
static void queue_free(queue *q) { free(q->cls[0].q), free(q->cls[1].q); }

/* ---- devices: a prefetch read goes into its own device's idle time ----
 *
 * A pack's drives are separate disks: while the slow one still serves a
 * layer's demand reads, the fast one may read guesses.  Held back until no
 * demand read was in flight anywhere, the fast drive of a two-drive pack
 * idled, and its reads waiting here counted as busy time in the drive
 * scheduler's rate, which then sent replicated chunks to the slow drive
 * (docs/PACK.md).  Files on one disk are one device (st_dev).  An fd
 * number reused for another file keeps its first device: only the gating
 * is affected, never what is read. */
enum { IO_DEVS = 16, IO_FDS = 64 };

/* Per file, how long its reads have been at the device (given to it and
 * not landed): io_done.busy_s, from which a pack's drive scheduler measures
 * each drive's rate.  Counted from the hand-over, not from the caller's
 * submit: a guess held back here for the device's idle time is not the
 * drive being slow. */
typedef struct {
    int n;
    double since, busy;
} fd_meter;

typedef struct {
    dev_t id[IO_DEVS];
    int n, demand[IO_DEVS], prefetch[IO_DEVS]; /* reads in flight on each */
    int fd[IO_FDS], fd_dev[IO_FDS], n_fd;
    fd_meter fm[IO_FDS];
} devices;

/* FD's device index; past IO_DEVS devices (or without fstat) all share 0. */
static int dev_lookup(devices *d, int fd)
{
    struct stat st;
    int k = 0;
    if (fstat(fd, &st) == 0) {
        while (k < d->n && d->id[k] != st.st_dev) k++;
        if (k == d->n && d->n < IO_DEVS) d->id[d->n++] = st.st_dev;
        if (k == IO_DEVS) k = 0;
    }
    return k;
}

/* FD's entry in the table, added if new; -1 past IO_FDS files. */
static int fd_index(devices *d, int fd)
{
    for (int i = 0; i < d->n_fd; i++)
        if (d->fd[i] == fd) return i;
    if (d->n_fd == IO_FDS) return -1;
    d->fd[d->n_fd] = fd, d->fd_dev[d->n_fd] = dev_lookup(d, fd);
    d->fm[d->n_fd] = (fd_meter){0};
    return d->n_fd++;
}

/* The device of FD, whose table entry is I (or -1). */
static int dev_at(devices *d, int i, int fd) { return i < 0 ? dev_lookup(d, fd) : d->fd_dev[i]; }

static int dev_of(devices *d, int fd) { return dev_at(d, fd_index(d, fd), fd); }

static void dev_count(devices *d, int k, const io_req *r, int step)
{
    if (r->prio) d->prefetch[k] += step;
    else d->demand[k] += step;
}

/* Read R went to the device at time T: counts it on its device and starts
 * its file's busy time.  Returns the guesses that were already in flight
 * on that device (meter_start). */
static int dev_issue(devices *d, const io_req *r, double t)
{
    int i = fd_index(d, r->fd), k = dev_at(d, i, r->fd), before = d->prefetch[k];
    dev_count(d, k, r, 1);
    if (i >= 0 && d->fm[i].n++ == 0) d->fm[i].since = t;
    return before;
}

/* Read R landed at time T: uncounts it and returns its file's busy time up
 * to T (-1 if the file is past the table). */
static double dev_land(devices *d, const io_req *r, double t)
{
    int i = fd_index(d, r->fd);
    dev_count(d, dev_at(d, i, r->fd), r, -1);
    if (i < 0 || d->fm[i].n <= 0) return -1;
    fd_meter *m = &d->fm[i];
    double busy = m->busy + (t > m->since ? t - m->since : 0);
    if (--m->n == 0) m->busy = busy;
    return busy;
}

/* A prefetch read may go to device K: no demand read there, fewer than CAP
 * guesses. */
static bool dev_idle(const devices *d, int k, int cap) { return !d->demand[k] && d->prefetch[k] < cap; }

/* Learns the devices of requests being queued, so that pop_prefetch's
 * early out (no known device idle) never skips an unseen one. */
static void dev_note(devices *d, const io_req *reqs, int n)
{
    for (int i = 0; i < n; i++) dev_of(d, reqs[i].fd);
}

/* Takes the first queued prefetch read whose device is idle, keeping the
 * order of the others. */
static bool pop_prefetch(fifo *f, devices *d, int cap, io_req *r)
{
    bool any = d->n == 0;
    for (int k = 0; k < d->n && !any; k++) any = dev_idle(d, k, cap);
    for (int i = 0; any && i < f->n; i++) {
        const io_req *c = &f->q[(f->head + i) % f->cap];
        if (!dev_idle(d, dev_of(d, c->fd), cap)) continue;
        *r = *c;
        for (int j = i; j > 0; j--) f->q[(f->head + j) % f->cap] = f->q[(f->head + j - 1) % f->cap];
        f->head = (f->head + 1) % f->cap;
        f->n--;
        return true;
    }
    return false;
}

/* ---- what the device did (io_counters) ---- */

typedef struct {
    io_counters c;
    double since; /* when the device last went from idle to busy */
} dev_meter;

/* Read R goes to the device; INFLIGHT reads were in flight on any device,
 * INFLIGHT_PREFETCH guesses on R's own: a demand read that finds a guess
 * there waits for it (a serial drive) or shares the bandwidth with it. */
static void meter_start(dev_meter *m, const io_req *r, int inflight, int inflight_prefetch)
{
    if (!inflight) m->since = sl_now();
    if (r->prio) return;
    m->c.demand_reads++;
    m->c.demand_behind_prefetch += inflight_prefetch > 0;
}

/* A read left the device at time T, which now has INFLIGHT reads. */
static void meter_stop(dev_meter *m, int inflight, double t)
{
    if (!inflight) m->c.busy_s += (t > m->since ? t : m->since) - m->since;
}

static void meter_get(const dev_meter *m, int inflight, io_counters *out)
{
    *out = m->c;
    if (inflight) out->busy_s += sl_now() - m->since; /* the busy stretch in progress */
}

/* ---- io_uring ---- */

/* The ring's user_data is an index into `slot`, which remembers each
 * request's tag and class. */
typedef struct {
    io_backend base;
    struct io_uring ring;
    int depth, inflight, prefetch_depth;
    devices dev;
    queue waiting;
    io_req *slot;   /* [depth] */
    uint32_t *done; /* [depth] bytes of a slot's read already landed (a short completion resubmitted) */
    uint8_t *tries; /* [depth] transient failures in a row */
    double *issued; /* [depth] when the slot's read went to the device */
    int *free_slot, n_free;
    /* io_uring does not say when a read landed, only that it had by the
     * time it is reaped.  One reaped by poll landed after the last poll
     * that found nothing (the store polls after every expert's compute),
     * so a read landing during compute with no call in between (attention)
     * is not counted busy until the next poll (uring_landed).  One reaped
     * by wait landed just now. */
    dev_meter meter;
    double last_empty;  /* when a poll last found no completion */
    bool polling;       /* uring_take called from poll */
} uring_io;

/* Reads in flight that the caller's own io_uring_enter hands to the block
 * layer; the kernel's io-wq workers issue the ones past them (IOSQE_ASYNC).
 * A block queue has a fixed number of requests (nr_requests, 256 on this
 * VM's virtio disk), and a submit that finds none free sleeps in
 * blk_mq_get_tag until a read completes: in the compute thread, while the
 * pool's other thread waits at the next join (the deep queue of a prompt
 * pass, 256 in flight, did: perf's sched_switch call chains).  A
 * 600-token prefill ran 1.10-1.16x faster with the reads past the first
 * 64 left to io-wq (docs/CACHE.md).  The first ones stay
 * inline, so a decode step's few reads reach the device without a
 * worker's hand-off. */
enum { URING_INLINE = 64 };

/* Demand first; a prefetch only while its device has no demand read. */
static bool uring_pop(uring_io *u, io_req *r)
{
    return fifo_pop(&u->waiting.cls[0], r) || pop_prefetch(&u->waiting.cls[1], &u->dev, u->prefetch_depth, r);
}

static int uring_fill(uring_io *u, sl_err *err)
{
    io_req r;
    int added = 0;
    double now = sl_now();
    while (u->inflight < u->depth && uring_pop(u, &r)) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
        if (!sqe) { /* cannot happen with ring entries >= depth; keep the request
                     * (its place was just freed, so the push cannot fail) */
            queue_push(&u->waiting, &r);
            break;
        }
        int i = u->free_slot[--u->n_free];
        u->slot[i] = r;
        meter_start(&u->meter, &r, u->inflight, dev_issue(&u->dev, &r, now));
        u->issued[i] = now;
        io_uring_prep_read(sqe, r.fd, r.dst, r.len, r.off);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
        if (u->inflight >= URING_INLINE) io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
        u->inflight++, added++;
    }
    if (added) {
        int rc = io_uring_submit(&u->ring);
        if (rc < 0) return sl_errf(err, "io_uring_submit failed: %s", strerror(-rc));
    }
    return 0;
}

static int uring_pending(const io_backend *b);

static int uring_submit(io_backend *b, const io_req *reqs, int n, sl_err *err)
{
    uring_io *u = (uring_io *)b;
    if (n < 0 || n > IO_MAX_HELD - uring_pending(b) || queue_push_all(&u->waiting, reqs, n))
        return sl_errf(err, "io: out of memory queueing %d reads", n);
    dev_note(&u->dev, reqs, n);
    return uring_fill(u, err);
}

/* A completion the device may give for a read that is fine (EINTR, EAGAIN,
 * or fewer bytes than asked before the end of the file): reads the rest in
 * the same slot.  Returns 1 if it did, 0 if the result stands. */
static int uring_again(uring_io *u, int i, int64_t res)
{
    enum { MAX_TRIES = 16 }; /* transient failures in a row before the errno stands */
    io_req *r = &u->slot[i];
    bool transient = res == -EINTR || res == -EAGAIN;
    if (!(transient || (res > 0 && res < r->len)) || u->tries[i] >= MAX_TRIES) return 0;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring); /* its own entry was just reaped */
    if (!sqe) return 0;
    if (transient) {
        u->tries[i]++;
    } else {
        u->tries[i] = 0;
        u->done[i] += (uint32_t)res;
        r->off += (uint64_t)res, r->len -= (uint32_t)res, r->dst = (char *)r->dst + res;
    }
    io_uring_prep_read(sqe, r->fd, r->dst, r->len, r->off);
    io_uring_sqe_set_data64(sqe, (uint64_t)i);
    return io_uring_submit(&u->ring) >= 0;
}

/* When the read in slot I, just reaped, landed (see uring_io.meter): by
 * wait, now; by poll, between the last empty poll (or the read's issue,
 * if later: a read issued by the refill after a reap lands after it) and
 * now: the midpoint. */
static double uring_landed(const uring_io *u, int i)
{
    double now = sl_now(), lo = u->last_empty > u->issued[i] ? u->last_empty : u->issued[i];
    return u->polling ? (lo + now) / 2 : now;
}

/* Takes completion CQE: hands it out (returns 0, *D set) and refills the
 * ring, or reads the rest of a short or interrupted read (returns 1). */
static int uring_take(uring_io *u, struct io_uring_cqe *cqe, io_done *d, sl_err *err)
{
    int i = (int)io_uring_cqe_get_data64(cqe);
    int64_t res = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    size_t got = res > 0 ? (size_t)res : 0;
    int fault = sl_fault_hit(SL_FAULT_URING, &got); /* test builds only */
    if (fault) res = -fault;
    else if (res > 0) res = (int64_t)got;
    if (uring_again(u, i, res)) return 1;
    const io_req *r = &u->slot[i];
    uint32_t before = u->done[i];
    double landed = uring_landed(u, i);
    *d = (io_done){.tag = r->tag, .off = r->off - before, .res = res >= 0 ? res + before : before ? before : res,
                   .busy_s = dev_land(&u->dev, r, landed)};
    u->done[i] = 0, u->tries[i] = 0;
    u->inflight--;
    u->free_slot[u->n_free++] = i;
    meter_stop(&u->meter, u->inflight, landed);
    return uring_fill(u, err);
}

static int uring_wait(io_backend *b, io_done *d, sl_err *err)
{
    uring_io *u = (uring_io *)b;
    if (!u->inflight && uring_fill(u, err)) return -1;
    if (!u->inflight) return sl_errf(err, "io: wait with no reads in flight");
    for (;;) {
        struct io_uring_cqe *cqe;
        int rc;
        do rc = io_uring_wait_cqe(&u->ring, &cqe);
        while (rc == -EINTR);
        if (rc < 0) return sl_errf(err, "io_uring_wait_cqe failed: %s", strerror(-rc));
        rc = uring_take(u, cqe, d, err);
        if (rc != 1) return rc;
    }
}

static int uring_poll(io_backend *b, io_done *d, sl_err *err)
{
    uring_io *u = (uring_io *)b;
    struct io_uring_cqe *cqe;
    if (!u->inflight) return 0;
    if (io_uring_peek_cqe(&u->ring, &cqe) != 0) {
        u->last_empty = sl_now();
        return 0;
    }
    u->polling = true;
    int rc = uring_take(u, cqe, d, err);
    u->polling = false;
    return rc == 1 ? 0 : rc ? -1 : 1; /* 1 from take: the rest is being read */
}

static int uring_pending(const io_backend *b)
{
    const uring_io *u = (const uring_io *)b;
    return u->inflight + queue_len(&u->waiting);
}

static void uring_requeue(io_backend *b, void (*count)(void *ctx, const io_req *r),
                          int (*decide)(void *ctx, const io_req *r), void *ctx)
{
    uring_io *u = (uring_io *)b;
    queue_requeue(&u->waiting, count, decide, ctx);
    sl_err ignored; /* a failed submit shows again at the next wait */
    uring_fill(u, &ignored);
}

static void uring_set_prefetch_depth(io_backend *b, int depth)
{
    ((uring_io *)b)->prefetch_depth = depth < 1 ? 1 : depth;
}

static void uring_counters(io_backend *b, io_counters *out)
{
    uring_io *u = (uring_io *)b;
    meter_get(&u->meter, u->inflight, out);
}

static void uring_destroy(io_backend *b)
{
    uring_io *u = (uring_io *)b;
    /* drain so no read lands in memory the caller is about to free */
    while (u->inflight) {
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(&u->ring, &cqe) < 0) break;
        io_uring_cqe_seen(&u->ring, cqe);
        u->inflight--;
    }
    io_uring_queue_exit(&u->ring);
    queue_free(&u->waiting);
    free(u->slot), free(u->done), free(u->tries), free(u->issued);
    free(u->free_slot);
    free(u);
}

static const io_ops URING_OPS = {uring_submit,  uring_wait,    uring_poll, uring_pending, uring_requeue,
                                 uring_set_prefetch_depth, uring_counters, uring_destroy};

int io_uring_create(io_backend **out, int depth, sl_err *err)
{
    uring_io *u = calloc(1, sizeof *u);
    if (!u) return sl_errf(err, "io: out of memory");
    u->base.ops = &URING_OPS;
    u->depth = depth < 1 ? 1 : depth;
    u->prefetch_depth = IO_DEFAULT_PREFETCH_DEPTH;
    u->slot = calloc((size_t)u->depth, sizeof *u->slot);
    u->free_slot = calloc((size_t)u->depth, sizeof *u->free_slot);
    u->done = calloc((size_t)u->depth, sizeof *u->done);
    u->tries = calloc((size_t)u->depth, sizeof *u->tries);
    u->issued = calloc((size_t)u->depth, sizeof *u->issued);
    if (!u->slot || !u->free_slot || !u->done || !u->tries || !u->issued) {
        free(u->slot), free(u->free_slot), free(u->done), free(u->tries), free(u->issued), free(u);
        return sl_errf(err, "io: out of memory");
    }
    for (int i = 0; i < u->depth; i++) u->free_slot[u->n_free++] = u->depth - 1 - i;
    int rc = io_uring_queue_init((unsigned)u->depth, &u->ring, 0);
    if (rc < 0) {
        free(u->slot), free(u->free_slot), free(u->done), free(u->tries), free(u->issued), free(u);
        return sl_errf(err, "io_uring unavailable (%s); use --io pread", strerror(-rc));
    }
    *out = &u->base;
    return 0;
}

/* ---- pread thread pool ---- */


typedef struct {
    io_backend base;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    queue waiting;
    io_done *comp; /* completed reads; room for every request held (submit) */
    int n_comp, cap_comp, busy, n_threads, prefetch_depth;
    devices dev;
    bool stop;
    pthread_t *threads;
    io_throttle throttle;
    double free_at[IO_THROTTLE_MAX]; /* when each throttled fd is next free */
    dev_meter meter; /* a reader holds a read from taking it until it has landed */
} pread_io;

/* Under the lock: when read R may complete on its simulated drive (0 if
 * its fd is not throttled); books the drive until then. */
static double throttle_until(pread_io *p, const io_req *r)
{
    for (int i = 0; i < p->throttle.n; i++) {
        if (p->throttle.fds[i] != r->fd || p->throttle.rates[i] <= 0) continue;
        double now = sl_now(), start = p->free_at[i] > now ? p->free_at[i] : now;
        p->free_at[i] = start + (double)r->len / p->throttle.rates[i];
        return p->free_at[i];
    }
    return 0;
}

static void sleep_until(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
}

static int64_t read_all(const io_req *r)
{
    uint32_t got = 0;
    while (got < r->len) {
        ssize_t n = sl_sys_pread(r->fd, (char *)r->dst + got, r->len - got, (off_t)(r->off + got));
        if (n < 0 && sl_errno_transient(errno)) continue;
        if (n < 0) return -errno;
        if (n == 0) break;
        got += (uint32_t)n;
    }
    return got;
}

static bool pread_pop(pread_io *p, io_req *r)
{
    return fifo_pop(&p->waiting.cls[0], r) || pop_prefetch(&p->waiting.cls[1], &p->dev, p->prefetch_depth, r);
}

static void *pread_worker(void *arg)
{
    pread_io *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        io_req r;
        while (!p->stop && !pread_pop(p, &r)) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        meter_start(&p->meter, &r, p->busy, dev_issue(&p->dev, &r, sl_now()));
        p->busy++;
        /* a simulated drive transfers from when it takes the read; the real
         * read happens inside that window */
        double until = throttle_until(p, &r);
        pthread_mutex_unlock(&p->mu);
        int64_t res = read_all(&r);
        if (until > 0) sleep_until(until);
        pthread_mutex_lock(&p->mu);
        p->busy--;
        double landed = sl_now(), busy = dev_land(&p->dev, &r, landed);
        meter_stop(&p->meter, p->busy, landed);
        pthread_cond_broadcast(&p->work); /* a prefetch may go now */
        /* submit reserved its place: a completion is never dropped */
        p->comp[p->n_comp++] = (io_done){.tag = r.tag, .off = r.off, .res = res, .busy_s = busy};
        pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Under the lock: room in the completion list for every request held plus
 * N more, so a reader thread never needs memory to report a read. */
static int reserve_completions(pread_io *p, int n)
{
    int held = p->busy + queue_len(&p->waiting) + p->n_comp;
    if (n < 0 || n > IO_MAX_HELD - held) return -1;
    if (held + n <= p->cap_comp) return 0;
    int cap = p->cap_comp ? p->cap_comp : 64;
    while (cap < held + n) cap *= 2;
    io_done *c = realloc(p->comp, (size_t)cap * sizeof *c);
    if (!c) return -1;
    p->comp = c, p->cap_comp = cap;
    return 0;
}

static int pread_submit(io_backend *b, const io_req *reqs, int n, sl_err *err)
{
    pread_io *p = (pread_io *)b;
    pthread_mutex_lock(&p->mu);
    int rc = reserve_completions(p, n) || queue_push_all(&p->waiting, reqs, n) ? -1 : 0;
    if (!rc) dev_note(&p->dev, reqs, n);
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    return rc ? sl_errf(err, "io: out of memory queueing %d reads", n) : 0;
}

static int pread_wait(io_backend *b, io_done *d, sl_err *err)
{
    pread_io *p = (pread_io *)b;
    pthread_mutex_lock(&p->mu);
    while (!p->n_comp && (p->busy || queue_len(&p->waiting))) pthread_cond_wait(&p->done, &p->mu);
    int rc = 0;
    if (p->n_comp) {
        *d = p->comp[--p->n_comp];
    } else {
        rc = sl_errf(err, "io: wait with no reads in flight");
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static int pread_poll(io_backend *b, io_done *d, sl_err *err)
{
    pread_io *p = (pread_io *)b;
    (void)err;
    pthread_mutex_lock(&p->mu);
    int got = p->n_comp > 0;
    if (got) *d = p->comp[--p->n_comp];
    pthread_mutex_unlock(&p->mu);
    return got;
}

static int pread_pending(const io_backend *b)
{
    pread_io *p = (pread_io *)b;
    pthread_mutex_lock(&p->mu);
    int n = p->busy + queue_len(&p->waiting) + p->n_comp;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static void pread_requeue(io_backend *b, void (*count)(void *ctx, const io_req *r),
                          int (*decide)(void *ctx, const io_req *r), void *ctx)
{
    pread_io *p = (pread_io *)b;
    pthread_mutex_lock(&p->mu); /* both passes under one lock: no reader takes a request in between */
    queue_requeue(&p->waiting, count, decide, ctx);
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
}

static void pread_set_prefetch_depth(io_backend *b, int depth)
{
    pread_io *p = (pread_io *)b;
    pthread_mutex_lock(&p->mu);
    p->prefetch_depth = depth < 1 ? 1 : depth;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
}

static void pread_counters(io_backend *b, io_counters *out)
{
    pread_io *p = (pread_io *)b;
    pthread_mutex_lock(&p->mu);
    meter_get(&p->meter, p->busy, out);
    pthread_mutex_unlock(&p->mu);
}

static void pread_destroy(io_backend *b)
{
    pread_io *p = (pread_io *)b;
    pthread_mutex_lock(&p->mu);
    while (p->busy) pthread_cond_wait(&p->done, &p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    queue_free(&p->waiting);
    free(p->comp);
    free(p->threads);
    free(p);
}

static const io_ops PREAD_OPS = {pread_submit,  pread_wait,    pread_poll, pread_pending, pread_requeue,
                                 pread_set_prefetch_depth, pread_counters, pread_destroy};

int io_pread_throttled_create(io_backend **out, int threads, const io_throttle *t, sl_err *err)
{
    if (t->n < 0 || t->n > IO_THROTTLE_MAX) return sl_errf(err, "io: at most %d throttled files", IO_THROTTLE_MAX);
    if (io_pread_create(out, threads, err)) return -1;
    pread_io *p = (pread_io *)*out;
    pthread_mutex_lock(&p->mu);
    p->throttle = *t;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int io_pread_create(io_backend **out, int threads, sl_err *err)
{
    pread_io *p = calloc(1, sizeof *p);
    if (!p) return sl_errf(err, "io: out of memory");
    p->base.ops = &PREAD_OPS;
    p->n_threads = threads < 1 ? 1 : threads;
    p->prefetch_depth = IO_DEFAULT_PREFETCH_DEPTH;
    p->threads = calloc((size_t)p->n_threads, sizeof *p->threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 0; p->threads && i < p->n_threads; i++) {
        if (pthread_create(&p->threads[i], NULL, pread_worker, p)) {
            p->n_threads = i;
            pread_destroy(&p->base);
            return sl_errf(err, "io: cannot start reader threads");
        }
    }
    if (!p->threads) {
        free(p);
        return sl_errf(err, "io: out of memory");
    }
    *out = &p->base;
    return 0;
}
