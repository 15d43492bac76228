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
    bool no_cache, stats, ignore_eos, no_escape;
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
    bool have_stats;      /* a reply was generated (for /stats) */
    int32_t last_cached;
    sluice_stop last_stop;
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
               "Type a message and press Enter; a line \"\"\" starts a multi-line message, ended by a line\n"
               "ending in \"\"\".  When the conversation no longer fits, the oldest turns after the system\n"
               "message are dropped (said in one line).  Ctrl-C stops the current reply; Ctrl-D or /bye\n"
               "quits.  Commands: /help, /reset, /system TEXT, /save FILE, /load FILE, /stats, /bye.\n\n"
               "  -m, --model FILE    GGUF model (default: the bundled model)\n"
               "  -c, --ctx-size N    context size in tokens (default as for sluice run)\n"
               "  -t, --threads N     threads (default: physical cores)\n"
               "  -n, --n-predict N   at most N tokens per reply (default: a quarter of the context; -1: no cap)\n"
               "      --system TEXT   system message (escapes such as \\n processed unless --no-escape)\n"
               "      --temp, --top-k, --top-p, --min-p, --seed   sampling, as for sluice run\n"
               "%s%s"
               "      --ignore-eos    do not stop at end-of-generation tokens\n"
               "      --stats         print each turn's speed and cache reuse to stderr\n"
               "      --no-cache      re-evaluate the whole conversation every turn (for comparison)\n\n%s\n%s",
            CLI_GRAMMAR_HELP, CLI_TEMPLATE_HELP, CLI_STREAM_HELP, CLI_DRAFT_HELP);
}

enum { O_SYSTEM = CLI_OPT_FIRST_FREE, O_NO_CACHE, O_STATS, O_IGNORE_EOS, O_NO_ESCAPE };

static int parse_args(int argc, char **argv, chat_args *a)
{
    static const struct option LONGOPTS[] = {
        CLI_GEN_LONGOPTS,
        {"n-predict", required_argument, 0, 'n'},
        {"system", required_argument, 0, O_SYSTEM},
        {"no-cache", no_argument, 0, O_NO_CACHE},
        {"stats", no_argument, 0, O_STATS},
        {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"escape", no_argument, 0, 'e'},
        {"no-escape", no_argument, 0, O_NO_ESCAPE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    a->n_predict = -2; /* not given: a quarter of the context */
    a->sp = cli_sampling_default();
    optind = 1;
    opterr = 0;
    for (int opt, r; (opt = getopt_long(argc, argv, ":" CLI_GEN_SHORTOPTS "n:eh", LONGOPTS, NULL)) != -1;) {
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
        case 'e': a->no_escape = false; break;
        case O_NO_ESCAPE: a->no_escape = true; break;
        case 'h': usage(stdout); return 1;
        case ':': return FAIL("option %s needs a value (sluice chat --help)", argv[optind - 1]);
        default: {
            char b[64];
            return FAIL("unknown option %s (sluice chat --help)", cli_bad_option(argv, b, sizeof b));
        }
        }
    }
    if (optind < argc) return FAIL("unexpected argument '%s' (sluice chat --help)", argv[optind]);
    if (a->system && !a->no_escape) cli_unescape((char *)a->system);
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
    while (c->n_msgs > (c->n_msgs && !strcmp(c->msgs[0].role, "system") ? 1u : 0u)) pop_msg(c);
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

static void print_turn_stats(const chat_state *c)
{
    sluice_stats st;
    sluice_get_stats(c->s, &st);
    size_t held;
    sluice_tokens(c->s, &held);
    fprintf(stderr, "[%d cached tokens reused, %lld evaluated, %lld generated (%s); prompt %.1f t/s, decode %.1f t/s, "
                    "first token %.3f s; context %zu/%d]\n",
            (int)c->last_cached, (long long)st.prompt_tokens, (long long)st.generated_tokens,
            /* the only callback that stops a reply is Ctrl-C's */
            c->last_stop == SLUICE_STOP_CALLER ? "interrupted" : sluice_stop_name(c->last_stop), st.prompt_tps,
            st.decode_tps, st.ttft_s, held, (int)sluice_n_ctx(c->s));
}

/* -n, or a quarter of the context when not given (so one reply cannot fill it). */
static int32_t reply_cap(const chat_state *c)
{
    if (c->a->n_predict >= -1) return (int32_t)c->a->n_predict;
    int32_t q = sluice_n_ctx(c->s) / 4;
    return q > 16 ? q : 16;
}

/* Context shift: forgets the oldest turn after the system message (a user
 * message and the replies up to the next one).  False when only the
 * message being answered is left. */
static bool drop_oldest_turn(chat_state *c)
{
    size_t first = c->n_msgs && !strcmp(c->msgs[0].role, "system");
    size_t end = first + 1;
    while (end < c->n_msgs && strcmp(c->msgs[end].role, "user")) end++;
    if (end >= c->n_msgs) return false; /* the turn is the last message: nothing older */
    for (size_t i = first; i < end; i++) free(c->msgs[i].role), free(c->msgs[i].content);
    memmove(c->msgs + first, c->msgs + end, (c->n_msgs - end) * sizeof *c->msgs);
    c->n_msgs -= end - first;
    return true;
}

/* Answers the conversation so far (its last message is the user's). */
static int reply(chat_state *c)
{
    int32_t *ids;
    size_t n;
    int32_t n_ctx = sluice_n_ctx(c->s), cap = reply_cap(c);
    int dropped = 0;
    for (;;) {
        if (render(c, &ids, &n)) return -1;
        /* room for the reply too (a capped one; else at least a few tokens) */
        size_t room = cap > 0 && cap < n_ctx / 2 ? (size_t)cap : 16;
        if (n + room <= (size_t)n_ctx) break;
        free(ids);
        if (!drop_oldest_turn(c)) {
            fprintf(stderr, "sluice: the message (%zu tokens with the system message) does not fit the context of "
                            "%d; /reset or raise -c\n", n, (int)n_ctx);
            return 1;
        }
        dropped++;
    }
    if (dropped) fprintf(stderr, "[context full: dropped the oldest %d turn%s]\n", dropped, dropped > 1 ? "s" : "");
    if (c->a->no_cache) sluice_reset(c->s);
    size_t n_stops;
    sluice_sampling sp = c->a->sp;
    sp.n_predict = cap;
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
        c->have_stats = true, c->last_cached = res.cached_tokens, c->last_stop = res.stop;
        if (c->a->stats) print_turn_stats(c);
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

static const char CHAT_HELP[] =
    "commands:\n"
    "  /help           this list\n"
    "  /reset          forget the conversation (the system message stays)\n"
    "  /system TEXT    set the system message (the conversation starts over)\n"
    "  /save FILE      write the conversation as JSON messages ([{\"role\", \"content\"}, ...])\n"
    "  /load FILE      continue a conversation saved with /save\n"
    "  /stats          the last reply's figures\n"
    "  /bye, /exit     quit (as Ctrl-D)\n"
    "a line \"\"\" starts a multi-line message, ended by a line ending in \"\"\"\n";

static int save_conv(const chat_state *c, const char *path)
{
    json_t *a = json_array();
    for (size_t i = 0; i < c->n_msgs; i++)
        json_array_append_new(a, json_pack("{s:s,s:o}", "role", c->msgs[i].role, "content",
                                           cli_json_text(c->msgs[i].content, strlen(c->msgs[i].content))));
    int rc = json_dump_file(a, path, JSON_INDENT(2)) ? cli_fail("cannot write %s", path) : 0;
    json_decref(a);
    return rc;
}

/* Replaces the conversation by the messages in PATH (checked first). */
static int load_conv(chat_state *c, const char *path)
{
    json_error_t je;
    json_t *a = json_load_file(path, 0, &je);
    if (!a) return cli_fail("%s: %s (line %d)", path, je.text, je.line);
    size_t i;
    json_t *m;
    json_array_foreach(a, i, m) {
        const char *r = json_string_value(json_object_get(m, "role"));
        if (!r || !json_is_string(json_object_get(m, "content")) ||
            (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))) {
            json_decref(a);
            return cli_fail("%s: message %zu needs a role (system, user, assistant, tool) and a string content", path, i);
        }
    }
    if (!json_is_array(a)) return json_decref(a), cli_fail("%s: not a JSON array of messages", path);
    while (c->n_msgs) pop_msg(c);
    int rc = 0;
    json_array_foreach(a, i, m) {
        if (!rc) rc = push_msg(c, json_string_value(json_object_get(m, "role")),
                               json_string_value(json_object_get(m, "content"))) ? 1 : 0;
    }
    json_decref(a);
    sluice_reset(c->s);
    if (!rc) fprintf(stderr, "[%zu messages loaded from %s]\n", c->n_msgs, path);
    return rc;
}

static int set_system(chat_state *c, const char *text)
{
    while (c->n_msgs) pop_msg(c);
    sluice_reset(c->s);
    if (*text && push_msg(c, "system", text)) return 1;
    fprintf(stderr, "[system message %s; conversation reset]\n", *text ? "set" : "cleared");
    return 0;
}

/* Handles a /command; returns 1 to quit, 0 otherwise. */
static int command(chat_state *c, const char *line)
{
    const char *arg = line + strcspn(line, " ");
    while (*arg == ' ') arg++;
    size_t k = strcspn(line, " ");
#define IS(w) (k == strlen(w) && !strncmp(line, w, k))
    if (IS("/exit") || IS("/quit") || IS("/bye")) return 1;
    if (IS("/reset")) {
        reset(c);
        fprintf(stderr, "[conversation reset]\n");
    } else if (IS("/system")) {
        set_system(c, arg);
    } else if (IS("/save") || IS("/load")) {
        if (!*arg) fprintf(stderr, "%s needs a file name\n", IS("/save") ? "/save" : "/load");
        else if (IS("/save") ? save_conv(c, arg) == 0 : 0) fprintf(stderr, "[%zu messages saved to %s]\n", c->n_msgs, arg);
        else if (IS("/load")) load_conv(c, arg);
    } else if (IS("/stats")) {
        if (c->have_stats) print_turn_stats(c);
        else fprintf(stderr, "[no reply yet]\n");
    } else {
        if (!IS("/help")) fprintf(stderr, "unknown command %.*s\n", (int)k, line);
        fputs(CHAT_HELP, stderr);
    }
#undef IS
    return 0;
}

/* A message that starts with \"\"\" goes on until a line ending in \"\"\". */
static char *multiline(chat_state *c, char *first)
{
    size_t n = strlen(first + 3), cap = n + 256;
    char *buf = malloc(cap);
    if (!buf) return free(first), NULL;
    memcpy(buf, first + 3, n + 1);
    free(first);
    for (bool more = !(n >= 3 && !strcmp(buf + n - 3, "\"\"\"")); more;) {
        char *line = read_line(c);
        if (!line) break; /* end of input ends the message */
        size_t l = strlen(line);
        more = !(l >= 3 && !strcmp(line + l - 3, "\"\"\""));
        if (n + l + 2 > cap) {
            char *b = realloc(buf, cap = 2 * (n + l + 2));
            if (!b) return free(line), free(buf), NULL;
            buf = b;
        }
        if (n) buf[n++] = '\n';
        memcpy(buf + n, line, l + 1);
        n += l;
        free(line);
    }
    if (n >= 3 && !strcmp(buf + n - 3, "\"\"\"")) buf[n -= 3] = 0;
    if (n && buf[n - 1] == '\n') buf[--n] = 0; /* a closing line of its own */
    return buf;
}

static int loop(chat_state *c)
{
    for (;;) {
        char *line = read_line(c);
        if (!line) return 0;
        if (!strncmp(line, "\"\"\"", 3) && !(line = multiline(c, line))) return cli_fail("out of memory"), -1;
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
    if (r) return cli_gen_free(&a.mo), r < 0 ? 2 : 0;
    chat_state c = {.a = &a};
    if (cli_open(&a.mo, &c.s, &c.path)) return cli_gen_free(&a.mo), 1;
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
            fprintf(stderr, "sluice chat: %s, context %d; /help for commands, Ctrl-D or /bye to quit\n", c.path,
                    (int)sluice_n_ctx(c.s));
        rc = loop(&c) ? 1 : 0;
        input_close(&c);
    }
    while (c.n_msgs) pop_msg(&c);
    free(c.msgs);
    sluice_close(c.s);
    cli_gen_free(&a.mo);
    return rc;
}
