/* qwen3moe: Qwen3-MoE (qwen3 attention; softmax router, top-k with the
 * weights renormalised, which llama.cpp hard-codes for this arch). */
#include "arch/arch.h"
#include "arch/block.h"


static int qwen3moe_hparams(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    if (key_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, false, err) ||
        key_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err))
        return -1;
    char key[160];
    if (hp->n_expert == 0)
        return sl_errf(err, "%s: n_expert must be > 0 for qwen3moe (key '%s')", m->g->path,
                       arch_key(m, "expert_count", key, sizeof key));
    if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    hp->rope.mode = ROPE_MODE_NEOX;
    hp->gating = GATING_SOFTMAX;
    hp->expert_weights_norm = true;
    return check_gqa(m, true, err);
}

static int qwen3moe_tensors(sl_model *m, sl_err *err)
{
    const hparams *hp = &m->hp;
    if (bind_io(m, err)) return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        layer_w *L = &m->layers[il];
        if (bind_qwen3_attn(m, L, il, err) || bind_moe(m, L, il, hp->n_ff_exp, true, err)) return -1;
    }
    return 0;
}

const arch_ops arch_qwen3moe = {
    .name = "qwen3moe",
    .load_hparams = qwen3moe_hparams, .load_tensors = qwen3moe_tensors, .layer = decoder_layer,
};
