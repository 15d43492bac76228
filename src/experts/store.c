#include "experts/store.h"
#include "experts/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ALIGN 4096u

static uint64_t align_down(uint64_t x) { return x & ~(uint64_t)(ALIGN - 1); }
static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) & ~(uint64_t)(ALIGN - 1); }

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
} slot_state;

/* A completion's tag names its slot, file and (aligned) offset, so a failed
 * read is reported exactly where it happened. */
static uint64_t make_tag(int slot, uint32_t file, uint64_t off)
{
    return (uint64_t)slot | (uint64_t)(file & 0xff) << 24 | (off / 4096) << 32;
}
static int tag_slot(uint64_t t) { return (int)(t & 0xffffff); }
static uint32_t tag_file(uint64_t t) { return (uint32_t)(t >> 24) & 0xff; }
static uint64_t tag_off(uint64_t t) { return (t >> 32) * 4096; }

typedef struct {
    int32_t slot;
    uint8_t state;
} req_state;

typedef struct {
    expert_provider base;
    const expert_layout *L;
    store_config cfg;
    io_backend *io;
    int *fds;               /* per gguf part: O_DIRECT fd (or plain) */
    uint8_t **maps;         /* mmap mode: per part mapping */
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

store_config store_config_default(uint64_t cache_bytes)
{
    return (store_config){.io = STORE_IO_URING, .cache_bytes = cache_bytes, .policy = CACHE_LFRU,
                          .half_life = 128, .queue_depth = 32, .chunk_bytes = 1u << 20};
}

uint64_t store_slot_bytes(const expert_layout *L)
{
    uint64_t best = 0;
    for (int l = 0; l < L->n_layers; l++) {
        uint64_t b = 0;
        for (int p = 0; p < L->layer[l].n_parts; p++) b += align_up(L->layer[l].parts[p].bytes) + ALIGN;
        if (b > best) best = b;
    }
    return best;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- views: where expert (l, e)'s part p starts inside its slot ---- */

static void slot_view(const store *s, int slot, int layer, int expert, expert_view *v)
{
    const expert_layer *el = &s->L->layer[layer];
    uint8_t *base = s->mem + (uint64_t)slot * s->slot_bytes;
    uint64_t cursor = 0;
    v->id = expert;
    for (int p = 0; p < el->n_parts; p++) {
        const expert_part *pt = &el->parts[p];
        uint64_t start = pt->off + (uint64_t)expert * pt->stride;
        v->parts[p] = base + cursor + (start - align_down(start));
        cursor += align_up(start + pt->bytes) - align_down(start);
    }
}

static void map_view(const store *s, int layer, int expert, expert_view *v)
{
    const expert_layer *el = &s->L->layer[layer];
    v->id = expert;
    for (int p = 0; p < el->n_parts; p++) {
        const expert_part *pt = &el->parts[p];
        v->parts[p] = s->maps[pt->file] + pt->off + (uint64_t)expert * pt->stride;
    }
}

/* ---- reads ---- */

/* Queues the chunked, aligned reads that fill SLOT with expert (l, e). */
static int submit_expert(store *s, int slot, int layer, int expert, sl_err *err)
{
    const expert_layer *el = &s->L->layer[layer];
    uint8_t *base = s->mem + (uint64_t)slot * s->slot_bytes;
    io_req reqs[256];
    int n = 0;
    uint64_t cursor = 0;
    slot_state *ss = &s->slot[slot];
    *ss = (slot_state){.req = ss->req, .layer = layer, .expert = expert};
    for (int p = 0; p < el->n_parts; p++) {
        const expert_part *pt = &el->parts[p];
        uint64_t start = pt->off + (uint64_t)expert * pt->stride;
        uint64_t a0 = align_down(start), a1 = align_up(start + pt->bytes);
        uint64_t fsize = s->L->g->parts[pt->file].size;
        if (a1 > align_up(fsize)) a1 = align_up(fsize);
        ss->expect += (a1 < fsize ? a1 : fsize) - a0; /* O_DIRECT stops at EOF */
        for (uint64_t o = a0; o < a1; o += s->cfg.chunk_bytes) {
            uint64_t len = a1 - o < s->cfg.chunk_bytes ? a1 - o : s->cfg.chunk_bytes;
            if (n == 256) {
                if (s->io->ops->submit(s->io, reqs, n, err)) return -1;
                n = 0;
            }
            reqs[n++] = (io_req){.fd = s->fds[pt->file], .off = o, .len = (uint32_t)len,
                                 .dst = base + cursor + (o - a0), .tag = make_tag(slot, pt->file, o)};
            ss->chunks_left++;
        }
        cursor += a1 - a0;
    }
    s->st.bytes_needed += expert_layout_bytes(s->L, layer);
    return s->io->ops->submit(s->io, reqs, n, err);
}

/* The error for a slot whose reads failed or came back short. */
static int slot_failed(store *s, int slot, sl_err *err)
{
    slot_state *ss = &s->slot[slot];
    const gguf_part *gp = &s->L->g->parts[ss->fail_file];
    struct stat st;
    if (fstat(s->fds[ss->fail_file], &st) == 0 && (uint64_t)st.st_size != gp->size)
        return sl_errf(err, "%s: model file changed size after opening (%llu -> %lld bytes) while reading expert %d of layer %d at offset %llu",
                       gp->path, (unsigned long long)gp->size, (long long)st.st_size, ss->expert, ss->layer,
                       (unsigned long long)ss->fail_off);
    return sl_errf(err, "%s: read of expert %d of layer %d at offset %llu failed: %s", gp->path, ss->expert,
                   ss->layer, (unsigned long long)ss->fail_off,
                   ss->failed == -ENODATA ? "short read (file truncated?)" : strerror(-ss->failed));
}

static void mark_failed(slot_state *ss, int32_t code, uint32_t file, uint64_t off)
{
    if (ss->failed) return;
    ss->failed = code;
    ss->fail_file = file;
    ss->fail_off = off;
}

/* Waits for one chunk; marks its slot ready when all chunks have landed. */
static int reap_one(store *s, sl_err *err)
{
    uint64_t tag;
    int64_t res;
    double t0 = now_s();
    int rc = s->io->ops->wait(s->io, &tag, &res, err);
    s->st.io_wait_s += now_s() - t0;
    if (rc) return -1;
    int slot = tag_slot(tag);
    slot_state *ss = &s->slot[slot];
    s->st.reads++;
    if (res > 0) s->st.bytes_read += (uint64_t)res, ss->got += (uint64_t)res;
    if (s->cfg.fault && res >= 0) {
        int f = s->cfg.fault(s->cfg.fault_ctx, tag_file(tag), tag_off(tag), (uint32_t)res);
        if (f) res = f;
    }
    if (res <= 0) mark_failed(ss, res < 0 ? (int32_t)res : -ENODATA, tag_file(tag), tag_off(tag));
    if (--ss->chunks_left > 0) return 0;
    if (!ss->failed && ss->got != ss->expect) mark_failed(ss, -ENODATA, tag_file(tag), tag_off(tag));
    if (ss->req >= 0) {
        s->req[ss->req].state = REQ_READY;
        s->ready[(s->ready_head + s->n_ready++) % s->n] = ss->req;
    }
    return 0;
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
        if (submit_expert(s, slot, s->layer, s->ids[i], err)) return -1;
    }
    return 0;
}

static int st_begin(expert_provider *p, int layer, const int32_t *ids, int n, sl_err *err)
{
    store *s = (store *)p;
    if (layer <= s->last_layer && s->cache) cache_next_token(s->cache);
    s->last_layer = s->layer = layer;
    s->n = n, s->n_ready = s->ready_head = s->n_done = 0;
    s->st.layers++;
    for (int i = 0; i < n; i++) {
        s->ids[i] = ids[i];
        uint8_t *u = &s->used[(int64_t)layer * s->L->n_expert + ids[i]];
        s->st.distinct += !*u;
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
        s->slot[slot].req = i;
        if (s->slot[slot].chunks_left == 0) push_ready(s, i);
        else s->req[i].state = REQ_LOADING;
    }
    return s->cfg.io == STORE_IO_MMAP ? 0 : admit_waiting(s, err);
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
        if (reap_one(s, err)) return -2;
    }
    int i = s->ready[s->ready_head];
    s->ready_head = (s->ready_head + 1) % s->n;
    s->n_ready--;
    s->n_done++;
    s->req[i].state = REQ_GIVEN;
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
    slot_view(s, slot, s->layer, s->ids[i], v);
    return i;
}

static void st_release(expert_provider *p, int i)
{
    store *s = (store *)p;
    if (i < 0 || i >= s->n || s->req[i].state != REQ_GIVEN) return;
    s->req[i].state = REQ_RELEASED;
    if (s->cfg.io == STORE_IO_MMAP) return;
    s->slot[s->req[i].slot].req = -1;
    cache_unpin(s->cache, s->req[i].slot);
}

/* Drains reads of this layer still in flight (after an error) so their
 * slots are consistent before reuse. */
static void st_end(expert_provider *p, int layer)
{
    store *s = (store *)p;
    (void)layer;
    if (s->cfg.io == STORE_IO_MMAP) return;
    sl_err ignored;
    while (s->io->ops->pending(s->io) > 0)
        if (reap_one(s, &ignored)) break;
    for (int i = 0; i < s->n; i++) {
        req_state *r = &s->req[i];
        if (r->state == REQ_WAIT_SLOT || r->state == REQ_RELEASED) continue;
        s->slot[r->slot].req = -1;
        cache_unpin(s->cache, r->slot);
        if (s->slot[r->slot].failed) cache_drop(s->cache, r->slot);
        r->state = REQ_RELEASED;
    }
    s->n = 0;
}

static void st_destroy(expert_provider *p)
{
    store *s = (store *)p;
    if (s->io) s->io->ops->destroy(s->io);
    for (uint32_t f = 0; s->fds && f < s->L->g->n_parts; f++)
        if (s->fds[f] >= 0) close(s->fds[f]);
    for (uint32_t f = 0; s->maps && f < s->L->g->n_parts; f++)
        if (s->maps[f] && s->maps[f] != MAP_FAILED) munmap(s->maps[f], s->L->g->parts[f].size);
    if (s->mem) munmap(s->mem, s->mem_bytes);
    cache_free(s->cache);
    free(s->fds), free(s->maps), free(s->slot), free(s->used), free(s->ids), free(s->req), free(s->ready);
    free(s);
}

static const expert_provider_ops STORE_OPS = {st_begin, st_next, st_release, st_end, NULL, st_destroy};

/* ---- creation ---- */

static int open_files(store *s, sl_err *err)
{
    const gguf_file *g = s->L->g;
    s->fds = malloc(g->n_parts * sizeof *s->fds);
    if (!s->fds) return sl_errf(err, "out of memory");
    s->st.direct = 1;
    for (uint32_t f = 0; f < g->n_parts; f++) s->fds[f] = -1;
    for (uint32_t f = 0; f < g->n_parts; f++) {
        int flags = O_RDONLY | O_CLOEXEC | (s->cfg.io == STORE_IO_MMAP ? 0 : O_DIRECT);
        s->fds[f] = open(g->parts[f].path, flags);
        if (s->fds[f] < 0 && errno == EINVAL && (flags & O_DIRECT)) {
            /* filesystems without O_DIRECT (tmpfs): still correct, but the
             * page cache holds a second copy; reported in the stats */
            s->st.direct = 0;
            s->fds[f] = open(g->parts[f].path, O_RDONLY | O_CLOEXEC);
        }
        if (s->fds[f] < 0) return sl_errf(err, "%s: cannot open for expert reads: %s", g->parts[f].path, strerror(errno));
    }
    if (s->cfg.io == STORE_IO_MMAP) s->st.direct = 0;
    return 0;
}

static int map_files(store *s, sl_err *err)
{
    const gguf_file *g = s->L->g;
    s->maps = calloc(g->n_parts, sizeof *s->maps);
    if (!s->maps) return sl_errf(err, "out of memory");
    for (uint32_t f = 0; f < g->n_parts; f++) {
        s->maps[f] = mmap(NULL, g->parts[f].size, PROT_READ, MAP_SHARED, s->fds[f], 0);
        if (s->maps[f] == MAP_FAILED) return sl_errf(err, "%s: mmap failed: %s", g->parts[f].path, strerror(errno));
    }
    return 0;
}

/* Slot memory: one anonymous mapping, populated up front so the resident
 * size is what the budget planned from the first token on. */
static int alloc_slots(store *s, sl_err *err)
{
    s->slot_bytes = store_slot_bytes(s->L);
    int64_t n = s->slot_bytes ? (int64_t)(s->cfg.cache_bytes / s->slot_bytes) : 0;
    if (n < 1)
        return sl_errf(err, "expert cache of %llu bytes cannot hold one expert (%llu bytes); raise --mem",
                       (unsigned long long)s->cfg.cache_bytes, (unsigned long long)s->slot_bytes);
    if (n > (int64_t)s->L->n_layers * s->L->n_expert) n = (int64_t)s->L->n_layers * s->L->n_expert;
    s->mem_bytes = (uint64_t)n * s->slot_bytes;
    s->mem = mmap(NULL, s->mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (s->mem == MAP_FAILED) {
        s->mem = NULL;
        return sl_errf(err, "cannot allocate %llu bytes for the expert cache", (unsigned long long)s->mem_bytes);
    }
    s->st.slots = (int)n;
    s->st.slot_bytes = s->slot_bytes;
    s->slot = calloc((size_t)n, sizeof *s->slot);
    if (!s->slot) return sl_errf(err, "out of memory");
    for (int64_t i = 0; i < n; i++) s->slot[i].req = -1;
    return cache_create(&s->cache, (int)n, s->L->n_layers, s->L->n_expert, s->cfg.policy, s->cfg.half_life, err);
}

static int make_io(store *s, sl_err *err)
{
    if (s->cfg.io == STORE_IO_URING) return io_uring_create(&s->io, s->cfg.queue_depth, err);
    return io_pread_create(&s->io, s->cfg.queue_depth < 16 ? s->cfg.queue_depth : 16, err);
}

int expert_store_create(expert_provider **out, const expert_layout *L, const store_config *cfg, sl_err *err)
{
    store *s = calloc(1, sizeof *s);
    if (!s) return sl_errf(err, "out of memory");
    s->base.ops = &STORE_OPS;
    s->L = L;
    s->cfg = *cfg;
    s->cfg.chunk_bytes = (uint32_t)align_up(cfg->chunk_bytes ? cfg->chunk_bytes : 1u << 20);
    s->last_layer = L->n_layers;
    size_t ne = (size_t)L->n_expert;
    s->ids = calloc(ne, sizeof *s->ids);
    s->req = calloc(ne, sizeof *s->req);
    s->ready = calloc(ne, sizeof *s->ready);
    s->used = calloc((size_t)L->n_layers * ne, 1);
    int rc = (!s->ids || !s->req || !s->ready || !s->used) ? sl_errf(err, "out of memory") : 0;
    if (!rc) rc = open_files(s, err);
    if (!rc && cfg->io == STORE_IO_MMAP) rc = map_files(s, err);
    if (!rc && cfg->io != STORE_IO_MMAP) rc = alloc_slots(s, err);
    if (!rc && cfg->io != STORE_IO_MMAP) rc = make_io(s, err);
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
    if (s->cache) {
        cache_counters c = cache_get_counters(s->cache);
        out->evictions = c.evictions;
    }
}
