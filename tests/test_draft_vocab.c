/* Cross-vocabulary drafting with a vocabulary of another kind: the lean
 * qwen3 dense fixture rewritten (sluice's GGUF writer) with the
 * SentencePiece vocabulary of ../shared/vocab/ggml-vocab-llama-spm.gguf
 * (32,000 tokens; its embedding resized to match, deterministic values)
 * drafts for tinymoe (GPT-2's byte-level BPE), and tinydraft drafts for it.
 * Greedy ids and every logit row must equal plain decoding's. */
#include <stdint.h>
#include <unistd.h>

#include "decode/draft.h"
#include "decode/draft_model.h"
#include "decode/generate.h"
#include "decode/spec.h"
#include "engine/engine.h"
#include "gguf/gguf_write.h"
#include "t.h"

enum { N_GEN = 24 };

static char dir[] = "/tmp/sluice-draft-vocab-XXXXXX";

static bool is_tok_key(const char *k) { return !strncmp(k, "tokenizer.", 10); }

/* SRC's architecture and weights with VOCAB's tokenizer, into DST. */
static int swap_vocab(const char *src, const char *vocab, const char *dst, sl_err *err)
{
    gguf_file *g = NULL, *v = NULL;
    if (gguf_open(&g, src, err) || gguf_open(&v, vocab, err)) {
        gguf_close(g);
        return -1;
    }
    const void *toks;
    uint64_t nv = 0;
    int rc = gguf_get_arr(v, "tokenizer.ggml.tokens", GGUF_STRING, &toks, &nv, err) == 1 ? 0 : -1;
    gguf_w_opts o = {.alignment = g->alignment};
    gguf_writer *w = rc ? NULL : gguf_w_new(&o);
    if (!rc && !w) rc = sl_errf(err, "out of memory");
    for (uint64_t i = 0; i < g->n_kv && !rc; i++)
        if (strcmp(g->kv[i].key, "general.alignment") && !is_tok_key(g->kv[i].key))
            rc = gguf_w_kv(w, g->kv[i].key, &g->kv[i].v, err);
    for (uint64_t i = 0; i < v->n_kv && !rc; i++)
        if (is_tok_key(v->kv[i].key)) rc = gguf_w_kv(w, v->kv[i].key, &v->kv[i].v, err);
    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!rc && !emb) rc = sl_errf(err, "%s: no token_embd.weight", src);
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t == emb) {
            const int64_t ne[2] = {t->ne[0], (int64_t)nv};
            rc = gguf_w_tensor(w, t->name, 0 /* F32 */, 2, ne, err) < 0;
        } else {
            rc = gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, err) < 0;
        }
    }
    if (!rc) rc = gguf_w_open(w, dst, err);
    uint32_t x = 12345;
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t == emb) {
            size_t n = (size_t)t->ne[0] * (size_t)nv;
            float *e = malloc(n * sizeof *e);
            if (!e) rc = sl_errf(err, "out of memory");
            for (size_t j = 0; e && j < n; j++) {
                x = x * 1664525u + 1013904223u;
                e[j] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.2f;
            }
            if (!rc) rc = gguf_w_write(w, e, n * sizeof *e, err);
            free(e);
            continue;
        }
        void *buf = malloc(t->nbytes ? t->nbytes : 1);
        rc = !buf ? sl_errf(err, "out of memory")
                  : gguf_read_tensor(g, t, 0, buf, t->nbytes, err) || gguf_w_write(w, buf, t->nbytes, err);
        free(buf);
    }
    if (!rc) rc = gguf_w_close(w, err);
    gguf_w_free(w);
    gguf_close(g);
    gguf_close(v);
    return rc ? -1 : 0;
}

typedef struct {
    int32_t nv;
    int n;
    int32_t ids[N_GEN + 1];
    float *rows;
    int64_t proposed, steps; /* drafted tokens, verifications */
} capture;

static void on_logits(void *ud, const float *logits, int32_t nv)
{
    capture *c = ud;
    if (c->n <= N_GEN) memcpy(c->rows + (size_t)c->n * nv, logits, sizeof(float) * (size_t)nv);
    c->n++;
}

/* Greedy N_GEN tokens after "Once upon a time" on TARGET with DRAFT (NULL:
 * plain) at fixed K (0: adaptive) into C. */
static int run(const char *target, const char *draft, int k, capture *c, char *note, size_t cap, sl_err *err)
{
    sl_engine eng;
    engine_opts o = {.model_path = target, .n_ctx = 96, .threads = 1, .no_heat = true, .n_rollback = DRAFT_MAX};
    if (engine_open(&eng, &o, err)) return -1;
    int32_t nv = model_n_vocab(eng.model);
    gen_seq q;
    drafter *d = NULL;
    spec *sp = NULL;
    sl_sampler *smp = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "Once upon a time";
    const sl_vocab *v = model_vocab(eng.model);
    int rc = seq_init(&q, eng.session, nv, err);
    if (!rc) rc = vocab_tokenize(v, text, strlen(text), vocab_add_bos(v), false, &ids, &n, err);
    if (!rc) rc = seq_push(&q, ids, n, err);
    if (!rc && draft) {
        draft_model *dm;
        rc = drafter_create(&d, DRAFT_MODEL, &(drafter_opts){0}, err);
        if (!rc) rc = draft_model_open(&dm, draft, eng.model, eng.pool, 96, 0, 0, true, err);
        if (!rc) {
            drafter_set_model(d, dm);
            snprintf(note, cap, "%s", draft_model_xvocab(dm) ? draft_model_xvocab(dm) : "");
            rc = spec_create(&sp, d, &(spec_opts){.k_max = k}, nv, err);
        }
    }
    sampler_params par = sampler_defaults();
    par.temp = 0;
    if (!rc) rc = sampler_create(&smp, &par, nv, err);
    c->n = 0, c->nv = nv;
    c->rows = rc ? NULL : malloc(sizeof(float) * (size_t)nv * (N_GEN + 1));
    if (!rc) {
        gen_opts go = {.n_predict = N_GEN, .ignore_eog = true};
        gen_callbacks cb = {.ud = c, .on_logits = on_logits};
        gen_result res;
        rc = generate(eng.model, &q, smp, &go, &cb, sp, &res, err);
        for (size_t i = 0; !rc && i < res.n_ids && i <= N_GEN; i++) c->ids[i] = res.ids[i];
        if (sp) c->proposed = spec_get_stats(sp)->proposed, c->steps = spec_get_stats(sp)->steps;
        if (!rc && res.n_ids != N_GEN) rc = sl_errf(err, "%zu tokens", res.n_ids);
        gen_result_free(&res);
    }
    free(ids);
    sampler_free(smp);
    spec_free(sp);
    drafter_free(d);
    if (q.toks) seq_free(&q);
    engine_close(&eng);
    return rc;
}

static void pair(const char *name, const char *target, const char *draft)
{
    char what[256];
    snprintf(what, sizeof what, "draft vocab: %s = plain greedy (ids and every logit row), K=4 and adaptive", name);
    t_begin(what);
    sl_err err;
    capture ref = {0}, c = {0};
    char note[600] = "";
    int rc = run(target, NULL, 0, &ref, note, sizeof note, &err);
    T_CHECK(rc == 0, "plain: %s", err.msg);
    for (int k = 4; !rc && k >= 0; k -= 4) {
        rc = run(target, draft, k, &c, note, sizeof note, &err);
        T_CHECK(rc == 0, "drafted: %s", err.msg);
        T_CHECK(rc || strstr(note, "in the target"), "not drafting across vocabularies: '%s'", note);
        printf("# %s, K=%d: %lld target tokens proposed in %lld verifications\n", name, k, (long long)c.proposed,
               (long long)c.steps);
        T_CHECK(rc || c.proposed > 0, "K=%d: the draft's text never fixed a target token", k);
        for (int i = 0; !rc && i < N_GEN && !t_cur.failed; i++) {
            T_CHECK(c.ids[i] == ref.ids[i], "K=%d token %d: %d, not %d", k, i, c.ids[i], ref.ids[i]);
            T_CHECK(!memcmp(c.rows + (size_t)i * c.nv, ref.rows + (size_t)i * c.nv, sizeof(float) * (size_t)c.nv),
                    "K=%d logit row %d differs", k, i);
        }
        free(c.rows);
        c.rows = NULL;
    }
    free(ref.rows);
    t_end();
}

int main(void)
{
    const char *spm = t_shared("vocab/ggml-vocab-llama-spm.gguf");
    if (!spm) {
        t_skip("draft vocab: a SentencePiece-vocabulary draft for tinymoe and back", "../shared/vocab not found");
        return t_done();
    }
    char path[128];
    sl_err err;
    t_begin("draft vocab: the lean qwen3 fixture rewritten with llama-spm's vocabulary loads");
    T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/qwen3-spm.gguf", dir);
    int rc = swap_vocab("tests/fixtures/lean/models/qwen3-dense-lean-BF16.gguf", spm, path, &err);
    T_CHECK(rc == 0, "%s", err.msg);
    if (!t_end()) return t_done();
    pair("tinymoe (GPT-2 BPE) with the SPM draft", "models/tinymoe-q8_0.gguf", path);
    pair("the SPM model with tinydraft (GPT-2 BPE)", path, "models/tinydraft-f16.gguf");
    unlink(path);
    rmdir(dir);
    return t_done();
}
