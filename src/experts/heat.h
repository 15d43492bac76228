/* Expert heat: how often each routed expert (layer, expert) is used, kept
 * across runs in a small per-model file (format in docs/HEAT.md).
 *
 * Counts decay with a half-life in forward passes, so old habits fade.  A
 * run records its uses in memory (heat_recorder, fed by the store's begin)
 * and merges them into the file at the end and every so often: under an
 * flock on "<file>.lock" it reads the current file, decays it by the passes
 * this run adds, adds this run's counts, and replaces the file atomically
 * (temp file, fsync, rename, fsync of the directory), so concurrent runs
 * never lose each other's counts and readers never see a torn file.
 *
 * At start-up the heat seeds the cache's LFRU counts and picks the experts
 * of the pinned tier (heat_pick_pins).  A missing, corrupt or foreign file
 * is never fatal: it is ignored and the caller gets one warning message. */
#ifndef SLUICE_HEAT_H
#define SLUICE_HEAT_H

#include <stddef.h>
#include <stdint.h>

#include "experts/cache.h"
#include "gguf/gguf.h"
#include "util/err.h"

enum { HEAT_ID_BYTES = 16 };

/* Default half-life of stored counts, in forward passes. */
#define HEAT_DEFAULT_HALF_LIFE 8192.0

typedef struct {
    uint8_t model_id[HEAT_ID_BYTES];
    int n_layers, n_expert;
    uint64_t passes;      /* forward passes recorded, over all runs */
    double weight;        /* passes decayed like the counts: count/weight is a use rate */
    double half_life;     /* passes; that of the last writer (0 = no decay) */
    int64_t created, updated; /* unix seconds */
    float *count;         /* [n_layers * n_expert] decayed uses */
} heat_table;

int heat_table_init(heat_table *h, const uint8_t id[HEAT_ID_BYTES], int n_layers, int n_expert, sl_err *err);
void heat_table_free(heat_table *h);

/* Estimated probability that (layer, expert) is used in a forward pass. */
double heat_rate(const heat_table *h, int layer, int expert);

/* Share of LAYER's recorded uses that went to EXPERT (0 if none). */
double heat_share(const heat_table *h, int layer, int expert);

/* ---- identity and location ---- */

/* xxh3-128 of the tensor table (names, types, shapes, offsets, split part):
 * the same weights give the same id wherever the file lives. */
void heat_model_id(const gguf_file *g, uint8_t id[HEAT_ID_BYTES]);
void heat_id_hex(const uint8_t id[HEAT_ID_BYTES], char hex[2 * HEAT_ID_BYTES + 1]);

/* $XDG_CACHE_HOME/sluice/<id>.heat, or ~/.cache/sluice/<id>.heat. */
int heat_default_path(const uint8_t id[HEAT_ID_BYTES], char *buf, size_t cap, sl_err *err);
/* "<model>.heat", for keeping the heat beside the model. */
int heat_beside_path(const char *model_path, char *buf, size_t cap, sl_err *err);

/* ---- the file ---- */

typedef enum { HEAT_LOADED = 0, HEAT_ABSENT = 1, HEAT_IGNORED = 2 } heat_status;

/* Loads PATH.  ID (NULL: any) and N_LAYERS x N_EXPERT (0: any) must match.
 * HEAT_ABSENT: no such file (no message).  HEAT_IGNORED: unreadable,
 * corrupt or foreign; WARN names the file and the reason.  On anything but
 * HEAT_LOADED, H is left empty (count NULL). */
heat_status heat_load(heat_table *h, const char *path, const uint8_t *id, int n_layers, int n_expert,
                      sl_err *warn);

/* Replaces PATH with H atomically (no lock: see heat_save_merge). */
int heat_write(const heat_table *h, const char *path, sl_err *err);

/* INTO = INTO decayed by DELTA's passes (at HALF_LIFE) + DELTA. */
void heat_merge(heat_table *into, const heat_table *delta, double half_life);

/* Locks, reads, merges DELTA in, writes.  Creates missing directories.
 * 0: saved.  1: saved, but the old file was ignored (WARN says why).
 * -1: not saved (WARN says why). */
int heat_save_merge(const char *path, const heat_table *delta, double half_life, sl_err *warn);

/* Deletes PATH under its lock.  0: deleted, 1: there was none, -1: error. */
int heat_reset(const char *path, sl_err *err);

/* ---- recording a run ---- */

typedef struct heat_recorder heat_recorder;

int heat_recorder_create(heat_recorder **out, const uint8_t id[HEAT_ID_BYTES], int n_layers, int n_expert,
                         double half_life, sl_err *err);
void heat_recorder_free(heat_recorder *r);

/* The experts LAYER uses in the current pass; a layer at or below the last
 * one seen starts a new forward pass.  Out-of-range ids are ignored. */
void heat_recorder_use(heat_recorder *r, int layer, const int32_t *ids, int n);

/* Forward passes recorded and not yet saved. */
uint64_t heat_recorder_pending(const heat_recorder *r);

/* The unsaved uses as a table of their own (decayed to the latest pass). */
int heat_recorder_snapshot(const heat_recorder *r, heat_table *delta, sl_err *err);

/* Merges the unsaved uses into PATH (heat_save_merge) and, when saved,
 * starts over.  Same return values as heat_save_merge. */
int heat_recorder_flush(heat_recorder *r, const char *path, sl_err *warn);

/* ---- a run's heat, in three calls ---- */

/* Passes between periodic saves during a run. */
#define HEAT_SAVE_EVERY 256

typedef struct {
    char path[4096];
    heat_table table;     /* the persisted heat; count is NULL if there was none */
    heat_recorder *rec;   /* this run's uses: give it to store_config.record */
    uint64_t save_every;  /* passes between saves (HEAT_SAVE_EVERY) */
    int warned;           /* open() already warned about the old file */
} heat_session;

/* Finds the model's heat file (PATH if non-NULL, else heat_default_path),
 * loads it and starts recording.  0: ready.  1: ready, but WARN holds a
 * warning for the user (the old file was ignored).  -1: no heat this run
 * (WARN says why); S is still safe to tick and close. */
int heat_session_open(heat_session *s, const gguf_file *g, const char *path, int n_layers, int n_expert,
                      double half_life, sl_err *warn);

/* Call once per forward pass: saves every save_every passes.  0: nothing
 * to say; 1 or -1: WARN holds a warning (saved with one, or not saved).
 * Replacing the file open() warned about is not warned about again. */
int heat_session_tick(heat_session *s, sl_err *warn);

/* Saves what is left and frees S.  Same returns as heat_session_tick. */
int heat_session_close(heat_session *s, sl_err *warn);

/* ---- using heat ---- */

typedef struct {
    uint64_t min_passes; /* below this much history, pin nothing */
    double layer_cap;    /* most of the pins one layer may take (0..1; 0 = no cap) */
} heat_pin_opts;

heat_pin_opts heat_pin_defaults(void);

/* Picks up to MAX experts to pin, hottest (by use rate) first, never one
 * without recorded uses: KEYS gets layer * n_expert + expert.  Returns how
 * many; NOTE (if non-NULL) says what was pinned or why nothing was. */
int heat_pick_pins(const heat_table *h, int max, const heat_pin_opts *o, int32_t *keys, char *note, size_t cap);

/* Seeds C's use counts with H's rates at the scale C's own counts would
 * reach in steady state (cache half-life CACHE_HALF_LIFE in passes), so
 * the persisted heat is worth what a long warm-up would have taught. */
void heat_seed_cache(const heat_table *h, expert_cache *c, double cache_half_life);

#endif
