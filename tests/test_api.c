/* The public API (include/sluice.h): greedy generation on the bundled model
 * reproduces llama.cpp's continuation (tests/fixtures, copied from
 * shared/golden/tinymoe.json), in RAM and streamed under a budget; two
 * calls continue exactly as one long call; a failed evaluation leaves the
 * context as it was; logprobs, token steps, tokens, chat rendering and the
 * figures; bad options come back as messages. */
#include <jansson.h>
#include <math.h>

#include "engine/api_int.h"

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

/* ---- continuation: two calls = one long call, bit for bit ---- */

static sluice *open_tiny(uint64_t mem, int32_t n_batch)
{
    sluice_options o = sluice_options_default();
    o.model = "models/tinymoe-q8_0.gguf";
    o.n_ctx = 256;
    o.mem_bytes = mem;
    o.n_batch = n_batch;
    o.no_heat = 1;
    char err[512];
    sluice *s = NULL;
    if (sluice_open(&s, &o, err, sizeof err)) T_CHECK(0, "open: %s", err);
    return s;
}

static sluice_sampling greedy(int32_t n)
{
    sluice_sampling sp = sluice_sampling_default();
    sp.temp = 0;
    sp.n_predict = n;
    sp.ignore_eos = 1;
    return sp;
}

/* The context's tokens and the next-token logits after them. */
static void context_of(sluice *s, int32_t **toks, size_t *n, float *logits)
{
    char err[512];
    T_CHECK(sluice_eval(s, NULL, 0, logits, err, sizeof err) == 0, "eval of the pending token: %s", err);
    const int32_t *t = sluice_tokens(s, n);
    *toks = malloc(*n * sizeof **toks);
    memcpy(*toks, t, *n * sizeof **toks);
}

static void test_continuation(const char *prompt, const sluice_sampling *base, const char *name)
{
    t_begin(name);
    sluice *a = open_tiny(0, 0), *b = open_tiny(0, 0);
    if (!a || !b) {
        sluice_close(a), sluice_close(b);
        t_end();
        return;
    }
    char err[512], *t1 = NULL, *t2 = NULL, *t3 = NULL;
    sluice_sampling sp8 = *base, sp16 = *base;
    sp8.n_predict = 8, sp16.n_predict = 16;
    int32_t *ids = NULL;
    size_t n_prompt = 0, n_a, n_b;
    T_CHECK(sluice_tokenize(a, prompt, strlen(prompt), 1, 1, &ids, &n_prompt, err, sizeof err) == 0, "%s", err);
    sluice_free(ids);
    T_CHECK(sluice_generate(a, prompt, &sp8, NULL, NULL, &t1, err, sizeof err) == 0, "first call: %s", err);
    sluice_tokens(a, &n_a);
    /* the last sampled token is part of the context: prompt + 8, not + 7 */
    T_CHECK(n_a == n_prompt + 8, "after the first call the context holds %zu tokens, want %zu", n_a, n_prompt + 8);
    T_CHECK(sluice_generate(a, "", &sp8, NULL, NULL, &t2, err, sizeof err) == 0, "second call: %s", err);
    T_CHECK(sluice_generate(b, prompt, &sp16, NULL, NULL, &t3, err, sizeof err) == 0, "long call: %s", err);
    size_t l1 = t1 ? strlen(t1) : 0;
    T_CHECK(t1 && t2 && t3 && !strncmp(t3, t1, l1) && !strcmp(t3 + l1, t2), "texts differ: '%s' + '%s' vs '%s'",
            t1 ? t1 : "", t2 ? t2 : "", t3 ? t3 : "");
    float *la = malloc(50257 * sizeof *la), *lb = malloc(50257 * sizeof *lb);
    int32_t *ta, *tb;
    context_of(a, &ta, &n_a, la);
    context_of(b, &tb, &n_b, lb);
    T_CHECK(n_a == n_prompt + 16 && n_a == n_b && !memcmp(ta, tb, n_a * sizeof *ta), "contexts differ (%zu vs %zu tokens)",
            n_a, n_b);
    T_CHECK(!memcmp(la, lb, 50257 * sizeof *la), "the next-token logits differ in their bits");
    /* prefix reuse: the whole context again keeps everything but what must produce logits */
    sluice_result r;
    sluice_sampling one = *base;
    one.n_predict = 1;
    T_CHECK(sluice_generate_tokens(b, tb, n_b, &one, NULL, &r, err, sizeof err) == 0, "%s", err);
    T_CHECK(r.cached_tokens == (int32_t)n_b, "reused %d of %zu tokens", r.cached_tokens, n_b);
    sluice_result_free(&r);
    free(ta), free(tb), free(la), free(lb);
    free(t1), free(t2), free(t3);
    sluice_close(a), sluice_close(b);
    t_end();
}

/* ---- a failed multi-batch evaluation leaves the context as it was ---- */

typedef struct {
    long reads, fail_at; /* fail_at 0: never */
} fault_ctl;

static int fault_hook(void *ctx, uint32_t file, uint64_t off, uint32_t len)
{
    (void)file, (void)off, (void)len;
    fault_ctl *f = ctx;
    return ++f->reads == f->fail_at ? -5 /* EIO */ : 0;
}

static sluice *open_faulty(fault_ctl *f)
{
    sluice_options o = sluice_options_default();
    o.model = "models/tinymoe-q8_0.gguf";
    o.n_ctx = 256;
    o.mem_bytes = 48ull << 20; /* a cache too small for every expert: each pass reads */
    o.n_batch = 4;
    o.no_heat = 1;
    /* demand reads only: a failed guess is dropped and re-read on demand
     * by design, and which reads are guesses depends on timing */
    o.prefetch = "off";
    sluice_open_extra x = {.fault = fault_hook, .fault_ctx = f};
    char err[512];
    sluice *s = NULL;
    if (sluice_open_ex(&s, &o, &x, err, sizeof err)) T_CHECK(0, "open: %s", err);
    return s;
}

static void test_error_recovery(const int32_t *toks, size_t n)
{
    t_begin("api: an evaluation failing in its 3rd batch leaves the context as it was (then = a clean run, bit for bit)");
    enum { HEAD = 5, NV = 50257 };
    char err[512];
    fault_ctl count = {0, 0};
    sluice *s = open_faulty(&count);
    float *want = malloc(NV * sizeof *want), *got = malloc(NV * sizeof *got);
    if (!s || n < HEAD + 12) {
        T_CHECK(s != NULL && n >= HEAD + 12, "open, or only %zu tokens", n);
        goto out;
    }
    /* the reads a clean run makes: the head, then two batches of 4 */
    T_CHECK(sluice_eval(s, toks, HEAD, NULL, err, sizeof err) == 0, "%s", err);
    long head_reads = count.reads;
    T_CHECK(sluice_eval(s, toks + HEAD, 8, NULL, err, sizeof err) == 0, "%s", err);
    long two_batches = count.reads - head_reads;
    sluice_close(s);
    /* the same again, the first read of the third batch failing */
    fault_ctl f = {0, 0};
    s = open_faulty(&f);
    if (!s) goto out;
    T_CHECK(sluice_eval(s, toks, HEAD, NULL, err, sizeof err) == 0, "%s", err);
    T_CHECK(f.reads == head_reads, "the head made %ld reads, then %ld", f.reads, head_reads);
    f.fail_at = f.reads + two_batches + 1;
    T_CHECK(sluice_eval(s, toks + HEAD, n - HEAD, got, err, sizeof err) == -1 && err[0], "the failing read went unnoticed");
    T_CHECK(f.reads >= f.fail_at, "the fault never fired (%ld reads, fail at %ld)", f.reads, f.fail_at);
    size_t held;
    sluice_tokens(s, &held);
    T_CHECK(held == HEAD, "after the failure the context holds %zu tokens, want %d", held, HEAD);
    f.fail_at = 0;
    /* other tokens after the head: any KV entry the failed call left behind would show in their logits */
    int32_t other[12];
    for (int i = 0; i < 12; i++) other[i] = toks[HEAD + 11 - i];
    T_CHECK(sluice_eval(s, other, 12, got, err, sizeof err) == 0, "retry: %s", err);
    fault_ctl none = {0, 0};
    sluice *c = open_faulty(&none);
    T_CHECK(c && sluice_eval(c, toks, HEAD, NULL, err, sizeof err) == 0 &&
                sluice_eval(c, other, 12, want, err, sizeof err) == 0, "clean run: %s", err);
    sluice_close(c);
    T_CHECK(!memcmp(got, want, NV * sizeof *got), "after the failure, logits differ from a clean run's");
    err[0] = 'x';
    T_CHECK(sluice_rewind(s, 0, err, sizeof err) == 0 && err[0] == 0, "success leaves the error buffer empty");
out:
    sluice_close(s);
    free(want), free(got);
    t_end();
}

/* ---- logprobs, token steps, tokens, chat, figures ---- */

typedef struct {
    int32_t ids[16], top0[16];
    float lp[16], top_lp0[16];
    int n, n_top;
} token_log;

static int log_token(void *user, const sluice_token *t)
{
    token_log *l = user;
    if (l->n < 16) {
        l->ids[l->n] = t->id, l->lp[l->n] = t->logprob;
        l->top0[l->n] = t->n_top ? t->top[0].id : -1;
        l->top_lp0[l->n] = t->n_top ? t->top[0].logprob : 0;
        l->n_top = t->n_top;
        for (int32_t i = 1; i < t->n_top; i++)
            if (t->top[i].logprob > t->top[i - 1].logprob) l->n_top = -1; /* not best first */
        l->n++;
    }
    return 0;
}

static double ref_logprob(const float *x, int n, int id)
{
    double m = x[0], sum = 0;
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - m);
    return x[id] - m - log(sum);
}

static void test_steps(const int32_t *prompt, size_t n)
{
    t_begin("api: logprobs of generated tokens = log-softmax of the logits; top alternatives best first");
    enum { NV = 50257 };
    char err[512];
    sluice *s = open_tiny(0, 0);
    if (!s) {
        t_end();
        return;
    }
    sluice_sampling sp = greedy(6);
    sp.n_probs = 5;
    token_log log = {0};
    sluice_callbacks cb = {.user = &log, .on_token = log_token};
    sluice_result r;
    T_CHECK(sluice_generate_tokens(s, prompt, n, &sp, &cb, &r, err, sizeof err) == 0, "%s", err);
    T_CHECK(log.n == 6 && r.n_ids == 6 && log.n_top == 5, "%d tokens seen, %d alternatives", log.n, log.n_top);
    /* the same positions through token-level steps */
    sluice_reset(s);
    float *x = malloc(NV * sizeof *x);
    T_CHECK(sluice_eval(s, prompt, n, x, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < log.n && i < 6; i++) {
        double want = ref_logprob(x, NV, log.ids[i]);
        T_CHECK(fabs(log.lp[i] - want) < 1e-5, "token %d: logprob %.7f, reference %.7f", i, log.lp[i], want);
        T_CHECK(log.top0[i] == log.ids[i] && log.top_lp0[i] == log.lp[i], "greedy token %d is not the top alternative", i);
        T_CHECK(sluice_eval(s, &log.ids[i], 1, x, err, sizeof err) == 0, "%s", err);
    }
    sluice_result_free(&r);
    t_end();

    t_begin("api: sampler objects, rewind, reset and the token list");
    sluice_sampler *smp = NULL;
    sluice_sampling g = greedy(1);
    T_CHECK(sluice_sampler_new(s, &g, &smp, err, sizeof err) == 0, "%s", err);
    sluice_reset(s);
    size_t held;
    sluice_tokens(s, &held);
    T_CHECK(held == 0, "reset left %zu tokens", held);
    float *y = malloc(NV * sizeof *y);
    T_CHECK(sluice_eval(s, prompt, n, x, err, sizeof err) == 0, "%s", err);
    int32_t best = 0;
    for (int i = 1; i < NV; i++) best = x[i] > x[best] ? i : best;
    T_CHECK(smp && sluice_sampler_sample(smp, x) == best, "greedy sampler object != argmax");
    T_CHECK(sluice_eval(s, &best, 1, y, err, sizeof err) == 0, "%s", err);
    T_CHECK(sluice_rewind(s, (int32_t)n - 2, err, sizeof err) == 0, "%s", err);
    T_CHECK(sluice_eval(s, prompt + n - 2, 2, y, err, sizeof err) == 0, "%s", err);
    T_CHECK(!memcmp(x, y, NV * sizeof *x), "logits after rewind + re-evaluation differ");
    T_CHECK(sluice_rewind(s, (int32_t)n + 5, err, sizeof err) == -1 && err[0], "rewinding forward was accepted");
    sluice_sampler_free(smp);
    free(y);
    free(x);
    t_end();

    t_begin("api: tokenize / detokenize, end-of-generation ids, chat rendering");
    int32_t *ids;
    size_t ni;
    char *text;
    T_CHECK(sluice_tokenize(s, "Hello world", 11, 0, 0, &ids, &ni, err, sizeof err) == 0 && ni > 0, "%s", err);
    T_CHECK(sluice_detokenize(s, ids, ni, 0, &text, NULL, err, sizeof err) == 0 && !strcmp(text, "Hello world"), "%s",
            err);
    sluice_free(text), sluice_free(ids);
    int32_t bad = 50257;
    T_CHECK(sluice_detokenize(s, &bad, 1, 0, &text, NULL, err, sizeof err) == -1 && strstr(err, "50257"), "%s", err);
    sluice_message m[2] = {{"system", "Be brief."}, {"user", "Hi"}};
    T_CHECK(sluice_chat_render(s, m, 2, 1, &text, err, sizeof err) == 0 &&
                !strcmp(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            "ChatML rendering: %s", text ? text : err);
    sluice_free(text);
    size_t nst;
    const char *const *st = sluice_chat_stop_strings(s, &nst);
    T_CHECK(st && nst >= 1 && !strcmp(st[0], "<|im_end|>"), "ChatML stop strings");
    T_CHECK(strcmp(sluice_model_arch(s), "qwen3moe") == 0 || sluice_model_arch(s)[0], "arch");
    T_CHECK(sluice_n_vocab(s) == NV && sluice_n_ctx(s) == 256 && sluice_n_ctx_train(s) >= 512, "sizes");
    t_end();

    t_begin("api: stats JSON separates load, prompt and generation time");
    char *js = sluice_stats_json(s);
    json_t *o = js ? json_loads(js, 0, NULL) : NULL;
    T_CHECK(o && json_object_get(o, "load_s") && json_object_get(o, "prompt_s") && json_object_get(o, "decode_s") &&
                json_real_value(json_object_get(o, "load_s")) > 0,
            "%s", js ? js : "(null)");
    json_decref(o);
    sluice_free(js);
    sluice_stats fs;
    sluice_get_stats(s, &fs);
    T_CHECK(fs.load_s > 0 && fs.generated_tokens == 6, "stats: load %.3f s, %lld generated", fs.load_s,
            (long long)fs.generated_tokens);
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

    sluice_sampling gr = greedy(0);
    test_continuation(prompt, &gr, "api: two generate calls = one long call (tokens, context and logits bit for bit)");
    gr.repeat_penalty = 1.3f, gr.frequency_penalty = 0.2f, gr.presence_penalty = 0.1f, gr.repeat_last_n = 16;
    test_continuation(prompt, &gr, "api: the same with penalties (their history comes from the context)");

    /* a longer token sequence: a golden prompt and its continuation */
    json_t *r2 = json_array_get(json_object_get(g, "results"), 2);
    json_t *pid = json_object_get(r2, "prompt_ids"), *gid = json_object_get(r2, "generated_ids");
    size_t np = json_array_size(pid), ng = json_array_size(gid);
    int32_t *toks = malloc((np + ng + 1) * sizeof *toks);
    for (size_t i = 0; i < np; i++) toks[i] = (int32_t)json_integer_value(json_array_get(pid, i));
    for (size_t i = 0; i < ng; i++) toks[np + i] = (int32_t)json_integer_value(json_array_get(gid, i));
    test_error_recovery(toks, np + ng);
    test_steps(toks, np);
    free(toks);

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
