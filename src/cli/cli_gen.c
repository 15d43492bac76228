#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "engine/api_int.h"

#define FAIL(...) (cli_fail(__VA_ARGS__), -1)

/* Whether PATH lies in a bundled models directory of this binary (the
 * checkout's models/ or the installed share/sluice/models/): the bundled
 * tiny models live there. */
bool cli_is_bundled(const char *path)
{
    char dirs[2][PATH_MAX + 32], rdir[PATH_MAX], rfile[PATH_MAX];
    if (!realpath(path, rfile)) return false;
    int nd = cli_model_dirs(dirs, 2);
    for (int i = 0; i < nd; i++) {
        if (!realpath(dirs[i], rdir)) continue;
        size_t k = strlen(rdir);
        if (!strncmp(rfile, rdir, k) && rfile[k] == '/' && !strchr(rfile + k + 1, '/')) return true;
    }
    return false;
}

/* sluice-test (the test build) only: SLUICE_FAULT_READ=N turns the Nth
 * completed expert read into EIO: how the end-to-end tests check that a
 * failed read stops the run with a clear error instead of skipping an
 * expert.  The release binary has neither the hook nor the variable. */
#ifdef SLUICE_TEST_FAULTS
static int fault_nth(void *ctx, uint32_t file, uint64_t off, uint32_t len)
{
    (void)file, (void)off, (void)len;
    long *left = ctx;
    return --*left == 0 ? -EIO : 0;
}

static void arm_fault(long *countdown, engine_opts *eo)
{
    const char *v = getenv("SLUICE_FAULT_READ");
    if (!v || atol(v) <= 0) return;
    *countdown = atol(v);
    eo->fault = fault_nth;
    eo->fault_ctx = countdown;
}
#else
static void arm_fault(long *countdown, engine_opts *eo) { (void)countdown, (void)eo; }
#endif

int cli_model_open(cli_model *cm, const cli_model_opts *o)
{
    memset(cm, 0, sizeof *cm);
    cm->path = o->model_path ? o->model_path : cli_default_model();
    if (!cm->path) return FAIL("no model given (-m FILE) and the bundled models/tinymoe-q8_0.gguf was not found");
    cm->bundled = !o->model_path || cli_is_bundled(cm->path);
    engine_opts eo = o->eo;
    eo.model_path = cm->path;
    eo.threads = o->threads > 0 ? o->threads : o->eo.threads; /* -t, else -tb */
    eo.no_session = o->model_only;
    eo.n_ctx = o->n_ctx;
    eo.n_ctx_cap = cm->bundled ? CLI_BUNDLED_CTX : CLI_MAX_DEFAULT_CTX;
    arm_fault(&cm->fault_countdown, &eo);
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
    "                       next (always the next layer's router), off (the default in RAM)\n\n"
    "  --cache-policy P     expert cache eviction: ahead (default: evicts the expert expected\n"
    "                       to be needed last), lfru, lru (docs/CACHE.md)\n"
    "  --prefetch-admit R   which guesses are worth a read: cost (default: expected stall saved\n"
    "                       beats the disk time a wrong guess takes, at the disk's busy share),\n"
    "                       rank (the rule before: rank precision >= 1/2 on a busy disk, else\n"
    "                       1/4), off (every guess the cache can place; docs/PREFETCH.md)\n"
    "  --trace-out FILE     write the routing trace (shared/traces schema, with the pilot's\n"
    "                       predictions) for sluice replay and sluice heat --trace\n\n"
    "llama.cpp spellings (multi-letter short options are whole options):\n"
    "  -fa, --flash-attn on|off|auto   flash attention (default auto: on, as llama.cpp)\n"
    "  -ctk, --cache-type-k T / -ctv, --cache-type-v T   KV cache type, f16 or f32 (as --kv)\n"
    "  -ub, --ubatch-size N  as -b (sluice has one batch size: tokens per layer-major pass)\n"
    "  -tb, --threads-batch N   threads when -t is not given (prompt and generation share them)\n"
    "  --no-warmup, --no-mmap   accepted: sluice warms nothing up and reads experts without mmap\n"
    "  --mlock              accepted, not applied: memory is bounded by --mem instead\n"
    "  -ngl, -mg, -sm, -ts, -dev, -nkvo, -ot, -cmoe, -cnv, -np: refused with the reason";

const char CLI_DRAFT_HELP[] =
    "speculative decoding (output identical to plain decoding; docs/DRAFT.md):\n"
    "  --draft D            ngram (continue an earlier match of the last tokens), a draft model\n"
    "                       with the target's vocabulary (MODEL.gguf: n-gram first, the model\n"
    "                       otherwise), or random (garbage proposals: tests, economics)\n"
    "  --draft-max K        draft exactly up to K tokens a step (1..16; default adaptive up to 16)\n"
    "  --draft-min K        fewer drafted tokens than K: a plain step instead (default 1)\n"
    "  --draft-p-min P      stop drafting below draft probability P (default 0: never)\n"
    "  --draft-vocab N      a draft model proposes only its first N token ids, the only rows its\n"
    "                       output layer computes (default 0: auto, as many as make that layer\n"
    "                       weigh what the rest does, at least 8192; -1: every id)\n"
    "  --ngram-min N, --ngram-max N   n-gram lookup lengths (default 1 and 4)\n";

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

/* -ctk / -ctv: one type for K and V, f16 or f32. */
static int cache_type(const char *name, const char *arg, engine_opts *eo)
{
    bool flash_off = eo->kv_mode == SL_KV_F16;
    if (!strcmp(arg, "f16")) eo->kv_mode = flash_off ? SL_KV_F16 : SL_KV_F16_FLASH;
    else if (!strcmp(arg, "f32")) eo->kv_mode = SL_KV_F32;
    else return FAIL("%s: sluice's KV cache is f16 or f32 (one type for K and V), not '%s'", name, arg);
    return 0;
}

static int flash_attn(const char *arg, engine_opts *eo)
{
    if (!strcmp(arg, "off")) {
        if (eo->kv_mode == SL_KV_F16_FLASH) eo->kv_mode = SL_KV_F16;
    } else if (!strcmp(arg, "on")) {
        if (eo->kv_mode == SL_KV_F32) return FAIL("--flash-attn on needs an f16 KV cache (f32 given)");
        eo->kv_mode = SL_KV_F16_FLASH;
    } else if (strcmp(arg, "auto")) return FAIL("--flash-attn: expected on, off or auto, got '%s'", arg);
    return 0;
}

int cli_stream_option(int opt, const char *arg, engine_opts *eo)
{
    long v;
    switch (opt) {
    case CLI_OPT_FLASH_ATTN: return flash_attn(arg, eo) ? -1 : 1;
    case CLI_OPT_CACHE_TYPE_K: return cache_type("--cache-type-k", arg, eo) ? -1 : 1;
    case CLI_OPT_CACHE_TYPE_V: return cache_type("--cache-type-v", arg, eo) ? -1 : 1;
    case CLI_OPT_THREADS_BATCH:
        if (cli_parse_int("--threads-batch", arg, 1, 1024, &v)) return -1;
        eo->threads = (int)v;
        return 1;
    case CLI_OPT_NO_WARMUP: case CLI_OPT_NO_MMAP: return 1;
    case CLI_OPT_MLOCK:
        fprintf(stderr, "sluice: --mlock is not applied (the memory sluice uses is bounded by --mem instead)\n");
        return 1;
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
    case CLI_OPT_PREFETCH_ADMIT: {
        int m = pf_admit_parse(arg);
        if (m < 0) return FAIL("--prefetch-admit: expected cost, rank or off, got '%s'", arg);
        eo->prefetch_admit = (pf_admit_mode)m;
        return 1;
    }
    case 'b': case CLI_OPT_UBATCH:
        if (cli_parse_int(opt == 'b' ? "-b" : "--ubatch-size", arg, 1, 1L << 20, &v)) return -1;
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
    bool in = !strcmp(path, "-"); /* "-" is standard input, as in llama.cpp's -f */
    FILE *f = in ? stdin : fopen(path, "rb");
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
    if (!in) fclose(f);
    if (why) {
        free(buf);
        cli_fail("cannot read %s: %s", path, why);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* The expert prediction lines (docs/PREFETCH.md) of a stats object. */
static void print_prefetch(FILE *f, const json_t *st)
{
    const json_t *p = json_object_get(st, "prefetch");
    if (!p) return;
    const json_t *layers = json_object_get(p, "per_layer");
    if (!json_array_size(layers)) return;
    fprintf(f, "%-27s %.1f%% recall, %.1f%% precision over %lld decode steps (%s)\n", "expert prediction",
            100 * json_number_value(json_object_get(p, "recall")), 100 * json_number_value(json_object_get(p, "precision")),
            (long long)json_integer_value(json_object_get(p, "steps")), json_string_value(json_object_get(p, "mode")));
    fprintf(f, "%-27s", "  per layer recall");
    size_t i;
    const json_t *l;
    json_array_foreach(layers, i, l)
        fprintf(f, "%s%lld %.0f%%", i ? ", " : " ", (long long)json_integer_value(json_object_get(l, "layer")),
                100 * json_number_value(json_object_get(l, "recall")));
    fputc('\n', f);
    char b[32];
    if (json_integer_value(json_object_get(st, "streaming")))
        fprintf(f, "%-27s %lld used, %s wasted\n", "  prefetched experts",
                (long long)json_integer_value(json_object_get(p, "used")),
                cli_fmt_bytes((uint64_t)json_integer_value(json_object_get(p, "wasted_bytes")), b, sizeof b));
}

/* The speculative decoding line(s), when a draft was on. */
static void print_draft(FILE *f, const json_t *st)
{
    const json_t *d = json_object_get(st, "draft");
    if (!d) return;
    fprintf(f, "%-27s %s: %lld of %lld drafted tokens kept (%.1f%%) in %lld verifications\n", "draft",
            json_string_value(json_object_get(d, "mode")), (long long)json_integer_value(json_object_get(d, "accepted")),
            (long long)json_integer_value(json_object_get(d, "proposed")),
            100 * json_number_value(json_object_get(d, "acceptance")), (long long)json_integer_value(json_object_get(d, "steps")));
    const json_t *a = json_object_get(d, "acceptance_by_depth"), *k = json_object_get(d, "k_hist");
    fprintf(f, "%-27s", "  acceptance by depth");
    for (size_t i = 0; i < json_array_size(a); i++) fprintf(f, " %.0f%%", 100 * json_number_value(json_array_get(a, i)));
    fprintf(f, "\n%-27s", "  steps by K (0: plain)");
    for (size_t i = 0; i < json_array_size(k); i++) fprintf(f, " %lld", (long long)json_integer_value(json_array_get(k, i)));
    fprintf(f, "\n%-27s %.3f s drafting, %.3f s verifying\n", "  time", json_number_value(json_object_get(d, "draft_s")),
            json_number_value(json_object_get(d, "verify_s")));
    fprintf(f, "%-27s %.3f s predicted of %.3f s priced, mean error %.6f s per verification\n", "  verify cost model",
            json_number_value(json_object_get(d, "verify_predicted_s")),
            json_number_value(json_object_get(d, "verify_priced_s")),
            json_number_value(json_object_get(d, "verify_cost_mae_s")));
}

void cli_print_stats(FILE *f, const json_t *st)
{
    size_t nf;
    const stat_field *fl = stats_fields(&nf);
    bool streaming = json_integer_value(json_object_get(st, "streaming")) != 0;
    for (size_t i = 0; i < nf; i++) {
        if (!fl[i].label || (fl[i].streaming && !streaming)) continue;
        double v = json_number_value(json_object_get(st, fl[i].key));
        char b[32];
        if (!strcmp(fl[i].unit, "bytes")) fprintf(f, "%-27s %s\n", fl[i].label, cli_fmt_bytes((uint64_t)v, b, sizeof b));
        else if (fl[i].kind == STAT_F64) fprintf(f, "%-27s %.3f %s\n", fl[i].label, v, fl[i].unit);
        else fprintf(f, "%-27s %.0f\n", fl[i].label, v);
    }
    fprintf(f, "%-27s %lld\n", "seed", (long long)json_integer_value(json_object_get(st, "seed")));
    print_prefetch(f, st);
    print_draft(f, st);
}

int cli_write_json(const char *path, json_t *root)
{
    if (json_dump_file(root, path, JSON_INDENT(2)) != 0) return FAIL("cannot write %s", path);
    return 0;
}

sluice_sampling cli_sampling_default(void)
{
    sluice_sampling sp = sluice_sampling_default();
    sp.n_predict = -1;
    return sp;
}

const char CLI_TEMPLATE_HELP[] =
    "      --chat-template NAME|FILE  chat template instead of the model's: chatml, a template the\n"
    "                              model names, or a Jinja file\n"
    "      --chat-template-file FILE  a Jinja chat template instead of the model's\n";

const char CLI_GRAMMAR_HELP[] =
    "      --grammar GBNF          constrain the output to a GBNF grammar (llama.cpp's syntax, rule root)\n"
    "      --grammar-file FILE     the same, read from FILE\n"
    "      --json-schema SCHEMA    constrain the output to JSON matching a JSON Schema\n"
    "      --json-schema-file FILE the same, read from FILE\n";

void cli_gen_free(cli_model_opts *mo)
{
    free(mo->constraint_file);
    free(mo->template_file);
    mo->constraint_file = mo->template_file = NULL;
}

/* --chat-template NAME|FILE (a readable file is read, anything else is a
 * name: chatml or one the model carries) and --chat-template-file FILE. */
static int template_option(int opt, const char *arg, cli_model_opts *mo)
{
    if (opt == CLI_OPT_CHAT_TEMPLATE && access(arg, R_OK) != 0) {
        mo->chat_template = arg;
        return 1;
    }
    size_t len;
    char *buf = cli_read_file(arg, &len);
    if (!buf) return -1;
    free(mo->template_file);
    mo->chat_template = mo->template_file = buf;
    return 1;
}

/* --grammar / --json-schema and their file forms: one constraint, the last given. */
static int constraint_option(int opt, const char *arg, cli_model_opts *mo, sluice_sampling *sp)
{
    const char *text = arg;
    if (opt == CLI_OPT_GRAMMAR_FILE || opt == CLI_OPT_JSON_SCHEMA_FILE) {
        size_t len;
        char *buf = cli_read_file(arg, &len);
        if (!buf) return -1;
        if (strlen(buf) != len) {
            free(buf);
            return FAIL("%s: the file holds a NUL byte", arg);
        }
        free(mo->constraint_file);
        text = mo->constraint_file = buf;
    }
    bool gbnf = opt == CLI_OPT_GRAMMAR || opt == CLI_OPT_GRAMMAR_FILE;
    sp->grammar = gbnf ? text : NULL;
    sp->json_schema = gbnf ? NULL : text;
    return 1;
}

int cli_draft_option(int opt, const char *arg, spec_setup_opts *d)
{
    long v;
    switch (opt) {
    case CLI_OPT_DRAFT: d->draft = arg; return 1;
    case CLI_OPT_DRAFT_MAX: case CLI_OPT_DRAFT_MIN: case CLI_OPT_NGRAM_MIN: case CLI_OPT_NGRAM_MAX: {
        bool ng = opt == CLI_OPT_NGRAM_MIN || opt == CLI_OPT_NGRAM_MAX;
        const char *name = opt == CLI_OPT_DRAFT_MAX ? "--draft-max" : opt == CLI_OPT_DRAFT_MIN ? "--draft-min"
                           : opt == CLI_OPT_NGRAM_MIN ? "--ngram-min" : "--ngram-max";
        if (cli_parse_int(name, arg, ng ? 1 : 0, ng ? 64 : 16, &v)) return -1;
        int32_t *dst = opt == CLI_OPT_DRAFT_MAX ? &d->k_max : opt == CLI_OPT_DRAFT_MIN ? &d->k_min
                       : opt == CLI_OPT_NGRAM_MIN ? &d->ngram_min : &d->ngram_max;
        *dst = (int32_t)v;
        return 1;
    }
    case CLI_OPT_DRAFT_P_MIN: return cli_parse_float("--draft-p-min", arg, &d->p_min) ? -1 : 1;
    case CLI_OPT_DRAFT_VOCAB:
        if (cli_parse_int("--draft-vocab", arg, -1, INT32_MAX, &v)) return -1;
        d->vocab = (int32_t)v;
        return 1;
    default: return 0;
    }
}

int cli_gen_option(int opt, const char *arg, cli_model_opts *mo, sluice_sampling *sp)
{
    long v;
    switch (opt) {
    case CLI_OPT_GRAMMAR: case CLI_OPT_GRAMMAR_FILE: case CLI_OPT_JSON_SCHEMA: case CLI_OPT_JSON_SCHEMA_FILE:
        return constraint_option(opt, arg, mo, sp);
    case CLI_OPT_CHAT_TEMPLATE: case CLI_OPT_CHAT_TEMPLATE_FILE: return template_option(opt, arg, mo);
    case 'm': mo->model_path = arg; return 1;
    case 'b': case CLI_OPT_MEM: case CLI_OPT_IO: case CLI_OPT_PIN: case CLI_OPT_HEAT_FILE: case CLI_OPT_NO_HEAT:
    case CLI_OPT_PACK: case CLI_OPT_VERIFY: case CLI_OPT_KV: case CLI_OPT_PREFETCH: case CLI_OPT_CACHE_POLICY:
    case CLI_OPT_TRACE_OUT: case CLI_OPT_PREFETCH_ADMIT: case CLI_OPT_FLASH_ATTN: case CLI_OPT_CACHE_TYPE_K: case CLI_OPT_CACHE_TYPE_V:
    case CLI_OPT_UBATCH: case CLI_OPT_THREADS_BATCH: case CLI_OPT_NO_WARMUP: case CLI_OPT_MLOCK: case CLI_OPT_NO_MMAP:
        return cli_stream_option(opt, arg, &mo->eo);
    case 'c':
        if (cli_parse_int("-c", arg, 0, 1L << 24, &v)) return -1;
        mo->n_ctx = (int32_t)v;
        return 1;
    case 't':
        if (cli_parse_int("-t", arg, 0, 1024, &v)) return -1;
        mo->threads = (int)v;
        return 1;
    case CLI_OPT_DRAFT: case CLI_OPT_DRAFT_MAX: case CLI_OPT_DRAFT_MIN: case CLI_OPT_NGRAM_MIN: case CLI_OPT_NGRAM_MAX:
    case CLI_OPT_DRAFT_P_MIN: case CLI_OPT_DRAFT_VOCAB:
        return cli_draft_option(opt, arg, &mo->draft);
    case CLI_OPT_TEMP: return cli_parse_float("--temp", arg, &sp->temp) ? -1 : 1;
    case CLI_OPT_TOPP: return cli_parse_float("--top-p", arg, &sp->top_p) ? -1 : 1;
    case CLI_OPT_MINP: return cli_parse_float("--min-p", arg, &sp->min_p) ? -1 : 1;
    case CLI_OPT_REPEAT_PENALTY: return cli_parse_float("--repeat-penalty", arg, &sp->repeat_penalty) ? -1 : 1;
    case CLI_OPT_PRESENCE_PENALTY: return cli_parse_float("--presence-penalty", arg, &sp->presence_penalty) ? -1 : 1;
    case CLI_OPT_FREQUENCY_PENALTY:
        return cli_parse_float("--frequency-penalty", arg, &sp->frequency_penalty) ? -1 : 1;
    case CLI_OPT_REPEAT_LAST_N:
        if (cli_parse_int("--repeat-last-n", arg, -1, INT32_MAX, &v)) return -1;
        sp->repeat_last_n = (int32_t)v;
        return 1;
    case CLI_OPT_TOPK:
        if (cli_parse_int("--top-k", arg, -1, INT32_MAX, &v)) return -1;
        sp->top_k = (int32_t)v;
        return 1;
    case CLI_OPT_SEED:
        if (cli_parse_int("--seed", arg, -1, 0xFFFFFFFFL, &v)) return -1;
        sp->seed = v == -1 ? SLUICE_SEED_RANDOM : (uint32_t)v;
        return 1;
    default: return 0;
    }
}

/* The engine options the flags filled in, as the API spells them. */
static sluice_options api_options(const cli_model_opts *o, const char *path)
{
    const engine_opts *eo = &o->eo;
    sluice_options so = sluice_options_default();
    so.model = path;
    so.n_ctx = o->n_ctx;
    so.threads = o->threads > 0 ? o->threads : eo->threads; /* -t, else -tb */
    so.n_batch = eo->n_batch;
    so.mem_bytes = eo->mem;
    so.io = eo->io_set ? store_io_name(eo->io) : NULL;
    so.pack = eo->pack;
    so.kv_type = eo->kv_mode == SL_KV_F32 ? "f32" : "f16";
    so.flash_attn = eo->kv_mode == SL_KV_F16 ? 0 : -1;
    so.prefetch = eo->prefetch_set ? sl_prefetch_mode_name(eo->prefetch) : NULL;
    so.heat_file = eo->heat_file;
    so.no_heat = eo->no_heat;
    so.pin_bytes = eo->pin;
    so.chat_template = o->chat_template;
    so.draft = o->draft.draft;
    so.draft_max = o->draft.k_max;
    so.draft_min = o->draft.k_min;
    so.draft_p_min = o->draft.p_min;
    so.draft_vocab = o->draft.vocab;
    so.ngram_min = o->draft.ngram_min;
    so.ngram_max = o->draft.ngram_max;
    return so;
}

int cli_open(cli_model_opts *o, sluice **out, const char **path)
{
    *out = NULL;
    const char *p = o->model_path ? o->model_path : cli_default_model();
    if (!p) return FAIL("no model given (-m FILE) and the bundled models/tinymoe-q8_0.gguf was not found");
    bool bundled = !o->model_path || cli_is_bundled(p);
    sluice_options so = api_options(o, p);
    engine_opts fo = {0};
    arm_fault(&o->fault_countdown, &fo);
    sluice_open_extra x = {.n_ctx_cap = bundled ? CLI_BUNDLED_CTX : CLI_MAX_DEFAULT_CTX, .verify = o->eo.verify,
                           .fault = fo.fault, .fault_ctx = fo.fault_ctx, .policy = o->eo.policy,
                           .policy_set = o->eo.policy_set, .trace_out = o->eo.trace_out,
                           .prefetch_admit = (int)o->eo.prefetch_admit};
    char err[1024];
    if (sluice_open_ex(out, &so, &x, err, sizeof err)) return FAIL("%s", err);
    if (path) *path = p;
    return 0;
}

void cli_print_notes(const sluice *s, bool verbose)
{
    for (const char *p = sluice_notes(s, verbose); *p;) {
        size_t len = strcspn(p, "\n");
        fprintf(stderr, "sluice: %.*s\n", (int)len, p);
        p += len + (p[len] == '\n');
    }
}

int cli_chat_ids(sluice *s, const char *text, int32_t **ids, size_t *n)
{
    char err[1024];
    int32_t *bos = NULL;
    size_t nb = 0;
    /* the BOS the vocabulary would add, if any: tokenizing nothing with it on */
    if (sluice_tokenize(s, "", 0, 1, 0, &bos, &nb, err, sizeof err) ||
        sluice_tokenize(s, text, strlen(text), 0, 1, ids, n, err, sizeof err)) {
        sluice_free(bos);
        return FAIL("tokenizing the chat prompt: %s", err);
    }
    bool add = nb == 1 && !(*n && (*ids)[0] == bos[0]);
    int32_t first = nb ? bos[0] : 0;
    sluice_free(bos);
    if (!add) return 0;
    int32_t *a = realloc(*ids, (*n + 1) * sizeof *a);
    if (!a) return FAIL("out of memory");
    memmove(a + 1, a, *n * sizeof *a);
    a[0] = first;
    *ids = a, (*n)++;
    return 0;
}
