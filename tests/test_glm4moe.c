/* glm4moe on the shared fixture (glm4moe-air-F16; its goldens are checked
 * in test_arch.c), beyond the goldens:
 *  - the same bits for one batch, micro-batches of 3, one token at a time
 *    on 3 threads, each ISA path, and experts streamed from the SSD store
 *    through a cache of K experts (evicting), in both KV modes;
 *  - a second chat turn evaluated on top of the first (the KV cache kept up
 *    to the shared prefix) gives a fresh session's logits;
 *  - the MTP block: the same model with a next-token-prediction layer
 *    appended (block_count + 1, nextn_predict_layers 1, as the converter
 *    writes GLM-4.5) gives the same logits, and its experts are not in the
 *    expert layout (llama.cpp loads that block but never runs it);
 *  - strict reading: required keys llama.cpp reads with get_key, required
 *    tensors and their shapes, the optional ones (q/k norms, biases). */
#include <jansson.h>
#include <unistd.h>

#include "arch/model.h"
#include "experts/layout.h"
#include "experts/store.h"
#include "gguf/gguf_write.h"
#include "gguf_write.h"
#include "t.h"

enum { N_GEN = 16, MAXT = 96 };

static char tmpdir[64];
static const char *model_path;
static int32_t prompt[2][64];
static int n_prompt[2];

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static int read_prompts(void)
{
    const char *jp = t_shared("golden/arch/glm4moe-air-F16.json");
    json_error_t je;
    json_t *j = jp ? json_load_file(jp, 0, &je) : NULL;
    if (!j) return -1;
    for (int p = 0; p < 2; p++) {
        /* prompts 2 (35 tokens) and 0 (7) */
        json_t *toks = json_object_get(json_array_get(json_object_get(j, "prompts"), p ? 0 : 2), "tokens");
        n_prompt[p] = (int)json_array_size(toks);
        for (int i = 0; i < n_prompt[p] && i < 64; i++)
            prompt[p][i] = (int32_t)json_integer_value(json_array_get(toks, (size_t)i));
    }
    json_decref(j);
    return n_prompt[0] > 0 && n_prompt[1] > 0 ? 0 : -1;
}

/* The sequence of the invariance case: prompt 0 then its greedy ids. */
static int32_t seq[MAXT];
static int n_seq;

/* Logits of every position of SEQ (or of the first N tokens), one way. */
static float *all_logits(sl_model *m, sl_pool *pool, sl_kv_mode kv, int32_t n_batch, bool one_by_one, int n)
{
    int nv = model_n_vocab(m);
    session_opts so = {.kv_mode = kv, .n_batch = n_batch};
    sl_session *s;
    sl_err err;
    float *lg = malloc(sizeof(float) * (size_t)nv * (size_t)n);
    if (!lg || session_create_opts(&s, m, MAXT, pool, &so, &err)) {
        T_CHECK(0, "%s", lg ? err.msg : "out of memory");
        free(lg);
        return NULL;
    }
    int rc = 0;
    for (int i = 0; !rc && i < n; i += one_by_one ? 1 : n) {
        rc = session_eval(s, seq + i, one_by_one ? 1 : n, lg + (size_t)i * nv, true, &err);
        T_CHECK(rc == 0, "%s", err.msg);
    }
    session_free(s);
    if (rc) free(lg);
    return rc ? NULL : lg;
}

/* The prompt and N_GEN greedy ids after it, into SEQ. */
static int make_seq(sl_model *m)
{
    int nv = model_n_vocab(m);
    float *lg = malloc(sizeof(float) * (size_t)nv);
    sl_session *s;
    sl_err err;
    session_opts so = {.kv_mode = SL_KV_F32};
    if (!lg || session_create_opts(&s, m, MAXT, NULL, &so, &err)) return free(lg), -1;
    memcpy(seq, prompt[0], sizeof(int32_t) * (size_t)n_prompt[0]);
    n_seq = n_prompt[0];
    int rc = session_eval(s, seq, n_seq, lg, false, &err);
    while (!rc && n_seq < n_prompt[0] + N_GEN) {
        seq[n_seq] = argmax(lg, nv);
        rc = session_eval(s, &seq[n_seq++], 1, lg, false, &err);
    }
    session_free(s);
    free(lg);
    return rc;
}

static sl_model *streaming_model(const char *path, int slots, gguf_file **g, expert_layout *xl, sl_err *err)
{
    sl_model *probe, *m = NULL;
    expert_provider *p;
    if (model_load(&probe, path, &(model_opts){.dry_run = true}, err)) return NULL;
    int nl = model_n_layer(probe), ne = model_n_expert(probe), nu = model_n_expert_used(probe);
    model_free(probe);
    if (gguf_open(g, path, err) || expert_layout_from_gguf(xl, *g, nl, ne, nu, err)) return NULL;
    store_config cfg = store_config_default(store_slot_bytes(xl) * (uint64_t)slots);
    cfg.io = STORE_IO_PREAD;
    if (expert_store_create(&p, xl, &cfg, err)) return NULL;
    model_opts mo = {.provider = p, .own_provider = true};
    return model_load(&m, path, &mo, err) ? NULL : m;
}

static void invariance_case(sl_model *m)
{
    t_begin("glm4moe: same bits for batch sizes, threads, ISAs and experts streamed under eviction");
    size_t bytes = sizeof(float) * (size_t)model_n_vocab(m) * (size_t)n_seq;
    gguf_file *g = NULL;
    expert_layout xl = {0};
    sl_err err;
    sl_model *sm = streaming_model(model_path, model_n_expert_used(m), &g, &xl, &err);
    T_CHECK(sm, "streaming model: %s", err.msg);
    sl_pool *pool = pool_create(3);
    for (int kv = SL_KV_F16_FLASH; kv <= SL_KV_F32; kv++) {
        float *ref = all_logits(m, NULL, (sl_kv_mode)kv, 0, false, n_seq);
        for (int isa = SL_ISA_SCALAR; ref && isa <= (int)kernels_isa_detected(); isa++) {
            pool_set_isa(pool, (sl_isa)isa);
            float *a = all_logits(m, pool, (sl_kv_mode)kv, 0, true, n_seq);
            float *b = all_logits(m, pool, (sl_kv_mode)kv, 3, false, n_seq);
            T_CHECK(a && !memcmp(a, ref, bytes), "one token at a time on 3 threads (%s, kv %d) differs",
                    kernels_isa_name(isa), kv);
            T_CHECK(b && !memcmp(b, ref, bytes), "micro-batches of 3 (%s, kv %d) differ", kernels_isa_name(isa), kv);
            free(a);
            free(b);
        }
        float *c = sm ? all_logits(sm, NULL, (sl_kv_mode)kv, 5, false, n_seq) : NULL;
        float *d = sm ? all_logits(sm, NULL, (sl_kv_mode)kv, 0, true, n_seq) : NULL;
        T_CHECK(ref && c && d && !memcmp(c, ref, bytes) && !memcmp(d, ref, bytes),
                "streamed experts change the logits (kv %d)", kv);
        free(ref);
        free(c);
        free(d);
    }
    pool_destroy(pool);
    if (sm) {
        store_stats st;
        expert_store_stats(model_provider(sm), &st);
        T_CHECK(st.evictions > 0, "the cache of %d experts never evicted", model_n_expert_used(m));
    }
    model_free(sm);
    expert_layout_free(&xl);
    gguf_close(g);
    t_end();
}

/* Turn 1: prompt 1 and a generated reply (its last token never evaluated,
 * as in a chat); turn 2: the conversation plus prompt 0, evaluated on top
 * of the kept prefix = a fresh session over all of it. */
static void chat_case(sl_model *m)
{
    t_begin("glm4moe: KV reused across two chat turns");
    int nv = model_n_vocab(m), na = n_prompt[1], nr = 6, n = 0;
    float *lg = malloc(sizeof(float) * (size_t)nv), *want = malloc(sizeof(float) * (size_t)nv);
    int32_t conv[MAXT];
    sl_session *s = NULL, *f = NULL;
    sl_err err;
    session_opts so = {.kv_mode = SL_KV_F16_FLASH};
    if (!lg || !want || session_create_opts(&s, m, MAXT, NULL, &so, &err) ||
        session_create_opts(&f, m, MAXT, NULL, &so, &err)) {
        T_CHECK(0, "setup: %s", err.msg);
        goto out;
    }
    memcpy(conv, prompt[1], sizeof(int32_t) * (size_t)na), n = na;
    int rc = session_eval(s, conv, na, lg, false, &err);
    for (int k = 0; !rc && k < nr; k++) {
        conv[n++] = argmax(lg, nv);
        if (k + 1 < nr) rc = session_eval(s, &conv[n - 1], 1, lg, false, &err);
    }
    int keep = session_pos(s);
    memcpy(conv + n, prompt[0], sizeof(int32_t) * (size_t)n_prompt[0]), n += n_prompt[0];
    T_CHECK(!rc && keep == na + nr - 1, "turn 1: %s", err.msg);
    rc = rc || session_rewind(s, keep, &err) || session_eval(s, conv + keep, n - keep, lg, false, &err) ||
         session_eval(f, conv, n, want, false, &err);
    T_CHECK(rc == 0, "turn 2: %s", err.msg);
    T_CHECK(rc || !memcmp(lg, want, sizeof(float) * (size_t)nv), "turn 2 differs from a fresh evaluation");
out:
    session_free(s);
    session_free(f);
    free(lg);
    free(want);
    t_end();
}

/* ------------------------------------------------------------ MTP block */

/* SRC with one more block: blk.N (N = block_count) a copy of the last
 * block's tensors plus the nextn ones, block_count N + 1 and
 * nextn_predict_layers 1 (GLM-4.5's layout). */
static int add_mtp_block(const char *src, const char *dst, sl_err *err)
{
    gguf_file *g;
    if (gguf_open(&g, src, err)) return -1;
    uint32_t nl = 0;
    int rc = gguf_get_u32(g, "glm4moe.block_count", &nl, err) == 1 ? 0 : sl_errf(err, "no block_count");
    gguf_writer *w = rc ? NULL : gguf_w_new(&(gguf_w_opts){.alignment = g->alignment});
    if (!rc && !w) rc = sl_errf(err, "out of memory");
    for (uint64_t i = 0; i < g->n_kv && !rc; i++) {
        const char *k = g->kv[i].key;
        if (!strcmp(k, "general.alignment") || !strcmp(k, "glm4moe.nextn_predict_layers")) continue;
        rc = !strcmp(k, "glm4moe.block_count") ? gguf_w_kv_u32(w, k, nl + 1, err) : gguf_w_kv(w, k, &g->kv[i].v, err);
    }
    if (!rc) rc = gguf_w_kv_u32(w, "glm4moe.nextn_predict_layers", 1, err);
    char last[32], name[128];
    snprintf(last, sizeof last, "blk.%u.", nl - 1);
    const gguf_tensor *copy[64];
    int n_copy = 0;
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const gguf_tensor *t = &g->tensors[i];
        rc = gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, err) < 0;
        if (!rc && !strncmp(t->name, last, strlen(last)) && n_copy < 64) copy[n_copy++] = t;
    }
    for (int i = 0; i < n_copy && !rc; i++) {
        snprintf(name, sizeof name, "blk.%u.%s", nl, copy[i]->name + strlen(last));
        rc = gguf_w_tensor(w, name, copy[i]->type, copy[i]->n_dims, copy[i]->ne, err) < 0;
    }
    const int64_t e = 64, eh[2] = {2 * e, e}, v[1] = {e};
    if (!rc) {
        snprintf(name, sizeof name, "blk.%u.nextn.eh_proj.weight", nl);
        rc = gguf_w_tensor(w, name, GGML_TYPE_F32, 2, eh, err) < 0;
    }
    for (int k = 0; k < 2 && !rc; k++) {
        snprintf(name, sizeof name, "blk.%u.nextn.%s.weight", nl, k ? "hnorm" : "enorm");
        rc = gguf_w_tensor(w, name, GGML_TYPE_F32, 1, v, err) < 0;
    }
    if (!rc) rc = gguf_w_open(w, dst, err);
    void *buf = NULL;
    for (uint64_t i = 0; i < g->n_tensors + (uint64_t)n_copy && !rc; i++) {
        const gguf_tensor *t = i < g->n_tensors ? &g->tensors[i] : copy[i - g->n_tensors];
        void *nb = realloc(buf, (size_t)t->nbytes);
        rc = !nb || gguf_read_tensor(g, t, 0, nb, t->nbytes, err) || gguf_w_write(w, nb, (size_t)t->nbytes, err);
        buf = nb;
    }
    float *f = calloc((size_t)(2 * e * e), sizeof *f);
    rc = rc || !f || gguf_w_write(w, f, sizeof *f * (size_t)(2 * e * e), err) ||
         gguf_w_write(w, f, sizeof *f * (size_t)e, err) || gguf_w_write(w, f, sizeof *f * (size_t)e, err) ||
         gguf_w_close(w, err);
    free(f);
    free(buf);
    gguf_w_free(w);
    gguf_close(g);
    return rc ? -1 : 0;
}

static void mtp_case(sl_model *m)
{
    t_begin("glm4moe: an appended MTP block (nextn_predict_layers) is not run and changes nothing");
    char path[128];
    snprintf(path, sizeof path, "%s/mtp.gguf", tmpdir);
    sl_err err;
    sl_model *mm = NULL;
    int rc = add_mtp_block(model_path, path, &err) || model_load(&mm, path, NULL, &err);
    T_CHECK(rc == 0, "%s", err.msg);
    if (!rc) {
        T_CHECK(model_n_layer(mm) == model_n_layer(m), "%d layers run, want %d", model_n_layer(mm), model_n_layer(m));
        const expert_layout *L = model_expert_layout(mm);
        T_CHECK(L && L->n_layers == model_n_layer(m), "the expert layout covers the MTP block");
        size_t bytes = sizeof(float) * (size_t)model_n_vocab(m) * (size_t)n_seq;
        float *a = all_logits(m, NULL, SL_KV_F32, 0, false, n_seq), *b = all_logits(mm, NULL, SL_KV_F32, 0, false, n_seq);
        T_CHECK(a && b && !memcmp(a, b, bytes), "logits differ with the MTP block");
        free(a);
        free(b);
        gguf_file *g = NULL;
        expert_layout xl = {0};
        sl_model *sm = streaming_model(path, model_n_expert_used(m), &g, &xl, &err);
        T_CHECK(sm, "streaming the MTP file: %s", err.msg);
        model_free(sm);
        expert_layout_free(&xl);
        gguf_close(g);
    }
    model_free(mm);
    unlink(path);
    t_end();
}

/* --------------------------------------------------------------- strict */

/* Loads the fixture with edit E; NEEDLES[0] == NULL: must load, else must
 * fail with all of them in the message. */
static void load_edited(const char *name, const gguf_edit *e, const char *const *needles)
{
    t_begin(name);
    gguf_file *g;
    sl_err err;
    char path[128], msg[256];
    snprintf(path, sizeof path, "%s/edited.gguf", tmpdir);
    int rc = gguf_open(&g, model_path, &err);
    T_CHECK(rc == 0, "%s", err.msg);
    if (rc == 0) {
        rc = gguf_write_edited(g, path, e, msg, sizeof msg);
        gguf_close(g);
        T_CHECK(rc == 0, "%s", msg);
    }
    sl_model *m = NULL;
    if (rc == 0) {
        err.msg[0] = 0;
        int lrc = model_load(&m, path, NULL, &err);
        if (!needles[0]) {
            T_CHECK(lrc == 0, "%s", err.msg);
        } else {
            T_CHECK(lrc != 0, "loading succeeded");
            printf("# %s\n", err.msg);
            for (int i = 0; needles[i]; i++)
                T_CHECK(strstr(err.msg, needles[i]) != NULL, "message \"%s\" lacks \"%s\"", err.msg, needles[i]);
        }
    }
    model_free(m);
    unlink(path);
    t_end();
}

static void strict_cases(void)
{
    static const struct {
        const char *name;
        gguf_edit e;
        const char *needles[4];
    } cases[] = {
        {"glm4moe: missing expert_feed_forward_length", {.drop_key = "glm4moe.expert_feed_forward_length", .new_type = -1},
         {"missing required key", "'glm4moe.expert_feed_forward_length'"}},
        {"glm4moe: missing expert_shared_count", {.drop_key = "glm4moe.expert_shared_count", .new_type = -1},
         {"missing required key", "'glm4moe.expert_shared_count'"}},
        {"glm4moe: missing expert_count", {.drop_key = "glm4moe.expert_count", .new_type = -1},
         {"without expert_count"}},
        {"glm4moe: missing rms eps", {.drop_key = "glm4moe.attention.layer_norm_rms_epsilon", .new_type = -1},
         {"missing required key", "'glm4moe.attention.layer_norm_rms_epsilon'"}},
        {"glm4moe: missing selection bias", {.drop_tensor = "blk.2.exp_probs_b.bias", .new_type = -1},
         {"missing tensor", "'blk.2.exp_probs_b.bias'", "{8}"}},
        {"glm4moe: missing shared expert", {.drop_tensor = "blk.1.ffn_up_shexp.weight", .new_type = -1},
         {"missing tensor", "'blk.1.ffn_up_shexp.weight'", "{64, 32}"}},
        {"glm4moe: missing pre-FFN norm", {.drop_tensor = "blk.0.post_attention_norm.weight", .new_type = -1},
         {"missing tensor", "'blk.0.post_attention_norm.weight'"}},
        {"glm4moe: q bias of the wrong shape", {.edit_tensor = "blk.1.attn_q.bias", .ne = {96, 1, 1, 1}, .new_type = -1},
         {"'blk.1.attn_q.bias'", "expected {128}", "got {96}"}},
        {"glm4moe: dense FFN of the wrong width", {.edit_tensor = "blk.0.ffn_up.weight", .ne = {64, 96, 1, 1}, .new_type = -1},
         {"'blk.0.ffn_up.weight'", "expected {64, 128}", "got {64, 96}"}},
        /* head size n_embd / n_head = 16 without key_length, value_length says 32 */
        {"glm4moe: missing key_length", {.drop_key = "glm4moe.attention.key_length", .new_type = -1},
         {"key_length 16", "value_length 32"}},
        {"glm4moe: without q/k norms (optional, as GLM-4.5-Air)", {.drop_tensor = "blk.1.attn_k_norm.weight", .new_type = -1},
         {NULL}},
        {"glm4moe: without a v bias (optional)", {.drop_tensor = "blk.2.attn_v.bias", .new_type = -1}, {NULL}},
        {"glm4moe: without expert_gating_func (sigmoid by default)", {.drop_key = "glm4moe.expert_gating_func", .new_type = -1},
         {NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) load_edited(cases[i].name, &cases[i].e, cases[i].needles);
}

int main(void)
{
    model_path = t_shared("models/arch/glm4moe-air-F16.gguf");
    if (!model_path || read_prompts()) {
        t_skip("glm4moe", "../shared fixtures not found");
        return t_done();
    }
    model_path = strdup(model_path);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-glm-XXXXXX");
    sl_model *m = NULL;
    sl_err err;
    t_begin("glm4moe: load");
    T_CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp failed");
    T_CHECK(model_load(&m, model_path, NULL, &err) == 0, "%s", err.msg);
    T_CHECK(!m || make_seq(m) == 0, "greedy run failed");
    if (t_end()) {
        invariance_case(m);
        chat_case(m);
        mtp_case(m);
        strict_cases();
    }
    model_free(m);
    rmdir(tmpdir);
    free((char *)model_path);
    return t_done();
}
