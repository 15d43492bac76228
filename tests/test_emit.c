/* The emitter (decode/emit.h) on the bundled model's GPT-2 vocabulary: streamed
 * text equals whole-sequence detokenization, stop strings cut exactly where
 * strstr finds them (never shown, even in pieces), UTF-8 sequences are never
 * split between callbacks, EOG / limit / caller stops. */
#include "decode/emit.h"
#include "t.h"

static const char *MODEL = "models/tinymoe-q8_0.gguf";
enum { EOS = 50256 };

typedef struct {
    char buf[4096];
    size_t len;
    int chunks, bad_utf8, stop_after_tokens, tokens;
} sink;

/* Whether S[0..n) is complete, valid UTF-8 (a straightforward decoder). */
static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = s[i] < 0x80 ? 1 : (s[i] >> 5) == 6 ? 2 : (s[i] >> 4) == 14 ? 3 : (s[i] >> 3) == 30 ? 4 : 0;
        if (!k || i + (size_t)k > n) return 0;
        for (int j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += (size_t)k;
    }
    return 1;
}

static int on_text(void *ud, const char *t, size_t n)
{
    sink *s = ud;
    if (s->len + n < sizeof s->buf) memcpy(s->buf + s->len, t, n), s->len += n;
    s->chunks++;
    s->bad_utf8 += !valid_utf8((const unsigned char *)t, n);
    return 0;
}

static int on_token(void *ud, const gen_token *t)
{
    sink *s = ud;
    (void)t;
    return s->stop_after_tokens && ++s->tokens >= s->stop_after_tokens;
}

/* Pushes TEXT's tokens (then EXTRA if >= 0) and returns the result. */
static void emit(const sl_vocab *v, const char *text, int32_t extra, const gen_opts *o, sink *sk, gen_result *r)
{
    int32_t *ids;
    size_t n;
    sl_err err;
    memset(sk, 0, sizeof *sk);
    if (vocab_tokenize(v, text, strlen(text), false, false, &ids, &n, &err)) {
        T_CHECK(0, "%s", err.msg);
        memset(r, 0, sizeof *r);
        return;
    }
    gen_emitter e;
    gen_callbacks cb = {sk, NULL, on_token, on_text, NULL};
    emitter_init(&e, v, o, &cb, r);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) rc = emitter_push(&e, ids[i], &err);
    if (rc == 0 && extra >= 0) rc = emitter_push(&e, extra, &err);
    T_CHECK(rc >= 0, "emitter error: %s", err.msg);
    if (rc == 0) T_CHECK(emitter_finish(&e, GEN_STOP_LIMIT, &err) == 0, "%s", err.msg);
    emitter_free(&e);
    free(ids);
}

static void check_plain(const sl_vocab *v, const char *name, const char *text)
{
    t_begin(name);
    gen_opts o = {.n_predict = -1};
    sink sk;
    gen_result r;
    emit(v, text, -1, &o, &sk, &r);
    T_CHECK(r.text && !strcmp(r.text, text), "text %s", r.text ? r.text : "(null)");
    T_CHECK(sk.len == strlen(text) && !memcmp(sk.buf, text, sk.len), "streamed text differs");
    T_CHECK(sk.bad_utf8 == 0, "%d chunks split a UTF-8 sequence", sk.bad_utf8);
    T_CHECK(r.stop == GEN_STOP_LIMIT, "stop %s", gen_stop_name(r.stop));
    gen_result_free(&r);
    t_end();
}

/* Reference: the text up to the earliest occurrence of any stop string. */
static void check_stops(const sl_vocab *v, const char *name, const char *text, const char *const *stops, size_t ns)
{
    t_begin(name);
    size_t cut = strlen(text);
    for (size_t i = 0; i < ns; i++) {
        const char *hit = stops[i][0] ? strstr(text, stops[i]) : NULL;
        if (hit && (size_t)(hit - text) < cut) cut = (size_t)(hit - text);
    }
    gen_opts o = {.n_predict = -1, .stops = stops, .n_stops = ns};
    sink sk;
    gen_result r;
    emit(v, text, -1, &o, &sk, &r);
    T_CHECK(r.text && r.len == cut && !memcmp(r.text, text, cut), "text '%s', expected '%.*s'", r.text, (int)cut, text);
    T_CHECK(sk.len == r.len && !memcmp(sk.buf, r.text, r.len), "streamed '%.*s' != result", (int)sk.len, sk.buf);
    T_CHECK(r.stop == (cut < strlen(text) ? GEN_STOP_STRING : GEN_STOP_LIMIT), "stop %s", gen_stop_name(r.stop));
    gen_result_free(&r);
    t_end();
}

static void check_eog(const sl_vocab *v)
{
    t_begin("emitter stops at EOG, which is not part of the output");
    gen_opts o = {.n_predict = -1};
    sink sk;
    gen_result r;
    emit(v, "The end.", EOS, &o, &sk, &r);
    T_CHECK(r.stop == GEN_STOP_EOG, "stop %s", gen_stop_name(r.stop));
    T_CHECK(r.n_ids > 0 && r.ids[r.n_ids - 1] != EOS && !strcmp(r.text, "The end."), "EOG in output: %s", r.text);
    gen_result_free(&r);
    o.ignore_eog = true;
    emit(v, "The end.", EOS, &o, &sk, &r);
    T_CHECK(r.stop == GEN_STOP_LIMIT && r.n_ids > 0 && r.ids[r.n_ids - 1] == EOS, "ignore_eog: stop %s",
            gen_stop_name(r.stop));
    gen_result_free(&r);
    t_end();
}

static void check_limits(const sl_vocab *v)
{
    t_begin("emitter n_predict and caller stops");
    gen_opts o = {.n_predict = 3};
    sink sk;
    gen_result r;
    emit(v, "one two three four five six", -1, &o, &sk, &r);
    T_CHECK(r.stop == GEN_STOP_LIMIT && r.n_ids == 3 && !strcmp(r.text, "one two three"), "%zu ids, '%s'", r.n_ids,
            r.text);
    gen_result_free(&r);
    o.n_predict = -1;
    memset(&sk, 0, sizeof sk);
    int32_t *ids;
    size_t n;
    sl_err err;
    T_CHECK(vocab_tokenize(v, "one two three four", 18, false, false, &ids, &n, &err) == 0, "%s", err.msg);
    gen_emitter e;
    sk.stop_after_tokens = 2;
    gen_callbacks cb = {&sk, NULL, on_token, on_text, NULL};
    emitter_init(&e, v, &o, &cb, &r);
    int rc = 0;
    size_t i = 0;
    while (i < n && rc == 0) rc = emitter_push(&e, ids[i++], &err);
    T_CHECK(rc == 1 && i == 2 && r.stop == GEN_STOP_CALLER && !strcmp(r.text, "one two"), "rc %d after %zu, '%s'", rc,
            i, r.text);
    emitter_free(&e);
    gen_result_free(&r);
    free(ids);
    t_end();
}

int main(void)
{
    (void)t_shared;
    sl_err err;
    gguf_file *g;
    sl_vocab *v;
    if (gguf_open(&g, MODEL, &err)) {
        t_skip("emitter tests", err.msg);
        return t_done();
    }
    if (vocab_load(&v, g, &err)) {
        t_begin("emitter: load the bundled vocabulary");
        T_CHECK(0, "%s", err.msg);
        t_end();
        gguf_close(g);
        return t_done();
    }
    check_plain(v, "emitter streams plain text unchanged", "Hello world, the end.");
    check_plain(v, "emitter never splits UTF-8 between callbacks", "naïve café — 日本語 🙂 ok");
    const char *const s1[] = {"d, th"};
    check_stops(v, "emitter stop string across tokens", "Hello world, the end.", s1, 1);
    const char *const s2[] = {"end!!", "zzz"};
    check_stops(v, "emitter held stop prefix is shown at the end", "Hello world, the end.", s2, 2);
    const char *const s3[] = {"the", "", "world"};
    check_stops(v, "emitter earliest of several stops wins, empty ignored", "Hello world, the end.", s3, 3);
    const char *const s4[] = {"日本"};
    check_stops(v, "emitter multi-byte stop string", "naïve café — 日本語", s4, 1);
    const char *const s5[] = {"Hello"};
    check_stops(v, "emitter stop string at the very start", "Hello world", s5, 1);
    check_eog(v);
    check_limits(v);
    vocab_free(v);
    gguf_close(g);
    return t_done();
}
