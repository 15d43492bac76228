/* A loaded model and the sessions that run it.
 *
 * model_load reads the GGUF metadata into hyperparameters (exactly as
 * llama.cpp reads them; a missing required key is an error naming it),
 * checks every tensor's presence, type and shape, loads the dense spine into
 * RAM and attaches an expert provider for the routed experts (in-RAM by
 * default; the SSD store replaces it in streaming mode).
 *
 * A session owns one sequence's KV cache and scratch.  session_eval appends
 * tokens and returns logits; a batch of N tokens gives bit-identical logits
 * to N single-token calls (see kernels.h for why), except in the default KV
 * mode for passes of >= 64 tokens, whose attention uses llama.cpp's tiled
 * flash kernel as llama.cpp does for such batches (docs/ARCH.md). */
#ifndef SLUICE_MODEL_H
#define SLUICE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "experts/layout.h"
#include "experts/provider.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "tok/tokenizer.h"
#include "util/err.h"

typedef struct sl_model sl_model;
typedef struct sl_session sl_session;

typedef struct {
    /* Expert provider to use; NULL = load all experts into RAM. The model
     * does not own it unless own_provider is set. */
    expert_provider *provider;
    bool own_provider;
    /* Attach no provider at load: the caller builds one from
     * model_expert_layout() (e.g. the SSD store, sized by the memory plan)
     * and hands it over with model_set_provider() before evaluating. */
    bool defer_experts;
    /* Check every key and tensor and size the spine, but read no weights
     * and attach no provider: for planning (sluice inspect --mem).  Such a
     * model must not be evaluated. */
    bool dry_run;
    /* Every float 2-D weight (the output projection, a tied embedding,
     * attention, dense FFN) is requantized to Q8_0: for a draft model,
     * whose logits only choose proposals (the target verifies them), so its
     * outputs may differ from llama.cpp's while the target's cannot. */
    bool q8_weights;
} model_opts;

int model_load(sl_model **out, const char *path, const model_opts *opts, sl_err *err);
void model_free(sl_model *m);

const gguf_file *model_gguf(const sl_model *m);
const sl_vocab *model_vocab(const sl_model *m);
const char *model_arch(const sl_model *m);
int32_t model_n_vocab(const sl_model *m);
/* The output projection computes only ids [0, N) (N rounded up to a
 * multiple of 16; N <= 0 or past n_vocab - 16: every id) and every other
 * logit reads -INFINITY; returns the ids it computes.  For a draft, whose
 * logits only choose proposals: its head can cost most of a token. */
int32_t model_set_head_rows(sl_model *m, int32_t n);
int32_t model_head_rows(const sl_model *m);
int32_t model_n_ctx_train(const sl_model *m);

int32_t model_n_layer(const sl_model *m);
int32_t model_n_embd(const sl_model *m);
int32_t model_n_expert(const sl_model *m); /* routed experts per MoE layer, 0 if dense */
int32_t model_n_expert_used(const sl_model *m);

/* Where the routed experts live (NULL for dense models). */
const expert_layout *model_expert_layout(const sl_model *m);
/* Loads every routed expert into RAM (after defer_experts). */
int model_attach_ram_experts(sl_model *m, sl_err *err);
/* Replaces the expert provider (the old one is destroyed if owned). */
void model_set_provider(sl_model *m, expert_provider *p, bool own);
expert_provider *model_provider(const sl_model *m);
/* Watches routing as it happens (sluice run --trace-out): the tokens of
 * every evaluated batch, each MoE layer's top-k per position (T x K ids,
 * router-rank order) and each prediction the pilot hints.  Never changes
 * results; the callbacks may be NULL. */
typedef struct {
    void (*tokens)(void *ctx, const int32_t *tokens, int T);
    void (*route)(void *ctx, int layer, const int32_t *ids, int T, int K);
    void (*hint)(void *ctx, int layer, const int32_t *ids, int n);
    void *ctx;
} route_observer;
/* O NULL: stop observing. */
void model_set_route_observer(sl_model *m, const route_observer *o);
/* Bytes of weights held in RAM for the spine (everything but routed experts). */
uint64_t model_spine_bytes(const sl_model *m);
/* Bytes the load added beyond the file's tensor bytes: model_opts.q8_weights'
 * copies less the float matrices they replaced (negative). */
int64_t model_derived_bytes(const sl_model *m);

/* KV cache precision and attention algorithm, as llama.cpp's context
 * parameters type_k/type_v and flash_attn choose them (see docs/ARCH.md). */
typedef enum {
    SL_KV_F16_FLASH = 0, /* f16 cache, flash attention: llama.cpp's CPU default (one-row kernel below 64
                            positions per pass, ggml's tiled kernel from 64 on, as llama.cpp) */
    SL_KV_F32 = 1,       /* f32 cache, softmax attention (type_k = type_v = f32, no flash attn) */
    SL_KV_F16 = 2,       /* f16 cache, softmax attention (flash attn off) */
} sl_kv_mode;

/* Next-layer expert prediction for prefetching (docs/PREFETCH.md).  The
 * router always decides: prediction only issues provider hints and never
 * changes a bit of the output. */
typedef enum {
    SL_PREFETCH_AUTO = 0, /* per layer the predictor with the best recall estimate, off where none pays */
    SL_PREFETCH_OFF = 1,  /* no prediction */
    SL_PREFETCH_NEXT = 2, /* always the pilot: layer L+1's router on layer L's attention residual */
} sl_prefetch_mode;

/* Most tokens one layer-major pass takes when session_opts leaves it 0. */
enum { SESSION_DEFAULT_BATCH = 512 };

typedef struct {
    sl_kv_mode kv_mode;
    /* Most tokens one layer-major pass takes (0: SESSION_DEFAULT_BATCH).  A prompt up
     * to this long is routed as one batch at every layer, so each routed
     * expert is fetched once per layer, not once per micro-batch. */
    int32_t n_batch;
    sl_prefetch_mode prefetch;
    /* Positions behind the newest one that session_rewind must be able to
     * return to without a checkpoint (drafting verifies up to K+1 tokens at
     * a time and keeps a prefix of them).  Free for attention-only models;
     * a recurrent model keeps that many snapshots of its state. */
    int32_t n_rollback;
    /* Checkpoints (session_checkpoint) a recurrent model keeps at most; the
     * oldest is replaced by a new one.  0: one.  Free for attention-only
     * models. */
    int32_t n_checkpoints;
} session_opts;

/* Bytes of KV cache a session of n_ctx tokens with OPTS (NULL: defaults)
 * allocates: kv_mode sets the element size; n_batch and n_rollback size
 * the rings of sliding-window layers. */
uint64_t session_kv_bytes(const sl_model *m, int32_t n_ctx, const session_opts *opts);
/* Upper bound of the scratch a session allocates for passes of up to
 * n_batch tokens with n_ctx context and n_threads threads. */
uint64_t session_scratch_bytes(const sl_model *m, int32_t n_ctx, int32_t n_batch, int n_threads);
/* Scratch this session has allocated so far (never above the bound). */
uint64_t session_scratch_allocated(const sl_session *s);

/* n_ctx: KV capacity in tokens (<= 0: the model's training context). */
int session_create(sl_session **out, sl_model *m, int32_t n_ctx, sl_pool *pool, sl_err *err);
/* Same with options (NULL: defaults, i.e. session_create). */
int session_create_opts(sl_session **out, sl_model *m, int32_t n_ctx, sl_pool *pool, const session_opts *opts,
                        sl_err *err);
void session_free(sl_session *s);
int32_t session_pos(const sl_session *s);   /* tokens held in the KV cache */
int32_t session_n_ctx(const sl_session *s);
int32_t session_n_batch(const sl_session *s); /* most tokens of one pass (session_opts.n_batch) */

/* Appends N tokens at positions pos..pos+N-1.  Writes logits of the last
 * token to LOGITS[n_vocab], or of every token to LOGITS[N * n_vocab] when
 * ALL is set (LOGITS NULL: none, the output projection is skipped).
 * Running past n_ctx is an error (context overflow); on any error the
 * session keeps its previous position. */
int session_eval(sl_session *s, const int32_t *tokens, int32_t n, float *logits, bool all, sl_err *err);
/* session_eval without the output projection, keeping the N positions'
 * final hidden states (N at most session_opts.n_batch: one pass) so that
 * session_logits can project the rows a caller turns out to need: a
 * verification reads its rows in order and stops at the first rejected
 * draft, and each row of the 50k-token head costs about what a position's
 * routed experts do.  Row I of session_logits is bit for bit row I of
 * session_eval's ALL output.  The rows stay available until the next
 * evaluation (a rewind leaves them). */
int session_eval_held(sl_session *s, const int32_t *tokens, int32_t n, sl_err *err);
int session_logits(sl_session *s, int32_t i0, int32_t n, float *logits, sl_err *err);

/* ---- rolling back (rejected drafts, chat edits, reused prefixes) ----
 * Attention layers roll back by forgetting KV entries.  Recurrent layers
 * (Kimi Delta Attention, the gated delta net) hold one fixed-size state per
 * layer that cannot be run backwards, so a session of such a model keeps
 * snapshots of that state: after each of the last session_opts.n_rollback
 * evaluated positions, and at each position marked with session_checkpoint
 * (the end of a chat turn, a prefix the server may reuse).  For models
 * without recurrent layers every position up to session_pos can be restored
 * and checkpoints cost nothing. */

/* Bytes of recurrent state one sequence holds (0 for attention-only
 * models); each snapshot costs as much. */
uint64_t session_state_bytes(const sl_model *m);
/* What a session with options O allocates for it (the --mem planner's
 * figure): the current state, the n_rollback snapshots, one spare (an
 * evaluation never overwrites the state it started from, so a failed one
 * changes nothing) and the checkpoints: session_state_bytes times
 * (n_rollback + 2 + max(1, n_checkpoints)). */
uint64_t session_state_total_bytes(const sl_model *m, const session_opts *o);
/* Whether session_rewind(S, POS) would succeed. */
bool session_can_rewind(const sl_session *s, int32_t pos);
/* Returns the session to the state it had when it held POS tokens
 * (0 <= POS <= session_pos): KV entries at positions >= POS are forgotten
 * and recurrent state is restored from the snapshot at POS.  Fails (state
 * unchanged) when no snapshot of POS is kept. */
int session_rewind(sl_session *s, int32_t pos, sl_err *err);
/* Keeps the state at the current position restorable (until a rewind to
 * before it).  A no-op for attention-only models. */
int session_checkpoint(sl_session *s, sl_err *err);

/* Saved contexts (sluice_state_save / load): the recurrent state at the
 * current position, as bytes with a header that names its geometry and the
 * position (nothing for attention-only models: write emits an empty record
 * and read accepts only that).  The KV entries 0..pos are the caller's to
 * save.  session_state_read sets the session's position to the saved one
 * (KV entries must be restored to match) and drops every snapshot and
 * checkpoint; on a mismatch or a short read it fails and changes nothing. */
int session_state_write(const sl_session *s, FILE *f, sl_err *err);
int session_state_read(sl_session *s, FILE *f, sl_err *err);

/* The predictors of a layer's experts (sl_prefetch_layer.src_*):
 * ATTN:  layer L's norm and router applied to layer L-1's residual after
 *        its attention, hinted while L-1's experts run (the one that overlaps);
 * OUT:   the same on layer L-1's output (for layer 0: the embedding), hinted
 *        just before layer L's attention;
 * PREV:  the experts layer L chose for the previous token;
 * TOKEN: first MoE layer only (it has no ATTN tap): the experts it chose the
 *        last time the same token came in, else OUT's prediction. */
typedef enum {
    SL_PRED_ATTN = 0, SL_PRED_OUT = 1, SL_PRED_PREV = 2, SL_PRED_TOKEN = 3, SL_PRED_COUNT = 4
} sl_pred_source;

/* Prediction figures of one MoE layer, over decode steps (single-token
 * evaluations) only.  P = the experts hinted for the layer (empty when
 * prediction was off there), A = the experts its router chose. */
typedef struct {
    int32_t layer;
    uint64_t steps;                    /* decode steps through this layer */
    uint64_t hinted_steps;             /* ... on which a prediction was hinted */
    uint64_t hits, predicted, actual;  /* sums of |P & A|, |P|, |A| */
    double recall, precision;          /* hits / actual, hits / predicted (0 if empty) */
    uint64_t src_steps[SL_PRED_COUNT]; /* steps on which each predictor was the one hinted */
    double src_recall[SL_PRED_COUNT];  /* each predictor's recall over all steps (all are computed) */
    float est[SL_PRED_COUNT];          /* auto's online recall estimates (-1: no sample yet) */
    double rank_precision[8];          /* of the hinted experts by rank (router order), the first 8 ranks */
    int32_t choice;                    /* predictor auto uses now (sl_pred_source), -1 = off */
} sl_prefetch_layer;

typedef struct {
    sl_prefetch_mode mode;
    uint64_t steps;                   /* decode steps */
    uint64_t hits, predicted, actual; /* over all MoE layers, unpredicted layers included */
    double recall, precision;
    int32_t n_layers;                 /* entries in layers: the MoE layers */
    const sl_prefetch_layer *layers;  /* owned by the session; valid until its next eval or free */
} sl_prefetch_stats;

void session_prefetch_stats(sl_session *s, sl_prefetch_stats *out);
const char *sl_prefetch_mode_name(sl_prefetch_mode m);
int sl_prefetch_mode_parse(const char *name); /* -1 if unknown */
const char *sl_pred_source_name(int src);    /* "attn", "out", "prev", "token"; "off" for -1 */

#endif
