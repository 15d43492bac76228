/* model_opts.q8_weights (drafts): every float 2-D weight, the output
 * projection and the tied embedding with it, becomes Q8_0 (interleaved on
 * AVX-512), the memory plan counts the smaller copies, and the logits stay
 * close to the float weights' (random-weight fixtures compound the
 * rounding over their layers; the trained draft in ../shared much less).
 * That drafting with it changes no output is test_draft's.  Also
 * model_set_head_rows, a draft's head cut to its first ids. */
#include <math.h>

#include "arch/arch.h"
#include "arch/model.h"
#include "decode/draft_model.h"
#include "t.h"

static const char *const MODELS[] = {
    "tests/fixtures/lean/models/qwen3-dense-lean-BF16.gguf",    /* tied, BF16 */
    "tests/fixtures/lean/models/deepseek2-kimik2-lean-F16.gguf", /* tied, F16 */
};

/* Logits of 8 fixed tokens, every position. */
static float *logits_of(sl_model *m, sl_err *err)
{
    int nv = model_n_vocab(m);
    int32_t toks[8] = {1, 17, 300, 5, 1200, 77, 9, 2000};
    float *y = malloc(sizeof(float) * (size_t)nv * 8);
    sl_session *s = NULL;
    if (!y || session_create(&s, m, 32, NULL, err) || session_eval(s, toks, 8, y, true, err)) {
        free(y);
        y = NULL;
    }
    session_free(s);
    return y;
}

static void check_model(const char *path, double max_err)
{
    sl_model *plain = NULL, *q8 = NULL, *dry = NULL;
    sl_err err;
    if (model_load(&plain, path, NULL, &err) || model_load(&q8, path, &(model_opts){.q8_weights = true}, &err) ||
        model_load(&dry, path, &(model_opts){.q8_weights = true, .dry_run = true}, &err)) {
        T_CHECK(0, "%s: %s", path, err.msg);
        goto out;
    }
    T_CHECK(q8->output.type == GGML_TYPE_Q8_0, "%s: head type %u", path, q8->output.type);
    T_CHECK(q8->tok_embd.data == q8->output.data, "%s: the tied embedding reads the Q8_0 copy", path);
    T_CHECK(plain->layers[0].wo.type != GGML_TYPE_Q8_0 && q8->layers[0].wo.type == GGML_TYPE_Q8_0,
            "%s: attn_output %u -> %u", path, plain->layers[0].wo.type, q8->layers[0].wo.type);
    T_CHECK((q8->output.layout == SL_LAYOUT_Q8_0_R16) == (kernels_isa_detected() >= SL_ISA_AVX512),
            "%s: interleaved exactly on AVX-512", path);
    T_CHECK(model_derived_bytes(q8) < 0 && model_derived_bytes(dry) == model_derived_bytes(q8) &&
                model_spine_bytes(dry) == model_spine_bytes(q8) &&
                (int64_t)model_spine_bytes(q8) == (int64_t)model_spine_bytes(plain) + model_derived_bytes(q8),
            "%s: the plan counts the copy (derived %lld, spine %llu vs %llu)", path,
            (long long)model_derived_bytes(q8), (unsigned long long)model_spine_bytes(q8),
            (unsigned long long)model_spine_bytes(plain));
    float *a = logits_of(plain, &err), *b = a ? logits_of(q8, &err) : NULL;
    T_CHECK(a && b, "%s: %s", path, err.msg);
    int nv = model_n_vocab(plain), same_top = 0;
    double worst = 0;
    for (int t = 0; a && b && t < 8; t++) {
        const float *x = a + (size_t)t * nv, *y = b + (size_t)t * nv;
        int ax = 0, ay = 0;
        double mx = 0;
        for (int i = 0; i < nv; i++) {
            if (x[i] > x[ax]) ax = i;
            if (y[i] > y[ay]) ay = i;
            if (fabs(x[i]) > mx) mx = fabs(x[i]);
        }
        for (int i = 0; i < nv; i++)
            if (fabs(x[i] - y[i]) / mx > worst) worst = fabs(x[i] - y[i]) / mx;
        same_top += ax == ay;
    }
    /* Q8_0 keeps about 8 bits of each weight and of the activations */
    T_CHECK(worst < max_err && same_top >= 6, "%s: worst error %.4f of the largest logit, top token equal at %d of 8",
            path, worst, same_top);
    free(a);
    free(b);
out:
    model_free(plain);
    model_free(q8);
    model_free(dry);
}

/* A head cut to N ids computes those ids' logits bit for bit as the whole
 * head does (Q8_0 interleaved and the file's own float rows) and gives
 * every other id -INFINITY; N rounds up to whole groups of 16. */
static void check_head_rows(const char *path, bool q8)
{
    sl_model *m = NULL;
    sl_err err;
    if (model_load(&m, path, &(model_opts){.q8_weights = q8}, &err)) {
        T_CHECK(0, "%s: %s", path, err.msg);
        return;
    }
    int nv = model_n_vocab(m);
    float *a = logits_of(m, &err);
    T_CHECK(model_set_head_rows(m, 1000) == 1008 && model_head_rows(m) == 1008, "%s: 1000 ids -> %d", path,
            (int)model_head_rows(m));
    float *b = a ? logits_of(m, &err) : NULL;
    T_CHECK(a && b, "%s: %s", path, err.msg);
    for (int t = 0; a && b && t < 8; t++) {
        const float *x = a + (size_t)t * nv, *y = b + (size_t)t * nv;
        T_CHECK(memcmp(x, y, sizeof(float) * 1008) == 0, "%s q8 %d: position %d, ids below 1008 differ", path, q8, t);
        int bad = 0;
        for (int i = 1008; i < nv; i++) bad += !(isinf(y[i]) && y[i] < 0);
        T_CHECK(bad == 0, "%s q8 %d: position %d, %d ids past the cut are not -inf", path, q8, t, bad);
    }
    T_CHECK(model_set_head_rows(m, -1) == nv && model_set_head_rows(m, 0) == nv &&
                model_set_head_rows(m, nv - 3) == nv && model_set_head_rows(m, 16) == 16,
            "%s: -1, 0 and n_vocab - 3 give every id, 16 gives 16", path);
    free(a);
    free(b);
    model_free(m);
}

int main(void)
{
    t_begin("q8_weights: float weights become Q8_0 in their place, counted in the plan, logits close to the float weights'");
    check_model(MODELS[0], 0.1);
    check_model(MODELS[1], 0.3);
    t_end();
    const char *draft = t_shared("models/tinydraft-f16.gguf");
    if (!draft) {
        t_skip("q8_weights on the trained draft", "../shared not found");
    } else {
        t_begin("q8_weights on the trained draft: logits within 5% of the largest, top tokens kept");
        check_model(draft, 0.05);
        t_end();
    }
    t_begin("model_set_head_rows: the first ids' logits bit for bit, -inf past them (Q8_0 and float heads)");
    for (int q8 = 0; q8 < 2; q8++) check_head_rows(MODELS[0], q8), check_head_rows(MODELS[1], q8);
    t_end();
    if (draft) {
        /* tinydraft: a 50257 x 128 head beside 4 layers of 128 */
        t_begin("draft_auto_vocab: tinydraft proposes from its first ids, a 2,048-id draft from all");
        sl_model *m = NULL, *small = NULL;
        sl_err err;
        if (model_load(&m, draft, &(model_opts){.dry_run = true}, &err) ||
            model_load(&small, MODELS[1], &(model_opts){.dry_run = true}, &err)) {
            T_CHECK(0, "%s", err.msg);
        } else {
            int32_t v = draft_auto_vocab(m);
            T_CHECK(v >= DRAFT_VOCAB_MIN && v < model_n_vocab(m) / 2, "tinydraft: %d of %d ids", (int)v, (int)model_n_vocab(m));
            T_CHECK(draft_auto_vocab(small) >= model_n_vocab(small), "%d-id model: %d", (int)model_n_vocab(small),
                    (int)draft_auto_vocab(small));
        }
        model_free(m);
        model_free(small);
        t_end();
    }
    return t_done();
}
