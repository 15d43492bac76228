/* Tool-call grammars (tool_grammar.h): the calls as one JSON Schema (anyOf
 * over the tools, each {"name": const, <args key>: parameters}), converted
 * under the rule "call", wrapped in the syntax's markers. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/tool_grammar.h"
#include "decode/json_schema.h"

/* The schema of one call of tool FN (an OpenAI "function" object). */
static json_t *call_schema(const json_t *fn, const char *args_key)
{
    json_t *params = json_object_get(fn, "parameters");
    json_t *props = json_object(), *o = json_object();
    json_object_set_new(props, "name", json_pack("{s:O}", "const", json_object_get(fn, "name")));
    json_object_set_new(props, args_key, params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object"));
    json_object_set_new(o, "type", json_string("object"));
    json_object_set_new(o, "properties", props);
    json_object_set_new(o, "required", json_pack("[s,s]", "name", args_key));
    json_object_set_new(o, "additionalProperties", json_false());
    return o;
}

/* anyOf over the tools (or the one named ONLY) as JSON text. */
static char *calls_schema(const char *tools_json, const char *only, const char *args_key, sl_err *err)
{
    json_error_t je;
    json_t *tools = json_loads(tools_json ? tools_json : "[]", 0, &je), *any = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (name && (!only || !strcmp(only, name))) json_array_append_new(any, call_schema(fn, args_key));
    }
    char *out = NULL;
    if (!json_array_size(any)) {
        if (only) sl_errf(err, "tool_choice names '%s', which is not among the tools", only);
        else sl_errf(err, "tool_choice 'required' needs tools");
    } else {
        json_t *s = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0)) : json_pack("{s:O}", "anyOf", any);
        out = json_dumps(s, JSON_COMPACT);
        json_decref(s);
        if (!out) sl_errf(err, "out of memory");
    }
    json_decref(any);
    json_decref(tools);
    return out;
}

int chat_tool_grammar(chat_syntax syn, const char *tools_json, const char *only, bool in_think, char **gbnf,
                      sl_err *err)
{
    *gbnf = NULL;
    bool hermes = syn.tools == TOOLS_HERMES;
    if (!hermes && syn.tools != TOOLS_LLAMA31)
        return sl_errf(err, "a forced tool call needs a template whose calls are JSON (Hermes / Qwen3 or Llama 3.1); "
                            "this one's syntax is %s", chat_tool_syntax_name(syn.tools));
    char *schema = calls_schema(tools_json, only, hermes ? "arguments" : "parameters", err);
    if (!schema) return -1;
    char *rules = NULL;
    int rc = json_schema_to_gbnf_as(schema, strlen(schema), "call", &rules, err);
    free(schema);
    if (rc) return -1;
    /* No reasoning block is offered (a weak model would reason until the
     * token limit instead of calling); one the prompt already opened is
     * closed within 512 characters. */
    const char *think = syn.think && in_think ? "think-text \"</think>\" [ \\n]{0,4} " : "";
    size_t cap = strlen(rules) + 512;
    char *out = malloc(cap);
    if (!out) return free(rules), sl_errf(err, "out of memory");
    snprintf(out, cap, "%sroot ::= %s%s\nthink-text ::= ( [^<] | \"<\" [^/] | \"</\" [^t] ){0,512}\n", rules, think,
             hermes ? "\"<tool_call>\" [ \\n]{0,2} call [ \\n]{0,2} \"</tool_call>\"" : "call");
    free(rules);
    *gbnf = out;
    return 0;
}
