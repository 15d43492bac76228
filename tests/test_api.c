/* The public API (include/sluice.h) alone: greedy generation on the bundled
 * model reproduces llama.cpp's continuation (tests/fixtures, copied from
 * shared/golden/tinymoe.json), in RAM and streamed under a budget, and bad
 * options come back as messages. */
#include <jansson.h>

#include "sluice.h"
#include "t.h"

typedef struct {
    char buf[8192];
    size_t n;
} sink;

static int collect(void *user, const char *text, size_t len)
{
    sink *s = user;
    if (s->n + len < sizeof s->buf) memcpy(s->buf + s->n, text, len), s->n += len;
    return 0;
}

static void golden_run(const char *name, const sluice_options *o, const char *prompt, const char *want)
{
    t_begin(name);
    char err[512];
    sluice *s;
    if (sluice_open(&s, o, err, sizeof err)) {
        T_CHECK(0, "%s", err);
        t_end();
        return;
    }
    sluice_sampling sp = sluice_sampling_default();
    sp.temp = 0;
    sp.n_predict = 64;
    sink out = {{0}, 0};
    char *text = NULL;
    T_CHECK(sluice_generate(s, prompt, &sp, collect, &out, &text, err, sizeof err) == 0, "%s", err);
    T_CHECK(text && !strcmp(text, want), "text differs from llama.cpp's: %.80s", text ? text : "(null)");
    T_CHECK(out.n == strlen(want) && !memcmp(out.buf, want, out.n), "streamed text differs from the result");
    sluice_stats st;
    sluice_get_stats(s, &st);
    T_CHECK(st.generated_tokens == 64 && st.prompt_tokens > 0, "stats: %lld generated", (long long)st.generated_tokens);
    T_CHECK(!o->mem_bytes || (st.streaming && st.cache_misses > 0), "streaming figures missing");
    free(text);
    sluice_close(s);
    t_end();
}

int main(void)
{
    json_error_t je;
    json_t *g = json_load_file("tests/fixtures/tinymoe-q8_0-greedy.json", 0, &je);
    json_t *r = json_array_get(json_object_get(g, "results"), 1);
    const char *prompt = json_string_value(json_object_get(r, "prompt"));
    const char *want = json_string_value(json_object_get(r, "generated_text"));
    if (!prompt || !want) {
        t_begin("api fixture");
        T_CHECK(0, "tests/fixtures/tinymoe-q8_0-greedy.json: %s", je.text);
        t_end();
        return t_done();
    }
    sluice_options o = {.model = "models/tinymoe-q8_0.gguf", .n_ctx = 512};
    golden_run("api: greedy text = llama.cpp, experts in RAM", &o, prompt, want);
    o.mem_bytes = 64ull << 20;
    golden_run("api: greedy text = llama.cpp, streamed under 64 MiB", &o, prompt, want);

    t_begin("api: errors come back as messages");
    char err[512] = "";
    sluice *s = NULL;
    sluice_options bad = {.model = "models/no-such-model.gguf"};
    T_CHECK(sluice_open(&s, &bad, err, sizeof err) == -1 && strstr(err, "no-such-model.gguf"), "%s", err);
    bad = (sluice_options){.model = "models/tinymoe-q8_0.gguf", .io = "floppy"};
    T_CHECK(sluice_open(&s, &bad, err, sizeof err) == -1 && strstr(err, "uring, pread or mmap"), "%s", err);
    t_end();
    json_decref(g);
    return t_done();
}
