/* llama: Llama 1-3 (GQA, NORM RoPE, llama3 rope_freqs) and Mixtral-style MoE
 * (the same arch with ffn_*_exps tensors; softmax router, renormalised top-k,
 * as llama.cpp hard-codes). */
#include "arch/arch.h"
#include "arch/block.h"

static int llama_hparams(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    if (key_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err)) return -1;
    hp->rope.mode = ROPE_MODE_NORM;
    hp->gating = GATING_SOFTMAX;
    hp->expert_weights_norm = true;
    /* expert width: for llama MoE feed_forward_length is the expert FFN */
    hp->n_ff_exp = hp->n_ff;
    return check_gqa(m, true, err);
}

/* Q, K, V: fused attn_qkv or separate projections, each with optional bias. */
int bind_qkv(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd, nq = (int64_t)hp->n_embd_head_k * hp->n_head;
    int64_t nk = (int64_t)hp->n_embd_head_k * hp->n_head_kv, nv = (int64_t)hp->n_embd_head_v * hp->n_head_kv;
    if (bind_mat(m, &L->wqkv, il, "attn_qkv.weight", d, nq + nk + nv, T_OPTIONAL, err)) return -1;
    if (L->wqkv.data) return bind_vec(m, &L->bqkv, il, "attn_qkv.bias", nq + nk + nv, T_OPTIONAL, err);
    if (bind_mat(m, &L->wq, il, "attn_q.weight", d, nq, 0, err) ||
        bind_mat(m, &L->wk, il, "attn_k.weight", d, nk, 0, err) ||
        bind_mat(m, &L->wv, il, "attn_v.weight", d, nv, 0, err) ||
        bind_vec(m, &L->bq, il, "attn_q.bias", nq, T_OPTIONAL, err) ||
        bind_vec(m, &L->bk, il, "attn_k.bias", nk, T_OPTIONAL, err) ||
        bind_vec(m, &L->bv, il, "attn_v.bias", nv, T_OPTIONAL, err))
        return -1;
    return 0;
}

int bind_expert_ffn(sl_model *m, layer_w *L, int il, int64_t n_ff, bool gate_required, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd;
    L->off_up = 0;
    if (bind_experts(m, &L->x_gate, &L->part_gate, il, "ffn_gate_up_exps.weight", d, 2 * n_ff, T_OPTIONAL, err))
        return -1;
    if (L->part_gate >= 0) { /* fused: one slice per expert, gate's rows then up's */
        L->x_gate.ne1 = n_ff;
        L->x_up = L->x_gate;
        L->part_up = L->part_gate;
        L->off_up = (size_t)n_ff * L->x_gate.row_bytes;
    } else if (bind_experts(m, &L->x_gate, &L->part_gate, il, "ffn_gate_exps.weight", d, n_ff,
                            gate_required ? 0 : T_OPTIONAL, err) ||
               bind_experts(m, &L->x_up, &L->part_up, il, "ffn_up_exps.weight", d, n_ff, 0, err)) {
        return -1;
    }
    return bind_experts(m, &L->x_down, &L->part_down, il, "ffn_down_exps.weight", n_ff, d, 0, err);
}

/* Routed experts {n_embd, n_ff, n_expert} (gate optional) and the router. */
int bind_moe(sl_model *m, layer_w *L, int il, int64_t n_ff, bool gate_required, sl_err *err)
{
    const hparams *hp = &m->hp;
    L->moe = true;
    if (bind_mat(m, &L->router, il, "ffn_gate_inp.weight", hp->n_embd, hp->n_expert, 0, err)) return -1;
    return bind_expert_ffn(m, L, il, n_ff, gate_required, err);
}

int bind_dense_ffn(sl_model *m, layer_w *L, int il, sl_err *err)
{
    int64_t e = m->hp.n_embd, ff = m->hp.n_ff;
    return bind_mat(m, &L->ffn_gate, il, "ffn_gate.weight", e, ff, 0, err) ||
                   bind_mat(m, &L->ffn_down, il, "ffn_down.weight", ff, e, 0, err) ||
                   bind_mat(m, &L->ffn_up, il, "ffn_up.weight", e, ff, 0, err)
               ? -1
               : 0;
}

int refuse_fused_experts(const sl_model *m, int il, sl_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
    if (gguf_find_tensor(m->g, name))
        return sl_errf(err, "%s: fused expert tensor '%s' is not supported for %s", m->g->path, name, m->ops->name);
    return 0;
}

int bind_shared_moe(sl_model *m, layer_w *L, int il, int64_t n_ff, int64_t n_ff_sh, int bias_flags, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t e = hp->n_embd;
    return bind_moe(m, L, il, n_ff, true, err) ||
                   bind_vec(m, &L->exp_probs_b, il, "exp_probs_b.bias", hp->n_expert, bias_flags, err) ||
                   bind_mat(m, &L->sh_gate, il, "ffn_gate_shexp.weight", e, n_ff_sh, 0, err) ||
                   bind_mat(m, &L->sh_down, il, "ffn_down_shexp.weight", n_ff_sh, e, 0, err) ||
                   bind_mat(m, &L->sh_up, il, "ffn_up_shexp.weight", e, n_ff_sh, 0, err)
               ? -1
               : 0;
}

static int llama_tensors(sl_model *m, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd, ff = hp->n_ff;
    if (bind_io(m, err)) return -1;
    if (bind_vec(m, &m->rope_freqs, -1, "rope_freqs.weight", hp->n_rot / 2, T_OPTIONAL, err)) return -1;
    m->hp.rope.freq_factors = m->rope_freqs;
    for (int il = 0; il < hp->n_layer; il++) {
        layer_w *L = &m->layers[il];
        if (bind_vec(m, &L->attn_norm, il, "attn_norm.weight", d, 0, err) || bind_qkv(m, L, il, err) ||
            bind_mat(m, &L->wo, il, "attn_output.weight", (int64_t)hp->n_embd_head_k * hp->n_head, d, 0, err) ||
            bind_vec(m, &L->bo, il, "attn_output.bias", d, T_OPTIONAL, err) ||
            bind_vec(m, &L->ffn_norm, il, "ffn_norm.weight", d, 0, err))
            return -1;
        if (hp->n_expert > 0) {
            if (bind_moe(m, L, il, ff, false, err)) return -1;
            continue;
        }
        if (bind_mat(m, &L->ffn_gate, il, "ffn_gate.weight", d, ff, 0, err) ||
            bind_mat(m, &L->ffn_down, il, "ffn_down.weight", ff, d, 0, err) ||
            bind_mat(m, &L->ffn_up, il, "ffn_up.weight", d, ff, 0, err) ||
            bind_vec(m, &L->b_gate, il, "ffn_gate.bias", ff, T_OPTIONAL, err) ||
            bind_vec(m, &L->b_down, il, "ffn_down.bias", d, T_OPTIONAL, err) ||
            bind_vec(m, &L->b_up, il, "ffn_up.bias", ff, T_OPTIONAL, err))
            return -1;
    }
    return 0;
}

const arch_ops arch_llama = {
    .name = "llama",
    .load_hparams = llama_hparams, .load_tensors = llama_tensors, .layer = decoder_layer,
};
