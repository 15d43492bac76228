/* Differential check of sluice's tokenizer against libllama on one GGUF:
 * metadata (BOS/EOS/EOT, add_bos/add_eos), the end-of-generation set and
 * every token's piece, then N random texts (words, scripts, whitespace,
 * special-token texts, malformed UTF-8) tokenized with random
 * add_special/parse_special and detokenized, or one whole file (with the
 * time each side takes).  Needs a llama.cpp build; see bench/tok_vs_llama.sh.
 *   tok_vs_llama MODEL.gguf fuzz N [SEED]  |  tok_vs_llama MODEL.gguf file PATH */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

typedef struct sl_vocab sl_vocab;
typedef struct {
    char msg[1024];
} sl_err;
void *sl_side_open(const char *path, char *msg, size_t cap);
int32_t vocab_bos(const sl_vocab *), vocab_eos(const sl_vocab *), vocab_eot(const sl_vocab *);
bool vocab_add_bos(const sl_vocab *), vocab_add_eos(const sl_vocab *), vocab_is_eog(const sl_vocab *, int32_t);
int vocab_token_to_piece(const sl_vocab *, int32_t, bool, char *, size_t);
int vocab_tokenize(const sl_vocab *, const char *, size_t, bool, bool, int32_t **, size_t *, sl_err *);
int vocab_detokenize(const sl_vocab *, const int32_t *, size_t, bool, bool, char **, size_t *, sl_err *);
void vocab_free(sl_vocab *);

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static const char *const PIECES[] = {
    "the", "The", "HELLO", "don't", "I'M", "we'LL", "they're", "'s", "'t", "'RE", "'ve", "'m", "'ll", "'D", "foo_bar",
    "McDonald", "iPhone", "naïve", "café", "straße", "ǅ", "ſ", "ﬁ", "привет", "Γειά", "日本語", "中文", "한국어",
    "ひらがな", "カタカナ", "ｶﾀｶﾅ", "हिन्दी", "कांग्रेस", "ภาษาไทย", "ខ្មែរ", "العربية", "עִבְרִית", "😀", "👩‍💻", "🇺🇸",
    "👍🏽", "❤️", "∑", "≤", "€", "$", "£", "©", "°", "±", "²", "½", "Ⅻ", "①", "٣", "123", "4567", "1234567890", "3.14",
    "1,000", "０１２", "𝟘𝟙", "http://x.y/z?a=1&b=2", "a@b.com", "C:\\dir", "<div>", "{\"a\":1}", "x=>y", "i++",
    "#include", "...", "!!", "?!", ",", ".", "--", "~", "~~", "`", "^", "|", "&&", "@", "#", "%", "(", ")", "[", "]",
    "{", "}", ";", ":", "'", "\"", "\\", "/", "<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<|begin_of_text|>", "<|eot_id|>", "<think>", "</think>", "<tool_call>", "<｜User｜>", "<｜end▁of▁sentence｜>",
    "<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "<|", "|>", "<", "▁", "Ġ", "\xc2\xa0",
    "\xe2\x80\x83", "\xe3\x80\x80", "\xc2\x85", "\xe2\x80\x8b", "\xe2\x80\x8d", "\xef\xbb\xbf", "\xef\xbf\xbd",
    "\xf4\x8f\xbf\xbf", "\xee\x80\x80", "\xe2\x80\xae", "\xc2\x80", "\x1b[31m", "\x7f", "\x01", "\xff", "\xc0\x80",
    "\xed\xa0\x80", "\x80", "\xe2\x82", "\xf0\x9f\x98", "\xc3", "\xe0\x80\xaf", "e\xcc\x81", "a\xcc\x8a\xcc\x8a",
    "\xe1\x84\x80\xe1\x85\xa1", "\xe2\xbf\xbc", "\xe3\x87\xaf", "\xf0\xae\xaf\xb0", " ", "  ", "\t", "\n", "\n\n",
    "\r\n", " \n", "\v", "\f", "    \n  ",
};

static size_t put_utf8(char *o, uint32_t c)
{
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | (c >> 6)), o[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)), o[1] = (char)(0x80 | ((c >> 6) & 63)), o[2] = (char)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)), o[1] = (char)(0x80 | ((c >> 12) & 63));
    o[2] = (char)(0x80 | ((c >> 6) & 63)), o[3] = (char)(0x80 | (c & 63));
    return 4;
}

static const uint32_t RANGES[][2] = {{0x20, 0x7e}, {0xa0, 0x2ff}, {0x300, 0x36f}, {0x370, 0x52f}, {0x590, 0x6ff},
                                     {0x900, 0xdff}, {0xe00, 0xfff}, {0x1100, 0x11ff}, {0x1e00, 0x1fff},
                                     {0x2000, 0x2bff}, {0x2e80, 0x30ff}, {0x3400, 0x9fff}, {0xa000, 0xd7ff},
                                     {0xe000, 0xffff}, {0x10000, 0x1faff}, {0x20000, 0x2ffff}, {0xe0000, 0xe01ef},
                                     {0x10fff0, 0x10ffff}, {0, 0x20}};

static size_t gen_text(char *o, size_t cap, const struct llama_vocab *lv)
{
    size_t n = 0, npieces = sizeof PIECES / sizeof PIECES[0];
    int parts = 1 + (int)(rnd() % 12), nt = llama_vocab_n_tokens(lv);
    for (int p = 0; p < parts && n + 64 < cap; p++) {
        int k = (int)(rnd() % 10);
        if (k < 6) {
            const char *s = PIECES[rnd() % npieces];
            memcpy(o + n, s, strlen(s));
            n += strlen(s);
        } else if (k < 7) { /* a token's own text, preferably a special one */
            int id = (int)(rnd() % (uint32_t)nt);
            for (int t = 0; t < 50 && (rnd() & 1); t++) {
                int j = (int)(rnd() % (uint32_t)nt);
                if (llama_vocab_get_attr(lv, j) & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED)) {
                    id = j;
                    break;
                }
            }
            const char *s = llama_vocab_get_text(lv, id);
            if (strlen(s) < 48) memcpy(o + n, s, strlen(s)), n += strlen(s);
        } else if (k < 9) {
            const uint32_t *r = RANGES[rnd() % (sizeof RANGES / sizeof RANGES[0])];
            for (int c = 1 + (int)(rnd() % 4); c > 0; c--) {
                uint32_t cp = r[0] + rnd() % (r[1] - r[0] + 1);
                n += put_utf8(o + n, cp >= 0xD800 && cp <= 0xDFFF ? 0xFFFD : cp);
            }
        } else {
            o[n++] = (char)(rnd() & 0xFF);
        }
    }
    return n;
}

/* llama.cpp throws on sequences decoding above U+10FFFF; such inputs are skipped */
static bool beyond_unicode(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i + 3 < n; i++)
        if (s[i] >= 0xF4 && s[i] <= 0xF7 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 &&
            (s[i + 3] & 0xC0) == 0x80 && (((s[i] & 7u) << 18) | ((s[i + 1] & 63u) << 12)) > 0x10FFFF)
            return true;
    return false;
}

static void show(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 32 && c < 127 && c != '\\') putchar(c);
        else printf("\\x%02x", c);
    }
}

static int check_meta(const struct llama_vocab *lv, const sl_vocab *sv)
{
    int bad = 0, nt = llama_vocab_n_tokens(lv);
    if (vocab_bos(sv) != llama_vocab_bos(lv) || vocab_eos(sv) != llama_vocab_eos(lv) ||
        vocab_eot(sv) != llama_vocab_eot(lv) || vocab_add_bos(sv) != llama_vocab_get_add_bos(lv) ||
        vocab_add_eos(sv) != llama_vocab_get_add_eos(lv)) {
        printf("metadata differs: bos %d/%d eos %d/%d eot %d/%d add_bos %d/%d (sluice/llama)\n", vocab_bos(sv),
               llama_vocab_bos(lv), vocab_eos(sv), llama_vocab_eos(lv), vocab_eot(sv), llama_vocab_eot(lv),
               vocab_add_bos(sv), llama_vocab_get_add_bos(lv));
        bad++;
    }
    static char a[8192], b[8192];
    for (int i = 0; i < nt; i++) {
        if (vocab_is_eog(sv, i) != llama_vocab_is_eog(lv, i) && bad++ < 10)
            printf("EOG differs for %d '%s'\n", i, llama_vocab_get_text(lv, i));
        for (int sp = 0; sp < 2; sp++) {
            int la = llama_token_to_piece(lv, i, a, sizeof a, 0, sp);
            int lb = vocab_token_to_piece(sv, i, sp, b, sizeof b);
            if ((la != lb || (la > 0 && memcmp(a, b, (size_t)la))) && bad++ < 10)
                printf("piece differs for %d (special=%d)\n", i, sp);
        }
    }
    return bad;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int check_file(const struct llama_vocab *lv, const sl_vocab *sv, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return printf("cannot open %s\n", path), 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n + 1);
    llama_token *lt = malloc((n + 16) * sizeof *lt);
    if (!text || !lt || fread(text, 1, n, f) != n) return printf("cannot read %s\n", path), 1;
    fclose(f);
    double t0 = now();
    int ln = llama_tokenize(lv, text, (int32_t)n, lt, (int32_t)n + 16, true, true);
    double t1 = now();
    int32_t *ids;
    size_t ns;
    sl_err e;
    if (vocab_tokenize(sv, text, n, true, true, &ids, &ns, &e)) return printf("sluice: %s\n", e.msg), 1;
    double t2 = now();
    size_t same = 0;
    while (same < ns && (int)same < ln && ids[same] == lt[same]) same++;
    bool ok = ln >= 0 && (size_t)ln == ns && same == ns;
    printf("%s: %zu bytes, %d tokens, %s (first difference at token %zu); llama.cpp %.1f ms, sluice %.1f ms\n", path,
           n, ln, ok ? "identical" : "DIFFERENT", same, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
    free(ids);
    free(text);
    free(lt);
    return !ok;
}

static int fuzz(const struct llama_vocab *lv, const sl_vocab *sv, int iters)
{
    static char text[8192], d1[1 << 16];
    static llama_token lt[1 << 14];
    int bad = 0, skipped = 0, nt = llama_vocab_n_tokens(lv);
    for (int it = 0; it < iters; it++) {
        size_t n = gen_text(text, sizeof text, lv);
        if (beyond_unicode((unsigned char *)text, n)) {
            skipped++;
            continue;
        }
        bool add = rnd() & 1, ps = rnd() & 1;
        int ln = llama_tokenize(lv, text, (int32_t)n, lt, 1 << 14, add, ps);
        int32_t *ids;
        size_t ns;
        sl_err e;
        if (vocab_tokenize(sv, text, n, add, ps, &ids, &ns, &e)) {
            printf("sluice error: %s\n", e.msg);
            bad++;
            continue;
        }
        if ((ln < 0 || (size_t)ln != ns || memcmp(ids, lt, ns * sizeof *ids)) && bad++ < 10) {
            printf("tokenize differs (add_special=%d parse_special=%d): \"", add, ps);
            show(text, n);
            printf("\"\n");
        }
        free(ids);
        /* detokenize those ids, and random ones */
        int32_t rid[16];
        int nr = (int)(rnd() % 16);
        for (int i = 0; i < nr; i++) rid[i] = (int32_t)(rnd() % (uint32_t)nt);
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *dt = pass ? rid : lt;
            int dn = pass ? nr : (ln > 0 ? ln : 0);
            bool rm = rnd() & 1, up = rnd() & 1;
            int l1 = llama_detokenize(lv, dt, dn, d1, sizeof d1, rm, up);
            char *d2;
            size_t l2;
            if (vocab_detokenize(sv, dt, (size_t)dn, rm, up, &d2, &l2, &e)) {
                printf("sluice error: %s\n", e.msg);
                bad++;
                continue;
            }
            if ((l1 < 0 || (size_t)l1 != l2 || memcmp(d1, d2, l2)) && bad++ < 10)
                printf("detokenize differs (remove_special=%d unparse_special=%d)\n", rm, up);
            free(d2);
        }
    }
    printf("%d random texts (%d skipped: beyond U+10FFFF), %d differences\n", iters, skipped, bad);
    return bad;
}

static void quiet(enum ggml_log_level l, const char *t, void *u)
{
    (void)l, (void)t, (void)u;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: tok_vs_llama MODEL.gguf (fuzz N [SEED] | file PATH)\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    char msg[1024];
    sl_vocab *sv = sl_side_open(argv[1], msg, sizeof msg);
    if (!m || !sv) {
        printf("%s: %s\n", argv[1], !m ? "llama.cpp cannot load it" : msg);
        return 1;
    }
    const struct llama_vocab *lv = llama_model_get_vocab(m);
    int bad = check_meta(lv, sv);
    if (!strcmp(argv[2], "file")) {
        bad += check_file(lv, sv, argv[3]);
    } else {
        if (argc > 4) rng ^= strtoull(argv[4], NULL, 10) * 0x9E3779B97F4A7C15ull;
        bad += fuzz(lv, sv, atoi(argv[3]));
    }
    vocab_free(sv);
    llama_model_free(m);
    return bad ? 1 : 0;
}
