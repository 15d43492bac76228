/* The pieces shared by the linear-attention layers (Kimi Delta Attention,
 * kda.c; the gated delta net, gdn.c): the causal short convolution with its
 * window, L2 normalisation, and one step of the gated delta rule, each
 * computed with ggml-cpu's operations in its order (the delta rule as
 * GGML_OP_GATED_DELTA_NET, which llama.cpp runs for a prompt and for a
 * single token alike).
 *
 * Every function works on one token: the recurrence is sequential in the
 * tokens, so a batch is these steps in order and gives the bits of one
 * token at a time.  (The chunked form of the delta rule, 16 or 64 tokens
 * by matrix products, is the same function of the inputs but not the same
 * float operations; llama.cpp's CPU path does not use it either.) */
#ifndef SLUICE_DELTA_H
#define SLUICE_DELTA_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/attn_simd.h"
#include "arch/sess.h"

/* Causal depthwise convolution of one token over C channels with K taps:
 * out[c] = sum_j w[c*K + j] * u_j[c], where u_0..u_{K-2} are the previous
 * inputs held in WIN_IN (channel-major, K-1 per channel, oldest first) and
 * u_{K-1} = x[c]; the products are summed in tap order by fused multiply-
 * adds (ggml_ssm_conv as GCC contracts it).  WIN_OUT gets the window for
 * the next token (it may be WIN_IN); OUT may be X.  No bias.  OP picks the
 * ISA build (attn_simd.conv_step); every build gives the same bits. */
void dn_conv_step(const attn_simd *op, const float *w, int K, int64_t C, const float *win_in, float *win_out,
                  const float *x, float *out);

/* x[i] = silu(x[i]) as ggml_vec_silu_f32: ggml's vector expf for each full
 * group of 16, libm expf for the rest. */
void dn_silu(float *x, int64_t n);
/* x /= max(||x||, eps), the sum of squares in double (ggml_l2_norm). */
void dn_l2_norm(float *x, int n, float eps);
float dn_sigmoid(float x);  /* 1 / (1 + expf(-x)) */
float dn_softplus(float x); /* x > 20 ? x : logf(1 + expf(x)) */

/* One token of the gated delta rule for one head of size d.  The state is
 * a d x d matrix S[i][j] (i: key dimension, j: value dimension) stored
 * transposed, row j = S[.][j], as ggml stores it; S_IN is the state before
 * the token, S_OUT receives the state after it (it may be S_IN):
 *   S <- diag(exp(g)) S   (G has d values, or one when !PER_CHANNEL)
 *   delta = beta (v - S^T k);  S <- S + k delta^T;  o = S^T q / sqrt(d).
 * TMP: d floats. */
void dn_delta_step(const attn_simd *op, const float *s_in, float *s_out, int d, const float *q, const float *k,
                   const float *v, const float *g, bool per_channel, float beta, float *o, float *tmp);

/* ---- the two layer mixers built from these (kda.c, gdn.c) ----
 * xn (T x n_embd, normalised) -> out (T x n_embd); the layer's state is read
 * at b->pos0 + t and written at b->pos0 + t + 1 (rstate.h). */
int kda_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err);
int gdn_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err);
/* Bytes of state one layer of each kind keeps. */
uint64_t kda_state_bytes(const hparams *hp);
uint64_t gdn_state_bytes(const hparams *hp);
/* Scratch (SCR_LIN) each mixer takes for T tokens. */
uint64_t kda_scratch_bytes(const hparams *hp, int64_t T);
uint64_t gdn_scratch_bytes(const hparams *hp, int64_t T);
/* Scratch (SCR_LIN) the mixers take for passes of N_BATCH tokens, for the
 * kinds the model's recurrent layers use (an arch_ops.scratch_bytes). */
uint64_t dn_scratch_bytes(const sl_model *m, int32_t n_ctx, int32_t n_batch);

#endif
