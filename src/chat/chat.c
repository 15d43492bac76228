/* The chat-template API: builds the variables transformers passes to the
 * template (messages, tools, documents, add_generation_prompt, special
 * tokens, extra keyword arguments), renders with the Jinja interpreter and
 * turns its failures into messages that say which template line failed and,
 * for unsupported features, which built-in renderer the model would need. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/jinja_int.h"

#define DEFAULT_MAX_OUTPUT ((size_t)16 << 20)

struct chat_tmpl {
    jinja_tpl *tpl;
    chat_family family;
};

static void add_fallback_hint(sl_err *err, chat_family f)
{
    if (!err) return;
    char hint[200];
    if (f == CHAT_FAMILY_UNKNOWN)
        snprintf(hint, sizeof hint, "; rendering it would need a built-in renderer for this model's chat format");
    else
        snprintf(hint, sizeof hint, "; rendering it would need a built-in %s renderer", chat_family_name(f));
    size_t have = strlen(err->msg);
    snprintf(err->msg + have, sizeof err->msg - have, "%s", hint);
}

int chat_tmpl_parse(chat_tmpl **out, const char *text, size_t len, sl_err *err)
{
    *out = NULL;
    chat_tmpl *t = calloc(1, sizeof *t);
    if (!t) return sl_errf(err, "out of memory");
    t->family = chat_detect_family(text, len);
    int rc = jinja_parse(&t->tpl, text, len, err);
    if (rc) {
        if (rc == JINJA_UNSUPPORTED) add_fallback_hint(err, t->family);
        sl_err_wrap(err, "chat template");
        free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void chat_tmpl_free(chat_tmpl *t)
{
    if (!t) return;
    jinja_free(t->tpl);
    free(t);
}

/* ---- context -------------------------------------------------------------- */

static int set_str(jdict *d, const char *key, const char *val, sl_err *err)
{
    jv k = jv_cstr(key), v = val ? jv_cstr(val) : jv_none();
    if (k.k != JV_STR || (val && v.k != JV_STR) || jdict_set(d, k, v)) return sl_errf(err, "out of memory");
    return 0;
}

static int messages_from_structs(const chat_req *r, jv *out, sl_err *err)
{
    jlist *l = jlist_new(r->n_msgs);
    if (!l) return sl_errf(err, "out of memory");
    *out = (jv){.k = JV_LIST, .l = l};
    for (size_t i = 0; i < r->n_msgs; i++) {
        jdict *m = jdict_new();
        if (!m || jlist_push(l, (jv){.k = JV_DICT, .d = m})) return sl_errf(err, "out of memory");
        if (!r->msgs[i].role) return sl_errf(err, "message %zu has no role", i);
        if (set_str(m, "role", r->msgs[i].role, err) || set_str(m, "content", r->msgs[i].content, err)) return -1;
    }
    return 0;
}

static int parse_json(const char *text, const char *what, json_type type, jv *out, sl_err *err)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j) return sl_errf(err, "%s: invalid JSON at line %d, column %d: %s", what, je.line, je.column, je.text);
    if (json_typeof(j) != type) {
        json_decref(j);
        return sl_errf(err, "%s must be a JSON %s", what, type == JSON_ARRAY ? "array" : "object");
    }
    int rc = jv_from_json(out, j, 0, err);
    json_decref(j);
    if (rc) sl_err_wrap(err, "%s", what);
    return rc;
}

static int merge_extra(jdict *ctx, const char *extra, sl_err *err)
{
    jv e;
    if (parse_json(extra, "extra template variables", JSON_OBJECT, &e, err)) return -1;
    int rc = 0;
    for (size_t i = 0; i < e.d->n && !rc; i++)
        if (jdict_set(ctx, jv_ref(e.d->k[i]), jv_ref(e.d->v[i]))) rc = sl_errf(err, "out of memory");
    jv_drop(e);
    return rc;
}

static int build_context(const chat_req *r, jdict *ctx, sl_err *err)
{
    jv msgs;
    int rc = r->messages_json ? parse_json(r->messages_json, "messages", JSON_ARRAY, &msgs, err)
                              : messages_from_structs(r, &msgs, err);
    if (rc) {
        jv_drop(msgs);
        return -1;
    }
    jv k = jv_cstr("messages");
    if (k.k != JV_STR || jdict_set(ctx, k, msgs)) return sl_errf(err, "out of memory");
    k = jv_cstr("add_generation_prompt");
    if (k.k != JV_STR || jdict_set(ctx, k, jv_bool(r->add_generation_prompt))) return sl_errf(err, "out of memory");
    if (set_str(ctx, "tools", NULL, err) || set_str(ctx, "documents", NULL, err)) return -1;
    if (r->bos_token && set_str(ctx, "bos_token", r->bos_token, err)) return -1;
    if (r->eos_token && set_str(ctx, "eos_token", r->eos_token, err)) return -1;
    return r->extra_json ? merge_extra(ctx, r->extra_json, err) : 0;
}

int chat_tmpl_render(const chat_tmpl *t, const chat_req *r, char **out, size_t *len, sl_err *err)
{
    *out = NULL;
    jdict *ctx = jdict_new();
    if (!ctx) return sl_errf(err, "out of memory");
    int rc = build_context(r, ctx, err);
    if (!rc) {
        struct tm now;
        if (r->now) {
            now = *r->now;
        } else {
            time_t tt = time(NULL);
            localtime_r(&tt, &now);
        }
        jinja_limits lim = {
            .max_output = r->max_output ? r->max_output : DEFAULT_MAX_OUTPUT,
            .max_items = 1 << 20,
            .max_depth = 1000,   /* about 400 KB of stack at -O2 */
            .max_steps = r->max_steps ? r->max_steps : 20u * 1000 * 1000,
        };
        rc = jinja_render(t->tpl, ctx, &now, &lim, out, len, err);
        if (rc == JINJA_UNSUPPORTED) add_fallback_hint(err, t->family);
        if (rc) sl_err_wrap(err, "chat template");
    }
    jv_drop((jv){.k = JV_DICT, .d = ctx});
    return rc ? -1 : 0;
}

int chat_render(const char *tmpl, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                const char *bos_token, const char *eos_token, char **out, sl_err *err)
{
    *out = NULL;
    chat_tmpl *t;
    if (chat_tmpl_parse(&t, tmpl, strlen(tmpl), err)) return -1;
    chat_req r = {.msgs = msgs, .n_msgs = n, .add_generation_prompt = add_generation_prompt,
                  .bos_token = bos_token, .eos_token = eos_token};
    int rc = chat_tmpl_render(t, &r, out, NULL, err);
    chat_tmpl_free(t);
    return rc;
}

int chat_template_for_model(const gguf_file *g, const char *name, const char **text, size_t *len, sl_err *err)
{
    char key[256];
    if (name) snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
    else snprintf(key, sizeof key, "tokenizer.chat_template");
    const gguf_str *s;
    int rc = gguf_get_str(g, key, &s, err);
    if (rc < 0) return -1;
    if (rc == 0)
        return sl_errf(err, "%s: no chat template (key %s is absent); pass a template explicitly or use a "
                            "built-in one such as ChatML", g->path, key);
    *text = s->s;
    if (len) *len = (size_t)s->len;
    return 0;
}

/* ---- families ---------------------------------------------------------- */

static bool has(const char *text, size_t len, const char *marker)
{
    return memmem(text, len, marker, strlen(marker)) != NULL;
}

chat_family chat_detect_family(const char *text, size_t len)
{
    if (has(text, len, "<|channel|>") && has(text, len, "<|message|>")) return CHAT_FAMILY_GPT_OSS;
    if (has(text, len, "<|im_middle|>")) return CHAT_FAMILY_KIMI_K2;
    if (has(text, len, "<|start_header_id|>")) return CHAT_FAMILY_LLAMA3;
    if (has(text, len, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>")) return CHAT_FAMILY_DEEPSEEK3;
    if (has(text, len, "<|im_start|>")) return has(text, len, "<think>") ? CHAT_FAMILY_QWEN3 : CHAT_FAMILY_CHATML;
    return CHAT_FAMILY_UNKNOWN;
}

const char *chat_family_name(chat_family f)
{
    static const char *const names[] = {"unknown", "ChatML", "Qwen3", "DeepSeek-V3", "Llama 3", "gpt-oss", "Kimi-K2"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "unknown";
}

const char *const *chat_stop_strings(chat_family f)
{
    static const char *const none[] = {NULL};
    static const char *const chatml[] = {"<|im_end|>", "<|endoftext|>", NULL};
    static const char *const deepseek[] = {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL};
    static const char *const llama3[] = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", NULL};
    static const char *const gptoss[] = {"<|return|>", "<|call|>", NULL};
    static const char *const kimi[] = {"<|im_end|>", NULL};
    switch (f) {
    case CHAT_FAMILY_CHATML: case CHAT_FAMILY_QWEN3: return chatml;
    case CHAT_FAMILY_DEEPSEEK3: return deepseek;
    case CHAT_FAMILY_LLAMA3: return llama3;
    case CHAT_FAMILY_GPT_OSS: return gptoss;
    case CHAT_FAMILY_KIMI_K2: return kimi;
    default: return none;
    }
}
