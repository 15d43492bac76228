/* The cost of a speculative step's verification, predicted before it runs
 * (docs/DRAFT.md, "Choosing K").  A pass over n positions costs
 *
 *     T(n) = C(n) + beta * missing_bytes(n, m) / rate
 *
 * C(n): the step's seconds not spent waiting for expert reads (compute and
 *   sampling): the plain step's measured now, C(1), times the ratio of a
 *   pass over n positions to the plain step measured at the time (a
 *   down-quick, up-slow average once seen twice, else a weighted
 *   least-squares line through the plain step's 1 and the n seen twice),
 *   since text whose positions share experts makes both cheaper together.
 * missing_bytes(n, m): the union's experts the cache will not hold, per
 *   MoE layer  k (1 - h1) + (u(m) - k) (1 - hx)  experts of expert_bytes
 *   each (one expert of every MoE layer):  k the experts a position routes
 *   to, h1 the share of a position's own experts the cache held (or was
 *   reading) when the router asked: the hit rate for the next token, which
 *   every step, plain or drafted, measures; m the distinct tokens among the
 *   n positions (n when the drafts are not known yet); u(m) the distinct
 *   experts passes over m distinct tokens routed to, learned from past
 *   verifications (the union's growth is a property of the model's routing,
 *   not of the cache: an unmeasured m gets uniform routing's
 *   E (1 - (1 - k/E)^m) scaled by the overlap seen at the nearest measured
 *   m); hx the hit share of the union's experts beyond the first position's
 *   (rarer experts, fewer hits; it leans on h1 until four passes measured
 *   it, the first ones finding the cache cold).  Distinct tokens, not positions: a token
 *   routes much as it did a position before, so a pass over a run of one
 *   repeated token (code's indentation, a list's numbering) reads little
 *   more than one position's experts, where uniform growth over positions
 *   priced 17 positions of spaces at 60 ms against a plain step's 0.5
 *   (tinymoe, 25% cached) and drafting stopped there.
 * rate: the store's measured read rate while busy (0: experts in RAM, no
 *   reads); beta(n): the seconds a step over n positions waited per second
 *   of its missing reads (reads overlap compute, more of it as n grows, and
 *   each other), its mean wait over its mean reading: measured per n, the
 *   nearest measured n's until seen, 1 before any.
 *
 * Pure arithmetic over what it is told, so tests drive it with synthetic
 * measurements. */
#ifndef SLUICE_DRAFT_COST_H
#define SLUICE_DRAFT_COST_H

#include <stdbool.h>
#include <stdint.h>

enum { DCOST_MAX_POS = 17 }; /* positions a pass verifies at most (DRAFT_MAX + 1) */

typedef struct {
    double v;
    int64_t n;
} dcost_avg; /* an exponential moving average and its sample count */

typedef struct {
    double wait, read; /* seconds waited and seconds of reading missed, averaged alike */
    int64_t n;
} dcost_ratio; /* waits per read second: the ratio of the two averages */

enum { DCOST_RECENT = 8 };
typedef struct {
    double v;     /* the median of the recent samples (of the first two, their minimum) */
    int64_t n;    /* samples seen */
    double s[DCOST_RECENT]; /* the last DCOST_RECENT of them, a ring */
} dcost_med;

typedef struct {
    int n_used, n_expert;   /* experts per position and per MoE layer */
    double expert_bytes;    /* bytes of one expert in every MoE layer */
    double rate;            /* bytes/s while reading (0: nothing is read) */
    dcost_med c[DCOST_MAX_POS + 1]; /* seconds not waiting, per positions */
    dcost_med r[DCOST_MAX_POS + 1]; /* ... over the plain step's when measured (r[1] = 1) */
    dcost_avg u[DCOST_MAX_POS + 1]; /* distinct experts per MoE layer, per positions */
    dcost_ratio beta[DCOST_MAX_POS + 1]; /* read waits per read second, per positions */
    dcost_ratio beta_pass;               /* ... over every pass of 2 or more positions */
    dcost_avg h1, hx;
} draft_cost;

/* N_USED, N_EXPERT: 0 for a dense model (nothing is ever read). */
void dcost_init(draft_cost *c, int n_used, int n_expert, double expert_bytes);
void dcost_set_rate(draft_cost *c, double bytes_per_s);

/* A pass over N_POS positions holding N_TOK distinct tokens routed DISTINCT
 * experts per MoE layer on average; of the first position's experts a
 * share FIRST_HIT was held, of the others (if any) EXTRA_HIT. */
void dcost_observe_routes(draft_cost *c, int n_pos, int n_tok, double distinct, double first_hit, double extra_hit);
/* A step over N_POS positions took SECONDS, WAIT_S of them waiting for
 * reads, and MISSING_BYTES of its experts were not held. */
void dcost_observe_time(draft_cost *c, int n_pos, double seconds, double wait_s, double missing_bytes);

double dcost_union(const draft_cost *c, int n_tok);         /* u(m) */
double dcost_missing_bytes(const draft_cost *c, int n_tok); /* missing_bytes for m = N_TOK */
double dcost_compute(const draft_cost *c, int n_pos);       /* C(n) */
double dcost_predict(const draft_cost *c, int n_pos);       /* T(n), m = n */
double dcost_predict_tok(const draft_cost *c, int n_pos, int n_tok); /* T(n) for m = N_TOK */
/* Whether C has measured any pass it could price a pass from: before that
 * dcost_compute returns a yardstick (seconds of arbitrary scale) that only
 * ranks sizes, and is no prediction of a time. */
bool dcost_priced(const draft_cost *c);

/* The K in {0} u [K_MIN, K_MAX] with the most tokens per second: K = 0
 * yields 1 token in T(1); K drafts yield TOKENS[K] (expected) in
 * T(K + 1) + K * DRAFT_S, the pass over N_TOK[K] distinct tokens (NULL:
 * K + 1).  Drafting must beat the plain step by MARGIN (a factor) to be
 * chosen. */
int dcost_choose(const draft_cost *c, const double *tokens, const int *n_tok, double draft_s, int k_min, int k_max,
                 double margin);

#endif
