/* Ids -> text, as llama.cpp's token_to_piece and detokenize: control and
 * unknown tokens render only with unparse_special, user-defined ones always;
 * byte-level BPE tokens map back through GPT-2's byte alphabet, SentencePiece
 * pieces turn U+2581 into spaces and <0xXX> into bytes; whole sequences may
 * drop BOS/EOS, the first leading space (add_space_prefix) and get
 * clean_up_tokenization_spaces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* GPT-2 byte alphabet back to bytes; a code point outside it is rendered
 * the way llama.cpp's llama_decode_text does. */
static int bpe_decode(const char *t, size_t tl, sbuf *out)
{
    const unsigned char *s = (const unsigned char *)t;
    for (size_t i = 0; i < tl;) {
        uint32_t c = utf8_next_lenient(s, tl, &i);
        int b = cpt_to_byte(c);
        if (b >= 0) {
            char ch = (char)b;
            if (sb_put(out, &ch, 1)) return -1;
            continue;
        }
        char u[4], hex[16];
        size_t nu = utf8_put(c <= 0x10FFFF ? c : 0xFFFD, u);
        if (sb_put(out, "[UNK_BYTE_0x", 12)) return -1;
        for (size_t k = 0; k < nu; k++) {
            snprintf(hex, sizeof hex, "%02x", (unsigned char)u[k]);
            if (sb_put(out, hex, 2)) return -1;
        }
        if (sb_put(out, t, tl) || sb_put(out, "]", 1)) return -1;
    }
    return 0;
}

static int spm_unescape(const char *t, size_t tl, sbuf *out)
{
    for (size_t i = 0; i < tl; i++) {
        if (i + 3 <= tl && !memcmp(t + i, "\xe2\x96\x81", 3)) {
            if (sb_put(out, " ", 1)) return -1;
            i += 2;
        } else if (sb_put(out, t + i, 1)) {
            return -1;
        }
    }
    return 0;
}

/* "<0xXX>": the two characters after "<0x" read as hex (strtol semantics) */
static char byte_of(const char *t, size_t tl)
{
    char hex[3] = {0};
    for (size_t i = 3; i < 5 && i < tl; i++) hex[i - 3] = t[i];
    return (char)strtol(hex, NULL, 16);
}

static int piece_append(const sl_vocab *v, int32_t id, bool special, bool lstrip, sbuf *out)
{
    uint16_t a = v->attr[id];
    if (!special && (a & (ATTR_UNKNOWN | ATTR_CONTROL))) return 0;
    const char *t = v->text + v->off[id];
    size_t tl = v->len[id], start = out->n;
    int rc = 0;
    if (a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) {
        rc = sb_put(out, t, tl);
    } else if (a & ATTR_NORMAL) {
        rc = v->type == VOCAB_SPM ? spm_unescape(t, tl, out) : bpe_decode(t, tl, out);
    } else if (a & ATTR_BYTE) {
        char b = byte_of(t, tl);
        rc = sb_put(out, &b, 1);
    }
    if (!rc && lstrip && out->n > start && out->p[start] == ' ') {
        memmove(out->p + start, out->p + start + 1, out->n - start - 1);
        out->p[--out->n] = 0;
    }
    return rc;
}

int vocab_token_to_piece(const sl_vocab *v, int32_t id, bool unparse_special, char *buf, size_t cap)
{
    if (id < 0 || id >= v->n_tokens) return -1;
    sbuf b = {0};
    if (piece_append(v, id, unparse_special, false, &b) || b.n > INT32_MAX) {
        free(b.p);
        return -1;
    }
    if (b.n) memcpy(buf, b.p, b.n < cap ? b.n : cap); /* an empty piece has no buffer (UBSan) */
    int n = (int)b.n;
    free(b.p);
    return n;
}

/* clean_up_tokenization_spaces, the three passes of llama.cpp's detokenize */
static size_t clean_spaces(char *t, size_t total)
{
    size_t n = total ? 1 : 0; /* " ?", " !", " ." and " ," lose the space */
    for (size_t i = 1; i < total; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) n--;
        t[n++] = x;
    }
    total = n;
    n = total ? 1 : 0; /* " ' " becomes "'" */
    for (size_t i = 1; i < total; i++) {
        char x = t[i];
        if (x == '\'' && i + 1 < total && t[i - 1] == ' ' && t[i + 1] == ' ') {
            n--;
            t[++i] = 0;
        }
        t[n++] = x;
    }
    total = n;
    n = total ? 1 : 0; /* " 's", " 'm", " 're", " 've" lose the space */
    for (size_t i = 1; i < total; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < total) {
            char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm') n--;
            else if (i + 2 < total && ((x1 == 'r' && t[i + 2] == 'e') || (x1 == 'v' && t[i + 2] == 'e'))) n--;
        }
        t[n++] = x;
    }
    return n;
}

int vocab_detokenize(const sl_vocab *v, const int32_t *ids, size_t n, bool remove_special, bool unparse_special,
                     char **out, size_t *len, sl_err *err)
{
    *out = NULL;
    *len = 0;
    bool remove_space = v->add_space_prefix;
    if (remove_special && v->add_bos && n > 0 && ids[0] == v->bos) {
        remove_space = false;
        ids++, n--;
    }
    if (remove_special && v->add_eos && n > 0 && ids[n - 1] == v->eos) n--;
    sbuf b = {0};
    if (sb_put(&b, "", 0)) return sl_errf(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n_tokens) {
            free(b.p);
            return sl_errf(err, "token id %d at position %zu is outside the vocabulary (%d tokens)", ids[i], i,
                           v->n_tokens);
        }
        if (piece_append(v, ids[i], unparse_special, remove_space, &b)) {
            free(b.p);
            return sl_errf(err, "out of memory");
        }
        remove_space = false;
    }
    if (v->clean_spaces) {
        b.n = clean_spaces(b.p, b.n);
        b.p[b.n] = 0;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

/* ---- streaming ---- */

/* Bytes at the end of S that start a UTF-8 sequence not yet complete. */
static size_t incomplete_tail(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        unsigned char c = s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

static size_t emit(sl_detok *d, const char *piece, size_t n, char *out, size_t cap)
{
    unsigned char all[64];
    size_t w = 0, have = (size_t)d->n_pending;
    /* the held-back bytes go first; the piece follows in chunks */
    memcpy(all, d->pending, have);
    size_t i = 0;
    do {
        size_t take = n - i < sizeof all - have ? n - i : sizeof all - have;
        memcpy(all + have, piece + i, take);
        i += take;
        have += take;
        size_t keep = i == n ? incomplete_tail(all, have) : 0;
        size_t put = have - keep;
        size_t c = put < cap - w ? put : cap - w;
        memcpy(out + w, all, c);
        w += c;
        memmove(all, all + put, keep);
        have = keep;
    } while (i < n);
    memcpy(d->pending, all, have);
    d->n_pending = (int)have;
    return w;
}

size_t detok_push_special(sl_detok *d, const sl_vocab *v, int32_t id, bool unparse_special, char *out, size_t cap)
{
    if (id < 0 || id >= v->n_tokens) return 0;
    sbuf b = {0};
    if (piece_append(v, id, unparse_special, false, &b)) {
        free(b.p);
        return 0;
    }
    size_t w = emit(d, b.p ? b.p : "", b.n, out, cap);
    free(b.p);
    return w;
}

size_t detok_push(sl_detok *d, const sl_vocab *v, int32_t id, char *out, size_t cap)
{
    return detok_push_special(d, v, id, false, out, cap);
}

size_t detok_flush(sl_detok *d, char *out, size_t cap)
{
    size_t n = (size_t)d->n_pending < cap ? (size_t)d->n_pending : cap;
    memcpy(out, d->pending, n);
    d->n_pending = 0;
    return n;
}
