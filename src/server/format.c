/* Error bodies in each API's shape, SSE framing, JSON strings of raw
 * bytes, and the Prometheus text of /metrics. */
#include "server/format.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "util/clock.h"

/* Length of the valid UTF-8 sequence at S (N bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    uint32_t cp = len == 1 ? s[0] : len == 2 ? s[0] & 0x1Fu : len == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t i = 1; i < len; i++) cp = cp << 6 | (s[i] & 0x3Fu);
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

json_t *fmt_str(const char *s, size_t n)
{
    if (!s) return json_string("");
    size_t cap = n * 3 + 1, o = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k) memcpy(b + o, s + i, k), o += k, i += k;
        else memcpy(b + o, "\xef\xbf\xbd", 3), o += 3, i++;
    }
    json_t *j = json_stringn(b, o);
    free(b);
    return j;
}

json_t *fmt_bytes(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

char *fmt_sse(const char *event, json_t *j, size_t *len)
{
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!body) return NULL;
    size_t n = strlen(body) + (event ? strlen(event) : 0) + 32;
    char *out = malloc(n);
    if (out) {
        int k = event ? snprintf(out, n, "event: %s\ndata: %s\n\n", event, body) : snprintf(out, n, "data: %s\n\n", body);
        *len = (size_t)k;
    }
    free(body);
    return out;
}

static const char *oai_type(int status)
{
    switch (status) {
    case 400: case 404: case 405: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 503: return "unavailable_error";
    case 504: return "timeout_error";
    default: return "server_error";
    }
}

static const char *anthropic_type(int status)
{
    switch (status) {
    case 400: case 405: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 504: return "overloaded_error";
    default: return "api_error";
    }
}

char *fmt_error(srv_api api, int status, const char *field, const char *msg)
{
    json_t *j;
    if (api == SRV_API_MESSAGES) {
        j = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", anthropic_type(status), "message",
                      fmt_str(msg, strlen(msg)));
    } else {
        j = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", fmt_str(msg, strlen(msg)), "type",
                      oai_type(status), "param", field && *field ? json_string(field) : json_null(), "code",
                      status == 401 ? json_string("invalid_api_key") : json_null());
    }
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* ---- /metrics ---------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (t->p && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = (t->cap + (size_t)k + 1) * 2;
        char *q = realloc(t->p, cap);
        if (!q) return;
        t->p = q, t->cap = cap;
    }
}

static void metric(text *t, const char *name, const char *type, const char *help, double v)
{
    add(t, "# HELP sluice_%s %s\n# TYPE sluice_%s %s\nsluice_%s %.17g\n", name, help, name, type, name, v);
}

char *srv_metrics_text(srv *s)
{
    text t = {0};
    srv_metrics *m = &s->m;
    pthread_mutex_lock(&m->mu);
    sluice_stats st = m->last;
    pthread_mutex_unlock(&m->mu);
    metric(&t, "requests_total", "counter", "HTTP requests received", (double)atomic_load(&m->requests));
    metric(&t, "request_errors_total", "counter", "requests answered with an error",
           (double)atomic_load(&m->errors));
    metric(&t, "requests_rejected_total", "counter", "requests refused because the queue was full",
           (double)atomic_load(&m->rejected));
    metric(&t, "queue_depth", "gauge", "requests waiting for the model", (double)jq_depth(&s->q));
    metric(&t, "requests_processing", "gauge", "generations running now",
           (double)atomic_load(&s->m.processing));
    metric(&t, "prompt_tokens_total", "counter", "prompt tokens of all generations",
           (double)atomic_load(&m->prompt_tokens));
    metric(&t, "cached_tokens_total", "counter", "prompt tokens reused from the KV cache (prefix reuse)",
           (double)atomic_load(&m->cached_tokens));
    metric(&t, "generated_tokens_total", "counter", "generated tokens", (double)atomic_load(&m->gen_tokens));
    metric(&t, "decode_tokens_per_second", "gauge", "generation speed of the last request", st.decode_tps);
    metric(&t, "prompt_tokens_per_second", "gauge", "prompt speed of the last request", st.prompt_tps);
    metric(&t, "time_to_first_token_seconds", "gauge", "time to first token of the last request", st.ttft_s);
    metric(&t, "expert_bytes_read", "gauge", "expert bytes read from disk by the last request",
           (double)st.expert_bytes_read);
    metric(&t, "expert_cache_hit_rate", "gauge", "expert cache hit rate of the last request", st.cache_hit_rate);
    metric(&t, "prefetch_recall", "gauge", "share of used experts that prediction had read ahead",
           st.prefetch_recall);
    double acc = st.draft_proposed ? (double)st.draft_accepted / (double)st.draft_proposed : 0;
    metric(&t, "draft_acceptance", "gauge", "accepted share of drafted tokens (speculative decoding)", acc);
    metric(&t, "uptime_seconds", "gauge", "seconds since the server started", (double)time(NULL) - s->t_start);
    return t.p;
}
