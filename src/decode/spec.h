/* Speculative decoding: one step drafts K tokens after the pending one
 * (draft.h), evaluates the pending token and the drafts in one batched
 * pass over K + 1 positions (the prefill path: each expert of the union
 * read once per layer), keeps the longest prefix the target agrees with,
 * and rolls the session (KV and recurrent state) back past the rest.  The
 * token after the kept prefix always comes from the target's own logits.
 *
 * Exactness: a batch of K + 1 tokens gives the same logits, bit for bit, as
 * K + 1 single-token evaluations (model.h), so at temperature 0 the output
 * ids and every logit row equal plain decoding's.  At temperature > 0 a
 * draft token x drawn from q is kept with probability min(1, p(x)/q(x)),
 * where p is the target's distribution after the sampling chain (penalties,
 * top-k, top-p, min-p, temperature); on rejection the token is drawn from
 * max(0, p - q) normalised.  That keeps the output distributed exactly as
 * plain sampling (Leviathan et al. 2023, Chen et al. 2023), though not the
 * same draws for a seed.
 *
 * Economics (adaptive K): each step picks the K in [0, k_max] with the most
 * expected tokens per second, from the measured acceptance by depth, the
 * measured cost of drafting a token and the predicted cost of verifying
 * K + 1 positions (draft_cost.h: compute measured per positions, plus the
 * union's experts the cache is expected not to hold, from its hit rate for
 * a position's own experts and for the rest of the union and the measured
 * growth of the union with K, at the store's measured read rate).
 * K = 0 is a plain step.  Acceptance is counted per source: an n-gram
 * lookup costs nothing, so a plain step makes one anyway and checks it
 * against the tokens that follow (a shadow draft); a draft model's is
 * measured again by a probe step after a run of plain ones. */
#ifndef SLUICE_SPEC_H
#define SLUICE_SPEC_H

#include "decode/draft.h"
#include "experts/layout.h"
#include "decode/emit.h"
#include "decode/generate.h"
#include "decode/sampler.h"

typedef struct {
    int32_t k_max;  /* > 0: draft exactly up to this many each step (fixed K); 0: adaptive up to DRAFT_MAX */
    int32_t k_min;  /* fewer drafted tokens than this: a plain step instead (0: 1) */
    uint32_t seed;  /* acceptance draws at temperature > 0 */
    bool wrong_rule; /* tests only: on rejection draw from p instead of max(0, p - q) (biased) */
} spec_opts;

typedef struct {
    int64_t steps;                         /* verification passes */
    int64_t proposed, accepted;            /* drafted tokens, and those kept */
    int64_t plain_steps;                   /* single-token steps taken while drafting was on */
    int64_t shadow_tried, shadow_kept;     /* lookups made at plain steps, checked against the tokens that
                                              followed: depths checked, and those that matched */
    int64_t depth_tried[DRAFT_MAX];        /* verifications that reached depth d (0-based) */
    int64_t depth_accepted[DRAFT_MAX];     /* ... and kept the token there */
    int64_t k_hist[DRAFT_MAX + 1];         /* steps by drafts verified (0: plain; a model draft stopped by --draft-p-min may be shorter than the K chosen) */
    double draft_s, verify_s;              /* proposing; the verification passes and their sampling */
    uint64_t union_expert_bytes;           /* bytes of the distinct experts the verification passes routed to */
    /* the cost model's predictions (draft_cost.h) of the passes it could
     * price (dcost_priced), those passes' measured time and count, and the
     * sum of |predicted - measured| over them */
    double verify_predicted_s, verify_priced_s;
    int64_t priced_steps;
    double verify_abs_err_s;
} spec_stats;

typedef struct spec spec;

/* D is not owned.  N_VOCAB: the target's. */
int spec_create(spec **out, drafter *d, const spec_opts *o, int32_t n_vocab, sl_err *err);
void spec_free(spec *sp);
drafter *spec_drafter(const spec *sp);
/* Starts a generation: restarts the acceptance draws (from the sampler's
 * SEED) and drops the lookups being checked against the tokens (the
 * sequence starts over); what was learned about costs and acceptance stays. */
void spec_begin(spec *sp, uint32_t seed);
/* Counters since the last reset (sluice resets them per generation). */
const spec_stats *spec_get_stats(const spec *sp);
void spec_reset_stats(spec *sp);
/* SUM += D, field by field (bench sums its repetitions). */
void spec_stats_add(spec_stats *sum, const spec_stats *d);
/* The target's expert layout, for union_expert_bytes (NULL: not counted). */
void spec_set_layout(spec *sp, const expert_layout *L);
/* The expert store when experts stream (NULL: in RAM): its cache's
 * residency and measured read rate and waits feed the cost of a pass. */
void spec_set_store(spec *sp, const expert_provider *store);
/* The route observer callback that counts the union of each verification
 * pass's experts (model_set_route_observer; the ctx is the spec). */
void spec_observe_route(void *sp, int layer, const int32_t *ids, int T, int K);

/* One decode step after Q's pending token (sampled, accepted by SMP and
 * emitted): drafts, verifies, emits every kept draft token (appended to Q)
 * and then the target's next token: *ID gets it sampled, accepted by SMP
 * and emitted but not appended, exactly as a plain step (seq_eval, then
 * gen_sample) leaves it; Q's logits follow the last evaluated token.  A
 * step may be a plain one (K = 0).  Returns the emitter's verdict: 0 go on,
 * 1 stopped (at *ID), -1 error. */
int spec_step(spec *sp, gen_seq *q, sl_sampler *smp, gen_emitter *e, int32_t *id, sl_err *err);

#endif
