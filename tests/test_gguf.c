/* GGUF reader on real files: the bundled models and every GGUF in ../shared. */
#include <dirent.h>

#include "gguf/gguf.h"
#include "gguf/summary.h"
#include "t.h"

static void check_model(const char *path)
{
    char name[512];
    snprintf(name, sizeof name, "gguf open + summary %s", path);
    t_begin(name);
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, path, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    model_summary s;
    T_CHECK(model_summary_build(&s, g, &err) == 0, "%s", err.msg);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) sum += g->tensors[i].nbytes;
    T_CHECK(s.spine_bytes + s.expert_bytes == sum, "spine %llu + experts %llu != %llu",
            (unsigned long long)s.spine_bytes, (unsigned long long)s.expert_bytes, (unsigned long long)sum);
    T_CHECK(s.total_bytes == sum, "total mismatch");
    model_summary_free(&s);
    gguf_close(g);
    t_end();
}

static void bundled_tinymoe(void)
{
    t_begin("gguf bundled tinymoe metadata");
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, "models/tinymoe-q8_0.gguf", &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    uint32_t u = 0;
    T_CHECK(gguf_get_u32(g, "qwen3moe.block_count", &u, &err) == 1 && u == 6, "block_count %u", u);
    T_CHECK(gguf_get_u32(g, "qwen3moe.expert_count", &u, &err) == 1 && u == 32, "expert_count %u", u);
    float f = 0;
    T_CHECK(gguf_get_f32(g, "qwen3moe.rope.freq_base", &f, &err) == 1 && f == 1e6f, "freq_base %g", f);
    const gguf_str *s = NULL;
    T_CHECK(gguf_get_str(g, "tokenizer.ggml.pre", &s, &err) == 1 && !strcmp(s->s, "gpt-2"), "pre");
    const void *data;
    uint64_t n = 0;
    T_CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING, &data, &n, &err) == 1 && n == 50257,
            "tokens %llu", (unsigned long long)n);
    T_CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_INT32, &data, &n, &err) == -1 &&
                strstr(err.msg, "array of string"), "wrong array type must fail: %s", err.msg);
    T_CHECK(gguf_get_u32(g, "no.such.key", &u, &err) == 0, "absent key");
    const gguf_tensor *t = gguf_find_tensor(g, "blk.5.ffn_down_exps.weight");
    T_CHECK(t && t->type == GGML_TYPE_Q8_0 && t->ne[0] == 192 && t->ne[1] == 256 && t->ne[2] == 32,
            "ffn_down_exps shape");
    T_CHECK(t && t->nbytes == 192 / 32 * 34 * 256 * 32ull, "ffn_down_exps bytes");
    /* the first row of token_embd read by range equals the start of a whole read */
    const gguf_tensor *e = gguf_find_tensor(g, "token_embd.weight");
    unsigned char a[68], b[34];
    T_CHECK(e && gguf_read_tensor(g, e, 0, a, 68, &err) == 0, "read");
    T_CHECK(e && gguf_read_tensor(g, e, 34, b, 34, &err) == 0 && !memcmp(a + 34, b, 34), "range read");
    T_CHECK(e && gguf_read_tensor(g, e, e->nbytes - 1, b, 2, &err) == -1, "read past tensor must fail");
    gguf_close(g);
    t_end();
}

static void shared_dir(const char *rel)
{
    const char *dir = t_shared(rel);
    if (!dir) {
        t_skip(rel, "../shared not present");
        return;
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    char paths[64][512];
    int n = 0;
    while (d && (de = readdir(d)) && n < 64) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".gguf")) snprintf(paths[n++], 512, "%s/%s", dir, de->d_name);
    }
    if (d) closedir(d);
    for (int i = 0; i < n; i++) check_model(paths[i]);
}

int main(void)
{
    bundled_tinymoe();
    check_model("models/tinymoe-q8_0.gguf");
    check_model("models/tinydraft-f16.gguf");
    shared_dir("models");
    shared_dir("models/arch");
    shared_dir("vocab");
    return t_done();
}
