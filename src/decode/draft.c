/* Draft proposers (draft.h): n-gram lookup, random ids, and the hook for a
 * draft model (draft_model.c). */
#include <stdlib.h>
#include <string.h>

#include "decode/draft.h"
#include "decode/draft_model.h"

struct drafter {
    draft_kind kind;
    drafter_opts o;
    sl_rng rng;
    draft_model *dm; /* DRAFT_MODEL: the draft model; n-gram lookup runs first */
};

int drafter_create(drafter **out, draft_kind kind, const drafter_opts *o, sl_err *err)
{
    *out = NULL;
    if (kind != DRAFT_NGRAM && kind != DRAFT_RANDOM && kind != DRAFT_MODEL)
        return sl_errf(err, "drafter: unknown kind %d", (int)kind);
    drafter *d = calloc(1, sizeof *d);
    if (!d) return sl_errf(err, "out of memory");
    d->kind = kind;
    d->o = o ? *o : (drafter_opts){0};
    if (d->o.ngram_min <= 0) d->o.ngram_min = 1;
    if (d->o.ngram_max <= 0) d->o.ngram_max = d->o.ngram_min > 4 ? d->o.ngram_min : 4;
    if (d->o.ngram_max < d->o.ngram_min) {
        free(d);
        return sl_errf(err, "ngram_max (%d) is below ngram_min (%d)", (int)o->ngram_max, (int)o->ngram_min);
    }
    if (kind == DRAFT_RANDOM && d->o.random_range <= 0) {
        free(d);
        return sl_errf(err, "drafter: random ids need a positive range");
    }
    rng_seed(&d->rng, d->o.seed);
    *out = d;
    return 0;
}

void drafter_free(drafter *d)
{
    if (!d) return;
    draft_model_free(d->dm);
    free(d);
}

draft_kind drafter_kind(const drafter *d) { return d->kind; }

const char *drafter_name(const drafter *d)
{
    switch (d->kind) {
    case DRAFT_NGRAM: return "ngram";
    case DRAFT_RANDOM: return "random";
    case DRAFT_MODEL: return "model+ngram";
    default: return "none";
    }
}

void drafter_set_model(drafter *d, draft_model *dm)
{
    draft_model_free(d->dm);
    d->dm = dm;
}

draft_model *drafter_model(const drafter *d) { return d->dm; }

/* Whether HIST[a, a + len) equals HIST[b, b + len). */
static bool same_run(const int32_t *hist, size_t a, size_t b, size_t len)
{
    return memcmp(hist + a, hist + b, len * sizeof *hist) == 0;
}

/* How far back HIST agrees before positions J and N, from LEN (the agreed
 * suffix) up to DRAFT_MATCH_CAP. */
static int32_t match_back(const int32_t *hist, size_t n, size_t j, size_t len)
{
    size_t e = len;
    while (e < DRAFT_MATCH_CAP && j + len > e && hist[j + len - 1 - e] == hist[n - 1 - e]) e++;
    return (int32_t)e;
}

int ngram_lookup(const int32_t *hist, size_t n, int32_t nmin, int32_t nmax, int kmax, int32_t *out, int32_t *match)
{
    if (match) *match = 0;
    if (kmax <= 0) return 0;
    for (size_t len = (size_t)nmax; len >= (size_t)nmin && len >= 1; len--) {
        if (len + 1 > n) continue;
        size_t suffix = n - len;
        /* the latest earlier occurrence that has at least one token after it */
        for (size_t j = suffix; j-- > 0;) {
            if (!same_run(hist, j, suffix, len)) continue;
            /* past the end of HIST the continuation goes on as the match
             * predicts it: a match overlapping the suffix (a run of one
             * token, a repeating phrase) implies the period repeats, so its
             * continuation is read from what was proposed already, not cut
             * at the end of HIST (a run of one token proposed one at a time) */
            size_t from = j + len;
            for (int k = 0; k < kmax; k++) {
                size_t at = from + (size_t)k;
                out[k] = at < n ? hist[at] : out[at - n];
            }
            if (match) *match = match_back(hist, n, j, len);
            return kmax;
        }
    }
    return 0;
}

static void point_masses(draft_proposal *p, int from, draft_kind kind)
{
    for (int i = from; i < p->n; i++) p->q[i] = NULL, p->n_q[i] = 0, p->kind[i] = kind;
}

int drafter_lookup(const drafter *d, const int32_t *hist, size_t n, int kmax, draft_proposal *p)
{
    if (kmax > DRAFT_MAX) kmax = DRAFT_MAX;
    p->match = 0;
    /* combined mode too looks up from one token: where the lookup has a
     * match it drafts for free, and the model's drafts, kept more often
     * after a one-token match, cost more than they bring (docs/DRAFT.md) */
    p->n = d->kind == DRAFT_NGRAM || d->kind == DRAFT_MODEL
               ? ngram_lookup(hist, n, d->o.ngram_min, d->o.ngram_max, kmax, p->ids, &p->match)
               : 0;
    point_masses(p, 0, DRAFT_NGRAM);
    return p->n;
}

int drafter_propose(drafter *d, const int32_t *hist, size_t n, int kmax, draft_proposal *p, sl_err *err)
{
    p->n = 0, p->match = 0;
    if (kmax > DRAFT_MAX) kmax = DRAFT_MAX;
    if (kmax <= 0) return 0;
    switch (d->kind) {
    case DRAFT_RANDOM:
        for (int i = 0; i < kmax; i++) p->ids[i] = (int32_t)(rng_u32(&d->rng) % (uint32_t)d->o.random_range);
        p->n = kmax;
        point_masses(p, 0, DRAFT_RANDOM);
        return 0;
    case DRAFT_MODEL: return d->dm ? draft_model_propose(d->dm, hist, n, kmax, &d->rng, p, err) : 0;
    default: return 0; /* n-gram: the lookup is all it has */
    }
}
