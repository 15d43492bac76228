/* Values: reference counting, strings, lists, dicts, Python equality and
 * truthiness, and str()/repr() printing the way CPython prints. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/jinja_int.h"

/* ---- UTF-8 ------------------------------------------------------------ */

size_t ju_decode(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    int len = u[0] < 0x80 ? 1 : u[0] >= 0xc2 && u[0] < 0xe0 ? 2 : u[0] >= 0xe0 && u[0] < 0xf0 ? 3
            : u[0] >= 0xf0 && u[0] < 0xf5 ? 4 : 0;
    if (len == 1 || len == 0 || (size_t)len > n) {
        *cp = u[0];
        return 1;
    }
    uint32_t c = u[0] & (0x7f >> len);
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *cp = u[0];
            return 1;
        }
        c = c << 6 | (u[i] & 0x3f);
    }
    /* overlong, surrogate or out of range: treat the lead byte alone */
    if ((len == 3 && (c < 0x800 || (c >= 0xd800 && c < 0xe000))) || (len == 4 && (c < 0x10000 || c > 0x10ffff))) {
        *cp = u[0];
        return 1;
    }
    *cp = c;
    return (size_t)len;
}

size_t ju_line_end(const char *s, size_t i, size_t len)
{
    uint32_t cp;
    size_t k = ju_decode(s + i, len - i, &cp);
    if (cp == '\r') return i + 1 < len && s[i + 1] == '\n' ? 2 : 1;
    if (cp == '\n' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 || cp == 0x2028 ||
        cp == 0x2029)
        return k;
    return 0;
}

size_t ju_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = 0xc0 | cp >> 6; o[1] = 0x80 | (cp & 0x3f); return 2; }
    if (cp < 0x10000) {
        o[0] = 0xe0 | cp >> 12; o[1] = 0x80 | (cp >> 6 & 0x3f); o[2] = 0x80 | (cp & 0x3f);
        return 3;
    }
    o[0] = 0xf0 | cp >> 18; o[1] = 0x80 | (cp >> 12 & 0x3f);
    o[2] = 0x80 | (cp >> 6 & 0x3f); o[3] = 0x80 | (cp & 0x3f);
    return 4;
}

/* CPython's str.isspace: bidi class WS/B/S or category Zs. */
bool ju_isspace(uint32_t cp)
{
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
    switch (cp) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200a;
    }
}

/* ---- reference counting ------------------------------------------------ */

jv jv_ref(jv v)
{
    switch (v.k) {
    case JV_STR: if (v.s->rc >= 0) v.s->rc++; break;
    case JV_UNDEF: if (v.s && v.s->rc >= 0) v.s->rc++; break;
    case JV_LIST: v.l->rc++; break;
    case JV_DICT: v.d->rc++; break;
    case JV_FUNC: v.fn->rc++; break;
    default: break;
    }
    return v;
}

static void push_zero(jgc **head, jgc *g, int32_t *rc)
{
    if (--*rc == 0) {
        g->next = *head;
        *head = g;
    }
}

static void drop_str(jstr *s)
{
    if (s && s->rc > 0 && --s->rc == 0) free(s);
}

static void release_jv(jv v, jgc **head)
{
    switch (v.k) {
    case JV_STR: case JV_UNDEF: drop_str(v.s); break;
    case JV_LIST: push_zero(head, &v.l->gc, &v.l->rc); break;
    case JV_DICT: push_zero(head, &v.d->gc, &v.d->rc); break;
    case JV_FUNC: push_zero(head, &v.fn->gc, &v.fn->rc); break;
    default: break;
    }
}

static void clear_list(jlist *l, jgc **head)
{
    size_t n = l->n;
    jv *v = l->v;
    l->n = l->cap = 0;
    l->v = NULL;
    for (size_t i = 0; i < n; i++) release_jv(v[i], head);
    free(v);
}

static void clear_dict(jdict *d, jgc **head)
{
    size_t n = d->n;
    jv *k = d->k, *v = d->v;
    d->n = d->cap = 0;
    d->k = d->v = NULL;
    for (size_t i = 0; i < n; i++) {
        release_jv(k[i], head);
        release_jv(v[i], head);
    }
    free(k);
    free(v);
}

static void clear_scope(jscope *s, jgc **head)
{
    size_t n = s->n;
    jstr **names = s->names;
    jv *vals = s->vals;
    jscope *parent = s->parent;
    s->n = s->cap = 0;
    s->names = NULL;
    s->vals = NULL;
    s->parent = NULL;
    for (size_t i = 0; i < n; i++) {
        drop_str(names[i]);
        release_jv(vals[i], head);
    }
    if (names != s->names_in) free(names);
    if (vals != s->vals_in) free(vals);
    if (parent) push_zero(head, &parent->gc, &parent->rc);
}

static void clear_func(jfunc *f, jgc **head)
{
    jv self = f->self;
    jscope *scope = f->scope;
    jloop *loop = f->loop;
    f->self = jv_undef();
    f->scope = NULL;
    f->loop = NULL;
    release_jv(self, head);
    if (scope) push_zero(head, &scope->gc, &scope->rc);
    if (loop) push_zero(head, &loop->gc, &loop->rc);
}

static void clear_loop(jloop *L, jgc **head)
{
    jlist *items = L->items;
    jscope *scope = L->scope;
    jv changed = L->changed;
    L->items = NULL;
    L->scope = NULL;
    L->changed = jv_undef();
    if (items) push_zero(head, &items->gc, &items->rc);
    if (scope) push_zero(head, &scope->gc, &scope->rc);
    release_jv(changed, head);
}

static void clear_object(jgc *g, jgc **head)
{
    switch (g->type) {
    case GC_LIST: clear_list((jlist *)g, head); break;
    case GC_DICT: clear_dict((jdict *)g, head); break;
    case GC_FUNC: clear_func((jfunc *)g, head); break;
    case GC_SCOPE: clear_scope((jscope *)g, head); break;
    case GC_LOOP: clear_loop((jloop *)g, head); break;
    default: break;
    }
}

static void free_object(jgc *g)
{
    if (g->type == GC_DICT) jtrack_unlink(&((jdict *)g)->tr);
    if (g->type == GC_SCOPE) jtrack_unlink(&((jscope *)g)->tr);
    if (g->type == GC_LOOP) jtrack_unlink(&((jloop *)g)->tr);
    free(g);
}

static void run_frees(jgc *head)
{
    while (head) {
        jgc *g = head;
        head = g->next;
        clear_object(g, &head);
        free_object(g);
    }
}

void jgc_release(jgc *g, int32_t *rc)
{
    jgc *head = NULL;
    push_zero(&head, g, rc);
    run_frees(head);
}

void jgc_clear(jgc *g)
{
    jgc *head = NULL;
    clear_object(g, &head);
    run_frees(head);
}

void jv_drop(jv v)
{
    jgc *head = NULL;
    release_jv(v, &head);
    run_frees(head);
}

void jtrack_link(jtrack *head, jtrack *t, int kind)
{
    t->kind = kind;
    t->next = head->next;
    t->prev = head;
    head->next->prev = t;
    head->next = t;
}

void jtrack_unlink(jtrack *t)
{
    if (!t->next) return;
    t->prev->next = t->next;
    t->next->prev = t->prev;
    t->next = t->prev = NULL;
}

/* ---- strings ----------------------------------------------------------- */

jstr *jstr_new(const char *s, size_t len)
{
    if (len > SIZE_MAX / 2) return NULL;
    jstr *r = malloc(sizeof *r + len + 1);
    if (!r) return NULL;
    r->rc = 1;
    r->len = len;
    if (len) memcpy(r->s, s, len);
    r->s[len] = 0;
    jstr_scan(r);
    return r;
}

/* Fills in ascii and ncp after the bytes were written. */
void jstr_scan(jstr *r)
{
    size_t ncp = 0, i = 0;
    bool ascii = true;
    /* ASCII runs a word at a time: most template text is ASCII */
    while (i + 8 <= r->len) {
        uint64_t w;
        memcpy(&w, r->s + i, 8);
        if (w & 0x8080808080808080ull) break;
        i += 8;
        ncp += 8;
    }
    while (i < r->len) {
        if ((unsigned char)r->s[i] < 0x80) {
            i++;
        } else {
            uint32_t cp;
            i += ju_decode(r->s + i, r->len - i, &cp);
            ascii = false;
        }
        ncp++;
    }
    r->ascii = ascii;
    r->ncp = ncp;
}

jstr *jstr_cstr(const char *s) { return jstr_new(s, strlen(s)); }

jv jv_str_take(jstr *s)
{
    if (!s) return jv_none();
    return (jv){.k = JV_STR, .s = s};
}

jv jv_str(const char *s, size_t len) { return jv_str_take(jstr_new(s, len)); }
jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }

size_t jstr_cp_off(const jstr *s, size_t i)
{
    if (s->ascii) return i;
    size_t off = 0;
    for (size_t k = 0; k < i && off < s->len; k++) {
        uint32_t cp;
        off += ju_decode(s->s + off, s->len - off, &cp);
    }
    return off;
}

/* ---- lists and dicts ----------------------------------------------------- */

jlist *jlist_new(size_t cap)
{
    jlist *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->gc.type = GC_LIST;
    l->rc = 1;
    if (cap) {
        l->v = malloc(cap * sizeof *l->v);
        if (!l->v) {
            free(l);
            return NULL;
        }
        l->cap = cap;
    }
    return l;
}

int jlist_push(jlist *l, jv v)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jv *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) {
            jv_drop(v);
            return -1;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
    return 0;
}

jdict *jdict_new(void)
{
    jdict *d = calloc(1, sizeof *d);
    if (d) {
        d->gc.type = GC_DICT;
        d->rc = 1;
    }
    return d;
}

static ptrdiff_t jdict_find(const jdict *d, jv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], k)) return (ptrdiff_t)i;
    return -1;
}

const jv *jdict_get(const jdict *d, jv k)
{
    ptrdiff_t i = jdict_find(d, k);
    return i < 0 ? NULL : &d->v[i];
}

const jv *jdict_gets(const jdict *d, const char *key, size_t len)
{
    for (size_t i = 0; i < d->n; i++) {
        jv k = d->k[i];
        if (k.k == JV_STR && k.s->len == len && !memcmp(k.s->s, key, len)) return &d->v[i];
    }
    return NULL;
}

int jdict_set(jdict *d, jv k, jv v)
{
    ptrdiff_t i = jdict_find(d, k);
    if (i >= 0) {
        /* Python keeps the first key object and replaces the value */
        jv old = d->v[i];
        d->v[i] = v;
        jv_drop(old);
        jv_drop(k);
        return 0;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jv *nk = realloc(d->k, nc * sizeof *nk);
        if (nk) d->k = nk;
        jv *nv = nk ? realloc(d->v, nc * sizeof *nv) : NULL;
        if (!nv) {
            jv_drop(k);
            jv_drop(v);
            return -1;
        }
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

/* ---- Python semantics -------------------------------------------------- */

bool jv_truthy(jv v)
{
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return v.s->len != 0;
    case JV_LIST: return v.l->gen ? true : v.l->n != 0;
    case JV_DICT: return v.d->ns || v.d->n != 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }

static bool num_eq(jv a, jv b)
{
    if (a.k == JV_FLOAT || b.k == JV_FLOAT) {
        double x = a.k == JV_FLOAT ? a.f : a.k == JV_BOOL ? a.b : (double)a.i;
        double y = b.k == JV_FLOAT ? b.f : b.k == JV_BOOL ? b.b : (double)b.i;
        return x == y;
    }
    int64_t x = a.k == JV_BOOL ? a.b : a.i, y = b.k == JV_BOOL ? b.b : b.i;
    return x == y;
}

static bool eq_depth(jv a, jv b, int depth, long *budget);

bool jv_eq(jv a, jv b)
{
    long budget = 1L << 20;
    return eq_depth(a, b, 0, &budget);
}

/* Deeper than JV_MAX_NEST or more than a million items (only reachable
 * through cycles or values built to be absurd) compares unequal instead of
 * recursing on. */
static bool eq_depth(jv a, jv b, int depth, long *budget)
{
    if (is_num(a) && is_num(b)) return num_eq(a, b);
    if (depth > JV_MAX_NEST || --*budget < 0) return false;
    if (a.k != b.k) return false;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.s->len == b.s->len && !memcmp(a.s->s, b.s->s, a.s->len);
    case JV_LIST:
        if (a.l == b.l) return true;
        if (a.l->tuple != b.l->tuple || a.l->gen || b.l->gen || a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!eq_depth(a.l->v[i], b.l->v[i], depth + 1, budget)) return false;
        return true;
    case JV_DICT:
        if (a.d == b.d) return true;
        if (a.d->ns || b.d->ns || a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            const jv *o = jdict_get(b.d, a.d->k[i]);
            if (!o || !eq_depth(a.d->v[i], *o, depth + 1, budget)) return false;
        }
        return true;
    case JV_FUNC: return a.fn == b.fn;
    default: return false;
    }
}

const char *jv_type_name(jv v)
{
    switch (v.k) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.l->gen ? "generator" : v.l->tuple ? "tuple" : "list";
    case JV_DICT: return v.d->ns ? "Namespace" : "dict";
    default: return jfunc_type_name(v.fn);
    }
}

/* ---- output buffer --------------------------------------------------- */

void jbuf_put(jbuf *b, const char *s, size_t n)
{
    if (b->over || !n) return;
    if (n > b->max - b->n) {
        b->over = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) {
            b->over = b->oom = true;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jbuf_putc(jbuf *b, char c) { jbuf_put(b, &c, 1); }

void jbuf_printf(jbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    if ((size_t)n < sizeof tmp) {
        jbuf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);   /* wide %-format fields */
    if (!big) {
        b->over = b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    jbuf_put(b, big, (size_t)n);
    free(big);
}

void jbuf_free(jbuf *b)
{
    free(b->p);
    *b = (jbuf){0};
}

/* ---- str() and repr() ---------------------------------------------------- */

/* Python's float repr: the shortest digits that read back exactly, fixed
 * notation for exponents -4..15, otherwise d.ddde+XX. */
void jv_write_float(jbuf *b, double f)
{
    if (isnan(f)) { jbuf_put(b, "nan", 3); return; }
    if (isinf(f)) { jbuf_put(b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3); return; }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    char digits[24];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) jbuf_putc(b, '-');
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            jbuf_put(b, "0.", 2);
            for (int i = -1; i > exp; i--) jbuf_putc(b, '0');
            jbuf_put(b, digits, nd);
        } else {
            for (int i = 0; i <= exp; i++) jbuf_putc(b, (size_t)i < nd ? digits[i] : '0');
            jbuf_putc(b, '.');
            if ((size_t)exp + 1 < nd) jbuf_put(b, digits + exp + 1, nd - (size_t)exp - 1);
            else jbuf_putc(b, '0');
        }
        return;
    }
    jbuf_putc(b, digits[0]);
    if (nd > 1) {
        jbuf_putc(b, '.');
        jbuf_put(b, digits + 1, nd - 1);
    }
    jbuf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

/* CPython's str.isprintable for one code point. */
static bool cp_printable(uint32_t cp)
{
    if (cp == ' ') return true;
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    if (cp > 0x10ffff) return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

static void write_str_repr(jbuf *b, const jstr *s)
{
    bool sq = memchr(s->s, '\'', s->len) != NULL, dq = memchr(s->s, '"', s->len) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jbuf_putc(b, q);
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        size_t n = ju_decode(s->s + i, s->len - i, &cp);
        if (cp == (uint32_t)q || cp == '\\') {
            jbuf_putc(b, '\\');
            jbuf_putc(b, (char)cp);
        } else if (cp == '\n') {
            jbuf_put(b, "\\n", 2);
        } else if (cp == '\r') {
            jbuf_put(b, "\\r", 2);
        } else if (cp == '\t') {
            jbuf_put(b, "\\t", 2);
        } else if (n == 1 && cp >= 0x80) {
            jbuf_printf(b, "\\udc%02x", cp);  /* surrogateescape, as Python decodes bad bytes */
        } else if (!cp_printable(cp)) {
            if (cp <= 0xff) jbuf_printf(b, "\\x%02x", cp);
            else if (cp <= 0xffff) jbuf_printf(b, "\\u%04x", cp);
            else jbuf_printf(b, "\\U%08x", cp);
        } else {
            jbuf_put(b, s->s + i, n);
        }
        i += n;
    }
    jbuf_putc(b, q);
}

static void repr_depth(jbuf *b, jv v, int depth);

static void write_seq(jbuf *b, const jlist *l, int depth)
{
    if (l->gen) {
        jbuf_put(b, "<generator object>", 18);
        return;
    }
    jbuf_putc(b, l->tuple ? '(' : '[');
    for (size_t i = 0; i < l->n; i++) {
        if (i) jbuf_put(b, ", ", 2);
        repr_depth(b, l->v[i], depth + 1);
    }
    if (l->tuple && l->n == 1) jbuf_putc(b, ',');
    jbuf_putc(b, l->tuple ? ')' : ']');
}

static void write_dict(jbuf *b, const jdict *d, int depth)
{
    if (d->ns) jbuf_put(b, "<Namespace ", 11);
    jbuf_putc(b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) jbuf_put(b, ", ", 2);
        repr_depth(b, d->k[i], depth + 1);
        jbuf_put(b, ": ", 2);
        repr_depth(b, d->v[i], depth + 1);
    }
    jbuf_putc(b, '}');
    if (d->ns) jbuf_putc(b, '>');
}

void jv_write_repr(jbuf *b, jv v) { repr_depth(b, v, 0); }

/* Nesting beyond JV_MAX_NEST (cycles through namespaces) prints "...". */
static void repr_depth(jbuf *b, jv v, int depth)
{
    if (b->over) return;
    if (depth > JV_MAX_NEST && (v.k == JV_LIST || v.k == JV_DICT)) {
        jbuf_put(b, "...", 3);
        return;
    }
    switch (v.k) {
    case JV_UNDEF: jbuf_put(b, "Undefined", 9); break;
    case JV_NONE: jbuf_put(b, "None", 4); break;
    case JV_BOOL: jbuf_put(b, v.b ? "True" : "False", v.b ? 4 : 5); break;
    case JV_INT: jbuf_printf(b, "%lld", (long long)v.i); break;
    case JV_FLOAT: jv_write_float(b, v.f); break;
    case JV_STR: write_str_repr(b, v.s); break;
    case JV_LIST: write_seq(b, v.l, depth); break;
    case JV_DICT: write_dict(b, v.d, depth); break;
    case JV_FUNC: jfunc_write(b, v.fn); break;
    }
}

void jv_write_str(jbuf *b, jv v)
{
    if (v.k == JV_STR) jbuf_put(b, v.s->s, v.s->len);
    else if (v.k != JV_UNDEF) jv_write_repr(b, v);
}

/* ---- undefined ------------------------------------------------------- */

jv jv_undef_why(int kind, const char *obj_type, jstr *name)
{
    jv u = {.k = JV_UNDEF, .uk = (uint8_t)kind, .why = obj_type, .s = name};
    return u;
}

/* The message Jinja's Undefined raises when it is used.  WHY holds the
 * object's description with its quotes ("'dict object'", "None"). */
void jv_undef_message(jbuf *b, jv u)
{
    const char *name = u.s ? u.s->s : "?";
    size_t nl = u.s ? u.s->len : 1;
    switch (u.uk) {
    case JU_ATTR:
        jbuf_printf(b, "%s has no attribute '", u.why);
        jbuf_put(b, name, nl);
        jbuf_putc(b, '\'');
        break;
    case JU_ELEM:
        jbuf_printf(b, "%s has no element ", u.why);
        jbuf_put(b, name, nl);
        break;
    case JU_UNSAFE:
        jbuf_put(b, "access to attribute '", 21);
        jbuf_put(b, name, nl);
        jbuf_printf(b, "' of '%s' object is unsafe (transformers' immutable sandbox refuses to "
                    "change lists and dicts, and so does sluice)", u.why);
        break;
    case JU_UNIMPL:
        jbuf_printf(b, "unsupported template feature: %s method '", u.why);
        jbuf_put(b, name, nl);
        jbuf_put(b, "' is not implemented", 20);
        break;
    case JU_MSG:
        jbuf_printf(b, "%s", u.why);
        break;
    default:
        if (!u.s) {
            jbuf_put(b, "undefined value", 15);
            break;
        }
        jbuf_putc(b, '\'');
        jbuf_put(b, name, nl);
        jbuf_put(b, "' is undefined", 14);
    }
}
