/* Synthetic MoE models: GGUF files with a real architecture's shapes and
 * metadata, a real tokenizer copied from a vocabulary GGUF, and random but
 * well-formed quantised weights.  They exist for benchmarking models larger
 * than RAM; llama.cpp loads and runs them too (the output is gibberish).
 *
 * A job is built in two steps so callers can plan before writing: synth_job_new
 * encodes all metadata and tensor infos (so the exact file size is known),
 * synth_job_write streams the tensor data.  See docs/SYNTH.md for the shapes,
 * the weight distributions and how routing skew is constructed. */
#ifndef SLUICE_SYNTH_H
#define SLUICE_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef enum { SYNTH_QWEN3MOE, SYNTH_DEEPSEEK2, SYNTH_KIMI_LINEAR, SYNTH_QWEN35MOE, SYNTH_GPT_OSS,
               SYNTH_GLM4MOE } synth_family;

/* general.architecture of a family's files. */
const char *synth_family_arch(synth_family f);

/* Hyperparameters, named like llama.cpp's; 0 where an arch has no such thing. */
typedef struct {
    char like[32];         /* preset name */
    synth_family family;
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim; /* head_dim: qwen3moe */
    uint32_t n_ff;         /* dense FFN width (deepseek2 leading dense layers) */
    uint32_t n_ff_exp, n_expert, n_expert_used, n_expert_shared, n_dense_lead;
    uint32_t q_lora, kv_lora, qk_nope, qk_rope, v_head; /* deepseek2 MLA; q_lora 0 = none */
    uint32_t n_ctx_train;
    float rope_base, rms_eps;
    uint32_t gating;       /* deepseek2 expert_gating_func: 1 softmax, 2 sigmoid */
    bool weights_norm;     /* deepseek2 expert_weights_norm */
    bool exp_probs_b;      /* deepseek2 selection bias tensor (DeepSeek-V3 / Kimi-K2) */
    float weights_scale;   /* deepseek2 routed_scaling_factor */
    uint32_t n_group, topk_group;
    float yarn_factor;     /* 0: no rope scaling */
    uint32_t yarn_orig_ctx;
    float yarn_beta_fast, yarn_beta_slow, yarn_mscale_all_dim;
    /* recurrent layers (kimi-linear: KDA, with ssm_groups = ssm_vheads =
     * n_head; qwen35moe: the gated delta net): conv taps, head size, q/k and
     * v heads; every attn_interval-th layer attends (kimi-linear: also the
     * last one, as Kimi-Linear-48B's 27th) */
    uint32_t ssm_conv, ssm_state, ssm_groups, ssm_vheads, attn_interval;
    uint32_t n_rot;          /* qwen35moe partial rotary dims */
    uint32_t rope_sections[4]; /* qwen35moe IMRoPE */
    uint32_t n_ff_shexp;     /* qwen35moe shared expert width */
    uint32_t n_swa;          /* gpt-oss sliding window (even layers) */
} synth_shape;

/* Whether layer L of shape S attends (else it is recurrent). */
bool synth_layer_attends(const synth_shape *s, uint32_t L);

/* Fills OUT with the preset's real shape; -1 (message lists the presets) if unknown. */
int synth_shape_preset(const char *like, synth_shape *out, sl_err *err);
/* Overrides one field by its name in synth_shape (n_layer=2, n_embd=256,
 * rms_eps=1e-5, ...); for scaled-down test models. */
int synth_shape_set(synth_shape *s, const char *name, const char *value, sl_err *err);
/* Shape rules llama.cpp needs (see synth_shape.c); message says what to change. */
int synth_shape_check(const synth_shape *s, sl_err *err);
/* Why llama.cpp would refuse a shape sluice runs (NULL if it would not). */
const char *synth_shape_llama_note(const synth_shape *s);

typedef struct {
    synth_shape shape;
    uint32_t expert_type;  /* routed experts */
    uint32_t dense_type;   /* attention, dense FFN, shared experts */
    uint32_t embd_type, output_type;
    double route_skew;     /* 0 uniform; about 1 Zipf-like */
    uint64_t seed;
    bool durable;          /* fdatasync at the end, and keep the page cache clean while
                              writing (what a multi-GB model wants; tests need not) */
} synth_config;

/* The types a llama-quantize run of TYPE would give (docs/SYNTH.md): experts
 * and dense matrices TYPE, token_embd TYPE, output Q6_K (Q8_0 for Q8_0, F16
 * for F16).  -1 if TYPE cannot be generated. */
int synth_config_types(synth_config *c, uint32_t type, sl_err *err);
/* Whether TYPE can be generated. */
bool synth_type_supported(uint32_t type);

typedef enum {
    SYNTH_EMBD, SYNTH_OUTPUT, SYNTH_NORM, SYNTH_ROUTER, SYNTH_PROBS_B, SYNTH_MATRIX, SYNTH_EXPERTS,
    SYNTH_CONV,    /* f32 conv taps, N(0, 1/d_conv) (llama-quantize keeps ssm_conv1d) */
    SYNTH_SSM_A,   /* f32 decay A = -exp(A_log), A_log ~ U(0, ln 16) */
    SYNTH_DT_BIAS, /* f32 softplus^-1(dt), ln dt ~ U(ln 1e-3, ln 0.1) */
    SYNTH_BIAS,    /* f32 biases and gpt-oss's attention sinks, N(0, 0.05^2) */
} synth_role;

/* Roles whose tensors are always f32 (never quantised). */
bool synth_role_f32(synth_role r);

typedef struct {
    char name[64];
    uint32_t type, n_dims;
    int64_t ne[4];
    uint64_t nbytes;
    synth_role role;
    int32_t layer;         /* -1 outside blocks */
    float gain;            /* weights' scale relative to the default (docs/SYNTH.md) */
} synth_tensor;

typedef struct synth_job synth_job;

/* Plans the model: metadata (hyperparameters, the vocabulary's tokenizer.*
 * keys copied verbatim, provenance keys) and every tensor. */
int synth_job_new(synth_job **out, const synth_config *c, const gguf_file *vocab, sl_err *err);
void synth_job_free(synth_job *j);

const synth_tensor *synth_job_tensors(const synth_job *j, uint64_t *n);
uint64_t synth_job_n_vocab(const synth_job *j);
uint64_t synth_job_file_size(const synth_job *j);
/* The residual-stream coordinate that carries the routing-skew signal, or -1. */
int32_t synth_job_skew_dim(const synth_job *j);

typedef void (*synth_progress_fn)(void *ud, uint64_t done, uint64_t total);

/* Writes PATH (once per job); PROGRESS (may be NULL) is called every few
 * MiB with tensor bytes done and total. */
int synth_job_write(synth_job *j, const char *path, synth_progress_fn progress, void *ud, sl_err *err);

/* The routing check used until the engine runs these models: hidden states
 * are random vectors (N(0,1) per coordinate, with the skew coordinate at its
 * constructed value), routed by layer LAYER's real router (and selection
 * bias) from a synthesized file.  COUNTS[n_expert] gets how often each
 * expert is among the top n_expert_used over N_SAMPLES vectors (a file
 * with more than CAP experts is an error). */
int synth_route_sample(const gguf_file *g, uint32_t layer, uint32_t n_samples, uint64_t seed,
                       uint64_t *counts, uint32_t cap, uint32_t *n_expert, sl_err *err);

/* Least-squares s in count ~ rank^-s over the nonzero counts sorted by
 * popularity: about 0 for uniform routing. */
double synth_zipf_exponent(const uint64_t *counts, uint32_t n);

#endif
