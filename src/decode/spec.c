/* Speculative decoding: the verify / accept step and the choice of K
 * (spec.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/draft_cost.h"
#include "decode/spec.h"
#include "experts/store.h"
#include "util/clock.h"

enum { PROBE_EVERY = 24 };   /* plain steps before the first probe once drafting stopped paying */
enum { PROBE_MAX = 1536 };   /* the longest gap between probes (each failed probe doubles it) */
enum { PLAIN_EVERY = 16 };   /* drafted steps between plain ones that re-measure a plain step */
static const double ACC_DECAY = 0.97; /* acceptance counts halve in about 23 verifications */
static const double MARGIN = 1.03;    /* drafting must promise this much more than a plain step */
static const double PROBE_SHARE = 0.02; /* the most of decoding's time probes that keep nothing may take */

/* Where a step's drafts come from.  A lookup (n-gram) costs nothing, so a
 * plain step makes one anyway and checks it against the tokens that follow
 * (a shadow): its acceptance is measured without verifying anything.  A
 * proposer (a draft model, random ids) costs a run of the draft, so once
 * drafting stops paying only an occasional probe measures it again. */
enum { SRC_LOOKUP, SRC_PROPOSER, N_SRC };

/* What a draft's acceptance is learned by: the proposer's drafts, and a
 * lookup's by how far its match agrees (draft_proposal.match).  Over the
 * bench's 11 prompts and tinymoe's 256-token greedy continuations, a
 * lookup's first draft was kept at 39-47% after a one-token match, 68-91%
 * after 2-15 tokens, 96-100% after 16 or more, and the run it kept averaged
 * 2, 3-7 and 12.5-15 of 16 drafts: pooled, the long matches' drafts are
 * priced like the short ones', and a step drafts 2-4 where it could draft
 * 16, or drafts where a one-token match makes it lose. */
enum { CLS_PROPOSER, CLS_MATCH1, CLS_MATCH2, CLS_MATCH8, CLS_MATCH16, N_CLS };

static int class_of(int src, int32_t match)
{
    if (src == SRC_PROPOSER) return CLS_PROPOSER;
    return match >= 16 ? CLS_MATCH16 : match >= 8 ? CLS_MATCH8 : match >= 2 ? CLS_MATCH2 : CLS_MATCH1;
}

/* An exponential moving average with a count of samples. */
typedef struct {
    double v;
    int64_t n;
} ema;

static void ema_add(ema *e, double x, double w)
{
    e->v = e->n ? e->v + w * (x - e->v) : x;
    e->n++;
}

struct spec {
    drafter *d;
    spec_opts o;
    int32_t n_vocab;
    float *rows; /* (DRAFT_MAX + 1) x n_vocab verified logits */
    sl_rng rng;  /* acceptance draws (temperature > 0) */
    spec_stats st;
    /* economics (adaptive K) */
    draft_cost cost;            /* predicted seconds of a pass over n positions (draft_cost.h) */
    ema t_draft[N_SRC];         /* seconds of proposing one token */
    double acc_kept[N_CLS][DRAFT_MAX], acc_tried[N_CLS][DRAFT_MAX]; /* decayed counts of acceptance at depth d, given reached */
    /* the lookups of the last plain steps, checked as tokens come: one
     * per step, so that every depth gets a sample a step, as verifying
     * each of them would give */
    struct shadow {
        size_t at;   /* the lookup continued the sequence's first AT tokens */
        int n, d;    /* its length; the depth checked next (d == n: done) */
        int cls;     /* its acceptance class */
        int32_t ids[DRAFT_MAX];
    } shadow[DRAFT_MAX];
    int next_shadow;            /* the slot the next one takes */
    int32_t since_probe;        /* plain steps since the last drafted one */
    int32_t probe_gap;          /* plain steps between probes now */
    bool probed;                /* the last drafted step was a probe */
    int32_t since_plain;        /* drafted steps since the last plain one */
    /* union of experts per verification pass (route observer) */
    const expert_layout *layout;
    const expert_provider *store; /* NULL: experts in RAM */
    bool counting, verifying;
    /* the pass being evaluated, summed over its MoE layers */
    int64_t pass_layers, pass_distinct, pass_first, pass_first_held, pass_extra, pass_extra_held;
    double pass_missing_bytes;
};

int spec_create(spec **out, drafter *d, const spec_opts *o, int32_t n_vocab, sl_err *err)
{
    *out = NULL;
    spec *sp = calloc(1, sizeof *sp);
    if (!sp) return sl_errf(err, "out of memory");
    sp->d = d;
    sp->o = *o;
    if (sp->o.k_max > DRAFT_MAX) sp->o.k_max = DRAFT_MAX;
    if (sp->o.k_min <= 0) sp->o.k_min = 1;
    sp->n_vocab = n_vocab;
    sp->probe_gap = PROBE_EVERY;
    dcost_init(&sp->cost, 0, 0, 0);
    sp->rows = malloc(sizeof(float) * (size_t)n_vocab * (DRAFT_MAX + 1));
    if (!sp->rows) {
        free(sp);
        return sl_errf(err, "out of memory for %d logit rows", DRAFT_MAX + 1);
    }
    /* touched at setup: first-touch page faults (about 16 us each on this
     * VM) made the first verification of 5 positions 6.1-6.7 ms instead of
     * 1.9-2.8, and that first one decides whether drafting goes on.  Not
     * with zeros: the compiler turns malloc + memset(0) into calloc, which
     * leaves fresh pages untouched (245 faults still in that pass) */
    memset(sp->rows, 0xff, sizeof(float) * (size_t)n_vocab * (DRAFT_MAX + 1));
    rng_seed(&sp->rng, o->seed ^ 0x5bd1e995u);
    *out = sp;
    return 0;
}

void spec_free(spec *sp)
{
    if (!sp) return;
    free(sp->rows);
    free(sp);
}

drafter *spec_drafter(const spec *sp) { return sp->d; }
const spec_stats *spec_get_stats(const spec *sp) { return &sp->st; }

void spec_stats_add(spec_stats *sum, const spec_stats *d)
{
    sum->steps += d->steps, sum->proposed += d->proposed, sum->accepted += d->accepted;
    sum->plain_steps += d->plain_steps;
    sum->shadow_tried += d->shadow_tried, sum->shadow_kept += d->shadow_kept;
    for (int i = 0; i < DRAFT_MAX; i++)
        sum->depth_tried[i] += d->depth_tried[i], sum->depth_accepted[i] += d->depth_accepted[i];
    for (int i = 0; i <= DRAFT_MAX; i++) sum->k_hist[i] += d->k_hist[i];
    sum->draft_s += d->draft_s, sum->verify_s += d->verify_s;
    sum->union_expert_bytes += d->union_expert_bytes;
    sum->verify_predicted_s += d->verify_predicted_s, sum->verify_abs_err_s += d->verify_abs_err_s;
    sum->verify_priced_s += d->verify_priced_s, sum->priced_steps += d->priced_steps;
}
void spec_reset_stats(spec *sp) { memset(&sp->st, 0, sizeof sp->st); }
void spec_set_layout(spec *sp, const expert_layout *L)
{
    sp->layout = L;
    double bytes = 0; /* one expert of every MoE layer */
    for (int l = 0; L && l < L->n_layers; l++) bytes += (double)expert_layout_bytes(L, l);
    if (L) dcost_init(&sp->cost, L->n_used, L->n_expert, bytes);
}

void spec_set_store(spec *sp, const expert_provider *store) { sp->store = store; }

/* Whether the store held (LAYER, ID) when the router asked (RAM: always). */
static bool held(const spec *sp, int layer, int32_t id)
{
    return !sp->store || expert_store_holds(sp->store, layer, id);
}

static bool resident(const spec *sp, int layer, int32_t id)
{
    return !sp->store || expert_store_resident(sp->store, layer, id);
}

void spec_observe_route(void *ctx, int layer, const int32_t *ids, int T, int K)
{
    spec *sp = ctx;
    if (!sp->counting || !sp->layout || layer < 0 || layer >= sp->layout->n_layers) return;
    uint64_t bytes = expert_layout_bytes(sp->layout, layer);
    /* one call per MoE layer and pass, before the store plans it: the
     * distinct experts of its T x K ids, and which of them the cache holds
     * (the first position's K, then the rest of the union) */
    uint64_t distinct = 0, missing = 0;
    for (int i = 0; i < T * K; i++) {
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = ids[j] == ids[i];
        if (dup) continue;
        distinct++;
        /* the first position's experts are the plain step's: held or in
         * flight, as the pilot's guesses mostly land in time; the union's
         * others only once landed (a pass waited 3-4x as long as a plain
         * step for the same misses counted the other way) */
        bool h = i < K ? held(sp, layer, ids[i]) : resident(sp, layer, ids[i]);
        missing += !h;
        if (i < K) sp->pass_first++, sp->pass_first_held += h;
        else sp->pass_extra++, sp->pass_extra_held += h;
    }
    sp->pass_layers++;
    sp->pass_distinct += (int64_t)distinct;
    sp->pass_missing_bytes += (double)(missing * bytes);
    if (sp->verifying) sp->st.union_expert_bytes += distinct * bytes;
}

/* --------------------------------------------------- measured pass costs */

/* The store's cumulative read waits, and its read rate into the model. */
static double store_wait(spec *sp)
{
    if (!sp->store) return 0;
    store_stats ss;
    expert_store_stats(sp->store, &ss);
    dcost_set_rate(&sp->cost, ss.admit_read_s > 0 ? (double)ss.slot_bytes / ss.admit_read_s : 0);
    return ss.io_wait_s;
}

static void pass_begin(spec *sp, bool verifying)
{
    sp->pass_layers = sp->pass_distinct = sp->pass_first = sp->pass_first_held = sp->pass_extra = sp->pass_extra_held = 0;
    sp->pass_missing_bytes = 0;
    sp->counting = true, sp->verifying = verifying;
}

/* The pass over N positions of N_TOK distinct tokens ended: what its
 * routing and the cache's hits say (its time is observed once the step's
 * sampling is done too). */
static void pass_end(spec *sp, int n, int n_tok)
{
    sp->counting = sp->verifying = false;
    if (!sp->pass_layers) return;
    double L = (double)sp->pass_layers;
    dcost_observe_routes(&sp->cost, n, n_tok, (double)sp->pass_distinct / L,
                         sp->pass_first ? (double)sp->pass_first_held / (double)sp->pass_first : 1,
                         sp->pass_extra ? (double)sp->pass_extra_held / (double)sp->pass_extra : 1);
}

/* ------------------------------------------------------------ economics */

/* A draft of class CLS at depth D was kept or not (given every one before it was). */
static void observe_depth(spec *sp, int cls, int d, bool kept)
{
    sp->acc_kept[cls][d] = sp->acc_kept[cls][d] * ACC_DECAY + kept;
    sp->acc_tried[cls][d] = sp->acc_tried[cls][d] * ACC_DECAY + 1;
}

/* Checks the pending shadow lookups against the tokens decoded since each:
 * what verifying it would have measured, at no cost.  At temperature > 0 a
 * point-mass draft x is kept with probability p(x), the probability that
 * the plain step sampled x, so the expectation is the same. */
static void shadow_check(spec *sp, const gen_seq *q)
{
    for (int i = 0; i < DRAFT_MAX; i++) {
        struct shadow *h = &sp->shadow[i];
        while (h->d < h->n && h->at + (size_t)h->d < q->n) {
            int d = h->d++;
            bool kept = h->ids[d] == q->toks[h->at + (size_t)d];
            observe_depth(sp, h->cls, d, kept);
            sp->st.shadow_tried++, sp->st.shadow_kept += kept;
            if (!kept) h->n = h->d = 0;
        }
    }
}

/* A verification measures what the shadows would (and appends its tokens
 * at once): they stop. */
static void shadows_stop(spec *sp)
{
    for (int i = 0; i < DRAFT_MAX; i++) sp->shadow[i].n = sp->shadow[i].d = 0;
}

void spec_begin(spec *sp, uint32_t seed)
{
    rng_seed(&sp->rng, seed ^ 0x5bd1e995u);
    shadows_stop(sp);
}

/* A plain step follows the lookup P made after the sequence's first AT
 * tokens: check it as the tokens come. */
static void shadow_start(spec *sp, size_t at, const draft_proposal *p)
{
    struct shadow *h = &sp->shadow[sp->next_shadow];
    sp->next_shadow = (sp->next_shadow + 1) % DRAFT_MAX;
    h->at = at, h->n = p->n, h->d = 0, h->cls = class_of(SRC_LOOKUP, p->match);
    memcpy(h->ids, p->ids, sizeof(int32_t) * (size_t)p->n);
}

/* Expected tokens a step with K drafts of class CLS yields: the target's
 * own token plus each draft token, kept when every one before it was. */
static double expected_tokens(const spec *sp, int cls, int k)
{
    double e = 1, run = 1, prior = 0.5;
    if (cls != CLS_PROPOSER) { /* a class little seen starts from every lookup's first depth */
        double kept = 0, tried = 0;
        for (int c = CLS_MATCH1; c < N_CLS; c++) kept += sp->acc_kept[c][0], tried += sp->acc_tried[c][0];
        prior = (kept + 1) / (tried + 2);
    }
    for (int d = 0; d < k; d++) {
        /* decayed counts with a prior of two observations at the shallower
         * depth's rate (Laplace's rule at depth 1): a draft kept at depth d
         * is kept deeper about as often, more often for an n-gram run, so a
         * depth never reached is no coin toss once the ones before it are
         * known */
        double a = (sp->acc_kept[cls][d] + 2 * prior) / (sp->acc_tried[cls][d] + 2);
        run *= a;
        e += run;
        prior = a;
    }
    return e;
}

/* Predicted seconds of verifying K drafts (K = 0: a plain step). */
static double verify_cost(const spec *sp, int k) { return dcost_predict(&sp->cost, k + 1); }

/* Whether drafting could beat a plain step even if every draft were kept.
 * The costs are measured and move slowly; acceptance is what a probe
 * would learn.  A draft as slow as the target (a small model beside a
 * small MoE in RAM) fails this, and probing it would only cost: each
 * probe first runs the draft over every token since the last one. */
static bool could_pay(const spec *sp, int kmax)
{
    const ema *t = &sp->t_draft[SRC_PROPOSER];
    if (!t->n || !sp->cost.c[1].n) return true;
    for (int k = 1; k <= kmax; k++)
        if ((k + 1) / (verify_cost(sp, k) + k * t->v) > MARGIN / verify_cost(sp, 0)) return true;
    return false;
}

/* Seconds of drafting per proposed token from SRC, as measured (0 before
 * any draft). */
static double draft_s(const spec *sp, int src)
{
    const ema *t = &sp->t_draft[src];
    return t->n ? t->v : 0;
}

/* Once drafting stopped paying, a short draft now and then re-measures
 * acceptance; a probe that changes nothing doubles the wait for the next.
 * A probe whose drafts are all rejected costs its pass (and its drafting)
 * beyond the plain step it replaces, so it also waits until the plain
 * steps since the last one make that at most PROBE_SHARE of their time:
 * under streaming a pass over 3 positions reads about 3x a token's
 * experts, and one such probe in a 32-token run of the 17 GB synthetic
 * model at 1 GB/s cost 6% of the run. */
static int probe_k(spec *sp, int kmax)
{
    if (sp->probed) { /* the last probe did not bring drafting back */
        sp->probed = false;
        sp->probe_gap = sp->probe_gap * 2 > PROBE_MAX ? PROBE_MAX : sp->probe_gap * 2;
    }
    if (++sp->since_probe < sp->probe_gap || !could_pay(sp, kmax)) return 0;
    int k = sp->o.k_min > 2 ? sp->o.k_min : 2;
    if (k > kmax) k = kmax;
    double plain = verify_cost(sp, 0), excess = verify_cost(sp, k) + k * draft_s(sp, SRC_PROPOSER) - plain;
    if (sp->since_probe * PROBE_SHARE * plain < excess) return 0;
    sp->since_probe = 0;
    sp->probed = true;
    return k;
}

/* OUT[k] (k = 0..N): the distinct tokens among T0 and IDS[0, k). */
static void distinct_tokens(int32_t t0, const int32_t *ids, int n, int *out)
{
    out[0] = 1;
    for (int i = 0; i < n; i++) {
        bool seen = ids[i] == t0;
        for (int j = 0; j < i && !seen; j++) seen = ids[j] == ids[i];
        out[i + 1] = out[i] + !seen;
    }
}

/* The K with the most expected tokens per second for drafts from SRC of
 * class CLS (0: a plain step); N_TOK[K]: the distinct tokens a pass over
 * K drafts would hold, when the drafts are known (NULL: K + 1). */
static int choose_k(spec *sp, int room, int src, int cls, const int *n_tok)
{
    int kmax = sp->o.k_max > 0 ? sp->o.k_max : DRAFT_MAX;
    if (kmax > room) kmax = room;
    if (kmax < sp->o.k_min) return 0;
    if (sp->o.k_max > 0) return kmax; /* fixed K */
    /* two plain steps first: every pass is priced as a ratio to the plain
     * step, and the first after the prompt runs cold (1.45 against 0.8 ms,
     * tinymoe): ratios taken against it alone priced passes below a plain
     * step, and with a draft model (few plain steps to correct it) K = 16
     * was chosen at 0.45 acceptance */
    if (sp->cost.c[1].n < 2) return 0;
    /* explore K by doubling: no long draft on the strength of priors alone */
    int explored = 0;
    for (int k = 1; k <= DRAFT_MAX; k++)
        if (sp->cost.c[k + 1].n) explored = k;
    if (kmax > 2 * explored + 2) kmax = 2 * explored + 2;
    double tokens[DRAFT_MAX + 1];
    for (int k = 0; k <= kmax; k++) tokens[k] = expected_tokens(sp, cls, k);
    int bk = dcost_choose(&sp->cost, tokens, n_tok, draft_s(sp, src), sp->o.k_min, kmax, MARGIN);
    if (bk == 0) return src == SRC_LOOKUP ? 0 : probe_k(sp, kmax);
    sp->since_probe = 0, sp->probed = false, sp->probe_gap = PROBE_EVERY;
    /* a plain step now and then keeps its measured cost current */
    if (++sp->since_plain >= PLAIN_EVERY) sp->since_plain = 0, bk = 0;
    return bk;
}

/* ------------------------------------------------------------- verify */

/* Probability of ID under candidates C[0, N) (0 if it was cut). */
static double cand_p(const sl_cand *c, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].id == id) return c[i].p;
    return 0;
}

/* Draws from max(0, p - q) normalised, where p = the target's candidates
 * P[0, NP) and q = Q[0, NQ) (NQ == 0: a point mass on X). */
static int32_t residual_draw(spec *sp, const sl_cand *p, size_t np, const sl_cand *q, size_t nq, int32_t x)
{
    double sum = 0;
    for (size_t i = 0; i < np; i++) {
        double qi = nq ? cand_p(q, nq, p[i].id) : p[i].id == x;
        sum += fmax(0, p[i].p - qi);
    }
    if (!(sum > 0)) return p[0].id; /* p == q up to rounding: rejection had probability 0 */
    double u = rng_uniform(&sp->rng) * sum, run = 0;
    for (size_t i = 0; i < np; i++) {
        double qi = nq ? cand_p(q, nq, p[i].id) : p[i].id == x;
        run += fmax(0, p[i].p - qi);
        if (run > u) return p[i].id;
    }
    for (size_t i = np; i-- > 0;) /* the last with mass (rounding at the top end) */
        if (p[i].p > (nq ? cand_p(q, nq, p[i].id) : p[i].id == x)) return p[i].id;
    return p[0].id;
}

/* The target's token at draft position I of P given logits ROW: the draft
 * itself when kept (*KEPT), else the target's pick. */
static int32_t verify_one(spec *sp, sl_sampler *smp, const float *row, const draft_proposal *p, int i, bool *kept)
{
    *kept = false;
    if (sampler_get_params(smp)->temp <= 0 || i >= p->n) {
        int32_t t = sampler_sample(smp, row);
        *kept = i < p->n && t == p->ids[i];
        return t;
    }
    const sl_cand *c;
    size_t nc = sampler_candidates(smp, row, &c);
    if (!nc) return -1; /* every logit NaN */
    int32_t x = p->ids[i];
    double px = cand_p(c, nc, x), qx = p->n_q[i] ? cand_p(p->q[i], p->n_q[i], x) : 1;
    if (qx > 0 && px > 0 && (px >= qx || rng_uniform(&sp->rng) * qx < px)) {
        *kept = true;
        return x;
    }
    if (sp->o.wrong_rule) return residual_draw(sp, c, nc, NULL, 0, -1); /* = a draw from p: not exact */
    return residual_draw(sp, c, nc, p->q[i], p->n_q[i], x);
}

/* Drops proposed ids the target cannot evaluate (outside its vocabulary). */
static void sanitize(draft_proposal *p, int32_t n_vocab)
{
    for (int i = 0; i < p->n; i++)
        if (p->ids[i] < 0 || p->ids[i] >= n_vocab) {
            p->n = i;
            return;
        }
}

static int plain_step(spec *sp, gen_seq *q, sl_sampler *smp, gen_emitter *e, int32_t *id, sl_err *err)
{
    double w0 = store_wait(sp), t0 = sl_now();
    pass_begin(sp, false);
    int rc = seq_eval(q, err);
    pass_end(sp, 1, 1);
    if (rc == 0) rc = gen_sample(q, smp, e, id, err);
    dcost_observe_time(&sp->cost, 1, sl_now() - t0, store_wait(sp) - w0, sp->pass_missing_bytes);
    sp->st.k_hist[0]++;
    sp->st.plain_steps++;
    return rc;
}

/* Ends a verification whose token at draft position I is T (pending):
 * the session keeps the pending token and the I kept drafts. */
static int settle(spec *sp, gen_seq *q, size_t n0, int i, sl_err *err)
{
    int32_t keep = (int32_t)(n0 + (size_t)i);
    if (keep < session_pos(q->s) && session_rewind(q->s, keep, err)) return -1;
    q->n = (size_t)keep;
    memcpy(q->logits, sp->rows + (size_t)i * sp->n_vocab, sizeof(float) * (size_t)sp->n_vocab);
    q->logits_ok = true;
    return 0;
}

/* The logit rows a verification projects first: the head's 50k-row
 * product costs about what a position's routed experts do once a few
 * rows share it (tinymoe, 1 thread: 0.28 ms for 1 row, 0.39 for 4, 0.65
 * for 8, 1.43 for 17), and rows past the first rejected draft are never
 * read.  So as many as the step is expected to yield, and one more, at
 * least 4 (below that a row costs nearly what 4 do); more_rows doubles
 * from there. */
static int first_rows(const spec *sp, int cls, int k)
{
    int want = (int)ceil(expected_tokens(sp, cls, k)) + 1;
    return want < 4 ? 4 : want;
}

/* Projects the next *CHUNK rows (at most the pass's N) after the *HAVE
 * already in sp->rows, and doubles *CHUNK. */
static int more_rows(spec *sp, gen_seq *q, int n, int *have, int *chunk, sl_err *err)
{
    int c = *chunk < n - *have ? *chunk : n - *have;
    if (session_logits(q->s, *have, c, sp->rows + (size_t)*have * sp->n_vocab, err)) return -1;
    *have += c;
    *chunk *= 2;
    return 0;
}

/* The drafts of a step after Q's tokens into P (from *SRC, of acceptance
 * class *CLS), RETURNED: their number, 0 for a plain step (after starting a
 * shadow of the lookup, if there was one), -1 on error. */
static int propose(spec *sp, const gen_seq *q, int room, draft_proposal *p, int *src, int *cls, sl_err *err)
{
    shadow_check(sp, q);
    double t0 = sl_now();
    *src = drafter_lookup(sp->d, q->toks, q->n, DRAFT_MAX, p) ? SRC_LOOKUP : SRC_PROPOSER;
    *cls = class_of(*src, p->match);
    double t_draft = sl_now() - t0; /* the lookup's; choosing K is not drafting */
    if (*src == SRC_PROPOSER && drafter_kind(sp->d) == DRAFT_NGRAM) return 0; /* nothing to draft */
    int n_tok[DRAFT_MAX + 1];
    if (*src == SRC_LOOKUP) distinct_tokens(q->toks[q->n - 1], p->ids, p->n, n_tok);
    int k = choose_k(sp, room, *src, *cls, *src == SRC_LOOKUP ? n_tok : NULL);
    if (k == 0) {
        if (*src == SRC_LOOKUP) shadow_start(sp, q->n, p);
        return 0;
    }
    if (*src == SRC_LOOKUP) p->n = p->n < k ? p->n : k;
    else {
        t0 = sl_now();
        if (drafter_propose(sp->d, q->toks, q->n, k, p, err)) return -1;
        t_draft += sl_now() - t0;
    }
    sanitize(p, sp->n_vocab);
    sp->st.draft_s += t_draft;
    if (p->n) ema_add(&sp->t_draft[*src], t_draft / p->n, 0.1);
    if (p->n < sp->o.k_min) return 0;
    shadows_stop(sp);
    return p->n;
}

int spec_step(spec *sp, gen_seq *q, sl_sampler *smp, gen_emitter *e, int32_t *id, sl_err *err)
{
    size_t n0 = q->n;
    int room = (int)(q->cap - n0);
    int one_pass = session_n_batch(q->s) - 1; /* a verification is one pass */
    if (room > one_pass) room = one_pass;
    const gen_result *res = e->res;
    if (e->opts.n_predict >= 0) { /* no draft past the token limit */
        int64_t left = (int64_t)e->opts.n_predict - (int64_t)res->n_ids - 1;
        if (left < room) room = left < 0 ? 0 : (int)left;
    }
    draft_proposal p;
    int src, cls, k = propose(sp, q, room, &p, &src, &cls, err);
    if (k < 0) return -1;
    if (k == 0) return plain_step(sp, q, smp, e, id, err);
    if (seq_push(q, p.ids, (size_t)p.n, err)) return -1;
    int32_t pos = session_pos(q->s);
    int n_toks[DRAFT_MAX + 1];
    distinct_tokens(q->toks[pos], q->toks + pos + 1, p.n, n_toks);
    int n_tok = n_toks[p.n];
    double w0 = store_wait(sp), predicted = dcost_predict_tok(&sp->cost, p.n + 1, n_tok);
    bool priced = dcost_priced(&sp->cost);
    double t1 = sl_now(); /* the verification's time starts here: store_wait is not part of it */
    pass_begin(sp, true);
    int rc = session_eval_held(q->s, q->toks + pos, p.n + 1, err);
    pass_end(sp, p.n + 1, n_tok);
    int have = 0, chunk = first_rows(sp, cls, p.n);
    if (rc || more_rows(sp, q, p.n + 1, &have, &chunk, err)) {
        sl_err e2;
        if (session_pos(q->s) > pos) session_rewind(q->s, pos, &e2);
        q->n = n0;
        return -1;
    }
    sp->st.steps++;
    sp->st.proposed += p.n;
    sp->st.k_hist[p.n]++;
    int32_t t = -1;
    for (int i = 0;; i++) {
        bool kept;
        if (i == have && more_rows(sp, q, p.n + 1, &have, &chunk, err)) { /* rows past the drafts kept so far */
            sl_err e2;
            settle(sp, q, n0, i - 1, &e2); /* as if draft i - 1, kept, were the target's own token */
            *id = t;
            return -1;
        }
        const float *row = sp->rows + (size_t)i * sp->n_vocab;
        t = verify_one(sp, smp, row, &p, i, &kept);
        if (t < 0) { /* all-NaN logits: a fault upstream, never a token */
            sl_err e2;
            settle(sp, q, n0, i, &e2);
            return sl_errf(err, "sampler: every logit is NaN at draft position %d (a numerical fault in the model or "
                                "the engine)", i);
        }
        sampler_accept(smp, t);
        if (i < p.n) {
            sp->st.depth_tried[i]++;
            sp->st.depth_accepted[i] += kept;
            observe_depth(sp, cls, i, kept);
        }
        sp->st.accepted += kept;
        rc = emitter_push_row(e, t, row, sp->n_vocab, err);
        if (kept && rc == 0) continue;
        sl_err e2;
        if (settle(sp, q, n0, i, rc < 0 ? &e2 : err)) rc = -1;
        *id = t;
        break;
    }
    double dt = sl_now() - t1;
    sp->st.verify_s += dt;
    if (priced) { /* a fixed K verifies before any pass was measured */
        sp->st.verify_predicted_s += predicted, sp->st.verify_priced_s += dt, sp->st.priced_steps++;
        sp->st.verify_abs_err_s += fabs(predicted - dt);
    }
    dcost_observe_time(&sp->cost, p.n + 1, dt, store_wait(sp) - w0, sp->pass_missing_bytes);
    return rc;
}
