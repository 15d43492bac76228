/* sluice serve: an OpenAI- and Anthropic-compatible HTTP server over one
 * model (libmicrohttpd, jansson).  See docs/SERVER.md. */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "util/err.h"

typedef struct {
    sluice_options open;    /* the model and how to run it */
    const char *host;       /* "127.0.0.1" */
    int port;               /* 8080; 0: any free port (printed) */
    const char *api_key;    /* NULL: no authentication */
    const char *alias;      /* the model name clients see (default: the file's general.name) */
    size_t queue;           /* most requests waiting (beyond the running one) */
    size_t max_body;        /* bytes; larger bodies get 413 */
    double timeout_s;       /* per request, from its arrival; 0: none */
    const char *kv_dir;     /* saved contexts, or NULL */
    uint64_t kv_dir_bytes;  /* their total size bound */
    bool log_json;          /* access log lines as JSON */
    const char *ready_file; /* written with the port once listening (tests) */
} srv_opts;

srv_opts srv_opts_default(void);

/* Runs until SIGINT / SIGTERM; 0 after a clean shutdown. */
int srv_run(const srv_opts *o, sl_err *err);

#endif
