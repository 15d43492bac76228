/* The splitters llama.cpp runs instead of a regex for some patterns
 * (unicode.cpp: unicode_regex_split_custom_*).  They are close to the regex
 * but not identical (e.g. what counts as \s, where a lone trailing space
 * goes), and llama.cpp's ids come from them, so these follow them step by
 * step.  A piece is [ini, end); outside it a code point reads as OUT and its
 * flags as 0, which is how the originals detect the end of the piece. */
#include "tok/pretok_split.h"
#include "tok/tok_internal.h"

#define OUT 0xFFFFFFFFu
#define WS CPT_WHITESPACE
#define LET CPT_LETTER
#define NUM CPT_NUMBER
#define MRK CPT_MARK

typedef struct {
    const uint32_t *c;
    const uint16_t *f;
    size_t ini, end, prev;
    seg_list *out;
    int oom;
} cx;

static uint32_t cp_at(const cx *x, size_t p) { return p >= x->ini && p < x->end ? x->c[p] : OUT; }
static unsigned fl_at(const cx *x, size_t p) { return p >= x->ini && p < x->end ? x->f[p] : 0; }

/* Ends the current piece at END (the originals' _add_token). */
static void add(cx *x, size_t end)
{
    if (end > x->prev) x->oom |= seg_push(x->out, end - x->prev);
    x->prev = end;
}

static bool is_nl(uint32_t c) { return c == '\r' || c == '\n'; }

/* 's 't 're 've 'm 'll 'd at POS (case-folded when FOLD); returns the length or 0. */
static size_t contraction(const cx *x, size_t pos, bool fold)
{
    if (cp_at(x, pos) != '\'' || pos + 1 >= x->end) return 0;
    uint32_t a = cp_at(x, pos + 1);
    if (fold) a = cpt_tolower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= x->end) return 0;
    uint32_t b = cp_at(x, pos + 2);
    if (fold) b = cpt_tolower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S)|\s+ (and, with NL, \s*[\r\n]+ first): returns the end, or POS when no whitespace. */
static size_t whitespace_end(const cx *x, size_t pos, bool nl)
{
    size_t k = 0, last_nl = 0;
    while (fl_at(x, pos + k) & WS) {
        if (nl && is_nl(cp_at(x, pos + k))) last_nl = pos + k + 1;
        k++;
    }
    if (last_nl) return last_nl;
    if (k > 1 && cp_at(x, pos + k) != OUT) return pos + k - 1;
    return pos + k;
}

/* \p{N}{1,3} repeated: groups of three from the left. */
static size_t digits_by_three(cx *x, size_t pos)
{
    size_t i0 = pos;
    while (fl_at(x, pos) & NUM) {
        if (++pos - i0 >= 3) {
            add(x, pos);
            i0 = pos;
        }
    }
    add(x, pos);
    return pos;
}

/* ' ?[^\s<CLASS>]+[\r\n]*' where CLASS is the flags in MASK; USE_F2 picks
 * which flags the originals test first (they differ). */
static bool punct_run(cx *x, size_t *pos, unsigned mask, bool crlf, bool use_f2)
{
    uint32_t c = cp_at(x, *pos);
    unsigned f = fl_at(x, *pos);
    unsigned f2 = c == ' ' ? fl_at(x, *pos + 1) : f;
    if ((f2 & (WS | mask)) || !(use_f2 ? f2 : f)) return false;
    size_t p = *pos + (c == ' ');
    while (!(f2 & (WS | mask)) && f2) f2 = fl_at(x, ++p);
    if (crlf)
        while (is_nl(cp_at(x, p))) p++;
    add(x, p);
    *pos = p;
    return true;
}

static void split_gpt2(cx *x)
{
    for (size_t pos = x->ini; pos < x->end;) {
        size_t n = contraction(x, pos, false);
        if (n) {
            add(x, pos += n);
            continue;
        }
        uint32_t c = cp_at(x, pos);
        unsigned f2 = c == ' ' ? fl_at(x, pos + 1) : fl_at(x, pos);
        unsigned run = f2 & LET ? LET : f2 & NUM ? NUM : 0; /* ' ?\p{L}+' and ' ?\p{N}+' */
        if (run) {
            pos += c == ' ';
            while (fl_at(x, pos) & run) pos++;
            add(x, pos);
            continue;
        }
        if (punct_run(x, &pos, LET | NUM, false, true)) continue;
        size_t e = whitespace_end(x, pos, false);
        add(x, pos = e > pos ? e : pos + 1);
    }
}

/* llama3 (digits by three), qwen2 (single digits) and qwen3.5 (marks join letters) */
static void split_llama3_family(cx *x, custom_kind kind)
{
    unsigned word = kind == CUSTOM_QWEN35 ? LET | MRK : LET;
    for (size_t pos = x->ini; pos < x->end;) {
        size_t n = contraction(x, pos, true);
        if (n) {
            add(x, pos += n);
            continue;
        }
        uint32_t c = cp_at(x, pos);
        unsigned f = fl_at(x, pos);
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!is_nl(c) && !(f & NUM) && ((f & word) || (fl_at(x, pos + 1) & word))) {
            pos++;
            while (fl_at(x, pos) & word) pos++;
            add(x, pos);
            continue;
        }
        if (f & NUM) {
            if (kind == CUSTOM_LLAMA3) pos = digits_by_three(x, pos);
            else add(x, ++pos);
            continue;
        }
        if (punct_run(x, &pos, word | NUM, true, false)) continue;
        size_t e = whitespace_end(x, pos, true);
        add(x, pos = e > pos ? e : pos + 1);
    }
}

static bool kimi_letter(const cx *x, size_t p) { return (fl_at(x, p) & LET) && !cpt_is_han(cp_at(x, p)); }

/* Letters (no Han) with an optional leading non-letter and a trailing
 * contraction; returns false (POS unchanged) when there is no such word. */
static bool kimi_word(cx *x, size_t *pos)
{
    size_t p = *pos;
    uint32_t c = cp_at(x, p);
    unsigned f = fl_at(x, p);
    bool lead_ok = !is_nl(c) && !(f & (LET | NUM));
    if (!((f & LET) && !cpt_is_han(c)) && !(lead_ok && kimi_letter(x, p + 1))) return false;
    bool lead = lead_ok, letters = false;
    p += lead;
    while (kimi_letter(x, p)) {
        letters = true;
        p++;
    }
    if (!letters && !(!lead && kimi_letter(x, p))) return false;
    if (!letters) p++;
    while (kimi_letter(x, p)) p++;
    p += contraction(x, p, true);
    add(x, p);
    *pos = p;
    return true;
}

static void split_kimi(cx *x)
{
    for (size_t pos = x->ini; pos < x->end;) {
        if (cpt_is_han(cp_at(x, pos))) {
            while (cpt_is_han(cp_at(x, pos))) pos++;
            add(x, pos);
            continue;
        }
        if (kimi_word(x, &pos)) continue;
        if (fl_at(x, pos) & NUM) {
            pos = digits_by_three(x, pos);
            continue;
        }
        if (punct_run(x, &pos, LET | NUM, true, true)) continue;
        size_t e = whitespace_end(x, pos, true);
        add(x, pos = e > pos ? e : pos + 1);
    }
}

/* Digit runs split as 1-2 leading digits then threes; whatever precedes a
 * run is ended together with its first group, as in the original. */
static void split_digits3(cx *x)
{
    for (size_t pos = x->ini; pos < x->end;) {
        if (!(fl_at(x, pos) & NUM)) {
            pos++;
            continue;
        }
        size_t start = pos;
        while (pos < x->end && (fl_at(x, pos) & NUM)) pos++;
        size_t cur = start + (pos - start) % 3;
        if (cur > start) add(x, cur);
        for (; cur < pos; cur += 3) add(x, cur + 3);
    }
    add(x, x->end);
}

static void split_newlines(cx *x)
{
    for (size_t pos = x->ini; pos < x->end;) {
        bool nl = x->c[pos] == '\n';
        while (pos < x->end && (x->c[pos] == '\n') == nl) pos++;
        add(x, pos);
    }
}

int split_custom(custom_kind kind, const uint32_t *cpt, const uint16_t *fl, size_t ini, size_t end, seg_list *out)
{
    cx x = {cpt, fl, ini, end, ini, out, 0};
    switch (kind) {
    case CUSTOM_GPT2: split_gpt2(&x); break;
    case CUSTOM_LLAMA3: case CUSTOM_QWEN2: case CUSTOM_QWEN35: split_llama3_family(&x, kind); break;
    case CUSTOM_KIMI_K2: split_kimi(&x); break;
    case CUSTOM_DIGITS3: split_digits3(&x); break;
    case CUSTOM_NEWLINES: split_newlines(&x); break;
    }
    return x.oom ? -1 : 0;
}
