#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#include "cli/cli.h"
#include "cli/cli_gen.h"

#define FAIL(...) (cli_fail(__VA_ARGS__), -1)

/* Whether PATH lies in the models/ directory of the checkout this binary was
 * built in (<exe>/../models): the bundled tiny models live there. */
bool cli_is_bundled(const char *path)
{
    char exe[PATH_MAX], dir[PATH_MAX + 16], rdir[PATH_MAX], rfile[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return false;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = 0;
    snprintf(dir, sizeof dir, "%s/../models", exe);
    if (!realpath(dir, rdir) || !realpath(path, rfile)) return false;
    size_t k = strlen(rdir);
    return !strncmp(rfile, rdir, k) && rfile[k] == '/' && !strchr(rfile + k + 1, '/');
}


/* SLUICE_FAULT_READ=N turns the Nth completed expert read into EIO: how
 * the end-to-end tests check that a failed read stops the run with a clear
 * error instead of skipping an expert. */
static int fault_nth(void *ctx, uint32_t file, uint64_t off, uint32_t len)
{
    (void)file, (void)off, (void)len;
    long *left = ctx;
    return --*left == 0 ? -EIO : 0;
}

static void arm_fault(cli_model *cm, engine_opts *eo)
{
    const char *v = getenv("SLUICE_FAULT_READ");
    if (!v || atol(v) <= 0) return;
    cm->fault_countdown = atol(v);
    eo->fault = fault_nth;
    eo->fault_ctx = &cm->fault_countdown;
}

int cli_model_open(cli_model *cm, const cli_model_opts *o)
{
    memset(cm, 0, sizeof *cm);
    cm->path = o->model_path ? o->model_path : cli_default_model();
    if (!cm->path) return FAIL("no model given (-m FILE) and the bundled models/tinymoe-q8_0.gguf was not found");
    cm->bundled = !o->model_path || cli_is_bundled(cm->path);
    engine_opts eo = o->eo;
    eo.model_path = cm->path;
    eo.threads = o->threads;
    eo.no_session = o->model_only;
    eo.n_ctx = o->n_ctx;
    eo.n_ctx_cap = cm->bundled ? CLI_BUNDLED_CTX : CLI_MAX_DEFAULT_CTX;
    arm_fault(cm, &eo);
    sl_err err;
    if (engine_open(&cm->eng, &eo, &err)) return FAIL("%s", err.msg);
    cm->model = cm->eng.model;
    cm->pool = cm->eng.pool;
    cm->session = cm->eng.session;
    return 0;
}

void cli_model_close(cli_model *cm)
{
    sl_err err;
    if (cm->eng.model && engine_write_trace(&cm->eng, &err)) fprintf(stderr, "sluice: %s\n", err.msg);
    engine_close(&cm->eng);
    memset(cm, 0, sizeof *cm);
}

const char CLI_STREAM_HELP[] =
    "expert placement (default: in RAM, or streamed when the model does not fit):\n"
    "  --mem SIZE           hard memory budget for everything (e.g. 6G); routed experts\n"
    "                       stream from disk through a cache of what is left\n"
    "  --io MODE            uring (default), pread, or mmap (page cache baseline)\n"
    "  --pin SIZE           pinned tier of the hottest experts (from the heat file), part of --mem\n"
    "  --heat-file PATH     heat histogram to use and update (default\n"
    "                       $XDG_CACHE_HOME or ~/.cache, then sluice/<model id>.heat)\n"
    "  --no-heat            neither read nor update the heat histogram\n"
    "  --pack PACK          read experts from a multi-drive pack (sluice pack)\n"
    "  --verify             check every pack record's checksum on read\n"
    "  -b, --batch-size N   most prompt tokens per layer-major pass (streaming: each expert is\n"
    "                       read once per layer per pass; default 512 in RAM,\n"
    "                       min(context, 2048) streaming)\n"
    "  --kv MODE            KV cache: f16 (default, flash attention like llama.cpp), f32, f16-noflash\n"
    "  --prefetch MODE      predict the next layer's experts and read them ahead: auto (per layer\n"
    "                       the best predictor, off where none pays; the default when streaming),\n"
    "                       next (always the next layer's router), off (the default in RAM)\n"
    "  --cache-policy P     expert cache eviction: ahead (default: evicts the expert expected\n"
    "                       to be needed last), lfru, lru (docs/CACHE.md)\n"
    "  --trace-out FILE     write the routing trace (shared/traces schema, with the pilot's\n"
    "                       predictions) for sluice replay and sluice heat --trace\n";

static int parse_size(const char *name, const char *arg, uint64_t *out)
{
    int64_t v = cli_parse_size(arg);
    if (v <= 0) return FAIL("%s: expected a size like 6G, 512M or 1.5GiB, got '%s'", name, arg);
    *out = (uint64_t)v;
    return 0;
}

static int parse_kv(const char *arg, sl_kv_mode *out)
{
    if (!strcmp(arg, "f16")) *out = SL_KV_F16_FLASH;
    else if (!strcmp(arg, "f32")) *out = SL_KV_F32;
    else if (!strcmp(arg, "f16-noflash")) *out = SL_KV_F16;
    else return FAIL("--kv: expected f16, f32 or f16-noflash, got '%s'", arg);
    return 0;
}

int cli_stream_option(int opt, const char *arg, engine_opts *eo)
{
    long v;
    switch (opt) {
    case CLI_OPT_MEM: return parse_size("--mem", arg, &eo->mem) ? -1 : 1;
    case CLI_OPT_PIN: return parse_size("--pin", arg, &eo->pin) ? -1 : 1;
    case CLI_OPT_IO: {
        int io = store_io_parse(arg);
        if (io < 0) return FAIL("--io: expected uring, pread or mmap, got '%s'", arg);
        eo->io = (store_io)io, eo->io_set = true;
        return 1;
    }
    case CLI_OPT_HEAT_FILE: eo->heat_file = arg; return 1;
    case CLI_OPT_NO_HEAT: eo->no_heat = true; return 1;
    case CLI_OPT_PACK: eo->pack = arg; return 1;
    case CLI_OPT_VERIFY: eo->verify = true; return 1;
    case CLI_OPT_KV: return parse_kv(arg, &eo->kv_mode) ? -1 : 1;
    case CLI_OPT_PREFETCH: {
        int m = sl_prefetch_mode_parse(arg);
        if (m < 0) return FAIL("--prefetch: expected auto, next or off, got '%s'", arg);
        eo->prefetch = (sl_prefetch_mode)m, eo->prefetch_set = true;
        return 1;
    }
    case CLI_OPT_CACHE_POLICY: {
        int pol = cache_policy_parse(arg);
        if (pol < 0 || pol == CACHE_OPT)
            return FAIL("--cache-policy: expected ahead, lfru or lru, got '%s'%s", arg,
                        pol == CACHE_OPT ? " (opt needs the future: sluice replay --policy opt)" : "");
        eo->policy = (cache_policy)pol, eo->policy_set = true;
        return 1;
    }
    case CLI_OPT_TRACE_OUT: eo->trace_out = arg; return 1;
    case 'b':
        if (cli_parse_int("-b", arg, 1, 1L << 20, &v)) return -1;
        eo->n_batch = (int32_t)v;
        return 1;
    default: return 0;
    }
}

void cli_print_engine(const sl_engine *e, bool verbose)
{
    /* one warning per line of the note, each with the prefix */
    for (const char *p = e->note; *p;) {
        size_t len = strcspn(p, "\n");
        fprintf(stderr, "sluice: %.*s\n", (int)len, p);
        p += len + (p[len] == '\n');
    }
    if (!verbose || !e->streaming || e->io == STORE_IO_MMAP) return;
    char a[32], b[32], c[32], d[32], f[32];
    fprintf(stderr, "sluice: streaming experts (%s): --mem %s = spine %s + KV %s + scratch/runtime %s + cache %s (%lld experts of %lld)\n",
            store_io_name(e->io), cli_fmt_bytes(e->plan.total, a, 32), cli_fmt_bytes(e->plan.spine, b, 32),
            cli_fmt_bytes(e->plan.kv, c, 32), cli_fmt_bytes(e->plan.scratch + e->plan.runtime + e->plan.meta, d, 32),
            cli_fmt_bytes(e->plan.cache, f, 32), (long long)e->plan.slots, (long long)e->plan.experts);
    if (e->info[0]) fprintf(stderr, "sluice: heat: %s\n", e->info);
}

void cli_stream_stats(const sl_engine *e, gen_stats *st)
{
    engine_stream_stats ss;
    engine_stream_stats_get(e, &ss);
    st->streaming = ss.streaming;
    st->expert_bytes_read = ss.expert_bytes_read;
    int64_t toks = st->prompt_tokens + st->decode_steps;
    st->expert_bytes_per_token = toks ? (double)ss.expert_bytes_read / (double)toks : 0;
    st->distinct_experts = ss.distinct_experts;
    st->cache_hits = ss.cache_hits;
    st->cache_misses = ss.cache_misses;
    st->io_wait_s = ss.io_wait_s;
    double busy = st->prompt_s + st->decode_s;
    st->compute_s = busy > ss.io_wait_s ? busy - ss.io_wait_s : 0;
    st->read_gbps = ss.read_gbps;
    st->prefill_read_amplification = ss.prefill_read_amplification;
    st->demand_misses = ss.demand_misses;
    st->prefetch_reads = ss.prefetch_reads;
    st->prefetch_used = ss.prefetch_used;
    st->prefetch_wasted_bytes = ss.prefetch_wasted_bytes;
    st->prefetch_cancelled = ss.prefetch_cancelled;
    st->expert_bytes_loaded = ss.bytes_loaded;
    st->optimum_bytes = ss.optimum_bytes;
    st->optimum_ratio = ss.optimum_bytes ? (double)ss.bytes_loaded / (double)ss.optimum_bytes : 0;
    st->disk_busy_fraction = busy > 0 ? ss.read_busy_s / busy : 0;
}

void cli_print_prefetch(FILE *f, sl_engine *e)
{
    sl_prefetch_stats ps;
    session_prefetch_stats(e->session, &ps);
    if (ps.mode == SL_PREFETCH_OFF || !ps.n_layers) return;
    fprintf(f, "%-27s %.1f%% recall, %.1f%% precision over %llu decode steps (%s)\n", "expert prediction",
            100 * ps.recall, 100 * ps.precision, (unsigned long long)ps.steps, sl_prefetch_mode_name(ps.mode));
    fprintf(f, "%-27s", "  per layer recall");
    for (int i = 0; i < ps.n_layers; i++) {
        const sl_prefetch_layer *l = &ps.layers[i];
        fprintf(f, "%s%d %.0f%%", i ? ", " : " ", l->layer, 100 * l->recall);
    }
    fputc('\n', f);
    engine_stream_stats ss;
    engine_stream_stats_get(e, &ss);
    char b[32];
    if (ss.streaming)
        fprintf(f, "%-27s %llu used, %s wasted\n", "  prefetched experts", (unsigned long long)ss.prefetch_used,
                cli_fmt_bytes(ss.prefetch_wasted_bytes, b, sizeof b));
}

/* One layer of the "prefetch" JSON object. */
static json_t *prefetch_layer_json(const sl_prefetch_layer *l)
{
    json_t *o = json_object(), *src = json_object();
    json_object_set_new(o, "layer", json_integer(l->layer));
    json_object_set_new(o, "recall", json_real(l->recall));
    json_object_set_new(o, "precision", json_real(l->precision));
    json_object_set_new(o, "steps", json_integer((json_int_t)l->steps));
    json_object_set_new(o, "hinted_steps", json_integer((json_int_t)l->hinted_steps));
    /* each predictor's own recall (computed on every step, hinted or not) */
    for (int c = 0; c < SL_PRED_COUNT; c++)
        json_object_set_new(src, sl_pred_source_name(c), l->src_recall[c] < 0 ? json_null() : json_real(l->src_recall[c]));
    json_object_set_new(o, "predictor_recall", src);
    json_object_set_new(o, "auto_choice", json_string(sl_pred_source_name(l->choice)));
    return o;
}

int cli_prefetch_json(sl_engine *e, json_t *obj)
{
    sl_prefetch_stats ps;
    session_prefetch_stats(e->session, &ps);
    if (ps.mode == SL_PREFETCH_OFF) return 0;
    engine_stream_stats ss;
    engine_stream_stats_get(e, &ss);
    json_t *o = json_object(), *layers = json_array();
    if (!o || !layers) return json_decref(o), json_decref(layers), -1;
    json_object_set_new(o, "mode", json_string(sl_prefetch_mode_name(ps.mode)));
    json_object_set_new(o, "steps", json_integer((json_int_t)ps.steps));
    json_object_set_new(o, "recall", json_real(ps.recall));
    json_object_set_new(o, "precision", json_real(ps.precision));
    json_object_set_new(o, "used", json_integer((json_int_t)ss.prefetch_used));
    json_object_set_new(o, "wasted_bytes", json_integer((json_int_t)ss.prefetch_wasted_bytes));
    for (int i = 0; i < ps.n_layers; i++) json_array_append_new(layers, prefetch_layer_json(&ps.layers[i]));
    json_object_set_new(o, "per_layer", layers);
    return json_object_set_new(obj, "prefetch", o);
}

uint32_t cli_random_seed(void)
{
    uint32_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) s = (uint32_t)time(NULL) ^ (uint32_t)getpid() * 2654435761u;
    return s == 0xFFFFFFFFu ? 0 : s;
}

int cli_parse_int(const char *name, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return FAIL("%s: expected an integer in [%ld, %ld], got '%s'", name, lo, hi, s);
    *out = v;
    return 0;
}

int cli_parse_float(const char *name, const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return FAIL("%s: expected a number, got '%s'", name, s);
    *out = v;
    return 0;
}

int cli_parse_ids(const char *s, int32_t n_vocab, int32_t **ids, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return FAIL("out of memory for %zu token ids", cap);
    size_t k = 0;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_vocab || (*end && *end != ',')) {
            free(a);
            return FAIL("--prompt-ids: bad token id at '%.20s' (ids are integers in [0, %d), comma-separated)", p,
                            (int)n_vocab);
        }
        a[k++] = (int32_t)v;
        if (!*end) break;
        p = end + 1;
    }
    *ids = a;
    *n = k;
    return 0;
}

json_t *cli_json_text(const char *s, size_t n)
{
    char *buf = malloc(n * 3 + 1); /* each bad byte becomes 3 bytes */
    if (!buf) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (len > 0) {
            memcpy(buf + k, s + i, (size_t)len);
            k += (size_t)len, i += (size_t)len;
        } else {
            memcpy(buf + k, "\xEF\xBF\xBD", 3);
            k += 3, i++;
        }
    }
    json_t *j = json_stringn(buf, k);
    free(buf);
    return j;
}

json_t *cli_json_ids(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_fail("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 0, n = 0, r;
    char *buf = NULL;
    const char *why = NULL;
    do {
        if (n + 1 >= cap) {
            char *b = cap >= CLI_MAX_FILE ? NULL : realloc(buf, cap = cap ? 2 * cap : 4096);
            if (!b) {
                why = cap >= CLI_MAX_FILE ? "file too large (limit 64 MiB)" : "out of memory";
                break;
            }
            buf = b;
        }
        r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
    } while (r > 0);
    if (!why && ferror(f)) why = strerror(errno);
    fclose(f);
    if (why) {
        free(buf);
        cli_fail("cannot read %s: %s", path, why);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

void cli_print_stats(FILE *f, const gen_stats *st, const sampler_params *sp)
{
    size_t nf;
    const stat_field *fl = stats_fields(&nf);
    for (size_t i = 0; i < nf; i++) {
        if (!fl[i].label || (fl[i].streaming && !st->streaming)) continue;
        double v = stats_value(st, &fl[i]);
        char b[32];
        if (!strcmp(fl[i].unit, "bytes")) fprintf(f, "%-27s %s\n", fl[i].label, cli_fmt_bytes((uint64_t)v, b, sizeof b));
        else if (fl[i].kind == STAT_F64) fprintf(f, "%-27s %.3f %s\n", fl[i].label, v, fl[i].unit);
        else fprintf(f, "%-27s %.0f\n", fl[i].label, v);
    }
    if (sp) fprintf(f, "%-27s %u\n", "seed", sp->seed);
}

int cli_write_json(const char *path, json_t *root)
{
    if (json_dump_file(root, path, JSON_INDENT(2)) != 0) return FAIL("cannot write %s", path);
    return 0;
}

int cli_gen_option(int opt, const char *arg, cli_model_opts *mo, sampler_params *sp, bool *seed_set)
{
    long v;
    switch (opt) {
    case 'm': mo->model_path = arg; return 1;
    case 'b': case CLI_OPT_MEM: case CLI_OPT_IO: case CLI_OPT_PIN: case CLI_OPT_HEAT_FILE: case CLI_OPT_NO_HEAT:
    case CLI_OPT_PACK: case CLI_OPT_VERIFY: case CLI_OPT_KV: case CLI_OPT_PREFETCH: case CLI_OPT_CACHE_POLICY:
    case CLI_OPT_TRACE_OUT:
        return cli_stream_option(opt, arg, &mo->eo);
    case 'c':
        if (cli_parse_int("-c", arg, 0, 1L << 24, &v)) return -1;
        mo->n_ctx = (int32_t)v;
        return 1;
    case 't':
        if (cli_parse_int("-t", arg, 0, 1024, &v)) return -1;
        mo->threads = (int)v;
        return 1;
    case CLI_OPT_TEMP: return cli_parse_float("--temp", arg, &sp->temp) ? -1 : 1;
    case CLI_OPT_TOPP: return cli_parse_float("--top-p", arg, &sp->top_p) ? -1 : 1;
    case CLI_OPT_MINP: return cli_parse_float("--min-p", arg, &sp->min_p) ? -1 : 1;
    case CLI_OPT_TOPK:
        if (cli_parse_int("--top-k", arg, -1, INT32_MAX, &v)) return -1;
        sp->top_k = (int32_t)v;
        return 1;
    case CLI_OPT_SEED:
        if (cli_parse_int("--seed", arg, -1, 0xFFFFFFFFL, &v)) return -1;
        sp->seed = (uint32_t)v;
        *seed_set = v != -1 && v != 0xFFFFFFFFL;
        return 1;
    default: return 0;
    }
}

/* ChatML, the format llama.cpp falls back to for models without a template. */
static const char CHATML[] =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}";

static const char *token_text(const sl_vocab *v, int32_t id)
{
    return id >= 0 ? vocab_token_text(v, id) : NULL;
}

int cli_chat_open(cli_chat *c, const sl_model *m)
{
    memset(c, 0, sizeof *c);
    const gguf_file *g = model_gguf(m);
    const gguf_str *s;
    sl_err err;
    int has = gguf_get_str(g, "tokenizer.chat_template", &s, &err);
    if (has < 0) return FAIL("%s", err.msg);
    const char *text = has ? s->s : CHATML;
    size_t len = has ? (size_t)s->len : strlen(CHATML);
    c->builtin = !has;
    if (chat_tmpl_parse(&c->tmpl, text, len, &err)) return FAIL("chat template of %s: %s", g->path, err.msg);
    c->stops = chat_stop_strings(chat_detect_family(text, len));
    while (c->stops[c->n_stops]) c->n_stops++;
    c->bos = token_text(model_vocab(m), vocab_bos(model_vocab(m)));
    c->eos = token_text(model_vocab(m), vocab_eos(model_vocab(m)));
    return 0;
}

void cli_chat_close(cli_chat *c)
{
    chat_tmpl_free(c->tmpl);
    memset(c, 0, sizeof *c);
}

int cli_chat_tokens(const cli_chat *c, const sl_model *m, const chat_msg *msgs, size_t n, int32_t **ids,
                    size_t *n_ids, char **text)
{
    chat_req r = {.msgs = msgs, .n_msgs = n, .add_generation_prompt = true, .bos_token = c->bos,
                  .eos_token = c->eos};
    char *out;
    size_t len;
    sl_err err;
    if (chat_tmpl_render(c->tmpl, &r, &out, &len, &err)) return FAIL("chat template: %s", err.msg);
    bool has_bos = c->bos && *c->bos && !strncmp(out, c->bos, strlen(c->bos));
    int rc = vocab_tokenize(model_vocab(m), out, len, !has_bos, true, ids, n_ids, &err);
    if (rc) cli_fail("tokenizing the chat prompt: %s", err.msg);
    if (text && !rc) *text = out;
    else free(out);
    return rc ? -1 : 0;
}
