/* sluice pack: copy a model's routed experts into a multi-drive pack
 * (docs/PACK.md), so `sluice run --pack` can read each expert from several
 * SSDs at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "experts/heat.h"
#include "experts/pack.h"
#include "experts/trace.h"
#include "gguf/summary.h"
#include "util/clock.h"

static void pack_usage(void)
{
    printf("usage: sluice pack MODEL.gguf --drive DIR [--drive DIR ...] -o PACK [options]\n"
           "  Writes the model's routed experts into one container file per drive\n"
           "  directory (DIR/<name of PACK>.<N>.data) and the manifest PACK; the spine\n"
           "  stays in the GGUF.  Run with: sluice run -m MODEL.gguf --pack PACK\n"
           "  --drive DIR          a directory on one drive (repeat for each drive; up to %d)\n"
           "  -o, --output PACK    the manifest file to write\n"
           "  --replicate-hot F    also put this fraction (0-1) of experts on a second drive,\n"
           "                       so the reader can split their reads (default 0)\n"
           "  --heat FILE          which experts are hot: a heat file (sluice heat; default:\n"
           "                       the model's own heat file, if it has one)\n"
           "  --hot-trace FILE     or a routing trace (shared/traces JSON schema); with\n"
           "                       neither, an evenly spaced F of the experts is chosen\n"
           "  --buffered           write through the page cache instead of O_DIRECT\n"
           "  -m, --model MODEL    the model (instead of the first argument)\n"
           "usage: sluice pack --check PACK [MODEL.gguf]\n"
           "  Reads every copy of every expert record and checks its xxh3 checksum (and,\n"
           "  given the model, that the pack was made from it).  Exit status 1 if any\n"
           "  copy is bad.\n",
           PACK_MAX_DRIVES);
}

typedef struct {
    double t0, last;
    int tty;
} progress;

/* A bar on a terminal; nothing when stderr is a file or pipe. */
static void show_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress *p = ctx;
    double t = sl_now();
    if (!p->tty || (done < total && t - p->last < 0.1)) return;
    p->last = t;
    int width = 30, fill = total ? (int)((double)done / (double)total * width) : width;
    char bar[64], a[32], b[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    double rate = t > p->t0 ? (double)done / (t - p->t0) / 1e6 : 0;
    fprintf(stderr, "\rpacking [%s] %3.0f%%  %s / %s  %.0f MB/s ", bar, total ? 100.0 * (double)done / (double)total : 100,
            cli_fmt_bytes(done, a, sizeof a), cli_fmt_bytes(total, b, sizeof b), rate);
    if (done >= total) fputc('\n', stderr);
}

/* Use rates per (layer, expert) from a heat file: PATH, or the model's
 * default one when PATH is NULL (then a missing or unusable file just
 * means no heat).  NULL with *err empty means none. */
static double *heat_from_file(const char *path, const gguf_file *g, const expert_layout *L, char *note, size_t cap,
                              sl_err *err)
{
    uint8_t id[HEAT_ID_BYTES];
    char def[4096];
    heat_model_id(g, id);
    err->msg[0] = 0;
    if (!path && heat_default_path(id, def, sizeof def, err)) return NULL;
    const char *p = path ? path : def;
    heat_table h;
    sl_err warn;
    heat_status st = heat_load(&h, p, id, L->n_layers, L->n_expert, &warn);
    if (st != HEAT_LOADED) {
        if (path && st == HEAT_ABSENT) sl_errf(err, "%s: no such heat file", path);
        else if (path) sl_errf(err, "%s", warn.msg);
        else if (st == HEAT_IGNORED) fprintf(stderr, "sluice: warning: %s\n", warn.msg);
        return NULL;
    }
    double *heat = calloc((size_t)L->n_layers * (size_t)L->n_expert, sizeof *heat);
    for (int l = 0; heat && l < L->n_layers; l++)
        for (int e = 0; e < L->n_expert; e++) heat[(int64_t)l * L->n_expert + e] = heat_rate(&h, l, e);
    if (!heat) sl_errf(err, "out of memory");
    snprintf(note, cap, "the hottest by heat file %s (%llu forward passes)", p, (unsigned long long)h.passes);
    heat_table_free(&h);
    return heat;
}

/* Use counts per (layer, expert) from a routing trace. */
static double *heat_from_trace(const char *path, const expert_layout *L, sl_err *err)
{
    route_trace t;
    if (trace_load(&t, path, err)) return NULL;
    double *heat = NULL;
    if (t.n_layers != L->n_layers || t.n_expert != L->n_expert)
        sl_errf(err, "%s: trace has %d layers x %d experts, the model %d x %d", path, t.n_layers, t.n_expert,
                L->n_layers, L->n_expert);
    else if (!(heat = calloc((size_t)L->n_layers * (size_t)L->n_expert, sizeof *heat)))
        sl_errf(err, "out of memory");
    for (int tok = 0; heat && tok < t.n_tokens; tok++)
        for (int l = 0; l < t.n_layers; l++)
            for (int k = 0; k < t.n_used; k++) heat[(int64_t)l * L->n_expert + trace_at(&t, tok, l)[k]] += 1;
    trace_free(&t);
    return heat;
}

static void print_summary(const pack_summary *s, const char *const *drives, int n, const char *out, double secs,
                          const char *hot)
{
    char a[32], b[32];
    printf("pack %s: %llu experts in %s records, %llu on two drives%s\n", out, (unsigned long long)s->records,
           cli_fmt_bytes(s->record_bytes, a, sizeof a), (unsigned long long)s->replicated,
           s->direct ? "" : " (written through the page cache)");
    if (s->replicated) printf("replicated: %s\n", s->replicated == s->records ? "every expert" : hot);
    for (int d = 0; d < n; d++)
        printf("  drive %d  %-40s %6u records  %s\n", d, drives[d], s->drive_records[d],
               cli_fmt_bytes(s->drive_bytes[d], a, sizeof a));
    printf("wrote %s in %.1f s (%s/s)\n", cli_fmt_bytes(s->bytes_written, a, sizeof a), secs,
           cli_fmt_bytes(secs > 0 ? (uint64_t)((double)s->bytes_written / secs) : 0, b, sizeof b));
}

static int run_pack(const char *model, const char *out, pack_options *o, const char *trace, const char *heat_path)
{
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, model, &err)) return cli_fail("%s", err.msg);
    model_summary ms;
    expert_layout L = {0};
    double *heat = NULL;
    int rc = model_summary_build(&ms, g, &err);
    if (!rc && ms.n_expert == 0) {
        model_summary_free(&ms);
        rc = sl_errf(&err, "%s: a dense model has no routed experts to pack; it is read whole into RAM (sluice run -m %s)",
                     model, model);
    } else if (!rc) {
        rc = expert_layout_from_gguf(&L, g, (int)ms.n_layers, (int)ms.n_expert,
                                     ms.n_expert_used ? (int)ms.n_expert_used : 1, &err);
        model_summary_free(&ms);
    }
    char hot[4400] = "evenly spaced experts (no heat file or trace)";
    if (!rc && trace && !(heat = heat_from_trace(trace, &L, &err))) rc = -1;
    if (!rc && trace) snprintf(hot, sizeof hot, "the hottest in routing trace %s", trace);
    if (!rc && !trace && o->replicate_hot > 0 && !(heat = heat_from_file(heat_path, g, &L, hot, sizeof hot, &err)) &&
        err.msg[0])
        rc = -1;
    progress p = {.t0 = sl_now(), .tty = isatty(2)};
    pack_summary sum;
    o->heat = heat;
    o->progress = show_progress, o->progress_ctx = &p;
    if (!rc) rc = pack_write(g, &L, out, o, &sum, &err);
    if (!rc) print_summary(&sum, o->drives, o->n_drives, out, sl_now() - p.t0, hot);
    free(heat);
    if (L.layer) expert_layout_free(&L);
    gguf_close(g);
    return rc ? cli_fail("%s", err.msg) : 0;
}

static int run_check(const char *pack, const char *model)
{
    sl_err err;
    gguf_file *g = NULL;
    if (model && gguf_open(&g, model, &err)) return cli_fail("%s", err.msg);
    progress p = {.t0 = sl_now(), .tty = isatty(2)};
    pack_check_opts o = {.progress = show_progress, .progress_ctx = &p};
    pack_check_result r;
    int rc = pack_check(pack, g, &o, &r, &err);
    if (g) gguf_close(g);
    if (rc) return cli_fail("%s", err.msg);
    double secs = sl_now() - p.t0;
    printf("pack %s: %llu experts, %llu of %llu record copies checked, %llu bad, %llu experts without a good copy"
           " (%.2f GB verified in %.1f s)\n",
           pack, (unsigned long long)r.records, (unsigned long long)r.copies, (unsigned long long)r.total_copies,
           (unsigned long long)r.bad, (unsigned long long)r.lost, (double)r.bytes / 1e9, secs);
    if (r.bad) printf("first bad copy: %s\n", r.first_bad);
    return r.bad ? 1 : 0;
}

int cmd_pack(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *trace = NULL, *check = NULL, *heat = NULL;
    const char *drives[PACK_MAX_DRIVES];
    pack_options o = {.drives = drives};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return pack_usage(), 0;
        if (!strcmp(a, "--buffered")) {
            o.buffered = 1;
            continue;
        }
        if (a[0] != '-') {
            if (model) return cli_fail("pack: more than one model given ('%s', '%s')", model, a), 2;
            model = a;
            continue;
        }
        static const char *const VALUED[] = {"--drive",     "-o",           "--output", "-m", "--model",
                                             "--hot-trace", "--replicate-hot", "--check", "--heat"};
        size_t k = 0;
        while (k < sizeof VALUED / sizeof *VALUED && strcmp(a, VALUED[k])) k++;
        if (k == sizeof VALUED / sizeof *VALUED) return cli_fail("pack: unknown option '%s' (see --help)", a), 2;
        if (!v) return cli_fail("pack: option '%s' needs a value (see --help)", a), 2;
        if (!strcmp(a, "--drive")) {
            if (o.n_drives == PACK_MAX_DRIVES) return cli_fail("pack: at most %d drives", PACK_MAX_DRIVES), 2;
            drives[o.n_drives++] = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--hot-trace")) trace = v;
        else if (!strcmp(a, "--check")) check = v;
        else if (!strcmp(a, "--heat")) heat = v;
        else if (!strcmp(a, "--replicate-hot")) {
            char *end;
            o.replicate_hot = strtod(v, &end);
            if (end == v || *end || !(o.replicate_hot >= 0 && o.replicate_hot <= 1))
                return cli_fail("pack: --replicate-hot takes a fraction between 0 and 1, got '%s'", v), 2;
        }
        i++;
    }
    if (check) return run_check(check, model);
    if (!model) return cli_fail("pack: no model given (sluice pack MODEL.gguf --drive DIR -o PACK)"), 2;
    if (!o.n_drives) return cli_fail("pack: at least one --drive DIR is needed"), 2;
    if (!out) return cli_fail("pack: -o PACK (the manifest to write) is required"), 2;
    if ((trace || heat) && o.replicate_hot == 0)
        return cli_fail("pack: --heat and --hot-trace only matter with --replicate-hot"), 2;
    if (trace && heat) return cli_fail("pack: give --heat or --hot-trace, not both"), 2;
    return run_pack(model, out, &o, trace, heat);
}
