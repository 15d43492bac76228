/* Loading a vocabulary from GGUF metadata the way llama.cpp's
 * llama_vocab::impl::load does: model type, pre-tokenizer, token texts and
 * types, merges, special ids with their per-type defaults, add_bos/add_eos,
 * the tokens it recognises by text (EOT, EOG, FIM) and the attributes it
 * forces on them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

#define MAX_TOKENS (1u << 26)
#define MAX_MERGES (1u << 26)
#define K "tokenizer.ggml."

static const char *tok_key(const void *ctx, int32_t id, size_t *len)
{
    const sl_vocab *v = ctx;
    *len = v->len[id];
    return v->text + v->off[id];
}

int32_t vocab_lookup(const sl_vocab *v, const char *s, size_t len)
{
    return strmap_get(&v->tok_map, tok_hash(s, len), s, len, tok_key, v);
}

/* Merge R's two halves (stored as "first second"). */
static const char *merge_pair(const sl_vocab *v, int32_t r, size_t *la, const char **b, size_t *lb)
{
    const char *m = v->mtext + v->moff[r];
    *la = v->mfirst[r];
    *b = m + *la + 1;
    *lb = v->msecond[r];
    return m;
}

/* The merge map is a strmap's slots probed by hand: its key is a pair,
 * which the single-string key callback cannot express. */
static int32_t merge_find(const sl_vocab *v, uint64_t h, const char *a, size_t la, const char *b, size_t lb)
{
    uint32_t tag = (uint32_t)(h >> 32) | 1u, mask = v->merge_map.cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        if (!v->merge_map.tag[i]) return -1;
        if (v->merge_map.tag[i] != tag) continue;
        int32_t r = v->merge_map.val[i];
        size_t xa, xb;
        const char *mb;
        const char *ma = merge_pair(v, r, &xa, &mb, &xb);
        if (xa == la && xb == lb && !memcmp(ma, a, la) && !memcmp(mb, b, lb)) return r;
    }
}

int32_t merge_rank(const sl_vocab *v, const char *a, size_t la, const char *b, size_t lb)
{
    if (!v->merge_map.cap) return -1;
    return merge_find(v, tok_hash_pair(a, la, b, lb), a, la, b, lb);
}

/* Inserts merge R unless the same pair has a lower rank already. */
static void merge_put(sl_vocab *v, int32_t r)
{
    size_t la, lb;
    const char *b;
    const char *a = merge_pair(v, r, &la, &b, &lb);
    uint64_t h = tok_hash_pair(a, la, b, lb);
    if (merge_find(v, h, a, la, b, lb) >= 0) return;
    uint32_t mask = v->merge_map.cap - 1, i = (uint32_t)h & mask;
    while (v->merge_map.tag[i]) i = (i + 1) & mask;
    v->merge_map.tag[i] = (uint32_t)(h >> 32) | 1u;
    v->merge_map.val[i] = r;
    v->merge_map.n++;
}

int id_push(id_vec *a, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, cap * sizeof *p);
        if (!p) return -1;
        a->v = p;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

void vocab_free(sl_vocab *v)
{
    if (!v) return;
    free(v->text);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->attr);
    strmap_free(&v->tok_map);
    free(v->mtext);
    free(v->moff);
    free(v->mfirst);
    free(v->msecond);
    strmap_free(&v->merge_map);
    pretok_free(v->pre);
    free(v->model_name);
    free(v->pre_name);
    free(v->eog);
    free(v->special);
    special_free(v);
    free(v);
}

static char *dup_str(const gguf_str *s)
{
    char *d = malloc(s->len + 1);
    if (d) {
        memcpy(d, s->s, s->len);
        d[s->len] = 0;
    }
    return d;
}

/* ---- model type and per-type defaults ---- */

static int select_model(sl_vocab *v, const gguf_file *g, sl_err *err)
{
    const gguf_str *model = NULL, *pre = NULL;
    int rc = gguf_get_str(g, K "model", &model, err);
    if (rc < 0) return -1;
    if (!rc) return sl_errf(err, "%s: no tokenizer (key " K "model missing)", g->path);
    if (gguf_get_str(g, K "pre", &pre, err) < 0) return -1;
    v->model_name = dup_str(model);
    v->pre_name = pre ? dup_str(pre) : NULL;
    if (!v->model_name || (pre && !v->pre_name)) return sl_errf(err, "out of memory");
    static const char *const known[] = {"no_vocab", "none", "bert", "t5", "rwkv", "plamo2", "gemma4", "hybriddna",
                                        "whitespace"};
    v->eot = v->eom = v->sep = v->pad = v->mask = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
    if (!strcmp(v->model_name, "llama")) {
        v->type = VOCAB_SPM;
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_space_prefix = true, v->add_bos = true;
        return 0;
    }
    if (!strcmp(v->model_name, "gpt2")) {
        v->type = VOCAB_BPE;
        v->bos = 11, v->eos = 11, v->unk = -1;
        if (pretok_create(&v->pre, v->pre_name, &v->pre_flags, err)) return sl_err_wrap(err, "%s", g->path);
        v->clean_spaces = v->pre_flags & PRE_CLEAN_SPACES;
        v->ignore_merges = v->pre_flags & PRE_IGNORE_MERGES;
        v->add_bos = v->pre_flags & PRE_ADD_BOS;
        if (v->pre_flags & PRE_NO_BOS_ID) v->bos = -1;
        return 0;
    }
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(v->model_name, known[i]))
            return sl_errf(err, "%s: tokenizer model '%s' (" K "model) is not supported by sluice", g->path,
                           v->model_name);
    return sl_errf(err, "%s: unknown tokenizer model '%s' (" K "model)", g->path, v->model_name);
}

/* ---- tokens ---- */

static uint16_t attr_of_type(int32_t t)
{
    switch (t) {
    case SL_TOKEN_NORMAL: return ATTR_NORMAL;
    case SL_TOKEN_UNKNOWN: return ATTR_UNKNOWN;
    case SL_TOKEN_CONTROL: return ATTR_CONTROL;
    case SL_TOKEN_USER_DEFINED: return ATTR_USER_DEFINED;
    case SL_TOKEN_UNUSED: return ATTR_UNUSED;
    case SL_TOKEN_BYTE: return ATTR_BYTE;
    default: return ATTR_UNDEFINED;
    }
}

static int load_texts(sl_vocab *v, const gguf_file *g, const gguf_str *toks, uint64_t n, sl_err *err)
{
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += (toks[i].len ? toks[i].len : 24) + 1;
    v->text = malloc(total);
    v->off = malloc(n * sizeof *v->off);
    v->len = malloc(n * sizeof *v->len);
    if (!v->text || !v->off || !v->len || strmap_init(&v->tok_map, n)) return sl_errf(err, "out of memory");
    size_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        v->off[i] = (uint32_t)at;
        if (toks[i].len) { /* llama.cpp renames empty tokens */
            memcpy(v->text + at, toks[i].s, toks[i].len);
            v->len[i] = (uint32_t)toks[i].len;
        } else {
            v->len[i] = (uint32_t)snprintf(v->text + at, 24, "[EMPTY_%u]", (unsigned)i);
        }
        v->text[at + v->len[i]] = 0;
        at += v->len[i] + 1;
        int32_t dup = strmap_put(&v->tok_map, tok_hash(v->text + v->off[i], v->len[i]), (int32_t)i,
                                 v->text + v->off[i], v->len[i], tok_key, v);
        if (dup >= 0) return sl_errf(err, "%s: tokens %d and %u have the same text", g->path, dup, (unsigned)i);
    }
    return 0;
}

static int load_tokens(sl_vocab *v, const gguf_file *g, sl_err *err)
{
    const void *data;
    uint64_t n, nt = 0, ns = 0;
    int rc = gguf_get_arr(g, K "tokens", GGUF_STRING, &data, &n, err);
    if (rc < 0) return -1;
    if (!rc) return sl_errf(err, "%s: no token list (" K "tokens)", g->path);
    if (n == 0 || n > MAX_TOKENS) return sl_errf(err, "%s: " K "tokens has %llu entries", g->path,
                                                 (unsigned long long)n);
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += ((const gguf_str *)data)[i].len + 25;
    if (total > UINT32_MAX) return sl_errf(err, "%s: token texts too large", g->path);
    v->n_tokens = (int32_t)n;
    if (load_texts(v, g, data, n, err)) return -1;
    const void *types = NULL, *scores = NULL;
    if (gguf_get_arr(g, K "token_type", GGUF_INT32, &types, &nt, err) < 0 ||
        gguf_get_arr(g, K "scores", GGUF_FLOAT32, &scores, &ns, err) < 0)
        return -1;
    if (types && nt < n) return sl_errf(err, "%s: " K "token_type has %llu of %llu entries", g->path,
                                        (unsigned long long)nt, (unsigned long long)n);
    if (scores && ns < n) return sl_errf(err, "%s: " K "scores has %llu of %llu entries", g->path,
                                         (unsigned long long)ns, (unsigned long long)n);
    v->attr = malloc(n * sizeof *v->attr);
    v->score = malloc(n * sizeof *v->score);
    if (!v->attr || !v->score) return sl_errf(err, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        int32_t t = SL_TOKEN_NORMAL;
        if (types) memcpy(&t, (const char *)types + 4 * i, 4);
        v->attr[i] = attr_of_type(t);
        v->score[i] = 0;
        if (scores) memcpy(&v->score[i], (const char *)scores + 4 * i, 4);
    }
    return 0;
}

static int load_merges(sl_vocab *v, const gguf_file *g, sl_err *err)
{
    const void *data;
    uint64_t n;
    int rc = gguf_get_arr(g, K "merges", GGUF_STRING, &data, &n, err);
    if (rc < 0) return -1;
    if (!rc) {
        if (v->pre_name && !strcmp(v->pre_name, "kimi-k2")) return 0; /* as llama.cpp */
        return sl_errf(err, "%s: BPE tokenizer without merges (" K "merges missing)", g->path);
    }
    if (n > MAX_MERGES) return sl_errf(err, "%s: " K "merges has %llu entries", g->path, (unsigned long long)n);
    const gguf_str *m = data;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += m[i].len + 2;
    if (total > UINT32_MAX) return sl_errf(err, "%s: merges too large", g->path);
    v->mtext = malloc(total ? total : 1);
    v->moff = malloc((n + 1) * sizeof *v->moff);
    v->mfirst = malloc((n + 1) * sizeof *v->mfirst);
    v->msecond = malloc((n + 1) * sizeof *v->msecond);
    if (!v->mtext || !v->moff || !v->mfirst || !v->msecond || strmap_init(&v->merge_map, n))
        return sl_errf(err, "out of memory");
    size_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        /* split at the first space after the first byte; no space: an
         * empty pair, which never matches (as in llama.cpp) */
        const char *sp = m[i].len > 1 ? memchr(m[i].s + 1, ' ', m[i].len - 1) : NULL;
        size_t la = sp ? (size_t)(sp - m[i].s) : 0, lb = sp ? m[i].len - la - 1 : 0;
        v->moff[i] = (uint32_t)at;
        v->mfirst[i] = (uint32_t)la;
        v->msecond[i] = (uint32_t)lb;
        memcpy(v->mtext + at, m[i].s, la);
        v->mtext[at + la] = ' ';
        memcpy(v->mtext + at + la + 1, sp ? sp + 1 : "", lb);
        at += la + lb + 2;
        merge_put(v, (int32_t)i);
    }
    v->n_merges = (uint32_t)n;
    return 0;
}

/* ---- special ids and flags from metadata ---- */

static int read_ids(sl_vocab *v, const gguf_file *g, sl_err *err)
{
    const struct {
        const char *key;
        int32_t *id;
    } keys[] = {
        {K "bos_token_id", &v->bos},         {K "eos_token_id", &v->eos},
        {K "eot_token_id", &v->eot},         {K "eom_token_id", &v->eom},
        {K "unknown_token_id", &v->unk},     {K "seperator_token_id", &v->sep},
        {K "padding_token_id", &v->pad},     {K "mask_token_id", &v->mask},
        {K "fim_pre_token_id", &v->fim_pre}, {K "fim_suf_token_id", &v->fim_suf},
        {K "fim_mid_token_id", &v->fim_mid}, {K "fim_pad_token_id", &v->fim_pad},
        {K "fim_rep_token_id", &v->fim_rep}, {K "fim_sep_token_id", &v->fim_sep},
        {K "prefix_token_id", &v->fim_pre},  {K "suffix_token_id", &v->fim_suf},
        {K "middle_token_id", &v->fim_mid},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint32_t id;
        int rc = gguf_get_u32(g, keys[i].key, &id, err);
        if (rc < 0) return -1;
        if (rc && id < (uint32_t)v->n_tokens) *keys[i].id = (int32_t)id; /* out of range: keep the default */
    }
    /* a default id the vocabulary is too small for means no such token */
    int32_t *defaults[] = {&v->bos, &v->eos, &v->unk};
    for (size_t i = 0; i < 3; i++)
        if (*defaults[i] >= v->n_tokens) *defaults[i] = -1;
    bool b;
    const struct {
        const char *key;
        bool *flag;
    } flags[] = {{K "add_bos_token", &v->add_bos}, {K "add_eos_token", &v->add_eos},
                 {K "add_space_prefix", &v->add_space_prefix}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        int rc = gguf_get_bool(g, flags[i].key, &b, err);
        if (rc < 0) return -1;
        if (rc) *flags[i].flag = b;
    }
    return 0;
}

int vocab_load(sl_vocab **out, const gguf_file *g, sl_err *err)
{
    *out = NULL;
    sl_vocab *v = calloc(1, sizeof *v);
    if (!v) return sl_errf(err, "out of memory");
    int rc = select_model(v, g, err);
    if (!rc) rc = load_tokens(v, g, err);
    if (!rc && v->type == VOCAB_BPE) rc = load_merges(v, g, err);
    if (!rc) rc = read_ids(v, g, err);
    if (!rc) rc = special_detect(v, g, err);
    if (!rc) rc = special_build(v, err);
    if (!rc && v->type == VOCAB_SPM) spm_prepare(v);
    if (rc) {
        vocab_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- accessors ---- */

int32_t vocab_n_tokens(const sl_vocab *v) { return v->n_tokens; }
int32_t vocab_bos(const sl_vocab *v) { return v->bos; }
int32_t vocab_eos(const sl_vocab *v) { return v->eos; }
int32_t vocab_eot(const sl_vocab *v) { return v->eot; }
bool vocab_add_bos(const sl_vocab *v) { return v->add_bos; }
bool vocab_add_eos(const sl_vocab *v) { return v->add_eos; }

static int cmp_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

bool vocab_is_eog(const sl_vocab *v, int32_t id)
{
    return id >= 0 && v->n_eog && bsearch(&id, v->eog, v->n_eog, sizeof id, cmp_id);
}

int vocab_token_type(const sl_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens) return 0;
    uint16_t a = v->attr[id];
    if (a & ATTR_UNKNOWN) return SL_TOKEN_UNKNOWN;
    if (a & ATTR_CONTROL) return SL_TOKEN_CONTROL;
    if (a & ATTR_USER_DEFINED) return SL_TOKEN_USER_DEFINED;
    if (a & ATTR_BYTE) return SL_TOKEN_BYTE;
    if (a & ATTR_UNUSED) return SL_TOKEN_UNUSED;
    if (a & ATTR_NORMAL) return SL_TOKEN_NORMAL;
    return 0;
}

const char *vocab_token_text(const sl_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens ? v->text + v->off[id] : NULL;
}

int32_t vocab_find(const sl_vocab *v, const char *text) { return vocab_lookup(v, text, strlen(text)); }
const char *vocab_model(const sl_vocab *v) { return v->model_name; }
const char *vocab_pre(const sl_vocab *v) { return v->pre ? pretok_name(v->pre) : NULL; }
