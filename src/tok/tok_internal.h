/* Internals shared by the tokenizer's files (not for other modules).  The
 * behaviour mirrors llama.cpp's llama-vocab.cpp / unicode.cpp at commit
 * 7e743c3a: token attributes, special-token partitioning, the pre-tokenizer
 * splits, BPE and SentencePiece merging and detokenization. */
#ifndef SLUICE_TOK_INTERNAL_H
#define SLUICE_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tokenizer.h"
#include "util/err.h"

/* llama_token_attr bits: the effective type of a token after llama.cpp's
 * load-time overrides, plus the lstrip/rstrip flags it sets by model name. */
enum {
    ATTR_UNDEFINED = 0,
    ATTR_UNKNOWN = 1 << 0,
    ATTR_UNUSED = 1 << 1,
    ATTR_NORMAL = 1 << 2,
    ATTR_CONTROL = 1 << 3,
    ATTR_USER_DEFINED = 1 << 4,
    ATTR_BYTE = 1 << 5,
    ATTR_LSTRIP = 1 << 7,
    ATTR_RSTRIP = 1 << 8,
};

enum { VOCAB_SPM = 1, VOCAB_BPE = 2 };

/* ---- string -> id map over strings owned elsewhere (open addressing) ---- */

typedef struct {
    uint32_t cap;   /* power of two */
    uint32_t n;
    uint32_t *tag;  /* 0 = empty, else hash bits | 1 */
    int32_t *val;
} strmap;

/* KEY_OF(ctx, val, &len) returns the key of an entry so the map stores no strings. */
typedef const char *(*strmap_key_fn)(const void *ctx, int32_t val, size_t *len);

int strmap_init(strmap *m, size_t expected);
void strmap_free(strmap *m);
/* Returns the existing value for the key, or inserts VAL and returns -1. */
int32_t strmap_put(strmap *m, uint64_t h, int32_t val, const char *s, size_t len, strmap_key_fn key_of,
                   const void *ctx);
int32_t strmap_get(const strmap *m, uint64_t h, const char *s, size_t len, strmap_key_fn key_of, const void *ctx);
uint64_t tok_hash(const char *s, size_t len);
uint64_t tok_hash_pair(const char *a, size_t la, const char *b, size_t lb);

/* ---- Unicode as llama.cpp sees it (unicode_cpt.c) ---- */

enum {
    CPT_UNDEFINED = 0x0001,
    CPT_NUMBER = 0x0002,
    CPT_LETTER = 0x0004,
    CPT_SEPARATOR = 0x0008,
    CPT_MARK = 0x0010,
    CPT_PUNCT = 0x0020,
    CPT_SYMBOL = 0x0040,
    CPT_CONTROL = 0x0080,
    CPT_CATEGORIES = 0x00FF,
    CPT_WHITESPACE = 0x0100,
};

/* Category flags of a code point, as llama.cpp's Unicode 15.1 table has them. */
unsigned cpt_flags(uint32_t cpt);
uint32_t cpt_tolower(uint32_t cpt);
bool cpt_is_han(uint32_t cpt);
/* llama.cpp's UTF-8 decoder: lenient (no overlong or surrogate checks), an
 * invalid byte becomes U+FFFD and consumes one byte.  Advances *pos. */
uint32_t utf8_next_lenient(const unsigned char *s, size_t n, size_t *pos);
/* Length of the sequence a lead byte announces (1 for continuation bytes). */
static inline size_t utf8_len_lead(unsigned char c)
{
    static const unsigned char lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}
/* Encodes CPT (<= 0x10FFFF) as UTF-8 into out[4]; returns the length. */
size_t utf8_put(uint32_t cpt, char *out);
/* GPT-2 byte-level alphabet: byte -> code point, and back (-1 if none). */
uint32_t byte_to_cpt(uint8_t b);
int cpt_to_byte(uint32_t cpt);

/* ---- pre-tokenizer (pretok.c) ---- */

enum {
    PRE_CLEAN_SPACES = 1 << 0,   /* clean_up_tokenization_spaces stays on */
    PRE_IGNORE_MERGES = 1 << 1,  /* a word that is a token is taken whole */
    PRE_ADD_BOS = 1 << 2,        /* add_bos default when the key is absent */
    PRE_NO_BOS_ID = 1 << 3,      /* no default BOS id (chatglm) */
};

typedef struct pretok pretok;

/* Selects the pre-tokenizer by its tokenizer.ggml.pre name (NULL or "" =
 * llama.cpp's "default"); an unknown name is an error naming it. */
int pretok_create(pretok **out, const char *name, unsigned *flags, sl_err *err);
void pretok_free(pretok *p);
const char *pretok_name(const pretok *p);

/* Words of one text fragment, GPT-2 byte-encoded and concatenated in BUF;
 * word i is buf[end[i-1] .. end[i]). */
typedef struct {
    char *buf;
    size_t len, cap;
    size_t *end;
    size_t n, ncap;
} word_list;

void word_list_free(word_list *w);
/* Splits TEXT into words (appending to W). */
int pretok_split(const pretok *p, const char *text, size_t len, word_list *w, sl_err *err);

/* ---- the vocabulary ---- */

typedef struct trie_node trie_node;

struct sl_vocab {
    int type;
    int32_t n_tokens;
    char *text;          /* all token texts, NUL-separated */
    uint32_t *off, *len; /* token i = text + off[i], len[i] bytes */
    float *score;
    uint16_t *attr;
    strmap tok_map;

    /* BPE merges: merge i is mtext + moff[i]: "first second" */
    char *mtext;
    uint32_t *moff, *mfirst, *msecond;
    uint32_t n_merges;
    strmap merge_map;

    pretok *pre;
    unsigned pre_flags;
    char *model_name, *pre_name;

    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;

    int32_t *eog;        /* sorted */
    size_t n_eog;
    int32_t *special;    /* CONTROL / USER_DEFINED / UNKNOWN ids, longest text first */
    size_t n_special;
    trie_node *trie;     /* over the texts of `special` */
    size_t n_trie;
    int32_t trie_root[256];

    /* SPM: bytes that some token has right before a U+2581; the text can be
     * cut before a U+2581 preceded by any other byte, as no merge crosses it */
    bool spm_glue[256];
};

int32_t vocab_lookup(const sl_vocab *v, const char *s, size_t len);
int32_t merge_rank(const sl_vocab *v, const char *a, size_t la, const char *b, size_t lb);

/* growable id array */
typedef struct {
    int32_t *v;
    size_t n, cap;
} id_vec;
int id_push(id_vec *a, int32_t id);

/* Merge engines (bpe.c, spm.c): tokenize one fragment, appending to OUT. */
typedef struct word_cache word_cache;
word_cache *word_cache_new(void);
void word_cache_free(word_cache *c);
int bpe_tokenize(const sl_vocab *v, word_cache *cache, const char *text, size_t len, id_vec *out, sl_err *err);
int spm_tokenize(const sl_vocab *v, word_cache *cache, const char *text, size_t len, id_vec *out, sl_err *err);
void spm_prepare(sl_vocab *v);
/* the per-call word cache shared by both engines */
int word_cache_get(word_cache *c, const char *w, size_t len, uint64_t *h, id_vec *out);
int word_cache_add(word_cache *c, uint64_t h, const char *w, size_t len, const int32_t *ids, size_t nids);

/* special tokens (special.c): the types llama.cpp forces by text, the EOG
 * set and lstrip/rstrip rules; then the trie over the special texts */
int special_detect(sl_vocab *v, const gguf_file *g, sl_err *err);
int special_build(sl_vocab *v, sl_err *err);
void special_free(sl_vocab *v);

typedef struct {
    int32_t token; /* -1 for raw text */
    size_t off, len;
} fragment;

/* Splits TEXT into raw-text and special-token fragments like llama.cpp's
 * tokenizer_st_partition. */
int special_partition(const sl_vocab *v, const char *text, size_t len, bool parse_special, fragment **out,
                      size_t *n_out, sl_err *err);

#endif
