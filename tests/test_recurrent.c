/* Recurrent architectures (kimi-linear: KDA + MLA; qwen35moe: gated delta
 * net + gated attention) on the shared fixtures, against a reference run
 * of the same model that only ever goes forward (prompt as one batch, then
 * one greedy token at a time):
 *  - drafting-style rollbacks: verify K+1 tokens at once with a wrong draft
 *    token at random, keep the accepted prefix, rewind, go on; plus jumps
 *    back to a checkpoint: every kept logit row and every id is bit-equal
 *    to the reference, and unkept positions are refused without harm;
 *  - chat-style reuse across two turns: the second turn evaluated on top of
 *    the first (directly, or from the checkpoint at the end of the first
 *    prompt when the re-rendered history diverges inside the reply) gives
 *    the logits of a fresh session evaluating the whole conversation;
 *  - saved state: a second session that loads the first one's state goes
 *    on with the same logits;
 *  - the same logits for one batch, micro-batches of 3, one token at a time
 *    on 3 threads, each ISA path, and experts streamed from the SSD store
 *    through a cache smaller than one token's experts' worth of layers. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>

#include "arch/model.h"
#include "experts/layout.h"
#include "experts/store.h"
#include "t.h"

enum { N_GEN = 24, MAXT = 128 };

typedef struct {
    const char *name, *path;
    sl_model *m;
    int nv;
    int32_t prompt[3][64];
    int np[3];
    /* the reference: greedy ids after prompt 2 and the logits before each */
    int32_t ids[N_GEN + 1];
    float *ref; /* (N_GEN + 1) x nv */
} fixture;

static uint32_t rng_state = 12345u;
static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 8) % n;
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static sl_session *new_session(fixture *f, sl_pool *pool, int32_t n_rollback, int32_t n_batch)
{
    session_opts so = {.kv_mode = SL_KV_F32, .n_rollback = n_rollback, .n_batch = n_batch};
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
    char rel[160];
    snprintf(rel, sizeof rel, "models/arch/%s.gguf", f->name);
    const char *mp = t_shared(rel);
    snprintf(rel, sizeof rel, "golden/arch/%s.json", f->name);
    const char *jp = t_shared(rel);
    if (!mp || !jp) return 1;
    f->path = strdup(mp);
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
    sl_session *s = new_session(f, NULL, 0, 0);
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

/* ------------------------------------------------------------ rollback */

static void rollback_case(fixture *f, sl_pool *pool)
{
    char name[128];
    snprintf(name, sizeof name, "recurrent %s: draft-style rollbacks and checkpoints reproduce the forward run",
             f->name);
    t_begin(name);
    const int R = 4;
    sl_session *s = new_session(f, pool, R, 0);
    float *lg = malloc(sizeof(float) * (size_t)f->nv * (R + 1));
    if (!s || !lg || eval(s, f->prompt[2], f->np[2], lg, false)) goto out;
    T_CHECK(same_row(f, lg, 0), "prompt logits differ");
    int i = 0, rounds = 0, rejects = 0, jumps = 0, ckpt_i = -1;
    sl_err err;
    while (i < N_GEN && !t_cur.failed && rounds < 200) {
        rounds++;
        int32_t p = session_pos(s);
        /* a draft of K tokens after ids[i]; maybe one is wrong */
        int K = 1 + (int)rnd(R), bad = rnd(3) ? (int)rnd((uint32_t)K) : K;
        if (i + 1 + K > N_GEN) K = N_GEN - i - 1 > 0 ? N_GEN - i - 1 : 0;
        int32_t t[8];
        t[0] = f->ids[i];
        for (int k = 0; k < K; k++) t[1 + k] = k == bad ? (f->ids[i + 1 + k] + 1) % f->nv : f->ids[i + 1 + k];
        if (eval(s, t, K + 1, lg, true)) break;
        int a = 0; /* accepted drafts: the verified logits must be the reference's */
        T_CHECK(same_row(f, lg, i + 1), "step %d: verified logits differ", i + 1);
        while (a < K && t[1 + a] == f->ids[i + 1 + a]) {
            a++;
            T_CHECK(same_row(f, lg + (size_t)a * f->nv, i + 1 + a), "step %d: verified logits differ", i + 1 + a);
        }
        if (a < K) {
            rejects++;
            T_CHECK(session_can_rewind(s, p + 1 + a), "position %d not kept", p + 1 + a);
            T_CHECK(session_rewind(s, p + 1 + a, &err) == 0, "rewind: %s", err.msg);
        }
        i += 1 + a;
        if (ckpt_i < 0 && i >= 4) {
            T_CHECK(session_checkpoint(s, &err) == 0, "checkpoint");
            ckpt_i = i;
        }
        if (!jumps && i >= N_GEN - 4) { /* back to the checkpoint, far behind the ring */
            int32_t cp = f->np[2] + ckpt_i;
            int32_t far = session_pos(s) - R - 2;
            if (far > cp) {
                T_CHECK(!session_can_rewind(s, far) && session_rewind(s, far, &err) != 0, "unkept position %d", far);
                T_CHECK(session_pos(s) == f->np[2] + i, "a refused rewind moved the session");
            }
            T_CHECK(session_rewind(s, cp, &err) == 0, "rewind to the checkpoint: %s", err.msg);
            i = ckpt_i;
            jumps++;
        }
    }
    T_CHECK(i >= N_GEN && rejects > 2 && jumps == 1, "%d rounds, %d rejections, %d jumps, reached %d", rounds, rejects,
            jumps, i);
out:
    free(lg);
    session_free(s);
    t_end();
}

/* ---------------------------------------------------------- chat turns */

/* Logits after the whole of TOKS in a fresh session, one batch. */
static int fresh_logits(fixture *f, const int32_t *toks, int n, float *lg)
{
    sl_session *s = new_session(f, NULL, 0, 0);
    int rc = !s || eval(s, toks, n, lg, false);
    session_free(s);
    return rc;
}

static void chat_case(fixture *f)
{
    char name[128];
    snprintf(name, sizeof name, "recurrent %s: KV and state reused across two chat turns", f->name);
    t_begin(name);
    size_t nv = (size_t)f->nv;
    float *lg = malloc(sizeof(float) * nv), *want = malloc(sizeof(float) * nv);
    int32_t conv[MAXT];
    int na = f->np[0], nb = f->np[1], nr = 8;
    sl_err err;
    for (int divergent = 0; divergent < 2 && !t_cur.failed; divergent++) {
        sl_session *s = new_session(f, NULL, 0, 0);
        if (!s || eval(s, f->prompt[0], na, lg, false)) break;
        T_CHECK(session_checkpoint(s, &err) == 0, "checkpoint");
        int32_t reply[8];
        for (int k = 0; k < nr; k++) { /* the last reply token is never evaluated, as in a chat */
            reply[k] = argmax(lg, f->nv);
            if (k + 1 < nr && eval(s, &reply[k], 1, lg, false)) break;
        }
        /* turn 2: the conversation re-rendered; DIVERGENT: its reply tokens differ from the generated ones at 4 */
        int n = 0;
        memcpy(conv, f->prompt[0], sizeof(int32_t) * (size_t)na), n = na;
        memcpy(conv + n, reply, sizeof reply), n += nr;
        if (divergent) conv[na + 4] = (conv[na + 4] + 7) % f->nv;
        memcpy(conv + n, f->prompt[1], sizeof(int32_t) * (size_t)nb), n += nb;
        int keep = 0;
        while (keep < session_pos(s) && conv[keep] == (keep < na ? f->prompt[0][keep] : reply[keep - na])) keep++;
        while (keep > 0 && !session_can_rewind(s, keep)) keep--;
        T_CHECK(keep == (divergent ? na : na + nr - 1), "kept %d tokens", keep);
        T_CHECK(session_rewind(s, keep, &err) == 0, "rewind: %s", err.msg);
        if (!eval(s, conv + keep, n - keep, lg, false) && !fresh_logits(f, conv, n, want))
            T_CHECK(memcmp(lg, want, sizeof(float) * nv) == 0, "turn 2 (%s) differs from a fresh evaluation",
                    divergent ? "from the checkpoint" : "on top of turn 1");
        session_free(s);
    }
    free(lg);
    free(want);
    t_end();
}

/* --------------------------------------------------------- saved state */

static void save_case(fixture *f, fixture *other)
{
    char name[128];
    snprintf(name, sizeof name, "recurrent %s: a saved state goes on with the same logits", f->name);
    t_begin(name);
    size_t nv = (size_t)f->nv;
    float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv);
    sl_session *sa = new_session(f, NULL, 0, 0), *sb = new_session(f, NULL, 0, 0);
    FILE *file = tmpfile();
    sl_err err;
    int n0 = f->np[2] + 6;
    int32_t toks[64];
    memcpy(toks, f->prompt[2], sizeof(int32_t) * (size_t)f->np[2]);
    memcpy(toks + f->np[2], f->ids, 6 * sizeof(int32_t));
    if (!sa || !sb || !file || eval(sa, toks, n0, a, false) || eval(sb, toks, n0, b, false)) goto out;
    T_CHECK(session_state_write(sa, file, &err) == 0, "write: %s", err.msg);
    /* sb keeps its KV rows but forgets its recurrent state, then loads sa's */
    T_CHECK(session_rewind(sb, 0, &err) == 0, "rewind to 0");
    rewind(file);
    T_CHECK(session_state_read(sb, file, &err) == 0 && session_pos(sb) == n0, "read: %s", err.msg);
    for (int i = 6; i < N_GEN && !t_cur.failed; i++) {
        if (eval(sa, &f->ids[i], 1, a, false) || eval(sb, &f->ids[i], 1, b, false)) break;
        T_CHECK(memcmp(a, b, sizeof(float) * nv) == 0 && same_row(f, b, i + 1), "step %d differs after the load", i);
    }
    if (other && other->m) { /* another architecture's state is refused */
        sl_session *so = new_session(other, NULL, 0, 0);
        rewind(file);
        T_CHECK(so && session_state_read(so, file, &err) != 0 && session_pos(so) == 0, "foreign state accepted");
        session_free(so);
    }
out:
    if (file) fclose(file);
    session_free(sa);
    session_free(sb);
    free(a);
    free(b);
    t_end();
}

/* ---------------------------------------------------------- invariance */

/* Logits of every position of the prompt + reference ids, one way. */
static float *all_logits(fixture *f, sl_model *m, sl_pool *pool, int32_t n_batch, bool one_by_one)
{
    int n = f->np[2] + N_GEN;
    int32_t toks[MAXT];
    memcpy(toks, f->prompt[2], sizeof(int32_t) * (size_t)f->np[2]);
    memcpy(toks + f->np[2], f->ids, sizeof(int32_t) * N_GEN);
    session_opts so = {.kv_mode = SL_KV_F32, .n_batch = n_batch, .prefetch = SL_PREFETCH_AUTO};
    sl_session *s;
    sl_err err;
    float *lg = malloc(sizeof(float) * (size_t)f->nv * (size_t)n);
    if (!lg || session_create_opts(&s, m, MAXT, pool, &so, &err)) {
        T_CHECK(0, "%s", lg ? err.msg : "out of memory");
        free(lg);
        return NULL;
    }
    int rc = 0;
    for (int i = 0; !rc && i < n; i += one_by_one ? 1 : n)
        rc = eval(s, toks + i, one_by_one ? 1 : n, lg + (size_t)i * f->nv, true);
    session_free(s);
    if (rc) free(lg);
    return rc ? NULL : lg;
}

/* The same model with its experts streamed through a store of SLOTS cached experts. */
static sl_model *streaming_model(fixture *f, int slots, gguf_file **g, expert_layout *xl, sl_err *err)
{
    sl_model *m = NULL;
    expert_provider *p;
    if (gguf_open(g, f->path, err)) return NULL;
    if (expert_layout_from_gguf(xl, *g, model_n_layer(f->m), model_n_expert(f->m), model_n_expert_used(f->m), err))
        return NULL;
    store_config cfg = store_config_default(store_slot_bytes(xl) * (uint64_t)slots);
    cfg.io = STORE_IO_PREAD;
    if (expert_store_create(&p, xl, &cfg, err)) return NULL;
    model_opts mo = {.provider = p, .own_provider = true};
    if (model_load(&m, f->path, &mo, err)) return NULL;
    return m;
}

static void invariance_case(fixture *f)
{
    char name[128];
    snprintf(name, sizeof name,
             "recurrent %s: same bits for batch sizes, threads, ISAs and experts streamed under eviction", f->name);
    t_begin(name);
    size_t bytes = sizeof(float) * (size_t)f->nv * (size_t)(f->np[2] + N_GEN);
    float *ref = all_logits(f, f->m, NULL, 0, false);
    T_CHECK(ref && same_row(f, ref + (size_t)(f->np[2] - 1) * f->nv, 0), "one batch differs from the reference run");
    sl_pool *pool = pool_create(3);
    for (int isa = SL_ISA_SCALAR; ref && isa <= (int)kernels_isa_detected(); isa++) {
        pool_set_isa(pool, (sl_isa)isa);
        float *a = all_logits(f, f->m, pool, 0, true), *b = all_logits(f, f->m, pool, 3, false);
        T_CHECK(a && memcmp(a, ref, bytes) == 0, "one token at a time on 3 threads (%s) differs", kernels_isa_name(isa));
        T_CHECK(b && memcmp(b, ref, bytes) == 0, "micro-batches of 3 (%s) differ", kernels_isa_name(isa));
        free(a);
        free(b);
    }
    pool_destroy(pool);
    gguf_file *g = NULL;
    expert_layout xl = {0};
    sl_err err;
    sl_model *sm = streaming_model(f, model_n_expert_used(f->m), &g, &xl, &err);
    T_CHECK(sm, "streaming model: %s", err.msg);
    float *c = sm ? all_logits(f, sm, NULL, 5, false) : NULL, *d = sm ? all_logits(f, sm, NULL, 0, true) : NULL;
    T_CHECK(ref && c && d && !memcmp(c, ref, bytes) && !memcmp(d, ref, bytes), "streamed experts change the logits");
    if (sm) {
        store_stats st;
        expert_store_stats(model_provider(sm), &st);
        T_CHECK(st.evictions > 0, "the cache of %d experts never evicted", model_n_expert_used(f->m));
    }
    free(c);
    free(d);
    model_free(sm);
    expert_layout_free(&xl);
    gguf_close(g);
    free(ref);
    t_end();
}

int main(void)
{
    static fixture fx[] = {{.name = "kimi-linear-kda-F32"}, {.name = "qwen35moe-a3b-F32"},
                           {.name = "kimi-linear-kda-F16"}, {.name = "qwen35moe-a3b-F16"}};
    enum { NF = sizeof fx / sizeof *fx };
    sl_pool *pool = pool_create(2);
    int rc[NF];
    for (int i = 0; i < NF; i++) rc[i] = load_fixture(&fx[i]);
    for (int i = 0; i < NF; i++) {
        if (rc[i] > 0) {
            char name[128];
            snprintf(name, sizeof name, "recurrent %s", fx[i].name);
            t_skip(name, "../shared fixtures not found");
            continue;
        }
        if (rc[i] < 0) {
            t_begin(fx[i].name);
            T_CHECK(0, "cannot load or run the fixture");
            t_end();
            continue;
        }
        rollback_case(&fx[i], pool);
        chat_case(&fx[i]);
        save_case(&fx[i], &fx[i ^ 1]); /* the other architecture */
        invariance_case(&fx[i]);
    }
    for (int i = 0; i < NF; i++) {
        model_free(fx[i].m);
        free(fx[i].ref);
        free((char *)fx[i].path);
    }
    pool_destroy(pool);
    return t_done();
}
