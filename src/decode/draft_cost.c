/* Predicted verification cost (draft_cost.h). */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "decode/draft_cost.h"

static const double W = 0.25; /* EMA weight: about the last four samples */

static void avg_add(dcost_avg *a, double x)
{
    a->v = a->n ? a->v + W * (x - a->v) : x;
    a->n++;
}

/* Read waits per read second: the mean wait over the mean seconds of
 * reading, over all the samples, then about the last 16.  By bytes, not
 * by steps: a step that missed one expert still waits for the reads in
 * flight around it, and averaging each step's own ratio let those count
 * as much as steps that missed ten (tinymoe at 25% cached: plain steps'
 * mean ratio 2.0-3.2 where their total waits over their total reading
 * were 1.6, and passes, missing 3-20x as much, waited 0.9-1.6).  Over 16:
 * waits are bimodal on a throttled or shared disk (a step's reads served
 * at once, or after the next 100 ms slice), and an average of the last
 * four swung the plain step's predicted cost between 7 and 68 ms around a
 * true mean of 19: drafting got chosen whenever it swung high. */
static void wait_add(dcost_ratio *a, double wait_s, double read_s)
{
    enum { MEMORY = 16 };
    a->n++;
    double w = 1.0 / (double)(a->n < MEMORY ? a->n : MEMORY);
    a->wait += w * (wait_s - a->wait);
    a->read += w * (read_s - a->read);
}

static double ratio_of(const dcost_ratio *a) { return a->read > 0 ? a->wait / a->read : 1; }

/* Step times: the median of the last DCOST_RECENT samples.  Robust to one
 * slow pass (interference, a page fault, the first pass of a size growing
 * its buffers), which would otherwise price a K out of the choice and,
 * never chosen again, never be corrected; and unbiased where the times
 * spread by nature (two threads of which one runs at half speed for
 * seconds).  An average that moved down by 1/2 and up by 1/8 of a sample's
 * distance sat near the fastest fifth of the samples: over tinymoe's bench
 * prompts the priced verifications took 1.10-1.25x their predictions (the
 * median: 1.06-1.25x; the rest is choosing the K whose prediction came
 * out lowest).  The first two give their minimum. */
static void time_add(dcost_med *a, double x)
{
    a->s[a->n % DCOST_RECENT] = x;
    a->n++;
    int m = a->n < DCOST_RECENT ? (int)a->n : DCOST_RECENT;
    double v[DCOST_RECENT];
    memcpy(v, a->s, sizeof(double) * (size_t)m);
    for (int i = 1; i < m; i++) /* insertion sort: at most 8 */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    a->v = m <= 2 ? v[0] : m & 1 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
}

void dcost_init(draft_cost *c, int n_used, int n_expert, double expert_bytes)
{
    memset(c, 0, sizeof *c);
    c->n_used = n_used > 0 && n_expert > 0 ? n_used : 0;
    c->n_expert = c->n_used ? n_expert : 0;
    c->expert_bytes = expert_bytes > 0 ? expert_bytes : 0;
}

void dcost_set_rate(draft_cost *c, double bytes_per_s) { c->rate = bytes_per_s > 0 ? bytes_per_s : 0; }

static bool pos_ok(int n) { return n >= 1 && n <= DCOST_MAX_POS; }

void dcost_observe_routes(draft_cost *c, int n_pos, int n_tok, double distinct, double first_hit, double extra_hit)
{
    if (!pos_ok(n_pos) || !c->n_used) return;
    avg_add(&c->h1, first_hit);
    if (n_pos == 1) return;
    if (n_tok > 1 && n_tok <= n_pos) avg_add(&c->u[n_tok], distinct); /* u(1) is k */
    if (distinct > c->n_used) avg_add(&c->hx, extra_hit);
}

void dcost_observe_time(draft_cost *c, int n_pos, double seconds, double wait_s, double missing_bytes)
{
    if (!pos_ok(n_pos) || !(seconds > 0)) return;
    if (wait_s < 0) wait_s = 0;
    double t = seconds > wait_s ? seconds - wait_s : 0;
    time_add(&c->c[n_pos], t);
    /* against the plain step's cost now: the same model costs less per
     * pass on text whose positions share experts (still in the CPU's
     * caches) and more on text that spreads them, and both sizes move
     * together; absolute times measured in one stretch priced the other */
    if (n_pos == 1) c->r[1].v = 1, c->r[1].n++;  /* the plain step against itself */
    else if (c->c[1].n && c->c[1].v > 0) time_add(&c->r[n_pos], t / c->c[1].v);
    /* wait per second of reading: only a step that read something says it */
    if (c->rate > 0 && missing_bytes > 0) {
        double read_s = missing_bytes / c->rate;
        wait_add(&c->beta[n_pos], wait_s, read_s);
        if (n_pos > 1) wait_add(&c->beta_pass, wait_s, read_s);
    }
}

/* Uniform routing's expected distinct experts over N positions. */
static double uniform_union(const draft_cost *c, int n)
{
    double e = c->n_expert, k = c->n_used;
    return e * (1 - pow(1 - k / e, n));
}

/* The measured n nearest N_POS (the lower on a tie), from FROM up, in an
 * array of averages whose sample counts are STRIDE bytes apart from N0;
 * 0: none. */
static int nearest_at(const void *n0, size_t stride, int n_pos, int from)
{
    const char *p = n0;
    for (int d = 0; d < DCOST_MAX_POS; d++) {
        int lo = n_pos - d, hi = n_pos + d;
        if (lo >= from && *(const int64_t *)(p + (size_t)lo * stride)) return lo;
        if (d && hi <= DCOST_MAX_POS && *(const int64_t *)(p + (size_t)hi * stride)) return hi;
    }
    return 0;
}
#define NEAREST(a, n_pos, from) nearest_at(&(a)[0].n, sizeof(a)[0], n_pos, from)

double dcost_union(const draft_cost *c, int n_tok)
{
    if (!c->n_used || n_tok <= 1) return c->n_used;
    if (n_tok > DCOST_MAX_POS) n_tok = DCOST_MAX_POS;
    if (c->u[n_tok].n) return c->u[n_tok].v;
    /* the overlap measured at the nearest m */
    int m = NEAREST(c->u, n_tok, 2);
    double ratio = m ? (c->u[m].v - c->n_used) / (uniform_union(c, m) - c->n_used) : 1;
    double u = c->n_used + ratio * (uniform_union(c, n_tok) - c->n_used);
    double top = fmin((double)n_tok * c->n_used, c->n_expert);
    return u < c->n_used ? c->n_used : u > top ? top : u;
}

/* hx leans on h1 until HX_TRUSTED passes measured it, as beta_of leans
 * on its prior: the first passes of a run find the cache cold (tinymoe's
 * quote prompt at 25% cached: 0.26-0.41 against 0.45-0.9 later), and
 * taken alone they priced every pass at twice its reads, so the lookup
 * never verified again to correct them. */
enum { HX_TRUSTED = 4 };
double dcost_missing_bytes(const draft_cost *c, int n_tok)
{
    if (!c->n_used || !(c->rate > 0)) return 0;
    double h1 = c->h1.n ? c->h1.v : 0, w = c->hx.n >= HX_TRUSTED ? 1 : (double)c->hx.n / HX_TRUSTED;
    double hx = w * c->hx.v + (1 - w) * h1;
    double k = c->n_used, miss = k * (1 - h1) + (dcost_union(c, n_tok) - k) * (1 - hx);
    return miss * c->expert_bytes;
}

/* The value at N_POS of A: its own average once measured twice, else a
 * line through the plain step and the n measured twice, weighted by their
 * samples (up to 8, so that a well-measured plain step does not outweigh
 * every other n).  A size seen once is left out: one slow pass (a burst of
 * interference, the first pass of a size growing its buffers) would
 * otherwise price every K out, and a K never chosen is never measured
 * again.  DEFAULT: nothing measured. */
static double fit(const dcost_med *a, int n_pos, double dflt)
{
    if (a[n_pos].n >= 2) return a[n_pos].v;
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int points = 0;
    for (int j = 1; j <= DCOST_MAX_POS; j++) {
        if (!a[j].n || (j > 1 && a[j].n < 2)) continue;
        double w = a[j].n < 8 ? (double)a[j].n : 8, y = a[j].v;
        sw += w, sx += w * j, sy += w * y, sxx += w * j * j, sxy += w * j * y, points++;
    }
    if (points == 0) return dflt;
    double mx = sx / sw, mean = sy / sw;
    if (points < 2) { /* one point: a mild prior slope */
        double t = mean * (1 + 0.1 * (n_pos - mx));
        return t > 0 ? t : mean;
    }
    double b = (sxy - sx * mean) / (sxx - sx * mx);
    if (b < 0) b = 0;
    double t = mean + b * (n_pos - mx);
    return t > 0 ? t : mean;
}

/* C(N_POS): the plain step's cost now times the ratio of a pass over
 * N_POS positions to it; until a plain step was measured (a fixed K
 * verifies from the first step), the seconds measured per size. */
double dcost_compute(const draft_cost *c, int n_pos)
{
    if (n_pos < 1) n_pos = 1;
    if (n_pos > DCOST_MAX_POS) n_pos = DCOST_MAX_POS;
    if (!c->c[1].n) return fit(c->c, n_pos, 1 + 0.1 * (n_pos - 1)); /* nothing measured: any positive yardstick */
    return c->c[1].v * fit(c->r, n_pos, 1);
}

/* beta(N_POS): more positions, more compute per expert for reads to hide
 * behind, so it is measured per n (the nearest measured n's of 2 or more
 * until seen).  A size verified only a few times leans on the mean over
 * every pass once 4 were measured, else on the plain step's, which every
 * plain step measures.  Passes waited per missing byte 3-4x as long as
 * plain steps (tinymoe, 25% cached: a pass also waits for the pilot's
 * guesses still in flight for its positions), and with passes of 2 to 17
 * positions few sizes are seen 4 times in a run, so leaning on the plain
 * step priced most passes at a third of their reads.  Read waits are
 * bursty (a throttled or shared disk serves a step's reads in 2 ms or in
 * 90 ms), and one lucky pass taken at its word made a K look free and
 * chose it until it had been measured often enough to undo that. */
static double beta_of(const draft_cost *c, int n_pos)
{
    enum { TRUSTED = 4 }; /* samples after which a beta stands alone */
    double plain = c->beta[1].n ? ratio_of(&c->beta[1]) : 1;
    if (n_pos <= 1) return plain;
    double prior = c->beta_pass.n >= TRUSTED ? ratio_of(&c->beta_pass) : plain;
    int m = NEAREST(c->beta, n_pos, 2);
    if (!m) return prior;
    const dcost_ratio *b = &c->beta[m];
    if (b->n >= TRUSTED) return ratio_of(b);
    double w = (double)b->n / TRUSTED;
    return w * ratio_of(b) + (1 - w) * prior;
}

bool dcost_priced(const draft_cost *c)
{
    for (int j = 1; j <= DCOST_MAX_POS; j++) /* the points dcost_compute draws its line through */
        if (c->c[j].n && (j == 1 || c->c[j].n >= 2)) return true;
    return false;
}

double dcost_predict_tok(const draft_cost *c, int n_pos, int n_tok)
{
    double t = dcost_compute(c, n_pos);
    if (n_pos < 1) n_pos = 1;
    if (n_pos > DCOST_MAX_POS) n_pos = DCOST_MAX_POS;
    if (n_tok < 1 || n_tok > n_pos) n_tok = n_pos;
    if (c->rate > 0) t += beta_of(c, n_pos) * dcost_missing_bytes(c, n_tok) / c->rate;
    return t;
}

double dcost_predict(const draft_cost *c, int n_pos) { return dcost_predict_tok(c, n_pos, n_pos); }

int dcost_choose(const draft_cost *c, const double *tokens, const int *n_tok, double draft_s, int k_min, int k_max,
                 double margin)
{
    double t0 = dcost_predict(c, 1), best = t0 > 0 ? 1 / t0 : 0;
    int bk = 0;
    if (k_min < 1) k_min = 1;
    if (k_max > DCOST_MAX_POS - 1) k_max = DCOST_MAX_POS - 1;
    for (int k = k_min; k <= k_max; k++) {
        double t = dcost_predict_tok(c, k + 1, n_tok ? n_tok[k] : k + 1) + k * draft_s;
        double r = t > 0 ? tokens[k] / t : 0;
        if (r > best * (bk ? 1 : margin)) best = r, bk = k;
    }
    return bk;
}
