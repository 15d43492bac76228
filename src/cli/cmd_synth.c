/* sluice synth: write a synthetic MoE model with a real architecture's
 * shapes, for benchmarking models larger than RAM (docs/SYNTH.md). */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "synth/synth.h"
#include "util/clock.h"

#define SPACE_MARGIN (64ull << 20)
#define MAX_EXPERTS 32768 /* MOE_MAX_EXPERTS (src/arch/arch.h): what sluice runs */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice synth --like SHAPE -o FILE [options]\n"
            "       sluice synth --route-check FILE [--samples N]\n"
            "  Writes a GGUF with a real MoE architecture's shapes and metadata, a real\n"
            "  tokenizer and random well-formed quantised weights; llama.cpp loads it too.\n"
            "  --like SHAPE        qwen3-30b-a3b | deepseek-v2-lite | kimi-k2-scaled |\n"
            "                      kimi-linear-48b-a3b | qwen3.5-35b-a3b | gpt-oss-120b |\n"
            "                      glm-4.5-air\n"
            "  -o, --output FILE   written as FILE.partial, renamed when complete\n"
            "  --layers N          number of layers\n"
            "  --experts N         routed experts per layer (experts used capped at N)\n"
            "  --used N            experts used per token\n"
            "  --embd N            hidden size (default: the real one)\n"
            "  --set FIELD=VALUE   any other shape field, e.g. n_ff_exp=256 (docs/SYNTH.md)\n"
            "  --type T            weights: q4_K (default), q6_K, q8_0, q5_0, q4_0, f16, mxfp4\n"
            "                      (mxfp4: experts mxfp4, the rest q8_0, as MXFP4_MOE;\n"
            "                      gpt-oss experts are always mxfp4, as released)\n"
            "  --dense-type T      attention, dense FFN, shared experts (default: --type)\n"
            "  --vocab FILE        GGUF to copy tokenizer.* from (default: ../shared/vocab,\n"
            "                      else the bundled models/tinymoe-q8_0.gguf)\n"
            "  --route-skew S      expert popularity: 0 uniform (default), ~1 Zipf-like\n"
            "  --seed N            random seed (default 1)\n"
            "  --dry-run           print the plan without writing\n"
            "  --force             replace FILE if it exists\n"
            "  --route-check FILE  expert popularity of a synthesized file: its routers on\n"
            "                      random hidden states (first, middle, last MoE layer)\n"
            "  --samples N         hidden states for --route-check (default 2000)\n");
}

typedef struct {
    const char *like, *out, *vocab, *route_check;
    const char *sets[32];
    int n_sets;
    const char *type, *dense_type;
    long layers, experts, used, embd;
    double skew;
    uint64_t seed;
    uint32_t samples;
    bool dry_run, force;
} opts;

static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0) return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.layers = -1, .experts = -1, .used = -1, .embd = -1, .seed = 1, .samples = 2000, .type = "q4_K"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--dry-run")) {
            o->dry_run = true;
            continue;
        } else if (!strcmp(a, "--force")) {
            o->force = true;
            continue;
        }
        if (!v) return cli_fail("%s needs a value (sluice synth --help)", a);
        i++;
        if (!strcmp(a, "--like")) o->like = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) o->out = v;
        else if (!strcmp(a, "--vocab")) o->vocab = v;
        else if (!strcmp(a, "--type")) o->type = v;
        else if (!strcmp(a, "--dense-type")) o->dense_type = v;
        else if (!strcmp(a, "--route-check")) o->route_check = v;
        else if (!strcmp(a, "--set") && o->n_sets < 32) o->sets[o->n_sets++] = v;
        else if (!strcmp(a, "--route-skew")) {
            char *end;
            o->skew = strtod(v, &end);
            if (end == v || *end) return cli_fail("--route-skew: '%s' is not a number", v);
        } else if (!strcmp(a, "--seed")) {
            char *end;
            o->seed = strtoull(v, &end, 0);
            if (end == v || *end) return cli_fail("--seed: '%s' is not a number", v);
        } else if (parse_long(v, &n)) {
            return cli_fail("%s: '%s' is not a count", a, v);
        } else if (!strcmp(a, "--layers")) o->layers = n;
        else if (!strcmp(a, "--experts")) o->experts = n;
        else if (!strcmp(a, "--used")) o->used = n;
        else if (!strcmp(a, "--embd")) o->embd = n;
        else if (!strcmp(a, "--samples") && n > 0 && n < 10000000) o->samples = (uint32_t)n;
        else return cli_fail("unknown option %s (sluice synth --help)", a);
    }
    return 0;
}

/* ---- configuration ---- */

static int set_field(synth_shape *s, const char *name, long v, sl_err *err)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    return synth_shape_set(s, name, buf, err);
}

static int build_config(const opts *o, synth_config *c)
{
    sl_err err;
    memset(c, 0, sizeof *c);
    if (!o->like) return cli_fail("--like is required (qwen3-30b-a3b, deepseek-v2-lite, kimi-k2-scaled, kimi-linear-48b-a3b, "
                                     "qwen3.5-35b-a3b, gpt-oss-120b)");
    if (synth_shape_preset(o->like, &c->shape, &err)) return cli_fail("%s", err.msg);
    synth_shape *s = &c->shape;
    if ((o->layers >= 0 && set_field(s, "n_layer", o->layers, &err)) ||
        (o->experts >= 0 && set_field(s, "n_expert", o->experts, &err)) ||
        (o->used >= 0 && set_field(s, "n_expert_used", o->used, &err)) ||
        (o->embd >= 0 && set_field(s, "n_embd", o->embd, &err)))
        return cli_fail("%s", err.msg);
    if (o->experts >= 0 && o->used < 0 && s->n_expert_used > s->n_expert) s->n_expert_used = s->n_expert;
    for (int i = 0; i < o->n_sets; i++) {
        char name[64];
        const char *eq = strchr(o->sets[i], '=');
        if (!eq || eq - o->sets[i] >= (long)sizeof name) return cli_fail("--set %s: expected FIELD=VALUE", o->sets[i]);
        snprintf(name, sizeof name, "%.*s", (int)(eq - o->sets[i]), o->sets[i]);
        if (synth_shape_set(s, name, eq + 1, &err)) return cli_fail("--set: %s", err.msg);
    }
    int type = ggml_type_from_name(o->type);
    if (type < 0 || synth_config_types(c, (uint32_t)type, &err))
        return cli_fail("--type %s: %s", o->type, type < 0 ? "unknown type" : err.msg);
    if (o->dense_type) {
        int dt = ggml_type_from_name(o->dense_type);
        if (dt < 0 || !synth_type_supported((uint32_t)dt) || dt == GGML_TYPE_F32)
            return cli_fail("--dense-type %s: cannot generate that type", o->dense_type);
        c->dense_type = (uint32_t)dt;
    }
    c->route_skew = o->skew;
    c->seed = o->seed;
    c->durable = true;
    if (synth_shape_check(s, &err)) return cli_fail("%s: %s", s->like, err.msg);
    const char *note = synth_shape_llama_note(s);
    if (note) fprintf(stderr, "sluice: note: %s\n", note);
    return 0;
}

/* The shape's own tokenizer from ../shared/vocab next to this checkout (or
 * $SLUICE_SHARED/vocab), else the bundled model's. */
static const char *default_vocab(const char *like, char *buf, size_t cap)
{
    /* Kimi's (163840) and Qwen3.5's (248320) own vocabularies are not
     * available offline: Kimi-Linear takes DeepSeek-V3's like kimi-k2-scaled,
     * Qwen3.5 Qwen3's */
    const char *file = !strcmp(like, "qwen3-30b-a3b") || !strcmp(like, "qwen3.5-35b-a3b") ? "qwen3.gguf"
                       : !strcmp(like, "deepseek-v2-lite")                                ? "ggml-vocab-deepseek-llm.gguf"
                       : !strcmp(like, "gpt-oss-120b")                                    ? "gpt-oss.gguf"
                                                                                          : "deepseek-v3.gguf";
    const char *env = getenv("SLUICE_SHARED");
    if (env && *env) {
        snprintf(buf, cap, "%s/vocab/%s", env, file);
        if (access(buf, R_OK) == 0) return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char rel[PATH_MAX + 64];
        snprintf(rel, sizeof rel, "%s/../../shared/vocab/%s", dirname(exe), file); /* <checkout>/build/sluice */
        if (cap >= PATH_MAX && realpath(rel, buf)) return buf;
    }
    return cli_default_model();
}

/* ---- plan printing ---- */

static void shape_str(const synth_tensor *t, char *buf, size_t cap)
{
    size_t n = 0;
    for (uint32_t d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? " x %" PRId64 : "%" PRId64, t->ne[d]);
}

/* One line per distinct (name without layer, type, shape), with its layer count. */
static void print_tensors(const synth_tensor *t, uint64_t n)
{
    printf("\n  %-28s %-6s %-24s %7s %14s\n", "tensor (blk.N.* per layer)", "type", "shape", "layers", "bytes each");
    for (uint64_t i = 0; i < n; i++) {
        const char *base = t[i].layer >= 0 ? strchr(strchr(t[i].name, '.') + 1, '.') + 1 : t[i].name;
        bool seen = false;
        int count = 0;
        for (uint64_t k = 0; k < n; k++) {
            const char *b2 = t[k].layer >= 0 ? strchr(strchr(t[k].name, '.') + 1, '.') + 1 : t[k].name;
            if (strcmp(base, b2) || t[k].type != t[i].type || memcmp(t[k].ne, t[i].ne, sizeof t[i].ne)) continue;
            if (k < i) seen = true;
            count++;
        }
        if (seen) continue;
        char shape[64], bytes[32];
        shape_str(&t[i], shape, sizeof shape);
        printf("  %-28s %-6s %-24s %7d %14s\n", base, ggml_type_name(t[i].type), shape, count,
               cli_fmt_bytes(t[i].nbytes, bytes, sizeof bytes));
    }
}

static void print_plan(const synth_config *c, synth_job *j, const char *vocab)
{
    const synth_shape *s = &c->shape;
    uint64_t n, experts = 0, total = 0;
    const synth_tensor *t = synth_job_tensors(j, &n);
    for (uint64_t i = 0; i < n; i++) {
        total += t[i].nbytes;
        if (t[i].role == SYNTH_EXPERTS) experts += t[i].nbytes;
    }
    bool lead = s->family == SYNTH_DEEPSEEK2 || s->family == SYNTH_KIMI_LINEAR || s->family == SYNTH_GLM4MOE;
    uint32_t moe_layers = lead ? s->n_layer - s->n_dense_lead : s->n_layer;
    char b1[32], b2[32], b3[32], b4[32];
    printf("shape:    %s (%s), %u layers, n_embd %u, %u heads, %u experts (%u used",
           s->like, synth_family_arch(s->family), s->n_layer, s->n_embd, s->n_head,
           s->n_expert, s->n_expert_used);
    if (s->n_expert_shared) printf(", %u shared", s->n_expert_shared);
    printf("), expert FFN %u\n", s->n_ff_exp);
    printf("types:    experts %s, dense %s, token_embd %s, output %s; norms and routers f32\n",
           ggml_type_name(c->expert_type), ggml_type_name(c->dense_type), ggml_type_name(c->embd_type),
           ggml_type_name(c->output_type));
    printf("vocab:    %s (%" PRIu64 " tokens)\n", vocab, synth_job_n_vocab(j));
    printf("routing:  skew %g, seed %" PRIu64 "\n", c->route_skew, c->seed);
    print_tensors(t, n);
    printf("\nfile:     %s (%.2f GB)\n", cli_fmt_bytes(synth_job_file_size(j), b1, sizeof b1),
           synth_job_file_size(j) / 1e9);
    printf("experts:  %s routed in %u MoE layers; one expert %s per layer; spine %s\n",
           cli_fmt_bytes(experts, b2, sizeof b2), moe_layers,
           cli_fmt_bytes(moe_layers ? experts / moe_layers / s->n_expert : 0, b3, sizeof b3),
           cli_fmt_bytes(total - experts, b4, sizeof b4));
}

/* ---- writing ---- */

typedef struct {
    bool tty;
    double t0, last;
    int last_decile;
} progress;

static void on_progress(void *ud, uint64_t done, uint64_t total)
{
    progress *p = ud;
    double el = sl_now() - p->t0, rate = el > 0 ? (double)done / el : 0;
    double frac = total ? (double)done / (double)total : 1;
    if (p->tty) {
        if (el - p->last < 0.2 && done < total) return;
        p->last = el;
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r[%s] %3.0f%% %6.2f/%.2f GB  %.2f GB/s  eta %3.0fs ", bar, frac * 100, done / 1e9,
                total / 1e9, rate / 1e9, rate > 0 ? (double)(total - done) / rate : 0);
        if (done == total) fputc('\n', stderr);
    } else if ((int)(frac * 10) > p->last_decile || done == total) {
        p->last_decile = (int)(frac * 10);
        fprintf(stderr, "synth: %3.0f%% %.2f/%.2f GB, %.2f GB/s\n", frac * 100, done / 1e9, total / 1e9, rate / 1e9);
    }
}

static int check_space(const char *path, uint64_t need)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    struct statvfs vfs;
    if (statvfs(dirname(dir), &vfs) != 0) return cli_fail("%s: cannot check free space: %s", dir, strerror(errno));
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (avail >= need + SPACE_MARGIN) return 0;
    char a[32], b[32];
    return cli_fail("%s has %s free but the model needs %s (plus a 64 MiB margin); free some space, pick "
                    "another directory, or scale it down (--layers, --experts)",
                    dir, cli_fmt_bytes(avail, a, sizeof a), cli_fmt_bytes(need, b, sizeof b));
}

static int write_model(synth_job *j, const char *out, bool force)
{
    struct stat st;
    if (!force && stat(out, &st) == 0) return cli_fail("%s exists (use --force to replace it)", out);
    uint64_t size = synth_job_file_size(j);
    if (check_space(out, size)) return 1;
    char part[PATH_MAX];
    if (snprintf(part, sizeof part, "%s.partial", out) >= (int)sizeof part) return cli_fail("%s: path too long", out);
    progress p = {.tty = isatty(2) != 0, .last_decile = -1};
    p.t0 = sl_now();
    sl_err err;
    if (synth_job_write(j, part, on_progress, &p, &err)) {
        unlink(part);
        return cli_fail("%s", err.msg);
    }
    if (rename(part, out) != 0) return cli_fail("cannot rename %s to %s: %s", part, out, strerror(errno));
    double el = sl_now() - p.t0;
    char b[32];
    printf("wrote %s: %s (%.2f GB) in %.1f s, %.2f GB/s (including fdatasync)\n", out,
           cli_fmt_bytes(size, b, sizeof b), size / 1e9, el, el > 0 ? size / el / 1e9 : 0);
    return 0;
}

/* ---- routing check ---- */

static int route_check(const char *path, uint32_t samples)
{
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, path, &err)) return cli_fail("%s", err.msg);
    int32_t first = -1, last = -1;
    uint32_t cap = 0; /* the widest router: counts are sized from the file */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        int L;
        if (sscanf(g->tensors[i].name, "blk.%d.ffn_gate_inp.weight", &L) == 1 && strstr(g->tensors[i].name, "gate_inp")) {
            if (first < 0 || L < first) first = L;
            if (L > last) last = L;
            if (g->tensors[i].ne[1] > (int64_t)cap && g->tensors[i].ne[1] <= (int64_t)MAX_EXPERTS)
                cap = (uint32_t)g->tensors[i].ne[1];
        }
    }
    if (first < 0) {
        gguf_close(g);
        return cli_fail("%s: no routers (blk.N.ffn_gate_inp.weight)", path);
    }
    int32_t layers[3] = {first, (first + last) / 2, last};
    uint64_t *counts = calloc(cap ? cap : 1, sizeof *counts);
    int rc = counts ? 0 : cli_fail("out of memory");
    printf("routing of %u random hidden states (N(0,1), skew coordinate at 1) through the file's routers\n", samples);
    printf("%6s %8s %10s %10s %10s\n", "layer", "experts", "top share", "max/mean", "zipf s");
    for (int k = 0; k < 3 && !rc; k++) {
        if (k && layers[k] == layers[k - 1]) continue;
        uint32_t n_exp = 0;
        if (synth_route_sample(g, (uint32_t)layers[k], samples, 7, counts, cap, &n_exp, &err)) {
            rc = cli_fail("%s", err.msg);
            break;
        }
        uint64_t sum = 0, mx = 0;
        for (uint32_t e = 0; e < n_exp; e++) sum += counts[e], mx = counts[e] > mx ? counts[e] : mx;
        printf("%6d %8u %9.2f%% %10.2f %10.2f\n", layers[k], n_exp, sum ? 100.0 * mx / sum : 0,
               sum ? (double)mx * n_exp / sum : 0, synth_zipf_exponent(counts, n_exp));
    }
    free(counts);
    gguf_close(g);
    return rc;
}

int cmd_synth(int argc, char **argv)
{
    opts o;
    if (parse_args(argc, argv, &o)) return 2;
    if (o.route_check) return route_check(o.route_check, o.samples);
    synth_config c;
    if (build_config(&o, &c)) return 2;
    if (!o.out && !o.dry_run) return cli_fail("-o FILE is required (or --dry-run)");
    char vbuf[PATH_MAX + 64];
    const char *vocab = o.vocab ? o.vocab : default_vocab(c.shape.like, vbuf, sizeof vbuf);
    if (!vocab) return cli_fail("no vocabulary GGUF found; pass --vocab FILE");
    sl_err err;
    gguf_file *v;
    if (gguf_open(&v, vocab, &err)) return cli_fail("%s", err.msg);
    synth_job *j;
    int rc = synth_job_new(&j, &c, v, &err) ? cli_fail("%s", err.msg) : 0;
    gguf_close(v);
    if (rc) return rc;
    if (o.dry_run) print_plan(&c, j, vocab);
    else rc = write_model(j, o.out, o.force);
    synth_job_free(j);
    return rc;
}
