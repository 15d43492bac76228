/* Saved contexts: a session's tokens and state in one file, tagged with the
 * model's identity (tensor table and a sample of its data) and the state
 * layout, and closed by an xxh3 checksum of every byte before it.  Loading
 * checks all of it before the session is touched, so a damaged file, a
 * truncated one or one of another model is refused with the context left
 * as it was. */
#ifndef SLUICE_ENGINE_STATE_H
#define SLUICE_ENGINE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* Writes the context's N TOKENS and the state of the positions the session
 * has evaluated (the first session_pos of them; the rest are pending) to
 * PATH (through PATH.tmp and a rename, so a crash leaves no half file). */
int engine_state_save(sl_engine *e, const int32_t *tokens, size_t n, const char *path, sl_err *err);
/* Restores PATH into the session; *TOKENS (malloc'd, *N of them) gets the
 * tokens it holds, of which the session then has evaluated *N_EVAL. */
int engine_state_load(sl_engine *e, const char *path, int32_t **tokens, size_t *n, int32_t *n_eval, sl_err *err);
/* The tokens of PATH if its header says it belongs to this model and
 * session layout (the checksum is checked only when loading). */
int engine_state_peek(sl_engine *e, const char *path, int32_t **tokens, size_t *n, sl_err *err);

#endif
