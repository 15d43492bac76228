/* Parser: tokens to an AST, following Jinja2's grammar and operator
 * precedence (jinja2/parser.py): conditional expressions, or, and, not,
 * comparisons, + -, ~, * / // %, **, unary - +, then primaries with
 * postfix access, calls, filters and tests.  Filters and tests are
 * resolved here, so an unknown one fails before anything renders. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

#define MAX_PARSE_DEPTH 200

typedef struct {
    const jtok *t;
    size_t n, i;
    jarena *a;
    const char *src;
    size_t len;
    sl_err *err;
    int rc;              /* 0, -1 or JINJA_UNSUPPORTED after a failure */
    int depth;
    int loop_depth;      /* enclosing for loops (break / continue) */
    uint8_t *mflags;     /* flags of the macro being parsed */
    const char *const *ends;   /* end tags the innermost open block waits for */
    bool soft;           /* inside an if-block or conditional expression */
    const jnode *unknown;      /* first filter/test that does not exist outside one */
    uint32_t open_pos[MAX_PARSE_DEPTH + 2];   /* positions of open block tags */
    int nopen;
} parser;

typedef struct {
    jnode **p;
    size_t n, cap;
} nvec;

static const jtok *cur(const parser *P) { return &P->t[P->i]; }
static const jtok *peek(const parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }

static void vfail(parser *P, int rc, uint32_t pos, const char *fmt, va_list ap)
{
    if (P->rc) return;
    P->rc = rc;
    int line, col;
    jinja_linecol(P->src, P->len, pos, &line, &col);
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    sl_errf(P->err, "line %d, column %d: %s", line, col, msg);
}

static void *fail(parser *P, uint32_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *fail(parser *P, uint32_t pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(P, -1, pos, fmt, ap);
    va_end(ap);
    return NULL;
}

static void *unsupported(parser *P, uint32_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *unsupported(parser *P, uint32_t pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(P, JINJA_UNSUPPORTED, pos, fmt, ap);
    va_end(ap);
    return NULL;
}

static void *oom(parser *P) { return fail(P, cur(P)->pos, "out of memory"); }

static const char *describe(const jtok *t, char *buf, size_t cap)
{
    static const char *const opname[] = {
        "", "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}",
        "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";", "in", "not in",
    };
    switch (t->k) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "begin of print statement";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "begin of statement block";
    case T_BLOCK_END: return "end of statement block";
    case T_NAME: snprintf(buf, cap, "%.*s", (int)(t->n < 64 ? t->n : 64), t->s); return buf;
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    default: return opname[t->op];
    }
}

static bool is_op(const parser *P, jop op) { return cur(P)->k == T_OP && cur(P)->op == op; }

static bool tok_is_name(const jtok *t, const char *name)
{
    return t->k == T_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static bool is_name(const parser *P, const char *name) { return tok_is_name(cur(P), name); }

static bool expect_op(parser *P, jop op, const char *what)
{
    if (is_op(P, op)) {
        adv(P);
        return true;
    }
    char buf[80];
    fail(P, cur(P)->pos, "expected '%s', got '%s'", what, describe(cur(P), buf, sizeof buf));
    return false;
}

static bool expect_kind(parser *P, jtok_kind k)
{
    if (cur(P)->k == k) {
        adv(P);
        return true;
    }
    char buf[80];
    const jtok want = {.k = k};
    char b2[80];
    fail(P, cur(P)->pos, "expected '%s', got '%s'", describe(&want, b2, sizeof b2), describe(cur(P), buf, sizeof buf));
    return false;
}

static bool expect_name(parser *P, const char *name)
{
    if (is_name(P, name)) {
        adv(P);
        return true;
    }
    char buf[80];
    fail(P, cur(P)->pos, "expected '%s', got '%s'", name, describe(cur(P), buf, sizeof buf));
    return false;
}

static jnode *node(parser *P, jnode_kind k, uint32_t pos)
{
    jnode *n = jarena_alloc(P->a, sizeof *n);
    if (!n) return oom(P);
    n->kind = k;
    n->pos = pos;
    return n;
}

static jstr *tok_str(parser *P, const jtok *t)
{
    jstr *s = jarena_str(P->a, t->s, t->n);
    if (!s) oom(P);
    return s;
}

/* Appends N (which may be NULL: a parameter without default). */
static bool vappend(parser *P, nvec *v, jnode *n)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        jnode **p = realloc(v->p, nc * sizeof *p);
        if (!p) {
            oom(P);
            return false;
        }
        v->p = p;
        v->cap = nc;
    }
    v->p[v->n++] = n;
    return true;
}

/* Appends N; a NULL N is a failed parse. */
static bool vpush(parser *P, nvec *v, jnode *n)
{
    return n && vappend(P, v, n);
}

/* Moves a vector into the arena. */
static jnode **vfinish(parser *P, nvec *v, uint32_t *n)
{
    jnode **r = NULL;
    if (v->n) {
        r = jarena_alloc(P->a, v->n * sizeof *r);
        if (r) memcpy(r, v->p, v->n * sizeof *r);
        else oom(P);
    }
    *n = (uint32_t)v->n;
    free(v->p);
    *v = (nvec){0};
    return r;
}

static bool enter(parser *P)
{
    if (++P->depth > MAX_PARSE_DEPTH) {
        fail(P, cur(P)->pos, "template nested more than %d levels deep", MAX_PARSE_DEPTH);
        return false;
    }
    return true;
}

/* ---- expressions --------------------------------------------------------- */

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);
static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *end1, bool parens);

/* Jinja only insists on a filter or test existing at compile time outside
 * if-blocks and conditional expressions; inside them a missing one fails
 * when (and only if) it runs (P->soft; P->unknown keeps the first hard one). */
static jnode *parse_condexpr(parser *P)
{
    const jnode *unknown_before = P->unknown;
    bool saved = P->soft;
    jnode *e = parse_or(P);
    while (e && is_name(P, "if")) {
        jnode *c = node(P, N_COND, cur(P)->pos);
        adv(P);
        if (!c) return NULL;
        if (!unknown_before) P->unknown = NULL;   /* the operand before "if" is soft too */
        P->soft = true;
        c->b = e;
        c->a = parse_or(P);
        if (!c->a) return NULL;
        if (is_name(P, "else")) {
            adv(P);
            if (!enter(P)) return NULL;
            c->c = parse_condexpr(P);
            P->depth--;
            if (!c->c) return NULL;
        }
        e = c;
    }
    P->soft = saved;
    return e;
}

static jnode *parse_expr(parser *P)
{
    if (!enter(P)) return NULL;
    jnode *e = parse_condexpr(P);
    P->depth--;
    return e;
}

static jnode *parse_not(parser *P);

static jnode *parse_logic(parser *P, const char *word, jnode_kind k)
{
    jnode *l = k == N_OR ? parse_logic(P, "and", N_AND) : parse_not(P);
    while (l && is_name(P, word)) {
        jnode *n = node(P, k, cur(P)->pos);
        adv(P);
        if (!n) return NULL;
        n->a = l;
        n->b = k == N_OR ? parse_logic(P, "and", N_AND) : parse_not(P);
        if (!n->b) return NULL;
        l = n;
    }
    return l;
}

static jnode *parse_or(parser *P) { return parse_logic(P, "or", N_OR); }

static jnode *parse_math1(parser *P);

static jnode *parse_compare(parser *P)
{
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    nvec ops = {0};
    uint8_t opk[64];
    uint32_t pos = cur(P)->pos;
    for (;;) {
        const jtok *t = cur(P);
        int op = 0;
        if (t->k == T_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LE ||
                             t->op == OP_GT || t->op == OP_GE)) {
            op = t->op;
            adv(P);
        } else if (is_name(P, "in")) {
            op = OP_IN;
            adv(P);
        } else if (is_name(P, "not") && tok_is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            adv(P);
            adv(P);
        } else {
            break;
        }
        if (ops.n == sizeof opk) {
            free(ops.p);
            return fail(P, t->pos, "too many chained comparisons");
        }
        opk[ops.n] = (uint8_t)op;
        if (!vpush(P, &ops, parse_math1(P))) {
            free(ops.p);
            return NULL;
        }
    }
    if (!ops.n) return first;
    jnode *n = node(P, N_COMPARE, pos);
    if (!n) {
        free(ops.p);
        return NULL;
    }
    n->a = first;
    n->ops = jarena_alloc(P->a, ops.n);
    if (!n->ops) {
        free(ops.p);
        return oom(P);
    }
    memcpy(n->ops, opk, ops.n);
    n->v = vfinish(P, &ops, &n->nv);
    return P->rc ? NULL : n;
}

static jnode *parse_not(parser *P)
{
    if (is_name(P, "not")) {
        jnode *n = node(P, N_NOT, cur(P)->pos);
        adv(P);
        if (!n || !enter(P)) return NULL;
        n->a = parse_not(P);
        P->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

/* Left-associative binary levels: + -, * / // %, ** */
static jnode *parse_binlevel(parser *P, int level);

static jnode *parse_operand(parser *P, int level)
{
    return level == 2 ? parse_unary(P, true) : parse_binlevel(P, level + 1);
}

static bool level_has(int level, jop op)
{
    switch (level) {
    case 0: return op == OP_ADD || op == OP_SUB;
    case 1: return op == OP_MUL || op == OP_DIV || op == OP_FLOORDIV || op == OP_MOD;
    default: return op == OP_POW;
    }
}

static jnode *parse_concat(parser *P);

static jnode *parse_binlevel(parser *P, int level)
{
    jnode *l = level == 0 ? parse_concat(P) : parse_operand(P, level);
    while (l && cur(P)->k == T_OP && level_has(level, cur(P)->op)) {
        jnode *n = node(P, N_BIN, cur(P)->pos);
        if (!n) return NULL;
        n->op = (uint8_t)cur(P)->op;
        adv(P);
        n->a = l;
        n->b = level == 0 ? parse_concat(P) : parse_operand(P, level);
        if (!n->b) return NULL;
        l = n;
    }
    return l;
}

static jnode *parse_math1(parser *P) { return parse_binlevel(P, 0); }

static jnode *parse_concat(parser *P)
{
    jnode *first = parse_binlevel(P, 1);
    if (!first || !is_op(P, OP_TILDE)) return first;
    jnode *n = node(P, N_CONCAT, cur(P)->pos);
    nvec v = {0};
    if (!n || !vpush(P, &v, first)) return NULL;
    while (is_op(P, OP_TILDE)) {
        adv(P);
        if (!vpush(P, &v, parse_binlevel(P, 1))) {
            free(v.p);
            return NULL;
        }
    }
    n->v = vfinish(P, &v, &n->nv);
    return P->rc ? NULL : n;
}

/* Call arguments "(a, b, k=v)" into N's v / names / w. */
static bool parse_call_args(parser *P, jnode *n)
{
    if (!expect_op(P, OP_LPAREN, "(")) return false;
    nvec args = {0}, kw = {0}, names = {0};
    bool ok = true;
    while (ok && !is_op(P, OP_RPAREN)) {
        if (args.n + kw.n) {
            if (!(ok = expect_op(P, OP_COMMA, ","))) break;
            if (is_op(P, OP_RPAREN)) break;
        }
        if (is_op(P, OP_MUL) || is_op(P, OP_POW)) {
            unsupported(P, cur(P)->pos, "unsupported template feature: *args / **kwargs in a call");
            ok = false;
        } else if (cur(P)->k == T_NAME && peek(P, 1)->k == T_OP && peek(P, 1)->op == OP_ASSIGN) {
            jnode *kn = node(P, N_CONST, cur(P)->pos);
            if (kn) kn->name = tok_str(P, cur(P));
            adv(P);
            adv(P);
            ok = kn && kn->name && vpush(P, &names, kn) && vpush(P, &kw, parse_expr(P));
        } else if (kw.n) {
            fail(P, cur(P)->pos, "invalid syntax for function call expression: positional argument after keyword argument");
            ok = false;
        } else {
            ok = vpush(P, &args, parse_expr(P));
        }
    }
    if (ok) ok = expect_op(P, OP_RPAREN, ")");
    n->v = vfinish(P, &args, &n->nv);
    n->w = vfinish(P, &kw, &n->nw);
    uint32_t nn;
    jnode **nm = vfinish(P, &names, &nn);
    if (nn) {
        n->names = jarena_alloc(P->a, nn * sizeof *n->names);
        if (!n->names) return oom(P), false;
        for (uint32_t i = 0; i < nn; i++) n->names[i] = nm[i]->name;
        n->nnames = nn;
    }
    return ok && !P->rc;
}

/* The call "CALLEE(args)" as an N_CALL node; NULL on error. */
static jnode *parse_call(parser *P, jnode *callee)
{
    jnode *c = node(P, N_CALL, cur(P)->pos);
    if (!c) return NULL;
    c->a = callee;
    return parse_call_args(P, c) ? c : NULL;
}

static jnode *parse_dotted_name(parser *P, jnode *n)
{
    if (cur(P)->k != T_NAME) {
        char buf[80];
        return fail(P, cur(P)->pos, "expected a name, got '%s'", describe(cur(P), buf, sizeof buf));
    }
    /* "a.b" names exist in Jinja (filters registered under dotted names) */
    const jtok *t = cur(P);
    size_t len = t->n;
    adv(P);
    while (is_op(P, OP_DOT) && peek(P, 1)->k == T_NAME) {
        adv(P);
        len = (size_t)(cur(P)->s + cur(P)->n - t->s);
        adv(P);
    }
    n->name = jarena_str(P->a, t->s, len);
    return n->name ? n : oom(P);
}

static jnode *parse_filter(parser *P, jnode *operand, bool start_inline)
{
    while (is_op(P, OP_PIPE) || start_inline) {
        if (!start_inline) adv(P);
        start_inline = false;
        jnode *f = node(P, N_FILTER, cur(P)->pos);
        if (!f || !parse_dotted_name(P, f)) return NULL;
        f->fn = jfind_filter(f->name->s, f->name->len);
        if (!f->fn && !P->soft && !P->unknown) P->unknown = f;
        f->a = operand;
        if (is_op(P, OP_LPAREN) && !parse_call_args(P, f)) return NULL;
        operand = f;
    }
    return operand;
}

static jnode *parse_test(parser *P, jnode *operand)
{
    uint32_t pos = cur(P)->pos;
    adv(P);   /* is */
    bool negated = is_name(P, "not");
    if (negated) adv(P);
    jnode *t = node(P, N_TEST, pos);
    if (!t || !parse_dotted_name(P, t)) return NULL;
    t->fn = jfind_test(t->name->s, t->name->len);
    if (!t->fn && !P->soft && !P->unknown) P->unknown = t;
    t->a = operand;
    const jtok *c = cur(P);
    if (is_op(P, OP_LPAREN)) {
        if (!parse_call_args(P, t)) return NULL;
    } else if ((c->k == T_NAME || c->k == T_STRING || c->k == T_INT || c->k == T_FLOAT ||
                (c->k == T_OP && (c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) return fail(P, c->pos, "you cannot chain multiple tests with is");
        jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg) return NULL;
        t->v = jarena_alloc(P->a, sizeof *t->v);
        if (!t->v) return oom(P);
        t->v[0] = arg;
        t->nv = 1;
    }
    if (!negated) return t;
    jnode *n = node(P, N_NOT, pos);
    if (n) n->a = t;
    return n;
}

static jnode *parse_filter_expr(parser *P, jnode *n)
{
    while (n) {
        if (is_op(P, OP_PIPE)) {
            n = parse_filter(P, n, false);
        } else if (is_name(P, "is")) {
            n = parse_test(P, n);
        } else if (is_op(P, OP_LPAREN)) {
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter)
{
    if (!enter(P)) return NULL;
    jnode *n;
    if (is_op(P, OP_SUB) || is_op(P, OP_ADD)) {
        n = node(P, is_op(P, OP_SUB) ? N_NEG : N_POS, cur(P)->pos);
        adv(P);
        if (n && !(n->a = parse_unary(P, false))) n = NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

/* One subscript item: an expression or a slice a:b:c. */
static jnode *parse_subscribed(parser *P)
{
    uint32_t pos = cur(P)->pos;
    jnode *start = NULL;
    if (!is_op(P, OP_COLON)) {
        start = parse_expr(P);
        if (!start || !is_op(P, OP_COLON)) return start;
    }
    adv(P);   /* : */
    jnode *s = node(P, N_SLICE, pos);
    if (!s) return NULL;
    s->a = start;
    if (!is_op(P, OP_COLON) && !is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA) && !(s->b = parse_expr(P))) return NULL;
    if (is_op(P, OP_COLON)) {
        adv(P);
        if (!is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA) && !(s->c = parse_expr(P))) return NULL;
    }
    return s;
}

static jnode *parse_subscript(parser *P, jnode *obj)
{
    const jtok *t = cur(P);
    adv(P);
    if (t->op == OP_DOT) {
        const jtok *a = cur(P);
        if (a->k == T_NAME) {
            jnode *n = node(P, N_GETATTR, t->pos);
            if (!n) return NULL;
            n->a = obj;
            n->name = tok_str(P, a);
            adv(P);
            return n->name ? n : NULL;
        }
        if (a->k != T_INT) return fail(P, a->pos, "expected name or number after '.'");
        jnode *k = node(P, N_CONST, a->pos), *n = node(P, N_GETITEM, t->pos);
        if (!k || !n) return NULL;
        k->val = a->val;
        n->a = obj;
        n->b = k;
        adv(P);
        return n;
    }
    nvec items = {0};
    while (!is_op(P, OP_RBRACKET)) {
        if (items.n && !expect_op(P, OP_COMMA, ",")) break;
        if (!vpush(P, &items, parse_subscribed(P))) break;
    }
    if (P->rc || !expect_op(P, OP_RBRACKET, "]")) {
        free(items.p);
        return NULL;
    }
    jnode *n = node(P, N_GETITEM, t->pos);
    if (!n) {
        free(items.p);
        return NULL;
    }
    n->a = obj;
    if (items.n == 1) {
        n->b = items.p[0];
        free(items.p);
        return n;
    }
    jnode *tup = node(P, N_TUPLE, t->pos);
    if (!tup) return free(items.p), NULL;
    tup->v = vfinish(P, &items, &tup->nv);
    n->b = tup;
    return P->rc ? NULL : n;
}

static jnode *parse_postfix(parser *P, jnode *n)
{
    while (n) {
        if (is_op(P, OP_DOT) || is_op(P, OP_LBRACKET)) {
            n = parse_subscript(P, n);
        } else if (is_op(P, OP_LPAREN)) {
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

static jnode *parse_list_lit(parser *P)
{
    jnode *n = node(P, N_LIST, cur(P)->pos);
    adv(P);
    nvec v = {0};
    while (n && !is_op(P, OP_RBRACKET)) {
        if (v.n && !expect_op(P, OP_COMMA, ",")) break;
        if (is_op(P, OP_RBRACKET)) break;
        if (!vpush(P, &v, parse_expr(P))) break;
    }
    if (!n || P->rc || !expect_op(P, OP_RBRACKET, "]")) {
        free(v.p);
        return NULL;
    }
    n->v = vfinish(P, &v, &n->nv);
    return P->rc ? NULL : n;
}

static jnode *parse_dict_lit(parser *P)
{
    jnode *n = node(P, N_DICT, cur(P)->pos);
    adv(P);
    nvec k = {0}, v = {0};
    while (n && !is_op(P, OP_RBRACE)) {
        if (k.n && !expect_op(P, OP_COMMA, ",")) break;
        if (is_op(P, OP_RBRACE)) break;
        if (!vpush(P, &k, parse_expr(P)) || !expect_op(P, OP_COLON, ":") || !vpush(P, &v, parse_expr(P))) break;
    }
    if (!n || P->rc || !expect_op(P, OP_RBRACE, "}")) {
        free(k.p);
        free(v.p);
        return NULL;
    }
    n->v = vfinish(P, &k, &n->nv);
    n->w = vfinish(P, &v, &n->nw);
    return P->rc ? NULL : n;
}

static jnode *parse_name_primary(parser *P, const jtok *t)
{
    jnode *n = node(P, N_CONST, t->pos);
    if (!n) return NULL;
    if (tok_is_name(t, "true") || tok_is_name(t, "True")) n->val = jv_bool(true);
    else if (tok_is_name(t, "false") || tok_is_name(t, "False")) n->val = jv_bool(false);
    else if (tok_is_name(t, "none") || tok_is_name(t, "None")) n->val = jv_none();
    else {
        n->kind = N_NAME;
        n->name = tok_str(P, t);
        if (!n->name) return NULL;
        if (P->mflags) {
            if (tok_is_name(t, "caller")) *P->mflags |= JM_CALLER;
            if (tok_is_name(t, "varargs")) *P->mflags |= JM_VARARGS;
            if (tok_is_name(t, "kwargs")) *P->mflags |= JM_KWARGS;
        }
    }
    adv(P);
    return n;
}

/* Adjacent string literals concatenate. */
static jnode *parse_string_primary(parser *P)
{
    const jtok *t = cur(P);
    jnode *n = node(P, N_CONST, t->pos);
    if (!n) return NULL;
    adv(P);
    if (cur(P)->k != T_STRING) {
        n->val = t->val;
        return n;
    }
    jbuf b = {.max = SIZE_MAX};
    jbuf_put(&b, t->val.s->s, t->val.s->len);
    while (cur(P)->k == T_STRING) {
        jbuf_put(&b, cur(P)->val.s->s, cur(P)->val.s->len);
        adv(P);
    }
    jstr *s = b.oom ? NULL : jarena_str(P->a, b.p, b.n);
    jbuf_free(&b);
    if (!s) return oom(P);
    n->val = (jv){.k = JV_STR, .s = s};
    return n;
}

static jnode *parse_primary(parser *P)
{
    const jtok *t = cur(P);
    char buf[80];
    switch (t->k) {
    case T_NAME: return parse_name_primary(P, t);
    case T_STRING: return parse_string_primary(P);
    case T_INT: case T_FLOAT: {
        jnode *n = node(P, N_CONST, t->pos);
        if (n) n->val = t->val;
        adv(P);
        return n;
    }
    case T_OP:
        if (t->op == OP_LPAREN) {
            adv(P);
            jnode *n = parse_tuple(P, false, true, NULL, true);
            return n && expect_op(P, OP_RPAREN, ")") ? n : NULL;
        }
        if (t->op == OP_LBRACKET) return parse_list_lit(P);
        if (t->op == OP_LBRACE) return parse_dict_lit(P);
        /* fall through */
    default:
        return fail(P, t->pos, "unexpected '%s'", describe(t, buf, sizeof buf));
    }
}

static bool tuple_end(const parser *P, const char *end1)
{
    const jtok *t = cur(P);
    if (t->k == T_VAR_END || t->k == T_BLOCK_END || (t->k == T_OP && t->op == OP_RPAREN)) return true;
    return end1 && is_name(P, end1);
}

/* Expression list: a single expression, or a tuple when commas appear. */
static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *end1, bool parens)
{
    uint32_t pos = cur(P)->pos;
    nvec v = {0};
    bool is_tuple = false;
    if (!enter(P)) return NULL;
    for (;;) {
        if (v.n && !expect_op(P, OP_COMMA, ",")) break;
        if (tuple_end(P, end1)) break;
        jnode *e = simplified ? parse_primary(P) : with_condexpr ? parse_expr(P) : parse_or(P);
        if (!vpush(P, &v, e)) break;
        if (is_op(P, OP_COMMA)) is_tuple = true;
        else break;
    }
    P->depth--;
    if (P->rc) {
        free(v.p);
        return NULL;
    }
    if (!is_tuple && v.n) {
        jnode *e = v.p[0];
        free(v.p);
        return e;
    }
    if (!is_tuple && !parens) {
        char buf[80];
        free(v.p);
        return fail(P, cur(P)->pos, "expected an expression, got '%s'", describe(cur(P), buf, sizeof buf));
    }
    jnode *n = node(P, N_TUPLE, pos);
    if (!n) return free(v.p), NULL;
    n->v = vfinish(P, &v, &n->nv);
    return P->rc ? NULL : n;
}

/* ---- statements -------------------------------------------------------- */

static bool subparse(parser *P, const char *const *ends, nvec *body);
static bool subparse_loop(parser *P, const char *const *ends, nvec *body);

static bool parse_body_in(parser *P, const char *const *ends, bool drop, jnode ***v, uint32_t *n, bool soft);
static bool parse_body_raw(parser *P, const char *const *ends, bool drop, jnode ***v, uint32_t *n);

/* Statement header done: expects "%}", then the body up to one of ENDS
 * into *V / *N.  With DROP the end tag's name is consumed. */
static bool parse_body(parser *P, const char *const *ends, bool drop, jnode ***v, uint32_t *n)
{
    return parse_body_in(P, ends, drop, v, n, false);
}

/* SOFT: the body stays in the enclosing frame (if-blocks); other blocks
 * get an inner frame, where missing filters are compile errors again. */
static bool parse_body_in(parser *P, const char *const *ends, bool drop, jnode ***v, uint32_t *n, bool soft)
{
    bool saved = P->soft;
    if (!soft) P->soft = false;
    bool ok = parse_body_raw(P, ends, drop, v, n);
    P->soft = saved;
    return ok;
}

static bool parse_body_raw(parser *P, const char *const *ends, bool drop, jnode ***v, uint32_t *n)
{
    nvec body = {0};
    if (is_op(P, OP_COLON)) adv(P);   /* Jinja accepts "{% if x: %}" */
    if (!expect_kind(P, T_BLOCK_END) || !subparse(P, ends, &body)) {
        free(body.p);
        return false;
    }
    if (drop) adv(P);
    *v = vfinish(P, &body, n);
    return !P->rc;
}

/* Bodies whose output is captured into a value (set and filter blocks):
 * a loop control inside could not leave them, so none is allowed. */
static bool parse_captured_body(parser *P, const char *const *ends, jnode *n)
{
    int saved = P->loop_depth;
    P->loop_depth = 0;
    bool ok = parse_body(P, ends, true, &n->v, &n->nv);
    P->loop_depth = saved;
    return ok;
}

/* "ns.attr" at the current position (set targets only). */
static jnode *parse_ns_ref(parser *P)
{
    const jtok *t = cur(P);
    jnode *n = node(P, N_GETATTR, t->pos), *base = node(P, N_NAME, t->pos);
    if (!n || !base || !(base->name = tok_str(P, t))) return NULL;
    adv(P);
    adv(P);
    if (cur(P)->k != T_NAME) return fail(P, cur(P)->pos, "expected an attribute name after '.'");
    n->a = base;
    n->name = tok_str(P, cur(P));
    adv(P);
    return n->name ? n : NULL;
}

static bool at_ns_ref(const parser *P)
{
    return cur(P)->k == T_NAME && peek(P, 1)->k == T_OP && peek(P, 1)->op == OP_DOT;
}

/* Targets of set / for / with: names, tuples of names and, for set
 * (WITH_NS), namespace attributes, also inside a tuple as Jinja 3.1.6 takes. */
static jnode *parse_assign_target(parser *P, bool with_tuple, const char *end1, bool with_ns)
{
    uint32_t pos = cur(P)->pos;
    nvec items = {0};
    bool tuple = false;
    while (!P->rc) {
        if (items.n && !expect_op(P, OP_COMMA, ",")) break;
        if (items.n && tuple_end(P, end1)) break;
        jnode *e = with_ns && at_ns_ref(P) ? parse_ns_ref(P) : parse_primary(P);
        if (!vpush(P, &items, e)) break;
        if (!with_tuple || !is_op(P, OP_COMMA)) break;
        tuple = true;
    }
    if (P->rc) {
        free(items.p);
        return NULL;
    }
    jnode *n = items.p[0];
    if (tuple) {
        n = node(P, N_TUPLE, pos);
        if (!n) return free(items.p), NULL;
        n->v = vfinish(P, &items, &n->nv);
    } else {
        free(items.p);
    }
    /* GETATTR nodes only come from parse_ns_ref, so only with WITH_NS */
    bool ok = n->kind == N_NAME || n->kind == N_GETATTR || (n->kind == N_TUPLE && n->nv > 0);
    for (uint32_t i = 0; n->kind == N_TUPLE && i < n->nv; i++)
        ok = ok && (n->v[i]->kind == N_NAME || n->v[i]->kind == N_GETATTR);
    return ok ? n : fail(P, n->pos, "can't assign to this expression (only names, name tuples and namespace attributes)");
}

static jnode *parse_if(parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    jnode *top = node(P, N_IF, cur(P)->pos), *n = top;
    adv(P);
    bool saved = P->soft;
    P->soft = true;
    while (n) {
        n->a = parse_tuple(P, false, false, NULL, false);
        if (!n->a || !parse_body_in(P, ends, false, &n->v, &n->nv, true)) return NULL;
        if (is_name(P, "elif")) {
            jnode *e = node(P, N_IF, cur(P)->pos);
            adv(P);
            if (!e || !(n->w = jarena_alloc(P->a, sizeof *n->w))) return oom(P);
            n->w[0] = e;
            n->nw = 1;
            n = e;
            continue;
        }
        if (is_name(P, "else")) {
            adv(P);
            if (!parse_body_in(P, endif, true, &n->w, &n->nw, true)) return NULL;
        } else {
            adv(P);   /* endif */
        }
        break;
    }
    P->soft = saved;
    return top;
}

static jnode *parse_for(parser *P)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    jnode *n = node(P, N_FOR, cur(P)->pos);
    adv(P);
    if (!n || !(n->a = parse_assign_target(P, true, "in", false)) || !expect_name(P, "in")) return NULL;
    if (!(n->b = parse_tuple(P, false, false, "recursive", false))) return NULL;
    if (is_name(P, "if")) {
        adv(P);
        if (!(n->c = parse_expr(P))) return NULL;
    }
    if (is_name(P, "recursive")) {
        adv(P);
        n->op = 1;
    }
    P->loop_depth++;
    bool ok = parse_body(P, ends, false, &n->v, &n->nv);
    P->loop_depth--;
    if (!ok) return NULL;
    if (is_name(P, "else")) {
        adv(P);
        if (!parse_body(P, endfor, true, &n->w, &n->nw)) return NULL;
    } else {
        adv(P);
    }
    return n;
}

static jnode *parse_set(parser *P)
{
    static const char *const ends[] = {"endset", NULL};
    uint32_t pos = cur(P)->pos;
    adv(P);
    jnode *target = parse_assign_target(P, true, NULL, true);
    if (!target) return NULL;
    if (is_op(P, OP_ASSIGN)) {
        adv(P);
        jnode *n = node(P, N_SET, pos);
        if (!n) return NULL;
        n->a = target;
        n->b = parse_tuple(P, false, true, NULL, false);
        return n->b ? n : NULL;
    }
    jnode *n = node(P, N_SETBLOCK, pos);
    if (!n) return NULL;
    n->a = target;
    if (is_op(P, OP_PIPE) && !(n->c = parse_filter(P, NULL, false))) return NULL;
    return parse_captured_body(P, ends, n) ? n : NULL;
}

/* "(a, b=default)" of a macro or call block into names / w. */
static bool parse_signature(parser *P, jnode *n)
{
    if (!expect_op(P, OP_LPAREN, "(")) return false;
    nvec names = {0}, defs = {0};
    bool ok = true, seen_default = false;
    while (ok && !is_op(P, OP_RPAREN)) {
        if (names.n && !(ok = expect_op(P, OP_COMMA, ","))) break;
        if (cur(P)->k != T_NAME) {
            fail(P, cur(P)->pos, "expected a parameter name");
            ok = false;
            break;
        }
        jnode *pn = node(P, N_NAME, cur(P)->pos);
        ok = pn && (pn->name = tok_str(P, cur(P))) && vpush(P, &names, pn);
        adv(P);
        jnode *d = NULL;
        if (ok && is_op(P, OP_ASSIGN)) {
            adv(P);
            ok = (d = parse_expr(P)) != NULL;
            seen_default = true;
        } else if (ok && seen_default) {
            fail(P, pn->pos, "non-default argument follows default argument");
            ok = false;
        }
        if (ok) ok = vappend(P, &defs, d);
    }
    if (ok) ok = expect_op(P, OP_RPAREN, ")");
    uint32_t nn;
    jnode **nm = vfinish(P, &names, &nn);
    n->w = vfinish(P, &defs, &n->nw);
    if (ok && nn) {
        n->names = jarena_alloc(P->a, nn * sizeof *n->names);
        if (!n->names) return oom(P), false;
        for (uint32_t i = 0; i < nn; i++) n->names[i] = nm[i]->name;
    }
    n->nnames = nn;
    return ok && !P->rc;
}

/* Body of a macro or call block: its own loop and special-name context. */
static bool parse_callable_body(parser *P, jnode *n, const char *const *ends)
{
    uint8_t *saved = P->mflags;
    int saved_loops = P->loop_depth;
    P->mflags = &n->op;
    P->loop_depth = 0;
    bool ok = parse_body(P, ends, true, &n->v, &n->nv);
    P->mflags = saved;
    P->loop_depth = saved_loops;
    return ok;
}

static jnode *parse_macro(parser *P)
{
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = node(P, N_MACRO, cur(P)->pos);
    adv(P);
    if (!n) return NULL;
    if (cur(P)->k != T_NAME) return fail(P, cur(P)->pos, "expected a macro name");
    n->name = tok_str(P, cur(P));
    adv(P);
    if (!n->name || !parse_signature(P, n)) return NULL;
    return parse_callable_body(P, n, ends) ? n : NULL;
}

static jnode *parse_call_block(parser *P)
{
    static const char *const ends[] = {"endcall", NULL};
    jnode *n = node(P, N_CALLBLOCK, cur(P)->pos);
    adv(P);
    if (!n) return NULL;
    if (is_op(P, OP_LPAREN) && !parse_signature(P, n)) return NULL;
    n->a = parse_expr(P);
    if (!n->a) return NULL;
    if (n->a->kind != N_CALL) return fail(P, n->a->pos, "expected a call after 'call'");
    return parse_callable_body(P, n, ends) ? n : NULL;
}

static jnode *parse_filter_block(parser *P)
{
    static const char *const ends[] = {"endfilter", NULL};
    jnode *n = node(P, N_FILTERBLOCK, cur(P)->pos);
    adv(P);
    if (!n || !(n->a = parse_filter(P, NULL, true))) return NULL;
    return parse_captured_body(P, ends, n) ? n : NULL;
}

static jnode *parse_with(parser *P)
{
    static const char *const ends[] = {"endwith", NULL};
    jnode *n = node(P, N_WITH, cur(P)->pos);
    adv(P);
    nvec names = {0}, vals = {0};
    bool ok = n != NULL;
    while (ok && cur(P)->k != T_BLOCK_END) {
        if (names.n && !(ok = expect_op(P, OP_COMMA, ","))) break;
        jnode *t = parse_assign_target(P, false, NULL, false);
        ok = t && vpush(P, &names, t) && expect_op(P, OP_ASSIGN, "=") && vpush(P, &vals, parse_expr(P));
    }
    uint32_t nn;
    jnode **nm = vfinish(P, &names, &nn);
    if (!ok || P->rc) {
        free(vals.p);
        return NULL;
    }
    n->w = vfinish(P, &vals, &n->nw);
    n->names = nn ? jarena_alloc(P->a, nn * sizeof *n->names) : NULL;
    if (nn && !n->names) return oom(P);
    for (uint32_t i = 0; i < nn; i++) n->names[i] = nm[i]->name;
    n->nnames = nn;
    return parse_body(P, ends, true, &n->v, &n->nv) ? n : NULL;
}

/* {% generation %}: transformers' marker for assistant tokens; renders its body. */
static jnode *parse_scope_block(parser *P, const char *end)
{
    const char *ends[] = {end, NULL};
    jnode *n = node(P, N_SCOPE, cur(P)->pos);
    adv(P);
    return n && parse_body_in(P, ends, true, &n->v, &n->nv, true) ? n : NULL;
}

static jnode *parse_loop_control(parser *P, jnode_kind k)
{
    if (!P->loop_depth) return fail(P, cur(P)->pos, "'%s' outside of a for loop", k == N_BREAK ? "break" : "continue");
    jnode *n = node(P, k, cur(P)->pos);
    adv(P);
    return n;
}

/* " (expected 'elif', 'else' or 'endif')" for the innermost open block. */
static void expected_tags(const char *const *ends, char *buf, size_t cap)
{
    buf[0] = 0;
    if (!ends) return;
    size_t k = (size_t)snprintf(buf, cap, " (expected ");
    for (int i = 0; ends[i] && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s'%s'", i == 0 ? "" : ends[i + 1] ? ", " : " or ", ends[i]);
    if (k < cap) snprintf(buf + k, cap - k, ")");
}

static jnode *parse_statement(parser *P)
{
    static const char *const unsup[] = {
        "extends", "block", "include", "import", "from", "do", "trans", "autoescape", "pluralize", NULL,
    };
    const jtok *t = cur(P);
    char buf[80];
    if (t->k != T_NAME) return fail(P, t->pos, "tag name expected, got '%s'", describe(t, buf, sizeof buf));
    if (!enter(P)) return NULL;
    P->open_pos[P->nopen++] = t->pos;
    jnode *n = NULL;
    if (is_name(P, "if")) n = parse_if(P);
    else if (is_name(P, "for")) n = parse_for(P);
    else if (is_name(P, "set")) n = parse_set(P);
    else if (is_name(P, "macro")) n = parse_macro(P);
    else if (is_name(P, "call")) n = parse_call_block(P);
    else if (is_name(P, "filter")) n = parse_filter_block(P);
    else if (is_name(P, "with")) n = parse_with(P);
    else if (is_name(P, "generation")) n = parse_scope_block(P, "endgeneration");
    else if (is_name(P, "break")) n = parse_loop_control(P, N_BREAK);
    else if (is_name(P, "continue")) n = parse_loop_control(P, N_CONTINUE);
    else {
        for (int i = 0; unsup[i]; i++)
            if (is_name(P, unsup[i]))
                n = unsupported(P, t->pos, "unsupported template feature: {%% %s %%}", unsup[i]);
        char want[160];
        expected_tags(P->ends, want, sizeof want);
        if (!P->rc) n = fail(P, t->pos, "unknown tag '%s'%s", describe(t, buf, sizeof buf), want);
    }
    P->nopen--;
    P->depth--;
    return n;
}

static bool is_end(const parser *P, const char *const *ends)
{
    for (int i = 0; ends && ends[i]; i++)
        if (is_name(P, ends[i])) return true;
    return false;
}

static bool subparse_output(parser *P, nvec *body)
{
    jnode *o = node(P, N_OUTPUT, cur(P)->pos);
    adv(P);
    if (!o || !(o->a = parse_tuple(P, false, true, NULL, false))) return false;
    return expect_kind(P, T_VAR_END) && vpush(P, body, o);
}

static bool subparse_data(parser *P, nvec *body)
{
    const jtok *t = cur(P);
    jnode *d = node(P, N_DATA, t->pos);
    if (!d || !(d->name = tok_str(P, t))) return false;
    adv(P);
    return vpush(P, body, d);
}

/* Parses until a block tag named in ENDS (left as the current token) or,
 * with ENDS NULL, the end of the template. */
static bool subparse(parser *P, const char *const *ends, nvec *body)
{
    const char *const *saved = P->ends;
    P->ends = ends;
    bool ok = subparse_loop(P, ends, body);
    P->ends = saved;
    return ok;
}

static bool subparse_loop(parser *P, const char *const *ends, nvec *body)
{
    for (;;) {
        const jtok *t = cur(P);
        if (t->k == T_EOF) {
            if (!ends) return true;
            char want[160];
            int line = 0, col = 0;
            expected_tags(ends, want, sizeof want);
            if (P->nopen) jinja_linecol(P->src, P->len, P->open_pos[P->nopen - 1], &line, &col);
            fail(P, t->pos, "unexpected end of template: the block opened at line %d, column %d is not closed%s",
                 line, col, want);
            return false;
        }
        bool ok;
        if (t->k == T_DATA) {
            ok = subparse_data(P, body);
        } else if (t->k == T_VAR_BEGIN) {
            ok = subparse_output(P, body);
        } else if (t->k == T_BLOCK_BEGIN) {
            adv(P);
            if (is_end(P, ends)) return true;
            ok = vpush(P, body, parse_statement(P)) && expect_kind(P, T_BLOCK_END);
        } else {
            char buf[80];
            fail(P, t->pos, "unexpected '%s'", describe(t, buf, sizeof buf));
            ok = false;
        }
        if (!ok) return false;
    }
}

/* Newlines become "\n" and one trailing newline is dropped, as Jinja does. */
static char *normalize(const char *src, size_t len, size_t *out_len)
{
    char *s = malloc(len + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (k && s[k - 1] == '\n') k--;
    s[k] = 0;
    *out_len = k;
    return s;
}

int jinja_parse(jinja_tpl **out, const char *src, size_t len, sl_err *err)
{
    *out = NULL;
    if (len > UINT32_MAX / 2) return sl_errf(err, "template too large (%zu bytes)", len);
    jinja_tpl *t = calloc(1, sizeof *t);
    if (!t || !(t->src = normalize(src, len, &t->len))) {
        free(t);
        return sl_errf(err, "out of memory");
    }
    jtok *toks = NULL;
    size_t ntok = 0;
    if (jinja_lex(t->src, t->len, &t->arena, &toks, &ntok, err)) {
        jinja_free(t);
        return -1;
    }
    parser P = {.t = toks, .n = ntok, .a = &t->arena, .src = t->src, .len = t->len, .err = err};
    nvec body = {0};
    if (subparse(&P, NULL, &body)) t->body = vfinish(&P, &body, &t->nbody);
    if (!P.rc && P.unknown)
        unsupported(&P, P.unknown->pos, "unsupported template feature: %s '%s' (no %s of that name)",
                    P.unknown->kind == N_FILTER ? "filter" : "test", P.unknown->name->s,
                    P.unknown->kind == N_FILTER ? "filter" : "test");
    free(body.p);
    free(toks);
    if (P.rc) {
        jinja_free(t);
        return P.rc;
    }
    *out = t;
    return 0;
}

void jinja_free(jinja_tpl *t)
{
    if (!t) return;
    jarena_free(&t->arena);
    free(t->src);
    free(t);
}
