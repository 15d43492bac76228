/* Multi-head latent attention block (deepseek2), see mla.c. */
#ifndef SLUICE_MLA_H
#define SLUICE_MLA_H

#include "arch/sess.h"

/* xn (T x n_embd, normalised) -> out (T x n_embd). */
int mla_block(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err);

#endif
