/* kimi-linear: Kimi-Linear (the Kimi K3 family).  Most layers are Kimi
 * Delta Attention (kda.c, recurrent), the others MLA without q compression
 * and without RoPE (mla.c; no positional encoding anywhere); the per-layer
 * head_count_kv array is the only layer-type signal (0 = KDA).  Leading
 * dense layers, then sigmoid-routed MoE with the selection bias, weights
 * renormalised (llama.cpp forces it; expert_weights_norm is not read) and
 * scaled, plus a shared expert.  output.weight is required (no tied
 * embeddings). */
#include <math.h>
#include <stdio.h>

#include "arch/arch.h"
#include "arch/block.h"
#include "arch/delta.h"
#include "arch/mla.h"

static bool is_kda(const sl_model *m, int il) { return (m->head_kv ? m->head_kv[il] : m->hp.n_head_kv) == 0; }

static int kimi_hparams(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    int32_t gating = 0;
    if (key_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err) ||
        key_u32(m, "attention.key_length_mla", &hp->n_embd_head_k_mla, true, err) ||
        key_u32(m, "attention.value_length_mla", &hp->n_embd_head_v_mla, true, err) ||
        key_u32(m, "attention.kv_lora_rank", &hp->n_lora_kv, true, err) ||
        key_u32(m, "ssm.conv_kernel", &hp->ssm_d_conv, true, err) ||
        key_u32(m, "kda.head_dim", &hp->ssm_d_state, true, err) ||
        key_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, true, err) ||
        key_u32(m, "expert_shared_count", &hp->n_expert_shared, true, err) ||
        key_u32(m, "leading_dense_block_count", &hp->n_layer_dense_lead, false, err) ||
        key_f32(m, "expert_weights_scale", &hp->expert_weights_scale, false, err) ||
        key_u32(m, "expert_gating_func", &gating, true, err))
        return -1;
    char key[160];
    if (gating != GATING_SOFTMAX && gating != GATING_SIGMOID)
        return sl_errf(err, "%s: expert_gating_func %d is not supported (1 softmax, 2 sigmoid)", m->g->path, gating);
    hp->gating = (gating_func)gating;
    hp->expert_weights_norm = true; /* hard-coded in llama.cpp's kimi-linear graph */
    if (hp->n_embd_head_k_mla - hp->n_rot < 1)
        return sl_errf(err, "%s: key_length_mla %d leaves no non-rotary dims (rope.dimension_count %d)", m->g->path,
                       hp->n_embd_head_k_mla, hp->n_rot);
    if (hp->n_lora_kv < 1 || hp->n_embd_head_v_mla < 1)
        return sl_errf(err, "%s: kv_lora_rank and value_length_mla must be positive", m->g->path);
    if (hp->ssm_d_conv < 1 || hp->ssm_d_conv > 64)
        return sl_errf(err, "%s: '%s' = %d is out of range [1, 64]", m->g->path,
                       arch_key(m, "ssm.conv_kernel", key, sizeof key), hp->ssm_d_conv);
    if (hp->ssm_d_state < 1 || hp->ssm_d_state > 4096)
        return sl_errf(err, "%s: '%s' = %d is out of range [1, 4096]", m->g->path,
                       arch_key(m, "kda.head_dim", key, sizeof key), hp->ssm_d_state);
    if (hp->n_layer_dense_lead < hp->n_layer && hp->n_expert == 0)
        return sl_errf(err, "%s: MoE layers need '%s'", m->g->path, arch_key(m, "expert_count", key, sizeof key));
    hp->ssm_n_group = hp->ssm_dt_rank = hp->n_head;
    hp->rope.mode = ROPE_MODE_NONE;
    hp->kq_scale = 1.0f / sqrtf((float)hp->n_embd_head_k_mla);
    return 0;
}

static int kda_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t e = hp->n_embd, d = hp->ssm_d_state, H = hp->n_head, C = H * d, K = hp->ssm_d_conv;
    static const char *const conv[3] = {"ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight"};
    const int64_t conv_ne[3] = {K, 1, C}, a_ne[2] = {1, H};
    for (int c = 0; c < 3; c++)
        if (bind_f32(m, &L->ssm_conv[c], il, conv[c], conv_ne, 3, 0, err)) return -1;
    if (bind_mat(m, &L->wq, il, "attn_q.weight", e, C, 0, err) ||
        bind_mat(m, &L->wk, il, "attn_k.weight", e, C, 0, err) ||
        bind_mat(m, &L->wv, il, "attn_v.weight", e, C, 0, err) ||
        bind_mat(m, &L->ssm_f_a, il, "ssm_f_a.weight", e, d, 0, err) ||
        bind_mat(m, &L->ssm_f_b, il, "ssm_f_b.weight", d, C, 0, err) ||
        bind_mat(m, &L->ssm_beta, il, "ssm_beta.weight", e, H, 0, err) ||
        bind_f32(m, &L->ssm_a, il, "ssm_a", a_ne, 2, 0, err) ||
        bind_vec(m, &L->ssm_dt_b, il, "ssm_dt.bias", C, 0, err) ||
        bind_mat(m, &L->ssm_g_a, il, "ssm_g_a.weight", e, d, 0, err) ||
        bind_mat(m, &L->ssm_g_b, il, "ssm_g_b.weight", d, C, 0, err) ||
        bind_vec(m, &L->ssm_norm, il, "ssm_norm.weight", d, 0, err) ||
        bind_mat(m, &L->wo, il, "attn_output.weight", C, e, 0, err))
        return -1;
    L->recurrent = true;
    return 0;
}

static int mla_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t e = hp->n_embd, H = hp->n_head, kvl = hp->n_lora_kv, dk = hp->n_embd_head_k_mla;
    int64_t nope = dk - hp->n_rot, dv = hp->n_embd_head_v_mla;
    char name[64];
    snprintf(name, sizeof name, "blk.%d.attn_kv_b.weight", il);
    if (gguf_find_tensor(m->g, name))
        return sl_errf(err, "%s: '%s' (MLA without the k_b / v_b split) is not supported", m->g->path, name);
    if (bind_mat(m, &L->wq, il, "attn_q.weight", e, H * dk, 0, err) ||
        bind_mat(m, &L->wkv_a, il, "attn_kv_a_mqa.weight", e, kvl + hp->n_rot, 0, err) ||
        bind_vec(m, &L->kv_a_norm, il, "attn_kv_a_norm.weight", kvl, 0, err) ||
        bind_mat3(m, &L->wk_b, il, "attn_k_b.weight", nope, kvl, H, 0, err) ||
        bind_mat3(m, &L->wv_b, il, "attn_v_b.weight", kvl, dv, H, 0, err) ||
        bind_mat(m, &L->wo, il, "attn_output.weight", H * dv, e, 0, err))
        return -1;
    return 0;
}

static int ffn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t fe = hp->n_ff_exp, fs = fe * (hp->n_expert_shared > 0 ? hp->n_expert_shared : 1);
    if (bind_vec(m, &L->ffn_norm, il, "ffn_norm.weight", hp->n_embd, 0, err)) return -1;
    if (il < hp->n_layer_dense_lead) return bind_dense_ffn(m, L, il, err);
    return refuse_fused_experts(m, il, err) || bind_shared_moe(m, L, il, fe, fs, 0, err) ? -1 : 0;
}

static int kimi_tensors(sl_model *m, sl_err *err)
{
    const hparams *hp = &m->hp;
    if (bind_io(m, err)) return -1;
    if (m->output.data == m->tok_embd.data)
        return sl_errf(err, "%s: missing tensor 'output.weight' (expected shape {%d, %d}; kimi-linear has no tied "
                            "embeddings)",
                       m->g->path, hp->n_embd, hp->n_vocab);
    for (int il = 0; il < hp->n_layer; il++) {
        layer_w *L = &m->layers[il];
        L->part_gate = L->part_up = L->part_down = -1;
        if (bind_vec(m, &L->attn_norm, il, "attn_norm.weight", hp->n_embd, 0, err) ||
            (is_kda(m, il) ? kda_tensors(m, L, il, err) : mla_tensors(m, L, il, err)) ||
            ffn_tensors(m, L, il, err))
            return -1;
    }
    return 0;
}

static int kimi_layer(sl_session *s, int il, const batch *b, sl_err *err)
{
    float *xn, *out;
    attn_fn mixer = s->m->layers[il].recurrent ? kda_block : mla_block;
    if (layer_attn_half(s, il, b, mixer, &xn, &out, err)) return -1;
    return layer_ffn_half(s, il, b->T, xn, out, err);
}

/* KDA layers keep a state; MLA layers cache [c | k_pe] per position, one
 * KV head whose values are the latent c. */
static void kimi_cache(const sl_model *m, int il, layer_cache *out)
{
    const hparams *hp = &m->hp;
    if (is_kda(m, il)) {
        *out = (layer_cache){.kind = LAYER_RECURRENT, .state_bytes = kda_state_bytes(hp)};
        return;
    }
    int32_t dk = hp->n_lora_kv + hp->n_rot;
    *out = (layer_cache){.kind = LAYER_ATTN, .k_row = dk, .v_row = 0, .head_k = dk, .head_v = hp->n_lora_kv};
}

const arch_ops arch_kimi_linear = {
    .name = "kimi-linear",
    .load_hparams = kimi_hparams,
    .load_tensors = kimi_tensors,
    .cache = kimi_cache,
    .scratch_bytes = dn_scratch_bytes,
    .layer = kimi_layer,
};
