/* JSON helpers shared by the worker's response formats. */
#ifndef SLUICE_SERVER_FORMAT_H
#define SLUICE_SERVER_FORMAT_H

#include <jansson.h>
#include <stddef.h>

/* A JSON string of N bytes; bytes that are not UTF-8 become U+FFFD
 * (jansson refuses invalid UTF-8, and a token may be part of a character). */
json_t *fmt_str(const char *s, size_t n);
/* The bytes as a JSON array of integers (OpenAI's logprobs "bytes"). */
json_t *fmt_bytes(const char *s, size_t n);
/* "data: <compact JSON>\n\n" (and "event: NAME\n" before it when NAME);
 * steals J.  NULL when out of memory. */
char *fmt_sse(const char *event, json_t *j, size_t *len);

#endif
