/* sluice heat: show, draw, import or reset a model's persisted expert heat
 * (which experts its runs used, decayed over forward passes). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "experts/heat.h"
#include "experts/heat_svg.h"
#include "experts/trace.h"
#include "gguf/summary.h"

static void heat_usage(void)
{
    printf("usage: sluice heat [-m MODEL] [--heat-file PATH | --heat-beside] [--top K] [--json] [--svg FILE]\n"
           "       sluice heat [-m MODEL] --reset\n"
           "       sluice heat [-m MODEL] --trace FILE [--tokens A:B] [--half-life P]\n"
           "  Shows the model's expert heat: forward passes recorded, file, age, and the\n"
           "  hottest experts of each layer with their share of the layer's uses.\n"
           "  -m MODEL        GGUF model (default: the bundled tinymoe)\n"
           "  --heat-file P   heat file to use (default: $XDG_CACHE_HOME/sluice/<model id>.heat,\n"
           "                  ~/.cache/sluice/... without XDG_CACHE_HOME)\n"
           "  --heat-beside   use MODEL.heat next to the model instead\n"
           "  --top K         experts listed per layer (default 8)\n"
           "  --json          machine-readable output\n"
           "  --svg FILE      also write an SVG heat map (layers x experts)\n"
           "  --reset         delete the model's heat file\n"
           "  --trace FILE    merge a routing trace (shared/traces JSON schema) into the heat,\n"
           "                  one forward pass per token; --tokens A:B takes only tokens [A, B)\n"
           "  --half-life P   half-life of heat in forward passes (default %.0f)\n",
           HEAT_DEFAULT_HALF_LIFE);
}

typedef struct {
    const char *model, *heat_file, *svg, *trace;
    int beside, top, json, reset, tokens[2];
    double half_life;
} heat_args;

/* The opened model: what the heat is keyed and shaped by. */
typedef struct {
    gguf_file *g;
    model_summary sum;
    uint8_t id[HEAT_ID_BYTES];
    char name[256], path[4096];
} heat_model;

static int parse_args(heat_args *a, int argc, char **argv)
{
    *a = (heat_args){.model = cli_default_model(), .top = 8, .half_life = HEAT_DEFAULT_HALF_LIFE};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) return heat_usage(), 0;
        if (!strcmp(o, "--json") || !strcmp(o, "--reset") || !strcmp(o, "--heat-beside")) {
            *(o[2] == 'j' ? &a->json : o[2] == 'r' ? &a->reset : &a->beside) = 1;
            continue;
        }
        static const char *const VALUED[] = {"-m", "--model", "--heat-file", "--svg", "--trace", "--top",
                                             "--half-life", "--tokens"};
        int known = 0;
        for (size_t k = 0; k < sizeof VALUED / sizeof *VALUED; k++) known |= !strcmp(o, VALUED[k]);
        if (!known) return cli_fail("heat: unknown option '%s' (see --help)", o), -1;
        if (!v) return cli_fail("heat: option '%s' needs a value (see --help)", o), -1;
        int bad = 0;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) a->model = v;
        else if (!strcmp(o, "--heat-file")) a->heat_file = v;
        else if (!strcmp(o, "--svg")) a->svg = v;
        else if (!strcmp(o, "--trace")) a->trace = v;
        else if (!strcmp(o, "--top")) bad = (a->top = atoi(v)) <= 0;
        else if (!strcmp(o, "--half-life")) bad = (a->half_life = atof(v)) < 0;
        else bad = sscanf(v, "%d:%d", &a->tokens[0], &a->tokens[1]) != 2 || a->tokens[0] < 0 ||
                   a->tokens[1] <= a->tokens[0]; /* --tokens */
        if (bad) return cli_fail("heat: bad value '%s' for %s", v, o), -1;
        i++;
    }
    if (!a->model) return cli_fail("heat: no model given and the bundled one was not found; use -m MODEL"), -1;
    if (a->heat_file && a->beside) return cli_fail("heat: --heat-file and --heat-beside exclude each other"), -1;
    return 1;
}

static void close_model(heat_model *m)
{
    model_summary_free(&m->sum);
    gguf_close(m->g);
}

static int open_model(heat_model *m, const heat_args *a, sl_err *err)
{
    if (gguf_open(&m->g, a->model, err)) return -1;
    if (model_summary_build(&m->sum, m->g, err)) return gguf_close(m->g), -1;
    if (!m->sum.n_expert || !m->sum.moe_layers) {
        sl_errf(err, "%s: not a mixture-of-experts model (no routed experts), so it has no expert heat", a->model);
        return model_summary_free(&m->sum), gguf_close(m->g), -1;
    }
    heat_model_id(m->g, m->id);
    const gguf_str *name;
    const char *base = strrchr(a->model, '/');
    if (gguf_get_str(m->g, "general.name", &name, err) == 1) snprintf(m->name, sizeof m->name, "%s", name->s);
    else snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : a->model);
    int rc = 0;
    if (a->heat_file) snprintf(m->path, sizeof m->path, "%s", a->heat_file);
    else if (a->beside) rc = heat_beside_path(a->model, m->path, sizeof m->path, err);
    else rc = heat_default_path(m->id, m->path, sizeof m->path, err);
    if (rc) close_model(m);
    return rc;
}

static int do_reset(const heat_model *m)
{
    sl_err err;
    int rc = heat_reset(m->path, &err);
    if (rc < 0) return cli_fail("%s", err.msg);
    printf(rc ? "no heat file at %s\n" : "deleted %s\n", m->path);
    return 0;
}

static int do_import(const heat_model *m, const heat_args *a)
{
    route_trace t;
    sl_err err;
    if (trace_load(&t, a->trace, &err)) return cli_fail("%s", err.msg);
    if (t.n_layers != (int)m->sum.n_layers || t.n_expert != (int)m->sum.n_expert) {
        trace_free(&t);
        return cli_fail("%s: trace is for %d layers x %d experts, %s has %u x %u", a->trace, t.n_layers, t.n_expert,
                        a->model, m->sum.n_layers, m->sum.n_expert);
    }
    int from = a->tokens[1] ? a->tokens[0] : 0, to = a->tokens[1] ? a->tokens[1] : t.n_tokens;
    heat_recorder *r;
    if (heat_recorder_create(&r, m->id, t.n_layers, t.n_expert, a->half_life, &err))
        return trace_free(&t), cli_fail("%s", err.msg);
    trace_record_heat(&t, from, to, r);
    uint64_t passes = heat_recorder_pending(r);
    int rc = heat_recorder_flush(r, m->path, &err);
    heat_recorder_free(r);
    trace_free(&t);
    if (rc) fprintf(stderr, "sluice: warning: %s\n", err.msg);
    if (rc < 0) return 1;
    if (!a->json) printf("imported %llu forward passes from %s into %s\n", (unsigned long long)passes, a->trace, m->path);
    return 0;
}

static void fmt_age(int64_t s, char *buf, size_t cap)
{
    if (s < 0) s = 0;
    if (s < 120) snprintf(buf, cap, "%llds", (long long)s);
    else if (s < 7200) snprintf(buf, cap, "%lldm", (long long)s / 60);
    else if (s < 172800) snprintf(buf, cap, "%lldh", (long long)s / 3600);
    else snprintf(buf, cap, "%lldd", (long long)s / 86400);
}

/* Experts of LAYER by share, descending; returns how many have any. */
static int rank_layer(const heat_table *h, int layer, int *order)
{
    int n = 0;
    for (int e = 0; e < h->n_expert; e++)
        if (h->count[(int64_t)layer * h->n_expert + e] > 0) order[n++] = e;
    const float *row = h->count + (int64_t)layer * h->n_expert;
    for (int i = 1; i < n; i++) /* insertion sort: stable, n is small */
        for (int j = i; j > 0 && row[order[j]] > row[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    return n;
}

static void print_text(const heat_model *m, const heat_table *h, int top, int *order)
{
    char hex[2 * HEAT_ID_BYTES + 1], age[32];
    heat_id_hex(h->model_id, hex);
    fmt_age((int64_t)time(NULL) - h->updated, age, sizeof age);
    printf("model:      %s (id %s)\n", m->name, hex);
    printf("heat file:  %s (updated %s ago)\n", m->path, age);
    printf("history:    %llu forward passes (%.0f after decay, half-life %.0f passes)\n",
           (unsigned long long)h->passes, h->weight, h->half_life);
    printf("uniform share per expert: %.2f%%\n\ntop experts per layer (expert: share of the layer's uses):\n",
           100.0 / h->n_expert);
    for (int l = 0; l < h->n_layers; l++) {
        int n = rank_layer(h, l, order);
        if (!n) continue;
        double sum = 0;
        printf("  layer %3d:", l);
        for (int i = 0; i < n && i < top; i++) {
            double s = heat_share(h, l, order[i]);
            sum += s;
            printf(" %d:%.1f%%", order[i], 100 * s);
        }
        printf("  (top %d: %.1f%%)\n", n < top ? n : top, 100 * sum);
    }
}

static int print_json(const heat_model *m, const heat_table *h, int top, int *order)
{
    char hex[2 * HEAT_ID_BYTES + 1];
    heat_id_hex(h->model_id, hex);
    json_t *layers = json_array();
    for (int l = 0; l < h->n_layers; l++) {
        json_t *list = json_array();
        int n = rank_layer(h, l, order);
        for (int i = 0; i < n && i < top; i++)
            json_array_append_new(list, json_pack("{s:i, s:f, s:f}", "expert", order[i], "share",
                                                  heat_share(h, l, order[i]), "rate", heat_rate(h, l, order[i])));
        json_array_append_new(layers, json_pack("{s:i, s:o}", "layer", l, "top", list));
    }
    json_t *root = json_pack("{s:s, s:s, s:s, s:i, s:i, s:I, s:f, s:f, s:I, s:I, s:I, s:o}", "model", m->name,
                             "model_id", hex, "heat_file", m->path, "n_layer", h->n_layers, "n_expert", h->n_expert,
                             "passes", (json_int_t)h->passes, "weight", h->weight, "half_life", h->half_life,
                             "created", (json_int_t)h->created, "updated", (json_int_t)h->updated, "age_s",
                             (json_int_t)(time(NULL) - h->updated), "layers", layers);
    if (!root) return cli_fail("heat: cannot build JSON");
    json_dumpf(root, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(root);
    return 0;
}

static int write_svg(const heat_model *m, const heat_table *h, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return cli_fail("%s: cannot create: %m", path);
    int rc = heat_svg_write(h, m->name, f);
    if (fclose(f) != 0 || rc) return cli_fail("%s: write failed", path);
    return 0;
}

static int show(const heat_model *m, const heat_args *a)
{
    heat_table h;
    sl_err warn;
    heat_status st = heat_load(&h, m->path, m->id, (int)m->sum.n_layers, (int)m->sum.n_expert, &warn);
    if (st == HEAT_ABSENT) {
        if (a->json) {
            json_t *o = json_pack("{s:s, s:s, s:i}", "model", m->name, "heat_file", m->path, "passes", 0);
            json_dumpf(o, stdout, JSON_INDENT(2));
            printf("\n");
            json_decref(o);
        } else printf("no heat recorded for %s yet (%s)\n", m->name, m->path);
        return 0;
    }
    if (st == HEAT_IGNORED) return cli_fail("%s", warn.msg);
    int *order = malloc((size_t)h.n_expert * sizeof *order), rc = 0;
    if (!order) rc = cli_fail("out of memory");
    else if (a->json) rc = print_json(m, &h, a->top, order);
    else print_text(m, &h, a->top, order);
    if (!rc && a->svg) rc = write_svg(m, &h, a->svg);
    if (!rc && a->svg && !a->json) printf("\nwrote %s\n", a->svg);
    free(order);
    heat_table_free(&h);
    return rc;
}

int cmd_heat(int argc, char **argv)
{
    heat_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc <= 0) return rc < 0 ? 2 : 0; /* 2: a usage error, as everywhere */
    heat_model m;
    sl_err err;
    if (open_model(&m, &a, &err)) return cli_fail("%s", err.msg);
    rc = 0;
    if (a.reset) rc = do_reset(&m);
    else if (a.trace) rc = do_import(&m, &a);
    if (!a.reset && !rc) rc = show(&m, &a);
    close_model(&m);
    return rc;
}
