/* The SSD expert store against plain reads of the same bytes: every expert
 * it hands out must equal the GGUF slice, for every I/O mode and cache size
 * (down to caches smaller than one layer's working set), in any arrival
 * order; failed, short and truncated reads must be errors naming file and
 * offset, never a skipped expert; trace replays check the cache policy. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "experts/io.h"
#include "experts/layout.h"
#include "experts/store.h"
#include "experts/trace.h"
#include "util/fileio.h"
#include "t.h"

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

/* Compares a handed-out view with a plain pread of the same slices. */
static int check_view(const gguf_file *g, const expert_layout *L, int layer, const expert_view *v)
{
    static uint8_t ref[1 << 20];
    for (int p = 0; p < 3; p++) {
        const expert_part *pt = &L->layer[layer].parts[p];
        sl_err err;
        if (sl_pread_full(g->parts[pt->file].fd, ref, pt->bytes, pt->off + (uint64_t)v->id * pt->stride,
                          g->path, &err))
            return -1;
        if (memcmp(ref, v->parts[p], pt->bytes)) return -1;
    }
    return 0;
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
    if (gguf_open(&g, "models/tinymoe-q8_0.gguf", &err) || build_layout(&L, g, &err)) {
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
    int bad = 0, handed = 0;
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
                if (v.id != ids[i] || (seen >> i & 1) || check_view(g, &L, l, &v)) bad++;
                seen |= 1u << i;
                handed++;
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
    if (gguf_open(&g, "models/tinymoe-q8_0.gguf", &err) || build_layout(&L, g, &err)) {
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
    while ((i = p->ops->next(p, &v, &err)) >= 0) ok += check_view(g, &L, 2, &v) == 0, p->ops->release(p, i);
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
    T_CHECK(gguf_open(&g, "models/tinymoe-q8_0.gguf", &err) == 0 && build_layout(&L, g, &err) == 0, "open");
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

int main(void)
{
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
    io_every_completion(false);
    io_every_completion(true);
    return t_done();
}
