/* Speculative sampling at temperature > 0 keeps the target's distribution
 * (src/decode/spec.c): a two-sample chi-square test of the tokens drafted
 * decoding and plain decoding produce at the first verified position
 * (output token 2) and a later one (token 4), over N seeded generations
 * each, with a draft model whose distribution q differs from the target's
 * p (the lean qwen3moe drafting for itself at temperature 0.5 where the
 * target samples at 1.5: rejections are frequent and the residual matters),
 * and with n-gram point-mass proposals.  The same test
 * must reject a deliberately wrong rule (on rejection, a draw from p
 * instead of max(0, p - q)): that shows it has the power to see a bias. */
#include <math.h>
#include <stdint.h>

#include "decode/draft.h"
#include "decode/draft_model.h"
#include "decode/generate.h"
#include "decode/spec.h"
#include "engine/engine.h"
#include "t.h"

enum { N_SAMPLES = 2000, N_GEN = 4, MAXV = 2048 };

static const char *TARGET = "tests/fixtures/lean/models/qwen3moe-a3b-lean-Q4_0.gguf";
/* the draft is the target itself drawing from a sharper chain (temperature
 * 0.5): q differs from p, but not so much that nothing is accepted */
static const char *DRAFT = "tests/fixtures/lean/models/qwen3moe-a3b-lean-Q4_0.gguf";

typedef struct {
    sl_engine eng;
    gen_seq q;
    int32_t nv;
} rig;

static sampler_params chain(uint32_t seed)
{
    sampler_params p = sampler_defaults();
    /* a few candidates with very unequal weights: the counts resolve them */
    p.temp = 1.5f, p.top_k = 6, p.top_p = 1, p.min_p = 0, p.seed = seed;
    return p;
}

/* Counts of output tokens 2 and 4 over N_SAMPLES generations. */
static int sample(rig *r, spec *sp, draft_model *dm, uint32_t seed0, int64_t (*counts)[MAXV], sl_err *err)
{
    static const int32_t prompt[] = {464, 1468, 582, 3114, 379, 262, 5417, 290};
    for (int n = 0; n < N_SAMPLES; n++) {
        int32_t pr[8];
        for (int i = 0; i < 8; i++) pr[i] = prompt[i] % r->nv;
        if (seq_reuse(&r->q, pr, 8, err) < 0) return -1;
        sampler_params par = chain(seed0 + (uint32_t)n);
        sl_sampler *smp;
        if (sampler_create(&smp, &par, r->nv, err)) return -1;
        sampler_accept_prompt(smp, r->q.toks, r->q.n);
        if (sp) spec_begin(sp, 77u + (uint32_t)n);
        sampler_params dp = chain(5000u + (uint32_t)n);
        dp.temp = 0.5f;
        if (dm && draft_model_set_sampling(dm, &dp, err)) return -1;
        gen_opts go = {.n_predict = N_GEN, .ignore_eog = true};
        gen_callbacks cb = {0};
        gen_result res;
        int rc = generate(r->eng.model, &r->q, smp, &go, &cb, sp, &res, err);
        sampler_free(smp);
        if (rc == 0 && res.n_ids == N_GEN) counts[0][res.ids[1]]++, counts[1][res.ids[3]]++;
        else if (rc == 0) rc = sl_errf(err, "%zu tokens", res.n_ids);
        gen_result_free(&res);
        if (rc) return -1;
    }
    return 0;
}

/* Two-sample chi-square statistic of counts A and B (equal totals), bins
 * with fewer than 10 in both merged into one; *DF its degrees of freedom. */
static double chi2(const int64_t *a, const int64_t *b, int nv, int *df)
{
    double x = 0, ra = 0, rb = 0;
    int bins = 0;
    for (int i = 0; i < nv; i++) {
        if (a[i] + b[i] == 0) continue;
        if (a[i] + b[i] < 10) {
            ra += (double)a[i], rb += (double)b[i];
            continue;
        }
        x += ((double)a[i] - (double)b[i]) * ((double)a[i] - (double)b[i]) / (double)(a[i] + b[i]);
        bins++;
    }
    if (ra + rb > 0) x += (ra - rb) * (ra - rb) / (ra + rb), bins++;
    *df = bins - 1;
    return x;
}

/* The chi-square quantile at 1 - 1e-3 for DF degrees of freedom
 * (Wilson-Hilferty; z = 3.09). */
static double critical(int df)
{
    if (df < 1) df = 1;
    double k = df, z = 3.0902;
    double t = 1 - 2 / (9 * k) + z * sqrt(2 / (9 * k));
    return k * t * t * t;
}

static int64_t plain_counts[2][MAXV], counts[2][MAXV];

/* Draws with draft KIND (WRONG: the biased rule) and compares with plain. */
static void case_kind(rig *r, draft_kind kind, bool wrong)
{
    char name[200];
    snprintf(name, sizeof name, "draft stats: temperature 1.5, top-k 6, %s draft%s: %s", kind == DRAFT_MODEL ? "model" : "n-gram",
             wrong ? ", deliberately wrong rejection rule" : "",
             wrong ? "the chi-square test rejects it (so it has the power to see a bias)"
                   : "tokens 2 and 4 distributed as plain sampling's (chi-square, p > 0.001)");
    t_begin(name);
    sl_err err;
    drafter *d = NULL;
    spec *sp = NULL;
    draft_model *dm = NULL;
    drafter_opts dopt = {.seed = 3, .ngram_min = 1};
    int rc = drafter_create(&d, kind, &dopt, &err);
    if (!rc && kind == DRAFT_MODEL && !(rc = draft_model_open(&dm, DRAFT, r->eng.model, r->eng.pool, 128, 0, 0, false, &err)))
        drafter_set_model(d, dm);
    spec_opts so = {.k_max = 3, .wrong_rule = wrong};
    if (!rc) rc = spec_create(&sp, d, &so, r->nv, &err);
    memset(counts, 0, sizeof counts);
    /* seeds apart from the reference's: the two samples are independent */
    if (!rc) rc = sample(r, sp, dm, 100000u, counts, &err);
    T_CHECK(rc == 0, "%s", err.msg);
    if (!rc) {
        const spec_stats *st = spec_get_stats(sp);
        double acc = st->proposed ? (double)st->accepted / (double)st->proposed : 0;
        int64_t need = kind == DRAFT_MODEL ? N_SAMPLES : 100; /* n-gram lookup rarely matches here */
        T_CHECK(st->proposed > need && acc > 0.05 && acc < 0.95, "drafts %lld, acceptance %.2f: not a test of both branches",
                (long long)st->proposed, acc);
        double worst = 0;
        for (int pos = 0; pos < 2; pos++) {
            int df;
            double x = chi2(plain_counts[pos], counts[pos], r->nv, &df), c = critical(df);
            printf("# %s token %d: chi2 %.1f, df %d, critical %.1f, acceptance %.2f\n", kind == DRAFT_MODEL ? "model" : "ngram",
                   pos ? 4 : 2, x, df, c, acc);
            if (x / c > worst) worst = x / c;
        }
        if (wrong) T_CHECK(worst > 1, "the wrong rule passed (chi2 / critical %.2f)", worst);
        else T_CHECK(worst <= 1, "chi2 / critical %.2f: the distributions differ", worst);
    }
    spec_free(sp);
    drafter_free(d);
    t_end();
}

int main(void)
{
    rig r;
    sl_err err;
    engine_opts o = {.model_path = TARGET, .n_ctx = 128, .threads = 1, .no_heat = true, .n_rollback = DRAFT_MAX};
    t_begin("draft stats: plain sampling reference");
    int rc = engine_open(&r.eng, &o, &err);
    if (!rc) r.nv = model_n_vocab(r.eng.model), rc = seq_init(&r.q, r.eng.session, r.nv, &err);
    if (!rc && r.nv > MAXV) rc = sl_errf(&err, "vocabulary of %d", r.nv);
    if (!rc) rc = sample(&r, NULL, NULL, 1000u, plain_counts, &err);
    T_CHECK(rc == 0, "%s", err.msg);
    if (!t_end()) return 1;
    case_kind(&r, DRAFT_MODEL, false);
    case_kind(&r, DRAFT_MODEL, true);
    case_kind(&r, DRAFT_NGRAM, false);
    seq_free(&r.q);
    engine_close(&r.eng);
    return t_done();
}
