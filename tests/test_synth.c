/* sluice synth: synthesized models must be what llama.cpp's loader asks for.
 * The reference is llama.cpp itself: the expected tensor lists below are
 * transcribed from src/models/qwen3moe.cpp and src/models/deepseek2.cpp
 * (load_arch_tensors) and the required keys from load_hparams and the
 * shared arch README; block layouts and dequantisation from ggml-common.h /
 * ggml-quants.c.  Real widths are checked on the plan (no writing), tiny
 * widths on written files. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "synth/synth.h"
#include "t.h"
#include "util/fileio.h"

static char tmpdir[256];
static const char *VOCAB = "models/tinymoe-q8_0.gguf";

/* ---- the reference: tensors llama.cpp creates for a shape ---- */

typedef struct {
    char name[64];
    uint32_t n_dims;
    int64_t ne[3];
} want_t;

typedef struct {
    want_t t[4096];
    int n;
} want_list;

static void want(want_list *w, int layer, const char *name, uint32_t n_dims, int64_t a, int64_t b, int64_t c)
{
    want_t *t = &w->t[w->n++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, name);
    else snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims, t->ne[0] = a, t->ne[1] = b, t->ne[2] = c;
}

static void want_qwen3moe(want_list *w, const synth_shape *s, int64_t n_vocab)
{
    int64_t E = s->n_embd, hq = (int64_t)s->head_dim * s->n_head, hkv = (int64_t)s->head_dim * s->n_head_kv;
    want(w, -1, "token_embd.weight", 2, E, n_vocab, 1);
    want(w, -1, "output_norm.weight", 1, E, 1, 1);
    want(w, -1, "output.weight", 2, E, n_vocab, 1);
    for (int i = 0; i < (int)s->n_layer; i++) {
        want(w, i, "attn_norm.weight", 1, E, 1, 1);
        want(w, i, "attn_q.weight", 2, E, hq, 1);
        want(w, i, "attn_k.weight", 2, E, hkv, 1);
        want(w, i, "attn_v.weight", 2, E, hkv, 1);
        want(w, i, "attn_output.weight", 2, hq, E, 1);
        want(w, i, "attn_k_norm.weight", 1, s->head_dim, 1, 1);
        want(w, i, "attn_q_norm.weight", 1, s->head_dim, 1, 1);
        want(w, i, "ffn_norm.weight", 1, E, 1, 1);
        want(w, i, "ffn_gate_inp.weight", 2, E, s->n_expert, 1);
        want(w, i, "ffn_gate_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_down_exps.weight", 3, s->n_ff_exp, E, s->n_expert);
        want(w, i, "ffn_up_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
    }
}

/* q_lora as llama.cpp will see it: not read at all for 26/27 layers */
static void want_deepseek2(want_list *w, const synth_shape *s, int64_t n_vocab)
{
    int64_t E = s->n_embd, H = s->n_head, kq = s->qk_nope + s->qk_rope, sh = (int64_t)s->n_ff_exp * s->n_expert_shared;
    bool lite = s->n_layer == 26 || s->n_layer == 27;
    int64_t q_lora = lite ? 0 : s->q_lora;
    want(w, -1, "token_embd.weight", 2, E, n_vocab, 1);
    want(w, -1, "output_norm.weight", 1, E, 1, 1);
    want(w, -1, "output.weight", 2, E, n_vocab, 1);
    for (int i = 0; i < (int)s->n_layer; i++) {
        want(w, i, "attn_norm.weight", 1, E, 1, 1);
        if (q_lora > 0) {
            want(w, i, "attn_q_a_norm.weight", 1, q_lora, 1, 1);
            want(w, i, "attn_q_a.weight", 2, E, q_lora, 1);
            want(w, i, "attn_q_b.weight", 2, q_lora, H * kq, 1);
        } else {
            want(w, i, "attn_q.weight", 2, E, H * kq, 1);
        }
        want(w, i, "attn_kv_a_norm.weight", 1, s->kv_lora, 1, 1);
        want(w, i, "attn_kv_a_mqa.weight", 2, E, s->kv_lora + s->qk_rope, 1);
        want(w, i, "attn_k_b.weight", 3, s->qk_nope, s->kv_lora, H);
        want(w, i, "attn_v_b.weight", 3, s->kv_lora, s->v_head, H);
        want(w, i, "attn_output.weight", 2, H * s->v_head, E, 1);
        want(w, i, "ffn_norm.weight", 1, E, 1, 1);
        if (i < (int)s->n_dense_lead) {
            want(w, i, "ffn_gate.weight", 2, E, s->n_ff, 1);
            want(w, i, "ffn_down.weight", 2, s->n_ff, E, 1);
            want(w, i, "ffn_up.weight", 2, E, s->n_ff, 1);
            continue;
        }
        want(w, i, "ffn_gate_inp.weight", 2, E, s->n_expert, 1);
        if (s->exp_probs_b) want(w, i, "exp_probs_b.bias", 1, s->n_expert, 1, 1);
        want(w, i, "ffn_down_exps.weight", 3, s->n_ff_exp, E, s->n_expert);
        want(w, i, "ffn_gate_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_up_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_gate_shexp.weight", 2, E, sh, 1);
        want(w, i, "ffn_down_shexp.weight", 2, sh, E, 1);
        want(w, i, "ffn_up_shexp.weight", 2, E, sh, 1);
    }
}

/* src/models/kimi-linear.cpp: KDA layers (head_count_kv 0) or MLA without
 * q_lora; the 3-D forms of the conv taps and the 2-D ssm_a, which the
 * loader accepts besides the 4-D ones */
static void want_kimi(want_list *w, const synth_shape *s, int64_t n_vocab)
{
    int64_t E = s->n_embd, H = s->n_head, d = s->ssm_state, C = H * d, kq = s->qk_nope + s->qk_rope;
    int64_t sh = (int64_t)s->n_ff_exp * s->n_expert_shared;
    want(w, -1, "token_embd.weight", 2, E, n_vocab, 1);
    want(w, -1, "output_norm.weight", 1, E, 1, 1);
    want(w, -1, "output.weight", 2, E, n_vocab, 1);
    for (int i = 0; i < (int)s->n_layer; i++) {
        bool mla = (i + 1) % (int)s->attn_interval == 0 || i + 1 == (int)s->n_layer;
        want(w, i, "attn_norm.weight", 1, E, 1, 1);
        if (!mla) {
            want(w, i, "ssm_conv1d_q.weight", 3, s->ssm_conv, 1, C);
            want(w, i, "ssm_conv1d_k.weight", 3, s->ssm_conv, 1, C);
            want(w, i, "ssm_conv1d_v.weight", 3, s->ssm_conv, 1, C);
            want(w, i, "attn_q.weight", 2, E, C, 1);
            want(w, i, "attn_k.weight", 2, E, C, 1);
            want(w, i, "attn_v.weight", 2, E, C, 1);
            want(w, i, "ssm_f_a.weight", 2, E, d, 1);
            want(w, i, "ssm_f_b.weight", 2, d, C, 1);
            want(w, i, "ssm_beta.weight", 2, E, H, 1);
            want(w, i, "ssm_a", 2, 1, H, 1);
            want(w, i, "ssm_dt.bias", 1, C, 1, 1);
            want(w, i, "ssm_g_a.weight", 2, E, d, 1);
            want(w, i, "ssm_g_b.weight", 2, d, C, 1);
            want(w, i, "ssm_norm.weight", 1, d, 1, 1);
            want(w, i, "attn_output.weight", 2, C, E, 1);
        } else {
            want(w, i, "attn_kv_a_norm.weight", 1, s->kv_lora, 1, 1);
            want(w, i, "attn_q.weight", 2, E, H * kq, 1);
            want(w, i, "attn_kv_a_mqa.weight", 2, E, s->kv_lora + s->qk_rope, 1);
            want(w, i, "attn_k_b.weight", 3, s->qk_nope, s->kv_lora, H);
            want(w, i, "attn_v_b.weight", 3, s->kv_lora, s->v_head, H);
            want(w, i, "attn_output.weight", 2, H * s->v_head, E, 1);
        }
        want(w, i, "ffn_norm.weight", 1, E, 1, 1);
        if (i < (int)s->n_dense_lead) {
            want(w, i, "ffn_gate.weight", 2, E, s->n_ff, 1);
            want(w, i, "ffn_down.weight", 2, s->n_ff, E, 1);
            want(w, i, "ffn_up.weight", 2, E, s->n_ff, 1);
            continue;
        }
        want(w, i, "ffn_gate_inp.weight", 2, E, s->n_expert, 1);
        want(w, i, "ffn_gate_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_down_exps.weight", 3, s->n_ff_exp, E, s->n_expert);
        want(w, i, "ffn_up_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_gate_shexp.weight", 2, E, sh, 1);
        want(w, i, "ffn_down_shexp.weight", 2, sh, E, 1);
        want(w, i, "ffn_up_shexp.weight", 2, E, sh, 1);
        want(w, i, "exp_probs_b.bias", 1, s->n_expert, 1, 1);
    }
}

/* src/models/qwen35moe.cpp: layer i attends iff (i + 1) % interval == 0 */
static void want_qwen35(want_list *w, const synth_shape *s, int64_t n_vocab)
{
    int64_t E = s->n_embd, D = s->head_dim, d = s->ssm_state, nv = s->ssm_vheads, vd = nv * d;
    int64_t conv = 2 * (int64_t)s->ssm_groups * d + vd, fs = s->n_ff_shexp;
    want(w, -1, "token_embd.weight", 2, E, n_vocab, 1);
    want(w, -1, "output_norm.weight", 1, E, 1, 1);
    want(w, -1, "output.weight", 2, E, n_vocab, 1);
    for (int i = 0; i < (int)s->n_layer; i++) {
        want(w, i, "attn_norm.weight", 1, E, 1, 1);
        want(w, i, "post_attention_norm.weight", 1, E, 1, 1);
        if ((i + 1) % (int)s->attn_interval == 0) {
            want(w, i, "attn_q.weight", 2, E, 2 * D * s->n_head, 1);
            want(w, i, "attn_k.weight", 2, E, D * s->n_head_kv, 1);
            want(w, i, "attn_v.weight", 2, E, D * s->n_head_kv, 1);
            want(w, i, "attn_output.weight", 2, D * s->n_head, E, 1);
            want(w, i, "attn_q_norm.weight", 1, D, 1, 1);
            want(w, i, "attn_k_norm.weight", 1, D, 1, 1);
        } else {
            want(w, i, "attn_qkv.weight", 2, E, conv, 1);
            want(w, i, "attn_gate.weight", 2, E, vd, 1);
            want(w, i, "ssm_conv1d.weight", 2, s->ssm_conv, conv, 1);
            want(w, i, "ssm_dt.bias", 1, nv, 1, 1);
            want(w, i, "ssm_a", 1, nv, 1, 1);
            want(w, i, "ssm_beta.weight", 2, E, nv, 1);
            want(w, i, "ssm_alpha.weight", 2, E, nv, 1);
            want(w, i, "ssm_norm.weight", 1, d, 1, 1);
            want(w, i, "ssm_out.weight", 2, vd, E, 1);
        }
        want(w, i, "ffn_gate_inp.weight", 2, E, s->n_expert, 1);
        want(w, i, "ffn_down_exps.weight", 3, s->n_ff_exp, E, s->n_expert);
        want(w, i, "ffn_gate_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_up_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_gate_inp_shexp.weight", 1, E, 1, 1);
        want(w, i, "ffn_gate_shexp.weight", 2, E, fs, 1);
        want(w, i, "ffn_up_shexp.weight", 2, E, fs, 1);
        want(w, i, "ffn_down_shexp.weight", 2, fs, E, 1);
    }
}

/* src/models/openai-moe-iswa.cpp / llama-model.cpp LLM_ARCH_OPENAI_MOE: every bias, the sinks */
static void want_gpt_oss(want_list *w, const synth_shape *s, int64_t n_vocab)
{
    int64_t E = s->n_embd, q = (int64_t)s->n_head * s->head_dim, kv = (int64_t)s->n_head_kv * s->head_dim;
    int64_t F = s->n_ff_exp, X = s->n_expert;
    want(w, -1, "token_embd.weight", 2, E, n_vocab, 1);
    want(w, -1, "output_norm.weight", 1, E, 1, 1);
    want(w, -1, "output.weight", 2, E, n_vocab, 1);
    for (int i = 0; i < (int)s->n_layer; i++) {
        want(w, i, "attn_norm.weight", 1, E, 1, 1);
        want(w, i, "post_attention_norm.weight", 1, E, 1, 1);
        want(w, i, "attn_q.weight", 2, E, q, 1);
        want(w, i, "attn_k.weight", 2, E, kv, 1);
        want(w, i, "attn_v.weight", 2, E, kv, 1);
        want(w, i, "attn_output.weight", 2, q, E, 1);
        want(w, i, "attn_sinks.weight", 1, s->n_head, 1, 1);
        want(w, i, "ffn_gate_inp.weight", 2, E, X, 1);
        want(w, i, "ffn_gate_exps.weight", 3, E, F, X);
        want(w, i, "ffn_down_exps.weight", 3, F, E, X);
        want(w, i, "ffn_up_exps.weight", 3, E, F, X);
        want(w, i, "attn_q.bias", 1, q, 1, 1);
        want(w, i, "attn_k.bias", 1, kv, 1, 1);
        want(w, i, "attn_v.bias", 1, kv, 1, 1);
        want(w, i, "attn_output.bias", 1, E, 1, 1);
        want(w, i, "ffn_gate_inp.bias", 1, X, 1, 1);
        want(w, i, "ffn_gate_exps.bias", 2, F, X, 1);
        want(w, i, "ffn_down_exps.bias", 2, E, X, 1);
        want(w, i, "ffn_up_exps.bias", 2, F, X, 1);
    }
}

/* llama-model.cpp LLM_ARCH_GLM4_MOE (no MTP layer): q/k/v biases, q/k norms
 * optional, post_attention_norm, the dense lead layers, then experts with
 * exp_probs_b and the shared expert (n_ff_exp x expert_shared_count) */
static void want_glm(want_list *w, const synth_shape *s, int64_t n_vocab)
{
    int64_t E = s->n_embd, q = (int64_t)s->n_head * s->head_dim, kv = (int64_t)s->n_head_kv * s->head_dim;
    int64_t sh = (int64_t)s->n_ff_exp * s->n_expert_shared;
    want(w, -1, "token_embd.weight", 2, E, n_vocab, 1);
    want(w, -1, "output_norm.weight", 1, E, 1, 1);
    want(w, -1, "output.weight", 2, E, n_vocab, 1);
    for (int i = 0; i < (int)s->n_layer; i++) {
        want(w, i, "attn_norm.weight", 1, E, 1, 1);
        want(w, i, "attn_q.weight", 2, E, q, 1);
        want(w, i, "attn_k.weight", 2, E, kv, 1);
        want(w, i, "attn_v.weight", 2, E, kv, 1);
        want(w, i, "attn_q.bias", 1, q, 1, 1);
        want(w, i, "attn_k.bias", 1, kv, 1, 1);
        want(w, i, "attn_v.bias", 1, kv, 1, 1);
        want(w, i, "attn_output.weight", 2, q, E, 1);
        want(w, i, "post_attention_norm.weight", 1, E, 1, 1);
        if (i < (int)s->n_dense_lead) {
            want(w, i, "ffn_gate.weight", 2, E, s->n_ff, 1);
            want(w, i, "ffn_down.weight", 2, s->n_ff, E, 1);
            want(w, i, "ffn_up.weight", 2, E, s->n_ff, 1);
            continue;
        }
        want(w, i, "ffn_gate_inp.weight", 2, E, s->n_expert, 1);
        want(w, i, "exp_probs_b.bias", 1, s->n_expert, 1, 1);
        want(w, i, "ffn_gate_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_down_exps.weight", 3, s->n_ff_exp, E, s->n_expert);
        want(w, i, "ffn_up_exps.weight", 3, E, s->n_ff_exp, s->n_expert);
        want(w, i, "ffn_gate_shexp.weight", 2, E, sh, 1);
        want(w, i, "ffn_down_shexp.weight", 2, sh, E, 1);
        want(w, i, "ffn_up_shexp.weight", 2, E, sh, 1);
    }
}

static void want_for(want_list *w, const synth_shape *s, int64_t n_vocab)
{
    w->n = 0;
    if (s->family == SYNTH_GPT_OSS) {
        want_gpt_oss(w, s, n_vocab);
        return;
    }
    if (s->family == SYNTH_QWEN3MOE) want_qwen3moe(w, s, n_vocab);
    else if (s->family == SYNTH_KIMI_LINEAR) want_kimi(w, s, n_vocab);
    else if (s->family == SYNTH_QWEN35MOE) want_qwen35(w, s, n_vocab);
    else if (s->family == SYNTH_GLM4MOE) want_glm(w, s, n_vocab);
    else want_deepseek2(w, s, n_vocab);
}

/* Type rules: norms/routers/biases f32; matrices the configured type unless
 * the row does not fit its blocks (llama-quantize's fallback). */
static uint32_t want_type(const synth_config *c, const char *name, const int64_t *ne, uint32_t n_dims)
{
    /* llama-quantize keeps 1-D tensors, routers, conv taps and names not ending in "weight" (ssm_a) */
    size_t len = strlen(name);
    if (n_dims == 1 || strstr(name, "ffn_gate_inp") || strstr(name, "ssm_conv1d") || len < 6 ||
        strcmp(name + len - 6, "weight"))
        return GGML_TYPE_F32;
    uint32_t t = strstr(name, "_exps") ? c->expert_type
                 : !strcmp(name, "token_embd.weight") ? c->embd_type
                 : !strcmp(name, "output.weight")     ? c->output_type
                                                      : c->dense_type;
    if (ne[0] % ggml_type_get(t)->blck_size == 0) return t;
    return t == GGML_TYPE_Q4_K ? GGML_TYPE_Q5_0 : t == GGML_TYPE_Q6_K ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
}

/* The weight scales docs/SYNTH.md specifies (against rank collapse):
 * attention output 0.5x; q and k 4x each (qwen3moe through its per-head
 * q/k norms, deepseek2 through the projections). */
static double spec_gain(synth_family fam, const char *name)
{
    const char *base = !strncmp(name, "blk.", 4) ? strchr(name + 4, '.') + 1 : name;
    if (!strcmp(base, "attn_output.weight")) return 0.5;
    if (fam == SYNTH_QWEN3MOE || fam == SYNTH_QWEN35MOE) return !strcmp(base, "attn_q_norm.weight") || !strcmp(base, "attn_k_norm.weight") ? 4 : 1;
    return !strcmp(base, "attn_q.weight") || !strcmp(base, "attn_q_b.weight") || !strcmp(base, "attn_k_b.weight") ||
                   !strcmp(base, "attn_kv_a_mqa.weight")
               ? 4
               : 1;
}

/* ---- configs ---- */

static synth_config config(const char *like, uint32_t type, double skew, const char *const *sets)
{
    synth_config c;
    sl_err err;
    memset(&c, 0, sizeof c);
    if (synth_shape_preset(like, &c.shape, &err)) fprintf(stderr, "%s\n", err.msg);
    for (; sets && *sets; sets += 2)
        if (synth_shape_set(&c.shape, sets[0], sets[1], &err)) fprintf(stderr, "%s\n", err.msg);
    synth_config_types(&c, type, &err);
    c.route_skew = skew;
    c.seed = 42;
    return c;
}

static const char *const TINY_QWEN[] = {"n_layer", "2", "n_expert", "8", "n_embd", "256", "n_head", "4",
                                        "n_head_kv", "2", "head_dim", "64", "n_ff_exp", "256", "n_ff", "512", NULL};
static const char *const TINY_LITE[] = {"n_layer", "3", "n_expert", "8", "n_embd", "256", "n_head", "4",
                                        "kv_lora", "64", "qk_nope", "32", "qk_rope", "32", "v_head", "32",
                                        "n_ff", "512", "n_ff_exp", "96", NULL};
static const char *const TINY_KIMI[] = {"n_layer", "3", "n_expert", "8", "n_embd", "256", "n_head", "4",
                                        "q_lora", "64", "kv_lora", "64", "qk_nope", "32", "qk_rope", "32",
                                        "v_head", "32", "n_ff", "512", "n_ff_exp", "256", NULL};

static const char *const TINY_KIMI_LINEAR[] = {
    "n_layer", "4", "n_expert", "8", "n_expert_used", "2", "n_embd", "256", "n_head", "4", "ssm_groups", "4",
    "ssm_vheads", "4", "ssm_state", "64", "kv_lora", "64", "qk_nope", "32", "qk_rope", "32", "v_head", "32",
    "n_ff", "512", "n_ff_exp", "256", NULL};
static const char *const TINY_QWEN35[] = {
    "n_layer", "4", "n_expert", "8", "n_expert_used", "2", "n_embd", "256", "n_head", "4", "n_head_kv", "2",
    "head_dim", "64", "n_rot", "16", "ssm_groups", "2", "ssm_vheads", "4", "ssm_state", "64", "n_ff_exp", "256",
    "n_ff_shexp", "256", NULL};

static const char *const TINY_GPT_OSS[] = {"n_layer", "3", "n_expert", "8", "n_expert_used", "2", "n_embd", "256",
                                           "n_head", "4", "n_head_kv", "2", "head_dim", "64", "n_ff_exp", "256",
                                           "n_swa", "8", NULL};

static const char *const TINY_GLM[] = {"n_layer", "3", "n_expert", "8", "n_expert_used", "2", "n_embd", "256",
                                       "n_head", "4", "n_head_kv", "2", "head_dim", "64", "n_rot", "32",
                                       "n_ff", "512", "n_ff_exp", "128", NULL};

/* ---- checks on a plan ---- */

static void check_plan_tensors(const synth_config *c, synth_job *j)
{
    static want_list w;
    uint64_t n;
    const synth_tensor *t = synth_job_tensors(j, &n);
    want_for(&w, &c->shape, (int64_t)synth_job_n_vocab(j));
    T_CHECK(n == (uint64_t)w.n, "%llu tensors planned, llama.cpp wants %d", (unsigned long long)n, w.n);
    for (int i = 0; i < w.n; i++) {
        const synth_tensor *f = NULL;
        for (uint64_t k = 0; k < n && !f; k++)
            if (!strcmp(t[k].name, w.t[i].name)) f = &t[k];
        T_CHECK(f != NULL, "missing %s", w.t[i].name);
        if (!f) continue;
        T_CHECK(f->n_dims == w.t[i].n_dims && f->ne[0] == w.t[i].ne[0] && f->ne[1] == w.t[i].ne[1] &&
                    f->ne[2] == w.t[i].ne[2],
                "%s: shape %lld x %lld x %lld, want %lld x %lld x %lld", f->name, (long long)f->ne[0],
                (long long)f->ne[1], (long long)f->ne[2], (long long)w.t[i].ne[0], (long long)w.t[i].ne[1],
                (long long)w.t[i].ne[2]);
        uint32_t wt = want_type(c, f->name, f->ne, f->n_dims);
        T_CHECK(f->type == wt, "%s: type %s, want %s", f->name, ggml_type_name(f->type), ggml_type_name(wt));
    }
}

static void real_shape_plan(const char *like, const char *label, const char *const *sets, uint32_t type)
{
    t_begin(label);
    sl_err err = {{0}};
    gguf_file *v = NULL;
    synth_job *j = NULL;
    synth_config c = config(like, type, 0, sets);
    T_CHECK(gguf_open(&v, VOCAB, &err) == 0, "%s", err.msg);
    T_CHECK(v && synth_job_new(&j, &c, v, &err) == 0, "%s", err.msg);
    if (j) {
        check_plan_tensors(&c, j);
        uint64_t n, sum = 0;
        const synth_tensor *t = synth_job_tensors(j, &n);
        for (uint64_t i = 0; i < n; i++) sum += t[i].nbytes;
        T_CHECK(synth_job_file_size(j) > sum && synth_job_file_size(j) < sum + (16u << 20), "file size vs data");
    }
    synth_job_free(j);
    gguf_close(v);
    t_end();
}

/* ---- checks on a written file ---- */

static bool f16_ok(const uint8_t *p, bool positive)
{
    uint16_t h;
    memcpy(&h, p, 2);
    /* decode by hand: exponent 31 is inf/nan */
    if (((h >> 10) & 31) == 31) return false;
    return !positive || ((h & 0x8000) == 0 && h != 0);
}

/* Every block's f16 scales finite (and d > 0 where the generator makes it). */
static uint64_t bad_scales(const gguf_tensor *t, const uint8_t *d)
{
    uint64_t bad = 0, n = t->nbytes;
    switch (t->type) {
    case GGML_TYPE_F32:
        for (uint64_t i = 0; i < n; i += 4) {
            float f;
            memcpy(&f, d + i, 4);
            bad += !isfinite(f);
        }
        break;
    case GGML_TYPE_F16: for (uint64_t i = 0; i < n; i += 2) bad += !f16_ok(d + i, false); break;
    case GGML_TYPE_Q4_0: for (uint64_t i = 0; i < n; i += 18) bad += !f16_ok(d + i, false); break;
    case GGML_TYPE_Q5_0: for (uint64_t i = 0; i < n; i += 22) bad += !f16_ok(d + i, false); break;
    case GGML_TYPE_Q8_0: for (uint64_t i = 0; i < n; i += 34) bad += !f16_ok(d + i, false); break;
    case GGML_TYPE_Q4_K:
        for (uint64_t i = 0; i < n; i += 144) bad += !f16_ok(d + i, false) + !f16_ok(d + i + 2, false);
        break;
    case GGML_TYPE_Q6_K: for (uint64_t i = 0; i < n; i += 210) bad += !f16_ok(d + i + 208, false); break;
    case GGML_TYPE_MXFP4: for (uint64_t i = 0; i < n; i += 17) bad += d[i] == 0xff; break; /* E8M0 NaN */
    default: bad++;
    }
    return bad;
}

static float half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e ? ldexpf((float)(m | 1024), e - 25) : ldexpf((float)m, -24);
    return h & 0x8000 ? -v : v;
}

/* Dequantised sum and sum of squares, following ggml-quants.c dequantize_row_*. */
static void moments(const gguf_tensor *t, const uint8_t *d, double *s1, double *s2, uint64_t *cnt)
{
    *s1 = *s2 = 0;
    *cnt = 0;
    float y[256];
    uint64_t bs = ggml_type_get(t->type)->type_size;
    for (uint64_t off = 0; off < t->nbytes; off += bs) {
        const uint8_t *b = d + off;
        int n = 0;
        if (t->type == GGML_TYPE_Q4_K) {
            float dd = half(b), dm = half(b + 2);
            const uint8_t *sc = b + 4, *q = b + 16;
            for (int j = 0; j < 8; j++) {
                int s, m;
                if (j < 4) s = sc[j] & 63, m = sc[j + 4] & 63;
                else s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4), m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
                for (int l = 0; l < 32; l++) {
                    int v = j % 2 ? q[32 * (j / 2) + l] >> 4 : q[32 * (j / 2) + l] & 15;
                    y[n++] = dd * s * v - dm * m;
                }
            }
        } else if (t->type == GGML_TYPE_Q6_K) {
            float dd = half(b + 208);
            const uint8_t *ql = b, *qh = b + 128;
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8)
                for (int l = 0; l < 32; l++) {
                    int is = l / 16;
                    y[128 * h + l] = dd * sc[is] * (((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
                    y[128 * h + l + 32] = dd * sc[is + 2] * (((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
                    y[128 * h + l + 64] = dd * sc[is + 4] * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                    y[128 * h + l + 96] = dd * sc[is + 6] * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                }
            n = 256;
        } else if (t->type == GGML_TYPE_MXFP4) { /* e8m0 scale, twice the e2m1 values */
            static const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
            float dd = ldexpf(1.0f, b[0] - 128);
            for (int j = 0; j < 16; j++) y[j] = dd * kv[b[1 + j] & 15], y[j + 16] = dd * kv[b[1 + j] >> 4];
            n = 32;
        } else if (t->type == GGML_TYPE_Q5_0) {
            float dd = half(b);
            uint32_t qh;
            memcpy(&qh, b + 2, 4);
            for (int j = 0; j < 16; j++) {
                y[j] = dd * ((int)((b[6 + j] & 15) | (((qh >> j) & 1) << 4)) - 16);
                y[j + 16] = dd * ((int)((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
            }
            n = 32;
        } else if (t->type == GGML_TYPE_Q8_0) {
            for (int j = 0; j < 32; j++) y[j] = half(b) * (int8_t)b[2 + j];
            n = 32;
        } else {
            return;
        }
        for (int i = 0; i < n; i++) *s1 += y[i], *s2 += (double)y[i] * y[i];
        *cnt += (uint64_t)n;
    }
}

static void check_file(const char *path, const synth_config *c, const gguf_file *vocab)
{
    sl_err err = {{0}};
    gguf_file *g;
    if (gguf_open(&g, path, &err)) {
        T_CHECK(0, "gguf_open: %s", err.msg);
        return;
    }
    const synth_shape *s = &c->shape;
    const char *arch = synth_family_arch(s->family);
    const gguf_str *a;
    T_CHECK(gguf_get_str(g, "general.architecture", &a, &err) == 1 && !strcmp(a->s, arch), "architecture");
    /* keys llama.cpp requires (or asserts on), with the shape's values */
    struct { const char *key; uint32_t val; } req[32];
    int nr = 0;
#define REQ(k, v) (req[nr].key = (k), req[nr].val = (v), nr++)
    REQ("context_length", s->n_ctx_train), REQ("embedding_length", s->n_embd), REQ("block_count", s->n_layer);
    REQ("attention.head_count", s->n_head), REQ("expert_count", s->n_expert);
    REQ("expert_used_count", s->n_expert_used), REQ("expert_feed_forward_length", s->n_ff_exp);
    if (s->family == SYNTH_QWEN3MOE || s->family == SYNTH_QWEN35MOE || s->family == SYNTH_GPT_OSS) {
        REQ("attention.head_count_kv", s->n_head_kv), REQ("attention.key_length", s->head_dim);
        REQ("attention.value_length", s->head_dim);
    }
    if (s->family == SYNTH_GPT_OSS)
        REQ("attention.sliding_window", s->n_swa), REQ("rope.scaling.original_context_length", s->yarn_orig_ctx);
    if (s->family == SYNTH_QWEN35MOE) {
        REQ("rope.dimension_count", s->n_rot), REQ("expert_shared_feed_forward_length", s->n_ff_shexp);
        REQ("ssm.conv_kernel", s->ssm_conv), REQ("ssm.state_size", s->ssm_state);
        REQ("ssm.group_count", s->ssm_groups), REQ("ssm.time_step_rank", s->ssm_vheads);
        REQ("ssm.inner_size", s->ssm_vheads * s->ssm_state), REQ("full_attention_interval", s->attn_interval);
    } else if (s->family == SYNTH_KIMI_LINEAR) {
        REQ("feed_forward_length", s->n_ff), REQ("leading_dense_block_count", s->n_dense_lead);
        REQ("attention.kv_lora_rank", s->kv_lora), REQ("attention.key_length_mla", s->qk_nope + s->qk_rope);
        REQ("attention.value_length_mla", s->v_head), REQ("expert_shared_count", s->n_expert_shared);
        REQ("rope.dimension_count", s->qk_rope), REQ("expert_gating_func", s->gating);
        REQ("ssm.conv_kernel", s->ssm_conv), REQ("kda.head_dim", s->ssm_state);
    } else if (s->family == SYNTH_DEEPSEEK2) {
        REQ("attention.head_count_kv", 1), REQ("feed_forward_length", s->n_ff);
        REQ("leading_dense_block_count", s->n_dense_lead), REQ("attention.kv_lora_rank", s->kv_lora);
        REQ("attention.key_length", s->kv_lora + s->qk_rope);
        REQ("attention.key_length_mla", s->qk_nope + s->qk_rope);
        REQ("attention.value_length_mla", s->v_head), REQ("expert_shared_count", s->n_expert_shared);
        REQ("rope.dimension_count", s->qk_rope), REQ("expert_gating_func", s->gating);
        REQ("expert_group_count", s->n_group), REQ("expert_group_used_count", s->topk_group);
        if (s->n_layer != 26 && s->n_layer != 27) REQ("attention.q_lora_rank", s->q_lora);
    }
#undef REQ
    for (int i = 0; i < nr; i++) {
        char key[128];
        uint32_t v = 0xdeadbeef;
        snprintf(key, sizeof key, "%s.%s", arch, req[i].key);
        T_CHECK(gguf_get_u32(g, key, &v, &err) == 1 && v == req[i].val, "%s = %u, want %u", key, v, req[i].val);
    }
    float eps = 0;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    T_CHECK(gguf_get_f32(g, key, &eps, &err) == 1 && eps == s->rms_eps, "rms eps");
    /* tokenizer copied verbatim: same count of tokenizer.* keys, same bytes of each array */
    for (uint64_t i = 0; i < vocab->n_kv; i++) {
        const gguf_kv *src = &vocab->kv[i];
        if (strncmp(src->key, "tokenizer.", 10)) continue;
        const gguf_kv *dst = gguf_find(g, src->key);
        T_CHECK(dst && dst->v.type == src->v.type, "%s missing or retyped", src->key);
        if (!dst || dst->v.type != src->v.type) continue;
        if (src->v.type == GGUF_ARRAY && src->v.arr.type == GGUF_STRING) {
            bool same = dst->v.arr.n == src->v.arr.n;
            for (uint64_t k = 0; same && k < src->v.arr.n; k++) {
                const gguf_str *x = &((gguf_str *)src->v.arr.data)[k], *y = &((gguf_str *)dst->v.arr.data)[k];
                same = x->len == y->len && !memcmp(x->s, y->s, x->len);
            }
            T_CHECK(same, "%s differs", src->key);
        } else if (src->v.type == GGUF_ARRAY) {
            T_CHECK(dst->v.arr.n == src->v.arr.n && !memcmp(dst->v.arr.data, src->v.arr.data,
                                                            src->v.arr.n * gguf_scalar_size(src->v.arr.type)),
                    "%s differs", src->key);
        } else if (src->v.type == GGUF_STRING) {
            T_CHECK(dst->v.str.len == src->v.str.len && !memcmp(dst->v.str.s, src->v.str.s, src->v.str.len), "%s", src->key);
        } else {
            T_CHECK(dst->v.u == src->v.u, "%s value", src->key);
        }
    }
    /* tensors: llama.cpp's list, exact shapes, finite scales, unit-scale matrices */
    static want_list w;
    const void *tok;
    uint64_t n_vocab = 0;
    gguf_get_arr(vocab, "tokenizer.ggml.tokens", GGUF_STRING, &tok, &n_vocab, &err);
    want_for(&w, s, (int64_t)n_vocab);
    T_CHECK(g->n_tensors == (uint64_t)w.n, "%llu tensors, llama.cpp wants %d", (unsigned long long)g->n_tensors, w.n);
    for (int i = 0; i < w.n; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, w.t[i].name);
        T_CHECK(t && t->n_dims == w.t[i].n_dims && t->ne[0] == w.t[i].ne[0] && t->ne[1] == w.t[i].ne[1] &&
                    t->ne[2] == w.t[i].ne[2], "%s missing or misshaped", w.t[i].name);
        if (!t) continue;
        T_CHECK(t->type == want_type(c, t->name, t->ne, t->n_dims), "%s type %s", t->name, ggml_type_name(t->type));
        uint8_t *d = malloc(t->nbytes);
        T_CHECK(d && gguf_read_tensor(g, t, 0, d, t->nbytes, &err) == 0, "read %s", t->name);
        if (!d) continue;
        if (t->n_dims == 1 && strstr(t->name, "norm.weight")) { /* 1 + N(0, 0.05^2), times the gain */
            double sum = 0;
            for (int64_t k = 0; k < t->ne[0]; k++) sum += ((const float *)d)[k];
            double g = spec_gain(s->family, t->name), mean = sum / (double)t->ne[0];
            T_CHECK(mean > 0.95 * g && mean < 1.05 * g, "%s: mean %.3f, want ~%.1f", t->name, mean, g);
        }
        uint64_t bad = bad_scales(t, d);
        T_CHECK(bad == 0, "%s: %llu blocks with non-finite scales", t->name, (unsigned long long)bad);
        double s1, s2;
        uint64_t cnt;
        moments(t, d, &s1, &s2, &cnt);
        bool decay = strlen(t->name) > 5 && !strcmp(t->name + strlen(t->name) - 5, "ssm_a"); /* negative by design */
        decay |= strlen(t->name) > 5 && !strcmp(t->name + strlen(t->name) - 5, ".bias"); /* N(0, 0.05^2) */
        if (cnt && t->n_dims > 1 && strcmp(t->name, "token_embd.weight") && !decay) {
            double sd = sqrt(s2 / cnt), want_sd = spec_gain(s->family, t->name) / sqrt((double)t->ne[0]);
            T_CHECK(sd > 0.8 * want_sd && sd < 1.25 * want_sd, "%s: std %.4g, want ~%.4g (N(0, 1/fan_in))",
                    t->name, sd, want_sd);
            T_CHECK(fabs(s1 / cnt) < 0.1 * want_sd, "%s: mean %.3g", t->name, s1 / cnt);
        }
        free(d);
    }
    struct stat st;
    uint64_t end = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].file_off + g->tensors[i].nbytes > end) end = g->tensors[i].file_off + g->tensors[i].nbytes;
    T_CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size >= end && (uint64_t)st.st_size - end < 32,
            "file size %lld vs data end %llu", (long long)st.st_size, (unsigned long long)end);
    gguf_close(g);
}

static int write_model(const synth_config *c, const gguf_file *vocab, const char *path, sl_err *err)
{
    synth_job *j;
    if (synth_job_new(&j, c, vocab, err)) return -1;
    int rc = synth_job_write(j, path, NULL, NULL, err);
    synth_job_free(j);
    return rc;
}

static void tiny_model(const char *label, const char *like, const char *const *sets, uint32_t type, double skew)
{
    t_begin(label);
    sl_err err = {{0}};
    gguf_file *v = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/tiny.gguf", tmpdir);
    synth_config c = config(like, type, skew, sets);
    T_CHECK(gguf_open(&v, VOCAB, &err) == 0, "%s", err.msg);
    if (v && write_model(&c, v, path, &err) == 0) check_file(path, &c, v);
    else T_CHECK(0, "write: %s", err.msg);
    unlink(path);
    gguf_close(v);
    t_end();
}

/* ---- determinism ---- */

static int same_file(const char *a, const char *b)
{
    char *x, *y;
    size_t nx, ny;
    sl_err err;
    if (sl_read_file(a, &x, &nx, &err)) return -1;
    if (sl_read_file(b, &y, &ny, &err)) {
        free(x);
        return -1;
    }
    int same = nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return same;
}

static void determinism(void)
{
    t_begin("synth is deterministic in its seed");
    sl_err err = {{0}};
    gguf_file *v = NULL;
    char p1[512], p2[512], p3[512];
    snprintf(p1, sizeof p1, "%s/a.gguf", tmpdir);
    snprintf(p2, sizeof p2, "%s/b.gguf", tmpdir);
    snprintf(p3, sizeof p3, "%s/c.gguf", tmpdir);
    synth_config c = config("qwen3-30b-a3b", GGML_TYPE_Q4_K, 1.0, TINY_QWEN);
    T_CHECK(gguf_open(&v, VOCAB, &err) == 0, "%s", err.msg);
    T_CHECK(v && write_model(&c, v, p1, &err) == 0 && write_model(&c, v, p2, &err) == 0, "%s", err.msg);
    c.seed++;
    T_CHECK(v && write_model(&c, v, p3, &err) == 0, "%s", err.msg);
    T_CHECK(same_file(p1, p2) == 1, "same seed, different bytes");
    T_CHECK(same_file(p1, p3) == 0, "different seed, same bytes");
    unlink(p1), unlink(p2), unlink(p3);
    gguf_close(v);
    t_end();
}

/* ---- routing skew ---- */

/* Spearman rank correlation of two score vectors (ties averaged by order). */
static double spearman(const double *a, const double *b, int n)
{
    double ra[1024], rb[1024];
    for (int i = 0; i < n; i++) {
        int ga = 0, gb = 0;
        for (int k = 0; k < n; k++) ga += a[k] < a[i] || (a[k] == a[i] && k < i), gb += b[k] < b[i] || (b[k] == b[i] && k < i);
        ra[i] = ga, rb[i] = gb;
    }
    double d2 = 0;
    for (int i = 0; i < n; i++) d2 += (ra[i] - rb[i]) * (ra[i] - rb[i]);
    return 1 - 6 * d2 / ((double)n * ((double)n * n - 1));
}

/* The popularity a file was built with, read back from its weights: the
 * router column of the skew coordinate, or the selection bias. */
static int intended(const gguf_file *g, double *pop, uint32_t n_exp)
{
    sl_err err;
    int64_t k = -1;
    gguf_get_i64(g, "sluice.synth.skew_dim", &k, &err);
    const gguf_tensor *t = gguf_find_tensor(g, k >= 0 ? "blk.1.ffn_gate_inp.weight" : "blk.1.exp_probs_b.bias");
    if (!t) return -1;
    float *v = malloc(t->nbytes);
    if (!v || gguf_read_tensor(g, t, 0, v, t->nbytes, &err)) {
        free(v);
        return -1;
    }
    for (uint32_t e = 0; e < n_exp; e++) pop[e] = k >= 0 ? v[(uint64_t)e * t->ne[0] + (uint64_t)k] : v[e];
    free(v);
    return 0;
}

static void skew_case(const char *label, const char *like, const char *const *sets, double skew, double s_lo,
                      double s_hi, bool correlated)
{
    t_begin(label);
    sl_err err = {{0}};
    gguf_file *v = NULL, *g = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/skew.gguf", tmpdir);
    synth_config c = config(like, GGML_TYPE_Q4_0, skew, sets);
    T_CHECK(gguf_open(&v, VOCAB, &err) == 0 && write_model(&c, v, path, &err) == 0, "%s", err.msg);
    T_CHECK(gguf_open(&g, path, &err) == 0, "%s", err.msg);
    uint64_t counts[1024];
    uint32_t n_exp = 0;
    if (g && synth_route_sample(g, 1, 3000, 5, counts, 1024, &n_exp, &err) == 0) {
        double zs = synth_zipf_exponent(counts, n_exp);
        T_CHECK(zs >= s_lo && zs <= s_hi, "zipf exponent %.2f outside [%.2f, %.2f]", zs, s_lo, s_hi);
        double pop[1024], cnt[1024];
        for (uint32_t e = 0; e < n_exp; e++) cnt[e] = (double)counts[e];
        if (correlated) {
            T_CHECK(intended(g, pop, n_exp) == 0, "no skew signal in the weights");
            double rho = spearman(pop, cnt, (int)n_exp);
            T_CHECK(rho > 0.8, "popularity follows the built-in bias only with rho %.2f", rho);
        }
    } else {
        T_CHECK(0, "route sample: %s", err.msg);
    }
    gguf_close(g);
    gguf_close(v);
    unlink(path);
    t_end();
}

/* ---- shape rules ---- */

static void shape_rules(void)
{
    t_begin("synth refuses shapes llama.cpp would misread");
    sl_err err = {{0}};
    synth_shape s;
    T_CHECK(synth_shape_preset("kimi-k2-scaled", &s, &err) == 0, "preset");
    s.n_layer = 27;
    T_CHECK(synth_shape_check(&s, &err) == -1 && strstr(err.msg, "26 or 27 layers"), "27-layer kimi: %s", err.msg);
    s.n_layer = 4, s.n_expert = 513; /* sluice runs it; llama.cpp (LLAMA_MAX_EXPERTS 512) would not load it */
    T_CHECK(synth_shape_check(&s, &err) == 0 && synth_shape_llama_note(&s), "513 experts: %s", err.msg);
    s.n_expert = 512;
    T_CHECK(!synth_shape_llama_note(&s), "512 experts need no note");
    s.n_expert = 40000;
    T_CHECK(synth_shape_check(&s, &err) == -1, "40000 experts");
    s.n_expert = 8, s.n_expert_used = 9;
    T_CHECK(synth_shape_check(&s, &err) == -1, "used > experts");
    s.n_expert_used = 8, s.n_dense_lead = 4;
    T_CHECK(synth_shape_check(&s, &err) == -1, "no MoE layer");
    T_CHECK(synth_shape_preset("deepseek-v2-lite", &s, &err) == 0 && synth_shape_check(&s, &err) == 0,
            "lite at 27 layers is fine: %s", err.msg);
    T_CHECK(synth_shape_preset("nope", &s, &err) == -1 && strstr(err.msg, "qwen3-30b-a3b"), "unknown preset");
    T_CHECK(synth_shape_set(&s, "n_layer", "x", &err) == -1 && synth_shape_set(&s, "bogus", "1", &err) == -1,
            "bad overrides");
    synth_config c;
    T_CHECK(synth_config_types(&c, GGML_TYPE_Q2_K, &err) == -1, "q2_K is not generated");
    t_end();
}

int main(void)
{
    (void)t_skip, (void)t_shared;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-test-synth-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    real_shape_plan("qwen3-30b-a3b", "synth plan: qwen3-30b-a3b real shape = llama.cpp qwen3moe tensors", NULL,
                    GGML_TYPE_Q4_K);
    real_shape_plan("deepseek-v2-lite", "synth plan: deepseek-v2-lite real shape (27 layers, lite)", NULL,
                    GGML_TYPE_Q4_K);
    static const char *const lite4[] = {"n_layer", "4", NULL};
    real_shape_plan("deepseek-v2-lite", "synth plan: deepseek-v2-lite at 4 layers (q_lora_rank 0)", lite4,
                    GGML_TYPE_Q6_K);
    static const char *const kimi4[] = {"n_layer", "4", "n_expert", "16", NULL};
    real_shape_plan("kimi-k2-scaled", "synth plan: kimi-k2-scaled 4 layers 16 experts", kimi4, GGML_TYPE_Q8_0);
    tiny_model("synth tiny qwen3moe q4_K (skew 1) passes llama.cpp's tensor list", "qwen3-30b-a3b", TINY_QWEN,
               GGML_TYPE_Q4_K, 1.0);
    tiny_model("synth tiny qwen3moe q6_K", "qwen3-30b-a3b", TINY_QWEN, GGML_TYPE_Q6_K, 0);
    tiny_model("synth tiny deepseek2 lite q4_K (q5_0 fallbacks)", "deepseek-v2-lite", TINY_LITE, GGML_TYPE_Q4_K, 1.0);
    tiny_model("synth tiny deepseek2 kimi q8_0", "kimi-k2-scaled", TINY_KIMI, GGML_TYPE_Q8_0, 1.0);
    tiny_model("synth tiny deepseek2 kimi q4_0", "kimi-k2-scaled", TINY_KIMI, GGML_TYPE_Q4_0, 0);
    tiny_model("synth tiny qwen3moe f16", "qwen3-30b-a3b", TINY_QWEN, GGML_TYPE_F16, 0);
    real_shape_plan("kimi-linear-48b-a3b", "synth plan: kimi-linear-48b-a3b real shape = llama.cpp kimi-linear tensors",
                    NULL, GGML_TYPE_Q4_K);
    real_shape_plan("qwen3.5-35b-a3b", "synth plan: qwen3.5-35b-a3b real shape = llama.cpp qwen35moe tensors", NULL,
                    GGML_TYPE_Q4_K);
    tiny_model("synth tiny kimi-linear q8_0 (skew 1)", "kimi-linear-48b-a3b", TINY_KIMI_LINEAR, GGML_TYPE_Q8_0, 1.0);
    tiny_model("synth tiny kimi-linear q4_K (fallbacks)", "kimi-linear-48b-a3b", TINY_KIMI_LINEAR, GGML_TYPE_Q4_K, 0);
    tiny_model("synth tiny qwen35moe q8_0 (skew 1)", "qwen3.5-35b-a3b", TINY_QWEN35, GGML_TYPE_Q8_0, 1.0);
    tiny_model("synth tiny qwen35moe q4_K", "qwen3.5-35b-a3b", TINY_QWEN35, GGML_TYPE_Q4_K, 0);
    real_shape_plan("gpt-oss-120b", "synth plan: gpt-oss-120b real shape = llama.cpp gpt-oss tensors, mxfp4 experts",
                    NULL, GGML_TYPE_Q8_0);
    tiny_model("synth tiny gpt-oss (mxfp4 experts, q8_0, skew 1)", "gpt-oss-120b", TINY_GPT_OSS, GGML_TYPE_Q8_0, 1.0);
    tiny_model("synth tiny gpt-oss --type mxfp4 (the rest q8_0)", "gpt-oss-120b", TINY_GPT_OSS, GGML_TYPE_MXFP4, 0);
    real_shape_plan("glm-4.5-air", "synth plan: glm-4.5-air real shape = llama.cpp glm4moe tensors", NULL,
                    GGML_TYPE_Q4_K);
    tiny_model("synth tiny glm4moe q8_0 (skew 1)", "glm-4.5-air", TINY_GLM, GGML_TYPE_Q8_0, 1.0);
    tiny_model("synth tiny glm4moe q4_K (fallbacks)", "glm-4.5-air", TINY_GLM, GGML_TYPE_Q4_K, 0);
    determinism();
    static const char *const q64[] = {"n_layer", "2", "n_expert", "64", "n_embd", "256", "n_head", "4",
                                      "n_head_kv", "2", "head_dim", "64", "n_ff_exp", "32", NULL};
    static const char *const k64[] = {"n_layer", "2", "n_expert", "64", "n_embd", "256", "n_head", "4",
                                      "q_lora", "64", "kv_lora", "64", "qk_nope", "32", "qk_rope", "32",
                                      "v_head", "32", "n_ff", "64", "n_ff_exp", "32", NULL};
    skew_case("routing skew 0: uniform (qwen3moe, random hidden states)", "qwen3-30b-a3b", q64, 0, 0, 0.3, false);
    skew_case("routing skew 1: Zipf-like, follows the router construction", "qwen3-30b-a3b", q64, 1, 0.5, 1.5, true);
    skew_case("routing skew 1 via exp_probs_b (kimi, sigmoid)", "kimi-k2-scaled", k64, 1, 0.25, 1.5, true);
    shape_rules();
    rmdir(tmpdir);
    return t_done();
}
