/* A grammar that makes a reply one tool call in the template's syntax
 * (reply.h), for tool_choice "required" or a named tool: the call's JSON is
 * held to the tool's parameter schema (decode/json_schema.h).  The syntaxes
 * whose calls are plain JSON are covered: Hermes / Qwen3
 * (<tool_call>{"name", "arguments"}</tool_call>; a reasoning block only if
 * the prompt opened one, closed within 512 characters) and Llama 3.1
 * ({"name", "parameters"}). */
#ifndef SLUICE_TOOL_GRAMMAR_H
#define SLUICE_TOOL_GRAMMAR_H

#include <stdbool.h>

#include "chat/reply.h"
#include "util/err.h"

/* GBNF in *GBNF (malloc'd) for a reply calling the tool named ONLY, or any
 * tool of TOOLS_JSON (an OpenAI-shape array) when ONLY is NULL.  IN_THINK:
 * the prompt leaves the reply inside a reasoning block. */
int chat_tool_grammar(chat_syntax syn, const char *tools_json, const char *only, bool in_think, char **gbnf,
                      sl_err *err);

#endif
