/* Gated attention block (Qwen3.5), see gattn.c. */
#ifndef SLUICE_GATTN_H
#define SLUICE_GATTN_H

#include "arch/sess.h"

/* xn (T x n_embd, normalised) -> out (T x n_embd). */
int gattn_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err);
/* Scratch (SCR_LIN) it takes for T tokens. */
uint64_t gattn_scratch_bytes(const hparams *hp, int32_t n_batch);

#endif
