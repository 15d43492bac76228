#include "server/job.h"

#include <stdlib.h>
#include <string.h>

srv_job *job_new(job_kind kind)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->kind = kind;
    j->refs = 1;
    j->status = 200;
    j->content_type = "application/json";
    atomic_init(&j->cancel, false);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    return j;
}

void job_unref(srv_job *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    srv_request_free(&j->req);
    free(j->body);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_write(srv_job *j, const char *data, size_t len)
{
    pthread_mutex_lock(&j->mu);
    if (j->out_len + len + 1 > j->out_cap && !j->oom) {
        size_t cap = (j->out_len + len + 1) * 2;
        char *p = realloc(j->out, cap);
        if (p) j->out = p, j->out_cap = cap;
        else j->oom = true;
    }
    if (!j->oom) {
        memcpy(j->out + j->out_len, data, len);
        j->out_len += len;
        j->out[j->out_len] = 0;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void job_set_phase(srv_job *j, job_phase p, int status)
{
    pthread_mutex_lock(&j->mu);
    if (p > j->phase) j->phase = p;
    if (status) j->status = status;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void jq_init(job_queue *q, size_t cap)
{
    memset(q, 0, sizeof *q);
    q->cap = cap;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
}

void jq_destroy(job_queue *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

int jq_push(job_queue *q, srv_job *j)
{
    pthread_mutex_lock(&q->mu);
    int rc = q->closed ? -2 : q->depth >= q->cap ? -1 : 0;
    if (rc == 0) {
        pthread_mutex_lock(&j->mu);
        j->refs++;
        pthread_mutex_unlock(&j->mu);
        j->next = NULL;
        if (q->tail) q->tail->next = j;
        else q->head = j;
        q->tail = j;
        q->depth++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

srv_job *jq_pop(job_queue *q)
{
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->closed) pthread_cond_wait(&q->cv, &q->mu);
    srv_job *j = q->head;
    if (j) {
        q->head = j->next;
        if (!q->head) q->tail = NULL;
        q->depth--;
        q->running = j;
    }
    pthread_mutex_unlock(&q->mu);
    return j;
}

void jq_done(job_queue *q, srv_job *j)
{
    pthread_mutex_lock(&q->mu);
    if (q->running == j) q->running = NULL;
    pthread_mutex_unlock(&q->mu);
}

void jq_close(job_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    for (srv_job *j = q->head; j; j = j->next) atomic_store(&j->cancel, true);
    if (q->running) atomic_store(&q->running->cancel, true);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

size_t jq_depth(job_queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t d = q->depth;
    pthread_mutex_unlock(&q->mu);
    return d;
}
