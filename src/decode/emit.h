/* Turning sampled tokens into output, shared by every decoder (plain
 * generation, the server, speculative decoding).
 *
 * A gen_emitter stops at EOG tokens, at the token limit and at stop strings,
 * detokenizes as a stream (bytes of an incomplete UTF-8 sequence wait for the
 * rest) and holds back any tail that could still become a stop string, so a
 * stop string is never shown.  Callbacks see each token and each piece of
 * safe-to-show text. */
#ifndef SLUICE_EMIT_H
#define SLUICE_EMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode/stats.h"
#include "tok/tokenizer.h"
#include "util/err.h"

typedef enum {
    GEN_RUNNING = 0,
    GEN_STOP_EOG,    /* the model produced an end-of-generation token */
    GEN_STOP_LIMIT,  /* n_predict tokens */
    GEN_STOP_STRING, /* a stop string appeared in the text */
    GEN_STOP_CTX,    /* the context is full */
    GEN_STOP_CALLER, /* a callback asked to stop */
} gen_stop;

/* "eog", "limit", "stop", "ctx", "caller" (or "running"). */
const char *gen_stop_name(gen_stop s);

typedef struct {
    int32_t n_predict;        /* at most this many tokens; < 0: until EOG or a full context */
    bool ignore_eog;          /* keep going through EOG tokens */
    const char *const *stops; /* stop strings (empty ones are ignored) */
    size_t n_stops;
    bool logprobs;            /* compute gen_token.logprob for on_token */
    int32_t n_probs;          /* ... and this many alternatives (gen_token.top) */
} gen_opts;

/* A token with its log-probability under the softmax of the model's raw
 * logits (before penalties, temperature or truncation: what llama-server
 * and the OpenAI API report), and the most likely alternatives. */
typedef struct {
    int32_t id;
    float logprob;
} gen_logprob;

typedef struct {
    int32_t id;
    float logprob;          /* 0 when the loop was not asked for log-probabilities */
    const gen_logprob *top; /* best first (ties: lower id); n_top of them */
    int32_t n_top;
} gen_token;

/* Every callback is optional; a nonzero return stops generation
 * (GEN_STOP_CALLER). */
typedef struct {
    void *ud;
    /* Logits of the last prompt position, before the first sample. */
    int (*on_prompt_logits)(void *ud, const float *logits, int32_t n_vocab);
    /* Each token that becomes part of the output, in order. */
    int (*on_token)(void *ud, const gen_token *t);
    /* Output text as it becomes safe to show. */
    int (*on_text)(void *ud, const char *text, size_t len);
    /* The full logit row each output token was sampled from (tests: the
     * rows of drafted and plain decoding must be the same bits). */
    void (*on_logits)(void *ud, const float *logits, int32_t n_vocab);
} gen_callbacks;

typedef struct {
    int32_t *ids;      /* output tokens (an ending EOG is not one) */
    size_t n_ids;
    char *text;        /* NUL-terminated output text, stop string cut */
    size_t len;
    gen_stop stop;
    gen_stats stats;
    size_t ids_cap, text_cap;
} gen_result;

void gen_result_free(gen_result *r);

typedef struct {
    const sl_vocab *vocab;
    gen_opts opts;
    gen_callbacks cb;
    gen_result *res;
    sl_detok detok;
    char *hold;        /* detokenized text not yet shown */
    size_t n_hold, hold_cap;
} gen_emitter;

/* RES is zeroed and filled as tokens arrive; it outlives the emitter. */
void emitter_init(gen_emitter *e, const sl_vocab *v, const gen_opts *o, const gen_callbacks *cb, gen_result *res);
/* Feeds one sampled token.  Returns 0 to continue, 1 when generation has
 * stopped (res->stop says why; held text is flushed), -1 on error. */
int emitter_push(gen_emitter *e, int32_t id, sl_err *err);
/* The same with the token's log-probabilities for on_token. */
int emitter_push_token(gen_emitter *e, const gen_token *t, sl_err *err);
/* The same for a token sampled from LOGITS (n_vocab floats): its
 * log-probabilities come from them when the options ask for them. */
int emitter_push_row(gen_emitter *e, int32_t id, const float *logits, int32_t n_vocab, sl_err *err);
/* Ends generation for REASON (if still running) and shows the held text. */
int emitter_finish(gen_emitter *e, gen_stop reason, sl_err *err);
void emitter_free(gen_emitter *e);

#endif
