/* Expert prediction benchmark: per-layer recall / precision of every
 * predictor on a token sequence (teacher-forced: after a P-token prefill
 * each further token is its own single-token evaluation, i.e. a decode
 * step), for each --prefetch mode, optionally through the SSD store at a
 * small cache, with the store's I/O figures.  The default sequence is the
 * held-out validation text of shared/traces/tinymoe-valid-routes.json.
 *
 *   build/bench_prefetch [MODEL] [-t THREADS] [--trace FILE] [--windows N] [--len W] [--prefill P]
 *                        [--modes off,next,auto] [--slots N] [--io uring|pread] [--mbps R] [--reps N]
 *
 * --slots N: experts come from the store with N cache slots (else in RAM);
 * --mbps R:  the store reads through a simulated drive of R MB/s (pread backend);
 * --no-hint: predictions are made and scored but never reach the store (the
 *            cost of predicting, without the cost or gain of the reads).
 * Prints a hash of every decode step's logits per mode: equal hashes = the
 * modes produced identical bits.  Timings are noisy on a shared machine:
 * --reps runs the modes interleaved and reports medians. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "arch/model.h"
#include "experts/layout.h"
#include "experts/source.h"
#include "experts/store.h"
#include "util/clock.h"

typedef struct {
    const char *model, *trace, *modes;
    int threads, windows, len, prefill, slots, reps, no_hint;
    double mbps;
    store_io io;
} args;

typedef struct {
    double decode_s, io_wait_s;
    store_stats st;
    uint64_t hash;
    sl_prefetch_stats pf;
    sl_prefetch_layer layers[64];
} result;

static int load_tokens(const char *path, int32_t **out, int *n, int *wlen)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    json_t *ids = j ? json_object_get(j, "token_ids") : NULL;
    if (!ids || !json_is_array(ids)) {
        fprintf(stderr, "%s: %s\n", path, j ? "no token_ids array" : je.text);
        json_decref(j);
        return -1;
    }
    *n = (int)json_array_size(ids);
    *wlen = (int)json_integer_value(json_object_get(j, "window_len"));
    *out = malloc(sizeof(int32_t) * (size_t)*n);
    for (int i = 0; *out && i < *n; i++) (*out)[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    json_decref(j);
    return *out ? 0 : -1;
}

static int key_u32(const gguf_file *g, const char *arch, const char *suffix, uint32_t *v, sl_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int r = gguf_get_u32(g, key, v, err);
    return r < 0 ? -1 : r == 0 ? sl_errf(err, "%s: no key %s", g->path, key) : 0;
}

/* The store over MODEL's experts with A->slots cache slots. */
static int make_store(const args *a, gguf_file **g, expert_layout *L, expert_provider **p, sl_err *err)
{
    const gguf_str *arch;
    uint32_t nl, ne, nu;
    if (gguf_open(g, a->model, err) || gguf_get_str(*g, "general.architecture", &arch, err) <= 0 ||
        key_u32(*g, arch->s, "block_count", &nl, err) || key_u32(*g, arch->s, "expert_count", &ne, err) ||
        key_u32(*g, arch->s, "expert_used_count", &nu, err) ||
        expert_layout_from_gguf(L, *g, (int)nl, (int)ne, (int)nu, err))
        return -1;
    store_config cfg = store_config_default(store_slot_bytes(L) * (uint64_t)a->slots);
    cfg.io = a->io;
    io_throttle th = {0};
    if (a->mbps > 0) {
        if (source_gguf_create(&cfg.source, L, err)) return -1;
        th.n = 1;
        th.fds[0] = cfg.source->ops->file_fd(cfg.source, 0);
        th.rates[0] = a->mbps * 1e6;
        cfg.throttle = &th;
    }
    return expert_store_create(p, L, &cfg, err);
}

/* The store without its hint op: forwards everything else. */
typedef struct {
    expert_provider base;
    expert_provider *inner;
} no_hint;

static int nh_begin(expert_provider *p, int layer, const int32_t *ids, int n, sl_err *err)
{
    expert_provider *in = ((no_hint *)p)->inner;
    return in->ops->begin(in, layer, ids, n, err);
}
static int nh_next(expert_provider *p, expert_view *v, sl_err *err)
{
    expert_provider *in = ((no_hint *)p)->inner;
    return in->ops->next(in, v, err);
}
static void nh_release(expert_provider *p, int i)
{
    expert_provider *in = ((no_hint *)p)->inner;
    in->ops->release(in, i);
}
static void nh_end(expert_provider *p, int layer)
{
    expert_provider *in = ((no_hint *)p)->inner;
    in->ops->end(in, layer);
}
static void nh_destroy(expert_provider *p) { free(p); }
static const expert_provider_ops NO_HINT_OPS = {nh_begin, nh_next, nh_release, nh_end, NULL, nh_destroy};

static int run_mode(const args *a, sl_prefetch_mode mode, const int32_t *toks, int wlen, sl_pool *pool, result *r)
{
    sl_err err;
    gguf_file *g = NULL;
    expert_layout L = {0};
    expert_provider *prov = NULL;
    sl_model *m = NULL;
    sl_session *s = NULL;
    float *lg = NULL;
    int rc = -1;
    memset(r, 0, sizeof *r);
    if (a->slots > 0 && make_store(a, &g, &L, &prov, &err)) goto fail;
    no_hint nh = {{&NO_HINT_OPS}, prov};
    model_opts mo = {.provider = prov && a->no_hint ? &nh.base : prov};
    session_opts so = {.prefetch = mode};
    if (model_load(&m, a->model, &mo, &err) || session_create_opts(&s, m, a->len, pool, &so, &err)) goto fail;
    lg = malloc(sizeof(float) * (size_t)model_n_vocab(m));
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    for (int w = 0; w < a->windows; w++) {
        const int32_t *t = toks + (size_t)w * wlen;
        if (session_rewind(s, 0, &err)) goto fail_h;
        if (session_eval(s, t, a->prefill, lg, false, &err)) goto fail_h;
        double t0 = sl_now();
        for (int i = a->prefill; i < a->len; i++) {
            if (session_eval(s, t + i, 1, lg, false, &err)) goto fail_h;
            XXH64_update(h, lg, sizeof(float) * (size_t)model_n_vocab(m));
        }
        r->decode_s += sl_now() - t0;
    }
    r->hash = XXH64_digest(h);
    session_prefetch_stats(s, &r->pf);
    if (r->pf.n_layers > 64) r->pf.n_layers = 64;
    memcpy(r->layers, r->pf.layers, sizeof(sl_prefetch_layer) * (size_t)r->pf.n_layers);
    r->pf.layers = r->layers;
    if (prov) expert_store_stats(prov, &r->st);
    rc = 0;
fail_h:
    XXH64_freeState(h);
fail:
    if (rc) fprintf(stderr, "%s: %s\n", sl_prefetch_mode_name(mode), err.msg);
    free(lg);
    session_free(s);
    model_free(m);
    if (prov) prov->ops->destroy(prov);
    expert_layout_free(&L);
    gguf_close(g);
    return rc;
}

static void print_layers(const result *r)
{
    printf("| layer | recall | precision | hinted steps | source used (attn/out/prev/token) | "
           "recall attn | recall out | recall prev | recall token | auto now |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < r->pf.n_layers; i++) {
        const sl_prefetch_layer *l = &r->pf.layers[i];
        printf("| %d | %.1f%% | %.1f%% | %llu / %llu | %llu / %llu / %llu / %llu |", l->layer, 100 * l->recall,
               100 * l->precision, (unsigned long long)l->hinted_steps, (unsigned long long)l->steps,
               (unsigned long long)l->src_steps[0], (unsigned long long)l->src_steps[1],
               (unsigned long long)l->src_steps[2], (unsigned long long)l->src_steps[3]);
        for (int c = 0; c < SL_PRED_COUNT; c++)
            if (l->src_recall[c] < 0) printf(" - |");
            else printf(" %.1f%% |", 100 * l->src_recall[c]);
        printf(" %s |\n", sl_pred_source_name(l->choice));
    }
    printf("| all | %.1f%% | %.1f%% | | | | | | | |\n", 100 * r->pf.recall, 100 * r->pf.precision);
}

static void print_ranks(const result *r)
{
    printf("\nprecision of the hinted experts by router rank:\n\n| layer | rank 1 | rank 2 | rank 3 | rank 4 |\n"
           "|---|---|---|---|---|\n");
    for (int i = 0; i < r->pf.n_layers; i++) {
        const sl_prefetch_layer *l = &r->pf.layers[i];
        printf("| %d |", l->layer);
        for (int k = 0; k < 4; k++) printf(" %.1f%% |", 100 * l->rank_precision[k]);
        printf("\n");
    }
}

static void print_store(const result *r)
{
    const store_stats *st = &r->st;
    printf("  io wait %.3f s, bytes read %.1f MB, hits %llu, misses %llu, prefetch issued %llu, used %llu "
           "(late %llu), wasted %.1f MB\n",
           st->io_wait_s, st->bytes_read / 1e6, (unsigned long long)st->hits, (unsigned long long)st->misses,
           (unsigned long long)st->prefetch_issued, (unsigned long long)st->prefetch_used,
           (unsigned long long)st->prefetch_late, st->prefetch_wasted_bytes / 1e6);
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static int parse(int argc, char **argv, args *a)
{
    *a = (args){.model = "models/tinymoe-q8_0.gguf", .trace = "../shared/traces/tinymoe-valid-routes.json",
                .modes = "off,next,auto", .threads = 2, .windows = 16, .len = 512, .prefill = 16, .reps = 1,
                .io = STORE_IO_URING};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (o[0] != '-') { a->model = o; continue; }
        if (!v && strcmp(o, "--no-hint")) return fprintf(stderr, "%s needs a value\n", o), -1;
        i++;
        if (!strcmp(o, "-t")) a->threads = atoi(v);
        else if (!strcmp(o, "--trace")) a->trace = v;
        else if (!strcmp(o, "--windows")) a->windows = atoi(v);
        else if (!strcmp(o, "--len")) a->len = atoi(v);
        else if (!strcmp(o, "--prefill")) a->prefill = atoi(v);
        else if (!strcmp(o, "--modes")) a->modes = v;
        else if (!strcmp(o, "--slots")) a->slots = atoi(v);
        else if (!strcmp(o, "--reps")) a->reps = atoi(v);
        else if (!strcmp(o, "--mbps")) a->mbps = atof(v), a->io = STORE_IO_PREAD;
        else if (!strcmp(o, "--io")) a->io = (store_io)store_io_parse(v);
        else if (!strcmp(o, "--no-hint")) a->no_hint = 1, i--;
        else return fprintf(stderr, "unknown option %s\n", o), -1;
    }
    if (a->prefill < 1 || a->len <= a->prefill || a->reps < 1 || (int)a->io < 0)
        return fprintf(stderr, "bad --prefill / --len / --reps / --io\n"), -1;
    return 0;
}

int main(int argc, char **argv)
{
    args a;
    if (parse(argc, argv, &a)) return 2;
    int32_t *toks;
    int n, wlen;
    if (load_tokens(a.trace, &toks, &n, &wlen)) return 1;
    if (wlen < a.len) wlen = a.len;
    if ((int64_t)a.windows * wlen > n) a.windows = n / wlen;
    sl_prefetch_mode modes[3];
    int nm = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", a.modes);
    for (char *tok = strtok(buf, ","); tok && nm < 3; tok = strtok(NULL, ",")) {
        int md = sl_prefetch_mode_parse(tok);
        if (md < 0) return fprintf(stderr, "unknown mode %s\n", tok), 2;
        modes[nm++] = (sl_prefetch_mode)md;
    }
    printf("%s: %d windows x %d tokens (prefill %d, then %d decode steps each), %s, %d threads\n", a.model,
           a.windows, a.len, a.prefill, a.len - a.prefill,
           a.slots ? "SSD store" : "experts in RAM", a.threads);
    if (a.slots)
        printf("store: %d slots, io %s%s%s\n", a.slots, store_io_name(a.io), a.mbps > 0 ? " (throttled)" : "",
               a.no_hint ? ", hints withheld" : "");
    sl_pool *pool = pool_create(a.threads);
    static result res[3][16];
    double dec[3][16], wait[3][16];
    int reps = a.reps > 16 ? 16 : a.reps;
    for (int rep = 0; rep < reps; rep++)
        for (int k = 0; k < nm; k++) {
            if (run_mode(&a, modes[k], toks, wlen, pool, &res[k][rep])) return 1;
            dec[k][rep] = res[k][rep].decode_s, wait[k][rep] = res[k][rep].st.io_wait_s;
        }
    for (int k = 0; k < nm; k++) {
        const result *r = &res[k][0];
        qsort(dec[k], (size_t)reps, sizeof(double), cmp_d);
        qsort(wait[k], (size_t)reps, sizeof(double), cmp_d);
        printf("\n## --prefetch %s: logits hash %016llx, decode %.3f s median of %d", sl_prefetch_mode_name(modes[k]),
               (unsigned long long)r->hash, dec[k][reps / 2], reps);
        if (a.slots) printf(", io wait %.3f s median", wait[k][reps / 2]);
        printf("\n");
        if (a.slots) print_store(r);
        if (r->pf.n_layers) print_layers(r), print_ranks(r);
    }
    pool_destroy(pool);
    free(toks);
    return 0;
}
