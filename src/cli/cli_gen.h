/* Pieces shared by the commands that run a model (run, chat, bench):
 * opening model + thread pool + session with the usual flags, the default
 * context size, seeds, token-id lists, JSON-safe text and the --stats lines. */
#ifndef SLUICE_CLI_GEN_H
#define SLUICE_CLI_GEN_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "arch/model.h"
#include "chat/chat.h"
#include "decode/sampler.h"
#include "decode/stats.h"
#include "engine/engine.h"
#include "kernels/pool.h"

/* Context the bundled demo model gets by default: it was trained on
 * 512-token windows although its metadata advertises 1024 (models/README.md). */
enum { CLI_BUNDLED_CTX = 512, CLI_MAX_DEFAULT_CTX = 4096 };

typedef struct {
    const char *model_path; /* NULL: the bundled model */
    int32_t n_ctx;          /* <= 0: the default (cli_default_ctx) */
    int threads;            /* <= 0: physical cores */
    bool model_only;        /* load the model, no pool or session */
    engine_opts eo;         /* expert placement: --mem, --io, --pin, --pack ... */
} cli_model_opts;

typedef struct {
    sl_engine eng;
    sl_model *model;
    sl_pool *pool;
    sl_session *session;
    const char *path; /* the model file actually opened */
    bool bundled;     /* it is the bundled demo model */
    long fault_countdown; /* SLUICE_FAULT_READ: fail this completed expert read (tests) */
} cli_model;

/* Options every generating command takes: -m, -c, -t and the sampling
 * flags.  Commands put CLI_GEN_LONGOPTS in their getopt_long table, number
 * their own long-only options from CLI_OPT_FIRST_FREE, and hand each option
 * to cli_gen_option first. */
enum {
    CLI_OPT_TEMP = 256, CLI_OPT_TOPK, CLI_OPT_TOPP, CLI_OPT_MINP, CLI_OPT_SEED,
    CLI_OPT_MEM, CLI_OPT_IO, CLI_OPT_PIN, CLI_OPT_HEAT_FILE, CLI_OPT_NO_HEAT, CLI_OPT_PACK, CLI_OPT_VERIFY,
    CLI_OPT_KV, CLI_OPT_PREFETCH, CLI_OPT_CACHE_POLICY, CLI_OPT_TRACE_OUT,
    CLI_OPT_FIRST_FREE
};
#define CLI_GEN_LONGOPTS                                                                                      \
    {"model", required_argument, 0, 'm'}, {"ctx-size", required_argument, 0, 'c'},                           \
        {"threads", required_argument, 0, 't'}, {"batch-size", required_argument, 0, 'b'},                    \
        {"temp", required_argument, 0, CLI_OPT_TEMP}, {"top-k", required_argument, 0, CLI_OPT_TOPK},          \
        {"top-p", required_argument, 0, CLI_OPT_TOPP}, {"min-p", required_argument, 0, CLI_OPT_MINP},         \
        {"seed", required_argument, 0, CLI_OPT_SEED}, CLI_STREAM_LONGOPTS
/* Expert placement flags, shared by every command that loads a model. */
#define CLI_STREAM_LONGOPTS                                                                                   \
    {"mem", required_argument, 0, CLI_OPT_MEM}, {"io", required_argument, 0, CLI_OPT_IO},                     \
        {"pin", required_argument, 0, CLI_OPT_PIN}, {"heat-file", required_argument, 0, CLI_OPT_HEAT_FILE},   \
        {"no-heat", no_argument, 0, CLI_OPT_NO_HEAT}, {"pack", required_argument, 0, CLI_OPT_PACK},           \
        {"verify", no_argument, 0, CLI_OPT_VERIFY}, {"kv", required_argument, 0, CLI_OPT_KV},                 \
        {"prefetch", required_argument, 0, CLI_OPT_PREFETCH},                                                 \
        {"cache-policy", required_argument, 0, CLI_OPT_CACHE_POLICY},                                         \
        {"trace-out", required_argument, 0, CLI_OPT_TRACE_OUT}
#define CLI_GEN_SHORTOPTS "m:c:t:b:"

/* Help text for the expert placement flags. */
extern const char CLI_STREAM_HELP[];

/* Applies one expert placement flag; same returns as cli_gen_option. */
int cli_stream_option(int opt, const char *arg, engine_opts *eo);

/* Prints what the engine noted (auto-streaming, heat) and, with VERBOSE,
 * the memory plan, to stderr. */
void cli_print_engine(const sl_engine *e, bool verbose);

/* Adds the streaming figures of E to the --stats lines / JSON. */
void cli_stream_stats(const sl_engine *e, gen_stats *st);

/* Expert prediction figures (docs/PREFETCH.md): the --stats lines, and the
 * "prefetch" object added to a JSON object (nothing when prediction is off). */
void cli_print_prefetch(FILE *f, sl_engine *e);
int cli_prefetch_json(sl_engine *e, json_t *obj);

/* Returns 1 if OPT was one of the shared options (applied), 0 if not, -1 on
 * a bad value (error printed).  A --seed of -1 leaves *seed_set false. */
int cli_gen_option(int opt, const char *arg, cli_model_opts *mo, sampler_params *sp, bool *seed_set);

/* Loads the model, starts the pool and creates a session; on failure prints
 * the error and returns -1 (everything released). */
int cli_model_open(cli_model *cm, const cli_model_opts *o);
void cli_model_close(cli_model *cm);

/* Whether PATH is one of the bundled models (in the checkout's models/). */
bool cli_is_bundled(const char *path);


/* A seed from the OS (getrandom), never 0xFFFFFFFF (which means "random"). */
uint32_t cli_random_seed(void);

/* Parses "1,2,3" into a malloc'd id array; each id must be in [0, n_vocab).
 * Prints the error and returns -1 on bad input. */
int cli_parse_ids(const char *s, int32_t n_vocab, int32_t **ids, size_t *n);

/* Parses a whole decimal int / float argument of option NAME; prints the error. */
int cli_parse_int(const char *name, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *name, const char *s, float *out);

/* A JSON string of N bytes; invalid UTF-8 becomes U+FFFD (jansson needs UTF-8). */
json_t *cli_json_text(const char *s, size_t n);
json_t *cli_json_ids(const int32_t *ids, size_t n);

/* Reads a whole file (at most CLI_MAX_FILE bytes) into a NUL-terminated
 * malloc'd buffer; prints the error and returns NULL on failure. */
enum { CLI_MAX_FILE = 64 << 20 };
char *cli_read_file(const char *path, size_t *len);

/* The --stats lines: every labelled field of ST, then the seed. */
void cli_print_stats(FILE *f, const gen_stats *st, const sampler_params *sp);

/* Writes ROOT to PATH as one JSON object; prints the error. */
int cli_write_json(const char *path, json_t *root);

/* The model's chat template, ready to render conversations.  A model
 * without tokenizer.chat_template gets ChatML, as llama.cpp does. */
typedef struct {
    chat_tmpl *tmpl;
    const char *const *stops; /* strings that end an assistant turn (NULL-terminated) */
    size_t n_stops;
    const char *bos, *eos;    /* token texts the template may print */
    bool builtin;             /* the ChatML fallback is in use */
} cli_chat;

/* Prints the error and returns -1 on failure. */
int cli_chat_open(cli_chat *c, const sl_model *m);
void cli_chat_close(cli_chat *c);

/* Renders MSGS followed by the assistant prompt and tokenizes the text
 * (special tokens parsed; BOS added as the vocabulary says unless the
 * template already wrote it).  Prints the error and returns -1 on failure;
 * *text (if TEXT) gets the rendered text. */
int cli_chat_tokens(const cli_chat *c, const sl_model *m, const chat_msg *msgs, size_t n, int32_t **ids,
                    size_t *n_ids, char **text);

#endif
