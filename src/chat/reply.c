/* Reply parsers: each family's tool-call syntax read back exactly as its
 * template writes it (see reply.h). */
#include "chat/reply.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define FW_BAR "\xef\xbd\x9c" /* ｜ (DeepSeek's full-width bar) */
#define LOW_SP "\xe2\x96\x81" /* ▁ */

static const char DS_CALLS_BEGIN[] = "<" FW_BAR "tool" LOW_SP "calls" LOW_SP "begin" FW_BAR ">";
static const char DS_CALLS_END[] = "<" FW_BAR "tool" LOW_SP "calls" LOW_SP "end" FW_BAR ">";
static const char DS_CALL_BEGIN[] = "<" FW_BAR "tool" LOW_SP "call" LOW_SP "begin" FW_BAR ">";
static const char DS_CALL_END[] = "<" FW_BAR "tool" LOW_SP "call" LOW_SP "end" FW_BAR ">";
static const char DS_SEP[] = "<" FW_BAR "tool" LOW_SP "sep" FW_BAR ">";
static const char KIMI_SECTION_BEGIN[] = "<|tool_calls_section_begin|>";
static const char KIMI_SECTION_END[] = "<|tool_calls_section_end|>";
static const char KIMI_CALL_BEGIN[] = "<|tool_call_begin|>";
static const char KIMI_ARG_BEGIN[] = "<|tool_call_argument_begin|>";
static const char KIMI_CALL_END[] = "<|tool_call_end|>";

/* ---- template recognition ---------------------------------------------- */

static bool has(const char *t, size_t n, const char *m) { return memmem(t, n, m, strlen(m)) != NULL; }

chat_syntax chat_syntax_detect(const char *t, size_t n)
{
    chat_syntax s = {TOOLS_NONE, false, false};
    if (has(t, n, "<|channel|>") && has(t, n, "<|message|>")) {
        s.harmony = true; /* its template builds "to=functions.NAME" from parts */
        if (has(t, n, "functions.")) s.tools = TOOLS_GPT_OSS;
        return s;
    }
    s.think = has(t, n, "</think>");
    if (has(t, n, KIMI_CALL_BEGIN)) s.tools = TOOLS_KIMI_K2;
    else if (has(t, n, DS_SEP)) s.tools = has(t, n, "```json") ? TOOLS_DEEPSEEK3 : TOOLS_DEEPSEEK31;
    else if (has(t, n, "<function=") && has(t, n, "<parameter=")) s.tools = TOOLS_QWEN3_CODER;
    else if (has(t, n, "<tool_call>")) s.tools = TOOLS_HERMES;
    else if (has(t, n, "\"parameters\": ") && has(t, n, "ipython")) s.tools = TOOLS_LLAMA31;
    return s;
}

const char *chat_tool_syntax_name(chat_tool_syntax t)
{
    static const char *const names[] = {"none", "hermes", "qwen3-coder", "deepseek-v3", "deepseek-v3.1",
                                        "kimi-k2", "gpt-oss", "llama3.1"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "none";
}

/* ---- small text helpers ------------------------------------------------ */

typedef struct {
    const char *p, *end;
} span;

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const char *find(span s, const char *m)
{
    return memmem(s.p, (size_t)(s.end - s.p), m, strlen(m));
}

static bool starts(span s, const char *m)
{
    size_t n = strlen(m);
    return (size_t)(s.end - s.p) >= n && memcmp(s.p, m, n) == 0;
}

static span skip_ws(span s)
{
    while (s.p < s.end && is_ws(*s.p)) s.p++;
    return s;
}

static span trim(span s)
{
    s = skip_ws(s);
    while (s.end > s.p && is_ws(s.end[-1])) s.end--;
    return s;
}

/* Length of the longest tail of S that is a proper prefix of marker M: text
 * a stream must hold back because the next token may complete M. */
static size_t partial_tail(span s, const char *m)
{
    size_t n = (size_t)(s.end - s.p), mn = strlen(m);
    for (size_t k = mn - 1 < n ? mn - 1 : n; k > 0; k--)
        if (memcmp(s.end - k, m, k) == 0) return k;
    return 0;
}

static span hold_back(span s, const char *const *markers)
{
    size_t most = 0;
    for (; *markers; markers++) {
        size_t k = partial_tail(s, *markers);
        if (k > most) most = k;
    }
    s.end -= most;
    return s;
}

static char *dup_span(span s)
{
    size_t n = (size_t)(s.end - s.p);
    char *r = malloc(n + 1);
    if (r) memcpy(r, s.p, n), r[n] = 0;
    return r;
}

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} buf;

static void buf_add(buf *b, const char *s, size_t n)
{
    if (b->oom || !n) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void buf_span(buf *b, span s) { buf_add(b, s.p, (size_t)(s.end - s.p)); }

static char *buf_take(buf *b)
{
    if (b->oom) return NULL;
    if (!b->p) return calloc(1, 1);
    return b->p;
}

/* ---- the reply being built --------------------------------------------- */

typedef struct {
    const chat_reply_opts *o;
    bool partial;
    buf content, reasoning;
    chat_tool_call *calls;
    size_t n_calls, cap_calls;
    bool in_call, oom;
    json_t *tools;
} parse_ctx;

static int add_call(parse_ctx *c, char *id, char *name, char *args)
{
    if (name && args && c->n_calls == c->cap_calls) {
        size_t cap = c->cap_calls ? c->cap_calls * 2 : 4;
        chat_tool_call *q = realloc(c->calls, cap * sizeof *q);
        if (q) c->calls = q, c->cap_calls = cap;
    }
    if (!name || !args || c->n_calls == c->cap_calls) {
        free(id), free(name), free(args);
        c->oom = true;
        return -1;
    }
    c->calls[c->n_calls++] = (chat_tool_call){id, name, args};
    return 0;
}

/* ARGS as compact JSON text when it is a JSON object, else NULL. */
static char *args_text(const json_t *args)
{
    if (!json_is_object(args)) return NULL;
    return json_dumps(args, JSON_COMPACT);
}

/* The verbatim text S when it is one JSON object, else NULL. */
static char *args_verbatim(span s)
{
    s = trim(s);
    json_error_t je;
    json_t *j = json_loadb(s.p, (size_t)(s.end - s.p), 0, &je);
    bool ok = json_is_object(j);
    json_decref(j);
    return ok ? dup_span(s) : NULL;
}

/* A call parser reads one call at S.p: 1 with *NEXT after it, 0 if the text
 * ends inside it, -1 if it is malformed. */
typedef int (*call_fn)(parse_ctx *c, span s, const char **next);

static int hermes_call(parse_ctx *c, span s, const char **next)
{
    s.p += strlen("<tool_call>");
    const char *close = find(s, "</tool_call>");
    if (!close) return 0;
    json_error_t je;
    span body = trim((span){s.p, close});
    json_t *j = json_loadb(body.p, (size_t)(body.end - body.p), 0, &je);
    json_t *name = json_object_get(j, "name"), *args = json_object_get(j, "arguments");
    if (!json_is_string(name) || !json_is_object(args)) return json_decref(j), -1;
    int rc = add_call(c, NULL, strdup(json_string_value(name)), args_text(args));
    json_decref(j);
    *next = close + strlen("</tool_call>");
    return rc ? -1 : 1;
}

/* The schema type of parameter P of tool NAME, or NULL. */
static const char *param_type(parse_ctx *c, const char *name, const char *p)
{
    size_t i;
    json_t *t;
    json_array_foreach(c->tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!f) f = t;
        const char *fn = json_string_value(json_object_get(f, "name"));
        if (!fn || strcmp(fn, name) != 0) continue;
        json_t *prop = json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), p);
        return json_string_value(json_object_get(prop, "type"));
    }
    return NULL;
}

/* A Qwen3-Coder parameter value: strings are written as they are, numbers
 * through |string and objects / lists as JSON, so a value that reads as
 * JSON is that value unless the schema says it is a string. */
static json_t *coder_value(parse_ctx *c, const char *fn, const char *pname, span v)
{
    const char *type = param_type(c, fn, pname);
    size_t n = (size_t)(v.end - v.p);
    if (!type || strcmp(type, "string") != 0) {
        json_error_t je;
        json_t *j = json_loadb(v.p, n, JSON_DECODE_ANY, &je);
        if (j) return j;
    }
    return json_stringn(v.p, n);
}

static int coder_params(parse_ctx *c, const char *fn, span s, json_t *args, const char **after)
{
    for (;;) {
        s = skip_ws(s);
        if (!starts(s, "<parameter=")) break;
        span hdr = {s.p + strlen("<parameter="), s.end};
        const char *gt = find(hdr, ">");
        if (!gt) return 0;
        char *pname = dup_span((span){hdr.p, gt});
        span v = {gt + 1, s.end};
        const char *close = find(v, "</parameter>");
        if (!close || !pname) return free(pname), close ? -1 : 0;
        v.end = close;
        if (v.p < v.end && *v.p == '\n') v.p++;
        if (v.end > v.p && v.end[-1] == '\n') v.end--;
        json_t *val = coder_value(c, fn, pname, v);
        int bad = !val || json_object_set_new(args, pname, val);
        free(pname);
        if (bad) return -1;
        s.p = close + strlen("</parameter>");
    }
    *after = s.p;
    return 1;
}

static int coder_call(parse_ctx *c, span s, const char **next)
{
    s = skip_ws((span){s.p + strlen("<tool_call>"), s.end});
    if (!starts(s, "<function=")) return (size_t)(s.end - s.p) < strlen("<function=") ? 0 : -1;
    span hdr = {s.p + strlen("<function="), s.end};
    const char *gt = find(hdr, ">");
    if (!gt) return 0;
    char *fn = dup_span((span){hdr.p, gt});
    json_t *args = json_object();
    const char *after;
    int rc = fn && args ? coder_params(c, fn, (span){gt + 1, s.end}, args, &after) : -1;
    if (rc == 1) {
        span rest = skip_ws((span){after, s.end});
        if (!starts(rest, "</function>")) rc = find(rest, "</function>") || find(rest, "<") != rest.p ? -1 : 0;
        else {
            rest = skip_ws((span){rest.p + strlen("</function>"), s.end});
            if (!starts(rest, "</tool_call>")) rc = (size_t)(rest.end - rest.p) < strlen("</tool_call>") ? 0 : -1;
            else *next = rest.p + strlen("</tool_call>");
        }
    }
    if (rc == 1) {
        rc = add_call(c, NULL, fn, args_text(args)) ? -1 : 1;
        fn = NULL;
    }
    free(fn);
    json_decref(args);
    return rc;
}

/* NAME and ARGS between two markers: DeepSeek-V3.1 and Kimi-K2. */
static int marked_call(parse_ctx *c, span s, const char **next, const char *begin, const char *sep,
                       const char *end, bool kimi_id)
{
    s.p += strlen(begin);
    const char *m = find(s, sep), *e = m ? find((span){m, s.end}, end) : NULL;
    if (!m || !e) return 0;
    span name = trim((span){s.p, m});
    char *id = NULL;
    if (kimi_id) {
        /* "functions.NAME:INDEX": the id is the whole, the name between */
        id = dup_span(name);
        if (name.end - name.p > 10 && memcmp(name.p, "functions.", 10) == 0) name.p += 10;
        const char *colon = name.end;
        while (colon > name.p && colon[-1] != ':') colon--;
        if (colon > name.p) name.end = colon - 1;
    }
    char *args = args_verbatim((span){m + strlen(sep), e});
    if (!args || name.p == name.end) return free(id), free(args), -1;
    *next = e + strlen(end);
    return add_call(c, id, dup_span(name), args) ? -1 : 1;
}

static int ds31_call(parse_ctx *c, span s, const char **next)
{
    return marked_call(c, s, next, DS_CALL_BEGIN, DS_SEP, DS_CALL_END, false);
}

static int kimi_call(parse_ctx *c, span s, const char **next)
{
    return marked_call(c, s, next, KIMI_CALL_BEGIN, KIMI_ARG_BEGIN, KIMI_CALL_END, true);
}

/* DeepSeek-V3: TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>. */
static int ds3_call(parse_ctx *c, span s, const char **next)
{
    s.p += strlen(DS_CALL_BEGIN);
    const char *sep = find(s, DS_SEP), *e = sep ? find((span){sep, s.end}, DS_CALL_END) : NULL;
    if (!sep || !e) return 0;
    span body = {sep + strlen(DS_SEP), e};
    const char *fence = find(body, "```json");
    if (!fence) return -1;
    span name = trim((span){body.p, fence});
    span args = {fence + strlen("```json"), e};
    args = trim(args);
    if (args.end - args.p < 3 || memcmp(args.end - 3, "```", 3) != 0) return -1;
    args.end -= 3;
    char *a = args_verbatim(args);
    if (!a || name.p == name.end) return free(a), -1;
    *next = e + strlen(DS_CALL_END);
    return add_call(c, NULL, dup_span(name), a) ? -1 : 1;
}

typedef struct {
    const char *section_begin; /* opens the calls (also the first call's marker when NULL) */
    const char *section_end;   /* optional closing marker */
    const char *call_begin;
    call_fn call;
} call_syntax;

static const call_syntax *syntax_of(chat_tool_syntax t)
{
    static const call_syntax hermes = {NULL, NULL, "<tool_call>", hermes_call};
    static const call_syntax coder = {NULL, NULL, "<tool_call>", coder_call};
    static const call_syntax ds3 = {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, ds3_call};
    static const call_syntax ds31 = {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, ds31_call};
    static const call_syntax kimi = {KIMI_SECTION_BEGIN, KIMI_SECTION_END, KIMI_CALL_BEGIN, kimi_call};
    switch (t) {
    case TOOLS_HERMES: return &hermes;
    case TOOLS_QWEN3_CODER: return &coder;
    case TOOLS_DEEPSEEK3: return &ds3;
    case TOOLS_DEEPSEEK31: return &ds31;
    case TOOLS_KIMI_K2: return &kimi;
    default: return NULL;
    }
}

/* Where the tool calls start in S (the section marker or, as DeepSeek-V3's
 * template writes a later call, a bare call marker), or NULL. */
static const char *calls_start(const call_syntax *cs, span s)
{
    const char *a = cs->section_begin ? find(s, cs->section_begin) : NULL;
    const char *b = find(s, cs->call_begin);
    if (a && (!b || a < b)) return a;
    return b;
}

/* The calls from S.p on; returns 1 when all parsed, 0 if the text ends in
 * one, -1 if one is malformed (the caller keeps the text as content). */
static int parse_calls(parse_ctx *c, const call_syntax *cs, span s)
{
    if (cs->section_begin && starts(s, cs->section_begin)) s.p += strlen(cs->section_begin);
    for (;;) {
        s = skip_ws(s);
        if (s.p == s.end) return c->partial ? 0 : 1;
        if (cs->section_end && starts(s, cs->section_end)) return 1;
        if (!starts(s, cs->call_begin)) {
            if (c->partial && partial_tail(s, cs->call_begin) == (size_t)(s.end - s.p)) return 0;
            if (cs->section_end && c->partial && partial_tail(s, cs->section_end) == (size_t)(s.end - s.p))
                return 0;
            return c->n_calls ? 1 : -1; /* text after the calls: ignored */
        }
        const char *next;
        int rc = cs->call(c, s, &next);
        if (rc <= 0) return rc;
        s.p = next;
    }
}

/* Content (and calls) of the text after any reasoning. */
static void parse_body(parse_ctx *c, span s)
{
    const call_syntax *cs = syntax_of(c->o->syn.tools);
    if (c->o->syn.tools == TOOLS_LLAMA31) {
        span t = trim(s);
        if (t.p < t.end && *t.p == '{') {
            json_error_t je;
            json_t *j = json_loadb(t.p, (size_t)(t.end - t.p), 0, &je);
            json_t *name = json_object_get(j, "name"), *args = json_object_get(j, "parameters");
            if (!args) args = json_object_get(j, "arguments");
            if (json_is_string(name) && json_is_object(args)) {
                add_call(c, NULL, strdup(json_string_value(name)), args_text(args));
                json_decref(j);
                return;
            }
            json_decref(j);
            if (c->partial) {
                c->in_call = true;
                return;
            }
        }
    }
    const char *at = cs ? calls_start(cs, s) : NULL;
    if (!at) {
        if (c->partial && cs) {
            const char *m[] = {cs->call_begin, cs->section_begin, NULL};
            s = hold_back(s, m);
        }
        if (c->partial && cs) /* a newline may precede a call */
            while (s.end > s.p && is_ws(s.end[-1])) s.end--;
        buf_span(&c->content, s);
        return;
    }
    span before = {s.p, at};
    while (before.end > before.p && is_ws(before.end[-1])) before.end--;
    size_t n_before = c->n_calls;
    int rc = parse_calls(c, cs, (span){at, s.end});
    if (rc < 0) {
        /* not a call after all: the text stays content, as the model wrote it */
        for (size_t i = n_before; i < c->n_calls; i++)
            free(c->calls[i].id), free(c->calls[i].name), free(c->calls[i].arguments);
        c->n_calls = n_before;
        buf_span(&c->content, c->partial ? before : s);
        return;
    }
    buf_span(&c->content, before);
    if (rc == 0) c->in_call = true;
}

static void strip_nl(span *s, bool lead, bool tail)
{
    while (lead && s->p < s->end && *s->p == '\n') s->p++;
    while (tail && s->end > s->p && s->end[-1] == '\n') s->end--;
}

/* <think>REASONING</think>CONTENT, as Qwen3's and DeepSeek's templates
 * write it: the reasoning without its surrounding newlines, the content
 * without the newlines that lead it. */
static void parse_think(parse_ctx *c, span s)
{
    span t = skip_ws(s);
    bool open = c->o->starts_in_think;
    if (starts(t, "<think>")) s.p = t.p + strlen("<think>"), open = true;
    else if (c->partial && !open && t.p < t.end && partial_tail(t, "<think>") == (size_t)(t.end - t.p))
        return; /* may be the start of <think> */
    if (!open) {
        parse_body(c, s);
        return;
    }
    const char *close = find(s, "</think>");
    span r = {s.p, close ? close : s.end};
    if (!close && c->partial) {
        const char *m[] = {"</think>", NULL};
        r = hold_back(r, m);
    }
    strip_nl(&r, true, close || !c->partial);
    if (!close && c->partial) strip_nl(&r, false, true);
    buf_span(&c->reasoning, r);
    if (!close) return;
    span rest = {close + strlen("</think>"), s.end};
    strip_nl(&rest, true, false);
    parse_body(c, rest);
}

/* ---- gpt-oss harmony --------------------------------------------------- */

static const char *const HARMONY_ENDS[] = {"<|end|>", "<|call|>", "<|return|>", NULL};

/* The value after KEY in the header H up to a space or '<', or an empty span. */
static span header_field(span h, const char *key)
{
    const char *k = find(h, key);
    if (!k) return (span){h.end, h.end};
    span v = {k + strlen(key), k + strlen(key)};
    while (v.end < h.end && !is_ws(*v.end) && *v.end != '<') v.end++;
    return v;
}

static const char *first_end(span s, const char **which)
{
    const char *best = NULL;
    for (const char *const *m = HARMONY_ENDS; *m; m++) {
        const char *f = find(s, *m);
        if (f && (!best || f < best)) best = f, *which = *m;
    }
    return best;
}

static void harmony_message(parse_ctx *c, span hdr, span body, bool complete)
{
    span ch = header_field(hdr, "<|channel|>");
    span to = header_field(hdr, "to=");
    bool is_call = to.end - to.p > 10 && memcmp(to.p, "functions.", 10) == 0;
    if (is_call) {
        char *args = complete ? args_verbatim(body) : NULL;
        if (!complete) c->in_call = true;
        else if (args) add_call(c, NULL, dup_span((span){to.p + 10, to.end}), args);
        else buf_span(&c->content, body);
        return;
    }
    bool analysis = ch.end - ch.p == 8 && memcmp(ch.p, "analysis", 8) == 0;
    buf_span(analysis ? &c->reasoning : &c->content, body);
}

static void parse_harmony(parse_ctx *c, span s)
{
    if (!find(s, "<|message|>")) {
        /* a header still being written, or a reply without channels (plain
         * content) */
        if (c->partial) {
            size_t n = (size_t)(s.end - s.p);
            for (const char *const *h = (const char *const[]){"<|channel|>", " to=", NULL}; *h; h++)
                if (starts(s, *h) || partial_tail(s, *h) == n) return;
            const char *m[] = {"<|channel|>", "<|message|>", NULL};
            s = hold_back(s, m);
        }
        buf_span(&c->content, s);
        return;
    }
    bool first = true;
    while (s.p < s.end) {
        if (!first) {
            if (!starts(s, "<|start|>")) break;
            s.p += strlen("<|start|>");
        }
        first = false;
        const char *msg = find(s, "<|message|>");
        if (!msg) break; /* a header still being written */
        span hdr = {s.p, msg}, body = {msg + strlen("<|message|>"), s.end};
        const char *which = NULL, *e = first_end(body, &which);
        if (e) body.end = e;
        else if (c->partial) body = hold_back(body, (const char *const[]){"<|end|>", "<|call|>", "<|return|>",
                                                                        "<|start|>", NULL});
        harmony_message(c, hdr, body, e || !c->partial);
        if (!e) break;
        s.p = e + strlen(which);
    }
}

int chat_reply_parse(const chat_reply_opts *o, const char *text, size_t len, bool partial, chat_reply *out,
                     sl_err *err)
{
    memset(out, 0, sizeof *out);
    parse_ctx c = {.o = o, .partial = partial};
    if (o->tools_json) {
        json_error_t je;
        c.tools = json_loads(o->tools_json, 0, &je);
    }
    span s = {text, text + len};
    if (o->syn.harmony) parse_harmony(&c, s);
    else if (o->syn.think) parse_think(&c, s);
    else parse_body(&c, s);
    json_decref(c.tools);
    out->content = buf_take(&c.content);
    out->reasoning = buf_take(&c.reasoning);
    out->calls = c.calls;
    out->n_calls = c.n_calls;
    out->in_call = c.in_call;
    if (!out->content || !out->reasoning || c.oom) {
        chat_reply_free(out);
        return sl_errf(err, "reply parser: out of memory");
    }
    return 0;
}

void chat_reply_free(chat_reply *r)
{
    free(r->content);
    free(r->reasoning);
    for (size_t i = 0; i < r->n_calls; i++) free(r->calls[i].id), free(r->calls[i].name), free(r->calls[i].arguments);
    free(r->calls);
    memset(r, 0, sizeof *r);
}
