/* deepseek2: DeepSeek-V2/V3 and Kimi-K2.  MLA attention (q_lora / kv_lora,
 * decoupled RoPE dims, YaRN), leading dense layers, then MoE layers with a
 * shared expert, sigmoid or softmax gating, selection bias exp_probs_b,
 * group-limited top-k, renormalisation and routed scaling. */
#include <math.h>

#include "arch/arch.h"
#include "arch/block.h"
#include "arch/mla.h"

/* llama.cpp's "lite" detection (DeepSeek-V2-Lite and relatives): by layer
 * count, such files have no q_lora and use attn_q directly. */
static bool is_lite(const hparams *hp)
{
    return hp->n_layer == 27 || hp->n_layer == 26 || (hp->n_layer == 48 && hp->n_vocab == 128256);
}

static int check_gating(sl_model *m, int32_t g, sl_err *err)
{
    hparams *hp = &m->hp;
    if (g == 0) {
        /* absent: llama.cpp's default, softmax (GLM-4.7-Lite heuristic aside) */
        bool glm = (hp->n_layer == 47 || hp->n_layer == 48) && hp->n_vocab == 154880;
        g = glm ? GATING_SIGMOID : GATING_SOFTMAX;
    }
    if (g != GATING_SOFTMAX && g != GATING_SIGMOID)
        return sl_errf(err, "%s: expert_gating_func %d is not supported (1 softmax, 2 sigmoid)", m->g->path, g);
    hp->gating = (gating_func)g;
    return 0;
}

static int ds2_hparams(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    int32_t gating = 0;
    if (key_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err) ||
        key_u32(m, "leading_dense_block_count", &hp->n_layer_dense_lead, false, err) ||
        (!is_lite(hp) && key_u32(m, "attention.q_lora_rank", &hp->n_lora_q, true, err)) ||
        key_u32(m, "attention.kv_lora_rank", &hp->n_lora_kv, true, err) ||
        key_u32(m, "attention.key_length_mla", &hp->n_embd_head_k_mla, true, err) ||
        key_u32(m, "attention.value_length_mla", &hp->n_embd_head_v_mla, true, err) ||
        key_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, true, err) ||
        key_u32(m, "expert_shared_count", &hp->n_expert_shared, true, err) ||
        key_f32(m, "expert_weights_scale", &hp->expert_weights_scale, false, err) ||
        key_bool(m, "expert_weights_norm", &hp->expert_weights_norm, false, err) ||
        key_u32(m, "expert_gating_func", &gating, false, err) || check_gating(m, gating, err))
        return -1;
    char key[160];
    if (gguf_find(m->g, arch_key(m, "attention.temperature_scale", key, sizeof key)))
        return sl_errf(err, "%s: '%s' (attention temperature tuning) is not supported", m->g->path, key);
    if (hp->n_embd_head_k_mla - hp->n_rot < 1)
        return sl_errf(err, "%s: key_length_mla %d leaves no non-rotary dims (rope.dimension_count %d)", m->g->path,
                       hp->n_embd_head_k_mla, hp->n_rot);
    if (hp->n_lora_kv < 1 || hp->n_embd_head_v_mla < 1)
        return sl_errf(err, "%s: kv_lora_rank and value_length_mla must be positive", m->g->path);
    if (hp->n_layer_dense_lead < hp->n_layer && hp->n_expert == 0)
        return sl_errf(err, "%s: MoE layers need '%s'", m->g->path, arch_key(m, "expert_count", key, sizeof key));
    hp->rope.mode = ROPE_MODE_NORM;
    hp->yarn_mscale_is_all = true;
    if (gguf_find(m->g, arch_key(m, "rope.scaling.yarn_log_multiplier", key, sizeof key))) {
        if (key_f32(m, "rope.scaling.yarn_log_multiplier", &hp->rope_yarn_log_mul, false, err)) return -1;
        hp->rope_yarn_log_mul /= 0.1f; /* the converter stores 0.1 * mscale_all_dim */
    }
    return 0;
}

/* kq_scale pre-scaled so that YaRN's magnitude correction cancels (llama.cpp's deepseek2 graph). */
static int ds2_finish_hparams(sl_model *m, sl_err *err)
{
    (void)err;
    hparams *hp = &m->hp;
    const rope_params *rp = &hp->rope;
    float attn_factor_org = rp->attn_factor * (1.0f + 0.1f * logf(1.0f / rp->freq_scale));
    float mscale = attn_factor_org * (1.0f + 0.1f * hp->rope_yarn_log_mul * logf(1.0f / rp->freq_scale));
    hp->kq_scale = 1.0f * mscale * mscale / sqrtf((float)hp->n_embd_head_k_mla);
    return 0;
}

/* MLA caches one latent row per position: [c (kv_lora_rank) | k_pe (n_rot)],
 * read as one KV head whose values are c. */
static void ds2_cache(const sl_model *m, int il, layer_cache *out)
{
    (void)il;
    const hparams *hp = &m->hp;
    *out = (layer_cache){.kind = LAYER_ATTN, .k_row = hp->n_lora_kv + hp->n_rot, .v_row = 0,
                         .head_k = hp->n_lora_kv + hp->n_rot, .head_v = hp->n_lora_kv};
}

static int ds2_attn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd, H = hp->n_head, kvl = hp->n_lora_kv, ql = hp->n_lora_q;
    int64_t dk = hp->n_embd_head_k_mla, nope = dk - hp->n_rot, dv = hp->n_embd_head_v_mla;
    if (bind_vec(m, &L->attn_norm, il, "attn_norm.weight", d, 0, err) ||
        bind_vec(m, &L->kv_a_norm, il, "attn_kv_a_norm.weight", kvl, 0, err))
        return -1;
    if (ql > 0) {
        if (bind_vec(m, &L->q_a_norm, il, "attn_q_a_norm.weight", ql, 0, err) ||
            bind_mat(m, &L->wq_a, il, "attn_q_a.weight", d, ql, 0, err) ||
            bind_mat(m, &L->wq_b, il, "attn_q_b.weight", ql, H * dk, 0, err))
            return -1;
    } else if (bind_mat(m, &L->wq, il, "attn_q.weight", d, H * dk, 0, err)) {
        return -1;
    }
    if (bind_mat(m, &L->wkv_a, il, "attn_kv_a_mqa.weight", d, kvl + hp->n_rot, 0, err) ||
        bind_mat3(m, &L->wk_b, il, "attn_k_b.weight", nope, kvl, H, 0, err) ||
        bind_mat3(m, &L->wv_b, il, "attn_v_b.weight", kvl, dv, H, 0, err) ||
        bind_mat(m, &L->wo, il, "attn_output.weight", H * dv, d, 0, err) ||
        bind_vec(m, &L->ffn_norm, il, "ffn_norm.weight", d, 0, err))
        return -1;
    return 0;
}

static int ds2_ffn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    if (il < hp->n_layer_dense_lead) return bind_dense_ffn(m, L, il, err);
    return bind_shared_moe(m, L, il, hp->n_ff_exp, hp->n_ff_exp * hp->n_expert_shared, T_OPTIONAL, err);
}

static int ds2_tensors(sl_model *m, sl_err *err)
{
    if (bind_io(m, err)) return -1;
    for (int il = 0; il < m->hp.n_layer; il++) {
        layer_w *L = &m->layers[il];
        L->part_gate = L->part_up = L->part_down = -1;
        if (ds2_attn_tensors(m, L, il, err) || ds2_ffn_tensors(m, L, il, err)) return -1;
    }
    return 0;
}

static int ds2_layer(sl_session *s, int il, const batch *b, sl_err *err)
{
    float *xn, *out;
    if (layer_attn_half(s, il, b, mla_block, &xn, &out, err)) return -1;
    return layer_ffn_half(s, il, b->T, xn, out, err);
}

const arch_ops arch_deepseek2 = {
    .name = "deepseek2", .load_hparams = ds2_hparams, .finish_hparams = ds2_finish_hparams,
    .load_tensors = ds2_tensors, .cache = ds2_cache, .layer = ds2_layer,
};
