/* qwen3: dense Qwen3 (per-head RMS q_norm/k_norm before NEOX RoPE). */
#include "arch/arch.h"
#include "arch/block.h"


static int qwen3_hparams(sl_model *m, sl_err *err)
{
    m->hp.rope.mode = ROPE_MODE_NEOX;
    if (key_f32(m, "attention.layer_norm_rms_epsilon", &m->hp.rms_eps, true, err)) return -1;
    return check_gqa(m, true, err);
}

/* Attention tensors shared with qwen3moe: q/k/v/o and the per-head norms. */
int bind_qwen3_attn(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd, dk = hp->n_embd_head_k;
    if (bind_vec(m, &L->attn_norm, il, "attn_norm.weight", d, 0, err) || bind_qkv(m, L, il, err) ||
        bind_mat(m, &L->wo, il, "attn_output.weight", dk * hp->n_head, d, 0, err) ||
        bind_vec(m, &L->k_norm, il, "attn_k_norm.weight", dk, 0, err) ||
        bind_vec(m, &L->q_norm, il, "attn_q_norm.weight", dk, 0, err) ||
        bind_vec(m, &L->ffn_norm, il, "ffn_norm.weight", d, 0, err))
        return -1;
    return 0;
}

static int qwen3_tensors(sl_model *m, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd, ff = hp->n_ff;
    if (bind_io(m, err)) return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        layer_w *L = &m->layers[il];
        if (bind_qwen3_attn(m, L, il, err) ||
            bind_mat(m, &L->ffn_gate, il, "ffn_gate.weight", d, ff, 0, err) ||
            bind_mat(m, &L->ffn_down, il, "ffn_down.weight", ff, d, 0, err) ||
            bind_mat(m, &L->ffn_up, il, "ffn_up.weight", d, ff, 0, err))
            return -1;
    }
    return 0;
}

const arch_ops arch_qwen3 = {
    .name = "qwen3",
    .load_hparams = qwen3_hparams, .load_tensors = qwen3_tensors, .layer = decoder_layer,
};
