/* Internal model representation shared by model.c, the per-architecture
 * files and the compute blocks (attention, MLA, FFN, MoE).  Nothing here is
 * public: callers use model.h. */
#ifndef SLUICE_ARCH_H
#define SLUICE_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arch/model.h"
#include "arch/rope.h"
#include "experts/layout.h"
#include "experts/provider.h"

/* Routed experts per layer: far above any real model (Kimi K3 has 896,
 * llama.cpp stops at 512); expert ids must fit the pilot's int16 tables.
 * Everything else is sized from the model's own expert count. */
enum { MOE_MAX_EXPERTS = 32768 };

/* Router gating, numbered as llama.cpp's llama_expert_gating_func_type.
 * SOFTMAX_WEIGHT (gpt-oss): top-k on the raw logits, weights = softmax
 * over the k selected logits. */
typedef enum { GATING_SOFTMAX = 1, GATING_SIGMOID = 2, GATING_SOFTMAX_WEIGHT = 3 } gating_func;

/* Hyperparameters, read as llama.cpp reads them (names follow llama_hparams). */
typedef struct {
    int32_t n_vocab, n_ctx_train, n_embd, n_layer;
    int32_t n_head, n_head_kv, n_embd_head_k, n_embd_head_v, n_rot, n_ff;
    bool n_head_kv_varies; /* head_count_kv is a per-layer array with different entries (sl_model.head_kv) */
    float rms_eps;

    /* RoPE, already resolved the way llama_context resolves its cparams. */
    rope_params rope;

    /* MoE (n_expert == 0: dense) */
    int32_t n_expert, n_expert_used, n_expert_groups, n_group_used;
    int32_t n_ff_exp, n_expert_shared, n_layer_dense_lead;
    float expert_weights_scale;
    bool expert_weights_norm;
    gating_func gating;
    /* routed experts' activation: SwiGLU, or gpt-oss's clamped variant
     * min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, +-limit) + 1) */
    bool swiglu_oai;
    float swiglu_alpha, swiglu_limit;

    /* sliding-window attention: a query sees the n_swa newest positions
     * (itself included) on the layers the arch's cache hook marks */
    int32_t n_swa;

    /* MLA (deepseek2) */
    int32_t n_lora_q, n_lora_kv, n_embd_head_k_mla, n_embd_head_v_mla;

    /* Linear attention (Kimi Delta Attention, the gated delta net): heads of
     * size ssm_d_state, ssm_n_group query/key heads, ssm_dt_rank value
     * heads, a causal convolution of ssm_d_conv taps (which layers are
     * recurrent: arch_layer_cache). */
    int32_t ssm_d_conv, ssm_d_state, ssm_n_group, ssm_dt_rank;
    int32_t n_ff_shexp; /* shared expert width when it is not n_ff_exp * n_expert_shared */

    /* YaRN magnitude, as the architecture reads it (llama_hparams'
     * rope_yarn_log_mul; 0: none), and llama_context's special case for
     * deepseek2: mscale taken equal to mscale_all_dim when that is not 1. */
    float rope_yarn_log_mul;
    bool yarn_mscale_is_all;

    float kq_scale; /* attention scale applied to q.k */
} hparams;

/* One layer's weights.  Matrices with data == NULL are absent; 1-D tensors
 * (norms, biases) are converted to f32 at load and NULL when absent. */
typedef struct {
    const float *attn_norm, *ffn_norm;

    /* standard attention */
    sl_mat wq, wk, wv, wqkv, wo;
    const float *bq, *bk, *bv, *bqkv, *bo;
    const float *q_norm, *k_norm;
    const float *attn_sinks; /* per head: a logit that joins the softmax denominator only (gpt-oss) */

    /* MLA attention */
    sl_mat wq_a, wq_b, wkv_a, wk_b, wv_b;
    const float *q_a_norm, *kv_a_norm;

    /* dense FFN; sh_* is the shared expert of an MoE layer */
    sl_mat ffn_gate, ffn_up, ffn_down;
    const float *b_gate, *b_up, *b_down;
    sl_mat sh_gate, sh_up, sh_down;

    /* MoE: router, selection bias, and the geometry of one routed expert
     * (type and shape; data comes from the provider per expert). */
    bool moe;
    sl_mat router;
    const float *router_b; /* router bias (gpt-oss), or NULL */
    const float *exp_probs_b;
    sl_mat x_gate, x_up, x_down;
    int part_gate, part_up, part_down; /* index in expert_view.parts, -1 if absent */
    /* byte offset of up in its part: a fused ffn_gate_up_exps part holds
     * gate's n_ff rows, then up's (part_gate == part_up) */
    size_t off_up;
    /* per-expert biases {n, n_expert} as parts of the expert (gpt-oss's
     * ffn_{gate,up,down}_exps.bias, f32): valid when exp_bias is set */
    bool exp_bias;
    int part_gate_b, part_up_b, part_down_b;

    /* linear attention (kda.c, gdn.c): conv taps {d_conv, channels} in f32
     * (KDA: one per q, k, v; GDN: [0] over all channels), decay A < 0 and
     * dt bias, low-rank decay (f_a, f_b) and output gate (g_a, g_b) of KDA,
     * beta, GDN's alpha and output gate z, the per-head output norm */
    const float *ssm_conv[3], *ssm_a, *ssm_dt_b, *ssm_norm;
    sl_mat ssm_f_a, ssm_f_b, ssm_g_a, ssm_g_b, ssm_beta, ssm_alpha, ssm_gate;
    sl_mat sh_gate_inp; /* {n_embd, 1}: sigmoid(sh_gate_inp . x) scales the shared expert (qwen35moe) */

    /* a recurrent layer (set by architectures that mix kinds, for their
     * cache hook and their layer function) */
    bool recurrent;
} layer_w;

struct sl_session;
typedef struct sl_session sl_session;
typedef struct batch batch;

/* What one layer keeps per sequence: the session allocates it, the --mem
 * planner counts it, attention reads it.  Attention layers cache K and V
 * rows per position (all earlier positions, or a sliding window of them);
 * recurrent layers (Kimi Delta Attention, the gated delta net) keep no rows
 * but one fixed-size state that each token updates. */
typedef enum { LAYER_ATTN = 0, LAYER_RECURRENT = 1 } layer_kind;

typedef struct {
    layer_kind kind;
    /* LAYER_ATTN: elements cached per position; v_row == 0 means the
     * values are the first head_v elements of each key row (MLA's latent) */
    int32_t k_row, v_row;
    /* one head's key and value width as the attention kernel sees them */
    int32_t head_k, head_v;
    /* > 0: a query at position i sees keys i-window+1 .. i only, and the
     * layer keeps a ring of about window + n_batch rows instead of n_ctx */
    int32_t window;
    /* LAYER_RECURRENT: bytes of state per sequence (conv window + matrix) */
    uint64_t state_bytes;
} layer_cache;

typedef struct {
    const char *name; /* general.architecture */
    /* Reads the arch-specific keys (the common ones are read by model.c)
     * and checks the geometry (check_gqa for standard attention). */
    int (*load_hparams)(sl_model *m, sl_err *err);
    /* Optional: runs after RoPE / YaRN are resolved (scales derived from
     * them, e.g. deepseek2's kq_scale). */
    int (*finish_hparams)(sl_model *m, sl_err *err);
    /* Binds and loads every tensor, checking presence, type and shape. */
    int (*load_tensors)(sl_model *m, sl_err *err);
    /* Optional: what layer IL keeps (NULL: standard GQA, every layer
     * caching n_head_kv x (key_length + value_length) per position). */
    void (*cache)(const sl_model *m, int il, layer_cache *out);
    /* Optional: scratch bytes the architecture's own blocks take beyond the
     * shared ones (session_scratch_bytes), for passes of N_BATCH tokens. */
    uint64_t (*scratch_bytes)(const sl_model *m, int32_t n_ctx, int32_t n_batch);
    /* Runs layer IL over the batch: reads and updates the residual stream. */
    int (*layer)(sl_session *s, int il, const batch *b, sl_err *err);
} arch_ops;

struct sl_model {
    gguf_file *g;
    sl_vocab *vocab;
    const arch_ops *ops;
    hparams hp;

    const float *output_norm;
    sl_mat tok_embd, output;
    const float *rope_freqs;

    layer_w *layers;
    int32_t *head_kv; /* head_count_kv per layer when the file has an array, else NULL */
    expert_layout xl;
    expert_provider *provider;
    bool own_provider;
    route_observer obs;

    /* every buffer allocated for the spine, freed with the model */
    void **bufs;
    size_t n_bufs, cap_bufs;
    uint64_t spine_bytes;
    bool dry; /* model_opts.dry_run: shapes and sizes only, no weights */
    bool q8_weights; /* model_opts.q8_weights */
    int32_t head_rows; /* ids the output projection computes (model_set_head_rows) */
    int64_t derived_bytes; /* spine bytes beyond the file's tensors (Q8_0 copies), net */
};

/* What layer IL keeps (ops->cache, or the GQA default). */
void arch_layer_cache(const sl_model *m, int il, layer_cache *out);

/* ---- key reading (model.c) ---- */

/* "<arch>.<suffix>" into buf. */
const char *arch_key(const sl_model *m, const char *suffix, char *buf, size_t cap);
/* Return 0 when found or optional-and-absent (out untouched), -1 on error
 * (missing required key or a value of the wrong type / range). */
int key_u32(const sl_model *m, const char *suffix, int32_t *out, bool required, sl_err *err);
int key_f32(const sl_model *m, const char *suffix, float *out, bool required, sl_err *err);
int key_bool(const sl_model *m, const char *suffix, bool *out, bool required, sl_err *err);
/* An error naming "<arch>.<suffix>" unless lo <= v <= hi. */
int key_in_range(const sl_model *m, const char *suffix, int32_t v, int32_t lo, int32_t hi, sl_err *err);
/* Key that may be a scalar or a per-layer array; arrays must be uniform. */
int key_u32_or_arr(const sl_model *m, const char *suffix, int32_t *out, bool required, sl_err *err);

/* rope.dimension_sections (4 integers, or one for all four) into
 * hp.rope.sections: 1 when read, 0 when absent and optional, -1 on error. */
int key_rope_sections(sl_model *m, bool required, sl_err *err);

/* The checks llama.cpp's graphs assert for standard (GQA) attention, as
 * errors: head_count_kv divides head_count, key_length == value_length,
 * and n_rot == key_length (FULL_ROTARY) or even and <= key_length. */
int check_gqa(const sl_model *m, bool full_rotary, sl_err *err);

/* ---- tensor binding (model.c) ---- */

enum { T_OPTIONAL = 1, T_INTERLEAVE = 2 };

/* Binds "blk.IL.NAME" (IL < 0: NAME as is) as a matrix of ne0 x ne1 (ne1 = 1
 * with ne0 only is not allowed here: use bind_vec).  Returns 0 on success
 * (absent optional tensors leave w->data NULL), -1 with a message naming the
 * tensor, the expected and the actual shape, or the unsupported type. */
int bind_mat(sl_model *m, sl_mat *w, int il, const char *name, int64_t ne0, int64_t ne1, int flags, sl_err *err);
/* Binds a 3-D tensor {ne0, ne1, ne2} as N matrices of ne0 x ne1 laid out one
 * after another; w describes the first one (its data points at slice 0). */
int bind_mat3(sl_model *m, sl_mat *w, int il, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, int flags,
              sl_err *err);
/* Binds a 1-D tensor of n elements, converted to f32. */
int bind_vec(sl_model *m, const float **v, int il, const char *name, int64_t n, int flags, sl_err *err);
/* The same for a tensor of shape ne[0..nd-1] (trailing 1s may be absent
 * in the file), as one f32 array in file order. */
int bind_f32(sl_model *m, const float **v, int il, const char *name, const int64_t *ne, int nd, int flags,
             sl_err *err);
/* Checks a routed-expert tensor {ne0, ne1, n_expert} without loading it and
 * records its geometry in x and its part index (from the expert layout). */
int bind_experts(sl_model *m, sl_mat *x, int *part, int il, const char *name, int64_t ne0, int64_t ne1, int flags,
                 sl_err *err);
/* The same for a per-expert vector {n, n_expert} (expert biases), which
 * must be f32: records its part index. */
int bind_expert_vec(sl_model *m, int *part, int il, const char *name, int64_t n, sl_err *err);
/* token_embd, output_norm and output (tied to token_embd when absent). */
int bind_io(sl_model *m, sl_err *err);

/* Tensor groups shared between architectures: q/k/v (fused or separate,
 * optional biases; llama.c), router + routed experts (llama.c), qwen3's
 * attention with per-head norms (qwen3.c). */
int bind_qkv(sl_model *m, layer_w *L, int il, sl_err *err);
int bind_moe(sl_model *m, layer_w *L, int il, int64_t n_ff, bool gate_required, sl_err *err);
/* The routed experts' gate and up (fused ffn_gate_up_exps {n_embd, 2 n_ff,
 * n_expert} or separate; gate optional unless GATE_REQUIRED) and down. */
int bind_expert_ffn(sl_model *m, layer_w *L, int il, int64_t n_ff, bool gate_required, sl_err *err);
int bind_qwen3_attn(sl_model *m, layer_w *L, int il, sl_err *err);
/* A dense SwiGLU FFN of n_ff (ffn_gate / ffn_down / ffn_up, no biases). */
int bind_dense_ffn(sl_model *m, layer_w *L, int il, sl_err *err);
/* The DeepSeek-style MoE block: router, the selection bias exp_probs_b
 * (BIAS_FLAGS: 0 required or T_OPTIONAL), routed gate / up / down of N_FF
 * and the shared expert of N_FF_SH. */
int bind_shared_moe(sl_model *m, layer_w *L, int il, int64_t n_ff, int64_t n_ff_sh, int bias_flags, sl_err *err);
/* An error when layer IL has a fused ffn_gate_up_exps (for architectures
 * whose llama.cpp loader takes separate gate and up only). */
int refuse_fused_experts(const sl_model *m, int il, sl_err *err);

/* ---- per-architecture tables ---- */
extern const arch_ops arch_llama, arch_qwen3, arch_qwen3moe, arch_deepseek2, arch_kimi_linear, arch_qwen35moe,
    arch_glm4moe, arch_gpt_oss;

#endif
