/* The HTTP side of sluice serve: libmicrohttpd with a thread per connection
 * (a connection thread may wait minutes for its turn on the model), body
 * limits, authentication, routing, errors, streaming, the access log and
 * shutdown.  Generation happens on the worker thread (worker.c). */

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/page.h"
#include "server/srv.h"
#include "util/clock.h"

enum { POLL_MS = 25 };

srv_opts srv_opts_default(void)
{
    return (srv_opts){.open = sluice_options_default(), .host = "127.0.0.1", .port = 8080, .queue = 8,
                      .max_body = 8u << 20, .kv_dir_bytes = 8ull << 30};
}

/* ---- per-connection state ---------------------------------------------- */

typedef struct {
    srv *s;
    char method[8];
    char path[128];
    double t0;
    char *body;
    size_t len, cap;
    bool too_big;
    int status;
    srv_job *job;
    struct MHD_Connection *conn;
    int fd;
    bool logged;
} conn_ctx;

static srv_api api_of_path(const char *path)
{
    if (!strcmp(path, "/v1/messages")) return SRV_API_MESSAGES;
    if (!strcmp(path, "/v1/completions") || !strcmp(path, "/completions")) return SRV_API_COMPLETIONS;
    return SRV_API_CHAT;
}

static enum MHD_Result send_body(conn_ctx *c, int status, const char *type, char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) return free(body), MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 405) {
        bool get = !strcmp(c->path, "/") || !strcmp(c->path, "/health") || !strcmp(c->path, "/metrics") ||
                   !strcmp(c->path, "/v1/models") || !strcmp(c->path, "/models");
        MHD_add_response_header(r, "Allow", get ? "GET" : "POST");
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    c->status = status;
    enum MHD_Result rc = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(conn_ctx *c, int status, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return MHD_NO;
    return send_body(c, status, "application/json", s, strlen(s));
}

static enum MHD_Result send_error(conn_ctx *c, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(conn_ctx *c, int status, const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status >= 500) fprintf(stderr, "sluice serve: %s %s: %d %s\n", c->method, c->path, status, msg);
    atomic_fetch_add(&c->s->m.errors, 1);
    char *b = fmt_error(api_of_path(c->path), status, field, msg);
    if (!b) return MHD_NO;
    return send_body(c, status, "application/json", b, strlen(b));
}

/* ---- authentication ---------------------------------------------------- */

/* Compares without an early exit, so the time taken says nothing about how
 * much of the key was right (nor, beyond its length class, the key's). */
static bool same_secret(const char *given, const char *key)
{
    size_t gl = given ? strlen(given) : 0, kl = strlen(key);
    unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)(key[i] ^ (i < gl ? given[i] : 0));
    return given && diff == 0;
}

static bool authorized(conn_ctx *c)
{
    const char *key = c->s->o.api_key;
    if (!key) return true;
    const char *h = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Authorization");
    const char *given = NULL;
    if (h && !strncasecmp(h, "Bearer ", 7)) given = h + 7;
    if (!given) given = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "x-api-key");
    return same_secret(given, key);
}

/* ---- routes ------------------------------------------------------------ */

typedef struct {
    const char *path;
    const char *method;
    bool auth;
} route;

static const route ROUTES[] = {
    {"/", "GET", false},
    {"/health", "GET", false},
    {"/metrics", "GET", true},
    {"/v1/models", "GET", true},
    {"/models", "GET", true},
    {"/v1/chat/completions", "POST", true},
    {"/chat/completions", "POST", true},
    {"/v1/completions", "POST", true},
    {"/completions", "POST", true},
    {"/v1/messages", "POST", true},
    {"/apply-template", "POST", true},
    {"/tokenize", "POST", true},
    {"/detokenize", "POST", true},
};

static const route *find_route(const char *path)
{
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (!strcmp(ROUTES[i].path, path)) return &ROUTES[i];
    return NULL;
}

static enum MHD_Result health(conn_ctx *c)
{
    int st = atomic_load(&c->s->state);
    if (st == SRV_OK) return send_json(c, 200, json_pack("{s:s}", "status", "ok"));
    if (st == SRV_LOADING) return send_json(c, 503, json_pack("{s:s}", "status", "loading"));
    return send_json(c, 500, json_pack("{s:s, s:s}", "status", "error", "message", c->s->load_error));
}

static enum MHD_Result models(conn_ctx *c)
{
    srv *s = c->s;
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", s->model_name, "object", "model", "created",
                          (json_int_t)s->t_start, "owned_by", "sluice");
    if (s->n_ctx) json_object_set_new(m, "meta", json_pack("{s:i}", "n_ctx", (int)s->n_ctx));
    return send_json(c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

/* ---- waiting for the worker -------------------------------------------- */

/* Whether the client has gone: its side of the socket closed or failed.
 * Bytes of a pipelined next request are not a disconnect. */
static bool client_gone(int fd)
{
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

/* Waits (J->mu held) until PRED holds, the client goes or the deadline
 * passes; a gone client or a passed deadline cancels the job. */
static void wait_job(conn_ctx *c, srv_job *j, bool (*pred)(const srv_job *, size_t), size_t arg)
{
    while (!pred(j, arg)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (pred(j, arg)) break;
        if (!atomic_load(&j->cancel) &&
            (client_gone(c->fd) || (j->deadline > 0 && sl_now() > j->deadline))) {
            atomic_store(&j->cancel, true);
            /* the worker answers a cancelled job promptly: keep waiting */
        }
    }
}

static bool started(const srv_job *j, size_t arg) { return (void)arg, j->phase >= JOB_STARTED; }
static bool done(const srv_job *j, size_t arg) { return (void)arg, j->phase >= JOB_DONE; }
static bool more(const srv_job *j, size_t pos) { return j->out_len > pos || j->phase >= JOB_DONE; }

typedef struct {
    conn_ctx *c;
    srv_job *j;
    size_t pos;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_ctx *sc = cls;
    srv_job *j = sc->j;
    (void)pos;
    pthread_mutex_lock(&j->mu);
    wait_job(sc->c, j, more, sc->pos);
    ssize_t n;
    if (j->out_len > sc->pos) {
        size_t k = j->out_len - sc->pos < max ? j->out_len - sc->pos : max;
        memcpy(buf, j->out + sc->pos, k);
        sc->pos += k;
        n = (ssize_t)k;
    } else {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

static void stream_free(void *cls)
{
    stream_ctx *sc = cls;
    /* the client went away mid-stream (or the stream ended) */
    atomic_store(&sc->j->cancel, true);
    job_unref(sc->j);
    free(sc);
}

static enum MHD_Result run_job(conn_ctx *c, srv_job *j)
{
    srv *s = c->s;
    j->t_accept = c->t0;
    j->deadline = s->o.timeout_s > 0 ? c->t0 + s->o.timeout_s : 0;
    int rc = jq_push(&s->q, j);
    if (rc) {
        job_unref(j);
        atomic_fetch_add(&s->m.rejected, 1);
        if (rc == -1)
            return send_error(c, 429, NULL, "the queue is full (%zu waiting); retry later", s->o.queue);
        return send_error(c, 503, NULL, "the server is shutting down");
    }
    c->job = j;
    pthread_mutex_lock(&j->mu);
    wait_job(c, j, started, 0);
    bool stream = j->status == 200 && j->kind == JOB_GENERATE && j->req.stream;
    if (!stream) wait_job(c, j, done, 0);
    int status = j->status;
    const char *type = j->content_type;
    char *out = NULL;
    size_t len = 0;
    if (!stream) {
        out = j->out, len = j->out_len;
        j->out = NULL, j->out_len = j->out_cap = 0;
    }
    pthread_mutex_unlock(&j->mu);
    if (!stream) {
        if (!out) out = strdup(""), len = 0;
        return send_body(c, status, type, out, len);
    }
    stream_ctx *sc = calloc(1, sizeof *sc);
    if (!sc) return MHD_NO;
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    *sc = (stream_ctx){c, j, 0};
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free);
    if (!r) return stream_free(sc), MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    c->status = 200;
    enum MHD_Result res = MHD_queue_response(c->conn, 200, r);
    MHD_destroy_response(r);
    return res;
}

static enum MHD_Result post(conn_ctx *c)
{
    srv *s = c->s;
    int st = atomic_load(&s->state);
    if (st == SRV_LOADING) return send_error(c, 503, NULL, "the model is loading");
    if (st == SRV_ERROR) return send_error(c, 500, NULL, "the model failed to load: %s", s->load_error);
    job_kind kind = !strcmp(c->path, "/tokenize")     ? JOB_TOKENIZE
                    : !strcmp(c->path, "/detokenize") ? JOB_DETOKENIZE
                    : !strcmp(c->path, "/apply-template") ? JOB_TEMPLATE
                                                          : JOB_GENERATE;
    srv_job *j = job_new(kind);
    if (!j) return send_error(c, 500, NULL, "out of memory");
    if (kind == JOB_TOKENIZE || kind == JOB_DETOKENIZE) {
        j->body = c->body, j->body_len = c->len;
        c->body = NULL;
        return run_job(c, j);
    }
    srv_api api = kind == JOB_TEMPLATE ? SRV_API_APPLY_TEMPLATE : api_of_path(c->path);
    srv_error e;
    if (srv_request_parse(api, c->body ? c->body : "", c->len, NULL, &j->req, &e)) {
        job_unref(j);
        return send_error(c, e.status, e.field, "%s", e.msg);
    }
    return run_job(c, j);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    srv *s = cls;
    conn_ctx *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        *con_cls = c;
        c->s = s;
        c->conn = conn;
        c->t0 = sl_now();
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", url);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        atomic_fetch_add(&s->m.requests, 1);
        const route *r = find_route(url);
        if (!r) return send_error(c, 404, NULL, "no such endpoint: %s %s", method, url);
        if (strcmp(r->method, method) != 0)
            return send_error(c, 405, NULL, "%s %s is not allowed (use %s)", method, url, r->method);
        if (r->auth && !authorized(c)) return send_error(c, 401, NULL, "invalid or missing API key");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        unsigned long long clen = cl ? strtoull(cl, NULL, 10) : 0;
        /* a body up to 64 MiB is read and dropped, so the client sees the
         * 413 instead of a connection closed under its upload */
        if (clen > s->o.max_body && clen > (64u << 20))
            return send_error(c, 413, NULL, "the body is %s bytes; at most %zu are accepted (--max-body)", cl,
                              s->o.max_body);
        c->too_big = clen > s->o.max_body;
        if (!strcmp(method, "GET")) {
            if (!strcmp(url, "/")) {
                char *p = strdup(srv_page_html);
                return p ? send_body(c, 200, "text/html; charset=utf-8", p, strlen(p)) : MHD_NO;
            }
            if (!strcmp(url, "/health")) return health(c);
            if (!strcmp(url, "/metrics")) {
                char *m = srv_metrics_text(s);
                return m ? send_body(c, 200, "text/plain; version=0.0.4", m, strlen(m)) : MHD_NO;
            }
            return models(c);
        }
        return MHD_YES; /* the body follows */
    }
    if (c->status) { /* answered already (413): discard the rest */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (c->too_big || c->len + n > s->o.max_body) {
            c->too_big = true;
            return MHD_YES;
        }
        if (c->len + n + 1 > c->cap) {
            size_t cap = (c->len + n + 1) * 2;
            if (cap > s->o.max_body + 1) cap = s->o.max_body + 1;
            char *b = realloc(c->body, cap);
            if (!b) return MHD_NO;
            c->body = b, c->cap = cap;
        }
        memcpy(c->body + c->len, upload, n);
        c->len += n;
        c->body[c->len] = 0;
        return MHD_YES;
    }
    if (c->too_big)
        return send_error(c, 413, NULL, "the body is larger than %zu bytes (--max-body)", s->o.max_body);
    return post(c);
}

/* ---- access log -------------------------------------------------------- */

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    srv *s = cls;
    (void)conn;
    conn_ctx *c = *con_cls;
    if (!c) return;
    double secs = sl_now() - c->t0;
    int64_t pt = 0, ct = 0, gt = 0;
    if (c->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_store(&c->job->cancel, true);
        pt = c->job->prompt_tokens, ct = c->job->cached_tokens, gt = c->job->gen_tokens;
    }
    const char *how = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "ok"
                      : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? "client-abort"
                      : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? "timeout"
                      : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? "shutdown" : "error";
    if (s->o.log_json) {
        json_t *l = json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:f, s:s}", "method", c->method, "path", c->path,
                              "status", c->status, "prompt_tokens", (json_int_t)pt, "cached_tokens", (json_int_t)ct,
                              "completion_tokens", (json_int_t)gt, "seconds", secs, "end", how);
        char *t = json_dumps(l, JSON_COMPACT);
        if (t) fprintf(stderr, "%s\n", t);
        free(t);
        json_decref(l);
    } else {
        fprintf(stderr, "%s %s %d prompt=%lld cached=%lld completion=%lld %.3fs%s%s\n", c->method, c->path,
                c->status, (long long)pt, (long long)ct, (long long)gt, secs, strcmp(how, "ok") ? " " : "",
                strcmp(how, "ok") ? how : "");
    }
    job_unref(c->job);
    free(c->body);
    free(c);
    *con_cls = NULL;
}

/* ---- start, run, stop -------------------------------------------------- */

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    (void)sig;
    char b = 1;
    ssize_t n = write(sig_pipe[1], &b, 1);
    (void)n;
}

static bool is_loopback(const char *host)
{
    return !strcmp(host, "127.0.0.1") || !strcmp(host, "localhost") || !strcmp(host, "::1") ||
           !strncmp(host, "127.", 4);
}

static void srv_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fprintf(stderr, "sluice serve: http: ");
    vfprintf(stderr, fmt, ap);
}

int srv_run(const srv_opts *o, sl_err *err)
{
    srv *s = calloc(1, sizeof *s);
    if (!s) return sl_errf(err, "out of memory");
    s->o = *o;
    s->t_start = (double)time(NULL);
    atomic_init(&s->state, SRV_LOADING);
    pthread_mutex_init(&s->m.mu, NULL);
    jq_init(&s->q, o->queue);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    const char *host = !strcmp(o->host, "localhost") ? "127.0.0.1" : o->host;
    int rc = -1;
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        sl_errf(err, "--host %s: not an IPv4 address", o->host);
        goto out;
    }
    if (!is_loopback(o->host) && !o->api_key)
        fprintf(stderr, "sluice serve: warning: listening on %s without --api-key: anyone who can reach this "
                        "address can use the model\n", o->host);
    if (pipe(sig_pipe)) {
        sl_errf(err, "pipe: %s", strerror(errno));
        goto out;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        handle, s, MHD_OPTION_EXTERNAL_LOGGER, srv_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_END);
    if (!d) {
        sl_errf(err, "cannot listen on %s:%d: %s", o->host, o->port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : o->port;
    fprintf(stderr, "sluice serve: listening on http://%s:%d/\n", o->host, port);
    if (o->ready_file) {
        FILE *f = fopen(o->ready_file, "w");
        if (f) fprintf(f, "%d\n", port), fclose(f);
    }
    if (pthread_create(&s->worker, NULL, srv_worker_main, s)) {
        MHD_stop_daemon(d);
        sl_errf(err, "cannot start the worker thread");
        goto out;
    }
    char b;
    while (read(sig_pipe[0], &b, 1) < 0 && errno == EINTR) {}
    fprintf(stderr, "sluice serve: shutting down (no new connections; cancelling what runs)\n");
    MHD_quiesce_daemon(d);
    jq_close(&s->q);
    pthread_join(s->worker, NULL);
    MHD_stop_daemon(d);
    fprintf(stderr, "sluice serve: stopped\n");
    rc = 0;
out:
    if (sig_pipe[0] >= 0) close(sig_pipe[0]), close(sig_pipe[1]);
    sig_pipe[0] = sig_pipe[1] = -1;
    sluice_close(s->sl);
    kvdir_close(s->kv);
    jq_destroy(&s->q);
    pthread_mutex_destroy(&s->m.mu);
    free(s);
    return rc;
}
