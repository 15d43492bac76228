#include <stdlib.h>

#include "decode/generate.h"
#include "util/clock.h"

/* One decode step: the next token's logits after evaluating ID. */
static int step(sl_session *s, int32_t id, float *logits, sl_err *err)
{
    return session_eval(s, &id, 1, logits, false, err);
}

int generate(const sl_model *m, sl_session *s, sl_sampler *smp, const int32_t *prompt, size_t n_prompt,
             const gen_opts *o, const gen_callbacks *cb, gen_result *res, sl_err *err)
{
    gen_emitter e;
    emitter_init(&e, model_vocab(m), o, cb, res);
    int32_t n_vocab = model_n_vocab(m), n_ctx = session_n_ctx(s);
    if (n_prompt == 0) return sl_errf(err, "generate: empty prompt");
    if ((size_t)session_pos(s) + n_prompt > (size_t)n_ctx)
        return sl_errf(err, "prompt of %zu tokens does not fit in the context (%d tokens, %d in use)", n_prompt,
                       (int)n_ctx, (int)session_pos(s));
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits) return sl_errf(err, "generate: out of memory for %d logits", (int)n_vocab);
    gen_stats *st = &res->stats;
    double t0 = sl_now(), t_first = 0, t_last = 0;
    int rc = session_eval(s, prompt, (int32_t)n_prompt, logits, false, err);
    st->prompt_tokens = (int64_t)n_prompt;
    st->prompt_s = sl_now() - t0;
    if (rc == 0 && cb && cb->on_prompt_logits && cb->on_prompt_logits(cb->ud, logits, n_vocab))
        res->stop = GEN_STOP_CALLER;
    if (rc == 0 && o->n_predict == 0) res->stop = GEN_STOP_LIMIT;
    for (int64_t n = 0; rc == 0 && res->stop == GEN_RUNNING; n++) {
        int32_t id = sampler_sample(smp, logits);
        t_last = sl_now();
        if (n == 0) t_first = t_last, st->ttft_s = t_last - t0;
        st->decode_steps = n;
        rc = emitter_push(&e, id, err);
        if (rc) break;
        if (session_pos(s) >= n_ctx) rc = emitter_finish(&e, GEN_STOP_CTX, err);
        else rc = step(s, id, logits, err);
    }
    if (rc == 0 || rc == 1) rc = emitter_finish(&e, GEN_STOP_LIMIT, err);
    st->generated_tokens = (int64_t)res->n_ids;
    st->decode_s = t_last - t_first;
    stats_finish(st);
    emitter_free(&e);
    free(logits);
    return rc < 0 ? -1 : 0;
}
