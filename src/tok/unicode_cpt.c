/* Code point properties and UTF-8 the way llama.cpp's tokenizer sees them.
 *
 * Categories come from utf8proc (Unicode 15.0 in Debian 12).  llama.cpp's
 * generated table is Unicode 15.1, which only adds the three ranges patched
 * below; tests/test_tokenizer.c checks the tokenizer against llama.cpp's ids
 * and docs/TOKENIZER.md records the comparison.  Whitespace is Unicode's
 * White_Space property, which llama.cpp uses for \s (it includes U+0085,
 * unlike PCRE2's \s). */
#include <utf8proc.h>

#include "tok/tok_internal.h"

static bool is_white_space(uint32_t c)
{
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || c == 0x20;
    switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return c >= 0x2000 && c <= 0x200A;
    }
}

static unsigned category_flag(uint32_t c)
{
    /* Unicode 15.1 additions missing from utf8proc's 15.0 tables */
    if (c >= 0x2EBF0 && c <= 0x2EE5D) return CPT_LETTER;           /* CJK Extension I */
    if ((c >= 0x2FFC && c <= 0x2FFF) || c == 0x31EF) return CPT_SYMBOL; /* ideographic description */
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return CPT_LETTER;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return CPT_MARK;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return CPT_NUMBER;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
        return CPT_PUNCT;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK: case UTF8PROC_CATEGORY_SO:
        return CPT_SYMBOL;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return CPT_SEPARATOR;
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
        return CPT_CONTROL;
    default:
        return CPT_UNDEFINED;
    }
}

unsigned cpt_flags(uint32_t c)
{
    if (c > 0x10FFFF) return CPT_UNDEFINED;
    return category_flag(c) | (is_white_space(c) ? CPT_WHITESPACE : 0);
}

uint32_t cpt_tolower(uint32_t c)
{
    if (c > 0x10FFFF) return c;
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
}

bool cpt_is_han(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0x2CEB0 && c <= 0x2EBEF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool cont(const unsigned char *s, size_t n, size_t i) { return i < n && (s[i] & 0xC0) == 0x80; }

uint32_t utf8_next_lenient(const unsigned char *s, size_t n, size_t *pos)
{
    size_t i = *pos;
    unsigned c = s[i];
    if (c < 0x80) {
        *pos = i + 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0 && cont(s, n, i + 1)) {
        *pos = i + 2;
        return ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
    }
    if ((c & 0xF0) == 0xE0 && cont(s, n, i + 1) && cont(s, n, i + 2)) {
        *pos = i + 3;
        return ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    }
    if ((c & 0xF8) == 0xF0 && cont(s, n, i + 1) && cont(s, n, i + 2) && cont(s, n, i + 3)) {
        *pos = i + 4;
        return ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
    }
    *pos = i + 1;
    return 0xFFFD;
}

size_t utf8_put(uint32_t c, char *o)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 (0x00-0x20, 0x7F-0xA0, 0xAD) to U+0100.. in byte order. */
uint32_t byte_to_cpt(uint8_t b)
{
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 0x21 + (b - 0x7Fu);
    if (b == 0xAD) return 0x100 + 0x21 + 0x22;
    return b;
}

int cpt_to_byte(uint32_t c)
{
    if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xFF && c != 0xAD)) return (int)c;
    if (c < 0x100 || c >= 0x100 + 68) return -1;
    uint32_t k = c - 0x100;
    if (k <= 0x20) return (int)k;
    if (k < 0x21 + 0x22) return (int)(0x7F + (k - 0x21));
    return 0xAD;
}
