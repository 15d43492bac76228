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
#include "decode/spec_setup.h"
#include "decode/stats.h"
#include "engine/engine.h"
#include "kernels/pool.h"
#include "sluice.h"

/* Context the bundled demo model gets by default: it was trained on
 * 512-token windows although its metadata advertises 1024 (models/README.md). */
enum { CLI_BUNDLED_CTX = 512, CLI_MAX_DEFAULT_CTX = 4096 };

typedef struct {
    const char *model_path; /* NULL: the bundled model */
    int32_t n_ctx;          /* <= 0: the default (cli_default_ctx) */
    int threads;            /* <= 0: physical cores */
    bool model_only;        /* load the model, no pool or session */
    engine_opts eo;         /* expert placement: --mem, --io, --pin, --pack ... */
    long fault_countdown;   /* SLUICE_FAULT_READ (tests), for the whole run */
    char *constraint_file;  /* --grammar-file / --json-schema-file text (the sampling points into it) */
    const char *chat_template; /* --chat-template NAME|FILE, --chat-template-file: Jinja text or a name */
    char *template_file;    /* the text read for it */
    /* speculative decoding: --draft, --draft-max, --draft-min, --draft-p-min, --draft-vocab, --ngram-min/max */
    spec_setup_opts draft;
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
    CLI_OPT_REPEAT_PENALTY, CLI_OPT_REPEAT_LAST_N, CLI_OPT_PRESENCE_PENALTY, CLI_OPT_FREQUENCY_PENALTY,
    CLI_OPT_MEM, CLI_OPT_IO, CLI_OPT_PIN, CLI_OPT_HEAT_FILE, CLI_OPT_NO_HEAT, CLI_OPT_PACK, CLI_OPT_VERIFY,
    CLI_OPT_KV, CLI_OPT_PREFETCH, CLI_OPT_CACHE_POLICY, CLI_OPT_TRACE_OUT, CLI_OPT_PREFETCH_ADMIT,
    CLI_OPT_GRAMMAR, CLI_OPT_GRAMMAR_FILE, CLI_OPT_JSON_SCHEMA, CLI_OPT_JSON_SCHEMA_FILE,
    CLI_OPT_FLASH_ATTN, CLI_OPT_CACHE_TYPE_K, CLI_OPT_CACHE_TYPE_V, CLI_OPT_UBATCH, CLI_OPT_THREADS_BATCH,
    CLI_OPT_NO_WARMUP, CLI_OPT_MLOCK, CLI_OPT_NO_MMAP, CLI_OPT_CHAT_TEMPLATE, CLI_OPT_CHAT_TEMPLATE_FILE,
    CLI_OPT_DRAFT, CLI_OPT_DRAFT_MAX, CLI_OPT_DRAFT_MIN, CLI_OPT_DRAFT_P_MIN, CLI_OPT_DRAFT_VOCAB, CLI_OPT_NGRAM_MIN, CLI_OPT_NGRAM_MAX,
    CLI_OPT_FIRST_FREE
};
#define CLI_GEN_LONGOPTS                                                                                      \
    {"model", required_argument, 0, 'm'}, {"ctx-size", required_argument, 0, 'c'},                           \
        {"threads", required_argument, 0, 't'}, {"batch-size", required_argument, 0, 'b'},                    \
        {"temp", required_argument, 0, CLI_OPT_TEMP}, {"top-k", required_argument, 0, CLI_OPT_TOPK},          \
        {"top-p", required_argument, 0, CLI_OPT_TOPP}, {"min-p", required_argument, 0, CLI_OPT_MINP},         \
        {"seed", required_argument, 0, CLI_OPT_SEED},                                                        \
        {"repeat-penalty", required_argument, 0, CLI_OPT_REPEAT_PENALTY},                                    \
        {"repeat-last-n", required_argument, 0, CLI_OPT_REPEAT_LAST_N},                                      \
        {"presence-penalty", required_argument, 0, CLI_OPT_PRESENCE_PENALTY},                                \
        {"frequency-penalty", required_argument, 0, CLI_OPT_FREQUENCY_PENALTY},                              \
        {"grammar", required_argument, 0, CLI_OPT_GRAMMAR},                                                  \
        {"grammar-file", required_argument, 0, CLI_OPT_GRAMMAR_FILE},                                        \
        {"json-schema", required_argument, 0, CLI_OPT_JSON_SCHEMA},                                          \
        {"json-schema-file", required_argument, 0, CLI_OPT_JSON_SCHEMA_FILE},                                \
        {"chat-template", required_argument, 0, CLI_OPT_CHAT_TEMPLATE},                                      \
        {"chat-template-file", required_argument, 0, CLI_OPT_CHAT_TEMPLATE_FILE}, CLI_DRAFT_LONGOPTS,  \
        CLI_STREAM_LONGOPTS
/* Speculative decoding flags (run, chat, bench). */
#define CLI_DRAFT_LONGOPTS                                                                                    \
    {"draft", required_argument, 0, CLI_OPT_DRAFT}, {"draft-max", required_argument, 0, CLI_OPT_DRAFT_MAX},   \
        {"draft-min", required_argument, 0, CLI_OPT_DRAFT_MIN},                                               \
        {"draft-p-min", required_argument, 0, CLI_OPT_DRAFT_P_MIN},                                           \
        {"draft-vocab", required_argument, 0, CLI_OPT_DRAFT_VOCAB},                                           \
        {"ngram-min", required_argument, 0, CLI_OPT_NGRAM_MIN}, {"ngram-max", required_argument, 0, CLI_OPT_NGRAM_MAX}
/* Expert placement flags, shared by every command that loads a model. */
#define CLI_STREAM_LONGOPTS                                                                                   \
    {"mem", required_argument, 0, CLI_OPT_MEM}, {"io", required_argument, 0, CLI_OPT_IO},                     \
        {"pin", required_argument, 0, CLI_OPT_PIN}, {"heat-file", required_argument, 0, CLI_OPT_HEAT_FILE},   \
        {"no-heat", no_argument, 0, CLI_OPT_NO_HEAT}, {"pack", required_argument, 0, CLI_OPT_PACK},           \
        {"verify", no_argument, 0, CLI_OPT_VERIFY}, {"kv", required_argument, 0, CLI_OPT_KV},                 \
        {"prefetch", required_argument, 0, CLI_OPT_PREFETCH},                                                 \
        {"cache-policy", required_argument, 0, CLI_OPT_CACHE_POLICY},                                         \
        {"trace-out", required_argument, 0, CLI_OPT_TRACE_OUT},                                               \
        {"prefetch-admit", required_argument, 0, CLI_OPT_PREFETCH_ADMIT},                                     \
        {"flash-attn", required_argument, 0, CLI_OPT_FLASH_ATTN},                                             \
        {"cache-type-k", required_argument, 0, CLI_OPT_CACHE_TYPE_K},                                         \
        {"cache-type-v", required_argument, 0, CLI_OPT_CACHE_TYPE_V},                                         \
        {"ubatch-size", required_argument, 0, CLI_OPT_UBATCH},                                                \
        {"threads-batch", required_argument, 0, CLI_OPT_THREADS_BATCH},                                       \
        {"no-warmup", no_argument, 0, CLI_OPT_NO_WARMUP}, {"mlock", no_argument, 0, CLI_OPT_MLOCK},           \
        {"no-mmap", no_argument, 0, CLI_OPT_NO_MMAP}
#define CLI_GEN_SHORTOPTS "m:c:t:b:"

/* Help text for the expert placement flags. */
extern const char CLI_STREAM_HELP[];
/* Help text for the drafting flags. */
extern const char CLI_DRAFT_HELP[];

/* Applies one drafting flag (CLI_DRAFT_LONGOPTS); same returns as cli_gen_option. */
int cli_draft_option(int opt, const char *arg, spec_setup_opts *d);

/* Applies one expert placement flag; same returns as cli_gen_option. */
int cli_stream_option(int opt, const char *arg, engine_opts *eo);

/* Prints what the engine noted (auto-streaming, heat) and, with VERBOSE,
 * the memory plan, to stderr. */
void cli_print_engine(const sl_engine *e, bool verbose);
/* The same for a model opened through the API. */
void cli_print_notes(const sluice *s, bool verbose);

/* Returns 1 if OPT was one of the shared options (applied), 0 if not, -1 on
 * a bad value (error printed).  --seed -1 leaves the seed random. */
int cli_gen_option(int opt, const char *arg, cli_model_opts *mo, sluice_sampling *sp);
/* Releases what cli_gen_option kept (a grammar file's text). */
void cli_gen_free(cli_model_opts *mo);
/* Help lines of the grammar and chat template flags. */
extern const char CLI_GRAMMAR_HELP[], CLI_TEMPLATE_HELP[];
/* The sampling defaults of run and chat: llama.cpp's, no token limit. */
sluice_sampling cli_sampling_default(void);

/* Opens the model of O (the bundled one if none is given) through the
 * public API, the way every generating command does; prints the error and
 * returns -1 on failure.  *PATH: the file opened. */
int cli_open(cli_model_opts *o, sluice **out, const char **path);

/* Prompt text as token ids, the way a chat prompt is fed: BOS as the
 * vocabulary asks unless the text (a rendered template) starts with it,
 * control-token texts parsed.  Prints the error. */
int cli_chat_ids(sluice *s, const char *text, int32_t **ids, size_t *n);

/* Loads the model, starts the pool and creates a session; on failure prints
 * the error and returns -1 (everything released). */
int cli_model_open(cli_model *cm, const cli_model_opts *o);
void cli_model_close(cli_model *cm);

/* Whether PATH is one of the bundled models (in the checkout's models/). */
bool cli_is_bundled(const char *path);


/* Parses "1,2,3" into a malloc'd id array; each id must be in [0, n_vocab).
 * Prints the error and returns -1 on bad input. */
int cli_parse_ids(const char *s, int32_t n_vocab, int32_t **ids, size_t *n);

/* Parses a whole decimal int / float argument of option NAME; prints the error. */
int cli_parse_int(const char *name, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *name, const char *s, float *out);

/* A JSON string of N bytes; invalid UTF-8 becomes U+FFFD (jansson needs UTF-8). */
json_t *cli_json_text(const char *s, size_t n);
json_t *cli_json_ids(const int32_t *ids, size_t n);

/* Reads a whole file (at most CLI_MAX_FILE bytes; "-": standard input)
 * into a NUL-terminated malloc'd buffer; prints the error and returns NULL
 * on failure. */
enum { CLI_MAX_FILE = 64 << 20 };
char *cli_read_file(const char *path, size_t *len);

/* The --stats lines from a stats JSON object (sluice_stats_json): every
 * labelled figure, the seed, and the expert prediction figures. */
void cli_print_stats(FILE *f, const json_t *stats);

/* Writes ROOT to PATH as one JSON object; prints the error. */
int cli_write_json(const char *path, json_t *root);

#endif
