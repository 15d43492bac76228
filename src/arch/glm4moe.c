/* glm4moe: GLM-4.5 / 4.6 / 4.7 (and GLM-4.5-Air).  Standard GQA attention
 * with q/k/v biases (optional, as llama.cpp loads them), optional per-head
 * q/k RMS norms before RoPE, NEOX RoPE on the first rope.dimension_count
 * dims of each head (partial rotary; MROPE when the file carries
 * rope.dimension_sections, reduced to what text needs), no output bias.
 * Leading dense layers, then MoE layers: sigmoid router (the default when
 * expert_gating_func is absent), top-k selected on s + exp_probs_b, weights
 * from s, renormalised when expert_weights_norm says so, scaled by
 * expert_weights_scale, plus an ungated shared expert.  The pre-FFN norm is
 * post_attention_norm.  The last nextn_predict_layers blocks are the MTP
 * layers (GLM-4.5-Air: 1 of 47); llama.cpp loads them but never runs them,
 * and neither does sluice (their tensors are not read). */

#include "arch/arch.h"
#include "arch/attn.h"
#include "arch/block.h"

/* Optional rope.dimension_sections: MROPE when the first two are set (as
 * llama.cpp's use_mrope decides), else NEOX. */
static int glm_rope(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    const int32_t *sec = hp->rope.sections;
    int rc = key_rope_sections(m, false, err);
    if (rc < 0) return -1;
    hp->rope.mode = rc > 0 && sec[0] > 0 && sec[1] > 0 ? ROPE_MODE_MROPE : ROPE_MODE_NEOX;
    if (hp->rope.mode == ROPE_MODE_MROPE && (int64_t)sec[0] + sec[1] + sec[2] + sec[3] > hp->n_embd_head_k) {
        char key[160];
        return sl_errf(err, "%s: key '%s' = [%d, %d, %d, %d] sums to more than the head size %d", m->g->path,
                       arch_key(m, "rope.dimension_sections", key, sizeof key), sec[0], sec[1], sec[2], sec[3],
                       hp->n_embd_head_k);
    }
    return 0;
}

static int glm_gating(sl_model *m, int32_t g, sl_err *err)
{
    if (g == 0) g = GATING_SIGMOID; /* absent: llama.cpp's glm4moe default */
    if (g != GATING_SOFTMAX && g != GATING_SIGMOID)
        return sl_errf(err, "%s: expert_gating_func %d is not supported (1 softmax, 2 sigmoid)", m->g->path, g);
    m->hp.gating = (gating_func)g;
    return 0;
}

static int glm_hparams(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    int32_t gating = 0, nextn = 0;
    char key[160];
    /* llama.cpp reads these with get_key (required); expert_count and
     * expert_used_count were read as optional by model.c */
    if (key_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, true, err) ||
        key_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err) ||
        key_u32(m, "expert_count", &hp->n_expert, true, err) ||
        key_u32(m, "expert_used_count", &hp->n_expert_used, true, err) ||
        key_u32(m, "expert_shared_count", &hp->n_expert_shared, true, err) ||
        key_u32(m, "leading_dense_block_count", &hp->n_layer_dense_lead, false, err) ||
        key_f32(m, "expert_weights_scale", &hp->expert_weights_scale, false, err) ||
        key_bool(m, "expert_weights_norm", &hp->expert_weights_norm, false, err) ||
        key_u32(m, "expert_gating_func", &gating, false, err) || glm_gating(m, gating, err) ||
        key_u32(m, "nextn_predict_layers", &nextn, false, err) ||
        key_in_range(m, "nextn_predict_layers", nextn, 0, hp->n_layer - 1, err))
        return -1;
    if (hp->n_expert == 0 || hp->n_expert_used == 0)
        return sl_errf(err, "%s: glm4moe needs experts ('%s' and expert_used_count > 0)", m->g->path,
                       arch_key(m, "expert_count", key, sizeof key));
    /* llama.cpp's graph adds the shared expert to every MoE layer */
    if (hp->n_expert_shared < 1 && hp->n_layer_dense_lead < hp->n_layer - nextn)
        return sl_errf(err, "%s: '%s' = %d: glm4moe MoE layers need a shared expert", m->g->path,
                       arch_key(m, "expert_shared_count", key, sizeof key), hp->n_expert_shared);
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used; /* llama.cpp's fallback for 0 */
    if (hp->n_ff_exp <= 0)
        return sl_errf(err, "%s: '%s' must be positive", m->g->path,
                       arch_key(m, "expert_feed_forward_length", key, sizeof key));
    hp->n_layer -= nextn; /* the MTP blocks come after the main stack */
    if (glm_rope(m, err)) return -1;
    return check_gqa(m, false, err); /* partial rotary: n_rot <= key_length */
}

static int glm_attn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t e = hp->n_embd, D = hp->n_embd_head_k;
    return bind_vec(m, &L->attn_norm, il, "attn_norm.weight", e, 0, err) || bind_qkv(m, L, il, err) ||
                   bind_mat(m, &L->wo, il, "attn_output.weight", D * hp->n_head, e, 0, err) ||
                   bind_vec(m, &L->q_norm, il, "attn_q_norm.weight", D, T_OPTIONAL, err) ||
                   bind_vec(m, &L->k_norm, il, "attn_k_norm.weight", D, T_OPTIONAL, err) ||
                   bind_vec(m, &L->ffn_norm, il, "post_attention_norm.weight", e, 0, err)
               ? -1
               : 0;
}

static int glm_ffn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    if (il < hp->n_layer_dense_lead) return bind_dense_ffn(m, L, il, err);
    return refuse_fused_experts(m, il, err) ||
                   bind_shared_moe(m, L, il, hp->n_ff_exp, (int64_t)hp->n_ff_exp * hp->n_expert_shared, 0, err)
               ? -1
               : 0;
}

static int glm_tensors(sl_model *m, sl_err *err)
{
    if (bind_io(m, err)) return -1;
    for (int il = 0; il < m->hp.n_layer; il++) {
        layer_w *L = &m->layers[il];
        L->part_gate = L->part_up = L->part_down = -1;
        if (glm_attn_tensors(m, L, il, err) || glm_ffn_tensors(m, L, il, err)) return -1;
    }
    return 0;
}

static int glm_layer(sl_session *s, int il, const batch *b, sl_err *err)
{
    float *xn, *out;
    if (layer_attn_half(s, il, b, attn_block, &xn, &out, err)) return -1;
    return layer_ffn_half(s, il, b->T, xn, out, err);
}

const arch_ops arch_glm4moe = {
    .name = "glm4moe", .load_hparams = glm_hparams, .load_tensors = glm_tensors, .layer = glm_layer,
};
