/* What synth.c (plan, metadata) and synth_write.c (data) share. */
#ifndef SLUICE_SYNTH_INTERNAL_H
#define SLUICE_SYNTH_INTERNAL_H

#include "gguf/gguf_write.h"
#include "synth/synth.h"

/* Residual variance added per attention / FFN block (plus the embeddings'
 * unit variance), used to aim the norm weights at the skew coordinate.
 * Measured with bench/synth_llama_check.c on a 48-layer qwen3-30b-a3b shape
 * in llama.cpp: attention adds little after a long prompt (its output
 * averages over positions), FFN ~0.5; the normed skew coordinate then lands
 * within 0.9-1.4 of its target 1 at every layer. */
#define RESID_ATTN 0.05
#define RESID_FFN 0.25
#define NORM_SPREAD 0.05f
/* Against rank collapse.  In a deep transformer with random weights,
 * attention is nearly uniform over positions and so hands every token the
 * same average: the part of the normed hidden state all tokens share grew
 * to 0.79 by layer 23 of a qwen3-30b-a3b shape in llama.cpp, and from
 * there every token picked the same experts -- useless for benchmarking
 * expert caches.  Sharper attention (q and k scaled 4x each, so logits
 * 16x), a weaker attention output (0.5x) and embeddings that dominate
 * early (std 3) keep that shared part at or below 0.03 through all 48
 * layers (bench/synth_llama_check.c, docs/SYNTH.md). */
#define EMBD_SIGMA 3.0f
#define QK_GAIN 4.0f
#define ATTN_OUT_GAIN 0.5f
/* Bias scale per unit of skew: b_e = -S * beta * ln(rank_e + 1).  Calibrated
 * with synth_route_sample so that S = 1 gives a fitted Zipf exponent of ~1
 * for the real expert counts (128 of qwen3-30b-a3b, 384 of kimi-k2): beta
 * on router logits (std ~1) for softmax gating, on sigmoid scores (std
 * ~0.2, top tail much tighter) for selection biases. */
#define BETA_LOGIT 0.55
#define BETA_SIGMOID 0.047
#define CHUNK_BYTES (4u << 20)

struct synth_job {
    synth_config c;
    synth_tensor *t;
    size_t n_t, cap_t;
    uint64_t n_vocab;
    int32_t skew_dim; /* -1: no skew coordinate */
    float skew_a;     /* its value in the embeddings */
    gguf_writer *w;
};

/* Residual variance estimate at position P: P = 2L is layer L's attention
 * input, 2L+1 its FFN input, 2*n_layer the output norm's input. */
double synth_resid_var(uint32_t pos);

#endif
