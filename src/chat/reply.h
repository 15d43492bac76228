/* Reading a model's reply back into the fields of an API response: the text
 * a chat template renders for an assistant turn (tool calls, reasoning,
 * content) parsed into content / reasoning_content / tool_calls.  Each
 * family's parser is the inverse of its template: an assistant turn the
 * template renders parses back to the same tool calls (tests/test_chat_tools.c
 * checks it against transformers' renderings in ../shared/vocab).
 *
 * The syntax is recognised from the template text, so an overriding
 * --chat-template-file gets the parser of the family it belongs to. */
#ifndef SLUICE_CHAT_REPLY_H
#define SLUICE_CHAT_REPLY_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

typedef enum {
    TOOLS_NONE,        /* the template renders no tool calls */
    TOOLS_HERMES,      /* Qwen3 and Hermes: <tool_call>{"name", "arguments"}</tool_call> */
    TOOLS_QWEN3_CODER, /* <tool_call><function=NAME><parameter=P>VALUE</parameter>... */
    TOOLS_DEEPSEEK3,   /* <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json ARGS``` */
    TOOLS_DEEPSEEK31,  /* <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜> */
    TOOLS_KIMI_K2,     /* <|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>ARGS */
    TOOLS_GPT_OSS,     /* harmony: to=functions.NAME ... <|message|>ARGS<|call|> */
    TOOLS_LLAMA31,     /* the whole reply is {"name": ..., "parameters": ...} */
} chat_tool_syntax;

typedef struct {
    chat_tool_syntax tools;
    bool think;   /* reasoning comes as <think>...</think> */
    bool harmony; /* gpt-oss channels: analysis is reasoning, final is content */
} chat_syntax;

/* What the template TEXT (LEN bytes) renders. */
chat_syntax chat_syntax_detect(const char *text, size_t len);
const char *chat_tool_syntax_name(chat_tool_syntax t);

typedef struct {
    char *id;        /* the call id the syntax carries (Kimi-K2), else NULL */
    char *name;
    char *arguments; /* JSON text of the arguments object (compact) */
} chat_tool_call;

typedef struct {
    char *content;   /* never NULL ("" when there is none) */
    char *reasoning; /* never NULL */
    chat_tool_call *calls;
    size_t n_calls;
    bool in_call;    /* PARTIAL: a tool call has started and is not finished */
} chat_reply;

typedef struct {
    chat_syntax syn;
    /* The prompt ended inside a reasoning block (a generation prompt that
     * opens "<think>"), so the reply starts with reasoning. */
    bool starts_in_think;
    /* A JSON array of the request's tools (OpenAI shape) or NULL: Qwen3-Coder
     * writes parameter values without quotes, and a parameter the schema
     * calls a string stays a string even when it looks like a number. */
    const char *tools_json;
} chat_reply_opts;

/* Parses LEN bytes of reply TEXT.  PARTIAL: TEXT is a prefix of a reply
 * still being generated: a tail that could become a marker is left out of
 * content and reasoning, and unfinished calls are not reported (in_call
 * says one is open).  Content and reasoning of a prefix are prefixes of the
 * full reply's, so a stream can send their growth as deltas.  A call whose
 * arguments are not valid JSON is kept as text in content. */
int chat_reply_parse(const chat_reply_opts *o, const char *text, size_t len, bool partial, chat_reply *out,
                     sl_err *err);
void chat_reply_free(chat_reply *r);

#endif
