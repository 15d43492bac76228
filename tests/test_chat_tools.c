/* Chat templates with tools against transformers' renderings
 * (../shared/vocab/NAME.chat-tools.json, copied to tests/fixtures/chat/tools):
 *  - every conversation (tools, single / parallel / sequential calls, tool
 *    results, reasoning, template kwargs) renders byte for byte;
 *  - the reply parser is the inverse of each template: the text an assistant
 *    tool-call turn renders to parses back to the same tool calls, and a
 *    rendered reasoning turn to the same reasoning and content;
 *  - streamed parsing: content and reasoning of every prefix are prefixes of
 *    the full reply's. */
#include <jansson.h>
#include <time.h>

#include "chat/chat.h"
#include "chat/openai.h"
#include "chat/reply.h"
#include "t.h"

#define FIX "tests/fixtures/chat/tools/"

static const char *const names[] = {"qwen3", "qwen3-coder", "deepseek-v3", "deepseek-v3.1",
                                    "kimi-k2", "gpt-oss", "llama3", "llama3.1"};

static struct tm pinned_now(void)
{
    struct tm t = {.tm_year = 125, .tm_mon = 0, .tm_mday = 1};
    time_t tt = timegm(&t);
    gmtime_r(&tt, &t);
    return t;
}

/* The template variables of conversation CONV: tools, kwargs, special tokens. */
static char *extra_of(const json_t *file, const json_t *conv)
{
    json_t *x = json_deep_copy(json_object_get(file, "special_tokens_passed"));
    if (!x) x = json_object();
    json_object_update(x, json_object_get(conv, "kwargs"));
    json_t *tools = json_object_get(conv, "tools");
    if (json_is_array(tools)) json_object_set(x, "tools", tools);
    char *s = json_dumps(x, JSON_COMPACT);
    json_decref(x);
    return s;
}

static int render(const chat_tmpl *t, const json_t *file, const json_t *conv, const json_t *msgs, bool agp,
                  char **out, sl_err *err)
{
    char *mj = json_dumps(msgs, JSON_COMPACT);
    char *ej = extra_of(file, conv);
    struct tm now = pinned_now();
    chat_req r = {.messages_json = mj, .add_generation_prompt = agp, .extra_json = ej, .now = &now};
    int rc = chat_tmpl_render(t, &r, out, NULL, err);
    free(mj);
    free(ej);
    return rc;
}

/* Where the assistant turn at the start of S ends. */
static size_t turn_end(const char *s)
{
    static const char *const ends[] = {
        "<|im_end|>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<\xef\xbd\x9c" "tool\xe2\x96\x81outputs\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9c" "tool\xe2\x96\x81output\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<|eot_id|>", "<|eom_id|>", "<|call|>", "<|return|>", "<|start|>user", "<|start|>functions", NULL};
    size_t best = strlen(s);
    for (const char *const *e = ends; *e; e++) {
        const char *f = strstr(s, *e);
        if (f && (size_t)(f - s) < best) best = (size_t)(f - s);
    }
    return best;
}

static json_t *as_json(const json_t *args)
{
    if (json_is_string(args)) {
        json_error_t je;
        return json_loads(json_string_value(args), 0, &je);
    }
    return json_incref((json_t *)args);
}

static const char *reasoning_of(const json_t *m)
{
    const char *r = json_string_value(json_object_get(m, "reasoning_content"));
    return r ? r : json_string_value(json_object_get(m, "thinking"));
}

static void check_calls(const char *what, const json_t *calls, const chat_reply *rep, size_t most)
{
    size_t want = json_array_size(calls) < most ? json_array_size(calls) : most;
    T_CHECK(rep->n_calls == want, "%s: %zu calls parsed, %zu rendered (content \"%.80s\")", what, rep->n_calls,
            want, rep->content);
    for (size_t k = 0; k < want && k < rep->n_calls; k++) {
        json_t *f = json_object_get(json_array_get(calls, k), "function");
        T_CHECK(!strcmp(rep->calls[k].name, json_string_value(json_object_get(f, "name"))),
                "%s: call %zu name %s", what, k, rep->calls[k].name);
        json_error_t je;
        json_t *got = json_loads(rep->calls[k].arguments, 0, &je), *exp = as_json(json_object_get(f, "arguments"));
        T_CHECK(got && exp && json_equal(got, exp), "%s: call %zu arguments %s", what, k, rep->calls[k].arguments);
        json_decref(got);
        json_decref(exp);
    }
}

/* Streaming: content / reasoning of every prefix grow into the full reply's. */
static void check_prefixes(const char *what, const chat_reply_opts *o, const char *seg, size_t n,
                           const chat_reply *full)
{
    for (size_t k = 0; k <= n; k++) {
        chat_reply p;
        sl_err e;
        if (chat_reply_parse(o, seg, k, true, &p, &e)) {
            T_CHECK(0, "%s: partial parse: %s", what, e.msg);
            return;
        }
        bool ok = !strncmp(full->content, p.content, strlen(p.content)) &&
                  !strncmp(full->reasoning, p.reasoning, strlen(p.reasoning)) && p.n_calls <= full->n_calls;
        T_CHECK(ok, "%s: prefix of %zu bytes: content \"%s\" reasoning \"%.60s\" not a prefix of the full reply's",
                what, k, p.content, p.reasoning);
        chat_reply_free(&p);
        if (!ok) return;
    }
}

static bool ends_in_think(const char *p)
{
    size_t n = strlen(p);
    while (n && p[n - 1] == '\n') n--;
    return n >= 7 && !memcmp(p + n - 7, "<think>", 7);
}

/* Assistant message I of CONV rendered after the prefix, parsed back. */
static void inverse(const char *name, const chat_tmpl *t, chat_syntax syn, const json_t *file, const json_t *conv,
                    size_t i, int *checked)
{
    const json_t *msgs = json_object_get(conv, "messages"), *m = json_array_get(msgs, i);
    const json_t *calls = json_object_get(m, "tool_calls");
    const char *reasoning = reasoning_of(m);
    const char *rendered = json_string_value(json_object_get(conv, "rendered_text"));
    char what[160];
    snprintf(what, sizeof what, "%s/%s message %zu", name, json_string_value(json_object_get(conv, "name")), i);
    json_t *head = json_array();
    for (size_t k = 0; k < i; k++) json_array_append(head, json_array_get(msgs, k));
    char *prefix = NULL;
    sl_err e;
    int rc = render(t, file, conv, head, true, &prefix, &e);
    json_decref(head);
    size_t pl = prefix ? strlen(prefix) : 0;
    if (rc || strncmp(rendered, prefix, pl) != 0) {
        /* the template renders this turn differently after the generation
         * prompt (DeepSeek-V3's tool calls after tool results): not a reply */
        free(prefix);
        return;
    }
    const char *seg = rendered + pl;
    size_t n = turn_end(seg);
    chat_reply_opts o = {.syn = syn, .starts_in_think = ends_in_think(prefix)};
    char *tools = json_dumps(json_object_get(conv, "tools"), JSON_COMPACT | JSON_ENCODE_ANY);
    o.tools_json = tools;
    chat_reply rep;
    if (chat_reply_parse(&o, seg, n, false, &rep, &e)) {
        T_CHECK(0, "%s: %s", what, e.msg);
    } else {
        size_t most = syn.tools == TOOLS_GPT_OSS || syn.tools == TOOLS_LLAMA31 ? 1 : (size_t)-1;
        if (json_array_size(calls)) check_calls(what, calls, &rep, most), ++*checked;
        if (reasoning && strstr(seg, reasoning) && (size_t)(strstr(seg, reasoning) - seg) < n) {
            T_CHECK(!strcmp(rep.reasoning, reasoning), "%s: reasoning \"%s\"", what, rep.reasoning);
            ++*checked;
        }
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!json_array_size(calls) && content && syn.tools != TOOLS_LLAMA31) {
            T_CHECK(!strcmp(rep.content, content), "%s: content \"%s\" (want \"%s\")", what, rep.content, content);
            ++*checked;
        }
        check_prefixes(what, &o, seg, n, &rep);
        chat_reply_free(&rep);
    }
    free(tools);
    free(prefix);
}

static void one_file(const char *name)
{
    char path[256], tname[128];
    snprintf(path, sizeof path, FIX "%s.chat-tools.json", name);
    json_error_t je;
    json_t *file = json_load_file(path, 0, &je);
    snprintf(tname, sizeof tname, "chat-tools %s: renderings byte for byte", name);
    t_begin(tname);
    T_CHECK(file, "%s: %s", path, je.text);
    if (!file) {
        t_end();
        return;
    }
    const char *text = json_string_value(json_object_get(file, "template_text"));
    chat_tmpl *t = NULL;
    sl_err e;
    T_CHECK(chat_tmpl_parse(&t, text, strlen(text), &e) == 0, "parse: %s", e.msg);
    size_t ci;
    json_t *conv;
    json_t *convs = json_object_get(file, "conversations");
    json_array_foreach(convs, ci, conv) {
        if (!t) break;
        char *out = NULL;
        const char *want = json_string_value(json_object_get(conv, "rendered_text"));
        int rc = render(t, file, conv, json_object_get(conv, "messages"),
                        json_is_true(json_object_get(conv, "add_generation_prompt")), &out, &e);
        T_CHECK(rc == 0, "%s: %s", json_string_value(json_object_get(conv, "name")), e.msg);
        if (rc == 0) {
            size_t k = 0;
            while (out[k] && out[k] == want[k]) k++;
            T_CHECK(!strcmp(out, want), "%s: differs at byte %zu: \"%.40s\" vs \"%.40s\"",
                    json_string_value(json_object_get(conv, "name")), k, out + k, want + k);
        }
        free(out);
    }
    t_end();

    chat_syntax syn = chat_syntax_detect(text, strlen(text));
    snprintf(tname, sizeof tname, "chat-tools %s: %s replies parse back to their tool calls and reasoning", name,
             chat_tool_syntax_name(syn.tools));
    t_begin(tname);
    int checked = 0;
    json_array_foreach(convs, ci, conv) {
        if (!t) break;
        const json_t *msgs = json_object_get(conv, "messages");
        for (size_t i = 0; i < json_array_size(msgs); i++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(msgs, i), "role")), "assistant"))
                inverse(name, t, syn, file, conv, i, &checked);
    }
    bool has_tools = strcmp(name, "llama3") != 0;
    T_CHECK(!has_tools || checked > 0, "no assistant turn was checked");
    T_CHECK(has_tools == (syn.tools != TOOLS_NONE), "tool syntax %s", chat_tool_syntax_name(syn.tools));
    t_end();
    chat_tmpl_free(t);
    json_decref(file);
}

/* The conversation as an OpenAI client sends it: tool-call arguments as
 * JSON text (compact, as JSON.stringify writes it), content null beside
 * tool calls, reasoning as reasoning_content.  chat_api_render adjusts it
 * to what each family reads, so it renders as the reference does. */
static json_t *as_client_sends(const json_t *msgs)
{
    json_t *m = json_deep_copy(msgs);
    size_t i, k;
    json_t *msg, *call;
    json_array_foreach(m, i, msg) {
        json_t *calls = json_object_get(msg, "tool_calls");
        json_array_foreach(calls, k, call) {
            json_t *f = json_object_get(call, "function");
            json_t *a = json_object_get(f, "arguments");
            if (json_is_object(a)) {
                char *t = json_dumps(a, JSON_COMPACT);
                json_object_set_new(f, "arguments", json_string(t));
                free(t);
            }
        }
        json_t *c = json_object_get(msg, "content");
        if (json_array_size(calls) && json_is_string(c) && !json_string_length(c))
            json_object_set_new(msg, "content", json_null());
        json_t *th = json_object_get(msg, "thinking");
        if (th && !json_object_get(msg, "reasoning_content")) {
            json_object_set(msg, "reasoning_content", th);
            json_object_del(msg, "thinking");
        }
    }
    return m;
}

static void client_shapes(const char *name)
{
    char path[256], tname[160];
    snprintf(path, sizeof path, FIX "%s.chat-tools.json", name);
    json_error_t je;
    json_t *file = json_load_file(path, 0, &je);
    if (!file) return;
    snprintf(tname, sizeof tname, "chat-tools %s: OpenAI-shaped requests render as the references", name);
    t_begin(tname);
    const char *text = json_string_value(json_object_get(file, "template_text"));
    chat_syntax syn = chat_syntax_detect(text, strlen(text));
    chat_tmpl *t = NULL;
    sl_err e;
    T_CHECK(chat_tmpl_parse(&t, text, strlen(text), &e) == 0, "%s", e.msg);
    size_t ci;
    json_t *conv;
    json_array_foreach(json_object_get(file, "conversations"), ci, conv) {
        const char *cname = json_string_value(json_object_get(conv, "name"));
        if (!t || strstr(cname, "string_args")) continue; /* that case is about a string passed verbatim */
        json_t *msgs = as_client_sends(json_object_get(conv, "messages"));
        char *mj = json_dumps(msgs, JSON_COMPACT);
        json_t *tools = json_object_get(conv, "tools");
        char *tj = json_is_array(tools) ? json_dumps(tools, JSON_COMPACT) : NULL;
        json_t *kw = json_deep_copy(json_object_get(conv, "kwargs"));
        if (!kw) kw = json_object();
        json_t *sp = json_object_get(file, "special_tokens_passed");
        char *kj = json_object_size(kw) ? json_dumps(kw, JSON_COMPACT) : NULL;
        struct tm now = pinned_now();
        chat_api_req r = {.messages_json = mj, .tools_json = tj, .kwargs_json = kj,
                          .add_generation_prompt = json_is_true(json_object_get(conv, "add_generation_prompt")),
                          .bos_token = json_string_value(json_object_get(sp, "bos_token")),
                          .eos_token = json_string_value(json_object_get(sp, "eos_token")), .now = &now};
        char *out = NULL;
        int rc = chat_api_render(t, syn, &r, &out, &e);
        const char *want = json_string_value(json_object_get(conv, "rendered_text"));
        T_CHECK(rc == 0, "%s: %s", cname, e.msg);
        if (rc == 0) {
            size_t k = 0;
            while (out[k] && out[k] == want[k]) k++;
            T_CHECK(!strcmp(out, want), "%s: differs at byte %zu: \"%.50s\" vs \"%.50s\"", cname, k, out + k, want + k);
        }
        free(out), free(mj), free(tj), free(kj);
        json_decref(msgs), json_decref(kw);
    }
    chat_tmpl_free(t);
    json_decref(file);
    t_end();
}

/* The fixture copies equal the shared references. */
static void copies_match(void)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char rel[128], fix[256], tname[160];
        snprintf(rel, sizeof rel, "vocab/%s.chat-tools.json", names[i]);
        snprintf(fix, sizeof fix, FIX "%s.chat-tools.json", names[i]);
        snprintf(tname, sizeof tname, "chat-tools %s: fixture copy equals ../shared", names[i]);
        const char *sh = t_shared(rel);
        if (!sh) {
            t_skip(tname, "../shared not found");
            continue;
        }
        t_begin(tname);
        json_error_t je;
        json_t *a = json_load_file(sh, 0, &je), *b = json_load_file(fix, 0, &je);
        T_CHECK(a && b && json_equal(a, b), "%s differs from %s", fix, sh);
        json_decref(a);
        json_decref(b);
        t_end();
    }
}

/* Replies a model writes that no template renders: plain text, unfinished
 * and malformed calls, the other harmony header order. */
static void model_replies(void)
{
    t_begin("reply parser: model-written forms");
    chat_reply r;
    sl_err e;
    chat_reply_opts h = {.syn = {TOOLS_HERMES, true, false}};
    const char *t1 = "<think>\nhm\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
    T_CHECK(!chat_reply_parse(&h, t1, strlen(t1), false, &r, &e), "%s", e.msg);
    T_CHECK(!strcmp(r.reasoning, "hm") && !strcmp(r.content, "Sure.") && r.n_calls == 1 &&
                !strcmp(r.calls[0].arguments, "{\"a\":1}"), "hermes: %s / %s / %zu", r.reasoning, r.content, r.n_calls);
    chat_reply_free(&r);
    const char *t2 = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>"; /* bad JSON */
    T_CHECK(!chat_reply_parse(&h, t2, strlen(t2), false, &r, &e), "%s", e.msg);
    T_CHECK(r.n_calls == 0 && !strcmp(r.content, t2), "malformed call kept as content: %s", r.content);
    chat_reply_free(&r);
    const char *t3 = "<tool_call>\n{\"name\": \"f\", \"argu";
    T_CHECK(!chat_reply_parse(&h, t3, strlen(t3), true, &r, &e), "%s", e.msg);
    T_CHECK(r.in_call && r.n_calls == 0 && !*r.content, "partial call: in_call %d", r.in_call);
    chat_reply_free(&r);
    const char *t4 = "Hello <tool_ca";
    T_CHECK(!chat_reply_parse(&h, t4, strlen(t4), true, &r, &e), "%s", e.msg);
    T_CHECK(!strcmp(r.content, "Hello"), "held back marker prefix: \"%s\"", r.content);
    chat_reply_free(&r);
    chat_reply_opts g = {.syn = {TOOLS_GPT_OSS, false, true}};
    const char *t5 = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary "
                     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Bern\"}";
    T_CHECK(!chat_reply_parse(&g, t5, strlen(t5), false, &r, &e), "%s", e.msg);
    T_CHECK(!strcmp(r.reasoning, "think") && r.n_calls == 1 && !strcmp(r.calls[0].name, "get_weather"),
            "harmony: %s %zu", r.reasoning, r.n_calls);
    chat_reply_free(&r);
    const char *t6 = "just text";
    T_CHECK(!chat_reply_parse(&g, t6, strlen(t6), false, &r, &e), "%s", e.msg);
    T_CHECK(!strcmp(r.content, "just text") && !*r.reasoning, "harmony plain: %s", r.content);
    chat_reply_free(&r);
    t_end();
}

int main(void)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) one_file(names[i]);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) client_shapes(names[i]);
    copies_match();
    model_replies();
    return t_done();
}
