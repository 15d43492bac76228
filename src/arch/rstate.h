/* Recurrent state of one sequence: the fixed-size state of every recurrent
 * layer (Kimi Delta Attention, the gated delta net: a short-convolution
 * window and the delta-rule matrices), with the snapshots that make earlier
 * positions restorable.
 *
 * The state lives in a ring of n_rollback + 2 slots, each a whole copy (all
 * recurrent layers).  Evaluating token t reads its layer's state from the
 * slot of position p and writes the updated state into the slot of
 * position p + 1 instead of in place: the recurrence touches the same
 * memory either way, so the snapshot after every position costs no copy
 * and no time, only the slot's memory.  An evaluation never writes into the
 * slot of the position it started from, so a failed one leaves the current
 * state as it was (only the older snapshots it began to overwrite are lost).  After an evaluation from position P0 to P, the states
 * at P0 and at max(P0 + 1, P - n_rollback) .. P are kept (drafting verifies
 * K + 1 tokens at once and keeps a prefix of them), as are older ones while
 * the ring has room; a rewind drops only the positions after its target.
 * Checkpoints are copies kept apart from the ring (the end of a chat turn, a
 * prefix to reuse); position 0 (the zero state) is always restorable.
 *
 * Positions here are token counts, as session_pos: "the state at P" is the
 * state after the first P tokens. */
#ifndef SLUICE_RSTATE_H
#define SLUICE_RSTATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

typedef struct rstate rstate;

/* LAYER_FLOATS[il]: floats of layer il's state (0: not recurrent).  Keeps
 * the last N_ROLLBACK + 1 positions, and up to N_CKPT checkpoints. */
int rstate_create(rstate **out, int32_t n_layer, const int64_t *layer_floats, int32_t n_rollback, int32_t n_ckpt,
                  sl_err *err);
void rstate_free(rstate *r);

/* Bytes of one state (all layers); states a ring + checkpoints hold. */
uint64_t rstate_one_bytes(int32_t n_layer, const int64_t *layer_floats);
int64_t rstate_n_states(int32_t n_rollback, int32_t n_ckpt);

int32_t rstate_pos(const rstate *r);
/* Layer IL's state at the current position (outside an evaluation). */
const float *rstate_current(const rstate *r, int il);

/* An evaluation of N tokens after the current position: positions
 * pos0 + 1 .. pos0 + N get slots.  Between begin and end, rstate_at gives
 * layer IL's state at any position P in [pos0, pos0 + N]; the state at pos0
 * must only be read. */
void rstate_begin(rstate *r, int32_t n);
float *rstate_at(rstate *r, int il, int32_t pos);
/* OK: the new position is pos0 + N.  Else the state at pos0 is current again
 * and the slots the evaluation wrote are dropped. */
void rstate_end(rstate *r, bool ok);

bool rstate_can_rewind(const rstate *r, int32_t pos);
/* Makes the state at POS (<= the current position) current; every snapshot
 * and checkpoint after POS is dropped.  -1 when POS is not kept. */
int rstate_rewind(rstate *r, int32_t pos);
/* Keeps a copy of the current state (replaces the oldest checkpoint when all
 * are taken; nothing to do when the position already has one). */
void rstate_checkpoint(rstate *r);

/* The current state as bytes: a header (magic, layer count, each layer's
 * size, the position) then the floats.  R may be NULL (a model without
 * recurrent layers): a header of zero layers and POS.  read checks every
 * field against R's geometry and, on success, makes the saved state the
 * current one and the only one kept besides position 0; *POS gets the
 * saved position.  A mismatch or a short read changes nothing. */
int rstate_write(const rstate *r, int32_t pos, FILE *f, sl_err *err);
int rstate_read(rstate *r, FILE *f, int32_t *pos, sl_err *err);

#endif
