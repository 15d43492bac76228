/* Speculative decoding (src/decode/spec.c, draft.c, draft_model.c) against
 * plain decoding of the same model: with temperature 0 the output ids and
 * every logit row a token was sampled from must be the same bits, for
 * n-gram drafts, a draft model and garbage drafts (random ids, ids past
 * the vocabulary), fixed K = 1..8 and adaptive K, in RAM and streaming
 * through an expert cache that forces eviction, on 1 and 2 threads.  The
 * reference is plain greedy decoding in RAM on 1 thread; streaming and
 * thread count are bit-identical to it by the engine's own contract (and
 * tested elsewhere), so every other run must match it bit for bit.
 *
 * Models: the bundled tinymoe (qwen3moe) with tinydraft as its draft; the
 * MoE lean fixtures (deepseek2 with MLA and shared experts, qwen3moe,
 * mixtral); the recurrent kimi-linear and qwen35moe fixtures of ../shared
 * when present (rollback through state snapshots). */
#include <math.h>
#include <stdint.h>

#include "decode/draft.h"
#include "decode/draft_model.h"
#include "decode/generate.h"
#include "decode/spec.h"
#include "engine/engine.h"
#include "sluice.h"
#include "t.h"

enum { MAX_GEN = 48 };

typedef struct {
    int32_t nv;
    int32_t ids[MAX_GEN + 1];
    float *rows; /* (MAX_GEN + 1) x nv */
    int n_rows;
} capture;

static void on_logits(void *ud, const float *logits, int32_t nv)
{
    capture *c = ud;
    if (c->n_rows <= MAX_GEN) memcpy(c->rows + (size_t)c->n_rows * nv, logits, sizeof(float) * (size_t)nv);
    c->n_rows++;
}

typedef struct {
    const char *name, *path, *draft_path;
    int n_gen;
    const char *xdraft_path; /* a draft of another vocabulary */
} model_case;

typedef struct {
    sl_engine eng;
    gen_seq q;
    int32_t nv;
    bool open;
} rig;

/* A --mem whose expert cache holds a quarter of PATH's experts (at least
 * twice one token's). */
static uint64_t evicting_budget(const char *path, int threads, sl_err *err)
{
    mem_plan p;
    engine_opts o = {.model_path = path, .n_ctx = 128, .threads = threads, .mem = 4ull << 30, .n_rollback = DRAFT_MAX};
    if (engine_plan(path, &o, &p, err)) return 0;
    int64_t slots = p.experts / 4;
    sl_model *m;
    if (model_load(&m, path, &(model_opts){.dry_run = true}, err)) return 0;
    int64_t floor = 2 * model_n_expert_used(m);
    model_free(m);
    if (slots < floor) slots = floor;
    return p.total - p.cache - p.unused + (uint64_t)slots * p.slot_bytes;
}

static int rig_open_batch(rig *r, const char *path, int threads, uint64_t mem, int32_t n_batch, sl_err *err)
{
    memset(r, 0, sizeof *r);
    engine_opts o = {.model_path = path, .n_ctx = 128, .threads = threads, .mem = mem, .no_heat = true,
                     .n_rollback = DRAFT_MAX, .n_batch = n_batch};
    if (engine_open(&r->eng, &o, err)) return -1;
    r->nv = model_n_vocab(r->eng.model);
    if (seq_init(&r->q, r->eng.session, r->nv, err)) {
        engine_close(&r->eng);
        return -1;
    }
    r->open = true;
    return 0;
}

static int rig_open(rig *r, const char *path, int threads, uint64_t mem, sl_err *err)
{
    return rig_open_batch(r, path, threads, mem, 0, err);
}

static void rig_close(rig *r)
{
    if (!r->open) return;
    seq_free(&r->q);
    engine_close(&r->eng);
    r->open = false;
}

static void prompt_of(int32_t nv, int32_t *p, int *n)
{
    /* a little repetition, so that n-gram lookup has something to find */
    static const int32_t base[] = {464, 1468, 582, 3114, 379, 262, 5417, 290, 531, 262, 1468, 582};
    *n = (int)(sizeof base / sizeof *base);
    for (int i = 0; i < *n; i++) p[i] = base[i] % nv;
}

/* Greedy generation of N tokens through SP (NULL: plain) into C. */
static int run_gen(rig *r, spec *sp, int n, capture *c, sl_err *err)
{
    int32_t prompt[16];
    int np;
    prompt_of(r->nv, prompt, &np);
    if (seq_rewind(&r->q, 0, err) || seq_push(&r->q, prompt, (size_t)np, err)) return -1;
    sampler_params par = sampler_defaults();
    par.temp = 0;
    sl_sampler *smp;
    if (sampler_create(&smp, &par, r->nv, err)) return -1;
    sampler_accept_prompt(smp, r->q.toks, r->q.n);
    c->n_rows = 0;
    c->nv = r->nv;
    gen_opts go = {.n_predict = n, .ignore_eog = true};
    gen_callbacks cb = {.ud = c, .on_logits = on_logits};
    gen_result res;
    int rc = generate(r->eng.model, &r->q, smp, &go, &cb, sp, &res, err);
    sampler_free(smp);
    if (rc == 0) {
        for (size_t i = 0; i < res.n_ids && i <= MAX_GEN; i++) c->ids[i] = res.ids[i];
        if ((int)res.n_ids != n) rc = sl_errf(err, "%zu tokens generated, %d asked", res.n_ids, n);
    }
    gen_result_free(&res);
    return rc;
}

static bool same_capture(const capture *a, const capture *b, int n, char *why, size_t cap)
{
    if (a->n_rows != b->n_rows) return snprintf(why, cap, "%d rows vs %d", b->n_rows, a->n_rows), false;
    for (int i = 0; i < n; i++) {
        if (a->ids[i] != b->ids[i]) return snprintf(why, cap, "token %d: %d, not %d", i, b->ids[i], a->ids[i]), false;
        if (memcmp(a->rows + (size_t)i * a->nv, b->rows + (size_t)i * a->nv, sizeof(float) * (size_t)a->nv))
            return snprintf(why, cap, "logit row %d differs", i), false;
    }
    return true;
}

typedef struct {
    draft_kind kind;
    int k; /* 0: adaptive */
    bool cross; /* DRAFT_MODEL: the draft of another vocabulary */
    int32_t vocab; /* DRAFT_MODEL: the ids it proposes from (draft_model_open; 0: auto) */
} draft_cfg;

/* Runs CFGS on rig R and checks each against REF. */
static void check_configs(const model_case *mc, rig *r, const char *where, const draft_cfg *cfgs, int n_cfgs,
                          const capture *ref, capture *c)
{
    char name[256], why[160];
    for (int i = 0; i < n_cfgs; i++) {
        const draft_cfg *g = &cfgs[i];
        const char *kn = g->kind == DRAFT_NGRAM ? "ngram" : g->kind == DRAFT_RANDOM ? "random"
                         : g->cross ? "cross-vocabulary model" : "model";
        const char *dpath = g->cross ? mc->xdraft_path : mc->draft_path;
        char kb[48];
        int kl = snprintf(kb, sizeof kb, g->k ? "K=%d" : "adaptive", g->k);
        if (g->vocab) snprintf(kb + kl, sizeof kb - (size_t)kl, g->vocab < 0 ? ", every id" : ", ids < %d", (int)g->vocab);
        snprintf(name, sizeof name, "draft %s %s: %s %s = plain greedy (ids and every logit row)", mc->name, where, kn, kb);
        if (g->kind == DRAFT_MODEL && !dpath) continue;
        t_begin(name);
        sl_err err;
        drafter *d = NULL;
        spec *sp = NULL;
        drafter_opts dopt = {.seed = 7u + (uint32_t)i, .random_range = r->nv + 40};
        int rc = drafter_create(&d, g->kind, &dopt, &err);
        if (!rc && g->kind == DRAFT_MODEL) {
            draft_model *dm;
            rc = draft_model_open(&dm, dpath, r->eng.model, r->eng.pool, 128, 0, g->vocab, g->cross, &err);
            if (!rc) T_CHECK(g->cross == (draft_model_xvocab(dm) != NULL), "vocabularies: %s", g->cross ? "the same" : "differ");
            if (!rc) drafter_set_model(d, dm);
        }
        spec_opts so = {.k_max = g->k};
        if (!rc) rc = spec_create(&sp, d, &so, r->nv, &err);
        if (!rc) rc = run_gen(r, sp, mc->n_gen, c, &err);
        T_CHECK(rc == 0, "%s", err.msg);
        if (!rc) T_CHECK(same_capture(ref, c, mc->n_gen, why, sizeof why), "%s", why);
        if (!rc) {
            const spec_stats *st = spec_get_stats(sp);
            T_CHECK(g->kind == DRAFT_NGRAM || st->steps > 0, "never drafted (%lld steps)", (long long)st->steps);
            if (g->kind == DRAFT_RANDOM && g->k) T_CHECK(st->steps > mc->n_gen / 4, "random K=%d: only %lld verifications", g->k, (long long)st->steps);
        }
        spec_free(sp);
        drafter_free(d);
        t_end();
    }
}

static void model_matrix(const model_case *mc)
{
    char name[200];
    snprintf(name, sizeof name, "draft %s: reference run", mc->name);
    sl_err err;
    rig r;
    capture ref = {0}, c = {0};
    if (rig_open(&r, mc->path, 1, 0, &err)) {
        t_begin(name);
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    ref.rows = malloc(sizeof(float) * (size_t)r.nv * (MAX_GEN + 1));
    c.rows = malloc(sizeof(float) * (size_t)r.nv * (MAX_GEN + 1));
    if (run_gen(&r, NULL, mc->n_gen, &ref, &err)) {
        t_begin(name);
        T_CHECK(0, "%s", err.msg);
        t_end();
        goto out;
    }
    draft_cfg full[32];
    int nf = 0;
    for (int k = 0; k <= 8; k++) full[nf++] = (draft_cfg){DRAFT_NGRAM, k, false, 0};
    full[nf++] = (draft_cfg){DRAFT_RANDOM, 3, false, 0};
    full[nf++] = (draft_cfg){DRAFT_RANDOM, 0, false, 0};
    if (mc->draft_path)
        for (int k = 0; k <= 8; k++) full[nf++] = (draft_cfg){DRAFT_MODEL, k, false, 0};
    if (mc->draft_path) /* a head cut to 64 ids: proposals mostly wrong; and the whole head */
        full[nf++] = (draft_cfg){DRAFT_MODEL, 4, false, 64}, full[nf++] = (draft_cfg){DRAFT_MODEL, 0, false, -1};
    if (mc->xdraft_path) full[nf++] = (draft_cfg){DRAFT_MODEL, 4, true, 0}, full[nf++] = (draft_cfg){DRAFT_MODEL, 0, true, 0};
    check_configs(mc, &r, "RAM 1 thread", full, nf, &ref, &c);
    rig_close(&r);
    static const draft_cfg some[] = {{DRAFT_NGRAM, 2, false, 0}, {DRAFT_NGRAM, 0, false, 0}, {DRAFT_RANDOM, 5, false, 0},
                                     {DRAFT_MODEL, 4, false, 0}, {DRAFT_MODEL, 3, true, 0}};
    int ns = (int)(sizeof some / sizeof *some);
    if (rig_open(&r, mc->path, 2, 0, &err) == 0) {
        check_configs(mc, &r, "RAM 2 threads", some, ns, &ref, &c);
        rig_close(&r);
    }
    for (int t = 1; t <= 2; t++) {
        uint64_t mem = evicting_budget(mc->path, t, &err);
        char where[64];
        snprintf(where, sizeof where, "streaming (evicting cache) %d thread%s", t, t > 1 ? "s" : "");
        if (!mem || rig_open(&r, mc->path, t, mem, &err)) {
            t_begin(where);
            T_CHECK(0, "%s: %s", mc->name, err.msg);
            t_end();
            continue;
        }
        check_configs(mc, &r, where, some, ns, &ref, &c);
        rig_close(&r);
    }
out:
    rig_close(&r);
    free(ref.rows);
    free(c.rows);
}

/* ------------------------------------------------------------- units */

static void test_ngram_lookup(void)
{
    t_begin("draft: n-gram lookup continues the latest earlier match of the longest suffix");
    const int32_t h[] = {1, 2, 3, 9, 1, 2, 3, 7, 5, 2, 3};
    int32_t out[8];
    /* suffix 2 3 (3 tokens "X 2 3" never repeat with X = 5): the latest "2 3" is at 5, then 7 5 2 3 */
    int n = ngram_lookup(h, 11, 1, 4, 4, out, NULL);
    T_CHECK(n == 4 && out[0] == 7 && out[1] == 5 && out[2] == 2 && out[3] == 3, "got %d: %d %d", n, out[0], out[1]);
    const int32_t g[] = {4, 5, 6};
    T_CHECK(ngram_lookup(g, 3, 1, 4, 4, out, NULL) == 0, "no earlier match: nothing");
    const int32_t p[] = {8, 8, 8};
    n = ngram_lookup(p, 3, 2, 2, 3, out, NULL);
    T_CHECK(n == 3 && out[0] == 8 && out[1] == 8 && out[2] == 8, "a match overlapping the suffix repeats: %d", n);
    const int32_t r[] = {6, 1, 2, 1, 2};
    n = ngram_lookup(r, 5, 1, 4, 5, out, NULL);
    /* "1 2" last occurred at 1, so 1 2 follows, and then the text since repeats */
    T_CHECK(n == 5 && out[0] == 1 && out[1] == 2 && out[2] == 1 && out[3] == 2 && out[4] == 1,
            "a repeating phrase goes on repeating: %d: %d %d %d %d %d", n, out[0], out[1], out[2], out[3], out[4]);
    n = ngram_lookup(h, 11, 1, 4, 8, out, NULL);
    /* past the end of h the matched stretch (7 5 2 3) repeats */
    T_CHECK(n == 8 && out[4] == 7 && out[5] == 5 && out[7] == 3, "a far match repeats the text since: %d", n);
    /* how far back the match agrees: "2 3" alone (1 before it, 5 before the suffix) */
    int32_t m = -1;
    ngram_lookup(h, 11, 1, 4, 4, out, &m);
    T_CHECK(m == 2, "match of \"2 3\": %d", m);
    /* "5 6 7" agrees before "1 2 3 4" too, up to the start of the text */
    const int32_t l[] = {5, 6, 7, 1, 2, 3, 4, 9, 5, 6, 7, 1, 2, 3, 4};
    n = ngram_lookup(l, 15, 1, 4, 2, out, &m);
    T_CHECK(n == 2 && out[0] == 9 && m == 7, "a longer agreement: %d, %d, match %d", n, out[0], m);
    const int32_t run[] = {8, 8, 8, 8, 8, 8};
    ngram_lookup(run, 6, 2, 2, 2, out, &m);
    T_CHECK(m == 5, "a run of one token: the match overlaps the suffix: %d", m);
    int32_t many[64];
    for (int i = 0; i < 64; i++) many[i] = i % 3;
    ngram_lookup(many, 64, 1, 4, 2, out, &m);
    T_CHECK(m == DRAFT_MATCH_CAP, "capped at %d: %d", DRAFT_MATCH_CAP, m);
    T_CHECK(ngram_lookup(g, 3, 1, 4, 4, out, &m) == 0 && m == 0, "no match: 0, got %d", m);
    t_end();
}

static void test_combined_lookup(void)
{
    t_begin("draft: combined mode proposes a one-token lookup match before the model");
    drafter *d = NULL;
    sl_err err;
    if (drafter_create(&d, DRAFT_MODEL, &(drafter_opts){.seed = 1}, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    /* only "7" came before (then 5 9 7); "9 7" did not */
    const int32_t h[] = {4, 7, 5, 9, 7};
    draft_proposal p;
    int n = drafter_lookup(d, h, 5, 3, &p);
    T_CHECK(n == 3 && p.ids[0] == 5 && p.ids[1] == 9 && p.ids[2] == 7 && p.match == 1,
            "got %d: %d %d %d, match %d", n, p.ids[0], p.ids[1], p.ids[2], (int)p.match);
    const int32_t g[] = {4, 5, 6};
    T_CHECK(drafter_lookup(d, g, 3, 3, &p) == 0, "no match: the model's turn");
    drafter_free(d);
    t_end();
}

static void test_vocab_mismatch(void)
{
    t_begin("draft: a draft model of another vocabulary drafts across vocabularies, noting the first differing id and both pieces");
    const char *lean = "tests/fixtures/lean/models/qwen3moe-a3b-lean-Q4_0.gguf";
    sluice_options o = sluice_options_default();
    o.model = "models/tinymoe-q8_0.gguf";
    o.n_ctx = 64;
    o.no_heat = 1;
    o.draft = lean;
    char err[1024];
    sluice *s = NULL;
    int rc = sluice_open(&s, &o, err, sizeof err);
    T_CHECK(rc == 0, "open: %s", err);
    const char *note = rc ? "" : sluice_notes(s, 0);
    /* the lean vocabulary is GPT-2's first 2047 tokens, then <|endoftext|> */
    T_CHECK(strstr(note, "another vocabulary") && strstr(note, "token 2047 differs") && strstr(note, "in the target") &&
                strstr(note, "<|endoftext|>"),
            "notes: %s", note);
    sluice_close(s);
    t_end();
}

static void test_budget(void)
{
    t_begin("draft: a draft model's RAM is set aside from --mem (noted), and a budget below it is refused");
    sluice_options o = sluice_options_default();
    o.model = "models/tinymoe-q8_0.gguf";
    o.n_ctx = 64;
    o.no_heat = 1;
    o.draft = "models/tinydraft-f16.gguf";
    o.mem_bytes = 8ull << 20;
    char err[1024];
    sluice *s = NULL;
    T_CHECK(sluice_open(&s, &o, err, sizeof err) != 0 && strstr(err, "does not even hold the draft model"), "%s", err);
    sluice_close(s);
    s = NULL;
    o.mem_bytes = 160ull << 20;
    if (sluice_open(&s, &o, err, sizeof err)) T_CHECK(0, "open: %s", err);
    else T_CHECK(strstr(sluice_notes(s, 0), "of the memory budget set aside"), "notes: %s", sluice_notes(s, 0));
    sluice_close(s);
    t_end();
}

/* tinymoe through the public API, drafting with DRAFT (NULL: none) up to
 * DRAFT_MAX tokens a step (0: adaptive); NULL (a failed check) if it does
 * not open. */
static sluice *open_tiny(const char *draft, int draft_max)
{
    sluice_options o = sluice_options_default();
    o.model = "models/tinymoe-q8_0.gguf";
    o.n_ctx = 128;
    o.no_heat = 1;
    o.draft = draft;
    o.draft_max = draft_max;
    char err[1024];
    sluice *s = NULL;
    if (sluice_open(&s, &o, err, sizeof err)) {
        T_CHECK(0, "open %s: %s", draft ? draft : "-", err);
        return NULL;
    }
    return s;
}

/* A plain step checks the lookup it did not draft against the tokens that
 * follow (spec.c, shadow drafts): the first two steps are always plain
 * (nothing is measured yet), and this prompt's last line repeats an
 * earlier one, so at least that lookup is checked; the ids stay the plain
 * ones. */
static void test_shadow(void)
{
    t_begin("draft: adaptive n-gram drafting checks the lookups of plain steps against the tokens (shadow drafts)");
    int32_t want[64];
    size_t nwant = 0;
    for (int d = 0; d < 2; d++) {
        char err[1024];
        sluice *s = open_tiny(d ? "ngram" : NULL, 0);
        if (!s) break;
        sluice_sampling sp = sluice_sampling_default();
        sp.temp = 0;
        sp.n_predict = 64;
        sp.ignore_eos = 1;
        /* "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):" */
        static const int32_t prompt[] = {4299, 751, 7,   64,  11,  275, 2599, 198, 220, 220,   220, 1441, 257, 1343,
                                         275,  198, 198, 4299, 850, 7,   64,   11,  275, 2599,  198, 220,  220, 220,
                                         1441, 257, 532, 275, 198, 198, 4299, 35971, 7,  64,  11,  275,  2599};
        sluice_result res;
        if (sluice_generate_tokens(s, prompt, sizeof prompt / sizeof *prompt, &sp, NULL, &res, err, sizeof err)) {
            T_CHECK(0, "generate: %s", err);
        } else if (d == 0) {
            nwant = res.n_ids;
            memcpy(want, res.ids, nwant * sizeof *want);
        } else {
            T_CHECK(res.n_ids == nwant && !memcmp(res.ids, want, nwant * sizeof *want), "other ids");
            char *js = sluice_stats_json(s);
            const char *t = js ? strstr(js, "\"shadow_tried\":") : NULL, *k = js ? strstr(js, "\"shadow_kept\":") : NULL;
            long tried = t ? atol(t + 15) : -1, kept = k ? atol(k + 14) : -1;
            T_CHECK(tried >= 1 && kept >= 0 && kept <= tried, "shadow_tried %ld, shadow_kept %ld: %s", tried, kept,
                    js ? js : "-");
            free(js);
        }
        sluice_result_free(&res);
        sluice_close(s);
    }
    t_end();
}

static void test_api_same_ids(void)
{
    t_begin("draft: the public API with draft \"ngram\" and a draft model gives the plain ids, and counts drafts");
    const char *drafts[] = {NULL, "ngram", "models/tinydraft-f16.gguf"};
    int32_t want[40];
    size_t nwant = 0;
    for (int d = 0; d < 3; d++) {
        char err[1024];
        sluice *s = open_tiny(drafts[d], 4); /* fixed K: adaptive K may rightly decide not to draft on a loaded machine */
        if (!s) break;
        sluice_sampling sp = sluice_sampling_default();
        sp.temp = 0;
        sp.n_predict = 40;
        sp.ignore_eos = 1;
        const int32_t prompt[] = {1026, 373, 257, 3223, 290, 6388, 88, 1755, 11, 290};
        sluice_result res;
        if (sluice_generate_tokens(s, prompt, 10, &sp, NULL, &res, err, sizeof err)) {
            T_CHECK(0, "generate: %s", err);
        } else if (d == 0) {
            nwant = res.n_ids;
            memcpy(want, res.ids, nwant * sizeof *want);
        } else {
            T_CHECK(res.n_ids == nwant && !memcmp(res.ids, want, nwant * sizeof *want), "%s: other ids", drafts[d]);
            sluice_stats st;
            sluice_get_stats(s, &st);
            T_CHECK(st.draft_proposed > 0 && st.draft_accepted > 0, "%s: %lld proposed, %lld accepted", drafts[d],
                    (long long)st.draft_proposed, (long long)st.draft_accepted);
            char *js = sluice_stats_json(s);
            T_CHECK(js && strstr(js, "\"acceptance_by_depth\"") && strstr(js, "\"k_hist\""), "stats json: %s", js ? js : "-");
            free(js);
        }
        sluice_result_free(&res);
        sluice_close(s);
    }
    t_end();
}

/* A verification is one pass: with passes of 4 tokens (-b 4) a fixed K of
 * 8 drafts 3, and the output is still plain decoding's. */
static void test_small_pass(void)
{
    t_begin("draft tinymoe with passes of 4 tokens: K=8 verifies at most 3 drafts, output = plain greedy");
    sl_err err;
    rig r;
    capture ref = {0}, c = {0};
    drafter *d = NULL;
    spec *sp = NULL;
    if (rig_open_batch(&r, "models/tinymoe-q8_0.gguf", 1, 0, 4, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    ref.rows = malloc(sizeof(float) * (size_t)r.nv * (MAX_GEN + 1));
    c.rows = malloc(sizeof(float) * (size_t)r.nv * (MAX_GEN + 1));
    if (!ref.rows || !c.rows || run_gen(&r, NULL, 32, &ref, &err) ||
        drafter_create(&d, DRAFT_RANDOM, &(drafter_opts){.seed = 3, .random_range = r.nv}, &err) ||
        spec_create(&sp, d, &(spec_opts){.k_max = 8}, r.nv, &err) || run_gen(&r, sp, 32, &c, &err)) {
        T_CHECK(0, "%s", err.msg);
    } else {
        char why[160];
        T_CHECK(same_capture(&ref, &c, 32, why, sizeof why), "%s", why);
        const spec_stats *st = spec_get_stats(sp);
        T_CHECK(st->k_hist[3] > 0, "no verification of 3 drafts (%lld steps)", (long long)st->steps);
        for (int k = 4; k <= DRAFT_MAX; k++) T_CHECK(st->k_hist[k] == 0, "%lld verifications of %d drafts", (long long)st->k_hist[k], k);
    }
    spec_free(sp);
    drafter_free(d);
    free(ref.rows), free(c.rows);
    rig_close(&r);
    t_end();
}

int main(void)
{
    test_small_pass();
    test_ngram_lookup();
    test_combined_lookup();
    test_vocab_mismatch();
    test_budget();
    test_api_same_ids();
    test_shadow();
    static const model_case lean[] = {
        {"deepseek2-dsv3-lean", "tests/fixtures/lean/models/deepseek2-dsv3-lean-Q8_0.gguf", NULL, 24, NULL},
        {"deepseek2-kimik2-lean", "tests/fixtures/lean/models/deepseek2-kimik2-lean-F16.gguf", NULL, 24, NULL},
        {"qwen3moe-lean", "tests/fixtures/lean/models/qwen3moe-a3b-lean-Q4_0.gguf",
         "tests/fixtures/lean/models/qwen3-dense-lean-BF16.gguf", 24, "models/tinydraft-f16.gguf"},
        {"mixtral-lean", "tests/fixtures/lean/models/llama-mixtral-lean-Q4_0.gguf", NULL, 24, NULL},
    };
    model_case tiny = {"tinymoe", "models/tinymoe-q8_0.gguf", "models/tinydraft-f16.gguf", 32,
                       "tests/fixtures/lean/models/qwen3-dense-lean-BF16.gguf"};
    model_matrix(&tiny);
    for (size_t i = 0; i < sizeof lean / sizeof *lean; i++) model_matrix(&lean[i]);
    static const char *const rec[] = {"kimi-linear-kda-F32", "qwen35moe-a3b-F32"};
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/arch/%s.gguf", rec[i]);
        const char *p = t_shared(rel);
        char name[160];
        snprintf(name, sizeof name, "draft %s (recurrent): drafted = plain", rec[i]);
        if (!p) {
            t_skip(name, "../shared/models/arch not found");
            continue;
        }
        char *path = strdup(p);
        model_case mc = {rec[i], path, NULL, 16, NULL};
        model_matrix(&mc);
        free(path);
    }
    return t_done();
}
