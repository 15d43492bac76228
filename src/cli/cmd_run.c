/* sluice run: one prompt in, generated text streamed out (or one JSON object
 * with --json).  The flags follow llama.cpp's llama-cli / llama-completion. */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/build_info.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "engine/api_int.h"

typedef struct {
    cli_model_opts mo;
    const char *prompt, *prompt_file, *prompt_ids, *system, *logits_out, *stats_json;
    long n_predict;
    sluice_sampling sp;
    bool chat, stats, json, ignore_eos, no_escape, verbose;
    int display; /* --display-prompt 1 / --no-display-prompt 0; -1: when stdout is a terminal */
    const char **stops;
    size_t n_stops;
} run_args;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice run [-m MODEL.gguf] (-p PROMPT | -f FILE | --prompt-ids 1,2,3) [options]\n\n"
            "Generates text from a prompt, streaming it to stdout.  Ctrl-C stops the generation, still\n"
            "prints --stats / --json, and exits 130.\n\n"
            "  -m, --model FILE       GGUF model (default: the bundled models/tinymoe-q8_0.gguf)\n"
            "  -p, --prompt TEXT      prompt text\n"
            "  -f, --file FILE        read the prompt from FILE (-: standard input)\n"
            "  -e, --escape           process escapes (\\n \\t \\\\ \\xHH ...) in -p, --stop, --system, -r (default)\n"
            "      --no-escape        take them literally\n"
            "      --prompt-ids IDS   feed these token ids (comma-separated; no tokenization, no BOS)\n"
            "  -n, --n-predict N      generate at most N tokens (default -1: until EOG or the context is full)\n"
            "  -c, --ctx-size N       context size in tokens (default: min(training context, 4096);\n"
            "                         512 for the bundled models, trained on 512-token windows)\n"
            "  -t, --threads N        threads (default: physical cores)\n"
            "      --temp T           temperature (default 0.8; 0 = greedy)\n"
            "      --top-k K          keep the K most likely tokens (default 40; 0 = off)\n"
            "      --top-p P          keep the smallest set with probability mass P (default 0.95; 1 = off)\n"
            "      --min-p P          drop tokens below P times the best one's probability (default 0.05; 0 = off)\n"
            "      --seed S           random seed (default -1: random; printed by --stats)\n"
            "      --repeat-penalty R penalize the tokens of the last --repeat-last-n (default 1.0 = off)\n"
            "      --repeat-last-n N  tokens the penalties look back over (default 64; 0 = off, -1 = the context)\n"
            "      --presence-penalty P   subtract P from tokens seen there (default 0 = off)\n"
            "      --frequency-penalty F  subtract F per occurrence there (default 0 = off)\n"
            "%s"
            "      --chat             wrap the prompt in the model's chat template (user turn)\n"
            "      --system TEXT      system message for --chat\n"
            "%s"
            "      --stop STR         stop when STR appears (not printed); repeatable\n"
            "  -r, --reverse-prompt STR   the same (llama.cpp's spelling)\n"
            "      --ignore-eos       keep generating through end-of-generation tokens\n"
            "      --display-prompt   print the prompt (as fed to the model) before the generated text\n"
            "                         (the default when stdout is a terminal, as llama.cpp; --echo: the same)\n"
            "      --no-display-prompt   never print it\n"
            "  -v, --verbose          say where the experts live and the memory plan\n"
            "      --stats            print speed, time to first token and peak memory to stderr\n"
            "      --json             print one JSON object with ids, text and timings instead of text\n"
            "      --stats-json FILE  write the timings and peak RSS as JSON to FILE\n"
            "      --logits-out FILE  write the last prompt position's logits (n_vocab little-endian f32)\n\n%s\n%s",
            CLI_GRAMMAR_HELP, CLI_TEMPLATE_HELP, CLI_DRAFT_HELP, CLI_STREAM_HELP);
}

enum {
    O_CHAT = CLI_OPT_FIRST_FREE, O_SYSTEM, O_STOP, O_IGNORE_EOS, O_ECHO, O_STATS, O_JSON, O_STATS_JSON,
    O_LOGITS_OUT, O_PROMPT_IDS, O_NO_ESCAPE, O_NO_DISPLAY
};

static const struct option LONGOPTS[] = {
    CLI_GEN_LONGOPTS,
    {"prompt", required_argument, 0, 'p'},     {"file", required_argument, 0, 'f'},
    {"n-predict", required_argument, 0, 'n'},  {"chat", no_argument, 0, O_CHAT},
    {"system", required_argument, 0, O_SYSTEM}, {"stop", required_argument, 0, O_STOP},
    {"ignore-eos", no_argument, 0, O_IGNORE_EOS}, {"echo", no_argument, 0, O_ECHO},
    {"display-prompt", no_argument, 0, O_ECHO}, {"no-display-prompt", no_argument, 0, O_NO_DISPLAY},
    {"escape", no_argument, 0, 'e'}, {"no-escape", no_argument, 0, O_NO_ESCAPE},
    {"reverse-prompt", required_argument, 0, 'r'}, {"verbose", no_argument, 0, 'v'},
    {"stats", no_argument, 0, O_STATS},        {"json", no_argument, 0, O_JSON},
    {"stats-json", required_argument, 0, O_STATS_JSON}, {"logits-out", required_argument, 0, O_LOGITS_OUT},
    {"prompt-ids", required_argument, 0, O_PROMPT_IDS}, {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

#define FAIL(...) (cli_fail(__VA_ARGS__), -1)

static int add_stop(run_args *a, const char *s)
{
    const char **p = realloc(a->stops, (a->n_stops + 1) * sizeof *p);
    if (!p) return FAIL("out of memory");
    a->stops = p;
    a->stops[a->n_stops++] = s;
    return 0;
}

static int parse_args(int argc, char **argv, run_args *a)
{
    memset(a, 0, sizeof *a);
    a->n_predict = -1;
    a->display = -1;
    a->sp = cli_sampling_default();
    optind = 1;
    opterr = 0;
    int opt, r;
    while ((opt = getopt_long(argc, argv, ":" CLI_GEN_SHORTOPTS "p:f:n:r:evh", LONGOPTS, NULL)) != -1) {
        if ((r = cli_gen_option(opt, optarg, &a->mo, &a->sp))) {
            if (r < 0) return -1;
            continue;
        }
        switch (opt) {
        case 'p': a->prompt = optarg; break;
        case 'f': a->prompt_file = optarg; break;
        case 'n':
            if (cli_parse_int("-n", optarg, -1, 1L << 30, &a->n_predict)) return -1;
            break;
        case O_PROMPT_IDS: a->prompt_ids = optarg; break;
        case O_CHAT: a->chat = true; break;
        case O_SYSTEM: a->system = optarg; break;
        case O_STOP: case 'r':
            if (add_stop(a, optarg)) return -1;
            break;
        case O_IGNORE_EOS: a->ignore_eos = true; break;
        case O_ECHO: a->display = 1; break;
        case O_NO_DISPLAY: a->display = 0; break;
        case 'e': a->no_escape = false; break;
        case O_NO_ESCAPE: a->no_escape = true; break;
        case 'v': a->verbose = true; break;
        case O_STATS: a->stats = true; break;
        case O_JSON: a->json = true; break;
        case O_STATS_JSON: a->stats_json = optarg; break;
        case O_LOGITS_OUT: a->logits_out = optarg; break;
        case 'h': usage(stdout); return 1;
        case ':': return FAIL("option %s needs a value (sluice run --help)", argv[optind - 1]);
        default: {
            char b[64];
            return FAIL("unknown option %s (sluice run --help)", cli_bad_option(argv, b, sizeof b));
        }
        }
    }
    if (optind < argc) return FAIL("unexpected argument '%s' (sluice run --help)", argv[optind]);
    int sources = !!a->prompt + !!a->prompt_file + !!a->prompt_ids;
    if (sources != 1) return FAIL("give exactly one of -p PROMPT, -f FILE or --prompt-ids IDS (sluice run --help)");
    if (a->prompt_ids && a->chat) return FAIL("--chat needs a text prompt, not --prompt-ids");
    if (a->system && !a->chat) return FAIL("--system needs --chat");
    if (!a->no_escape) { /* the strings are argv's own: unescaped in place */
        if (a->prompt) cli_unescape((char *)a->prompt);
        if (a->system) cli_unescape((char *)a->system);
        for (size_t i = 0; i < a->n_stops; i++) cli_unescape((char *)a->stops[i]);
    }
    if (a->display < 0) a->display = isatty(STDOUT_FILENO);
    return 0;
}

/* ---- generation ---- */

/* Set by SIGINT: generation stops after the current token, the figures are
 * still printed, and the exit status is 130 as for a shell's interrupted
 * command.  The only way a handler can talk to the loop. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct {
    const run_args *a;
    int failed;
} run_ctx;

static int on_text(void *ud, const char *text, size_t len)
{
    const run_ctx *c = ud;
    if (!c->a->json) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return interrupted;
}

/* Little-endian f32 whatever the host order. */
static int write_logits(const char *path, const float *x, int32_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return cli_fail("cannot create %s", path);
    unsigned char b[4096];
    for (int32_t i = 0; i < n;) {
        size_t k = 0;
        for (; i < n && k + 4 <= sizeof b; i++, k += 4) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            b[k] = (unsigned char)u, b[k + 1] = (unsigned char)(u >> 8);
            b[k + 2] = (unsigned char)(u >> 16), b[k + 3] = (unsigned char)(u >> 24);
        }
        if (fwrite(b, 1, k, f) != k) break;
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cli_fail("cannot write %s", path);
    return 0;
}

static int on_prompt(void *ud, const float *logits, int32_t n_vocab)
{
    run_ctx *c = ud;
    if (c->a->logits_out && write_logits(c->a->logits_out, logits, n_vocab)) c->failed = 1;
    return c->failed || interrupted;
}

/* The chat template's end-of-turn strings join the --stop strings. */
static int add_chat_stops(run_args *a, const sluice *s)
{
    size_t n;
    const char *const *st = sluice_chat_stop_strings(s, &n);
    for (size_t i = 0; i < n; i++)
        if (add_stop(a, st[i])) return -1;
    return 0;
}

/* The prompt as token ids: given directly, through the chat template
 * (--chat), or the text of -p / -f tokenized as llama-cli does: BOS as the
 * vocabulary says, special tokens parsed.  *text_out: what the model reads. */
static int prompt_tokens(run_args *a, sluice *s, int32_t **ids, size_t *n, char **text_out)
{
    *text_out = NULL;
    if (a->prompt_ids) return cli_parse_ids(a->prompt_ids, sluice_n_vocab(s), ids, n) ? -1 : 0;
    size_t len = 0;
    char *text = a->prompt_file ? cli_read_file(a->prompt_file, &len) : strdup(a->prompt);
    if (!text) {
        if (!a->prompt_file) cli_fail("out of memory");
        return -1;
    }
    if (!a->prompt_file) len = strlen(text);
    char err[1024];
    int rc;
    if (a->chat) {
        sluice_message msgs[2] = {{"system", a->system}, {"user", text}};
        size_t first = a->system ? 0 : 1;
        char *rendered = NULL;
        rc = sluice_chat_render(s, msgs + first, 2 - first, 1, &rendered, err, sizeof err);
        if (rc) cli_fail("%s", err);
        if (rc == 0) rc = cli_chat_ids(s, rendered, ids, n);
        if (rc == 0) rc = add_chat_stops(a, s);
        free(text);
        text = rendered;
    } else {
        rc = sluice_tokenize(s, text, len, 1, 1, ids, n, err, sizeof err);
        if (rc) cli_fail("tokenizing the prompt: %s", err);
    }
    if (rc == 0 && *n == 0) rc = cli_fail("the prompt is empty (no tokens)");
    if (rc) {
        free(text);
        free(*ids);
        *ids = NULL;
        return -1;
    }
    *text_out = text;
    return 0;
}

/* The stats object of the run (sluice_stats_json), parsed. */
static json_t *stats_object(const sluice *s)
{
    char *txt = sluice_stats_json(s);
    json_t *o = txt ? json_loads(txt, 0, NULL) : NULL;
    sluice_free(txt);
    if (!o) cli_fail("cannot format the run's figures as JSON");
    return o;
}

/* A float setting as it was typed (0.95, not 0.949999988). */
static double typed(float x)
{
    char b[32];
    snprintf(b, sizeof b, "%.7g", x);
    return strtod(b, NULL);
}

/* What produced the run: build, model, context, threads, KV types and the
 * sampling settings (the seed actually used is the stats' "seed"). */
static json_t *settings_json(const run_args *a, const char *path, const sluice *s)
{
    const sluice_sampling *p = &a->sp;
    const char *kv = a->mo.eo.kv_mode == SL_KV_F32 ? "f32" : "f16";
    json_t *sp = json_pack("{s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:b,s:I,s:b}", "temp", typed(p->temp), "top_k", p->top_k,
                           "top_p", typed(p->top_p), "min_p", typed(p->min_p), "repeat_penalty",
                           typed(p->repeat_penalty), "repeat_last_n", p->repeat_last_n, "presence_penalty",
                           typed(p->presence_penalty), "frequency_penalty", typed(p->frequency_penalty), "constrained", p->grammar || p->json_schema, "n_predict",
                           (json_int_t)a->n_predict, "greedy", p->temp <= 0);
    return json_pack("{s:s,s:s,s:i,s:i,s:s,s:s,s:b,s:o}", "build_commit", cli_build_commit(), "model", path, "n_ctx",
                     (int)sluice_n_ctx(s), "threads", a->mo.threads > 0 ? a->mo.threads : cpu_physical_cores(),
                     "type_k", kv, "type_v", kv, "flash_attn", a->mo.eo.kv_mode == SL_KV_F16_FLASH, "sampling", sp);
}

static int print_json(const int32_t *pids, size_t np, const sluice_result *r, json_t *stats, json_t *settings)
{
    json_t *o = json_object();
    json_object_set_new(o, "settings", settings);
    json_object_set_new(o, "prompt_ids", cli_json_ids(pids, np));
    json_object_set_new(o, "ids", cli_json_ids(r->ids, r->n_ids));
    json_object_set_new(o, "text", cli_json_text(r->text, r->len));
    json_object_update(o, stats);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return cli_fail("cannot format the JSON output");
    puts(s);
    free(s);
    return 0;
}

/* --stats-json FILE, opened before generating so a bad path fails first. */
static int write_stats_json(FILE *f, const char *path, json_t *stats)
{
    int bad = json_dumpf(stats, f, JSON_INDENT(2)) != 0;
    bad |= fclose(f) != 0;
    return bad ? cli_fail("cannot write %s", path) : 0;
}

static int run(run_args *a, sluice *s, const char *path)
{
    int32_t *pids = NULL;
    size_t np = 0;
    char *ptext = NULL;
    if (prompt_tokens(a, s, &pids, &np, &ptext)) return 1;
    sluice_result res = {0};
    int rc = 1;
    FILE *sj = NULL;
    if (np > (size_t)sluice_n_ctx(s)) {
        cli_fail("the prompt has %zu tokens, more than the context size of %d (raise -c)", np, (int)sluice_n_ctx(s));
        goto out;
    }
    if (a->stats_json && !(sj = fopen(a->stats_json, "w"))) {
        cli_fail("cannot create %s", a->stats_json);
        goto out;
    }
    run_ctx ctx = {a, 0};
    sluice_sampling sp = a->sp;
    sp.n_predict = (int32_t)a->n_predict;
    sp.ignore_eos = a->ignore_eos;
    sp.stop = a->stops, sp.n_stop = a->n_stops;
    sluice_callbacks cb = {.user = &ctx, .on_text = on_text, .on_prompt = on_prompt};
    if (a->display && !a->json && ptext) fputs(ptext, stdout); /* what the model sees, template included */
    struct sigaction stop = {.sa_handler = on_sigint}, old;
    sigaction(SIGINT, &stop, &old);
    char err[1024];
    int g = sluice_generate_tokens(s, pids, np, &sp, &cb, &res, err, sizeof err);
    sigaction(SIGINT, &old, NULL);
    if (g) {
        cli_fail("%s", err);
        goto out;
    }
    if (ctx.failed) goto out;
    if (sluice_write_trace(s, err, sizeof err)) {
        cli_fail("%s", err);
        goto out;
    }
    json_t *st = stats_object(s);
    if (!st) goto out;
    /* end the text's last line so the shell prompt or the --stats lines start on their own */
    bool open_line = !a->json && res.len && res.text[res.len - 1] != '\n';
    if (open_line && isatty(STDOUT_FILENO)) putchar('\n');
    else if (open_line && a->stats) fputc('\n', stderr);
    rc = a->json ? print_json(pids, np, &res, st, settings_json(a, path, s)) : 0;
    if (a->stats) cli_print_stats(stderr, st);
    if (sj && write_stats_json(sj, a->stats_json, st)) rc = 1;
    sj = NULL;
    json_decref(st);
    if (rc == 0 && interrupted) rc = 130;
out:
    if (sj) fclose(sj);
    fflush(stdout);
    sluice_result_free(&res);
    free(pids);
    free(ptext);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    run_args a;
    int r = parse_args(argc, argv, &a);
    if (r) {
        free(a.stops);
        cli_gen_free(&a.mo);
        return r < 0 ? 2 : 0;
    }
    sluice *s;
    const char *path = NULL;
    if (cli_open(&a.mo, &s, &path)) {
        free(a.stops);
        cli_gen_free(&a.mo);
        return 1;
    }
    cli_print_notes(s, a.stats || a.verbose);
    int rc = run(&a, s, path);
    sluice_close(s);
    free(a.stops);
    cli_gen_free(&a.mo);
    return rc;
}
