/* Internal: the session (KV cache, scratch, pool) as the compute blocks see it. */
#ifndef SLUICE_SESS_H
#define SLUICE_SESS_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "arch/attn_simd.h"
#include "arch/rstate.h"

/* One micro-batch: T consecutive tokens at positions pos0 .. pos0+T-1. */
struct batch {
    int T;
    int32_t pos0;
    const float *rope; /* T x n_rot: cos/sin pairs per position (rope_cache) */
};

/* Scratch buffers, grown on demand and reused: after the first batch of a
 * given size no evaluation allocates. */
enum {
    SCR_X, SCR_XN, SCR_ROPE, SCR_Q, SCR_K, SCR_V, SCR_ATT, SCR_OUT,
    SCR_T1, SCR_T2, SCR_T3, SCR_T4,
    SCR_R_LOGITS, SCR_R_IDS, SCR_R_W, SCR_R_SLOTS, SCR_R_COUNT, SCR_R_LIST, SCR_R_GATHER, SCR_R_ROWS,
    SCR_R_VIEWS, SCR_R_JOBS, /* run_experts_all (ffn.c) */
    /* the predictor's own (pilot.c): it runs between a layer's begin and its
     * experts, so it must not touch the layer's buffers */
    SCR_P_XN, SCR_P_LOGITS, SCR_P_W, SCR_P_ATTN, SCR_P_OUT, SCR_P_TOKEN,
    SCR_LIN, /* the linear-attention mixers' (kda.c, gdn.c) */
    SCR_COUNT
};

enum { ACT_A, ACT_B, ACT_C, ACT_P, ACT_COUNT };

typedef struct pilot pilot;

/* What one layer keeps for the session (arch_layer_cache says what).
 * Attention: position p's key row starts at element (p % rows) * k_row of
 * k (rows == n_ctx unless the layer has a window, then a ring).
 * Recurrent: no rows; the state lives in the session's rstate (rstate.h). */
typedef struct {
    layer_cache c;
    int32_t rows;  /* KV rows held (0 for recurrent layers) */
    void *k, *v;   /* v == NULL when c.v_row == 0: values are the first head_v elements of k */
} kv_layer;

struct sl_session {
    sl_model *m;
    sl_pool *pool;
    int n_threads;
    sl_kv_mode kv_mode;
    int32_t n_ctx, pos;
    int32_t n_batch; /* most tokens per layer-major pass */
    int32_t held;    /* rows of the stream session_logits can project (session_eval_held) */
    size_t kv_elt; /* bytes per cached element: 4 (f32) or 2 (f16) */
    kv_layer *kv;
    void *scr[SCR_COUNT];
    size_t scr_cap[SCR_COUNT];
    sl_act act[ACT_COUNT];
    const attn_simd *aop; /* attention inner loops for the pool's ISA */
    float *thr_tmp;       /* per-thread attention scratch */
    size_t thr_tmp_n;
    pilot *pilot;         /* expert prediction (pilot.h); NULL when off */
    rstate *rs;           /* recurrent layers' state (rstate.h); NULL without them */
};

/* Scratch slot SLOT with at least BYTES bytes (64-byte aligned); NULL on OOM. */
void *scr_get(sl_session *s, int slot, size_t bytes, sl_err *err);

/* pool_run, or an inline loop when there is no pool. */
void run_tasks(sl_session *s, int n_tasks, sl_task_fn fn, void *ctx);

/* FN(CTX, i0, i1, thread) over rows [0, N) of a pass: one contiguous share
 * per thread once N reaches ROWS_PARALLEL, else all of them inline.  The
 * per-position work between a pass's products (norms, rope, routing, the
 * experts' weighted sum) ran on the calling thread while the others spun:
 * a quarter of a 17-position pass's time at 2 threads.  Rows never share an
 * output element, so the bits do not depend on the split. */
enum { ROWS_PARALLEL = 4 };
typedef void (*rows_fn)(void *ctx, int i0, int i1, int thread);
void run_rows(sl_session *s, int n, rows_fn fn, void *ctx);

/* Prepares the activation A for weights W unless it already holds these
 * rows converted for W's vec_dot type (caller says so with SAME_INPUT). */
int act_for(sl_session *s, sl_act *a, const sl_mat *w, const float *x, int64_t rows, size_t stride, sl_err *err);

/* Several products y_i = x_i W_i^T in one pool dispatch (rows of all the
 * matrices split into 16-row-aligned tasks), or inline when the work is
 * small.  Each element is computed exactly as matmul computes it.  -1 (err
 * set, nothing computed) when an activation does not fit its weights. */
int matmul_multi(sl_session *s, int n, const sl_mat *const *w, const sl_act *const *x, float *const *y,
                 const size_t *y_stride, sl_err *err);

/* y = x W^T + b over T rows (b may be NULL). */
int linear(sl_session *s, sl_act *a, const sl_mat *w, const float *b, const float *x, int T, float *y, sl_err *err);

/* y_i = x W_i^T for N weights applied to the same T rows of x (n_embd-wide
 * or any width: W_i->ne0), in as few dispatches as the activation
 * conversions allow (one per distinct vec_dot type, up to three at once);
 * y_i has row stride W_i->ne1.  Uses ACT_A..ACT_C. */
int linear_many(sl_session *s, int n, const sl_mat *const *w, const float *x, int T, float *const *y, sl_err *err);

/* Adds bias b[n] to each of T rows of y (row stride n). */
void add_bias(float *y, const float *b, int T, int64_t n);

#endif
