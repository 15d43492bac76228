/* GBNF text to the rule table of grammar_int.h (syntax in grammar.h).
 * Rules are built as growable element lists, each group and repetition
 * becoming a generated rule named after the rule it appears in ("root_1"),
 * then checked (every rule defined, a root, no left recursion) and
 * flattened into one array. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/grammar_int.h"

enum { MAX_REPEAT = 10000, MAX_ELEMS = 1 << 22, MAX_NAME = 128, MAX_NEST = 100 };

typedef struct {
    char *name;
    gelem *e;
    size_t n, cap;
    bool defined;
    size_t at;  /* where it is defined, else first used (byte offset) */
    int n_gen;  /* generated rules named after it so far */
} prule;

typedef struct {
    const char *src;
    size_t len, pos;
    sl_err *err;
    prule *r;
    size_t n_r, cap_r;
    grange *rg;
    size_t n_rg, cap_rg;
    gset *sets;
    size_t n_sets, cap_sets;
    size_t total;
} parser;

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * size);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

static void line_col(const char *s, size_t at, int *line, int *col)
{
    *line = 1, *col = 1;
    for (size_t i = 0; i < at; i++) {
        if (s[i] == '\n') ++*line, *col = 1;
        else if (((unsigned char)s[i] & 0xC0) != 0x80) ++*col; /* columns count characters */
    }
}

static int perr(parser *ps, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(parser *ps, size_t at, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    line_col(ps->src, at < ps->len ? at : ps->len, &line, &col);
    return sl_errf(ps->err, "grammar:%d:%d: %s", line, col, msg);
}

static int oom(parser *ps) { return sl_errf(ps->err, "grammar: out of memory"); }

static int peek(const parser *ps, size_t k)
{
    return ps->pos + k < ps->len ? (unsigned char)ps->src[ps->pos + k] : -1;
}

/* Blanks and comments; newlines too when NL. */
static void skip_space(parser *ps, bool nl)
{
    while (ps->pos < ps->len) {
        char c = ps->src[ps->pos];
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) ps->pos++;
        else if (c == '#')
            while (ps->pos < ps->len && ps->src[ps->pos] != '\n') ps->pos++;
        else break;
    }
}

static bool is_word(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* ---------------------------------------------------------------- rules */

static int rule_new(parser *ps, char *name, size_t at, uint32_t *id)
{
    if (!name || grow((void **)&ps->r, &ps->cap_r, ps->n_r + 1, sizeof *ps->r)) return free(name), oom(ps);
    ps->r[ps->n_r] = (prule){.name = name, .at = at};
    *id = (uint32_t)ps->n_r++;
    return 0;
}

static int rule_find(parser *ps, const char *name, size_t n, size_t at, uint32_t *id)
{
    for (size_t i = 0; i < ps->n_r; i++)
        if (strlen(ps->r[i].name) == n && !memcmp(ps->r[i].name, name, n)) return *id = (uint32_t)i, 0;
    return rule_new(ps, strndup(name, n), at, id);
}

/* A rule for a group or repetition inside rule PARENT. */
static int rule_gen(parser *ps, uint32_t parent, size_t at, uint32_t *id)
{
    char buf[MAX_NAME + 16];
    snprintf(buf, sizeof buf, "%s_%d", ps->r[parent].name, ++ps->r[parent].n_gen);
    if (rule_new(ps, strdup(buf), at, id)) return -1;
    ps->r[*id].defined = true;
    return 0;
}

static int emit(parser *ps, uint32_t r, uint32_t type, uint32_t v)
{
    prule *pr = &ps->r[r];
    if (++ps->total > MAX_ELEMS) return sl_errf(ps->err, "grammar: too large (more than %d elements)", MAX_ELEMS);
    if (grow((void **)&pr->e, &pr->cap, pr->n + 1, sizeof *pr->e)) return oom(ps);
    pr->e[pr->n++] = (gelem){type, v};
    return 0;
}

static int set_new(parser *ps, bool neg, uint32_t *id)
{
    if (grow((void **)&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets)) return oom(ps);
    ps->sets[ps->n_sets] = (gset){(uint32_t)ps->n_rg, 0, neg};
    *id = (uint32_t)ps->n_sets++;
    return 0;
}

/* Adds a range to the set being built (always the last one). */
static int set_add(parser *ps, uint32_t lo, uint32_t hi)
{
    if (grow((void **)&ps->rg, &ps->cap_rg, ps->n_rg + 1, sizeof *ps->rg)) return oom(ps);
    ps->rg[ps->n_rg++] = (grange){lo, hi};
    ps->sets[ps->n_sets - 1].n++;
    return 0;
}

static int emit_char(parser *ps, uint32_t r, uint32_t cp)
{
    uint32_t s;
    return set_new(ps, false, &s) || set_add(ps, cp, cp) || emit(ps, r, G_SET, s) ? -1 : 0;
}

/* ---------------------------------------------------------- characters */

/* One UTF-8 character of the source. */
static int src_char(parser *ps, uint32_t *cp)
{
    size_t at = ps->pos;
    int c = peek(ps, 0), n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) return perr(ps, at, "invalid UTF-8 byte 0x%02x", c);
    uint32_t v = n ? (uint32_t)c & (0x3Fu >> n) : (uint32_t)c;
    for (int i = 1; i <= n; i++) {
        int d = peek(ps, (size_t)i);
        if (d < 0 || (d & 0xC0) != 0x80) return perr(ps, at, "invalid UTF-8 sequence");
        v = v << 6 | ((uint32_t)d & 0x3F);
    }
    ps->pos += (size_t)n + 1;
    *cp = v;
    return 0;
}

static int hex_digits(parser *ps, int n, size_t at, uint32_t *cp)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int c = peek(ps, 0), d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return perr(ps, at, "escape needs %d hex digits", n);
        v = v << 4 | (uint32_t)d;
        ps->pos++;
    }
    if (v > 0x10FFFF) return perr(ps, at, "escape U+%X is beyond Unicode", v);
    *cp = v;
    return 0;
}

/* After a backslash. */
static int escape(parser *ps, uint32_t *cp)
{
    size_t at = ps->pos - 1;
    int c = peek(ps, 0);
    if (c < 0 || c == '\n') return perr(ps, at, "unfinished escape");
    ps->pos++;
    switch (c) {
    case 'x': return hex_digits(ps, 2, at, cp);
    case 'u': return hex_digits(ps, 4, at, cp);
    case 'U': return hex_digits(ps, 8, at, cp);
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': case '.':
        *cp = (uint32_t)c;
        return 0;
    default: return perr(ps, at, "unknown escape '\\%c'", c);
    }
}

static int one_char(parser *ps, uint32_t *cp)
{
    if (peek(ps, 0) != '\\') return src_char(ps, cp);
    ps->pos++;
    return escape(ps, cp);
}

static int literal(parser *ps, uint32_t r)
{
    size_t at = ps->pos++;
    for (;;) {
        int c = peek(ps, 0);
        if (c < 0 || c == '\n') return perr(ps, at, "unterminated string literal");
        if (c == '"') return ps->pos++, 0;
        uint32_t cp;
        if (one_char(ps, &cp) || emit_char(ps, r, cp)) return -1;
    }
}

static int char_class(parser *ps, uint32_t r)
{
    size_t at = ps->pos++;
    bool neg = peek(ps, 0) == '^';
    ps->pos += neg;
    uint32_t s;
    if (set_new(ps, neg, &s)) return -1;
    for (;;) {
        int c = peek(ps, 0);
        if (c < 0 || c == '\n') return perr(ps, at, "unterminated character class (no ']')");
        if (c == ']') break;
        size_t ra = ps->pos;
        uint32_t lo, hi;
        if (one_char(ps, &lo)) return -1;
        hi = lo;
        if (peek(ps, 0) == '-' && peek(ps, 1) != ']' && peek(ps, 1) >= 0) {
            ps->pos++;
            if (one_char(ps, &hi)) return -1;
            if (hi < lo) return perr(ps, ra, "character range is reversed (U+%04X after U+%04X)", hi, lo);
        }
        if (set_add(ps, lo, hi)) return -1;
    }
    ps->pos++;
    return emit(ps, r, G_SET, s);
}

/* ---------------------------------------------------------- repetition */

static int number(parser *ps, long *v)
{
    size_t at = ps->pos;
    long x = 0;
    while (peek(ps, 0) >= '0' && peek(ps, 0) <= '9') {
        x = x * 10 + (peek(ps, 0) - '0');
        if (x > MAX_REPEAT) return perr(ps, at, "repetition count above %d", MAX_REPEAT);
        ps->pos++;
    }
    if (ps->pos == at) return perr(ps, at, "expected a number");
    *v = x;
    return 0;
}

/* The operator at ps->pos: *MIN, *MAX (-1: unbounded). */
static int repeat_counts(parser *ps, long *min, long *max)
{
    int c = peek(ps, 0);
    size_t at = ps->pos++;
    if (c != '{') {
        *min = c == '+';
        *max = c == '?' ? 1 : -1;
        return 0;
    }
    skip_space(ps, true);
    if (number(ps, min)) return -1;
    skip_space(ps, true);
    *max = *min;
    if (peek(ps, 0) == ',') {
        ps->pos++;
        skip_space(ps, true);
        *max = -1;
        if (peek(ps, 0) >= '0' && peek(ps, 0) <= '9' && number(ps, max)) return -1;
        skip_space(ps, true);
    }
    if (peek(ps, 0) != '}') return perr(ps, at, "expected '}' to close the repetition");
    ps->pos++;
    if (*max >= 0 && *max < *min) return perr(ps, at, "repetition {%ld,%ld} has its maximum below its minimum", *min, *max);
    return 0;
}

static int emit_seq(parser *ps, uint32_t r, const gelem *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (emit(ps, r, s[i].type, s[i].v)) return -1;
    return 0;
}

/* Rewrites S = rule R's elements from LAST on as S repeated MIN to MAX
 * times: MIN copies, then S* as R' ::= S R' | "", or MAX - MIN nested
 * optional rules R'1 ::= S R'2 | "" ... */
static int repetition(parser *ps, uint32_t r, size_t last)
{
    size_t at = ps->pos;
    long min, max;
    if (repeat_counts(ps, &min, &max)) return -1;
    size_t n = ps->r[r].n - last;
    if (n == 0) return 0; /* an empty item repeated is still empty */
    gelem *s = malloc(n * sizeof *s);
    if (!s) return oom(ps);
    memcpy(s, ps->r[r].e + last, n * sizeof *s);
    ps->r[r].n = last, ps->total -= n;
    int rc = 0;
    for (long i = 0; i < min && !rc; i++) rc = emit_seq(ps, r, s, n);
    uint32_t prev = 0, y;
    bool have = false;
    for (long k = max < 0 ? 1 : max - min; k > 0 && !rc; k--) {
        rc = rule_gen(ps, r, at, &y) || emit_seq(ps, y, s, n);
        if (!rc && (max < 0 || have)) rc = emit(ps, y, G_REF, max < 0 ? y : prev);
        if (!rc) rc = emit(ps, y, G_ALT, 0);
        prev = y, have = true;
    }
    if (!rc && have) rc = emit(ps, r, G_REF, prev);
    free(s);
    return rc;
}

/* ----------------------------------------------------------- structure */

static int alternates(parser *ps, uint32_t r, bool nested, int depth);

static int group(parser *ps, uint32_t r, int depth)
{
    size_t at = ps->pos++;
    uint32_t g;
    if (depth >= MAX_NEST) return perr(ps, at, "groups nested more than %d deep", MAX_NEST);
    if (rule_gen(ps, r, at, &g) || alternates(ps, g, true, depth + 1)) return -1;
    skip_space(ps, true);
    if (peek(ps, 0) != ')') return perr(ps, at, "'(' is not closed");
    ps->pos++;
    return emit(ps, r, G_REF, g);
}

static int reference(parser *ps, uint32_t r)
{
    size_t at = ps->pos;
    while (is_word(peek(ps, 0))) ps->pos++;
    size_t n = ps->pos - at;
    if (n > MAX_NAME) return perr(ps, at, "rule name longer than %d characters", MAX_NAME);
    size_t save = ps->pos;
    skip_space(ps, false);
    if (ps->len - ps->pos >= 3 && !memcmp(ps->src + ps->pos, "::=", 3))
        return perr(ps, at, "a rule definition ('%.*s ::=') must start on a new line", (int)n, ps->src + at);
    ps->pos = save;
    uint32_t id;
    return rule_find(ps, ps->src + at, n, at, &id) || emit(ps, r, G_REF, id) ? -1 : 0;
}

/* One alternative into rule R, up to '|', ')' or the end of the rule. */
static int sequence(parser *ps, uint32_t r, bool nested, int depth)
{
    size_t last = (size_t)-1;
    for (;;) {
        skip_space(ps, nested);
        int c = peek(ps, 0), rc;
        size_t start = ps->r[r].n;
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == (size_t)-1) return perr(ps, ps->pos, "'%c' has nothing before it to repeat", c);
            if (repetition(ps, r, last)) return -1;
            continue;
        }
        if (c == '"') rc = literal(ps, r);
        else if (c == '[') rc = char_class(ps, r);
        else if (c == '.') {
            uint32_t s;
            ps->pos++;
            rc = set_new(ps, true, &s) || emit(ps, r, G_SET, s);
        } else if (c == '(') rc = group(ps, r, depth);
        else if (is_word(c)) rc = reference(ps, r);
        else if (c == '<') return perr(ps, ps->pos, "token references (<...>) are not supported");
        else return 0;
        if (rc) return -1;
        last = start;
    }
}

/* At the top level a rule ends at the end of its line, unless the next
 * non-blank line starts with '|'. */
static bool continues(parser *ps)
{
    size_t save = ps->pos;
    skip_space(ps, true);
    if (peek(ps, 0) == '|') return true;
    ps->pos = save;
    return false;
}

static int alternates(parser *ps, uint32_t r, bool nested, int depth)
{
    for (;;) {
        if (sequence(ps, r, nested, depth)) return -1;
        skip_space(ps, nested);
        if (peek(ps, 0) != '|' && (nested || !continues(ps))) return 0;
        ps->pos++;
        skip_space(ps, true);
        if (emit(ps, r, G_ALT, 0)) return -1;
    }
}

static int rule(parser *ps)
{
    size_t at = ps->pos;
    while (is_word(peek(ps, 0))) ps->pos++;
    size_t n = ps->pos - at;
    if (!n) return perr(ps, at, "expected a rule name, found '%c'", peek(ps, 0));
    if (n > MAX_NAME) return perr(ps, at, "rule name longer than %d characters", MAX_NAME);
    skip_space(ps, false);
    if (ps->len - ps->pos < 3 || memcmp(ps->src + ps->pos, "::=", 3))
        return perr(ps, ps->pos, "expected '::=' after the rule name '%.*s'", (int)n, ps->src + at);
    ps->pos += 3;
    skip_space(ps, true);
    uint32_t id;
    if (rule_find(ps, ps->src + at, n, at, &id)) return -1;
    if (ps->r[id].defined) {
        int line, col;
        line_col(ps->src, ps->r[id].at, &line, &col);
        return perr(ps, at, "rule '%.*s' is already defined (line %d)", (int)n, ps->src + at, line);
    }
    ps->r[id].defined = true, ps->r[id].at = at;
    if (alternates(ps, id, false, 0)) return -1;
    skip_space(ps, false);
    int c = peek(ps, 0);
    if (c >= 0 && c != '\n' && c != '\r')
        return perr(ps, ps->pos, c == ')' ? "')' without a matching '('" : "unexpected '%c' (expected '|' or the end of the rule)", c);
    return 0;
}

/* ------------------------------------------------------------- checks */

/* Whether each rule can match the empty string (to a fixpoint). */
static bool *nullable(const parser *ps)
{
    bool *nul = calloc(ps->n_r ? ps->n_r : 1, sizeof *nul);
    for (bool changed = nul != NULL; changed;) {
        changed = false;
        for (size_t r = 0; r < ps->n_r; r++) {
            if (nul[r]) continue;
            bool alt_ok = true;
            for (size_t i = 0; i <= ps->r[r].n; i++) {
                const gelem *e = i < ps->r[r].n ? &ps->r[r].e[i] : NULL;
                if (!e || e->type == G_ALT) {
                    if (alt_ok) {
                        nul[r] = changed = true;
                        break;
                    }
                    alt_ok = true;
                } else if (e->type == G_SET || !nul[e->v]) alt_ok = false;
            }
        }
    }
    return nul;
}

/* Depth-first over "R can start with rule X" edges; COLOR 1 on the path. */
static int left_walk(parser *ps, const bool *nul, uint8_t *color, uint32_t r)
{
    color[r] = 1;
    const prule *pr = &ps->r[r];
    bool edge = true; /* at the left edge of an alternative */
    for (size_t i = 0; i < pr->n; i++) {
        const gelem *e = &pr->e[i];
        if (e->type == G_ALT) {
            edge = true;
            continue;
        }
        if (!edge) continue;
        if (e->type == G_SET) {
            edge = false;
            continue;
        }
        if (color[e->v] == 1)
            return perr(ps, ps->r[e->v].at, "rule '%s' is left-recursive (it reaches itself before matching a character)",
                        ps->r[e->v].name);
        if (color[e->v] == 0 && left_walk(ps, nul, color, e->v)) return -1;
        edge = nul[e->v];
    }
    color[r] = 2;
    return 0;
}

static int check(parser *ps, uint32_t *root)
{
    for (size_t r = 0; r < ps->n_r; r++)
        if (!ps->r[r].defined) return perr(ps, ps->r[r].at, "rule '%s' is used but not defined", ps->r[r].name);
    size_t r = 0;
    while (r < ps->n_r && strcmp(ps->r[r].name, "root")) r++;
    if (r == ps->n_r) return sl_errf(ps->err, "grammar: no rule named 'root' (matching starts there)");
    *root = (uint32_t)r;
    bool *nul = nullable(ps);
    uint8_t *color = calloc(ps->n_r, 1);
    int rc = nul && color ? 0 : oom(ps);
    for (size_t i = 0; i < ps->n_r && !rc; i++)
        if (!color[i]) rc = left_walk(ps, nul, color, (uint32_t)i);
    free(nul);
    free(color);
    return rc;
}

static int flatten(parser *ps, sl_grammar *g)
{
    size_t n_el = ps->n_r, n_alt = ps->n_r;
    for (size_t r = 0; r < ps->n_r; r++) {
        n_el += ps->r[r].n;
        for (size_t i = 0; i < ps->r[r].n; i++) n_alt += ps->r[r].e[i].type == G_ALT;
    }
    g->el = malloc(n_el * sizeof *g->el);
    g->alt = malloc(n_alt * sizeof *g->alt);
    g->alt_off = malloc((ps->n_r + 1) * sizeof *g->alt_off);
    if (!g->el || !g->alt || !g->alt_off) return oom(ps);
    size_t p = 0, k = 0;
    for (size_t r = 0; r < ps->n_r; r++) {
        g->alt_off[r] = (uint32_t)k;
        g->alt[k++] = (uint32_t)p;
        for (size_t i = 0; i < ps->r[r].n; i++) {
            g->el[p++] = ps->r[r].e[i];
            if (ps->r[r].e[i].type == G_ALT) g->alt[k++] = (uint32_t)p;
        }
        g->el[p++] = (gelem){G_END, 0};
    }
    g->alt_off[ps->n_r] = (uint32_t)k;
    g->n_el = n_el, g->n_rules = ps->n_r;
    g->rg = ps->rg, g->sets = ps->sets;
    ps->rg = NULL, ps->sets = NULL;
    return 0;
}

int grammar_parse(sl_grammar **out, const char *text, size_t len, sl_err *err)
{
    *out = NULL;
    parser ps = {.src = text, .len = len, .err = err};
    sl_grammar *g = calloc(1, sizeof *g);
    int rc = g ? 0 : oom(&ps);
    for (;;) {
        if (rc) break;
        skip_space(&ps, true);
        if (ps.pos >= ps.len) break;
        rc = rule(&ps);
    }
    if (!rc && ps.n_r == 0) rc = sl_errf(err, "grammar: no rules");
    if (!rc) rc = check(&ps, &g->root);
    if (!rc) rc = flatten(&ps, g);
    for (size_t r = 0; r < ps.n_r; r++) free(ps.r[r].name), free(ps.r[r].e);
    free(ps.r);
    free(ps.rg);
    free(ps.sets);
    if (rc) {
        if (g) g->refs = 1;
        grammar_free(g);
        return -1;
    }
    g->refs = 1;
    *out = g;
    return 0;
}

void grammar_ref(sl_grammar *g) { g->refs++; }

void grammar_free(sl_grammar *g)
{
    if (!g || --g->refs > 0) return;
    free(g->el);
    free(g->alt);
    free(g->alt_off);
    free(g->rg);
    free(g->sets);
    free(g);
}

size_t grammar_n_rules(const sl_grammar *g) { return g->n_rules; }
