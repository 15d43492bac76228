/* Pre-tokenizer splits, reproducing llama.cpp's unicode_regex_split.
 *
 * llama.cpp never evaluates these patterns with Unicode regex semantics:
 *  - a few patterns (GPT-2, Llama 3, Qwen2, Qwen3.5, Kimi-K2, digit grouping,
 *    newline runs) run hand-written splitters, ported in split_custom.c;
 *  - a pattern that uses \p{..} runs as a byte regex over a "collapsed" text
 *    with one byte per code point: ASCII stays, whitespace becomes \v and
 *    everything else becomes a byte naming its category (0xD1 number, 0xD2
 *    letter, ...); \p{X} becomes a class of that byte plus the ASCII members
 *    llama.cpp lists (its \p{S} omits '~');
 *  - any other pattern runs over the code points with non-ASCII whitespace
 *    replaced by \v, \s meaning ASCII whitespace.
 * Every pattern is applied to each piece the previous one produced, and the
 * text between matches is kept as pieces too.  We do the same with PCRE2 JIT:
 * non-UTF over the collapsed bytes, UTF-8 without UCP for the rest.  PCRE2's
 * own Unicode tables (14.0 in Debian 12) are never consulted. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "tok/pretok_split.h"
#include "tok/pretok_table.h"
#include "tok/tok_internal.h"

typedef enum { RX_CUSTOM, RX_COLLAPSED, RX_CODEPOINT } rx_mode;

typedef struct {
    rx_mode mode;
    custom_kind custom;
    pcre2_code *code;
} rx_prog;

struct pretok {
    const pre_def *def;
    rx_prog rx[PRE_MAX_RX];
    int n_rx;
    bool need_collapse, need_codepoint;
};

/* ---- the \p{..} rewrite llama.cpp applies before std::regex ---- */

typedef struct {
    const char *name;
    unsigned char code;
    const char *ascii;
} ucat;

static const ucat UCATS[] = {
    {"\\p{N}", 0xD1, "0-9"},
    {"\\p{L}", 0xD2, "A-Za-z"},
    {"\\p{P}", 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", 0xD4, ""},
    {"\\p{S}", 0xD5, "\\$\\+<->^`\\|"},
    {"\\p{Lu}", 0xD2, "A-Za-z"},
    {"\\p{Ll}", 0xD2, "A-Za-z"},
    {"\\p{Lt}", 0xD2, "A-Za-z"},
    {"\\p{Lm}", 0xD2, "A-Za-z"},
    {"\\p{Lo}", 0xD2, "A-Za-z"},
};

static const ucat *ucat_find(const char *s, size_t len)
{
    for (size_t i = 0; i < sizeof UCATS / sizeof UCATS[0]; i++)
        if (strlen(UCATS[i].name) == len && !memcmp(UCATS[i].name, s, len)) return &UCATS[i];
    return NULL;
}

static bool uses_category(const char *rx)
{
    for (size_t i = 0; i < sizeof UCATS / sizeof UCATS[0]; i++)
        if (strstr(rx, UCATS[i].name)) return true;
    return false;
}

/* Rewrites \p{X} into category-byte classes, tracking [..] the same
 * (approximate) way llama.cpp does so the result is the same. */
static char *collapse_pattern(const char *rx)
{
    size_t n = strlen(rx);
    char *out = malloc(n * 8 + 1), *o = out;
    if (!out) return NULL;
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (rx[i] == '[' && (i == 0 || rx[i - 1] != '\\')) {
            *o++ = '[';
            inside = true;
            continue;
        }
        if (inside && rx[i] == ']' && rx[i - 1] != '\\') {
            *o++ = ']';
            inside = false;
            continue;
        }
        if (rx[i] == '\\' && i + 3 < n && rx[i + 1] == 'p' && rx[i + 2] == '{') {
            const char *close = strchr(rx + i + 3, '}');
            const ucat *u = close && (size_t)(close - rx) <= i + 10 ? ucat_find(rx + i, (size_t)(close - rx) - i + 1)
                                                                    : NULL;
            if (u) {
                if (!inside) *o++ = '[';
                *o++ = (char)u->code;
                o = stpcpy(o, u->ascii);
                if (!inside) *o++ = ']';
                i = (size_t)(close - rx);
                continue;
            }
        }
        *o++ = rx[i];
    }
    *o = 0;
    return out;
}

/* ---- compiling ---- */

static int compile_rx(rx_prog *p, const char *rx, sl_err *err)
{
    static const struct {
        const char *pat;
        custom_kind kind;
    } CUSTOM[] = {
        {RX_GPT2_PAT, CUSTOM_GPT2},         {RX_LLAMA3_PAT, CUSTOM_LLAMA3},
        {RX_LLAMA3_ORIG_PAT, CUSTOM_LLAMA3}, {RX_QWEN2_PAT, CUSTOM_QWEN2},
        {RX_QWEN35_PAT, CUSTOM_QWEN35},     {RX_KIMI_PAT, CUSTOM_KIMI_K2},
        {RX_AFMOE_DIGITS_PAT, CUSTOM_DIGITS3}, {RX_TINY_AYA_DIGITS_PAT, CUSTOM_DIGITS3},
        {RX_NEWLINES_PAT, CUSTOM_NEWLINES},
    };
    for (size_t i = 0; i < sizeof CUSTOM / sizeof CUSTOM[0]; i++)
        if (!strcmp(rx, CUSTOM[i].pat)) {
            p->mode = RX_CUSTOM;
            p->custom = CUSTOM[i].kind;
            return 0;
        }
    char *pat = NULL;
    uint32_t opts = PCRE2_DOLLAR_ENDONLY; /* ECMAScript $: only at the very end */
    if (uses_category(rx)) {
        p->mode = RX_COLLAPSED;
        pat = collapse_pattern(rx);
        if (!pat) return sl_errf(err, "out of memory compiling pre-tokenizer pattern");
    } else {
        p->mode = RX_CODEPOINT;
        opts |= PCRE2_UTF;
    }
    int ec;
    PCRE2_SIZE eo;
    p->code = pcre2_compile((PCRE2_SPTR)(pat ? pat : rx), PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
    free(pat);
    if (!p->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return sl_errf(err, "pre-tokenizer pattern '%s': %s at offset %zu", rx, (const char *)msg, (size_t)eo);
    }
    /* JIT is an optimisation: without it (e.g. no executable memory) the
     * interpreter gives the same matches. */
    pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE);
    return 0;
}

void pretok_free(pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_rx; i++) pcre2_code_free(p->rx[i].code);
    free(p);
}

int pretok_create(pretok **out, const char *name, unsigned *flags, sl_err *err)
{
    *out = NULL;
    if (!name || !*name) name = "default";
    bool unsupported;
    const pre_def *d = pre_find(name, &unsupported);
    if (!d) {
        if (unsupported)
            return sl_errf(err, "pre-tokenizer '%s' (tokenizer.ggml.pre) is not supported by sluice", name);
        return sl_errf(err, "unknown pre-tokenizer '%s' (tokenizer.ggml.pre)", name);
    }
    pretok *p = calloc(1, sizeof *p);
    if (!p) return sl_errf(err, "out of memory");
    p->def = d;
    const pre_rx *set = pre_patterns(d->set);
    for (int i = 0; i < PRE_MAX_RX && set->rx[i]; i++) {
        if (compile_rx(&p->rx[i], set->rx[i], err)) {
            pretok_free(p);
            return -1;
        }
        p->n_rx = i + 1;
        p->need_collapse |= p->rx[i].mode == RX_COLLAPSED;
        p->need_codepoint |= p->rx[i].mode == RX_CODEPOINT;
    }
    *flags = d->flags;
    *out = p;
    return 0;
}

const char *pretok_name(const pretok *p) { return p->def->name; }

/* ---- segment lists ---- */

int seg_push(seg_list *s, size_t len)
{
    if (!len) return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        size_t *v = realloc(s->len, cap * sizeof *v);
        if (!v) return -1;
        s->len = v;
        s->cap = cap;
    }
    s->len[s->n++] = len;
    return 0;
}

/* ---- running a PCRE2 pattern over each piece ---- */

typedef struct {
    const unsigned char *subj; /* collapsed bytes or UTF-8 */
    const size_t *cpt_at;      /* UTF-8 mode: code point index of each byte offset */
    const size_t *byte_at;     /* UTF-8 mode: byte offset of each code point */
    bool utf;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
} rx_run;

static int rx_match(rx_run *r, const pcre2_code *code, size_t s0, size_t s1, size_t at, uint32_t opts,
                    size_t *ms, size_t *me, sl_err *err)
{
    int rc = pcre2_match(code, r->subj + s0, s1 - s0, at - s0, opts | (r->utf ? PCRE2_NO_UTF_CHECK : 0), r->md,
                         r->mc);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !r->js) {
        r->js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
        if (!r->js) return sl_errf(err, "out of memory for the regex stack");
        pcre2_jit_stack_assign(r->mc, NULL, r->js);
        return rx_match(r, code, s0, s1, at, opts, ms, me, err);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return sl_errf(err, "pre-tokenizer regex failed: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
    *ms = s0 + ov[0];
    *me = s0 + ov[1];
    return 1;
}

static size_t to_cpt(const rx_run *r, size_t off) { return r->utf ? r->cpt_at[off] : off; }
static size_t to_unit(const rx_run *r, size_t cpt) { return r->utf ? r->byte_at[cpt] : cpt; }

/* One piece [c0, c1) in code points, iterated like std::regex_iterator:
 * after an empty match the next try is anchored and must be non-empty,
 * else the search moves one code point on. */
static int rx_split_piece(rx_run *r, const pcre2_code *code, size_t c0, size_t c1, seg_list *out, sl_err *err)
{
    size_t s0 = to_unit(r, c0), s1 = to_unit(r, c1);
    size_t done = c0, at = s0;
    bool after_empty = false;
    for (;;) {
        size_t ms, me;
        int rc = 0;
        if (after_empty) {
            rc = rx_match(r, code, s0, s1, at, PCRE2_ANCHORED | PCRE2_NOTEMPTY_ATSTART, &ms, &me, err);
            if (rc < 0) return -1;
            if (!rc) {
                if (at >= s1) break;
                at = to_unit(r, to_cpt(r, at) + 1);
            }
        }
        if (!rc) {
            rc = rx_match(r, code, s0, s1, at, 0, &ms, &me, err);
            if (rc < 0) return -1;
            if (!rc) break;
        }
        size_t cms = to_cpt(r, ms), cme = to_cpt(r, me);
        if (seg_push(out, cms - done) || seg_push(out, cme - cms)) return sl_errf(err, "out of memory");
        done = cme;
        at = me;
        after_empty = me == ms;
    }
    if (seg_push(out, c1 - done)) return sl_errf(err, "out of memory");
    return 0;
}

/* ---- the split ---- */

typedef struct {
    uint32_t *cpt;
    uint16_t *fl;
    size_t n;
    unsigned char *collapsed;
    unsigned char *utf;       /* code points re-encoded, whitespace as \v */
    size_t *byte_at, *cpt_at;
} split_text;

static void split_text_free(split_text *t)
{
    free(t->cpt);
    free(t->fl);
    free(t->collapsed);
    free(t->utf);
    free(t->byte_at);
    free(t->cpt_at);
}

static unsigned char collapse_cpt(uint32_t c, unsigned fl)
{
    if (c < 128) return (unsigned char)c;
    if (fl & CPT_WHITESPACE) return 0x0B;
    switch (fl & CPT_CATEGORIES) {
    case CPT_NUMBER: return 0xD1;
    case CPT_LETTER: return 0xD2;
    case CPT_PUNCT: return 0xD3;
    case CPT_MARK: return 0xD4;
    case CPT_SYMBOL: return 0xD5;
    default: return 0xD0;
    }
}

static int decode_text(split_text *t, const char *text, size_t len, sl_err *err)
{
    const unsigned char *s = (const unsigned char *)text;
    t->cpt = malloc((len + 1) * sizeof *t->cpt);
    t->fl = malloc((len + 1) * sizeof *t->fl);
    if (!t->cpt || !t->fl) return sl_errf(err, "out of memory");
    for (size_t i = 0; i < len;) {
        size_t at = i;
        uint32_t c = utf8_next_lenient(s, len, &i);
        /* llama.cpp cannot re-encode these and throws from llama_tokenize */
        if (c > 0x10FFFF)
            return sl_errf(err, "invalid UTF-8 at byte %zu: the sequence encodes U+%X, beyond U+10FFFF", at, c);
        t->cpt[t->n] = c;
        t->fl[t->n++] = (uint16_t)cpt_flags(c);
    }
    return 0;
}

static int build_views(split_text *t, const pretok *p, sl_err *err)
{
    if (p->need_collapse) {
        t->collapsed = malloc(t->n + 1);
        if (!t->collapsed) return sl_errf(err, "out of memory");
        for (size_t i = 0; i < t->n; i++) t->collapsed[i] = collapse_cpt(t->cpt[i], t->fl[i]);
    }
    if (p->need_codepoint) {
        t->utf = malloc(t->n * 4 + 1);
        t->byte_at = malloc((t->n + 1) * sizeof *t->byte_at);
        t->cpt_at = malloc((t->n * 4 + 1) * sizeof *t->cpt_at);
        if (!t->utf || !t->byte_at || !t->cpt_at) return sl_errf(err, "out of memory");
        size_t b = 0;
        for (size_t i = 0; i < t->n; i++) {
            uint32_t c = t->cpt[i];
            if (c >= 0x80 && (t->fl[i] & CPT_WHITESPACE)) c = 0x0B;
            /* surrogates are not valid in UTF-8 for PCRE2; U+FFFF stands in,
             * matched by exactly the same (negated) classes in these patterns */
            if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFF;
            t->byte_at[i] = b;
            size_t k = utf8_put(c, (char *)t->utf + b);
            for (size_t j = 0; j < k; j++) t->cpt_at[b + j] = i;
            b += k;
        }
        t->byte_at[t->n] = b;
        t->cpt_at[b] = t->n;
    }
    return 0;
}

static int apply_rx(const rx_prog *rx, const split_text *t, const seg_list *in, seg_list *out, sl_err *err)
{
    if (rx->mode == RX_CUSTOM) {
        size_t start = 0;
        for (size_t i = 0; i < in->n; i++) {
            if (split_custom(rx->custom, t->cpt, t->fl, start, start + in->len[i], out))
                return sl_errf(err, "out of memory");
            start += in->len[i];
        }
        return 0;
    }
    rx_run r = {.utf = rx->mode == RX_CODEPOINT};
    r.subj = r.utf ? t->utf : t->collapsed;
    r.cpt_at = t->cpt_at;
    r.byte_at = t->byte_at;
    r.md = pcre2_match_data_create_from_pattern(rx->code, NULL);
    r.mc = pcre2_match_context_create(NULL);
    int rc = r.md && r.mc ? 0 : sl_errf(err, "out of memory");
    size_t start = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
        rc = rx_split_piece(&r, rx->code, start, start + in->len[i], out, err);
        start += in->len[i];
    }
    pcre2_match_data_free(r.md);
    pcre2_match_context_free(r.mc);
    pcre2_jit_stack_free(r.js);
    return rc;
}

static int words_reserve(word_list *w, size_t bytes)
{
    if (w->len + bytes > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + bytes) cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) return -1;
        w->buf = b;
        w->cap = cap;
    }
    if (w->n == w->ncap) {
        size_t cap = w->ncap ? w->ncap * 2 : 256;
        size_t *e = realloc(w->end, cap * sizeof *e);
        if (!e) return -1;
        w->end = e;
        w->ncap = cap;
    }
    return 0;
}

/* Re-encodes each piece and maps its bytes to GPT-2's byte alphabet. */
static int emit_words(const split_text *t, const seg_list *segs, word_list *w, sl_err *err)
{
    size_t start = 0;
    for (size_t i = 0; i < segs->n; i++) {
        size_t len = segs->len[i];
        if (words_reserve(w, len * 8)) return sl_errf(err, "out of memory");
        for (size_t k = start; k < start + len; k++) {
            char u[4];
            size_t nu = utf8_put(t->cpt[k], u);
            for (size_t j = 0; j < nu; j++) w->len += utf8_put(byte_to_cpt((uint8_t)u[j]), w->buf + w->len);
        }
        w->end[w->n++] = w->len;
        start += len;
    }
    return 0;
}

int pretok_split(const pretok *p, const char *text, size_t len, word_list *w, sl_err *err)
{
    split_text t = {0};
    seg_list a = {0}, b = {0};
    int rc = decode_text(&t, text, len, err);
    if (!rc) rc = build_views(&t, p, err);
    if (!rc && seg_push(&a, t.n)) rc = sl_errf(err, "out of memory");
    for (int i = 0; i < p->n_rx && !rc; i++) {
        b.n = 0;
        rc = apply_rx(&p->rx[i], &t, &a, &b, err);
        seg_list tmp = a;
        a = b;
        b = tmp;
    }
    if (!rc) rc = emit_words(&t, &a, w, err);
    free(a.len);
    free(b.len);
    split_text_free(&t);
    return rc;
}

void word_list_free(word_list *w)
{
    free(w->buf);
    free(w->end);
    memset(w, 0, sizeof *w);
}
