/* The worker: the one thread that owns the model.  It takes jobs in order,
 * renders and tokenizes the prompt, checks it fits, generates through
 * sluice_generate_tokens (prefix reuse of the last conversation, or of a
 * context saved under --kv-dir) and writes each API's response: a body, or
 * SSE events as tokens arrive. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "chat/tool_grammar.h"
#include "server/format.h"
#include "server/srv.h"
#include "util/clock.h"

enum { ERR_CAP = 1024 };

void srv_job_error(srv_job *j, int status, const char *field, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status >= 500) fprintf(stderr, "sluice serve: %d: %s\n", status, msg);
    srv_api api = j->kind == JOB_GENERATE || j->kind == JOB_TEMPLATE ? j->req.api : SRV_API_CHAT;
    char *b = fmt_error(api, status, field, msg);
    pthread_mutex_lock(&j->mu);
    free(j->out);
    j->out = b, j->out_len = b ? strlen(b) : 0, j->out_cap = j->out_len + 1;
    j->content_type = "application/json";
    pthread_mutex_unlock(&j->mu);
    job_set_phase(j, JOB_DONE, status);
}

static void job_json(srv_job *j, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!s) return srv_job_error(j, 500, NULL, "out of memory");
    job_write(j, s, strlen(s));
    free(s);
    job_set_phase(j, JOB_DONE, 200);
}

/* ---- the prompt -------------------------------------------------------- */

/* The chat prompt the template renders for R. */
static int render(srv *s, const srv_request *r, bool agp, char **text, char *err)
{
    return sluice_chat_render_json(s->sl, r->messages_json, r->tools_none ? NULL : r->tools_json, r->kwargs_json,
                                   agp, text, err, ERR_CAP);
}

/* Tokens of TEXT as `sluice run` feeds them: special tokens parsed, BOS as
 * the vocabulary says unless a chat template wrote it already. */
static int tokenize(srv *s, const char *text, bool chat, int32_t **ids, size_t *n, char *err)
{
    int32_t *bos = NULL;
    size_t nb = 0;
    if (sluice_tokenize(s->sl, "", 0, 1, 1, &bos, &nb, err, ERR_CAP)) return -1;
    if (sluice_tokenize(s->sl, text, strlen(text), 0, 1, ids, n, err, ERR_CAP)) return sluice_free(bos), -1;
    bool has = nb && *n && (*ids)[0] == bos[0];
    if (nb && !(chat && has)) {
        int32_t *t = malloc((*n + 1) * sizeof *t);
        if (!t) return sluice_free(bos), sluice_free(*ids), snprintf(err, ERR_CAP, "out of memory"), -1;
        t[0] = bos[0];
        memcpy(t + 1, *ids, *n * sizeof *t);
        sluice_free(*ids);
        *ids = t, (*n)++;
    }
    sluice_free(bos);
    return 0;
}

static bool ends_in_think(const char *p)
{
    size_t n = strlen(p);
    while (n && (p[n - 1] == '\n' || p[n - 1] == ' ')) n--;
    return n >= 7 && !memcmp(p + n - 7, "<think>", 7);
}

/* ---- generation state -------------------------------------------------- */

typedef struct {
    srv *s;
    srv_job *j;
    srv_request *r;
    char id[48];
    json_int_t created;
    char *text;                 /* generated text so far */
    size_t len, cap;
    chat_reply_opts ro;
    size_t sent_content, sent_reasoning;
    json_t *lp;                 /* logprob entries not yet sent (stream) or all (body) */
    json_t *cl_tokens, *cl_lps, *cl_top, *cl_off; /* completions' logprobs columns */
    size_t text_at_token;       /* bytes of text when the last token arrived */
    int block;                  /* Anthropic: open content block (0 none, 1 thinking, 2 text) */
    int n_blocks;
    bool timed_out, failed;
} gen_ctx;

static bool is_chat(const gen_ctx *g) { return g->r->api != SRV_API_COMPLETIONS; }

static void sse(gen_ctx *g, const char *event, json_t *j)
{
    size_t n;
    char *b = fmt_sse(event, j, &n);
    if (b) job_write(g->j, b, n);
    free(b);
}

static json_t *oai_chunk(gen_ctx *g, json_t *delta, const char *finish)
{
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", json_null(),
                               "finish_reason", finish ? json_string(finish) : json_null());
    if (g->lp && json_array_size(g->lp)) {
        json_object_set_new(choice, "logprobs", json_pack("{s:O}", "content", g->lp));
        json_array_clear(g->lp);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", g->id, "object", "chat.completion.chunk", "created",
                     g->created, "model", g->s->model_name, "choices", choice);
}

static json_t *cmpl_chunk(gen_ctx *g, const char *text, size_t n, const char *finish)
{
    json_t *choice = json_pack("{s:o, s:i, s:o, s:o}", "text", fmt_str(text, n), "index", 0, "logprobs",
                               json_null(), "finish_reason", finish ? json_string(finish) : json_null());
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", g->id, "object", "text_completion", "created",
                     g->created, "model", g->s->model_name, "choices", choice);
}

static void anth_open(gen_ctx *g, int block)
{
    if (g->block == block) return;
    if (g->block) sse(g, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index",
                                                         g->n_blocks - 1));
    g->block = block;
    if (!block) return;
    json_t *cb = block == 1 ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                            : json_pack("{s:s, s:s}", "type", "text", "text", "");
    sse(g, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index",
                                            g->n_blocks++, "content_block", cb));
}

static void anth_delta(gen_ctx *g, int block, const char *s, size_t n)
{
    anth_open(g, block);
    json_t *d = block == 1 ? json_pack("{s:s, s:o}", "type", "thinking_delta", "thinking", fmt_str(s, n))
                           : json_pack("{s:s, s:o}", "type", "text_delta", "text", fmt_str(s, n));
    sse(g, "content_block_delta", json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index",
                                            g->n_blocks - 1, "delta", d));
}

/* The growth of content / reasoning since the last event, as events. */
static void stream_deltas(gen_ctx *g, const chat_reply *rep)
{
    const char *parts[2] = {rep->reasoning, rep->content};
    size_t *sent[2] = {&g->sent_reasoning, &g->sent_content};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(parts[k]);
        if (n <= *sent[k] || strncmp(parts[k], parts[k], *sent[k]) != 0) continue;
        const char *d = parts[k] + *sent[k];
        size_t dn = n - *sent[k];
        if (g->r->api == SRV_API_MESSAGES) anth_delta(g, k == 0 ? 1 : 2, d, dn);
        else
            sse(g, NULL, oai_chunk(g, json_pack("{s:o}", k == 0 ? "reasoning_content" : "content", fmt_str(d, dn)),
                                   NULL));
        *sent[k] = n;
    }
}

static int on_text(void *ud, const char *t, size_t n)
{
    gen_ctx *g = ud;
    if (g->len + n + 1 > g->cap) {
        size_t cap = (g->len + n + 1) * 2;
        char *p = realloc(g->text, cap);
        if (!p) return g->failed = true, 1;
        g->text = p, g->cap = cap;
    }
    memcpy(g->text + g->len, t, n);
    g->len += n;
    g->text[g->len] = 0;
    if (!g->r->stream) return 0;
    if (!is_chat(g)) {
        sse(g, NULL, cmpl_chunk(g, t, n, NULL));
        return 0;
    }
    chat_reply rep;
    sl_err e;
    if (chat_reply_parse(&g->ro, g->text, g->len, true, &rep, &e) == 0) {
        stream_deltas(g, &rep);
        chat_reply_free(&rep);
    }
    return 0;
}

static json_t *top_entries(gen_ctx *g, const sluice_token *t, bool completions)
{
    json_t *a = completions ? json_object() : json_array();
    for (int32_t i = 0; i < t->n_top; i++) {
        char *s = NULL;
        size_t n = 0;
        char err[128];
        if (sluice_detokenize(g->s->sl, &t->top[i].id, 1, 1, &s, &n, err, sizeof err)) continue;
        if (completions) {
            json_t *k = fmt_str(s, n);
            json_object_set_new(a, json_string_value(k), json_real(t->top[i].logprob));
            json_decref(k);
        } else {
            json_array_append_new(a, json_pack("{s:o, s:f, s:o}", "token", fmt_str(s, n), "logprob",
                                               (double)t->top[i].logprob, "bytes", fmt_bytes(s, n)));
        }
        sluice_free(s);
    }
    return a;
}

static int on_token(void *ud, const sluice_token *t)
{
    gen_ctx *g = ud;
    srv_job *j = g->j;
    if (j->deadline > 0 && sl_now() > j->deadline) g->timed_out = true, atomic_store(&j->cancel, true);
    if (atomic_load(&j->cancel)) return 1;
    if (!g->r->logprobs) return 0;
    if (is_chat(g)) {
        json_array_append_new(g->lp, json_pack("{s:o, s:f, s:o, s:o}", "token", fmt_str(t->piece, t->piece_len),
                                               "logprob", (double)t->logprob, "bytes",
                                               fmt_bytes(t->piece, t->piece_len), "top_logprobs",
                                               top_entries(g, t, false)));
    } else {
        json_array_append_new(g->cl_tokens, fmt_str(t->piece, t->piece_len));
        json_array_append_new(g->cl_lps, json_real(t->logprob));
        json_array_append_new(g->cl_top, top_entries(g, t, true));
        json_array_append_new(g->cl_off, json_integer((json_int_t)g->len));
    }
    return 0;
}

/* ---- the final response ------------------------------------------------ */

static const char *finish_reason(const sluice_result *res, const chat_reply *rep, srv_api api)
{
    bool calls = rep && rep->n_calls;
    if (api == SRV_API_MESSAGES) {
        if (calls) return "tool_use";
        if (res->stop == SLUICE_STOP_STRING) return "stop_sequence";
        if (res->stop == SLUICE_STOP_LIMIT || res->stop == SLUICE_STOP_CTX) return "max_tokens";
        return "end_turn";
    }
    if (calls) return "tool_calls";
    if (res->stop == SLUICE_STOP_LIMIT || res->stop == SLUICE_STOP_CTX) return "length";
    return "stop";
}

/* Which stop string ended the text (Anthropic reports it). */
static const char *matched_stop(gen_ctx *g, const sluice_result *res)
{
    if (res->stop != SLUICE_STOP_STRING) return NULL;
    char *full = NULL;
    size_t n = 0;
    char err[128];
    const char *hit = NULL;
    if (sluice_detokenize(g->s->sl, res->ids, res->n_ids, 0, &full, &n, err, sizeof err)) return NULL;
    for (size_t i = 0; i < g->r->n_stop && !hit; i++) {
        const char *at = n >= res->len ? full + res->len : NULL;
        if (at && !strncmp(at, g->r->stop[i], strlen(g->r->stop[i]))) hit = g->r->stop[i];
    }
    if (!hit && g->r->n_stop) hit = g->r->stop[0];
    sluice_free(full);
    return hit;
}

static char *call_id(gen_ctx *g, size_t i, const chat_tool_call *c)
{
    char b[64];
    if (c->id && g->r->api != SRV_API_MESSAGES) return strdup(c->id);
    snprintf(b, sizeof b, "%s_%s%zu", g->r->api == SRV_API_MESSAGES ? "toolu" : "call", g->id + 9, i);
    return strdup(b);
}

static json_t *usage(gen_ctx *g, const sluice_result *res, size_t n_prompt)
{
    if (g->r->api == SRV_API_MESSAGES)
        return json_pack("{s:I, s:I, s:I, s:i}", "input_tokens", (json_int_t)n_prompt, "output_tokens",
                         (json_int_t)res->n_ids, "cache_read_input_tokens", (json_int_t)res->cached_tokens,
                         "cache_creation_input_tokens", 0);
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)n_prompt, "completion_tokens",
                     (json_int_t)res->n_ids, "total_tokens", (json_int_t)(n_prompt + res->n_ids),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)res->cached_tokens);
}

/* llama-server's "timings", with the figures that say why this engine is
 * fast or slow (the page shows them). */
static json_t *timings(srv *s)
{
    sluice_stats st;
    sluice_get_stats(s->sl, &st);
    pthread_mutex_lock(&s->m.mu);
    s->m.last = st;
    pthread_mutex_unlock(&s->m.mu);
    return json_pack("{s:I, s:f, s:I, s:f, s:f, s:f, s:I, s:f, s:f, s:b, s:f, s:f}", "prompt_n",
                     (json_int_t)st.prompt_tokens, "prompt_ms", st.prompt_s * 1e3, "predicted_n",
                     (json_int_t)st.generated_tokens, "predicted_ms", st.decode_s * 1e3, "predicted_per_second",
                     st.decode_tps, "prompt_per_second", st.prompt_tps, "cache_n", (json_int_t)st.cached_tokens,
                     "ttft_ms", st.ttft_s * 1e3, "expert_gb_read", (double)st.expert_bytes_read / 1e9, "streaming",
                     st.streaming, "expert_cache_hit_rate", st.cache_hit_rate, "prefetch_recall", st.prefetch_recall);
}

static json_t *oai_calls(gen_ctx *g, const chat_reply *rep, bool stream)
{
    json_t *a = json_array();
    for (size_t i = 0; i < rep->n_calls; i++) {
        char *id = call_id(g, i, &rep->calls[i]);
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id ? id : "call", "type", "function", "function",
                              "name", rep->calls[i].name, "arguments", rep->calls[i].arguments);
        if (stream) json_object_set_new(c, "index", json_integer((json_int_t)i));
        json_array_append_new(a, c);
        free(id);
    }
    return a;
}

static void finish_stream(gen_ctx *g, const sluice_result *res, const chat_reply *rep, size_t n_prompt)
{
    srv_request *r = g->r;
    const char *fin = finish_reason(res, rep, r->api);
    if (rep) stream_deltas(g, rep); /* what the partial parses held back */
    if (r->api == SRV_API_MESSAGES) {
        for (size_t i = 0; rep && i < rep->n_calls; i++) {
            anth_open(g, 0);
            char *id = call_id(g, i, &rep->calls[i]);
            int idx = g->n_blocks++;
            sse(g, "content_block_start",
                json_pack("{s:s, s:i, s:{s:s, s:s, s:s, s:{}}}", "type", "content_block_start", "index", idx,
                          "content_block", "type", "tool_use", "id", id ? id : "toolu", "name", rep->calls[i].name,
                          "input"));
            sse(g, "content_block_delta", json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta",
                                                    "index", idx, "delta", "type", "input_json_delta",
                                                    "partial_json", rep->calls[i].arguments));
            sse(g, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", idx));
            free(id);
        }
        anth_open(g, 0);
        const char *ss = matched_stop(g, res);
        sse(g, "message_delta", json_pack("{s:s, s:{s:s, s:o}, s:{s:I}}", "type", "message_delta", "delta",
                                          "stop_reason", fin, "stop_sequence", ss ? json_string(ss) : json_null(),
                                          "usage", "output_tokens", (json_int_t)res->n_ids));
        sse(g, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        return;
    }
    json_t *last;
    if (!is_chat(g)) {
        last = cmpl_chunk(g, "", 0, fin);
    } else {
        if (rep && rep->n_calls) sse(g, NULL, oai_chunk(g, json_pack("{s:o}", "tool_calls", oai_calls(g, rep, true)), NULL));
        last = oai_chunk(g, json_object(), fin);
    }
    json_object_set_new(last, "timings", timings(g->s));
    sse(g, NULL, last);
    if (r->include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", g->id, "object",
                              is_chat(g) ? "chat.completion.chunk" : "text_completion", "created", g->created,
                              "model", g->s->model_name, "choices", "usage", usage(g, res, n_prompt));
        sse(g, NULL, u);
    }
    job_write(g->j, "data: [DONE]\n\n", 14);
}

static json_t *body_response(gen_ctx *g, const sluice_result *res, const chat_reply *rep, size_t n_prompt,
                             const char *echo)
{
    srv_request *r = g->r;
    const char *fin = finish_reason(res, rep, r->api);
    if (r->api == SRV_API_MESSAGES) {
        json_t *content = json_array();
        if (*rep->reasoning)
            json_array_append_new(content, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                                     fmt_str(rep->reasoning, strlen(rep->reasoning)), "signature", ""));
        if (*rep->content || !rep->n_calls)
            json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                     fmt_str(rep->content, strlen(rep->content))));
        for (size_t i = 0; i < rep->n_calls; i++) {
            json_error_t je;
            json_t *input = json_loads(rep->calls[i].arguments, 0, &je);
            char *id = call_id(g, i, &rep->calls[i]);
            json_array_append_new(content, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id",
                                                     id ? id : "toolu", "name", rep->calls[i].name, "input",
                                                     input ? input : json_object()));
            free(id);
        }
        const char *ss = matched_stop(g, res);
        return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", g->id, "type", "message", "role",
                         "assistant", "model", g->s->model_name, "content", content, "stop_reason", fin,
                         "stop_sequence", ss ? json_string(ss) : json_null(), "usage", usage(g, res, n_prompt));
    }
    json_t *choice;
    if (is_chat(g)) {
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content",
                                *rep->content || !rep->n_calls ? fmt_str(rep->content, strlen(rep->content))
                                                               : json_null());
        if (*rep->reasoning) json_object_set_new(msg, "reasoning_content", fmt_str(rep->reasoning, strlen(rep->reasoning)));
        if (rep->n_calls) json_object_set_new(msg, "tool_calls", oai_calls(g, rep, false));
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs",
                           r->logprobs ? json_pack("{s:O}", "content", g->lp) : json_null(), "finish_reason", fin);
    } else {
        size_t el = echo ? strlen(echo) : 0;
        char *t = malloc(el + g->len + 1);
        if (t) memcpy(t, echo ? echo : "", el), memcpy(t + el, g->text ? g->text : "", g->len);
        json_t *lp = r->logprobs ? json_pack("{s:O, s:O, s:O, s:O}", "tokens", g->cl_tokens, "token_logprobs",
                                             g->cl_lps, "top_logprobs", g->cl_top, "text_offset", g->cl_off)
                                 : json_null();
        choice = json_pack("{s:o, s:i, s:o, s:s}", "text", fmt_str(t, t ? el + g->len : 0), "index", 0, "logprobs",
                           lp, "finish_reason", fin);
        free(t);
    }
    if (r->return_tokens) {
        json_t *ids = json_array();
        for (size_t i = 0; i < res->n_ids; i++) json_array_append_new(ids, json_integer(res->ids[i]));
        json_object_set_new(choice, "tokens", ids);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o, s:o}", "id", g->id, "object",
                     is_chat(g) ? "chat.completion" : "text_completion", "created", g->created, "model",
                     g->s->model_name, "choices", choice, "usage", usage(g, res, n_prompt), "timings", timings(g->s));
}

/* ---- one generation ---------------------------------------------------- */

static void stream_start(gen_ctx *g, size_t n_prompt)
{
    if (g->r->api == SRV_API_MESSAGES) {
        json_t *msg = json_pack("{s:s, s:s, s:s, s:[], s:s, s:n, s:n, s:{s:I, s:i}}", "id", g->id, "type",
                                "message", "role", "assistant", "content", "model", g->s->model_name, "stop_reason",
                                "stop_sequence", "usage", "input_tokens", (json_int_t)n_prompt, "output_tokens", 0);
        sse(g, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", msg));
    } else if (is_chat(g)) {
        sse(g, NULL, oai_chunk(g, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL));
    }
}

/* Stop strings: the request's, then (chat) the template's end-of-turn ones. */
static const char **stops_of(srv *s, const srv_request *r, size_t *n)
{
    size_t extra = 0;
    if (r->api != SRV_API_COMPLETIONS)
        while (s->chat_stops && s->chat_stops[extra]) extra++;
    const char **a = calloc(r->n_stop + extra + 1, sizeof *a);
    if (!a) return NULL;
    for (size_t i = 0; i < r->n_stop; i++) a[i] = r->stop[i];
    for (size_t i = 0; i < extra; i++) a[r->n_stop + i] = s->chat_stops[i];
    *n = r->n_stop + extra;
    return a;
}

static sluice_sampling sampling_of(const srv_request *r, const char **stops, size_t n_stops)
{
    sluice_sampling sp = sluice_sampling_default();
    sp.temp = r->temp, sp.top_k = r->top_k, sp.top_p = r->top_p, sp.min_p = r->min_p;
    sp.repeat_penalty = r->repeat_penalty;
    sp.presence_penalty = r->presence_penalty, sp.frequency_penalty = r->frequency_penalty;
    sp.seed = r->seed;
    sp.n_predict = r->n_predict;
    sp.ignore_eos = r->ignore_eos;
    sp.stop = stops, sp.n_stop = n_stops;
    sp.n_probs = r->logprobs ? (r->top_logprobs ? r->top_logprobs : 1) : 0;
    sp.logprobs = r->logprobs; /* the softmax per token is 20% of tinymoe's decode step */
    if (r->json_schema) sp.json_schema = r->json_schema;
    else if (r->json_object) sp.json_schema = "{\"type\": \"object\"}";
    return sp;
}

static size_t common_prefix(srv *s, const int32_t *ids, size_t n)
{
    size_t have = 0, k = 0;
    const int32_t *ctx = sluice_tokens(s->sl, &have);
    while (k < have && k < n && ctx[k] == ids[k]) k++;
    return k;
}

static void do_generate(srv *s, srv_job *j)
{
    srv_request *r = &j->req;
    char err[ERR_CAP];
    char *prompt = NULL;
    bool chat = r->api != SRV_API_COMPLETIONS;
    const char *field = chat ? "messages" : "prompt";
    if (chat && render(s, r, true, &prompt, err)) return srv_job_error(j, 400, field, "%s", err);
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenize(s, chat ? prompt : r->prompt, chat, &ids, &n, err)) {
        sluice_free(prompt);
        return srv_job_error(j, 400, field, "%s", err);
    }
    if (n + 1 > (size_t)s->n_ctx) {
        sluice_free(prompt), sluice_free(ids);
        return srv_job_error(j, 400, field, "the prompt is %zu tokens; the context holds %d (-c)", n, (int)s->n_ctx);
    }
    size_t n_stops = 0;
    const char **stops = stops_of(s, r, &n_stops);
    gen_ctx g = {.s = s, .j = j, .r = r, .created = (json_int_t)time(NULL)};
    snprintf(g.id, sizeof g.id, "%s-%08llx%04llx", r->api == SRV_API_MESSAGES ? "msg_sluice" : chat ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    g.ro = (chat_reply_opts){.syn = s->syn, .starts_in_think = chat && ends_in_think(prompt),
                             .tools_json = r->tools_json};
    g.lp = json_array();
    g.cl_tokens = json_array(), g.cl_lps = json_array(), g.cl_top = json_array(), g.cl_off = json_array();
    sluice_sampling sp = sampling_of(r, stops, n_stops);
    char *tool_gbnf = NULL; /* a forced tool call (tool_choice required / named) */
    const char *field_c = sp.json_schema ? "response_format" : "tool_choice";
    sl_err te;
    int bad = 0;
    if (chat && (r->tool_required || r->tool_name)) {
        if (sp.json_schema) bad = 1, snprintf(err, ERR_CAP, "a forced tool call cannot be combined with response_format");
        else if (chat_tool_grammar(s->syn, r->tools_json, r->tool_name, g.ro.starts_in_think, &tool_gbnf, &te))
            bad = 1, snprintf(err, ERR_CAP, "%s", te.msg);
        sp.grammar = tool_gbnf;
    }
    if (!bad && (sp.json_schema || sp.grammar)) { /* refused now, as a 400, rather than as a failed generation */
        sluice_sampler *smp = NULL;
        bad = sluice_sampler_new(s->sl, &sp, &smp, err, ERR_CAP) != 0;
        sluice_sampler_free(smp);
    }
    if (bad) {
        free(stops), sluice_free(ids), sluice_free(prompt), free(tool_gbnf);
        json_decref(g.lp), json_decref(g.cl_tokens), json_decref(g.cl_lps), json_decref(g.cl_top),
            json_decref(g.cl_off);
        return srv_job_error(j, 400, field_c, "%s: %s", field_c, err);
    }
    if (s->kv) kvdir_restore(s->kv, s->sl, ids, n, common_prefix(s, ids, n));
    j->content_type = r->stream ? "text/event-stream" : "application/json";
    job_set_phase(j, JOB_STARTED, 200);
    if (r->stream) stream_start(&g, n);
    sluice_callbacks cb = {.user = &g, .on_text = on_text, .on_token = on_token};
    sluice_result res = {0};
    atomic_fetch_add(&s->m.processing, 1);
    int rc = stops ? sluice_generate_tokens(s->sl, ids, n, &sp, &cb, &res, err, ERR_CAP)
                   : (snprintf(err, ERR_CAP, "out of memory"), -1);
    atomic_fetch_sub(&s->m.processing, 1);
    /* read now: a shutdown that starts after the generation ended must not
       keep its finished context from being saved */
    bool cut = atomic_load(&j->cancel);
    j->prompt_tokens = (int64_t)n, j->cached_tokens = res.cached_tokens, j->gen_tokens = (int64_t)res.n_ids;
    atomic_fetch_add(&s->m.prompt_tokens, n);
    atomic_fetch_add(&s->m.cached_tokens, (uint64_t)res.cached_tokens);
    atomic_fetch_add(&s->m.gen_tokens, res.n_ids);
    chat_reply rep = {0};
    sl_err pe;
    bool parsed = rc == 0 && chat && chat_reply_parse(&g.ro, g.text ? g.text : "", g.len, false, &rep, &pe) == 0;
    if (rc == 0 && chat && !parsed) rc = -1, snprintf(err, ERR_CAP, "%s", pe.msg);
    if (rc == 0 && g.timed_out && !r->stream) {
        srv_job_error(j, 504, NULL, "the request took longer than --timeout %g s", s->o.timeout_s);
    } else if (rc) {
        if (r->stream) {
            char *b = fmt_error(r->api, 500, NULL, err);
            json_error_t je;
            sse(&g, r->api == SRV_API_MESSAGES ? "error" : NULL, b ? json_loads(b, 0, &je) : json_object());
            free(b);
            job_set_phase(j, JOB_DONE, 0);
        } else {
            srv_job_error(j, 500, NULL, "generation failed: %s", err);
        }
    } else if (r->stream) {
        finish_stream(&g, &res, chat ? &rep : NULL, n);
        job_set_phase(j, JOB_DONE, 0);
    } else {
        const char *echo = !chat && r->echo ? r->prompt : NULL;
        job_json(j, body_response(&g, &res, chat ? &rep : NULL, n, echo));
    }
    if (rc == 0 && s->kv && !cut) kvdir_save(s->kv, s->sl);
    if (parsed) chat_reply_free(&rep);
    sluice_result_free(&res);
    json_decref(g.lp);
    json_decref(g.cl_tokens), json_decref(g.cl_lps), json_decref(g.cl_top), json_decref(g.cl_off);
    free(g.text);
    free(stops);
    free(tool_gbnf);
    sluice_free(ids);
    sluice_free(prompt);
}

/* ---- the other jobs ---------------------------------------------------- */

static void do_template(srv *s, srv_job *j)
{
    char err[ERR_CAP], *text = NULL;
    if (render(s, &j->req, j->req.add_generation_prompt, &text, err))
        return srv_job_error(j, 400, "messages", "%s", err);
    job_json(j, json_pack("{s:o}", "prompt", fmt_str(text, strlen(text))));
    sluice_free(text);
}

static json_t *body_object(srv_job *j)
{
    json_error_t je;
    json_t *b = json_loadb(j->body ? j->body : "", j->body_len, 0, &je);
    if (!json_is_object(b)) {
        json_decref(b);
        srv_job_error(j, 400, "", "the body must be a JSON object");
        return NULL;
    }
    return b;
}

static bool opt_bool(json_t *b, const char *k, bool def, srv_job *j, bool *ok)
{
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v)) return def;
    if (!json_is_boolean(v)) {
        if (*ok) srv_job_error(j, 400, k, "'%s' must be a boolean", k);
        *ok = false;
        return def;
    }
    return json_is_true(v);
}

static void do_tokenize(srv *s, srv_job *j)
{
    json_t *b = body_object(j);
    if (!b) return;
    json_t *content = json_object_get(b, "content");
    bool ok = true;
    bool add = opt_bool(b, "add_special", false, j, &ok), special = opt_bool(b, "parse_special", true, j, &ok);
    bool pieces = opt_bool(b, "with_pieces", false, j, &ok);
    if (ok && !json_is_string(content)) srv_job_error(j, 400, "content", "'content' must be a string"), ok = false;
    int32_t *ids = NULL;
    size_t n = 0;
    char err[ERR_CAP];
    if (ok && sluice_tokenize(s->sl, json_string_value(content), json_string_length(content), add, special, &ids, &n,
                              err, ERR_CAP))
        srv_job_error(j, 400, "content", "%s", err), ok = false;
    if (ok) {
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) {
            if (!pieces) {
                json_array_append_new(a, json_integer(ids[i]));
                continue;
            }
            char *t = NULL;
            size_t tn = 0;
            if (sluice_detokenize(s->sl, &ids[i], 1, 1, &t, &tn, err, ERR_CAP)) t = NULL, tn = 0;
            json_array_append_new(a, json_pack("{s:i, s:o}", "id", (int)ids[i], "piece", fmt_str(t, tn)));
            sluice_free(t);
        }
        job_json(j, json_pack("{s:o}", "tokens", a));
    }
    sluice_free(ids);
    json_decref(b);
}

static void do_detokenize(srv *s, srv_job *j)
{
    json_t *b = body_object(j);
    if (!b) return;
    json_t *toks = json_object_get(b, "tokens");
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    bool ok = json_is_array(toks) && ids;
    if (!ok) srv_job_error(j, 400, "tokens", "'tokens' must be an array of token ids");
    for (size_t i = 0; ok && i < n; i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= sluice_n_vocab(s->sl)) {
            srv_job_error(j, 400, "tokens", "tokens[%zu] is not a token id (0 .. %d)", i, (int)sluice_n_vocab(s->sl) - 1);
            ok = false;
        } else {
            ids[i] = (int32_t)json_integer_value(t);
        }
    }
    char *text = NULL, err[ERR_CAP];
    size_t len = 0;
    if (ok && sluice_detokenize(s->sl, ids, n, 1, &text, &len, err, ERR_CAP))
        srv_job_error(j, 400, "tokens", "%s", err), ok = false;
    if (ok) job_json(j, json_pack("{s:o}", "content", fmt_str(text, len)));
    sluice_free(text);
    free(ids);
    json_decref(b);
}

/* ---- the thread -------------------------------------------------------- */

static int load(srv *s)
{
    char err[ERR_CAP];
    if (sluice_open(&s->sl, &s->o.open, err, ERR_CAP)) {
        snprintf(s->load_error, sizeof s->load_error, "%s", err);
        fprintf(stderr, "sluice serve: %s\n", err);
        return -1;
    }
    snprintf(s->model_name, sizeof s->model_name, "%s", s->o.alias ? s->o.alias : sluice_model_name(s->sl));
    s->n_ctx = sluice_n_ctx(s->sl);
    const char *tmpl = sluice_chat_template(s->sl);
    if (tmpl) {
        s->syn = chat_syntax_detect(tmpl, strlen(tmpl));
        s->chat_stops = chat_stop_strings(chat_detect_family(tmpl, strlen(tmpl)));
    }
    if (s->o.kv_dir) {
        sl_err e;
        if (kvdir_open(&s->kv, s->sl, s->o.kv_dir, s->o.kv_dir_bytes, &e)) {
            snprintf(s->load_error, sizeof s->load_error, "--kv-dir: %s", e.msg);
            fprintf(stderr, "sluice serve: --kv-dir: %s\n", e.msg);
            return -1;
        }
    }
    fprintf(stderr, "sluice serve: model %s loaded (%s, context %d, tool calls: %s)\n", s->model_name,
            sluice_model_arch(s->sl), (int)s->n_ctx, chat_tool_syntax_name(s->syn.tools));
    return 0;
}

void *srv_worker_main(void *arg)
{
    srv *s = arg;
    atomic_store(&s->state, load(s) ? SRV_ERROR : SRV_OK);
    for (srv_job *j; (j = jq_pop(&s->q));) {
        if (atomic_load(&j->cancel)) {
            bool late = j->deadline > 0 && sl_now() > j->deadline;
            if (late) srv_job_error(j, 504, NULL, "the request waited longer than --timeout %g s", s->o.timeout_s);
            else srv_job_error(j, 503, NULL, "cancelled: the client left or the server is shutting down");
        } else if (atomic_load(&s->state) != SRV_OK) {
            srv_job_error(j, 500, NULL, "the model failed to load: %s", s->load_error);
        } else if (j->kind == JOB_GENERATE) {
            do_generate(s, j);
        } else if (j->kind == JOB_TEMPLATE) {
            do_template(s, j);
        } else if (j->kind == JOB_TOKENIZE) {
            do_tokenize(s, j);
        } else {
            do_detokenize(s, j);
        }
        job_set_phase(j, JOB_DONE, 0);
        jq_done(&s->q, j);
        job_unref(j);
    }
    return NULL;
}
