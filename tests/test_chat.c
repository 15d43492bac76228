/* Chat templates against references made by the real Jinja2 engine:
 *  - the shared goldens (*.chat.json: Qwen3, DeepSeek-V3, Llama 3, gpt-oss),
 *    copied with their templates into tests/fixtures/chat so a fresh clone
 *    runs them; with ../shared present the copies are checked against the
 *    GGUFs and the shared files;
 *  - reference.json / jinja_cases.json from tests/fixtures/chat/make_reference.py
 *    (Kimi-K2, ChatML, tool-use and reasoning conversations, and small
 *    templates for the interpreter's semantics);
 *  - error messages, limits on hostile templates, and the API. */
#include <jansson.h>
#include <pthread.h>
#include <time.h>

#include "chat/chat.h"
#include "gguf/gguf.h"
#include "t.h"

#define FIX "tests/fixtures/chat/"

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    return json_load_file(path, 0, &je);
}

/* The date the references pin strftime_now() to: 2025-01-01 00:00:00. */
static struct tm pinned_now(void)
{
    struct tm t = {.tm_year = 125, .tm_mon = 0, .tm_mday = 1};
    time_t tt = timegm(&t);
    gmtime_r(&tt, &t);
    return t;
}

static const char *jstr_or_null(const json_t *j) { return json_is_string(j) ? json_string_value(j) : NULL; }

/* Renders TMPL with MESSAGES / EXTRA (JSON values) like the references do. */
static int render(const char *tmpl, size_t tlen, const json_t *messages, bool agp, const char *bos, const char *eos,
                  const json_t *extra, char **out, sl_err *err)
{
    chat_tmpl *t;
    *out = NULL;
    if (chat_tmpl_parse(&t, tmpl, tlen, err)) return -1;
    char *mj = json_dumps(messages, JSON_COMPACT | JSON_ENCODE_ANY);
    char *ej = extra && json_object_size(extra) ? json_dumps(extra, JSON_COMPACT) : NULL;
    struct tm now = pinned_now();
    chat_req r = {.messages_json = mj, .add_generation_prompt = agp, .bos_token = bos, .eos_token = eos,
                  .extra_json = ej, .now = &now};
    int rc = chat_tmpl_render(t, &r, out, NULL, err);
    free(mj);
    free(ej);
    chat_tmpl_free(t);
    return rc;
}

/* ---- shared goldens -------------------------------------------------------- */

static const struct {
    const char *name, *bos, *eos;
} families[] = {
    {"qwen3", NULL, "<|im_end|>"},
    {"deepseek-v3", "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
     "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    {"llama3", "<|begin_of_text|>", "<|eot_id|>"},
    {"gpt-oss", NULL, "<|return|>"},
};

static void golden_family(int fi)
{
    char path[256], tpath[256], name[128];
    snprintf(path, sizeof path, FIX "%s.chat.json", families[fi].name);
    snprintf(tpath, sizeof tpath, FIX "%s.jinja", families[fi].name);
    size_t tlen;
    char *tmpl = read_file(tpath, &tlen);
    json_t *doc = load_json(path);
    json_t *convs = json_object_get(doc, "conversations");
    if (!tmpl || !json_array_size(convs)) {
        snprintf(name, sizeof name, "chat golden %s", families[fi].name);
        t_begin(name);
        T_CHECK(0, "cannot read %s or %s", path, tpath);
        t_end();
    }
    size_t i;
    json_t *c;
    json_array_foreach(convs, i, c) {
        snprintf(name, sizeof name, "chat golden %s %s", families[fi].name,
                 json_string_value(json_object_get(c, "name")));
        t_begin(name);
        sl_err err = {{0}};
        char *out;
        int rc = render(tmpl, tlen, json_object_get(c, "messages"),
                        json_is_true(json_object_get(c, "add_generation_prompt")), families[fi].bos, families[fi].eos,
                        NULL, &out, &err);
        const char *want = json_string_value(json_object_get(c, "rendered_text"));
        T_CHECK(rc == 0, "render failed: %s", err.msg);
        T_CHECK(rc || !strcmp(out, want), "rendering differs:\n got: %s\nwant: %s", out, want);
        free(out);
        t_end();
    }
    json_decref(doc);
    free(tmpl);
}

/* Text of token ID in a vocab-only GGUF. */
static const char *token_text(const gguf_file *g, const char *key)
{
    sl_err err;
    uint32_t id;
    const void *data;
    uint64_t n;
    if (gguf_get_u32(g, key, &id, &err) != 1) return NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING, &data, &n, &err) != 1 || id >= n) return NULL;
    return ((const gguf_str *)data)[id].s;
}

static void golden_shared(int fi)
{
    char rel[128], name[128], fix[256];
    snprintf(name, sizeof name, "chat fixtures match ../shared %s", families[fi].name);
    snprintf(rel, sizeof rel, "vocab/%s.gguf", families[fi].name);
    const char *gpath = t_shared(rel);
    if (!gpath) {
        t_skip(name, "../shared not present");
        return;
    }
    t_begin(name);
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, gpath, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    const char *text;
    size_t len, flen;
    snprintf(fix, sizeof fix, FIX "%s.jinja", families[fi].name);
    char *fixture = read_file(fix, &flen);
    T_CHECK(chat_template_for_model(g, NULL, &text, &len, &err) == 0, "%s", err.msg);
    T_CHECK(fixture && len == flen && !memcmp(text, fixture, len), "%s differs from the GGUF's template", fix);
    const char *bos = token_text(g, "tokenizer.ggml.bos_token_id");
    if (families[fi].bos) T_CHECK(bos && !strcmp(bos, families[fi].bos), "bos token %s", bos ? bos : "(none)");
    snprintf(rel, sizeof rel, "vocab/%s.chat.json", families[fi].name);
    snprintf(fix, sizeof fix, FIX "%s.chat.json", families[fi].name);
    size_t a, b;
    char *sj = read_file(t_shared(rel), &a), *fj = read_file(fix, &b);
    T_CHECK(sj && fj && a == b && !memcmp(sj, fj, a), "%s differs from ../shared/%s", fix, rel);
    free(sj);
    free(fj);
    free(fixture);
    gguf_close(g);
    t_end();
}

/* ---- references from make_reference.py ------------------------------------ */

static void check_result(int rc, const char *out, const sl_err *err, const json_t *want, const char *what)
{
    const json_t *wo = json_object_get(want, "output");
    if (wo) {
        T_CHECK(rc == 0, "%s: failed: %s", what, err->msg);
        T_CHECK(rc || !strcmp(out, json_string_value(wo)), "%s:\n got: %s\nwant: %s", what, out,
                json_string_value(wo));
    } else {
        T_CHECK(rc != 0, "%s: rendered \"%s\" where Jinja2 fails with %s", what, out,
                json_string_value(json_object_get(want, "error")));
    }
}

static void reference_renderings(void)
{
    json_t *doc = load_json(FIX "reference.json");
    json_t *list = json_object_get(doc, "renderings");
    if (!json_array_size(list)) {
        t_begin("chat reference.json");
        T_CHECK(0, "cannot read " FIX "reference.json");
        t_end();
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        char name[160], path[256];
        const char *tname = json_string_value(json_object_get(e, "template"));
        snprintf(name, sizeof name, "chat reference %s %s", tname, json_string_value(json_object_get(e, "name")));
        snprintf(path, sizeof path, FIX "%s", tname);
        t_begin(name);
        size_t tlen;
        char *tmpl = read_file(path, &tlen), *out = NULL;
        sl_err err = {{0}};
        int rc = tmpl ? render(tmpl, tlen, json_object_get(e, "messages"),
                               json_is_true(json_object_get(e, "add_generation_prompt")),
                               jstr_or_null(json_object_get(e, "bos_token")),
                               jstr_or_null(json_object_get(e, "eos_token")), json_object_get(e, "extra"), &out, &err)
                      : -1;
        T_CHECK(tmpl, "cannot read %s", path);
        check_result(rc, out, &err, e, name);
        free(out);
        free(tmpl);
        t_end();
    }
    json_decref(doc);
}

/* jinja_cases.json: one test per section. */
static void jinja_cases(void)
{
    json_t *doc = load_json(FIX "jinja_cases.json");
    json_t *cases = json_object_get(doc, "cases"), *msgs = json_object_get(doc, "default_messages"),
           *vars = json_object_get(doc, "default_vars");
    if (!json_array_size(cases)) {
        t_begin("jinja cases");
        T_CHECK(0, "cannot read " FIX "jinja_cases.json");
        t_end();
    }
    const char *section = NULL;
    int count = 0;
    char name[128];
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *sec = json_string_value(json_object_get(c, "section"));
        if (!section || strcmp(section, sec)) {
            if (section) t_end();
            section = sec;
            count = 0;
            snprintf(name, sizeof name, "jinja semantics: %s", sec);
            t_begin(name);
        }
        const char *tmpl = json_string_value(json_object_get(c, "template"));
        char *out = NULL, what[200];
        sl_err err = {{0}};
        int rc = render(tmpl, strlen(tmpl), msgs, false, NULL, NULL, vars, &out, &err);
        snprintf(what, sizeof what, "case %d %.120s", count++, tmpl);
        check_result(rc, out, &err, c, what);
        free(out);
    }
    if (section) t_end();
    json_decref(doc);
}

/* ---- errors --------------------------------------------------------------- */

/* Renders with a smaller evaluation budget than the default, so runaway
 * templates fail fast (also under the sanitizers). */
static int try_render(const char *tmpl, const char *messages_json, char **out, sl_err *err)
{
    chat_tmpl *t;
    *out = NULL;
    if (chat_tmpl_parse(&t, tmpl, strlen(tmpl), err)) return -1;
    struct tm now = pinned_now();
    chat_req r = {.messages_json = messages_json ? messages_json : "[]", .now = &now, .max_steps = 2000000};
    int rc = chat_tmpl_render(t, &r, out, NULL, err);
    chat_tmpl_free(t);
    return rc;
}

static void expect_error(const char *name, const char *tmpl, const char *messages_json, const char *needle1,
                         const char *needle2)
{
    t_begin(name);
    char *out;
    sl_err err = {{0}};
    int rc = try_render(tmpl, messages_json, &out, &err);
    T_CHECK(rc == -1, "rendered \"%.80s\" instead of failing", out ? out : "");
    T_CHECK(strstr(err.msg, needle1), "message lacks \"%s\": %s", needle1, err.msg);
    T_CHECK(!needle2 || strstr(err.msg, needle2), "message lacks \"%s\": %s", needle2, err.msg);
    free(out);
    t_end();
}

static void error_messages(void)
{
    expect_error("chat error: syntax error names line and column", "line1\nline2 {{ 1 +* 2 }}", NULL,
                 "chat template: line 2, column 13", "unexpected '*'");
    expect_error("chat error: unclosed block names where it opened", "a\n{% for m in messages %}\nx", NULL,
                 "line 2, column 4 is not closed", "'endfor'");
    expect_error("chat error: runtime error names the line", "{% for m in messages %}\n\n{{ m.content + 1 }}{% endfor %}",
                 "[{\"role\":\"user\",\"content\":\"hi\"}]", "line 3, column ", "concatenate str");
    expect_error("chat error: undefined attribute", "{{ messages[0].content.nope.x }}",
                 "[{\"role\":\"user\",\"content\":\"hi\"}]", "'str object' has no attribute 'nope'", "line 1");
    expect_error("chat error: raise_exception message", "{{ '' }}\n{{ raise_exception('Only user and assistant') }}",
                 NULL, "line 2", "raise_exception: Only user and assistant");
    expect_error("chat error: unsupported tag names the fallback",
                 "{% include 'x.jinja' %}<|im_start|>", NULL, "unsupported template feature: {% include %}",
                 "built-in ChatML renderer");
    expect_error("chat error: unsupported filter names the fallback",
                 "<|start_header_id|>{{ messages | groupby('role') }}", NULL, "filter 'groupby'",
                 "built-in Llama 3 renderer");
    expect_error("chat error: missing filter inside if fails when it runs",
                 "<|channel|><|message|>{% if true %}{{ 'x' | from_json }}{% endif %}", NULL,
                 "filter 'from_json'", "built-in gpt-oss renderer");
    expect_error("chat error: immutable sandbox", "{% set l = [] %}{% set _ = l.append(1) %}", NULL,
                 "access to attribute 'append' of 'list' object is unsafe", NULL);
    expect_error("chat error: bad messages JSON", "x", "[{\"role\": ]", "messages: invalid JSON", NULL);
    expect_error("chat error: messages must be an array", "x", "{\"role\": \"user\"}", "must be a JSON array", NULL);
    expect_error("chat error: None content", "{{ messages[0].content + '!' }}", "[{\"role\":\"user\",\"content\":null}]",
                 "unsupported operand type(s) for +: 'NoneType' and 'str'", NULL);

    t_begin("chat error: GGUF without a template");
    gguf_file *g;
    sl_err err;
    const char *text;
    if (gguf_open(&g, "models/tinymoe-q8_0.gguf", &err) == 0) {
        T_CHECK(chat_template_for_model(g, NULL, &text, NULL, &err) == -1, "found a template");
        T_CHECK(strstr(err.msg, "no chat template") && strstr(err.msg, "tokenizer.chat_template"), "%s", err.msg);
        T_CHECK(chat_template_for_model(g, "tool_use", &text, NULL, &err) == -1 &&
                    strstr(err.msg, "tokenizer.chat_template.tool_use"), "%s", err.msg);
        gguf_close(g);
    } else {
        T_CHECK(0, "%s", err.msg);
    }
    t_end();
}

/* ---- hostile templates ------------------------------------------------------ */

static void limits(void)
{
    static const char deep_data[] =
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"
        "{{ ns.l|length }}{{ (ns.l|string)|length > 100 }}";
    expect_error("chat limit: macro recursion", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", NULL,
                 "macro calls nested deeper than", NULL);
    expect_error("chat limit: step budget",
                 "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
                 "budget of", "evaluation steps");
    expect_error("chat limit: huge string", "{{ 'x' * 100000000 }}", NULL, "exceeds the output limit", NULL);
    expect_error("chat limit: output doubling",
                 "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", NULL,
                 "exceeds the output limit", NULL);
    expect_error("chat limit: big range", "{{ range(10000000)|length }}", NULL, "MAX_RANGE", NULL);
    expect_error("chat limit: list growth", "{{ [1] * 100000000 }}", NULL, "exceeds the limit", NULL);

    char *deep = malloc(20000);
    strcpy(deep, "{{ ");
    for (int i = 0; i < 5000; i++) strcat(deep, "(");
    strcat(deep, "1");
    for (int i = 0; i < 5000; i++) strcat(deep, ")");
    strcat(deep, " }}");
    expect_error("chat limit: deeply nested parentheses", deep, NULL, "nested too deeply", NULL);
    strcpy(deep, "{{ x");
    for (int i = 0; i < 2000; i++) strcat(deep, "|trim");
    strcat(deep, " }}");
    expect_error("chat limit: long filter chain", deep, NULL, "nested deeper than", NULL);
    deep[0] = 0;
    for (int i = 0; i < 1000; i++) strcat(deep, "{% if 1 %}");
    expect_error("chat limit: deeply nested blocks", deep, NULL, "nested more than", NULL);
    free(deep);

    t_begin("chat limit: deep and cyclic values stay bounded");
    char *out;
    sl_err err;
    int rc = try_render(deep_data, NULL, &out, &err);
    T_CHECK(rc == 0 && !strcmp(out, "1True"), "deep list: %s", rc ? err.msg : out);
    free(out);
    rc = try_render("{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.x = b %}"
                    "{{ a == b }}{{ (a|string)|length > 0 }}", NULL, &out, &err);
    T_CHECK(rc == 0 && !strcmp(out, "FalseTrue"), "cycle: %s", rc ? err.msg : out);
    free(out);
    t_end();

    /* found by fuzz_jinja (UBSan: memcpy from a NULL list); Jinja2 renders [] and 0 */
    t_begin("chat: sort of an empty list");
    rc = try_render("{{ []|sort }}{{ []|sort(reverse=true)|length }}{{ {}|dictsort }}", NULL, &out, &err);
    T_CHECK(rc == 0 && !strcmp(out, "[]0[]"), "empty sort: %s", rc ? err.msg : out);
    free(out);
    t_end();

    t_begin("chat limit: max_output and deep JSON");
    chat_tmpl *t;
    struct tm now = pinned_now();
    static const char loop_tmpl[] = "{% for m in messages %}{{ m.content }}{% endfor %}";
    rc = chat_tmpl_parse(&t, loop_tmpl, strlen(loop_tmpl), &err);
    T_CHECK(rc == 0, "%s", err.msg);
    chat_msg msgs[2] = {{"user", "0123456789"}, {"assistant", "abcdefghij"}};
    chat_req r = {.msgs = msgs, .n_msgs = 2, .now = &now, .max_output = 15};
    T_CHECK(!rc && chat_tmpl_render(t, &r, &out, NULL, &err) == -1 && strstr(err.msg, "exceeds the limit of 15 bytes"),
            "max_output: %s", err.msg);
    r.max_output = 20;
    size_t len = 0;
    T_CHECK(!rc && chat_tmpl_render(t, &r, &out, &len, &err) == 0 && len == 20, "max_output 20: %s", err.msg);
    if (!rc) free(out);
    char *dj = malloc(5000);
    strcpy(dj, "[");
    for (int i = 0; i < 1000; i++) strcat(dj, "[");
    for (int i = 0; i < 1001; i++) strcat(dj, "]");
    chat_req r2 = {.messages_json = dj, .now = &now};
    T_CHECK(!rc && chat_tmpl_render(t, &r2, &out, NULL, &err) == -1 && strstr(err.msg, "nested deeper"), "%s",
            err.msg);
    free(dj);
    chat_tmpl_free(t);
    t_end();
}

/* ---- API ----------------------------------------------------------------- */

typedef struct {
    const chat_tmpl *t;
    char *out;
} thread_arg;

static void *render_thread(void *p)
{
    thread_arg *a = p;
    chat_msg msgs[2] = {{"system", "Be brief."}, {"user", "Hi!"}};
    struct tm now = pinned_now();
    chat_req r = {.msgs = msgs, .n_msgs = 2, .add_generation_prompt = true, .now = &now};
    sl_err err;
    for (int i = 0; i < 20; i++) {
        free(a->out);
        if (chat_tmpl_render(a->t, &r, &a->out, NULL, &err)) a->out = NULL;
    }
    return NULL;
}

static void api(void)
{
    size_t len;
    char *chatml = read_file(FIX "chatml.jinja", &len), *out = NULL;
    sl_err err;
    t_begin("chat api: chat_render with message structs");
    chat_msg msgs[2] = {{"user", "hi"}, {"assistant", "hello"}};
    int rc = chatml ? chat_render(chatml, msgs, 2, true, NULL, NULL, &out, &err) : -1;
    T_CHECK(rc == 0 && !strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
                                     "<|im_start|>assistant\n"), "%s", rc ? err.msg : out);
    free(out);
    t_end();

    t_begin("chat api: one parsed template rendered from two threads");
    char *qwen = read_file(FIX "qwen3.jinja", &len);
    chat_tmpl *t = NULL;
    rc = qwen ? chat_tmpl_parse(&t, qwen, len, &err) : -1;
    T_CHECK(rc == 0, "%s", err.msg);
    if (!rc) {
        thread_arg a = {t, NULL}, b = {t, NULL};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, render_thread, &a);
        pthread_create(&tb, NULL, render_thread, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        T_CHECK(a.out && b.out && !strcmp(a.out, b.out) &&
                    !strcmp(a.out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                                   "<|im_start|>assistant\n"), "thread results differ");
        free(a.out);
        free(b.out);
        chat_tmpl_free(t);
    }
    free(qwen);
    t_end();

    t_begin("chat api: families and stop strings");
    static const struct {
        const char *file;
        chat_family f;
        const char *stop;
    } fam[] = {
        {"qwen3.jinja", CHAT_FAMILY_QWEN3, "<|im_end|>"},
        {"deepseek-v3.jinja", CHAT_FAMILY_DEEPSEEK3, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
        {"llama3.jinja", CHAT_FAMILY_LLAMA3, "<|eot_id|>"},
        {"gpt-oss.jinja", CHAT_FAMILY_GPT_OSS, "<|return|>"},
        {"kimi-k2.jinja", CHAT_FAMILY_KIMI_K2, "<|im_end|>"},
        {"kimi-k2-instruct.jinja", CHAT_FAMILY_KIMI_K2, "<|im_end|>"},
        {"chatml.jinja", CHAT_FAMILY_CHATML, "<|im_end|>"},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, FIX "%s", fam[i].file);
        char *text = read_file(path, &len);
        chat_family f = text ? chat_detect_family(text, len) : CHAT_FAMILY_UNKNOWN;
        T_CHECK(f == fam[i].f, "%s detected as %s", fam[i].file, chat_family_name(f));
        const char *const *stops = chat_stop_strings(f);
        T_CHECK(stops[0] && !strcmp(stops[0], fam[i].stop), "%s: first stop string", fam[i].file);
        free(text);
    }
    T_CHECK(chat_detect_family("{{ x }}", 7) == CHAT_FAMILY_UNKNOWN && !chat_stop_strings(CHAT_FAMILY_UNKNOWN)[0],
            "unknown family");
    t_end();

    t_begin("chat api: extra variables and special tokens");
    chat_tmpl *t2;
    struct tm now = pinned_now();
    static const char vars_tmpl[] = "{{ bos_token }}|{{ eos_token is defined }}|{{ tools }}|{{ enable_thinking }}|"
                                    "{{ messages|length }}|{{ strftime_now('%d %b %Y') }}";
    rc = chat_tmpl_parse(&t2, vars_tmpl, strlen(vars_tmpl), &err);
    T_CHECK(rc == 0, "%s", err.msg);
    chat_req r = {.messages_json = "[{\"role\":\"user\",\"content\":\"x\"}]", .bos_token = "<s>",
                  .extra_json = "{\"enable_thinking\": false}", .now = &now};
    T_CHECK(!rc && chat_tmpl_render(t2, &r, &out, NULL, &err) == 0 && !strcmp(out, "<s>|False|None|False|1|01 Jan 2025"),
            "%s", rc ? err.msg : out);
    if (!rc) free(out);
    r.extra_json = "[1]";
    T_CHECK(!rc && chat_tmpl_render(t2, &r, &out, NULL, &err) == -1 && strstr(err.msg, "must be a JSON object"), "%s",
            err.msg);
    chat_tmpl_free(t2);
    t_end();
    free(chatml);
}

int main(void)
{
    for (int i = 0; i < (int)(sizeof families / sizeof families[0]); i++) golden_family(i);
    for (int i = 0; i < (int)(sizeof families / sizeof families[0]); i++) golden_shared(i);
    reference_renderings();
    jinja_cases();
    error_messages();
    limits();
    api();
    return t_done();
}
