/* Byte-level BPE over pre-tokenized words, as llama.cpp's
 * llm_tokenizer_bpe_session: a word's symbols are its (byte-encoded) UTF-8
 * characters; the adjacent pair with the lowest merge rank merges first,
 * the leftmost on ties; a final symbol that is no token falls back to the
 * tokens of its single bytes, skipping bytes that have none.  Results are
 * cached per word for the duration of one tokenize call. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"
#include "util/heap.h"

#define CACHE_MAX_WORD 256

struct word_cache {
    strmap map;          /* word -> entry */
    char *keys;
    size_t nkeys, capkeys;
    struct centry {
        uint64_t h;
        size_t key, ids;
        uint32_t klen, nids;
    } *e;
    size_t n, cap;
    id_vec ids;
};

static const char *cache_key(const void *ctx, int32_t i, size_t *len)
{
    const word_cache *c = ctx;
    *len = c->e[i].klen;
    return c->keys + c->e[i].key;
}

word_cache *word_cache_new(void)
{
    word_cache *c = calloc(1, sizeof *c);
    if (c && strmap_init(&c->map, 1024)) {
        free(c);
        return NULL;
    }
    return c;
}

void word_cache_free(word_cache *c)
{
    if (!c) return;
    strmap_free(&c->map);
    free(c->keys);
    free(c->e);
    free(c->ids.v);
    free(c);
}

static int cache_grow_map(word_cache *c)
{
    strmap m;
    if (strmap_init(&m, (size_t)c->map.cap)) return -1;
    strmap_free(&c->map);
    c->map = m;
    for (size_t i = 0; i < c->n; i++) {
        size_t kl;
        const char *k = cache_key(c, (int32_t)i, &kl);
        strmap_put(&c->map, c->e[i].h, (int32_t)i, k, kl, cache_key, c);
    }
    return 0;
}

/* 1: hit, ids appended; 0: miss (*h set for word_cache_add); -1: no memory */
int word_cache_get(word_cache *c, const char *w, size_t len, uint64_t *h, id_vec *out)
{
    if (len > CACHE_MAX_WORD) return 0;
    *h = tok_hash(w, len);
    int32_t hit = strmap_get(&c->map, *h, w, len, cache_key, c);
    if (hit < 0) return 0;
    const struct centry *e = &c->e[hit];
    for (uint32_t k = 0; k < e->nids; k++)
        if (id_push(out, c->ids.v[e->ids + k])) return -1;
    return 1;
}

int word_cache_add(word_cache *c, uint64_t h, const char *w, size_t len, const int32_t *ids, size_t nids)
{
    if (len > CACHE_MAX_WORD) return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1024;
        struct centry *e = realloc(c->e, cap * sizeof *e);
        if (!e) return -1;
        c->e = e;
        c->cap = cap;
    }
    if (c->nkeys + len > c->capkeys) {
        size_t cap = c->capkeys ? c->capkeys * 2 : 16384;
        while (cap < c->nkeys + len) cap *= 2;
        char *k = realloc(c->keys, cap);
        if (!k) return -1;
        c->keys = k;
        c->capkeys = cap;
    }
    memcpy(c->keys + c->nkeys, w, len);
    c->e[c->n] = (struct centry){h, c->nkeys, c->ids.n, (uint32_t)len, (uint32_t)nids};
    c->nkeys += len;
    for (size_t i = 0; i < nids; i++)
        if (id_push(&c->ids, ids[i])) return -1;
    strmap_put(&c->map, h, (int32_t)c->n, w, len, cache_key, c);
    c->n++;
    if (c->map.n * 2 > c->map.cap && cache_grow_map(c)) return -1;
    return 0;
}

/* ---- merging one word ---- */

typedef struct {
    int32_t rank;
    int32_t left, right;
    uint32_t size;
} bigram;

typedef struct {
    uint32_t *start, *n;
    int32_t *prev, *next;
    bigram *heap;
    size_t nheap, cap, heapcap;
} word_state;

static bool bigram_before(const bigram *a, const bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

HEAP_DEFINE(bg, word_state, bigram, bigram_before, 64)

static int try_pair(const sl_vocab *v, word_state *s, const char *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return 0;
    int32_t rank = merge_rank(v, w + s->start[l], s->n[l], w + s->start[r], s->n[r]);
    if (rank < 0) return 0;
    return bg_push(s, (bigram){rank, l, r, s->n[l] + s->n[r]});
}

static int state_reserve(word_state *s, size_t n)
{
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *a = realloc(s->start, cap * sizeof *a);
    if (a) s->start = a;
    uint32_t *b = realloc(s->n, cap * sizeof *b);
    if (b) s->n = b;
    int32_t *c = realloc(s->prev, cap * sizeof *c);
    if (c) s->prev = c;
    int32_t *d = realloc(s->next, cap * sizeof *d);
    if (d) s->next = d;
    if (!a || !b || !c || !d) return -1;
    s->cap = cap;
    return 0;
}

static int emit_symbol(const sl_vocab *v, const char *text, size_t len, id_vec *out)
{
    int32_t id = vocab_lookup(v, text, len);
    if (id >= 0) return id_push(out, id);
    for (size_t i = 0; i < len; i++) {
        id = vocab_lookup(v, text + i, 1);
        if (id >= 0 && id_push(out, id)) return -1;
    }
    return 0;
}

static int merge_word(const sl_vocab *v, word_state *s, const char *w, size_t len, id_vec *out)
{
    if (v->ignore_merges) {
        int32_t id = vocab_lookup(v, w, len);
        if (id >= 0) return id_push(out, id);
    }
    if (len > UINT32_MAX / 2 || state_reserve(s, len)) return -1;
    int32_t nsym = 0;
    for (size_t off = 0; off < len; nsym++) {
        size_t cl = utf8_len_lead((unsigned char)w[off]);
        if (cl > len - off) cl = len - off;
        s->start[nsym] = (uint32_t)off;
        s->n[nsym] = (uint32_t)cl;
        s->prev[nsym] = nsym - 1;
        off += cl;
        s->next[nsym] = off == len ? -1 : nsym + 1;
    }
    s->nheap = 0;
    for (int32_t i = 1; i < nsym; i++)
        if (try_pair(v, s, w, i - 1, i)) return -1;
    while (s->nheap) {
        bigram b = bg_pop(s);
        int32_t l = b.left, r = b.right;
        if (!s->n[l] || !s->n[r] || s->n[l] + s->n[r] != b.size) continue; /* outdated */
        s->n[l] += s->n[r];
        s->n[r] = 0;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        if (try_pair(v, s, w, s->prev[l], l) || try_pair(v, s, w, l, s->next[l])) return -1;
    }
    for (int32_t i = 0; i >= 0 && nsym; i = s->next[i])
        if (emit_symbol(v, w + s->start[i], s->n[i], out)) return -1;
    return 0;
}

int bpe_tokenize(const sl_vocab *v, word_cache *cache, const char *text, size_t len, id_vec *out, sl_err *err)
{
    word_list words = {0};
    word_state st = {0};
    int rc = pretok_split(v->pre, text, len, &words, err);
    for (size_t i = 0, start = 0; i < words.n && !rc; start = words.end[i++]) {
        const char *w = words.buf + start;
        size_t wl = words.end[i] - start, before = out->n;
        uint64_t h = 0;
        int hit = word_cache_get(cache, w, wl, &h, out);
        if (hit < 0 || (!hit && (merge_word(v, &st, w, wl, out) ||
                                 word_cache_add(cache, h, w, wl, out->v + before, out->n - before))))
            rc = sl_errf(err, "out of memory");
    }
    word_list_free(&words);
    free(st.start);
    free(st.n);
    free(st.prev);
    free(st.next);
    free(st.heap);
    return rc;
}
