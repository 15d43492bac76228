/* OpenAI-style conversations through a model's chat template: the fields
 * clients send (arguments as a JSON string, content null beside tool calls,
 * reasoning_content) adjusted to what each template family reads, so every
 * family renders them as its own training format (see
 * ../shared/vocab/README.md, field_conventions). */
#ifndef SLUICE_CHAT_OPENAI_H
#define SLUICE_CHAT_OPENAI_H

#include <stdbool.h>

#include "chat/chat.h"
#include "chat/reply.h"

typedef struct {
    const char *messages_json; /* array of OpenAI messages */
    const char *tools_json;    /* array of tool definitions, or NULL */
    const char *kwargs_json;   /* object of template variables, or NULL */
    bool add_generation_prompt;
    const char *bos_token, *eos_token;
    const struct tm *now;      /* strftime_now(); NULL: local time now */
} chat_api_req;

/* The messages as template family SYN reads them (JSON text, malloc'd):
 * - tool-call arguments: an object, except for DeepSeek-V3, whose template
 *   pastes a JSON string;
 * - content null beside tool calls: "" where the template needs a string
 *   (Qwen3, gpt-oss), null where any string drops the calls (DeepSeek-V3);
 * - reasoning_content becomes gpt-oss's "thinking". */
int chat_api_messages(chat_syntax syn, const char *messages_json, char **out, sl_err *err);

int chat_api_render(const chat_tmpl *t, chat_syntax syn, const chat_api_req *r, char **out, sl_err *err);

#endif
