/* Request bodies to generation parameters (request.h).  Unknown fields are
 * ignored, as OpenAI's and Anthropic's servers do with fields they do not
 * use; a known field of the wrong type or out of range is refused. */
#include "server/request.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

int srv_fail(srv_error *err, int status, const char *field, const char *fmt, ...)
{
    err->status = status;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

typedef struct {
    srv_request *r;
    srv_error *err;
    const srv_limits *lim;
    json_t *root;
} ctx;

static const char *type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int wrong_type(ctx *c, const char *field, const json_t *j, const char *want)
{
    return srv_fail(c->err, 400, field, "'%s' must be %s, not %s", field, want, type_name(j));
}

/* Field KEY of the body: NULL when absent or null. */
static json_t *opt(json_t *obj, const char *key)
{
    json_t *j = json_object_get(obj, key);
    return json_is_null(j) ? NULL : j;
}

static int get_bool(ctx *c, const char *key, bool *out)
{
    json_t *j = opt(c->root, key);
    if (!j) return 0;
    if (!json_is_boolean(j)) return wrong_type(c, key, j, "a boolean");
    *out = json_is_true(j);
    return 0;
}

static int get_num(ctx *c, const char *key, double lo, double hi, float *out)
{
    json_t *j = opt(c->root, key);
    if (!j) return 0;
    if (!json_is_number(j)) return wrong_type(c, key, j, "a number");
    double v = json_number_value(j);
    if (!(v >= lo && v <= hi)) return srv_fail(c->err, 400, key, "'%s' must be between %g and %g, not %g", key, lo, hi, v);
    *out = (float)v;
    return 0;
}

static int get_int(ctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *given)
{
    json_t *j = opt(obj, key);
    if (given) *given = j != NULL;
    if (!j) return 0;
    int64_t v;
    if (json_is_real(j)) { /* 5.0 counts as 5 */
        double d = json_real_value(j);
        if (d != floor(d) || fabs(d) > 9e15)
            return srv_fail(c->err, 400, key, "'%s' must be an integer, not %g", key, d);
        v = (int64_t)d;
    } else if (json_is_integer(j)) {
        v = json_integer_value(j);
    } else {
        return wrong_type(c, key, j, "an integer");
    }
    if (v < lo || v > hi)
        return srv_fail(c->err, 400, key, "'%s' must be between %lld and %lld, not %lld", key, (long long)lo,
                        (long long)hi, (long long)v);
    *out = v;
    return 0;
}

static int get_str(ctx *c, json_t *obj, const char *key, const char *field, char **out)
{
    json_t *j = opt(obj, key);
    if (!j) return 0;
    if (!json_is_string(j)) return wrong_type(c, field, j, "a string");
    free(*out);
    *out = strdup(json_string_value(j));
    return *out ? 0 : srv_fail(c->err, 500, NULL, "out of memory");
}

static char *dump(const json_t *j) { return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY); }

/* ---- sampling fields shared by the APIs -------------------------------- */

static int stop_strings(ctx *c, const char *key)
{
    json_t *j = opt(c->root, key);
    if (!j) return 0;
    size_t most = c->lim && c->lim->max_stop ? c->lim->max_stop : 16;
    if (json_is_string(j) && c->r->api != SRV_API_MESSAGES) { /* OpenAI takes one string too */
        json_t *a = json_array();
        json_array_append(a, j);
        json_object_set_new(c->root, key, a);
        j = a;
    }
    if (!json_is_array(j))
        return wrong_type(c, key, j, c->r->api == SRV_API_MESSAGES ? "an array of strings" : "a string or an array of strings");
    if (json_array_size(j) > most) return srv_fail(c->err, 400, key, "'%s' has %zu strings; at most %zu", key, json_array_size(j), most);
    c->r->stop = calloc(json_array_size(j) + 1, sizeof *c->r->stop);
    if (!c->r->stop) return srv_fail(c->err, 500, NULL, "out of memory");
    size_t i;
    json_t *s;
    json_array_foreach(j, i, s) {
        char f[64];
        snprintf(f, sizeof f, "%s[%zu]", key, i);
        if (!json_is_string(s)) return wrong_type(c, f, s, "a string");
        if (!json_string_length(s)) return srv_fail(c->err, 400, f, "'%s' is empty", f);
        c->r->stop[c->r->n_stop++] = strdup(json_string_value(s));
    }
    return 0;
}

static int sampling(ctx *c, double temp_max)
{
    srv_request *r = c->r;
    int64_t v;
    bool given;
    if (get_num(c, "temperature", 0, temp_max, &r->temp) || get_num(c, "top_p", 0, 1, &r->top_p) ||
        get_num(c, "min_p", 0, 1, &r->min_p) || get_num(c, "presence_penalty", -2, 2, &r->presence_penalty) ||
        get_num(c, "frequency_penalty", -2, 2, &r->frequency_penalty) ||
        get_num(c, "repeat_penalty", 0, 10, &r->repeat_penalty))
        return -1;
    if (get_int(c, c->root, "top_k", 0, 1 << 30, &v, &given)) return -1;
    if (given) r->top_k = (int32_t)v;
    if (get_int(c, c->root, "seed", INT64_MIN, INT64_MAX, &v, &given)) return -1;
    if (given) r->seed = (uint32_t)(uint64_t)v; /* -1: random, as llama-server */
    return 0;
}

static int max_tokens(ctx *c, const char *key)
{
    int64_t v;
    bool given;
    if (get_int(c, c->root, key, 0, INT32_MAX, &v, &given)) return -1;
    if (given) c->r->n_predict = (int32_t)v;
    return 0;
}

/* ---- OpenAI messages ---------------------------------------------------- */

/* Text content parts joined into one string; other parts refused. */
static int content_text(ctx *c, json_t *msg, const char *field)
{
    json_t *content = json_object_get(msg, "content");
    if (!content || json_is_null(content) || json_is_string(content)) return 0;
    if (!json_is_array(content)) return wrong_type(c, field, content, "a string, an array of parts or null");
    size_t i, total = 0;
    json_t *part;
    json_array_foreach(content, i, part) {
        char f[160];
        snprintf(f, sizeof f, "%s[%zu]", field, i);
        if (!json_is_object(part)) return wrong_type(c, f, part, "an object");
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!type) return srv_fail(c->err, 400, f, "'%s.type' must be a string", f);
        if (strcmp(type, "text") != 0)
            return srv_fail(c->err, 400, f, "content parts of type '%s' are not supported (text only)", type);
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t)) return srv_fail(c->err, 400, f, "'%s.text' must be a string", f);
        total += json_string_length(t);
    }
    char *joined = malloc(total + 1), *p = joined;
    if (!joined) return srv_fail(c->err, 500, NULL, "out of memory");
    json_array_foreach(content, i, part) {
        json_t *t = json_object_get(part, "text");
        memcpy(p, json_string_value(t), json_string_length(t));
        p += json_string_length(t);
    }
    json_object_set_new(msg, "content", json_stringn(joined, total));
    free(joined);
    return 0;
}

static int tool_calls(ctx *c, json_t *msg, const char *field)
{
    json_t *tc = opt(msg, "tool_calls");
    if (!tc) return json_object_del(msg, "tool_calls"), 0;
    if (!json_is_array(tc)) return wrong_type(c, field, tc, "an array");
    size_t i;
    json_t *call;
    json_array_foreach(tc, i, call) {
        char f[200];
        snprintf(f, sizeof f, "%s[%zu]", field, i);
        if (!json_is_object(call)) return wrong_type(c, f, call, "an object");
        json_t *fn = json_object_get(call, "function");
        if (!json_is_object(fn)) return srv_fail(c->err, 400, f, "'%s.function' must be an object", f);
        if (!json_is_string(json_object_get(fn, "name")))
            return srv_fail(c->err, 400, f, "'%s.function.name' must be a string", f);
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(args) && !json_is_object(args))
            return srv_fail(c->err, 400, f, "'%s.function.arguments' must be a JSON string or an object", f);
        json_t *id = json_object_get(call, "id");
        if (id && !json_is_string(id)) return srv_fail(c->err, 400, f, "'%s.id' must be a string", f);
    }
    return 0;
}

static int check_message(ctx *c, json_t *msg, size_t i)
{
    char f[96], g[128];
    snprintf(f, sizeof f, "messages[%zu]", i);
    if (!json_is_object(msg)) return wrong_type(c, f, msg, "an object");
    json_t *role = json_object_get(msg, "role");
    snprintf(g, sizeof g, "%s.role", f);
    if (!json_is_string(role)) return role ? wrong_type(c, g, role, "a string") : srv_fail(c->err, 400, g, "'%s' is missing", g);
    const char *r = json_string_value(role);
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", NULL};
    const char *const *k = roles;
    while (*k && strcmp(*k, r)) k++;
    if (!*k)
        return srv_fail(c->err, 400, g, "unknown role '%.40s' (system, developer, user, assistant or tool)", r);
    bool is_asst = !strcmp(r, "assistant");
    /* R dies with the old value when the role is replaced: last use above */
    if (!strcmp(r, "developer")) json_object_set_new(msg, "role", json_string("system"));
    snprintf(g, sizeof g, "%s.content", f);
    if (content_text(c, msg, g)) return -1;
    json_t *content = json_object_get(msg, "content");
    if ((!content || json_is_null(content)) && !(is_asst && opt(msg, "tool_calls")))
        return srv_fail(c->err, 400, g, "'%s' is missing (only an assistant message with tool_calls may omit it)", g);
    snprintf(g, sizeof g, "%s.tool_calls", f);
    if (is_asst && tool_calls(c, msg, g)) return -1;
    static const char *const strs[] = {"name", "tool_call_id", "reasoning_content", NULL};
    for (k = strs; *k; k++) {
        json_t *j = json_object_get(msg, *k);
        snprintf(g, sizeof g, "%s.%s", f, *k);
        if (j && !json_is_string(j) && !json_is_null(j)) return wrong_type(c, g, j, "a string");
    }
    return 0;
}

static int oai_tools(ctx *c, json_t *tools)
{
    if (!json_is_array(tools)) return wrong_type(c, "tools", tools, "an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char f[64];
        snprintf(f, sizeof f, "tools[%zu]", i);
        if (!json_is_object(t)) return wrong_type(c, f, t, "an object");
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return srv_fail(c->err, 400, f, "'%s.function.name' must be a string", f);
        json_t *p = json_object_get(fn, "parameters");
        if (p && !json_is_object(p)) return srv_fail(c->err, 400, f, "'%s.function.parameters' must be an object", f);
    }
    if (json_array_size(tools)) c->r->tools_json = dump(tools);
    return 0;
}

/* "none", "auto", "required" (Anthropic "any"), or one tool by name
 * (OpenAI {"type": "function", "function": {"name"}}, Anthropic {"type":
 * "tool", "name"}).  A forced call is made with a grammar (worker.c). */
static int tool_choice(ctx *c, json_t *j, bool anthropic)
{
    if (!j) return 0;
    const char *v = json_is_string(j) ? json_string_value(j) : NULL, *name = NULL;
    if (json_is_object(j)) {
        v = json_string_value(json_object_get(j, "type"));
        const char *named = anthropic ? "tool" : "function";
        if (v && !strcmp(v, named)) {
            json_t *n = json_object_get(anthropic ? j : json_object_get(j, "function"), "name");
            if (!json_is_string(n))
                return srv_fail(c->err, 400, "tool_choice", "a tool_choice of type '%s' needs the tool's name", named);
            name = json_string_value(n);
        }
    }
    if (!v) return wrong_type(c, "tool_choice", j, anthropic ? "an object with a type" : "\"none\", \"auto\", \"required\" or an object");
    if (!strcmp(v, "none")) c->r->tools_none = true;
    else if (!strcmp(v, anthropic ? "any" : "required")) c->r->tool_required = true;
    else if (name) c->r->tool_name = strdup(name);
    else if (strcmp(v, "auto") != 0)
        return srv_fail(c->err, 400, "tool_choice", "tool_choice '%.40s' is not one of none, auto, %s or a named tool", v,
                        anthropic ? "any" : "required");
    if ((c->r->tool_required || name) && !c->r->tools_json)
        return srv_fail(c->err, 400, "tool_choice", "tool_choice '%.40s' needs tools", name ? name : v);
    return 0;
}

static int kwargs(ctx *c)
{
    json_t *kw = opt(c->root, "chat_template_kwargs");
    if (kw && !json_is_object(kw)) return wrong_type(c, "chat_template_kwargs", kw, "an object");
    json_t *out = kw ? json_deep_copy(kw) : json_object();
    json_t *effort = opt(c->root, "reasoning_effort");
    if (effort && !json_is_string(effort)) return json_decref(out), wrong_type(c, "reasoning_effort", effort, "a string");
    if (effort && !json_object_get(out, "reasoning_effort")) json_object_set(out, "reasoning_effort", effort);
    if (json_object_size(out)) c->r->kwargs_json = dump(out);
    json_decref(out);
    return 0;
}

static int response_format(ctx *c)
{
    json_t *rf = opt(c->root, "response_format");
    if (!rf) return 0;
    if (!json_is_object(rf)) return wrong_type(c, "response_format", rf, "an object");
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type) return srv_fail(c->err, 400, "response_format.type", "'response_format.type' must be a string");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) return c->r->json_object = true, 0;
    if (!strcmp(type, "json_schema")) {
        json_t *s = json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (!json_is_object(s))
            return srv_fail(c->err, 400, "response_format.json_schema.schema", "'response_format.json_schema.schema' "
                                                                              "must be an object");
        c->r->json_schema = dump(s);
        return 0;
    }
    return srv_fail(c->err, 400, "response_format.type", "response_format type '%.40s' is not supported (text, "
                                                         "json_object, json_schema)", type);
}

static int n_choices(ctx *c)
{
    int64_t n = 1;
    if (get_int(c, c->root, "n", INT32_MIN, INT32_MAX, &n, NULL)) return -1;
    if (n != 1) return srv_fail(c->err, 400, "n", "'n' must be 1 (one completion per request), not %lld", (long long)n);
    return 0;
}

static int common_openai(ctx *c)
{
    srv_request *r = c->r;
    if (get_str(c, c->root, "model", "model", &r->model) || get_bool(c, "stream", &r->stream) || sampling(c, 2) ||
        max_tokens(c, "max_tokens") || stop_strings(c, "stop") || n_choices(c) ||
        get_bool(c, "return_tokens", &r->return_tokens) || get_bool(c, "ignore_eos", &r->ignore_eos))
        return -1;
    json_t *so = opt(c->root, "stream_options");
    if (so) {
        if (!json_is_object(so)) return wrong_type(c, "stream_options", so, "an object");
        json_t *u = opt(so, "include_usage");
        if (u && !json_is_boolean(u)) return wrong_type(c, "stream_options.include_usage", u, "a boolean");
        r->include_usage = json_is_true(u);
    }
    return 0;
}

static int parse_chat(ctx *c)
{
    srv_request *r = c->r;
    json_t *msgs = json_object_get(c->root, "messages");
    if (!msgs) return srv_fail(c->err, 400, "messages", "'messages' is missing");
    if (!json_is_array(msgs)) return wrong_type(c, "messages", msgs, "an array");
    if (!json_array_size(msgs)) return srv_fail(c->err, 400, "messages", "'messages' is empty");
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (check_message(c, json_array_get(msgs, i), i)) return -1;
    if (common_openai(c) || max_tokens(c, "max_completion_tokens") || kwargs(c) || response_format(c) ||
        get_bool(c, "logprobs", &r->logprobs) || get_bool(c, "add_generation_prompt", &r->add_generation_prompt))
        return -1;
    int64_t v;
    bool given;
    int32_t most = c->lim && c->lim->max_top_logprobs ? c->lim->max_top_logprobs : 20;
    if (get_int(c, c->root, "top_logprobs", 0, most, &v, &given)) return -1;
    if (given) {
        if (!r->logprobs) return srv_fail(c->err, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int32_t)v;
    }
    json_t *tools = opt(c->root, "tools");
    if (tools && oai_tools(c, tools)) return -1;
    if (tool_choice(c, opt(c->root, "tool_choice"), false)) return -1;
    r->messages_json = dump(msgs);
    return r->messages_json ? 0 : srv_fail(c->err, 500, NULL, "out of memory");
}

static int parse_completions(ctx *c)
{
    srv_request *r = c->r;
    json_t *p = json_object_get(c->root, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
    if (!p) return srv_fail(c->err, 400, "prompt", "'prompt' is missing");
    if (!json_is_string(p)) return wrong_type(c, "prompt", p, "a string (or an array of one string)");
    r->prompt = strdup(json_string_value(p));
    if (common_openai(c) || get_bool(c, "echo", &r->echo)) return -1;
    if (opt(c->root, "suffix")) return srv_fail(c->err, 400, "suffix", "'suffix' is not supported");
    int64_t v;
    bool given;
    if (get_int(c, c->root, "logprobs", 0, 5, &v, &given)) return -1;
    if (given) r->logprobs = true, r->top_logprobs = (int32_t)v;
    if (get_int(c, c->root, "best_of", 1, 1, &v, NULL)) return -1;
    return r->prompt ? 0 : srv_fail(c->err, 500, NULL, "out of memory");
}

/* ---- Anthropic Messages ------------------------------------------------- */

/* Text of a string or of an array of text blocks, or NULL (ERR set). */
static char *anth_text(ctx *c, json_t *j, const char *field)
{
    if (json_is_string(j)) return strdup(json_string_value(j));
    if (!json_is_array(j)) return wrong_type(c, field, j, "a string or an array of text blocks"), NULL;
    size_t i, total = 0;
    json_t *b;
    json_array_foreach(j, i, b) {
        json_t *t = json_object_get(b, "text");
        if (!json_is_object(b) || !json_is_string(t)) {
            char f[160];
            snprintf(f, sizeof f, "%s[%zu]", field, i);
            return srv_fail(c->err, 400, f, "'%s' must be a text block with a string 'text'", f), NULL;
        }
        total += json_string_length(t);
    }
    char *s = malloc(total + 1), *p = s;
    if (!s) return srv_fail(c->err, 500, NULL, "out of memory"), NULL;
    json_array_foreach(j, i, b) {
        json_t *t = json_object_get(b, "text");
        memcpy(p, json_string_value(t), json_string_length(t));
        p += json_string_length(t);
    }
    *p = 0;
    return s;
}

static json_t *text_msg(const char *role, const char *text)
{
    return json_pack("{s:s, s:s}", "role", role, "content", text);
}

/* One Anthropic block of message I into OUT (the OpenAI conversation). */
static int anth_block(ctx *c, json_t *out, json_t *cur, json_t *b, const char *role, const char *f)
{
    if (!json_is_object(b)) return wrong_type(c, f, b, "an object");
    const char *type = json_string_value(json_object_get(b, "type"));
    if (!type) return srv_fail(c->err, 400, f, "'%s.type' must be a string", f);
    bool asst = !strcmp(role, "assistant");
    if (!strcmp(type, "text")) {
        json_t *t = json_object_get(b, "text");
        if (!json_is_string(t)) return srv_fail(c->err, 400, f, "'%s.text' must be a string", f);
        const char *old = json_string_value(json_object_get(cur, "content"));
        size_t ol = old ? strlen(old) : 0, tl = json_string_length(t);
        char *s = malloc(ol + tl + 1);
        if (!s) return srv_fail(c->err, 500, NULL, "out of memory");
        memcpy(s, old ? old : "", ol), memcpy(s + ol, json_string_value(t), tl), s[ol + tl] = 0;
        json_object_set_new(cur, "content", json_stringn(s, ol + tl));
        free(s);
        return 0;
    }
    if (!strcmp(type, "thinking") && asst) {
        json_t *t = json_object_get(b, "thinking");
        if (!json_is_string(t)) return srv_fail(c->err, 400, f, "'%s.thinking' must be a string", f);
        json_object_set(cur, "reasoning_content", t);
        return 0;
    }
    if (!strcmp(type, "redacted_thinking")) return 0;
    if (!strcmp(type, "tool_use") && asst) {
        json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
        if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input))
            return srv_fail(c->err, 400, f, "'%s' needs a string 'id', a string 'name' and an object 'input'", f);
        json_t *calls = json_object_get(cur, "tool_calls");
        if (!calls) json_object_set_new(cur, "tool_calls", calls = json_array());
        json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function",
                                               "name", name, "arguments", input));
        return 0;
    }
    if (!strcmp(type, "tool_result") && !asst) {
        json_t *id = json_object_get(b, "tool_use_id");
        if (!json_is_string(id)) return srv_fail(c->err, 400, f, "'%s.tool_use_id' must be a string", f);
        json_t *content = json_object_get(b, "content");
        char g[200];
        snprintf(g, sizeof g, "%s.content", f);
        char *text = content ? anth_text(c, content, g) : strdup("");
        if (!text) return -1;
        json_t *m = json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id", id, "content", text);
        free(text);
        json_array_append_new(out, m);
        return 0;
    }
    return srv_fail(c->err, 400, f, "content blocks of type '%.40s' are not supported in %s messages", type, role);
}

static int anth_message(ctx *c, json_t *out, json_t *m, size_t i)
{
    char f[64], g[96];
    snprintf(f, sizeof f, "messages[%zu]", i);
    if (!json_is_object(m)) return wrong_type(c, f, m, "an object");
    const char *role = json_string_value(json_object_get(m, "role"));
    snprintf(g, sizeof g, "%s.role", f);
    if (!role) return srv_fail(c->err, 400, g, "'%s' must be a string", g);
    if (strcmp(role, "user") && strcmp(role, "assistant"))
        return srv_fail(c->err, 400, g, "unknown role '%.40s' (user or assistant)", role);
    json_t *content = json_object_get(m, "content");
    snprintf(g, sizeof g, "%s.content", f);
    if (json_is_string(content)) return json_array_append_new(out, text_msg(role, json_string_value(content))), 0;
    if (!json_is_array(content)) return content ? wrong_type(c, g, content, "a string or an array of blocks")
                                                : srv_fail(c->err, 400, g, "'%s' is missing", g);
    /* tool results become "tool" messages before the rest of the turn */
    json_t *cur = json_pack("{s:s}", "role", role);
    size_t k;
    json_t *b;
    json_array_foreach(content, k, b) {
        char h[128];
        snprintf(h, sizeof h, "%s[%zu]", g, k);
        if (anth_block(c, out, cur, b, role, h)) return json_decref(cur), -1;
    }
    bool has_calls = json_object_get(cur, "tool_calls") != NULL;
    if (json_object_get(cur, "content") || has_calls) {
        if (!json_object_get(cur, "content")) json_object_set_new(cur, "content", json_null());
        json_array_append(out, cur);
    }
    json_decref(cur);
    return 0;
}

static int anth_tools(ctx *c, json_t *tools)
{
    if (!json_is_array(tools)) return wrong_type(c, "tools", tools, "an array");
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char f[64];
        snprintf(f, sizeof f, "tools[%zu]", i);
        json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
        json_t *desc = json_object_get(t, "description");
        if (!json_is_object(t) || !json_is_string(name) || (schema && !json_is_object(schema)) ||
            (desc && !json_is_string(desc)))
            return json_decref(out), srv_fail(c->err, 400, f, "'%s' needs a string 'name', an object 'input_schema' "
                                                              "and a string 'description'", f);
        json_t *fn = json_pack("{s:O}", "name", name);
        if (desc) json_object_set(fn, "description", desc);
        json_object_set_new(fn, "parameters", schema ? json_incref(schema) : json_pack("{s:s}", "type", "object"));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    if (json_array_size(out)) c->r->tools_json = dump(out);
    json_decref(out);
    return 0;
}

static int parse_messages(ctx *c)
{
    srv_request *r = c->r;
    int64_t v;
    bool given;
    if (get_int(c, c->root, "max_tokens", 1, INT32_MAX, &v, &given)) return -1;
    if (!given) return srv_fail(c->err, 400, "max_tokens", "'max_tokens' is missing");
    r->n_predict = (int32_t)v;
    if (get_str(c, c->root, "model", "model", &r->model) || get_bool(c, "stream", &r->stream) || sampling(c, 1) ||
        stop_strings(c, "stop_sequences"))
        return -1;
    json_t *msgs = json_object_get(c->root, "messages");
    if (!msgs) return srv_fail(c->err, 400, "messages", "'messages' is missing");
    if (!json_is_array(msgs)) return wrong_type(c, "messages", msgs, "an array");
    if (!json_array_size(msgs)) return srv_fail(c->err, 400, "messages", "'messages' is empty");
    json_t *out = json_array();
    json_t *sys = opt(c->root, "system");
    if (sys) {
        char *s = anth_text(c, sys, "system");
        if (!s) return json_decref(out), -1;
        json_array_append_new(out, text_msg("system", s));
        free(s);
    }
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (anth_message(c, out, json_array_get(msgs, i), i)) return json_decref(out), -1;
    json_t *tools = opt(c->root, "tools");
    if (tools && anth_tools(c, tools)) return json_decref(out), -1;
    if (tool_choice(c, opt(c->root, "tool_choice"), true)) return json_decref(out), -1;
    json_t *th = opt(c->root, "thinking");
    if (th) {
        const char *t = json_is_object(th) ? json_string_value(json_object_get(th, "type")) : NULL;
        if (!t) return json_decref(out), wrong_type(c, "thinking", th, "an object with a type");
        json_t *kw = json_pack("{s:b, s:b}", "enable_thinking", !strcmp(t, "enabled"), "thinking", !strcmp(t, "enabled"));
        r->kwargs_json = dump(kw);
        json_decref(kw);
    }
    r->messages_json = dump(out);
    json_decref(out);
    return r->messages_json ? 0 : srv_fail(c->err, 500, NULL, "out of memory");
}

int srv_request_parse(srv_api api, const char *body, size_t len, const srv_limits *lim, srv_request *r,
                      srv_error *err)
{
    memset(r, 0, sizeof *r);
    memset(err, 0, sizeof *err);
    sluice_sampling d = sluice_sampling_default();
    /* absent fields take llama.cpp's defaults, as `sluice run` does */
    *r = (srv_request){.api = api, .add_generation_prompt = true, .temp = d.temp, .top_p = d.top_p, .min_p = d.min_p,
                       .top_k = d.top_k, .repeat_penalty = 1.0f, .seed = SLUICE_SEED_RANDOM, .n_predict = -1};
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return srv_fail(err, 400, "", "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                        je.column);
    ctx c = {r, err, lim, root};
    int rc;
    if (!json_is_object(root)) rc = srv_fail(err, 400, "", "the body must be a JSON object, not %s", type_name(root));
    else if (api == SRV_API_COMPLETIONS) rc = parse_completions(&c);
    else if (api == SRV_API_MESSAGES) rc = parse_messages(&c);
    else rc = parse_chat(&c);
    json_decref(root);
    if (rc) srv_request_free(r);
    return rc;
}

void srv_request_free(srv_request *r)
{
    free(r->model);
    free(r->messages_json);
    free(r->tools_json);
    free(r->kwargs_json);
    free(r->prompt);
    free(r->json_schema);
    free(r->tool_name);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof *r);
}
