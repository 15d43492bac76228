/* The generation loop: the one place where a prompt is evaluated and tokens
 * are sampled, accepted, reported and evaluated in turn.  The public API
 * (src/engine/api.c) drives it, and `sluice run`, `chat` and the server go
 * through the API; output handling (stop strings, streaming text) lives in
 * emit.h so other decoders share it.
 *
 * A gen_seq is what a session's context holds: the evaluated tokens plus
 * the tokens sampled but not evaluated yet.  The last token of a generation
 * is sampled from the logits of the one before it and needs no evaluation
 * to be output, so it stays pending: a later generation or seq_eval
 * evaluates it together with the next prompt, in one batch (which gives the
 * same bits as evaluating it alone, model.h), and a one-shot run never pays
 * a forward pass for a token nobody reads the logits of. */
#ifndef SLUICE_GENERATE_H
#define SLUICE_GENERATE_H

#include "arch/model.h"
#include "decode/emit.h"
#include "decode/sampler.h"

typedef struct {
    sl_session *s;
    int32_t n_vocab;
    int32_t *toks;  /* toks[0, session_pos) are evaluated, toks[session_pos, n) pending */
    size_t n, cap;
    float *logits;  /* next-token logits after the evaluated tokens, when logits_ok */
    bool logits_ok;
} gen_seq;

int seq_init(gen_seq *q, sl_session *s, int32_t n_vocab, sl_err *err);
void seq_free(gen_seq *q);
/* Tokens held that the session has not evaluated yet. */
size_t seq_pending(const gen_seq *q);
/* Appends N tokens as pending; more than the context holds is an error. */
int seq_push(gen_seq *q, const int32_t *ids, size_t n, sl_err *err);
/* Evaluates the pending tokens (q->logits then follow the last).  On
 * failure the session keeps its previous position and the tokens stay
 * pending. */
int seq_eval(gen_seq *q, sl_err *err);
/* Keeps the first N tokens.  Fails (nothing changed) when the session
 * cannot return to that position (recurrent state without a snapshot). */
int seq_rewind(gen_seq *q, size_t n, sl_err *err);
/* Makes Q hold exactly PROMPT: keeps the longest prefix of it that the
 * session has evaluated and can return to, and leaves the rest pending.
 * Something is always left to evaluate unless the logits after the whole
 * PROMPT are at hand.  Returns the number of tokens reused, -1 on error. */
int64_t seq_reuse(gen_seq *q, const int32_t *prompt, size_t n, sl_err *err);

struct spec;

/* Samples a token from Q's logits with SMP, accepts it into SMP's history
 * and hands it to the emitter (not to Q).  Returns the emitter's verdict. */
int gen_sample(gen_seq *q, sl_sampler *smp, gen_emitter *e, int32_t *id, sl_err *err);

/* Evaluates Q's pending tokens (the prompt), then generates with sampler
 * SMP until a stop condition (drafting each step through SP, spec.h, when
 * it is not NULL; the output is the same), reporting through CB and filling RES
 * (timings included).  Every sampled token is accepted by SMP and appended
 * to Q, the last one pending; a token sampled when the context is already
 * full is output but not held (GEN_STOP_CTX).  The caller accepts the
 * prompt into SMP's history (sampler_accept_prompt) if SMP is fresh. */
int generate(const sl_model *m, gen_seq *q, sl_sampler *smp, const gen_opts *o, const gen_callbacks *cb,
             struct spec *sp, gen_result *res, sl_err *err);

#endif
