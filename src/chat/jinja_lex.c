/* Template lexer.  Splits the source into text and tag tokens with Jinja2's
 * whitespace rules as transformers configures them: "-" strips whitespace
 * next to a tag, trim_blocks drops the newline after a block or comment tag,
 * lstrip_blocks drops the indentation before one (unless "+" is given).
 * Also the arena that owns a parsed template. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "chat/jinja_int.h"

/* ---- arena ---------------------------------------------------------------- */

void *jarena_alloc(jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    jarena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

jstr *jarena_str(jarena *a, const char *s, size_t len)
{
    jstr *r = jarena_alloc(a, sizeof *r + len + 1);
    if (!r) return NULL;
    r->rc = -1;   /* immortal: jv_ref / jv_drop leave it alone */
    r->len = len;
    if (len) memcpy(r->s, s, len);
    r->s[len] = 0;
    jstr_scan(r);
    return r;
}

void jarena_free(jarena *a)
{
    jarena_blk *b = a->head;
    while (b) {
        jarena_blk *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

void jinja_linecol(const char *src, size_t len, uint32_t pos, int *line, int *col)
{
    int l = 1;
    size_t start = 0;
    if (pos > len) pos = (uint32_t)len;
    for (size_t i = 0; i < pos; i++) {
        if (src[i] == '\n') {
            l++;
            start = i + 1;
        }
    }
    *line = l;
    *col = (int)(pos - start) + 1;
}

/* ---- lexer ------------------------------------------------------------- */

typedef struct {
    const char *src;
    size_t len, pos;
    jarena *a;
    jtok *toks;
    size_t n, cap;
    bool line_starting;   /* the last consumed match ended with a newline */
    char brackets[256];   /* open ( [ { inside the current tag */
    int depth;
    sl_err *err;
} lexer;

static int lex_fail(lexer *L, size_t pos, const char *fmt, const char *arg)
{
    int line, col;
    jinja_linecol(L->src, L->len, (uint32_t)pos, &line, &col);
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return sl_errf(L->err, "line %d, column %d: %s", line, col, msg);
}

static jtok *push(lexer *L, jtok_kind k, size_t pos)
{
    if (L->n == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 64;
        jtok *t = realloc(L->toks, nc * sizeof *t);
        if (!t) return NULL;
        L->toks = t;
        L->cap = nc;
    }
    jtok *t = &L->toks[L->n++];
    *t = (jtok){.k = k, .pos = (uint32_t)pos};
    return t;
}

static int push_data(lexer *L, size_t from, size_t to)
{
    if (to <= from) return 0;
    jtok *t = push(L, T_DATA, from);
    if (!t) return sl_errf(L->err, "out of memory");
    t->s = L->src + from;
    t->n = to - from;
    return 0;
}

/* End of the whitespace run starting at POS. */
static size_t skip_ws(const char *s, size_t pos, size_t len)
{
    while (pos < len) {
        uint32_t cp;
        size_t n = ju_decode(s + pos, len - pos, &cp);
        if (!ju_isspace(cp)) break;
        pos += n;
    }
    return pos;
}

/* FROM..TO minus trailing whitespace (Python's str.rstrip()). */
static size_t rstrip_ws(const char *s, size_t from, size_t to)
{
    size_t end = from;
    while (from < to) {
        uint32_t cp;
        size_t n = ju_decode(s + from, to - from, &cp);
        from += n;
        if (!ju_isspace(cp)) end = from;
    }
    return end;
}

/* lstrip_blocks: drop spaces between the line start and a block tag. */
static size_t lstrip_text(const lexer *L, size_t from, size_t to)
{
    size_t lp = from;
    for (size_t i = to; i > from; i--) {
        if (L->src[i - 1] == '\n') {
            lp = i;
            break;
        }
    }
    if (lp == from && !L->line_starting) return to;
    if (lp < to && skip_ws(L->src, lp, to) == to) return lp;
    return to;
}

/* Position of the next "{{", "{%" or "{#" at or after POS, or len. */
static size_t find_tag(const char *s, size_t pos, size_t len)
{
    while (pos + 1 < len) {
        const char *p = memchr(s + pos, '{', len - pos - 1);
        if (!p) return len;
        size_t i = (size_t)(p - s);
        if (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#') return i;
        pos = i + 1;
    }
    return len;
}

static bool starts(const lexer *L, size_t pos, const char *lit)
{
    size_t n = strlen(lit);
    return pos <= L->len && L->len - pos >= n && !memcmp(L->src + pos, lit, n);
}

static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Python identifiers: letters (any script) and "_", then also digits,
 * combining marks and connector punctuation. */
static bool ident_cp(uint32_t cp, bool first)
{
    if (cp < 0x80) return is_name_start((char)cp) || (!first && is_digit((char)cp));
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    if ((k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || k == UTF8PROC_CATEGORY_NL) return true;
    return !first && (k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ND ||
                      k == UTF8PROC_CATEGORY_PC);
}

/* Bytes of the identifier at POS (0 if none starts there). */
static size_t name_len(const lexer *L, size_t pos)
{
    size_t i = pos;
    while (i < L->len) {
        uint32_t cp;
        size_t k = ju_decode(L->src + i, L->len - i, &cp);
        if ((k == 1 && cp >= 0x80) || !ident_cp(cp, i == pos)) break;
        i += k;
    }
    return i - pos;
}

/* After "{%" [sign] at Q: is this "raw" "%}"?  Sets *END past the tag. */
static bool match_word_tag(const lexer *L, size_t q, const char *word, size_t *end, char *close_sign)
{
    size_t p = skip_ws(L->src, q, L->len);
    size_t wl = strlen(word);
    if (!starts(L, p, word)) return false;
    p = skip_ws(L->src, p + wl, L->len);
    *close_sign = 0;
    if (starts(L, p, "-%}") || starts(L, p, "+%}")) {
        *close_sign = L->src[p];
        *end = p + 3;
        return true;
    }
    if (starts(L, p, "%}")) {
        *end = p + 2;
        return true;
    }
    return false;
}

/* Consumes what follows a closing tag: "-" strips all whitespace, otherwise
 * trim_blocks (TRIM) drops one newline. */
static void after_close(lexer *L, size_t end, char sign, bool trim)
{
    L->pos = end;
    if (sign == '-') {
        L->pos = skip_ws(L->src, end, L->len);
        L->line_starting = L->pos > end && L->src[L->pos - 1] == '\n';
    } else if (sign != '+' && trim && L->pos < L->len && L->src[L->pos] == '\n') {
        L->pos++;
        L->line_starting = true;
    } else {
        L->line_starting = false;
    }
}

static int lex_comment(lexer *L, size_t open, size_t q)
{
    if (q >= L->len) {
        /* Jinja's lexer stops quietly when the template ends right after "{#" */
        L->pos = L->len;
        return 0;
    }
    const char *e = NULL;
    for (size_t i = q; i + 1 < L->len; i++) {
        if (L->src[i] == '#' && L->src[i + 1] == '}') {
            e = L->src + i;
            break;
        }
    }
    if (!e) return lex_fail(L, open, "%s", "missing end of comment tag");
    size_t ei = (size_t)(e - L->src);
    char sign = ei > q && (L->src[ei - 1] == '-' || L->src[ei - 1] == '+') ? L->src[ei - 1] : 0;
    after_close(L, ei + 2, sign, true);
    return 0;
}

static int lex_raw(lexer *L, size_t body)
{
    if (body >= L->len) {
        L->pos = L->len;   /* as for a comment: nothing left is not an error */
        return 0;
    }
    for (size_t p = body; p < L->len; p++) {
        if (!starts(L, p, "{%")) continue;
        size_t q = p + 2;
        char open_sign = q < L->len && (L->src[q] == '-' || L->src[q] == '+') ? L->src[q] : 0;
        size_t end;
        char close_sign;
        if (!match_word_tag(L, q + (open_sign != 0), "endraw", &end, &close_sign)) continue;
        size_t tend = p;
        L->pos = body;
        if (open_sign == '-') tend = rstrip_ws(L->src, body, p);
        else if (open_sign != '+') tend = lstrip_text(L, body, p);
        if (push_data(L, body, tend)) return -1;
        after_close(L, end, close_sign, true);
        return 0;
    }
    return lex_fail(L, body, "%s", "missing end of raw directive");
}

/* ---- tokens inside tags ------------------------------------------------ */

static int hexval(char c)
{
    if (is_digit(c)) return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void put_cp(jbuf *b, uint32_t cp)
{
    char u[4];
    if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) cp = 0xfffd;
    jbuf_put(b, u, ju_encode(cp, u));
}

/* \x, \u, \U: exactly N hex digits at S. */
static int hex_escape(const char *s, size_t left, int n, uint32_t *cp)
{
    if ((size_t)n > left) return -1;
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int h = hexval(s[i]);
        if (h < 0) return -1;
        v = v << 4 | (uint32_t)h;
    }
    *cp = v;
    return 0;
}

/* A \u escape that starts a surrogate pair may take the next \u escape. */
static size_t surrogate_pair(const char *s, size_t i, size_t n, uint32_t *cp)
{
    uint32_t lo;
    if (*cp < 0xd800 || *cp >= 0xdc00 || i + 6 > n || s[i] != '\\' || s[i + 1] != 'u') return i;
    if (hex_escape(s + i + 2, n - i - 2, 4, &lo) || lo < 0xdc00 || lo >= 0xe000) return i;
    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    return i + 6;
}

/* One escape after a backslash at S[I] (I points past the backslash). */
static int unescape_one(const char *s, size_t n, size_t *ip, jbuf *b, char *why, size_t whycap)
{
    size_t i = *ip;
    char c = s[i++];
    static const char simple_in[] = "\\'\"abfnrtv\n", simple_out[] = "\\'\"\a\b\f\n\r\t\v";
    const char *k = strchr(simple_in, c);
    uint32_t cp;
    if (k && c) {
        if (c != '\n') jbuf_putc(b, simple_out[k - simple_in]);  /* backslash-newline: nothing */
    } else if (c >= '0' && c <= '7') {
        cp = (uint32_t)(c - '0');
        for (int d = 0; d < 2 && i < n && s[i] >= '0' && s[i] <= '7'; d++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
        put_cp(b, cp);
    } else if (c == 'x' || c == 'u' || c == 'U') {
        int len = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (hex_escape(s + i, n - i, len, &cp) || cp > 0x10ffff) {
            snprintf(why, whycap, "truncated or invalid \\%c escape", c);
            return -1;
        }
        i = surrogate_pair(s, i + (size_t)len, n, &cp);
        put_cp(b, cp);
    } else if (c == 'N') {
        snprintf(why, whycap, "\\N{...} escapes are not supported");
        return -1;
    } else if ((unsigned char)c >= 0x80) {
        /* Jinja backslash-escapes non-ASCII text before decoding, so a
         * backslash before such a character stays and it reads back as
         * its own escape sequence */
        i--;
        i += ju_decode(s + i, n - i, &cp);
        jbuf_printf(b, cp <= 0xff ? "\\x%02x" : cp <= 0xffff ? "\\u%04x" : "\\U%08x", cp);
    } else {
        jbuf_putc(b, '\\');
        jbuf_putc(b, c);
    }
    *ip = i;
    return 0;
}

/* Decodes a string literal's body the way Python's unicode-escape codec
 * does (Jinja's rule). */
int jinja_unescape(const char *s, size_t n, jbuf *b, char *why, size_t whycap)
{
    size_t i = 0;
    while (i < n) {
        const char *bs = memchr(s + i, '\\', n - i);
        size_t run = bs ? (size_t)(bs - s) - i : n - i;
        jbuf_put(b, s + i, run);
        i += run;
        if (i >= n) break;
        i++;
        if (i >= n) {
            snprintf(why, whycap, "\\ at end of string");
            return -1;
        }
        if (unescape_one(s, n, &i, b, why, whycap)) return -1;
    }
    return 0;
}

static int lex_string(lexer *L)
{
    size_t start = L->pos;
    char q = L->src[start];
    size_t i = start + 1;
    while (i < L->len && L->src[i] != q) {
        if (L->src[i] == '\\' && i + 1 < L->len) i++;
        i++;
    }
    if (i >= L->len) return lex_fail(L, start, "%s", "unterminated string");
    jtok *t = push(L, T_STRING, start);
    if (!t) return sl_errf(L->err, "out of memory");
    jbuf b = {.max = SIZE_MAX};
    char why[128];
    if (jinja_unescape(L->src + start + 1, i - start - 1, &b, why, sizeof why)) {
        jbuf_free(&b);
        return lex_fail(L, start, "invalid string literal: %s", why);
    }
    jstr *s = jarena_str(L->a, b.p ? b.p : "", b.n);
    bool oom = b.oom;
    jbuf_free(&b);
    if (!s || oom) return sl_errf(L->err, "out of memory");
    t->val = (jv){.k = JV_STR, .s = s};
    L->pos = i + 1;
    return 0;
}

/* Copies digits (dropping "_" separators) into BUF; false if too long. */
static bool digits_copy(const char *s, size_t n, char *buf, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_') continue;
        if (k + 1 >= cap) return false;
        buf[k++] = s[i];
    }
    buf[k] = 0;
    return true;
}

static bool is_base_digit(char c, int base)
{
    if (base == 16) return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
    return c >= '0' && c < '0' + base;
}

/* Digits with single "_" separators between them. */
static size_t digit_run(const char *s, size_t i, size_t len, int base)
{
    while (i < len) {
        if (is_base_digit(s[i], base)) i++;
        else if (s[i] == '_' && i + 1 < len && is_base_digit(s[i + 1], base)) i += 2;
        else break;
    }
    return i;
}

/* Float: digits ("." digits)? exponent, or digits "." digits. */
static size_t match_float(const lexer *L, size_t p)
{
    const char *s = L->src;
    if (p > 0 && s[p - 1] == '.') return 0;
    size_t i = digit_run(s, p, L->len, 10);
    if (i == p) return 0;
    bool frac = false;
    if (i + 1 < L->len && s[i] == '.' && is_digit(s[i + 1])) {
        i = digit_run(s, i + 1, L->len, 10);
        frac = true;
    }
    if (i < L->len && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->len && (s[j] == '+' || s[j] == '-')) j++;
        if (j < L->len && is_digit(s[j])) return digit_run(s, j, L->len, 10) - p;
    }
    return frac ? i - p : 0;
}

static int lex_number(lexer *L)
{
    size_t p = L->pos, fl = match_float(L, p);
    char buf[128];
    if (fl) {
        if (!digits_copy(L->src + p, fl, buf, sizeof buf)) return lex_fail(L, p, "%s", "number too long");
        jtok *t = push(L, T_FLOAT, p);
        if (!t) return sl_errf(L->err, "out of memory");
        t->val = jv_float(strtod(buf, NULL));
        L->pos = p + fl;
        return 0;
    }
    int base = 10;
    size_t i = p;
    if (L->src[p] == '0' && p + 1 < L->len && strchr("bBoOxX", L->src[p + 1]) && L->src[p + 1]) {
        char c = L->src[p + 1] | 0x20;
        base = c == 'b' ? 2 : c == 'o' ? 8 : 16;
        i = p + 2;
        if (i < L->len && L->src[i] == '_') i++;
    }
    size_t e = digit_run(L->src, i, L->len, base);
    if (e == i) return lex_fail(L, p, "%s", "invalid number");
    if (!digits_copy(L->src + i, e - i, buf, sizeof buf)) return lex_fail(L, p, "%s", "number too long");
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, base);
    if (errno || v > INT64_MAX) return lex_fail(L, p, "%s", "integer literal too large");
    jtok *t = push(L, T_INT, p);
    if (!t) return sl_errf(L->err, "out of memory");
    t->val = jv_int((int64_t)v);
    L->pos = e;
    return 0;
}

static const struct { const char *s; jop op; } ops2[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GE}, {"<=", OP_LE},
};
static const char ops1[] = "+-/*%~[](){}><=.:|,;";
static const jop ops1_kind[] = {
    OP_ADD, OP_SUB, OP_DIV, OP_MUL, OP_MOD, OP_TILDE, OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN,
    OP_LBRACE, OP_RBRACE, OP_GT, OP_LT, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON,
};

static int balance(lexer *L, char c)
{
    const char *open = "([{", *close = ")]}";
    if (strchr(open, c)) {
        if (L->depth >= (int)sizeof L->brackets) return lex_fail(L, L->pos, "%s", "brackets nested too deeply");
        L->brackets[L->depth++] = close[strchr(open, c) - open];
    } else if (strchr(close, c)) {
        char u[2] = {c, 0};
        if (!L->depth) return lex_fail(L, L->pos, "unexpected '%s'", u);
        if (L->brackets[--L->depth] != c) return lex_fail(L, L->pos, "unexpected '%s'", u);
    }
    return 0;
}

static int lex_operator(lexer *L)
{
    size_t p = L->pos;
    for (size_t i = 0; i < sizeof ops2 / sizeof ops2[0]; i++) {
        if (starts(L, p, ops2[i].s)) {
            jtok *t = push(L, T_OP, p);
            if (!t) return sl_errf(L->err, "out of memory");
            t->op = ops2[i].op;
            L->pos += 2;
            return 0;
        }
    }
    const char *k = L->src[p] ? strchr(ops1, L->src[p]) : NULL;
    if (!k) {
        char u[8] = {0};
        uint32_t cp;
        size_t n = ju_decode(L->src + p, L->len - p, &cp);
        memcpy(u, L->src + p, n < 5 ? n : 4);
        return lex_fail(L, p, "unexpected character '%s' in tag", u);
    }
    if (balance(L, L->src[p])) return -1;
    jtok *t = push(L, T_OP, p);
    if (!t) return sl_errf(L->err, "out of memory");
    t->op = ops1_kind[k - ops1];
    L->pos++;
    return 0;
}

/* A closing "%}" / "}}" at the current position (only outside brackets):
 * 1 when consumed, 0 when not there, -1 out of memory. */
static int lex_close(lexer *L, bool block)
{
    size_t p = L->pos;
    if (L->depth) return 0;
    const char *end = block ? "%}" : "}}";
    char sign = 0;
    if ((L->src[p] == '-' || (block && L->src[p] == '+')) && starts(L, p + 1, end)) sign = L->src[p];
    else if (!starts(L, p, end)) return 0;
    size_t after = p + 2 + (sign != 0);
    if (!push(L, block ? T_BLOCK_END : T_VAR_END, p)) return sl_errf(L->err, "out of memory");
    after_close(L, after, sign, block);
    return 1;
}

static int lex_tag(lexer *L, bool block, size_t open)
{
    L->depth = 0;
    for (;;) {
        if (L->pos >= L->len)
            return lex_fail(L, open, "%s", block ? "unexpected end of template: '{%' is not closed"
                                                 : "unexpected end of template: '{{' is not closed");
        int closed = lex_close(L, block);
        if (closed) return closed < 0 ? -1 : 0;
        char c = L->src[L->pos];
        int rc = 0;
        size_t ws = skip_ws(L->src, L->pos, L->len);
        if (ws > L->pos) {
            L->pos = ws;
            continue;
        }
        size_t nl;
        if (is_digit(c)) {
            rc = lex_number(L);
        } else if ((nl = name_len(L, L->pos)) > 0) {
            jtok *t = push(L, T_NAME, L->pos);
            if (!t) return sl_errf(L->err, "out of memory");
            t->s = L->src + L->pos;
            t->n = nl;
            L->pos += nl;
        } else if (c == '\'' || c == '"') {
            rc = lex_string(L);
        } else {
            rc = lex_operator(L);
        }
        if (rc) return rc;
    }
}

/* One "{{", "{%" or "{#" at P, with the text before it from L->pos. */
static int lex_open(lexer *L, size_t p)
{
    char kind = L->src[p + 1];
    size_t q = p + 2;
    char sign = q < L->len && (L->src[q] == '-' || L->src[q] == '+') ? L->src[q] : 0;
    if (sign) q++;
    size_t raw_end = 0;
    char raw_sign = 0;
    bool raw = kind == '%' && match_word_tag(L, q, "raw", &raw_end, &raw_sign) && raw_sign != '+';
    size_t tend = p;
    if (sign == '-') tend = rstrip_ws(L->src, L->pos, p);
    else if (sign != '+' && kind != '{') tend = lstrip_text(L, L->pos, p);
    if (push_data(L, L->pos, tend)) return -1;
    if (kind == '#') return lex_comment(L, p, q);
    if (raw) {
        /* the raw opening tag takes no trim_blocks newline */
        after_close(L, raw_end, raw_sign, false);
        return lex_raw(L, L->pos);
    }
    if (!push(L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, p)) return sl_errf(L->err, "out of memory");
    L->pos = q;
    L->line_starting = false;
    return lex_tag(L, kind == '%', p);
}

int jinja_lex(const char *src, size_t len, jarena *a, jtok **toks, size_t *n, sl_err *err)
{
    lexer L = {.src = src, .len = len, .a = a, .line_starting = true, .err = err};
    while (L.pos < len) {
        size_t p = find_tag(src, L.pos, len);
        if (p == len) {
            if (push_data(&L, L.pos, len)) goto fail;
            break;
        }
        if (lex_open(&L, p)) goto fail;
    }
    if (!push(&L, T_EOF, len)) {
        sl_errf(err, "out of memory");
        goto fail;
    }
    *toks = L.toks;
    *n = L.n;
    return 0;
fail:
    free(L.toks);
    return -1;
}
