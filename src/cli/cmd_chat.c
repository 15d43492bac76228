/* sluice chat: an interactive conversation that keeps the KV cache between
 * turns.  Each turn renders the whole conversation with the chat template,
 * tokenizes it, finds the longest common prefix with the tokens already in
 * the session, rewinds the session to it and evaluates only the rest.  So a
 * turn costs its new tokens, yet the model always sees exactly what a fresh
 * evaluation of the rendered conversation would give it (--no-cache does
 * that fresh evaluation, for comparison).
 *
 * On a terminal, input goes through libedit (line editing, history); from a
 * pipe, lines are read as they come, so the command can be scripted. */
#include <getopt.h>
#include <histedit.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "engine/api_int.h"

#define FAIL(...) (cli_fail(__VA_ARGS__), -1)

typedef struct {
    cli_model_opts mo;
    sluice_sampling sp;
    bool no_cache, stats, ignore_eos;
    const char *system;
    long n_predict;
} chat_args;

typedef struct {
    char *role, *content;
} conv_msg;

typedef struct {
    chat_args *a;
    sluice *s;
    const char *path;
    conv_msg *msgs;
    size_t n_msgs, msgs_cap;
    EditLine *el;
    History *hist;
} chat_state;

/* Set by SIGINT while a reply is being generated; the only way a signal
 * handler can talk to the loop. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sluice chat [-m MODEL.gguf] [options]\n\n"
               "Interactive chat with the model's chat template, keeping the KV cache between turns.\n"
               "Type a message and press Enter.  Commands: /reset (forget the conversation), /exit.\n"
               "Ctrl-C stops the current reply; Ctrl-D (end of input) quits.\n\n"
               "  -m, --model FILE    GGUF model (default: the bundled model)\n"
               "  -c, --ctx-size N    context size in tokens (default as for sluice run)\n"
               "  -t, --threads N     threads (default: physical cores)\n"
               "  -n, --n-predict N   at most N tokens per reply (default -1: until end of turn)\n"
               "      --system TEXT   system message\n"
               "      --temp, --top-k, --top-p, --min-p, --seed   sampling, as for sluice run\n"
               "      --ignore-eos    do not stop at end-of-generation tokens\n"
               "      --stats         print each turn's speed and cache reuse to stderr\n"
               "      --no-cache      re-evaluate the whole conversation every turn (for comparison)\n\n%s\n%s",
            CLI_STREAM_HELP, CLI_DRAFT_HELP);
}

enum { O_SYSTEM = CLI_OPT_FIRST_FREE, O_NO_CACHE, O_STATS, O_IGNORE_EOS };

static int parse_args(int argc, char **argv, chat_args *a)
{
    static const struct option LONGOPTS[] = {
        CLI_GEN_LONGOPTS,
        {"n-predict", required_argument, 0, 'n'},
        {"system", required_argument, 0, O_SYSTEM},
        {"no-cache", no_argument, 0, O_NO_CACHE},
        {"stats", no_argument, 0, O_STATS},
        {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    a->n_predict = -1;
    a->sp = cli_sampling_default();
    optind = 1;
    opterr = 0;
    for (int opt, r; (opt = getopt_long(argc, argv, ":" CLI_GEN_SHORTOPTS "n:h", LONGOPTS, NULL)) != -1;) {
        if ((r = cli_gen_option(opt, optarg, &a->mo, &a->sp))) {
            if (r < 0) return -1;
            continue;
        }
        switch (opt) {
        case 'n':
            if (cli_parse_int("-n", optarg, -1, 1L << 30, &a->n_predict)) return -1;
            break;
        case O_SYSTEM: a->system = optarg; break;
        case O_NO_CACHE: a->no_cache = true; break;
        case O_STATS: a->stats = true; break;
        case O_IGNORE_EOS: a->ignore_eos = true; break;
        case 'h': usage(stdout); return 1;
        case ':': return FAIL("option %s needs a value (sluice chat --help)", argv[optind - 1]);
        default: return FAIL("unknown option %s (sluice chat --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) return FAIL("unexpected argument '%s' (sluice chat --help)", argv[optind]);
    return 0;
}

/* ---- conversation ---- */

static int push_msg(chat_state *c, const char *role, const char *content)
{
    if (c->n_msgs == c->msgs_cap) {
        size_t cap = c->msgs_cap ? 2 * c->msgs_cap : 8;
        conv_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return FAIL("out of memory");
        c->msgs = m, c->msgs_cap = cap;
    }
    conv_msg *m = &c->msgs[c->n_msgs];
    m->role = strdup(role), m->content = strdup(content);
    if (!m->role || !m->content) {
        free(m->role), free(m->content);
        return FAIL("out of memory");
    }
    c->n_msgs++;
    return 0;
}

static void pop_msg(chat_state *c)
{
    c->n_msgs--;
    free(c->msgs[c->n_msgs].role);
    free(c->msgs[c->n_msgs].content);
}

/* Forgets the conversation (the system message stays). */
static void reset(chat_state *c)
{
    while (c->n_msgs > (c->a->system ? 1u : 0u)) pop_msg(c);
    sluice_reset(c->s);
}

/* The conversation as tokens, ending with the assistant prompt. */
static int render(chat_state *c, int32_t **ids, size_t *n)
{
    sluice_message *m = malloc((c->n_msgs ? c->n_msgs : 1) * sizeof *m);
    if (!m) return FAIL("out of memory");
    for (size_t i = 0; i < c->n_msgs; i++) m[i] = (sluice_message){c->msgs[i].role, c->msgs[i].content};
    char *text, err[1024];
    int rc = sluice_chat_render(c->s, m, c->n_msgs, 1, &text, err, sizeof err);
    free(m);
    if (rc) return FAIL("%s", err);
    rc = cli_chat_ids(c->s, text, ids, n);
    sluice_free(text);
    return rc;
}

/* ---- one turn ---- */

static int on_text(void *ud, const char *text, size_t len)
{
    (void)ud;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return interrupted;
}

static void print_turn_stats(const chat_state *c, const sluice_result *r)
{
    sluice_stats st;
    sluice_get_stats(c->s, &st);
    size_t held;
    sluice_tokens(c->s, &held);
    fprintf(stderr, "[%d cached tokens reused, %lld evaluated, %lld generated (%s); prompt %.1f t/s, decode %.1f t/s, "
                    "first token %.3f s; context %zu/%d]\n",
            (int)r->cached_tokens, (long long)st.prompt_tokens, (long long)st.generated_tokens,
            sluice_stop_name(r->stop), st.prompt_tps, st.decode_tps, st.ttft_s, held, (int)sluice_n_ctx(c->s));
}

/* Answers the conversation so far (its last message is the user's). */
static int reply(chat_state *c)
{
    int32_t *ids;
    size_t n;
    if (render(c, &ids, &n)) return -1;
    int32_t n_ctx = sluice_n_ctx(c->s);
    if (n >= (size_t)n_ctx) {
        free(ids);
        fprintf(stderr, "sluice: the conversation (%zu tokens) no longer fits the context of %d; /reset to start over\n",
                n, (int)n_ctx);
        return 1;
    }
    if (c->a->no_cache) sluice_reset(c->s);
    size_t n_stops;
    sluice_sampling sp = c->a->sp;
    sp.n_predict = (int32_t)c->a->n_predict;
    sp.ignore_eos = c->a->ignore_eos;
    sp.stop = sluice_chat_stop_strings(c->s, &n_stops);
    sp.n_stop = n_stops;
    sluice_callbacks cb = {.user = c, .on_text = on_text};
    sluice_result res;
    char err[1024];
    /* Ctrl-C stops the reply (not the program) while generating */
    struct sigaction stop = {.sa_handler = on_sigint}, old;
    interrupted = 0;
    sigaction(SIGINT, &stop, &old);
    int rc = sluice_generate_tokens(c->s, ids, n, &sp, &cb, &res, err, sizeof err);
    sigaction(SIGINT, &old, NULL);
    if (rc) cli_fail("%s", err);
    if (rc == 0) {
        fputc('\n', stdout);
        fflush(stdout);
        rc = push_msg(c, "assistant", res.text);
        if (c->a->stats) print_turn_stats(c, &res);
    }
    sluice_result_free(&res);
    free(ids);
    return rc ? -1 : 0;
}

/* ---- input ---- */

static char *prompt_fn(EditLine *el)
{
    (void)el;
    return "> ";
}

static void input_open(chat_state *c)
{
    if (!isatty(STDIN_FILENO)) return;
    c->el = el_init("sluice", stdin, stdout, stderr);
    c->hist = history_init();
    if (!c->el || !c->hist) return;
    HistEvent ev;
    history(c->hist, &ev, H_SETSIZE, 500);
    el_set(c->el, EL_PROMPT, prompt_fn);
    el_set(c->el, EL_EDITOR, "emacs");
    el_set(c->el, EL_HIST, history, c->hist);
    el_set(c->el, EL_SIGNAL, 1); /* restore the terminal if a signal ends us at the prompt */
}

static void input_close(chat_state *c)
{
    if (c->el) el_end(c->el);
    if (c->hist) history_end(c->hist);
}

/* Next input line without its newline (malloc'd), or NULL at end of input. */
static char *read_line(chat_state *c)
{
    char *line = NULL;
    if (c->el) {
        int n;
        const char *s = el_gets(c->el, &n);
        if (!s || n <= 0) return NULL;
        HistEvent ev;
        if (n > 1) history(c->hist, &ev, H_ENTER, s);
        line = strdup(s);
    } else {
        size_t cap = 0;
        if (getline(&line, &cap, stdin) < 0) {
            free(line);
            return NULL;
        }
    }
    if (line) line[strcspn(line, "\r\n")] = 0;
    return line;
}

/* Handles a /command; returns 1 to quit, 0 otherwise. */
static int command(chat_state *c, const char *line)
{
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return 1;
    if (!strcmp(line, "/reset")) {
        reset(c);
        fprintf(stderr, "[conversation reset]\n");
    } else {
        fprintf(stderr, "commands: /reset (forget the conversation), /exit\n");
    }
    return 0;
}

static int loop(chat_state *c)
{
    for (;;) {
        char *line = read_line(c);
        if (!line) return 0;
        int rc = 0;
        if (line[0] == '/') rc = command(c, line) ? 2 : 0;
        else if (line[0]) {
            rc = push_msg(c, "user", line);
            if (rc == 0) rc = reply(c);
            if (rc == 1) pop_msg(c), rc = 0; /* did not fit: forget the message */
        }
        free(line);
        if (rc) return rc == 2 ? 0 : -1;
    }
}

int cmd_chat(int argc, char **argv)
{
    chat_args a;
    int r = parse_args(argc, argv, &a);
    if (r) return r < 0 ? 2 : 0;
    chat_state c = {.a = &a};
    if (cli_open(&a.mo, &c.s, &c.path)) return 1;
    cli_print_notes(c.s, a.stats);
    char err[1024];
    int rc = 0;
    /* the template is parsed now, so a broken one is reported before the first turn */
    char *probe = NULL;
    if (sluice_chat_render(c.s, NULL, 0, 1, &probe, err, sizeof err)) rc = cli_fail("%s", err);
    sluice_free(probe);
    if (!rc && a.system) rc = push_msg(&c, "system", a.system);
    if (!rc) {
        input_open(&c);
        if (c.el)
            fprintf(stderr, "sluice chat: %s, context %d; /reset, /exit, Ctrl-D to quit\n", c.path,
                    (int)sluice_n_ctx(c.s));
        rc = loop(&c) ? 1 : 0;
        input_close(&c);
    }
    while (c.n_msgs) pop_msg(&c);
    free(c.msgs);
    sluice_close(c.s);
    return rc;
}
