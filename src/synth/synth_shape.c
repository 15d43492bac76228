/* Real architectures' shapes, from the models' Hugging Face config.json
 * (sources in docs/SYNTH.md), and the rules llama.cpp's loader imposes on
 * them (src/llama-model.cpp, src/models/{qwen3moe,deepseek2}.cpp). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "synth/synth.h"

static const synth_shape PRESETS[] = {
    /* Qwen/Qwen3-30B-A3B */
    {.like = "qwen3-30b-a3b", .family = SYNTH_QWEN3MOE, .n_layer = 48, .n_embd = 2048, .n_head = 32,
     .n_head_kv = 4, .head_dim = 128, .n_ff = 6144, .n_ff_exp = 768, .n_expert = 128, .n_expert_used = 8,
     .n_ctx_train = 40960, .rope_base = 1e6f, .rms_eps = 1e-6f},
    /* deepseek-ai/DeepSeek-V2-Lite: no q_lora, softmax gating, not normalised */
    {.like = "deepseek-v2-lite", .family = SYNTH_DEEPSEEK2, .n_layer = 27, .n_embd = 2048, .n_head = 16,
     .n_head_kv = 1, .n_ff = 10944, .n_ff_exp = 1408, .n_expert = 64, .n_expert_used = 6,
     .n_expert_shared = 2, .n_dense_lead = 1, .q_lora = 0, .kv_lora = 512, .qk_nope = 128, .qk_rope = 64,
     .v_head = 128, .n_ctx_train = 163840, .rope_base = 10000, .rms_eps = 1e-6f, .gating = 1,
     .weights_norm = false, .exp_probs_b = false, .weights_scale = 1.0f, .n_group = 1, .topk_group = 1,
     .yarn_factor = 40, .yarn_orig_ctx = 4096, .yarn_beta_fast = 32, .yarn_beta_slow = 1,
     .yarn_mscale_all_dim = 0.707f},
    /* moonshotai/Kimi-K2-Instruct (DeepSeek-V3 structure); scale with --layers/--experts */
    {.like = "kimi-k2-scaled", .family = SYNTH_DEEPSEEK2, .n_layer = 61, .n_embd = 7168, .n_head = 64,
     .n_head_kv = 1, .n_ff = 18432, .n_ff_exp = 2048, .n_expert = 384, .n_expert_used = 8,
     .n_expert_shared = 1, .n_dense_lead = 1, .q_lora = 1536, .kv_lora = 512, .qk_nope = 128, .qk_rope = 64,
     .v_head = 128, .n_ctx_train = 131072, .rope_base = 50000, .rms_eps = 1e-6f, .gating = 2,
     .weights_norm = true, .exp_probs_b = true, .weights_scale = 2.827f, .n_group = 1, .topk_group = 1,
     .yarn_factor = 32, .yarn_orig_ctx = 4096, .yarn_beta_fast = 1, .yarn_beta_slow = 1,
     .yarn_mscale_all_dim = 1.0f},
    /* moonshotai/Kimi-Linear-48B-A3B-Instruct: KDA layers, MLA (no q_lora, NoPE) on layers 4, 8, .., 24
     * and 27 (1-based), 256 experts top-8 + 1 shared, sigmoid with bias */
    {.like = "kimi-linear-48b-a3b", .family = SYNTH_KIMI_LINEAR, .n_layer = 27, .n_embd = 2304, .n_head = 32,
     .n_head_kv = 1, .n_ff = 9216, .n_ff_exp = 1024, .n_expert = 256, .n_expert_used = 8, .n_expert_shared = 1,
     .n_dense_lead = 1, .kv_lora = 512, .qk_nope = 128, .qk_rope = 64, .v_head = 128, .n_ctx_train = 1048576,
     .rope_base = 10000, .rms_eps = 1e-5f, .gating = 2, .weights_norm = true, .exp_probs_b = true,
     .weights_scale = 2.446f, .n_group = 1, .topk_group = 1, .ssm_conv = 4, .ssm_state = 128, .ssm_groups = 32,
     .ssm_vheads = 32, .attn_interval = 4},
    /* Qwen/Qwen3.5-35B-A3B: 3 gated delta net layers then one gated attention layer, 256 experts top-8 +
     * a gated shared expert, partial rotary (64 of 256) with IMRoPE sections [11, 11, 10] */
    {.like = "qwen3.5-35b-a3b", .family = SYNTH_QWEN35MOE, .n_layer = 40, .n_embd = 2048, .n_head = 16,
     .n_head_kv = 2, .head_dim = 256, .n_ff = 512, .n_ff_exp = 512, .n_expert = 256, .n_expert_used = 8,
     .n_ctx_train = 262144, .rope_base = 1e7f, .rms_eps = 1e-6f, .ssm_conv = 4, .ssm_state = 128,
     .ssm_groups = 16, .ssm_vheads = 32, .attn_interval = 4, .n_rot = 64, .rope_sections = {11, 11, 10, 0},
     .n_ff_shexp = 512},
    /* openai/gpt-oss-120b: 36 layers, sliding window 128 on even layers, sinks, biases, YaRN x32 over 4096,
     * 128 experts top-4 (MXFP4 in the released weights) */
    {.like = "gpt-oss-120b", .family = SYNTH_GPT_OSS, .n_layer = 36, .n_embd = 2880, .n_head = 64, .n_head_kv = 8,
     .head_dim = 64, .n_ff = 2880, .n_ff_exp = 2880, .n_expert = 128, .n_expert_used = 4, .n_ctx_train = 131072,
     .rope_base = 150000, .rms_eps = 1e-5f, .yarn_factor = 32, .yarn_orig_ctx = 4096, .yarn_beta_fast = 32,
     .yarn_beta_slow = 1, .n_swa = 128},
    /* zai-org/GLM-4.5-Air: 46 layers (the 47th, the MTP layer, is not written: nextn_predict_layers 0),
     * the first dense, q/k/v biases, no q/k norms, half the head rotary (NEOX), 128 experts top-8 + 1 shared,
     * sigmoid with a selection bias, weights normalised, scale 1 */
    {.like = "glm-4.5-air", .family = SYNTH_GLM4MOE, .n_layer = 46, .n_embd = 4096, .n_head = 96, .n_head_kv = 8,
     .head_dim = 128, .n_ff = 10944, .n_ff_exp = 1408, .n_expert = 128, .n_expert_used = 8, .n_expert_shared = 1,
     .n_dense_lead = 1, .n_ctx_train = 131072, .rope_base = 1e6f, .rms_eps = 1e-5f, .gating = 2,
     .weights_norm = true, .exp_probs_b = true, .weights_scale = 1.0f, .n_group = 1, .topk_group = 1, .n_rot = 64},
};
#define N_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

const char *synth_family_arch(synth_family f)
{
    static const char *const names[] = {"qwen3moe", "deepseek2", "kimi-linear", "qwen35moe", "gpt-oss", "glm4moe"};
    return names[f];
}

bool synth_layer_attends(const synth_shape *s, uint32_t L)
{
    if (s->family == SYNTH_KIMI_LINEAR) return (L + 1) % s->attn_interval == 0 || L + 1 == s->n_layer;
    if (s->family == SYNTH_QWEN35MOE) return (L + 1) % s->attn_interval == 0;
    return true;
}

int synth_shape_preset(const char *like, synth_shape *out, sl_err *err)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].like, like) == 0) {
            *out = PRESETS[i];
            return 0;
        }
    return sl_errf(err, "unknown model shape '%s' (known: qwen3-30b-a3b, deepseek-v2-lite, kimi-k2-scaled, "
                        "kimi-linear-48b-a3b, qwen3.5-35b-a3b, gpt-oss-120b, glm-4.5-air)",
                   like);
}

/* sluice runs up to MOE_MAX_EXPERTS (src/arch/arch.h); llama.cpp stops at
 * LLAMA_MAX_EXPERTS = 512 (llama-hparams.h), so bigger files are sluice-only
 * (synth_shape_llama_note says so). */
#define SYNTH_MAX_EXPERTS 32768
#define LLAMA_MAX_EXPERTS 512

const char *synth_shape_llama_note(const synth_shape *s)
{
    return s->n_expert > LLAMA_MAX_EXPERTS ? "more than 512 experts: llama.cpp (LLAMA_MAX_EXPERTS) will not load this file"
                                           : NULL;
}

static int check_moe(const synth_shape *s, sl_err *err)
{
    if (s->n_expert < 2 || s->n_expert > SYNTH_MAX_EXPERTS)
        return sl_errf(err, "%u experts: must be 2..%d", s->n_expert, SYNTH_MAX_EXPERTS);
    if (s->n_expert_used < 1 || s->n_expert_used > s->n_expert)
        return sl_errf(err, "%u experts used per token with %u experts", s->n_expert_used, s->n_expert);
    if (s->n_group > 1 && (s->n_expert % s->n_group || s->topk_group < 1 || s->topk_group >= s->n_group))
        return sl_errf(err, "expert groups %u / used %u do not fit %u experts", s->n_group, s->topk_group,
                       s->n_expert);
    if (s->n_group >= s->n_expert)
        return sl_errf(err, "%u expert groups need more than %u experts", s->n_group, s->n_expert);
    return 0;
}

/* The recurrent layers' geometry; llama.cpp asserts most of it. */
static int check_recurrent(const synth_shape *s, sl_err *err)
{
    if (s->ssm_conv < 2 || s->ssm_conv > 16 || s->ssm_state < 32 || s->ssm_state % 32 || s->ssm_groups < 1 ||
        s->ssm_vheads % s->ssm_groups || s->attn_interval < 1)
        return sl_errf(err, "recurrent geometry (conv %u, head size %u a multiple of 32, %u q/k heads dividing %u v "
                            "heads, attention every %u) invalid",
                       s->ssm_conv, s->ssm_state, s->ssm_groups, s->ssm_vheads, s->attn_interval);
    if (s->family == SYNTH_KIMI_LINEAR && (s->ssm_groups != s->n_head || s->ssm_vheads != s->n_head))
        return sl_errf(err, "Kimi Delta Attention uses head_count (%u) heads for q, k and v", s->n_head);
    if (s->family == SYNTH_QWEN35MOE) {
        uint32_t sec = s->rope_sections[0] + s->rope_sections[1] + s->rope_sections[2] + s->rope_sections[3];
        if (s->n_rot < 2 || s->n_rot % 2 || s->n_rot > s->head_dim || sec == 0 || sec > s->head_dim)
            return sl_errf(err, "rotary dims %u / sections summing to %u must fit head_dim %u", s->n_rot, sec,
                           s->head_dim);
        bool attends = false;
        for (uint32_t L = 0; L < s->n_layer; L++) attends |= synth_layer_attends(s, L);
        if (!attends && s->n_layer >= s->attn_interval) return sl_errf(err, "no attention layer");
    }
    return 0;
}

int synth_shape_check(const synth_shape *s, sl_err *err)
{
    if (s->n_layer < 1 || s->n_layer > 4096) return sl_errf(err, "%u layers (must be 1..4096)", s->n_layer);
    if (s->n_embd < 32 || s->n_embd % 32) return sl_errf(err, "n_embd %u must be a positive multiple of 32", s->n_embd);
    if (s->n_head < 1 || s->n_ff_exp < 32 || s->n_ff_exp % 32)
        return sl_errf(err, "n_head %u / expert FFN width %u (a multiple of 32) invalid", s->n_head, s->n_ff_exp);
    if (check_moe(s, err)) return -1;
    if ((s->family == SYNTH_KIMI_LINEAR || s->family == SYNTH_QWEN35MOE) && check_recurrent(s, err)) return -1;
    if (s->family == SYNTH_GPT_OSS && s->n_swa < 1) return sl_errf(err, "sliding window n_swa must be >= 1");
    if (s->family == SYNTH_QWEN3MOE || s->family == SYNTH_QWEN35MOE || s->family == SYNTH_GPT_OSS ||
        s->family == SYNTH_GLM4MOE) {
        if (s->head_dim < 2 || s->head_dim % 32 || s->n_head_kv < 1 || s->n_head % s->n_head_kv)
            return sl_errf(err, "heads %u/%u with head_dim %u invalid (head_dim a multiple of 32)", s->n_head,
                           s->n_head_kv, s->head_dim);
        if (s->family != SYNTH_GLM4MOE) return 0;
        if (s->n_rot < 2 || s->n_rot % 2 || s->n_rot > s->head_dim)
            return sl_errf(err, "rotary dims %u must be even and fit head_dim %u", s->n_rot, s->head_dim);
        if (s->n_dense_lead >= s->n_layer || !s->n_expert_shared)
            return sl_errf(err, "glm4moe needs a MoE layer after the %u dense ones, with a shared expert",
                           s->n_dense_lead);
        if (s->n_dense_lead && (s->n_ff < 32 || s->n_ff % 32))
            return sl_errf(err, "dense FFN width %u must be a multiple of 32", s->n_ff);
        return 0;
    }
    if (s->n_dense_lead >= s->n_layer)
        return sl_errf(err, "%u layers with %u leading dense layers leaves no MoE layer", s->n_layer, s->n_dense_lead);
    if (s->n_dense_lead && (s->n_ff < 32 || s->n_ff % 32))
        return sl_errf(err, "dense FFN width %u must be a multiple of 32", s->n_ff);
    if (s->kv_lora < 32 || s->kv_lora % 32 || s->qk_nope < 32 || s->qk_nope % 32 || s->qk_rope < 2 ||
        s->qk_rope % 2 || s->v_head < 32 || s->v_head % 32 || s->q_lora % 32)
        return sl_errf(err, "MLA widths (kv_lora %u, qk_nope %u, qk_rope %u, v_head %u, q_lora %u) must be multiples of 32",
                       s->kv_lora, s->qk_nope, s->qk_rope, s->v_head, s->q_lora);
    /* llama.cpp (deepseek2.cpp) calls 26- and 27-layer models "lite" and then
     * neither reads q_lora_rank nor loads attn_q_a/attn_q_b */
    if (s->family == SYNTH_KIMI_LINEAR && s->q_lora)
        return sl_errf(err, "llama.cpp's kimi-linear graph has no q compression (q_lora must be 0)");
    if (s->family == SYNTH_DEEPSEEK2 && s->q_lora && (s->n_layer == 26 || s->n_layer == 27))
        return sl_errf(err, "llama.cpp takes any deepseek2 model with 26 or 27 layers for DeepSeek-V2-Lite "
                            "(no q_lora) and would not load this one's attn_q_a/attn_q_b; use another layer count");
    return 0;
}

/* ---- overrides: NAME=VALUE on any integer or float field ---- */

typedef struct {
    const char *name;
    size_t off;
    bool is_float;
} field;

#define U(f) {#f, offsetof(synth_shape, f), false}
#define F(f) {#f, offsetof(synth_shape, f), true}
static const field FIELDS[] = {
    U(n_layer), U(n_embd), U(n_head), U(n_head_kv), U(head_dim), U(n_ff), U(n_ff_exp), U(n_expert),
    U(n_expert_used), U(n_expert_shared), U(n_dense_lead), U(q_lora), U(kv_lora), U(qk_nope), U(qk_rope),
    U(v_head), U(n_ctx_train), U(n_group), U(topk_group), F(rope_base), F(rms_eps), F(weights_scale),
    U(ssm_conv), U(ssm_state), U(ssm_groups), U(ssm_vheads), U(attn_interval), U(n_rot), U(n_ff_shexp), U(n_swa),
};
#undef U
#undef F

int synth_shape_set(synth_shape *s, const char *name, const char *value, sl_err *err)
{
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        if (strcmp(FIELDS[i].name, name) != 0) continue;
        char *end;
        if (FIELDS[i].is_float) {
            float v = strtof(value, &end);
            if (end == value || *end) return sl_errf(err, "%s: '%s' is not a number", name, value);
            memcpy((char *)s + FIELDS[i].off, &v, sizeof v);
        } else {
            unsigned long long v = strtoull(value, &end, 10);
            if (end == value || *end || *value == '-' || v > 1000000000ull)
                return sl_errf(err, "%s: '%s' is not a count", name, value);
            uint32_t u = (uint32_t)v;
            memcpy((char *)s + FIELDS[i].off, &u, sizeof u);
        }
        return 0;
    }
    return sl_errf(err, "unknown shape field '%s'", name);
}
