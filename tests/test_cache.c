/* The expert cache's policies and the offline optimum: Belady's MIN equals
 * an exhaustive search over every eviction choice on small sequences; AHEAD
 * plays cyclic layer-by-layer access the way MIN does where LRU and LFRU
 * cannot, never evicts pinned slots and refuses prefetches that would
 * displace something needed sooner; routing traces written by the recorder
 * load back as written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experts/belady.h"
#include "experts/cache.h"
#include "experts/trace.h"
#include "t.h"

/* The fewest misses of any demand-paging schedule: every eviction choice
 * tried (cached set as a bit mask). */
static int brute_min(const int32_t *keys, int n, int i, unsigned set, int cap)
{
    if (i == n) return 0;
    unsigned bit = 1u << keys[i];
    if (set & bit) return brute_min(keys, n, i + 1, set, cap);
    if (__builtin_popcount(set) < cap) return 1 + brute_min(keys, n, i + 1, set | bit, cap);
    int best = 1 << 30;
    for (unsigned v = set; v; v &= v - 1) {
        unsigned low = v & -v;
        int m = brute_min(keys, n, i + 1, (set & ~low) | bit, cap);
        if (m < best) best = m;
    }
    return 1 + best;
}

static void belady_is_optimal(void)
{
    t_begin("belady: MIN equals an exhaustive search (200 random sequences)");
    uint32_t rng = 12345;
    uint8_t miss[16];
    for (int trial = 0; trial < 200; trial++) {
        int n_keys = 3 + trial % 4, cap = 1 + trial % 3, n = 14;
        int32_t keys[16];
        for (int i = 0; i < n; i++) rng = rng * 1103515245u + 12345u, keys[i] = (int32_t)((rng >> 16) % n_keys);
        sl_err err;
        int64_t got = belady_misses(keys, n, n_keys, cap, miss, &err);
        int want = brute_min(keys, n, 0, 0, cap);
        T_CHECK(got == want, "trial %d (%d keys, %d slots): belady %lld, exhaustive %d", trial, n_keys, cap,
                (long long)got, want);
        int64_t sum = 0;
        for (int i = 0; i < n; i++) sum += miss[i];
        T_CHECK(sum == got, "trial %d: miss flags sum to %lld, count %lld", trial, (long long)sum, (long long)got);
    }
    uint8_t m1;
    sl_err err;
    int32_t k = 0;
    T_CHECK(belady_misses(&k, 1, 1, 0, &m1, &err) == 1 && m1 == 1, "capacity 0 misses everything");
    t_end();
}

/* One token walking N_LAYERS layers, each choosing expert CHOSEN(tok, l). */
static uint64_t run_cycle(cache_policy pol, int n_layers, int n_expert, int slots, int tokens,
                          int (*chosen)(int tok, int l), int32_t *log, int64_t *n_log)
{
    expert_cache *c;
    sl_err err;
    if (cache_create(&c, slots, n_layers, n_expert, pol, 64, &err)) return ~0ull;
    uint64_t misses = 0;
    for (int t = 0; t < tokens; t++) {
        cache_next_token(c);
        for (int l = 0; l < n_layers; l++) {
            int32_t e = chosen(t, l);
            cache_begin_layer(c, l, &e, 1);
            int s = cache_find(c, l, e);
            int64_t ev;
            if (s >= 0) cache_hit(c, s);
            else s = cache_admit(c, l, e, &ev), misses++;
            if (s >= 0) cache_unpin(c, s);
            if (log) log[(*n_log)++] = l * n_expert + e;
        }
    }
    cache_free(c);
    return misses;
}

static int expert0(int tok, int l) { (void)tok, (void)l; return 0; }

static void ahead_cyclic(void)
{
    t_begin("cache: ahead on a layer cycle larger than the cache (where LRU misses every time)");
    enum { LAYERS = 8, SLOTS = 6, TOKENS = 200 };
    static int32_t log[LAYERS * TOKENS];
    int64_t n_log = 0;
    uint64_t lru = run_cycle(CACHE_LRU, LAYERS, 4, SLOTS, TOKENS, expert0, log, &n_log);
    uint64_t ahead = run_cycle(CACHE_AHEAD, LAYERS, 4, SLOTS, TOKENS, expert0, NULL, NULL);
    uint8_t miss[LAYERS * TOKENS];
    sl_err err;
    int64_t opt = belady_misses(log, n_log, LAYERS * 4, SLOTS, miss, &err);
    T_CHECK(lru == (uint64_t)n_log, "lru: %llu misses of %lld (a loop one larger than the cache)",
            (unsigned long long)lru, (long long)n_log);
    T_CHECK(opt > 0 && (double)ahead <= 1.3 * (double)opt, "ahead %llu misses, optimum %lld", (unsigned long long)ahead,
            (long long)opt);
    t_end();
}

/* Skewed popularity: expert 0 of each layer is chosen every token, the
 * others in turn; the popular ones must stay. */
static int skewed(int tok, int l) { return (tok + l) % 3 ? 0 : 1 + (tok / 3 + l) % 7; }

static void ahead_skewed(void)
{
    t_begin("cache: ahead keeps the popular experts under skew");
    enum { LAYERS = 6, EXPERTS = 8, SLOTS = 8, TOKENS = 600 };
    static int32_t log[LAYERS * TOKENS];
    int64_t n_log = 0;
    uint64_t lru = run_cycle(CACHE_LRU, LAYERS, EXPERTS, SLOTS, TOKENS, skewed, log, &n_log);
    uint64_t ahead = run_cycle(CACHE_AHEAD, LAYERS, EXPERTS, SLOTS, TOKENS, skewed, NULL, NULL);
    uint64_t lfru = run_cycle(CACHE_LFRU, LAYERS, EXPERTS, SLOTS, TOKENS, skewed, NULL, NULL);
    static uint8_t miss[LAYERS * TOKENS];
    sl_err err;
    int64_t opt = belady_misses(log, n_log, LAYERS * EXPERTS, SLOTS, miss, &err);
    T_CHECK(ahead <= lru && ahead <= lfru, "ahead %llu misses, lru %llu, lfru %llu", (unsigned long long)ahead,
            (unsigned long long)lru, (unsigned long long)lfru);
    T_CHECK((double)ahead <= 1.3 * (double)opt, "ahead %llu misses, optimum %lld", (unsigned long long)ahead,
            (long long)opt);
    t_end();
}

static void ahead_pins_and_prefetch(void)
{
    t_begin("cache: ahead never evicts a pinned slot; a prefetch never displaces a sooner need");
    expert_cache *c;
    sl_err err;
    T_CHECK(cache_create(&c, 2, 4, 4, CACHE_AHEAD, 64, &err) == 0, "%s", err.msg);
    int64_t ev;
    cache_next_token(c);
    int32_t e = 1;
    cache_begin_layer(c, 0, &e, 1);
    int a = cache_admit(c, 0, 1, &ev), b = cache_admit(c, 0, 2, &ev);
    T_CHECK(a >= 0 && b >= 0 && a != b, "two free slots");
    T_CHECK(cache_admit(c, 0, 3, &ev) == -1, "both pinned: no slot");
    T_CHECK(cache_admit_prefetch(c, 1, 0, &ev) == -1, "both pinned: no prefetch");
    cache_unpin(c, a), cache_unpin(c, b);
    /* experts 1 and 2 of layer 0 used every token: each is needed at
     * layer 0's next turn; an expert never seen is not worth either */
    for (int t = 0; t < 50; t++) {
        cache_next_token(c);
        int32_t ids[2] = {1, 2};
        cache_begin_layer(c, 0, ids, 2);
        cache_hit(c, a), cache_hit(c, b);
        cache_unpin(c, a), cache_unpin(c, b);
        for (int l = 1; l < 4; l++) cache_begin_layer(c, l, NULL, 0);
    }
    cache_next_token(c);
    cache_begin_layer(c, 0, NULL, 0);
    T_CHECK(cache_admit_prefetch(c, 1, 3, &ev) == -1 && ev == -1, "prefetch of a cold expert displaced a hot one");
    T_CHECK(cache_find(c, 0, 1) == a && cache_find(c, 0, 2) == b, "hot experts still cached");
    T_CHECK(cache_hint_precision(c) > 0 && cache_hint_precision(c) <= 1, "precision estimate %g",
            cache_hint_precision(c));
    cache_free(c);
    expert_cache *bad;
    T_CHECK(cache_create(&bad, 4, 2, 2, CACHE_OPT, 64, &err) != 0 && strstr(err.msg, "future"),
            "opt refused online: %s", err.msg);
    T_CHECK(cache_policy_parse("ahead") == CACHE_AHEAD && cache_policy_parse("OPT") == CACHE_OPT &&
                cache_policy_parse("mru") == -1,
            "policy names");
    t_end();
}

static void trace_round_trip(void)
{
    t_begin("trace: a recorded run loads back (layers, ids sorted, predictions)");
    trace_rec *r;
    sl_err err;
    bool moe[3] = {true, false, true};
    T_CHECK(trace_rec_create(&r, 3, moe, 8, 2, &err) == 0, "%s", err.msg);
    int32_t toks[3] = {5, 6, 7}, ids[6] = {3, 1, 0, 7, 2, 4};
    trace_rec_tokens(r, toks, 3); /* a prefill of 3 positions */
    trace_rec_route(r, 0, ids, 3, 2);
    trace_rec_route(r, 2, ids, 3, 2);
    int32_t one = 9, d0[2] = {6, 5}, d2[2] = {1, 2}, h[2] = {5, 1};
    trace_rec_tokens(r, &one, 1); /* a decode step with a prediction for layer 2 */
    trace_rec_route(r, 0, d0, 1, 2);
    trace_rec_hint(r, 2, h, 2);
    trace_rec_route(r, 2, d2, 1, 2);
    char path[] = "/tmp/sluice-trace-XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0, "mkstemp");
    close(fd);
    T_CHECK(trace_rec_write(r, path, "m\"x.gguf", &err) == 0, "%s", err.msg);
    route_trace t;
    if (trace_load(&t, path, &err)) {
        T_CHECK(0, "%s", err.msg);
    } else {
        T_CHECK(t.n_tokens == 4 && t.n_layers == 2 && t.n_expert == 8 && t.n_used == 2, "geometry %d %d %d %d",
                t.n_tokens, t.n_layers, t.n_expert, t.n_used);
        const int16_t *a = trace_at(&t, 0, 0), *b = trace_at(&t, 3, 1);
        T_CHECK(a[0] == 1 && a[1] == 3 && b[0] == 1 && b[1] == 2, "ids %d %d / %d %d", a[0], a[1], b[0], b[1]);
        T_CHECK(t.pred && t.pred[(3 * 2 + 1) * 2] == 5 && t.pred[(3 * 2 + 1) * 2 + 1] == 1 && t.pred[0] == -1,
                "predictions");
        trace_free(&t);
    }
    unlink(path);
    T_CHECK(trace_rec_write(r, "/nonexistent-dir/x.json", NULL, &err) != 0 && strstr(err.msg, "/nonexistent-dir"),
            "a bad path names itself: %s", err.msg);
    trace_rec_free(r);
    t_end();
}

int main(void)
{
    belady_is_optimal();
    ahead_cyclic();
    ahead_skewed();
    ahead_pins_and_prefetch();
    trace_round_trip();
    return t_done();
}
