/* Plain autoregressive generation on a session: evaluate the prompt, then
 * sample / emit / evaluate one token at a time.  `sluice run` and `sluice
 * chat` use it; output handling lives in emit.h so other decoders share it. */
#ifndef SLUICE_GENERATE_H
#define SLUICE_GENERATE_H

#include "arch/model.h"
#include "decode/emit.h"
#include "decode/sampler.h"

/* Evaluates PROMPT (appended to what session S of model M holds; n_prompt >= 1), then
 * generates with sampler SMP until a stop condition.  Fills RES, including
 * timings.  The last sampled token is not evaluated into the session. */
int generate(const sl_model *m, sl_session *s, sl_sampler *smp, const int32_t *prompt, size_t n_prompt,
             const gen_opts *o, const gen_callbacks *cb, gen_result *res, sl_err *err);

#endif
