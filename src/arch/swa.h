/* Attention with a sliding window and sinks (gpt-oss), over a layer's KV
 * cache whose rows form a ring when the layer is windowed (session.c sizes
 * it: window + max(n_batch, n_rollback) rows rounded to 16, so position p
 * lives in row p % rows and keeps its 16-lane p % 16).
 *
 * Per query at position i the visible keys are max(0, i - window + 1) .. i
 * (window 0: 0 .. i), read in increasing position order; a sink (one logit
 * per head, no value) joins the softmax denominator.  The arithmetic is
 * ggml's for the session's KV mode, as for attn.h: masked cells of
 * llama.cpp's cache contribute exact zeros there, so skipping them gives
 * the same bits as long as every visible score keeps its lane (p % 16). */
#ifndef SLUICE_SWA_H
#define SLUICE_SWA_H

#include "arch/sess.h"

/* Stores k and v (T x Hkv x dk / dv) at the batch's positions in layer IL's
 * cache, then att (T x H x dv) from q (T x H x dk, rotated).  SINKS: H
 * logits or NULL. */
void swa_heads(sl_session *s, int il, const batch *b, const float *q, const float *k, const float *v,
               const float *sinks, float *att);

#endif
