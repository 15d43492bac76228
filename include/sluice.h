/* sluice public API.
 *
 * sluice runs Mixture-of-Experts language models from GGUF files that are
 * larger than RAM: the dense spine stays resident and routed experts stream
 * from SSD under a hard memory budget, with output bit-identical to an
 * all-in-RAM run.  This header is the narrow surface for embedding the
 * engine: open a model, generate text, read the figures, close.  Errors come
 * back as a message in a caller-supplied buffer; nothing here prints or
 * exits. */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#define SLUICE_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sluice sluice;

typedef struct {
    const char *model;      /* GGUF path (the first part of a split model) */
    int32_t n_ctx;          /* context in tokens; <= 0: min(training context, 4096) */
    int threads;            /* <= 0: physical cores */
    uint64_t mem_bytes;     /* hard memory budget; 0: experts in RAM if they fit, else streamed */
    const char *io;         /* "uring" (default), "pread" or "mmap"; NULL: default */
    const char *pack;       /* multi-drive expert pack manifest, or NULL */
} sluice_options;

typedef struct {
    float temp;             /* <= 0: greedy */
    int32_t top_k;          /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    uint32_t seed;
    int32_t n_predict;      /* < 0: until end of generation or a full context */
} sluice_sampling;

/* llama.cpp's defaults (temp 0.8, top-k 40, top-p 0.95, min-p 0.05), 128 tokens. */
sluice_sampling sluice_sampling_default(void);

/* Receives generated text as it becomes printable; nonzero stops. */
typedef int (*sluice_text_fn)(void *user, const char *text, size_t len);

typedef struct {
    int64_t prompt_tokens, generated_tokens;
    double prompt_tps, decode_tps, ttft_s;
    int streaming;                 /* experts stream from disk */
    uint64_t expert_bytes_read, cache_hits, cache_misses;
    double io_wait_s;
} sluice_stats;

int sluice_open(sluice **out, const sluice_options *opts, char *err, size_t err_cap);
void sluice_close(sluice *s);

/* Continues the conversation held in the context with PROMPT (tokenized as
 * the model's vocabulary says, special tokens parsed) and generates.  The
 * generated text also goes to *OUT (malloc'd, NUL-terminated) if OUT is
 * non-NULL. */
int sluice_generate(sluice *s, const char *prompt, const sluice_sampling *sp, sluice_text_fn on_text, void *user,
                    char **out, char *err, size_t err_cap);

/* Forgets the context (the next prompt starts a new sequence). */
void sluice_reset(sluice *s);

/* Figures of the last sluice_generate. */
void sluice_get_stats(const sluice *s, sluice_stats *out);

#ifdef __cplusplus
}
#endif

#endif
