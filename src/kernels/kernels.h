/* Compute kernels: quantised matrix products and the element-wise ops of a
 * transformer layer.
 *
 * Numerics contract (the reason this module exists in this shape):
 *  1. Activations are converted exactly as ggml's CPU backend does before a
 *     dot product with a weight of type W (its "vec_dot_type"): F32 -> f32,
 *     F16 -> f16, BF16 -> bf16, Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4 -> Q8_0,
 *     Q4_1/Q5_1 -> Q8_1, K-quants/IQ4_XS -> Q8_K.  That is what makes routing
 *     and logits match llama.cpp on quantised MoE models.
 *  2. Every output element y[t][r] = dot(W row r, activation row t) is a pure
 *     function of those two rows: fixed reduction order, independent of the
 *     number of rows or tokens in the call, of tiling, of the thread count and
 *     of the ISA path (scalar, AVX2, AVX-512 give bit-identical results).
 *     Integer partial sums are exact; the float accumulation order per element
 *     is the one documented in docs/KERNELS.md and emulated by the scalar path.
 *  This is what makes prefill, decode, speculative verification and any
 *  thread count produce bit-identical logits. */
#ifndef SLUICE_KERNELS_H
#define SLUICE_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/ggml_type.h"
#include "kernels/pool.h"
#include "util/err.h"

/* Which of llama.cpp's float summation orders F16/BF16 weights follow
 * (docs/KERNELS.md): its dense products (llamafile sgemm) or its per-row
 * vec_dot, which mul_mat_id uses for MoE experts.  Quantised types and F32
 * ignore it. */
enum { SL_ORDER_SGEMM = 0, SL_ORDER_VEC_DOT = 1 };

/* How a matrix's bytes are arranged: GGUF's rows, or (Q8_0 only, made by
 * mat_interleave) groups of 16 rows interleaved for the SIMD kernels. */
enum { SL_LAYOUT_ROWS = 0, SL_LAYOUT_Q8_0_R16 = 1 };

/* A weight matrix: ne1 rows of ne0 elements, in GGUF layout rows row_bytes
 * apart (an interleaved layout keeps row_bytes as GGUF's row size). */
typedef struct {
    uint32_t type;    /* ggml_type */
    int64_t ne0, ne1; /* in-features (row length), out-features (row count) */
    size_t row_bytes;
    const void *data;
    uint8_t order;    /* SL_ORDER_*; zero (sgemm) unless set */
    uint8_t layout;   /* SL_LAYOUT_*; zero (GGUF rows) unless interleaved */
} sl_mat;

/* Activation rows converted to the vec_dot_type of some weight type. */
typedef struct {
    uint32_t vtype;   /* ggml_type of the converted rows */
    int64_t n;        /* elements per row */
    int64_t rows;
    size_t row_bytes;
    void *data;       /* owned; grown on demand */
    size_t cap;
} sl_act;

/* The SIMD path is a property of the pool (see pool.h: pool_isa /
 * pool_set_isa), not a global: tests run the same product on every path. */

/* Whether sluice can multiply by weights of this type (kernels exist). */
bool kernels_supports(uint32_t wtype);
/* ggml vec_dot_type for a weight type. */
uint32_t kernels_vec_dot_type(uint32_t wtype);

/* Converts ROWS rows of N floats (x_stride floats apart) for use with weights
 * of type WTYPE.  Returns -1 (message names the type) if unsupported. */
int act_prepare(sl_act *a, uint32_t wtype, const float *x, int64_t n, int64_t rows, size_t x_stride,
                sl_pool *pool, sl_err *err);
void act_free(sl_act *a);

/* 0 if X was prepared for W (its vector type and length); otherwise -1 with
 * a message naming both shapes.  Every product the engine runs is checked
 * first: a mismatch is a bug, and it must stop the run, never compute. */
int matmul_check(const sl_mat *w, const sl_act *x, sl_err *err);

/* y[t * y_stride + r] = dot(W row r, x row t) for r in [0, w->ne1), t in
 * [0, x->rows).  x must have been prepared for w->type (matmul_check); a
 * mismatched call writes NaN, which the sampler refuses.  Work is split over
 * the pool by rows; pool may be NULL (single thread). */
void matmul(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, sl_pool *pool);

/* Same, restricted to rows [r0, r1) and computed on the calling thread with
 * the given ISA path (for callers that schedule their own work). */
void matmul_rows(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1,
                 sl_isa isa);

/* One product of a batch: y = W x exactly as matmul() computes it. */
typedef struct {
    const sl_mat *w;
    const sl_act *x;
    float *y;
    size_t y_stride;
} sl_matmul_job;

/* Runs N independent products (the routed experts of a MoE layer, or q/k/v)
 * in one pool dispatch, splitting the rows of all of them over the threads:
 * one wake-up instead of N.  Outputs are bit-identical to N matmul() calls. */
void matmul_many(const sl_matmul_job *jobs, int n_jobs, sl_pool *pool);

/* Interleaving (interleave.c): whether W can be interleaved, the bytes its buffer needs for
 * it (rows rounded up to 16), and the interleaving itself, in place: BUF must be
 * W's data, writable, and hold mat_interleaved_bytes.  Products and row lookups
 * give the same bits either way.  -1 (nothing changed) if W cannot
 * be interleaved or memory runs out. */
bool mat_interleavable(const sl_mat *w);
/* Interleavable, and this CPU has the kernel that gains from it (AVX-512;
 * the other paths read the layout too, only slower than GGUF's rows). */
bool mat_interleave_pays(const sl_mat *w);
size_t mat_interleaved_bytes(const sl_mat *w);
int mat_interleave(sl_mat *w, void *buf);
/* The same for N matrices of W's shape at BUF + i * STRIDE (experts), all
 * or none: W's layout then says how every one of them is laid out. */
int mat_interleave_n(sl_mat *w, void *buf, size_t n, size_t stride);

/* Dequantises row R of W into N floats (embedding lookups, tests). */
void mat_get_row(const sl_mat *w, int64_t r, float *out);

/* ---- element-wise ops (deterministic, sequential reductions) ---- */

/* out = x / sqrt(mean(x^2) + eps) * w  (w may be NULL); sum in double like ggml. */
void op_rms_norm(float *out, const float *x, const float *w, int64_t n, float eps);
/* The same on path ISA (clamped to the detected one): the same bits. */
void op_rms_norm_isa(float *out, const float *x, const float *w, int64_t n, float eps, sl_isa isa);
/* op_rms_norm of ROWS rows of N (row stride N), the same bits per row. */
void op_rms_norm_rows(float *out, const float *x, const float *w, int64_t rows, int64_t n, float eps);
/* In-place softmax over n values, max-subtracted. */
void op_softmax(float *x, int64_t n);
/* The same with an attention sink: *SINK (if not NULL) joins the
 * denominator as one more logit without a value (gpt-oss). */
void op_softmax_sink(float *x, int64_t n, const float *sink);
/* out = silu(g) * u (on the detected SIMD path) */
void op_swiglu(float *out, const float *g, const float *u, int64_t n);
/* The same on path ISA (clamped to the detected one); every path gives the
 * same bits (tests compare them). */
void op_swiglu_isa(float *out, const float *g, const float *u, int64_t n, sl_isa isa);
float op_silu(float x);
/* out[i] = silu(x[i]) as ggml_vec_silu_f32: ggml's vector expf for each full
 * group of 16, libm expf for the rest (OUT may be X); the _isa form as
 * op_swiglu_isa. */
void op_silu_vec(float *out, const float *x, int64_t n);
void op_silu_vec_isa(float *out, const float *x, int64_t n, sl_isa isa);
/* ggml_vec_soft_max_f32: y[i] = expf(x[i] - max) (vector expf per full 16,
 * libm for the tail); returns their sum (each 16's tree sum into a double). */
double op_soft_max_sum(float *y, const float *x, int64_t n, float max);
/* The same on path ISA (every path gives the same bits; tests compare). */
double op_soft_max_sum_isa(float *y, const float *x, int64_t n, float max, sl_isa isa);

/* out[i] = y0[i] w[0] + y1[i] w[1] + ... over the K >= 1 rows of N at Y
 * (row k at Y + k N): each product rounded, then added in row order, as a
 * MoE layer combines its experts' outputs; the _isa form as op_swiglu_isa. */
void op_weighted_sum(float *out, const float *y, const float *w, int k, int64_t n);
void op_weighted_sum_isa(float *out, const float *y, const float *w, int k, int64_t n, sl_isa isa);

/* The index of the first maximum of X[0, N), NaNs ignored (all -inf: 0;
 * all NaN, or N = 0: -1): greedy decoding's pick, once per emitted token. */
int32_t op_argmax(const float *x, int32_t n);
/* The same on path ISA (every path gives the same index; tests compare). */
int32_t op_argmax_isa(const float *x, int32_t n, sl_isa isa);

/* fp16 / bf16 conversions, bit-exact with ggml (round to nearest even). */
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
float bf16_to_fp32(uint16_t h);

#endif
