/* Next-layer expert prediction (src/arch/pilot.c) on the bundled tinymoe:
 *  - the router always decides: logits are bit-identical with prefetch off,
 *    next and auto, experts in RAM or from the SSD store at a small cache,
 *    and greedy follows llama.cpp's golden continuation in every setting;
 *  - call order: the hint for layer L+1 comes after begin(L) and before L's
 *    first next() (auto: or just before L+1's attention, for its late tap);
 *  - the recall / precision the session reports equal a recount from the
 *    hints and begins a recording provider saw, and equal the figures of a
 *    run whose provider takes no hints (predictions never depend on it);
 *  - the layer-0 prediction from the embedding equals a reference computed
 *    here from the GGUF (Q8_0 embedding row, RMS norm, F32 router, softmax,
 *    top-4) in double precision;
 *  - the estimator and auto's choice: running mean then EMA; a useless
 *    predictor's layer is switched off and comes back when it recovers. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>

#include "arch/arch.h"
#include "arch/model.h"
#include "arch/pilot.h"
#include "experts/layout.h"
#include "experts/mem_provider.h"
#include "experts/store.h"
#include "t.h"

#define MODEL "models/tinymoe-q8_0.gguf"
enum { NL = 6, NE = 32, NK = 4, N_DECODE = 40, MAX_EV = 8192 };

/* ------------------------------------------------------------ tokens */

typedef struct {
    int32_t prompt[64], gen[64];
    int np, ng;
} golden;

static int load_golden(golden *g)
{
    json_error_t je;
    json_t *j = json_load_file("tests/fixtures/tinymoe_greedy.json", 0, &je);
    json_t *r = json_array_get(
        json_object_get(json_object_get(json_object_get(j, "models"), "tinymoe-q8_0.gguf"), "results"), 0);
    json_t *p = json_object_get(r, "prompt_ids"), *gen = json_object_get(r, "generated_ids");
    g->np = (int)json_array_size(p), g->ng = (int)json_array_size(gen);
    if (!r || g->np < 1 || g->np > 64 || g->ng < N_DECODE + 1 || g->ng > 64) {
        json_decref(j);
        return -1;
    }
    for (int i = 0; i < g->np; i++) g->prompt[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (int i = 0; i < g->ng; i++) g->gen[i] = (int32_t)json_integer_value(json_array_get(gen, i));
    json_decref(j);
    return 0;
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* ------------------------------------------------- recording provider */

typedef enum { EV_EVAL, EV_BEGIN, EV_NEXT, EV_END, EV_HINT } ev_type;

typedef struct {
    ev_type type;
    int layer, n; /* EV_EVAL: n = tokens evaluated */
    int32_t ids[NE];
} event;

typedef struct {
    expert_provider base;
    expert_provider *inner;
    event *ev;
    int n_ev, overflow, layer;
} recorder;

static event *rec_push(recorder *r, ev_type t, int layer, const int32_t *ids, int n)
{
    if (r->n_ev >= MAX_EV || n > NE) {
        r->overflow = 1;
        return NULL;
    }
    event *e = &r->ev[r->n_ev++];
    e->type = t, e->layer = layer, e->n = n;
    if (ids) memcpy(e->ids, ids, sizeof(int32_t) * (size_t)n);
    return e;
}

static int rec_begin(expert_provider *p, int layer, const int32_t *ids, int n, sl_err *err)
{
    recorder *r = (recorder *)p;
    rec_push(r, EV_BEGIN, layer, ids, n);
    r->layer = layer;
    return r->inner->ops->begin(r->inner, layer, ids, n, err);
}

static int rec_next(expert_provider *p, expert_view *v, sl_err *err)
{
    recorder *r = (recorder *)p;
    int i = r->inner->ops->next(r->inner, v, err);
    if (i >= 0) rec_push(r, EV_NEXT, r->layer, NULL, 0);
    return i;
}

static void rec_end(expert_provider *p, int layer)
{
    recorder *r = (recorder *)p;
    rec_push(r, EV_END, layer, NULL, 0);
    r->inner->ops->end(r->inner, layer);
}

static void rec_hint(expert_provider *p, int layer, const int32_t *ids, int n)
{
    rec_push((recorder *)p, EV_HINT, layer, ids, n);
}

static void rec_destroy(expert_provider *p)
{
    recorder *r = (recorder *)p;
    r->inner->ops->destroy(r->inner);
    free(r->ev);
    free(r);
}

static const expert_provider_ops REC_OPS = {
    .begin = rec_begin, .next = rec_next, .end = rec_end, .hint = rec_hint, .destroy = rec_destroy,
};

/* ------------------------------------------------------------ models */

typedef enum { PROV_RAM, PROV_STORE, PROV_REC } prov_kind;

typedef struct {
    gguf_file *g;
    expert_layout xl;
    sl_model *m;
    expert_provider *prov; /* owned by the model */
    recorder *rec;
} model_ctx;

static void model_close(model_ctx *c)
{
    model_free(c->m);
    expert_layout_free(&c->xl);
    gguf_close(c->g);
    memset(c, 0, sizeof *c);
}

/* The store's admission rule and simulated drive rate (0: none) for
 * PROV_STORE. */
typedef struct {
    pf_admit_mode admit;
    double bps;
} store_knobs;

static int model_open_knobs(model_ctx *c, prov_kind kind, int slots, store_knobs kn, sl_err *err)
{
    memset(c, 0, sizeof *c);
    if (kind == PROV_RAM) return model_load(&c->m, MODEL, NULL, err);
    if (gguf_open(&c->g, MODEL, err) || expert_layout_from_gguf(&c->xl, c->g, NL, NE, NK, err)) return -1;
    if (kind == PROV_STORE) {
        store_config cfg = store_config_default(store_slot_bytes(&c->xl) * (uint64_t)slots);
        cfg.chunk_bytes = 64 << 10;
        cfg.prefetch_admit = kn.admit;
        cfg.throttle_bps = kn.bps;
        if (expert_store_create(&c->prov, &c->xl, &cfg, err)) { /* no io_uring here: threads */
            cfg.io = STORE_IO_PREAD;
            if (expert_store_create(&c->prov, &c->xl, &cfg, err)) return -1;
        }
    } else {
        recorder *r = calloc(1, sizeof *r);
        if (!r || !(r->ev = calloc(MAX_EV, sizeof *r->ev)) || mem_provider_create(&r->inner, &c->xl, err)) {
            if (r) free(r->ev);
            free(r);
            return sl_errf(err, "recorder: out of memory or %s", err->msg);
        }
        r->base.ops = &REC_OPS;
        c->rec = r;
        c->prov = &r->base;
    }
    model_opts mo = {.provider = c->prov, .own_provider = true};
    return model_load(&c->m, MODEL, &mo, err);
}

static int model_open(model_ctx *c, prov_kind kind, int slots, sl_err *err)
{
    return model_open_knobs(c, kind, slots, (store_knobs){PF_ADMIT_COST, 0}, err);
}

/* Prompt (all positions' logits) then N_DECODE teacher-forced single-token
 * steps on the golden continuation; returns every logit row (malloc'd). */
static float *run_sequence(model_ctx *c, sl_session *s, const golden *g, int *greedy_bad, sl_err *err)
{
    int nv = model_n_vocab(c->m);
    float *lg = malloc(sizeof(float) * (size_t)nv * (size_t)(g->np + N_DECODE));
    if (!lg) return sl_errf(err, "out of memory"), NULL;
    *greedy_bad = -1;
    if (c->rec) rec_push(c->rec, EV_EVAL, -1, NULL, g->np);
    int rc = session_eval(s, g->prompt, g->np, lg, true, err);
    for (int i = 0; rc == 0 && i < N_DECODE; i++) {
        float *prev = lg + (size_t)(g->np - 1 + i) * nv;
        if (argmax(prev, nv) != g->gen[i] && *greedy_bad < 0) *greedy_bad = i;
        if (c->rec) rec_push(c->rec, EV_EVAL, -1, NULL, 1);
        rc = session_eval(s, &g->gen[i], 1, prev + nv, false, err);
    }
    if (rc) {
        free(lg);
        return NULL;
    }
    return lg;
}

/* -------------------------------------------------- bit identity */

static void identity_case(const golden *g)
{
    t_begin("logits bit-identical with prefetch off/next/auto, in RAM and SSD store (16 slots, every --prefetch-admit, a slow drive); greedy = llama.cpp");
    static const sl_prefetch_mode modes[] = {SL_PREFETCH_OFF, SL_PREFETCH_NEXT, SL_PREFETCH_AUTO};
    float *ref = NULL;
    size_t bytes = 0;
    for (int k = 0; k < 2; k++)
        for (int mi = 0; mi < 3; mi++) {
            model_ctx c;
            sl_err err;
            sl_session *s = NULL;
            session_opts so = {.prefetch = modes[mi]};
            const char *what = k ? "store" : "RAM";
            if (model_open(&c, k ? PROV_STORE : PROV_RAM, 16, &err) ||
                session_create_opts(&s, c.m, 128, NULL, &so, &err)) {
                T_CHECK(0, "%s: %s", what, err.msg);
                model_close(&c);
                continue;
            }
            int bad;
            float *lg = run_sequence(&c, s, g, &bad, &err);
            T_CHECK(lg != NULL, "%s %s: %s", what, sl_prefetch_mode_name(modes[mi]), err.msg);
            T_CHECK(!lg || bad < 0, "%s %s: greedy leaves llama.cpp's continuation at step %d", what,
                    sl_prefetch_mode_name(modes[mi]), bad);
            bytes = sizeof(float) * (size_t)model_n_vocab(c.m) * (size_t)(g->np + N_DECODE);
            if (lg && !ref) ref = lg, lg = NULL;
            T_CHECK(!lg || memcmp(lg, ref, bytes) == 0, "%s, prefetch %s: logits differ from RAM/off", what,
                    sl_prefetch_mode_name(modes[mi]));
            if (k && modes[mi] != SL_PREFETCH_OFF) {
                store_stats st;
                expert_store_stats(c.prov, &st);
                T_CHECK(st.prefetch_issued > 0 && st.prefetch_used > 0,
                        "%s: the store read %llu predicted experts, %llu used", sl_prefetch_mode_name(modes[mi]),
                        (unsigned long long)st.prefetch_issued, (unsigned long long)st.prefetch_used);
            }
            free(lg);
            session_free(s);
            model_close(&c);
        }
    /* every admission rule, and the cost rule on a slow simulated drive
     * (where it declines most guesses): the same logits */
    static const store_knobs K[] = {{PF_ADMIT_RANK, 0}, {PF_ADMIT_OFF, 0}, {PF_ADMIT_COST, 100e6}};
    for (size_t k = 0; ref && k < sizeof K / sizeof *K; k++) {
        model_ctx c;
        sl_err err;
        sl_session *s = NULL;
        session_opts so = {.prefetch = SL_PREFETCH_AUTO};
        if (model_open_knobs(&c, PROV_STORE, 16, K[k], &err) || session_create_opts(&s, c.m, 128, NULL, &so, &err)) {
            T_CHECK(0, "store, admit %s: %s", pf_admit_name(K[k].admit), err.msg);
            model_close(&c);
            continue;
        }
        int bad;
        float *lg = run_sequence(&c, s, g, &bad, &err);
        T_CHECK(lg && memcmp(lg, ref, bytes) == 0, "store, prefetch auto, admit %s%s: logits differ from RAM/off%s%s",
                pf_admit_name(K[k].admit), K[k].bps > 0 ? " at 100 MB/s" : "", lg ? "" : ": ", lg ? "" : err.msg);
        free(lg);
        session_free(s);
        model_close(&c);
    }
    free(ref);
    t_end();
}

/* ---------------------------------------------------- call order */

/* Index of the first event after I of type T at LAYER (-1 any), or n. */
static int find_ev(const recorder *r, int i, ev_type t, int layer)
{
    for (int j = i + 1; j < r->n_ev; j++)
        if (r->ev[j].type == t && (layer < 0 || r->ev[j].layer == layer)) return j;
    return r->n_ev;
}

/* Checks that every hint of each evaluation sits where MODE allows it;
 * returns the number of hints checked, -1 after a failed check. */
static int check_order(const recorder *r, sl_prefetch_mode mode)
{
    int hints = 0;
    for (int i = 0; i < r->n_ev; i++) {
        const event *e = &r->ev[i];
        if (e->type != EV_HINT) continue;
        hints++;
        int j = e->layer;
        /* the last begin / end of the layer before, the next begin of j */
        int prev_begin = -1, prev_end = -1, eval = -1;
        for (int k = i - 1; k >= 0 && eval < 0; k--) {
            const event *f = &r->ev[k];
            if (f->type == EV_EVAL) eval = k;
            if (f->type == EV_BEGIN && f->layer == j - 1 && prev_begin < 0) prev_begin = k;
            if (f->type == EV_END && f->layer == j - 1 && prev_end < 0) prev_end = k;
        }
        int next_begin = find_ev(r, i, EV_BEGIN, -1);
        T_CHECK(next_begin < r->n_ev && r->ev[next_begin].layer <= j, "hint for layer %d after its begin", j);
        bool early = j > 0 && prev_begin >= 0 && prev_end < prev_begin &&
                     find_ev(r, prev_begin, EV_NEXT, j - 1) > i; /* after begin(j-1), before its first next */
        bool late = (j == 0 ? eval >= 0 : prev_end > prev_begin) && r->ev[next_begin].layer == j;
        if (mode == SL_PREFETCH_NEXT && j > 0) {
            T_CHECK(early, "event %d: hint for layer %d not between begin(%d) and its first next()", i, j, j - 1);
        } else {
            T_CHECK(early || late, "event %d: hint for layer %d neither during layer %d nor right before %d", i, j,
                    j - 1, j);
        }
        if (t_cur.failed) return -1;
    }
    /* next mode hints every layer of every evaluation */
    if (mode == SL_PREFETCH_NEXT) {
        int evals = 0;
        for (int i = 0; i < r->n_ev; i++) evals += r->ev[i].type == EV_EVAL;
        T_CHECK(hints == evals * NL, "%d hints for %d evaluations of %d layers", hints, evals, NL);
    }
    return hints;
}

/* ------------------------------------------------------ recount */

typedef struct {
    uint64_t steps, hinted, hits, predicted, actual;
    uint64_t rank_hits[NK], rank_n[NK]; /* by position in the hint (router rank for one token) */
} counts;

/* Recall and precision recounted from the records: per decode evaluation
 * and layer, the hint given for the layer in that evaluation vs its begin. */
static void recount(const recorder *r, counts out[NL])
{
    memset(out, 0, sizeof(counts) * NL);
    for (int i = 0; i < r->n_ev; i++) {
        if (r->ev[i].type != EV_EVAL || r->ev[i].n != 1) continue;
        int end = find_ev(r, i, EV_EVAL, -1);
        const event *hint[NL] = {0};
        for (int k = i + 1; k < end; k++) {
            const event *e = &r->ev[k];
            if (e->type == EV_HINT) hint[e->layer] = e;
            if (e->type != EV_BEGIN) continue;
            counts *c = &out[e->layer];
            c->steps++;
            c->actual += (uint64_t)e->n;
            if (!hint[e->layer]) continue;
            c->hinted++;
            c->predicted += (uint64_t)hint[e->layer]->n;
            for (int a = 0; a < hint[e->layer]->n; a++)
                for (int b = 0; b < e->n; b++) {
                    int hit = hint[e->layer]->ids[a] == e->ids[b];
                    c->hits += (uint64_t)hit;
                    if (a < NK) c->rank_hits[a] += (uint64_t)hit;
                }
            for (int a = 0; a < hint[e->layer]->n && a < NK; a++) c->rank_n[a]++;
        }
    }
}

static void compare_stats(const char *what, const sl_prefetch_stats *st, const counts c[NL])
{
    T_CHECK(st->n_layers == NL, "%s: %d layers", what, st->n_layers);
    uint64_t hits = 0, actual = 0, predicted = 0;
    for (int j = 0; j < NL && j < st->n_layers; j++) {
        const sl_prefetch_layer *l = &st->layers[j];
        T_CHECK(l->layer == j && l->steps == c[j].steps && l->hinted_steps == c[j].hinted && l->hits == c[j].hits &&
                    l->predicted == c[j].predicted && l->actual == c[j].actual,
                "%s layer %d: steps %llu/%llu hinted %llu/%llu hits %llu/%llu predicted %llu/%llu actual %llu/%llu",
                what, j, (unsigned long long)l->steps, (unsigned long long)c[j].steps,
                (unsigned long long)l->hinted_steps, (unsigned long long)c[j].hinted, (unsigned long long)l->hits,
                (unsigned long long)c[j].hits, (unsigned long long)l->predicted, (unsigned long long)c[j].predicted,
                (unsigned long long)l->actual, (unsigned long long)c[j].actual);
        double rc = c[j].actual ? (double)c[j].hits / (double)c[j].actual : 0;
        double pr = c[j].predicted ? (double)c[j].hits / (double)c[j].predicted : 0;
        T_CHECK(fabs(l->recall - rc) < 1e-12 && fabs(l->precision - pr) < 1e-12, "%s layer %d: recall %g vs %g",
                what, j, l->recall, rc);
        for (int k = 0; k < NK; k++) {
            double rp = c[j].rank_n[k] ? (double)c[j].rank_hits[k] / (double)c[j].rank_n[k] : 0;
            T_CHECK(fabs(l->rank_precision[k] - rp) < 1e-12, "%s layer %d rank %d: precision %g vs %g", what, j, k,
                    l->rank_precision[k], rp);
        }
        hits += c[j].hits, actual += c[j].actual, predicted += c[j].predicted;
    }
    T_CHECK(st->steps == N_DECODE && fabs(st->recall - (double)hits / (double)actual) < 1e-12 &&
                fabs(st->precision - (double)hits / (double)predicted) < 1e-12,
            "%s: %llu steps, recall %g precision %g", what, (unsigned long long)st->steps, st->recall,
            st->precision);
}

/* ----------------------------------------- layer 0: a reference pilot */

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, ex = h >> 10 & 31, man = h & 1023;
    float v;
    if (ex == 0) v = ldexpf((float)man, -24);
    else if (ex == 31) v = man ? NAN : INFINITY;
    else v = ldexpf((float)(man | 1024), (int)ex - 25);
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= sign;
    memcpy(&v, &u, 4);
    return v;
}

/* Reads N floats of tensor NAME, which must be F32 (the norms and routers here). */
static int read_f32(const gguf_file *g, const char *name, float *out, size_t n, sl_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t || t->type != 0) return sl_errf(err, "%s: missing or not F32", name);
    return gguf_read_tensor(g, t, 0, out, n * sizeof(float), err);
}

/* The top-4 of layer 0's router on token TOK's embedding, computed in
 * double from the GGUF bytes: Q8_0 row (34-byte blocks: f16 scale, 32 int8),
 * RMS norm (eps 1e-6) times ffn_norm, router rows, softmax order = logit
 * order.  *gap: the smallest logit difference around the 4th place. */
static int ref_layer0(const gguf_file *g, int32_t tok, int32_t top[NK], double *gap, sl_err *err)
{
    enum { D = 256 };
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te || te->type != 8) return sl_errf(err, "token_embd.weight is not Q8_0");
    uint8_t row[D / 32 * 34];
    float norm[D], router[NE * D];
    if (gguf_read_tensor(g, te, (uint64_t)tok * sizeof row, row, sizeof row, err) ||
        read_f32(g, "blk.0.ffn_norm.weight", norm, D, err) ||
        read_f32(g, "blk.0.ffn_gate_inp.weight", router, (size_t)NE * D, err))
        return -1;
    double x[D], ss = 0;
    for (int b = 0; b < D / 32; b++) {
        uint16_t h = (uint16_t)(row[b * 34] | row[b * 34 + 1] << 8);
        double d = half_to_float(h);
        for (int i = 0; i < 32; i++) x[b * 32 + i] = d * (int8_t)row[b * 34 + 2 + i];
    }
    for (int i = 0; i < D; i++) ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / D + 1e-6), lg[NE];
    for (int e = 0; e < NE; e++) {
        lg[e] = 0;
        for (int i = 0; i < D; i++) lg[e] += x[i] * sc * norm[i] * router[e * D + i];
    }
    uint8_t taken[NE] = {0};
    for (int k = 0; k <= NK; k++) {
        int best = -1;
        for (int e = 0; e < NE; e++)
            if (!taken[e] && (best < 0 || lg[e] > lg[best])) best = e;
        taken[best] = 1;
        if (k < NK) top[k] = best;
        else *gap = lg[top[NK - 1]] - lg[best];
    }
    return 0;
}

/* In next mode layer 0's hint is the pilot on the embedding (OUT tap). */
static void layer0_reference(const recorder *r, const golden *g)
{
    t_begin("layer-0 prediction from the embedding = reference router on the GGUF's embedding row");
    sl_err err;
    gguf_file *gf;
    if (gguf_open(&gf, MODEL, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    int step = 0, checked = 0;
    for (int i = 0; i < r->n_ev; i++) {
        if (r->ev[i].type != EV_EVAL || r->ev[i].n != 1) continue;
        int32_t tok = g->gen[step++], top[NK];
        int h = find_ev(r, i, EV_HINT, 0);
        double gap;
        if (ref_layer0(gf, tok, top, &gap, &err)) {
            T_CHECK(0, "%s", err.msg);
            break;
        }
        T_CHECK(h < r->n_ev && r->ev[h].n == NK, "step %d: no layer-0 hint of %d experts", step, NK);
        if (h >= r->n_ev || gap < 1e-5) continue; /* a near-tie may fall either way in float */
        for (int k = 0; k < NK; k++)
            T_CHECK(r->ev[h].ids[k] == top[k], "step %d (token %d): hint rank %d = %d, reference %d", step, tok, k,
                    r->ev[h].ids[k], top[k]);
        checked++;
    }
    T_CHECK(checked >= N_DECODE / 2, "only %d of %d steps clear of near-ties", checked, N_DECODE);
    gguf_close(gf);
    t_end();
}

/* ------------------------------------- order + recount, per mode */

static void recorded_case(const golden *g, sl_prefetch_mode mode, const sl_prefetch_stats *no_hint)
{
    char name[160];
    snprintf(name, sizeof name, "prefetch %s: hint order, recall/precision = recount from the provider's records",
             sl_prefetch_mode_name(mode));
    t_begin(name);
    model_ctx c;
    sl_err err;
    sl_session *s = NULL;
    session_opts so = {.prefetch = mode};
    if (model_open(&c, PROV_REC, 0, &err) || session_create_opts(&s, c.m, 128, NULL, &so, &err)) {
        T_CHECK(0, "%s", err.msg);
        model_close(&c);
        t_end();
        return;
    }
    int bad;
    float *lg = run_sequence(&c, s, g, &bad, &err);
    T_CHECK(lg && !c.rec->overflow, "%s", lg ? "event buffer overflow" : err.msg);
    free(lg);
    int hints = check_order(c.rec, mode);
    T_CHECK(hints > 0, "no hints recorded");
    counts cnt[NL];
    recount(c.rec, cnt);
    sl_prefetch_stats st;
    session_prefetch_stats(s, &st);
    T_CHECK(st.mode == mode, "mode %d", (int)st.mode);
    compare_stats("recorded", &st, cnt);
    /* the same run with a provider that takes no hints */
    for (int j = 0; no_hint && j < NL && j < no_hint->n_layers; j++) {
        const sl_prefetch_layer *a = &st.layers[j], *b = &no_hint->layers[j];
        T_CHECK(a->hits == b->hits && a->predicted == b->predicted && a->actual == b->actual,
                "layer %d: without hints %llu/%llu/%llu, with %llu/%llu/%llu", j, (unsigned long long)b->hits,
                (unsigned long long)b->predicted, (unsigned long long)b->actual, (unsigned long long)a->hits,
                (unsigned long long)a->predicted, (unsigned long long)a->actual);
    }
    t_end();
    if (mode == SL_PREFETCH_NEXT) layer0_reference(c.rec, g);
    session_free(s);
    model_close(&c);
}

/* Stats of a run with the in-RAM provider (no hint op): COPY gets the layers. */
static int ram_stats(const golden *g, sl_prefetch_mode mode, sl_prefetch_stats *out, sl_prefetch_layer *copy)
{
    model_ctx c;
    sl_err err;
    sl_session *s = NULL;
    session_opts so = {.prefetch = mode};
    int bad, rc = -1;
    if (model_open(&c, PROV_RAM, 0, &err) == 0 && session_create_opts(&s, c.m, 128, NULL, &so, &err) == 0) {
        float *lg = run_sequence(&c, s, g, &bad, &err);
        if (lg) {
            session_prefetch_stats(s, out);
            size_t n = (size_t)(out->n_layers < NL ? out->n_layers : NL);
            if (n) memcpy(copy, out->layers, sizeof(sl_prefetch_layer) * n);
            out->layers = copy;
            rc = 0;
        }
        free(lg);
    }
    session_free(s);
    model_close(&c);
    return rc;
}

static void ram_case(const golden *g, sl_prefetch_mode mode, sl_prefetch_stats *st, sl_prefetch_layer *layers)
{
    char name[128];
    snprintf(name, sizeof name, "prefetch %s in RAM (no hint op): statistics still computed",
             sl_prefetch_mode_name(mode));
    t_begin(name);
    int rc = ram_stats(g, mode, st, layers);
    T_CHECK(rc == 0, "run failed");
    T_CHECK(rc || (st->n_layers == NL && st->steps == N_DECODE && st->actual == (uint64_t)N_DECODE * NL * NK &&
                   st->predicted > 0),
            "%d layers, %llu steps, %llu actual, %llu predicted", st->n_layers, (unsigned long long)st->steps,
            (unsigned long long)st->actual, (unsigned long long)st->predicted);
    t_end();
}

static void off_case(const golden *g)
{
    t_begin("prefetch off: no predictions, no statistics");
    sl_prefetch_stats st;
    sl_prefetch_layer l[NL];
    T_CHECK(ram_stats(g, SL_PREFETCH_OFF, &st, l) == 0, "run failed");
    T_CHECK(st.mode == SL_PREFETCH_OFF && st.n_layers == 0 && st.predicted == 0, "mode %d, %d layers",
            (int)st.mode, st.n_layers);
    t_end();
}

/* ------------------------------------ other MoE architectures */

/* The shared arch fixtures (group-limited sigmoid routing with selection
 * bias, leading dense layers, Mixtral, recurrent KDA / gated delta net
 * layers between the MoE layers): the prompt's first half as a batch,
 * the rest one token at a time; logits bit-identical in every mode, and the
 * statistics cover every MoE layer and every single-token step. */
static void arch_case(const char *fx)
{
    char rel[160], name[160];
    snprintf(rel, sizeof rel, "models/arch/%s.gguf", fx);
    snprintf(name, sizeof name, "arch %s: logits bit-identical with prefetch off/next/auto", fx);
    const char *path = t_shared(rel);
    snprintf(rel, sizeof rel, "golden/arch/%s.json", fx);
    const char *jpath = t_shared(rel);
    if (!path || !jpath) {
        t_skip(name, "../shared fixtures not found");
        return;
    }
    t_begin(name);
    json_error_t je;
    json_t *j = json_load_file(jpath, 0, &je);
    json_t *toks = json_object_get(json_array_get(json_object_get(j, "prompts"), 0), "tokens");
    int n = (int)json_array_size(toks), half = n / 2;
    int32_t ids[64];
    for (int i = 0; i < n && i < 64; i++) ids[i] = (int32_t)json_integer_value(json_array_get(toks, i));
    sl_model *m = NULL;
    sl_err err;
    T_CHECK(n >= 4 && n <= 64, "%s: %d prompt tokens", jpath, n);
    if (!t_cur.failed && model_load(&m, path, NULL, &err)) T_CHECK(0, "%s", err.msg);
    float *ref = NULL;
    for (int mi = 0; m && mi < 3 && !t_cur.failed; mi++) {
        static const sl_prefetch_mode modes[] = {SL_PREFETCH_OFF, SL_PREFETCH_NEXT, SL_PREFETCH_AUTO};
        session_opts so = {.prefetch = modes[mi]};
        sl_session *s = NULL;
        size_t nv = (size_t)model_n_vocab(m);
        float *lg = malloc(sizeof(float) * nv * (size_t)n);
        int rc = !lg || session_create_opts(&s, m, 128, NULL, &so, &err);
        if (!rc) rc = session_eval(s, ids, half, lg, true, &err);
        for (int i = half; !rc && i < n; i++) rc = session_eval(s, ids + i, 1, lg + nv * (size_t)i, false, &err);
        T_CHECK(!rc, "%s: %s", sl_prefetch_mode_name(modes[mi]), lg ? err.msg : "out of memory");
        if (!rc && ref)
            T_CHECK(memcmp(lg, ref, sizeof(float) * nv * (size_t)n) == 0, "prefetch %s changed the logits",
                    sl_prefetch_mode_name(modes[mi]));
        sl_prefetch_stats st;
        if (!rc && s) session_prefetch_stats(s, &st);
        if (!rc && mi > 0) {
            int moe = 0;
            for (int l = 0; l < model_n_layer(m); l++) moe += l >= m->hp.n_layer_dense_lead;
            T_CHECK(st.n_layers == moe && st.steps == (uint64_t)(n - half) && st.predicted > 0 &&
                        st.recall >= 0 && st.recall <= 1,
                    "%s: %d of %d MoE layers, %llu steps, recall %g", sl_prefetch_mode_name(modes[mi]), st.n_layers,
                    moe, (unsigned long long)st.steps, st.recall);
        }
        if (!ref && !rc) ref = lg, lg = NULL;
        free(lg);
        session_free(s);
    }
    free(ref);
    model_free(m);
    json_decref(j);
    t_end();
}

/* ------------------------------------------------ estimator, chooser */

static void estimator_case(void)
{
    t_begin("estimate: running mean over the first samples, then EMA with weight PILOT_EMA_ALPHA");
    float est = 0;
    int64_t n = 0;
    double mean = 0, ema = 0;
    for (int i = 0; i < 200; i++) {
        float x = (float)((i * 37) % 11) / 10.0f;
        pilot_est_update(&est, &n, x);
        if (i < 16) mean += ((double)x - mean) / (i + 1), ema = mean;
        else ema += (double)PILOT_EMA_ALPHA * ((double)x - ema);
        T_CHECK(fabs(est - ema) < 1e-4, "sample %d: %g, reference %g", i, est, ema);
        if (t_cur.failed) break;
    }
    T_CHECK(n == 200, "%lld samples", (long long)n);
    t_end();
}

static void chooser_case(void)
{
    t_begin("auto: best estimate per layer, late tap only by a margin, off below the threshold, back on");
    float e[SL_PRED_COUNT];
    int64_t n[SL_PRED_COUNT] = {0};
    memset(e, 0, sizeof e);
    T_CHECK(pilot_choose(e, n, true) == SL_PRED_ATTN, "cold start with an ATTN tap");
    T_CHECK(pilot_choose(e, n, false) == SL_PRED_OUT, "cold start on the first layer");
    for (int c = 0; c < SL_PRED_COUNT; c++) n[c] = 10;
    n[SL_PRED_TOKEN] = 0;
    e[SL_PRED_ATTN] = 0.8f, e[SL_PRED_OUT] = 0.85f, e[SL_PRED_PREV] = 0.2f;
    T_CHECK(pilot_choose(e, n, true) == SL_PRED_ATTN, "OUT within the margin took over");
    e[SL_PRED_OUT] = 0.95f;
    T_CHECK(pilot_choose(e, n, true) == SL_PRED_OUT, "OUT clearly better not taken");
    e[SL_PRED_ATTN] = 0.1f, e[SL_PRED_OUT] = 0.15f, e[SL_PRED_PREV] = 0.6f;
    T_CHECK(pilot_choose(e, n, true) == SL_PRED_PREV, "fallback to the previous token's experts");
    T_CHECK(pilot_choose(e, n, false) == SL_PRED_PREV, "first layer: PREV");
    n[SL_PRED_TOKEN] = 5, e[SL_PRED_TOKEN] = 0.7f;
    T_CHECK(pilot_choose(e, n, false) == SL_PRED_TOKEN, "first layer: TOKEN better");

    /* a layer whose predictors turn useless is switched off, and back on */
    memset(n, 0, sizeof n);
    for (int i = 0; i < 50; i++)
        for (int c = 0; c < 3; c++) pilot_est_update(&e[c], &n[c], c == SL_PRED_ATTN ? 1.0f : 0.25f);
    T_CHECK(pilot_choose(e, n, true) == SL_PRED_ATTN, "good ATTN not chosen");
    int off_after = -1, on_after = -1;
    for (int i = 0; i < 200 && off_after < 0; i++) {
        for (int c = 0; c < 3; c++) pilot_est_update(&e[c], &n[c], 0.0f);
        if (pilot_choose(e, n, true) == -1) off_after = i + 1;
    }
    T_CHECK(off_after > 0 && off_after <= 16, "switched off after %d useless steps", off_after);
    for (int i = 0; i < 200 && on_after < 0; i++) {
        pilot_est_update(&e[SL_PRED_PREV], &n[SL_PRED_PREV], 0.75f);
        if (pilot_choose(e, n, true) == SL_PRED_PREV) on_after = i + 1;
    }
    T_CHECK(on_after > 0 && on_after <= 16, "back on after %d good steps", on_after);
    t_end();
}

int main(void)
{
    estimator_case();
    chooser_case();
    golden g;
    if (load_golden(&g)) {
        t_begin("load tests/fixtures/tinymoe_greedy.json");
        T_CHECK(0, "bad or missing fixture");
        t_end();
        return t_done();
    }
    identity_case(&g);
    off_case(&g);
    static const sl_prefetch_mode modes[] = {SL_PREFETCH_NEXT, SL_PREFETCH_AUTO};
    for (int i = 0; i < 2; i++) {
        sl_prefetch_stats st;
        sl_prefetch_layer layers[NL];
        ram_case(&g, modes[i], &st, layers);
        recorded_case(&g, modes[i], st.n_layers == NL ? &st : NULL);
    }
    static const char *const ARCH[] = {"qwen3moe-a3b-F16", "deepseek2-kimik2-F16", "deepseek2-dsv3-F16",
                                       "llama-mixtral-Q4_0", "kimi-linear-kda-F16", "qwen35moe-a3b-F16"};
    for (size_t i = 0; i < sizeof ARCH / sizeof *ARCH; i++) arch_case(ARCH[i]);
    return t_done();
}
