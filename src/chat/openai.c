#include "chat/openai.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void fix_message(chat_syntax syn, json_t *m)
{
    json_t *calls = json_object_get(m, "tool_calls");
    bool has_calls = json_array_size(calls) > 0;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *f = json_object_get(c, "function");
        json_t *a = json_object_get(f, "arguments");
        if (syn.tools == TOOLS_DEEPSEEK3) {
            if (json_is_object(a)) {
                char *s = json_dumps(a, 0);
                json_object_set_new(f, "arguments", json_string(s ? s : "{}"));
                free(s);
            }
        } else if (json_is_string(a)) {
            json_error_t je;
            json_t *o = json_loads(json_string_value(a), 0, &je);
            if (json_is_object(o)) json_object_set_new(f, "arguments", o);
            else json_decref(o);
        }
    }
    json_t *content = json_object_get(m, "content");
    if (has_calls) {
        bool empty = !content || json_is_null(content) || (json_is_string(content) && !json_string_length(content));
        if (syn.tools == TOOLS_DEEPSEEK3 && empty) json_object_set_new(m, "content", json_null());
        else if ((syn.tools == TOOLS_HERMES || syn.harmony) && empty) json_object_set_new(m, "content", json_string(""));
    }
    json_t *rc = json_object_get(m, "reasoning_content");
    if (syn.harmony && json_is_string(rc) && !json_object_get(m, "thinking")) json_object_set(m, "thinking", rc);
}

int chat_api_messages(chat_syntax syn, const char *messages_json, char **out, sl_err *err)
{
    json_error_t je;
    json_t *msgs = json_loads(messages_json, 0, &je);
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        return sl_errf(err, "messages: not a JSON array (%s)", je.text);
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if (json_is_object(m)) fix_message(syn, m);
    *out = json_dumps(msgs, JSON_COMPACT);
    json_decref(msgs);
    return *out ? 0 : sl_errf(err, "out of memory");
}

int chat_api_render(const chat_tmpl *t, chat_syntax syn, const chat_api_req *r, char **out, sl_err *err)
{
    *out = NULL;
    char *msgs = NULL;
    if (chat_api_messages(syn, r->messages_json, &msgs, err)) return -1;
    json_error_t je;
    json_t *extra = r->kwargs_json ? json_loads(r->kwargs_json, 0, &je) : json_object();
    if (!json_is_object(extra)) {
        json_decref(extra);
        free(msgs);
        return sl_errf(err, "chat template kwargs: not a JSON object");
    }
    if (r->tools_json) {
        json_t *tools = json_loads(r->tools_json, 0, &je);
        if (!json_is_array(tools)) {
            json_decref(tools), json_decref(extra), free(msgs);
            return sl_errf(err, "tools: not a JSON array");
        }
        json_object_set_new(extra, "tools", tools);
    }
    char *ej = json_object_size(extra) ? json_dumps(extra, JSON_COMPACT) : NULL;
    json_decref(extra);
    chat_req q = {.messages_json = msgs, .add_generation_prompt = r->add_generation_prompt,
                  .bos_token = r->bos_token, .eos_token = r->eos_token, .extra_json = ej,
                  .now = r->now};
    int rc = chat_tmpl_render(t, &q, out, NULL, err);
    free(msgs);
    free(ej);
    return rc;
}
