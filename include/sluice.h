/* sluice public API.
 *
 * sluice runs Mixture-of-Experts language models from GGUF files that are
 * larger than RAM: the dense spine stays resident and routed experts stream
 * from SSD under a hard memory budget, with output bit-identical to an
 * all-in-RAM run.  This header is the surface for embedding the engine, and
 * the one the sluice commands (run, chat, bench, serve) are built on.
 *
 * Conventions
 * - A function that can fail returns 0 on success and -1 on failure, with a
 *   message in ERR[ERR_CAP] (NUL-terminated, cut to fit; ERR may be NULL).
 *   On success ERR is set to the empty string.  Nothing here prints or exits.
 * - Memory returned through an out-parameter (text, id arrays, JSON) is
 *   malloc'd and belongs to the caller: release it with sluice_free.
 *   Pointers into a handle (sluice_tokens, sluice_model_name) stay valid
 *   until the next call that changes the handle.
 * - A sluice handle is used by one thread at a time; the engine runs its own
 *   worker threads inside calls.  Separate handles are independent.
 * - Callbacks run on the calling thread, between tokens; a nonzero return
 *   stops generation after the current token (sluice_result.stop =
 *   SLUICE_STOP_CALLER). */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#define SLUICE_VERSION "0.2.0"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice sluice;

/* ---------------------------------------------------------------- open */

typedef struct {
    const char *model;         /* GGUF path (the first part of a split model) */
    int32_t n_ctx;             /* context in tokens; <= 0: min(training context, 4096) */
    int threads;               /* <= 0: physical cores */
    int32_t n_batch;           /* most tokens per layer-major pass; <= 0: 512 */
    uint64_t mem_bytes;        /* hard memory budget; 0: experts in RAM if they fit, else streamed */
    const char *io;            /* "uring" (default), "pread" or "mmap"; NULL: default */
    const char *pack;          /* multi-drive expert pack manifest, or NULL */
    const char *kv_type;       /* KV cache "f16" (default) or "f32"; NULL: default */
    int flash_attn;            /* -1: auto (default: on, as llama.cpp), 0: off, 1: on */
    const char *prefetch;      /* expert prediction "auto", "off" or "next"; NULL: auto when streaming */
    const char *heat_file;     /* NULL: $XDG_CACHE_HOME/sluice/<model id>.heat */
    int no_heat;               /* neither read nor write a heat file */
    uint64_t pin_bytes;        /* pinned tier inside the expert cache (0: none) */
    const char *chat_template; /* Jinja text or a built-in template name; NULL: the model's own */
    /* Speculative decoding (output identical to plain decoding). */
    const char *draft;         /* a draft GGUF, "ngram", or NULL for none */
    int32_t draft_max;         /* most drafted tokens per step; 0: adaptive, up to 16 */
    int32_t draft_min;         /* fewest drafted tokens worth verifying (0: 1) */
    float draft_p_min;         /* stop drafting below this draft probability (0: never) */
    int32_t draft_vocab;       /* a draft model proposes only its first N ids (0: auto, -1: all) */
    int32_t ngram_min, ngram_max; /* n-gram lookup lengths (0: defaults) */
} sluice_options;

/* Every field at its default (n_ctx 0, threads 0, flash_attn -1, ...). */
sluice_options sluice_options_default(void);

int sluice_open(sluice **out, const sluice_options *opts, char *err, size_t err_cap);
void sluice_close(sluice *s);
/* Releases memory this API returned. */
void sluice_free(void *p);

/* What sluice_open noted for the user, one line each and without a prefix:
 * warnings (experts streamed because the model does not fit in memory, a
 * heat file that could not be read, settings that are legal but doubtful)
 * and, when VERBOSE, where the experts live and the memory plan.  "" when
 * there is nothing to say. */
const char *sluice_notes(const sluice *s, int verbose);

/* The model: its general.name (or file name), architecture, sizes. */
const char *sluice_model_name(const sluice *s);
const char *sluice_model_arch(const sluice *s);
int32_t sluice_n_vocab(const sluice *s);
int32_t sluice_n_ctx(const sluice *s);       /* of this handle's context */
int32_t sluice_n_ctx_train(const sluice *s);

/* ------------------------------------------------------------- tokens */

/* Tokenizes LEN bytes of TEXT.  ADD_BOS: prepend BOS if the vocabulary asks
 * for one; PARSE_SPECIAL: control-token texts ("<|im_start|>") become their
 * ids instead of being tokenized as text. */
int sluice_tokenize(sluice *s, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
                    size_t *n_ids, char *err, size_t err_cap);
/* The text of N ids (SPECIAL: control tokens print their text too).  Ids
 * outside the vocabulary are an error. */
int sluice_detokenize(sluice *s, const int32_t *ids, size_t n, int special, char **text, size_t *len, char *err,
                      size_t err_cap);
/* Whether ID ends a generation (EOS, EOT, end-of-turn tokens). */
int sluice_token_is_eog(const sluice *s, int32_t id);

/* --------------------------------------------------------------- chat */

typedef struct {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content;
} sluice_message;

/* Renders a conversation with the chat template (the model's or the one in
 * sluice_options.chat_template), followed by the assistant prompt when
 * ADD_GENERATION_PROMPT is set: the exact text the model is fed. */
int sluice_chat_render(sluice *s, const sluice_message *msgs, size_t n, int add_generation_prompt, char **text,
                       char *err, size_t err_cap);
/* The same from JSON, for tools and structured turns: MESSAGES_JSON is an
 * array of OpenAI-style messages (role, content, tool_calls, tool_call_id,
 * name, reasoning_content); TOOLS_JSON an array of tool definitions or NULL;
 * KWARGS_JSON an object of extra template variables (enable_thinking,
 * reasoning_effort, ...) or NULL. */
int sluice_chat_render_json(sluice *s, const char *messages_json, const char *tools_json, const char *kwargs_json,
                            int add_generation_prompt, char **text, char *err, size_t err_cap);
/* Strings that end an assistant turn under the template in use (for models
 * whose end of turn is text rather than an end-of-generation token): pass
 * them as sluice_sampling.stop for a reply.  *N gets their number; the list
 * is NULL-terminated and lives as long as the handle. */
const char *const *sluice_chat_stop_strings(const sluice *s, size_t *n);
/* The text of the chat template in use (the model's, the ChatML fallback,
 * or the override), so a caller can tell its family (e.g. the tool-call
 * syntax a server parses replies with); valid while S is open. */
const char *sluice_chat_template(const sluice *s);

/* ----------------------------------------------------------- sampling */

#define SLUICE_SEED_RANDOM 0xFFFFFFFFu

typedef struct {
    float temp;              /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    int32_t repeat_last_n;   /* tokens the penalties look back over; 0: off, -1: the context */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    uint32_t seed;           /* SLUICE_SEED_RANDOM: a seed from the OS */
    const char *grammar;     /* GBNF text constraining the output (rule "root"), or NULL */
    const char *json_schema; /* a JSON Schema the output must satisfy (converted to a grammar), or NULL */
    int32_t n_predict;       /* most generated tokens; < 0: until end of generation or a full context */
    const char *const *stop; /* strings that end generation (not part of the text) */
    size_t n_stop;
    int ignore_eos;          /* keep generating through end-of-generation tokens */
    int32_t n_probs;         /* alternatives reported per generated token (sluice_token.top), at most 64; 0: none */
    int logprobs;            /* fill sluice_token.logprob: a softmax over the whole vocabulary per token,
                                a cost a fast small model feels; 0 (and n_probs 0): logprob is NaN */
} sluice_sampling;

/* llama.cpp's defaults (temp 0.8, top-k 40, top-p 0.95, min-p 0.05, no
 * penalties, random seed), 128 tokens, logprobs on. */
sluice_sampling sluice_sampling_default(void);

/* ------------------------------------------------------------ generate */

typedef struct {
    int32_t id;
    float logprob;           /* natural log of its probability under the model's softmax */
} sluice_logprob;

/* One generated token, as the on_token callback sees it. */
typedef struct {
    int32_t id;
    const char *piece;       /* its bytes (may be part of a UTF-8 sequence) */
    size_t piece_len;
    float logprob;
    const sluice_logprob *top; /* the n_probs most likely tokens at this position */
    int32_t n_top;
} sluice_token;

typedef struct {
    void *user;
    /* Output text as it becomes safe to show (never part of a stop string). */
    int (*on_text)(void *user, const char *text, size_t len);
    /* Each token that becomes part of the output, in order. */
    int (*on_token)(void *user, const sluice_token *t);
    /* The next-token logits after the prompt (n_vocab floats), before the
     * first token is sampled. */
    int (*on_prompt)(void *user, const float *logits, int32_t n_vocab);
} sluice_callbacks;

typedef enum {
    SLUICE_STOP_EOG = 1,    /* the model ended its turn */
    SLUICE_STOP_LIMIT,      /* n_predict tokens */
    SLUICE_STOP_STRING,     /* a stop string appeared */
    SLUICE_STOP_CTX,        /* the context is full */
    SLUICE_STOP_CALLER,     /* a callback returned nonzero */
} sluice_stop;

typedef struct {
    char *text;             /* NUL-terminated output text, stop string cut */
    size_t len;
    int32_t *ids;           /* output tokens (an ending EOG token excluded) */
    size_t n_ids;
    sluice_stop stop;
    int32_t cached_tokens;  /* prompt tokens reused from the context (sluice_generate_tokens) */
} sluice_result;

void sluice_result_free(sluice_result *r);

/* Receives generated text as it becomes printable; nonzero stops. */
typedef int (*sluice_text_fn)(void *user, const char *text, size_t len);

/* Continues the conversation held in the context with PROMPT (tokenized as
 * the model's vocabulary says, special tokens parsed; BOS when the context
 * is empty, unless PROMPT starts with the BOS text) and generates.  The
 * context then holds the prompt and every generated token (an ending EOG
 * token included), so the next call continues exactly where this one
 * stopped: two calls give the same tokens, bit for bit, as one long one.
 * PROMPT may be "" to just continue.  The generated text also goes to *OUT
 * if OUT is non-NULL.  A token sampled when the context is already full is
 * output but not held. */
int sluice_generate(sluice *s, const char *prompt, const sluice_sampling *sp, sluice_text_fn on_text, void *user,
                    char **out, char *err, size_t err_cap);

/* Generates after exactly the N tokens of PROMPT: the longest prefix of
 * PROMPT that the context already holds is kept (prefix reuse; counted in
 * res->cached_tokens) and only the rest is evaluated.  RES may be NULL.  If
 * the evaluation fails, the context holds the reused prefix (or less). */
int sluice_generate_tokens(sluice *s, const int32_t *prompt, size_t n, const sluice_sampling *sp,
                           const sluice_callbacks *cb, sluice_result *res, char *err, size_t err_cap);

/* ----------------------------------------------------- token-level steps */

/* The tokens the context holds, oldest first (*N of them). */
const int32_t *sluice_tokens(const sluice *s, size_t *n);
/* Appends N tokens to the context; LOGITS (n_vocab floats, or NULL) gets
 * the next-token logits after the last.  On failure the context is as it
 * was before the call. */
int sluice_eval(sluice *s, const int32_t *ids, size_t n, float *logits, char *err, size_t err_cap);
/* Keeps the first POS tokens of the context and forgets the rest. */
int sluice_rewind(sluice *s, int32_t pos, char *err, size_t err_cap);
/* Forgets the context (the next prompt starts a new sequence). */
void sluice_reset(sluice *s);

/* A sampling chain with its own state (penalty history, grammar, random
 * stream), tied to the handle that made it. */
typedef struct sluice_sampler sluice_sampler;
int sluice_sampler_new(sluice *s, const sluice_sampling *sp, sluice_sampler **out, char *err, size_t err_cap);
void sluice_sampler_free(sluice_sampler *smp);
/* Picks a token from LOGITS (n_vocab floats) under the chain; the token is
 * not accepted until sluice_sampler_accept.  -1 when every logit is NaN. */
int32_t sluice_sampler_sample(sluice_sampler *smp, const float *logits);
/* Records that ID joined the sequence (penalties, grammar state). */
void sluice_sampler_accept(sluice_sampler *smp, int32_t id);

/* ------------------------------------------------------- saved contexts */

/* Writes the context (its tokens, KV cache and recurrent state) to PATH,
 * tagged with the model's identity and a checksum. */
int sluice_state_save(sluice *s, const char *path, char *err, size_t err_cap);
/* Restores a context saved by sluice_state_save.  A file of another model,
 * of another KV type, damaged or truncated, is refused (context unchanged). */
int sluice_state_load(sluice *s, const char *path, char *err, size_t err_cap);
/* The tokens a context saved by sluice_state_save holds (*N of them), if
 * its header says it is of this model and KV layout (the checksum is
 * checked only by sluice_state_load): a server indexes saved contexts by
 * their tokens without loading them. */
int sluice_state_peek(sluice *s, const char *path, int32_t **tokens, size_t *n, char *err, size_t err_cap);

/* -------------------------------------------------------------- figures */

typedef struct {
    int64_t prompt_tokens, generated_tokens, cached_tokens;
    double load_s, prompt_s, decode_s;
    double prompt_tps, decode_tps, ttft_s;
    int streaming;                 /* experts stream from disk */
    uint64_t expert_bytes_read, cache_hits, cache_misses;
    double cache_hit_rate, prefetch_recall, io_wait_s;
    int64_t draft_proposed, draft_accepted;
    uint64_t peak_rss_bytes;
} sluice_stats;

/* Figures of the last generation (load_s: of sluice_open; the streaming
 * counters and peak RSS: since sluice_open). */
void sluice_get_stats(const sluice *s, sluice_stats *out);
/* Every figure of the last generation as one JSON object (what
 * `sluice run --stats-json` writes), or NULL if out of memory. */
char *sluice_stats_json(const sluice *s);

#ifdef __cplusplus
}
#endif

#endif
