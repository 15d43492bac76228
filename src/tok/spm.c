/* SentencePiece BPE as llama.cpp's llm_tokenizer_spm_session: symbols are
 * UTF-8 characters (by lead byte, so invalid bytes stay single); the
 * adjacent pair whose concatenation is the highest-scoring token merges
 * first, the leftmost on ties; a final symbol that is no token becomes its
 * byte tokens (<0xXX>, else the one-byte token). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"
#include "util/heap.h"

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size;
} spm_bigram;

typedef struct {
    const sl_vocab *v;
    const char *text;
    uint32_t *start, *n;
    int32_t *prev, *next;
    spm_bigram *heap;
    size_t nheap, heapcap;
} spm_state;

static bool before(const spm_bigram *a, const spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

HEAP_DEFINE(bg, spm_state, spm_bigram, before, 256)

static int try_pair(spm_state *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return 0;
    uint32_t size = s->n[l] + s->n[r];
    int32_t id = vocab_lookup(s->v, s->text + s->start[l], size);
    if (id < 0) return 0;
    return bg_push(s, (spm_bigram){s->v->score[id], l, r, size});
}

static int32_t byte_token(const sl_vocab *v, unsigned char b)
{
    char hex[8];
    snprintf(hex, sizeof hex, "<0x%02X>", b);
    int32_t id = vocab_lookup(v, hex, 6);
    return id >= 0 ? id : vocab_lookup(v, (const char *)&b, 1);
}

static int resegment(spm_state *s, int32_t i, id_vec *out, sl_err *err)
{
    const char *t = s->text + s->start[i];
    int32_t id = vocab_lookup(s->v, t, s->n[i]);
    if (id >= 0) return id_push(out, id) ? sl_errf(err, "out of memory") : 0;
    for (uint32_t k = 0; k < s->n[i]; k++) {
        id = byte_token(s->v, (unsigned char)t[k]);
        if (id < 0)
            return sl_errf(err, "SentencePiece vocabulary has no token for byte 0x%02X (no <0x%02X>)",
                           (unsigned char)t[k], (unsigned char)t[k]);
        if (id_push(out, id)) return sl_errf(err, "out of memory");
    }
    return 0;
}

static int merge_all(spm_state *s, int32_t nsym)
{
    for (int32_t i = 1; i < nsym; i++)
        if (try_pair(s, i - 1, i)) return -1;
    while (s->nheap) {
        spm_bigram b = bg_pop(s);
        int32_t l = b.left, r = b.right;
        if (!s->n[l] || !s->n[r] || s->n[l] + s->n[r] != b.size) continue; /* outdated */
        s->n[l] += s->n[r];
        s->n[r] = 0;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        if (try_pair(s, s->prev[l], l) || try_pair(s, l, s->next[l])) return -1;
    }
    return 0;
}

static int spm_chunk(const sl_vocab *v, const char *text, size_t len, id_vec *out, sl_err *err)
{
    if (!len) return 0;
    if (len > UINT32_MAX / 2) return sl_errf(err, "text fragment too long (%zu bytes)", len);
    spm_state s = {.v = v, .text = text};
    s.start = malloc(len * sizeof *s.start);
    s.n = malloc(len * sizeof *s.n);
    s.prev = malloc(len * sizeof *s.prev);
    s.next = malloc(len * sizeof *s.next);
    int rc = s.start && s.n && s.prev && s.next ? 0 : sl_errf(err, "out of memory");
    int32_t nsym = 0;
    for (size_t off = 0; off < len && !rc; nsym++) {
        size_t cl = utf8_len_lead((unsigned char)text[off]);
        if (cl > len - off) cl = len - off;
        s.start[nsym] = (uint32_t)off;
        s.n[nsym] = (uint32_t)cl;
        s.prev[nsym] = nsym - 1;
        off += cl;
        s.next[nsym] = off == len ? -1 : nsym + 1;
    }
    if (!rc && merge_all(&s, nsym)) rc = sl_errf(err, "out of memory");
    for (int32_t i = 0; i >= 0 && !rc; i = s.next[i]) rc = resegment(&s, i, out, err);
    free(s.start);
    free(s.n);
    free(s.prev);
    free(s.next);
    free(s.heap);
    return rc;
}

#define SP "\xe2\x96\x81"

void spm_prepare(sl_vocab *v)
{
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const char *t = v->text + v->off[i];
        for (const char *p = t + 1; (p = memmem(p, v->len[i] - (size_t)(p - t), SP, 3)); p++)
            v->spm_glue[(unsigned char)p[-1]] = true;
    }
}

/* Cuts the text before each U+2581 that starts a symbol and follows a byte
 * no token glues to it: every merge stays inside a chunk, so the chunks
 * tokenize independently (and repeat, so they are cached). */
int spm_tokenize(const sl_vocab *v, word_cache *cache, const char *text, size_t len, id_vec *out, sl_err *err)
{
    size_t start = 0;
    for (size_t off = 0; off <= len;) {
        bool space = len - off >= 3 && !memcmp(text + off, SP, 3);
        bool cut = off == len || (off > start && space && !v->spm_glue[(unsigned char)text[off - 1]]);
        if (cut) {
            const char *w = text + start;
            size_t wl = off - start, before = out->n;
            uint64_t h = 0;
            int hit = word_cache_get(cache, w, wl, &h, out);
            if (hit < 0) return sl_errf(err, "out of memory");
            if (!hit) {
                if (spm_chunk(v, w, wl, out, err)) return -1;
                if (word_cache_add(cache, h, w, wl, out->v + before, out->n - before))
                    return sl_errf(err, "out of memory");
            }
            start = off;
        }
        if (off == len) break;
        size_t cl = utf8_len_lead((unsigned char)text[off]);
        off += cl < len - off ? cl : len - off;
    }
    return 0;
}
