#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/generate.h"
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

/* --------------------------------------------------------- log-probs */

enum { MAX_TOP = 64 };

typedef struct {
    gen_logprob top[MAX_TOP];
} logprob_buf;

static bool ahead(float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); }

/* T->logprob of T->id, and the N most likely tokens, under the softmax of
 * the raw LOGITS (log-sum-exp in double, so a 150k vocabulary loses
 * nothing to rounding). */
static void describe(gen_token *t, const float *logits, int32_t n_vocab, int32_t n, logprob_buf *b)
{
    if (n > MAX_TOP) n = MAX_TOP;
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    int32_t k = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        sum += exp((double)logits[i] - mx);
        if (n <= 0 || (k == n && !ahead(logits[i], i, b->top[k - 1].logprob, b->top[k - 1].id))) continue;
        int32_t j = k < n ? k++ : n - 1; /* insertion into the sorted top list */
        while (j > 0 && ahead(logits[i], i, b->top[j - 1].logprob, b->top[j - 1].id)) b->top[j] = b->top[j - 1], j--;
        b->top[j] = (gen_logprob){i, logits[i]};
    }
    double lse = mx + log(sum);
    t->logprob = (float)(logits[t->id] - lse);
    for (int32_t i = 0; i < k; i++) b->top[i].logprob = (float)(b->top[i].logprob - lse);
    t->top = b->top;
    t->n_top = k;
}

/* ---------------------------------------------------------------- loop */

/* Samples the next token from Q's logits and hands it to the sampler's
 * history and the emitter.  Returns the emitter's verdict (0 go on, 1
 * stopped, -1 error). */
static int sample_one(gen_seq *q, sl_sampler *smp, gen_emitter *e, const gen_opts *o, logprob_buf *lb, int32_t *id,
                      sl_err *err)
{
    *id = sampler_sample(smp, q->logits);
    if (*id < 0)
        return sl_errf(err, "sampler: every logit is NaN after %zu tokens (a numerical fault in the model or the engine)",
                       q->n);
    sampler_accept(smp, *id);
    gen_token t = {.id = *id};
    if (o->logprobs) describe(&t, q->logits, q->n_vocab, o->n_probs, lb);
    return emitter_push_token(e, &t, err);
}

int generate(const sl_model *m, gen_seq *q, sl_sampler *smp, const gen_opts *o, const gen_callbacks *cb,
             gen_result *res, sl_err *err)
{
    gen_emitter e;
    emitter_init(&e, model_vocab(m), o, cb, res);
    gen_stats *st = &res->stats;
    size_t pending = seq_pending(q);
    if (!pending && !q->logits_ok) return sl_errf(err, "generate: nothing to generate from (empty prompt)");
    double t0 = sl_now(), t_first = 0, t_last = 0;
    logprob_buf lb;
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
    for (int64_t n = 0; rc == 0 && res->stop == GEN_RUNNING; n++) {
        int32_t id;
        rc = sample_one(q, smp, &e, o, &lb, &id, err);
        t_last = sl_now();
        if (n == 0) t_first = t_last, st->ttft_s = t_last - t0;
        st->decode_steps = n;
        if (rc < 0) break;
        if (q->n == q->cap) { /* sampled from the last position: output, but no room to hold it */
            if (rc == 0) rc = emitter_finish(&e, GEN_STOP_CTX, err);
            break;
        }
        if (seq_push(q, &id, 1, err)) rc = -1;
        if (rc != 0) break; /* stopped: the token stays pending */
        /* SPECULATIVE STEP (the "draft" work, src/decode/draft*): this is
         * where a drafting decoder takes over one step.  With ID pending
         * and the sampler having accepted it, it would draft tokens after
         * ID, evaluate ID and the drafts in one batch (all logits), sample
         * each position with a clone of SMP (sampler_clone /
         * sampler_copy_state), push the accepted tokens through the
         * emitter (emitter_push_token, stopping as it says), seq_rewind
         * past the rejected ones, and leave q->logits after the last
         * evaluated token with one sampled token pending, as below. */
        rc = seq_eval(q, err);
    }
    if (rc == 0 || rc == 1) rc = emitter_finish(&e, GEN_STOP_LIMIT, err);
    st->generated_tokens = (int64_t)res->n_ids;
    st->decode_s = t_last - t_first;
    stats_finish(st);
    emitter_free(&e);
    return rc < 0 ? -1 : 0;
}
