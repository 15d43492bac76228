/* Every architecture fixture in ../shared/models/arch against llama.cpp's
 * goldens (../shared/golden/arch, schema and tolerances in its README):
 * last-prompt logits within max|d|/R, top-10 per step (swaps only between
 * near-equal golden logits), golden top-1 in our top-3, and 32-token greedy
 * continuations (a first mismatch is accepted only at a golden near-tie,
 * reported with a '#' line).  Goldens used f32 KV and no flash attention.
 * Also: each architecture's logits are identical as one batch or token by
 * token with 3 threads, in both KV modes. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "arch/model.h"
#include "t.h"

typedef struct {
    const char *name;
    double tol;      /* prompt logits: README column "engine mimics ggml activation rounding" */
    double tol_step; /* decode steps: top-10 order and greedy near-ties (see below) */
} fixture;

/* Decode steps of float-weight models: llama.cpp multiplies a single token
 * with ggml_vec_dot (4 x 16 lanes) but a batch with llamafile's sgemm (16
 * lanes); sluice computes every position one way (batch invariance), the
 * batched way, so steps after the prompt get the README's tolerance for
 * engines that do not reproduce ggml's arithmetic exactly.  kmix: the
 * golden's decode ran on repacked K-quant kernels (prompt logits agree to
 * 2e-7; sluice equals llama.cpp without repacking to 2e-7 on all 32 steps),
 * so its decode steps get the K-quant column of that table too.  imix: its
 * codebook products equal ggml's vec_dot bit for bit and its prompt logits
 * sit at ~4e-8 of R, but llama.cpp's single-token attention (vec_dot)
 * differs from its batched one by ~1e-7, enough to flip a Q8_K rounding,
 * which 1-2 bit weights amplify: llama.cpp's own step-18 logits of prompt 0
 * differ from its logits of the same 25 tokens as one batch by 8.4e-3 R
 * (sluice matches the batch to 1.8e-7), so its decode steps get the same
 * column as kmix. */

static const fixture fixtures[] = {
    {"llama-gqa-F32", 1e-5, 1e-5},          {"llama-gqa-Q8_0", 1e-3, 1e-3},
    {"llama-gqa-Q4_0", 1e-3, 1e-3},         {"qwen3-dense-BF16", 1e-4, 5e-3},
    {"qwen3moe-a3b-F16", 1e-4, 2e-3},      {"deepseek2-kimik2-F16", 1e-4, 2e-3},
    {"deepseek2-dsv3-F16", 1e-4, 2e-3},  {"llama-mixtral-Q4_0", 1e-3, 1e-3},
    {"llama-kmix-KMIX", 1e-3, 3e-2},         {"llama-imix-IMIX", 1e-3, 3e-2},
    {"kimi-linear-kda-F32", 1e-5, 1e-5},    {"kimi-linear-kda-F16", 1e-4, 2e-3},
    {"qwen35moe-a3b-F32", 1e-5, 1e-5},      {"qwen35moe-a3b-F16", 1e-4, 2e-3},
};

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

static bool is_split(const char *name, int prompt, int step)
{
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++)
        if (!strcmp(splits[i].name, name) && splits[i].prompt == prompt && splits[i].step == step) return true;
    return false;
}

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

/* Golden top-10 vs ours: every golden id clearly inside the top-10 must be
 * in ours, and two golden entries clearly apart must keep their order. */
static void check_topk(const char *what, int step, json_t *tk, const float *lg, int nv, double tol_abs)
{
    int ours[10], gid[10];
    double glog[10];
    top_n(lg, nv, 10, ours);
    for (int i = 0; i < 10; i++) {
        gid[i] = (int)json_integer_value(json_array_get(json_object_get(tk, "ids"), i));
        glog[i] = json_number_value(json_array_get(json_object_get(tk, "logits"), i));
    }
    int rank[10];
    for (int i = 0; i < 10; i++) {
        rank[i] = -1;
        for (int j = 0; j < 10; j++)
            if (ours[j] == gid[i]) rank[i] = j;
        T_CHECK(rank[i] >= 0 || glog[i] - glog[9] <= tol_abs, "%s step %d: golden #%d (id %d) not in our top-10",
                what, step, i, gid[i]);
    }
    for (int i = 0; i < 10; i++)
        for (int j = i + 1; j < 10; j++)
            if (rank[i] >= 0 && rank[j] >= 0 && glog[i] - glog[j] > tol_abs)
                T_CHECK(rank[i] < rank[j], "%s step %d: ids %d and %d swapped", what, step, gid[i], gid[j]);
    int top3[3];
    top_n(lg, nv, 3, top3);
    T_CHECK(gid[0] == top3[0] || gid[0] == top3[1] || gid[0] == top3[2],
            "%s step %d: golden top-1 %d not in our top-3", what, step, gid[0]);
}

static float *read_logits(const char *path, size_t n)
{
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

/* One prompt: logits after the prompt, then 32 greedy steps fed with the
 * golden ids (teacher forcing keeps the top-k steps comparable). */
static double run_prompt(sl_model *m, const fixture *fx, int pi, json_t *p, const float *gold, bool *near_tie)
{
    int nv = model_n_vocab(m);
    sl_err err;
    sl_session *s;
    session_opts so = {.kv_mode = SL_KV_F32};
    if (session_create_opts(&s, m, 256, NULL, &so, &err)) {
        T_CHECK(0, "%s: %s", fx->name, err.msg);
        return INFINITY;
    }
    json_t *toks = json_object_get(p, "tokens"), *greedy = json_object_get(p, "greedy");
    json_t *gaps = json_object_get(p, "greedy_top2_gap"), *ranges = json_object_get(p, "greedy_logit_range");
    int n = (int)json_array_size(toks);
    int32_t ids[64];
    for (int i = 0; i < n && i < 64; i++) ids[i] = (int32_t)json_integer_value(json_array_get(toks, i));
    float *lg = malloc(sizeof(float) * (size_t)nv);
    double worst = INFINITY;
    if (session_eval(s, ids, n, lg, false, &err)) {
        T_CHECK(0, "%s: %s", fx->name, err.msg);
        goto out;
    }
    float gmin = gold[0], gmax = gold[0];
    double md = 0;
    for (int i = 0; i < nv; i++) {
        gmin = fminf(gmin, gold[i]), gmax = fmaxf(gmax, gold[i]);
        md = fmax(md, fabs((double)lg[i] - gold[i]));
    }
    worst = md / (gmax - gmin);
    double tol = fx->tol;
    T_CHECK(worst <= tol, "%s prompt %d: max|d|/R %.3g > %.3g", fx->name, pi, worst, tol);
    bool diverged = false;
    for (int st = 0; st < (int)json_array_size(greedy); st++) {
        double R = json_number_value(json_array_get(ranges, st));
        json_t *tk = json_array_get(json_object_get(p, "topk"), st);
        char what[96];
        snprintf(what, sizeof what, "%s prompt %d", fx->name, pi);
        double ts = st == 0 ? tol : fx->tol_step;
        if (tk) check_topk(what, st, tk, lg, nv, ts * R);
        int32_t g = (int32_t)json_integer_value(json_array_get(greedy, st));
        if (!diverged && argmax(lg, nv) != g) {
            double gap = json_number_value(json_array_get(gaps, st));
            diverged = true;
            bool split = is_split(fx->name, pi, st);
            if (split)
                printf("# %s: greedy leaves the golden at step %d, where llama.cpp's batched and single-token "
                       "paths disagree (see splits[])\n", what, st);
            T_CHECK(split || gap <= ts * R, "%s: greedy step %d: %d vs golden %d (gap %.3g > tol %.3g)", what, st,
                    argmax(lg, nv), g, gap, ts * R);
            if (gap <= ts * R) {
                printf("# %s: greedy diverges at step %d at a golden near-tie (top-2 gap %.3g <= %.3g)\n", what,
                       st, gap, ts * R);
                *near_tie = true;
            }
        }
        if (st + 1 < (int)json_array_size(greedy) && session_eval(s, &g, 1, lg, false, &err)) {
            T_CHECK(0, "%s: %s", fx->name, err.msg);
            break;
        }
    }
out:
    free(lg);
    session_free(s);
    return worst;
}

/* All logits of TOKS: as one batch, or one token at a time with 3 threads. */
static float *all_logits(sl_model *m, const int32_t *toks, int n, bool single, sl_kv_mode mode)
{
    float *lg = malloc(sizeof(float) * (size_t)model_n_vocab(m) * (size_t)n);
    sl_pool *pool = single ? pool_create(3) : NULL;
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

/* Batch / decode / thread invariance on this architecture, both KV modes. */
static void invariance(sl_model *m, const fixture *fx, json_t *prompt)
{
    json_t *toks = json_object_get(prompt, "tokens");
    int n = (int)json_array_size(toks);
    int32_t ids[64];
    for (int i = 0; i < n && i < 64; i++) ids[i] = (int32_t)json_integer_value(json_array_get(toks, i));
    for (int mode = SL_KV_F16_FLASH; mode <= SL_KV_F32; mode++) {
        float *a = all_logits(m, ids, n, false, (sl_kv_mode)mode), *b = all_logits(m, ids, n, true, (sl_kv_mode)mode);
        T_CHECK(a && b && memcmp(a, b, sizeof(float) * (size_t)model_n_vocab(m) * (size_t)n) == 0,
                "%s: one batch and one-by-one with 3 threads differ (kv mode %d)", fx->name, mode);
        free(a);
        free(b);
    }
}

static void run_fixture(const fixture *fx)
{
    char rel[256], name[128];
    snprintf(name, sizeof name, "arch %s", fx->name);
    snprintf(rel, sizeof rel, "golden/arch/%s.json", fx->name);
    const char *jpath = t_shared(rel);
    snprintf(rel, sizeof rel, "models/arch/%s.gguf", fx->name);
    const char *mpath = t_shared(rel);
    snprintf(rel, sizeof rel, "golden/arch/%s.logits.f32", fx->name);
    const char *lpath = t_shared(rel);
    if (!jpath || !mpath || !lpath) {
        t_skip(name, "../shared fixtures not found");
        return;
    }
    t_begin(name);
    json_error_t je;
    json_t *j = json_load_file(jpath, 0, &je);
    sl_model *m = NULL;
    sl_err err;
    T_CHECK(j != NULL, "%s: %s", jpath, je.text);
    if (j && model_load(&m, mpath, NULL, &err)) T_CHECK(0, "%s", err.msg);
    if (j && m) {
        int nv = model_n_vocab(m);
        json_t *prompts = json_object_get(j, "prompts");
        float *gold = read_logits(lpath, json_array_size(prompts) * (size_t)nv);
        T_CHECK(gold != NULL, "cannot read %s", lpath);
        double worst = 0;
        bool near_tie = false;
        for (size_t pi = 0; gold && pi < json_array_size(prompts); pi++)
            worst = fmax(worst, run_prompt(m, fx, (int)pi, json_array_get(prompts, pi), gold + pi * nv, &near_tie));
        invariance(m, fx, json_array_get(prompts, json_array_size(prompts) - 1));
        printf("# %s: max|d|/R %.3g, README tolerance %.0e", fx->name, worst, fx->tol);
        printf("%s\n", near_tie ? "; a greedy near-tie was accepted" : "");
        free(gold);
    }
    model_free(m);
    json_decref(j);
    t_end();
}

int main(void)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) run_fixture(&fixtures[i]);
    return t_done();
}
