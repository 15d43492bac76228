#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/generate.h"
#include "decode/spec.h"
#include "util/clock.h"

/* ------------------------------------------------------------ sequence */

int seq_init(gen_seq *q, sl_session *s, int32_t n_vocab, sl_err *err)
{
    memset(q, 0, sizeof *q);
    q->s = s;
    q->n_vocab = n_vocab;
    q->cap = (size_t)session_n_ctx(s);
    q->toks = malloc(q->cap * sizeof *q->toks);
    q->logits = malloc((size_t)n_vocab * sizeof *q->logits);
    if (!q->toks || !q->logits) {
        seq_free(q);
        return sl_errf(err, "out of memory for a context of %zu tokens", (size_t)session_n_ctx(s));
    }
    q->n = (size_t)session_pos(s);
    return q->n ? sl_errf(err, "seq_init: the session already holds %zu unknown tokens", q->n) : 0;
}

void seq_free(gen_seq *q)
{
    free(q->toks);
    free(q->logits);
    memset(q, 0, sizeof *q);
}

size_t seq_pending(const gen_seq *q) { return q->n - (size_t)session_pos(q->s); }

int seq_push(gen_seq *q, const int32_t *ids, size_t n, sl_err *err)
{
    if (n > q->cap - q->n)
        return sl_errf(err, "%zu more tokens do not fit in the context (%zu tokens, %zu in use)", n, q->cap, q->n);
    if (n) memcpy(q->toks + q->n, ids, n * sizeof *ids);
    q->n += n;
    return 0;
}

int seq_eval(gen_seq *q, sl_err *err)
{
    size_t pos = (size_t)session_pos(q->s);
    if (q->n == pos) return 0;
    if (session_eval(q->s, q->toks + pos, (int32_t)(q->n - pos), q->logits, false, err)) return -1;
    q->logits_ok = true;
    return 0;
}

int seq_rewind(gen_seq *q, size_t n, sl_err *err)
{
    if (n > q->n) return sl_errf(err, "cannot rewind to %zu tokens: the context holds %zu", n, q->n);
    size_t pos = (size_t)session_pos(q->s);
    if (n < pos) {
        if (session_rewind(q->s, (int32_t)n, err)) return -1;
        q->logits_ok = false;
    }
    q->n = n;
    return 0;
}

int64_t seq_reuse(gen_seq *q, const int32_t *prompt, size_t n, sl_err *err)
{
    if (n > q->cap) return sl_errf(err, "the prompt has %zu tokens, more than the context size of %zu", n, q->cap);
    size_t pos = (size_t)session_pos(q->s), keep = 0;
    while (keep < n && keep < pos && q->toks[keep] == prompt[keep]) keep++;
    /* the whole prompt evaluated: its logits are at hand only if nothing follows it */
    bool have_logits = keep == n && pos == n && q->logits_ok;
    if (keep == n && !have_logits) keep = n - (n > 0);
    /* a recurrent model returns only to the positions it kept a snapshot of */
    while (keep > 0 && !session_can_rewind(q->s, (int32_t)keep)) keep--;
    if (seq_rewind(q, keep, err)) return -1;
    memcpy(q->toks + keep, prompt + keep, (n - keep) * sizeof *prompt);
    q->n = n;
    return (int64_t)keep;
}

/* ---------------------------------------------------------------- loop */

int gen_sample(gen_seq *q, sl_sampler *smp, gen_emitter *e, int32_t *id, sl_err *err)
{
    *id = sampler_sample(smp, q->logits);
    sampler_accept(smp, *id);
    return emitter_push_row(e, *id, q->logits, q->n_vocab, err);
}

int generate(const sl_model *m, gen_seq *q, sl_sampler *smp, const gen_opts *o, const gen_callbacks *cb,
             struct spec *sp, gen_result *res, sl_err *err)
{
    gen_emitter e;
    emitter_init(&e, model_vocab(m), o, cb, res);
    gen_stats *st = &res->stats;
    size_t pending = seq_pending(q);
    if (!pending && !q->logits_ok) return sl_errf(err, "generate: nothing to generate from (empty prompt)");
    double t0 = sl_now(), t_first = 0;
    int rc = seq_eval(q, err);
    /* a recurrent model restores only kept states: keep the end of the
     * prompt, so a next turn whose re-rendered history leaves this one's
     * reply early restarts here, not from 0 (free for attention-only models) */
    if (rc == 0 && pending > 1) rc = session_checkpoint(q->s, err);
    st->prompt_tokens = (int64_t)pending;
    st->prompt_s = sl_now() - t0;
    if (rc == 0 && cb && cb->on_prompt_logits && cb->on_prompt_logits(cb->ud, q->logits, q->n_vocab))
        res->stop = GEN_STOP_CALLER;
    if (rc == 0 && o->n_predict == 0) res->stop = GEN_STOP_LIMIT;
    int32_t id;
    if (rc == 0 && res->stop == GEN_RUNNING) {
        rc = gen_sample(q, smp, &e, &id, err);
        t_first = sl_now();
        st->ttft_s = t_first - t0;
        /* each pass below ends with one sampled token not yet appended */
        while (rc >= 0) {
            if (q->n == q->cap) { /* sampled from the last position: output, but no room to hold it */
                if (rc == 0) rc = emitter_finish(&e, GEN_STOP_CTX, err);
                break;
            }
            if (seq_push(q, &id, 1, err)) rc = -1;
            if (rc != 0) break; /* stopped: the token stays pending */
            if (sp) rc = spec_step(sp, q, smp, &e, &id, err);
            else if ((rc = seq_eval(q, err)) == 0) rc = gen_sample(q, smp, &e, &id, err);
        }
        st->decode_s = sl_now() - t_first;
    }
    if (rc == 0 || rc == 1) rc = emitter_finish(&e, GEN_STOP_LIMIT, err);
    st->generated_tokens = (int64_t)res->n_ids;
    int64_t sampled = (int64_t)res->n_ids + (res->stop == GEN_STOP_EOG);
    st->decode_steps = sampled > 0 ? sampled - 1 : 0;
    stats_finish(st);
    emitter_free(&e);
    return rc < 0 ? -1 : 0;
}
