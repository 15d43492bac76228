/* Tokenizers built from GGUF metadata (tokenizer.ggml.*): byte-level BPE
 * ("gpt2" model) with the pre-tokenizer named by tokenizer.ggml.pre, and
 * SentencePiece BPE ("llama" model).  Token ids match llama.cpp's for the
 * same GGUF; llama.cpp is the reference where it and Hugging Face differ. */
#ifndef SLUICE_TOKENIZER_H
#define SLUICE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "util/err.h"

typedef struct sl_vocab sl_vocab;

/* Token types as stored in tokenizer.ggml.token_type. */
enum {
    SL_TOKEN_NORMAL = 1, SL_TOKEN_UNKNOWN = 2, SL_TOKEN_CONTROL = 3,
    SL_TOKEN_USER_DEFINED = 4, SL_TOKEN_UNUSED = 5, SL_TOKEN_BYTE = 6
};

/* Builds the tokenizer from G's metadata; the vocabulary keeps no reference
 * to G.  Once loaded it is read-only: every call below may run concurrently
 * on the same vocabulary (each allocates its own working state). */
int vocab_load(sl_vocab **out, const gguf_file *g, sl_err *err);
void vocab_free(sl_vocab *v);

int32_t vocab_n_tokens(const sl_vocab *v);
int32_t vocab_bos(const sl_vocab *v);   /* -1 if none */
int32_t vocab_eos(const sl_vocab *v);   /* -1 if none */
int32_t vocab_eot(const sl_vocab *v);   /* end of turn, -1 if none */
bool vocab_add_bos(const sl_vocab *v);
bool vocab_add_eos(const sl_vocab *v);
/* End of generation: eos, eot and the other tokens llama.cpp treats as EOG. */
bool vocab_is_eog(const sl_vocab *v, int32_t id);
/* Effective type after llama.cpp's load-time overrides (e.g. "<|im_end|>"
 * forced to CONTROL); 0 for an undefined type or a bad id. */
int vocab_token_type(const sl_vocab *v, int32_t id);
/* The token's text as stored in the vocabulary (not detokenized). */
const char *vocab_token_text(const sl_vocab *v, int32_t id);
/* Id of the token whose stored text is exactly TEXT, or -1. */
int32_t vocab_find(const sl_vocab *v, const char *text);
/* tokenizer.ggml.model ("gpt2", "llama") and the pre-tokenizer in use
 * ("default" when the file names none; NULL for SentencePiece). */
const char *vocab_model(const sl_vocab *v);
const char *vocab_pre(const sl_vocab *v);

/* Tokenizes LEN bytes of TEXT into a malloc'd array (*ids, *n).  ADD_SPECIAL
 * adds BOS/EOS as the vocabulary says; PARSE_SPECIAL matches control tokens
 * written in the text. */
int vocab_tokenize(const sl_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                   int32_t **ids, size_t *n, sl_err *err);

/* Bytes of one token, as llama.cpp's token_to_piece; returns the length
 * (which may exceed CAP: then only CAP bytes were written), -1 for a bad id. */
int vocab_token_to_piece(const sl_vocab *v, int32_t id, bool unparse_special, char *buf, size_t cap);

/* Whole-sequence detokenization into a malloc'd NUL-terminated string. */
int vocab_detokenize(const sl_vocab *v, const int32_t *ids, size_t n, bool remove_special, bool unparse_special,
                     char **out, size_t *len, sl_err *err);

/* Streaming detokenization: bytes of a token that ends inside a UTF-8
 * sequence are held back until the sequence completes. */
typedef struct {
    char pending[16];
    int n_pending;
} sl_detok;

/* Appends the printable bytes produced by token ID to OUT (cap bytes);
 * returns the number of bytes written.  Control tokens print nothing (as
 * llama.cpp's token_to_piece without special).  OUT should have room for
 * the token's piece plus 3 held-back bytes; what does not fit is dropped. */
size_t detok_push(sl_detok *d, const sl_vocab *v, int32_t id, char *out, size_t cap);
/* The same, rendering control tokens' text when UNPARSE_SPECIAL. */
size_t detok_push_special(sl_detok *d, const sl_vocab *v, int32_t id, bool unparse_special, char *out,
                          size_t cap);
/* Flushes what is held back (invalid or truncated sequences at the end). */
size_t detok_flush(sl_detok *d, char *out, size_t cap);

#endif
