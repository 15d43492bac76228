/* Every architecture fixture against llama.cpp's goldens (schema and
 * settings in ../shared/golden/arch/README.md): the lean set committed under
 * tests/fixtures/lean (one tiny-vocabulary model per original architecture,
 * so a fresh clone checks each one) and the full set in ../shared.
 *
 * Per fixture: last-prompt logits within max|d|/R <= tol (R = golden row
 * range); the golden top-10 logits of each recorded step within tol_step of
 * R (so a wrong value fails, not only a wrong order), golden top-1 in our
 * top-3, and the 32 greedy ids with teacher forcing (a first mismatch is
 * accepted only at a golden near-tie, reported with a '#' line).  Every key
 * the check reads must be present with the expected length: a truncated
 * golden fails rather than passing vacuously.  Also: logits identical as one
 * batch or token by token with 3 threads, in both KV modes.
 *
 * Bounds are a margin over what the engine achieves (measured worst, printed
 * on each '#' line), not the README's loose per-type table: a regression
 * several times worse than today fails.  Each fixture is checked twice: the
 * arch goldens (f32 KV cache, no flash attention) in SL_KV_F32, and the
 * goldens recorded with llama.cpp's defaults (f16 K/V, flash attention;
 * tests/fixtures/golden-fa, committed for every fixture) in sluice's default
 * SL_KV_F16_FLASH, with their own bounds (fa_fixtures below).  In the arch
 * goldens' mode sluice reproduces ggml's activation rounding, so prompt
 * logits are within ~2e-7 of R for every weight type, bound 1e-6.
 * Decode steps (one token): llama.cpp used ggml_vec_dot there (4 x 16 lanes)
 * and llamafile's sgemm for the prompt batch; sluice computes every position
 * the batched way (batch invariance), so steps differ by float summation
 * order only - a few 1e-7 of R for float weights, more where f32 activations
 * are quantized to q8 per step.  kmix: the golden's decode ran on repacked
 * K-quant kernels (a different activation quantization), hence its looser
 * step bound. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "arch/model.h"
#include "t.h"

#define MAX_PROMPT 256
#define TOPK 10

typedef struct {
    const char *name;
    bool lean;       /* tests/fixtures/lean (always present) or ../shared */
    double tol;      /* last-prompt logits, max|d|/R */
    double tol_step; /* top-10 logits of every decode step, max|d|/R of that step */
    int n_loose;     /* decode steps allowed above TIGHT (activation rounding flips) */
    double tol_tie;  /* greedy: a first mismatch is accepted when the golden top-2 gap <= tol_tie * R */
} fixture;

/* A step that agrees as the prompt does (summation order only). */
#define TIGHT 1e-6

/* Measured worst (this engine on an AVX-512 machine; T_ARCH_STEPS=1 prints
 * every step's figure), then the bound.  Prompt logits: worst 1.85e-7 (kmix), bound 1e-6 for all.
 * Decode steps: most agree to < 2e-7 like the prompt; where the weight type
 * rounds activations (BF16 / q8 activations: a value near a rounding
 * boundary lands on the other side under another summation order, and the
 * jump persists through the KV cache) a few steps jump; F16 steps are
 * mostly off by ~1e-4 (llama.cpp's single-token path, vec_dot_f16, rounds
 * otherwise than its batch path, which the prompt's 7e-8 shows we follow).  n_loose counts the recorded steps (8 per
 * prompt) allowed above TIGHT, tol_step bounds them all; both ~1.5-3x the
 * measured figures in the comments (worst step / steps above TIGHT). */
static const fixture fixtures[] = {
    /* lean: committed, run on every clone */
    {"llama-gqa-lean-Q8_0", true, 1e-6, 4e-3, 2, 8e-3},        /* 1.26e-3 / 1 of 16 */
    {"qwen3-dense-lean-BF16", true, 1e-6, TIGHT, 0, 2e-6},     /* 4.86e-8 / 0 */
    {"qwen3moe-a3b-lean-Q4_0", true, 1e-6, TIGHT, 0, 2e-6},    /* 1.96e-9 / 0 */
    {"deepseek2-kimik2-lean-F16", true, 1e-6, 6e-4, 16, 1e-3}, /* 2.12e-4 / 14 of 16 */
    {"deepseek2-dsv3-lean-Q8_0", true, 1e-6, 3e-2, 2, 6e-2},   /* 1.05e-2 / 1 of 16 */
    {"llama-mixtral-lean-Q4_0", true, 1e-6, TIGHT, 0, 2e-6},   /* 1.96e-9 / 0 */
    {"llama-kmix-lean-KMIX", true, 1e-6, 2e-2, 9, 4e-2},       /* 5.86e-3 / 6 of 16 */
    /* the shared gpt-oss MXFP4 fixture, committed verbatim (under 1 MB) */
    {"gpt-oss-20b-MXFP4_MOE", true, 1e-6, TIGHT, 0, 2e-6}, /* 9.0e-8 / 0 (prompt 4.4e-8) */
    /* shared: the full-vocabulary set */
    {"llama-gqa-F32", false, 1e-6, TIGHT, 0, 2e-6},         /* 1.8e-7 / 0 of 24 */
    {"llama-gqa-Q8_0", false, 1e-6, TIGHT, 0, 2e-6},        /* 3.87e-8 / 0 */
    {"llama-gqa-Q4_0", false, 1e-6, TIGHT, 0, 2e-6},        /* 7.22e-8 / 0 */
    {"qwen3-dense-BF16", false, 1e-6, 3e-3, 12, 6e-3},      /* 9.2e-4 / 8 of 24 */
    {"qwen3moe-a3b-F16", false, 1e-6, 4e-4, 6, 8e-4},       /* 1.37e-4 / 4 of 24 */
    {"deepseek2-kimik2-F16", false, 1e-6, 8e-4, 22, 2e-3},  /* 2.71e-4 / 15 of 24 */
    {"deepseek2-dsv3-F16", false, 1e-6, 8e-4, 24, 2e-3},    /* 2.52e-4 / 18 of 24 */
    {"llama-mixtral-Q4_0", false, 1e-6, TIGHT, 0, 2e-6},    /* 4.03e-8 / 0 */
    /* kmix: the golden's later decode steps ran on repacked K-quant kernels
     * (another activation quantization): steps 0-7 agree to 2.97e-7, greedy
     * step 11 flips at a golden gap of 3.5e-3 R */
    {"llama-kmix-KMIX", false, 1e-6, TIGHT, 0, 5e-3},
    /* imix: codebook products equal ggml's vec_dot bit for bit, but
     * llama.cpp's single-token attention order flips a Q8_K rounding that
     * 1-2 bit weights amplify: its own step-18 logits of prompt 0 differ
     * from its batched logits of the same 25 tokens by 8.4e-3 R (sluice
     * matches the batch to 1.8e-7) */
    {"llama-imix-IMIX", false, 1e-6, TIGHT, 0, 1e-2}, /* steps 0-7: 1.84e-7 / 0 of 24; near-ties 3.5e-3 R */
    {"kimi-linear-kda-F32", false, 1e-6, TIGHT, 0, 2e-6},   /* 4.22e-7 / 0 of 24 (prompt 8.8e-8) */
    {"kimi-linear-kda-F16", false, 1e-6, 1e-3, 9, 2e-3},    /* 3.12e-4 / 6 of 24; greedy split below */
    {"qwen35moe-a3b-F32", false, 1e-6, TIGHT, 0, 2e-6},     /* 4.35e-7 / 0 (prompt 1.91e-7) */
    /* qwen35moe F16: prompt 1's logits at 6.07e-5 R (the others ~5e-8) */
    {"qwen35moe-a3b-F16", false, 2e-4, 8e-4, 18, 2e-3},     /* 2.73e-4 / 12 of 24 */
    /* gpt-oss: sinks, SWA on even layers, YaRN, biases, clamped SwiGLU */
    {"gpt-oss-20b-F32", false, 1e-6, TIGHT, 0, 2e-6},       /* 6.0e-7 / 0 (prompt 8.7e-8) */
    {"glm4moe-air-F16", false, 1e-6, 5e-4, 16, 1e-3},       /* 1.73e-4 / 11 of 24 (prompt 8.25e-8) */
};

/* Bounds against the goldens recorded with llama.cpp's defaults (f16 K/V,
 * flash attention; tests/fixtures/golden-fa), where they differ from the
 * arch goldens' above.  Decode steps: llama.cpp's single-token products sum
 * in another order than its batch (see above); in f32 K/V that is a few
 * 1e-7 of R, but an f16 cache rounds each K and V value, and one that lies
 * near an f16 rounding boundary lands on the other side, so steps jump by
 * ~1e-4 of R as they do for F16 weights.  Prompt logits: where activations
 * are quantized to q8 (kmix's K-quants, gpt-oss MXFP4's q8_0 attention,
 * dsv3-lean's q8_0 MLA), a difference in an f16-rounded attention output of
 * order 1e-7 flips a rounding that the weights amplify to ~1e-2 of R;
 * qwen35moe's gated attention shows it at 1e-5.  Open (issue 11): the same
 * one-row flash kernel is within 1.6e-7 of R on every prompt of the other
 * fixtures (llama q4_0/q8_0, imix and mixtral included), so these four are a
 * rounding in an f16 path still to be found, not a wrong formula.  Measured
 * worst in comments, bounds ~2x. */
static const fixture fa_fixtures[] = {
    {"llama-kmix-lean-KMIX", true, 1.2e-2, 2e-2, 14, 4e-2},  /* prompt 5.3e-3; steps 5.3e-3, 8 of 16 */
    {"gpt-oss-20b-MXFP4_MOE", true, 1.5e-2, 1e-2, 22, 2e-2}, /* prompt 7.1e-3; steps 5.1e-3, 14 of 24 */
    {"llama-kmix-KMIX", false, 2.5e-2, 1.5e-2, 22, 3e-2},    /* prompt 1.16e-2; steps 6.95e-3, 17 of 24 */
    {"qwen35moe-a3b-F32", false, 3e-5, 2e-4, 20, 4e-4},      /* prompt 9.9e-6; steps 5.7e-5, 13 of 24 */
    {"llama-gqa-F32", false, 1e-6, 3e-4, 12, 6e-4},          /* steps 1.01e-4, 6 of 24 */
    {"qwen3moe-a3b-F16", false, 1e-6, 4e-4, 18, 8e-4},       /* steps 1.26e-4, 11 of 24 */
    {"kimi-linear-kda-F32", false, 1e-6, 5e-5, 12, 1e-4},    /* steps 1.58e-5, 6 of 24 */
    {"kimi-linear-kda-F16", false, 1e-6, 1e-3, 18, 2e-3},    /* steps 3.77e-4, 11 of 24 */
    {"gpt-oss-20b-F32", false, 1e-6, 2.5e-4, 18, 5e-4},      /* steps 8.09e-5, 10 of 24 */
    {"deepseek2-dsv3-lean-Q8_0", true, 2.5e-2, 0.12, 12, 0.3}, /* prompt 1.14e-2; steps 5.7e-2, 7 of 16 */
    /* steps 0-7 within 4.7e-8; greedy step 23 leaves the golden at a gap of 3.1e-4 R */
    {"qwen3-dense-lean-BF16", true, 1e-6, TIGHT, 0, 1e-3},
};

/* FX's bounds for a golden recorded with llama.cpp's defaults. */
static fixture fa_fixture(const fixture *fx)
{
    for (size_t i = 0; i < sizeof fa_fixtures / sizeof *fa_fixtures; i++)
        if (!strcmp(fa_fixtures[i].name, fx->name)) return fa_fixtures[i];
    return *fx;
}

/* Greedy steps where llama.cpp disagrees with itself: the continuation may
 * leave the golden there (and nowhere else).
 * kimi-linear-kda-F16 prompt 2 step 23: llama.cpp's answer depends on how
 * it splits the sequence into batches (goldtool with the prompt plus
 * greedy[0..8] as one batch, then decoding: 609; plus greedy[0..9]: 971,
 * the golden; the whole teacher-forced sequence as one batch: 609, logits
 * 1.31132 / 1.25181 for the top two, which sluice gives to 1e-5): a router
 * near-tie upstream (top-2 selection gap 1.1e-4 at step 10) under F16
 * activations, decided differently by its single-token and batched
 * products, and the recurrent state carries the difference on. */
static const struct {
    const char *name;
    int prompt, step;
} splits[] = {{"kimi-linear-kda-F16", 2, 23}};

static bool is_split(const char *name, int prompt, long step)
{
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++)
        if (!strcmp(splits[i].name, name) && splits[i].prompt == prompt && splits[i].step == step) return true;
    return false;
}

/* Measured worst deviations of one fixture (the '#' line). */
typedef struct {
    double prompt, step;
    int n_loose;
    bool near_tie;
} measured;

static void top_n(const float *v, int n, int k, int *out)
{
    for (int i = 0; i < k; i++) out[i] = -1;
    for (int j = 0; j < n; j++) {
        int pos = k;
        while (pos > 0 && (out[pos - 1] < 0 || v[j] > v[out[pos - 1]])) pos--;
        if (pos == k) continue;
        for (int i = k - 1; i > pos; i--) out[i] = out[i - 1];
        out[pos] = j;
    }
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* The array KEY of O with exactly N entries (N < 0: any non-empty length);
 * NULL and a failure otherwise. */
static json_t *jarr(const char *what, json_t *o, const char *key, long n)
{
    json_t *a = json_object_get(o, key);
    long len = json_is_array(a) ? (long)json_array_size(a) : -1;
    bool ok = len > 0 && (n < 0 || len == n);
    T_CHECK(ok, "%s: golden key '%s' missing or of length %ld (want %ld)", what, key, len, n);
    return ok ? a : NULL;
}

static bool jnum(json_t *a, size_t i, double *out)
{
    json_t *v = json_array_get(a, i);
    if (!json_is_number(v)) return false;
    *out = json_number_value(v);
    return true;
}

static bool jid(json_t *a, size_t i, int nv, int32_t *out)
{
    json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nv) return false;
    *out = (int32_t)json_integer_value(v);
    return true;
}

/* Golden top-10 of one step vs ours: each golden logit within TOL_ABS,
 * every golden id clearly inside the top-10 in ours, two golden entries
 * clearly apart in the same order, golden top-1 in our top-3.  Returns the
 * step's max |d| over the golden ids. */
static double check_topk(const char *what, int step, json_t *tk, const float *lg, int nv, double tol_abs)
{
    json_t *ja = jarr(what, tk, "ids", TOPK), *la = jarr(what, tk, "logits", TOPK);
    if (!ja || !la) return INFINITY;
    int ours[TOPK], gid[TOPK], rank[TOPK];
    double glog[TOPK], md = 0;
    top_n(lg, nv, TOPK, ours);
    for (int i = 0; i < TOPK; i++)
        if (!jid(ja, (size_t)i, nv, &gid[i]) || !jnum(la, (size_t)i, &glog[i])) {
            T_CHECK(0, "%s step %d: top-k entry %d is not an id and a number", what, step, i);
            return INFINITY;
        }
    for (int i = 0; i < TOPK; i++) {
        double d = fabs((double)lg[gid[i]] - glog[i]);
        md = fmax(md, d);
        T_CHECK(d <= tol_abs, "%s step %d: logit of id %d off by %.3g > %.3g", what, step, gid[i], d, tol_abs);
        rank[i] = -1;
        for (int j = 0; j < TOPK; j++)
            if (ours[j] == gid[i]) rank[i] = j;
        T_CHECK(rank[i] >= 0 || glog[i] - glog[TOPK - 1] <= tol_abs,
                "%s step %d: golden #%d (id %d) not in our top-10", what, step, i, gid[i]);
    }
    for (int i = 0; i < TOPK; i++)
        for (int j = i + 1; j < TOPK; j++)
            if (rank[i] >= 0 && rank[j] >= 0 && glog[i] - glog[j] > tol_abs)
                T_CHECK(rank[i] < rank[j], "%s step %d: ids %d and %d swapped", what, step, gid[i], gid[j]);
    int top3[3];
    top_n(lg, nv, 3, top3);
    T_CHECK(gid[0] == top3[0] || gid[0] == top3[1] || gid[0] == top3[2],
            "%s step %d: golden top-1 %d not in our top-3", what, step, gid[0]);
    return md;
}

/* Exactly N floats from PATH, or NULL (a file of another size is an error). */
static float *read_logits(const char *path, size_t n)
{
    struct stat st;
    T_CHECK(stat(path, &st) == 0 && (size_t)st.st_size == n * sizeof(float), "%s: %lld bytes, want %zu", path,
            (long long)st.st_size, n * sizeof(float));
    if ((size_t)st.st_size != n * sizeof(float)) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *v = malloc(n * sizeof *v);
    if (v && fread(v, sizeof *v, n, f) != n) {
        free(v);
        v = NULL;
    }
    fclose(f);
    return v;
}

/* Token ids of a prompt's "tokens" into IDS; its length, or -1. */
static int prompt_ids(const char *what, json_t *p, int nv, int32_t *ids)
{
    json_t *toks = jarr(what, p, "tokens", -1);
    if (!toks) return -1;
    int n = (int)json_array_size(toks);
    T_CHECK(n <= MAX_PROMPT, "%s: prompt of %d tokens > %d", what, n, MAX_PROMPT);
    for (int i = 0; i < n && i < MAX_PROMPT; i++)
        if (!jid(toks, (size_t)i, nv, &ids[i])) {
            T_CHECK(0, "%s: token %d is not an id below %d", what, i, nv);
            return -1;
        }
    return n <= MAX_PROMPT ? n : -1;
}

/* Full-row deviation max|d|/R of LG against GOLD. */
static double row_dev(const float *lg, const float *gold, int nv)
{
    float gmin = gold[0], gmax = gold[0];
    double md = 0;
    for (int i = 0; i < nv; i++) {
        gmin = fminf(gmin, gold[i]), gmax = fmaxf(gmax, gold[i]);
        md = fmax(md, fabs((double)lg[i] - gold[i]));
    }
    return gmax > gmin ? md / (gmax - gmin) : INFINITY;
}

/* The 32 greedy steps, fed with the golden ids (teacher forcing keeps the
 * top-k steps comparable).  LG holds the last prompt position's logits. */
static void run_steps(sl_session *s, const fixture *fx, int pi, const char *what, json_t *p, float *lg, int nv,
                      measured *ms)
{
    json_t *greedy = jarr(what, p, "greedy", -1);
    long ng = greedy ? (long)json_array_size(greedy) : 1;
    json_t *gaps = jarr(what, p, "greedy_top2_gap", ng), *ranges = jarr(what, p, "greedy_logit_range", ng);
    json_t *topk = jarr(what, p, "topk", -1);
    if (!greedy || !gaps || !ranges || !topk) return;
    T_CHECK((long)json_array_size(topk) <= ng, "%s: more top-k steps than greedy steps", what);
    bool diverged = false;
    sl_err err;
    for (long st = 0; st < ng; st++) {
        double R, gap;
        int32_t g;
        if (!jnum(ranges, (size_t)st, &R) || !jnum(gaps, (size_t)st, &gap) || !jid(greedy, (size_t)st, nv, &g)) {
            T_CHECK(0, "%s step %ld: greedy id, gap or range is not a number", what, st);
            return;
        }
        double ts = st == 0 ? fx->tol : fx->tol_step;
        json_t *tk = json_array_get(topk, (size_t)st);
        if (tk) {
            json_t *sv = json_object_get(tk, "step");
            T_CHECK(json_integer_value(sv) == st, "%s: top-k entry %ld is for step %lld", what, st,
                    (long long)json_integer_value(sv));
            double sd = check_topk(what, (int)st, tk, lg, nv, ts * R) / R;
            if (getenv("T_ARCH_STEPS")) printf("#   %s step %ld: %.3g\n", what, st, sd);
            ms->step = fmax(ms->step, sd);
            ms->n_loose += st > 0 && sd > TIGHT;
        }
        if (!diverged && argmax(lg, nv) != g) {
            diverged = true;
            double tie = (st == 0 ? 2 * fx->tol : fx->tol_tie) * R;
            bool split = is_split(fx->name, pi, st);
            if (split)
                printf("# %s: greedy leaves the golden at step %ld, where llama.cpp's batched and single-token "
                       "paths disagree (see splits[])\n", what, st);
            T_CHECK(split || gap <= tie, "%s: greedy step %ld: %d vs golden %d (gap %.3g > tol %.3g)", what, st,
                    argmax(lg, nv), g, gap, tie);
            if (gap <= tie) {
                printf("# %s: greedy diverges at step %ld at a golden near-tie (top-2 gap %.3g <= %.3g)\n", what,
                       st, gap, tie);
                ms->near_tie = true;
            }
        }
        if (st + 1 < ng && session_eval(s, &g, 1, lg, false, &err)) {
            T_CHECK(0, "%s: %s", what, err.msg);
            return;
        }
    }
}

static void run_prompt(sl_model *m, const fixture *fx, int pi, json_t *p, const float *gold, measured *ms,
                       sl_kv_mode kv)
{
    int nv = model_n_vocab(m);
    char what[128];
    snprintf(what, sizeof what, "%s prompt %d", fx->name, pi);
    int32_t ids[MAX_PROMPT];
    int n = prompt_ids(what, p, nv, ids);
    if (n < 0) return;
    sl_err err;
    sl_session *s;
    session_opts so = {.kv_mode = kv};
    if (session_create_opts(&s, m, 256, NULL, &so, &err)) {
        T_CHECK(0, "%s: %s", what, err.msg);
        return;
    }
    float *lg = malloc(sizeof(float) * (size_t)nv);
    if (session_eval(s, ids, n, lg, false, &err) == 0) {
        double d = row_dev(lg, gold, nv);
        ms->prompt = fmax(ms->prompt, d);
        T_CHECK(d <= fx->tol, "%s: max|d|/R %.3g > %.3g", what, d, fx->tol);
        run_steps(s, fx, pi, what, p, lg, nv, ms);
    } else {
        T_CHECK(0, "%s: %s", what, err.msg);
    }
    free(lg);
    session_free(s);
}

/* All logits of TOKS: as one batch, or one token at a time (SINGLE), on
 * THREADS threads. */
static float *all_logits(sl_model *m, const int32_t *toks, int n, bool single, int threads, sl_kv_mode mode)
{
    float *lg = malloc(sizeof(float) * (size_t)model_n_vocab(m) * (size_t)n);
    sl_pool *pool = threads > 1 ? pool_create(threads) : NULL;
    session_opts so = {.kv_mode = mode};
    sl_session *s;
    sl_err err;
    int rc = session_create_opts(&s, m, 64, pool, &so, &err);
    for (int i = 0; rc == 0 && i < n; i += single ? 1 : n)
        rc = session_eval(s, toks + i, single ? 1 : n, lg + (size_t)i * model_n_vocab(m), true, &err);
    T_CHECK(rc == 0, "%s", err.msg);
    if (rc == 0) session_free(s);
    pool_destroy(pool);
    if (rc) {
        free(lg);
        return NULL;
    }
    return lg;
}

/* Batch / decode / thread invariance on this architecture, both KV modes:
 * one batch on 1 thread, one-by-one on 3, and one batch on 3 (a batch's
 * per-position work split between threads, run_rows). */
static void invariance(sl_model *m, const fixture *fx, json_t *prompt)
{
    int32_t ids[MAX_PROMPT];
    int n = prompt_ids(fx->name, prompt, model_n_vocab(m), ids);
    size_t bytes = sizeof(float) * (size_t)model_n_vocab(m) * (size_t)n;
    for (int mode = SL_KV_F16_FLASH; n > 0 && mode <= SL_KV_F32; mode++) {
        float *a = all_logits(m, ids, n, false, 1, (sl_kv_mode)mode);
        float *b = all_logits(m, ids, n, true, 3, (sl_kv_mode)mode);
        float *c = all_logits(m, ids, n, false, 3, (sl_kv_mode)mode);
        T_CHECK(a && b && memcmp(a, b, bytes) == 0, "%s: one batch and one-by-one with 3 threads differ (kv mode %d)",
                fx->name, mode);
        T_CHECK(a && c && memcmp(a, c, bytes) == 0,
                "%s: one batch on 1 and on 3 threads differ (kv mode %d, %d tokens)", fx->name, mode, n);
        free(a);
        free(b);
        free(c);
    }
}

/* PATH of a fixture file: tests/fixtures/lean/SUB/NAME.EXT or
 * ../shared/SUB/arch/NAME.EXT; the goldens recorded with llama.cpp's
 * defaults (EXT fa.*) are all committed, in tests/fixtures/golden-fa.
 * NULL when absent. */
static const char *fixture_path(const fixture *fx, const char *sub, const char *ext)
{
    static char buf[3][512];
    static int slot;
    char *p = buf[slot++ % 3];
    if (!strncmp(ext, "fa.", 3)) {
        snprintf(p, sizeof buf[0], "tests/fixtures/golden-fa/%s.%s", fx->name, ext);
        struct stat st;
        return stat(p, &st) == 0 ? p : NULL;
    }
    if (fx->lean) {
        snprintf(p, sizeof buf[0], "tests/fixtures/lean/%s/%s.%s", sub, fx->name, ext);
        struct stat st;
        return stat(p, &st) == 0 ? p : NULL;
    }
    char rel[256];
    snprintf(rel, sizeof rel, "%s/arch/%s.%s", sub, fx->name, ext);
    const char *s = t_shared(rel);
    if (!s) return NULL;
    snprintf(p, sizeof buf[0], "%s", s);
    return p;
}

/* The KV mode a golden was recorded with: llama.cpp's defaults (f16 K/V,
 * flash attention auto = on for CPU; bench/goldtool --defaults) or the
 * arch goldens' f32 K/V without flash attention. */
static sl_kv_mode golden_mode(json_t *j)
{
    json_t *st = json_object_get(j, "settings");
    const char *tk = json_string_value(json_object_get(st, "type_k"));
    json_t *fa = json_object_get(st, "flash_attn");
    bool flash = json_is_true(fa) || (json_is_string(fa) && strcmp(json_string_value(fa), "off"));
    return tk && !strcmp(tk, "f16") && flash ? SL_KV_F16_FLASH : SL_KV_F32;
}

static void check_golden(sl_model *m, const fixture *fx, json_t *j, const char *lpath)
{
    int nv = model_n_vocab(m);
    sl_kv_mode kv = golden_mode(j);
    json_t *nvj = json_object_get(j, "n_vocab");
    T_CHECK(json_is_integer(nvj) && json_integer_value(nvj) == nv, "%s: golden n_vocab %lld, model %d", fx->name,
            (long long)json_integer_value(nvj), nv);
    json_t *prompts = jarr(fx->name, j, "prompts", -1);
    if (!prompts) return;
    float *gold = read_logits(lpath, json_array_size(prompts) * (size_t)nv);
    measured ms = {0};
    for (size_t pi = 0; gold && pi < json_array_size(prompts); pi++)
        run_prompt(m, fx, (int)pi, json_array_get(prompts, pi), gold + pi * (size_t)nv, &ms, kv);
    T_CHECK(ms.n_loose <= fx->n_loose, "%s: %d decode steps above %.0e of R (at most %d)", fx->name, ms.n_loose,
            TIGHT, fx->n_loose);
    invariance(m, fx, json_array_get(prompts, json_array_size(prompts) - 1));
    printf("# %s%s: prompt max|d|/R %.3g (bound %.0e); decode steps %.3g (bound %.0e), %d above %.0e (at most %d)%s\n",
           fx->name, kv == SL_KV_F16_FLASH ? " (llama.cpp defaults: f16 K/V, flash attention)" : "", ms.prompt, fx->tol, ms.step, fx->tol_step, ms.n_loose, TIGHT, fx->n_loose,
           ms.near_tie ? "; a greedy near-tie was accepted" : "");
    free(gold);
}

/* One golden of FX: EXT "json" (the arch goldens' settings) or "fa.json"
 * (llama.cpp's defaults, recorded with bench/goldtool --defaults). */
static void run_golden(const fixture *base, const char *ext, const char *lext)
{
    char name[160];
    bool fa = strcmp(ext, "json") != 0;
    fixture bounds = fa ? fa_fixture(base) : *base;
    const fixture *fx = &bounds;
    snprintf(name, sizeof name, "arch %s%s", fx->name, fa ? " (llama.cpp defaults)" : "");
    const char *jpath = fixture_path(fx, "golden", ext), *lpath = fixture_path(fx, "golden", lext);
    const char *mpath = fixture_path(fx, "models", "gguf");
    if (!mpath || !jpath || !lpath) {
        /* every defaults golden is committed; only ../shared may be absent */
        if (mpath && fa)
            printf("not ok %s: tests/fixtures/golden-fa is incomplete (bench/goldtool/record_defaults.sh)\n", name),
                t_nfail++;
        else if (fx->lean)
            printf("not ok %s: tests/fixtures/lean is incomplete\n", name), t_nfail++;
        else
            t_skip(name, "../shared fixtures not found");
        return;
    }
    t_begin(name);
    json_error_t je;
    json_t *j = json_load_file(jpath, JSON_ALLOW_NUL, &je);
    sl_model *m = NULL;
    sl_err err;
    T_CHECK(j != NULL, "%s: %s", jpath, je.text);
    if (j && model_load(&m, mpath, NULL, &err)) T_CHECK(0, "%s", err.msg);
    if (j && m) check_golden(m, fx, j, lpath);
    model_free(m);
    json_decref(j);
    t_end();
}

static void run_fixture(const fixture *fx)
{
    run_golden(fx, "json", "logits.f32");
    run_golden(fx, "fa.json", "fa.logits.f32");
}

int main(void)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) run_fixture(&fixtures[i]);
    return t_done();
}
