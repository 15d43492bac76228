/* The server's shared state, between the HTTP side (http.c), the worker
 * that owns the model (worker.c) and the response formats (format.c). */
#ifndef SLUICE_SERVER_SRV_H
#define SLUICE_SERVER_SRV_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "chat/reply.h"
#include "server/job.h"
#include "server/kvdir.h"
#include "server/server.h"

typedef enum { SRV_LOADING, SRV_OK, SRV_ERROR } srv_state;

typedef struct {
    atomic_uint_fast64_t requests, errors, rejected, prompt_tokens, cached_tokens, gen_tokens;
    atomic_int processing; /* generations running now (0 or 1: one model, one generation) */
    /* figures of the last generation, for /metrics and the page */
    pthread_mutex_t mu;
    double last_decode_tps, last_prompt_tps, last_ttft_s;
    sluice_stats last;
} srv_metrics;

typedef struct srv {
    srv_opts o;
    sluice *sl;
    atomic_int state;
    char load_error[1100];
    char model_name[256];
    int32_t n_ctx;
    chat_syntax syn;
    const char *const *chat_stops; /* the template's end-of-turn strings */
    bool bos_prepend;          /* tokenized chat prompts get BOS (template did not write it) */
    job_queue q;
    pthread_t worker;
    srv_metrics m;
    kvdir *kv;
    atomic_uint_fast64_t next_id;
    double t_start;
} srv;

void *srv_worker_main(void *arg);

/* Error bodies in each API's own shape. */
char *fmt_error(srv_api api, int status, const char *field, const char *msg);
/* Worker side: answers job J with an error (phase DONE). */
void srv_job_error(srv_job *j, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The /metrics text. */
char *srv_metrics_text(srv *s);

#endif
