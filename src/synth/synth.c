/* Synthetic model jobs: the tensor plan, the metadata and the streamed data.
 *
 * Tensor names, shapes and metadata keys are the ones llama.cpp's loader
 * asks for (src/models/qwen3moe.cpp, src/models/deepseek2.cpp) written the
 * way convert_hf_to_gguf.py writes them (conversion/base.py, qwen.py,
 * deepseek.py).  Types follow llama-quantize: norms and routers stay F32,
 * rows whose length does not fit a type's block fall back like
 * tensor_type_fallback() (Q4_K -> Q5_0, Q6_K -> Q8_0, IQ1-IQ3 -> IQ4_NL,
 * TQ1_0/TQ2_0 -> Q4_0, then F16).
 *
 * Weights (docs/SYNTH.md): matrices N(0, 1/fan_in) with fan_in = ne[0] so
 * every projection keeps unit-scale activations through any depth; norms
 * 1 + N(0, 0.05^2); token embeddings N(0, 1); routers N(0, 1/n_embd).
 *
 * Routing skew is built into the weights, not faked: for softmax-gated
 * models one residual coordinate k (the "skew dim") carries a large constant
 * A in every token embedding, the way real LLMs have a few massive
 * activation dimensions.  The residual stream keeps it through every layer,
 * so after each RMSNorm coordinate k is consistently positive; the norm
 * weight at k is set so the normed value is about 1, and router row e gets
 * b_e = -S * beta * ln(rank_e) at column k.  That shifts expert e's logit by
 * b_e for every token, on top of the token-dependent part (std ~1), which
 * gives Zipf-like popularity.  For models with a selection bias
 * (exp_probs_b, sigmoid gating) the same b_e, scaled to sigmoid scores,
 * goes into the bias instead. */
#include "synth/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_write.h"
#include "synth/synth_gen.h"
#include "synth/synth_internal.h"

/* ---- plan ---- */

static uint32_t fallback_type(uint32_t type, int64_t ne0)
{
    const ggml_type_info *ti = ggml_type_get(type);
    if (ne0 % ti->blck_size == 0) return type;
    uint32_t fb = type == GGML_TYPE_Q4_K ? GGML_TYPE_Q5_0 : type == GGML_TYPE_Q6_K ? GGML_TYPE_Q8_0
                : type == GGML_TYPE_TQ1_0 || type == GGML_TYPE_TQ2_0 ? GGML_TYPE_Q4_0
                : sy_type_low_bit(type) ? GGML_TYPE_IQ4_NL : GGML_TYPE_F16;
    return ne0 % ggml_type_get(fb)->blck_size == 0 ? fb : GGML_TYPE_F16;
}

/* Scale of a tensor's weights relative to the default (synth_internal.h):
 * what sharpens attention and weakens its output.  qwen3moe normalises q
 * and k per head, so its gain sits in those norms; deepseek2's MLA scales
 * the projections (kv_a_mqa's latent half is normalised anyway, so only its
 * RoPE half, k_pe, grows). */
static float gain_of(synth_family fam, const char *name)
{
    if (!strcmp(name, "attn_output.weight")) return ATTN_OUT_GAIN;
    if (fam == SYNTH_QWEN3MOE || fam == SYNTH_QWEN35MOE)
        return !strcmp(name, "attn_q_norm.weight") || !strcmp(name, "attn_k_norm.weight") ? QK_GAIN : 1.0f;
    return !strcmp(name, "attn_q.weight") || !strcmp(name, "attn_q_b.weight") || !strcmp(name, "attn_k_b.weight") ||
                   !strcmp(name, "attn_kv_a_mqa.weight")
               ? QK_GAIN
               : 1.0f;
}

static int add(synth_job *j, synth_role role, int32_t layer, uint32_t type, const char *name, uint32_t n_dims,
               int64_t ne0, int64_t ne1, int64_t ne2, sl_err *err)
{
    if (j->n_t == j->cap_t) {
        size_t cap = j->cap_t ? j->cap_t * 2 : 256;
        synth_tensor *t = realloc(j->t, cap * sizeof *t);
        if (!t) return sl_errf(err, "out of memory");
        j->t = t, j->cap_t = cap;
    }
    synth_tensor *t = &j->t[j->n_t++];
    memset(t, 0, sizeof *t);
    if (layer >= 0) snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, name);
    else snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role, t->layer = layer, t->n_dims = n_dims;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = 1;
    t->type = synth_role_f32(role) ? GGML_TYPE_F32 : fallback_type(type, ne0);
    t->nbytes = ggml_row_bytes(t->type, (uint64_t)ne0) * (uint64_t)(ne1 * ne2);
    t->gain = gain_of(j->c.shape.family, name);
    return 0;
}

bool synth_role_f32(synth_role r)
{
    return r == SYNTH_NORM || r == SYNTH_ROUTER || r == SYNTH_PROBS_B || r == SYNTH_CONV || r == SYNTH_SSM_A ||
           r == SYNTH_DT_BIAS || r == SYNTH_BIAS;
}

#define NORM(L, name, n) add(j, SYNTH_NORM, L, 0, name, 1, n, 1, 1, err)
#define MAT(L, name, a, b) add(j, SYNTH_MATRIX, L, dt, name, 2, a, b, 1, err)

static int plan_moe_ffn(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t et = j->c.expert_type;
    int rc = add(j, SYNTH_ROUTER, L, 0, "ffn_gate_inp.weight", 2, s->n_embd, s->n_expert, 1, err);
    if (!rc && s->family != SYNTH_QWEN3MOE && s->exp_probs_b)
        rc = add(j, SYNTH_PROBS_B, L, 0, "exp_probs_b.bias", 1, s->n_expert, 1, 1, err);
    if (!rc) rc = add(j, SYNTH_EXPERTS, L, et, "ffn_gate_exps.weight", 3, s->n_embd, s->n_ff_exp, s->n_expert, err);
    if (!rc) rc = add(j, SYNTH_EXPERTS, L, et, "ffn_up_exps.weight", 3, s->n_embd, s->n_ff_exp, s->n_expert, err);
    if (!rc) rc = add(j, SYNTH_EXPERTS, L, et, "ffn_down_exps.weight", 3, s->n_ff_exp, s->n_embd, s->n_expert, err);
    uint32_t dt = j->c.dense_type;
    if (!rc && s->family == SYNTH_QWEN35MOE) { /* the gated shared expert */
        int64_t fs = s->n_ff_shexp;
        if (NORM(L, "ffn_gate_inp_shexp.weight", s->n_embd) || MAT(L, "ffn_gate_shexp.weight", s->n_embd, fs) ||
            MAT(L, "ffn_up_shexp.weight", s->n_embd, fs) || MAT(L, "ffn_down_shexp.weight", fs, s->n_embd))
            return -1;
        return 0;
    }
    if (rc || !s->n_expert_shared) return rc;
    int64_t sh = (int64_t)s->n_ff_exp * s->n_expert_shared;
    if (MAT(L, "ffn_gate_shexp.weight", s->n_embd, sh) || MAT(L, "ffn_up_shexp.weight", s->n_embd, sh) ||
        MAT(L, "ffn_down_shexp.weight", sh, s->n_embd))
        return -1;
    return 0;
}

static int plan_qwen3moe_layer(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t dt = j->c.dense_type;
    int64_t q = (int64_t)s->n_head * s->head_dim, kv = (int64_t)s->n_head_kv * s->head_dim;
    if (NORM(L, "attn_norm.weight", s->n_embd) || MAT(L, "attn_q.weight", s->n_embd, q) ||
        MAT(L, "attn_k.weight", s->n_embd, kv) || MAT(L, "attn_v.weight", s->n_embd, kv) ||
        NORM(L, "attn_q_norm.weight", s->head_dim) || NORM(L, "attn_k_norm.weight", s->head_dim) ||
        MAT(L, "attn_output.weight", q, s->n_embd) || NORM(L, "ffn_norm.weight", s->n_embd))
        return -1;
    return plan_moe_ffn(j, L, err);
}

static int plan_deepseek2_layer(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t dt = j->c.dense_type;
    int64_t H = s->n_head, qk = s->qk_nope + s->qk_rope;
    if (NORM(L, "attn_norm.weight", s->n_embd)) return -1;
    if (s->q_lora) {
        if (MAT(L, "attn_q_a.weight", s->n_embd, s->q_lora) || NORM(L, "attn_q_a_norm.weight", s->q_lora) ||
            MAT(L, "attn_q_b.weight", s->q_lora, H * qk))
            return -1;
    } else if (MAT(L, "attn_q.weight", s->n_embd, H * qk)) {
        return -1;
    }
    if (MAT(L, "attn_kv_a_mqa.weight", s->n_embd, s->kv_lora + s->qk_rope) ||
        NORM(L, "attn_kv_a_norm.weight", s->kv_lora) ||
        add(j, SYNTH_MATRIX, L, dt, "attn_k_b.weight", 3, s->qk_nope, s->kv_lora, H, err) ||
        add(j, SYNTH_MATRIX, L, dt, "attn_v_b.weight", 3, s->kv_lora, s->v_head, H, err) ||
        MAT(L, "attn_output.weight", H * s->v_head, s->n_embd) || NORM(L, "ffn_norm.weight", s->n_embd))
        return -1;
    if ((uint32_t)L >= s->n_dense_lead) return plan_moe_ffn(j, L, err);
    if (MAT(L, "ffn_gate.weight", s->n_embd, s->n_ff) || MAT(L, "ffn_up.weight", s->n_embd, s->n_ff) ||
        MAT(L, "ffn_down.weight", s->n_ff, s->n_embd))
        return -1;
    return 0;
}

/* Kimi Delta Attention (kimi-linear): q/k/v with their own conv taps, the
 * low-rank decay and output gate, beta, A and dt bias, the head norm. */
static int plan_kda(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t dt = j->c.dense_type;
    int64_t E = s->n_embd, d = s->ssm_state, H = s->n_head, C = H * d;
    static const char *const proj[3] = {"attn_q.weight", "attn_k.weight", "attn_v.weight"};
    static const char *const conv[3] = {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"};
    for (int c = 0; c < 3; c++)
        if (MAT(L, proj[c], E, C) || add(j, SYNTH_CONV, L, 0, conv[c], 3, s->ssm_conv, 1, C, err)) return -1;
    if (MAT(L, "ssm_f_a.weight", E, d) || MAT(L, "ssm_f_b.weight", d, C) || MAT(L, "ssm_beta.weight", E, H) ||
        add(j, SYNTH_SSM_A, L, 0, "ssm_a", 2, 1, H, 1, err) ||
        add(j, SYNTH_DT_BIAS, L, 0, "ssm_dt.bias", 1, C, 1, 1, err) || MAT(L, "ssm_g_a.weight", E, d) ||
        MAT(L, "ssm_g_b.weight", d, C) || NORM(L, "ssm_norm.weight", d) || MAT(L, "attn_output.weight", C, E))
        return -1;
    return 0;
}

/* kimi-linear: KDA or MLA without q_lora, then a dense FFN or MoE. */
static int plan_kimi_layer(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t dt = j->c.dense_type;
    if (!synth_layer_attends(s, (uint32_t)L)) {
        if (NORM(L, "attn_norm.weight", s->n_embd) || plan_kda(j, L, err) || NORM(L, "ffn_norm.weight", s->n_embd))
            return -1;
        if ((uint32_t)L >= s->n_dense_lead) return plan_moe_ffn(j, L, err);
        return MAT(L, "ffn_gate.weight", s->n_embd, s->n_ff) || MAT(L, "ffn_up.weight", s->n_embd, s->n_ff) ||
                       MAT(L, "ffn_down.weight", s->n_ff, s->n_embd)
                   ? -1
                   : 0;
    }
    return plan_deepseek2_layer(j, L, err); /* the MLA layer: the same tensors, q_lora 0 */
}

/* qwen35moe: a gated delta net layer or a gated attention layer, then MoE. */
static int plan_qwen35_layer(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t dt = j->c.dense_type;
    int64_t E = s->n_embd, D = s->head_dim, d = s->ssm_state, nv = s->ssm_vheads, vd = nv * d;
    int64_t conv = 2 * (int64_t)s->ssm_groups * d + vd;
    if (NORM(L, "attn_norm.weight", E) || NORM(L, "post_attention_norm.weight", E)) return -1;
    if (synth_layer_attends(s, (uint32_t)L)) {
        if (MAT(L, "attn_q.weight", E, 2 * s->n_head * D) || MAT(L, "attn_k.weight", E, s->n_head_kv * D) ||
            MAT(L, "attn_v.weight", E, s->n_head_kv * D) || NORM(L, "attn_q_norm.weight", D) ||
            NORM(L, "attn_k_norm.weight", D) || MAT(L, "attn_output.weight", s->n_head * D, E))
            return -1;
    } else if (MAT(L, "attn_qkv.weight", E, conv) || MAT(L, "attn_gate.weight", E, vd) ||
               add(j, SYNTH_CONV, L, 0, "ssm_conv1d.weight", 2, s->ssm_conv, conv, 1, err) ||
               add(j, SYNTH_DT_BIAS, L, 0, "ssm_dt.bias", 1, nv, 1, 1, err) ||
               add(j, SYNTH_SSM_A, L, 0, "ssm_a", 1, nv, 1, 1, err) || MAT(L, "ssm_beta.weight", E, nv) ||
               MAT(L, "ssm_alpha.weight", E, nv) || NORM(L, "ssm_norm.weight", d) ||
               MAT(L, "ssm_out.weight", vd, E)) {
        return -1;
    }
    return plan_moe_ffn(j, L, err);
}

/* gpt-oss, as conversion/gpt_oss.py writes it: biases everywhere, sinks,
 * post_attention_norm, a router bias and per-expert biases. */
static int plan_gpt_oss_layer(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t dt = j->c.dense_type, et = j->c.expert_type;
    int64_t E = s->n_embd, q = (int64_t)s->n_head * s->head_dim, kv = (int64_t)s->n_head_kv * s->head_dim;
    int64_t F = s->n_ff_exp, X = s->n_expert;
#define BIAS(name, a, b) add(j, SYNTH_BIAS, L, 0, name, (b) > 1 ? 2 : 1, a, b, 1, err)
    if (NORM(L, "attn_norm.weight", E) || MAT(L, "attn_q.weight", E, q) || BIAS("attn_q.bias", q, 1) ||
        MAT(L, "attn_k.weight", E, kv) || BIAS("attn_k.bias", kv, 1) || MAT(L, "attn_v.weight", E, kv) ||
        BIAS("attn_v.bias", kv, 1) || MAT(L, "attn_output.weight", q, E) || BIAS("attn_output.bias", E, 1) ||
        BIAS("attn_sinks.weight", s->n_head, 1) || NORM(L, "post_attention_norm.weight", E) ||
        add(j, SYNTH_ROUTER, L, 0, "ffn_gate_inp.weight", 2, E, X, 1, err) || BIAS("ffn_gate_inp.bias", X, 1) ||
        add(j, SYNTH_EXPERTS, L, et, "ffn_gate_exps.weight", 3, E, F, X, err) || BIAS("ffn_gate_exps.bias", F, X) ||
        add(j, SYNTH_EXPERTS, L, et, "ffn_up_exps.weight", 3, E, F, X, err) || BIAS("ffn_up_exps.bias", F, X) ||
        add(j, SYNTH_EXPERTS, L, et, "ffn_down_exps.weight", 3, F, E, X, err) || BIAS("ffn_down_exps.bias", E, X))
        return -1;
#undef BIAS
    return 0;
}

/* glm4moe, as convert_hf_to_gguf.py writes GLM-4.5-Air: q/k/v biases, no
 * per-head q/k norms (use_qk_norm false), post_attention_norm before the FFN; a dense lead
 * layer, then MoE with a selection bias and a shared expert. */
static int plan_glm_layer(synth_job *j, int32_t L, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    uint32_t dt = j->c.dense_type;
    int64_t E = s->n_embd, D = s->head_dim, q = (int64_t)s->n_head * D, kv = (int64_t)s->n_head_kv * D;
#define BIAS(name, a) add(j, SYNTH_BIAS, L, 0, name, 1, a, 1, 1, err)
    if (NORM(L, "attn_norm.weight", E) || MAT(L, "attn_q.weight", E, q) || BIAS("attn_q.bias", q) ||
        MAT(L, "attn_k.weight", E, kv) || BIAS("attn_k.bias", kv) || MAT(L, "attn_v.weight", E, kv) ||
        BIAS("attn_v.bias", kv) || MAT(L, "attn_output.weight", q, E) || NORM(L, "post_attention_norm.weight", E))
        return -1;
#undef BIAS
    if ((uint32_t)L >= s->n_dense_lead) return plan_moe_ffn(j, L, err);
    return MAT(L, "ffn_gate.weight", E, s->n_ff) || MAT(L, "ffn_up.weight", E, s->n_ff) ||
                   MAT(L, "ffn_down.weight", s->n_ff, E)
               ? -1
               : 0;
}

static int plan(synth_job *j, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    if (add(j, SYNTH_EMBD, -1, j->c.embd_type, "token_embd.weight", 2, s->n_embd, (int64_t)j->n_vocab, 1, err))
        return -1;
    for (uint32_t L = 0; L < s->n_layer; L++) {
        int rc = s->family == SYNTH_QWEN3MOE      ? plan_qwen3moe_layer(j, (int32_t)L, err)
                 : s->family == SYNTH_KIMI_LINEAR ? plan_kimi_layer(j, (int32_t)L, err)
                 : s->family == SYNTH_QWEN35MOE   ? plan_qwen35_layer(j, (int32_t)L, err)
                 : s->family == SYNTH_GPT_OSS     ? plan_gpt_oss_layer(j, (int32_t)L, err)
                 : s->family == SYNTH_GLM4MOE     ? plan_glm_layer(j, (int32_t)L, err)
                                                  : plan_deepseek2_layer(j, (int32_t)L, err);
        if (rc) return -1;
    }
    if (add(j, SYNTH_NORM, -1, 0, "output_norm.weight", 1, s->n_embd, 1, 1, err)) return -1;
    return add(j, SYNTH_OUTPUT, -1, j->c.output_type, "output.weight", 2, s->n_embd, (int64_t)j->n_vocab, 1, err);
}

#undef NORM
#undef MAT

/* ---- metadata ---- */

typedef struct {
    gguf_writer *w;
    const char *arch;
    sl_err *err;
    int rc;
} meta;

static void m_u32(meta *m, const char *key, uint32_t v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", m->arch, key);
    if (!m->rc) m->rc = gguf_w_kv_u32(m->w, k, v, m->err);
}

static void m_f32(meta *m, const char *key, float v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", m->arch, key);
    if (!m->rc) m->rc = gguf_w_kv_f32(m->w, k, v, m->err);
}

static void m_bool(meta *m, const char *key, bool v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", m->arch, key);
    if (!m->rc) m->rc = gguf_w_kv_bool(m->w, k, v, m->err);
}

static void meta_common(meta *m, const synth_shape *s, uint64_t n_vocab)
{
    m_u32(m, "block_count", s->n_layer);
    m_u32(m, "context_length", s->n_ctx_train);
    m_u32(m, "embedding_length", s->n_embd);
    m_u32(m, "feed_forward_length", s->n_ff);
    m_u32(m, "attention.head_count", s->n_head);
    if (s->family != SYNTH_KIMI_LINEAR) m_u32(m, "attention.head_count_kv", s->n_head_kv); /* kimi: per layer */
    m_f32(m, "rope.freq_base", s->rope_base);
    m_f32(m, "attention.layer_norm_rms_epsilon", s->rms_eps);
    m_u32(m, "expert_count", s->n_expert);
    m_u32(m, "expert_used_count", s->n_expert_used);
    m_u32(m, "vocab_size", (uint32_t)n_vocab);
}

static void meta_qwen3moe(meta *m, const synth_shape *s)
{
    m_u32(m, "attention.key_length", s->head_dim);
    m_u32(m, "attention.value_length", s->head_dim);
    m_u32(m, "expert_feed_forward_length", s->n_ff_exp);
}

static void meta_deepseek2(meta *m, const synth_shape *s)
{
    if (s->yarn_factor > 0) {
        char k[128];
        snprintf(k, sizeof k, "%s.rope.scaling.type", m->arch);
        if (!m->rc) m->rc = gguf_w_kv_str(m->w, k, "yarn", m->err);
        m_f32(m, "rope.scaling.factor", s->yarn_factor);
        m_u32(m, "rope.scaling.original_context_length", s->yarn_orig_ctx);
        m_f32(m, "rope.scaling.yarn_beta_fast", s->yarn_beta_fast);
        m_f32(m, "rope.scaling.yarn_beta_slow", s->yarn_beta_slow);
    }
    m_u32(m, "expert_group_count", s->n_group);
    m_u32(m, "expert_group_used_count", s->topk_group);
    m_u32(m, "expert_gating_func", s->gating);
    m_u32(m, "leading_dense_block_count", s->n_dense_lead);
    /* the converter omits q_lora_rank when there is none; llama.cpp then
     * requires it unless the layer count says "lite", so a scaled-down
     * lite model states 0 explicitly */
    if (s->q_lora || (s->n_layer != 26 && s->n_layer != 27)) m_u32(m, "attention.q_lora_rank", s->q_lora);
    m_u32(m, "attention.kv_lora_rank", s->kv_lora);
    m_u32(m, "attention.key_length", s->kv_lora + s->qk_rope);
    m_u32(m, "attention.value_length", s->kv_lora);
    m_u32(m, "attention.key_length_mla", s->qk_nope + s->qk_rope);
    m_u32(m, "attention.value_length_mla", s->v_head);
    m_u32(m, "expert_feed_forward_length", s->n_ff_exp);
    m_u32(m, "expert_shared_count", s->n_expert_shared);
    m_f32(m, "expert_weights_scale", s->weights_scale);
    if (s->weights_norm) m_bool(m, "expert_weights_norm", true);
    m_u32(m, "rope.dimension_count", s->qk_rope);
    if (s->yarn_factor > 0) m_f32(m, "rope.scaling.yarn_log_multiplier", 0.1f * s->yarn_mscale_all_dim);
}

/* kimi-linear, as conversion/kimi_linear.py writes it: the per-layer
 * head_count_kv array marks the KDA layers with 0 (the only layer-type
 * signal llama.cpp reads), MLA keys without q_lora, gating required. */
static void meta_kimi(meta *m, const synth_shape *s)
{
    char k[128];
    snprintf(k, sizeof k, "%s.attention.head_count_kv", m->arch);
    int32_t *kv = calloc(s->n_layer, sizeof *kv);
    if (!kv && !m->rc) m->rc = sl_errf(m->err, "out of memory");
    for (uint32_t L = 0; kv && L < s->n_layer; L++) kv[L] = synth_layer_attends(s, L) ? 1 : 0;
    if (kv && !m->rc) m->rc = gguf_w_kv_arr(m->w, k, GGUF_INT32, kv, s->n_layer, m->err);
    free(kv);
    m_u32(m, "ssm.conv_kernel", s->ssm_conv);
    m_u32(m, "kda.head_dim", s->ssm_state);
    m_u32(m, "attention.kv_lora_rank", s->kv_lora);
    m_u32(m, "attention.key_length", s->kv_lora + s->qk_rope);
    m_u32(m, "attention.value_length", s->kv_lora);
    m_u32(m, "attention.key_length_mla", s->qk_nope + s->qk_rope);
    m_u32(m, "attention.value_length_mla", s->v_head);
    m_u32(m, "rope.dimension_count", s->qk_rope);
    m_u32(m, "expert_feed_forward_length", s->n_ff_exp);
    m_u32(m, "expert_shared_count", s->n_expert_shared);
    m_u32(m, "leading_dense_block_count", s->n_dense_lead);
    m_f32(m, "expert_weights_scale", s->weights_scale);
    m_u32(m, "expert_gating_func", s->gating);
}

/* qwen35moe, as convert_hf_to_gguf.py writes Qwen3.5-MoE. */
static void meta_qwen35(meta *m, const synth_shape *s)
{
    char k[128];
    m_u32(m, "attention.key_length", s->head_dim);
    m_u32(m, "attention.value_length", s->head_dim);
    m_u32(m, "rope.dimension_count", s->n_rot);
    snprintf(k, sizeof k, "%s.rope.dimension_sections", m->arch);
    int32_t sec[4];
    for (int i = 0; i < 4; i++) sec[i] = (int32_t)s->rope_sections[i];
    if (!m->rc) m->rc = gguf_w_kv_arr(m->w, k, GGUF_INT32, sec, 4, m->err);
    m_u32(m, "expert_feed_forward_length", s->n_ff_exp);
    m_u32(m, "expert_shared_feed_forward_length", s->n_ff_shexp);
    m_u32(m, "ssm.conv_kernel", s->ssm_conv);
    m_u32(m, "ssm.state_size", s->ssm_state);
    m_u32(m, "ssm.group_count", s->ssm_groups);
    m_u32(m, "ssm.time_step_rank", s->ssm_vheads);
    m_u32(m, "ssm.inner_size", s->ssm_vheads * s->ssm_state);
    m_u32(m, "full_attention_interval", s->attn_interval);
}

/* gpt-oss, as conversion/gpt_oss.py writes it (no rope.dimension_count,
 * no sliding_window_pattern: llama.cpp's period 2 applies). */
static void meta_gpt_oss(meta *m, const synth_shape *s)
{
    char k[128];
    m_u32(m, "attention.key_length", s->head_dim);
    m_u32(m, "attention.value_length", s->head_dim);
    m_u32(m, "expert_feed_forward_length", s->n_ff_exp);
    m_u32(m, "attention.sliding_window", s->n_swa);
    snprintf(k, sizeof k, "%s.rope.scaling.type", m->arch);
    if (!m->rc) m->rc = gguf_w_kv_str(m->w, k, "yarn", m->err);
    m_f32(m, "rope.scaling.factor", s->yarn_factor);
    m_u32(m, "rope.scaling.original_context_length", s->yarn_orig_ctx);
    m_f32(m, "rope.scaling.yarn_beta_fast", s->yarn_beta_fast);
    m_f32(m, "rope.scaling.yarn_beta_slow", s->yarn_beta_slow);
}

/* glm4moe, as convert_hf_to_gguf.py writes GLM-4.5 (no MTP layer here) */
static void meta_glm(meta *m, const synth_shape *s)
{
    m_u32(m, "attention.key_length", s->head_dim);
    m_u32(m, "attention.value_length", s->head_dim);
    m_u32(m, "rope.dimension_count", s->n_rot);
    m_u32(m, "expert_feed_forward_length", s->n_ff_exp);
    m_u32(m, "expert_shared_count", s->n_expert_shared);
    m_u32(m, "leading_dense_block_count", s->n_dense_lead);
    m_f32(m, "expert_weights_scale", s->weights_scale);
    m_u32(m, "expert_gating_func", s->gating);
    m_u32(m, "nextn_predict_layers", 0);
    m_bool(m, "expert_weights_norm", s->weights_norm);
}

/* llama_ftype of a file whose bulk is TYPE (llama.h) */
static uint32_t file_type(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32: return 0;
    case GGML_TYPE_F16: return 1;
    case GGML_TYPE_Q4_0: return 2;
    case GGML_TYPE_Q8_0: return 7;
    case GGML_TYPE_Q5_0: return 8;
    case GGML_TYPE_Q4_K: return 14; /* Q4_K_S: Q4_K throughout, Q6_K output */
    case GGML_TYPE_Q6_K: return 18;
    case GGML_TYPE_MXFP4: return 38; /* MXFP4_MOE */
    /* llama_ftype of the mixes whose routed experts are this type */
    case GGML_TYPE_IQ4_NL: return 25;
    case GGML_TYPE_IQ2_XXS: return 19;
    case GGML_TYPE_IQ2_XS: return 20;
    case GGML_TYPE_IQ3_XXS: return 23;
    case GGML_TYPE_IQ1_S: return 24;
    case GGML_TYPE_IQ3_S: return 26;
    case GGML_TYPE_IQ2_S: return 28;
    case GGML_TYPE_IQ1_M: return 31;
    case GGML_TYPE_TQ1_0: return 36;
    case GGML_TYPE_TQ2_0: return 37;
    default: return 0;
    }
}

static int copy_tokenizer(gguf_writer *w, const gguf_file *vocab, sl_err *err)
{
    for (uint64_t i = 0; i < vocab->n_kv; i++) {
        const gguf_kv *kv = &vocab->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) == 0 && gguf_w_kv(w, kv->key, &kv->v, err))
            return sl_err_wrap(err, "%s", vocab->path);
    }
    return 0;
}

static int write_meta(synth_job *j, const gguf_file *vocab, sl_err *err)
{
    const synth_shape *s = &j->c.shape;
    const char *arch = synth_family_arch(s->family);
    char name[96];
    snprintf(name, sizeof name, "sluice-synth %s", s->like);
    meta m = {.w = j->w, .arch = arch, .err = err};
    m.rc = gguf_w_kv_str(j->w, "general.architecture", arch, err);
    if (!m.rc) m.rc = gguf_w_kv_str(j->w, "general.type", "model", err);
    if (!m.rc) m.rc = gguf_w_kv_str(j->w, "general.name", name, err);
    meta_common(&m, s, j->n_vocab);
    if (s->family == SYNTH_QWEN3MOE) meta_qwen3moe(&m, s);
    else if (s->family == SYNTH_KIMI_LINEAR) meta_kimi(&m, s);
    else if (s->family == SYNTH_QWEN35MOE) meta_qwen35(&m, s);
    else if (s->family == SYNTH_GPT_OSS) meta_gpt_oss(&m, s);
    else if (s->family == SYNTH_GLM4MOE) meta_glm(&m, s);
    else meta_deepseek2(&m, s);
    if (!m.rc) m.rc = copy_tokenizer(j->w, vocab, err);
    if (!m.rc) m.rc = gguf_w_kv_u32(j->w, "general.quantization_version", 2, err);
    if (!m.rc) m.rc = gguf_w_kv_u32(j->w, "general.file_type", file_type(j->c.expert_type), err);
    /* provenance, and what synth_route_sample needs to rebuild hidden states */
    if (!m.rc) m.rc = gguf_w_kv_str(j->w, "sluice.synth.like", s->like, err);
    if (!m.rc) m.rc = gguf_w_kv_u64(j->w, "sluice.synth.seed", j->c.seed, err);
    if (!m.rc) m.rc = gguf_w_kv_f32(j->w, "sluice.synth.route_skew", (float)j->c.route_skew, err);
    if (!m.rc) m.rc = gguf_w_kv_i32(j->w, "sluice.synth.skew_dim", j->skew_dim, err);
    return m.rc;
}

/* ---- job ---- */

bool synth_type_supported(uint32_t type) { return sy_type_supported(type); }

int synth_config_types(synth_config *c, uint32_t type, sl_err *err)
{
    if (!sy_type_supported(type) || type == GGML_TYPE_F32)
        return sl_errf(err, "cannot generate %s weights (supported: q4_K, q6_K, q4_0, q5_0, q8_0, iq4_nl, mxfp4, f16, "
                            "iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, tq1_0, tq2_0)",
                       ggml_type_name(type));
    c->expert_type = c->dense_type = c->embd_type = type;
    c->output_type = type == GGML_TYPE_Q8_0 || type == GGML_TYPE_F16 ? type : GGML_TYPE_Q6_K;
    if (type == GGML_TYPE_MXFP4) c->dense_type = c->embd_type = c->output_type = GGML_TYPE_Q8_0; /* MXFP4_MOE */
    /* 1-3 bit files (the UD mixes) keep the spine at 4+ bits: only the
     * routed experts, which are the bytes per token, take the type */
    if (sy_type_low_bit(type)) c->dense_type = c->embd_type = GGML_TYPE_Q4_K;
    if (c->shape.family == SYNTH_GPT_OSS) c->expert_type = GGML_TYPE_MXFP4; /* as the released weights */
    return 0;
}

static uint64_t vocab_size(const gguf_file *vocab, sl_err *err)
{
    const void *d;
    uint64_t n = 0;
    if (gguf_get_arr(vocab, "tokenizer.ggml.tokens", GGUF_STRING, &d, &n, err) != 1 || n == 0) {
        sl_errf(err, "%s: no tokenizer.ggml.tokens to copy the vocabulary from", vocab->path);
        return 0;
    }
    return n;
}

static int check_config(const synth_config *c, uint64_t n_vocab, sl_err *err)
{
    if (synth_shape_check(&c->shape, err)) return -1;
    const uint32_t types[4] = {c->expert_type, c->dense_type, c->embd_type, c->output_type};
    for (int i = 0; i < 4; i++)
        if (!sy_type_supported(types[i])) return sl_errf(err, "cannot generate %s weights", ggml_type_name(types[i]));
    if (!(c->route_skew >= 0 && c->route_skew <= 10)) return sl_errf(err, "route skew %g (must be 0..10)", c->route_skew);
    if (c->shape.family == SYNTH_DEEPSEEK2 && c->shape.q_lora && c->shape.n_layer == 48 && n_vocab == 128256)
        return sl_errf(err, "llama.cpp takes 48-layer deepseek2 models with a 128256-token vocabulary for "
                            "'lite' ones (no q_lora); use another layer count or vocabulary");
    return 0;
}

/* The skew coordinate is needed where the router alone decides (softmax
 * gating); a selection bias carries the skew otherwise. */
static void place_skew(synth_job *j)
{
    const synth_shape *s = &j->c.shape;
    j->skew_dim = -1;
    if (j->c.route_skew <= 0 || (s->family != SYNTH_QWEN3MOE && s->exp_probs_b)) return;
    sy_rng r;
    sy_rng_seed(&r, j->c.seed, 0x5e3d);
    j->skew_dim = (int32_t)(sy_next(&r) % s->n_embd);
    /* 4 residual standard deviations at the last layer: positive everywhere */
    j->skew_a = (float)(4.0 * sqrt(EMBD_SIGMA * EMBD_SIGMA + s->n_layer * (RESID_ATTN + RESID_FFN)));
}

int synth_job_new(synth_job **out, const synth_config *c, const gguf_file *vocab, sl_err *err)
{
    uint64_t n_vocab = vocab_size(vocab, err);
    if (!n_vocab || check_config(c, n_vocab, err)) return -1;
    synth_job *j = calloc(1, sizeof *j);
    if (!j) return sl_errf(err, "out of memory");
    j->c = *c;
    j->n_vocab = n_vocab;
    place_skew(j);
    gguf_w_opts o = {.buf_bytes = 32u << 20, .background = true, .drop_cache = c->durable, .sync = c->durable,
                     .direct = c->durable};
    j->w = gguf_w_new(&o);
    int rc = j->w ? plan(j, err) : sl_errf(err, "out of memory");
    if (!rc) rc = write_meta(j, vocab, err);
    for (size_t i = 0; i < j->n_t && !rc; i++)
        rc = gguf_w_tensor(j->w, j->t[i].name, j->t[i].type, j->t[i].n_dims, j->t[i].ne, err) < 0;
    if (rc) {
        synth_job_free(j);
        return -1;
    }
    *out = j;
    return 0;
}

void synth_job_free(synth_job *j)
{
    if (!j) return;
    gguf_w_free(j->w);
    free(j->t);
    free(j);
}

const synth_tensor *synth_job_tensors(const synth_job *j, uint64_t *n)
{
    *n = j->n_t;
    return j->t;
}

uint64_t synth_job_n_vocab(const synth_job *j) { return j->n_vocab; }
uint64_t synth_job_file_size(const synth_job *j) { return gguf_w_file_size(j->w); }
int32_t synth_job_skew_dim(const synth_job *j) { return j->skew_dim; }
