/* Evaluator: walks the AST with Jinja2's scoping (a for-loop iteration, a
 * macro call and a with-block each get a fresh scope whose parent is where
 * they were written; if-blocks share their parent's), Python operator
 * semantics and the sandbox's attribute rules.  Every recursion is counted
 * against max_depth and every node, loop turn and copied byte against
 * max_steps, so a hostile template fails with a message instead of hanging
 * or exhausting memory. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

enum { X_OK = 0, X_ERR = -1, X_BREAK = 1, X_CONTINUE = 2 };

static int eval(jctx *c, const jnode *n, jv *out);
static int exec_body(jctx *c, jnode *const *v, uint32_t n);

/* ---- errors and budgets ------------------------------------------------ */

static int verr(jctx *c, int rc, const jnode *n, const char *fmt, va_list ap)
{
    if (c->status) return -1;
    c->status = rc;
    int line, col;
    jinja_linecol(c->t->src, c->t->len, n ? n->pos : 0, &line, &col);
    char msg[900];
    vsnprintf(msg, sizeof msg, fmt, ap);
    sl_errf(c->err, "line %d, column %d: %s", line, col, msg);
    return -1;
}

int jerr(jctx *c, const jnode *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verr(c, -1, n, fmt, ap);
    va_end(ap);
    return -1;
}

int jerr_unsupported(jctx *c, const jnode *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verr(c, JINJA_UNSUPPORTED, n, fmt, ap);
    va_end(ap);
    return -1;
}

int jerr_undef(jctx *c, const jnode *n, jv u)
{
    char tmp[512];
    jbuf b = {.p = NULL, .max = sizeof tmp - 1};
    jv_undef_message(&b, u);
    snprintf(tmp, sizeof tmp, "%s", b.p ? b.p : "undefined value");
    jbuf_free(&b);
    if (u.uk == JU_UNIMPL) return jerr_unsupported(c, n, "%s", tmp);
    return jerr(c, n, "%s", tmp);
}

int jcharge(jctx *c, const jnode *n, uint64_t steps)
{
    c->steps += steps;
    if (c->steps <= c->lim.max_steps) return 0;
    return jerr(c, n, "template exceeded its budget of %llu evaluation steps (endless loop?)",
                (unsigned long long)c->lim.max_steps);
}

int jmake_strn(jctx *c, const jnode *n, const char *s, size_t len, jv *out)
{
    if (len > c->lim.max_output) return jerr(c, n, "string of %zu bytes exceeds the output limit", len);
    if (jcharge(c, n, len / 64)) return -1;
    *out = jv_str(s ? s : "", len);
    return out->k == JV_STR ? 0 : jerr(c, n, "out of memory");
}

int jmake_str(jctx *c, const jnode *n, jbuf *b, jv *out)
{
    if (b->over) {
        bool oom = b->oom;
        jbuf_free(b);
        return jerr(c, n, oom ? "out of memory" : "string exceeds the output limit of %zu bytes", c->lim.max_output);
    }
    int rc = jmake_strn(c, n, b->p, b->n, out);
    jbuf_free(b);
    return rc;
}

jlist *jnew_list(jctx *c, const jnode *n, size_t cap)
{
    if (cap > c->lim.max_items) {
        jerr(c, n, "list of %zu items exceeds the limit of %zu", cap, c->lim.max_items);
        return NULL;
    }
    jlist *l = jlist_new(cap);
    if (!l) jerr(c, n, "out of memory");
    return l;
}

int jlist_add(jctx *c, const jnode *n, jlist *l, jv v)
{
    if (l->n >= c->lim.max_items) {
        jv_drop(v);
        return jerr(c, n, "list exceeds the limit of %zu items", c->lim.max_items);
    }
    if (jlist_push(l, v)) return jerr(c, n, "out of memory");
    return jcharge(c, n, 1);
}

jdict *jnew_ns(jctx *c)
{
    jdict *d = jdict_new();
    if (!d) return NULL;
    d->ns = true;
    jtrack_link(&c->live, &d->tr, JT_NS);
    return d;
}

/* ---- scopes ------------------------------------------------------------ */

static jscope *scope_new(jctx *c, jscope *parent)
{
    jscope *s = malloc(sizeof *s);
    if (!s) return NULL;
    memset(s, 0, offsetof(jscope, names_in));
    s->gc.type = GC_SCOPE;
    s->rc = 1;
    s->names = s->names_in;
    s->vals = s->vals_in;
    s->cap = JSCOPE_INLINE;
    s->parent = parent;
    if (parent) parent->rc++;
    jtrack_link(&c->live, &s->tr, JT_SCOPE);
    return s;
}

static void scope_release(jscope *s)
{
    if (s) jgc_release(&s->gc, &s->rc);
}

static const jv *scope_find(const jscope *s, const jstr *name)
{
    for (; s; s = s->parent)
        for (size_t i = 0; i < s->n; i++)
            if (s->names[i]->len == name->len && !memcmp(s->names[i]->s, name->s, name->len)) return &s->vals[i];
    return NULL;
}

static int scope_grow(jscope *s)
{
    size_t nc = s->cap * 2;
    jstr **nn = malloc(nc * sizeof *nn);
    jv *nv = malloc(nc * sizeof *nv);
    if (!nn || !nv) {
        free(nn);
        free(nv);
        return -1;
    }
    memcpy(nn, s->names, s->n * sizeof *nn);
    memcpy(nv, s->vals, s->n * sizeof *nv);
    if (s->names != s->names_in) free(s->names);
    if (s->vals != s->vals_in) free(s->vals);
    s->names = nn;
    s->vals = nv;
    s->cap = nc;
    return 0;
}

/* Binds NAME to V (taken) in S. */
static int scope_set(jctx *c, const jnode *n, jscope *s, jstr *name, jv v)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->names[i]->len == name->len && !memcmp(s->names[i]->s, name->s, name->len)) {
            jv old = s->vals[i];
            s->vals[i] = v;
            jv_drop(old);
            return 0;
        }
    }
    if (s->n == s->cap && scope_grow(s)) {
        jv_drop(v);
        return jerr(c, n, "out of memory");
    }
    s->names[s->n] = jv_ref((jv){.k = JV_STR, .s = name}).s;
    s->vals[s->n++] = v;
    return 0;
}

/* ---- functions ------------------------------------------------------- */

static jfunc *func_new(jctx *c, const jnode *n, int kind)
{
    jfunc *f = calloc(1, sizeof *f);
    if (!f) {
        jerr(c, n, "out of memory");
        return NULL;
    }
    f->gc.type = GC_FUNC;
    f->rc = 1;
    f->kind = (uint8_t)kind;
    return f;
}

static void loop_release(jloop *L)
{
    if (L) jgc_release(&L->gc, &L->rc);
}

const char *jfunc_type_name(const jfunc *f)
{
    switch (f->kind) {
    case JF_MACRO: return "Macro";
    case JF_LOOP: return "LoopContext";
    case JF_METHOD: return "builtin_function_or_method";
    default: return "function";
    }
}

void jfunc_write(jbuf *b, const jfunc *f)
{
    switch (f->kind) {
    case JF_MACRO:
        jbuf_printf(b, "<Macro '%s'>", f->macro->kind == N_MACRO ? f->macro->name->s : "caller");
        break;
    case JF_LOOP:
        jbuf_printf(b, "<LoopContext %zu/%zu>", f->loop->i + 1, f->loop->items ? f->loop->items->n : 0);
        break;
    default:
        jbuf_printf(b, "<built-in method %s>", f->b->name);
    }
}

/* Everything still alive at the end is emptied: that frees cycles. */
static void release_live(jctx *c)
{
    while (c->live.next != &c->live) {
        jtrack *t = c->live.next;
        jtrack_unlink(t);
        jgc *g;
        int32_t *rc;
        if (t->kind == JT_NS) {
            jdict *d = (jdict *)((char *)t - offsetof(jdict, tr));
            g = &d->gc;
            rc = &d->rc;
        } else if (t->kind == JT_SCOPE) {
            jscope *s = (jscope *)((char *)t - offsetof(jscope, tr));
            g = &s->gc;
            rc = &s->rc;
        } else {
            jloop *L = (jloop *)((char *)t - offsetof(jloop, tr));
            g = &L->gc;
            rc = &L->rc;
        }
        (*rc)++;
        jgc_clear(g);
        jgc_release(g, rc);
    }
}

/* ---- iteration ----------------------------------------------------------- */

static int iter_str(jctx *c, const jnode *n, const jstr *s, jlist **out)
{
    jlist *l = jnew_list(c, n, s->ncp);
    if (!l) return -1;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        size_t k = ju_decode(s->s + i, s->len - i, &cp);
        jv ch;
        if (jmake_strn(c, n, s->s + i, k, &ch) || jlist_add(c, n, l, ch)) {
            jv_drop((jv){.k = JV_LIST, .l = l});
            return -1;
        }
        i += k;
    }
    *out = l;
    return 0;
}

int jiter(jctx *c, const jnode *n, jv v, jlist **out)
{
    *out = NULL;
    switch (v.k) {
    case JV_LIST:
        if (v.l->gen) {
            jlist *l = jnew_list(c, n, v.l->n - v.l->pos);
            if (!l) return -1;
            for (size_t i = v.l->pos; i < v.l->n; i++) jlist_push(l, jv_ref(v.l->v[i]));
            v.l->pos = v.l->n;   /* a generator runs once */
            *out = l;
            return 0;
        }
        v.l->rc++;
        *out = v.l;
        return 0;
    case JV_STR:
        return iter_str(c, n, v.s, out);
    case JV_DICT:
        if (v.d->ns) break;
        *out = jnew_list(c, n, v.d->n);
        if (!*out) return -1;
        for (size_t i = 0; i < v.d->n; i++) jlist_push(*out, jv_ref(v.d->k[i]));
        return jcharge(c, n, v.d->n);
    case JV_UNDEF:
        *out = jnew_list(c, n, 0);
        return *out ? 0 : -1;
    default:
        break;
    }
    return jerr(c, n, "'%s' object is not iterable", jv_type_name(v));
}

/* ---- attribute and item access ------------------------------------------ */

static const char *obj_desc(jv v)
{
    switch (v.k) {
    case JV_NONE: return "None";
    case JV_BOOL: return "'bool object'";
    case JV_INT: return "'int object'";
    case JV_FLOAT: return "'float object'";
    case JV_STR: return "'str object'";
    case JV_LIST: return v.l->gen ? "'generator object'" : v.l->tuple ? "'tuple object'" : "'list object'";
    case JV_DICT: return v.d->ns ? "'jinja2.utils.Namespace object'" : "'dict object'";
    default: return "'function object'";
    }
}

static jv undef_attr(jv obj, jstr *name)
{
    jv u = jv_undef_why(JU_ATTR, obj_desc(obj), name);
    return jv_ref(u);
}

static int bound_method(jctx *c, const jnode *n, jv obj, const jbuiltin *b, jv *out)
{
    jfunc *f = func_new(c, n, JF_METHOD);
    if (!f) return -1;
    f->b = b;
    f->self = jv_ref(obj);
    *out = (jv){.k = JV_FUNC, .fn = f};
    return 0;
}

/* Python attribute lookup: methods (refused when they mutate). */
static int method_attr(jctx *c, const jnode *n, jv obj, jstr *name, jv *out, bool *found)
{
    bool known = false;
    const jbuiltin *b = jfind_method(obj, name->s, name->len, &known);
    *found = true;
    if (b && (b->flags & JB_UNSAFE)) {
        *out = jv_ref(jv_undef_why(JU_UNSAFE, jv_type_name(obj), name));
        return 0;
    }
    if (b) return bound_method(c, n, obj, b, out);
    if (known) {
        *out = jv_ref(jv_undef_why(JU_UNIMPL, jv_type_name(obj), name));
        return 0;
    }
    *found = false;
    return 0;
}

static int loop_attr(jctx *c, const jnode *n, jv obj, jstr *name, jv *out);

int jgetattr(jctx *c, const jnode *n, jv obj, jstr *name, jv *out)
{
    bool found;
    if (obj.k == JV_FUNC && obj.fn->kind == JF_LOOP) return loop_attr(c, n, obj, name, out);
    if (obj.k == JV_DICT && obj.d->ns) {
        const jv *v = jdict_gets(obj.d, name->s, name->len);
        *out = v ? jv_ref(*v) : undef_attr(obj, name);
        return 0;
    }
    if (method_attr(c, n, obj, name, out, &found)) return -1;
    if (found) return 0;
    if (obj.k == JV_DICT) {
        const jv *v = jdict_gets(obj.d, name->s, name->len);
        if (v) {
            *out = jv_ref(*v);
            return 0;
        }
    }
    *out = undef_attr(obj, name);
    return 0;
}

/* Python index normalisation; false when out of range. */
static bool norm_index(jv key, size_t len, size_t *idx)
{
    if (key.k != JV_INT && key.k != JV_BOOL) return false;
    int64_t i = key.k == JV_BOOL ? key.b : key.i;
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *idx = (size_t)i;
    return true;
}

static jv undef_elem(jctx *c, jv obj, jv key)
{
    jbuf b = {.max = 256};
    jv_write_repr(&b, key);
    jstr *s = jstr_new(b.p ? b.p : "", b.n);
    jbuf_free(&b);
    (void)c;
    jv u = jv_undef_why(JU_ELEM, obj_desc(obj), s);
    return u;
}

int jgetitem(jctx *c, const jnode *n, jv obj, jv key, jv *out)
{
    size_t i;
    if (obj.k == JV_DICT && obj.d->ns && key.k == JV_STR) return jgetattr(c, n, obj, key.s, out);
    if (obj.k == JV_DICT && !obj.d->ns) {
        const jv *v = jdict_get(obj.d, key);
        if (v) {
            *out = jv_ref(*v);
            return 0;
        }
    } else if (obj.k == JV_LIST && !obj.l->gen && norm_index(key, obj.l->n, &i)) {
        *out = jv_ref(obj.l->v[i]);
        return 0;
    } else if (obj.k == JV_STR && norm_index(key, obj.s->ncp, &i)) {
        size_t off = jstr_cp_off(obj.s, i);
        uint32_t cp;
        size_t len = ju_decode(obj.s->s + off, obj.s->len - off, &cp);
        if (jmake_strn(c, n, obj.s->s + off, len, out)) return -1;
        out->uk = obj.uk;   /* Markup stays Markup */
        return 0;
    }
    if (key.k == JV_STR) {
        bool found;
        if (method_attr(c, n, obj, key.s, out, &found)) return -1;
        if (found) return 0;
        *out = undef_attr(obj, key.s);
        return 0;
    }
    *out = undef_elem(c, obj, key);
    return 0;
}

/* ---- slices ----------------------------------------------------------- */

/* 0, or 1 when V is not an index (integer or None). */
static int slice_index(jv v, bool *given, int64_t *out)
{
    *given = false;
    if (v.k == JV_NONE || (v.k == JV_UNDEF && !v.s)) return 0;
    if (v.k != JV_INT && v.k != JV_BOOL) return 1;
    *given = true;
    *out = v.k == JV_BOOL ? v.b : v.i;
    return 0;
}

/* Python's PySlice_AdjustIndices: fills start, step and the count; 1 when
 * an index is not an integer. */
static int slice_bounds(jctx *c, const jnode *n, const jv sv[3], size_t len, int64_t *start, int64_t *step,
                        size_t *count)
{
    bool g0, g1, g2;
    int64_t a = 0, b = 0, s = 1;
    if (slice_index(sv[0], &g0, &a) || slice_index(sv[1], &g1, &b) || slice_index(sv[2], &g2, &s)) return 1;
    if (!g2) s = 1;
    if (s == 0) return jerr(c, n, "slice step cannot be zero");
    int64_t L = (int64_t)len;
    if (!g0) a = s < 0 ? L - 1 : 0;
    else if (a < 0) a = a + L < 0 ? (s < 0 ? -1 : 0) : a + L;
    else if (a >= L) a = s < 0 ? L - 1 : L;
    if (!g1) b = s < 0 ? -1 : L;
    else if (b < 0) b = b + L < 0 ? (s < 0 ? -1 : 0) : b + L;
    else if (b >= L) b = s < 0 ? L - 1 : L;
    int64_t cnt = 0;
    if (s > 0 && b > a) cnt = (b - a - 1) / s + 1;
    else if (s < 0 && a > b) cnt = (a - b - 1) / (-s) + 1;
    *start = a;
    *step = s;
    *count = (size_t)cnt;
    return 0;
}

static int slice_str(jctx *c, const jnode *n, const jstr *s, int64_t a, int64_t st, size_t cnt, jv *out)
{
    /* code point offsets, so non-ASCII text slices by characters */
    size_t *off = malloc((s->ncp + 1) * sizeof *off);
    if (!off) return jerr(c, n, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < s->len; k++) {
        uint32_t cp;
        off[k] = i;
        i += ju_decode(s->s + i, s->len - i, &cp);
    }
    off[k] = s->len;
    jbuf b = {.max = c->lim.max_output};
    for (size_t i = 0; i < cnt; i++) {
        size_t cpi = (size_t)(a + (int64_t)i * st);
        jbuf_put(&b, s->s + off[cpi], off[cpi + 1] - off[cpi]);
    }
    free(off);
    return jmake_str(c, n, &b, out);
}

static int eval_slice(jctx *c, const jnode *n, jv obj, const jnode *sl, jv *out)
{
    jv sv[3] = {jv_none(), jv_none(), jv_none()};
    const jnode *parts[3] = {sl->a, sl->b, sl->c};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++)
        if (parts[i]) rc = eval(c, parts[i], &sv[i]);
    int64_t a = 0, st = 1;
    size_t cnt = 0, len = obj.k == JV_STR ? obj.s->ncp : obj.k == JV_LIST ? obj.l->n : 0;
    /* Jinja compiles slices to plain Python subscripts: failures are errors */
    if (!rc && obj.k == JV_DICT && !obj.d->ns) {
        rc = jerr(c, n, "unhashable type: 'slice'");
    } else if (!rc && ((obj.k != JV_STR && obj.k != JV_LIST) || (obj.k == JV_LIST && obj.l->gen))) {
        rc = jerr(c, n, "'%s' object is not subscriptable", jv_type_name(obj));
    } else if (!rc && (rc = slice_bounds(c, n, sv, len, &a, &st, &cnt)) == 1) {
        rc = jerr(c, n, "slice indices must be integers or None or have an __index__ method");
    } else if (!rc) {
        if (obj.k == JV_STR) {
            rc = slice_str(c, n, obj.s, a, st, cnt, out);
            if (!rc) out->uk = obj.uk;
        } else {
            jlist *l = jnew_list(c, n, cnt);
            rc = l ? 0 : -1;
            for (size_t i = 0; l && i < cnt; i++) jlist_push(l, jv_ref(obj.l->v[a + (int64_t)i * st]));
            if (l) {
                l->tuple = obj.l->tuple;
                *out = (jv){.k = JV_LIST, .l = l};
                rc = jcharge(c, n, cnt);
            }
        }
    }
    for (int i = 0; i < 3; i++) jv_drop(sv[i]);
    return rc;
}

/* ---- operators --------------------------------------------------------- */

static bool num(jv v) { return v.k == JV_INT || v.k == JV_BOOL || v.k == JV_FLOAT; }
static double fval(jv v) { return v.k == JV_FLOAT ? v.f : v.k == JV_BOOL ? v.b : (double)v.i; }
static int64_t ival(jv v) { return v.k == JV_BOOL ? v.b : v.i; }

static const char *op_sym(int op)
{
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "** or pow()";
    default: return "?";
    }
}

static int type_error(jctx *c, const jnode *n, int op, jv a, jv b)
{
    return jerr(c, n, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), jv_type_name(a),
                jv_type_name(b));
}

static int int_op(jctx *c, const jnode *n, int op, int64_t a, int64_t b, jv *out)
{
    int64_t r = 0;
    bool ovf = false;
    switch (op) {
    case OP_ADD: ovf = __builtin_add_overflow(a, b, &r); break;
    case OP_SUB: ovf = __builtin_sub_overflow(a, b, &r); break;
    case OP_MUL: ovf = __builtin_mul_overflow(a, b, &r); break;
    case OP_FLOORDIV: case OP_MOD:
        if (b == 0) return jerr(c, n, "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1) { ovf = true; break; }
        r = op == OP_FLOORDIV ? a / b - ((a % b != 0) && ((a < 0) != (b < 0))) : a % b;
        if (op == OP_MOD && r != 0 && ((r < 0) != (b < 0))) r += b;
        break;
    case OP_POW:
        if (b < 0) {
            *out = jv_float(pow((double)a, (double)b));
            return 0;
        }
        r = 1;
        for (int64_t i = 0; i < b && !ovf; i++) {
            ovf = __builtin_mul_overflow(r, a, &r);
            if (r == 0 || r == 1) break;
            if (r == -1) { r = (b - i - 1) % 2 ? -r : r; break; }
        }
        break;
    }
    if (ovf) return jerr(c, n, "integer overflow (sluice's integers are 64-bit)");
    *out = jv_int(r);
    return 0;
}

static int float_op(jctx *c, const jnode *n, int op, double a, double b, jv *out)
{
    double r;
    switch (op) {
    case OP_ADD: r = a + b; break;
    case OP_SUB: r = a - b; break;
    case OP_MUL: r = a * b; break;
    case OP_DIV:
        if (b == 0) return jerr(c, n, "division by zero");
        r = a / b;
        break;
    case OP_FLOORDIV: case OP_MOD: {
        /* CPython's float_divmod */
        if (b == 0) return jerr(c, n, "float %s by zero", op == OP_MOD ? "modulo" : "floor division");
        double mod = fmod(a, b), div = (a - mod) / b, fdiv;
        if (mod != 0) {
            if ((b < 0) != (mod < 0)) {
                mod += b;
                div -= 1.0;
            }
        } else {
            mod = copysign(0.0, b);
        }
        if (div != 0) {
            fdiv = floor(div);
            if (div - fdiv > 0.5) fdiv += 1.0;
        } else {
            fdiv = copysign(0.0, a / b);
        }
        r = op == OP_MOD ? mod : fdiv;
        break;
    }
    default:
        if (a < 0 && b != floor(b)) return jerr(c, n, "negative number raised to a fractional power");
        if (a == 0 && b < 0) return jerr(c, n, "0.0 cannot be raised to a negative power");
        r = pow(a, b);
    }
    *out = jv_float(r);
    return 0;
}

static int repeat(jctx *c, const jnode *n, jv seq, int64_t times, jv *out)
{
    if (times < 0) times = 0;
    if (seq.k == JV_STR) {
        if (seq.s->len && (uint64_t)times > c->lim.max_output / seq.s->len)
            return jerr(c, n, "string repetition exceeds the output limit");
        jbuf b = {.max = c->lim.max_output};
        for (int64_t i = 0; i < times; i++) jbuf_put(&b, seq.s->s, seq.s->len);
        if (jmake_str(c, n, &b, out)) return -1;
        out->uk = seq.uk;
        return 0;
    }
    if (seq.l->n && (uint64_t)times > c->lim.max_items / seq.l->n)
        return jerr(c, n, "list repetition exceeds the limit of %zu items", c->lim.max_items);
    jlist *l = jnew_list(c, n, seq.l->n * (size_t)times);
    if (!l) return -1;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.l->n; k++) jlist_push(l, jv_ref(seq.l->v[k]));
    l->tuple = seq.l->tuple;
    *out = (jv){.k = JV_LIST, .l = l};
    return jcharge(c, n, l->n);
}

static void put_maybe_escaped(jbuf *b, jv s, bool markup)
{
    if (markup && !s.uk) jhtml_escape(b, s.s->s, s.s->len);
    else jbuf_put(b, s.s->s, s.s->len);
}

static int concat_seq(jctx *c, const jnode *n, jv a, jv b, jv *out)
{
    if (a.k == JV_STR) {
        /* Markup + str escapes the str (either side) */
        bool markup = a.uk || b.uk;
        jbuf buf = {.max = c->lim.max_output};
        put_maybe_escaped(&buf, a, markup);
        put_maybe_escaped(&buf, b, markup);
        if (jmake_str(c, n, &buf, out)) return -1;
        out->uk = markup;
        return 0;
    }
    jlist *l = jnew_list(c, n, a.l->n + b.l->n);
    if (!l) return -1;
    for (size_t i = 0; i < a.l->n; i++) jlist_push(l, jv_ref(a.l->v[i]));
    for (size_t i = 0; i < b.l->n; i++) jlist_push(l, jv_ref(b.l->v[i]));
    l->tuple = a.l->tuple;
    *out = (jv){.k = JV_LIST, .l = l};
    return jcharge(c, n, l->n);
}

int jbinop(jctx *c, const jnode *n, int op, jv a, jv b, jv *out)
{
    if (a.k == JV_UNDEF) return jerr_undef(c, n, a);
    if (b.k == JV_UNDEF) return jerr_undef(c, n, b);
    if (num(a) && num(b)) {
        if (op == OP_DIV || a.k == JV_FLOAT || b.k == JV_FLOAT) return float_op(c, n, op, fval(a), fval(b), out);
        return int_op(c, n, op, ival(a), ival(b), out);
    }
    bool seq_a = a.k == JV_STR || (a.k == JV_LIST && !a.l->gen);
    if (op == OP_ADD && seq_a && a.k == b.k && (a.k == JV_STR || (!b.l->gen && a.l->tuple == b.l->tuple)))
        return concat_seq(c, n, a, b, out);
    if (op == OP_ADD && a.k == JV_STR)
        return jerr(c, n, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == OP_MUL && seq_a && (b.k == JV_INT || b.k == JV_BOOL)) return repeat(c, n, a, ival(b), out);
    if (op == OP_MUL && (a.k == JV_INT || a.k == JV_BOOL) && (b.k == JV_STR || (b.k == JV_LIST && !b.l->gen)))
        return repeat(c, n, b, ival(a), out);
    if (op == OP_MOD && a.k == JV_STR) return jstr_format_percent(c, n, a, b, out);
    return type_error(c, n, op, a, b);
}

static int str_cmp(const jstr *a, const jstr *b)
{
    size_t m = a->len < b->len ? a->len : b->len;
    int r = memcmp(a->s, b->s, m);
    if (r) return r < 0 ? -1 : 1;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int order_depth(jctx *c, const jnode *n, jv a, jv b, bool fold_case, int *res, int depth);

int jorder(jctx *c, const jnode *n, jv a, jv b, bool fold_case, int *res)
{
    return order_depth(c, n, a, b, fold_case, res, 0);
}

static int order_depth(jctx *c, const jnode *n, jv a, jv b, bool fold_case, int *res, int depth)
{
    if (depth > JV_MAX_NEST) return jerr(c, n, "values nested too deeply to compare");
    if (jcharge(c, n, 1)) return -1;
    if (num(a) && num(b)) {
        if (a.k == JV_FLOAT || b.k == JV_FLOAT) *res = fval(a) < fval(b) ? -1 : fval(a) > fval(b);
        else *res = ival(a) < ival(b) ? -1 : ival(a) > ival(b);
        return 0;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        if (!fold_case) {
            *res = str_cmp(a.s, b.s);
            return 0;
        }
        jstr *la = jstr_lower(a.s), *lb = jstr_lower(b.s);
        if (la && lb) *res = str_cmp(la, lb);
        if (la) free(la);
        if (lb) free(lb);
        return la && lb ? 0 : jerr(c, n, "out of memory");
    }
    if (a.k == JV_LIST && b.k == JV_LIST && a.l->tuple == b.l->tuple && !a.l->gen && !b.l->gen) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            jv x = a.l->v[i], y = b.l->v[i];
            if (x.k == JV_LIST && y.k == JV_LIST) {
                /* nested sequences: order them directly (0 when equal) */
                if (order_depth(c, n, x, y, fold_case, res, depth + 1)) return -1;
                if (*res) return 0;
                continue;
            }
            if (jv_eq(x, y)) continue;
            return order_depth(c, n, x, y, fold_case, res, depth + 1);
        }
        *res = a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
        return 0;
    }
    if (a.k == JV_UNDEF) return jerr_undef(c, n, a);
    if (b.k == JV_UNDEF) return jerr_undef(c, n, b);
    return jerr(c, n, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

static int contains(jctx *c, const jnode *n, jv hay, jv needle, bool *res)
{
    switch (hay.k) {
    case JV_STR:
        if (needle.k != JV_STR)
            return jerr(c, n, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        *res = needle.s->len == 0 || memmem(hay.s->s, hay.s->len, needle.s->s, needle.s->len) != NULL;
        return jcharge(c, n, hay.s->len / 64);
    case JV_LIST: {
        size_t from = hay.l->gen ? hay.l->pos : 0;
        *res = false;
        for (size_t i = from; i < hay.l->n && !*res; i++) {
            *res = jv_eq(hay.l->v[i], needle);
            if (hay.l->gen) hay.l->pos = i + 1;
        }
        return jcharge(c, n, hay.l->n / 16);
    }
    case JV_DICT:
        if (hay.d->ns) break;
        *res = jdict_get(hay.d, needle) != NULL;
        return 0;
    case JV_UNDEF:
        *res = false;
        return 0;
    default:
        break;
    }
    return jerr(c, n, "argument of type '%s' is not iterable", jv_type_name(hay));
}

int jcompare(jctx *c, const jnode *n, int op, jv a, jv b, bool *res)
{
    int o;
    switch (op) {
    case OP_EQ: *res = jv_eq(a, b); return 0;
    case OP_NE: *res = !jv_eq(a, b); return 0;
    case OP_IN: return contains(c, n, b, a, res);
    case OP_NOTIN:
        if (contains(c, n, b, a, res)) return -1;
        *res = !*res;
        return 0;
    default:
        if (jorder(c, n, a, b, false, &o)) return -1;
        *res = op == OP_LT ? o < 0 : op == OP_LE ? o <= 0 : op == OP_GT ? o > 0 : o >= 0;
        return 0;
    }
}

/* ---- calls --------------------------------------------------------------- */

static void args_free(jargs *a)
{
    for (size_t i = 0; i < a->npos; i++) jv_drop(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) jv_drop(a->kwv[i]);
    free(a->pos);
    free(a->kwv);
}

/* Evaluates the arguments of call / filter / test node N. */
static int eval_args(jctx *c, const jnode *n, jargs *a)
{
    *a = (jargs){0};
    if (n->nv && !(a->pos = calloc(n->nv, sizeof *a->pos))) return jerr(c, n, "out of memory");
    if (n->nw && !(a->kwv = calloc(n->nw, sizeof *a->kwv))) return jerr(c, n, "out of memory");
    a->kwn = n->names;
    for (uint32_t i = 0; i < n->nv; i++, a->npos++)
        if (eval(c, n->v[i], &a->pos[i])) return -1;
    for (uint32_t i = 0; i < n->nw; i++, a->nkw++)
        if (eval(c, n->w[i], &a->kwv[i])) return -1;
    return 0;
}

static int render_capture(jctx *c, const jnode *n, jnode *const *body, uint32_t nbody, jscope *scope, jv *out);

static int bind_macro_args(jctx *c, const jnode *site, const jnode *m, jscope *s, const jargs *a)
{
    const char *mname = m->kind == N_MACRO ? m->name->s : "caller";
    if (a->npos > m->nnames && !(m->op & JM_VARARGS))
        return jerr(c, site, "macro '%s' takes not more than %u argument(s)", mname, m->nnames);
    for (uint32_t i = 0; i < m->nnames; i++) {
        jv v = jv_undef();
        bool have = i < a->npos;
        if (have) v = jv_ref(a->pos[i]);
        for (size_t k = 0; k < a->nkw; k++) {
            if (!jv_eq((jv){.k = JV_STR, .s = a->kwn[k]}, (jv){.k = JV_STR, .s = m->names[i]})) continue;
            if (have) return jerr(c, site, "macro '%s' got multiple values for argument '%s'", mname, m->names[i]->s);
            v = jv_ref(a->kwv[k]);
            have = true;
        }
        jscope *saved = c->scope;
        c->scope = s;
        int rc = !have && i < m->nw && m->w[i] ? eval(c, m->w[i], &v) : 0;
        c->scope = saved;
        if (!have && !(i < m->nw && m->w[i])) v = jv_ref(jv_undef_why(JU_NAME, NULL, m->names[i]));
        if (rc || scope_set(c, site, s, m->names[i], v)) return -1;
    }
    return 0;
}

static int bind_macro_extras(jctx *c, const jnode *site, const jnode *m, jscope *s, const jargs *a)
{
    const char *mname = m->kind == N_MACRO ? m->name->s : "caller";
    jdict *kw = jdict_new();
    jlist *va = jnew_list(c, site, a->npos > m->nnames ? a->npos - m->nnames : 0);
    if (!kw || !va) {
        if (kw) jv_drop((jv){.k = JV_DICT, .d = kw});
        if (va) jv_drop((jv){.k = JV_LIST, .l = va});
        return jerr(c, site, "out of memory");
    }
    va->tuple = true;
    for (size_t i = m->nnames; i < a->npos; i++) jlist_push(va, jv_ref(a->pos[i]));
    int rc = 0;
    for (size_t k = 0; k < a->nkw && !rc; k++) {
        bool param = false;
        for (uint32_t i = 0; i < m->nnames; i++)
            param = param || jv_eq((jv){.k = JV_STR, .s = a->kwn[k]}, (jv){.k = JV_STR, .s = m->names[i]});
        if (param) continue;
        if (!(m->op & JM_KWARGS))
            rc = jerr(c, site, "macro '%s' takes no keyword argument '%s'", mname, a->kwn[k]->s);
        else if (jdict_set(kw, jv_ref((jv){.k = JV_STR, .s = a->kwn[k]}), jv_ref(a->kwv[k])))
            rc = jerr(c, site, "out of memory");
    }
    if (!rc) rc = scope_set(c, site, s, c->name_varargs, (jv){.k = JV_LIST, .l = va});
    else jv_drop((jv){.k = JV_LIST, .l = va});
    if (!rc) rc = scope_set(c, site, s, c->name_kwargs, (jv){.k = JV_DICT, .d = kw});
    else jv_drop((jv){.k = JV_DICT, .d = kw});
    return rc;
}

static int call_macro(jctx *c, const jnode *site, jfunc *fn, const jargs *a, jv caller, jv *out)
{
    const jnode *m = fn->macro;
    if (c->macro_depth >= c->lim.max_depth / 4)
        return jerr(c, site, "macro calls nested deeper than %u (runaway recursion?)", c->lim.max_depth / 4);
    jscope *s = scope_new(c, fn->scope);
    if (!s) return jerr(c, site, "out of memory");
    int rc = bind_macro_args(c, site, m, s, a);
    if (!rc) rc = bind_macro_extras(c, site, m, s, a);
    if (!rc && caller.k == JV_FUNC) rc = scope_set(c, site, s, c->name_caller, jv_ref(caller));
    c->macro_depth++;
    if (!rc) rc = render_capture(c, site, m->v, m->nv, s, out);
    c->macro_depth--;
    scope_release(s);
    return rc;
}

static int run_loop(jctx *c, const jnode *n, jlist *items, int depth, jscope *scope);

/* loop(items) inside a recursive loop renders the loop body again. */
static int call_loop(jctx *c, const jnode *site, jloop *L, const jargs *a, jv *out)
{
    if (!L->node->op) return jerr(c, site, "the loop is not recursive; 'for ... recursive' is needed to call loop()");
    if (a->npos != 1 || a->nkw) return jerr(c, site, "loop() takes exactly one argument");
    jlist *items;
    if (jiter(c, site, a->pos[0], &items)) return -1;
    jbuf b = {.max = c->lim.max_output};
    jbuf *saved = c->out;
    c->out = &b;
    int rc = run_loop(c, L->node, items, L->depth + 1, L->scope);
    c->out = saved;
    jv_drop((jv){.k = JV_LIST, .l = items});
    if (rc < 0) {
        jbuf_free(&b);
        return -1;
    }
    return jmake_str(c, site, &b, out);
}

int jcall(jctx *c, const jnode *n, jv fn, const jargs *a, jv *out)
{
    if (fn.k == JV_UNDEF) return jerr_undef(c, n, fn);
    if (fn.k != JV_FUNC) return jerr(c, n, "'%s' object is not callable", jv_type_name(fn));
    switch (fn.fn->kind) {
    case JF_BUILTIN: return jcall_builtin(c, n, fn.fn->b, jv_undef(), a, out);
    case JF_METHOD: return jcall_builtin(c, n, fn.fn->b, fn.fn->self, a, out);
    case JF_MACRO: return call_macro(c, n, fn.fn, a, jv_undef(), out);
    default: return call_loop(c, n, fn.fn->loop, a, out);
    }
}

static int eval_call(jctx *c, const jnode *n, jv *out)
{
    jv fn;
    if (eval(c, n->a, &fn)) return -1;
    jargs a;
    int rc = eval_args(c, n, &a);
    if (!rc) rc = jcall(c, n, fn, &a, out);
    args_free(&a);
    jv_drop(fn);
    return rc;
}

/* Filter chain N applied to its operand (or to INPUT where the chain
 * starts with no operand: filter blocks and set blocks). */
static int eval_filter(jctx *c, const jnode *n, jv input, jv *out)
{
    jv v = jv_undef();
    if (++c->depth > c->lim.max_depth) {
        c->depth--;
        return jerr(c, n, "filter chain nested deeper than %u levels", c->lim.max_depth);
    }
    if (!n->fn) {
        c->depth--;
        return jerr_unsupported(c, n, "unsupported template feature: filter '%s' (no filter of that name)", n->name->s);
    }
    int rc = 0;
    if (!n->a) v = jv_ref(input);
    else if (n->a->kind == N_FILTER) rc = eval_filter(c, n->a, input, &v);
    else rc = eval(c, n->a, &v);
    if (!rc) {
        jargs a;
        rc = eval_args(c, n, &a);
        if (!rc) rc = jcall_builtin(c, n, n->fn, v, &a, out);
        args_free(&a);
    }
    jv_drop(v);
    c->depth--;
    return rc;
}

static int eval_test(jctx *c, const jnode *n, jv *out)
{
    if (!n->fn) return jerr_unsupported(c, n, "unsupported template feature: test '%s' (no test of that name)", n->name->s);
    jv v;
    if (eval(c, n->a, &v)) return -1;
    jargs a;
    int rc = eval_args(c, n, &a);
    if (!rc) rc = jcall_builtin(c, n, n->fn, v, &a, out);
    args_free(&a);
    jv_drop(v);
    return rc;
}

/* ---- expressions --------------------------------------------------------- */

static int eval_name(jctx *c, const jnode *n, jv *out)
{
    const jv *v = scope_find(c->scope, n->name);
    if (v) {
        *out = jv_ref(*v);
        return 0;
    }
    const jbuiltin *g = jfind_global(n->name->s, n->name->len);
    if (g) {
        jfunc *f = func_new(c, n, JF_BUILTIN);
        if (!f) return -1;
        f->b = g;
        *out = (jv){.k = JV_FUNC, .fn = f};
        return 0;
    }
    *out = jv_undef_why(JU_NAME, NULL, n->name);
    return 0;
}

static int eval_access(jctx *c, const jnode *n, jv *out)
{
    jv obj;
    if (eval(c, n->a, &obj)) return -1;
    int rc;
    if (obj.k == JV_UNDEF) {
        rc = jerr_undef(c, n, obj);
    } else if (n->kind == N_GETATTR) {
        rc = jgetattr(c, n, obj, n->name, out);
    } else if (n->b->kind == N_SLICE) {
        rc = eval_slice(c, n, obj, n->b, out);
    } else {
        jv key;
        rc = eval(c, n->b, &key);
        if (!rc) rc = jgetitem(c, n, obj, key, out);
        jv_drop(key);
    }
    jv_drop(obj);
    return rc;
}

static int eval_unary(jctx *c, const jnode *n, jv *out)
{
    jv v;
    if (eval(c, n->a, &v)) return -1;
    int rc = 0;
    if (n->kind == N_NOT) {
        *out = jv_bool(!jv_truthy(v));
    } else if (v.k == JV_INT || v.k == JV_BOOL) {
        int64_t i = ival(v);
        if (n->kind == N_NEG && i == INT64_MIN) rc = jerr(c, n, "integer overflow");
        else *out = jv_int(n->kind == N_NEG ? -i : i);
    } else if (v.k == JV_FLOAT) {
        *out = jv_float(n->kind == N_NEG ? -v.f : v.f);
    } else if (v.k == JV_UNDEF) {
        rc = jerr_undef(c, n, v);
    } else {
        rc = jerr(c, n, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', jv_type_name(v));
    }
    jv_drop(v);
    return rc;
}

static int eval_binary(jctx *c, const jnode *n, jv *out)
{
    jv a, b;
    if (eval(c, n->a, &a)) return -1;
    if (n->kind == N_AND || n->kind == N_OR) {
        /* Python: the deciding operand itself is the result */
        if (jv_truthy(a) == (n->kind == N_OR)) {
            *out = a;
            return 0;
        }
        jv_drop(a);
        return eval(c, n->b, out);
    }
    if (eval(c, n->b, &b)) {
        jv_drop(a);
        return -1;
    }
    int rc = jbinop(c, n, n->op, a, b, out);
    jv_drop(a);
    jv_drop(b);
    return rc;
}

static int eval_concat(jctx *c, const jnode *n, jv *out)
{
    jbuf b = {.max = c->lim.max_output};
    for (uint32_t i = 0; i < n->nv; i++) {
        jv v;
        if (eval(c, n->v[i], &v)) {
            jbuf_free(&b);
            return -1;
        }
        jv_write_str(&b, v);
        jv_drop(v);
    }
    return jmake_str(c, n, &b, out);
}

static int eval_compare(jctx *c, const jnode *n, jv *out)
{
    jv left;
    if (eval(c, n->a, &left)) return -1;
    bool res = true;
    for (uint32_t i = 0; i < n->nv && res; i++) {
        jv right;
        int rc = eval(c, n->v[i], &right);
        if (!rc) rc = jcompare(c, n, n->ops[i], left, right, &res);
        jv_drop(left);
        left = right;
        if (rc) {
            jv_drop(left);
            return -1;
        }
    }
    jv_drop(left);
    *out = jv_bool(res);
    return 0;
}

static int eval_cond(jctx *c, const jnode *n, jv *out)
{
    jv t;
    if (eval(c, n->a, &t)) return -1;
    bool yes = jv_truthy(t);
    jv_drop(t);
    if (yes) return eval(c, n->b, out);
    if (n->c) return eval(c, n->c, out);
    *out = jv_undef();
    return 0;
}

static int eval_seq(jctx *c, const jnode *n, jv *out)
{
    jlist *l = jnew_list(c, n, n->nv);
    if (!l) return -1;
    l->tuple = n->kind == N_TUPLE;
    *out = (jv){.k = JV_LIST, .l = l};
    for (uint32_t i = 0; i < n->nv; i++) {
        jv v;
        if (eval(c, n->v[i], &v)) return -1;
        jlist_push(l, v);
    }
    return 0;
}

static int eval_dict(jctx *c, const jnode *n, jv *out)
{
    jdict *d = jdict_new();
    if (!d) return jerr(c, n, "out of memory");
    *out = (jv){.k = JV_DICT, .d = d};
    for (uint32_t i = 0; i < n->nv; i++) {
        jv k, v;
        if (eval(c, n->v[i], &k)) return -1;
        if (k.k == JV_LIST && !k.l->tuple) {
            jv_drop(k);
            return jerr(c, n, "unhashable type: 'list'");
        }
        if (k.k == JV_DICT) {
            jv_drop(k);
            return jerr(c, n, "unhashable type: 'dict'");
        }
        if (eval(c, n->w[i], &v)) {
            jv_drop(k);
            return -1;
        }
        if (jdict_set(d, k, v)) return jerr(c, n, "out of memory");
    }
    return 0;
}

static int eval_inner(jctx *c, const jnode *n, jv *out)
{
    switch (n->kind) {
    case N_CONST: *out = jv_ref(n->val); return 0;
    case N_NAME: return eval_name(c, n, out);
    case N_GETATTR: case N_GETITEM: return eval_access(c, n, out);
    case N_CALL: return eval_call(c, n, out);
    case N_FILTER: return eval_filter(c, n, jv_undef(), out);
    case N_TEST: return eval_test(c, n, out);
    case N_NOT: case N_NEG: case N_POS: return eval_unary(c, n, out);
    case N_BIN: case N_AND: case N_OR: return eval_binary(c, n, out);
    case N_CONCAT: return eval_concat(c, n, out);
    case N_COMPARE: return eval_compare(c, n, out);
    case N_COND: return eval_cond(c, n, out);
    case N_LIST: case N_TUPLE: return eval_seq(c, n, out);
    case N_DICT: return eval_dict(c, n, out);
    default: return jerr(c, n, "a slice is only valid inside [ ]");
    }
}

static int eval(jctx *c, const jnode *n, jv *out)
{
    *out = jv_undef();
    if (c->status) return -1;
    if (++c->depth > c->lim.max_depth) {
        c->depth--;
        return jerr(c, n, "template evaluation nested deeper than %u levels (runaway recursion?)", c->lim.max_depth);
    }
    int rc = jcharge(c, n, 1) ? -1 : eval_inner(c, n, out);
    c->depth--;
    if (rc) {
        jv_drop(*out);
        *out = jv_undef();
    }
    return rc;
}

/* ---- loops ------------------------------------------------------------- */

static int loop_attr(jctx *c, const jnode *n, jv obj, jstr *name, jv *out)
{
    const jloop *L = obj.fn->loop;
    size_t len = L->items ? L->items->n : 0, i = L->i;
    const char *k = name->s;
    if (!strcmp(k, "index")) *out = jv_int((int64_t)i + 1);
    else if (!strcmp(k, "index0")) *out = jv_int((int64_t)i);
    else if (!strcmp(k, "revindex")) *out = jv_int((int64_t)(len - i));
    else if (!strcmp(k, "revindex0")) *out = jv_int((int64_t)(len - i) - 1);
    else if (!strcmp(k, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(k, "last")) *out = jv_bool(i + 1 == len);
    else if (!strcmp(k, "length")) *out = jv_int((int64_t)len);
    else if (!strcmp(k, "depth")) *out = jv_int(L->depth);
    else if (!strcmp(k, "depth0")) *out = jv_int(L->depth - 1);
    else if (!strcmp(k, "previtem")) *out = i > 0 ? jv_ref(L->items->v[i - 1]) : jv_undef();
    else if (!strcmp(k, "nextitem")) *out = i + 1 < len ? jv_ref(L->items->v[i + 1]) : jv_undef();
    else {
        bool found;
        if (method_attr(c, n, obj, name, out, &found)) return -1;
        if (!found) *out = jv_ref(jv_undef_why(JU_ATTR, "'LoopContext object'", name));
    }
    return 0;
}

/* Binds a loop target (a name or a tuple of names) to V (borrowed). */
static int assign_ns(jctx *c, const jnode *t, jscope *s, jv v);

static int bind_target(jctx *c, const jnode *t, jscope *s, jv v)
{
    if (t->kind == N_NAME) return scope_set(c, t, s, t->name, jv_ref(v));
    if (t->kind == N_GETATTR) return assign_ns(c, t, s, jv_ref(v));
    jlist *items;
    if (jiter(c, t, v, &items)) return -1;
    int rc = 0;
    if (items->n != t->nv)
        rc = jerr(c, t, items->n < t->nv ? "not enough values to unpack (expected %u, got %zu)"
                                        : "too many values to unpack (expected %u, got %zu)", t->nv, items->n);
    for (uint32_t i = 0; i < t->nv && !rc; i++) rc = bind_target(c, t->v[i], s, items->v[i]);
    jv_drop((jv){.k = JV_LIST, .l = items});
    return rc;
}

/* The "for x in y if cond" filter, applied before the loop starts. */
static int loop_filter(jctx *c, const jnode *n, jlist *items, jscope *scope, jlist **out)
{
    jlist *l = jnew_list(c, n, items->n);
    if (!l) return -1;
    for (size_t i = 0; i < items->n; i++) {
        jscope *s = scope_new(c, scope);
        jscope *saved = c->scope;
        jv t = jv_undef();
        int rc = s ? bind_target(c, n->a, s, items->v[i]) : jerr(c, n, "out of memory");
        c->scope = s;
        if (!rc) rc = eval(c, n->c, &t);
        c->scope = saved;
        scope_release(s);
        if (rc) {
            jv_drop((jv){.k = JV_LIST, .l = l});
            return -1;
        }
        if (jv_truthy(t)) jlist_push(l, jv_ref(items->v[i]));
        jv_drop(t);
    }
    *out = l;
    return 0;
}

static jloop *loop_new(jctx *c, const jnode *n, jlist *items, int depth, jscope *scope)
{
    jloop *L = calloc(1, sizeof *L);
    if (!L) {
        jerr(c, n, "out of memory");
        return NULL;
    }
    L->gc.type = GC_LOOP;
    L->rc = 1;
    L->items = items;
    L->depth = depth;
    L->node = n;
    L->scope = scope;
    scope->rc++;
    jtrack_link(&c->live, &L->tr, JT_LOOP);
    return L;
}

static int loop_turn(jctx *c, const jnode *n, jv loopv, jv item, jscope *scope)
{
    jscope *s = scope_new(c, scope);
    if (!s) return jerr(c, n, "out of memory");
    int rc = scope_set(c, n, s, c->name_loop, jv_ref(loopv));
    if (!rc) rc = bind_target(c, n->a, s, item);
    jscope *saved = c->scope;
    c->scope = s;
    if (!rc) rc = exec_body(c, n->v, n->nv);
    c->scope = saved;
    scope_release(s);
    return rc;
}

/* Runs for-node N over ITEMS (borrowed) in SCOPE. */
static int run_loop(jctx *c, const jnode *n, jlist *items, int depth, jscope *scope)
{
    jlist *list = items;
    if (n->c && loop_filter(c, n, items, scope, &list)) return -1;
    if (list == items) items->rc++;
    jloop *L = loop_new(c, n, list, depth, scope);
    if (!L) {
        jv_drop((jv){.k = JV_LIST, .l = list});
        return -1;
    }
    jfunc *f = func_new(c, n, JF_LOOP);
    if (!f) {
        loop_release(L);
        return -1;
    }
    f->loop = L;
    jv loopv = {.k = JV_FUNC, .fn = f};
    int rc = 0;
    for (size_t i = 0; i < list->n && rc >= 0; i++) {
        L->i = i;
        rc = jcharge(c, n, 1) ? X_ERR : loop_turn(c, n, loopv, list->v[i], scope);
        if (rc == X_BREAK) break;
    }
    bool empty = list->n == 0;
    jv_drop(loopv);
    if (rc < 0) return X_ERR;
    if (empty && n->nw) {
        jscope *s = scope_new(c, scope), *saved = c->scope;
        if (!s) return jerr(c, n, "out of memory");
        c->scope = s;
        rc = exec_body(c, n->w, n->nw);
        c->scope = saved;
        scope_release(s);
        return rc < 0 ? X_ERR : X_OK;
    }
    return X_OK;
}

static int exec_for(jctx *c, const jnode *n)
{
    jv it;
    if (eval(c, n->b, &it)) return X_ERR;
    jlist *items;
    int rc = jiter(c, n->b, it, &items);
    jv_drop(it);
    if (rc) return X_ERR;
    rc = run_loop(c, n, items, 1, c->scope);
    jv_drop((jv){.k = JV_LIST, .l = items});
    return rc;
}

/* ---- statements -------------------------------------------------------- */

static int emit(jctx *c, const jnode *n, const char *s, size_t len)
{
    jbuf_put(c->out, s, len);
    if (!c->out->over) return jcharge(c, n, len / 64);
    return jerr(c, n, c->out->oom ? "out of memory" : "rendered output exceeds the limit of %zu bytes",
                c->lim.max_output);
}

static int emit_value(jctx *c, const jnode *n, jv v)
{
    size_t before = c->out->n;
    jv_write_str(c->out, v);
    if (c->out->over)
        return jerr(c, n, c->out->oom ? "out of memory" : "rendered output exceeds the limit of %zu bytes",
                    c->lim.max_output);
    return jcharge(c, n, (c->out->n - before) / 64);
}

/* Renders BODY in SCOPE (NULL: the current one) into a new string. */
static int render_capture(jctx *c, const jnode *n, jnode *const *body, uint32_t nbody, jscope *scope, jv *out)
{
    jbuf b = {.max = c->lim.max_output};
    jbuf *saved_out = c->out;
    jscope *saved_scope = c->scope;
    c->out = &b;
    if (scope) c->scope = scope;
    int rc = exec_body(c, body, nbody);
    c->out = saved_out;
    c->scope = saved_scope;
    if (rc < 0) {
        jbuf_free(&b);
        return -1;
    }
    return jmake_str(c, n, &b, out);
}

/* {% set ns.attr = V %} (V taken). */
static int assign_ns(jctx *c, const jnode *t, jscope *s, jv v)
{
    const jv *ns = scope_find(s, t->a->name);
    if (!ns || ns->k != JV_DICT || !ns->d->ns) {
        jv_drop(v);
        return jerr(c, t, "cannot assign attribute on non-namespace object '%s'", t->a->name->s);
    }
    if (jdict_set(ns->d, jv_ref((jv){.k = JV_STR, .s = t->name}), v)) return jerr(c, t, "out of memory");
    return 0;
}

static int assign(jctx *c, const jnode *t, jv v)
{
    if (t->kind == N_NAME) return scope_set(c, t, c->scope, t->name, v);
    if (t->kind == N_GETATTR) return assign_ns(c, t, c->scope, v);
    int rc = bind_target(c, t, c->scope, v);
    jv_drop(v);
    return rc;
}

static int exec_set(jctx *c, const jnode *n)
{
    jv v;
    int rc;
    if (n->kind == N_SET) {
        rc = eval(c, n->b, &v);
    } else {
        rc = render_capture(c, n, n->v, n->nv, NULL, &v);
        if (!rc && n->c) {
            jv f;
            rc = eval_filter(c, n->c, v, &f);
            jv_drop(v);
            v = f;
        }
    }
    return rc ? X_ERR : assign(c, n->a, v) ? X_ERR : X_OK;
}

static int exec_macro_def(jctx *c, const jnode *n)
{
    jfunc *f = func_new(c, n, JF_MACRO);
    if (!f) return X_ERR;
    f->macro = n;
    f->scope = c->scope;
    c->scope->rc++;
    return scope_set(c, n, c->scope, n->name, (jv){.k = JV_FUNC, .fn = f}) ? X_ERR : X_OK;
}

static int exec_call_block(jctx *c, const jnode *n)
{
    const jnode *call = n->a;
    jfunc *caller = func_new(c, n, JF_MACRO);
    if (!caller) return X_ERR;
    caller->macro = n;
    caller->scope = c->scope;
    c->scope->rc++;
    jv callerv = {.k = JV_FUNC, .fn = caller}, fn, res = jv_undef();
    jargs a = {0};
    int rc = eval(c, call->a, &fn);
    if (!rc) {
        rc = eval_args(c, call, &a);
        if (!rc && (fn.k != JV_FUNC || fn.fn->kind != JF_MACRO))
            rc = jerr(c, n, "{%% call %%} needs a macro to call");
        if (!rc) rc = call_macro(c, n, fn.fn, &a, callerv, &res);
        args_free(&a);
        jv_drop(fn);
    }
    jv_drop(callerv);
    if (!rc) rc = emit_value(c, n, res);
    jv_drop(res);
    return rc ? X_ERR : X_OK;
}

static int exec_filter_block(jctx *c, const jnode *n)
{
    jv body, res;
    if (render_capture(c, n, n->v, n->nv, NULL, &body)) return X_ERR;
    int rc = eval_filter(c, n->a, body, &res);
    jv_drop(body);
    if (!rc) {
        rc = emit_value(c, n, res);
        jv_drop(res);
    }
    return rc ? X_ERR : X_OK;
}

static int exec_with(jctx *c, const jnode *n)
{
    jscope *s = scope_new(c, c->scope);
    if (!s) return jerr(c, n, "out of memory");
    int rc = 0;
    for (uint32_t i = 0; i < n->nw && !rc; i++) {
        jv v;
        rc = eval(c, n->w[i], &v);
        if (!rc) rc = scope_set(c, n, s, n->names[i], v);
    }
    jscope *saved = c->scope;
    c->scope = s;
    if (!rc) rc = exec_body(c, n->v, n->nv);
    c->scope = saved;
    scope_release(s);
    return rc;
}

static int exec_inner(jctx *c, const jnode *n)
{
    jv v;
    switch (n->kind) {
    case N_DATA:
        return emit(c, n, n->name->s, n->name->len) ? X_ERR : X_OK;
    case N_OUTPUT: {
        if (eval(c, n->a, &v)) return X_ERR;
        int rc = emit_value(c, n, v);
        jv_drop(v);
        return rc ? X_ERR : X_OK;
    }
    case N_IF: {
        if (eval(c, n->a, &v)) return X_ERR;
        bool yes = jv_truthy(v);
        jv_drop(v);
        return yes ? exec_body(c, n->v, n->nv) : exec_body(c, n->w, n->nw);
    }
    case N_FOR: return exec_for(c, n);
    case N_SET: case N_SETBLOCK: return exec_set(c, n);
    case N_MACRO: return exec_macro_def(c, n);
    case N_CALLBLOCK: return exec_call_block(c, n);
    case N_FILTERBLOCK: return exec_filter_block(c, n);
    case N_BREAK: return X_BREAK;
    case N_CONTINUE: return X_CONTINUE;
    case N_WITH: return exec_with(c, n);
    case N_SCOPE: return exec_body(c, n->v, n->nv);
    default: return jerr(c, n, "internal error: expression in statement position");
    }
}

static int exec_body(jctx *c, jnode *const *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (++c->depth > c->lim.max_depth) {
            c->depth--;
            return jerr(c, v[i], "template evaluation nested deeper than %u levels", c->lim.max_depth);
        }
        int rc = jcharge(c, v[i], 1) ? X_ERR : exec_inner(c, v[i]);
        c->depth--;
        if (rc) return rc;
    }
    return X_OK;
}

/* ---- entry ------------------------------------------------------------- */

static int root_scope(jctx *c, const jdict *ctx)
{
    c->scope = scope_new(c, NULL);
    if (!c->scope) return jerr(c, NULL, "out of memory");
    for (size_t i = 0; ctx && i < ctx->n; i++) {
        if (ctx->k[i].k != JV_STR) return jerr(c, NULL, "context keys must be strings");
        if (scope_set(c, NULL, c->scope, ctx->k[i].s, jv_ref(ctx->v[i]))) return -1;
    }
    return 0;
}

int jinja_render(const jinja_tpl *t, const jdict *ctx, const struct tm *now, const jinja_limits *lim,
                 char **out, size_t *out_len, sl_err *err)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    jbuf b = {.max = lim->max_output};
    jctx c = {.t = t, .out = &b, .lim = *lim, .err = err};
    c.live.next = c.live.prev = &c.live;
    if (now) c.now = *now;
    jarena names = {0};
    c.name_loop = jarena_str(&names, "loop", 4);
    c.name_varargs = jarena_str(&names, "varargs", 7);
    c.name_kwargs = jarena_str(&names, "kwargs", 6);
    c.name_caller = jarena_str(&names, "caller", 6);
    int rc = c.name_loop && c.name_varargs && c.name_kwargs && c.name_caller ? root_scope(&c, ctx)
                                                                             : sl_errf(err, "out of memory");
    if (!rc) rc = exec_body(&c, t->body, t->nbody) < 0 ? -1 : 0;
    jscope *root = c.scope;
    c.scope = NULL;
    scope_release(root);
    release_live(&c);
    jarena_free(&names);
    if (rc) {
        jbuf_free(&b);
        return c.status ? c.status : -1;
    }
    if (!b.p && !(b.p = calloc(1, 1))) return sl_errf(err, "out of memory");
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}
