/* sluice replay: run a routing trace through the expert cache at several
 * sizes and policies, with no model and no I/O, to compare hit rates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "experts/trace.h"

static void replay_usage(void)
{
    printf("usage: sluice replay --trace FILE [--slots N[,N...]] [--policy lru,lfru] [--half-life T] [--warmup T]\n"
           "  Replays an expert-routing trace (shared/traces JSON schema) through the\n"
           "  expert cache and prints the hit rate per cache size and policy.\n"
           "  --slots     cache sizes in experts (default: 3%%,6%%,12%%,24%%,48%% of all experts)\n"
           "  --policy    comma-separated policies (default lru,lfru)\n"
           "  --half-life LFRU use-count half-life in tokens (default 64)\n"
           "  --warmup    tokens replayed before counting (default 0)\n");
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

int cmd_replay(int argc, char **argv)
{
    const char *path = NULL, *policies = "lru,lfru";
    int slots[32], n_slots = 0, warmup = 0;
    double half_life = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return replay_usage(), 0;
        if (!v) return cli_fail("replay: option '%s' needs a value (see --help)", a);
        if (!strcmp(a, "--trace")) path = v;
        else if (!strcmp(a, "--slots")) n_slots = parse_list(v, slots, 32);
        else if (!strcmp(a, "--policy")) policies = v;
        else if (!strcmp(a, "--half-life")) half_life = atof(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else return cli_fail("replay: unknown option '%s'", a);
        i++;
    }
    if (!path) return cli_fail("replay: --trace FILE is required");
    if (n_slots < 0) return cli_fail("replay: bad --slots list");
    route_trace t;
    sl_err err;
    if (trace_load(&t, path, &err)) return cli_fail("%s", err.msg);
    int total = t.n_layers * t.n_expert;
    if (!n_slots) {
        const double pct[] = {0.03, 0.06, 0.12, 0.24, 0.48};
        for (int i = 0; i < 5; i++) slots[n_slots++] = (int)(pct[i] * total + 0.5);
    }
    printf("trace %s: %d tokens, %d layers x %d experts, %d per token; uniform hit rate = slots/%d\n", path,
           t.n_tokens, t.n_layers, t.n_expert, t.n_used, total);
    printf("%8s %8s", "slots", "share");
    char list[128];
    snprintf(list, sizeof list, "%s", policies);
    for (char *p = strtok(list, ","); p; p = strtok(NULL, ",")) printf(" %9s", p);
    printf("\n");
    for (int i = 0; i < n_slots; i++) {
        printf("%8d %7.1f%%", slots[i], 100.0 * slots[i] / total);
        snprintf(list, sizeof list, "%s", policies);
        for (char *p = strtok(list, ","); p; p = strtok(NULL, ",")) {
            int pol = cache_policy_parse(p);
            cache_counters c;
            if (pol < 0) return trace_free(&t), cli_fail("replay: unknown policy '%s' (lru, lfru)", p);
            if (trace_replay(&t, slots[i], (cache_policy)pol, half_life, warmup, &c, &err))
                return trace_free(&t), cli_fail("%s", err.msg);
            printf(" %8.1f%%", 100.0 * (double)c.hits / (double)(c.hits + c.misses));
        }
        printf("\n");
    }
    trace_free(&t);
    return 0;
}
