/* Special tokens: which ones llama.cpp recognises by their text (EOT, FIM,
 * end-of-generation) and the types it forces on them, and the partition of
 * input text into raw text and special tokens (tokenizer_st_partition).
 *
 * One deviation: llama.cpp takes the first EOT/FIM candidate in
 * std::unordered_map iteration order, which is implementation-defined; we
 * take the first in its candidate list, skipping "<|end|>" for EOT when the
 * harmony rule below demotes it.  That agrees with llama.cpp's choice on
 * every vocabulary we test (docs/TOKENIZER.md). */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

#define FW_BAR "\xef\xbd\x9c" /* U+FF5C, DeepSeek's full-width bar */
#define SPM_SP "\xe2\x96\x81" /* U+2581 */

static const char *const EOT_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                        "<" FW_BAR "end" SPM_SP "of" SPM_SP "sentence" FW_BAR ">",
                                        "<end_of_utterance>", NULL};
static const char *const EOM_TEXTS[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_TEXTS[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                            "<" FW_BAR "fim" SPM_SP "begin" FW_BAR ">", "<PRE>", SPM_SP "<PRE>",
                                            "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const FIM_SUF_TEXTS[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                            "<" FW_BAR "fim" SPM_SP "hole" FW_BAR ">", "<SUF>", SPM_SP "<SUF>",
                                            "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const FIM_MID_TEXTS[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                            "<" FW_BAR "fim" SPM_SP "end" FW_BAR ">", "<MID>", SPM_SP "<MID>",
                                            "<|code_middle|>", "<|middle|>", NULL};
static const char *const FIM_PAD_TEXTS[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const FIM_REP_TEXTS[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
                                            NULL};
static const char *const FIM_SEP_TEXTS[] = {"<|file_sep|>", NULL};
static const char *const EOG_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                        "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                                        "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                                        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                                        "<" FW_BAR "end" SPM_SP "of" SPM_SP "sentence" FW_BAR ">", "[e~[", NULL};
/* gpt-oss: always rendered and parsed, even without parse_special */
static const char *const HARMONY_USER_TEXTS[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};

static bool has(const sl_vocab *v, const char *t) { return vocab_find(v, t) >= 0; }

/* o200k_harmony (and solar-open) use <|end|> between messages: not EOG. */
static bool harmony_end_rule(const sl_vocab *v)
{
    bool call = has(v, "<|call|>") || has(v, "<|calls|>");
    return has(v, "<|end|>") && ((has(v, "<|return|>") && call) || (call && has(v, "<|flush|>")));
}

static void detect_by_text(sl_vocab *v, int32_t *id, const char *const *texts, const char *skip)
{
    if (*id >= 0) return;
    for (size_t i = 0; texts[i]; i++) {
        if (skip && !strcmp(texts[i], skip)) continue;
        int32_t t = vocab_find(v, texts[i]);
        if (t >= 0) {
            *id = t;
            v->attr[t] |= ATTR_CONTROL;
            return;
        }
    }
}

static int eog_add(id_vec *e, int32_t id)
{
    if (id < 0) return 0;
    for (size_t i = 0; i < e->n; i++)
        if (e->v[i] == id) return 0;
    return id_push(e, id);
}

static void eog_remove(id_vec *e, int32_t id)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->v[i] == id) e->v[i] = e->v[--e->n];
}

static bool eog_has_text(const sl_vocab *v, const id_vec *e, const char *t, int32_t *which)
{
    size_t tl = strlen(t);
    for (size_t i = 0; i < e->n; i++)
        if (v->len[e->v[i]] == tl && !memcmp(vocab_token_text(v, e->v[i]), t, tl)) {
            if (which) *which = e->v[i];
            return true;
        }
    return false;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int build_eog(sl_vocab *v)
{
    id_vec e = {0};
    int rc = eog_add(&e, v->fim_pad) | eog_add(&e, v->fim_rep) | eog_add(&e, v->fim_sep);
    for (size_t i = 0; EOG_TEXTS[i]; i++) {
        int32_t t = vocab_find(v, EOG_TEXTS[i]);
        if (t < 0) continue;
        rc |= eog_add(&e, t);
        v->attr[t] |= ATTR_CONTROL;
    }
    for (size_t i = 0; HARMONY_USER_TEXTS[i]; i++) {
        int32_t t = vocab_find(v, HARMONY_USER_TEXTS[i]);
        if (t >= 0) v->attr[t] = ATTR_USER_DEFINED;
    }
    rc |= eog_add(&e, v->eos) | eog_add(&e, v->eot) | eog_add(&e, v->eom);
    int32_t end_id = -1, s_id = -1;
    bool ret = eog_has_text(v, &e, "<|return|>", NULL), flush = eog_has_text(v, &e, "<|flush|>", NULL);
    bool call = eog_has_text(v, &e, "<|call|>", NULL) || eog_has_text(v, &e, "<|calls|>", NULL);
    if (eog_has_text(v, &e, "<|end|>", &end_id) && ((ret && call) || (call && flush))) {
        eog_remove(&e, end_id);
        v->attr[end_id] = ATTR_USER_DEFINED;
    }
    if (eog_has_text(v, &e, "<|tool_response>", NULL) && eog_has_text(v, &e, "</s>", &s_id)) {
        eog_remove(&e, s_id);
        v->attr[s_id] = ATTR_NORMAL;
    }
    if (e.n) qsort(e.v, e.n, sizeof *e.v, cmp_i32);
    v->eog = e.v;
    v->n_eog = e.n;
    return rc;
}

static bool contains_any(const char *s, const char *const *subs)
{
    for (size_t i = 0; s && subs[i]; i++)
        if (strstr(s, subs[i])) return true;
    return false;
}

static void set_attr(sl_vocab *v, const char *text, uint16_t bit, bool on)
{
    int32_t id = vocab_find(v, text);
    if (id < 0) return;
    v->attr[id] = on ? (uint16_t)(v->attr[id] | bit) : (uint16_t)(v->attr[id] & ~bit);
}

/* lstrip/rstrip flags llama.cpp sets by pre-tokenizer, architecture or model name */
static int strip_rules(sl_vocab *v, const gguf_file *g, sl_err *err)
{
    const gguf_str *name = NULL, *arch = NULL;
    if (gguf_get_str(g, "general.name", &name, err) < 0 || gguf_get_str(g, "general.architecture", &arch, err) < 0)
        return -1;
    char lname[256] = "";
    for (size_t i = 0; name && i < name->len && i + 1 < sizeof lname; i++) {
        char c = name->s[i];
        lname[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        lname[i + 1] = 0;
    }
    static const char *const jina[] = {"jina-v2-de", "jina-v2-es", "jina-v2-code", NULL};
    static const char *const bert[] = {"nomic-bert-moe", "jina-bert-v3", NULL};
    static const char *const phi3[] = {"phi-3", "phi3", NULL};
    static const char *const modern[] = {"modern-bert", NULL};
    if (contains_any(v->pre_name, jina) || contains_any(arch ? arch->s : NULL, bert)) {
        set_attr(v, "<mask>", ATTR_LSTRIP, true);
    } else if (contains_any(lname, phi3)) {
        for (size_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= ATTR_RSTRIP;
        set_attr(v, "</s>", ATTR_RSTRIP, true);
        set_attr(v, "<unk>", ATTR_RSTRIP, false);
        set_attr(v, "<s>", ATTR_RSTRIP, false);
        set_attr(v, "<|endoftext|>", ATTR_RSTRIP, false);
    } else if (contains_any(lname, modern)) {
        set_attr(v, "[MASK]", ATTR_LSTRIP, true);
    }
    return 0;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const sl_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v->len[x] != v->len[y]) return v->len[x] > v->len[y] ? -1 : 1;
    return (x > y) - (x < y);
}

int special_detect(sl_vocab *v, const gguf_file *g, sl_err *err)
{
    detect_by_text(v, &v->eot, EOT_TEXTS, harmony_end_rule(v) ? "<|end|>" : NULL);
    detect_by_text(v, &v->eom, EOM_TEXTS, NULL);
    detect_by_text(v, &v->fim_pre, FIM_PRE_TEXTS, NULL);
    detect_by_text(v, &v->fim_suf, FIM_SUF_TEXTS, NULL);
    detect_by_text(v, &v->fim_mid, FIM_MID_TEXTS, NULL);
    detect_by_text(v, &v->fim_pad, FIM_PAD_TEXTS, NULL);
    detect_by_text(v, &v->fim_rep, FIM_REP_TEXTS, NULL);
    detect_by_text(v, &v->fim_sep, FIM_SEP_TEXTS, NULL);
    /* control tokens named "unused" are unused (llama.cpp: auto-detect unused) */
    for (int32_t i = 0; i < v->n_tokens; i++)
        if ((v->attr[i] & ATTR_CONTROL) && strstr(v->text + v->off[i], "unused")) v->attr[i] |= ATTR_UNUSED;
    if (build_eog(v)) return sl_errf(err, "out of memory");
    v->special = malloc((size_t)v->n_tokens * sizeof *v->special);
    if (!v->special) return sl_errf(err, "out of memory");
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) v->special[v->n_special++] = i;
    qsort_r(v->special, v->n_special, sizeof *v->special, cmp_special, v);
    return strip_rules(v, g, err);
}

/* ---- a byte trie over the special texts, to find which occur at all ---- */

struct trie_node {
    int32_t child, sibling; /* node indices, -1 = none */
    int32_t special;        /* index into v->special ending here, -1 = none */
    unsigned char c;
};

static int32_t trie_child(const sl_vocab *v, int32_t node, unsigned char c)
{
    if (node == 0) return v->trie_root[c];
    for (int32_t k = v->trie[node].child; k >= 0; k = v->trie[k].sibling)
        if (v->trie[k].c == c) return k;
    return -1;
}

int special_build(sl_vocab *v, sl_err *err)
{
    size_t total = 1;
    for (size_t i = 0; i < v->n_special; i++) total += v->len[v->special[i]];
    v->trie = malloc(total * sizeof *v->trie);
    if (!v->trie) return sl_errf(err, "out of memory");
    v->trie[0] = (trie_node){-1, -1, -1, 0};
    v->n_trie = 1;
    for (int c = 0; c < 256; c++) v->trie_root[c] = -1;
    for (size_t i = 0; i < v->n_special; i++) {
        const unsigned char *t = (const unsigned char *)v->text + v->off[v->special[i]];
        int32_t node = 0;
        for (uint32_t k = 0; k < v->len[v->special[i]]; k++) {
            int32_t next = trie_child(v, node, t[k]);
            if (next < 0) {
                next = (int32_t)v->n_trie++;
                v->trie[next] = (trie_node){-1, v->trie[node].child, -1, t[k]};
                v->trie[node].child = next;
                if (node == 0) v->trie_root[t[k]] = next;
            }
            node = next;
        }
        v->trie[node].special = (int32_t)i;
    }
    return 0;
}

void special_free(sl_vocab *v)
{
    free(v->trie);
    v->trie = NULL;
}

/* Marks in SEEN every special token occurring anywhere in TEXT. */
static void scan_present(const sl_vocab *v, const unsigned char *text, size_t len, bool *seen)
{
    for (size_t i = 0; i < len; i++) {
        int32_t node = 0;
        for (size_t k = i; k < len; k++) {
            node = trie_child(v, node, text[k]);
            if (node < 0) break;
            if (v->trie[node].special >= 0) seen[v->trie[node].special] = true;
        }
    }
}

/* ---- partition ---- */

typedef struct {
    fragment *v;
    size_t n, cap;
} frag_vec;

static int frag_push(frag_vec *f, int32_t token, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        fragment *p = realloc(f->v, cap * sizeof *p);
        if (!p) return -1;
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = (fragment){token, off, len};
    return 0;
}

static bool c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Splits raw fragment [off, off+len) at every occurrence of special token ID,
 * left to right, applying its lstrip/rstrip to the neighbouring text. */
static int split_at(const sl_vocab *v, const char *text, size_t off, size_t len, int32_t id, frag_vec *out)
{
    const char *tok = v->text + v->off[id];
    size_t tl = v->len[id];
    uint16_t attr = v->attr[id];
    for (;;) {
        const char *m = len >= tl ? memmem(text + off, len, tok, tl) : NULL;
        if (!m) return len ? frag_push(out, -1, off, len) : 0;
        size_t at = (size_t)(m - text), left = at - off;
        if (attr & ATTR_LSTRIP)
            while (left && c_space(text[off + left - 1])) left--;
        if ((left && frag_push(out, -1, off, left)) || frag_push(out, id, 0, 0)) return -1;
        size_t end = off + len;
        off = at + tl;
        len = end - off;
        if (attr & ATTR_RSTRIP)
            while (len && c_space(text[off])) off++, len--;
    }
}

int special_partition(const sl_vocab *v, const char *text, size_t len, bool parse_special, fragment **out,
                      size_t *n_out, sl_err *err)
{
    frag_vec a = {0}, b = {0};
    bool *seen = calloc(v->n_special + 1, 1);
    int rc = seen ? 0 : -1;
    if (!rc && len) rc = frag_push(&a, -1, 0, len);
    if (!rc && len) scan_present(v, (const unsigned char *)text, len, seen);
    for (size_t s = 0; s < v->n_special && !rc; s++) {
        int32_t id = v->special[s];
        if (!seen[s] || (!parse_special && (v->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN)))) continue;
        b.n = 0;
        for (size_t i = 0; i < a.n && !rc; i++) {
            if (a.v[i].token >= 0) rc = frag_push(&b, a.v[i].token, 0, 0);
            else rc = split_at(v, text, a.v[i].off, a.v[i].len, id, &b);
        }
        frag_vec t = a;
        a = b;
        b = t;
    }
    free(seen);
    free(b.v);
    if (rc) {
        free(a.v);
        return sl_errf(err, "out of memory");
    }
    *out = a.v;
    *n_out = a.n;
    return 0;
}
