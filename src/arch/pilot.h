/* Next-layer expert prediction ("pilot" prefetch; docs/PREFETCH.md).
 *
 * While layer L-1's experts are being read and applied, layer L's ffn_norm
 * and router (the real routing code: gating, selection bias, group-limited
 * top-k) run on L-1's residual after attention; the predicted experts go to
 * the provider as a hint, so the store can read them at low priority while
 * L-1 computes.  Two more predictors are computed every step for comparison
 * and for auto mode: the same router on L-1's output (ready only just before
 * L's attention) and the experts L chose for the previous token.  Auto keeps
 * an online recall estimate of each per layer and hints the best, or nothing
 * where none pays.  The first MoE layer has no earlier tap; there a table
 * of the experts each token id got last time does better than the pilot
 * on the embedding.  Predictions only ever become hints: the router of layer
 * L still decides, so no mode changes a bit of the output.
 *
 * The hooks, in the order a layer calls them:
 *   pilot_layer_start  before L's attention (OUT tap for L)
 *   pilot_observe      after L's router (scores every prediction for L)
 *   pilot_attn_tap     after L's begin, before its first next() (ATTN tap for L+1)
 */
#ifndef SLUICE_PILOT_H
#define SLUICE_PILOT_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/sess.h"

/* Auto mode: a layer gets no hint while its best estimate is below this
 * recall.  With as many experts hinted as the router picks, precision
 * equals recall, so below 1/2 more of the prefetched bytes are wasted than
 * used: every wrong guess costs a demand read's worth of bandwidth. */
#define PILOT_MIN_RECALL 0.5f
/* The OUT tap is hinted later (after L-1's experts, not during them), so
 * auto takes it over an earlier predictor only when it is clearly better. */
#define PILOT_LATE_MARGIN 0.10f
/* Estimate: running mean over the first samples, then an exponential
 * moving average with this weight (a half-life of about 11 positions). */
#define PILOT_EMA_ALPHA (1.0f / 16.0f)

/* NULL (and 0) for SL_PREFETCH_OFF or a model without routed experts. */
int pilot_create(pilot **out, const sl_model *m, sl_prefetch_mode mode, sl_err *err);
void pilot_free(pilot *p);
/* Bytes pilot_create allocates for model M (the token table is most of it). */
uint64_t pilot_bytes(const sl_model *m);

/* A new micro-batch of the T TOKENS (kept until its last layer); DECODE:
 * it is a single-token evaluation (only those count in the statistics). */
void pilot_ubatch(pilot *p, const int32_t *tokens, int T, bool decode);

int pilot_layer_start(sl_session *s, int il, sl_err *err);
int pilot_attn_tap(sl_session *s, int il, sl_err *err);
/* IDS: the router's choice at layer IL, T x K in rank order. */
void pilot_observe(sl_session *s, int il, const int32_t *ids);

void pilot_stats(pilot *p, sl_prefetch_stats *out);

/* ---- the estimator and auto's choice (exposed for tests) ---- */

/* Folds one sample X (a recall in [0, 1]) into the estimate *EST made of *N samples. */
void pilot_est_update(float *est, int64_t *n, float x);
/* The predictor auto hints for a layer given the estimates of each source
 * (n[i] == 0: no sample yet); HAS_ATTN: the layer has an ATTN tap (not the
 * first layer).  Returns an sl_pred_source or -1 (no hint). */
int pilot_choose(const float est[SL_PRED_COUNT], const int64_t n[SL_PRED_COUNT], bool has_attn);

#endif
