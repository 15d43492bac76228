/* The sampling chain (see sampler.h).  Candidates live in one array sized to
 * the vocabulary; each stage shrinks or reorders it in place.  `sorted` tracks
 * whether the array is in descending-logit order, because llama.cpp sums
 * probabilities in the array's current order and we want the same floats. */
#include <math.h>
#include <stdlib.h>

#include "decode/sampler.h"

struct sl_sampler {
    sampler_params par;
    int32_t n_vocab;
    sl_cand *cand;
    size_t n;
    bool sorted;
    sl_rng rng;
};

sampler_params sampler_defaults(void)
{
    return (sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .min_keep = 0, .seed = 0};
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
    *out = s;
    return 0;
}

void sampler_free(sl_sampler *s)
{
    if (!s) return;
    free(s->cand);
    free(s);
}

const sampler_params *sampler_get_params(const sl_sampler *s) { return &s->par; }

/* The chain has no history-dependent stage yet: accepting is a no-op and a
 * sampler's state is its random stream. */
void sampler_accept(sl_sampler *s, int32_t id) { (void)s, (void)id; }

int sampler_clone(sl_sampler **out, const sl_sampler *s, sl_err *err)
{
    if (sampler_create(out, &s->par, s->n_vocab, err)) return -1;
    sampler_copy_state(*out, s);
    return 0;
}

void sampler_copy_state(sl_sampler *dst, const sl_sampler *src) { dst->rng = src->rng; }

void sampler_reseed(sl_sampler *s, uint32_t seed)
{
    s->par.seed = seed;
    rng_seed(&s->rng, seed);
}

/* Two passes: the maximum over 8 independent lanes (no loop-carried
 * dependency, so it runs several times faster than a running argmax over a
 * 50k vocabulary), then the first index holding it. */
int32_t sampler_argmax(const float *logits, int32_t n)
{
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = -INFINITY;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = logits[i + k] > m[k] ? logits[i + k] : m[k];
    for (; i < n; i++) m[0] = logits[i] > m[0] ? logits[i] : m[0];
    for (int k = 1; k < 8; k++) m[0] = m[k] > m[0] ? m[k] : m[0];
    for (i = 0; i < n; i++)
        if (logits[i] == m[0]) return i;
    return 0; /* all NaN */
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

/* Top-k straight from the logits: only tokens that beat the current k-th
 * best enter the heap.  (A later token never wins a tie: its id is higher.) */
static void top_k_from_logits(sl_sampler *s, const float *logits, size_t k)
{
    sl_cand *c = s->cand;
    for (size_t i = 0; i < k; i++) c[i] = (sl_cand){(int32_t)i, logits[i], 0.0f};
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
        for (int32_t i = 0; i < s->n_vocab; i++) s->cand[i] = (sl_cand){i, logits[i], 0.0f};
        s->n = (size_t)s->n_vocab;
        s->sorted = false;
        top_k(s, s->par.top_k);
    }
    top_p(s, s->par.top_p);
    min_p(s, s->par.min_p);
    temperature(s, s->par.temp);
}

int32_t sampler_sample(sl_sampler *s, const float *logits)
{
    if (s->par.temp <= 0.0f) return sampler_argmax(logits, s->n_vocab);
    run_chain(s, logits);
    return s->cand[dist(s, &s->rng)].id;
}

size_t sampler_candidates(sl_sampler *s, const float *logits, const sl_cand **out)
{
    if (s->par.temp <= 0.0f) {
        int32_t id = sampler_argmax(logits, s->n_vocab);
        s->cand[0] = (sl_cand){id, logits[id], 1.0f};
        s->n = 1;
    } else {
        run_chain(s, logits);
        dist(s, NULL);
    }
    *out = s->cand;
    return s->n;
}
