/* sluice replay: run a routing trace through the expert cache at several
 * sizes and policies, with no model and no I/O, to compare hit rates.
 * With heat (learnt from part of the trace, or read from a heat file) it
 * adds LFRU seeded with the heat, and seeded plus a pinned tier. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "experts/trace.h"

static void replay_usage(void)
{
    printf("usage: sluice replay --trace FILE [--slots N[,N...]] [--policy lru,lfru,ahead,opt] [--half-life T] [--warmup T]\n"
           "                     [--heat-from-tokens A:B | --heat FILE] [--tokens A:B] [--run-len T] [--pin-share F]\n"
           "                     [--heat-half-life T]\n"
           "  Replays an expert-routing trace (shared/traces JSON schema) through the\n"
           "  expert cache and prints the hit rate per cache size and policy.\n"
           "  --slots     cache sizes in experts (default: 3%%,6%%,12%%,24%%,48%% of all experts)\n"
           "  --policy    comma-separated policies: lru, lfru, ahead, opt (Belady's MIN,\n"
           "              the offline optimum); default lru,lfru,ahead,opt; a trace with the\n"
           "              pilot's predictions (run --trace-out) adds ahead+hints\n"
           "  --half-life T  LFRU use-count half-life in tokens (default 64)\n"
           "  --warmup    tokens replayed before counting, per run (default 0)\n"
           "  --tokens    replay only tokens [A, B) (default: all, or from B of --heat-from-tokens 0:B)\n"
           "  --run-len   replay the range as separate runs of T tokens, each from a cold cache\n"
           "  heat (adds columns lfru+heat: LFRU counts seeded with the heat, and\n"
           "  lfru+heat+pin: also the hottest experts pinned in part of the slots):\n"
           "  --heat-from-tokens A:B  learn heat from tokens [A, B) of the trace (e.g. 0:4096)\n"
           "  --heat FILE             read heat from a heat file (sluice heat) instead\n"
           "  --heat-half-life P      half-life of learnt heat in passes (default %.0f)\n"
           "  --pin-share F           share of the slots pinned (default 0.5; at most slots - experts per token)\n",
           HEAT_DEFAULT_HALF_LIFE);
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0) return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int parse_range(const char *s, int r[2])
{
    char *end;
    long a = strtol(s, &end, 10);
    if (end == s || *end != ':' || a < 0) return -1;
    const char *p = end + 1;
    long b = strtol(p, &end, 10);
    if (end == p || *end || b <= a) return -1;
    r[0] = (int)a, r[1] = (int)b;
    return 0;
}

typedef struct {
    const char *trace, *policies, *heat_file;
    int slots[32], n_slots, warmup, run_len;
    int heat_from[2], tokens[2];
    double half_life, heat_half_life, pin_share;
} replay_args;

/* One column: a policy, optionally seeded with heat and with pins. */
typedef struct {
    char name[24];
    cache_policy policy;
    int heat, pin, hints;
} variant;

/* Hit rate of variant V at N slots over the replay range, run by run. */
static int replay_variant(const route_trace *t, const replay_args *a, const heat_table *h, const variant *v, int n,
                          double *rate, sl_err *err)
{
    int32_t keys[4096];
    replay_opts o = {.n_slots = n, .policy = v->policy, .half_life = a->half_life, .heat = v->heat ? h : NULL,
                     .hints = v->hints};
    if (v->pin) {
        int max = (int)(a->pin_share * n), room = n - t->n_used;
        if (max > room) max = room;
        if (max > 4096) max = 4096;
        heat_pin_opts po = heat_pin_defaults();
        po.min_passes = 0; /* the table reports the effect; the guard is for real runs */
        o.n_pinned = heat_pick_pins(h, max, &po, keys, NULL, 0);
        o.pinned = keys;
    }
    uint64_t hits = 0, misses = 0;
    int step = a->run_len > 0 ? a->run_len : a->tokens[1] - a->tokens[0];
    for (int s = a->tokens[0]; s < a->tokens[1]; s += step) {
        o.start = s, o.first = s + a->warmup;
        o.end = s + step < a->tokens[1] ? s + step : a->tokens[1];
        cache_counters c;
        if (trace_replay_ex(t, &o, &c, err)) return -1;
        hits += c.hits, misses += c.misses;
    }
    *rate = hits + misses ? (double)hits / (double)(hits + misses) : 0;
    return 0;
}

static int parse_args(replay_args *a, int argc, char **argv)
{
    *a = (replay_args){.policies = "lru,lfru,ahead,opt", .half_life = 64, .heat_half_life = HEAT_DEFAULT_HALF_LIFE,
                       .pin_share = 0.5};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) return replay_usage(), 0;
        if (!v) return cli_fail("replay: option '%s' needs a value (see --help)", o), -1;
        int bad = 0;
        if (!strcmp(o, "--trace")) a->trace = v;
        else if (!strcmp(o, "--slots")) bad = (a->n_slots = parse_list(v, a->slots, 32)) < 0;
        else if (!strcmp(o, "--policy")) a->policies = v;
        else if (!strcmp(o, "--half-life")) a->half_life = atof(v);
        else if (!strcmp(o, "--warmup")) bad = (a->warmup = atoi(v)) < 0;
        else if (!strcmp(o, "--tokens")) bad = parse_range(v, a->tokens);
        else if (!strcmp(o, "--run-len")) bad = (a->run_len = atoi(v)) <= 0;
        else if (!strcmp(o, "--heat-from-tokens")) bad = parse_range(v, a->heat_from);
        else if (!strcmp(o, "--heat")) a->heat_file = v;
        else if (!strcmp(o, "--heat-half-life")) bad = (a->heat_half_life = atof(v)) < 0;
        else if (!strcmp(o, "--pin-share")) bad = (a->pin_share = atof(v)) < 0 || a->pin_share > 1;
        else return cli_fail("replay: unknown option '%s'", o), -1;
        if (bad) return cli_fail("replay: bad value '%s' for %s", v, o), -1;
        i++;
    }
    if (!a->trace) return cli_fail("replay: --trace FILE is required"), -1;
    if (a->heat_file && a->heat_from[1]) return cli_fail("replay: --heat and --heat-from-tokens exclude each other"), -1;
    return 1;
}

/* Learns heat from a token range, or reads it from a file. */
static int get_heat(const route_trace *t, const replay_args *a, heat_table *h, sl_err *err)
{
    uint8_t id[HEAT_ID_BYTES] = {0};
    if (a->heat_file) {
        heat_status st = heat_load(h, a->heat_file, NULL, t->n_layers, t->n_expert, err);
        if (st == HEAT_ABSENT) sl_errf(err, "%s: no such heat file", a->heat_file);
        return st == HEAT_LOADED ? 0 : -1;
    }
    heat_recorder *r;
    if (heat_recorder_create(&r, id, t->n_layers, t->n_expert, a->heat_half_life, err)) return -1;
    trace_record_heat(t, a->heat_from[0], a->heat_from[1], r);
    int rc = heat_recorder_snapshot(r, h, err);
    heat_recorder_free(r);
    return rc;
}

static int make_variants(const replay_args *a, int with_heat, int with_pred, variant *v, int max)
{
    int n = 0;
    char list[128];
    snprintf(list, sizeof list, "%s", a->policies);
    for (char *p = strtok(list, ","); p && n < max; p = strtok(NULL, ",")) {
        int pol = cache_policy_parse(p);
        if (pol < 0) return cli_fail("replay: unknown policy '%s' (lru, lfru, ahead, opt)", p), -1;
        v[n] = (variant){.policy = (cache_policy)pol};
        snprintf(v[n++].name, sizeof v->name, "%s", p);
        if (pol == CACHE_AHEAD && with_pred && n < max) {
            v[n] = (variant){.policy = CACHE_AHEAD, .hints = 1};
            snprintf(v[n++].name, sizeof v->name, "ahead+hints");
        }
    }
    if (with_heat && n + 2 <= max) {
        v[n++] = (variant){.name = "lfru+heat", .policy = CACHE_LFRU, .heat = 1};
        v[n++] = (variant){.name = "lfru+heat+pin", .policy = CACHE_LFRU, .heat = 1, .pin = 1};
    }
    return n;
}

static int col_width(const variant *v)
{
    int n = (int)strlen(v->name);
    return n < 9 ? 9 : n;
}

static int print_table(const route_trace *t, const replay_args *a, const heat_table *h, const variant *v, int nv)
{
    int total = t->n_layers * t->n_expert;
    printf("%8s %8s", "slots", "share");
    for (int j = 0; j < nv; j++) printf(" %*s", col_width(&v[j]), v[j].name);
    printf("\n");
    for (int i = 0; i < a->n_slots; i++) {
        printf("%8d %7.1f%%", a->slots[i], 100.0 * a->slots[i] / total);
        for (int j = 0; j < nv; j++) {
            double rate;
            sl_err err;
            if (replay_variant(t, a, h, &v[j], a->slots[i], &rate, &err)) return cli_fail("%s", err.msg);
            printf(" %*.1f%%", col_width(&v[j]) - 1, 100.0 * rate);
        }
        printf("\n");
    }
    return 0;
}

int cmd_replay(int argc, char **argv)
{
    replay_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc <= 0) return rc < 0 ? 2 : 0; /* 2: a usage error, as everywhere */
    route_trace t;
    sl_err err;
    if (trace_load(&t, a.trace, &err)) return cli_fail("%s", err.msg);
    int total = t.n_layers * t.n_expert;
    if (!a.n_slots) {
        const double pct[] = {0.03, 0.06, 0.12, 0.24, 0.48};
        for (int i = 0; i < 5; i++) a.slots[a.n_slots++] = (int)(pct[i] * total + 0.5);
    }
    if (!a.tokens[1]) a.tokens[0] = a.heat_from[0] == 0 ? a.heat_from[1] : 0, a.tokens[1] = t.n_tokens;
    if (a.tokens[1] > t.n_tokens) a.tokens[1] = t.n_tokens;
    if (a.tokens[0] >= a.tokens[1]) return trace_free(&t), cli_fail("replay: no tokens left to replay");
    heat_table h = {0};
    int with_heat = a.heat_file || a.heat_from[1];
    if (with_heat && get_heat(&t, &a, &h, &err)) return trace_free(&t), cli_fail("%s", err.msg);
    variant v[10];
    int nv = make_variants(&a, with_heat, t.pred != NULL, v, 10);
    printf("trace %s: %d tokens, %d layers x %d experts, %d per token; uniform hit rate = slots/%d\n", a.trace,
           t.n_tokens, t.n_layers, t.n_expert, t.n_used, total);
    printf("replaying tokens [%d, %d)", a.tokens[0], a.tokens[1]);
    if (a.run_len) printf(" as runs of %d tokens, each from a cold cache", a.run_len);
    if (a.heat_from[1]) printf("; heat from tokens [%d, %d)", a.heat_from[0], a.heat_from[1]);
    if (a.heat_file) printf("; heat from %s", a.heat_file);
    if (with_heat) printf(" (%llu passes, pin share %.2f)", (unsigned long long)h.passes, a.pin_share);
    printf("\n");
    rc = nv < 0 ? 1 : print_table(&t, &a, with_heat ? &h : NULL, v, nv);
    heat_table_free(&h);
    trace_free(&t);
    return rc;
}
