/* qwen35moe: Qwen3.5-MoE.  Gated delta net layers (gdn.c, recurrent) and
 * gated full-attention layers (gattn.c, IMRoPE on the first n_rot dims)
 * alternate: layer N is full attention iff (N + 1) % full_attention_interval
 * == 0, unless attention.recurrent_layers lists the recurrent ones.  Every
 * layer is MoE: softmax router, top-k renormalised (hard-coded in
 * llama.cpp), no scale, plus a shared expert scaled by sigmoid(w . x).
 * The pre-FFN norm is post_attention_norm; output.weight falls back to the
 * embeddings.  Multi-token-prediction blocks (nextn_predict_layers) are
 * extra blocks after the main stack; the main pass never runs them. */
#include <stdio.h>
#include <stdlib.h>

#include "arch/arch.h"
#include "arch/block.h"
#include "arch/delta.h"
#include "arch/gattn.h"

/* rope.dimension_sections: required (IMRoPE), checked against the head. */
static int read_sections(sl_model *m, sl_err *err)
{
    const int32_t *sec = m->hp.rope.sections;
    if (key_rope_sections(m, true, err) < 0) return -1;
    int64_t sum = (int64_t)sec[0] + sec[1] + sec[2] + sec[3];
    if (sec[0] + sec[1] + sec[2] <= 0 || sum > m->hp.n_embd_head_k) {
        char key[160];
        return sl_errf(err, "%s: key '%s' = [%d, %d, %d, %d]: the first three must not all be 0 and the sum at most "
                            "the head size %d",
                       m->g->path, arch_key(m, "rope.dimension_sections", key, sizeof key), sec[0], sec[1], sec[2],
                       sec[3], m->hp.n_embd_head_k);
    }
    return 0;
}

static int read_ssm(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    int32_t inner = 0;
    if (key_u32(m, "ssm.conv_kernel", &hp->ssm_d_conv, true, err) ||
        key_u32(m, "ssm.inner_size", &inner, true, err) ||
        key_u32(m, "ssm.state_size", &hp->ssm_d_state, true, err) ||
        key_u32(m, "ssm.time_step_rank", &hp->ssm_dt_rank, true, err) ||
        key_u32(m, "ssm.group_count", &hp->ssm_n_group, true, err) ||
        key_in_range(m, "ssm.conv_kernel", hp->ssm_d_conv, 1, 64, err) ||
        key_in_range(m, "ssm.state_size", hp->ssm_d_state, 1, 4096, err) ||
        key_in_range(m, "ssm.group_count", hp->ssm_n_group, 1, 1 << 16, err) ||
        key_in_range(m, "ssm.time_step_rank", hp->ssm_dt_rank, 1, 1 << 16, err))
        return -1;
    char key[160];
    if (hp->ssm_dt_rank % hp->ssm_n_group)
        return sl_errf(err, "%s: ssm.time_step_rank %d (value heads) is not a multiple of ssm.group_count %d",
                       m->g->path, hp->ssm_dt_rank, hp->ssm_n_group);
    if ((int64_t)hp->ssm_dt_rank * hp->ssm_d_state != inner)
        return sl_errf(err, "%s: '%s' = %d, expected ssm.time_step_rank x ssm.state_size = %d", m->g->path,
                       arch_key(m, "ssm.inner_size", key, sizeof key), inner, hp->ssm_dt_rank * hp->ssm_d_state);
    return 0;
}

/* Which layers are recurrent (the gated delta net). */
static int read_layer_kinds(sl_model *m, bool *recr, sl_err *err)
{
    const hparams *hp = &m->hp;
    char key[160];
    const gguf_kv *kv = gguf_find(m->g, arch_key(m, "attention.recurrent_layers", key, sizeof key));
    if (kv) {
        if (kv->v.type != GGUF_ARRAY || (kv->v.arr.type != GGUF_BOOL && kv->v.arr.type != GGUF_UINT32 &&
                                         kv->v.arr.type != GGUF_INT32 && kv->v.arr.type != GGUF_UINT8))
            return sl_errf(err, "%s: key '%s' must be an array of booleans or integers", m->g->path, key);
        if (kv->v.arr.n < (uint64_t)hp->n_layer)
            return sl_errf(err, "%s: key '%s' has %llu entries, expected %d", m->g->path, key,
                           (unsigned long long)kv->v.arr.n, hp->n_layer);
        for (int il = 0; il < hp->n_layer; il++) recr[il] = gguf_arr_scalar(&kv->v, (uint64_t)il).u != 0;
        return 0;
    }
    int32_t interval = 4; /* llama.cpp's default */
    if (key_u32(m, "full_attention_interval", &interval, false, err) ||
        key_in_range(m, "full_attention_interval", interval, 1, 1 << 20, err))
        return -1;
    for (int il = 0; il < hp->n_layer; il++) recr[il] = (il + 1) % interval != 0;
    return 0;
}

static int q35_hparams(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    int32_t nextn = 0;
    if (key_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, false, err) ||
        key_u32(m, "expert_shared_feed_forward_length", &hp->n_ff_shexp, false, err) ||
        key_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err) || read_sections(m, err) ||
        read_ssm(m, err) || key_u32(m, "nextn_predict_layers", &nextn, false, err) ||
        key_in_range(m, "nextn_predict_layers", nextn, 0, hp->n_layer - 1, err))
        return -1;
    char key[160];
    if (hp->n_expert == 0)
        return sl_errf(err, "%s: n_expert must be > 0 for qwen35moe (key '%s')", m->g->path,
                       arch_key(m, "expert_count", key, sizeof key));
    hp->n_layer -= nextn; /* MTP blocks come after the main stack */
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
    if (hp->n_ff_exp <= 0 || hp->n_ff_shexp <= 0)
        return sl_errf(err, "%s: expert widths must be positive (expert_feed_forward_length %d, shared %d)",
                       m->g->path, hp->n_ff_exp, hp->n_ff_shexp);
    hp->rope.mode = ROPE_MODE_IMROPE;
    hp->gating = GATING_SOFTMAX;
    hp->expert_weights_norm = true;
    hp->expert_weights_scale = 0.0f; /* not read by llama.cpp for this arch */
    return check_gqa(m, false, err); /* partial rotary: n_rot <= key_length */
}

static int attn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t e = hp->n_embd, D = hp->n_embd_head_k, H = hp->n_head, Hkv = hp->n_head_kv;
    return bind_mat(m, &L->wq, il, "attn_q.weight", e, 2 * H * D, 0, err) ||
                   bind_mat(m, &L->wk, il, "attn_k.weight", e, Hkv * D, 0, err) ||
                   bind_mat(m, &L->wv, il, "attn_v.weight", e, Hkv * D, 0, err) ||
                   bind_mat(m, &L->wo, il, "attn_output.weight", H * D, e, 0, err) ||
                   bind_vec(m, &L->q_norm, il, "attn_q_norm.weight", D, 0, err) ||
                   bind_vec(m, &L->k_norm, il, "attn_k_norm.weight", D, 0, err)
               ? -1
               : 0;
}

static int gdn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t e = hp->n_embd, d = hp->ssm_d_state, nv = hp->ssm_dt_rank, vd = nv * d;
    int64_t conv = 2 * (int64_t)hp->ssm_n_group * d + vd;
    const int64_t conv_ne[2] = {hp->ssm_d_conv, conv};
    if (bind_mat(m, &L->wqkv, il, "attn_qkv.weight", e, conv, 0, err) ||
        bind_mat(m, &L->ssm_gate, il, "attn_gate.weight", e, vd, 0, err) ||
        bind_f32(m, &L->ssm_conv[0], il, "ssm_conv1d.weight", conv_ne, 2, 0, err) ||
        bind_vec(m, &L->ssm_dt_b, il, "ssm_dt.bias", nv, 0, err) || bind_vec(m, &L->ssm_a, il, "ssm_a", nv, 0, err) ||
        bind_mat(m, &L->ssm_beta, il, "ssm_beta.weight", e, nv, 0, err) ||
        bind_mat(m, &L->ssm_alpha, il, "ssm_alpha.weight", e, nv, 0, err) ||
        bind_vec(m, &L->ssm_norm, il, "ssm_norm.weight", d, 0, err) ||
        bind_mat(m, &L->wo, il, "ssm_out.weight", vd, e, 0, err))
        return -1;
    L->recurrent = true;
    return 0;
}

static int moe_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t e = hp->n_embd, fs = hp->n_ff_shexp;
    const float *gate_inp; /* bind_moe takes a fused ffn_gate_up_exps too, as llama.cpp's qwen35moe loader does */
    if (bind_moe(m, L, il, hp->n_ff_exp, true, err) ||
        bind_vec(m, &gate_inp, il, "ffn_gate_inp_shexp.weight", e, 0, err) ||
        bind_mat(m, &L->sh_gate, il, "ffn_gate_shexp.weight", e, fs, 0, err) ||
        bind_mat(m, &L->sh_up, il, "ffn_up_shexp.weight", e, fs, 0, err) ||
        bind_mat(m, &L->sh_down, il, "ffn_down_shexp.weight", fs, e, 0, err))
        return -1;
    /* a vector in the file; llama.cpp multiplies it as a one-row F32 matrix */
    L->sh_gate_inp = (sl_mat){.type = GGML_TYPE_F32, .ne0 = e, .ne1 = 1, .row_bytes = (size_t)e * sizeof(float),
                              .data = gate_inp};
    return 0;
}

static int q35_tensors(sl_model *m, sl_err *err)
{
    const hparams *hp = &m->hp;
    bool *recr = calloc((size_t)hp->n_layer, sizeof *recr);
    if (!recr) return sl_errf(err, "out of memory");
    int rc = read_layer_kinds(m, recr, err) || bind_io(m, err);
    for (int il = 0; !rc && il < hp->n_layer; il++) {
        layer_w *L = &m->layers[il];
        L->part_gate = L->part_up = L->part_down = -1;
        rc = bind_vec(m, &L->attn_norm, il, "attn_norm.weight", hp->n_embd, 0, err) ||
             bind_vec(m, &L->ffn_norm, il, "post_attention_norm.weight", hp->n_embd, 0, err) ||
             (recr[il] ? gdn_tensors(m, L, il, err) : attn_tensors(m, L, il, err)) || moe_tensors(m, L, il, err);
    }
    free(recr);
    return rc ? -1 : 0;
}

static int q35_layer(sl_session *s, int il, const batch *b, sl_err *err)
{
    float *xn, *out;
    attn_fn mixer = s->m->layers[il].recurrent ? gdn_block : gattn_block;
    if (layer_attn_half(s, il, b, mixer, &xn, &out, err)) return -1;
    return layer_ffn_half(s, il, b->T, xn, out, err);
}

static uint64_t q35_scratch(const sl_model *m, int32_t n_ctx, int32_t n_batch)
{
    uint64_t a = dn_scratch_bytes(m, n_ctx, n_batch), b = gattn_scratch_bytes(&m->hp, n_batch);
    return a > b ? a : b;
}

/* GDN layers keep a state; the gated attention layers a GQA cache (the default). */
static void q35_cache(const sl_model *m, int il, layer_cache *out)
{
    if (m->layers[il].recurrent) *out = (layer_cache){.kind = LAYER_RECURRENT, .state_bytes = gdn_state_bytes(&m->hp)};
}

const arch_ops arch_qwen35moe = {
    .name = "qwen35moe",
    .load_hparams = q35_hparams,
    .load_tensors = q35_tensors,
    .cache = q35_cache,
    .scratch_bytes = q35_scratch,
    .layer = q35_layer,
};
