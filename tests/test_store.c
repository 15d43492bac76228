/* The SSD expert store against plain reads of the same bytes: every expert
 * it hands out must equal the GGUF slice, for every I/O mode and cache size
 * (down to caches smaller than one layer's working set), in any arrival
 * order; failed, short and truncated reads must be errors naming file and
 * offset, never a skipped expert; trace replays check the cache policy. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "experts/admit.h"
#include "experts/belady.h"
#include "experts/io.h"
#include "experts/layout.h"
#include "experts/store.h"
#include "kernels/kernels.h"
#include "experts/trace.h"
#include "util/bigbuf.h"
#include "util/clock.h"
#include "util/fileio.h"
#include "t.h"
#include "view_check.h"

static const char *PARTS[] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};

static int build_layout(expert_layout *L, const gguf_file *g, sl_err *err)
{
    if (expert_layout_init(L, g, 6, 32, 4, err)) return -1;
    for (int l = 0; l < 6; l++)
        for (int p = 0; p < 3; p++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, PARTS[p]);
            const gguf_tensor *t = gguf_find_tensor(g, name);
            if (!t) return sl_errf(err, "missing %s", name);
            if (expert_layout_add(L, l, t, err)) return -1;
        }
    return 0;
}

/* The bundled model and its expert layout. */
static int open_tinymoe(gguf_file **g, expert_layout *L, sl_err *err)
{
    return gguf_open(g, "models/tinymoe-q8_0.gguf", err) || build_layout(L, *g, err) ? -1 : 0;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Runs N_PASSES forward passes of random routing with batch size BATCH
 * (distinct experts per layer) and checks every view. */
static void run_passes_policy(const char *name, store_io io, int slots, int batch, int n_passes, cache_policy pol)
{
    t_begin(name);
    sl_err err;
    gguf_file *g;
    expert_layout L;
    if (open_tinymoe(&g, &L, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    store_config cfg = store_config_default(store_slot_bytes(&L) * (uint64_t)slots);
    cfg.io = io;
    cfg.policy = pol;
    cfg.chunk_bytes = 64 << 10; /* several chunks per part */
    expert_provider *p;
    if (expert_store_create(&p, &L, &cfg, &err)) {
        T_CHECK(0, "%s", err.msg);
        goto out;
    }
    int bad = 0, handed = 0, interleaved = 0;
    for (int pass = 0; pass < n_passes && !bad; pass++) {
        for (int l = 0; l < 6 && !bad; l++) {
            int32_t ids[32];
            int n = 0;
            uint32_t used = 0;
            while (n < batch) {
                uint32_t e = rnd(32);
                if (!(used >> e & 1)) used |= 1u << e, ids[n++] = (int32_t)e;
            }
            T_CHECK(p->ops->begin(p, l, ids, n, &err) == 0, "begin: %s", err.msg);
            uint32_t seen = 0;
            expert_view v;
            int i;
            while ((i = p->ops->next(p, &v, &err)) >= 0) {
                if (v.id != ids[i] || (seen >> i & 1) || view_matches_gguf(g, &L, l, &v)) bad++;
                seen |= 1u << i;
                handed++;
                interleaved += v.layout[0] != SL_LAYOUT_ROWS;
                p->ops->release(p, i);
            }
            T_CHECK(i == -1, "next failed: %s", err.msg);
            T_CHECK(seen == (n == 32 ? 0xffffffffu : (1u << n) - 1), "not every expert handed out once");
            p->ops->end(p, l);
        }
    }
    T_CHECK(!bad, "%d views differ from the GGUF bytes", bad);
    store_stats st;
    expert_store_stats(p, &st);
    T_CHECK(st.hits + st.misses == (uint64_t)handed || io == STORE_IO_MMAP, "hits %llu + misses %llu != %d",
            (unsigned long long)st.hits, (unsigned long long)st.misses, handed);
    T_CHECK(io == STORE_IO_MMAP || st.bytes_read >= st.bytes_needed, "read less than needed");
    /* a hit is a slot's second use or later: its Q8_0 parts are interleaved
     * (on AVX-512), a slot just read is handed out as read */
    uint64_t want_il = io != STORE_IO_MMAP && kernels_isa_detected() >= SL_ISA_AVX512 ? st.hits : 0;
    T_CHECK((uint64_t)interleaved == want_il, "%d views interleaved, %llu expected", interleaved,
            (unsigned long long)want_il);
    /* alignment overhead only: at most two extra 4 KiB pages per part */
    T_CHECK(io == STORE_IO_MMAP || st.bytes_read <= st.bytes_needed + st.misses * 3 * 8192, "read amplification");
    p->ops->destroy(p);
out:
    expert_layout_free(&L);
    gguf_close(g);
    t_end();
}

static void run_passes(const char *name, store_io io, int slots, int batch, int n_passes)
{
    run_passes_policy(name, io, slots, batch, n_passes, store_config_default(0).policy);
}

/* Fault hook: fail the Nth completed read with EIO. */
typedef struct {
    int countdown;
    uint64_t off;
} fault_ctx;

static int fail_nth(void *ctx, uint32_t file, uint64_t off, uint32_t len)
{
    fault_ctx *f = ctx;
    (void)file, (void)len;
    if (--f->countdown == 0) {
        f->off = off;
        return -EIO;
    }
    return 0;
}

static void injected_fault(store_io io)
{
    char name[64];
    snprintf(name, sizeof name, "store: injected EIO is an error naming file and offset (%s)", store_io_name(io));
    t_begin(name);
    sl_err err;
    gguf_file *g;
    expert_layout L;
    if (open_tinymoe(&g, &L, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    fault_ctx fc = {.countdown = 3};
    store_config cfg = store_config_default(store_slot_bytes(&L) * 8);
    cfg.io = io;
    cfg.fault = fail_nth;
    cfg.fault_ctx = &fc;
    expert_provider *p;
    T_CHECK(expert_store_create(&p, &L, &cfg, &err) == 0, "%s", err.msg);
    int32_t ids[4] = {1, 2, 3, 4};
    T_CHECK(p->ops->begin(p, 2, ids, 4, &err) == 0, "begin");
    expert_view v;
    int i, failed = 0;
    while ((i = p->ops->next(p, &v, &err)) >= 0 || (i == -2 && !failed++)) {
        if (i >= 0) p->ops->release(p, i);
        else {
            char want[64];
            snprintf(want, sizeof want, "offset %llu failed", (unsigned long long)fc.off);
            T_CHECK(strstr(err.msg, "tinymoe-q8_0.gguf") && strstr(err.msg, want) && strstr(err.msg, "layer 2"),
                    "message: %s (want '%s')", err.msg, want);
        }
    }
    T_CHECK(failed == 1, "the failed read was not reported");
    p->ops->end(p, 2);
    /* the failed expert was dropped: asking again reads it again, correctly */
    T_CHECK(p->ops->begin(p, 2, ids, 4, &err) == 0, "begin again");
    int ok = 0;
    while ((i = p->ops->next(p, &v, &err)) >= 0) ok += view_matches_gguf(g, &L, 2, &v) == 0, p->ops->release(p, i);
    T_CHECK(i == -1 && ok == 4, "recovery after a failed read: %d ok, %s", ok, i == -2 ? err.msg : "");
    p->ops->end(p, 2);
    p->ops->destroy(p);
    expert_layout_free(&L);
    gguf_close(g);
    t_end();
}

/* The model file shrinks while the store is reading from it. */
static void truncated_file(void)
{
    t_begin("store: model file truncated during the run");
    char path[] = "/var/tmp/sluice-store-XXXXXX";
    int fd = mkstemp(path);
    sl_err err;
    char *data = NULL;
    size_t len = 0;
    if (fd < 0 || sl_read_file("models/tinymoe-q8_0.gguf", &data, &len, &err) ||
        sl_write_full(fd, data, len, path, &err)) {
        T_CHECK(0, "cannot make a copy: %s", err.msg);
        t_end();
        return;
    }
    free(data);
    gguf_file *g;
    expert_layout L;
    T_CHECK(gguf_open(&g, path, &err) == 0 && build_layout(&L, g, &err) == 0, "%s", err.msg);
    store_config cfg = store_config_default(store_slot_bytes(&L) * 8);
    expert_provider *p;
    T_CHECK(expert_store_create(&p, &L, &cfg, &err) == 0, "%s", err.msg);
    T_CHECK(ftruncate(fd, (off_t)L.layer[3].parts[0].off) == 0, "truncate");
    int32_t ids[2] = {5, 9};
    T_CHECK(p->ops->begin(p, 4, ids, 2, &err) == 0, "begin");
    expert_view v;
    int i;
    while ((i = p->ops->next(p, &v, &err)) >= 0) p->ops->release(p, i);
    T_CHECK(i == -2 && strstr(err.msg, "changed size after opening") && strstr(err.msg, path) &&
                strstr(err.msg, "offset"),
            "message: %s", i == -2 ? err.msg : "(no error)");
    p->ops->end(p, 4);
    p->ops->destroy(p);
    expert_layout_free(&L);
    gguf_close(g);
    close(fd);
    unlink(path);
    t_end();
}

static void too_small(void)
{
    t_begin("store: a cache that cannot hold one expert is a clear error");
    sl_err err;
    gguf_file *g;
    expert_layout L;
    T_CHECK(open_tinymoe(&g, &L, &err) == 0, "open");
    store_config cfg = store_config_default(1000);
    expert_provider *p;
    T_CHECK(expert_store_create(&p, &L, &cfg, &err) == -1 && strstr(err.msg, "cannot hold one expert"),
            "message: %s", err.msg);
    expert_layout_free(&L);
    gguf_close(g);
    t_end();
}

/* Policy sanity on the real trace: LFRU is not worse than LRU and beats the
 * uniform share once the cache holds more than one token's working set. */
static void trace_policies(void)
{
    const char *path = t_shared("traces/tinymoe-valid-routes.json");
    if (!path) {
        t_skip("store: cache policies on the tinymoe routing trace", "../shared not present");
        return;
    }
    t_begin("store: cache policies on the tinymoe routing trace");
    route_trace t;
    sl_err err;
    if (trace_load(&t, path, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    int total = t.n_layers * t.n_expert;
    for (int slots = 24; slots <= total / 2; slots *= 2) {
        cache_counters lru, lfru;
        T_CHECK(trace_replay(&t, slots, CACHE_LRU, 128, 0, &lru, &err) == 0, "%s", err.msg);
        T_CHECK(trace_replay(&t, slots, CACHE_LFRU, 128, 0, &lfru, &err) == 0, "%s", err.msg);
        double h_lru = (double)lru.hits / (double)(lru.hits + lru.misses);
        double h_lfru = (double)lfru.hits / (double)(lfru.hits + lfru.misses);
        T_CHECK(h_lfru >= h_lru, "%d slots: lfru %.3f < lru %.3f", slots, h_lfru, h_lru);
        T_CHECK(h_lfru > (double)slots / total, "%d slots: lfru %.3f not above uniform %.3f", slots, h_lfru,
                (double)slots / total);
    }
    trace_free(&t);
    t_end();
}

/* The I/O queue: a prefetch read waits while a demand read is at the
 * device, a promoted one goes before older prefetches, a dropped one never
 * completes.  Two readers on a simulated 16 KB/s drive, so each 4 KiB read
 * takes 0.25 s and the queue is rearranged while the first is in flight. */
static int keep_promote_drop(void *ctx, const io_req *r)
{
    (void)ctx;
    return r->tag == 2 ? IO_PROMOTE : r->tag == 3 ? IO_DROP : IO_KEEP;
}

static void io_queue_rules(void)
{
    t_begin("io: prefetch only into idle time; promoted before older guesses; dropped never read");
    sl_err err;
    int fd = open("models/tinymoe-q8_0.gguf", O_RDONLY);
    static uint8_t buf[4][4096];
    io_throttle th = {.n = 1, .fds = {fd}, .rates = {16384}};
    io_backend *b;
    if (fd < 0 || io_pread_throttled_create(&b, 2, &th, &err)) {
        T_CHECK(0, "setup: %s", fd < 0 ? "open" : err.msg);
        if (fd >= 0) close(fd);
        t_end();
        return;
    }
    b->ops->set_prefetch_depth(b, 1);
    io_req r[4];
    for (int i = 0; i < 4; i++)
        r[i] = (io_req){.fd = fd, .off = (uint64_t)i * 4096, .len = 4096, .prio = i ? 1 : 0, .dst = buf[i], .tag = (uint64_t)i};
    T_CHECK(b->ops->submit(b, r, 4, &err) == 0, "%s", err.msg);
    b->ops->requeue(b, NULL, keep_promote_drop, NULL);
    uint64_t order[4];
    int n = 0;
    while (b->ops->pending(b) > 0 && n < 4) {
        io_done d;
        if (b->ops->wait(b, &d, &err)) break;
        order[n] = d.tag;
        T_CHECK(d.res == 4096 && d.off == d.tag * 4096, "read %llu at %llu returned %lld", (unsigned long long)d.tag,
                (unsigned long long)d.off, (long long)d.res);
        n++;
    }
    T_CHECK(n == 3 && order[0] == 0 && order[1] == 2 && order[2] == 1, "completion order %llu %llu %llu (%d reads)",
            (unsigned long long)order[0], (unsigned long long)order[1], (unsigned long long)order[2], n);
    b->ops->destroy(b);
    close(fd);
    t_end();
}

/* Every queued read completes exactly once with its own offset, however
 * many are held at once (the pread backend once grew its completion list in
 * the reader thread and dropped a completion when that failed); a submit
 * that cannot be held queues nothing and leaves the earlier reads alone. */
static void io_every_completion(bool uring)
{
    t_begin(uring ? "io: uring, 3000 reads held at once each complete once; an oversized submit queues nothing"
                  : "io: pread, 3000 reads held at once each complete once; an oversized submit queues nothing");
    enum { N = 3000, LEN = 4096 };
    sl_err err;
    int fd = open("models/tinymoe-q8_0.gguf", O_RDONLY);
    uint8_t *buf = malloc((size_t)N * LEN), *seen = calloc(N, 1);
    io_req *r = malloc(N * sizeof *r);
    io_backend *b = NULL;
    int rc = fd < 0 || !buf || !seen || !r ? -1 : uring ? io_uring_create(&b, 8, &err) : io_pread_create(&b, 1, &err);
    if (rc) {
        if (uring && fd >= 0) t_skip("io uring completions", err.msg);
        else T_CHECK(0, "setup: %s", fd < 0 ? "open" : err.msg);
    } else {
        for (int i = 0; i < N; i++)
            r[i] = (io_req){.fd = fd, .off = (uint64_t)(i % 64) * LEN, .len = LEN, .prio = (uint8_t)(i % 3 == 0),
                            .dst = buf + (size_t)i * LEN, .tag = (uint64_t)i};
        T_CHECK(b->ops->submit(b, r, N, &err) == 0, "%s", err.msg);
        int held = b->ops->pending(b);
        T_CHECK(b->ops->submit(b, r, (1 << 24) + 1, &err) == -1 && strstr(err.msg, "queueing"),
                "an oversized submit was taken: %s", err.msg);
        T_CHECK(b->ops->pending(b) <= held, "the refused submit queued reads: %d > %d", b->ops->pending(b), held);
        int n = 0, bad = 0;
        io_done d;
        while (b->ops->pending(b) > 0 && b->ops->wait(b, &d, &err) == 0) {
            n++;
            if (d.tag >= N || seen[d.tag]++ || d.res != LEN || d.off != r[d.tag].off) bad++;
        }
        T_CHECK(n == N && bad == 0, "%d completions of %d, %d wrong or repeated", n, N, bad);
        T_CHECK(b->ops->wait(b, &d, &err) == -1 && strstr(err.msg, "no reads in flight"), "wait after the last: %s",
                err.msg);
        b->ops->destroy(b);
    }
    if (fd >= 0) close(fd);
    free(buf), free(seen), free(r);
    t_end();
}


/* Guesses go into their own device's idle time (io.c, devices): with a
 * demand read in flight on one disk, a guess for that disk waits and a
 * guess for another disk (tmpfs: another st_dev) goes at once.  io_uring
 * issues in submit, so what is still queued right after it is exact. */
static void note_queued(void *ctx, const io_req *r) { *(unsigned *)ctx |= 1u << r->tag; }
static int keep_all(void *ctx, const io_req *r) { (void)ctx, (void)r; return IO_KEEP; }

static void io_per_device(void)
{
    t_begin("io: a guess waits for a demand read on its own disk only; another disk's guess goes at once");
    sl_err err;
    char path[] = "/dev/shm/sluice-io-XXXXXX";
    static uint8_t buf[3][4096], page[4096];
    int fa = open("models/tinymoe-q8_0.gguf", O_RDONLY), fb = mkstemp(path);
    if (fb >= 0) unlink(path);
    struct stat sa, sb;
    io_backend *b = NULL;
    if (fa < 0 || fb < 0 || fstat(fa, &sa) || fstat(fb, &sb) || sa.st_dev == sb.st_dev ||
        write(fb, page, sizeof page) != (ssize_t)sizeof page) {
        t_skip("io per device", "no file on a second device (/dev/shm)");
    } else if (io_uring_create(&b, 8, &err)) {
        t_skip("io per device", err.msg);
    } else {
        b->ops->set_prefetch_depth(b, 1);
        io_req r[3] = {{.fd = fa, .off = 0, .len = 4096, .prio = 0, .dst = buf[0], .tag = 0},
                       {.fd = fa, .off = 4096, .len = 4096, .prio = 1, .dst = buf[1], .tag = 1},
                       {.fd = fb, .off = 0, .len = 4096, .prio = 1, .dst = buf[2], .tag = 2}};
        T_CHECK(b->ops->submit(b, r, 3, &err) == 0, "%s", err.msg);
        unsigned queued = 0;
        b->ops->requeue(b, note_queued, keep_all, &queued);
        T_CHECK(queued == 2u, "queued after submit: mask %#x, want only the same disk's guess (0x2)", queued);
        int n = 0, bad = 0;
        io_done d;
        while (b->ops->pending(b) > 0 && b->ops->wait(b, &d, &err) == 0) n++, bad += d.res != 4096;
        T_CHECK(n == 3 && !bad, "%d of 3 reads completed, %d short", n, bad);
        b->ops->destroy(b);
    }
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    t_end();
}

/* A read's busy time (io_done.busy_s) counts from when it reaches the
 * device: a guess held back behind a demand read on its disk does not
 * count the wait (the drive scheduler's rates, sched.h).  Two fds of one
 * file (one disk), throttled to 100 ms and 10 ms a read: the guess waits
 * about 100 ms and is at the device about 10. */
static void io_busy_at_device(void)
{
    t_begin("io: a read's busy time starts at the device, not while it waits in the queue");
    sl_err err;
    static uint8_t buf[2][4096];
    int fa = open("models/tinymoe-q8_0.gguf", O_RDONLY), fb = open("models/tinymoe-q8_0.gguf", O_RDONLY);
    io_backend *b = NULL;
    io_throttle th = {.n = 2, .fds = {fa, fb}, .rates = {4096 / 0.1, 4096 / 0.01}};
    if (fa < 0 || fb < 0 || io_pread_throttled_create(&b, 2, &th, &err)) {
        T_CHECK(0, "setup: %s", fa < 0 || fb < 0 ? "open" : err.msg);
    } else {
        io_req r[2] = {{.fd = fa, .off = 0, .len = 4096, .prio = 0, .dst = buf[0], .tag = 0},
                       {.fd = fb, .off = 4096, .len = 4096, .prio = 1, .dst = buf[1], .tag = 1}};
        double t0 = sl_now();
        T_CHECK(b->ops->submit(b, r, 2, &err) == 0, "%s", err.msg);
        double busy[2] = {-1, -1}, took = 0;
        io_done d;
        while (b->ops->pending(b) > 0 && b->ops->wait(b, &d, &err) == 0)
            if (d.tag < 2 && d.res == 4096) busy[d.tag] = d.busy_s, took = sl_now() - t0;
        T_CHECK(took >= 0.11, "both reads took %.0f ms, want >= 110 (the guess after the demand read)", took * 1e3);
        T_CHECK(busy[0] >= 0.1 && busy[0] < took + 1e-3, "demand read busy %.1f ms, want 100 ms to %.0f",
                busy[0] * 1e3, took * 1e3);
        T_CHECK(busy[1] >= 0.01 && busy[1] < took - 0.05, "guess busy %.1f ms, want 10 ms, far below the %.0f ms since submit",
                busy[1] * 1e3, took * 1e3);
        b->ops->destroy(b);
    }
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    t_end();
}

/* A deep queue: past the first reads in flight the kernel's io-wq workers
 * issue them (io.c, URING_INLINE); each still lands the file's own bytes
 * at its own offset, once. */
static void io_deep_queue(void)
{
    t_begin("io: uring, 256 in flight (the deeper ones issued by io-wq) land the file's bytes, each once");
    enum { N = 1024, LEN = 65536 };
    sl_err err;
    int fd = open("models/tinymoe-q8_0.gguf", O_RDONLY | O_DIRECT); /* as the store reads */
    if (fd < 0) fd = open("models/tinymoe-q8_0.gguf", O_RDONLY);     /* a filesystem without O_DIRECT */
    uint8_t *buf = aligned_alloc(4096, (size_t)N * LEN), *ref = aligned_alloc(4096, LEN), *seen = calloc(N, 1);
    io_req *r = malloc(N * sizeof *r);
    io_backend *b = NULL;
    if (fd < 0 || !buf || !ref || !seen || !r) {
        T_CHECK(0, "setup");
    } else if (io_uring_create(&b, 256, &err)) {
        t_skip("io uring deep queue", err.msg);
    } else {
        for (int i = 0; i < N; i++)
            r[i] = (io_req){.fd = fd, .off = (uint64_t)((i * 37) % 512) * LEN, .len = LEN, .dst = buf + (size_t)i * LEN,
                            .tag = (uint64_t)i};
        T_CHECK(b->ops->submit(b, r, N, &err) == 0, "%s", err.msg);
        int n = 0, bad = 0;
        io_done d;
        while (b->ops->pending(b) > 0 && b->ops->wait(b, &d, &err) == 0) {
            n++;
            if (d.tag >= N || seen[d.tag]++ || d.res != LEN || d.off != r[d.tag].off) bad++;
            else if (pread(fd, ref, LEN, (off_t)d.off) != LEN || memcmp(ref, r[d.tag].dst, LEN)) bad++;
        }
        T_CHECK(n == N && bad == 0, "%d completions of %d, %d wrong, repeated or not the file's bytes", n, N, bad);
        b->ops->destroy(b);
    }
    if (fd >= 0) close(fd);
    free(buf), free(ref), free(seen), free(r);
    t_end();
}

/* The cost rule's decisions against the inequality written out as the
 * docs state it (with min(), undivided), over a grid, and against cases
 * worked by hand: an idle disk reads any guess with a chance of use, a
 * saturated one none; at half busy with the read hidden by compute the bar
 * is 1/2 (the old rank rule's), with a read 4x the compute it is 4/5. */
static bool cost_reference(double p, double read, double compute, double busy)
{
    double hidden = read < compute ? read : compute;
    return p * hidden * (1 - busy) > (1 - p) * read * busy;
}

static void admit_rule(void)
{
    t_begin("prefetch admission: cost rule's decisions = p min(R,C)(1-b) > (1-p) R b; thresholds by hand");
    static const double P[] = {0, 0.05, 0.2, 0.3, 0.5, 0.6, 0.75, 0.9, 0.99, 1};
    static const double B[] = {0, 0.1, 0.25, 0.5, 0.7, 0.9, 0.99, 1};
    static const double RC[][2] = {{1e-3, 1e-3}, {1e-4, 1e-3}, {2e-3, 1e-3}, {4e-3, 1e-3}, {0.1, 1e-3}, {1e-3, 0.1}};
    int bad = 0, n = 0;
    for (size_t i = 0; i < sizeof P / sizeof *P; i++)
        for (size_t j = 0; j < sizeof B / sizeof *B; j++)
            for (size_t k = 0; k < sizeof RC / sizeof *RC; k++, n++) {
                double r = RC[k][0], c = RC[k][1];
                bool got = pf_admit_cost(P[i], r, c, B[j]), want = cost_reference(P[i], r, c, B[j]);
                /* away from the boundary the two must agree exactly */
                double th = pf_admit_threshold(r, c, B[j]);
                if (got != want && fabs(P[i] - th) > 1e-9) bad++;
                if (th < 1 && got != (P[i] > th) && fabs(P[i] - th) > 1e-9) bad++;
            }
    T_CHECK(!bad, "%d of %d decisions differ from the reference inequality", bad, n);
    /* worked by hand */
    T_CHECK(pf_admit_cost(0.01, 1e-3, 1e-3, 0) && !pf_admit_cost(0, 1e-3, 1e-3, 0), "idle disk");
    T_CHECK(!pf_admit_cost(0.999, 1e-3, 1e-3, 1) && pf_admit_threshold(1e-3, 1e-3, 1) == 1, "saturated disk");
    T_CHECK(!pf_admit_cost(0.49, 1e-4, 1e-3, 0.5) && pf_admit_cost(0.51, 1e-4, 1e-3, 0.5), "half busy, read hidden");
    T_CHECK(fabs(pf_admit_threshold(4e-3, 1e-3, 0.5) - 0.8) < 1e-12 && !pf_admit_cost(0.79, 4e-3, 1e-3, 0.5) &&
                pf_admit_cost(0.81, 4e-3, 1e-3, 0.5),
            "half busy, read 4x compute: threshold %.6f", pf_admit_threshold(4e-3, 1e-3, 0.5));
    /* b = 0.25, read hidden: p (0.75) > (1 - p) 0.25  <=>  p > 1/4 */
    T_CHECK(fabs(pf_admit_threshold(1e-3, 2e-3, 0.25) - 0.25) < 1e-12, "quarter busy");
    /* not measured yet (0): read taken as equal to compute */
    T_CHECK(pf_admit_cost(0.6, 0, 0, 0.5) && !pf_admit_cost(0.4, 0, 1e-3, 0.5), "unmeasured read or compute");
    T_CHECK(pf_admit_rank(0.5, 0.6) && !pf_admit_rank(0.49, 0.6) && pf_admit_rank(0.25, 0.5) &&
                !pf_admit_rank(0.24, 0.1),
            "rank rule");
    T_CHECK(pf_admit_parse("cost") == PF_ADMIT_COST && pf_admit_parse("RANK") == PF_ADMIT_RANK &&
                pf_admit_parse("off") == PF_ADMIT_OFF && pf_admit_parse("on") == -1 &&
                !strcmp(pf_admit_name(PF_ADMIT_OFF), "off"),
            "names");
    t_end();
}

/* The device meter (io.h): busy time runs from a read reaching the device
 * to its landing, not to when the caller reaps it; a demand read that
 * arrives while a prefetch is at the device is counted as behind it.  A
 * simulated 4 KB/s drive, so one 4 KiB read takes 1 s. */
static void io_meter(void)
{
    t_begin("io: device busy time ends when a read lands, not when reaped; demand reads behind a prefetch counted");
    sl_err err;
    int fd = open("models/tinymoe-q8_0.gguf", O_RDONLY);
    static uint8_t buf[3][4096];
    io_throttle th = {.n = 1, .fds = {fd}, .rates = {4096}};
    io_backend *b;
    if (fd < 0 || io_pread_throttled_create(&b, 2, &th, &err)) {
        T_CHECK(0, "setup: %s", fd < 0 ? "open" : err.msg);
        if (fd >= 0) close(fd);
        t_end();
        return;
    }
    io_req r[3];
    for (int i = 0; i < 3; i++)
        r[i] = (io_req){.fd = fd, .off = (uint64_t)i * 4096, .len = 4096, .prio = i == 0, .dst = buf[i], .tag = (uint64_t)i};
    double t0 = sl_now();
    T_CHECK(b->ops->submit(b, &r[0], 1, &err) == 0, "%s", err.msg); /* a guess: the device is idle */
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    T_CHECK(b->ops->submit(b, &r[1], 1, &err) == 0, "%s", err.msg); /* demand, behind the guess */
    io_done d;
    int n = 0;
    while (n < 2 && b->ops->wait(b, &d, &err) == 0) n++;
    double landed = sl_now() - t0;
    ts.tv_sec = 1, ts.tv_nsec = 0;
    nanosleep(&ts, NULL); /* "compute" with nothing at the device */
    io_counters c;
    b->ops->counters(b, &c);
    T_CHECK(n == 2 && c.demand_reads == 1 && c.demand_behind_prefetch == 1, "%d reads, %llu demand, %llu behind", n,
            (unsigned long long)c.demand_reads, (unsigned long long)c.demand_behind_prefetch);
    /* two serial 1 s reads: at least 2 s at the device, and no more than
     * until the second landed (the idle second after it is not counted) */
    T_CHECK(c.busy_s >= 1.99 && c.busy_s <= landed + 0.05, "busy %.3f s, reads landed after %.3f s", c.busy_s, landed);
    T_CHECK(b->ops->submit(b, &r[2], 1, &err) == 0 && b->ops->wait(b, &d, &err) == 0, "%s", err.msg);
    b->ops->counters(b, &c);
    T_CHECK(c.demand_reads == 2 && c.demand_behind_prefetch == 1, "alone at the device: %llu demand, %llu behind",
            (unsigned long long)c.demand_reads, (unsigned long long)c.demand_behind_prefetch);
    b->ops->destroy(b);
    close(fd);
    t_end();
}

/* Four distinct random experts of 32 into IDS. */
static void pick4(int32_t ids[4])
{
    uint32_t used = 0;
    for (int n = 0; n < 4;) {
        uint32_t e = rnd(32);
        if (!(used >> e & 1)) used |= 1u << e, ids[n++] = (int32_t)e;
    }
}

/* Random decode-sized routing; with HINT, before each layer's experts a
 * hint for the next layer: two of its experts, then two it will not use.
 * On a simulated drive with no compute the disk is the limit.  Fills ST
 * with the store's counters; returns nonzero if a run failed or a view
 * differed from the GGUF bytes. */
static int hinted_passes(pf_admit_mode mode, double bps, int n_passes, bool hint, store_stats *st)
{
    sl_err err;
    gguf_file *g;
    expert_layout L;
    if (open_tinymoe(&g, &L, &err)) return -1;
    store_config cfg = store_config_default(store_slot_bytes(&L) * 24);
    cfg.prefetch_admit = mode;
    cfg.throttle_bps = bps;
    expert_provider *p;
    int bad = 0;
    if (expert_store_create(&p, &L, &cfg, &err)) {
        bad = -1;
        goto out;
    }
    rng = 4242;
    for (int pass = 0; pass < n_passes && !bad; pass++) {
        int32_t route[6][4];
        for (int l = 0; l < 6; l++) pick4(route[l]);
        for (int l = 0; l < 6 && !bad; l++) {
            if (p->ops->begin(p, l, route[l], 4, &err)) bad = -1;
            if (hint && l + 1 < 6) {
                const int32_t *r = route[l + 1];
                int32_t h[4] = {r[0], r[1], -1, -1};
                for (int e = 0, k = 2; k < 4; e++)
                    if (e != r[0] && e != r[1] && e != r[2] && e != r[3]) h[k++] = e;
                p->ops->hint(p, l + 1, h, 4);
            }
            expert_view v;
            int i;
            while ((i = p->ops->next(p, &v, &err)) >= 0)
                bad += view_matches_gguf(g, &L, l, &v) != 0, p->ops->release(p, i);
            if (i != -1) bad = -1;
            p->ops->end(p, l);
        }
    }
    expert_store_stats(p, st);
    p->ops->destroy(p);
out:
    expert_layout_free(&L);
    gguf_close(g);
    return bad;
}

/* On a disk with no slack, the cost rule reads fewer guesses than reading
 * every guess, and its counters add up: demand reads behind a prefetch are
 * a part of the demand reads, there are none without guesses, and the
 * device was busy no longer than the run. */
static void admit_counters(void)
{
    t_begin("store: cost rule reads fewer guesses on a saturated disk; demand-behind-prefetch counters consistent");
    store_stats cost, off, none;
    double t0 = sl_now();
    int rc = hinted_passes(PF_ADMIT_COST, 100e6, 24, true, &cost);
    double wall = sl_now() - t0;
    rc |= hinted_passes(PF_ADMIT_OFF, 100e6, 24, true, &off);
    T_CHECK(rc == 0, "a run failed or handed out wrong bytes");
    T_CHECK(cost.prefetch_issued < off.prefetch_issued && cost.prefetch_skipped > off.prefetch_skipped,
            "cost: %llu guesses read, %llu skipped; off: %llu read, %llu skipped",
            (unsigned long long)cost.prefetch_issued, (unsigned long long)cost.prefetch_skipped,
            (unsigned long long)off.prefetch_issued, (unsigned long long)off.prefetch_skipped);
    T_CHECK(cost.admit_busy > 0.5, "busy share with needed reads %.2f on a disk-bound run", cost.admit_busy);
    for (int k = 0; k < 2; k++) {
        const store_stats *s = k ? &off : &cost;
        T_CHECK(s->demand_behind_prefetch <= s->demand_reads && s->demand_reads >= s->misses,
                "%s: %llu behind of %llu demand reads, %llu misses", k ? "off" : "cost",
                (unsigned long long)s->demand_behind_prefetch, (unsigned long long)s->demand_reads,
                (unsigned long long)s->misses);
    }
    T_CHECK(off.demand_behind_prefetch > 0, "reading every guess put no demand read behind one");
    T_CHECK(cost.read_busy_s > 0 && cost.read_busy_s <= wall, "busy %.3f s of a %.3f s run", cost.read_busy_s, wall);
    /* no guesses at all: nothing to be behind */
    T_CHECK(hinted_passes(PF_ADMIT_OFF, 0, 6, false, &none) == 0 && none.prefetch_issued == 0 &&
                none.demand_behind_prefetch == 0 && none.demand_reads >= none.misses && none.misses > 0,
            "without hints: %llu guesses read, %llu demand reads behind one", (unsigned long long)none.prefetch_issued,
            (unsigned long long)none.demand_behind_prefetch);
    t_end();
}

/* The access log behind the optimum stays within its cap however long the
 * store lives: a window it still holds gets Belady's figure over the kept
 * history, a dropped position is an error, the access count keeps going. */
static void access_log_cap(void)
{
    t_begin("store: the access log keeps at most log_cap accesses (the last ones); windows in it get the optimum");
    sl_err err;
    gguf_file *g;
    expert_layout L;
    if (open_tinymoe(&g, &L, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    enum { SLOTS = 10, CAP = 240, PASSES = 50, N = PASSES * 24 };
    store_config cfg = store_config_default(store_slot_bytes(&L) * SLOTS);
    cfg.io = STORE_IO_PREAD;
    cfg.log_cap = CAP;
    expert_provider *p;
    static int32_t keys[N];
    int n_keys = 0;
    T_CHECK(expert_store_create(&p, &L, &cfg, &err) == 0, "%s", err.msg);
    for (int pass = 0; pass < PASSES && p; pass++)
        for (int l = 0; l < 6; l++) {
            int32_t ids[4];
            for (int n = 0; n < 4;) {
                int32_t e = (int32_t)rnd(32);
                bool dup = false;
                for (int k = 0; k < n; k++) dup |= ids[k] == e;
                if (!dup) ids[n++] = e, keys[n_keys++] = l * 32 + e;
            }
            T_CHECK(p->ops->begin(p, l, ids, 4, &err) == 0, "begin: %s", err.msg);
            expert_view v;
            int i;
            while ((i = p->ops->next(p, &v, &err)) >= 0) p->ops->release(p, i);
            p->ops->end(p, l);
        }
    if (p) {
        store_stats st;
        expert_store_stats(p, &st);
        T_CHECK(st.accesses == N, "accesses %llu, expected %d", (unsigned long long)st.accesses, N);
        /* filled to CAP, then 8 rounds of dropping to CAP/2 and refilling: the log holds the last CAP */
        static uint8_t miss[CAP];
        int64_t m = belady_misses(keys + N - CAP, CAP, 6 * 32, SLOTS, miss, &err);
        uint64_t want = 0, bytes, loads;
        for (int i = CAP - 96; i < CAP; i++) want += miss[i];
        T_CHECK(m >= 0 && expert_store_optimum_since(p, N - 96, &bytes, &loads, &err) == 0 && loads == want,
                "window of the last 96: %llu loads, Belady over the kept log says %llu (%s)",
                (unsigned long long)loads, (unsigned long long)want, err.msg);
        T_CHECK(expert_store_optimum_since(p, N - CAP, &bytes, &loads, &err) == 0, "the oldest kept position: %s",
                err.msg);
        T_CHECK(expert_store_optimum_since(p, N - CAP - 1, &bytes, &loads, &err) == -1 &&
                    strstr(err.msg, "no longer holds"),
                "a dropped position must be an error, got: %s", err.msg);
        T_CHECK(expert_store_optimum(p, &bytes, &loads, &err) == -1, "the optimum from 0 is gone with the log's front");
        p->ops->destroy(p);
    }
    expert_layout_free(&L);
    gguf_close(g);
    t_end();
}

/* A guess in flight is held (a hit when asked for) but not resident: a
 * verification that needs it waits for it as for a miss (spec.c prices
 * the union's experts by that); once its read lands it is both. */
static void held_and_resident(void)
{
    t_begin("store: a guess in flight is held, resident only once landed");
    sl_err err;
    gguf_file *g;
    expert_layout L;
    if (open_tinymoe(&g, &L, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    store_config cfg = store_config_default(store_slot_bytes(&L) * 24);
    cfg.prefetch_admit = PF_ADMIT_OFF; /* every guess is read */
    cfg.throttle_bps = 4e6;            /* about 40 ms an expert: still in flight when asked */
    expert_provider *p;
    if (expert_store_create(&p, &L, &cfg, &err)) {
        T_CHECK(0, "%s", err.msg);
        goto out;
    }
    int32_t r0[4] = {0, 1, 2, 3}, r1[4] = {4, 5, 6, 7};
    expert_view v;
    int i, bad = 0;
    bad |= p->ops->begin(p, 0, r0, 4, &err);
    p->ops->hint(p, 1, r1, 4);
    T_CHECK(expert_store_holds(p, 1, 4) && !expert_store_resident(p, 1, 4), "a guess just issued: held %d resident %d",
            expert_store_holds(p, 1, 4), expert_store_resident(p, 1, 4));
    T_CHECK(!expert_store_holds(p, 1, 9) && !expert_store_resident(p, 1, 9), "an expert never asked for is held");
    while ((i = p->ops->next(p, &v, &err)) >= 0) p->ops->release(p, i);
    bad |= i != -1;
    p->ops->end(p, 0);
    bad |= p->ops->begin(p, 1, r1, 4, &err);
    while ((i = p->ops->next(p, &v, &err)) >= 0) bad |= view_matches_gguf(g, &L, 1, &v) != 0, p->ops->release(p, i);
    bad |= i != -1;
    p->ops->end(p, 1);
    T_CHECK(!bad, "a pass failed or handed out wrong bytes: %s", err.msg);
    T_CHECK(expert_store_holds(p, 1, 4) && expert_store_resident(p, 1, 4) && expert_store_resident(p, 0, 0),
            "landed experts: held %d resident %d", expert_store_holds(p, 1, 4), expert_store_resident(p, 1, 4));
    p->ops->destroy(p);
out:
    expert_layout_free(&L);
    gguf_close(g);
    t_end();
}

/* The slots' memory: every byte asked for is mapped, zeroed and already
 * resident (the budget counts it from the start), at a 2 MiB boundary so
 * huge pages can back it, and nothing past the request stays mapped. */
static void slot_memory(void)
{
    t_begin("store: slot memory is resident, zeroed, 2 MiB aligned and no larger than asked");
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), sizes[] = {1, 4097, 2u << 20, (3u << 20) + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k], len = (n + page - 1) / page * page;
        uint8_t *p = sl_big_map(n);
        T_CHECK(p != NULL, "%zu bytes: no memory", n);
        if (!p) continue;
        T_CHECK((uintptr_t)p % (2u << 20) == 0, "%zu bytes at %p: not 2 MiB aligned", n, (void *)p);
        unsigned char in[1024];
        size_t pages = len / page, resident = 0, nonzero = 0;
        T_CHECK(pages <= sizeof in && mincore(p, len, in) == 0, "%zu bytes: mincore failed", n);
        for (size_t i = 0; i < pages && i < sizeof in; i++) resident += in[i] & 1;
        for (size_t i = 0; i < n; i++) nonzero += p[i] != 0;
        T_CHECK(resident == pages && nonzero == 0, "%zu bytes: %zu of %zu pages resident, %zu bytes not zero", n,
                resident, pages, nonzero);
        /* the trimmed over-mapping: the page past the end is not ours */
        errno = 0;
        T_CHECK(mincore(p + len, page, in) != 0 && errno == ENOMEM, "%zu bytes: the page past the end is mapped", n);
        memset(p, 0xA5, n);
        T_CHECK(munmap(p, n) == 0, "%zu bytes: munmap failed", n);
    }
    T_CHECK(sl_big_map(0) == NULL, "0 bytes mapped");
    t_end();
}

int main(void)
{
    slot_memory();
    held_and_resident();
    run_passes("store: uring, roomy cache, decode-sized batches", STORE_IO_URING, 64, 4, 20);
    run_passes("store: uring, 6 slots (heavy eviction)", STORE_IO_URING, 6, 4, 20);
    run_passes("store: uring, 3 slots < batch (released in waves)", STORE_IO_URING, 3, 4, 10);
    run_passes("store: uring, prefill batch of all 32 experts, 10 slots", STORE_IO_URING, 10, 32, 3);
    run_passes("store: pread, 6 slots", STORE_IO_PREAD, 6, 4, 20);
    run_passes("store: pread, prefill batch, 5 slots", STORE_IO_PREAD, 5, 32, 2);
    run_passes("store: mmap", STORE_IO_MMAP, 0, 4, 10);
    run_passes_policy("store: lru, 6 slots", STORE_IO_URING, 6, 4, 20, CACHE_LRU);
    run_passes_policy("store: lfru, 3 slots < batch", STORE_IO_URING, 3, 4, 10, CACHE_LFRU);
    run_passes_policy("store: ahead, prefill batch, 10 slots", STORE_IO_URING, 10, 32, 3, CACHE_AHEAD);
    injected_fault(STORE_IO_URING);
    injected_fault(STORE_IO_PREAD);
    truncated_file();
    too_small();
    trace_policies();
    io_queue_rules();
    admit_rule();
    io_meter();
    admit_counters();
    access_log_cap();
    io_every_completion(false);
    io_every_completion(true);
    io_deep_queue();
    io_per_device();
    io_busy_at_device();
    return t_done();
}
