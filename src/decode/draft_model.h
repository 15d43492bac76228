/* A draft model proposing for a target of the same vocabulary (draft.h):
 * a small GGUF model in RAM with its own session, kept in step with the
 * target's sequence (on each proposal it rewinds to the longest prefix it
 * shares with the sequence, evaluates the rest in one batch, then drafts
 * one token at a time).  At temperature 0 it proposes its argmax (a point
 * mass); at temperature > 0 it draws from its own chain (the target's
 * top-k / top-p / min-p / temperature, no penalties) and reports that
 * distribution for the acceptance test. */
#ifndef SLUICE_DRAFT_MODEL_H
#define SLUICE_DRAFT_MODEL_H

#include "arch/model.h"
#include "decode/draft.h"
#include "decode/rng.h"
#include "decode/sampler.h"

typedef struct draft_model draft_model;

/* Whether the vocabularies of gguf files A (target) and B (draft) are the
 * same: token texts, token types, merges, tokenizer model and
 * pre-tokenizer.  0: the same; 1: different, with WHY saying exactly how
 * (the first differing id and both pieces); -1: an error reading them. */
int draft_vocab_compare(const gguf_file *a, const gguf_file *b, char *why, size_t cap, sl_err *err);

/* Loads PATH (all in RAM) with a session of N_CTX tokens on POOL (shared
 * with the target: they never run at once).  A draft of another
 * vocabulary (draft_vocab_compare) is an error unless CROSS, which makes it
 * a cross-vocabulary draft: it reads the sequence as text re-tokenized
 * with its own vocabulary (rolled back and re-synced to the accepted text
 * on every proposal), drafts greedily, and proposes only the whole target
 * tokens its text fixes: the target's tokenization of the last target
 * tokens' text followed by the draft's text must start with those tokens,
 * and its last token (which more text could still change) is left out.
 * VOCAB: the draft proposes only its ids [0, VOCAB) (model_set_head_rows);
 * 0: draft_auto_vocab's choice; -1: every id. */
int draft_model_open(draft_model **out, const char *path, const sl_model *target, sl_pool *pool, int32_t n_ctx,
                     float p_min, int32_t vocab, bool cross, sl_err *err);
/* The ids a draft of model M proposes from when the user names no number:
 * as many as make its head weigh what the rest of its weights do, at least
 * DRAFT_VOCAB_MIN (every id when its layers outweigh its head). */
int32_t draft_auto_vocab(const sl_model *m);
#define DRAFT_VOCAB_MIN 8192
/* How the vocabularies differ when DM drafts across them, else NULL. */
const char *draft_model_xvocab(const draft_model *dm);
void draft_model_free(draft_model *dm);
/* An upper bound of the RAM a draft model of PATH takes for a target
 * context of N_CTX tokens on THREADS threads (weights, KV, state, scratch):
 * what a --mem budget sets aside for it. */
int draft_model_ram_bytes(const char *path, int32_t n_ctx, int threads, uint64_t *out, sl_err *err);
const sl_model *draft_model_model(const draft_model *dm);
/* The sampling chain proposals are drawn with (temp <= 0: argmax). */
int draft_model_set_sampling(draft_model *dm, const sampler_params *p, sl_err *err);

/* Up to KMAX tokens after HIST[0, N) (the last token included); RNG draws
 * at temperature > 0.  Fills P (ids, q, kind DRAFT_MODEL). */
int draft_model_propose(draft_model *dm, const int32_t *hist, size_t n, int kmax, sl_rng *rng, draft_proposal *p,
                        sl_err *err);

/* Gives D (draft.h) its model (owned from then on; NULL: none). */
void drafter_set_model(drafter *d, draft_model *dm);
draft_model *drafter_model(const drafter *d);

#endif
