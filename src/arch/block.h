/* The pre-norm decoder layer shared by llama, qwen3 and qwen3moe, and the
 * row helpers every layer uses. */
#ifndef SLUICE_BLOCK_H
#define SLUICE_BLOCK_H

#include "arch/sess.h"

/* xn[t] = rms_norm(x[t]) * w for T rows of n. */
void norm_rows(float *xn, const float *x, const float *w, int T, int64_t n, float eps);
/* x += y over n elements. */
void add_rows(float *x, const float *y, int64_t n);

/* x += attn(norm(x)); x += ffn_or_moe(norm(x)). */
int decoder_layer(sl_session *s, int il, const batch *b, sl_err *err);

#endif
