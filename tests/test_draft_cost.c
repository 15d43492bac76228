/* The verification cost model (src/decode/draft_cost.h) driven by synthetic
 * measurements; every expected figure and choice is worked out by hand in
 * the comments (k = 8 of E = 128 experts, 1 MB per expert of every MoE
 * layer, a 1 GB/s disk: one missing expert costs 1 ms of reading). */
#include <math.h>

#include "decode/draft_cost.h"
#include "t.h"

static const double MS = 1e-3;

#define NEAR(a, b) (fabs((a) - (b)) <= 1e-9 + 1e-9 * fabs(b))

/* A model read at 1 GB/s whose plain steps found a share FIRST_HIT of
 * their 8 experts held. */
static void streamed(draft_cost *c, double first_hit)
{
    dcost_init(c, 8, 128, 1e6);
    dcost_set_rate(c, 1e9);
    dcost_observe_routes(c, 1, 1, 8, first_hit, 0);
}

/* In RAM: the choice is tokens / (C(K + 1) + K * draft) against 1 / C(1). */
static void case_ram(void)
{
    t_begin("draft cost: in RAM, measured compute only");
    draft_cost c;
    dcost_init(&c, 8, 128, 1e6);
    for (int i = 0; i < 2; i++) {
        dcost_observe_time(&c, 1, 1.0 * MS, 0, 0);
        dcost_observe_time(&c, 2, 1.2 * MS, 0, 0);
        dcost_observe_time(&c, 3, 1.4 * MS, 0, 0);
    }
    T_CHECK(NEAR(dcost_predict(&c, 3), 1.4 * MS), "T(3) %g", dcost_predict(&c, 3));
    T_CHECK(dcost_missing_bytes(&c, 3) == 0, "nothing is read in RAM");
    /* K=0: 1 / 1.0 = 1.0 tok/ms; K=1: 1.8 / 1.3 = 1.385; K=2: 2.4 / 1.6 = 1.5 */
    double tok[3] = {1, 1.8, 2.4};
    T_CHECK(dcost_choose(&c, tok, NULL, 0.1 * MS, 1, 2, 1.03) == 2, "K=2 wins");
    /* K=1 alone: 1.33 / 1.3 = 1.023 tok/ms, short of 1.03 x the plain step */
    double tok2[2] = {1, 1.33};
    T_CHECK(dcost_choose(&c, tok2, NULL, 0.1 * MS, 1, 1, 1.03) == 0, "below the margin: plain");
    /* without the margin it pays */
    T_CHECK(dcost_choose(&c, tok2, NULL, 0.1 * MS, 1, 1, 1.0) == 1, "above 1.0: K=1");
    /* an unmeasured n: the line through (1, 1.0) (2, 1.2) (3, 1.4) ms gives 1.8 ms at n = 5 */
    T_CHECK(NEAR(dcost_compute(&c, 5), 1.8 * MS), "C(5) %g", dcost_compute(&c, 5));
    t_end();
}

/* Streaming, the plain step and one K = 1 verification measured: h1 = 0.75,
 * a plain step misses 8 x 0.25 = 2 experts (2 ms; waited 2 ms: beta 1). */
static void stream_base(draft_cost *c, double extra_hit)
{
    streamed(c, 0.75);
    dcost_observe_time(c, 1, 3.0 * MS, 2.0 * MS, 2e6);
    /* four K = 1 verifications (a size seen once is not yet trusted, nor
     * the union's hit share before four): 14 distinct, the 6 beyond the
     * first position's held at EXTRA_HIT */
    for (int i = 0; i < 4; i++) {
        dcost_observe_routes(c, 2, 2, 14, 0.75, extra_hit);
        double miss = 2 + 6 * (1 - extra_hit);
        dcost_observe_time(c, 2, 1.2 * MS + miss * MS, miss * MS, miss * 1e6);
    }
}

static void case_stream_union_costs(void)
{
    t_begin("draft cost: streaming, the union's misses make drafting lose");
    draft_cost c;
    stream_base(&c, 0.5);
    T_CHECK(NEAR(dcost_predict(&c, 1), 3.0 * MS), "T(1) %g", dcost_predict(&c, 1));
    /* n = 2: 2 + 6 x 0.5 = 5 missing -> 5 MB; C(2) = 1.2 ms: 6.2 ms */
    T_CHECK(NEAR(dcost_missing_bytes(&c, 2), 5e6), "missing(2) %g", dcost_missing_bytes(&c, 2));
    T_CHECK(NEAR(dcost_predict(&c, 2), 6.2 * MS), "T(2) %g", dcost_predict(&c, 2));
    /* n = 3, unmeasured: uniform unions 15.5 (n=2) and 22.53125 (n=3);
     * overlap (14 - 8) / (15.5 - 8) = 0.8, so u(3) = 8 + 0.8 x 14.53125 =
     * 19.625; missing 2 + 11.625 x 0.5 = 7.8125; C(3) on the line 1.4 ms */
    T_CHECK(NEAR(dcost_union(&c, 3), 19.625), "u(3) %g", dcost_union(&c, 3));
    T_CHECK(NEAR(dcost_predict(&c, 3), 9.2125 * MS), "T(3) %g", dcost_predict(&c, 3));
    /* acceptance 0.9: K=0 1/3 = 0.333; K=1 1.9/6.3 = 0.302; K=2 2.71/9.4125 = 0.288 */
    double tok[3] = {1, 1.9, 2.71};
    T_CHECK(dcost_choose(&c, tok, NULL, 0.1 * MS, 1, 2, 1.03) == 0, "plain wins");
    t_end();
}

/* The union follows distinct tokens: a pass over a run of one token reads
 * about one position's experts. */
static void case_repeated_tokens(void)
{
    t_begin("draft cost: streaming, a pass over one repeated token is priced by its one token's union");
    draft_cost c;
    stream_base(&c, 0.5);
    /* m = 1: only the first position's 2 missing experts: C(2) 1.2 + 2 ms */
    T_CHECK(NEAR(dcost_predict_tok(&c, 2, 1), 3.2 * MS), "T(2, m 1) %g", dcost_predict_tok(&c, 2, 1));
    T_CHECK(NEAR(dcost_predict_tok(&c, 2, 2), dcost_predict(&c, 2)), "m = n is T(n)");
    /* 3 positions of 2 tokens: the compute of 3 (1.4 ms on the line), the union of 2 (5 missing) */
    T_CHECK(NEAR(dcost_predict_tok(&c, 3, 2), 6.4 * MS), "T(3, m 2) %g", dcost_predict_tok(&c, 3, 2));
    /* acceptance 0.9: K=0 1/3 = 0.333; K=2 2.71/(6.4 + 0.2) = 0.411 tok/ms,
     * where 3 distinct tokens (9.4125 ms) lose */
    double tok[3] = {1, 1.9, 2.71};
    int n_tok[3] = {1, 2, 2};
    T_CHECK(dcost_choose(&c, tok, n_tok, 0.1 * MS, 2, 2, 1.03) == 2, "K=2 over 2 tokens wins");
    T_CHECK(dcost_choose(&c, tok, NULL, 0.1 * MS, 2, 2, 1.03) == 0, "K=2 over 3 tokens loses");
    /* a pass's routes count toward its distinct tokens' union: 3 positions
     * of 2 tokens, 12 experts: u(2) 14 -> 13.5, u(3) still unmeasured */
    dcost_observe_routes(&c, 3, 2, 12, 0.75, 0.5);
    T_CHECK(NEAR(dcost_union(&c, 2), 13.5), "u(2) %g", dcost_union(&c, 2));
    T_CHECK(NEAR(dcost_union(&c, 3), 8 + (13.5 - 8) / 7.5 * 14.53125), "u(3) %g", dcost_union(&c, 3));
    t_end();
}

static void case_stream_cached_union(void)
{
    t_begin("draft cost: streaming, a cached union lets drafting pay");
    draft_cost c;
    stream_base(&c, 1.0);
    /* hx = 1: every n misses only the first position's 2 experts */
    T_CHECK(NEAR(dcost_predict(&c, 2), 3.2 * MS), "T(2) %g", dcost_predict(&c, 2));
    T_CHECK(NEAR(dcost_predict(&c, 3), 3.4 * MS), "T(3) %g", dcost_predict(&c, 3));
    /* K=0 0.333; K=1 1.9/3.3 = 0.576; K=2 2.71/3.6 = 0.753 tok/ms */
    double tok[3] = {1, 1.9, 2.71};
    T_CHECK(dcost_choose(&c, tok, NULL, 0.1 * MS, 1, 2, 1.03) == 2, "K=2 wins");
    T_CHECK(dcost_choose(&c, tok, NULL, 0.1 * MS, 1, 1, 1.03) == 1, "K=1 within k_max 1");
    t_end();
}

static void case_overlap_hides_reads(void)
{
    t_begin("draft cost: waits per read second are measured (beta)");
    draft_cost c;
    streamed(&c, 0.5);
    /* 4 missing (4 ms of reading) waited only 1 ms: beta 0.25; C(1) 1 ms */
    dcost_observe_time(&c, 1, 2.0 * MS, 1.0 * MS, 4e6);
    T_CHECK(NEAR(dcost_predict(&c, 1), 2.0 * MS), "T(1) %g", dcost_predict(&c, 1));
    /* n = 2 unmeasured: uniform u = 15.5, hx taken as h1 = 0.5: 4 + 7.5 x 0.5
     * = 7.75 missing, waited 7.75 x 0.25 ms; C(2) = 1 x 1.1 (the prior slope) */
    T_CHECK(NEAR(dcost_predict(&c, 2), (1.1 + 7.75 * 0.25) * MS), "T(2) %g", dcost_predict(&c, 2));
    /* a K = 1 verification missing 8 experts waited 2 ms of their 8: beta(2)
     * = 0.25 too; then one waiting 6 ms: beta(2)'s mean (0.25 + 0.75) / 2 =
     * 0.5, n = 1 keeps 0.25, n = 3 takes n = 2's (the nearest).  Two
     * samples of 4 trusted: 2/4 x 0.5 + 2/4 x 0.25 (the plain step's) =
     * 0.375 */
    dcost_observe_time(&c, 2, 4.0 * MS, 2.0 * MS, 8e6);
    dcost_observe_time(&c, 2, 8.0 * MS, 6.0 * MS, 8e6);
    T_CHECK(NEAR(dcost_predict(&c, 1), 2.0 * MS), "T(1) %g", dcost_predict(&c, 1));
    /* C(2) = 2 ms (two samples of 2); 7.75 missing x 0.375 */
    T_CHECK(NEAR(dcost_predict(&c, 2), (2.0 + 7.75 * 0.375) * MS), "T(2) %g", dcost_predict(&c, 2));
    /* n = 3: C on the line (1, 1) (2, 2) = 3 ms; u = 22.53125, missing 4 +
     * 14.53125 x 0.5 = 11.265625, x 0.375 */
    T_CHECK(NEAR(dcost_predict(&c, 3), (3.0 + 11.265625 * 0.375) * MS), "T(3) %g", dcost_predict(&c, 3));
    /* two more waiting 3 ms of 8 (0.375): the mean of 0.25, 0.75, 0.375,
     * 0.375 = 0.4375, 4 samples, now its own */
    dcost_observe_time(&c, 2, 5.0 * MS, 3.0 * MS, 8e6);
    dcost_observe_time(&c, 2, 5.0 * MS, 3.0 * MS, 8e6);
    T_CHECK(NEAR(dcost_predict(&c, 3), (3.0 + 11.265625 * 0.4375) * MS), "T(3) trusted %g", dcost_predict(&c, 3));
    /* bimodal waits (all or nothing, the plain step's) average over 16
     * samples, not 4: after 40 alternating ones the last is not a swing */
    for (int i = 0; i < 40; i++) dcost_observe_time(&c, 1, (1.0 + (i & 1) * 4.0) * MS, (i & 1) * 4.0 * MS, 4e6);
    double b1 = (dcost_predict(&c, 1) - 1.0 * MS) / (4.0 * MS); /* C(1) = 1 ms, 4 ms of reading */
    T_CHECK(b1 > 0.46 && b1 < 0.54, "beta(1) %g after alternating 0 and 1", b1);
    /* a dense model: nothing missing whatever the rate */
    dcost_init(&c, 0, 0, 0);
    dcost_set_rate(&c, 1e9);
    T_CHECK(dcost_missing_bytes(&c, 4) == 0, "dense: no reads");
    t_end();
}

/* Waits are weighed by the reading they waited for: a step that missed
 * one expert still waits for the reads in flight around it, and must not
 * count as much as one that missed eight. */
static void case_beta_by_bytes(void)
{
    t_begin("draft cost: waits per read second are weighed by bytes");
    draft_cost c;
    streamed(&c, 0.5);
    /* alternately 1 MB missing waiting 2 ms (2 per read second) and 8 MB
     * waiting 4 ms (0.5): (2 + 4) / (1 + 8) = 2/3, where the mean of the
     * ratios is 1.25 */
    for (int i = 0; i < 8; i++)
        dcost_observe_time(&c, 1, (i & 1 ? 5.0 : 3.0) * MS, (i & 1 ? 4.0 : 2.0) * MS, i & 1 ? 8e6 : 1e6);
    /* T(1) = C(1) 1 ms + 2/3 x 4 MB missing (h1 0.5) / 1 GB/s */
    T_CHECK(NEAR(dcost_predict(&c, 1), (1.0 + 4.0 * 2 / 3) * MS), "T(1) %g", dcost_predict(&c, 1));
    t_end();
}

/* The union's hit share leans on the first position's until four passes
 * measured it: the first passes of a run find the cache cold. */
static void case_hx_trust(void)
{
    t_begin("draft cost: the union's hit share is trusted after four passes");
    draft_cost c;
    streamed(&c, 0.75);
    /* no pass: uniform routing's 15.5 for 2 tokens, the 7.5 beyond the
     * first position's held as often as its own: 2 + 7.5 x 0.25 = 3.875 */
    T_CHECK(NEAR(dcost_missing_bytes(&c, 2), 3.875e6), "no pass: missing(2) %g", dcost_missing_bytes(&c, 2));
    dcost_observe_routes(&c, 2, 2, 14, 0.75, 0.0);
    /* one pass held none of its 6 extra: hx 1/4 x 0 + 3/4 x 0.75 = 0.5625,
     * 2 + 6 x 0.4375 = 4.625 */
    T_CHECK(NEAR(dcost_missing_bytes(&c, 2), 4.625e6), "one pass: missing(2) %g", dcost_missing_bytes(&c, 2));
    for (int i = 0; i < 3; i++) dcost_observe_routes(&c, 2, 2, 14, 0.75, 0.0);
    /* four: hx 0 stands, 2 + 6 = 8 */
    T_CHECK(NEAR(dcost_missing_bytes(&c, 2), 8e6), "four passes: missing(2) %g", dcost_missing_bytes(&c, 2));
    t_end();
}

/* Read waits are bursty both ways (a throttled disk serves a step's reads
 * in 2 ms or in 90 ms): one verification of a new size that happened to
 * wait for nothing must not make that size look free. */
static void case_lucky_pass(void)
{
    t_begin("draft cost: one lucky pass does not make a K free");
    draft_cost c;
    dcost_init(&c, 8, 128, 1e6);
    dcost_set_rate(&c, 1e9);
    for (int i = 0; i < 20; i++) { /* plain steps: 2 of 8 missing, 2 ms read, waited in full */
        dcost_observe_routes(&c, 1, 1, 8, 0.75, 0);
        dcost_observe_time(&c, 1, 3.0 * MS, 2.0 * MS, 2e6);
    }
    /* K = 2 passes (3 positions) whose extra experts all missed: three
     * missing 10 MB waited 10 ms, the fourth 0.1 ms; beta(3), the mean
     * wait over the mean reading, (3 x 10 + 0.1) / 40 = 0.7525 */
    for (int i = 0; i < 4; i++) {
        dcost_observe_routes(&c, 3, 3, 20, 0.75, 0.0);
        dcost_observe_time(&c, 3, i < 3 ? 11.5 * MS : 1.5 * MS, i < 3 ? 10.0 * MS : 0.1 * MS, 10e6);
    }
    double miss = dcost_missing_bytes(&c, 3), want = dcost_compute(&c, 3) + 0.7525 * miss / 1e9;
    T_CHECK(NEAR(dcost_predict(&c, 3), want), "T(3) %g, want %g", dcost_predict(&c, 3), want);
    /* so drafting 2 at acceptance 0.9 still loses to the plain step */
    double tok[3] = {1, 1.9, 2.71};
    T_CHECK(dcost_choose(&c, tok, NULL, 0.01 * MS, 1, 2, 1.03) == 0, "plain wins, chose %d",
            dcost_choose(&c, tok, NULL, 0.01 * MS, 1, 2, 1.03));
    t_end();
}

/* Under streaming a pass waits for more of its reads than a plain step
 * (its union's guesses queue with its misses), so a size seen a few times
 * leans on what passes of every size waited once they are known, not on
 * the plain step's: passes of 3 positions waited their reads in full
 * (beta 1, 4 samples), plain steps a quarter (0.25); one pass of 9 waiting
 * half its 20 ms: 1/4 x 0.5 + 3/4 x 50 / 60 (the 5 passes' waits over
 * their reading) = 0.75, where leaning on the plain step gave 1/4 x 0.5 +
 * 3/4 x 0.25 = 0.3125. */
static void case_pass_beta(void)
{
    t_begin("draft cost: a size seen a few times leans on every pass's waits");
    draft_cost c;
    streamed(&c, 0.5);
    for (int i = 0; i < 20; i++) dcost_observe_time(&c, 1, 2.0 * MS, 1.0 * MS, 4e6);
    for (int i = 0; i < 4; i++) dcost_observe_time(&c, 3, 12.0 * MS, 10.0 * MS, 10e6);
    dcost_observe_time(&c, 9, 14.0 * MS, 10.0 * MS, 20e6);
    double want = dcost_compute(&c, 9) + 0.75 * dcost_missing_bytes(&c, 9) / 1e9;
    T_CHECK(NEAR(dcost_predict(&c, 9), want), "T(9) %g, want %g", dcost_predict(&c, 9), want);
    /* the plain step keeps its own */
    T_CHECK(NEAR(dcost_predict(&c, 1), (1.0 + 0.25 * 4) * MS), "T(1) %g", dcost_predict(&c, 1));
    t_end();
}

/* Step times are noisy upwards only: one slow pass must not price a size
 * out for good (it would never be chosen, so never measured again). */
static void case_slow_outlier(void)
{
    t_begin("draft cost: one slow pass does not price a K out");
    draft_cost c;
    dcost_init(&c, 8, 128, 1e6);
    for (int i = 0; i < 8; i++) dcost_observe_time(&c, 1, 1.0 * MS, 0, 0);
    dcost_observe_time(&c, 3, 4.0 * MS, 0, 0);
    /* n = 3 seen once is left out of the line: the plain step's 1 ms with
     * the prior slope, 1 x (1 + 0.1 x 2) */
    T_CHECK(NEAR(dcost_compute(&c, 3), 1.2 * MS), "C(3) %g", dcost_compute(&c, 3));
    /* K = 2 at acceptance 0.8 then pays: 2.44 / 1.2 against 1 / 1.0 */
    double tok[3] = {1, 1.8, 2.44};
    T_CHECK(dcost_choose(&c, tok, NULL, 0, 1, 2, 1.03) == 2, "K=2 is tried again");
    /* the second sample: the first two give their minimum */
    dcost_observe_time(&c, 3, 1.5 * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 3), 1.5 * MS), "C(3) %g", dcost_compute(&c, 3));
    /* then the median of the recent ones: 4.0 1.5 1.4 -> 1.5; with 1.6,
     * (1.5 + 1.6) / 2; another slow one (3.5) moves it to the next sample
     * up, 1.6, not towards itself */
    dcost_observe_time(&c, 3, 1.4 * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 3), 1.5 * MS), "C(3) %g", dcost_compute(&c, 3));
    dcost_observe_time(&c, 3, 1.6 * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 3), 1.55 * MS), "C(3) %g", dcost_compute(&c, 3));
    dcost_observe_time(&c, 3, 3.5 * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 3), 1.6 * MS), "C(3) %g", dcost_compute(&c, 3));
    t_end();
}

/* Times that spread by nature (on two threads one vCPU often runs at half
 * speed for seconds) are priced at their middle, not their fast end: the
 * median of the last 8, where an average moving 1/2 down and 1/8 up sat
 * near the fastest fifth and drafting, priced too cheap, lost. */
static void case_spread(void)
{
    t_begin("draft cost: times that spread by nature are priced at their middle");
    draft_cost c;
    dcost_init(&c, 8, 128, 1e6);
    for (int i = 0; i < 8; i++) dcost_observe_time(&c, 1, 1.0 * MS, 0, 0);
    for (int i = 0; i < 16; i++) dcost_observe_time(&c, 3, (i % 4 ? 2.0 : 1.0) * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 3), 2.0 * MS), "three slow passes in four: C(3) %g", dcost_compute(&c, 3));
    for (int i = 0; i < 16; i++) dcost_observe_time(&c, 3, (i & 1 ? 2.0 : 1.0) * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 3), 1.5 * MS), "half and half: C(3) %g", dcost_compute(&c, 3));
    t_end();
}

/* The line through the measured sizes weights each by its samples (up to
 * 8): (1, 1.0 ms) x 8, (2, 1.5) x 2, (3, 1.5) x 2: weighted means x 1.5,
 * y 14/12; slope (23 - 18 x 14/12) / (34 - 18 x 1.5) = 2/7, so C(4) =
 * 14/12 + 2.5 x 2/7 = 1.880952... ms (unweighted: 1.8333). */
static void case_weighted_line(void)
{
    t_begin("draft cost: the compute line weights sizes by their samples");
    draft_cost c;
    dcost_init(&c, 8, 128, 1e6);
    for (int i = 0; i < 20; i++) dcost_observe_time(&c, 1, 1.0 * MS, 0, 0);
    for (int i = 0; i < 2; i++) {
        dcost_observe_time(&c, 2, 1.5 * MS, 0, 0);
        dcost_observe_time(&c, 3, 1.5 * MS, 0, 0);
    }
    double want = (14.0 / 12 + 2.5 * 2.0 / 7) * MS;
    T_CHECK(NEAR(dcost_compute(&c, 4), want), "C(4) %g, want %g", dcost_compute(&c, 4), want);
    t_end();
}

/* A pass over n positions is priced against the plain step's cost now:
 * the tinymoe n-gram run that turned into a run of one token made plain
 * steps 0.87 -> 0.55 ms (its experts stayed in the CPU's caches), and
 * verifications priced from the two 2-position passes of the stretch
 * before (1.28-1.44 ms) were never chosen again, so never re-measured. */
static void case_relative(void)
{
    t_begin("draft cost: a pass is priced against the plain step's cost now");
    draft_cost c;
    dcost_init(&c, 8, 128, 1e6);
    for (int i = 0; i < 8; i++) dcost_observe_time(&c, 1, 1.0 * MS, 0, 0);
    for (int i = 0; i < 2; i++) dcost_observe_time(&c, 3, 2.0 * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 3), 2.0 * MS), "C(3) %g", dcost_compute(&c, 3));
    for (int i = 0; i < 30; i++) dcost_observe_time(&c, 1, 0.5 * MS, 0, 0);
    T_CHECK(NEAR(dcost_compute(&c, 1), 0.5 * MS), "C(1) %g", dcost_compute(&c, 1));
    T_CHECK(NEAR(dcost_compute(&c, 3), 1.0 * MS), "C(3) follows it: %g", dcost_compute(&c, 3));
    /* the line through the ratios: (1, 1) and (3, 2), so C(5) = 0.5 x 3 */
    T_CHECK(NEAR(dcost_compute(&c, 5), 1.5 * MS), "C(5) %g", dcost_compute(&c, 5));
    t_end();
}

/* Before any pass it could draw its line through, the model only ranks
 * sizes by a yardstick, and says so: a size seen once is no basis, the
 * plain step or a size seen twice is. */
static void case_priced(void)
{
    t_begin("draft cost: a prediction is priced only once a pass was measured");
    draft_cost c;
    dcost_init(&c, 8, 128, 1e6);
    T_CHECK(!dcost_priced(&c), "a fresh model claims to price a pass");
    dcost_observe_time(&c, 5, 2.0 * MS, 0, 0);
    T_CHECK(!dcost_priced(&c), "one pass of 5 positions is not a basis (dcost_compute leaves it out)");
    dcost_observe_time(&c, 5, 2.0 * MS, 0, 0);
    T_CHECK(dcost_priced(&c) && fabs(dcost_predict(&c, 5) - 2.0 * MS) < 1e-9, "two passes of 5: %g s predicted",
            dcost_predict(&c, 5));
    dcost_init(&c, 8, 128, 1e6);
    dcost_observe_time(&c, 1, 1.0 * MS, 0, 0);
    T_CHECK(dcost_priced(&c), "a measured plain step is a basis");
    t_end();
}

int main(void)
{
    case_priced();
    case_relative();
    case_spread();
    case_ram();
    case_stream_union_costs();
    case_stream_cached_union();
    case_repeated_tokens();
    case_overlap_hides_reads();
    case_beta_by_bytes();
    case_hx_trust();
    case_lucky_pass();
    case_slow_outlier();
    case_weighted_line();
    case_pass_beta();
    return t_done();
}
