/* Token sampling, the way llama.cpp's default chain does it.
 *
 * Chain (llama-cli's default order with its no-op stages left out):
 *   penalties -> top-k -> top-p -> min-p -> temperature -> draw from the softmax.
 * Penalties (repeat, frequency, presence over the last repeat_last_n tokens
 * of the sequence) change the logits of the tokens in that window, with
 * llama.cpp's arithmetic: a logit <= 0 is multiplied by the repeat penalty,
 * a positive one divided, then count * frequency + presence is subtracted.
 * Each stage works on the candidates the previous one left, with the same
 * float arithmetic as llama.cpp, and the draw uses the same MT19937 stream
 * (rng.h), so a fixed seed picks what llama.cpp picks for the same logits.
 * One deliberate difference: candidates with equal logits are ordered by
 * lower id (llama.cpp leaves that to std::partial_sort).
 *
 * Temperature <= 0 is greedy: the argmax (after the penalties), ties going
 * to the lowest id.
 *
 * A grammar (sampler_set_grammar) constrains the tokens as llama.cpp's
 * common sampler does: the chain first picks from the unconstrained logits,
 * and if the grammar allows that token it is the answer; otherwise every
 * token the grammar refuses gets logit -inf and the chain picks again.  For
 * greedy sampling that is the argmax of the allowed tokens.  End-of-
 * generation tokens are allowed only where the grammar can end, control
 * tokens (no text) never.  If the grammar allows nothing at all, the
 * vocabulary's first end-of-generation token is returned. */
#ifndef SLUICE_SAMPLER_H
#define SLUICE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode/grammar.h"
#include "decode/rng.h"
#include "util/err.h"

typedef struct {
    float temp;     /* <= 0: greedy */
    int32_t top_k;  /* <= 0: off */
    float top_p;    /* >= 1: off */
    float min_p;    /* <= 0: off */
    int32_t min_keep; /* top-p / min-p keep at least this many (0 = 1) */
    uint32_t seed;
    float repeat_penalty;    /* 1: off */
    int32_t repeat_last_n;   /* tokens of history the penalties look at; <= 0: off */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */
} sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 0,
 * penalties off (repeat 1 over the last 64 tokens, frequency 0, presence 0). */
sampler_params sampler_defaults(void);

/* One candidate token: its logit after the stages so far and, once a stage
 * has computed it, its probability. */
typedef struct {
    int32_t id;
    float logit;
    float p;
} sl_cand;

typedef struct sl_sampler sl_sampler;

int sampler_create(sl_sampler **out, const sampler_params *p, int32_t n_vocab, sl_err *err);
void sampler_free(sl_sampler *s);
const sampler_params *sampler_get_params(const sl_sampler *s);
/* Restarts the random stream (same seed -> same draws). */
void sampler_reseed(sl_sampler *s, uint32_t seed);

/* Constrains the chain by the grammar state M from now on (the sampler
 * owns M; its history starts there).  T describes the vocabulary and must
 * outlive the sampler and its clones. */
int sampler_set_grammar(sl_sampler *s, gram_state *m, const gram_tokens *t, sl_err *err);

/* Tells the sampler that the generated token ID became part of the
 * sequence.  Stages that depend on the history (repetition penalties, a
 * grammar) read it; sampler_sample does not accept by itself, because a
 * drafted token is sampled at a position that may be rolled back. */
void sampler_accept(sl_sampler *s, int32_t id);
/* Prompt (or earlier context) tokens: they enter the penalty history but do
 * not advance a grammar (llama.cpp's common_sampler_accept with
 * accept_grammar false). */
void sampler_accept_prompt(sl_sampler *s, const int32_t *ids, size_t n);
/* A sampler with the same parameters, history and random stream, for
 * evaluating the chain at positions ahead of the accepted one (drafting). */
int sampler_clone(sl_sampler **out, const sl_sampler *s, sl_err *err);
/* Copies SRC's history and random stream into DST (made by sampler_clone
 * of the same sampler, or of one with the same parameters); no allocation. */
void sampler_copy_state(sl_sampler *dst, const sl_sampler *src);

/* Picks the next token from LOGITS[n_vocab]; -1 when every logit is NaN
 * (a numerical fault upstream: never a plausible token 0). */
int32_t sampler_sample(sl_sampler *s, const float *logits);

/* Runs the chain up to (not including) the draw and returns the surviving
 * candidates with their final probabilities (valid until the next call).
 * For greedy samplers that is the single argmax with p = 1.  0 candidates
 * when every logit is NaN. */
size_t sampler_candidates(sl_sampler *s, const float *logits, const sl_cand **out);

/* Index of the largest of N values; ties go to the lowest index; NaN values
 * are skipped, and -1 when all N are NaN (or N is 0). */
int32_t sampler_argmax(const float *logits, int32_t n);

#endif
