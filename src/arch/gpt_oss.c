/* gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE).  Pre-norm layers: attention
 * with q/k/v and output biases, NEOX RoPE with YaRN, a sink logit per head
 * (swa.c), a sliding window of attention.sliding_window positions on even
 * layers (llama.cpp's set_swa_pattern(2); no pattern key is read) and full
 * causal attention on odd ones; post_attention_norm before the MoE.  The
 * router has a bias; top-k on its raw logits, weights = softmax over the k
 * selected (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT), no
 * renormalisation, no scale.  Experts have biases on gate, up and down and
 * the clamped SwiGLU with alpha 1.702 and limit 7, which llama.cpp
 * hard-codes (not read from the file).  output.weight is required. */
#include <math.h>

#include "arch/arch.h"
#include "arch/block.h"
#include "arch/swa.h"

static int gpt_oss_hparams(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    char key[160];
    if (key_f32(m, "attention.layer_norm_rms_epsilon", &hp->rms_eps, true, err) ||
        key_u32(m, "expert_feed_forward_length", &hp->n_ff_exp, true, err) ||
        key_u32(m, "attention.sliding_window", &hp->n_swa, true, err))
        return -1;
    if (hp->n_expert == 0)
        return sl_errf(err, "%s: missing required key '%s' (gpt-oss is MoE in every layer)", m->g->path,
                       arch_key(m, "expert_count", key, sizeof key));
    if (hp->n_swa < 1)
        return sl_errf(err, "%s: key '%s' = %d, expected >= 1", m->g->path,
                       arch_key(m, "attention.sliding_window", key, sizeof key), hp->n_swa);
    if (hp->n_ff_exp < 1)
        return sl_errf(err, "%s: key '%s' = %d, expected >= 1", m->g->path,
                       arch_key(m, "expert_feed_forward_length", key, sizeof key), hp->n_ff_exp);
    hp->rope.mode = ROPE_MODE_NEOX;
    hp->gating = GATING_SOFTMAX_WEIGHT;
    hp->expert_weights_norm = false;
    hp->swiglu_oai = true;
    hp->swiglu_alpha = 1.702f;
    hp->swiglu_limit = 7.0f;
    if (check_gqa(m, false, err)) return -1;
    if (hp->n_rot < 2) return sl_errf(err, "%s: invalid n_rot: %d", m->g->path, hp->n_rot);
    hp->kq_scale = 1.0f / sqrtf((float)hp->n_rot); /* llama.cpp's graph: 1/sqrt(n_rot) */
    return 0;
}

static int attn_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd, nq = (int64_t)hp->n_head * hp->n_embd_head_k;
    int64_t nk = (int64_t)hp->n_head_kv * hp->n_embd_head_k, nv = (int64_t)hp->n_head_kv * hp->n_embd_head_v;
    return bind_vec(m, &L->attn_norm, il, "attn_norm.weight", d, 0, err) ||
           bind_mat(m, &L->wq, il, "attn_q.weight", d, nq, 0, err) ||
           bind_mat(m, &L->wk, il, "attn_k.weight", d, nk, 0, err) ||
           bind_mat(m, &L->wv, il, "attn_v.weight", d, nv, 0, err) ||
           bind_vec(m, &L->bq, il, "attn_q.bias", nq, T_OPTIONAL, err) ||
           bind_vec(m, &L->bk, il, "attn_k.bias", nk, T_OPTIONAL, err) ||
           bind_vec(m, &L->bv, il, "attn_v.bias", nv, T_OPTIONAL, err) ||
           bind_mat(m, &L->wo, il, "attn_output.weight", (int64_t)hp->n_head * hp->n_embd_head_v, d, 0, err) ||
           bind_vec(m, &L->bo, il, "attn_output.bias", d, 0, err) ||
           bind_vec(m, &L->attn_sinks, il, "attn_sinks.weight", hp->n_head, 0, err);
}

static int moe_tensors(sl_model *m, layer_w *L, int il, sl_err *err)
{
    const hparams *hp = &m->hp;
    int64_t d = hp->n_embd, ff = hp->n_ff_exp;
    L->moe = true;
    L->exp_bias = true;
    return bind_vec(m, &L->ffn_norm, il, "post_attention_norm.weight", d, 0, err) ||
           bind_mat(m, &L->router, il, "ffn_gate_inp.weight", d, hp->n_expert, 0, err) ||
           bind_vec(m, &L->router_b, il, "ffn_gate_inp.bias", hp->n_expert, 0, err) ||
           bind_experts(m, &L->x_gate, &L->part_gate, il, "ffn_gate_exps.weight", d, ff, 0, err) ||
           bind_experts(m, &L->x_up, &L->part_up, il, "ffn_up_exps.weight", d, ff, 0, err) ||
           bind_experts(m, &L->x_down, &L->part_down, il, "ffn_down_exps.weight", ff, d, 0, err) ||
           bind_expert_vec(m, &L->part_gate_b, il, "ffn_gate_exps.bias", ff, err) ||
           bind_expert_vec(m, &L->part_up_b, il, "ffn_up_exps.bias", ff, err) ||
           bind_expert_vec(m, &L->part_down_b, il, "ffn_down_exps.bias", d, err);
}

static int gpt_oss_tensors(sl_model *m, sl_err *err)
{
    const hparams *hp = &m->hp;
    if (bind_io(m, err)) return -1;
    if (m->output.data == m->tok_embd.data)
        return sl_errf(err, "%s: missing tensor 'output.weight' (expected shape {%d, %d}; gpt-oss has no tied "
                            "embeddings)",
                       m->g->path, hp->n_embd, hp->n_vocab);
    for (int il = 0; il < hp->n_layer; il++) {
        layer_w *L = &m->layers[il];
        if (attn_tensors(m, L, il, err) || moe_tensors(m, L, il, err)) return -1;
    }
    return 0;
}

/* Even layers slide (llama.cpp's swa pattern of period 2), odd ones see everything. */
static bool is_swa(int il) { return il % 2 == 0; }

static void gpt_oss_cache(const sl_model *m, int il, layer_cache *out)
{
    out->window = is_swa(il) ? m->hp.n_swa : 0;
}

/* RoPE on each of NH heads of T rows, in place. */
static void rope_heads(const sl_session *s, float *x, int T, int nh, const batch *b)
{
    const hparams *hp = &s->m->hp;
    int dk = hp->n_embd_head_k;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) s->aop->rope(&hp->rope, b->rope + (size_t)t * hp->n_rot, x + ((size_t)t * nh + h) * dk);
}

static int gpt_oss_attn(sl_session *s, int il, const batch *b, const float *xn, float *out, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const layer_w *L = &s->m->layers[il];
    int T = b->T, H = hp->n_head, Hkv = hp->n_head_kv, dk = hp->n_embd_head_k, dv = hp->n_embd_head_v;
    float *q = scr_get(s, SCR_Q, (size_t)T * H * dk * sizeof(float), err);
    float *k = scr_get(s, SCR_K, (size_t)T * Hkv * dk * sizeof(float), err);
    float *v = scr_get(s, SCR_V, (size_t)T * Hkv * dv * sizeof(float), err);
    float *att = scr_get(s, SCR_ATT, (size_t)T * H * dv * sizeof(float), err);
    if (!q || !k || !v || !att) return -1;
    const sl_mat *w[3] = {&L->wq, &L->wk, &L->wv};
    float *y[3] = {q, k, v};
    if (linear_many(s, 3, w, xn, T, y, err)) return -1;
    if (L->bq) add_bias(q, L->bq, T, (int64_t)H * dk);
    if (L->bk) add_bias(k, L->bk, T, (int64_t)Hkv * dk);
    if (L->bv) add_bias(v, L->bv, T, (int64_t)Hkv * dv);
    rope_heads(s, q, T, H, b);
    rope_heads(s, k, T, Hkv, b);
    swa_heads(s, il, b, q, k, v, L->attn_sinks, att);
    return linear(s, &s->act[ACT_A], &L->wo, L->bo, att, T, out, err);
}

static int gpt_oss_layer(sl_session *s, int il, const batch *b, sl_err *err)
{
    float *xn, *out;
    if (layer_attn_half(s, il, b, gpt_oss_attn, &xn, &out, err)) return -1;
    return layer_ffn_half(s, il, b->T, xn, out, err);
}

const arch_ops arch_gpt_oss = {
    .name = "gpt-oss",
    .load_hparams = gpt_oss_hparams,
    .load_tensors = gpt_oss_tensors,
    .cache = gpt_oss_cache,
    .layer = gpt_oss_layer,
};
