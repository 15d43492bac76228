/* Request bodies to generation parameters: the one pure step between the
 * HTTP layer and the model.  srv_request_parse reads an OpenAI chat /
 * completions body or an Anthropic Messages body, checks every field's type
 * and range, and produces the OpenAI-shaped conversation the chat template
 * renders plus the sampling settings.  It touches no model, no file and no
 * global: a fuzz target (tests/fuzz) can call it with any bytes.
 *
 * A refused request gets an srv_error naming the field (JSON path such as
 * "messages[2].role") and why, with the HTTP status to answer. */
#ifndef SLUICE_SERVER_REQUEST_H
#define SLUICE_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    SRV_API_CHAT,           /* POST /v1/chat/completions */
    SRV_API_COMPLETIONS,    /* POST /v1/completions */
    SRV_API_MESSAGES,       /* POST /v1/messages (Anthropic) */
    SRV_API_APPLY_TEMPLATE, /* POST /apply-template: a chat body, only rendered */
} srv_api;

typedef struct {
    int status;      /* HTTP status to answer (400, ...) */
    char field[96];  /* the offending field, "" when none */
    char msg[320];   /* what is wrong with it */
} srv_error;

typedef struct {
    srv_api api;
    char *model;          /* as asked (NULL: not given) */
    bool stream;
    bool include_usage;   /* stream_options.include_usage */
    /* chat: the conversation in OpenAI shape (Anthropic blocks converted:
     * tool_use -> tool_calls, tool_result -> role "tool", thinking ->
     * reasoning_content); text content parts joined into strings */
    char *messages_json;
    char *tools_json;     /* OpenAI-shape tool array, or NULL */
    char *kwargs_json;    /* chat_template_kwargs (plus reasoning_effort), or NULL */
    bool tools_none;      /* tool_choice "none": tools are not rendered */
    bool tool_required;   /* tool_choice "required" (Anthropic "any"): the reply is a call */
    char *tool_name;      /* tool_choice naming one tool: the reply calls it; or NULL */
    char *prompt;         /* completions: the prompt text */
    bool echo;            /* completions: the prompt is part of the text */
    bool add_generation_prompt; /* /apply-template (default true) */
    /* sampling */
    float temp, top_p, min_p;
    int32_t top_k;
    float presence_penalty, frequency_penalty, repeat_penalty;
    uint32_t seed;        /* SLUICE_SEED_RANDOM when not given */
    int32_t n_predict;    /* max_tokens / max_completion_tokens; -1 when not given */
    char **stop;          /* stop / stop_sequences */
    size_t n_stop;
    bool json_object;     /* response_format {"type": "json_object"} */
    char *json_schema;    /* response_format json_schema.schema (JSON text), or NULL */
    bool logprobs;
    int32_t top_logprobs;
    bool return_tokens;   /* llama-server's: the generated token ids in the response */
    bool ignore_eos;      /* llama-server's: generate through end-of-generation tokens */
} srv_request;

typedef struct {
    size_t max_stop;      /* most stop strings (0: 16) */
    int32_t max_top_logprobs; /* 0: 20 */
} srv_limits;

/* Parses LEN bytes of BODY as API's request.  0 on success (free with
 * srv_request_free), -1 with ERR filled (status 400, the field and why). */
int srv_request_parse(srv_api api, const char *body, size_t len, const srv_limits *lim, srv_request *out,
                      srv_error *err);
void srv_request_free(srv_request *r);

/* Fills ERR and returns -1 (for the server's other checks). */
int srv_fail(srv_error *err, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
