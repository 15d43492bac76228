/* sluice run: one prompt in, generated text streamed out (or one JSON object
 * with --json).  The flags follow llama.cpp's llama-cli / llama-completion. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "decode/generate.h"

typedef struct {
    cli_model_opts mo;
    const char *prompt, *prompt_file, *prompt_ids, *system, *logits_out, *stats_json;
    long n_predict;
    sampler_params sp;
    bool seed_set, chat, stats, json, ignore_eos, echo;
    const char **stops;
    size_t n_stops;
} run_args;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice run [-m MODEL.gguf] (-p PROMPT | -f FILE | --prompt-ids 1,2,3) [options]\n\n"
            "Generates text from a prompt, streaming it to stdout.\n\n"
            "  -m, --model FILE       GGUF model (default: the bundled models/tinymoe-q8_0.gguf)\n"
            "  -p, --prompt TEXT      prompt text\n"
            "  -f, --file FILE        read the prompt from FILE\n"
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
            "      --chat             wrap the prompt in the model's chat template (user turn)\n"
            "      --system TEXT      system message for --chat\n"
            "      --stop STR         stop when STR appears (not printed); repeatable\n"
            "      --ignore-eos       keep generating through end-of-generation tokens\n"
            "      --echo             print the prompt (as fed to the model) before the generated text\n"
            "      --stats            print speed, time to first token and peak memory to stderr\n"
            "      --json             print one JSON object with ids, text and timings instead of text\n"
            "      --stats-json FILE  write the timings and peak RSS as JSON to FILE\n"
            "      --logits-out FILE  write the last prompt position's logits (n_vocab little-endian f32)\n\n%s",
            CLI_STREAM_HELP);
}

enum {
    O_CHAT = CLI_OPT_FIRST_FREE, O_SYSTEM, O_STOP, O_IGNORE_EOS, O_ECHO, O_STATS, O_JSON, O_STATS_JSON,
    O_LOGITS_OUT, O_PROMPT_IDS
};

static const struct option LONGOPTS[] = {
    CLI_GEN_LONGOPTS,
    {"prompt", required_argument, 0, 'p'},     {"file", required_argument, 0, 'f'},
    {"n-predict", required_argument, 0, 'n'},  {"chat", no_argument, 0, O_CHAT},
    {"system", required_argument, 0, O_SYSTEM}, {"stop", required_argument, 0, O_STOP},
    {"ignore-eos", no_argument, 0, O_IGNORE_EOS}, {"echo", no_argument, 0, O_ECHO},
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
    a->sp = sampler_defaults();
    optind = 1;
    opterr = 0;
    int opt, r;
    while ((opt = getopt_long(argc, argv, ":" CLI_GEN_SHORTOPTS "p:f:n:h", LONGOPTS, NULL)) != -1) {
        if ((r = cli_gen_option(opt, optarg, &a->mo, &a->sp, &a->seed_set))) {
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
        case O_STOP:
            if (add_stop(a, optarg)) return -1;
            break;
        case O_IGNORE_EOS: a->ignore_eos = true; break;
        case O_ECHO: a->echo = true; break;
        case O_STATS: a->stats = true; break;
        case O_JSON: a->json = true; break;
        case O_STATS_JSON: a->stats_json = optarg; break;
        case O_LOGITS_OUT: a->logits_out = optarg; break;
        case 'h': usage(stdout); return 1;
        case ':': return FAIL("option %s needs a value (sluice run --help)", argv[optind - 1]);
        default: return FAIL("unknown option %s (sluice run --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) return FAIL("unexpected argument '%s' (sluice run --help)", argv[optind]);
    int sources = !!a->prompt + !!a->prompt_file + !!a->prompt_ids;
    if (sources != 1) return FAIL("give exactly one of -p PROMPT, -f FILE or --prompt-ids IDS (sluice run --help)");
    if (a->prompt_ids && a->chat) return FAIL("--chat needs a text prompt, not --prompt-ids");
    if (a->system && !a->chat) return FAIL("--system needs --chat");
    if (!a->seed_set) a->sp.seed = cli_random_seed();
    return 0;
}

/* ---- generation ---- */

typedef struct {
    const run_args *a;
    sl_engine *eng;
    int failed;
} run_ctx;

static int on_text(void *ud, const char *text, size_t len)
{
    (void)ud;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* Once per generated token, i.e. once per forward pass (heat saves). */
static int on_token(void *ud, int32_t id)
{
    (void)id;
    engine_tick(((run_ctx *)ud)->eng);
    return 0;
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

static int on_prompt_logits(void *ud, const float *logits, int32_t n_vocab)
{
    run_ctx *c = ud;
    engine_mark_prompt_end(c->eng);
    if (c->a->logits_out && write_logits(c->a->logits_out, logits, n_vocab)) c->failed = 1;
    return c->failed;
}

/* The chat template's end-of-turn strings join the --stop strings. */
static int add_chat_stops(run_args *a, const cli_chat *ch)
{
    for (size_t i = 0; i < ch->n_stops; i++)
        if (add_stop(a, ch->stops[i])) return -1;
    return 0;
}

/* The prompt as token ids: given directly, through the chat template
 * (--chat), or the text of -p / -f tokenized as llama-cli does: BOS as the
 * vocabulary says, special tokens parsed.  *text_out: what the model reads. */
static int prompt_tokens(run_args *a, const cli_model *cm, int32_t **ids, size_t *n, char **text_out)
{
    *text_out = NULL;
    if (a->prompt_ids) return cli_parse_ids(a->prompt_ids, model_n_vocab(cm->model), ids, n) ? -1 : 0;
    size_t len = 0;
    char *text = a->prompt_file ? cli_read_file(a->prompt_file, &len) : strdup(a->prompt);
    if (!text) {
        if (!a->prompt_file) cli_fail("out of memory");
        return -1;
    }
    if (!a->prompt_file) len = strlen(text);
    int rc;
    if (a->chat) {
        cli_chat ch;
        if (cli_chat_open(&ch, cm->model)) {
            free(text);
            return -1;
        }
        chat_msg msgs[2] = {{"system", a->system}, {"user", text}};
        size_t first = a->system ? 0 : 1;
        char *rendered = NULL;
        rc = cli_chat_tokens(&ch, cm->model, msgs + first, 2 - first, ids, n, &rendered);
        if (rc == 0) rc = add_chat_stops(a, &ch);
        cli_chat_close(&ch);
        free(text);
        text = rendered;
    } else {
        sl_err err;
        rc = vocab_tokenize(model_vocab(cm->model), text, len, true, true, ids, n, &err);
        if (rc) cli_fail("tokenizing the prompt: %s", err.msg);
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

static int print_json(const run_args *a, const int32_t *pids, size_t np, const gen_result *r, sl_engine *eng)
{
    json_t *o = json_object();
    json_object_set_new(o, "prompt_ids", cli_json_ids(pids, np));
    json_object_set_new(o, "ids", cli_json_ids(r->ids, r->n_ids));
    json_object_set_new(o, "text", cli_json_text(r->text, r->len));
    stats_to_json(&r->stats, o);
    json_object_set_new(o, "stop_reason", json_string(gen_stop_name(r->stop)));
    json_object_set_new(o, "seed", json_integer(a->sp.seed));
    cli_prefetch_json(eng, o);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) return cli_fail("cannot format the JSON output");
    puts(s);
    free(s);
    return 0;
}

static int write_stats_json(const char *path, const gen_result *r, const sampler_params *sp, sl_engine *eng)
{
    json_t *o = json_object();
    stats_to_json(&r->stats, o);
    json_object_set_new(o, "stop_reason", json_string(gen_stop_name(r->stop)));
    json_object_set_new(o, "seed", json_integer(sp->seed));
    cli_prefetch_json(eng, o);
    int rc = cli_write_json(path, o);
    json_decref(o);
    return rc;
}

static int run(run_args *a, cli_model *cm)
{
    int32_t *pids = NULL;
    size_t np = 0;
    char *ptext = NULL;
    if (prompt_tokens(a, cm, &pids, &np, &ptext)) return 1;
    sl_err err;
    sl_sampler *smp = NULL;
    gen_result res = {0};
    int rc = 1;
    if (np > (size_t)session_n_ctx(cm->session)) {
        cli_fail("the prompt has %zu tokens, more than the context size of %d (raise -c)", np,
                 (int)session_n_ctx(cm->session));
        goto out;
    }
    if (sampler_create(&smp, &a->sp, model_n_vocab(cm->model), &err)) {
        cli_fail("%s", err.msg);
        goto out;
    }
    run_ctx rc_ctx = {a, &cm->eng, 0};
    gen_opts go = {(int32_t)a->n_predict, a->ignore_eos, a->stops, a->n_stops};
    gen_callbacks cb = {&rc_ctx, on_prompt_logits, on_token, a->json ? NULL : on_text};
    if (a->echo && !a->json && ptext) fputs(ptext, stdout); /* what the model sees, template included */
    engine_mark_prompt_start(&cm->eng);
    if (generate(cm->model, cm->session, smp, pids, np, &go, &cb, &res, &err)) {
        cli_fail("%s", err.msg);
        goto out;
    }
    if (rc_ctx.failed) goto out;
    if (engine_write_trace(&cm->eng, &err)) {
        cli_fail("%s", err.msg);
        goto out;
    }
    cli_stream_stats(&cm->eng, &res.stats);
    /* end the text's last line so the shell prompt or the --stats lines start on their own */
    bool open_line = !a->json && res.len && res.text[res.len - 1] != '\n';
    if (open_line && isatty(STDOUT_FILENO)) putchar('\n');
    else if (open_line && a->stats) fputc('\n', stderr);
    if (a->json && print_json(a, pids, np, &res, &cm->eng)) goto out;
    if (a->stats) cli_print_stats(stderr, &res.stats, &a->sp), cli_print_prefetch(stderr, &cm->eng);
    if (a->stats_json && write_stats_json(a->stats_json, &res, &a->sp, &cm->eng)) goto out;
    rc = 0;
out:
    fflush(stdout);
    gen_result_free(&res);
    sampler_free(smp);
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
        return r < 0 ? 2 : 0;
    }
    cli_model cm;
    if (cli_model_open(&cm, &a.mo)) {
        free(a.stops);
        return 1;
    }
    cli_print_engine(&cm.eng, a.stats);
    int rc = run(&a, &cm);
    cli_model_close(&cm);
    free(a.stops);
    return rc;
}
