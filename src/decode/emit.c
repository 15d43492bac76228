#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/emit.h"

const char *gen_stop_name(gen_stop s)
{
    static const char *const names[] = {"running", "eog", "limit", "stop", "ctx", "caller"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

void gen_result_free(gen_result *r)
{
    free(r->ids);
    free(r->text);
    memset(r, 0, sizeof *r);
}

/* Grows *buf (elements of SIZE bytes) to hold at least NEED. */
static int grow(void **buf, size_t *cap, size_t need, size_t size, sl_err *err)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *p = realloc(*buf, n * size);
    if (!p) return sl_errf(err, "generate: out of memory (%zu bytes)", n * size);
    *buf = p;
    *cap = n;
    return 0;
}

void emitter_init(gen_emitter *e, const sl_vocab *v, const gen_opts *o, const gen_callbacks *cb, gen_result *res)
{
    memset(e, 0, sizeof *e);
    memset(res, 0, sizeof *res);
    e->vocab = v;
    e->opts = *o;
    if (cb) e->cb = *cb;
    e->res = res;
}

void emitter_free(gen_emitter *e)
{
    free(e->hold);
    e->hold = NULL;
    e->n_hold = e->hold_cap = 0;
}

/* Moves the first N held bytes to the output. */
static int show(gen_emitter *e, size_t n, sl_err *err)
{
    gen_result *r = e->res;
    if (n == 0) return 0;
    if (grow((void **)&r->text, &r->text_cap, r->len + n + 1, 1, err)) return -1;
    memcpy(r->text + r->len, e->hold, n);
    r->len += n;
    r->text[r->len] = 0;
    memmove(e->hold, e->hold + n, e->n_hold - n);
    e->n_hold -= n;
    if (e->cb.on_text && e->cb.on_text(e->cb.ud, r->text + r->len - n, n)) r->stop = GEN_STOP_CALLER;
    return 0;
}

/* Earliest position where a whole stop string occurs in the held text, or -1. */
static ptrdiff_t find_stop(const gen_emitter *e)
{
    ptrdiff_t best = -1;
    for (size_t i = 0; i < e->opts.n_stops; i++) {
        const char *s = e->opts.stops[i];
        size_t n = strlen(s);
        if (n == 0 || n > e->n_hold) continue;
        const char *hit = memmem(e->hold, e->n_hold, s, n);
        if (hit && (best < 0 || hit - e->hold < best)) best = hit - e->hold;
    }
    return best;
}

/* Length of the longest held tail that is a proper prefix of a stop string:
 * those bytes must wait, the rest can be shown. */
static size_t stop_prefix_tail(const gen_emitter *e)
{
    size_t best = 0;
    for (size_t i = 0; i < e->opts.n_stops; i++) {
        const char *s = e->opts.stops[i];
        size_t n = strlen(s);
        for (size_t k = n > e->n_hold ? e->n_hold : n - (n > 0); k > best; k--)
            if (!memcmp(e->hold + e->n_hold - k, s, k)) {
                best = k;
                break;
            }
    }
    return best;
}

static int hold_append(gen_emitter *e, const char *s, size_t n, sl_err *err)
{
    if (grow((void **)&e->hold, &e->hold_cap, e->n_hold + n, 1, err)) return -1;
    memcpy(e->hold + e->n_hold, s, n);
    e->n_hold += n;
    return 0;
}

/* Appends bytes to the held text and shows what is safe. */
static int hold_text(gen_emitter *e, const char *s, size_t n, sl_err *err)
{
    if (n && hold_append(e, s, n, err)) return -1;
    ptrdiff_t at = find_stop(e);
    if (at >= 0) {
        if (show(e, (size_t)at, err)) return -1;
        e->n_hold = 0;
        if (e->res->stop == GEN_RUNNING) e->res->stop = GEN_STOP_STRING;
        return 0;
    }
    return show(e, e->n_hold - stop_prefix_tail(e), err);
}

int emitter_finish(gen_emitter *e, gen_stop reason, sl_err *err)
{
    gen_result *r = e->res;
    if (r->stop == GEN_RUNNING) r->stop = reason;
    if (r->stop != GEN_STOP_STRING) {
        char tail[64];
        size_t n = detok_flush(&e->detok, tail, sizeof tail);
        if (n && hold_append(e, tail, n, err)) return -1;
        gen_stop keep = r->stop;
        if (show(e, e->n_hold, err)) return -1;
        r->stop = keep;
    }
    e->n_hold = 0;
    if (!r->text && grow((void **)&r->text, &r->text_cap, 1, 1, err)) return -1;
    r->text[r->len] = 0;
    return 0;
}

int emitter_push(gen_emitter *e, int32_t id, sl_err *err)
{
    gen_token t = {.id = id};
    return emitter_push_token(e, &t, err);
}

int emitter_push_token(gen_emitter *e, const gen_token *t, sl_err *err)
{
    gen_result *r = e->res;
    int32_t id = t->id;
    if (r->stop != GEN_RUNNING) return 1;
    if (!e->opts.ignore_eog && vocab_is_eog(e->vocab, id))
        return emitter_finish(e, GEN_STOP_EOG, err) ? -1 : 1;
    if (grow((void **)&r->ids, &r->ids_cap, r->n_ids + 1, sizeof *r->ids, err)) return -1;
    r->ids[r->n_ids++] = id;
    if (e->cb.on_token && e->cb.on_token(e->cb.ud, t)) r->stop = GEN_STOP_CALLER;
    char piece[2048]; /* longer than any token of a real vocabulary */
    size_t n = detok_push(&e->detok, e->vocab, id, piece, sizeof piece);
    if (hold_text(e, piece, n, err)) return -1;
    if (r->stop == GEN_RUNNING && e->opts.n_predict >= 0 && r->n_ids >= (size_t)e->opts.n_predict)
        r->stop = GEN_STOP_LIMIT;
    if (r->stop == GEN_RUNNING) return 0;
    return emitter_finish(e, r->stop, err) ? -1 : 1;
}

/* --------------------------------------------------------- log-probs */

enum { MAX_TOP = 64 };

typedef struct {
    gen_logprob top[MAX_TOP];
} logprob_buf;

static bool ahead(float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); }

/* T->logprob of T->id, and the N most likely tokens, under the softmax of
 * the raw LOGITS (log-sum-exp in double, so a 150k vocabulary loses
 * nothing to rounding). */
static void describe(gen_token *t, const float *logits, int32_t n_vocab, int32_t n, logprob_buf *b)
{
    if (n > MAX_TOP) n = MAX_TOP;
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    int32_t k = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        sum += exp((double)logits[i] - mx);
        if (n <= 0 || (k == n && !ahead(logits[i], i, b->top[k - 1].logprob, b->top[k - 1].id))) continue;
        int32_t j = k < n ? k++ : n - 1; /* insertion into the sorted top list */
        while (j > 0 && ahead(logits[i], i, b->top[j - 1].logprob, b->top[j - 1].id)) b->top[j] = b->top[j - 1], j--;
        b->top[j] = (gen_logprob){i, logits[i]};
    }
    double lse = mx + log(sum);
    t->logprob = (float)(logits[t->id] - lse);
    for (int32_t i = 0; i < k; i++) b->top[i].logprob = (float)(b->top[i].logprob - lse);
    t->top = b->top;
    t->n_top = k;
}

int emitter_push_row(gen_emitter *e, int32_t id, const float *logits, int32_t n_vocab, sl_err *err)
{
    if (e->res->stop != GEN_RUNNING) return 1;
    if (e->cb.on_logits) e->cb.on_logits(e->cb.ud, logits, n_vocab);
    gen_token t = {.id = id, .logprob = NAN};
    logprob_buf lb;
    if (e->opts.logprobs) describe(&t, logits, n_vocab, e->opts.n_probs, &lb);
    return emitter_push_token(e, &t, err);
}
