/* Bad input must fail cleanly with a message naming what is wrong: damaged
 * copies of the bundled models (written to a temp dir by gguf_write.h) with
 * an unsupported architecture, a missing or misshapen tensor, a tensor type
 * the kernels cannot multiply, a missing required key; and sessions that
 * overflow their context or get out-of-range token ids. */
#include <stdint.h>
#include <unistd.h>

#include "arch/model.h"
#include "gguf_write.h"
#include "t.h"

static char tmpdir[64];

/* Loads SRC with edit E applied; expects failure with all of NEEDLES in the message. */
static void expect_load_error(const char *name, const char *src, const gguf_edit *e, const char *const *needles)
{
    t_begin(name);
    gguf_file *g;
    sl_err err;
    char path[128], msg[256];
    snprintf(path, sizeof path, "%s/damaged.gguf", tmpdir);
    if (gguf_open(&g, src, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    int rc = gguf_write_edited(g, path, e, msg, sizeof msg);
    gguf_close(g);
    T_CHECK(rc == 0, "%s", msg);
    sl_model *m = NULL;
    if (rc == 0) {
        err.msg[0] = 0;
        T_CHECK(model_load(&m, path, NULL, &err) != 0, "loading succeeded");
        printf("# %s\n", err.msg);
        for (int i = 0; needles[i]; i++)
            T_CHECK(strstr(err.msg, needles[i]) != NULL, "message \"%s\" lacks \"%s\"", err.msg, needles[i]);
    }
    model_free(m);
    unlink(path);
    t_end();
}

static void session_errors(void)
{
    t_begin("context overflow and bad token ids are errors");
    sl_model *m;
    sl_session *s;
    sl_err err;
    float *lg = NULL;
    if (model_load(&m, "models/tinydraft-f16.gguf", NULL, &err) || session_create(&s, m, 8, NULL, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    lg = malloc(sizeof(float) * (size_t)model_n_vocab(m));
    int32_t toks[9] = {464, 1468, 582, 3114, 379, 262, 5417, 290, 531};
    T_CHECK(session_eval(s, toks, 9, lg, false, &err) != 0, "9 tokens fit an 8-token context");
    T_CHECK(strstr(err.msg, "context overflow") != NULL, "message: %s", err.msg);
    T_CHECK(session_pos(s) == 0, "failed eval moved the position to %d", session_pos(s));
    T_CHECK(session_eval(s, toks, 6, lg, false, &err) == 0, "%s", err.msg);
    T_CHECK(session_eval(s, toks, 3, lg, false, &err) != 0 && strstr(err.msg, "context overflow"),
            "6 + 3 tokens fit an 8-token context");
    T_CHECK(session_eval(s, toks, 2, lg, false, &err) == 0 && session_pos(s) == 8, "filling to n_ctx: %s",
            err.msg);
    T_CHECK(session_rewind(s, 7, &err) == 0, "rewind to 7: %s", err.msg);
    T_CHECK(session_rewind(s, 9, &err) != 0 && session_pos(s) == 7, "rewind past the end refused");
    int32_t bad = model_n_vocab(m);
    T_CHECK(session_eval(s, &bad, 1, lg, false, &err) != 0 && strstr(err.msg, "out of range"),
            "token id n_vocab accepted");
    T_CHECK(session_eval(s, toks, 1, lg, false, &err) == 0 && session_pos(s) == 8, "after rewind: %s", err.msg);
    free(lg);
    session_free(s);
    model_free(m);
    t_end();
}

/* kimi-linear and qwen35moe: their required keys and their recurrent layers' tensors. */
static void recurrent_errors(void)
{
    const char *kimi = t_shared("models/arch/kimi-linear-kda-F32.gguf");
    const char *q35 = t_shared("models/arch/qwen35moe-a3b-F32.gguf");
    if (!kimi || !q35) {
        t_skip("kimi-linear / qwen35moe load errors", "../shared fixtures not found");
        return;
    }
    static const struct {
        const char *name;
        int qwen;
        gguf_edit e;
        const char *needles[4];
    } cases[] = {
        {"kimi-linear: missing kda.head_dim", 0, {.drop_key = "kimi-linear.kda.head_dim", .new_type = -1},
         {"missing required key", "'kimi-linear.kda.head_dim'"}},
        {"kimi-linear: missing expert_gating_func", 0,
         {.drop_key = "kimi-linear.expert_gating_func", .new_type = -1},
         {"missing required key", "'kimi-linear.expert_gating_func'"}},
        {"kimi-linear: missing output.weight (no tied embeddings)", 0, {.drop_tensor = "output.weight", .new_type = -1},
         {"missing tensor 'output.weight'", "{64, 2048}"}},
        {"kimi-linear: conv taps of the wrong shape", 0,
         {.edit_tensor = "blk.1.ssm_conv1d_k.weight", .ne = {3, 1, 64, 1}, .new_type = -1},
         {"'blk.1.ssm_conv1d_k.weight'", "expected {4, 1, 64}", "got {3, 1, 64, 1}"}},
        {"kimi-linear: missing KDA tensor", 0, {.drop_tensor = "blk.2.ssm_f_b.weight", .new_type = -1},
         {"missing tensor", "'blk.2.ssm_f_b.weight'", "{16, 64}"}},
        {"qwen35moe: missing rope.dimension_sections", 1,
         {.drop_key = "qwen35moe.rope.dimension_sections", .new_type = -1},
         {"missing required key", "'qwen35moe.rope.dimension_sections'"}},
        {"qwen35moe: missing ssm.inner_size", 1, {.drop_key = "qwen35moe.ssm.inner_size", .new_type = -1},
         {"missing required key", "'qwen35moe.ssm.inner_size'"}},
        {"qwen35moe: conv taps of the wrong shape", 1,
         {.edit_tensor = "blk.2.ssm_conv1d.weight", .ne = {4, 96, 1, 1}, .new_type = -1},
         {"'blk.2.ssm_conv1d.weight'", "expected {4, 128}", "got {4, 96}"}},
        {"qwen35moe: missing shared-expert gate", 1,
         {.drop_tensor = "blk.1.ffn_gate_inp_shexp.weight", .new_type = -1},
         {"missing tensor", "'blk.1.ffn_gate_inp_shexp.weight'", "{64})"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_load_error(cases[i].name, cases[i].qwen ? q35 : kimi, &cases[i].e, cases[i].needles);
}

/* gpt-oss: its required keys and tensors, named with the expected shape. */
static void gpt_oss_errors(void)
{
    const char *src = t_shared("models/arch/gpt-oss-20b-F32.gguf");
    if (!src) {
        t_skip("gpt-oss load errors", "../shared fixtures not found");
        return;
    }
    static const struct {
        const char *name;
        gguf_edit e;
        const char *needles[4];
    } cases[] = {
        {"gpt-oss: missing attention.sliding_window", {.drop_key = "gpt-oss.attention.sliding_window", .new_type = -1},
         {"missing required key", "'gpt-oss.attention.sliding_window'"}},
        {"gpt-oss: missing expert_feed_forward_length",
         {.drop_key = "gpt-oss.expert_feed_forward_length", .new_type = -1},
         {"missing required key", "'gpt-oss.expert_feed_forward_length'"}},
        {"gpt-oss: missing attention.layer_norm_rms_epsilon",
         {.drop_key = "gpt-oss.attention.layer_norm_rms_epsilon", .new_type = -1},
         {"missing required key", "'gpt-oss.attention.layer_norm_rms_epsilon'"}},
        {"gpt-oss: missing output.weight (no tied embeddings)", {.drop_tensor = "output.weight", .new_type = -1},
         {"missing tensor 'output.weight'", "{64, 2048}"}},
        {"gpt-oss: sinks of the wrong shape", {.edit_tensor = "blk.1.attn_sinks.weight", .ne = {2, 1, 1, 1}, .new_type = -1},
         {"'blk.1.attn_sinks.weight'", "expected {4}", "got {2"}},
        {"gpt-oss: missing router bias", {.drop_tensor = "blk.2.ffn_gate_inp.bias", .new_type = -1},
         {"missing tensor", "'blk.2.ffn_gate_inp.bias'", "{8})"}},
        {"gpt-oss: missing attention output bias", {.drop_tensor = "blk.0.attn_output.bias", .new_type = -1},
         {"missing tensor", "'blk.0.attn_output.bias'", "{64})"}},
        {"gpt-oss: expert bias of the wrong width",
         {.edit_tensor = "blk.3.ffn_down_exps.bias", .ne = {32, 8, 1, 1}, .new_type = -1},
         {"'blk.3.ffn_down_exps.bias'", "expected {64, 8}", "got {32, 8"}},
        {"gpt-oss: expert bias for another expert count",
         {.edit_tensor = "blk.3.ffn_down_exps.bias", .ne = {64, 4, 1, 1}, .new_type = -1},
         {"'blk.3.ffn_down_exps.bias'", "4 experts", "expected 8"}},
        {"gpt-oss: missing expert bias", {.drop_tensor = "blk.1.ffn_up_exps.bias", .new_type = -1},
         {"missing tensor", "'blk.1.ffn_up_exps.bias'", "{64, 8}"}},
        {"gpt-oss: expert bias not f32", {.edit_tensor = "blk.0.ffn_gate_exps.bias", .new_type = 1 /* f16 */},
         {"'blk.0.ffn_gate_exps.bias'", "f16", "must be f32"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_load_error(cases[i].name, src, &cases[i].e, cases[i].needles);
}

int main(void)
{
    (void)t_skip;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-test-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        t_begin("temp dir");
        T_CHECK(0, "mkdtemp failed");
        t_end();
        return t_done();
    }
    const char *draft = "models/tinydraft-f16.gguf", *moe = "models/tinymoe-q8_0.gguf";
    {
        gguf_edit e = {.str_key = "general.architecture", .str_val = "mamba9", .new_type = -1};
        expect_load_error("unsupported architecture", draft, &e,
                          (const char *[]){"unsupported architecture", "'mamba9'", NULL});
    }
    {
        gguf_edit e = {.drop_tensor = "blk.1.attn_k.weight", .new_type = -1};
        expect_load_error("missing tensor", draft, &e,
                          (const char *[]){"missing tensor", "'blk.1.attn_k.weight'", "{128, 64}", NULL});
    }
    {
        gguf_edit e = {.edit_tensor = "blk.0.attn_q.weight", .ne = {128, 64, 1, 1}, .new_type = -1};
        expect_load_error("wrong tensor shape", draft, &e,
                          (const char *[]){"'blk.0.attn_q.weight'", "expected {128, 128}", "got {128, 64}", NULL});
    }
    {
        gguf_edit e = {.edit_tensor = "blk.0.attn_v.weight", .new_type = GGML_TYPE_I8};
        expect_load_error("unsupported tensor type", draft, &e,
                          (const char *[]){"'blk.0.attn_v.weight'", "i8", NULL});
    }
    {
        gguf_edit e = {.drop_key = "qwen3.attention.layer_norm_rms_epsilon", .new_type = -1};
        expect_load_error("missing required key (rms eps)", draft, &e,
                          (const char *[]){"missing required key", "'qwen3.attention.layer_norm_rms_epsilon'", NULL});
    }
    {
        gguf_edit e = {.drop_key = "qwen3.block_count", .new_type = -1};
        expect_load_error("missing required key (block_count)", draft, &e,
                          (const char *[]){"missing required key", "'qwen3.block_count'", NULL});
    }
    {
        gguf_edit e = {.drop_tensor = "blk.2.ffn_up_exps.weight", .new_type = -1};
        expect_load_error("missing expert tensor", moe, &e,
                          (const char *[]){"missing tensor", "'blk.2.ffn_up_exps.weight'", "{256, 192, 32}", NULL});
    }
    {
        gguf_edit e = {.drop_key = "qwen3moe.expert_used_count", .new_type = -1};
        expect_load_error("missing required key (expert_used_count)", moe, &e,
                          (const char *[]){"missing required key", "expert_used_count", NULL});
    }
    const char *ds = t_shared("models/arch/deepseek2-kimik2-F16.gguf");
    if (ds) {
        gguf_edit e = {.drop_key = "deepseek2.attention.kv_lora_rank", .new_type = -1};
        expect_load_error("missing required key (deepseek2 kv_lora_rank)", ds, &e,
                          (const char *[]){"missing required key", "'deepseek2.attention.kv_lora_rank'", NULL});
    } else {
        t_skip("missing required key (deepseek2 kv_lora_rank)", "../shared fixtures not found");
    }
    recurrent_errors();
    gpt_oss_errors();
    t_begin("nonexistent file");
    {
        sl_model *m = NULL;
        sl_err err;
        T_CHECK(model_load(&m, "tests/fixtures/no-such-model.gguf", NULL, &err) != 0, "loaded");
        T_CHECK(strstr(err.msg, "no-such-model.gguf") != NULL, "message: %s", err.msg);
        model_free(m);
    }
    t_end();
    session_errors();
    rmdir(tmpdir);
    return t_done();
}
