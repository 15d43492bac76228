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
#define RESID_ATTN 0.25
#define RESID_FFN 0.5
#define EMBD_SIGMA 1.0f
#define NORM_SPREAD 0.05f
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
