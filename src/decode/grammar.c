/* The grammar matcher (grammar.h).  The state's stacks live back to back
 * in one array; checks and steps build candidate stacks in a scratch arena
 * (indices, not pointers, as it may move) and expand them depth-first. */
#include <stdlib.h>
#include <string.h>

#include "decode/grammar_int.h"

/* Limits that keep a pathological grammar from eating the machine: stacks
 * in one state, expansion depth, and stack visits per check. */
enum { MAX_STACKS = 4096, MAX_DEPTH = 2000, MAX_VISITS = 1 << 20 };

typedef struct {
    uint32_t cp; /* the bits of a UTF-8 sequence begun so far */
    int left;    /* its bytes still to come (0: none begun) */
    int len;     /* its whole length in bytes */
} utf8_part;

/* The smallest code point a sequence of each length may encode (shorter
 * encodings are overlong, hence not UTF-8). */
static const uint32_t UTF8_MIN[5] = {0, 0, 0x80, 0x800, 0x10000};

typedef struct {
    uint32_t *a;
    size_t n, cap;
} u32vec;

typedef struct {
    u32vec buf;   /* the stacks' positions, bottom first */
    size_t *st;   /* stack i is buf[st[i], st[i + 1]) */
    size_t n, cap;
} stackset;

struct gram_state {
    sl_grammar *g;
    stackset cur, next, save;
    utf8_part part;
    u32vec ar;  /* scratch arena for the stacks being built */
    u32vec cps; /* decoded code points */
};

static int vec_reserve(u32vec *v, size_t more)
{
    if (v->n + more <= v->cap) return 0;
    size_t c = v->cap ? v->cap : 256;
    while (c < v->n + more) c *= 2;
    uint32_t *a = realloc(v->a, c * sizeof *a);
    if (!a) return -1;
    v->a = a, v->cap = c;
    return 0;
}

static void set_clear(stackset *s)
{
    s->buf.n = 0;
    s->n = 0;
    if (s->st) s->st[0] = 0;
}

static int set_push(stackset *s, const uint32_t *a, size_t len)
{
    for (size_t i = 0; i < s->n; i++) /* already there? */
        if (s->st[i + 1] - s->st[i] == len && !memcmp(s->buf.a + s->st[i], a, len * sizeof *a)) return 0;
    if (s->n >= MAX_STACKS) return -1;
    if (s->n + 2 > s->cap) {
        size_t c = s->cap ? 2 * s->cap : 16;
        size_t *st = realloc(s->st, c * sizeof *st);
        if (!st) return -1;
        if (!s->st) st[0] = 0;
        s->st = st, s->cap = c;
    }
    if (vec_reserve(&s->buf, len)) return -1;
    if (len) memcpy(s->buf.a + s->buf.n, a, len * sizeof *a);
    s->buf.n += len;
    s->st[++s->n] = s->buf.n;
    return 0;
}

static int set_copy(stackset *d, const stackset *s)
{
    set_clear(d);
    for (size_t i = 0; i < s->n; i++)
        if (set_push(d, s->buf.a + s->st[i], s->st[i + 1] - s->st[i])) return -1;
    return 0;
}

static void set_free(stackset *s)
{
    free(s->buf.a);
    free(s->st);
}

/* ------------------------------------------------------------ classes */

static bool at_end(const sl_grammar *g, uint32_t p) { return g->el[p].type == G_END || g->el[p].type == G_ALT; }

static bool class_has(const sl_grammar *g, uint32_t set, uint32_t cp)
{
    const gset *s = &g->sets[set];
    bool in = false;
    for (uint32_t i = 0; i < s->n && !in; i++) in = cp >= g->rg[s->first + i].lo && cp <= g->rg[s->first + i].hi;
    return in != s->neg;
}

/* Whether the class holds some code point in [LO, HI]. */
static bool class_meets(const sl_grammar *g, uint32_t set, uint32_t lo, uint32_t hi)
{
    const gset *s = &g->sets[set];
    const grange *r = g->rg + s->first;
    if (!s->neg) {
        for (uint32_t i = 0; i < s->n; i++)
            if (r[i].lo <= hi && r[i].hi >= lo) return true;
        return false;
    }
    /* a complement: walk LO upwards past the ranges that hold it */
    for (uint32_t x = lo;;) {
        uint32_t i = 0;
        while (i < s->n && !(x >= r[i].lo && x <= r[i].hi)) i++;
        if (i == s->n) return true;
        if (r[i].hi >= hi) return false;
        x = r[i].hi + 1;
    }
}

/* --------------------------------------------------------------- UTF-8 */

/* N bytes after the sequence begun in *P: the completed code points into
 * m->cps, the sequence left open into *P.  -1: not UTF-8 or out of memory. */
static int decode(gram_state *m, const char *b, size_t n, utf8_part *p)
{
    m->cps.n = 0;
    if (vec_reserve(&m->cps, n + 1)) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)b[i];
        if (p->left) {
            if ((c & 0xC0) != 0x80) return -1;
            p->cp = p->cp << 6 | (c & 0x3F);
            if (--p->left) continue;
            if (p->cp < UTF8_MIN[p->len] || p->cp > 0x10FFFF || (p->cp >= 0xD800 && p->cp <= 0xDFFF)) return -1;
            m->cps.a[m->cps.n++] = p->cp;
        } else if (c < 0x80) m->cps.a[m->cps.n++] = c;
        else if (c >= 0xC2 && c <= 0xDF) *p = (utf8_part){c & 0x1F, 1, 2};
        else if ((c & 0xF0) == 0xE0) *p = (utf8_part){c & 0x0F, 2, 3};
        else if (c >= 0xF0 && c <= 0xF4) *p = (utf8_part){c & 0x07, 3, 4};
        else return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- walking */

typedef struct walk walk;
/* Called with each expanded stack (in the arena); nonzero stops the walk. */
typedef int (*visit_fn)(walk *w, size_t off, size_t len, size_t i);

struct walk {
    gram_state *m;
    visit_fn visit;
    utf8_part part; /* the sequence left open after the code points */
    long visits;
};

/* Expands the stack at ar[off, off + len) until its top is a class (or it
 * is empty), visiting every result: a rule reference on top is replaced by
 * each of its alternatives, above what follows the reference. */
static int expand(walk *w, size_t off, size_t len, size_t i, int depth)
{
    gram_state *m = w->m;
    const sl_grammar *g = m->g;
    if (++w->visits > MAX_VISITS || depth > MAX_DEPTH) return -1;
    if (len == 0 || g->el[m->ar.a[off + len - 1]].type == G_SET) return w->visit(w, off, len, i);
    uint32_t p = m->ar.a[off + len - 1], rule = g->el[p].v;
    bool cont = !at_end(g, p + 1);
    for (uint32_t k = g->alt_off[rule]; k < g->alt_off[rule + 1]; k++) {
        uint32_t a = g->alt[k];
        size_t base = m->ar.n, nl = len - 1;
        if (vec_reserve(&m->ar, len + 1)) return -1;
        memcpy(m->ar.a + base, m->ar.a + off, nl * sizeof *m->ar.a);
        if (cont) m->ar.a[base + nl++] = p + 1;
        if (!at_end(g, a)) m->ar.a[base + nl++] = a;
        m->ar.n = base + nl;
        int r = expand(w, base, nl, i, depth + 1);
        m->ar.n = base;
        if (r) return r;
    }
    return 0;
}

/* The stack at ar[off, off + len) with its top class matched: the next
 * position of that alternative replaces it (or it is popped), expanded. */
static int advance(walk *w, size_t off, size_t len, size_t i)
{
    gram_state *m = w->m;
    uint32_t p = m->ar.a[off + len - 1];
    size_t base = m->ar.n, nl = len - 1;
    if (vec_reserve(&m->ar, len)) return -1;
    memcpy(m->ar.a + base, m->ar.a + off, nl * sizeof *m->ar.a);
    if (!at_end(m->g, p + 1)) m->ar.a[base + nl++] = p + 1;
    m->ar.n = base + nl;
    int r = expand(w, base, nl, i, 0);
    m->ar.n = base;
    return r;
}

/* Copies a state stack into the arena and runs F on it. */
static int from_state(walk *w, const stackset *s, size_t k, size_t i, visit_fn f)
{
    gram_state *m = w->m;
    size_t len = s->st[k + 1] - s->st[k], base = m->ar.n;
    if (vec_reserve(&m->ar, len)) return -1;
    memcpy(m->ar.a + base, s->buf.a + s->st[k], len * sizeof *m->ar.a);
    m->ar.n = base + len;
    int r = f(w, base, len, i);
    m->ar.n = base;
    return r;
}

static int collect(walk *w, size_t off, size_t len, size_t i)
{
    (void)i;
    return set_push(&w->m->next, w->m->ar.a + off, len) ? -1 : 0;
}

/* Matching the rest of the code points from here (1: matched). */
static int match(walk *w, size_t off, size_t len, size_t i)
{
    gram_state *m = w->m;
    const sl_grammar *g = m->g;
    if (i == m->cps.n) {
        if (!w->part.left) return 1;
        /* the code points the open sequence can still become */
        uint32_t lo = w->part.cp << (6 * w->part.left), hi = lo | ((1u << (6 * w->part.left)) - 1);
        if (lo < UTF8_MIN[w->part.len]) lo = UTF8_MIN[w->part.len];
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        return len > 0 && lo <= hi && class_meets(g, g->el[m->ar.a[off + len - 1]].v, lo, hi);
    }
    if (len == 0 || !class_has(g, g->el[m->ar.a[off + len - 1]].v, m->cps.a[i])) return 0;
    return advance(w, off, len, i + 1);
}

/* ---------------------------------------------------------------- state */

int gstate_new(gram_state **out, sl_grammar *g, sl_err *err)
{
    *out = NULL;
    gram_state *m = calloc(1, sizeof *m);
    if (!m) return sl_errf(err, "grammar: out of memory");
    m->g = g;
    grammar_ref(g);
    walk w = {.m = m, .visit = collect};
    set_clear(&m->next);
    int rc = 0;
    for (uint32_t k = g->alt_off[g->root]; k < g->alt_off[g->root + 1] && !rc; k++) {
        uint32_t a = g->alt[k];
        if (vec_reserve(&m->ar, 1)) rc = -1;
        else {
            size_t len = !at_end(g, a);
            if (len) m->ar.a[0] = a;
            m->ar.n = len;
            rc = expand(&w, 0, len, 0, 0);
            m->ar.n = 0;
        }
    }
    if (!rc) rc = set_copy(&m->cur, &m->next);
    if (rc) {
        gstate_free(m);
        return sl_errf(err, "grammar: out of memory or too ambiguous at its start");
    }
    *out = m;
    return 0;
}

void gstate_free(gram_state *m)
{
    if (!m) return;
    set_free(&m->cur);
    set_free(&m->next);
    set_free(&m->save);
    free(m->ar.a);
    free(m->cps.a);
    grammar_free(m->g);
    free(m);
}

sl_grammar *gstate_grammar(const gram_state *m) { return m->g; }

int gstate_copy(gram_state *dst, const gram_state *src)
{
    dst->part = src->part;
    return set_copy(&dst->cur, &src->cur);
}

bool gstate_can_end(const gram_state *m)
{
    if (m->part.left) return false;
    for (size_t i = 0; i < m->cur.n; i++)
        if (m->cur.st[i + 1] == m->cur.st[i]) return true;
    return false;
}

bool gstate_allows(gram_state *m, const char *bytes, size_t n)
{
    walk w = {.m = m, .visit = match, .part = m->part};
    if (decode(m, bytes, n, &w.part)) return false;
    const sl_grammar *g = m->g;
    const stackset *s = &m->cur;
    for (size_t k = 0; k < s->n; k++) {
        size_t len = s->st[k + 1] - s->st[k];
        /* the common rejection, without copying: the first code point */
        if (m->cps.n && (!len || !class_has(g, g->el[s->buf.a[s->st[k + 1] - 1]].v, m->cps.a[0]))) continue;
        if (from_state(&w, s, k, 0, match) == 1) return true;
    }
    return false;
}

/* One code point: next = the current stacks that take it, advanced. */
static int step(gram_state *m, uint32_t cp)
{
    const sl_grammar *g = m->g;
    walk w = {.m = m, .visit = collect};
    set_clear(&m->next);
    const stackset *s = &m->cur;
    for (size_t k = 0; k < s->n; k++) {
        size_t len = s->st[k + 1] - s->st[k];
        if (!len || !class_has(g, g->el[s->buf.a[s->st[k + 1] - 1]].v, cp)) continue;
        if (from_state(&w, s, k, 0, advance)) return -1;
    }
    stackset t = m->cur;
    m->cur = m->next, m->next = t;
    return 0;
}

int gstate_accept(gram_state *m, const char *bytes, size_t n)
{
    if (!gstate_allows(m, bytes, n)) return 1;
    utf8_part part = m->part;
    decode(m, bytes, n, &part); /* cannot fail: gstate_allows decoded the same */
    if (set_copy(&m->save, &m->cur)) return -1;
    for (size_t i = 0; i < m->cps.n; i++) {
        if (step(m, m->cps.a[i])) {
            stackset t = m->cur;
            m->cur = m->save, m->save = t;
            return -1;
        }
    }
    m->part = part;
    return 0;
}

bool grammar_accepts(sl_grammar *g, const char *text, size_t len)
{
    gram_state *m;
    sl_err e;
    if (gstate_new(&m, g, &e)) return false;
    bool ok = gstate_accept(m, text, len) == 0 && gstate_can_end(m);
    gstate_free(m);
    return ok;
}

bool gstate_allows_token(gram_state *m, const gram_tokens *t, int32_t id)
{
    if (id < 0 || id >= t->n) return false;
    if (t->eog[id]) return gstate_can_end(m);
    uint32_t a = t->off[id], b = t->off[id + 1];
    return b > a && gstate_allows(m, t->bytes + a, b - a);
}
