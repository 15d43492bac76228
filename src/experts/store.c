#include "experts/store.h"
#include "experts/belady.h"
#include "experts/io.h"
#include "experts/source.h"
#include "kernels/kernels.h"
#include "util/bigbuf.h"
#include "util/clock.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t align_up(uint32_t x) { return (x + 4095u) & ~4095u; }

/* What the admission rule knows about the disk and the compute, measured
 * over forward passes (one token each when decoding): EMAs of the disk's
 * busy share with needed reads, its rate while busy, and the compute time
 * per layer, plus the counters at the last pass boundary. */
typedef struct {
    double busy, rate, compute_s;
    double t;                  /* sl_now() at the last boundary (0: none yet) */
    double dev_busy, io_wait;  /* device busy time, next()'s waits */
    uint64_t read, needed, loaded, layers;
} admit_est;

enum { REQ_WAIT_SLOT, REQ_LOADING, REQ_READY, REQ_GIVEN, REQ_RELEASED };

/* What a slot is doing: reads still outstanding, and which request of the
 * current layer (if any) is waiting for it. */
typedef struct {
    int32_t chunks_left;
    int32_t req;        /* index into the current layer's ids, or -1 */
    int32_t layer, expert;
    uint64_t expect, got; /* bytes the chunks should and did deliver */
    int32_t failed;     /* -errno of the first failed chunk, or -EIO */
    uint32_t fail_file;
    uint64_t fail_off;
    int32_t attempts;   /* re-plans after failures (sources with copies) */
    bool prefetched;    /* loaded on a hint and not used by a demand yet */
    int32_t queued;     /* settle_prefetches: its chunks not yet at the device */
    int32_t ev;         /* timeline: its read's event, or -1 */
    uint8_t verdict;    /* settle_prefetches: IO_KEEP / IO_PROMOTE / IO_DROP */
    uint8_t uses;       /* times handed out since it was read (saturating) */
    uint8_t layout[EXPERT_MAX_PARTS]; /* SL_LAYOUT_* of each part: rows as read, or interleaved */
} slot_state;

/* A completion's tag names its slot and file (32 bits each: a split GGUF
 * has up to 99,999 parts, a pack any number of drives), and the completion
 * carries the offset, so a failed read is reported exactly where it
 * happened. */
static uint64_t make_tag(int slot, uint32_t file) { return (uint64_t)(uint32_t)slot | (uint64_t)file << 32; }
static int tag_slot(uint64_t t) { return (int)(uint32_t)t; }
static uint32_t tag_file(uint64_t t) { return (uint32_t)(t >> 32); }

typedef struct {
    int32_t slot;
    uint8_t state;
    int32_t ev;         /* timeline: its compute event, or -1 */
} req_state;

typedef struct {
    expert_provider base;
    const expert_layout *L;
    store_config cfg;
    io_backend *io;
    expert_source *src;     /* NULL in mmap mode */
    int *map_fds;           /* mmap mode: per gguf part */
    uint8_t **maps;         /* mmap mode: per part mapping */
    read_plan plan;         /* scratch for one expert's reads */
    sl_err check_err;       /* message of the last failed integrity check */
    uint8_t *mem;
    uint64_t mem_bytes, slot_bytes;
    expert_cache *cache;
    slot_state *slot;
    uint8_t *used;          /* [n_layers * n_expert]: ever used */
    /* the layer in progress */
    int layer, last_layer, n;
    int32_t *ids;
    req_state *req;
    int *ready, n_ready;    /* FIFO of request indices ready to hand out */
    int ready_head;
    int n_done;             /* requests handed out */
    /* prefetch scoring: per layer, the last hint in rank order and the
     * share of hints of each rank the router then chose */
    int32_t *hint_ids, *hint_n; /* [n_layers][n_expert], [n_layers] */
    float *rank_prec;           /* [n_layers][PF_RANKS] */
    uint8_t *mark;              /* [n_expert] scratch */
    int32_t *touched;           /* [n_expert] scratch: slots being settled */
    int n_touched, settle_layer;
    admit_est est;              /* the admission rule's figures */
    uint64_t pf_used_bytes;     /* bytes of prefetched experts a demand then hit */
    bool batch_pass;            /* this forward pass routed a batch (prefill) */
    store_event *tl;            /* timeline (cfg.timeline) */
    size_t n_tl, cap_tl;
    int32_t layer_ev;
    /* every begin()'s keys in order, for the offline optimum */
    int32_t *log;
    int64_t n_log, cap_log;
    int64_t log_base;  /* accesses dropped from the front of the log */
    bool log_failed;
    store_stats st;
} store;

const char *store_io_name(store_io io)
{
    static const char *const N[] = {"uring", "pread", "mmap"};
    return N[io];
}

int store_io_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcasecmp(name, store_io_name((store_io)i))) return i;
    return -1;
}

/* Reads in flight: the store refills the queue only when the compute
 * thread reaps, between experts; a prompt batch's attention runs ~0.15 s
 * without one (Qwen3-30B-A3B shape, 512 positions), so the reads queued
 * for the next layer must cover that: 256 MiB is 0.25 s at 1 GB/s.  With
 * 32 MiB the disk idled most of each attention (docs/STREAMING.md).  A
 * decode step's demand reads rarely fill even that, and prefetches keep
 * their own limit (io.h), so it is batch passes that queue this deep. */
enum { STORE_QUEUE_DEPTH = 256 };

store_config store_config_default(uint64_t cache_bytes)
{
    return (store_config){.io = STORE_IO_URING, .cache_bytes = cache_bytes, .policy = CACHE_AHEAD,
                          .half_life = 128, .queue_depth = STORE_QUEUE_DEPTH, .chunk_bytes = 1u << 20,
                          .pin = heat_pin_defaults(), .log_cap = 1 << 20};
}

int64_t store_log_entries(const expert_layout *L, int32_t n_ctx)
{
    return L ? 2 * (int64_t)(n_ctx > 0 ? n_ctx : 1) * expert_layout_moe_layers(L) * L->n_used : 0;
}

uint64_t store_slot_bytes(const expert_layout *L) { return source_gguf_slot_bytes(L); }

/* ---- timeline ---- */

/* Starts an event; returns its index, or -1 when not recording (or out of
 * memory: the picture is then cut short, never the run). */
static int32_t tl_start(store *s, tl_kind kind, int layer, int expert, double t0)
{
    if (!s->cfg.timeline) return -1;
    if (s->n_tl == s->cap_tl) {
        size_t cap = s->cap_tl ? s->cap_tl * 2 : 4096;
        store_event *e = cap < INT32_MAX ? realloc(s->tl, cap * sizeof *e) : NULL;
        if (!e) return -1;
        s->tl = e, s->cap_tl = cap;
    }
    s->tl[s->n_tl] = (store_event){.t0 = t0, .t1 = t0, .layer = layer, .expert = expert, .kind = (uint8_t)kind};
    return (int32_t)s->n_tl++;
}

static void tl_end(store *s, int32_t ev, double t1)
{
    if (ev >= 0) s->tl[ev].t1 = t1;
}

const store_event *expert_store_timeline(const expert_provider *p, size_t *n)
{
    const store *s = (const store *)p;
    *n = s->n_tl;
    return s->tl;
}

/* ---- views ---- */

static void map_view(const store *s, int layer, int expert, expert_view *v)
{
    const expert_layer *el = &s->L->layer[layer];
    v->id = expert;
    for (int p = 0; p < el->n_parts; p++) {
        const expert_part *pt = &el->parts[p];
        v->parts[p] = s->maps[pt->file] + pt->off + (uint64_t)expert * pt->stride;
    }
}

static uint8_t *slot_mem(const store *s, int slot) { return s->mem + (uint64_t)slot * s->slot_bytes; }

/* ---- reads ---- */

static void mark_failed(slot_state *ss, int32_t code, uint32_t file, uint64_t off)
{
    if (ss->failed) return;
    ss->failed = code;
    ss->fail_file = file;
    ss->fail_off = off;
}

/* Queues the planned reads (s->plan) that fill SLOT. */
static int submit_plan(store *s, int slot, sl_err *err)
{
    slot_state *ss = &s->slot[slot];
    read_plan *rp = &s->plan;
    for (int i = 0; i < rp->n; i++) rp->req[i].tag = make_tag(slot, rp->file[i]);
    ss->expect = rp->expect;
    ss->got = 0;
    if (s->io->ops->submit(s->io, rp->req, rp->n, err)) {
        /* nothing was queued (submit is all or nothing): the slot holds no
         * bytes and waits for no read */
        ss->chunks_left = 0;
        mark_failed(ss, -ENOMEM, rp->n ? rp->file[0] : 0, rp->n ? rp->req[0].off : 0);
        return -1;
    }
    /* a slot with reads in flight is pinned until they land, whatever
     * happens to the request that asked for it */
    cache_pin(s->cache, slot);
    ss->chunks_left = rp->n;
    return 0;
}

/* Queues the source's reads that fill SLOT with expert (l, e); PRIO 1 for
 * prefetches.  A slot whose prefetched expert was never used is waste. */
enum { READ_DEMAND, READ_GUESS, READ_SURE_GUESS };

/* KIND: READ_DEMAND, READ_GUESS (prefetch priority: idle time only), or
 * READ_SURE_GUESS: a prefill batch's hint for the next layer, nearly all of
 * which that layer will use, read at demand priority so it queues right
 * behind this layer's demand reads, in the order the next layer will
 * consume them, at full depth. */
static int submit_expert(store *s, int slot, int layer, int expert, uint8_t kind, sl_err *err)
{
    slot_state *ss = &s->slot[slot];
    uint8_t prio = kind == READ_GUESS;
    if (ss->prefetched) s->st.prefetch_wasted_bytes += expert_layout_bytes(s->L, ss->layer);
    *ss = (slot_state){.req = ss->req, .layer = layer, .expert = expert, .prefetched = kind != READ_DEMAND,
                       .ev = tl_start(s, kind ? TL_READ_PREFETCH : TL_READ_DEMAND, layer, expert, sl_now())};
    if (s->src->ops->plan(s->src, layer, expert, slot_mem(s, slot), s->cfg.chunk_bytes, &s->plan, err)) {
        mark_failed(ss, -EINVAL, 0, 0); /* holds no bytes: never handed out as loaded */
        return -1;
    }
    for (int i = 0; i < s->plan.n; i++) s->plan.req[i].prio = prio;
    if (kind) s->st.prefetch_bytes += expert_layout_bytes(s->L, layer), s->st.prefetch_issued++;
    else s->st.bytes_needed += expert_layout_bytes(s->L, layer);
    return submit_plan(s, slot, err);
}

/* A source holding another copy of a failed expert (a replicated pack)
 * reads it again from there; returns 1 if it did.  Otherwise the first
 * failure stands and is reported. */
static int retry_elsewhere(store *s, int slot)
{
    enum { MAX_ATTEMPTS = 4 };
    slot_state *ss = &s->slot[slot];
    if (!s->src->ops->replan || ss->attempts >= MAX_ATTEMPTS) return 0;
    sl_err e;
    if (s->src->ops->replan(s->src, ss->layer, ss->expert, slot_mem(s, slot), s->cfg.chunk_bytes, ss->failed,
                            ss->fail_file, ++ss->attempts, &s->plan, &e) != 1)
        return 0;
    s->st.retries++;
    slot_state was = *ss;
    ss->failed = 0;
    if (submit_plan(s, slot, &e) == 0) return 1;
    ss->failed = was.failed, ss->fail_file = was.fail_file, ss->fail_off = was.fail_off;
    return 0;
}

/* The error for a slot whose reads failed or came back short. */
static int slot_failed(store *s, int slot, sl_err *err)
{
    slot_state *ss = &s->slot[slot];
    const expert_source *src = s->src;
    const char *path = src->ops->file_path(src, ss->fail_file);
    uint64_t size = src->ops->file_size(src, ss->fail_file);
    struct stat st;
    if (fstat(src->ops->file_fd(src, ss->fail_file), &st) == 0 && (uint64_t)st.st_size != size)
        return sl_errf(err, "%s: model file changed size after opening (%llu -> %lld bytes) while reading expert %d of layer %d at offset %llu",
                       path, (unsigned long long)size, (long long)st.st_size, ss->expert, ss->layer,
                       (unsigned long long)ss->fail_off);
    return sl_errf(err, "%s: read of expert %d of layer %d at offset %llu failed: %s", path, ss->expert,
                   ss->layer, (unsigned long long)ss->fail_off,
                   ss->failed == -ENODATA   ? "short read (file truncated?)"
                   : ss->failed == -EBADMSG ? s->check_err.msg
                                            : strerror(-ss->failed));
}

/* Waits for one chunk; marks its slot ready when all chunks have landed. */
static void complete(store *s, const io_done *d, double t1);

/* Waits for one chunk (time counted as I/O wait), then completes it. */
static int reap_one(store *s, sl_err *err)
{
    io_done d;
    double t0 = sl_now();
    int rc = s->io->ops->wait(s->io, &d, err);
    double t1 = sl_now();
    s->st.io_wait_s += t1 - t0;
    if (rc) return -1;
    complete(s, &d, t1);
    return 0;
}

/* Completes every chunk that has already landed, without waiting: so a
 * prefetch that finished during compute counts as on time. */
static void reap_ready(store *s)
{
    io_done d;
    sl_err ignored;
    while (s->io->ops->poll(s->io, &d, &ignored) == 1) complete(s, &d, sl_now());
}

/* Accounts one completed chunk; marks its slot ready when all its chunks
 * have landed (or failed). */
static void complete(store *s, const io_done *d, double t1)
{
    uint64_t tag = d->tag, off = d->off;
    int64_t res = d->res;
    int slot = tag_slot(tag);
    slot_state *ss = &s->slot[slot];
    s->st.reads++;
    if (res > 0) s->st.bytes_read += (uint64_t)res, ss->got += (uint64_t)res;
#ifdef SLUICE_TEST_FAULTS
    if (s->cfg.fault && res >= 0) {
        int f = s->cfg.fault(s->cfg.fault_ctx, tag_file(tag), off, (uint32_t)res);
        if (f) res = f;
    }
#endif
    if (s->src->ops->on_complete) s->src->ops->on_complete(s->src, tag_file(tag), off, res, d->busy_s);
    if (res <= 0) mark_failed(ss, res < 0 ? (int32_t)res : -ENODATA, tag_file(tag), off);
    if (--ss->chunks_left > 0) return;
    tl_end(s, ss->ev, t1);
    cache_unpin(s->cache, slot); /* the loading pin */
    if (!ss->failed && ss->got != ss->expect) mark_failed(ss, -ENODATA, tag_file(tag), off);
    if (!ss->failed && s->src->ops->check &&
        s->src->ops->check(s->src, ss->layer, ss->expert, slot_mem(s, slot), &s->check_err))
        mark_failed(ss, -EBADMSG, tag_file(tag), off);
    if (ss->failed && retry_elsewhere(s, slot)) return;
    if (ss->req >= 0) {
        s->req[ss->req].state = REQ_READY;
        s->ready[(s->ready_head + s->n_ready++) % s->n] = ss->req;
    } else if (ss->failed && !cache_pinned(s->cache, slot)) {
        /* nobody waits for it (a prefetch, or a request already ended):
         * forget the bytes; a later demand reads them again */
        if (ss->prefetched) s->st.prefetch_failed++;
        cache_drop(s->cache, slot);
        ss->prefetched = false;
    }
}

/* ---- provider ops ---- */

static void push_ready(store *s, int i)
{
    s->req[i].state = REQ_READY;
    s->ready[(s->ready_head + s->n_ready++) % s->n] = i;
}

/* Gives waiting requests a slot while slots can be freed. */
static int admit_waiting(store *s, sl_err *err)
{
    for (int i = 0; i < s->n; i++) {
        if (s->req[i].state != REQ_WAIT_SLOT) continue;
        int64_t evicted;
        int slot = cache_admit(s->cache, s->layer, s->ids[i], &evicted);
        if (slot < 0) return 0;
        if (evicted >= 0) s->st.evictions++;
        s->st.misses++;
        s->req[i] = (req_state){.slot = slot, .state = REQ_LOADING};
        s->slot[slot].req = i;
        if (submit_expert(s, slot, s->layer, s->ids[i], READ_DEMAND, err)) return -1;
    }
    return 0;
}

/* ---- prefetch that pays ---- */

enum { PF_RANKS = 8 };

/* Settling LAYER's prefetches, pass 1: each one's chunks still queued
 * (not yet at the device). */
static void count_queued(void *ctx, const io_req *r)
{
    store *s = ctx;
    int slot = tag_slot(r->tag);
    slot_state *ss = &s->slot[slot];
    if (ss->layer != s->settle_layer || !ss->prefetched) return;
    if (!ss->queued++) s->touched[s->n_touched++] = slot, ss->verdict = 0xff;
}

/* Pass 2 (no chunk has reached the device since pass 1): promoted if the
 * router chose it, dropped if not and no chunk of it is at the device. */
static int apply_verdict(void *ctx, const io_req *r)
{
    store *s = ctx;
    slot_state *ss = &s->slot[tag_slot(r->tag)];
    if (ss->layer != s->settle_layer || !ss->prefetched || !ss->queued) return IO_KEEP;
    if (ss->verdict == 0xff)
        ss->verdict = s->mark[ss->expert] ? IO_PROMOTE : ss->queued == ss->chunks_left ? IO_DROP : IO_KEEP;
    if (ss->verdict == IO_DROP && s->src->ops->on_drop) s->src->ops->on_drop(s->src, tag_file(r->tag), r->len);
    return ss->verdict;
}

/* LAYER's router chose IDS: its prefetches still queued are promoted to
 * demand reads when chosen and dropped when not (unless a chunk already
 * reached the device: then the expert is read whole and kept, since a
 * later token may want it), and each rank's precision is updated. */
static void settle_prefetches(store *s, int layer, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) s->mark[ids[i]] = 1;
    const int32_t *h = s->hint_ids + (int64_t)layer * s->L->n_expert;
    float *prec = s->rank_prec + (int64_t)layer * PF_RANKS;
    int nh = s->hint_n[layer];
    if (nh <= s->L->n_used) /* a single position's ranked guess */
        for (int r = 0; r < nh && r < PF_RANKS; r++) prec[r] += (s->mark[h[r]] - prec[r]) / 16.0f;
    s->hint_n[layer] = 0;
    s->settle_layer = layer, s->n_touched = 0;
    s->io->ops->requeue(s->io, count_queued, apply_verdict, s);
    for (int i = 0; i < s->n_touched; i++) {
        int slot = s->touched[i];
        slot_state *ss = &s->slot[slot];
        ss->queued = 0;
        if (ss->verdict == IO_PROMOTE) s->st.prefetch_promoted++;
        if (ss->verdict != IO_DROP) continue;
        s->st.prefetch_cancelled++;
        s->st.prefetch_bytes -= expert_layout_bytes(s->L, layer), s->st.prefetch_issued--;
        ss->chunks_left = 0;
        ss->prefetched = false;
        if (ss->ev >= 0) tl_end(s, ss->ev, sl_now()), s->tl[ss->ev].dropped = 1;
        cache_unpin(s->cache, slot); /* the loading pin */
        if (!cache_pinned(s->cache, slot)) cache_drop(s->cache, slot);
    }
    for (int i = 0; i < n; i++) s->mark[ids[i]] = 0;
}

/* At a forward pass boundary: updates the admission rule's figures from
 * the pass that ended.  The busy share counts device time (io.h: from a
 * read reaching the device to its landing, not to when it was reaped),
 * scaled by the share of the bytes loaded that were needed (demand reads
 * and guesses then used): a wrong guess's own reads must not make the disk
 * look busy, or the rule would starve itself.  A prefill pass says
 * nothing about a decode step's compute, so it does not update that. */
static void track_busy(store *s)
{
    admit_est *e = &s->est;
    io_counters c;
    s->io->ops->counters(s->io, &c);
    double now = sl_now(), dt = now - e->t, db = c.busy_s - e->dev_busy;
    uint64_t needed = s->st.bytes_needed + s->pf_used_bytes, loaded = s->st.bytes_needed + s->st.prefetch_bytes;
    /* signed: a guess issued before the boundary and cancelled after it
     * takes its bytes back out of `loaded` */
    double dl = (double)loaded - (double)e->loaded, dn = (double)needed - (double)e->needed;
    double dr = (double)s->st.bytes_read - (double)e->read;
    const double w = 1.0 / 4; /* about the last four tokens */
    if (e->t > 0 && dt > 0) {
        double f = (db > dt ? 1 : db / dt) * (dl > 0 && dn < dl ? (dn > 0 ? dn / dl : 0) : 1);
        e->busy += w * (f - e->busy);
        if (db > 0 && dr > 0) e->rate = e->rate > 0 ? e->rate + w * (dr / db - e->rate) : dr / db;
        uint64_t nl = s->st.layers - e->layers;
        double wait = s->st.io_wait_s - e->io_wait, cs = nl ? (dt > wait ? dt - wait : 0) / (double)nl : 0;
        if (nl && !s->batch_pass) e->compute_s = e->compute_s > 0 ? e->compute_s + w * (cs - e->compute_s) : cs;
    }
    *e = (admit_est){.busy = e->busy, .rate = e->rate, .compute_s = e->compute_s, .t = now, .dev_busy = c.busy_s,
                     .io_wait = s->st.io_wait_s, .read = s->st.bytes_read, .needed = needed, .loaded = loaded,
                     .layers = s->st.layers};
    s->batch_pass = false;
}

/* Whether a guess of rank RANK (0 = the router's likeliest) for LAYER is
 * worth a read, by the configured rule (admit.h), with the rank's measured
 * precision as its probability of use.  A batch's hint (prefill: most of
 * the layer) is always worth it. */
static bool worth_reading(const store *s, int layer, int rank, int n_hint)
{
    if (n_hint > s->L->n_used || s->cfg.prefetch_admit == PF_ADMIT_OFF) return true;
    double p = s->rank_prec[(int64_t)layer * PF_RANKS + (rank < PF_RANKS ? rank : PF_RANKS - 1)];
    if (s->cfg.prefetch_admit == PF_ADMIT_RANK) return pf_admit_rank(p, s->est.busy);
    double read_s = s->est.rate > 0 ? (double)expert_layout_bytes(s->L, layer) / s->est.rate : 0;
    return pf_admit_cost(p, read_s, s->est.compute_s, s->est.busy);
}

/* Keeps the newer half of a full log (at least N entries free after;
 * log_access has checked N <= log_cap). */
static void log_drop_half(store *s, int n)
{
    int64_t keep = s->cfg.log_cap / 2;
    if (keep > s->cfg.log_cap - n) keep = s->cfg.log_cap - n;
    if (keep > s->n_log) keep = s->n_log;
    int64_t drop = s->n_log - keep;
    memmove(s->log, s->log + drop, (size_t)keep * sizeof *s->log);
    s->log_base += drop, s->n_log = keep;
}

/* Appends a layer's experts to the access log, which never grows past
 * cfg.log_cap (a failed allocation only loses the optimum figure, never
 * the run). */
static void log_access(store *s, int layer, const int32_t *ids, int n)
{
    if (s->log_failed || n > s->cfg.log_cap) {
        s->log_failed = true;
        return;
    }
    if (s->n_log + n > s->cfg.log_cap) log_drop_half(s, n);
    if (s->n_log + n > s->cap_log) {
        int64_t cap = s->cap_log ? s->cap_log * 2 : 1 << 14;
        while (cap < s->n_log + n) cap *= 2;
        if (cap > s->cfg.log_cap) cap = s->cfg.log_cap;
        int32_t *l = realloc(s->log, (size_t)cap * sizeof *l);
        if (!l) {
            s->log_failed = true;
            return;
        }
        s->log = l, s->cap_log = cap;
    }
    for (int i = 0; i < n; i++) s->log[s->n_log++] = layer * s->L->n_expert + ids[i];
}

static int st_begin(expert_provider *p, int layer, const int32_t *ids, int n, sl_err *err)
{
    store *s = (store *)p;
    if (s->io) reap_ready(s);
    if (layer <= s->last_layer && s->cache) cache_next_token(s->cache), track_busy(s);
    s->last_layer = s->layer = layer;
    s->n = n, s->n_ready = s->ready_head = s->n_done = 0;
    s->st.layers++;
    s->batch_pass |= n > s->L->n_used;
    s->layer_ev = tl_start(s, TL_LAYER, layer, -1, sl_now());
    if (s->cfg.record) heat_recorder_use(s->cfg.record, layer, ids, n);
    if (s->cache) {
        cache_begin_layer(s->cache, layer, ids, n);
        log_access(s, layer, ids, n);
        settle_prefetches(s, layer, ids, n);
    }
    for (int i = 0; i < n; i++) {
        s->ids[i] = ids[i];
        uint8_t *u = &s->used[(int64_t)layer * s->L->n_expert + ids[i]];
        if (!*u) s->st.distinct++, s->st.distinct_bytes += expert_layout_bytes(s->L, layer);
        *u = 1;
        s->st.bytes_requested += expert_layout_bytes(s->L, layer);
        if (s->cfg.io == STORE_IO_MMAP) {
            push_ready(s, i);
            continue;
        }
        int slot = cache_find(s->cache, layer, ids[i]);
        s->req[i] = (req_state){.slot = slot, .state = REQ_WAIT_SLOT};
        if (slot < 0) continue;
        cache_hit(s->cache, slot);
        s->st.hits++;
        slot_state *ss = &s->slot[slot];
        if (ss->prefetched) {
            s->st.prefetch_used++;
            s->pf_used_bytes += expert_layout_bytes(s->L, layer);
            s->st.prefetch_late += ss->chunks_left > 0;
            ss->prefetched = false;
        }
        ss->req = i;
        if (ss->chunks_left == 0) push_ready(s, i);
        else s->req[i].state = REQ_LOADING;
    }
    return s->cfg.io == STORE_IO_MMAP ? 0 : admit_waiting(s, err);
}

/* The second time a slot is handed out, its Q8_0 parts are interleaved in
 * place (expert_part_interleave), as the in-RAM provider's are at load: on
 * weights a cache holds, the product on GGUF rows costs about 1.5x the
 * interleaved one, and the rewrite costs one pass over the bytes, so it
 * waits for a hit: an expert used once per read (a cache that thrashes) is
 * left as read.  Only one forward pass uses the store at a time, and a
 * handed-out slot is pinned, so nothing else reads or writes it now. */
static void interleave_slot(store *s, int slot, expert_view *v)
{
    slot_state *ss = &s->slot[slot];
    const expert_layer *el = &s->L->layer[ss->layer];
    if (ss->uses < UINT8_MAX) ss->uses++;
    for (int k = 0; k < el->n_parts; k++) {
        if (ss->uses == 2 && ss->layout[k] == SL_LAYOUT_ROWS)
            ss->layout[k] = (uint8_t)expert_part_interleave(&el->parts[k], (void *)v->parts[k], 1, 0);
        v->layout[k] = ss->layout[k];
    }
}

static int st_next(expert_provider *p, expert_view *v, sl_err *err)
{
    store *s = (store *)p;
    if (s->n_done == s->n) return -1;
    while (!s->n_ready) {
        if (s->io->ops->pending(s->io) == 0) {
            if (admit_waiting(s, err)) return -2;
            if (s->io->ops->pending(s->io) == 0) {
                sl_errf(err, "expert store: layer %d needs more experts at once than the %d cache slots hold",
                        s->layer, cache_slots(s->cache));
                return -2;
            }
            continue;
        }
        double w0 = sl_now();
        if (reap_one(s, err)) return -2;
        tl_end(s, tl_start(s, TL_WAIT, s->layer, -1, w0), sl_now());
    }
    int i = s->ready[s->ready_head];
    s->ready_head = (s->ready_head + 1) % s->n;
    s->n_ready--;
    s->n_done++;
    s->req[i].state = REQ_GIVEN;
    s->req[i].ev = tl_start(s, TL_COMPUTE, s->layer, s->ids[i], sl_now());
    if (s->cfg.io == STORE_IO_MMAP) {
        map_view(s, s->layer, s->ids[i], v);
        return i;
    }
    int slot = s->req[i].slot;
    if (s->slot[slot].failed) {
        slot_failed(s, slot, err);
        s->slot[slot].req = -1;
        cache_unpin(s->cache, slot);
        cache_drop(s->cache, slot);
        s->req[i].state = REQ_RELEASED;
        return -2;
    }
    s->src->ops->view(s->src, s->layer, s->ids[i], slot_mem(s, slot), v);
    interleave_slot(s, slot, v);
    return i;
}

static void st_release(expert_provider *p, int i)
{
    store *s = (store *)p;
    if (i < 0 || i >= s->n || s->req[i].state != REQ_GIVEN) return;
    s->req[i].state = REQ_RELEASED;
    tl_end(s, s->req[i].ev, sl_now());
    if (s->cfg.io == STORE_IO_MMAP) return;
    s->slot[s->req[i].slot].req = -1;
    cache_unpin(s->cache, s->req[i].slot);
    /* reads that landed during this expert's compute: io_uring's device
     * meter sees a read leave only when it is reaped (io.h) */
    reap_ready(s);
}

/* Releases the layer's slots.  Reads still in flight (after an error) keep
 * their loading pin, so no slot is reused before its reads land. */
static void st_end(expert_provider *p, int layer)
{
    store *s = (store *)p;
    (void)layer;
    double now = sl_now();
    tl_end(s, s->layer_ev, now);
    s->layer_ev = -1;
    for (int i = 0; i < s->n; i++)
        if (s->req[i].state == REQ_GIVEN) tl_end(s, s->req[i].ev, now);
    if (s->cfg.io == STORE_IO_MMAP) return;
    for (int i = 0; i < s->n; i++) {
        req_state *r = &s->req[i];
        if (r->state == REQ_WAIT_SLOT || r->state == REQ_RELEASED) continue;
        slot_state *ss = &s->slot[r->slot];
        ss->req = -1;
        cache_unpin(s->cache, r->slot);
        if (ss->failed && ss->chunks_left == 0 && !cache_pinned(s->cache, r->slot)) cache_drop(s->cache, r->slot);
        r->state = REQ_RELEASED;
    }
    s->n = 0;
}

/* A prediction of LAYER's experts: read the ones not cached at low
 * priority into slots the policy can spare.  Never blocks, never changes
 * what the router decides; wrong guesses are the first evicted. */
static void st_hint(expert_provider *p, int layer, const int32_t *ids, int n)
{
    store *s = (store *)p;
    if (s->cfg.io == STORE_IO_MMAP || layer < 0 || layer >= s->L->n_layers || !expert_layout_bytes(s->L, layer))
        return;
    int32_t *h = s->hint_ids + (int64_t)layer * s->L->n_expert;
    int nh = 0;
    for (int i = 0; i < n && nh < s->L->n_expert; i++)
        if (ids[i] >= 0 && ids[i] < s->L->n_expert) cache_hint(s->cache, layer, ids[i]), h[nh++] = ids[i];
    s->hint_n[layer] = nh;
    for (int i = 0; i < nh; i++) {
        if (cache_find(s->cache, layer, h[i]) >= 0) continue;
        int64_t evicted;
        if (!worth_reading(s, layer, i, nh)) {
            s->st.prefetch_skipped++;
            continue;
        }
        int slot = cache_admit_prefetch(s->cache, layer, h[i], &evicted);
        if (slot < 0) {
            s->st.prefetch_skipped++;
            continue;
        }
        s->slot[slot].req = -1;
        sl_err ignored;
        int rc = submit_expert(s, slot, layer, h[i], nh > s->L->n_used ? READ_SURE_GUESS : READ_GUESS, &ignored);
        cache_unpin(s->cache, slot); /* the admit pin; the loading pin stays */
        if (rc) { /* cannot even queue the read: give the slot back */
            s->slot[slot].prefetched = false;
            if (!cache_pinned(s->cache, slot)) cache_drop(s->cache, slot);
            return;
        }
    }
}

static void st_destroy(expert_provider *p)
{
    store *s = (store *)p;
    if (s->io) s->io->ops->destroy(s->io);
    if (s->src) s->src->ops->destroy(s->src);
    for (uint32_t f = 0; s->map_fds && f < s->L->g->n_parts; f++)
        if (s->map_fds[f] >= 0) close(s->map_fds[f]);
    for (uint32_t f = 0; s->maps && f < s->L->g->n_parts; f++)
        if (s->maps[f] && s->maps[f] != MAP_FAILED) munmap(s->maps[f], s->L->g->parts[f].size);
    if (s->mem) munmap(s->mem, s->mem_bytes);
    cache_free(s->cache);
    free(s->tl);
    free(s->log), free(s->hint_ids), free(s->hint_n), free(s->rank_prec), free(s->mark), free(s->touched);
    free(s->map_fds), free(s->maps), free(s->slot), free(s->used), free(s->ids), free(s->req), free(s->ready);
    free(s);
}

static int st_ready(expert_provider *p) { return ((const store *)p)->n_ready; }

static const expert_provider_ops STORE_OPS = {st_begin, st_next, st_release, st_end, st_hint, st_destroy, st_ready};

/* ---- creation ---- */

static int map_files(store *s, sl_err *err)
{
    const gguf_file *g = s->L->g;
    s->maps = calloc(g->n_parts, sizeof *s->maps);
    s->map_fds = malloc(g->n_parts * sizeof *s->map_fds);
    if (!s->maps || !s->map_fds) return sl_errf(err, "out of memory");
    for (uint32_t f = 0; f < g->n_parts; f++) s->map_fds[f] = -1;
    for (uint32_t f = 0; f < g->n_parts; f++) {
        s->map_fds[f] = open(g->parts[f].path, O_RDONLY | O_CLOEXEC);
        if (s->map_fds[f] < 0) return sl_errf(err, "%s: cannot open: %s", g->parts[f].path, strerror(errno));
        s->maps[f] = mmap(NULL, g->parts[f].size, PROT_READ, MAP_SHARED, s->map_fds[f], 0);
        if (s->maps[f] == MAP_FAILED) return sl_errf(err, "%s: mmap failed: %s", g->parts[f].path, strerror(errno));
    }
    return 0;
}

/* Slot memory: one anonymous mapping, populated up front so the resident
 * size is what the budget planned from the first token on, in huge pages:
 * with 4 KiB ones the products over cached experts ran 13% slower than over
 * the in-RAM provider's (docs/CACHE.md). */
static int alloc_slots(store *s, sl_err *err)
{
    s->slot_bytes = s->src->ops->slot_bytes(s->src);
    int64_t n = s->slot_bytes ? (int64_t)(s->cfg.cache_bytes / s->slot_bytes) : 0;
    if (n < 1)
        return sl_errf(err, "expert cache of %llu bytes cannot hold one expert (%llu bytes); raise --mem",
                       (unsigned long long)s->cfg.cache_bytes, (unsigned long long)s->slot_bytes);
    if (n > (int64_t)s->L->n_layers * s->L->n_expert) n = (int64_t)s->L->n_layers * s->L->n_expert;
    s->mem_bytes = (uint64_t)n * s->slot_bytes;
    s->mem = sl_big_map(s->mem_bytes);
    if (!s->mem)
        return sl_errf(err, "cannot allocate %llu bytes for the expert cache", (unsigned long long)s->mem_bytes);
    s->st.slots = (int)n;
    s->st.policy = s->cfg.policy;
    s->st.slot_bytes = s->slot_bytes;
    s->slot = calloc((size_t)n, sizeof *s->slot);
    if (!s->slot) return sl_errf(err, "out of memory");
    for (int64_t i = 0; i < n; i++) s->slot[i].req = -1;
    return cache_create(&s->cache, (int)n, s->L->n_layers, s->L->n_expert, s->cfg.policy, s->cfg.half_life, err);
}

/* ---- heat: LFRU seeding and the pinned tier ---- */

/* Reads the chosen experts into permanent slots through the same reads as
 * any miss; one token's experts always keep dynamic slots. */
static int load_pinned(store *s, sl_err *err)
{
    int64_t max = (int64_t)(s->cfg.pin_bytes / s->slot_bytes), room = cache_slots(s->cache) - s->L->n_used;
    if (max > room) max = room > 0 ? room : 0;
    int32_t *keys = malloc((size_t)(max > 0 ? max : 1) * sizeof *keys);
    if (!keys) return sl_errf(err, "out of memory");
    int n = heat_pick_pins(s->cfg.heat, (int)max, &s->cfg.pin, keys, s->st.heat_note, sizeof s->st.heat_note);
    int rc = 0, k = 0;
    for (int i = 0; i < n && !rc; i++) {
        int l = keys[i] / s->L->n_expert, e = keys[i] % s->L->n_expert;
        if (!expert_layout_bytes(s->L, l)) continue; /* no routed experts there */
        int64_t evicted;
        int slot = cache_admit(s->cache, l, e, &evicted);
        if (slot < 0) break; /* every slot pinned: the tier ends here */
        keys[k++] = keys[i];
        rc = submit_expert(s, slot, l, e, READ_DEMAND, err);
    }
    /* reads already queued land before anything else happens to their slots */
    while (s->io->ops->pending(s->io) > 0) {
        sl_err e;
        if (reap_one(s, rc ? &e : err)) {
            rc = -1;
            break;
        }
    }
    for (int i = 0; i < k; i++) {
        int slot = cache_find(s->cache, keys[i] / s->L->n_expert, keys[i] % s->L->n_expert);
        if (slot < 0) continue; /* cannot happen: admitted above and pinned since */
        if (!rc && s->slot[slot].failed) rc = slot_failed(s, slot, err);
        cache_unpin(s->cache, slot);
        cache_set_permanent(s->cache, slot);
    }
    free(keys);
    s->st.pinned = rc ? 0 : k;
    return rc;
}

static int apply_heat(store *s, sl_err *err)
{
    const heat_table *h = s->cfg.heat;
    if (!h) return 0;
    if (!s->cache) {
        snprintf(s->st.heat_note, sizeof s->st.heat_note, "heat unused: mmap mode has no expert cache");
        return 0;
    }
    if (h->n_layers != s->L->n_layers || h->n_expert != s->L->n_expert) {
        snprintf(s->st.heat_note, sizeof s->st.heat_note, "heat ignored: it is for %d x %d experts, the model has %d x %d",
                 h->n_layers, h->n_expert, s->L->n_layers, s->L->n_expert);
        return 0;
    }
    heat_seed_cache(h, s->cache, s->cfg.half_life);
    if (s->cfg.pin_bytes) return load_pinned(s, err);
    snprintf(s->st.heat_note, sizeof s->st.heat_note, "heat seeded the cache; no pinned tier");
    return 0;
}

static int make_io(store *s, sl_err *err)
{
    int rc;
    io_throttle all = {0};
    if (!s->cfg.throttle && s->cfg.throttle_bps > 0) {
        if (s->src->n_files > IO_THROTTLE_MAX)
            return sl_errf(err, "throttle: at most %d files, the source has %d", IO_THROTTLE_MAX, s->src->n_files);
        for (int f = 0; f < s->src->n_files; f++)
            all.fds[all.n] = s->src->ops->file_fd(s->src, (uint32_t)f), all.rates[all.n++] = s->cfg.throttle_bps;
        s->cfg.throttle = &all;
    }
    if (s->cfg.throttle) rc = io_pread_throttled_create(&s->io, 64, s->cfg.throttle, err);
    else if (s->cfg.io == STORE_IO_URING) rc = io_uring_create(&s->io, s->cfg.queue_depth, err);
    else rc = io_pread_create(&s->io, s->cfg.queue_depth < 16 ? s->cfg.queue_depth : 16, err);
    if (!rc && s->cfg.prefetch_depth > 0) s->io->ops->set_prefetch_depth(s->io, s->cfg.prefetch_depth);
    if (s->cfg.throttle == &all) s->cfg.throttle = NULL; /* copied by the backend */
    return rc;
}

int expert_store_create(expert_provider **out, const expert_layout *L, const store_config *cfg, sl_err *err)
{
    store *s = calloc(1, sizeof *s);
    if (!s) return sl_errf(err, "out of memory");
    s->base.ops = &STORE_OPS;
    s->src = cfg->source; /* owned from here on, even if creation fails */
    s->L = L;
    s->cfg = *cfg;
    s->cfg.chunk_bytes = align_up(cfg->chunk_bytes ? cfg->chunk_bytes : 1u << 20);
    s->last_layer = L->n_layers;
    s->layer_ev = -1;
    size_t ne = (size_t)L->n_expert;
    s->ids = calloc(ne, sizeof *s->ids);
    s->req = calloc(ne, sizeof *s->req);
    s->ready = calloc(ne, sizeof *s->ready);
    s->used = calloc((size_t)L->n_layers * ne, 1);
    s->hint_ids = calloc((size_t)L->n_layers * ne, sizeof *s->hint_ids);
    s->hint_n = calloc((size_t)L->n_layers, sizeof *s->hint_n);
    s->rank_prec = malloc((size_t)L->n_layers * PF_RANKS * sizeof *s->rank_prec);
    s->mark = calloc(ne, 1);
    s->touched = calloc(ne + 1, sizeof *s->touched);
    int rc = (!s->ids || !s->req || !s->ready || !s->used || !s->hint_ids || !s->hint_n || !s->rank_prec ||
              !s->mark || !s->touched)
                 ? sl_errf(err, "out of memory")
                 : 0;
    /* before any measurement: every rank worth a read (the pilot's own
     * 50% gate has already switched off layers it cannot predict) */
    for (int i = 0; !rc && i < L->n_layers * PF_RANKS; i++) s->rank_prec[i] = 0.6f;
    if (!rc && cfg->io == STORE_IO_MMAP) rc = map_files(s, err);
    if (!rc && s->src && cfg->io == STORE_IO_MMAP) rc = sl_errf(err, "mmap mode reads the GGUF itself; use --io uring or pread with a pack");
    if (!rc && !s->src && cfg->io != STORE_IO_MMAP) rc = source_gguf_create(&s->src, L, err);
    if (!rc && s->src) s->st.direct = s->src->direct;
    if (!rc && cfg->io != STORE_IO_MMAP) rc = alloc_slots(s, err);
    if (!rc && cfg->io != STORE_IO_MMAP) rc = make_io(s, err);
    if (!rc) rc = apply_heat(s, err);
    if (rc) {
        st_destroy(&s->base);
        return -1;
    }
    *out = &s->base;
    return 0;
}

void expert_store_stats(const expert_provider *p, store_stats *out)
{
    const store *s = (const store *)p;
    *out = s->st;
    out->accesses = (uint64_t)(s->log_base + s->n_log);
    if (s->io) {
        io_counters c;
        s->io->ops->counters(s->io, &c);
        out->read_busy_s = c.busy_s;
        out->demand_reads = c.demand_reads;
        out->demand_behind_prefetch = c.demand_behind_prefetch;
    }
    out->admit_busy = s->est.busy;
    out->admit_compute_s = s->est.compute_s;
    out->admit_read_s = s->est.rate > 0 ? (double)s->slot_bytes / s->est.rate : 0; /* the largest expert */
    if (s->cache) {
        cache_counters c = cache_get_counters(s->cache);
        out->evictions = c.evictions;
    }
}

int expert_store_optimum(const expert_provider *p, uint64_t *bytes, uint64_t *loads, sl_err *err)
{
    return expert_store_optimum_since(p, 0, bytes, loads, err);
}

int expert_store_optimum_since(const expert_provider *p, uint64_t from, uint64_t *bytes, uint64_t *loads,
                               sl_err *err)
{
    const store *s = (const store *)p;
    *bytes = *loads = 0;
    if (!s->cache) return sl_errf(err, "the optimum needs an expert cache (not mmap mode)");
    if (s->log_failed)
        return sl_errf(err, s->cfg.log_cap ? "out of memory for the access log: no optimum figure"
                                           : "no access log kept: no optimum figure");
    if (from < (uint64_t)s->log_base)
        return sl_errf(err, "the access log keeps the last %lld accesses: it no longer holds position %llu",
                       (long long)s->n_log, (unsigned long long)from);
    from -= (uint64_t)s->log_base;
    uint8_t *miss = malloc((size_t)(s->n_log > 0 ? s->n_log : 1));
    if (!miss) return sl_errf(err, "out of memory for the optimum");
    int64_t n = belady_misses(s->log, s->n_log, (int64_t)s->L->n_layers * s->L->n_expert, cache_slots(s->cache),
                              miss, err);
    for (int64_t i = (int64_t)from; n >= 0 && i < s->n_log; i++)
        if (miss[i]) *bytes += expert_layout_bytes(s->L, s->log[i] / s->L->n_expert), ++*loads;
    free(miss);
    return n < 0 ? -1 : 0;
}

/* The slot holding (LAYER, EXPERT), landed or in flight; -1: none. */
static int slot_of(const store *s, int layer, int expert)
{
    if (!s->cache || layer < 0 || layer >= s->L->n_layers || expert < 0 || expert >= s->L->n_expert) return -1;
    return cache_find(s->cache, layer, expert);
}

bool expert_store_holds(const expert_provider *p, int layer, int expert)
{
    return slot_of((const store *)p, layer, expert) >= 0;
}

bool expert_store_resident(const expert_provider *p, int layer, int expert)
{
    const store *s = (const store *)p;
    int i = slot_of(s, layer, expert);
    return i >= 0 && s->slot[i].chunks_left == 0;
}

const struct expert_source *expert_store_source(const expert_provider *p) { return ((const store *)p)->src; }
