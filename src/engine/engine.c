#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experts/pack.h"
#include "experts/source.h"
#include "experts/trace.h"
#include "util/clock.h"

enum { STREAM_BATCH = 2048 };

static void note(sl_engine *e, const char *fmt, const char *arg)
{
    size_t n = strlen(e->note);
    if (n + 2 >= sizeof e->note) return;
    if (n) e->note[n++] = '\n';
    snprintf(e->note + n, sizeof e->note - n, fmt, arg);
}

/* ---- what memory this process may use ---- */

static uint64_t read_u64_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    uint64_t v = 0;
    if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3)) v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* limit - usage of this process's memory cgroup (v1 or v2); 0 if unlimited. */
static uint64_t cgroup_headroom(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[1024], path[1200];
    uint64_t room = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *v1 = strstr(line, ":memory:"), *v2 = strncmp(line, "0::", 3) ? NULL : line + 3;
        uint64_t lim = 0, use = 0;
        if (v1) {
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", v1 + 8);
            lim = read_u64_file(path);
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", v1 + 8);
            use = read_u64_file(path);
        } else if (v2) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", v2);
            lim = read_u64_file(path);
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", v2);
            use = read_u64_file(path);
        }
        if (lim && lim < (1ull << 60) && lim > use && (!room || lim - use < room)) room = lim - use;
    }
    fclose(f);
    return room;
}

uint64_t engine_available_memory(void)
{
    uint64_t avail = mem_available(), room = cgroup_headroom();
    return room && (room < avail || !avail) ? room : avail;
}

/* ---- the plan ---- */

static uint64_t all_expert_bytes(const expert_layout *L)
{
    uint64_t b = 0;
    for (int l = 0; L && l < L->n_layers; l++) b += expert_layout_bytes(L, l) * (uint64_t)L->n_expert;
    return b;
}

static int64_t all_experts(const expert_layout *L)
{
    return L ? (int64_t)expert_layout_moe_layers(L) * L->n_expert : 0;
}

static int32_t batch_for(const sl_engine *e, bool streaming)
{
    if (e->opts.n_batch > 0) return e->opts.n_batch;
    if (!streaming) return 0; /* the session's default */
    return e->n_ctx < STREAM_BATCH ? e->n_ctx : STREAM_BATCH;
}

/* Buffers a run allocates beside the session: logits and the sampler's
 * candidate arrays, a few n_vocab-sized arrays. */
static uint64_t run_buffers(const sl_model *m) { return (uint64_t)model_n_vocab(m) * 48; }

static int make_plan(sl_engine *e, uint64_t slot_bytes, sl_err *err)
{
    const sl_model *m = e->model;
    int threads = e->pool ? pool_threads(e->pool) : e->opts.threads > 0 ? e->opts.threads : cpu_physical_cores();
    session_opts so = engine_session_opts(e);
    mem_plan_in in = {
        .total = e->opts.mem,
        .spine = model_spine_bytes(m),
        .kv = session_kv_bytes(m, e->n_ctx, &so),
        .state = session_state_total_bytes(m, &so),
        .scratch = session_scratch_bytes(m, e->n_ctx, e->n_batch, threads) + run_buffers(m),
        .slot_bytes = slot_bytes,
        .experts = all_experts(model_expert_layout(m)),
        .min_slots = model_n_expert_used(m),
        .pin = e->opts.pin,
        .threads = threads,
        .metadata = model_gguf(m)->parts[0].data_off,
        .log = (uint64_t)store_log_entries(model_expert_layout(m), e->n_ctx) * sizeof(int32_t),
    };
    if (mem_plan_make(&e->plan, &in, err)) return -1;
    e->plan.n_ctx = e->n_ctx, e->plan.n_batch = e->n_batch;
    return 0;
}

/* Decides RAM or streaming.  An explicit --mem or --io streams; otherwise
 * stream only when the model would not fit in what is available. */
static void choose_mode(sl_engine *e, const gguf_file *g)
{
    const expert_layout *L = model_expert_layout(e->model);
    e->streaming = L && (e->opts.mem > 0 || e->opts.io_set || e->opts.pack);
    e->io = e->opts.io;
    if (e->streaming && !e->opts.mem) { /* --io or --pack without a budget: what is available */
        e->opts.mem = engine_available_memory() / 10 * 8;
        return;
    }
    if (!L || e->streaming) return;
    session_opts so = engine_session_opts(e);
    uint64_t need = model_spine_bytes(e->model) + all_expert_bytes(L) +
                    session_kv_bytes(e->model, e->n_ctx, &so) +
                    session_state_total_bytes(e->model, &so);
    uint64_t avail = engine_available_memory();
    if (!avail || need < avail / 10 * 9) return;
    e->streaming = true;
    e->opts.mem = avail / 10 * 8;
    char buf[64];
    snprintf(buf, sizeof buf, "%.1f GiB", (double)e->opts.mem / (1 << 30));
    note(e, "the model does not fit in available memory: streaming experts with --mem %s", buf);
    (void)g;
}

/* Flags that cannot act in the chosen mode are said, not silently dropped. */
static void warn_idle_flags(sl_engine *e)
{
    if (e->opts.verify && !e->opts.pack) note(e, "%s", "--verify has no effect without --pack");
    if (e->opts.pin && !e->streaming) note(e, "%s", "--pin has no effect: the experts are in RAM");
}

/* Settings that are legal but surely not what was meant, said before the
 * run (before choose_mode sets a budget of its own). */
static void warn_doubtful(sl_engine *e, const engine_opts *o)
{
    char buf[160];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (o->threads > 0 && cpus > 0 && o->threads > cpus) {
        snprintf(buf, sizeof buf, "%d threads on %ld CPUs", o->threads, cpus);
        note(e, "%s: more threads than CPUs only adds contention", buf);
    }
    int32_t train = model_n_ctx_train(e->model);
    if (train > 0 && e->n_ctx > train) {
        snprintf(buf, sizeof buf, "a context of %d tokens is above the model's training context of %d: quality "
                                  "degrades past it", (int)e->n_ctx, (int)train);
        note(e, "%s", buf);
    }
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    if (o->mem && ram && o->mem > ram) {
        snprintf(buf, sizeof buf, "%.1f GiB > %.1f GiB", (double)o->mem / (1 << 30), (double)ram / (1 << 30));
        note(e, "the memory budget is above physical RAM (%s): the budget cannot hold", buf);
    }
    if (o->mem && !model_expert_layout(e->model))
        note(e, "%s", "the memory budget has no effect: the model is dense (no routed experts to stream)");
}

/* ---- heat and the store ---- */

static void open_heat(sl_engine *e, store_config *cfg)
{
    if (e->opts.no_heat || e->io == STORE_IO_MMAP) return;
    const expert_layout *L = model_expert_layout(e->model);
    sl_err warn = {{0}};
    int rc = heat_session_open(&e->heat, model_gguf(e->model), e->opts.heat_file, L->n_layers, L->n_expert,
                               HEAT_DEFAULT_HALF_LIFE, &warn);
    if (warn.msg[0]) note(e, "heat: %.300s", warn.msg);
    if (rc < 0) return;
    e->heat_on = true;
    cfg->heat = e->heat.table.count ? &e->heat.table : NULL;
    cfg->record = e->heat.rec;
}

static int make_source(sl_engine *e, expert_source **src, sl_err *err)
{
    *src = NULL;
    if (!e->opts.pack) return 0;
    if (e->io == STORE_IO_MMAP) return sl_errf(err, "--pack cannot be used with --io mmap");
    pack_source_opts po = {.verify = e->opts.verify};
    return source_pack_create(src, model_expert_layout(e->model), e->opts.pack, &po, err);
}

/* The page cache copy of what was just read into the spine is useless
 * twice over: it is a second copy, and it counts against the budget. */
static void drop_file_cache(const gguf_file *g)
{
    for (uint32_t f = 0; f < g->n_parts; f++) posix_fadvise(g->parts[f].fd, 0, 0, POSIX_FADV_DONTNEED);
}

static int start_streaming(sl_engine *e, sl_err *err)
{
    const expert_layout *L = model_expert_layout(e->model);
    /* before the cache takes its memory: under a cgroup limit the kernel
     * would otherwise have to reclaim these pages to make room */
    drop_file_cache(model_gguf(e->model));
    expert_source *src;
    if (make_source(e, &src, err)) return -1;
    uint64_t slot = src ? src->ops->slot_bytes(src) : store_slot_bytes(L);
    if (e->io == STORE_IO_MMAP) slot = 0, e->plan.total = e->opts.mem; /* the page cache is the cache */
    if (e->io != STORE_IO_MMAP && make_plan(e, slot, err)) {
        if (src) src->ops->destroy(src);
        return -1;
    }
    store_config cfg = store_config_default(e->plan.cache);
    cfg.io = e->io;
    cfg.log_cap = store_log_entries(L, e->n_ctx);
    if (e->opts.policy_set) cfg.policy = e->opts.policy;
    cfg.throttle_bps = e->opts.throttle_bps;
    cfg.prefetch_admit = e->opts.prefetch_admit;
    cfg.timeline = e->opts.timeline;
    cfg.pin_bytes = e->plan.pin;
    cfg.source = src;
    cfg.fault = e->opts.fault;
    cfg.fault_ctx = e->opts.fault_ctx;
    open_heat(e, &cfg);
    if (expert_store_create(&e->store, L, &cfg, err)) return -1;
    model_set_provider(e->model, e->store, true);
    store_stats st;
    expert_store_stats(e->store, &st);
    snprintf(e->info, sizeof e->info, "%s", st.heat_note);
    return 0;
}

static int32_t default_ctx(const sl_model *m, const engine_opts *o)
{
    if (o->n_ctx > 0) return o->n_ctx;
    int32_t n = model_n_ctx_train(m);
    return o->n_ctx_cap > 0 && (n <= 0 || n > o->n_ctx_cap) ? o->n_ctx_cap : n;
}

/* ---- routing trace (--trace-out) ---- */

static void obs_tokens(void *ctx, const int32_t *t, int n) { trace_rec_tokens(ctx, t, n); }
static void obs_route(void *ctx, int l, const int32_t *ids, int T, int K) { trace_rec_route(ctx, l, ids, T, K); }
static void obs_hint(void *ctx, int l, const int32_t *ids, int n) { trace_rec_hint(ctx, l, ids, n); }

/* The recorder, and a check that the file can be written before any
 * work is done. */
static int open_trace(sl_engine *e, sl_err *err)
{
    const char *path = e->opts.trace_out;
    if (!path) return 0;
    const expert_layout *L = model_expert_layout(e->model);
    if (!L) return sl_errf(err, "--trace-out: %s is a dense model: it routes no experts", e->opts.model_path);
    FILE *f = fopen(path, "w");
    if (!f) return sl_errf(err, "--trace-out: cannot write %s: %s", path, strerror(errno));
    fclose(f);
    bool *moe = calloc((size_t)L->n_layers, sizeof *moe);
    if (!moe) return sl_errf(err, "out of memory");
    for (int l = 0; l < L->n_layers; l++) moe[l] = expert_layout_bytes(L, l) > 0;
    int rc = trace_rec_create(&e->trace, L->n_layers, moe, L->n_expert, model_n_expert_used(e->model), err);
    free(moe);
    if (rc) return -1;
    route_observer o = {obs_tokens, obs_route, obs_hint, e->trace};
    model_set_route_observer(e->model, &o);
    return 0;
}

int engine_write_trace(sl_engine *e, sl_err *err)
{
    if (!e->trace || e->trace_written) return 0;
    e->trace_written = true;
    return trace_rec_write(e->trace, e->opts.trace_out, e->opts.model_path, err);
}

int engine_open(sl_engine *e, const engine_opts *o, sl_err *err)
{
    memset(e, 0, sizeof *e);
    e->opts = *o;
    e->t_start = sl_now();
    model_opts mo = {.defer_experts = true};
    if (model_load(&e->model, o->model_path, &mo, err)) return -1;
    e->n_ctx = default_ctx(e->model, o);
    if (open_trace(e, err)) {
        engine_close(e);
        return -1;
    }
    if (!o->no_session) {
        e->pool = pool_create(o->threads);
        if (!e->pool) {
            engine_close(e);
            return sl_errf(err, "cannot start %d threads", o->threads);
        }
    }
    warn_doubtful(e, o);
    choose_mode(e, model_gguf(e->model));
    warn_idle_flags(e);
    e->n_batch = batch_for(e, e->streaming);
    int rc = 0;
    if (e->streaming) rc = start_streaming(e, err);
    else if (model_expert_layout(e->model)) rc = model_attach_ram_experts(e->model, err);
    session_opts so = engine_session_opts(e);
    if (!rc && !o->no_session) rc = session_create_opts(&e->session, e->model, e->n_ctx, e->pool, &so, err);
    if (rc) {
        engine_close(e);
        return -1;
    }
    return 0;
}

session_opts engine_session_opts(const sl_engine *e)
{
    const engine_opts *o = &e->opts;
    /* In RAM there is nothing to read ahead: prediction would only cost time. */
    sl_prefetch_mode pm = o->prefetch_set ? o->prefetch : e->streaming ? SL_PREFETCH_AUTO : SL_PREFETCH_OFF;
    return (session_opts){.kv_mode = o->kv_mode, .n_batch = e->n_batch, .prefetch = pm, .n_rollback = o->n_rollback};
}

void engine_close(sl_engine *e)
{
    if (e->heat_on) {
        sl_err warn;
        heat_session_close(&e->heat, &warn); /* a failed save is not worth failing the run */
        e->heat_on = false;
    }
    session_free(e->session);
    model_free(e->model);
    trace_rec_free(e->trace);
    e->trace = NULL;
    pool_destroy(e->pool);
    e->session = NULL, e->model = NULL, e->pool = NULL, e->store = NULL;
}

/* ---- figures ---- */

/* Bytes this process has caused to be read from storage (/proc/self/io):
 * the only honest count in mmap mode, where page faults do the reading. */
uint64_t engine_storage_read_bytes(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return 0;
    char line[128];
    uint64_t v = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %lu", &v) == 1) break;
    fclose(f);
    return v;
}

void engine_mark_prompt_start(sl_engine *e)
{
    if (e->store) expert_store_stats(e->store, &e->at_prompt_start);
    e->storage_read_start = engine_storage_read_bytes();
}

void engine_mark_prompt_end(sl_engine *e)
{
    if (e->store) expert_store_stats(e->store, &e->at_prompt_end);
    e->storage_read_prompt_end = engine_storage_read_bytes();
}

void engine_tick(sl_engine *e)
{
    if (!e->heat_on) return;
    sl_err warn = {{0}};
    if (heat_session_tick(&e->heat, &warn)) note(e, "heat: %.300s", warn.msg);
}

void engine_stream_stats_get(const sl_engine *e, engine_stream_stats *out)
{
    memset(out, 0, sizeof *out);
    out->streaming = e->streaming;
    out->io = e->streaming ? store_io_name(e->io) : "ram";
    if (!e->store) return;
    store_stats st;
    expert_store_stats(e->store, &st);
    bool mmap_mode = e->io == STORE_IO_MMAP;
    out->expert_bytes_read = mmap_mode ? engine_storage_read_bytes() - e->storage_read_start : st.bytes_read;
    out->distinct_experts = st.distinct;
    out->cache_hits = st.hits;
    out->cache_misses = st.misses;
    out->read_retries = st.retries;
    out->io_wait_s = st.io_wait_s;
    out->read_gbps = st.io_wait_s > 0 && !mmap_mode ? (double)st.bytes_read / st.read_busy_s / 1e9 : 0;
    out->prefetch_used = st.prefetch_used;
    out->prefetch_wasted_bytes = st.prefetch_wasted_bytes;
    out->demand_misses = st.misses;
    out->prefetch_reads = st.prefetch_issued;
    out->prefetch_cancelled = st.prefetch_cancelled;
    out->prefetch_skipped = st.prefetch_skipped;
    out->demand_reads = st.demand_reads;
    out->demand_behind_prefetch = st.demand_behind_prefetch;
    out->bytes_loaded = st.bytes_needed + st.prefetch_bytes;
    out->read_busy_s = st.read_busy_s;
    out->policy = mmap_mode ? "page cache" : cache_policy_name(st.policy);
    sl_err ignored;
    if (!mmap_mode && expert_store_optimum(e->store, &out->optimum_bytes, &out->optimum_loads, &ignored))
        out->optimum_bytes = out->optimum_loads = 0;
    const store_stats *a = &e->at_prompt_start, *b = &e->at_prompt_end;
    uint64_t used = b->distinct_bytes - a->distinct_bytes;
    uint64_t read = mmap_mode ? e->storage_read_prompt_end - e->storage_read_start : b->bytes_read - a->bytes_read;
    out->prefill_read_amplification = used ? (double)read / (double)used : 0;
}

/* ---- planning without loading ---- */

int engine_plan(const char *model_path, const engine_opts *o, mem_plan *plan, sl_err *err)
{
    sl_engine e = {.opts = *o};
    model_opts mo = {.dry_run = true};
    if (model_load(&e.model, model_path, &mo, err)) return -1;
    e.n_ctx = default_ctx(e.model, o);
    e.n_batch = batch_for(&e, true);
    const expert_layout *L = model_expert_layout(e.model);
    int rc = L ? make_plan(&e, store_slot_bytes(L), err)
               : sl_errf(err, "%s: a dense model has no routed experts to stream", model_path);
    if (!rc) *plan = e.plan;
    model_free(e.model);
    return rc;
}
