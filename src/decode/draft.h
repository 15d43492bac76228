/* Draft proposers for speculative decoding (spec.h verifies what they
 * propose).  A proposer looks at the sequence so far (prompt and generated
 * tokens, the last one sampled but not yet evaluated) and guesses the
 * tokens that follow it, each with the distribution it was drawn from, so
 * that verification at temperature > 0 can keep the target's distribution
 * exactly (spec.c).  A proposal is only ever a guess: whatever it holds
 * (ids the target would never pick, ids outside the target's vocabulary),
 * the output is the target's.
 *
 * Kinds:
 *  - ngram: the continuation of the latest earlier occurrence of the
 *    longest suffix of the sequence (ngram_max .. ngram_min tokens long),
 *    repeating past the end of the sequence; no model, one-hot proposals.
 *  - random: uniformly random ids in [0, range) (tests, and the economics'
 *    worst case); range may exceed the target's vocabulary.
 *  - model: a small draft model with the same vocabulary (draft_model.c). */
#ifndef SLUICE_DRAFT_H
#define SLUICE_DRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode/rng.h"
#include "decode/sampler.h"
#include "util/err.h"

enum { DRAFT_MAX = 16 };   /* most tokens one step drafts */
enum { DRAFT_MATCH_CAP = 32 }; /* the longest match a lookup measures */

typedef enum { DRAFT_NONE = 0, DRAFT_NGRAM, DRAFT_RANDOM, DRAFT_MODEL } draft_kind;

/* What one proposer drafted after the sequence.  q[i] (n_q[i] entries) is
 * the distribution ids[i] was drawn from; n_q[i] == 0 means a point mass on
 * ids[i] (a deterministic proposal, as n-gram lookup and greedy drafts
 * make). */
typedef struct {
    int n;
    int32_t ids[DRAFT_MAX];
    const sl_cand *q[DRAFT_MAX];
    size_t n_q[DRAFT_MAX];
    draft_kind kind[DRAFT_MAX]; /* which proposer drafted it (combined mode) */
    int32_t match; /* a lookup's: how many tokens before the proposal equal the
                    * ones before the text it was read from (<= DRAFT_MATCH_CAP;
                    * 0 for a proposer) */
} draft_proposal;

typedef struct drafter drafter;

typedef struct {
    int32_t ngram_min, ngram_max; /* <= 0: 1 and 4 */
    uint32_t seed;                /* random proposals / draws at temperature > 0 */
    int32_t random_range;         /* DRAFT_RANDOM: ids in [0, range) */
    float p_min;                  /* model drafts stop below this top probability (0: never) */
} drafter_opts;

int drafter_create(drafter **out, draft_kind kind, const drafter_opts *o, sl_err *err);
void drafter_free(drafter *d);
draft_kind drafter_kind(const drafter *d);
/* "ngram", "random", "model", "model+ngram". */
const char *drafter_name(const drafter *d);

/* Proposes at most KMAX (<= DRAFT_MAX) tokens after HIST[0, N) into P with
 * D's proposer, which a step runs when D's lookup (below) found nothing:
 * random ids, or the draft model (whose proposals carry its distributions);
 * nothing for n-gram. */
int drafter_propose(drafter *d, const int32_t *hist, size_t n, int kmax, draft_proposal *p, sl_err *err);

/* The lookup D's proposals start with, which costs next to nothing: n-gram
 * lookup for ngram and for a model (combined mode: the model drafts where
 * the lookup finds nothing), none for random.  Proposes at most KMAX
 * tokens into P (point masses) and returns how many (0: D would draft
 * with its proposer, if it has one). */
int drafter_lookup(const drafter *d, const int32_t *hist, size_t n, int kmax, draft_proposal *p);
/* The n-gram lookup on its own: the KMAX tokens that followed the latest
 * earlier occurrence of the longest suffix of HIST of NMAX .. NMIN tokens,
 * continued past the end of HIST as if the text since the match repeats
 * (8 8 8 proposes 8 8 ...; 1 2 1 2 proposes 1 2 ...).  Returns how many it
 * wrote to OUT: KMAX, or 0 when no suffix occurred earlier.  *MATCH (if
 * not NULL) gets how far back that occurrence agrees with the end of HIST,
 * past the suffix, up to DRAFT_MATCH_CAP tokens (0 when nothing was found). */
int ngram_lookup(const int32_t *hist, size_t n, int32_t nmin, int32_t nmax, int kmax, int32_t *out,
                 int32_t *match);

#endif
