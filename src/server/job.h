/* Jobs and the one-at-a-time scheduler.  The model (its expert cache, the
 * disk) is shared, so one worker thread runs one job at a time; the others
 * wait in a bounded FIFO queue.  A job's output goes to its connection
 * through a byte buffer (SSE events or a whole body) that the connection
 * thread drains; the connection sets `cancel` when its client goes away,
 * and the worker stops within one token. */
#ifndef SLUICE_SERVER_JOB_H
#define SLUICE_SERVER_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/request.h"

typedef enum {
    JOB_GENERATE,   /* chat / completions / messages */
    JOB_TEMPLATE,   /* /apply-template */
    JOB_TOKENIZE,   /* /tokenize */
    JOB_DETOKENIZE, /* /detokenize */
} job_kind;

typedef enum {
    JOB_QUEUED,
    JOB_STARTED, /* the worker checked the prompt: the status is known */
    JOB_DONE,
} job_phase;

typedef struct srv_job {
    job_kind kind;
    srv_request req;        /* JOB_GENERATE / JOB_TEMPLATE */
    char *body;             /* the raw body (tokenize / detokenize) */
    size_t body_len;
    double t_accept, deadline; /* deadline 0: none */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_phase phase;
    int status;             /* HTTP status, set when STARTED */
    const char *content_type;
    char *out;              /* bytes for the client */
    size_t out_len, out_cap;
    bool oom;
    atomic_bool cancel;     /* the client left, the deadline passed, or shutdown */
    int refs;               /* connection + queue/worker */

    /* figures for the access log and /metrics */
    int64_t prompt_tokens, cached_tokens, gen_tokens;
    struct srv_job *next;
} srv_job;

srv_job *job_new(job_kind kind);
void job_unref(srv_job *j);
/* Appends to the job's output and wakes its connection (worker side). */
void job_write(srv_job *j, const char *data, size_t len);
/* Sets the phase (and status) and wakes the connection. */
void job_set_phase(srv_job *j, job_phase p, int status);

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *head, *tail;
    size_t depth, cap;
    bool closed;
    srv_job *running;
} job_queue;

void jq_init(job_queue *q, size_t cap);
void jq_destroy(job_queue *q);
/* Queues J (taking a reference); -1 if the queue is full, -2 if closed. */
int jq_push(job_queue *q, srv_job *j);
/* The next job (blocks); NULL once closed and empty.  The worker owns the
 * returned reference. */
srv_job *jq_pop(job_queue *q);
void jq_done(job_queue *q, srv_job *j);
/* Stops taking jobs; cancels the queued ones and the running one. */
void jq_close(job_queue *q);
size_t jq_depth(job_queue *q);

#endif
