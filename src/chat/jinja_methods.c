/* Methods of strings, dicts, lists and the loop object with Python's
 * semantics, the global functions (range, dict, namespace,
 * raise_exception, strftime_now), %-formatting and the conversions the
 * filters share.  Strings index by code point, as Python strings do. */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/jinja_int.h"

static bool given(jv v) { return v.k != JV_UNDEF && v.k != JV_NONE; }

/* ---- conversions ------------------------------------------------------- */

int jto_str(jctx *c, const jnode *n, jv v, jv *out)
{
    if (v.k == JV_STR) {
        *out = jv_ref(v);
        return 0;
    }
    jbuf b = {.max = c->lim.max_output};
    jv_write_str(&b, v);
    return jmake_str(c, n, &b, out);
}

int jarg_int(jctx *c, const jnode *n, jv v, const char *what, int64_t *out)
{
    if (v.k == JV_INT) *out = v.i;
    else if (v.k == JV_BOOL) *out = v.b;
    else return jerr(c, n, "%s must be an integer, not %s", what, jv_type_name(v));
    return 0;
}

static bool is_ws_byte(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

/* Digits of BASE with single "_" between digits, as Python's int() takes. */
static int parse_digits(const char *p, const char *end, int base, int64_t *out)
{
    int64_t v = 0;
    bool any = false;
    for (; p < end; p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : (*p | 0x20) >= 'a' && (*p | 0x20) <= 'z' ? (*p | 0x20) - 'a' + 10 : -1;
        if (*p == '_' && any && p + 1 < end && p[1] != '_') continue;
        if (d < 0 || d >= base) return -1;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return -2;
        any = true;
    }
    *out = v;
    return any ? 0 : -1;
}

int jparse_int(jv v, int base, int64_t *out)
{
    if (v.k == JV_INT || v.k == JV_BOOL) {
        *out = v.k == JV_INT ? v.i : v.b;
        return 0;
    }
    if (v.k == JV_FLOAT) {
        if (!isfinite(v.f) || fabs(v.f) >= 9.2e18) return -2;
        *out = (int64_t)v.f;
        return 0;
    }
    if (v.k != JV_STR || base < 0 || base == 1 || base > 36) return -1;
    const char *p = v.s->s, *end = p + v.s->len;
    while (p < end && is_ws_byte(*p)) p++;
    while (end > p && is_ws_byte(end[-1])) end--;
    bool neg = p < end && *p == '-';
    if (p < end && (*p == '-' || *p == '+')) p++;
    if (end - p > 2 && p[0] == '0') {
        char k = p[1] | 0x20;
        int pb = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            p += 2;
            if (p < end && *p == '_') p++;
        }
    }
    if (base == 0) base = 10;
    int64_t r;
    int rc = parse_digits(p, end, base, &r);
    if (rc) return rc;
    *out = neg ? -r : r;
    return 0;
}

int jparse_float(jv v, double *out)
{
    if (v.k == JV_INT || v.k == JV_BOOL || v.k == JV_FLOAT) {
        *out = v.k == JV_INT ? (double)v.i : v.k == JV_BOOL ? v.b : v.f;
        return 0;
    }
    if (v.k != JV_STR || v.s->len > 400) return -1;
    char buf[512];
    size_t k = 0;
    const char *p = v.s->s, *end = p + v.s->len;
    while (p < end && is_ws_byte(*p)) p++;
    while (end > p && is_ws_byte(end[-1])) end--;
    for (const char *q = p; q < end; q++) {
        if (*q == '_') {
            if (q == p || q + 1 == end || !(q[-1] >= '0' && q[-1] <= '9') || !(q[1] >= '0' && q[1] <= '9')) return -1;
            continue;
        }
        if (strchr("xXpP", *q)) return -1;   /* strtod reads hex floats, Python does not */
        buf[k++] = *q;
    }
    buf[k] = 0;
    if (!k) return -1;
    char *e;
    double d = strtod(buf, &e);
    if (*e) return -1;
    *out = d;
    return 0;
}

/* ---- case mapping -------------------------------------------------------- */

void jcase_put(jbuf *b, uint32_t cp, int dir)
{
    if (cp < 0x80) {
        char ch = (char)cp;
        if (dir > 0 && ch >= 'a' && ch <= 'z') ch -= 32;
        if (dir < 0 && ch >= 'A' && ch <= 'Z') ch += 32;
        jbuf_putc(b, ch);
        return;
    }
    utf8proc_int32_t m = dir > 0 ? utf8proc_toupper((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp);
    char u[4];
    jbuf_put(b, u, ju_encode((uint32_t)m, u));
}

static bool is_cased(uint32_t cp)
{
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

bool jis_word_char(uint32_t cp)
{
    if (cp < 0x80) return cp == '_' || (cp >= '0' && cp <= '9') || is_cased(cp);
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO ? true
         : k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

/* Case mapping of S; MODE: 1 upper, -1 lower, 2 Python title, 3 capitalize,
 * 4 swapcase. */
static int map_case(jctx *c, const jnode *n, const jstr *s, int mode, jv *out)
{
    jbuf b = {.max = c->lim.max_output};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        size_t k = ju_decode(s->s + i, s->len - i, &cp);
        int dir = mode == 1 ? 1 : mode == -1 ? -1 : mode == 2 ? (prev_cased ? -1 : 1) : mode == 3 ? (first ? 1 : -1)
                : utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_LL ? 1 : -1;
        if (k == 1 && cp >= 0x80) jbuf_put(&b, s->s + i, 1);   /* invalid byte: unchanged */
        else jcase_put(&b, cp, dir);
        prev_cased = is_cased(cp);
        first = false;
        i += k;
    }
    return jmake_str(c, n, &b, out);
}

jstr *jstr_lower(const jstr *s)
{
    jbuf b = {.max = SIZE_MAX};
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        size_t k = ju_decode(s->s + i, s->len - i, &cp);
        if (k == 1 && cp >= 0x80) jbuf_put(&b, s->s + i, 1);
        else jcase_put(&b, cp, -1);
        i += k;
    }
    jstr *r = b.oom ? NULL : jstr_new(b.p ? b.p : "", b.n);
    jbuf_free(&b);
    return r;
}

int jstr_reverse(jctx *c, const jnode *n, const jstr *s, jv *out)
{
    jbuf b = {.max = c->lim.max_output};
    size_t *off = malloc((s->ncp + 1) * sizeof *off), k = 0;
    if (!off) return jerr(c, n, "out of memory");
    for (size_t i = 0; i < s->len; k++) {
        uint32_t cp;
        off[k] = i;
        i += ju_decode(s->s + i, s->len - i, &cp);
    }
    off[k] = s->len;
    for (size_t i = k; i > 0; i--) jbuf_put(&b, s->s + off[i - 1], off[i] - off[i - 1]);
    free(off);
    return jmake_str(c, n, &b, out);
}

/* ---- string methods ---------------------------------------------------- */

#define M(name) static int name(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
#define UNUSED_CTX (void)c, (void)n

static int str_arg(jctx *c, const jnode *n, jv v, const char *what)
{
    if (v.k == JV_STR) return 0;
    return jerr(c, n, "%s must be str, not %s", what, jv_type_name(v));
}

M(m_upper) { (void)a; return map_case(c, n, self.s, 1, out); }
M(m_lower) { (void)a; return map_case(c, n, self.s, -1, out); }
M(m_title) { (void)a; return map_case(c, n, self.s, 2, out); }
M(m_capitalize) { (void)a; return map_case(c, n, self.s, 3, out); }
M(m_swapcase) { (void)a; return map_case(c, n, self.s, 4, out); }

static bool in_chars(uint32_t cp, const jstr *chars)
{
    if (!chars) return ju_isspace(cp);
    for (size_t i = 0; i < chars->len;) {
        uint32_t x;
        i += ju_decode(chars->s + i, chars->len - i, &x);
        if (x == cp) return true;
    }
    return false;
}

static int strip_common(jctx *c, const jnode *n, jv self, jv chars, bool left, bool right, jv *out)
{
    if (given(chars) && str_arg(c, n, chars, "strip arg")) return -1;
    const jstr *cs = given(chars) ? chars.s : NULL, *s = self.s;
    size_t from = 0, to = s->len;
    while (left && from < to) {
        uint32_t cp;
        size_t k = ju_decode(s->s + from, to - from, &cp);
        if (!in_chars(cp, cs)) break;
        from += k;
    }
    if (right) {
        size_t keep = from;
        for (size_t i = from; i < to;) {
            uint32_t cp;
            i += ju_decode(s->s + i, to - i, &cp);
            if (!in_chars(cp, cs)) keep = i;
        }
        to = keep;
    }
    return jmake_strn(c, n, s->s + from, to - from, out);
}

M(m_strip) { return strip_common(c, n, self, a->p[0], true, true, out); }
M(m_lstrip) { return strip_common(c, n, self, a->p[0], true, false, out); }
M(m_rstrip) { return strip_common(c, n, self, a->p[0], false, true, out); }

static int push_piece(jctx *c, const jnode *n, jlist *l, const char *s, size_t len)
{
    jv v;
    if (jmake_strn(c, n, s, len, &v)) return -1;
    return jlist_add(c, n, l, v);
}

/* Whitespace split, from the left or (REV) from the right: CPython's
 * split_whitespace / rsplit_whitespace over code points. */
static int split_ws(jctx *c, const jnode *n, const jstr *s, int64_t maxsplit, bool rev, jlist *l)
{
    size_t m = s->ncp, *off = malloc((m + 1) * sizeof *off);
    bool *ws = malloc(m + 1);
    if (!off || !ws) {
        free(off);
        free(ws);
        return jerr(c, n, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < s->len; k++) {
        uint32_t cp;
        off[k] = i;
        i += ju_decode(s->s + i, s->len - i, &cp);
        ws[k] = ju_isspace(cp);
    }
    off[m] = s->len;
    int64_t left = maxsplit < 0 ? INT64_MAX : maxsplit;
    int rc = 0;
    if (!rev) {
        size_t i = 0;
        while (left-- > 0 && !rc) {
            while (i < m && ws[i]) i++;
            if (i == m) break;
            size_t j = i++;
            while (i < m && !ws[i]) i++;
            rc = push_piece(c, n, l, s->s + off[j], off[i] - off[j]);
        }
        while (i < m && ws[i]) i++;
        if (!rc && i < m) rc = push_piece(c, n, l, s->s + off[i], s->len - off[i]);
    } else {
        size_t first = l->n;
        int64_t i = (int64_t)m - 1;
        while (left-- > 0 && !rc) {
            while (i >= 0 && ws[i]) i--;
            if (i < 0) break;
            int64_t j = i--;
            while (i >= 0 && !ws[i]) i--;
            rc = push_piece(c, n, l, s->s + off[i + 1], off[j + 1] - off[i + 1]);
        }
        while (i >= 0 && ws[i]) i--;
        if (!rc && i >= 0) rc = push_piece(c, n, l, s->s, off[i + 1]);
        for (size_t x = first, y = l->n; !rc && x + 1 < y; x++, y--) {
            jv t = l->v[x];
            l->v[x] = l->v[y - 1];
            l->v[y - 1] = t;
        }
    }
    free(off);
    free(ws);
    return rc;
}

static int split_sep(jctx *c, const jnode *n, const jstr *s, const jstr *sep, int64_t maxsplit, bool rev, jlist *l)
{
    if (!sep->len) return jerr(c, n, "empty separator");
    if (!rev) {
        size_t pos = 0;
        for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
            const char *f = memmem(s->s + pos, s->len - pos, sep->s, sep->len);
            if (!f) break;
            if (push_piece(c, n, l, s->s + pos, (size_t)(f - s->s) - pos)) return -1;
            pos = (size_t)(f - s->s) + sep->len;
        }
        return push_piece(c, n, l, s->s + pos, s->len - pos);
    }
    size_t end = s->len;
    jlist *rl = jnew_list(c, n, 4);
    if (!rl) return -1;
    int rc = 0;
    for (int64_t k = 0; (maxsplit < 0 || k < maxsplit) && !rc; k++) {
        size_t at = SIZE_MAX;
        for (size_t i = end >= sep->len ? end - sep->len + 1 : 0; i > 0; i--)
            if (!memcmp(s->s + i - 1, sep->s, sep->len)) { at = i - 1; break; }
        if (at == SIZE_MAX) break;
        rc = push_piece(c, n, rl, s->s + at + sep->len, end - at - sep->len);
        end = at;
    }
    if (!rc) rc = push_piece(c, n, l, s->s, end);
    for (size_t i = rl->n; i > 0 && !rc; i--) rc = jlist_add(c, n, l, jv_ref(rl->v[i - 1]));
    jv_drop((jv){.k = JV_LIST, .l = rl});
    return rc;
}

static int split_common(jctx *c, const jnode *n, jv self, const jbound *a, bool rev, jv *out)
{
    int64_t maxsplit = -1;
    if (given(a->p[1]) && jarg_int(c, n, a->p[1], "maxsplit", &maxsplit)) return -1;
    if (given(a->p[0]) && str_arg(c, n, a->p[0], "separator")) return -1;
    jlist *l = jnew_list(c, n, 4);
    if (!l) return -1;
    int rc = given(a->p[0]) ? split_sep(c, n, self.s, a->p[0].s, maxsplit, rev, l)
                            : split_ws(c, n, self.s, maxsplit, rev, l);
    if (rc) {
        jv_drop((jv){.k = JV_LIST, .l = l});
        return -1;
    }
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

M(m_split) { return split_common(c, n, self, a, false, out); }
M(m_rsplit) { return split_common(c, n, self, a, true, out); }

M(m_splitlines)
{
    bool keep = given(a->p[0]) && jv_truthy(a->p[0]);
    jlist *l = jnew_list(c, n, 4);
    if (!l) return -1;
    const jstr *s = self.s;
    size_t start = 0;
    int rc = 0;
    for (size_t i = 0; i < s->len && !rc;) {
        size_t e = ju_line_end(s->s, i, s->len);
        if (!e) {
            uint32_t cp;
            i += ju_decode(s->s + i, s->len - i, &cp);
            continue;
        }
        rc = push_piece(c, n, l, s->s + start, (keep ? i + e : i) - start);
        i += e;
        start = i;
    }
    if (!rc && start < s->len) rc = push_piece(c, n, l, s->s + start, s->len - start);
    if (rc) {
        jv_drop((jv){.k = JV_LIST, .l = l});
        return -1;
    }
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

M(m_replace)
{
    if (str_arg(c, n, a->p[0], "replace() argument 1") || str_arg(c, n, a->p[1], "replace() argument 2")) return -1;
    int64_t count = -1;
    if (given(a->p[2]) && jarg_int(c, n, a->p[2], "count", &count)) return -1;
    const jstr *s = self.s, *old = a->p[0].s, *rep = a->p[1].s;
    jbuf b = {.max = c->lim.max_output}, esc = {.max = c->lim.max_output};
    jstr *escaped = NULL;
    if (self.uk && !a->p[1].uk) {
        /* Markup.replace escapes the replacement */
        jhtml_escape(&esc, rep->s, rep->len);
        escaped = jstr_new(esc.p ? esc.p : "", esc.n);
        jbuf_free(&esc);
        if (!escaped) return jerr(c, n, "out of memory");
        rep = escaped;
    }
    size_t pos = 0;
    int64_t done = 0;
    if (!old->len) {
        /* an empty pattern matches before every character and at the end */
        for (size_t i = 0; i <= s->len && !b.over; done++) {
            if (count < 0 || done < count) jbuf_put(&b, rep->s, rep->len);
            if (i == s->len) break;
            uint32_t cp;
            size_t k = ju_decode(s->s + i, s->len - i, &cp);
            jbuf_put(&b, s->s + i, k);
            i += k;
        }
        free(escaped);
        return jmake_str(c, n, &b, out);
    }
    while ((count < 0 || done < count) && !b.over) {
        const char *f = memmem(s->s + pos, s->len - pos, old->s, old->len);
        if (!f) break;
        jbuf_put(&b, s->s + pos, (size_t)(f - s->s) - pos);
        jbuf_put(&b, rep->s, rep->len);
        pos = (size_t)(f - s->s) + old->len;
        done++;
    }
    jbuf_put(&b, s->s + pos, s->len - pos);
    free(escaped);
    return jmake_str(c, n, &b, out);
}

/* Byte range of the code point slice [start:end] (Python clamping). */
static int cp_range(jctx *c, const jnode *n, const jstr *s, jv start, jv end, size_t *bs, size_t *be)
{
    int64_t L = (int64_t)s->ncp, lo = 0, hi = L;
    if (given(start) && jarg_int(c, n, start, "start", &lo)) return -1;
    if (given(end) && jarg_int(c, n, end, "end", &hi)) return -1;
    if (lo < 0) lo = lo + L < 0 ? 0 : lo + L;
    if (hi < 0) hi = hi + L < 0 ? 0 : hi + L;
    if (lo > L) lo = L;
    if (hi > L) hi = L;
    if (hi < lo) hi = lo;
    *bs = jstr_cp_off(s, (size_t)lo);
    *be = jstr_cp_off(s, (size_t)hi);
    return 0;
}

static bool affix_at(const jstr *s, size_t bs, size_t be, const jstr *x, bool suffix)
{
    if (x->len > be - bs) return false;
    return !memcmp(s->s + (suffix ? be - x->len : bs), x->s, x->len);
}

static int affix(jctx *c, const jnode *n, jv self, const jbound *a, bool suffix, jv *out)
{
    size_t bs, be;
    if (cp_range(c, n, self.s, a->p[1], a->p[2], &bs, &be)) return -1;
    jv x = a->p[0];
    bool r = false;
    if (x.k == JV_STR) {
        r = affix_at(self.s, bs, be, x.s, suffix);
    } else if (x.k == JV_LIST && x.l->tuple) {
        for (size_t i = 0; i < x.l->n && !r; i++) {
            if (str_arg(c, n, x.l->v[i], "tuple item")) return -1;
            r = affix_at(self.s, bs, be, x.l->v[i].s, suffix);
        }
    } else {
        return jerr(c, n, "%s first arg must be str or a tuple of str, not %s", suffix ? "endswith" : "startswith",
                    jv_type_name(x));
    }
    *out = jv_bool(r);
    return 0;
}

M(m_startswith) { return affix(c, n, self, a, false, out); }
M(m_endswith) { return affix(c, n, self, a, true, out); }

static size_t cp_count(const char *s, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < len; k++) {
        uint32_t cp;
        i += ju_decode(s + i, len - i, &cp);
    }
    return k;
}

/* find / rfind / index / rindex / count */
static int search(jctx *c, const jnode *n, jv self, const jbound *a, int mode, jv *out)
{
    if (str_arg(c, n, a->p[0], "substring")) return -1;
    size_t bs, be;
    if (cp_range(c, n, self.s, a->p[1], a->p[2], &bs, &be)) return -1;
    const jstr *s = self.s, *sub = a->p[0].s;
    if (mode == 4) {
        int64_t cnt = 0;
        if (!sub->len) cnt = (int64_t)cp_count(s->s + bs, be - bs) + 1;
        for (size_t p = bs; sub->len && p + sub->len <= be;) {
            const char *f = memmem(s->s + p, be - p, sub->s, sub->len);
            if (!f) break;
            cnt++;
            p = (size_t)(f - s->s) + sub->len;
        }
        *out = jv_int(cnt);
        return 0;
    }
    size_t at = SIZE_MAX;
    if (mode == 0 || mode == 2) {
        const char *f = sub->len <= be - bs ? memmem(s->s + bs, be - bs, sub->s, sub->len) : NULL;
        if (f) at = (size_t)(f - s->s);
    } else {
        for (size_t i = be - bs >= sub->len ? be - sub->len + 1 : 0; i > bs; i--)
            if (!memcmp(s->s + i - 1, sub->s, sub->len)) { at = i - 1; break; }
    }
    if (at == SIZE_MAX) {
        if (mode >= 2) return jerr(c, n, "substring not found");
        *out = jv_int(-1);
        return 0;
    }
    *out = jv_int((int64_t)cp_count(s->s, at));
    return 0;
}

M(m_find) { return search(c, n, self, a, 0, out); }
M(m_rfind) { return search(c, n, self, a, 1, out); }
M(m_index) { return search(c, n, self, a, 2, out); }
M(m_rindex) { return search(c, n, self, a, 3, out); }
M(m_count) { return search(c, n, self, a, 4, out); }

M(m_join)
{
    jlist *it;
    if (jiter(c, n, a->p[0], &it)) return -1;
    jbuf b = {.max = c->lim.max_output};
    int rc = 0;
    for (size_t i = 0; i < it->n && !rc; i++) {
        if (it->v[i].k != JV_STR) {
            rc = jerr(c, n, "sequence item %zu: expected str instance, %s found", i, jv_type_name(it->v[i]));
            break;
        }
        if (i) jbuf_put(&b, self.s->s, self.s->len);
        jbuf_put(&b, it->v[i].s->s, it->v[i].s->len);
    }
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (rc) {
        jbuf_free(&b);
        return -1;
    }
    return jmake_str(c, n, &b, out);
}

/* center / ljust / rjust / zfill */
static int pad(jctx *c, const jnode *n, jv self, jv width, jv fill, int mode, jv *out)
{
    int64_t w = 0;
    if (jarg_int(c, n, width, "width", &w)) return -1;
    const char *f = " ";
    size_t fl = 1;
    if (given(fill)) {
        if (fill.k != JV_STR || fill.s->ncp != 1) return jerr(c, n, "the fill character must be exactly one character long");
        f = fill.s->s;
        fl = fill.s->len;
    }
    const jstr *s = self.s;
    if (w > (int64_t)c->lim.max_output) return jerr(c, n, "padding width exceeds the output limit");
    size_t padn = w > (int64_t)s->ncp ? (size_t)w - s->ncp : 0;
    size_t left = mode == 0 ? padn / 2 + (padn & (size_t)w & 1) : mode == 1 ? 0 : padn;
    jbuf b = {.max = c->lim.max_output};
    size_t body = 0;
    if (mode == 3 && s->len && (s->s[0] == '-' || s->s[0] == '+')) {
        jbuf_putc(&b, s->s[0]);
        body = 1;
        f = "0";
    } else if (mode == 3) {
        f = "0";
    }
    for (size_t i = 0; i < left; i++) jbuf_put(&b, f, fl);
    jbuf_put(&b, s->s + body, s->len - body);
    for (size_t i = left; i < padn; i++) jbuf_put(&b, f, fl);
    return jmake_str(c, n, &b, out);
}

M(m_center) { return pad(c, n, self, a->p[0], a->p[1], 0, out); }
M(m_ljust) { return pad(c, n, self, a->p[0], a->p[1], 1, out); }
M(m_rjust) { return pad(c, n, self, a->p[0], a->p[1], 2, out); }
M(m_zfill) { return pad(c, n, self, a->p[0], jv_undef(), 3, out); }

static int classify(jv self, bool (*pred)(uint32_t), bool need_cased, int want_case, jv *out)
{
    const jstr *s = self.s;
    bool ok = s->len > 0, any_cased = false;
    for (size_t i = 0; i < s->len && ok;) {
        uint32_t cp;
        i += ju_decode(s->s + i, s->len - i, &cp);
        if (need_cased) {
            if (!is_cased(cp)) continue;
            any_cased = true;
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
            ok = want_case > 0 ? k == UTF8PROC_CATEGORY_LU : k == UTF8PROC_CATEGORY_LL;
        } else {
            ok = pred(cp);
        }
    }
    *out = jv_bool(ok && (!need_cased || any_cased));
    return 0;
}

static bool p_alpha(uint32_t cp)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
static bool p_digit(uint32_t cp) { return utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_ND; }
static bool p_numeric(uint32_t cp)
{
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}
static bool p_alnum(uint32_t cp) { return p_alpha(cp) || p_numeric(cp); }

M(m_isalpha) { UNUSED_CTX; (void)a; return classify(self, p_alpha, false, 0, out); }
M(m_isdigit) { UNUSED_CTX; (void)a; return classify(self, p_digit, false, 0, out); }
M(m_isnumeric) { UNUSED_CTX; (void)a; return classify(self, p_numeric, false, 0, out); }
M(m_isalnum) { UNUSED_CTX; (void)a; return classify(self, p_alnum, false, 0, out); }
M(m_isspace) { UNUSED_CTX; (void)a; return classify(self, ju_isspace, false, 0, out); }
M(m_islower) { UNUSED_CTX; (void)a; return classify(self, NULL, true, -1, out); }
M(m_isupper) { UNUSED_CTX; (void)a; return classify(self, NULL, true, 1, out); }

M(m_isascii)
{
    UNUSED_CTX;
    (void)a;
    *out = jv_bool(self.s->ascii);
    return 0;
}

static int remove_affix(jctx *c, const jnode *n, jv self, jv x, bool suffix, jv *out)
{
    if (str_arg(c, n, x, "argument")) return -1;
    const jstr *s = self.s;
    if (!affix_at(s, 0, s->len, x.s, suffix)) {
        *out = jv_ref(self);
        return 0;
    }
    return jmake_strn(c, n, s->s + (suffix ? 0 : x.s->len), s->len - x.s->len, out);
}

M(m_removeprefix) { return remove_affix(c, n, self, a->p[0], false, out); }
M(m_removesuffix) { return remove_affix(c, n, self, a->p[0], true, out); }

static int partition(jctx *c, const jnode *n, jv self, jv sep, bool rev, jv *out)
{
    if (str_arg(c, n, sep, "separator")) return -1;
    if (!sep.s->len) return jerr(c, n, "empty separator");
    const jstr *s = self.s;
    size_t at = SIZE_MAX;
    if (!rev) {
        const char *f = memmem(s->s, s->len, sep.s->s, sep.s->len);
        if (f) at = (size_t)(f - s->s);
    } else {
        for (size_t i = s->len >= sep.s->len ? s->len - sep.s->len + 1 : 0; i > 0; i--)
            if (!memcmp(s->s + i - 1, sep.s->s, sep.s->len)) { at = i - 1; break; }
    }
    jlist *l = jnew_list(c, n, 3);
    if (!l) return -1;
    l->tuple = true;
    int rc;
    if (at == SIZE_MAX) {
        rc = rev ? push_piece(c, n, l, "", 0) || push_piece(c, n, l, "", 0) || push_piece(c, n, l, s->s, s->len)
                 : push_piece(c, n, l, s->s, s->len) || push_piece(c, n, l, "", 0) || push_piece(c, n, l, "", 0);
    } else {
        rc = push_piece(c, n, l, s->s, at) || push_piece(c, n, l, sep.s->s, sep.s->len) ||
             push_piece(c, n, l, s->s + at + sep.s->len, s->len - at - sep.s->len);
    }
    if (rc) {
        jv_drop((jv){.k = JV_LIST, .l = l});
        return -1;
    }
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

M(m_partition) { return partition(c, n, self, a->p[0], false, out); }
M(m_rpartition) { return partition(c, n, self, a->p[0], true, out); }

/* str.format: "{}", "{0}", "{name}", "{x.attr}", "{x[0]}", "!r" / "!s"; no format specs. */
static int format_field(jctx *c, const jnode *n, const jbound *a, const char *f, size_t len, size_t *autoi, jbuf *b)
{
    size_t i = 0;
    while (i < len && f[i] != '.' && f[i] != '[' && f[i] != '!' && f[i] != ':') i++;
    const jargs *raw = a->raw;
    jv v = jv_undef();
    if (i == 0 || (f[0] >= '0' && f[0] <= '9')) {
        size_t idx = i ? (size_t)strtoul(f, NULL, 10) : (*autoi)++;
        if (idx >= raw->npos) return jerr(c, n, "str.format(): replacement index %zu out of range", idx);
        v = jv_ref(raw->pos[idx]);
    } else {
        for (size_t k = 0; k < raw->nkw && v.k == JV_UNDEF; k++)
            if (raw->kwn[k]->len == i && !memcmp(raw->kwn[k]->s, f, i)) v = jv_ref(raw->kwv[k]);
        if (v.k == JV_UNDEF) return jerr(c, n, "str.format(): no argument named '%.*s'", (int)i, f);
    }
    while (i < len && (f[i] == '.' || f[i] == '[')) {
        bool dot = f[i] == '.';
        size_t st = ++i;
        while (i < len && f[i] != '.' && f[i] != '[' && f[i] != ']' && f[i] != '!' && f[i] != ':') i++;
        jv key = jv_str(f + st, i - st), r;
        if (!dot && key.k == JV_STR && key.s->len && key.s->s[0] >= '0' && key.s->s[0] <= '9') {
            jv num = jv_int(strtoll(key.s->s, NULL, 10));
            jv_drop(key);
            key = num;
        }
        if (!dot && i < len && f[i] == ']') i++;
        int rc = key.k == JV_STR && dot ? jgetattr(c, n, v, key.s, &r) : jgetitem(c, n, v, key, &r);
        jv_drop(key);
        jv_drop(v);
        if (rc) return -1;
        v = r;
    }
    bool repr = i + 1 < len && f[i] == '!' && f[i + 1] == 'r';
    if (i < len && f[i] == '!') i += 2;
    if (i < len && f[i] == ':' && i + 1 < len) {
        jv_drop(v);
        return jerr_unsupported(c, n, "unsupported template feature: str.format() format specs");
    }
    if (repr) jv_write_repr(b, v);
    else jv_write_str(b, v);
    jv_drop(v);
    return 0;
}

M(m_format)
{
    const jstr *s = self.s;
    jbuf b = {.max = c->lim.max_output};
    size_t autoi = 0;
    for (size_t i = 0; i < s->len; i++) {
        char ch = s->s[i];
        if ((ch == '{' || ch == '}') && i + 1 < s->len && s->s[i + 1] == ch) {
            jbuf_putc(&b, ch);
            i++;
        } else if (ch == '{') {
            const char *e = memchr(s->s + i, '}', s->len - i);
            if (!e) return jbuf_free(&b), jerr(c, n, "str.format(): single '{' encountered in format string");
            if (format_field(c, n, a, s->s + i + 1, (size_t)(e - s->s) - i - 1, &autoi, &b)) return jbuf_free(&b), -1;
            i = (size_t)(e - s->s);
        } else if (ch == '}') {
            return jbuf_free(&b), jerr(c, n, "str.format(): single '}' encountered in format string");
        } else {
            jbuf_putc(&b, ch);
        }
    }
    return jmake_str(c, n, &b, out);
}

/* ---- %-formatting -------------------------------------------------------- */

typedef struct {
    const jv *args;
    size_t nargs, next;
    const jdict *map;
} pct_args;

static int pct_next(jctx *c, const jnode *n, pct_args *pa, jv *v)
{
    if (pa->next >= pa->nargs) return jerr(c, n, "not enough arguments for format string");
    *v = pa->args[pa->next++];
    return 0;
}

static int pct_number(jctx *c, const jnode *n, jbuf *b, char conv, const char *flags, int width, int prec, jv v)
{
    char fmt[32];
    if (v.k == JV_STR || !(v.k == JV_INT || v.k == JV_BOOL || v.k == JV_FLOAT))
        return jerr(c, n, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
    if (strchr("diuxXoc", conv)) {
        int64_t i = v.k == JV_FLOAT ? (int64_t)v.f : v.k == JV_BOOL ? v.b : v.i;
        if (v.k == JV_FLOAT && strchr("xXoc", conv))
            return jerr(c, n, "%%%c format: an integer is required, not float", conv);
        if (conv == 'c') {
            char u[4];
            jbuf_put(b, u, ju_encode((uint32_t)i, u));
            return 0;
        }
        char t = conv == 'i' || conv == 'u' ? 'd' : conv;
        if (prec < 0) {
            snprintf(fmt, sizeof fmt, "%%%s*ll%c", flags, t);
            jbuf_printf(b, fmt, width, (long long)i);
        } else {
            snprintf(fmt, sizeof fmt, "%%%s*.*ll%c", flags, t);
            jbuf_printf(b, fmt, width, prec, (long long)i);
        }
        return 0;
    }
    double d = v.k == JV_FLOAT ? v.f : v.k == JV_BOOL ? v.b : (double)v.i;
    snprintf(fmt, sizeof fmt, "%%%s*.*%c", flags, conv);
    jbuf_printf(b, fmt, width, prec < 0 ? 6 : prec, d);
    return 0;
}

static int pct_text(jctx *c, const jnode *n, jbuf *b, char conv, bool left, int width, int prec, jv v, bool esc)
{
    jbuf t = {.max = c->lim.max_output};
    if (conv == 's') jv_write_str(&t, v);
    else jv_write_repr(&t, v);
    if (esc && !(v.k == JV_STR && v.uk && conv == 's')) {
        /* a Markup format string escapes what it formats */
        jbuf e = {.max = c->lim.max_output};
        jhtml_escape(&e, t.p ? t.p : "", t.n);
        jbuf_free(&t);
        t = e;
    }
    size_t len = t.n, ncp = t.p ? cp_count(t.p, t.n) : 0;
    if (prec >= 0 && (size_t)prec < ncp) {
        size_t off = 0;
        for (int k = 0; k < prec; k++) {
            uint32_t cp;
            off += ju_decode(t.p + off, t.n - off, &cp);
        }
        len = off;
        ncp = (size_t)prec;
    }
    size_t padn = width > 0 && (size_t)width > ncp ? (size_t)width - ncp : 0;
    for (size_t i = 0; !left && i < padn; i++) jbuf_putc(b, ' ');
    jbuf_put(b, t.p, len);
    for (size_t i = 0; left && i < padn; i++) jbuf_putc(b, ' ');
    jbuf_free(&t);
    (void)n;
    return 0;
}

/* One conversion after '%' at F[*I]. */
static int pct_one(jctx *c, const jnode *n, const jstr *f, size_t *ip, pct_args *pa, jbuf *b, bool esc)
{
    size_t i = *ip;
    jv v = jv_undef();
    if (i < f->len && f->s[i] == '(') {
        const char *e = memchr(f->s + i, ')', f->len - i);
        if (!e || !pa->map) return jerr(c, n, "format requires a mapping");
        const jv *m = jdict_gets(pa->map, f->s + i + 1, (size_t)(e - f->s) - i - 1);
        if (!m) return jerr(c, n, "format key '%.*s' not found", (int)((size_t)(e - f->s) - i - 1), f->s + i + 1);
        v = *m;
        i = (size_t)(e - f->s) + 1;
    }
    char flags[8] = {0};
    size_t nf = 0;
    while (i < f->len && strchr("-+ 0#", f->s[i]) && nf < 7) flags[nf++] = f->s[i++];
    int width = 0, prec = -1;
    while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && width < 100000) width = width * 10 + f->s[i++] - '0';
    if (i < f->len && f->s[i] == '.') {
        prec = 0;
        for (i++; i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && prec < 100000;) prec = prec * 10 + f->s[i++] - '0';
    }
    while (i < f->len && strchr("hlL", f->s[i])) i++;
    if (i >= f->len) return jerr(c, n, "incomplete format");
    char conv = f->s[i++];
    *ip = i;
    if (conv == '%') {
        jbuf_putc(b, '%');
        return 0;
    }
    if (width > 4096 || prec > 4096) return jerr(c, n, "format width or precision too large");
    if (v.k == JV_UNDEF && !pa->map && pct_next(c, n, pa, &v)) return -1;
    if (conv == 's' || conv == 'r' || conv == 'a')
        return pct_text(c, n, b, conv == 'a' ? 'r' : conv, strchr(flags, '-'), width, prec, v, esc);
    if (strchr("diuxXoceEfFgG", conv)) return pct_number(c, n, b, conv, flags, width, prec, v);
    return jerr(c, n, "unsupported format character '%c'", conv);
}

int jstr_format_percent(jctx *c, const jnode *n, jv fmtv, jv args, jv *out)
{
    const jstr *fmt = fmtv.s;
    pct_args pa = {0};
    if (args.k == JV_LIST && args.l->tuple) {
        pa.args = args.l->v;
        pa.nargs = args.l->n;
    } else {
        pa.args = &args;
        pa.nargs = 1;
        if (args.k == JV_DICT && !args.d->ns) pa.map = args.d;
    }
    jbuf b = {.max = c->lim.max_output};
    for (size_t i = 0; i < fmt->len;) {
        const char *p = memchr(fmt->s + i, '%', fmt->len - i);
        size_t run = p ? (size_t)(p - fmt->s) - i : fmt->len - i;
        jbuf_put(&b, fmt->s + i, run);
        i += run;
        if (i >= fmt->len) break;
        i++;
        if (pct_one(c, n, fmt, &i, &pa, &b, fmtv.uk)) {
            jbuf_free(&b);
            return -1;
        }
    }
    if (!pa.map && pa.next < pa.nargs) {
        jbuf_free(&b);
        return jerr(c, n, "not all arguments converted during string formatting");
    }
    if (jmake_str(c, n, &b, out)) return -1;
    out->uk = fmtv.uk;
    return 0;
}

/* ---- dict, list and loop methods ----------------------------------------- */

M(m_get)
{
    UNUSED_CTX;
    const jv *v = jdict_get(self.d, a->p[0]);
    *out = v ? jv_ref(*v) : a->p[1].k == JV_UNDEF ? jv_none() : jv_ref(a->p[1]);
    return 0;
}

static int dict_view(jctx *c, const jnode *n, jv self, int which, jv *out)
{
    const jdict *d = self.d;
    jlist *l = jnew_list(c, n, d->n);
    if (!l) return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (which != 2) {
            jv v = which == 0 ? jv_ref(d->k[i]) : jv_ref(d->v[i]);
            jlist_push(l, v);
            continue;
        }
        jlist *t = jlist_new(2);
        if (!t) {
            jv_drop((jv){.k = JV_LIST, .l = l});
            return jerr(c, n, "out of memory");
        }
        t->tuple = true;
        jlist_push(t, jv_ref(d->k[i]));
        jlist_push(t, jv_ref(d->v[i]));
        jlist_push(l, (jv){.k = JV_LIST, .l = t});
    }
    *out = (jv){.k = JV_LIST, .l = l};
    return jcharge(c, n, d->n);
}

M(m_keys) { (void)a; return dict_view(c, n, self, 0, out); }
M(m_values) { (void)a; return dict_view(c, n, self, 1, out); }
M(m_items) { (void)a; return dict_view(c, n, self, 2, out); }

M(m_dict_copy)
{
    (void)a;
    jdict *d = jdict_new();
    if (!d) return jerr(c, n, "out of memory");
    for (size_t i = 0; i < self.d->n; i++) jdict_set(d, jv_ref(self.d->k[i]), jv_ref(self.d->v[i]));
    *out = (jv){.k = JV_DICT, .d = d};
    return 0;
}

M(m_list_count)
{
    UNUSED_CTX;
    int64_t k = 0;
    for (size_t i = 0; i < self.l->n; i++) k += jv_eq(self.l->v[i], a->p[0]);
    *out = jv_int(k);
    return 0;
}

M(m_list_index)
{
    for (size_t i = 0; i < self.l->n; i++) {
        if (jv_eq(self.l->v[i], a->p[0])) {
            *out = jv_int((int64_t)i);
            return 0;
        }
    }
    return jerr(c, n, "list.index(x): x not in list");
}

M(m_list_copy)
{
    (void)a;
    jlist *l = jnew_list(c, n, self.l->n);
    if (!l) return -1;
    for (size_t i = 0; i < self.l->n; i++) jlist_push(l, jv_ref(self.l->v[i]));
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

M(m_unsafe)
{
    (void)self;
    (void)a;
    (void)out;
    return jerr(c, n, "the immutable sandbox refuses to change lists and dicts");
}

M(m_cycle)
{
    if (!a->nrest) return jerr(c, n, "no items for cycling given");
    const jloop *L = self.fn->loop;
    *out = jv_ref(a->rest[L->i % a->nrest]);
    return 0;
}

M(m_changed)
{
    jloop *L = self.fn->loop;
    jlist *now = jnew_list(c, n, a->nrest);
    if (!now) return -1;
    for (size_t i = 0; i < a->nrest; i++) jlist_push(now, jv_ref(a->rest[i]));
    jv nv = {.k = JV_LIST, .l = now};
    bool changed = !L->has_changed || !jv_eq(nv, L->changed);
    jv_drop(L->changed);
    L->changed = nv;
    L->has_changed = true;
    *out = jv_bool(changed);
    return 0;
}

static const jbuiltin str_methods[] = {
    {"capitalize", m_capitalize, "", JB_MARKUP}, {"center", m_center, "width fillchar", JB_MARKUP},
    {"count", m_count, "sub start end", 0}, {"endswith", m_endswith, "suffix start end", 0},
    {"find", m_find, "sub start end", 0}, {"format", m_format, "*", JB_KWARGS},
    {"index", m_index, "sub start end", 0}, {"isalnum", m_isalnum, "", 0},
    {"isalpha", m_isalpha, "", 0}, {"isascii", m_isascii, "", 0}, {"isdecimal", m_isdigit, "", 0},
    {"isdigit", m_isdigit, "", 0}, {"islower", m_islower, "", 0}, {"isnumeric", m_isnumeric, "", 0},
    {"isspace", m_isspace, "", 0}, {"isupper", m_isupper, "", 0}, {"join", m_join, "iterable", 0},
    {"ljust", m_ljust, "width fillchar", JB_MARKUP}, {"lower", m_lower, "", JB_MARKUP}, {"lstrip", m_lstrip, "chars", JB_MARKUP},
    {"partition", m_partition, "sep", 0}, {"removeprefix", m_removeprefix, "prefix", 0},
    {"removesuffix", m_removesuffix, "suffix", 0}, {"replace", m_replace, "old new count", JB_MARKUP},
    {"rfind", m_rfind, "sub start end", 0}, {"rindex", m_rindex, "sub start end", 0},
    {"rjust", m_rjust, "width fillchar", JB_MARKUP}, {"rpartition", m_rpartition, "sep", 0},
    {"rsplit", m_rsplit, "sep maxsplit", 0}, {"rstrip", m_rstrip, "chars", JB_MARKUP},
    {"split", m_split, "sep maxsplit", 0}, {"splitlines", m_splitlines, "keepends", 0},
    {"startswith", m_startswith, "prefix start end", 0}, {"strip", m_strip, "chars", JB_MARKUP},
    {"swapcase", m_swapcase, "", JB_MARKUP},
    {"title", m_title, "", JB_MARKUP}, {"upper", m_upper, "", JB_MARKUP}, {"zfill", m_zfill, "width", JB_MARKUP},
};
static const char *const str_unimpl[] = {
    "casefold", "encode", "expandtabs", "format_map", "isidentifier", "isprintable", "istitle", "maketrans",
    "translate", NULL,
};

static const jbuiltin dict_methods[] = {
    {"clear", m_unsafe, "*", JB_UNSAFE}, {"copy", m_dict_copy, "", 0}, {"get", m_get, "key default", 0},
    {"items", m_items, "", 0}, {"keys", m_keys, "", 0}, {"pop", m_unsafe, "*", JB_UNSAFE},
    {"popitem", m_unsafe, "*", JB_UNSAFE}, {"setdefault", m_unsafe, "*", JB_UNSAFE},
    {"update", m_unsafe, "*", JB_UNSAFE}, {"values", m_values, "", 0},
};
static const char *const dict_unimpl[] = {"fromkeys", NULL};

static const jbuiltin list_methods[] = {
    {"append", m_unsafe, "*", JB_UNSAFE}, {"clear", m_unsafe, "*", JB_UNSAFE}, {"copy", m_list_copy, "", 0},
    {"count", m_list_count, "value", 0}, {"extend", m_unsafe, "*", JB_UNSAFE}, {"index", m_list_index, "value", 0},
    {"insert", m_unsafe, "*", JB_UNSAFE}, {"pop", m_unsafe, "*", JB_UNSAFE}, {"remove", m_unsafe, "*", JB_UNSAFE},
    {"reverse", m_unsafe, "*", JB_UNSAFE}, {"sort", m_unsafe, "*", JB_UNSAFE},
};
static const jbuiltin tuple_methods[] = {
    {"count", m_list_count, "value", 0}, {"index", m_list_index, "value", 0},
};
static const jbuiltin loop_methods[] = {
    {"changed", m_changed, "*", 0}, {"cycle", m_cycle, "*", 0},
};

static const jbuiltin *find_in(const jbuiltin *tab, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(tab[i].name) == len && !memcmp(tab[i].name, name, len)) return &tab[i];
    return NULL;
}

static bool listed(const char *const *names, const char *name, size_t len)
{
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == len && !memcmp(names[i], name, len)) return true;
    return false;
}

#define FIND(tab) find_in(tab, sizeof tab / sizeof tab[0], name, len)

const jbuiltin *jfind_method(jv self, const char *name, size_t len, bool *known)
{
    *known = false;
    switch (self.k) {
    case JV_STR:
        *known = listed(str_unimpl, name, len);
        return FIND(str_methods);
    case JV_DICT:
        if (self.d->ns) return NULL;
        *known = listed(dict_unimpl, name, len);
        return FIND(dict_methods);
    case JV_LIST:
        if (self.l->gen) return NULL;
        return self.l->tuple ? FIND(tuple_methods) : FIND(list_methods);
    case JV_FUNC:
        return self.fn->kind == JF_LOOP ? FIND(loop_methods) : NULL;
    default:
        return NULL;
    }
}

static int call_named(jctx *c, const jnode *n, const jbuiltin *b, jv self, const jv *args, size_t nargs, jv *out)
{
    jargs a = {.pos = (jv *)args, .npos = nargs};
    return jcall_builtin(c, n, b, self, &a, out);
}

int jstr_method(jctx *c, const jnode *n, jv self, const char *name, const jv *args, size_t nargs, jv *out)
{
    jv s;
    if (jto_str(c, n, self, &s)) return -1;
    const jbuiltin *b = find_in(str_methods, sizeof str_methods / sizeof str_methods[0], name, strlen(name));
    int rc = call_named(c, n, b, s, args, nargs, out);
    jv_drop(s);
    return rc;
}

int jdict_method(jctx *c, const jnode *n, jv self, const char *name, const jv *args, size_t nargs, jv *out)
{
    const jbuiltin *b = find_in(dict_methods, sizeof dict_methods / sizeof dict_methods[0], name, strlen(name));
    return call_named(c, n, b, self, args, nargs, out);
}

/* ---- attribute paths and sorting ------------------------------------------ */

int jattr_path(jctx *c, const jnode *n, jv item, jv attr, jv *out)
{
    if (attr.k != JV_STR) return jgetitem(c, n, item, attr, out);
    jv cur = jv_ref(item);
    const char *p = attr.s->s, *end = p + attr.s->len;
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        jv key, r;
        bool digits = len > 0;
        for (size_t i = 0; i < len; i++) digits = digits && p[i] >= '0' && p[i] <= '9';
        key = digits && len < 18 ? jv_int(strtoll(p, NULL, 10)) : jv_str(p, len);
        if (cur.k == JV_UNDEF) {
            jv_drop(key);
            int rc = jerr_undef(c, n, cur);
            jv_drop(cur);
            return rc;
        }
        int rc = jgetitem(c, n, cur, key, &r);
        jv_drop(key);
        jv_drop(cur);
        if (rc) return -1;
        cur = r;
        if (!dot) break;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

int jsort(jctx *c, const jnode *n, jlist *items, jlist *keys, bool fold_case, bool reverse)
{
    size_t len = items->n;
    if (len == 0) return 0; /* an empty list's storage may be NULL: nothing to copy */
    size_t *idx = malloc(len * sizeof *idx + 1), *tmp = malloc(len * sizeof *tmp + 1);
    int rc = idx && tmp ? 0 : jerr(c, n, "out of memory");
    for (size_t i = 0; i < len && !rc; i++) idx[i] = i;
    /* bottom-up merge sort: stable, and a comparison error stops it */
    for (size_t w = 1; w < len && !rc; w *= 2) {
        for (size_t lo = 0; lo < len && !rc; lo += 2 * w) {
            size_t mid = lo + w < len ? lo + w : len, hi = lo + 2 * w < len ? lo + 2 * w : len;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi && !rc) {
                int o = 0;
                rc = jorder(c, n, keys->v[idx[j]], keys->v[idx[i]], fold_case, &o);
                if (reverse) o = -o;
                tmp[k++] = o < 0 ? idx[j++] : idx[i++];
            }
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
            memcpy(idx + lo, tmp + lo, (hi - lo) * sizeof *idx);
        }
        if (!rc) rc = jcharge(c, n, len);
    }
    if (!rc) {
        jv *v = malloc(len * sizeof *v + 1);
        if (!v) {
            rc = jerr(c, n, "out of memory");
        } else {
            for (size_t i = 0; i < len; i++) v[i] = items->v[idx[i]];
            memcpy(items->v, v, len * sizeof *v);
            free(v);
        }
    }
    free(idx);
    free(tmp);
    return rc;
}

/* ---- globals -------------------------------------------------------------- */

static int g_range(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)self;
    int64_t v[3] = {0, 0, 1};
    if (a->nrest < 1 || a->nrest > 3) return jerr(c, n, "range expected 1 to 3 arguments, got %zu", a->nrest);
    for (size_t i = 0; i < a->nrest; i++)
        if (jarg_int(c, n, a->rest[i], "range() argument", &v[a->nrest == 1 ? 1 : i])) return -1;
    if (!v[2]) return jerr(c, n, "range() arg 3 must not be zero");
    int64_t cnt = 0;
    if (v[2] > 0 && v[1] > v[0]) cnt = (v[1] - v[0] - 1) / v[2] + 1;
    if (v[2] < 0 && v[0] > v[1]) cnt = (v[0] - v[1] - 1) / -v[2] + 1;
    /* Jinja's sandbox refuses ranges above 100000 items */
    if (cnt > 100000) return jerr(c, n, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jlist *l = jnew_list(c, n, (size_t)cnt);
    if (!l) return -1;
    for (int64_t i = 0; i < cnt; i++) jlist_push(l, jv_int(v[0] + i * v[2]));
    *out = (jv){.k = JV_LIST, .l = l};
    return jcharge(c, n, (uint64_t)cnt);
}

/* dict(mapping or pairs, **kwargs) into D. */
static int fill_dict(jctx *c, const jnode *n, jdict *d, const jbound *a)
{
    if (a->nrest > 1) return jerr(c, n, "expected at most 1 positional argument, got %zu", a->nrest);
    if (a->nrest) {
        jv src = a->rest[0];
        if (src.k == JV_UNDEF) return jerr_undef(c, n, src);   /* dict() asks it for .keys */
        if (src.k == JV_DICT && !src.d->ns) {
            for (size_t i = 0; i < src.d->n; i++)
                if (jdict_set(d, jv_ref(src.d->k[i]), jv_ref(src.d->v[i]))) return jerr(c, n, "out of memory");
        } else {
            jlist *it;
            if (jiter(c, n, src, &it)) return -1;
            int rc = 0;
            for (size_t i = 0; i < it->n && !rc; i++) {
                jv p = it->v[i];
                if (p.k != JV_LIST || p.l->gen || p.l->n != 2) rc = jerr(c, n, "dictionary update sequence element #%zu has the wrong length", i);
                else if (jdict_set(d, jv_ref(p.l->v[0]), jv_ref(p.l->v[1]))) rc = jerr(c, n, "out of memory");
            }
            jv_drop((jv){.k = JV_LIST, .l = it});
            if (rc) return -1;
        }
    }
    for (size_t k = 0; k < a->raw->nkw; k++)
        if (jdict_set(d, jv_ref((jv){.k = JV_STR, .s = a->raw->kwn[k]}), jv_ref(a->raw->kwv[k])))
            return jerr(c, n, "out of memory");
    return 0;
}

static int g_dict(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)self;
    jdict *d = jdict_new();
    if (!d) return jerr(c, n, "out of memory");
    *out = (jv){.k = JV_DICT, .d = d};
    return fill_dict(c, n, d, a);
}

static int g_namespace(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)self;
    jdict *d = jnew_ns(c);
    if (!d) return jerr(c, n, "out of memory");
    *out = (jv){.k = JV_DICT, .d = d};
    return fill_dict(c, n, d, a);
}

static int g_raise(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)self;
    (void)out;
    jbuf b = {.max = 600};
    jv_write_str(&b, a->p[0]);
    int rc = jerr(c, n, "raise_exception: %s", b.p ? b.p : "");
    jbuf_free(&b);
    return rc;
}

static int g_strftime_now(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)self;
    if (a->p[0].k != JV_STR) return jerr(c, n, "strftime_now() needs a format string");
    if (a->p[0].s->len > 256 || memchr(a->p[0].s->s, 0, a->p[0].s->len))
        return jerr(c, n, "strftime_now(): bad format string");
    locale_t C = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!C) return jerr(c, n, "out of memory");
    char buf[1024];
    size_t len = strftime_l(buf, sizeof buf, a->p[0].s->s, &c->now, C);
    freelocale(C);
    if (!len && a->p[0].s->len) return jerr(c, n, "strftime_now(): the formatted date is too long");
    return jmake_strn(c, n, buf, len, out);
}

static int g_unsupported(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)self;
    (void)a;
    (void)out;
    return jerr_unsupported(c, n, "unsupported template feature: the global function used here (cycler, joiner, "
                                  "lipsum) is not implemented");
}

static const jbuiltin globals[] = {
    {"cycler", g_unsupported, "*", JB_KWARGS},
    {"dict", g_dict, "*", JB_KWARGS},
    {"joiner", g_unsupported, "*", JB_KWARGS},
    {"lipsum", g_unsupported, "*", JB_KWARGS},
    {"namespace", g_namespace, "*", JB_KWARGS},
    {"raise_exception", g_raise, "message", 0},
    {"range", g_range, "*", 0},
    {"strftime_now", g_strftime_now, "format", 0},
};

const jbuiltin *jfind_global(const char *name, size_t len)
{
    return find_in(globals, sizeof globals / sizeof globals[0], name, len);
}
