/* Random expert reads through the expert store, from a GGUF or a pack:
 * decode-like steps (one MoE layer, BATCH distinct random experts) with a
 * cache too small to hit, so every step reads.  Prints the delivered read
 * rate, the per-drive split and measured drive rates, and verify cost.
 * Built and run by bench/pack.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "experts/pack.h"
#include "experts/store.h"
#include "gguf/summary.h"
#include "util/clock.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* XXH3-64 throughput: on expert-sized buffers hashed right after being
 * written (as --verify does after a read lands) and streaming over a
 * buffer larger than the caches. */
static void bench_xxh3(void)
{
    size_t big = 256u << 20, sizes[] = {160u << 10, 2560u << 10, big};
    uint8_t *b = malloc(big);
    for (size_t i = 0; i < big; i++) b[i] = (uint8_t)(i * 2654435761u >> 13);
    uint64_t h = 0;
    for (int s = 0; s < 3; s++) {
        double best = 0;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = sl_now();
            uint64_t done = 0;
            for (size_t off = 0; off + sizes[s] <= big; off += sizes[s]) h ^= XXH3_64bits(b + off, sizes[s]), done += sizes[s];
            double gbps = (double)done / (sl_now() - t0) / 1e9;
            if (gbps > best) best = gbps;
        }
        printf("xxh3-64 over %7zu KiB blocks: %6.2f GB/s (best of 5 passes over 256 MiB, one core)\n", sizes[s] >> 10, best);
    }
    /* hot in cache: the same expert-sized block again and again */
    double t0 = sl_now();
    for (int rep = 0; rep < 2000; rep++) h ^= XXH3_64bits(b, 160u << 10);
    printf("xxh3-64 on a cached 160 KiB block: %6.2f GB/s (%llx)\n", 2000.0 * (160 << 10) / (sl_now() - t0) / 1e9,
           (unsigned long long)(h & 0xff));
    free(b);
}

typedef struct {
    const char *model, *pack, *throttle;
    store_io io;
    int batch, slots, verify;
    uint32_t chunk;
    double seconds;
} args;

static int parse(int argc, char **argv, args *a)
{
    *a = (args){.io = STORE_IO_URING, .batch = 8, .slots = 16, .chunk = 1u << 20, .seconds = 5};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(k, "--xxh3")) return bench_xxh3(), 1;
        if (!strcmp(k, "--verify")) {
            a->verify = 1;
            continue;
        }
        i++;
        if (!strcmp(k, "--pack")) a->pack = v;
        else if (!strcmp(k, "--io")) a->io = (store_io)store_io_parse(v);
        else if (!strcmp(k, "--throttle")) a->throttle = v;
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--slots")) a->slots = atoi(v);
        else if (!strcmp(k, "--chunk")) a->chunk = (uint32_t)atoi(v);
        else if (!strcmp(k, "--seconds")) a->seconds = atof(v);
        else if (!a->model && k[0] != '-') a->model = k, i--;
        else return fprintf(stderr, "unknown option %s\n", k), -1;
    }
    return a->model ? 0 : (fprintf(stderr, "usage: pack_bench MODEL [--pack PACK] [--io uring|pread] "
                                           "[--throttle MBPS,MBPS..] [--verify] [--seconds S] | --xxh3\n"),
                           -1);
}

/* --throttle 200,400: drive d of the source limited to that many MB/s. */
static void make_throttle(const char *spec, const expert_source *src, int n_files, io_throttle *t)
{
    *t = (io_throttle){0};
    for (const char *p = spec; *p && t->n < n_files && t->n < IO_THROTTLE_MAX;) {
        char *end;
        double mbps = strtod(p, &end);
        t->fds[t->n] = src->ops->file_fd(src, (uint32_t)t->n);
        t->rates[t->n++] = mbps * 1e6;
        p = *end == ',' ? end + 1 : end;
        if (end == p && *end != ',') break;
    }
}

static int run(const args *a, const expert_layout *L, sl_err *err)
{
    expert_source *src = NULL;
    pack_source_opts po = {.verify = a->verify};
    if (a->pack && source_pack_create(&src, L, a->pack, &po, err)) return -1;
    uint64_t slot = src ? src->ops->slot_bytes(src) : store_slot_bytes(L);
    store_config cfg = store_config_default(slot * (uint64_t)a->slots);
    cfg.io = a->io;
    cfg.chunk_bytes = a->chunk;
    cfg.source = src;
    io_throttle th;
    if (a->throttle) {
        if (!src) return sl_errf(err, "--throttle needs --pack");
        pack_source_stats ps;
        source_pack_stats(src, &ps);
        make_throttle(a->throttle, src, ps.n_drives, &th);
        cfg.throttle = &th;
    }
    expert_provider *p;
    if (expert_store_create(&p, L, &cfg, err)) return -1;
    int moe[4096], n_moe = 0;
    for (int l = 0; l < L->n_layers && n_moe < 4096; l++)
        if (L->layer[l].n_parts) moe[n_moe++] = l;
    int32_t *ids = malloc((size_t)L->n_expert * sizeof *ids);
    uint8_t *used = malloc((size_t)L->n_expert);
    double t0 = sl_now(), t = t0;
    int steps = 0, rc = 0;
    while (!rc && t - t0 < a->seconds) {
        int l = moe[steps % n_moe], n = 0;
        memset(used, 0, (size_t)L->n_expert);
        while (n < a->batch && n < L->n_expert) {
            uint32_t e = rnd((uint32_t)L->n_expert);
            if (!used[e]) used[e] = 1, ids[n++] = (int32_t)e;
        }
        expert_view v;
        int i;
        if (p->ops->begin(p, l, ids, n, err)) rc = -1;
        while (!rc && (i = p->ops->next(p, &v, err)) >= 0) p->ops->release(p, i);
        if (!rc && i == -2) rc = -1;
        p->ops->end(p, l);
        steps++;
        t = sl_now();
    }
    store_stats st;
    expert_store_stats(p, &st);
    double secs = t - t0;
    printf("%-28s %8.3f GB/s read  (%llu expert loads, %.0f%% misses, %.2f GB in %.1f s, %s%s)\n",
           a->pack ? a->pack : "gguf", (double)st.bytes_read / secs / 1e9, (unsigned long long)st.misses,
           100.0 * (double)st.misses / (double)(st.hits + st.misses), (double)st.bytes_read / 1e9, secs,
           a->throttle ? "throttled pread" : store_io_name(a->io), st.direct ? ", O_DIRECT" : "");
    if (src) {
        pack_source_stats ps;
        source_pack_stats(src, &ps);
        for (int d = 0; d < ps.n_drives; d++)
            printf("    drive %d: %6.2f GB (%4.1f%%), measured %7.0f MB/s%s\n", d, (double)ps.bytes[d] / 1e9,
                   100.0 * (double)ps.bytes[d] / (double)st.bytes_read, ps.rate[d] / 1e6,
                   a->throttle ? "" : "");
        if (a->verify)
            printf("    verify: %.2f GB hashed in %.3f s = %.2f GB/s; %.1f%% of the wall time\n",
                   (double)ps.verify_bytes / 1e9, ps.verify_s, (double)ps.verify_bytes / ps.verify_s / 1e9,
                   100.0 * ps.verify_s / secs);
    }
    free(ids);
    free(used);
    p->ops->destroy(p);
    return rc;
}

int main(int argc, char **argv)
{
    args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? 2 : 0;
    sl_err err;
    gguf_file *g;
    model_summary ms;
    expert_layout L;
    if (gguf_open(&g, a.model, &err) || model_summary_build(&ms, g, &err) ||
        expert_layout_from_gguf(&L, g, (int)ms.n_layers, (int)ms.n_expert, (int)ms.n_expert_used, &err)) {
        fprintf(stderr, "pack_bench: %s\n", err.msg);
        return 1;
    }
    model_summary_free(&ms);
    rc = run(&a, &L, &err);
    if (rc) fprintf(stderr, "pack_bench: %s\n", err.msg);
    expert_layout_free(&L);
    gguf_close(g);
    return rc ? 1 : 0;
}
