/* Chat templates: renders the Jinja2 template a GGUF stores under
 * tokenizer.chat_template, the way Hugging Face transformers'
 * apply_chat_template does (byte for byte for the supported templates:
 * Qwen3, DeepSeek-V3, Llama 3, gpt-oss, Kimi-K2, ChatML; see docs/CHAT.md).
 *
 * Templates are untrusted input: rendering is bounded in time, depth and
 * memory, and every failure is an sl_err naming the template line and
 * column.  A template using a Jinja feature the interpreter lacks fails
 * with a message that starts "unsupported template feature" and names the
 * built-in renderer such a model would need. */
#ifndef SLUICE_CHAT_H
#define SLUICE_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "gguf/gguf.h"
#include "util/err.h"

/* One message; CONTENT NULL renders as None (e.g. an assistant turn that
 * only has tool calls, which then need chat_req.messages_json). */
typedef struct {
    const char *role;
    const char *content;
} chat_msg;

typedef struct chat_tmpl chat_tmpl;

/* Parses TEXT (LEN bytes) once for any number of renders.  A parsed
 * template is read-only: concurrent renders from several threads are fine. */
int chat_tmpl_parse(chat_tmpl **out, const char *text, size_t len, sl_err *err);
void chat_tmpl_free(chat_tmpl *t);

typedef struct {
    const chat_msg *msgs;          /* the conversation, or: */
    size_t n_msgs;
    const char *messages_json;     /* a JSON array of message objects (role, content,
                                    * tool_calls, reasoning_content, ...); used instead
                                    * of msgs when not NULL */
    bool add_generation_prompt;
    const char *bos_token;         /* NULL: the variable is left undefined */
    const char *eos_token;
    /* A JSON object of further template variables, e.g. {"tools": [...],
     * "enable_thinking": false, "reasoning_effort": "high"}.  Without it
     * `tools` and `documents` are None, as transformers passes them. */
    const char *extra_json;
    const struct tm *now;          /* what strftime_now() reports; NULL: local time now */
    size_t max_output;             /* 0: 16 MiB */
    uint64_t max_steps;            /* evaluation budget; 0: 20 million (about a second) */
} chat_req;

/* Renders R into *OUT (malloc'd, NUL-terminated; *LEN its length if LEN). */
int chat_tmpl_render(const chat_tmpl *t, const chat_req *r, char **out, size_t *len, sl_err *err);

/* One-shot parse and render of a plain conversation. */
int chat_render(const char *tmpl, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                const char *bos_token, const char *eos_token, char **out, sl_err *err);

/* The model's template: tokenizer.chat_template, or tokenizer.chat_template.NAME
 * when NAME is given (e.g. "tool_use").  *TEXT points into G.  A GGUF
 * without one is an error that says so. */
int chat_template_for_model(const gguf_file *g, const char *name, const char **text, size_t *len, sl_err *err);

/* Model families recognised from the special markers a template writes. */
typedef enum {
    CHAT_FAMILY_UNKNOWN, CHAT_FAMILY_CHATML, CHAT_FAMILY_QWEN3, CHAT_FAMILY_DEEPSEEK3,
    CHAT_FAMILY_LLAMA3, CHAT_FAMILY_GPT_OSS, CHAT_FAMILY_KIMI_K2
} chat_family;

chat_family chat_detect_family(const char *text, size_t len);
const char *chat_family_name(chat_family f);
/* Strings that end an assistant turn in F (NULL-terminated list; empty for
 * CHAT_FAMILY_UNKNOWN). */
const char *const *chat_stop_strings(chat_family f);

#endif
