/* The bundled trained models (models/tinymoe-q8_0.gguf, qwen3moe; and
 * models/tinydraft-f16.gguf, qwen3) against llama.cpp's 64-token greedy
 * continuations (tests/fixtures/tinymoe_greedy.json, a subset of
 * shared/golden/tinymoe.json recorded with llama.cpp's default context:
 * f16 KV cache, flash attention), and the numerics contract: logits of a
 * position are bit-identical whether computed in a prefill batch, one token
 * at a time, in K+1 verification chunks, with 1, 2 or 3 threads, or with
 * experts arriving from the provider in any order. */
#include <jansson.h>
#include <stdint.h>

#include "arch/model.h"
#include "experts/layout.h"
#include "experts/mem_provider.h"
#include "t.h"

static const char *const MODELS[] = {"models/tinymoe-q8_0.gguf", "models/tinydraft-f16.gguf"};

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* ---------------------------------------------------------- greedy */

static void greedy_case(sl_model *m, const char *key, json_t *res)
{
    char name[160];
    snprintf(name, sizeof name, "greedy 64 tokens %s", key);
    t_begin(name);
    int nv = model_n_vocab(m);
    float *lg = malloc(sizeof(float) * (size_t)nv);
    /* a missing or empty golden is a failure, not a vacuous pass */
    T_CHECK(json_array_size(res) > 0, "no golden results for %s", key);
    for (size_t pi = 0; pi < json_array_size(res); pi++) {
        json_t *r = json_array_get(res, pi);
        json_t *pids = json_object_get(r, "prompt_ids"), *gen = json_object_get(r, "generated_ids");
        int n = (int)json_array_size(pids), ng = (int)json_array_size(gen);
        int32_t ids[128];
        bool ok = n > 0 && n <= 128 && ng > 0;
        for (int i = 0; ok && i < n; i++) {
            json_t *v = json_array_get(pids, i);
            ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < nv;
            ids[i] = (int32_t)json_integer_value(v);
        }
        for (int i = 0; ok && i < ng; i++) ok = json_is_integer(json_array_get(gen, i));
        if (!ok) {
            T_CHECK(0, "prompt %zu: golden prompt_ids / generated_ids missing or invalid", pi);
            break;
        }
        sl_session *s;
        sl_err err;
        /* llama.cpp's n_ctx for these goldens: prompt + n_predict + 8 */
        if (session_create(&s, m, n + ng + 8, NULL, &err)) {
            T_CHECK(0, "%s", err.msg);
            break;
        }
        int rc = session_eval(s, ids, n, lg, false, &err);
        for (int st = 0; rc == 0 && st < ng; st++) {
            int32_t g = (int32_t)json_integer_value(json_array_get(gen, st)), mine = argmax(lg, nv);
            if (mine != g) {
                T_CHECK(0, "prompt %zu step %d: %d, llama.cpp %d", pi, st, mine, g);
                break;
            }
            if (st + 1 < ng) rc = session_eval(s, &mine, 1, lg, false, &err);
        }
        T_CHECK(rc == 0, "%s", err.msg);
        session_free(s);
    }
    free(lg);
    t_end();
}

/* ------------------------------------------------- batch invariance */

/* Logits of every position of TOKS evaluated in chunks of the given sizes
 * (cycled), with a pool of N threads (0: no pool) on ISA path ISA (-1:
 * the detected one). */
static float *eval_chunks_isa(sl_model *m, const int32_t *toks, int n, const int *chunks, int nthreads,
                              const session_opts *so, int isa)
{
    int nv = model_n_vocab(m);
    float *all = malloc(sizeof(float) * (size_t)nv * (size_t)n);
    sl_pool *pool = nthreads ? pool_create(nthreads) : NULL;
    if (pool && isa >= 0) pool_set_isa(pool, (sl_isa)isa);
    sl_session *s;
    sl_err err;
    if (session_create_opts(&s, m, 64, pool, so, &err)) {
        T_CHECK(0, "%s", err.msg);
        free(all);
        pool_destroy(pool);
        return NULL;
    }
    for (int off = 0, c = 0; off < n; c++) {
        int k = chunks[c % 4];
        if (k > n - off) k = n - off;
        if (session_eval(s, toks + off, k, all + (size_t)off * nv, true, &err)) {
            T_CHECK(0, "%s", err.msg);
            free(all);
            all = NULL;
            break;
        }
        off += k;
    }
    session_free(s);
    pool_destroy(pool);
    return all;
}

static float *eval_chunks(sl_model *m, const int32_t *toks, int n, const int *chunks, int nthreads,
                          const session_opts *so)
{
    return eval_chunks_isa(m, toks, n, chunks, nthreads, so, -1);
}

static void invariance_case(sl_model *m, const char *path, const int32_t *toks, int n, sl_kv_mode mode)
{
    char name[200];
    static const char *const modes[] = {"f16 flash", "f32", "f16"};
    snprintf(name, sizeof name, "batch invariance %s (%s KV)", path, modes[mode]);
    t_begin(name);
    session_opts so = {.kv_mode = mode};
    static const int whole[4] = {1000, 1000, 1000, 1000}, single[4] = {1, 1, 1, 1}, verify[4] = {7, 5, 1, 5};
    size_t bytes = sizeof(float) * (size_t)model_n_vocab(m) * (size_t)n;
    float *ref = eval_chunks(m, toks, n, whole, 0, &so);
    struct {
        const int *chunks;
        int threads;
        const char *what;
    } runs[] = {
        {single, 0, "one token at a time"}, {verify, 0, "chunks 7,5,1,5"}, {whole, 1, "1 thread"},
        {whole, 2, "2 threads"},            {whole, 3, "3 threads"},       {single, 3, "decode, 3 threads"},
        {verify, 2, "chunks, 2 threads"},
    };
    for (size_t i = 0; ref && i < sizeof runs / sizeof *runs; i++) {
        float *got = eval_chunks(m, toks, n, runs[i].chunks, runs[i].threads, &so);
        T_CHECK(got && memcmp(got, ref, bytes) == 0, "%s: logits differ from one prefill batch", runs[i].what);
        free(got);
    }
    /* every ISA path (kernels and attention) gives the same bits */
    for (int isa = SL_ISA_SCALAR; ref && isa <= (int)kernels_isa_detected(); isa++) {
        float *got = eval_chunks_isa(m, toks, n, verify, 2, &so, isa);
        T_CHECK(got && memcmp(got, ref, bytes) == 0, "%s path: logits differ", kernels_isa_name((sl_isa)isa));
        free(got);
    }
    free(ref);
    t_end();
}

/* Prefill without logits (NULL) then one token equals one batch. */
static void null_logits_case(sl_model *m, const int32_t *toks)
{
    t_begin("prefill without logits, then a token: same logits as one batch");
    int nv = model_n_vocab(m);
    float *a = malloc(sizeof(float) * (size_t)nv), *b = malloc(sizeof(float) * (size_t)nv);
    sl_session *s1, *s2;
    sl_err err;
    int ok = session_create(&s1, m, 32, NULL, &err) == 0 && session_create(&s2, m, 32, NULL, &err) == 0 &&
             session_eval(s1, toks, 11, a, false, &err) == 0 && session_eval(s2, toks, 10, NULL, false, &err) == 0 &&
             session_eval(s2, toks + 10, 1, b, false, &err) == 0;
    T_CHECK(ok, "%s", err.msg);
    T_CHECK(ok && memcmp(a, b, sizeof(float) * (size_t)nv) == 0, "logits differ");
    session_free(s1);
    session_free(s2);
    free(a);
    free(b);
    t_end();
}

/* ------------------------------------- experts in shuffled order */

/* Wraps the in-RAM provider and hands experts out in a scrambled order:
 * reversed on even layers, a stride permutation on odd ones. */
typedef struct {
    expert_provider base;
    expert_provider *inner;
    int n, cursor, layer;
    int idx[512];
    expert_view views[512];
} shuffled;

static int sh_begin(expert_provider *p, int layer, const int32_t *ids, int n, sl_err *err)
{
    shuffled *s = (shuffled *)p;
    if (s->inner->ops->begin(s->inner, layer, ids, n, err)) return -1;
    s->n = 0;
    s->cursor = 0;
    s->layer = layer;
    expert_view v;
    int i;
    while ((i = s->inner->ops->next(s->inner, &v, err)) >= 0) {
        s->idx[s->n] = i;
        s->views[s->n++] = v;
    }
    return i == -1 ? 0 : -1;
}

static int sh_next(expert_provider *p, expert_view *v, sl_err *err)
{
    (void)err;
    shuffled *s = (shuffled *)p;
    if (s->cursor >= s->n) return -1;
    int k = s->cursor++;
    int j = s->layer % 2 == 0 ? s->n - 1 - k : (k * 7 + 3) % s->n;
    if (s->layer % 2 && s->n % 7 == 0) j = s->n - 1 - k; /* stride 7 must be a permutation */
    *v = s->views[j];
    return s->idx[j];
}

static void sh_end(expert_provider *p, int layer)
{
    shuffled *s = (shuffled *)p;
    s->inner->ops->end(s->inner, layer);
}

static void sh_destroy(expert_provider *p)
{
    shuffled *s = (shuffled *)p;
    s->inner->ops->destroy(s->inner);
    free(s);
}

static void sh_release(expert_provider *p, int index)
{
    (void)p, (void)index;
}

/* Without release the layer takes every expert first and runs them in
 * groups (ffn.c run_experts_all); with one it runs them one by one as they
 * arrive, as with the SSD store.  Both must give the plain model's bits. */
static const expert_provider_ops shuffled_ops = {
    .begin = sh_begin, .next = sh_next, .end = sh_end, .destroy = sh_destroy,
};
static const expert_provider_ops shuffled_release_ops = {
    .begin = sh_begin, .next = sh_next, .release = sh_release, .end = sh_end, .destroy = sh_destroy,
};

static void shuffled_case(const char *path, const int32_t *toks, int n, bool release)
{
    t_begin(release ? "experts arriving in shuffled order, one at a time (a provider with release): identical logits"
                    : "experts arriving in shuffled order, all at once (grouped products): identical logits");
    sl_err err;
    gguf_file *g = NULL;
    expert_layout xl = {0};
    shuffled *sp = calloc(1, sizeof *sp);
    sl_model *plain = NULL, *shuf = NULL;
    /* tinymoe: 6 layers, 32 experts, 4 used */
    int ok = gguf_open(&g, path, &err) == 0 && expert_layout_from_gguf(&xl, g, 6, 32, 4, &err) == 0 &&
             mem_provider_create(&sp->inner, &xl, &err) == 0;
    T_CHECK(ok, "%s", err.msg);
    if (ok) {
        sp->base.ops = release ? &shuffled_release_ops : &shuffled_ops;
        model_opts mo = {.provider = &sp->base, .own_provider = true};
        sp = NULL; /* the model owns it now, even if loading fails */
        ok = model_load(&shuf, path, &mo, &err) == 0 && model_load(&plain, path, NULL, &err) == 0;
        T_CHECK(ok, "%s", err.msg);
    }
    if (ok) {
        static const int whole[4] = {1000, 1000, 1000, 1000}, single[4] = {1, 1, 1, 1};
        size_t bytes = sizeof(float) * (size_t)model_n_vocab(plain) * (size_t)n;
        for (int k = 0; k < 2; k++) {
            const int *ch = k ? single : whole;
            float *a = eval_chunks(plain, toks, n, ch, 2, NULL), *b = eval_chunks(shuf, toks, n, ch, 2, NULL);
            T_CHECK(a && b && memcmp(a, b, bytes) == 0, "%s: logits depend on expert arrival order",
                    k ? "decode" : "prefill");
            free(a);
            free(b);
        }
    }
    if (sp && sp->inner) sp->inner->ops->destroy(sp->inner);
    free(sp);
    model_free(plain);
    model_free(shuf);
    expert_layout_free(&xl);
    gguf_close(g);
    t_end();
}

int main(void)
{
    (void)t_shared, (void)t_skip; /* harness helpers this file does not need */
    json_error_t je;
    json_t *j = json_load_file("tests/fixtures/tinymoe_greedy.json", 0, &je);
    if (!j) {
        t_begin("load tests/fixtures/tinymoe_greedy.json");
        T_CHECK(0, "%s", je.text);
        t_end();
        return t_done();
    }
    /* a prompt and the start of its continuation: 24 tokens */
    int32_t toks[24];
    json_t *r0 = json_array_get(json_object_get(json_object_get(json_object_get(j, "models"), "tinymoe-q8_0.gguf"),
                                                "results"), 0);
    int np = (int)json_array_size(json_object_get(r0, "prompt_ids"));
    for (int i = 0; i < 24; i++)
        toks[i] = (int32_t)json_integer_value(i < np ? json_array_get(json_object_get(r0, "prompt_ids"), i)
                                                      : json_array_get(json_object_get(r0, "generated_ids"), i - np));
    for (int k = 0; k < 2; k++) {
        sl_model *m;
        sl_err err;
        if (model_load(&m, MODELS[k], NULL, &err)) {
            t_begin(MODELS[k]);
            T_CHECK(0, "%s", err.msg);
            t_end();
            continue;
        }
        const char *key = strrchr(MODELS[k], '/') + 1;
        greedy_case(m, key, json_object_get(json_object_get(json_object_get(j, "models"), key), "results"));
        invariance_case(m, MODELS[k], toks, 24, SL_KV_F16_FLASH);
        invariance_case(m, MODELS[k], toks, 24, SL_KV_F32);
        if (k == 1) invariance_case(m, MODELS[k], toks, 24, SL_KV_F16);
        if (k == 0) null_logits_case(m, toks);
        model_free(m);
    }
    shuffled_case(MODELS[0], toks, 24, false);
    shuffled_case(MODELS[0], toks, 24, true);
    json_decref(j);
    return t_done();
}
