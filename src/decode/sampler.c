/* The sampling chain (see sampler.h).  Candidates live in one array sized to
 * the vocabulary; each stage shrinks or reorders it in place.  `sorted` tracks
 * whether the array is in descending-logit order, because llama.cpp sums
 * probabilities in the array's current order and we want the same floats. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/sampler.h"
#include "kernels/kernels.h"

/* The penalty window: the last `cap` accepted tokens in a ring, and how
 * often each token occurs in it (count[id], over the whole vocabulary so
 * that accepting is O(1)). */
typedef struct {
    int32_t *ring, *count;
    size_t cap, len, head; /* head: index of the oldest entry */
} penalty_window;

struct sl_sampler {
    sampler_params par;
    int32_t n_vocab;
    sl_cand *cand;
    size_t n;
    bool sorted;
    sl_rng rng;
    bool penalize;      /* some penalty is on */
    penalty_window win;
    float *work;        /* the logits after the penalties (n_vocab) */
    gram_state *gram;   /* grammar constraint, or NULL */
    const gram_tokens *gtok;
    float *mask;        /* the logits with refused tokens at -inf (n_vocab) */
    int32_t fallback;   /* when the grammar allows nothing */
};

sampler_params sampler_defaults(void)
{
    return (sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .min_keep = 0, .seed = 0,
                            .repeat_penalty = 1.0f, .repeat_last_n = 64};
}

/* llama.cpp leaves the penalty stage out when it would change nothing. */
static bool penalties_on(const sampler_params *p)
{
    return p->repeat_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

static void window_push(penalty_window *w, int32_t id)
{
    if (w->len == w->cap) {
        w->count[w->ring[w->head]]--;
        w->ring[w->head] = id;
        w->head = (w->head + 1) % w->cap;
    } else {
        w->ring[(w->head + w->len++) % w->cap] = id;
    }
    w->count[id]++;
}

/* Each distinct token of the window once: its count is negated while it is
 * being visited, then restored, so no second table is needed. */
static void apply_penalties(sl_sampler *s, float *x)
{
    penalty_window *w = &s->win;
    const sampler_params *p = &s->par;
    for (size_t i = 0; i < w->len; i++) {
        int32_t id = w->ring[(w->head + i) % w->cap], c = w->count[id];
        if (c <= 0) continue;
        x[id] = x[id] <= 0 ? x[id] * p->repeat_penalty : x[id] / p->repeat_penalty;
        x[id] -= (float)c * p->frequency_penalty + (float)(c > 0) * p->presence_penalty;
        w->count[id] = -c;
    }
    for (size_t i = 0; i < w->len; i++) {
        int32_t id = w->ring[(w->head + i) % w->cap];
        if (w->count[id] < 0) w->count[id] = -w->count[id];
    }
}

/* The logits the chain works on: LOGITS itself, or a penalized copy. */
static const float *chain_input(sl_sampler *s, const float *logits)
{
    if (!s->penalize || s->win.len == 0) return logits;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *logits);
    apply_penalties(s, s->work);
    return s->work;
}

int sampler_create(sl_sampler **out, const sampler_params *p, int32_t n_vocab, sl_err *err)
{
    *out = NULL;
    if (n_vocab <= 0) return sl_errf(err, "sampler: vocabulary size %d is not positive", (int)n_vocab);
    sl_sampler *s = calloc(1, sizeof *s);
    if (s) s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (!s || !s->cand) {
        free(s);
        return sl_errf(err, "sampler: out of memory for %d candidates", (int)n_vocab);
    }
    s->par = *p;
    s->n_vocab = n_vocab;
    rng_seed(&s->rng, p->seed);
    s->penalize = penalties_on(p);
    if (s->penalize) {
        s->win.cap = (size_t)p->repeat_last_n;
        s->win.ring = malloc(s->win.cap * sizeof *s->win.ring);
        s->win.count = calloc((size_t)n_vocab, sizeof *s->win.count);
        s->work = malloc((size_t)n_vocab * sizeof *s->work);
        if (!s->win.ring || !s->win.count || !s->work) {
            sampler_free(s);
            return sl_errf(err, "sampler: out of memory for a penalty window of %d tokens", (int)p->repeat_last_n);
        }
    }
    *out = s;
    return 0;
}

void sampler_free(sl_sampler *s)
{
    if (!s) return;
    free(s->win.ring);
    free(s->win.count);
    free(s->work);
    free(s->mask);
    gstate_free(s->gram);
    free(s->cand);
    free(s);
}

const sampler_params *sampler_get_params(const sl_sampler *s) { return &s->par; }

/* Ids outside the vocabulary never reach here from the engine (session_eval
 * refuses them); a caller's stray id is ignored rather than indexing out. */
static void accept_history(sl_sampler *s, int32_t id)
{
    if (s->penalize && id >= 0 && id < s->n_vocab) window_push(&s->win, id);
}

int sampler_set_grammar(sl_sampler *s, gram_state *m, const gram_tokens *t, sl_err *err)
{
    if (t->n != s->n_vocab) {
        gstate_free(m);
        return sl_errf(err, "sampler: the grammar's token table has %d tokens, the vocabulary %d", (int)t->n,
                       (int)s->n_vocab);
    }
    float *mask = s->mask ? s->mask : malloc((size_t)s->n_vocab * sizeof *mask);
    if (!mask) {
        gstate_free(m);
        return sl_errf(err, "sampler: out of memory for the grammar mask");
    }
    gstate_free(s->gram);
    s->gram = m, s->gtok = t, s->mask = mask;
    s->fallback = 0;
    while (s->fallback < t->n - 1 && !t->eog[s->fallback]) s->fallback++;
    return 0;
}

/* A token the grammar does not allow (a caller's) leaves the grammar where
 * it was. */
void sampler_accept(sl_sampler *s, int32_t id)
{
    accept_history(s, id);
    if (!s->gram || id < 0 || id >= s->n_vocab || s->gtok->eog[id]) return;
    uint32_t a = s->gtok->off[id], b = s->gtok->off[id + 1];
    (void)gstate_accept(s->gram, s->gtok->bytes + a, b - a);
}

void sampler_accept_prompt(sl_sampler *s, const int32_t *ids, size_t n)
{
    /* only the last `cap` tokens can stay in the window */
    size_t from = s->penalize && n > s->win.cap ? n - s->win.cap : 0;
    for (size_t i = from; i < n; i++) accept_history(s, ids[i]);
}

int sampler_clone(sl_sampler **out, const sl_sampler *s, sl_err *err)
{
    if (sampler_create(out, &s->par, s->n_vocab, err)) return -1;
    gram_state *m = NULL;
    if (s->gram && (gstate_new(&m, gstate_grammar(s->gram), err) || sampler_set_grammar(*out, m, s->gtok, err))) {
        sampler_free(*out);
        *out = NULL;
        return -1;
    }
    sampler_copy_state(*out, s);
    if (m && gstate_copy(m, s->gram)) {
        sampler_free(*out);
        *out = NULL;
        return sl_errf(err, "sampler: out of memory copying the grammar state");
    }
    return 0;
}

/* The window is copied entry by entry (the counts follow), so the cost is
 * the window's length, not the vocabulary's. */
void sampler_copy_state(sl_sampler *dst, const sl_sampler *src)
{
    dst->rng = src->rng;
    if (dst->gram && src->gram) (void)gstate_copy(dst->gram, src->gram);
    if (!dst->penalize || !src->penalize) return;
    penalty_window *d = &dst->win;
    const penalty_window *w = &src->win;
    for (size_t i = 0; i < d->len; i++) d->count[d->ring[(d->head + i) % d->cap]] = 0;
    d->len = d->head = 0;
    for (size_t i = 0; i < w->len; i++) window_push(d, w->ring[(w->head + i) % w->cap]);
}

void sampler_reseed(sl_sampler *s, uint32_t seed)
{
    s->par.seed = seed;
    rng_seed(&s->rng, seed);
}

/* On the SIMD path (kernels.h): one pass, 3.6 us over a 50k vocabulary. */
int32_t sampler_argmax(const float *logits, int32_t n) { return op_argmax(logits, n); }

/* Whether any of N logits is a number (it returns at once, as a rule). */
static bool any_number(const float *logits, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (logits[i] == logits[i]) return true;
    return false;
}

/* Candidate order: higher logit first, then lower id (a strict total order,
 * so results never depend on the sort algorithm). */
static bool better(const sl_cand *a, const sl_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_better(const void *pa, const void *pb)
{
    const sl_cand *a = pa, *b = pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Min-heap on `better`: the root is the worst of the kept candidates. */
static void sift_down(sl_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l])) w = l;
        if (r < n && better(&h[w], &h[r])) w = r;
        if (w == i) return;
        sl_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the best K of the N candidates to the front, in order, in O(n log k);
 * the others stay behind them (in no particular order). */
static void select_best(sl_cand *c, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;) sift_down(c, k, i);
    for (size_t i = k; i < n; i++) {
        if (!better(&c[i], &c[0])) continue;
        sl_cand t = c[0];
        c[0] = c[i];
        c[i] = t;
        sift_down(c, k, 0);
    }
    qsort(c, k, sizeof *c, cmp_better);
}

static void sort_all(sl_sampler *s)
{
    if (!s->sorted) qsort(s->cand, s->n, sizeof *s->cand, cmp_better);
    s->sorted = true;
}

static float max_logit(const sl_sampler *s)
{
    if (s->sorted) return s->cand[0].logit;
    float m = s->cand[0].logit;
    for (size_t i = 1; i < s->n; i++)
        if (s->cand[i].logit > m) m = s->cand[i].logit;
    return m;
}

static void top_k(sl_sampler *s, int32_t k)
{
    if (k <= 0) return;
    size_t kk = (size_t)k < s->n ? (size_t)k : s->n;
    if (!s->sorted) select_best(s->cand, s->n, kk);
    s->n = kk;
    s->sorted = true;
}

/* Softmax in the array's current order, float sums (llama.cpp's softmax_impl). */
static void softmax_float(sl_sampler *s)
{
    float m = max_logit(s), sum = 0.0f;
    for (size_t i = 0; i < s->n; i++) {
        s->cand[i].p = expf(s->cand[i].logit - m);
        sum += s->cand[i].p;
    }
    for (size_t i = 0; i < s->n; i++) s->cand[i].p /= sum;
}

/* Keeps the shortest best-first prefix whose probability mass reaches P.
 * Unsorted input is sorted lazily: the best 256 first, the rest only if
 * they are needed (as llama.cpp does); the order and sums are the same. */
static void top_p(sl_sampler *s, float p)
{
    if (p >= 1.0f) return;
    softmax_float(s);
    size_t ready = s->n;
    if (!s->sorted) {
        ready = s->n < 256 ? s->n : 256;
        select_best(s->cand, s->n, ready);
    }
    float cum = 0.0f;
    for (size_t i = 0; i < s->n; i++) {
        if (i == ready) {
            qsort(s->cand + ready, s->n - ready, sizeof *s->cand, cmp_better);
            ready = s->n;
        }
        cum += s->cand[i].p;
        if (cum >= p && i + 1 >= (size_t)s->par.min_keep) {
            s->n = i + 1;
            break;
        }
    }
    if (ready < s->n) qsort(s->cand + ready, s->n - ready, sizeof *s->cand, cmp_better);
    s->sorted = true;
}

/* Keeps tokens with probability >= P times the best one's, i.e. logit >=
 * max + log(P).  Unsorted input stays in id order, as in llama.cpp. */
static void min_p(sl_sampler *s, float p)
{
    if (p <= 0.0f || s->n == 0) return;
    size_t keep = (size_t)s->par.min_keep;
    if (!s->sorted) {
        float lim = max_logit(s) + logf(p);
        size_t j = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->cand[i].logit >= lim) j++;
        if (j > 0 && j >= keep) {
            j = 0;
            for (size_t i = 0; i < s->n; i++)
                if (s->cand[i].logit >= lim) s->cand[j++] = s->cand[i];
            s->n = j;
            return;
        }
        sort_all(s);
    }
    float lim = s->cand[0].logit + logf(p);
    size_t i = 1;
    while (i < s->n && !(s->cand[i].logit < lim && i >= keep)) i++;
    s->n = i;
}

static void temperature(sl_sampler *s, float t)
{
    for (size_t i = 0; i < s->n; i++) s->cand[i].logit /= t;
}

/* Final probabilities (float terms, double sum) and, if RNG is set, the draw:
 * the first candidate at which the running sum reaches sum * U[0,1). */
static size_t dist(sl_sampler *s, sl_rng *rng)
{
    if (s->n == 1) {
        s->cand[0].p = 1.0f;
        return 0;
    }
    float m = max_logit(s);
    double sum = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        s->cand[i].p = expf(s->cand[i].logit - m);
        sum += s->cand[i].p;
    }
    size_t pick = s->n - 1;
    if (rng) {
        double target = sum * rng_uniform(rng), run = 0.0;
        for (size_t i = 0; i < s->n; i++) {
            run += s->cand[i].p;
            if (run >= target) {
                pick = i;
                break;
            }
        }
    }
    for (size_t i = 0; i < s->n; i++) s->cand[i].p = (float)(s->cand[i].p / sum);
    return pick;
}

/* A NaN logit takes no part in the draw (as in argmax): it becomes -inf,
 * which every stage orders and weighs (probability 0) correctly. */
static float number_or_low(float x) { return x == x ? x : -INFINITY; }

/* Top-k straight from the logits: only tokens that beat the current k-th
 * best enter the heap.  (A later token never wins a tie: its id is higher.) */
static void top_k_from_logits(sl_sampler *s, const float *logits, size_t k)
{
    sl_cand *c = s->cand;
    for (size_t i = 0; i < k; i++) c[i] = (sl_cand){(int32_t)i, number_or_low(logits[i]), 0.0f};
    for (size_t i = k / 2; i-- > 0;) sift_down(c, k, i);
    for (size_t i = k; i < (size_t)s->n_vocab; i++) {
        if (!(logits[i] > c[0].logit)) continue;
        c[0] = (sl_cand){(int32_t)i, logits[i], 0.0f};
        sift_down(c, k, 0);
    }
    qsort(c, k, sizeof *c, cmp_better);
    s->n = k;
    s->sorted = true;
}

static void run_chain(sl_sampler *s, const float *logits)
{
    if (s->par.top_k > 0 && s->par.top_k < s->n_vocab) {
        top_k_from_logits(s, logits, (size_t)s->par.top_k);
    } else {
        for (int32_t i = 0; i < s->n_vocab; i++) s->cand[i] = (sl_cand){i, number_or_low(logits[i]), 0.0f};
        s->n = (size_t)s->n_vocab;
        s->sorted = false;
        top_k(s, s->par.top_k);
    }
    top_p(s, s->par.top_p);
    min_p(s, s->par.min_p);
    temperature(s, s->par.temp);
    /* tokens a grammar refused (-inf) can survive top-k when few are allowed */
    size_t j = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->cand[i].logit != -INFINITY) s->cand[j++] = s->cand[i];
    if (j) s->n = j;
}

static int32_t pick(sl_sampler *s, const float *logits)
{
    if (s->par.temp <= 0.0f) return sampler_argmax(logits, s->n_vocab);
    if (!any_number(logits, s->n_vocab)) return -1;
    run_chain(s, logits);
    return s->cand[dist(s, &s->rng)].id;
}

/* LOGITS with every token the grammar refuses at -inf, or NULL if it
 * allows none. */
static const float *grammar_mask(sl_sampler *s, const float *logits)
{
    int32_t allowed = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        bool ok = gstate_allows_token(s->gram, s->gtok, i);
        s->mask[i] = ok ? logits[i] : -INFINITY;
        allowed += ok;
    }
    return allowed ? s->mask : NULL;
}

int32_t sampler_sample(sl_sampler *s, const float *logits)
{
    logits = chain_input(s, logits);
    int32_t id = pick(s, logits);
    if (!s->gram || gstate_allows_token(s->gram, s->gtok, id)) return id;
    const float *m = grammar_mask(s, logits);
    return m ? pick(s, m) : s->fallback;
}

size_t sampler_candidates(sl_sampler *s, const float *logits, const sl_cand **out)
{
    logits = chain_input(s, logits);
    if (s->gram) {
        const float *m = grammar_mask(s, logits);
        if (!m) {
            s->cand[0] = (sl_cand){s->fallback, logits[s->fallback], 1.0f};
            s->n = 1;
            *out = s->cand;
            return 1;
        }
        logits = m;
    }
    if (s->par.temp <= 0.0f) {
        int32_t id = sampler_argmax(logits, s->n_vocab);
        s->n = id >= 0;
        if (id >= 0) s->cand[0] = (sl_cand){id, logits[id], 1.0f};
    } else if (!any_number(logits, s->n_vocab)) {
        s->n = 0;
    } else {
        run_chain(s, logits);
        dist(s, NULL);
    }
    *out = s->cand;
    return s->n;
}
