/* The pre-norm decoder layer shared by llama, qwen3 and qwen3moe, and the
 * row helpers every layer uses. */
#ifndef SLUICE_BLOCK_H
#define SLUICE_BLOCK_H

#include "arch/sess.h"

/* xn[t] = rms_norm(x[t]) * w for T rows of n. */
void norm_rows(float *xn, const float *x, const float *w, int T, int64_t n, float eps);
/* x += y over n elements. */
void add_rows(float *x, const float *y, int64_t n);

typedef int (*attn_fn)(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err);

/* The attention half of a pre-norm layer: x += ATTN(attn_norm(x)), then
 * *xn = ffn_norm(x) for the FFN half, with *out (T x n_embd) as its output
 * buffer.  Starts the layer's expert prediction first. */
int layer_attn_half(sl_session *s, int il, const batch *b, attn_fn attn, float **xn, float **out, sl_err *err);

/* The FFN half of a layer, after layer_attn_half: x += a dense FFN (of a
 * MoE model's leading dense layers too: the next layer's experts are
 * predicted while it runs) or the routed experts plus the shared expert
 * if the layer has one (scaled by sigmoid(sh_gate_inp . xn) where it has
 * that gate).  OUT: T x n_embd of scratch. */
int layer_ffn_half(sl_session *s, int il, int T, const float *xn, float *out, sl_err *err);

/* x += attn(norm(x)); x += ffn_or_moe(norm(x)). */
int decoder_layer(sl_session *s, int il, const batch *b, sl_err *err);

#endif
