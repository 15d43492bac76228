/* gpt-oss on the fixtures (../shared/models/arch/gpt-oss-20b-F32 and the
 * MXFP4 one committed in tests/fixtures/lean),
 * beyond the goldens of test_arch: the sliding-window layers keep a ring
 * of window + max(n_batch, n_rollback) rows (rounded to 16), so small
 * batches make the ring wrap many times over the 59 positions used here.
 * Against a reference run whose cache never wraps (one batch of
 * everything, ring = the whole context):
 *  - the same logits for micro-batches of 3 and 5, one token at a time on
 *    3 threads, each ISA path, in all three KV modes;
 *  - experts streamed from the SSD store through a cache of top-k experts
 *    (it must evict), one batch and one token at a time;
 *  - drafting-style rollbacks inside what the ring keeps give the forward
 *    run's logits; a rewind the ring cannot serve is refused unharmed;
 *  - two chat turns: turn 2 on top of turn 1's cache (after a rewind
 *    into the reply) equals a fresh evaluation of the conversation;
 *  - the planner's KV bytes count a ring for the windowed layers and a
 *    full cache for the others (computed here from the file's shapes). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>

#include "arch/model.h"
#include "experts/layout.h"
#include "experts/store.h"
#include "t.h"

enum { N_GEN = 24, MAXT = 128, WINDOW = 8 };

typedef struct {
    const char *name, *path;
    bool lean; /* committed in tests/fixtures/lean (always present) */
    sl_model *m;
    int nv;
    int32_t prompt[3][64];
    int np[3];
    int32_t ids[N_GEN + 1]; /* greedy ids after prompt 2 (forward run) */
    float *ref;             /* logits before each: (N_GEN + 1) x nv, f32 KV, no ring wrap */
} fixture;

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static sl_session *new_session(fixture *f, sl_pool *pool, sl_kv_mode mode, int32_t n_batch, int32_t n_rollback)
{
    session_opts so = {.kv_mode = mode, .n_batch = n_batch, .n_rollback = n_rollback};
    sl_session *s;
    sl_err err;
    if (session_create_opts(&s, f->m, MAXT, pool, &so, &err)) {
        T_CHECK(0, "%s: %s", f->name, err.msg);
        return NULL;
    }
    return s;
}

static int eval(sl_session *s, const int32_t *t, int n, float *lg, bool all)
{
    sl_err err;
    int rc = session_eval(s, t, n, lg, all, &err);
    T_CHECK(rc == 0, "eval: %s", err.msg);
    return rc;
}

static int load_fixture(fixture *f)
{
    char rel[160], lean_m[192], lean_j[192];
    snprintf(lean_m, sizeof lean_m, "tests/fixtures/lean/models/%s.gguf", f->name);
    snprintf(lean_j, sizeof lean_j, "tests/fixtures/lean/golden/%s.json", f->name);
    snprintf(rel, sizeof rel, "models/arch/%s.gguf", f->name);
    const char *mp = f->lean ? lean_m : t_shared(rel);
    if (!mp) return 1;
    f->path = strdup(mp);
    snprintf(rel, sizeof rel, "golden/arch/%s.json", f->name);
    const char *jp = f->lean ? lean_j : t_shared(rel);
    if (!jp) return 1;
    json_error_t je;
    json_t *j = json_load_file(jp, 0, &je);
    for (int p = 0; j && p < 3; p++) {
        json_t *toks = json_object_get(json_array_get(json_object_get(j, "prompts"), (size_t)p), "tokens");
        f->np[p] = (int)json_array_size(toks);
        for (int i = 0; i < f->np[p] && i < 64; i++) f->prompt[p][i] = (int32_t)json_integer_value(json_array_get(toks, i));
    }
    json_decref(j);
    sl_err err;
    if (model_load(&f->m, f->path, NULL, &err)) {
        printf("# %s\n", err.msg);
        return -1;
    }
    f->nv = model_n_vocab(f->m);
    f->ref = malloc(sizeof(float) * (size_t)f->nv * (N_GEN + 1));
    sl_session *s = new_session(f, NULL, SL_KV_F32, 0, 0);
    int rc = !s || !f->ref || eval(s, f->prompt[2], f->np[2], f->ref, false);
    for (int i = 0; !rc && i < N_GEN; i++) {
        f->ids[i] = argmax(f->ref + (size_t)i * f->nv, f->nv);
        rc = eval(s, &f->ids[i], 1, f->ref + (size_t)(i + 1) * f->nv, false);
    }
    f->ids[N_GEN] = argmax(f->ref + (size_t)N_GEN * f->nv, f->nv);
    session_free(s);
    return rc ? -1 : 0;
}

static bool same_row(const fixture *f, const float *lg, int step)
{
    return memcmp(lg, f->ref + (size_t)step * f->nv, sizeof(float) * (size_t)f->nv) == 0;
}

/* Logits of every position of prompt 2 + the reference ids, in passes of
 * N_BATCH (0: one batch of everything; 1: one token at a time). */
static float *all_logits(fixture *f, sl_model *m, sl_pool *pool, sl_kv_mode mode, int32_t n_batch)
{
    int n = f->np[2] + N_GEN;
    int32_t toks[MAXT];
    memcpy(toks, f->prompt[2], sizeof(int32_t) * (size_t)f->np[2]);
    memcpy(toks + f->np[2], f->ids, sizeof(int32_t) * N_GEN);
    session_opts so = {.kv_mode = mode, .n_batch = n_batch};
    sl_session *s;
    sl_err err;
    float *lg = malloc(sizeof(float) * (size_t)f->nv * (size_t)n);
    if (!lg || session_create_opts(&s, m, MAXT, pool, &so, &err)) {
        T_CHECK(0, "%s", lg ? err.msg : "out of memory");
        free(lg);
        return NULL;
    }
    int rc = 0, step = n_batch == 1 ? 1 : n;
    for (int i = 0; !rc && i < n; i += step) rc = eval(s, toks + i, step, lg + (size_t)i * f->nv, true);
    session_free(s);
    if (rc) free(lg);
    return rc ? NULL : lg;
}

static void ring_case(fixture *f)
{
    char name[160];
    snprintf(name, sizeof name, "gpt-oss %s: windowed ring KV, batch sizes, threads, ISAs, 3 KV modes", f->name);
    t_begin(name);
    size_t bytes = sizeof(float) * (size_t)f->nv * (size_t)(f->np[2] + N_GEN);
    sl_pool *pool = pool_create(3);
    for (int mode = SL_KV_F16_FLASH; mode <= SL_KV_F16 && !t_cur.failed; mode++) {
        float *ref = all_logits(f, f->m, NULL, (sl_kv_mode)mode, 0);
        if (mode == SL_KV_F32)
            T_CHECK(ref && same_row(f, ref + (size_t)(f->np[2] - 1) * f->nv, 0), "one batch differs from the forward run");
        /* every ISA path in the goldens' mode; the detected one in the others */
        int isa0 = mode == SL_KV_F32 ? SL_ISA_SCALAR : (int)kernels_isa_detected();
        for (int isa = isa0; ref && isa <= (int)kernels_isa_detected(); isa++) {
            pool_set_isa(pool, (sl_isa)isa);
            float *a = all_logits(f, f->m, pool, (sl_kv_mode)mode, 1), *b = all_logits(f, f->m, pool, (sl_kv_mode)mode, 3);
            float *c = all_logits(f, f->m, NULL, (sl_kv_mode)mode, 5);
            T_CHECK(a && !memcmp(a, ref, bytes), "kv mode %d: one token at a time on 3 threads (%s) differs", mode,
                    kernels_isa_name(isa));
            T_CHECK(b && !memcmp(b, ref, bytes), "kv mode %d: micro-batches of 3 (%s) differ", mode, kernels_isa_name(isa));
            T_CHECK(c && !memcmp(c, ref, bytes), "kv mode %d: micro-batches of 5 differ", mode);
            free(a);
            free(b);
            free(c);
        }
        free(ref);
    }
    pool_destroy(pool);
    t_end();
}

static void stream_case(fixture *f)
{
    char name[160];
    snprintf(name, sizeof name, "gpt-oss %s: experts streamed under eviction give the in-RAM bits", f->name);
    t_begin(name);
    gguf_file *g = NULL;
    expert_layout xl = {0};
    expert_provider *p = NULL;
    sl_model *sm = NULL;
    sl_err err;
    int rc = gguf_open(&g, f->path, &err) ||
             expert_layout_from_gguf(&xl, g, model_n_layer(f->m), model_n_expert(f->m), model_n_expert_used(f->m), &err);
    if (!rc) {
        store_config cfg = store_config_default(store_slot_bytes(&xl) * (uint64_t)model_n_expert_used(f->m));
        cfg.io = STORE_IO_PREAD;
        rc = expert_store_create(&p, &xl, &cfg, &err);
    }
    model_opts mo = {.provider = p, .own_provider = true};
    if (!rc) rc = model_load(&sm, f->path, &mo, &err);
    T_CHECK(!rc, "streaming model: %s", err.msg);
    size_t bytes = sizeof(float) * (size_t)f->nv * (size_t)(f->np[2] + N_GEN);
    float *ref = all_logits(f, f->m, NULL, SL_KV_F32, 0);
    float *a = sm ? all_logits(f, sm, NULL, SL_KV_F32, 0) : NULL, *b = sm ? all_logits(f, sm, NULL, SL_KV_F32, 1) : NULL;
    T_CHECK(ref && a && b && !memcmp(a, ref, bytes) && !memcmp(b, ref, bytes), "streamed experts change the logits");
    if (sm) {
        store_stats st;
        expert_store_stats(model_provider(sm), &st);
        T_CHECK(st.evictions > 0, "the cache of %d experts never evicted", model_n_expert_used(f->m));
    }
    free(ref);
    free(a);
    free(b);
    model_free(sm);
    expert_layout_free(&xl);
    gguf_close(g);
    t_end();
}

/* Verify K+1 tokens at once with a wrong draft token now and then, keep
 * the accepted prefix (a rewind inside the ring), as drafting does. */
static void rollback_case(fixture *f)
{
    char name[160];
    snprintf(name, sizeof name, "gpt-oss %s: draft-style rollbacks in the ring reproduce the forward run", f->name);
    t_begin(name);
    const int R = 4;
    sl_session *s = new_session(f, NULL, SL_KV_F32, 2, R);
    float *lg = malloc(sizeof(float) * (size_t)f->nv * (R + 1));
    sl_err err;
    uint32_t rng = 7;
    if (!s || !lg || eval(s, f->prompt[2], f->np[2], lg, false)) goto out;
    int i = 0, rejects = 0;
    while (i < N_GEN && !t_cur.failed) {
        int32_t p = session_pos(s);
        rng = rng * 1103515245u + 12345u;
        int K = 1 + (int)((rng >> 8) % R), bad = (int)((rng >> 16) % (uint32_t)(K + 1));
        if (i + 1 + K > N_GEN) K = N_GEN - i - 1 > 0 ? N_GEN - i - 1 : 0;
        int32_t t[8];
        t[0] = f->ids[i];
        for (int k = 0; k < K; k++) t[1 + k] = k == bad ? (f->ids[i + 1 + k] + 1) % f->nv : f->ids[i + 1 + k];
        if (eval(s, t, K + 1, lg, true)) break;
        int a = 0;
        T_CHECK(same_row(f, lg, i + 1), "step %d: verified logits differ", i + 1);
        while (a < K && t[1 + a] == f->ids[i + 1 + a]) {
            a++;
            T_CHECK(same_row(f, lg + (size_t)a * f->nv, i + 1 + a), "step %d: verified logits differ", i + 1 + a);
        }
        if (a < K) {
            rejects++;
            T_CHECK(session_rewind(s, p + 1 + a, &err) == 0, "rewind: %s", err.msg);
        }
        i += 1 + a;
    }
    /* the ring (8 + max(2, 4) -> 16 rows) no longer holds what position
     * pos - 12 would look at: refused, and the session stays usable */
    int32_t pos = session_pos(s), far = pos - 12;
    T_CHECK(!session_can_rewind(s, far) && session_rewind(s, far, &err) != 0 && session_pos(s) == pos,
            "a rewind to %d behind the ring was not refused cleanly", far);
    /* an empty sequence needs nothing the ring lost: position 0 is always
     * restorable (sluice_reset, bench's repetitions), and the prompt again
     * gives the forward run's logits */
    T_CHECK(session_can_rewind(s, 0) && session_rewind(s, 0, &err) == 0 && session_pos(s) == 0, "rewind to 0: %s",
            err.msg);
    T_CHECK(eval(s, f->prompt[2], f->np[2], lg, false) == 0 && same_row(f, lg, 0),
            "the prompt after a rewind to 0 differs from the forward run");
    T_CHECK(i >= N_GEN && rejects > 2, "reached %d with %d rejections", i, rejects);
out:
    free(lg);
    session_free(s);
    t_end();
}

static void chat_case(fixture *f)
{
    char name[160];
    snprintf(name, sizeof name, "gpt-oss %s: KV reused across two chat turns", f->name);
    t_begin(name);
    size_t nv = (size_t)f->nv;
    float *lg = malloc(sizeof(float) * nv), *want = malloc(sizeof(float) * nv);
    int32_t conv[MAXT];
    int na = f->np[0], nb = f->np[1], nr = 8;
    sl_err err;
    for (int divergent = 0; divergent < 2 && !t_cur.failed; divergent++) {
        /* n_rollback 8 keeps the reply's positions in the window rings */
        sl_session *s = new_session(f, NULL, SL_KV_F32, 4, nr);
        if (!s || eval(s, f->prompt[0], na, lg, false)) break;
        int32_t reply[8];
        for (int k = 0; k < nr; k++) {
            reply[k] = argmax(lg, f->nv);
            if (k + 1 < nr && eval(s, &reply[k], 1, lg, false)) break;
        }
        int n = 0;
        memcpy(conv, f->prompt[0], sizeof(int32_t) * (size_t)na), n = na;
        memcpy(conv + n, reply, sizeof reply), n += nr;
        if (divergent) conv[na + 4] = (conv[na + 4] + 7) % f->nv;
        memcpy(conv + n, f->prompt[1], sizeof(int32_t) * (size_t)nb), n += nb;
        int keep = 0;
        while (keep < session_pos(s) && conv[keep] == (keep < na ? f->prompt[0][keep] : reply[keep - na])) keep++;
        T_CHECK(keep == (divergent ? na + 4 : na + nr - 1), "kept %d tokens", keep);
        T_CHECK(session_rewind(s, keep, &err) == 0, "rewind to %d: %s", keep, err.msg);
        sl_session *fr = new_session(f, NULL, SL_KV_F32, 0, 0);
        if (fr && !eval(s, conv + keep, n - keep, lg, false) && !eval(fr, conv, n, want, false))
            T_CHECK(memcmp(lg, want, sizeof(float) * nv) == 0, "turn 2 (%s) differs from a fresh evaluation",
                    divergent ? "after a rewind into the reply" : "on top of turn 1");
        session_free(fr);
        session_free(s);
    }
    free(lg);
    free(want);
    t_end();
}

/* The planner's figure from the file's own shapes: attn_k / attn_v widths,
 * a ring for even layers, n_ctx rows for odd ones. */
static void planner_case(fixture *f)
{
    char name[160];
    snprintf(name, sizeof name, "gpt-oss %s: --mem counts a ring for the sliding-window layers", f->name);
    t_begin(name);
    gguf_file *g = NULL;
    sl_err err;
    T_CHECK(gguf_open(&g, f->path, &err) == 0, "%s", err.msg);
    if (g) {
        const gguf_tensor *k = gguf_find_tensor(g, "blk.0.attn_k.weight"), *v = gguf_find_tensor(g, "blk.0.attn_v.weight");
        T_CHECK(k && v, "attn_k / attn_v missing");
        uint64_t row = k && v ? (uint64_t)(k->ne[1] + v->ne[1]) : 0;
        int32_t n_ctx = 4096, nb = 16;
        uint64_t ring = ((WINDOW + nb) + 15) & ~15u, want = 0;
        for (int il = 0; il < model_n_layer(f->m); il++) want += (il % 2 == 0 ? ring : (uint64_t)n_ctx) * row * 4;
        session_opts so = {.kv_mode = SL_KV_F32, .n_batch = nb};
        uint64_t got = session_kv_bytes(f->m, n_ctx, &so);
        T_CHECK(got == want, "session_kv_bytes %llu, expected %llu", (unsigned long long)got, (unsigned long long)want);
        so.kv_mode = SL_KV_F16_FLASH;
        T_CHECK(session_kv_bytes(f->m, n_ctx, &so) == want / 2, "f16 cache: not half the f32 bytes");
        T_CHECK(session_state_bytes(f->m) == 0, "gpt-oss keeps no recurrent state");
    }
    gguf_close(g);
    t_end();
}

int main(void)
{
    static fixture fx[] = {{.name = "gpt-oss-20b-F32"}, {.name = "gpt-oss-20b-MXFP4_MOE", .lean = true}};
    enum { NF = sizeof fx / sizeof *fx };
    for (int i = 0; i < NF; i++) {
        int rc = load_fixture(&fx[i]);
        if (rc > 0) {
            char name[128];
            snprintf(name, sizeof name, "gpt-oss %s", fx[i].name);
            t_skip(name, "../shared fixtures not found");
            continue;
        }
        if (rc < 0) {
            t_begin(fx[i].name);
            T_CHECK(0, "cannot load or run the fixture");
            t_end();
            continue;
        }
        ring_case(&fx[i]);
        stream_case(&fx[i]);
        rollback_case(&fx[i]);
        chat_case(&fx[i]);
        planner_case(&fx[i]);
    }
    for (int i = 0; i < NF; i++) {
        model_free(fx[i].m);
        free(fx[i].ref);
        free((char *)fx[i].path);
    }
    return t_done();
}
