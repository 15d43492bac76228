/* The server's request parser (src/server/request.h): OpenAI chat and
 * completions bodies, Anthropic Messages bodies converted to the OpenAI
 * conversation the template renders, every refused field named, and no
 * crash on mutated bodies (a small in-tree fuzz loop; tests/fuzz has the
 * libFuzzer target). */
#include <jansson.h>

#include "server/request.h"
#include "sluice.h"
#include "t.h"

static int parse(srv_api api, const char *body, srv_request *r, srv_error *e)
{
    return srv_request_parse(api, body, strlen(body), NULL, r, e);
}

static void expect_field(srv_api api, const char *body, const char *field)
{
    srv_request r;
    srv_error e;
    int rc = parse(api, body, &r, &e);
    T_CHECK(rc != 0, "accepted: %s", body);
    if (rc == 0) return srv_request_free(&r);
    T_CHECK(e.status == 400 && !strcmp(e.field, field), "%s: status %d field '%s' (want '%s'): %s", body, e.status,
            e.field, field, e.msg);
}

static void chat_fields(void)
{
    t_begin("request: OpenAI chat fields");
    srv_request r;
    srv_error e;
    const char *b = "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
                    "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"}],"
                    "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_completion_tokens\":7,"
                    "\"temperature\":0.5,\"top_p\":0.9,\"seed\":42,\"stop\":\"END\",\"logprobs\":true,\"top_logprobs\":3,"
                    "\"response_format\":{\"type\":\"json_object\"},\"chat_template_kwargs\":{\"enable_thinking\":false},"
                    "\"reasoning_effort\":\"high\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                    "\"user\":\"ignored\"}";
    T_CHECK(parse(SRV_API_CHAT, b, &r, &e) == 0, "%s: %s", e.field, e.msg);
    T_CHECK(r.stream && r.include_usage && r.n_predict == 7 && r.temp == 0.5f && r.seed == 42, "scalars");
    T_CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "END"), "stop");
    T_CHECK(r.logprobs && r.top_logprobs == 3 && r.json_object, "logprobs / json_object");
    T_CHECK(strstr(r.messages_json, "\"role\":\"system\"") && strstr(r.messages_json, "\"content\":\"ab\""),
            "developer -> system, text parts joined: %s", r.messages_json);
    T_CHECK(strstr(r.kwargs_json, "enable_thinking") && strstr(r.kwargs_json, "\"reasoning_effort\":\"high\""),
            "kwargs: %s", r.kwargs_json);
    T_CHECK(r.tools_json && strstr(r.tools_json, "\"name\":\"f\""), "tools");
    srv_request_free(&r);
    T_CHECK(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &e) == 0, "%s", e.msg);
    sluice_sampling d = sluice_sampling_default();
    T_CHECK(r.temp == d.temp && r.top_k == d.top_k && r.n_predict == -1 && r.seed == SLUICE_SEED_RANDOM && !r.stream,
            "defaults are llama.cpp's, as `sluice run` has them");
    srv_request_free(&r);
    t_end();
}

static void refusals(void)
{
    t_begin("request: every refused field is named");
    const char *M = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[512];
    struct {
        const char *extra, *field;
    } cases[] = {
        {"\"temperature\":\"hot\"", "temperature"}, {"\"temperature\":3", "temperature"},
        {"\"top_p\":-0.1", "top_p"}, {"\"top_k\":1.5", "top_k"}, {"\"max_tokens\":-1", "max_tokens"},
        {"\"max_completion_tokens\":\"a\"", "max_completion_tokens"}, {"\"seed\":\"a\"", "seed"},
        {"\"stop\":5", "stop"}, {"\"stop\":[\"a\",2]", "stop[1]"}, {"\"stop\":[\"\"]", "stop[0]"},
        {"\"n\":2", "n"}, {"\"stream\":\"yes\"", "stream"}, {"\"stream_options\":{\"include_usage\":1}", "stream_options.include_usage"},
        {"\"response_format\":{\"type\":\"yaml\"}", "response_format.type"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}", "response_format.json_schema.schema"},
        {"\"top_logprobs\":2", "top_logprobs"}, {"\"logprobs\":true,\"top_logprobs\":50", "top_logprobs"},
        {"\"tools\":{}", "tools"}, {"\"tools\":[{\"function\":{}}]", "tools[0]"}, {"\"tool_choice\":\"required\"", "tool_choice"},
        {"\"chat_template_kwargs\":[]", "chat_template_kwargs"}, {"\"reasoning_effort\":1", "reasoning_effort"},
        {"\"model\":7", "model"}, {"\"presence_penalty\":3", "presence_penalty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(b, sizeof b, "{%s,%s}", M, cases[i].extra);
        expect_field(SRV_API_CHAT, b, cases[i].field);
    }
    expect_field(SRV_API_CHAT, "{}", "messages");
    expect_field(SRV_API_CHAT, "{\"messages\":[]}", "messages");
    expect_field(SRV_API_CHAT, "{\"messages\":{}}", "messages");
    expect_field(SRV_API_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role");
    expect_field(SRV_API_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    expect_field(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content");
    expect_field(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "messages[0].content");
    expect_field(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
                 "messages[0].content[0]");
    expect_field(SRV_API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":"
                               "{\"name\":\"f\",\"arguments\":5}}]}]}", "messages[0].tool_calls[0]");
    expect_field(SRV_API_CHAT, "[1]", "");
    expect_field(SRV_API_CHAT, "{\"messages\":", "");
    expect_field(SRV_API_CHAT, "{\"a\":1,\"a\":2}", "");
    expect_field(SRV_API_COMPLETIONS, "{\"prompt\":5}", "prompt");
    expect_field(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix");
    expect_field(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":9}", "logprobs");
    expect_field(SRV_API_MESSAGES, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens");
    expect_field(SRV_API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
                 "messages[0].role");
    expect_field(SRV_API_MESSAGES, "{\"max_tokens\":5,\"stop_sequences\":\"x\",\"messages\":[]}", "stop_sequences");
    expect_field(SRV_API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
                 "messages[0].content[0]");
    t_end();
}

static void anthropic(void)
{
    t_begin("request: Anthropic blocks become the OpenAI conversation");
    srv_request r;
    srv_error e;
    const char *b = "{\"model\":\"m\",\"max_tokens\":9,\"system\":[{\"type\":\"text\",\"text\":\"be brief\"}],"
                    "\"stop_sequences\":[\"Q:\"],\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
                    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\"},{\"type\":\"text\",\"text\":\"ok\"},"
                    "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"w\",\"input\":{\"c\":\"Bern\"}}]},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":"
                    "[{\"type\":\"text\",\"text\":\"3C\"}]},{\"type\":\"text\",\"text\":\"thanks\"}]}],"
                    "\"tools\":[{\"name\":\"w\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}]}";
    T_CHECK(parse(SRV_API_MESSAGES, b, &r, &e) == 0, "%s: %s", e.field, e.msg);
    json_error_t je;
    json_t *m = json_loads(r.messages_json ? r.messages_json : "", 0, &je);
    T_CHECK(json_array_size(m) == 5, "5 messages: %s", r.messages_json);
    const char *roles[] = {"system", "user", "assistant", "tool", "user"};
    for (size_t i = 0; i < 5 && i < json_array_size(m); i++)
        T_CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, i), "role")), roles[i]), "role %zu", i);
    json_t *a = json_array_get(m, 2);
    T_CHECK(!strcmp(json_string_value(json_object_get(a, "reasoning_content")), "hm") &&
                !strcmp(json_string_value(json_object_get(a, "content")), "ok"), "assistant content / reasoning");
    json_t *f = json_object_get(json_array_get(json_object_get(a, "tool_calls"), 0), "function");
    T_CHECK(!strcmp(json_string_value(json_object_get(f, "name")), "w") &&
                json_is_object(json_object_get(f, "arguments")), "tool_use -> tool_calls");
    json_t *t = json_array_get(m, 3);
    T_CHECK(!strcmp(json_string_value(json_object_get(t, "tool_call_id")), "t1") &&
                !strcmp(json_string_value(json_object_get(t, "content")), "3C"), "tool_result -> tool message");
    T_CHECK(r.tools_json && strstr(r.tools_json, "\"parameters\":{\"type\":\"object\"}"), "tools: %s", r.tools_json);
    T_CHECK(r.n_predict == 9 && r.n_stop == 1, "max_tokens / stop_sequences");
    json_decref(m);
    srv_request_free(&r);
    t_end();
}

/* Bodies cut and bit-flipped at every position: parsed or refused, never a
 * crash (ASan and UBSan watch in make test-asan). */
static void mutations(void)
{
    t_begin("request: cut and mutated bodies never crash");
    const char *seeds[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],\"stop\":[\"a\"],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],\"top_logprobs\":1,\"logprobs\":true}",
        "{\"max_tokens\":3,\"system\":\"s\",\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
        "\"id\":\"i\",\"name\":\"n\",\"input\":{}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"i\"}]}]}",
    };
    srv_api apis[] = {SRV_API_CHAT, SRV_API_MESSAGES};
    unsigned seed = 1;
    for (size_t s = 0; s < 2; s++) {
        size_t n = strlen(seeds[s]);
        char *b = malloc(n + 1);
        for (size_t k = 0; k <= n; k++) {
            for (int rep = 0; rep < 4; rep++) {
                memcpy(b, seeds[s], n + 1);
                seed = seed * 1103515245u + 12345u;
                if (k < n && rep) b[k] = (char)(seed >> 16);
                srv_request r;
                srv_error e;
                size_t len = rep == 0 ? k : n;
                if (srv_request_parse(apis[s], b, len, NULL, &r, &e) == 0) srv_request_free(&r);
                else T_CHECK(e.status == 400 || e.status == 500, "status %d", e.status);
            }
        }
        free(b);
    }
    t_end();
}

int main(void)
{
    chat_fields();
    refusals();
    anthropic();
    mutations();
    return t_done();
}
