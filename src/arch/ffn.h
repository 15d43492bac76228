/* Feed-forward blocks: the dense SwiGLU FFN and the routed mixture of
 * experts (router, top-k, experts through the provider, fixed-order sum). */
#ifndef SLUICE_FFN_H
#define SLUICE_FFN_H

#include "arch/sess.h"

/* out = down(silu(gate x + bg) * (up x + bu)) + bd for T rows of xn.
 * gate may be absent (data NULL): then silu(up x). */
int ffn_block(sl_session *s, const sl_mat *gate, const sl_mat *up, const sl_mat *down, const float *bg,
              const float *bu, const float *bd, const float *xn, int T, float *out, sl_err *err);

/* Routed experts of layer IL for T rows of xn; out = sum over router rank
 * k = 0..K-1 of w_k * expert_k(x), added in that order. */
int moe_block(sl_session *s, int il, int T, const float *xn, float *out, sl_err *err);

/* The router decision for one row (exposed for tests): expert ids and
 * weights in rank order, from router logits (n_expert values; clobbered).
 * WORK: moe_route_work_bytes(hp) bytes, float-aligned. */
void moe_route(const hparams *hp, const layer_w *L, float *logits, int32_t *ids, float *w, void *work);
size_t moe_route_work_bytes(const hparams *hp);

#endif
