/* Verification's held pass (model.h: session_eval_held, session_logits):
 * the rows it projects, in any chunks, are bit for bit those of
 * session_eval with every row, for a MoE, an MLA model with shared experts
 * and a dense one, on 1 and 2 threads; rows it does not hold and a pass
 * longer than one micro-batch are refused, the session unchanged. */
#include <string.h>

#include "arch/model.h"
#include "kernels/pool.h"
#include "t.h"

enum { PROMPT = 20, N = 9 };

static int32_t tok(int i, int n_vocab) { return (int32_t)((i * 7919 + 13) % n_vocab); }

static void case_model(const char *path, int threads)
{
    char name[256];
    snprintf(name, sizeof name, "held pass: %s, %d thread%s: chunked rows = every row", path, threads,
             threads > 1 ? "s" : "");
    t_begin(name);
    sl_err err;
    sl_model *m = NULL;
    sl_pool *pool = pool_create(threads);
    sl_session *s = NULL;
    session_opts so = {.n_batch = 16};
    if (model_load(&m, path, NULL, &err) || session_create_opts(&s, m, 128, pool, &so, &err)) {
        T_CHECK(0, "%s", err.msg);
        goto done;
    }
    int nv = model_n_vocab(m);
    int32_t t[PROMPT + 17];
    for (int i = 0; i < PROMPT + 17; i++) t[i] = tok(i, nv);
    float *all = malloc(sizeof(float) * (size_t)nv * N), *held = malloc(sizeof(float) * (size_t)nv * N);
    memset(held, 0xff, sizeof(float) * (size_t)nv * N);
    if (!all || !held || session_eval(s, t, PROMPT, NULL, false, &err) ||
        session_eval(s, t + PROMPT, N, all, true, &err) || session_rewind(s, PROMPT, &err) ||
        session_eval_held(s, t + PROMPT, N, &err)) {
        T_CHECK(0, "%s", err.msg);
        free(all), free(held);
        goto done;
    }
    /* out of order and uneven, as a verification never asks, to be sure a
     * row does not depend on its neighbours; after a rewind, as spec.c's
     * error path reads them */
    T_CHECK(!session_logits(s, 4, 5, held + 4 * (size_t)nv, &err), "%s", err.msg);
    T_CHECK(!session_logits(s, 0, 1, held, &err), "%s", err.msg);
    T_CHECK(!session_rewind(s, PROMPT + 2, &err), "%s", err.msg);
    T_CHECK(!session_logits(s, 1, 3, held + (size_t)nv, &err), "%s", err.msg);
    T_CHECK(!memcmp(all, held, sizeof(float) * (size_t)nv * N), "a held row differs from session_eval's");
    T_CHECK(session_logits(s, 5, 5, held, &err) && strstr(err.msg, "rows [5, 10) of a pass holding 9"),
            "rows past the pass: %s", err.msg);
    T_CHECK(session_logits(s, -1, 2, held, &err), "a negative row was projected");
    /* any evaluation overwrites the stream: nothing is held after it */
    T_CHECK(!session_eval(s, t + PROMPT + 2, 1, NULL, false, &err), "%s", err.msg);
    T_CHECK(session_logits(s, 0, 1, held, &err) && strstr(err.msg, "holding 0"), "rows after another pass: %s",
            err.msg);
    int32_t pos = session_pos(s);
    T_CHECK(session_eval_held(s, t, 17, &err) && strstr(err.msg, "exceed one pass of 16") && session_pos(s) == pos,
            "17 tokens held with n_batch 16: %s", err.msg);
    free(all), free(held);
done:
    session_free(s);
    model_free(m);
    pool_destroy(pool);
    t_end();
}

int main(void)
{
    static const char *models[] = {"models/tinymoe-q8_0.gguf", "tests/fixtures/lean/models/deepseek2-dsv3-lean-Q8_0.gguf",
                                   "tests/fixtures/lean/models/qwen3-dense-lean-BF16.gguf"};
    for (int i = 0; i < 3; i++)
        for (int th = 1; th <= 2; th++) case_model(models[i], th);
    return t_done();
}
