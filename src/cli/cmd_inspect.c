/* sluice inspect: what is in a GGUF file, and how it splits into the resident
 * spine and the routed experts that sluice streams. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "gguf/summary.h"
#include "cli/cli_gen.h"
#include "engine/engine.h"

static void print_string(FILE *f, const gguf_str *s, size_t max)
{
    fputc('"', f);
    for (uint64_t i = 0; i < s->len && i < max; i++) {
        unsigned char c = (unsigned char)s->s[i];
        if (c == '\n') fputs("\\n", f);
        else if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
    if (s->len > max) fprintf(f, "... (%" PRIu64 " bytes)", s->len);
}

static void print_value(FILE *f, const gguf_value *v)
{
    if (v->type == GGUF_STRING) {
        print_string(f, &v->str, 80);
        return;
    }
    if (v->type != GGUF_ARRAY) {
        /* scalars are stored widened; print via their own type */
        if (v->type == GGUF_FLOAT32 || v->type == GGUF_FLOAT64) fprintf(f, "%g", v->f);
        else if (v->type == GGUF_BOOL) fprintf(f, "%s", v->u ? "true" : "false");
        else if (v->type == GGUF_INT8 || v->type == GGUF_INT16 || v->type == GGUF_INT32 || v->type == GGUF_INT64)
            fprintf(f, "%" PRId64, v->i);
        else fprintf(f, "%" PRIu64, v->u);
        return;
    }
    fprintf(f, "[%s x %" PRIu64 "]", gguf_vtype_name(v->arr.type), v->arr.n);
    uint64_t show = v->arr.n < 6 ? v->arr.n : 6;
    if (show) fprintf(f, " ");
    for (uint64_t i = 0; i < show; i++) {
        if (i) fprintf(f, ", ");
        if (v->arr.type == GGUF_STRING) print_string(f, &((gguf_str *)v->arr.data)[i], 24);
        else if (v->arr.type == GGUF_ARRAY) print_value(f, &((gguf_value *)v->arr.data)[i]);
        else {
            gguf_value e = gguf_arr_scalar(v, i);
            print_value(f, &e);
        }
    }
    if (show < v->arr.n) fprintf(f, ", ...");
}

static void shape_str(const gguf_tensor *t, char *buf, size_t cap)
{
    size_t n = 0;
    for (uint32_t d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? " x " : "", t->ne[d]);
}

static void print_text(const gguf_file *g, const model_summary *s)
{
    char b1[32], b2[32], b3[32];
    printf("file:          %s (GGUF v%u, %u part%s, alignment %u)\n", g->path, g->version, g->n_parts,
           g->n_parts == 1 ? "" : "s", g->alignment);
    printf("architecture:  %s\n", s->arch[0] ? s->arch : "(none)");
    printf("\nmetadata (%" PRIu64 " keys):\n", g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        printf("  %-44s ", g->kv[i].key);
        print_value(stdout, &g->kv[i].v);
        printf("\n");
    }
    printf("\ntokenizer:     %s\n", s->tokenizer);
    printf("\ntensors (%" PRIu64 "):\n  %-36s %-8s %-22s %14s %14s\n", g->n_tensors, "name", "type", "shape",
           "bytes", "offset");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        char shape[96];
        shape_str(t, shape, sizeof shape);
        printf("  %-36s %-8s %-22s %14" PRIu64 " %14" PRIu64 "%s\n", t->name, ggml_type_name(t->type), shape,
               t->nbytes, t->file_off, t->file ? " (part>1)" : "");
    }
    printf("\nsummary:\n");
    printf("  spine (resident):    %s in %" PRIu64 " tensors\n", cli_fmt_bytes(s->spine_bytes, b1, 32),
           s->spine_tensors);
    printf("  routed experts:      %s in %" PRIu64 " tensors over %u MoE layers\n",
           cli_fmt_bytes(s->expert_bytes, b1, 32), s->expert_tensors, s->moe_layers);
    if (s->moe_layers) {
        printf("  experts per layer:   %u, used per token: %u\n", s->n_expert, s->n_expert_used);
        if (s->expert_bytes_min == s->expert_bytes_max)
            printf("  one expert:          %s per layer\n", cli_fmt_bytes(s->expert_bytes_max, b1, 32));
        else
            printf("  one expert:          %s to %s per layer (types differ by layer)\n",
                   cli_fmt_bytes(s->expert_bytes_min, b1, 32), cli_fmt_bytes(s->expert_bytes_max, b2, 32));
        printf("  routed reads/token:  %s if nothing is cached\n",
               cli_fmt_bytes(s->expert_bytes_per_token, b3, 32));
    }
    printf("  total tensor bytes:  %s (%" PRIu64 " bytes)\n", cli_fmt_bytes(s->total_bytes, b1, 32),
           s->total_bytes);
}

static json_t *value_json(const gguf_value *v);

static json_t *array_elem_json(const gguf_value *v, uint64_t i)
{
    gguf_vtype t = v->arr.type;
    if (t == GGUF_STRING) {
        const gguf_str *s = &((gguf_str *)v->arr.data)[i];
        return json_stringn_nocheck(s->s, s->len);
    }
    if (t == GGUF_ARRAY) return value_json(&((gguf_value *)v->arr.data)[i]);
    gguf_value e = gguf_arr_scalar(v, i);
    return value_json(&e);
}

static json_t *value_json(const gguf_value *v)
{
    switch (v->type) {
    case GGUF_STRING: return json_stringn_nocheck(v->str.s, v->str.len);
    case GGUF_FLOAT32: case GGUF_FLOAT64: return json_real(v->f);
    case GGUF_BOOL: return json_boolean(v->u);
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64: return json_integer(v->i);
    case GGUF_ARRAY: break;
    default: return json_integer((json_int_t)v->u);
    }
    /* big arrays (vocabularies) are summarised, not dumped */
    if (v->arr.n > 64) return json_pack("{s:s,s:I}", "array_of", gguf_vtype_name(v->arr.type), "n", (json_int_t)v->arr.n);
    json_t *a = json_array();
    for (uint64_t i = 0; i < v->arr.n; i++) json_array_append_new(a, array_elem_json(v, i));
    return a;
}

static json_t *summary_json(const model_summary *s)
{
    json_t *layers = json_array();
    for (uint32_t i = 0; i < s->n_layers; i++)
        if (s->layer_expert_bytes[i])
            json_array_append_new(layers, json_pack("{s:i,s:I}", "layer", (int)i, "one_expert_bytes",
                                                    (json_int_t)s->layer_expert_bytes[i]));
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:i,s:I,s:I,s:I,s:o}", "spine_bytes", (json_int_t)s->spine_bytes,
                     "spine_tensors", (json_int_t)s->spine_tensors, "expert_bytes", (json_int_t)s->expert_bytes,
                     "expert_tensors", (json_int_t)s->expert_tensors, "total_bytes", (json_int_t)s->total_bytes,
                     "moe_layers", (int)s->moe_layers, "experts_per_layer", (int)s->n_expert,
                     "experts_per_token", (int)s->n_expert_used, "one_expert_bytes_min",
                     (json_int_t)s->expert_bytes_min, "one_expert_bytes_max", (json_int_t)s->expert_bytes_max,
                     "expert_bytes_per_token", (json_int_t)s->expert_bytes_per_token, "per_layer", layers);
}

/* The --mem plan: what the budget holds, and how many experts fit. */
static void print_plan(const mem_plan *p, bool json_out)
{
    if (json_out) return; /* part of the JSON object */
    char b[7][32];
    printf("\nmemory plan for --mem %s (context %d, batch %d):\n", cli_fmt_bytes(p->total, b[0], 32), (int)p->n_ctx,
           (int)p->n_batch);
    printf("  spine (resident):    %s\n", cli_fmt_bytes(p->spine, b[1], 32));
    printf("  KV cache:            %s\n", cli_fmt_bytes(p->kv, b[2], 32));
    if (p->state) printf("  recurrent state:     %s (with its snapshots)\n", cli_fmt_bytes(p->state, b[2], 32));
    printf("  scratch:             %s\n", cli_fmt_bytes(p->scratch, b[3], 32));
    printf("  runtime + metadata:  %s\n", cli_fmt_bytes(p->runtime + p->meta, b[4], 32));
    printf("  expert cache:        %s = %lld of %lld experts (%.1f%%), %s per slot\n",
           cli_fmt_bytes(p->cache, b[5], 32), (long long)p->slots, (long long)p->experts,
           p->experts ? 100.0 * (double)p->slots / (double)p->experts : 0, cli_fmt_bytes(p->slot_bytes, b[6], 32));
    if (p->pin) printf("  pinned tier:         %s of the cache\n", cli_fmt_bytes(p->pin, b[0], 32));
    printf("  unused:              %s\n", cli_fmt_bytes(p->unused, b[1], 32));
}

static json_t *plan_json(const mem_plan *p)
{
    return json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "n_ctx", (int)p->n_ctx, "n_batch",
                     (int)p->n_batch, "total", (json_int_t)p->total, "spine",
                     (json_int_t)p->spine, "kv", (json_int_t)p->kv, "state", (json_int_t)p->state, "scratch", (json_int_t)p->scratch, "runtime",
                     (json_int_t)(p->runtime + p->meta), "cache", (json_int_t)p->cache, "slot_bytes",
                     (json_int_t)p->slot_bytes, "experts_cached", (json_int_t)p->slots, "experts",
                     (json_int_t)p->experts, "pin", (json_int_t)p->pin, "unused", (json_int_t)p->unused);
}

static void print_json(const gguf_file *g, const model_summary *s, const mem_plan *plan)
{
    json_t *meta = json_object();
    for (uint64_t i = 0; i < g->n_kv; i++) json_object_set_new(meta, g->kv[i].key, value_json(&g->kv[i].v));
    json_t *tensors = json_array();
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
        json_array_append_new(tensors, json_pack("{s:s,s:s,s:o,s:I,s:I,s:i,s:b}", "name", t->name, "type",
                                                 ggml_type_name(t->type), "shape", shape, "bytes",
                                                 (json_int_t)t->nbytes, "offset", (json_int_t)t->file_off, "part",
                                                 (int)t->file, "expert", gguf_is_expert_tensor(t->name)));
    }
    json_t *root = json_pack("{s:s,s:i,s:i,s:i,s:s,s:s,s:o,s:o,s:o}", "file", g->path, "version", (int)g->version,
                             "parts", (int)g->n_parts, "alignment", (int)g->alignment, "architecture", s->arch,
                             "tokenizer", s->tokenizer, "metadata", meta, "tensors", tensors, "summary",
                             summary_json(s));
    if (plan) json_object_set_new(root, "memory_plan", plan_json(plan));
    json_dumpf(root, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    printf("\n");
    json_decref(root);
}

static void inspect_usage(void)
{
    printf("usage: sluice inspect [-m] MODEL.gguf [--json] [--mem SIZE [-c CTX] [-t N] [-b N] [--kv MODE] [--pin SIZE]]\n"
           "  Prints the architecture and hyperparameters, the tokenizer, every tensor\n"
           "  (name, type, shape, bytes, offset) and how the weights split into the\n"
           "  resident spine and the routed experts that are streamed from disk.\n"
           "  --json               one machine-readable JSON object instead of text\n"
           "  --mem SIZE           also print the memory plan for that budget: spine, KV cache,\n"
           "                       scratch, and how many experts the cache holds\n"
           "  the plan as run/chat would make it with these settings:\n"
           "  -c, --ctx-size N     context tokens for the KV cache (default as for run)\n"
           "  -t, --threads N      threads (scratch grows with them; default physical cores)\n"
           "  -b, --batch-size N   prompt tokens per layer-major pass\n"
           "  --kv MODE            KV cache type: f16 (default), f32, f16-noflash\n"
           "  --pin SIZE           pinned tier of the hottest experts, part of --mem\n");
}

typedef struct {
    const char *path;
    bool json;
    engine_opts eo;
} inspect_args;

static bool opt_is(const char *o, const char *short_name, const char *long_name)
{
    return !strcmp(o, short_name) || !strcmp(o, long_name);
}

/* Returns 1 to go on, 0 after --help, -1 on a bad option (printed). */
static int parse_inspect(int argc, char **argv, inspect_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(o, "--json")) a->json = true;
        else if (!strcmp(o, "-h") || !strcmp(o, "--help")) return inspect_usage(), 0;
        else if (!strcmp(o, "-m") && v) a->path = argv[++i];
        else if (!strcmp(o, "--mem") && v) {
            int64_t b = cli_parse_size(argv[++i]);
            if (b <= 0) return cli_fail("--mem: expected a size like 6G, got '%s'", v), -1;
            a->eo.mem = (uint64_t)b;
        } else if (!strcmp(o, "--pin") && v) {
            int64_t b = cli_parse_size(argv[++i]);
            if (b <= 0) return cli_fail("--pin: expected a size like 1G, got '%s'", v), -1;
            a->eo.pin = (uint64_t)b;
        } else if (!strcmp(o, "--kv") && v) {
            if (cli_stream_option(CLI_OPT_KV, argv[++i], &a->eo) < 0) return -1;
        } else if (opt_is(o, "-c", "--ctx-size") || opt_is(o, "-t", "--threads") || opt_is(o, "-b", "--batch-size")) {
            if (!v) return cli_fail("inspect: option %s needs a value", o), -1;
            if (cli_parse_int(o, argv[++i], 1, 1L << 24, &n)) return -1;
            char c = o[1] == '-' ? o[2] : o[1];
            if (c == 'c') a->eo.n_ctx = (int32_t)n;
            else if (c == 't') a->eo.threads = (int)n;
            else a->eo.n_batch = (int32_t)n;
        } else if (o[0] == '-') return cli_fail("inspect: unknown option '%s'", o), -1;
        else a->path = o;
    }
    return 1;
}

int cmd_inspect(int argc, char **argv)
{
    inspect_args a;
    int r = parse_inspect(argc, argv, &a);
    if (r <= 0) return r < 0 ? 2 : 0; /* 2: a usage error, as run/chat/bench */
    const char *path = a.path ? a.path : cli_default_model();
    if (!path) return cli_fail("inspect: no model given (sluice inspect MODEL.gguf)");
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, path, &err)) return cli_fail("%s", err.msg);
    model_summary s;
    if (model_summary_build(&s, g, &err)) {
        gguf_close(g);
        return cli_fail("%s", err.msg);
    }
    /* a dense model still gets its inspection: the budget just has nothing to plan */
    bool plan_on = a.eo.mem && s.n_expert > 0;
    mem_plan plan;
    a.eo.n_ctx_cap = !a.path || cli_is_bundled(path) ? CLI_BUNDLED_CTX : CLI_MAX_DEFAULT_CTX;
    if (plan_on && engine_plan(path, &a.eo, &plan, &err)) {
        model_summary_free(&s);
        gguf_close(g);
        return cli_fail("%s", err.msg);
    }
    if (a.json) print_json(g, &s, plan_on ? &plan : NULL);
    else print_text(g, &s);
    if (plan_on) print_plan(&plan, a.json);
    else if (a.eo.mem)
        fprintf(stderr, "sluice: --mem has no effect: the model is dense (no routed experts to stream); it runs "
                        "whole in RAM\n");
    model_summary_free(&s);
    gguf_close(g);
    return 0;
}
