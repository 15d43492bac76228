/* sluice tokenize / detokenize: the model's tokenizer on its own, with
 * llama-tokenize's conventions (ids as one JSON array; BOS as the vocabulary
 * asks unless --no-bos). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tok/tokenizer.h"

static int open_vocab(const char *path, gguf_file **g, sl_vocab **v)
{
    sl_err err;
    if (!path) path = cli_default_model();
    if (!path) return cli_fail("no model given (-m MODEL.gguf) and the bundled model was not found");
    if (gguf_open(g, path, &err)) return cli_fail("%s", err.msg);
    if (vocab_load(v, *g, &err)) {
        gguf_close(*g);
        return cli_fail("%s", err.msg);
    }
    return 0;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    bool bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* a piece on one line: printable text as it is, the rest escaped.  A byte
 * token holds part of a UTF-8 character: raw, it would corrupt the line. */
static void print_piece(const char *p, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = c >= 0x80 ? utf8proc_iterate((const utf8proc_uint8_t *)p + i, n - i, &cp) : 1;
        if (k > 1) {
            fwrite(p + i, 1, (size_t)k, stdout);
            i += (int)k - 1;
            continue;
        }
        if (k < 0) printf("\\x%02x", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
}

static void print_ids(const sl_vocab *v, const int32_t *ids, size_t n, bool pieces)
{
    if (!pieces) {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        puts("]");
        return;
    }
    char buf[256];
    for (size_t i = 0; i < n; i++) {
        int len = vocab_token_to_piece(v, ids[i], true, buf, sizeof buf);
        printf("%d\t", ids[i]);
        if (len > (int)sizeof buf) {
            char *big = malloc((size_t)len);
            if (big) vocab_token_to_piece(v, ids[i], true, big, (size_t)len);
            print_piece(big ? big : buf, big ? len : (int)sizeof buf);
            free(big);
        } else {
            print_piece(buf, len);
        }
        putchar('\n');
    }
}

static void tokenize_usage(void)
{
    printf("usage: sluice tokenize [-m MODEL.gguf] (-p TEXT | -f FILE) [--special] [--no-bos] [--pieces]\n"
           "  prints the token ids as one JSON array\n"
           "  -m MODEL.gguf  model (default: the bundled model)\n"
           "  -p TEXT        text to tokenize\n"
           "  -f FILE        read the text from FILE ('-' for stdin)\n"
           "  --special      parse special tokens written in the text (<|im_start|>, ...)\n"
           "  --no-bos       do not add the BOS token the vocabulary would add\n"
           "  --pieces       print one 'id<TAB>piece' line per token instead\n");
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool special = false, no_bos = false, pieces = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return tokenize_usage(), 0;
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--no-bos")) no_bos = true;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if ((!strcmp(a, "-m") || !strcmp(a, "-p") || !strcmp(a, "-f")) && i + 1 < argc)
            *(a[1] == 'm' ? &model : a[1] == 'p' ? &prompt : &file) = argv[++i];
        else return cli_fail("tokenize: unknown or incomplete option '%s' (see sluice tokenize --help)", a), 2;
    }
    if (!prompt == !file) return cli_fail("tokenize: give the text with exactly one of -p TEXT or -f FILE"), 2;
    size_t len = 0;
    char *text = file ? read_all(file, &len) : NULL;
    if (file && !text) return cli_fail("tokenize: cannot read '%s': %s", file, strerror(errno));
    if (prompt) len = strlen(prompt);
    gguf_file *g;
    sl_vocab *v;
    if (open_vocab(model, &g, &v)) {
        free(text);
        return 1;
    }
    int32_t *ids;
    size_t n;
    sl_err err;
    int rc = vocab_tokenize(v, text ? text : prompt, len, vocab_add_bos(v) && !no_bos, special, &ids, &n, &err);
    if (rc) rc = cli_fail("tokenize: %s", err.msg);
    else print_ids(v, ids, n, pieces);
    if (!rc) free(ids);
    free(text);
    vocab_free(v);
    gguf_close(g);
    return rc;
}

static void detokenize_usage(void)
{
    printf("usage: sluice detokenize [-m MODEL.gguf] [--special] IDS...\n"
           "  prints the text of the token ids (separated by spaces or commas; a JSON array works)\n"
           "  -m MODEL.gguf  model (default: the bundled model)\n"
           "  --special      render control tokens (<|im_end|>, ...) instead of dropping them\n");
}

/* Appends the ids in S ("1 2", "1,2", "[1, 2]") to IDS; -1 on a bad number. */
static int parse_ids(const char *s, int32_t **ids, size_t *n, size_t *cap)
{
    while (*s) {
        if (strchr(" \t\n,[]", *s)) {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long id = strtol(s, &end, 10);
        if (end == s || errno || id < INT32_MIN || id > INT32_MAX || (*end && !strchr(" \t\n,[]", *end))) return -1;
        if (*n == *cap) {
            int32_t *p = realloc(*ids, (*cap = *cap ? *cap * 2 : 64) * sizeof *p);
            if (!p) return -1;
            *ids = p;
        }
        (*ids)[(*n)++] = (int32_t)id;
        s = end;
    }
    return 0;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    bool special = false;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return free(ids), detokenize_usage(), 0;
        if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "-m") && i + 1 < argc) model = argv[++i];
        else if (parse_ids(a, &ids, &n, &cap)) return free(ids), cli_fail("detokenize: bad token id list '%s'", a), 2;
    }
    if (!n) return free(ids), cli_fail("detokenize: no token ids given (sluice detokenize [-m MODEL] ID[,ID...])"), 2;
    gguf_file *g;
    sl_vocab *v;
    if (open_vocab(model, &g, &v)) return free(ids), 1;
    char *text;
    size_t len;
    sl_err err;
    int rc = vocab_detokenize(v, ids, n, false, special, &text, &len, &err);
    if (rc) {
        rc = cli_fail("detokenize: %s", err.msg);
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
        free(text);
    }
    free(ids);
    vocab_free(v);
    gguf_close(g);
    return rc;
}
