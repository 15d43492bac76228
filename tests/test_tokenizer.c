/* Tokenizer against llama.cpp's ids: the shared vocabularies' test JSON
 * (352 cases + detokenization each), llama.cpp's upstream .inp/.out vectors,
 * the bundled model with the GPT-2 fixture, and error cases on small GGUFs
 * written here.  Set TOK_VERBOSE=1 to list every failing case. */
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "t.h"
#include "tok/tokenizer.h"

static int verbose;

static char *escape(const char *s, size_t n)
{
    static char buf[4][512];
    static int slot;
    char *o = buf[slot++ & 3];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < sizeof buf[0]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\') o[k++] = (char)c;
        else k += (size_t)snprintf(o + k, 8, "\\x%02x", c);
    }
    o[k] = 0;
    return o;
}

static void ids_str(const int32_t *ids, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && k + 16 < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? " " : "", ids[i]);
}

static sl_vocab *load_vocab(const char *path, gguf_file **gout)
{
    sl_err err;
    gguf_file *g;
    sl_vocab *v = NULL;
    if (gguf_open(&g, path, &err)) {
        T_CHECK(0, "%s", err.msg);
        return NULL;
    }
    if (vocab_load(&v, g, &err)) T_CHECK(0, "%s", err.msg);
    if (gout) *gout = g;
    else gguf_close(g);
    return v;
}

static int json_ids(json_t *arr, int32_t **out, size_t *n)
{
    *n = json_array_size(arr);
    *out = malloc((*n + 1) * sizeof **out);
    for (size_t i = 0; i < *n; i++) (*out)[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return 0;
}

/* One case: tokenize TEXT and compare with llama.cpp's ids. */
static int check_case(const sl_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                      json_t *want_json, const char *vname)
{
    int32_t *want, *got = NULL;
    size_t nw, ng = 0;
    sl_err err;
    json_ids(want_json, &want, &nw);
    int ok = vocab_tokenize(v, text, len, add_bos, parse_special, &got, &ng, &err) == 0 && ng == nw &&
             !memcmp(got, want, nw * sizeof *want);
    if (!ok) {
        char a[600], b[600];
        ids_str(want, nw, a, sizeof a);
        ids_str(got, ng, b, sizeof b);
        T_CHECK(0, "%s \"%s\" special=%d: want [%s] got [%s]", vname, escape(text, len), parse_special, a, b);
        if (verbose)
            printf("#   %s \"%s\" special=%d\n#     want [%s]\n#     got  [%s]\n", vname, escape(text, len),
                   parse_special, a, b);
    }
    free(want);
    free(got);
    return ok;
}

static int check_detok(const sl_vocab *v, json_t *dc, const char *vname)
{
    int32_t *ids;
    size_t n, len;
    char *out = NULL;
    sl_err err;
    json_ids(json_object_get(dc, "ids"), &ids, &n);
    json_t *jt = json_object_get(dc, "text");
    const char *want = json_string_value(jt);
    size_t wl = json_string_length(jt);
    bool unparse = json_is_true(json_object_get(dc, "unparse_special"));
    bool remove = json_is_true(json_object_get(dc, "remove_special"));
    int ok = want && vocab_detokenize(v, ids, n, remove, unparse, &out, &len, &err) == 0 && len == wl &&
             !memcmp(out, want, wl);
    if (!ok) {
        T_CHECK(0, "%s detok unparse=%d: want \"%s\" got \"%s\"", vname, unparse, escape(want ? want : "", wl),
                escape(out ? out : "", out ? len : 0));
        if (verbose) printf("#   detok %s want \"%s\"\n#            got  \"%s\"\n", vname, escape(want, wl), escape(out, len));
    }
    free(ids);
    free(out);
    return ok;
}

/* All cases of one <name>.tests.json against VOCAB. */
static void run_tests_json(const char *json_path, const char *vocab_path, const char *label)
{
    json_error_t je;
    json_t *root = json_load_file(json_path, JSON_ALLOW_NUL, &je);
    char name[256];
    if (!root) {
        snprintf(name, sizeof name, "tokenize %s", label);
        t_begin(name);
        T_CHECK(0, "%s: %s", json_path, je.text);
        t_end();
        return;
    }
    json_t *cases = json_object_get(root, "cases"), *detok = json_object_get(root, "detok_cases");
    snprintf(name, sizeof name, "tokenize %s: %zu llama.cpp cases", label, json_array_size(cases));
    t_begin(name);
    sl_vocab *v = load_vocab(vocab_path, NULL);
    size_t pass = 0;
    for (size_t i = 0; v && i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *jt = json_object_get(c, "text");
        pass += (size_t)check_case(v, json_string_value(jt), json_string_length(jt),
                                   json_is_true(json_object_get(c, "add_bos")),
                                   json_is_true(json_object_get(c, "parse_special")), json_object_get(c, "ids"),
                                   label);
    }
    if (verbose) printf("# %s: %zu/%zu tokenize cases pass\n", label, pass, json_array_size(cases));
    t_end();
    snprintf(name, sizeof name, "detokenize %s: %zu llama.cpp cases", label, json_array_size(detok));
    t_begin(name);
    pass = 0;
    for (size_t i = 0; v && i < json_array_size(detok); i++)
        pass += (size_t)check_detok(v, json_array_get(detok, i), label);
    if (verbose) printf("# %s: %zu/%zu detok cases pass\n", label, pass, json_array_size(detok));
    t_end();
    vocab_free(v);
    json_decref(root);
}

static const char *const SHARED_VOCABS[][2] = {
    {"gpt-2", "ggml-vocab-gpt-2.gguf"},
    {"llama-spm", "ggml-vocab-llama-spm.gguf"},
    {"deepseek-llm", "ggml-vocab-deepseek-llm.gguf"},
    {"deepseek-coder", "ggml-vocab-deepseek-coder.gguf"},
    {"qwen3", "qwen3.gguf"},
    {"llama3", "llama3.gguf"},
    {"deepseek-v3", "deepseek-v3.gguf"},
    {"gpt-oss", "gpt-oss.gguf"},
};

static void shared_tests_json(void)
{
    for (size_t i = 0; i < sizeof SHARED_VOCABS / sizeof SHARED_VOCABS[0]; i++) {
        char rj[128], rv[128], label[64];
        snprintf(rj, sizeof rj, "vocab/%s.tests.json", SHARED_VOCABS[i][0]);
        snprintf(rv, sizeof rv, "vocab/%s", SHARED_VOCABS[i][1]);
        snprintf(label, sizeof label, "%s", SHARED_VOCABS[i][0]);
        const char *pj = t_shared(rj), *pv = t_shared(rv);
        if (!pj || !pv) {
            t_skip(label, "../shared/vocab not present");
            continue;
        }
        char pjc[1024];
        snprintf(pjc, sizeof pjc, "%s", pj);
        run_tests_json(pjc, pv, label);
    }
}

/* ---- llama.cpp's upstream test vectors (.inp/.out) ---- */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

static void upstream_vectors(void)
{
    static const char *const names[] = {"gpt-2", "llama-spm", "deepseek-llm", "deepseek-coder"};
    for (size_t i = 0; i < 4; i++) {
        char rel[128], name[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", names[i]);
        snprintf(name, sizeof name, "upstream vectors ggml-vocab-%s", names[i]);
        const char *pv = t_shared(rel);
        if (!pv) {
            t_skip(name, "../shared/vocab not present");
            continue;
        }
        char pvc[1024], pin[1100], pout[1100];
        snprintf(pvc, sizeof pvc, "%s", pv);
        snprintf(pin, sizeof pin, "%s.inp", pvc);
        snprintf(pout, sizeof pout, "%s.out", pvc);
        size_t ni, no;
        char *inp = slurp(pin, &ni), *outp = slurp(pout, &no);
        t_begin(name);
        sl_vocab *v = load_vocab(pvc, NULL);
        T_CHECK(inp && outp, "missing %s or %s", pin, pout);
        const char *sep = "\n__ggml_vocab_test__\n";
        char *s = inp, *line = outp;
        size_t count = 0;
        while (v && inp && outp && *s) {
            char *e = strstr(s, sep);
            if (!e) break;
            char *nl = strchr(line, '\n');
            if (!nl) break;
            *nl = 0;
            json_t *want = json_array();
            for (char *p = line; *p;) {
                char *end;
                long id = strtol(p, &end, 10);
                if (end == p) break;
                json_array_append_new(want, json_integer(id));
                p = end;
            }
            check_case(v, s, (size_t)(e - s), false, false, want, names[i]);
            json_decref(want);
            count++;
            s = e + strlen(sep);
            line = nl + 1;
        }
        T_CHECK(count >= 40, "only %zu vectors read", count);
        t_end();
        vocab_free(v);
        free(inp);
        free(outp);
    }
}

/* ---- the bundled model carries GPT-2's vocabulary ---- */

static uint64_t arr_digest(const gguf_file *g, const char *key)
{
    const void *d;
    uint64_t n, h = 1469598103934665603ull;
    sl_err err;
    if (gguf_get_arr(g, key, GGUF_STRING, &d, &n, &err) != 1) return 0;
    const gguf_str *s = d;
    for (uint64_t i = 0; i < n; i++) {
        for (uint64_t k = 0; k < s[i].len; k++) h = (h ^ (unsigned char)s[i].s[k]) * 1099511628211ull;
        h = (h ^ 0xFF) * 1099511628211ull; /* separator no token can contain at this position */
    }
    return h ^ n;
}

static void bundled_gpt2(void)
{
    t_begin("bundled tinymoe vocabulary is ggml-vocab-gpt-2's");
    gguf_file *g = NULL, *ref = NULL;
    sl_err err;
    sl_vocab *v = load_vocab("models/tinymoe-q8_0.gguf", &g);
    T_CHECK(v && !strcmp(vocab_model(v), "gpt2") && !strcmp(vocab_pre(v), "gpt-2"), "model/pre");
    T_CHECK(v && vocab_n_tokens(v) == 50257 && vocab_bos(v) == 50256 && vocab_eos(v) == 50256 && !vocab_add_bos(v),
            "n_tokens/bos/eos/add_bos");
    /* digests of ggml-vocab-gpt-2.gguf's token and merge lists (FNV-1a), so a
     * fresh clone checks the identity too; with ../shared we compare directly */
    if (g) {
        T_CHECK(arr_digest(g, "tokenizer.ggml.tokens") == 0x6978f9a4a297a2d5ull, "tokens digest %llx",
                (unsigned long long)arr_digest(g, "tokenizer.ggml.tokens"));
        T_CHECK(arr_digest(g, "tokenizer.ggml.merges") == 0x62b8881c34e79be0ull, "merges digest %llx",
                (unsigned long long)arr_digest(g, "tokenizer.ggml.merges"));
    }
    const char *rp = t_shared("vocab/ggml-vocab-gpt-2.gguf");
    if (g && rp && gguf_open(&ref, rp, &err) == 0) {
        T_CHECK(arr_digest(g, "tokenizer.ggml.tokens") == arr_digest(ref, "tokenizer.ggml.tokens"), "tokens differ");
        T_CHECK(arr_digest(g, "tokenizer.ggml.merges") == arr_digest(ref, "tokenizer.ggml.merges"), "merges differ");
        gguf_close(ref);
    }
    gguf_close(g);
    vocab_free(v);
    t_end();
    run_tests_json("tests/fixtures/gpt-2.tests.json", "models/tinymoe-q8_0.gguf", "gpt-2 fixture on tinymoe");
}

int main(void)
{
    verbose = getenv("TOK_VERBOSE") != NULL;
    bundled_gpt2();
    shared_tests_json();
    upstream_vectors();
    return t_done();
}
