/* Filters and tests, with Jinja2's argument names and defaults
 * (jinja2/filters.py, jinja2/tests.py), transformers' tojson, and the
 * argument binder shared with methods and globals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

static bool given(jv v) { return v.k != JV_UNDEF; }

/* ---- argument binding -------------------------------------------------- */

int jbind(jctx *c, const jnode *n, const jbuiltin *b, const jargs *a, jbound *out)
{
    memset(out, 0, sizeof *out);
    out->raw = a;
    const char *names[8];
    size_t lens[8], np = 0;
    bool star = false;
    for (const char *p = b->params; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        if (*p == '*') {
            star = true;
            break;
        }
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (np < 8) {
            names[np] = p;
            lens[np++] = len;
        }
        p += len;
    }
    if (a->npos > np && !star)
        return jerr(c, n, "%s() takes at most %zu argument(s) (%zu given)", b->name, np, a->npos);
    for (size_t i = 0; i < a->npos && i < np; i++) out->p[i] = a->pos[i];
    if (a->npos > np) {
        out->rest = a->pos + np;
        out->nrest = a->npos - np;
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t j = 0;
        while (j < np && !(lens[j] == a->kwn[k]->len && !memcmp(names[j], a->kwn[k]->s, lens[j]))) j++;
        if (j < np) {
            if (j < a->npos) return jerr(c, n, "%s() got multiple values for argument '%s'", b->name, a->kwn[k]->s);
            out->p[j] = a->kwv[k];
        } else if (!(b->flags & JB_KWARGS)) {
            return jerr(c, n, "%s() got an unexpected keyword argument '%s'", b->name, a->kwn[k]->s);
        }
    }
    return 0;
}

int jcall_builtin(jctx *c, const jnode *n, const jbuiltin *b, jv self, const jargs *a, jv *out)
{
    jbound bound;
    if (jbind(c, n, b, a, &bound)) return -1;
    *out = jv_undef();
    int rc = b->fn(c, n, self, &bound, out);
    if (!rc && (b->flags & JB_MARKUP) && self.k == JV_STR && self.uk && out->k == JV_STR) out->uk = 1;
    return rc;
}

void jhtml_escape(jbuf *b, const char *s, size_t len)
{
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        const char *rep = s[i] == '&' ? "&amp;" : s[i] == '<' ? "&lt;" : s[i] == '>' ? "&gt;"
                        : s[i] == '"' ? "&#34;" : s[i] == '\'' ? "&#39;" : NULL;
        if (!rep) {
            run++;
            continue;
        }
        jbuf_put(b, s + i - run, run);
        run = 0;
        jbuf_put(b, rep, strlen(rep));
    }
    jbuf_put(b, s + len - run, run);
}

int japply_filter(jctx *c, const jnode *n, const jbuiltin *f, jv v, const jv *args, size_t nargs, jv *out)
{
    jargs a = {.pos = (jv *)args, .npos = nargs};
    return jcall_builtin(c, n, f, v, &a, out);
}

int japply_test(jctx *c, const jnode *n, const jbuiltin *t, jv v, const jv *args, size_t nargs, bool *res)
{
    jv r;
    if (japply_filter(c, n, t, v, args, nargs, &r)) return -1;
    *res = jv_truthy(r);
    jv_drop(r);
    return 0;
}

/* ---- small helpers ----------------------------------------------------- */

static int text_of(jctx *c, const jnode *n, jv v, jv *out) { return jto_str(c, n, v, out); }

static int new_gen(jctx *c, const jnode *n, jlist *l, jv *out)
{
    (void)c;
    (void)n;
    if (!l) return -1;
    l->gen = true;
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

static int bool_arg(jv v, bool dflt) { return given(v) ? jv_truthy(v) : dflt; }

/* ---- string filters ---------------------------------------------------- */

static int f_upper(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    return jstr_method(c, n, self, "upper", NULL, 0, out);
}

static int f_lower(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    return jstr_method(c, n, self, "lower", NULL, 0, out);
}

static int f_capitalize(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    return jstr_method(c, n, self, "capitalize", NULL, 0, out);
}

static int f_trim(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    return jstr_method(c, n, self, "strip", a->p, given(a->p[0]) ? 1 : 0, out);
}

static int f_center(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jv w = given(a->p[0]) ? a->p[0] : jv_int(80);
    return jstr_method(c, n, self, "center", &w, 1, out);
}

static int f_replace(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jv args[3] = {a->p[0], a->p[1], given(a->p[2]) ? a->p[2] : jv_int(-1)};
    if (!given(args[0]) || !given(args[1])) return jerr(c, n, "replace() needs the old and new strings");
    /* without autoescaping Jinja replaces in str(s): the result is plain */
    jv s;
    if (text_of(c, n, self, &s)) return -1;
    s.uk = 0;
    int rc = jstr_method(c, n, s, "replace", args, 3, out);
    jv_drop(s);
    return rc;
}

/* Jinja's title: a capital after "-", whitespace, "(", "{", "[" or "<". */
static int f_title(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    jv s;
    if (text_of(c, n, self, &s)) return -1;
    jbuf b = {.max = c->lim.max_output};
    bool start = true;
    for (size_t i = 0; i < s.s->len;) {
        uint32_t cp;
        size_t k = ju_decode(s.s->s + i, s.s->len - i, &cp);
        bool boundary = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || ju_isspace(cp);
        if (boundary || (k == 1 && cp >= 0x80)) jbuf_put(&b, s.s->s + i, k);
        else jcase_put(&b, cp, start ? 1 : -1);
        start = boundary;
        i += k;
    }
    jv_drop(s);
    return jmake_str(c, n, &b, out);
}

static int f_escape(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    if (self.k == JV_STR && self.uk) {
        *out = jv_ref(self);
        return 0;
    }
    jv s;
    if (text_of(c, n, self, &s)) return -1;
    jbuf b = {.max = c->lim.max_output};
    jhtml_escape(&b, s.s->s, s.s->len);
    jv_drop(s);
    if (jmake_str(c, n, &b, out)) return -1;
    out->uk = 1;
    return 0;
}

static int f_string(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    return text_of(c, n, self, out);
}

static int f_indent(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jv s, ind;
    if (text_of(c, n, self, &s)) return -1;
    if (a->p[0].k == JV_STR) {
        ind = jv_ref(a->p[0]);
    } else {
        int64_t w = 4;
        if (given(a->p[0]) && jarg_int(c, n, a->p[0], "indent width", &w)) return jv_drop(s), -1;
        jbuf sp = {.max = c->lim.max_output};
        for (int64_t i = 0; i < w && !sp.over; i++) jbuf_putc(&sp, ' ');
        if (jmake_str(c, n, &sp, &ind)) return jv_drop(s), -1;
    }
    bool first = bool_arg(a->p[1], false), blank = bool_arg(a->p[2], false);
    /* Jinja: (s + "\n").splitlines(), lines after the first indented
     * (empty ones only with blank=True), joined with "\n" */
    jbuf t = {.max = c->lim.max_output}, b = {.max = c->lim.max_output};
    jbuf_put(&t, s.s->s, s.s->len);
    jbuf_putc(&t, '\n');
    if (first) jbuf_put(&b, ind.s->s, ind.s->len);
    size_t start = 0, line = 0;
    for (size_t i = 0; i < t.n && !t.over;) {
        size_t e = ju_line_end(t.p, i, t.n);
        if (!e) {
            uint32_t cp;
            i += ju_decode(t.p + i, t.n - i, &cp);
            continue;
        }
        if (line++) {
            jbuf_putc(&b, '\n');
            if (i > start || blank) jbuf_put(&b, ind.s->s, ind.s->len);
        }
        jbuf_put(&b, t.p + start, i - start);
        i += e;
        start = i;
    }
    bool over = t.over;
    jbuf_free(&t);
    jv_drop(s);
    jv_drop(ind);
    if (over) b.over = true;
    return jmake_str(c, n, &b, out);
}

static int f_truncate(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jv s;
    int64_t length = 255, leeway = 5;
    if (given(a->p[0]) && jarg_int(c, n, a->p[0], "length", &length)) return -1;
    if (given(a->p[3]) && jarg_int(c, n, a->p[3], "leeway", &leeway)) return -1;
    jv end = given(a->p[2]) ? a->p[2] : jv_undef();
    if (text_of(c, n, self, &s)) return -1;
    size_t endlen = end.k == JV_STR ? end.s->ncp : 3;
    const char *ends = end.k == JV_STR ? end.s->s : "...";
    size_t endbytes = end.k == JV_STR ? end.s->len : 3;
    if (length < (int64_t)endlen || leeway < 0) {
        jv_drop(s);
        return jerr(c, n, "truncate(): length must be at least the length of the end text, leeway not negative");
    }
    if ((int64_t)s.s->ncp <= length + leeway) {
        *out = s;
        return 0;
    }
    size_t cut = jstr_cp_off(s.s, (size_t)length - endlen);
    if (!bool_arg(a->p[1], false)) {
        size_t sp = cut;
        while (sp > 0 && s.s->s[sp - 1] != ' ') sp--;
        if (sp > 0) cut = sp - 1;
    }
    jbuf b = {.max = c->lim.max_output};
    jbuf_put(&b, s.s->s, cut);
    jbuf_put(&b, ends, endbytes);
    jv_drop(s);
    return jmake_str(c, n, &b, out);
}

static int f_wordcount(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    jv s;
    if (text_of(c, n, self, &s)) return -1;
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < s.s->len;) {
        uint32_t cp;
        i += ju_decode(s.s->s + i, s.s->len - i, &cp);
        bool w = jis_word_char(cp);
        words += w && !in;
        in = w;
    }
    jv_drop(s);
    *out = jv_int(words);
    return 0;
}

static int f_format(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jv s;
    if (text_of(c, n, self, &s)) return -1;
    const jargs *raw = a->raw;
    int rc;
    if (raw->nkw) {
        jdict *d = jdict_new();
        if (!d) return jv_drop(s), jerr(c, n, "out of memory");
        for (size_t i = 0; i < raw->nkw; i++)
            jdict_set(d, jv_ref((jv){.k = JV_STR, .s = raw->kwn[i]}), jv_ref(raw->kwv[i]));
        jv dv = {.k = JV_DICT, .d = d};
        rc = jstr_format_percent(c, n, s, dv, out);
        jv_drop(dv);
    } else {
        jlist *l = jnew_list(c, n, raw->npos);
        if (!l) return jv_drop(s), -1;
        l->tuple = true;
        for (size_t i = 0; i < raw->npos; i++) jlist_push(l, jv_ref(raw->pos[i]));
        jv lv = {.k = JV_LIST, .l = l};
        rc = jstr_format_percent(c, n, s, lv, out);
        jv_drop(lv);
    }
    jv_drop(s);
    return rc;
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False), no HTML escaping. */
static int f_tojson(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jjson_opts o = {.ensure_ascii = bool_arg(a->p[0], false), .sort_keys = bool_arg(a->p[3], false)};
    jv ind = a->p[1], sep = a->p[2];
    char spaces[65] = {0};
    if (ind.k == JV_STR) {
        o.indent = ind.s->s;
    } else if (ind.k == JV_INT || ind.k == JV_BOOL) {
        int64_t w = ind.k == JV_BOOL ? ind.b : ind.i;
        if (w > 64) return jerr(c, n, "tojson(): indent larger than 64 is not supported");
        memset(spaces, ' ', w > 0 ? (size_t)w : 0);
        o.indent = spaces;
    } else if (given(ind) && ind.k != JV_NONE) {
        return jerr(c, n, "tojson(): indent must be an int or a string");
    }
    if (sep.k == JV_LIST && !sep.l->gen && sep.l->n == 2 && sep.l->v[0].k == JV_STR && sep.l->v[1].k == JV_STR) {
        o.item_sep = sep.l->v[0].s->s;
        o.key_sep = sep.l->v[1].s->s;
    } else if (given(sep) && sep.k != JV_NONE) {
        return jerr(c, n, "tojson(): separators must be a pair of strings");
    }
    jbuf b = {.max = c->lim.max_output};
    char why[160];
    if (jv_write_json(&b, self, &o, 0, why, sizeof why)) {
        jbuf_free(&b);
        return jerr(c, n, "tojson: %s", why);
    }
    return jmake_str(c, n, &b, out);
}

/* ---- numbers ------------------------------------------------------------- */

static int f_abs(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    if (self.k == JV_FLOAT) *out = jv_float(fabs(self.f));
    else if (self.k == JV_BOOL) *out = jv_int(self.b);
    else if (self.k == JV_INT && self.i != INT64_MIN) *out = jv_int(self.i < 0 ? -self.i : self.i);
    else return jerr(c, n, "bad operand type for abs(): '%s'", jv_type_name(self));
    return 0;
}

static int f_int(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    int64_t base = 10;
    if (given(a->p[1]) && jarg_int(c, n, a->p[1], "base", &base)) return -1;
    int64_t v;
    int r = jparse_int(self, (int)base, &v);
    double d;
    if (r == -1 && self.k == JV_STR && jparse_float(self, &d) == 0) {
        /* Jinja falls back to int(float(value)) */
        r = jparse_int(jv_float(d), 10, &v);
    }
    if (r == 0) {
        *out = jv_int(v);
        return 0;
    }
    if (r == -2) return jerr(c, n, "cannot convert float infinity or NaN to integer (or it overflows)");
    *out = given(a->p[0]) ? jv_ref(a->p[0]) : jv_int(0);
    return 0;
}

static int f_float(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)c;
    (void)n;
    double d;
    if (jparse_float(self, &d) == 0) *out = jv_float(d);
    else *out = given(a->p[0]) ? jv_ref(a->p[0]) : jv_float(0.0);
    return 0;
}

/* Python's round(x, ndigits): correctly rounded, ties to even. */
static double round_py(double x, int64_t nd)
{
    if (!isfinite(x) || nd > 300) return x;
    if (nd < -300) return copysign(0.0, x);
    char buf[512];
    if (nd >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-nd), y = x / p, r = nearbyint(y);
    if (fabs(y - trunc(y)) == 0.5) r = 2.0 * nearbyint(y / 2.0);
    return r * p;
}

/* round(int, ndigits) stays an int; negative ndigits round half to even. */
static int64_t round_int(int64_t v, int64_t nd)
{
    if (nd >= 0) return v;
    if (nd < -18) return 0;
    int64_t p = 1;
    for (int64_t i = 0; i < -nd; i++) p *= 10;
    int64_t q = v / p, r = v % p;
    if (r < 0) {
        r += p;
        q--;
    }
    if (2 * r > p || (2 * r == p && (q & 1))) q++;
    int64_t out;
    return __builtin_mul_overflow(q, p, &out) ? v : out;
}

static int f_round(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    int64_t prec = 0;
    if (given(a->p[0]) && jarg_int(c, n, a->p[0], "precision", &prec)) return -1;
    const char *method = a->p[1].k == JV_STR ? a->p[1].s->s : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jerr(c, n, "round(): method must be common, ceil or floor");
    if (self.k != JV_INT && self.k != JV_BOOL && self.k != JV_FLOAT) {
        if (self.k == JV_UNDEF) return jerr_undef(c, n, self);
        return jerr(c, n, "type %s doesn't define __round__ method", jv_type_name(self));
    }
    if (!strcmp(method, "common")) {
        if (self.k == JV_FLOAT) *out = jv_float(round_py(self.f, prec));
        else *out = jv_int(round_int(self.k == JV_BOOL ? self.b : self.i, prec));
        return 0;
    }
    double x = self.k == JV_FLOAT ? self.f : self.k == JV_BOOL ? self.b : (double)self.i;
    double p = pow(10.0, (double)prec);
    *out = jv_float((!strcmp(method, "ceil") ? ceil(x * p) : floor(x * p)) / p);
    return 0;
}

/* ---- sequences ------------------------------------------------------------- */

static int f_length(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    switch (self.k) {
    case JV_STR: *out = jv_int((int64_t)self.s->ncp); return 0;
    case JV_LIST: if (self.l->gen) break; *out = jv_int((int64_t)self.l->n); return 0;
    case JV_DICT: if (self.d->ns) break; *out = jv_int((int64_t)self.d->n); return 0;
    case JV_UNDEF: *out = jv_int(0); return 0;
    default: break;
    }
    return jerr(c, n, "object of type '%s' has no len()", jv_type_name(self));
}

static int f_list(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    jlist *l = jnew_list(c, n, it->n);
    if (l)
        for (size_t i = 0; i < it->n; i++) jlist_push(l, jv_ref(it->v[i]));
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (!l) return -1;
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

static int f_first(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    if (self.k == JV_LIST && self.l->gen) {
        *out = self.l->pos < self.l->n ? jv_ref(self.l->v[self.l->pos++]) : jv_undef();
        return 0;
    }
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    *out = it->n ? jv_ref(it->v[0]) : jv_undef_why(JU_MSG, "No first item, sequence was empty.", NULL);
    jv_drop((jv){.k = JV_LIST, .l = it});
    return 0;
}

static int f_last(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    if (self.k == JV_LIST && self.l->gen) return jerr(c, n, "'generator' object is not reversible");
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    *out = it->n ? jv_ref(it->v[it->n - 1]) : jv_undef_why(JU_MSG, "No last item, sequence was empty.", NULL);
    jv_drop((jv){.k = JV_LIST, .l = it});
    return 0;
}

static int f_reverse(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    if (self.k == JV_STR) return jstr_reverse(c, n, self.s, out);
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    jlist *l = jnew_list(c, n, it->n);
    if (l)
        for (size_t i = it->n; i > 0; i--) jlist_push(l, jv_ref(it->v[i - 1]));
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (!l) return -1;
    /* reversed() gives an iterator; a generator is reversed into a list */
    l->gen = !(self.k == JV_LIST && self.l->gen);
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

static int f_join(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    jv sep = jv_undef();
    int rc = given(a->p[0]) ? text_of(c, n, a->p[0], &sep) : 0;
    jbuf b = {.max = c->lim.max_output};
    for (size_t i = 0; i < it->n && !rc; i++) {
        jv item = jv_ref(it->v[i]);
        if (given(a->p[1])) {
            jv v;
            rc = jattr_path(c, n, item, a->p[1], &v);
            jv_drop(item);
            item = rc ? jv_undef() : v;
        }
        if (i && sep.k == JV_STR) jbuf_put(&b, sep.s->s, sep.s->len);
        jv_write_str(&b, item);
        jv_drop(item);
    }
    jv_drop(sep);
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (rc) {
        jbuf_free(&b);
        return -1;
    }
    return jmake_str(c, n, &b, out);
}

static int f_items(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    if (self.k == JV_UNDEF) {
        jlist *l = jnew_list(c, n, 0);
        return l ? new_gen(c, n, l, out) : -1;
    }
    if (self.k != JV_DICT || self.d->ns) return jerr(c, n, "Can only get item pairs from a mapping.");
    if (jdict_method(c, n, self, "items", NULL, 0, out)) return -1;
    out->l->gen = true;
    return 0;
}

/* Sort key: the item, an attribute of it, case-folded unless asked not to. */
static int sort_key(jctx *c, const jnode *n, jv item, jv attr, jv *out)
{
    if (given(attr) && attr.k != JV_NONE) return jattr_path(c, n, item, attr, out);
    *out = jv_ref(item);
    return 0;
}

static int f_sort(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    jlist *l = jnew_list(c, n, it->n), *keys = jnew_list(c, n, it->n);
    int rc = l && keys ? 0 : -1;
    for (size_t i = 0; !rc && i < it->n; i++) {
        jv k;
        rc = sort_key(c, n, it->v[i], a->p[2], &k);
        if (!rc) {
            jlist_push(keys, k);
            jlist_push(l, jv_ref(it->v[i]));
        }
    }
    if (!rc) rc = jsort(c, n, l, keys, !bool_arg(a->p[1], false), bool_arg(a->p[0], false));
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (keys) jv_drop((jv){.k = JV_LIST, .l = keys});
    if (rc) {
        if (l) jv_drop((jv){.k = JV_LIST, .l = l});
        return -1;
    }
    *out = (jv){.k = JV_LIST, .l = l};
    return 0;
}

static int f_dictsort(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    if (self.k != JV_DICT || self.d->ns) return jerr(c, n, "dictsort(): a mapping is needed");
    const char *by = a->p[1].k == JV_STR ? a->p[1].s->s : "key";
    int pos = !strcmp(by, "key") ? 0 : !strcmp(by, "value") ? 1 : -1;
    if (pos < 0) return jerr(c, n, "You can only sort by either \"key\" or \"value\"");
    jv items;
    if (jdict_method(c, n, self, "items", NULL, 0, &items)) return -1;
    jlist *keys = jnew_list(c, n, items.l->n);
    int rc = keys ? 0 : -1;
    for (size_t i = 0; !rc && i < items.l->n; i++) jlist_push(keys, jv_ref(items.l->v[i].l->v[pos]));
    if (!rc) rc = jsort(c, n, items.l, keys, !bool_arg(a->p[0], false), bool_arg(a->p[2], false));
    if (keys) jv_drop((jv){.k = JV_LIST, .l = keys});
    if (rc) {
        jv_drop(items);
        return -1;
    }
    *out = items;
    return 0;
}

static int f_unique(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    jlist *l = jnew_list(c, n, it->n), *seen = jnew_list(c, n, it->n);
    bool fold = !bool_arg(a->p[0], false);
    int rc = l && seen ? 0 : -1;
    for (size_t i = 0; !rc && i < it->n; i++) {
        jv k;
        rc = sort_key(c, n, it->v[i], a->p[1], &k);
        if (!rc && fold && k.k == JV_STR) {
            jstr *low = jstr_lower(k.s);
            jv_drop(k);
            k = jv_str_take(low);
        }
        bool dup = false;
        for (size_t j = 0; !rc && j < seen->n && !dup; j++) dup = jv_eq(seen->v[j], k);
        if (!rc) rc = jcharge(c, n, seen->n / 16);
        if (rc || dup) {
            jv_drop(k);
            continue;
        }
        jlist_push(seen, k);
        jlist_push(l, jv_ref(it->v[i]));
    }
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (seen) jv_drop((jv){.k = JV_LIST, .l = seen});
    if (rc) {
        if (l) jv_drop((jv){.k = JV_LIST, .l = l});
        return -1;
    }
    return new_gen(c, n, l, out);
}

static int minmax(jctx *c, const jnode *n, jv self, const jbound *a, jv *out, int want)
{
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    bool fold = !bool_arg(a->p[0], false);
    jv best = jv_undef(), bestk = jv_undef();
    int rc = 0;
    for (size_t i = 0; i < it->n && !rc; i++) {
        jv k;
        int o = 0;
        rc = sort_key(c, n, it->v[i], a->p[1], &k);
        if (!rc && i) rc = jorder(c, n, k, bestk, fold, &o);
        if (!rc && (i == 0 || o == want)) {
            jv_drop(best);
            jv_drop(bestk);
            best = jv_ref(it->v[i]);
            bestk = k;
        } else {
            jv_drop(k);
        }
    }
    jv_drop(bestk);
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (rc) {
        jv_drop(best);
        return -1;
    }
    *out = it->n ? best : jv_undef_why(JU_MSG, "No aggregated item, sequence was empty.", NULL);
    return 0;
}

static int f_max(jctx *c, const jnode *n, jv self, const jbound *a, jv *out) { return minmax(c, n, self, a, out, 1); }
static int f_min(jctx *c, const jnode *n, jv self, const jbound *a, jv *out) { return minmax(c, n, self, a, out, -1); }

static int f_sum(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    jlist *it;
    if (jiter(c, n, self, &it)) return -1;
    jv acc = given(a->p[1]) ? jv_ref(a->p[1]) : jv_int(0);
    int rc = 0;
    for (size_t i = 0; i < it->n && !rc; i++) {
        jv k, r;
        rc = sort_key(c, n, it->v[i], a->p[0], &k);
        if (!rc) rc = jbinop(c, n, OP_ADD, acc, k, &r);
        if (!rc) {
            jv_drop(acc);
            acc = r;
        }
        jv_drop(k);
    }
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (rc) {
        jv_drop(acc);
        return -1;
    }
    *out = acc;
    return 0;
}

static int f_default(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)c;
    (void)n;
    bool use = self.k == JV_UNDEF || (bool_arg(a->p[1], false) && !jv_truthy(self));
    if (!use) *out = jv_ref(self);
    else *out = given(a->p[0]) ? jv_ref(a->p[0]) : jv_str("", 0);
    return 0;
}

static int f_safe(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    (void)a;
    if (text_of(c, n, self, out)) return -1;
    out->uk = 1;
    return 0;
}

static int f_attr(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    if (a->p[0].k != JV_STR) return jerr(c, n, "attr(): the attribute name must be a string");
    if (self.k == JV_DICT && !self.d->ns && !jfind_method(self, a->p[0].s->s, a->p[0].s->len, &(bool){0})) {
        *out = jv_ref(jv_undef_why(JU_ATTR, "'dict object'", a->p[0].s));
        return 0;
    }
    if (self.k == JV_UNDEF) return jerr_undef(c, n, self);
    return jgetattr(c, n, self, a->p[0].s, out);
}

/* map(attribute=..., default=...) or map('filter', args...) */
static int f_map(jctx *c, const jnode *n, jv self, const jbound *a, jv *out)
{
    const jargs *raw = a->raw;
    jv attr = jv_undef(), dflt = jv_undef();
    for (size_t k = 0; k < raw->nkw; k++) {
        if (!strcmp(raw->kwn[k]->s, "attribute")) attr = raw->kwv[k];
        else if (!strcmp(raw->kwn[k]->s, "default")) dflt = raw->kwv[k];
        else return jerr(c, n, "map(): unexpected keyword argument '%s'", raw->kwn[k]->s);
    }
    const jbuiltin *f = NULL;
    if (!given(attr)) {
        if (!raw->npos || raw->pos[0].k != JV_STR) return jerr(c, n, "map() needs a filter name or attribute=");
        f = jfind_filter(raw->pos[0].s->s, raw->pos[0].s->len);
        if (!f) return jerr_unsupported(c, n, "unsupported template feature: filter '%s' in map()", raw->pos[0].s->s);
    }
    jlist *it;
    /* Jinja maps nothing over a false value (None included) */
    if (!jv_truthy(self)) return new_gen(c, n, jnew_list(c, n, 0), out);
    if (jiter(c, n, self, &it)) return -1;
    jlist *l = jnew_list(c, n, it->n);
    int rc = l ? 0 : -1;
    for (size_t i = 0; i < it->n && !rc; i++) {
        jv v;
        if (f) {
            rc = japply_filter(c, n, f, it->v[i], raw->pos + 1, raw->npos - 1, &v);
        } else {
            rc = jattr_path(c, n, it->v[i], attr, &v);
            if (!rc && v.k == JV_UNDEF && given(dflt)) {
                jv_drop(v);
                v = jv_ref(dflt);
            }
        }
        if (!rc) jlist_push(l, v);
    }
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (rc) {
        if (l) jv_drop((jv){.k = JV_LIST, .l = l});
        return -1;
    }
    return new_gen(c, n, l, out);
}

/* select / reject / selectattr / rejectattr */
static int select_common(jctx *c, const jnode *n, jv self, const jbound *a, jv *out, bool by_attr, bool keep)
{
    const jargs *raw = a->raw;
    size_t ai = 0;
    jv attr = jv_undef();
    if (by_attr) {
        if (!raw->npos) return jerr(c, n, "selectattr()/rejectattr() need an attribute name");
        attr = raw->pos[ai++];
    }
    const jbuiltin *t = NULL;
    if (ai < raw->npos) {
        if (raw->pos[ai].k != JV_STR) return jerr(c, n, "the test name must be a string");
        t = jfind_test(raw->pos[ai].s->s, raw->pos[ai].s->len);
        if (!t) return jerr_unsupported(c, n, "unsupported template feature: test '%s'", raw->pos[ai].s->s);
        ai++;
    }
    jlist *it;
    if (!jv_truthy(self)) return new_gen(c, n, jnew_list(c, n, 0), out);
    if (jiter(c, n, self, &it)) return -1;
    jlist *l = jnew_list(c, n, it->n);
    int rc = l ? 0 : -1;
    for (size_t i = 0; i < it->n && !rc; i++) {
        jv v = jv_undef();
        bool yes = false;
        rc = by_attr ? jattr_path(c, n, it->v[i], attr, &v) : (v = jv_ref(it->v[i]), 0);
        if (!rc && t) rc = japply_test(c, n, t, v, raw->pos + ai, raw->npos - ai, &yes);
        else if (!rc) yes = jv_truthy(v);
        jv_drop(v);
        if (!rc && yes == keep) jlist_push(l, jv_ref(it->v[i]));
    }
    jv_drop((jv){.k = JV_LIST, .l = it});
    if (rc) {
        if (l) jv_drop((jv){.k = JV_LIST, .l = l});
        return -1;
    }
    return new_gen(c, n, l, out);
}

static int f_select(jctx *c, const jnode *n, jv s, const jbound *a, jv *o) { return select_common(c, n, s, a, o, false, true); }
static int f_reject(jctx *c, const jnode *n, jv s, const jbound *a, jv *o) { return select_common(c, n, s, a, o, false, false); }
static int f_selectattr(jctx *c, const jnode *n, jv s, const jbound *a, jv *o) { return select_common(c, n, s, a, o, true, true); }
static int f_rejectattr(jctx *c, const jnode *n, jv s, const jbound *a, jv *o) { return select_common(c, n, s, a, o, true, false); }

static const jbuiltin filters[] = {
    {"abs", f_abs, "", 0},
    {"attr", f_attr, "name", 0},
    {"capitalize", f_capitalize, "", JB_MARKUP},
    {"center", f_center, "width", JB_MARKUP},
    {"count", f_length, "", 0},
    {"d", f_default, "default_value boolean", 0},
    {"default", f_default, "default_value boolean", 0},
    {"dictsort", f_dictsort, "case_sensitive by reverse", 0},
    {"e", f_escape, "", 0},
    {"escape", f_escape, "", 0},
    {"first", f_first, "", 0},
    {"float", f_float, "default", 0},
    {"format", f_format, "*", JB_KWARGS},
    {"indent", f_indent, "width first blank", JB_MARKUP},
    {"int", f_int, "default base", 0},
    {"items", f_items, "", 0},
    {"join", f_join, "d attribute", 0},
    {"last", f_last, "", 0},
    {"length", f_length, "", 0},
    {"list", f_list, "", 0},
    {"lower", f_lower, "", JB_MARKUP},
    {"map", f_map, "*", JB_KWARGS},
    {"max", f_max, "case_sensitive attribute", 0},
    {"min", f_min, "case_sensitive attribute", 0},
    {"reject", f_reject, "*", 0},
    {"rejectattr", f_rejectattr, "*", 0},
    {"replace", f_replace, "old new count", 0},
    {"reverse", f_reverse, "", 0},
    {"round", f_round, "precision method", 0},
    {"safe", f_safe, "", 0},
    {"select", f_select, "*", 0},
    {"selectattr", f_selectattr, "*", 0},
    {"sort", f_sort, "reverse case_sensitive attribute", 0},
    {"string", f_string, "", JB_MARKUP},
    {"sum", f_sum, "attribute start", 0},
    {"title", f_title, "", 0},
    {"tojson", f_tojson, "ensure_ascii indent separators sort_keys", 0},
    {"trim", f_trim, "chars", JB_MARKUP},
    {"truncate", f_truncate, "length killwords end leeway", 0},
    {"unique", f_unique, "case_sensitive attribute", 0},
    {"upper", f_upper, "", JB_MARKUP},
    {"wordcount", f_wordcount, "", 0},
};

/* ---- tests ---------------------------------------------------------------- */

#define TEST(name, expr)                                                            \
    static int t_##name(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)    \
    {                                                                               \
        (void)c;                                                                    \
        (void)n;                                                                    \
        (void)a;                                                                    \
        (void)v;                                                                    \
        *out = jv_bool(expr);                                                       \
        return 0;                                                                   \
    }

TEST(defined, v.k != JV_UNDEF)
TEST(undefined, v.k == JV_UNDEF)
TEST(none, v.k == JV_NONE)
TEST(boolean, v.k == JV_BOOL)
TEST(true, v.k == JV_BOOL && v.b)
TEST(false, v.k == JV_BOOL && !v.b)
TEST(number, v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL)
TEST(integer, v.k == JV_INT)
TEST(float, v.k == JV_FLOAT)
TEST(string, v.k == JV_STR)
TEST(mapping, v.k == JV_DICT && !v.d->ns)
/* Jinja's Undefined has __len__, __getitem__, __iter__ and __call__, so it
 * passes the sequence, iterable and callable tests. */
TEST(sequence, v.k == JV_STR || (v.k == JV_LIST && !v.l->gen) || (v.k == JV_DICT && !v.d->ns) || v.k == JV_UNDEF)
TEST(iterable, v.k == JV_STR || v.k == JV_LIST || (v.k == JV_DICT && !v.d->ns) || v.k == JV_UNDEF)
TEST(callable, (v.k == JV_FUNC && v.fn->kind != JF_LOOP) || v.k == JV_UNDEF)
TEST(escaped, false)

static int case_test(jctx *c, const jnode *n, jv v, jv *out, const char *method)
{
    jv s, r;
    if (jto_str(c, n, v, &s)) return -1;
    int rc = jstr_method(c, n, s, method, NULL, 0, &r);
    jv_drop(s);
    if (!rc) *out = r;
    return rc;
}

static int t_lower(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    (void)a;
    return case_test(c, n, v, out, "islower");
}

static int t_upper(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    (void)a;
    return case_test(c, n, v, out, "isupper");
}

static int divisible(jctx *c, const jnode *n, jv v, jv by, jv *out)
{
    jv r;
    if (jbinop(c, n, OP_MOD, v, by, &r)) return -1;
    *out = jv_bool(jv_eq(r, jv_int(0)));
    jv_drop(r);
    return 0;
}

static int t_even(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    (void)a;
    return divisible(c, n, v, jv_int(2), out);
}

static int t_odd(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    (void)a;
    if (divisible(c, n, v, jv_int(2), out)) return -1;
    out->b = !out->b;
    return 0;
}

static int t_divisibleby(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    return divisible(c, n, v, a->p[0], out);
}

static int cmp_test(jctx *c, const jnode *n, jv v, const jbound *a, jv *out, int op)
{
    bool r;
    if (jcompare(c, n, op, v, a->p[0], &r)) return -1;
    *out = jv_bool(r);
    return 0;
}

static int t_eq(jctx *c, const jnode *n, jv v, const jbound *a, jv *o) { return cmp_test(c, n, v, a, o, OP_EQ); }
static int t_ne(jctx *c, const jnode *n, jv v, const jbound *a, jv *o) { return cmp_test(c, n, v, a, o, OP_NE); }
static int t_lt(jctx *c, const jnode *n, jv v, const jbound *a, jv *o) { return cmp_test(c, n, v, a, o, OP_LT); }
static int t_le(jctx *c, const jnode *n, jv v, const jbound *a, jv *o) { return cmp_test(c, n, v, a, o, OP_LE); }
static int t_gt(jctx *c, const jnode *n, jv v, const jbound *a, jv *o) { return cmp_test(c, n, v, a, o, OP_GT); }
static int t_ge(jctx *c, const jnode *n, jv v, const jbound *a, jv *o) { return cmp_test(c, n, v, a, o, OP_GE); }
static int t_in(jctx *c, const jnode *n, jv v, const jbound *a, jv *o) { return cmp_test(c, n, v, a, o, OP_IN); }

static int t_sameas(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    (void)c;
    (void)n;
    jv w = a->p[0];
    bool same = v.k == w.k;
    if (same) {
        switch (v.k) {
        case JV_NONE: case JV_UNDEF: break;
        case JV_BOOL: same = v.b == w.b; break;
        case JV_INT: same = v.i == w.i; break;
        case JV_FLOAT: same = false; break;
        case JV_STR: same = v.s == w.s; break;
        case JV_LIST: same = v.l == w.l; break;
        case JV_DICT: same = v.d == w.d; break;
        default: same = v.fn == w.fn;
        }
    }
    *out = jv_bool(same);
    return 0;
}

static int t_filter(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    (void)c;
    (void)n;
    (void)a;
    *out = jv_bool(v.k == JV_STR && jfind_filter(v.s->s, v.s->len));
    return 0;
}

static int t_test(jctx *c, const jnode *n, jv v, const jbound *a, jv *out)
{
    (void)c;
    (void)n;
    (void)a;
    *out = jv_bool(v.k == JV_STR && jfind_test(v.s->s, v.s->len));
    return 0;
}

static const jbuiltin tests[] = {
    {"!=", t_ne, "other", 0},
    {"<", t_lt, "other", 0},
    {"<=", t_le, "other", 0},
    {"==", t_eq, "other", 0},
    {">", t_gt, "other", 0},
    {">=", t_ge, "other", 0},
    {"boolean", t_boolean, "", 0},
    {"callable", t_callable, "", 0},
    {"defined", t_defined, "", 0},
    {"divisibleby", t_divisibleby, "num", 0},
    {"eq", t_eq, "other", 0},
    {"equalto", t_eq, "other", 0},
    {"escaped", t_escaped, "", 0},
    {"even", t_even, "", 0},
    {"false", t_false, "", 0},
    {"filter", t_filter, "", 0},
    {"float", t_float, "", 0},
    {"ge", t_ge, "other", 0},
    {"greaterthan", t_gt, "other", 0},
    {"gt", t_gt, "other", 0},
    {"in", t_in, "seq", 0},
    {"integer", t_integer, "", 0},
    {"iterable", t_iterable, "", 0},
    {"le", t_le, "other", 0},
    {"lessthan", t_lt, "other", 0},
    {"lower", t_lower, "", 0},
    {"lt", t_lt, "other", 0},
    {"mapping", t_mapping, "", 0},
    {"ne", t_ne, "other", 0},
    {"none", t_none, "", 0},
    {"number", t_number, "", 0},
    {"odd", t_odd, "", 0},
    {"sameas", t_sameas, "other", 0},
    {"sequence", t_sequence, "", 0},
    {"string", t_string, "", 0},
    {"test", t_test, "", 0},
    {"true", t_true, "", 0},
    {"undefined", t_undefined, "", 0},
    {"upper", t_upper, "", 0},
};

static const jbuiltin *find(const jbuiltin *tab, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(tab[i].name) == len && !memcmp(tab[i].name, name, len)) return &tab[i];
    return NULL;
}

const jbuiltin *jfind_filter(const char *name, size_t len)
{
    return find(filters, sizeof filters / sizeof filters[0], name, len);
}

const jbuiltin *jfind_test(const char *name, size_t len)
{
    return find(tests, sizeof tests / sizeof tests[0], name, len);
}
