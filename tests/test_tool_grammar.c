/* Forced tool calls: the grammar for tool_choice "required" / a named tool
 * accepts hand-written calls in the template's syntax whose arguments fit
 * the tool's schema, rejects the rest, and what it accepts parses back as
 * that call (chat_reply_parse); tool_choice in requests. */
#include <stdlib.h>

#include "chat/tool_grammar.h"
#include "decode/grammar.h"
#include "server/request.h"
#include "t.h"

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"enum\":[\"Oslo\",\"Paris\"]}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

static sl_grammar *tool_grammar(chat_syntax syn, const char *only, bool in_think)
{
    char *gbnf = NULL;
    sl_err e;
    sl_grammar *g = NULL;
    if (chat_tool_grammar(syn, TOOLS, only, in_think, &gbnf, &e)) T_CHECK(0, "%s", e.msg);
    else if (grammar_parse(&g, gbnf, strlen(gbnf), &e)) T_CHECK(0, "%s\n%s", e.msg, gbnf);
    free(gbnf);
    return g;
}

static void accepts(sl_grammar *g, const char *s, bool want)
{
    if (g) T_CHECK(grammar_accepts(g, s, strlen(s)) == want, "should %s: %s", want ? "accept" : "reject", s);
}

static void test_hermes(void)
{
    t_begin("tool grammar: Hermes / Qwen3 calls, any tool or one named; reasoning only when the prompt opened it");
    chat_syntax syn = {.tools = TOOLS_HERMES, .think = true};
    const char *call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
    sl_grammar *g = tool_grammar(syn, NULL, false);
    accepts(g, call, true);
    accepts(g, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", true);
    accepts(g, "<think>\nhm\n</think>\n\n<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", false);
    accepts(g, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}</tool_call>", false);
    accepts(g, "<tool_call>{\"name\":\"other\",\"arguments\":{}}</tool_call>", false);
    accepts(g, "<tool_call>{\"arguments\":{},\"name\":\"now\"}</tool_call>", false);
    accepts(g, "Sure! <tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", false);
    grammar_free(g);
    g = tool_grammar(syn, "get_weather", false);
    accepts(g, call, true);
    accepts(g, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", false);
    grammar_free(g);
    g = tool_grammar(syn, NULL, true); /* the prompt opened <think> */
    accepts(g, "plan <b>x</b></think><tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", true);
    accepts(g, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", false);
    grammar_free(g);
    /* what the grammar accepts reads back as the call */
    chat_reply_opts o = {.syn = syn, .tools_json = TOOLS};
    chat_reply rep;
    sl_err e;
    T_CHECK(chat_reply_parse(&o, call, strlen(call), false, &rep, &e) == 0, "%s", e.msg);
    if (!t_cur.failed) {
        T_CHECK(rep.n_calls == 1 && !strcmp(rep.calls[0].name, "get_weather") &&
                    !strcmp(rep.calls[0].arguments, "{\"city\":\"Oslo\"}") && !*rep.content,
                "parsed back: %zu calls", rep.n_calls);
        chat_reply_free(&rep);
    }
    t_end();
}

static void test_other(void)
{
    t_begin("tool grammar: Llama 3.1 JSON calls; unknown tools and other syntaxes refused");
    sl_grammar *g = tool_grammar((chat_syntax){.tools = TOOLS_LLAMA31}, NULL, false);
    accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", true);
    accepts(g, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", false);
    grammar_free(g);
    char *gbnf = NULL;
    sl_err e;
    T_CHECK(chat_tool_grammar((chat_syntax){.tools = TOOLS_HERMES}, TOOLS, "nope", false, &gbnf, &e) != 0 &&
                strstr(e.msg, "'nope', which is not among the tools"), "unknown tool: %s", e.msg);
    T_CHECK(chat_tool_grammar((chat_syntax){.tools = TOOLS_NONE}, TOOLS, NULL, false, &gbnf, &e) != 0 &&
                strstr(e.msg, "calls are JSON"), "no tool syntax: %s", e.msg);
    free(gbnf);
    t_end();
}

static void test_requests(void)
{
    t_begin("tool grammar: tool_choice required / named in OpenAI and Anthropic requests");
    srv_request r;
    srv_error e;
    const char *oa = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                     "\"function\":{\"name\":\"f\"}}],\"tool_choice\":%s}";
    const char *an = "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\","
                     "\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":%s}";
    struct {
        srv_api api;
        const char *fmt, *choice;
        bool required;
        const char *name;
    } cases[] = {
        {SRV_API_CHAT, oa, "\"required\"", true, NULL},
        {SRV_API_CHAT, oa, "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", false, "f"},
        {SRV_API_MESSAGES, an, "{\"type\":\"any\"}", true, NULL},
        {SRV_API_MESSAGES, an, "{\"type\":\"tool\",\"name\":\"f\"}", false, "f"},
    };
    char b[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(b, sizeof b, cases[i].fmt, cases[i].choice);
        if (srv_request_parse(cases[i].api, b, strlen(b), NULL, &r, &e)) {
            T_CHECK(0, "%s: %s %s", cases[i].choice, e.field, e.msg);
            continue;
        }
        T_CHECK(r.tool_required == cases[i].required, "%s: required", cases[i].choice);
        T_CHECK(cases[i].name ? r.tool_name && !strcmp(r.tool_name, cases[i].name) : !r.tool_name, "%s: name",
                cases[i].choice);
        srv_request_free(&r);
    }
    snprintf(b, sizeof b, oa, "{\"type\":\"function\"}");
    T_CHECK(srv_request_parse(SRV_API_CHAT, b, strlen(b), NULL, &r, &e) != 0 && !strcmp(e.field, "tool_choice"),
            "a named choice without a name");
    t_end();
}

int main(void)
{
    test_hermes();
    test_other();
    test_requests();
    return t_done();
}
