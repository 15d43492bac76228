/* Sampler: each stage against a straightforward double-precision reference
 * (sort everything, softmax, cut), determinism per seed, the MT19937 stream
 * against the C++ standard's check value, and the draw frequencies. */
#include <math.h>

#include "decode/rng.h"
#include "decode/sampler.h"
#include "t.h"

/* ---- reference: sort all, then apply the cuts described in sampler.h ---- */

typedef struct {
    int id;
    double logit;
} ref_tok;

static int ref_cmp(const void *pa, const void *pb)
{
    const ref_tok *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return a->id - b->id;
}

static void ref_softmax(const ref_tok *t, int n, double scale, double *p)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((t[i].logit - t[0].logit) * scale);
    for (int i = 0; i < n; i++) p[i] = exp((t[i].logit - t[0].logit) * scale) / sum;
}

/* Returns the kept count; t[0..n) sorted, p[] final probabilities. */
static int ref_chain(const float *logits, int nv, const sampler_params *sp, ref_tok *t, double *p)
{
    for (int i = 0; i < nv; i++) t[i] = (ref_tok){i, logits[i]};
    qsort(t, (size_t)nv, sizeof *t, ref_cmp);
    int n = nv;
    if (sp->top_k > 0 && sp->top_k < n) n = sp->top_k;
    if (sp->top_p < 1) {
        ref_softmax(t, n, 1.0, p);
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += p[i];
            if (cum >= sp->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (sp->min_p > 0) {
        ref_softmax(t, n, 1.0, p);
        int k = 1;
        while (k < n && p[k] >= sp->min_p * p[0]) k++;
        n = k;
    }
    ref_softmax(t, n, 1.0 / sp->temp, p);
    return n;
}

static sampler_params params(float temp, int k, float top_p, float min_p)
{
    sampler_params sp = sampler_defaults();
    sp.temp = temp, sp.top_k = k, sp.top_p = top_p, sp.min_p = min_p, sp.seed = 1234;
    return sp;
}

/* Compares the sampler's candidate list with the reference. */
static void check_chain(const char *name, const float *logits, int nv, sampler_params sp)
{
    t_begin(name);
    sl_err err;
    sl_sampler *s;
    T_CHECK(sampler_create(&s, &sp, nv, &err) == 0, "%s", err.msg);
    if (t_cur.failed) {
        t_end();
        return;
    }
    ref_tok *t = malloc((size_t)nv * sizeof *t);
    double *p = malloc((size_t)nv * sizeof *p);
    int n = ref_chain(logits, nv, &sp, t, p);
    const sl_cand *c;
    size_t m = sampler_candidates(s, logits, &c);
    T_CHECK((int)m == n, "kept %zu candidates, reference %d", m, n);
    /* min-p may leave candidates unsorted: compare as sets via the reference order */
    for (int i = 0; i < n && (int)m == n; i++) {
        size_t j = 0;
        while (j < m && c[j].id != t[i].id) j++;
        T_CHECK(j < m, "reference token %d missing", t[i].id);
        if (j < m) T_CHECK(fabs(c[j].p - p[i]) < 1e-5, "token %d p %g, reference %g", t[i].id, c[j].p, p[i]);
    }
    free(t);
    free(p);
    sampler_free(s);
    t_end();
}

/* Logits spread so that no cut falls within float rounding of its limit. */
static void fill_logits(float *l, int n, uint32_t seed)
{
    sl_rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) l[i] = (float)(rng_uniform(&r) * 12.0 - 6.0);
}

static void test_greedy(void)
{
    t_begin("greedy argmax, ties to the lowest id");
    const float a[] = {1.0f, 3.0f, -2.0f, 3.0f, 2.9f};
    T_CHECK(sampler_argmax(a, 5) == 1, "argmax %d", sampler_argmax(a, 5));
    const float b[] = {-INFINITY, -5.0f, -5.0f};
    T_CHECK(sampler_argmax(b, 3) == 1, "argmax %d", sampler_argmax(b, 3));
    const float c[] = {7.0f};
    T_CHECK(sampler_argmax(c, 1) == 0, "single");
    enum { N = 1003 }; /* not a multiple of 8: a tail after the lanes */
    float d[N];
    fill_logits(d, N, 5);
    d[1002] = 9.0f;
    T_CHECK(sampler_argmax(d, N) == 1002, "max in the tail: %d", sampler_argmax(d, N));
    d[501] = d[13] = 9.5f; /* equal maxima in different lanes */
    T_CHECK(sampler_argmax(d, N) == 13, "tie across lanes: %d", sampler_argmax(d, N));
    d[5] = NAN;
    T_CHECK(sampler_argmax(d, N) == 13, "a NaN logit changed the argmax: %d", sampler_argmax(d, N));
    sampler_params sp = params(0.0f, 40, 0.95f, 0.05f);
    sl_sampler *s;
    sl_err err;
    T_CHECK(sampler_create(&s, &sp, 5, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 10; i++) T_CHECK(sampler_sample(s, a) == 1, "greedy sample not the argmax");
    sp.temp = -1.0f;
    sampler_free(s);
    T_CHECK(sampler_create(&s, &sp, 5, &err) == 0, "%s", err.msg);
    T_CHECK(sampler_sample(s, a) == 1, "negative temperature is greedy too");
    sampler_free(s);
    t_end();
}

/* All-NaN logits come from a numerical fault upstream: every entry point
 * says so (-1, no candidates) instead of answering token 0. */
static void test_all_nan(void)
{
    t_begin("all-NaN logits: argmax, greedy and sampled draws and the candidates all refuse them");
    float l[37];
    for (int i = 0; i < 37; i++) l[i] = NAN;
    T_CHECK(sampler_argmax(l, 37) == -1, "argmax %d", sampler_argmax(l, 37));
    T_CHECK(sampler_argmax(l, 0) == -1, "argmax of nothing %d", sampler_argmax(l, 0));
    const float temps[] = {0.0f, 0.8f};
    const int32_t ks[] = {0, 5};
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 2; k++) {
            sampler_params sp = params(temps[t], ks[k], 0.95f, 0.05f);
            sl_sampler *s;
            sl_err err;
            T_CHECK(sampler_create(&s, &sp, 37, &err) == 0, "%s", err.msg);
            T_CHECK(sampler_sample(s, l) == -1, "temp %.1f top-k %d sampled a token", temps[t], ks[k]);
            const sl_cand *c;
            T_CHECK(sampler_candidates(s, l, &c) == 0, "temp %.1f top-k %d has candidates", temps[t], ks[k]);
            l[20] = 1.0f; /* one number among NaN still samples it */
            T_CHECK(sampler_sample(s, l) == 20, "temp %.1f top-k %d: one number not chosen", temps[t], ks[k]);
            l[20] = NAN;
            sampler_free(s);
        }
    t_end();
}

static void test_stages(void)
{
    enum { NV = 64 };
    float l[NV];
    fill_logits(l, NV, 7);
    check_chain("sampler temp 1, no cuts = softmax", l, NV, params(1.0f, 0, 1.0f, 0.0f));
    check_chain("sampler temperature 0.5", l, NV, params(0.5f, 0, 1.0f, 0.0f));
    check_chain("sampler temperature 2.5", l, NV, params(2.5f, 0, 1.0f, 0.0f));
    check_chain("sampler top-k 5", l, NV, params(1.0f, 5, 1.0f, 0.0f));
    check_chain("sampler top-k larger than vocab", l, NV, params(1.0f, 1000, 1.0f, 0.0f));
    check_chain("sampler top-p 0.5", l, NV, params(1.0f, 0, 0.5f, 0.0f));
    check_chain("sampler top-p 0.9", l, NV, params(1.0f, 0, 0.9f, 0.0f));
    check_chain("sampler min-p 0.1", l, NV, params(1.0f, 0, 1.0f, 0.1f));
    check_chain("sampler min-p 0.01 unsorted", l, NV, params(1.0f, 0, 1.0f, 0.01f));
    check_chain("sampler top-k then top-p", l, NV, params(1.0f, 10, 0.8f, 0.0f));
    check_chain("sampler defaults chain, temp 0.8", l, NV, params(0.8f, 40, 0.95f, 0.05f));
    check_chain("sampler all stages, temp 1.7", l, NV, params(1.7f, 20, 0.97f, 0.02f));
    enum { BIG = 50257 };
    float *big = malloc(BIG * sizeof *big);
    fill_logits(big, BIG, 99);
    check_chain("sampler 50257-token vocab, defaults", big, BIG, params(0.8f, 40, 0.95f, 0.05f));
    check_chain("sampler 50257-token vocab, top-p only (past the first 256)", big, BIG, params(1.0f, 0, 0.3f, 0.0f));
    check_chain("sampler 50257-token vocab, top-p only (within the first 256)", big, BIG, params(1.0f, 0, 0.01f, 0.0f));
    for (int i = 0; i < BIG; i += 3) big[i] = 7.0f; /* thousands of equal logits at the top */
    check_chain("sampler 50257-token vocab with ties, top-k 100", big, BIG, params(1.0f, 100, 1.0f, 0.0f));
    free(big);
}

static void test_ties(void)
{
    t_begin("sampler top-k keeps the lower id among equal logits");
    const float l[] = {1.0f, 2.0f, 2.0f, 2.0f, 0.5f};
    sampler_params sp = params(1.0f, 2, 1.0f, 0.0f);
    sl_sampler *s;
    sl_err err;
    T_CHECK(sampler_create(&s, &sp, 5, &err) == 0, "%s", err.msg);
    const sl_cand *c;
    size_t n = sampler_candidates(s, l, &c);
    T_CHECK(n == 2 && c[0].id == 1 && c[1].id == 2, "kept %zu: %d %d", n, c[0].id, n > 1 ? c[1].id : -1);
    T_CHECK(n == 2 && fabsf(c[0].p - 0.5f) < 1e-6f, "equal logits, unequal p %g", c[0].p);
    sampler_free(s);
    t_end();
}

static void draw(sampler_params sp, const float *l, int nv, int32_t *out, int n)
{
    sl_sampler *s;
    sl_err err;
    if (sampler_create(&s, &sp, nv, &err)) {
        T_CHECK(0, "%s", err.msg);
        return;
    }
    for (int i = 0; i < n; i++) out[i] = sampler_sample(s, l);
    sampler_free(s);
}

static void test_seed(void)
{
    t_begin("sampler same seed, same tokens; other seed, other tokens");
    enum { NV = 32, N = 200 };
    float l[NV];
    fill_logits(l, NV, 3);
    int32_t a[N], b[N], c[N];
    sampler_params sp = params(1.5f, 0, 1.0f, 0.0f);
    draw(sp, l, NV, a, N);
    draw(sp, l, NV, b, N);
    sp.seed = 4321;
    draw(sp, l, NV, c, N);
    T_CHECK(!memcmp(a, b, sizeof a), "same seed gave different tokens");
    T_CHECK(memcmp(a, c, sizeof a) != 0, "different seeds gave identical 200-token sequences");
    sl_sampler *s;
    sl_err err;
    sp.seed = 1234;
    T_CHECK(sampler_create(&s, &sp, NV, &err) == 0, "%s", err.msg);
    for (int i = 0; i < N; i++) c[i] = sampler_sample(s, l);
    sampler_reseed(s, 1234);
    for (int i = 0; i < N; i++) T_CHECK(sampler_sample(s, l) == c[i], "reseed did not restart at %d", i);
    sampler_free(s);
    t_end();
}

/* Pearson's chi-square of draw counts against the softmax, on 5 tokens
 * (4 degrees of freedom: P(chi2 > 30) < 1e-5, and the seed is fixed). */
static void test_distribution(void)
{
    t_begin("sampler draw frequencies follow the softmax (chi-square)");
    enum { NV = 5, N = 200000 };
    const float l[NV] = {0.0f, 1.0f, -0.5f, 2.0f, 0.3f};
    const float temp = 1.3f;
    double p[NV], sum = 0, chi = 0;
    for (int i = 0; i < NV; i++) sum += exp(l[i] / temp);
    for (int i = 0; i < NV; i++) p[i] = exp(l[i] / temp) / sum;
    int32_t *ids = malloc(N * sizeof *ids);
    draw(params(temp, 0, 1.0f, 0.0f), l, NV, ids, N);
    long cnt[NV] = {0};
    for (int i = 0; i < N; i++) cnt[ids[i]]++;
    for (int i = 0; i < NV; i++) chi += (cnt[i] - N * p[i]) * (cnt[i] - N * p[i]) / (N * p[i]);
    T_CHECK(chi < 30.0, "chi-square %.2f (counts %ld %ld %ld %ld %ld)", chi, cnt[0], cnt[1], cnt[2], cnt[3], cnt[4]);
    /* with top-k 2 only the two best tokens may appear, in ratio e^(1/1.3) */
    draw(params(temp, 2, 1.0f, 0.0f), l, NV, ids, N);
    long k3 = 0, k1 = 0;
    for (int i = 0; i < N; i++) k3 += ids[i] == 3, k1 += ids[i] == 1;
    T_CHECK(k3 + k1 == N, "top-k 2 drew %ld other tokens", N - k3 - k1);
    double want = 1.0 / (1.0 + exp(-1.0 / temp));
    T_CHECK(fabs((double)k3 / N - want) < 0.005, "top-k 2 share %.4f, expected %.4f", (double)k3 / N, want);
    free(ids);
    t_end();
}

static void test_rng(void)
{
    t_begin("mt19937 = C++ std::mt19937 ([rand.predef] check value), uniform = libstdc++'s");
    sl_rng r;
    rng_seed(&r, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) v = rng_u32(&r);
    T_CHECK(v == 4123659995u, "got %u", v);
    /* std::uniform_real_distribution<double>(0, 1) over std::mt19937(42), as
     * printed by a libstdc++ (GCC 12) build: the draws llama.cpp's sampler makes */
    static const double want[] = {0.79654298428784598, 0.18343478789336848, 0.77969099761266125,
                                  0.59685016158005655, 0.44583275754843343};
    rng_seed(&r, 42);
    for (int i = 0; i < 5; i++) {
        double u = rng_uniform(&r);
        T_CHECK(u == want[i], "draw %d: %.17g, libstdc++ %.17g", i, u, want[i]);
    }
    rng_seed(&r, 42);
    double lo = 1, hi = 0, mean = 0;
    for (int i = 0; i < 100000; i++) {
        double u = rng_uniform(&r);
        lo = u < lo ? u : lo, hi = u > hi ? u : hi, mean += u / 100000;
    }
    T_CHECK(lo >= 0 && hi < 1, "uniform out of [0,1): %g %g", lo, hi);
    T_CHECK(fabs(mean - 0.5) < 0.005, "uniform mean %g", mean);
    t_end();
}

static void test_errors(void)
{
    t_begin("sampler rejects an empty vocabulary");
    sampler_params sp = sampler_defaults();
    sl_sampler *s = (sl_sampler *)&sp;
    sl_err err;
    T_CHECK(sampler_create(&s, &sp, 0, &err) == -1 && s == NULL, "accepted n_vocab 0");
    T_CHECK(strstr(err.msg, "vocabulary") != NULL, "message: %s", err.msg);
    t_end();
}

/* ---- penalties: llama.cpp's definition (llama_sampler_penalties_apply) ----
 * Over the last repeat_last_n accepted tokens, each distinct token with
 * count c: logit <= 0 ? logit * repeat : logit / repeat, then
 * logit -= c * frequency + (c > 0) * presence, in float. */
static void ref_penalize(float *x, const int32_t *hist, int n_hist, const sampler_params *sp)
{
    int from = n_hist > sp->repeat_last_n ? n_hist - sp->repeat_last_n : 0;
    for (int i = from; i < n_hist; i++) {
        int first = 1, c = 0;
        for (int j = from; j < i; j++) first &= hist[j] != hist[i];
        if (!first) continue;
        for (int j = i; j < n_hist; j++) c += hist[j] == hist[i];
        float *v = &x[hist[i]];
        *v = *v <= 0 ? *v * sp->repeat_penalty : *v / sp->repeat_penalty;
        *v -= (float)c * sp->frequency_penalty + (float)(c > 0) * sp->presence_penalty;
    }
}

static void test_penalties(void)
{
    enum { NV = 500, NH = 60 };
    float l[NV], want[NV];
    int32_t hist[NH];
    sl_rng r;
    rng_seed(&r, 99);
    /* a history with repeats, on tokens of both signs and near the top */
    for (int i = 0; i < NH; i++) hist[i] = (int32_t)(rng_u32(&r) % 24) * 7;
    sampler_params sp = params(0.8f, 0, 1.0f, 0.0f);
    sp.repeat_penalty = 1.25f, sp.frequency_penalty = 0.3f, sp.presence_penalty = 0.45f, sp.repeat_last_n = 20;
    for (int trial = 0; trial < 3; trial++) {
        const char *names[] = {"sampler penalties = llama.cpp's definition (full chain, split history)",
                               "sampler penalties with top-k / top-p / min-p after them",
                               "sampler greedy takes the argmax of the penalized logits"};
        t_begin(names[trial]);
        fill_logits(l, NV, 7 + (uint32_t)trial);
        for (int i = 0; i < NV; i += 3) l[i] += 4.0f; /* some penalized tokens lead */
        if (trial == 1) sp.top_k = 40, sp.top_p = 0.9f, sp.min_p = 0.02f;
        if (trial == 2) sp.temp = 0;
        sl_err err;
        sl_sampler *s;
        T_CHECK(sampler_create(&s, &sp, NV, &err) == 0, "%s", err.msg);
        if (t_cur.failed) {
            t_end();
            continue;
        }
        /* history in two parts: as prompt, then as generated tokens */
        sampler_accept_prompt(s, hist, NH / 2);
        for (int i = NH / 2; i < NH; i++) sampler_accept(s, hist[i]);
        memcpy(want, l, sizeof l);
        ref_penalize(want, hist, NH, &sp);
        if (trial == 2) {
            T_CHECK(sampler_sample(s, l) == sampler_argmax(want, NV), "greedy %d, reference argmax %d",
                    sampler_sample(s, l), sampler_argmax(want, NV));
        } else {
            ref_tok *t = malloc(NV * sizeof *t);
            double *p = malloc(NV * sizeof *p);
            int n = ref_chain(want, NV, &sp, t, p);
            const sl_cand *c;
            size_t m = sampler_candidates(s, l, &c);
            T_CHECK((int)m == n, "kept %zu candidates, reference %d", m, n);
            for (int i = 0; i < n && (int)m == n; i++) {
                size_t j = 0;
                while (j < m && c[j].id != t[i].id) j++;
                T_CHECK(j < m && fabs(c[j].p - p[i]) < 1e-5, "token %d differs from the reference", t[i].id);
            }
            /* a clone carries the same history: the same draws */
            sl_sampler *k;
            T_CHECK(sampler_clone(&k, s, &err) == 0, "%s", err.msg);
            for (int i = 0; i < 20 && !t_cur.failed; i++) {
                int32_t a = sampler_sample(s, l), b = sampler_sample(k, l);
                T_CHECK(a == b, "draw %d: clone %d, original %d", i, b, a);
                sampler_accept(s, a), sampler_accept(k, b);
            }
            sampler_free(k);
            free(t), free(p);
        }
        sampler_free(s);
        t_end();
    }
    t_begin("sampler penalties: copy_state moves the history window (and counts) exactly");
    sampler_params q = params(0.0f, 0, 1.0f, 0.0f);
    q.repeat_penalty = 2.0f, q.repeat_last_n = 4;
    sl_sampler *a, *b;
    sl_err err;
    T_CHECK(sampler_create(&a, &q, NV, &err) == 0 && sampler_create(&b, &q, NV, &err) == 0, "%s", err.msg);
    fill_logits(l, NV, 3);
    int32_t h1[] = {5, 6, 5, 9, 11}, h2[] = {1, 2, 3};
    sampler_accept_prompt(a, h1, 5);
    sampler_accept_prompt(b, h2, 3);
    sampler_copy_state(b, a);
    memcpy(want, l, sizeof l);
    ref_penalize(want, h1, 5, &q);
    T_CHECK(sampler_sample(b, l) == sampler_argmax(want, NV), "copy_state lost the window");
    sampler_free(a), sampler_free(b);
    t_end();
}

int main(void)
{
    (void)t_skip, (void)t_shared; /* harness helpers this file needs no case for */
    test_rng();
    test_greedy();
    test_all_nan();
    test_stages();
    test_ties();
    test_seed();
    test_distribution();
    test_penalties();
    test_errors();
    return t_done();
}
