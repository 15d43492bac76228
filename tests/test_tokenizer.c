/* Tokenizer against llama.cpp's ids: the shared vocabularies' test JSON
 * (352 cases + detokenization each), llama.cpp's upstream .inp/.out vectors,
 * the bundled model with the GPT-2 fixture, and error cases on small GGUFs
 * written here.  Set TOK_VERBOSE=1 to list every failing case. */
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "t.h"
#include "tok/pretok_table.h"
#include "tok/tok_internal.h"
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
    for (size_t i = 0; i < n && k + 16 < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? " " : "", ids[i]);
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

/* Ids of a golden array; -1 (and a failure) when it is missing or holds a
 * non-integer, so a damaged golden cannot pass as "no tokens". */
static int json_ids(json_t *arr, int32_t **out, size_t *n)
{
    *n = json_array_size(arr);
    *out = malloc((*n + 1) * sizeof **out);
    bool ok = json_is_array(arr);
    for (size_t i = 0; ok && i < *n; i++) {
        ok = json_is_integer(json_array_get(arr, i));
        (*out)[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    }
    T_CHECK(ok, "golden ids missing or not integers");
    return ok ? 0 : -1;
}

/* One case: tokenize TEXT and compare with llama.cpp's ids. */
static int check_case(const sl_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                      json_t *want_json, const char *vname)
{
    int32_t *want, *got = NULL;
    size_t nw, ng = 0;
    sl_err err;
    int ok = json_ids(want_json, &want, &nw) == 0 && text &&
             vocab_tokenize(v, text, len, add_bos, parse_special, &got, &ng, &err) == 0 && ng == nw &&
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
    int idok = json_ids(json_object_get(dc, "ids"), &ids, &n);
    json_t *jt = json_object_get(dc, "text");
    const char *want = idok == 0 ? json_string_value(jt) : NULL;
    size_t wl = json_string_length(jt);
    bool unparse = json_is_true(json_object_get(dc, "unparse_special"));
    bool remove = json_is_true(json_object_get(dc, "remove_special"));
    int ok = want && vocab_detokenize(v, ids, n, remove, unparse, &out, &len, &err) == 0 && len == wl &&
             !memcmp(out, want, wl);
    if (!ok) {
        T_CHECK(0, "%s detok unparse=%d: want \"%s\" got \"%s\"", vname, unparse, escape(want ? want : "", wl),
                escape(out ? out : "", out ? len : 0));
        if (verbose)
            printf("#   detok %s want \"%s\"\n#            got  \"%s\"\n", vname, escape(want, wl), escape(out, len));
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
    json_t *meta = json_object_get(root, "vocab_meta");
    T_CHECK(json_array_size(cases) > 0 && json_array_size(detok) > 0 && meta,
            "%s: golden 'cases', 'detok_cases' or 'vocab_meta' missing or empty", json_path);
    if (v && meta) {
        const char *k[] = {"n_vocab", "bos", "eos", "add_bos", "add_eos"};
        long got[] = {vocab_n_tokens(v), vocab_bos(v), vocab_eos(v), vocab_add_bos(v), vocab_add_eos(v)};
        for (int i = 0; i < 5; i++) {
            const char *want = json_string_value(json_object_get(meta, k[i]));
            T_CHECK(want && atol(want) == got[i], "%s: %s is %ld, llama.cpp says %s", label, k[i], got[i],
                    want ? want : "?");
        }
    }
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
            char skipname[128];
            snprintf(skipname, sizeof skipname, "tokenize + detokenize %s", label);
            t_skip(skipname, "../shared/vocab not present");
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

/* ---- llama.cpp's ids for the quirks of its splitting (fixture made with libllama) ---- */

static void quirks_for(json_t *cases, const char *vocab_path, const char *label)
{
    char name[256];
    snprintf(name, sizeof name, "quirks %s: %zu llama.cpp cases (malformed UTF-8, NEL, Unicode 15.1, ...)", label,
             json_array_size(cases));
    t_begin(name);
    sl_vocab *v = load_vocab(vocab_path, NULL);
    T_CHECK(json_array_size(cases) > 0, "%s: no quirk cases", label);
    for (size_t i = 0; v && i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *tb = json_object_get(c, "text_bytes");
        T_CHECK(json_is_array(tb), "%s case %zu: text_bytes missing", label, i);
        char text[512];
        size_t n = json_array_size(tb);
        for (size_t k = 0; k < n && k < sizeof text; k++) text[k] = (char)json_integer_value(json_array_get(tb, k));
        check_case(v, text, n, json_is_true(json_object_get(c, "add_special")),
                   json_is_true(json_object_get(c, "parse_special")), json_object_get(c, "ids"), label);
    }
    vocab_free(v);
    t_end();
}

static void quirks(void)
{
    json_error_t je;
    json_t *root = json_load_file("tests/fixtures/tokenizer_quirks.json", 0, &je);
    if (!root) {
        t_begin("quirks fixture");
        T_CHECK(0, "tests/fixtures/tokenizer_quirks.json: %s", je.text);
        t_end();
        return;
    }
    json_t *vocabs = json_object_get(root, "vocabs");
    quirks_for(json_object_get(vocabs, "ggml-vocab-gpt-2.gguf"), "models/tinymoe-q8_0.gguf", "gpt-2 on tinymoe");
    const char *key;
    json_t *cases;
    json_object_foreach(vocabs, key, cases) {
        char rel[256];
        snprintf(rel, sizeof rel, "vocab/%s", key);
        const char *p = t_shared(rel);
        char skipname[300];
        snprintf(skipname, sizeof skipname, "quirks %s", key);
        if (!p) t_skip(skipname, "../shared/vocab not present");
        else quirks_for(cases, p, key);
    }
    json_decref(root);
}

/* ---- end-of-generation sets and forced types, as libllama reports them ---- */

static void eog_sets(void)
{
    static const struct {
        const char *file;
        int32_t eot;
        int32_t eog[8];
    } W[] = {
        {"vocab/qwen3.gguf", 151645, {128247, 151643, 151645, 151662, 151663, 151664, -1}},
        {"vocab/llama3.gguf", 128009, {128001, 128009, -1}},
        {"vocab/gpt-oss.gguf", 199999, {199999, 200002, 200012, -1}},
        {"vocab/deepseek-v3.gguf", 1, {1, -1}},
        {"vocab/ggml-vocab-gpt-2.gguf", 50256, {50256, -1}},
        {"vocab/ggml-vocab-llama-spm.gguf", -1, {2, -1}},
        {"vocab/ggml-vocab-deepseek-llm.gguf", 100001, {100001, -1}},
        {"vocab/ggml-vocab-deepseek-coder.gguf", 32014, {32014, -1}},
    };
    for (size_t i = 0; i < sizeof W / sizeof W[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "end of generation %s", W[i].file + 6);
        const char *p = t_shared(W[i].file);
        if (!p) {
            t_skip(name, "../shared/vocab not present");
            continue;
        }
        t_begin(name);
        sl_vocab *v = load_vocab(p, NULL);
        int n = 0;
        for (int32_t id = 0; v && id < vocab_n_tokens(v); id++) {
            if (!vocab_is_eog(v, id)) continue;
            T_CHECK(W[i].eog[n] == id, "EOG token %d (%s) is not llama.cpp's", id, vocab_token_text(v, id));
            if (W[i].eog[n] >= 0) n++;
        }
        T_CHECK(W[i].eog[n] < 0, "EOG token %d missing", W[i].eog[n]);
        T_CHECK(v && vocab_eot(v) == W[i].eot, "eot %d, llama.cpp %d", v ? vocab_eot(v) : -2, W[i].eot);
        if (v && strstr(W[i].file, "qwen3")) /* a normal token llama.cpp forces to control */
            T_CHECK(vocab_token_type(v, vocab_find(v, "</s>")) == SL_TOKEN_CONTROL, "</s> type");
        if (v && strstr(W[i].file, "gpt-oss")) { /* harmony: always parsed, not EOG */
            const char *ud[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|end|>"};
            for (int k = 0; k < 5; k++)
                T_CHECK(vocab_token_type(v, vocab_find(v, ud[k])) == SL_TOKEN_USER_DEFINED, "%s type", ud[k]);
        }
        vocab_free(v);
        t_end();
    }
}

/* ---- small GGUFs written here, for the error paths ---- */

typedef struct {
    FILE *f;
    uint64_t n;
} gw;

static void w_str(FILE *f, const char *s)
{
    uint64_t n = strlen(s);
    fwrite(&n, 8, 1, f);
    fwrite(s, 1, n, f);
}

static void kv_str(gw *w, const char *k, const char *v)
{
    uint32_t t = 8;
    w_str(w->f, k);
    fwrite(&t, 4, 1, w->f);
    w_str(w->f, v);
    w->n++;
}

static void kv_strs(gw *w, const char *k, const char *const *v)
{
    uint32_t t = 9, et = 8;
    uint64_t n = 0;
    while (v[n]) n++;
    w_str(w->f, k);
    fwrite(&t, 4, 1, w->f);
    fwrite(&et, 4, 1, w->f);
    fwrite(&n, 8, 1, w->f);
    for (uint64_t i = 0; i < n; i++) w_str(w->f, v[i]);
    w->n++;
}

static void kv_i32s(gw *w, const char *k, const int32_t *v, uint64_t n)
{
    uint32_t t = 9, et = 5;
    w_str(w->f, k);
    fwrite(&t, 4, 1, w->f);
    fwrite(&et, 4, 1, w->f);
    fwrite(&n, 8, 1, w->f);
    fwrite(v, 4, n, w->f);
    w->n++;
}

/* Writes a tensor-less GGUF with the given tokenizer keys (NULL = absent)
 * to PATH; TOKENS/TYPES may be NULL for a default BPE alphabet. */
static void write_vocab(const char *path, const char *model, const char *pre, const char *const *tokens,
                        const int32_t *types, const char *const *merges)
{
    static const char *const bpe_tokens[] = {"a", "b", "c", "ab", "abc", "\xc4\xa0", "<|endoftext|>", NULL};
    FILE *f = fopen(path, "wb");
    uint32_t version = 3;
    uint64_t zero = 0, nkv = 0;
    fwrite("GGUF", 1, 4, f);
    fwrite(&version, 4, 1, f);
    fwrite(&zero, 8, 1, f);
    long at = ftell(f);
    fwrite(&nkv, 8, 1, f);
    gw w = {f, 0};
    kv_str(&w, "general.architecture", "test");
    if (model) kv_str(&w, "tokenizer.ggml.model", model);
    if (pre) kv_str(&w, "tokenizer.ggml.pre", pre);
    const char *const *toks = tokens ? tokens : bpe_tokens;
    kv_strs(&w, "tokenizer.ggml.tokens", toks);
    if (types) {
        uint64_t n = 0;
        while (toks[n]) n++;
        kv_i32s(&w, "tokenizer.ggml.token_type", types, n);
    }
    if (merges) kv_strs(&w, "tokenizer.ggml.merges", merges);
    while (ftell(f) % 32) fputc(0, f);
    fseek(f, at, SEEK_SET);
    fwrite(&w.n, 8, 1, f);
    fclose(f);
}

static int try_load(const char *path, sl_vocab **v, sl_err *err)
{
    gguf_file *g;
    *v = NULL;
    if (gguf_open(&g, path, err)) return -1;
    int rc = vocab_load(v, g, err);
    gguf_close(g);
    return rc;
}

static void error_cases(void)
{
    char path[] = "/tmp/sluice-tok-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        t_skip("tokenizer error cases", "cannot create a temp file");
        return;
    }
    close(fd);
    static const char *const merges[] = {"a b", "ab c", NULL};
    sl_vocab *v;
    sl_err err;
    t_begin("unknown pre-tokenizer is an error naming it");
    write_vocab(path, "gpt2", "not-a-pre", NULL, NULL, merges);
    T_CHECK(try_load(path, &v, &err) == -1 && strstr(err.msg, "unknown pre-tokenizer 'not-a-pre'") &&
                strstr(err.msg, "tokenizer.ggml.pre"), "got: %s", err.msg);
    t_end();
    t_begin("pre-tokenizer llama.cpp knows but sluice does not is an error naming it");
    write_vocab(path, "gpt2", "gemma4", NULL, NULL, merges);
    T_CHECK(try_load(path, &v, &err) == -1 && strstr(err.msg, "'gemma4'") && strstr(err.msg, "not supported"),
            "got: %s", err.msg);
    t_end();
    t_begin("unknown tokenizer model is an error naming it");
    write_vocab(path, "wordpiece-9000", NULL, NULL, NULL, merges);
    T_CHECK(try_load(path, &v, &err) == -1 && strstr(err.msg, "unknown tokenizer model 'wordpiece-9000'"),
            "got: %s", err.msg);
    write_vocab(path, "bert", NULL, NULL, NULL, merges);
    T_CHECK(try_load(path, &v, &err) == -1 && strstr(err.msg, "'bert'") && strstr(err.msg, "not supported"),
            "got: %s", err.msg);
    write_vocab(path, NULL, NULL, NULL, NULL, merges);
    T_CHECK(try_load(path, &v, &err) == -1 && strstr(err.msg, "tokenizer.ggml.model"), "got: %s", err.msg);
    t_end();
    t_begin("BPE needs merges, except kimi-k2 (as llama.cpp)");
    write_vocab(path, "gpt2", "gpt-2", NULL, NULL, NULL);
    T_CHECK(try_load(path, &v, &err) == -1 && strstr(err.msg, "merges"), "got: %s", err.msg);
    write_vocab(path, "gpt2", "kimi-k2", NULL, NULL, NULL);
    T_CHECK(try_load(path, &v, &err) == 0, "kimi-k2 without merges: %s", err.msg);
    vocab_free(v);
    t_end();
    t_begin("missing pre-tokenizer means llama.cpp's 'default'; merges by rank");
    write_vocab(path, "gpt2", NULL, NULL, NULL, merges);
    T_CHECK(try_load(path, &v, &err) == 0 && !strcmp(vocab_pre(v), "default"), "%s", err.msg);
    int32_t *ids = NULL;
    size_t n = 0;
    /* "abcab": a+b merge first (rank 0), then ab+c: [abc][ab] */
    T_CHECK(v && vocab_tokenize(v, "abcab", 5, false, false, &ids, &n, &err) == 0 && n == 2 && ids[0] == 4 &&
                ids[1] == 3, "abcab -> %zu ids", n);
    free(ids);
    /* no merge, no token for "cb"... single symbols; a byte with no token is skipped like llama.cpp */
    T_CHECK(v && vocab_tokenize(v, "cbz", 3, false, false, &ids, &n, &err) == 0 && n == 2 && ids[0] == 2 &&
                ids[1] == 1, "cbz -> %zu ids", n);
    free(ids);
    /* bytes decoding above U+10FFFF: llama.cpp throws, sluice reports it */
    T_CHECK(v && vocab_tokenize(v, "a\xf4\x90\x80\x80", 5, false, false, &ids, &n, &err) == -1 &&
                strstr(err.msg, "byte 1"), "got: %s", err.msg);
    vocab_free(v);
    t_end();
    t_begin("duplicate token texts are an error (llama.cpp asserts)");
    static const char *const dup[] = {"a", "b", "a", NULL};
    write_vocab(path, "gpt2", "gpt-2", dup, NULL, merges);
    T_CHECK(try_load(path, &v, &err) == -1 && strstr(err.msg, "same text"), "got: %s", err.msg);
    t_end();
    t_begin("SentencePiece byte fallback and add_space_prefix");
    static const char *const spm[] = {"<unk>", "<s>", "</s>", "<0x41>", "<0xC3>", "<0xA9>", "\xe2\x96\x81",
                                      "\xe2\x96\x81" "b", "b", NULL};
    static const int32_t spm_types[] = {2, 3, 3, 6, 6, 6, 1, 1, 1};
    write_vocab(path, "llama", NULL, spm, spm_types, NULL);
    T_CHECK(try_load(path, &v, &err) == 0 && vocab_add_bos(v) && vocab_bos(v) == 1, "%s", err.msg);
    /* " b" -> ▁b; "A" has no token: <0x41>; "é" -> <0xC3><0xA9>; with BOS, and a
     * leading space (add_space_prefix) */
    T_CHECK(v && vocab_tokenize(v, "b A\xc3\xa9", 5, true, false, &ids, &n, &err) == 0 && n == 6 && ids[0] == 1 &&
                ids[1] == 7 && ids[2] == 6 && ids[3] == 3 && ids[4] == 4 && ids[5] == 5,
            "got %zu ids: %s", n, err.msg);
    char *text;
    size_t len;
    T_CHECK(v && vocab_detokenize(v, ids, n, true, false, &text, &len, &err) == 0 && len == 6 &&
                !memcmp(text, " b A\xc3\xa9", 6), "detok");
    free(text);
    T_CHECK(v && vocab_detokenize(v, ids + 1, n - 1, false, false, &text, &len, &err) == 0 && len == 5 &&
                !memcmp(text, "b A\xc3\xa9", 5), "detok strips the prefix space");
    free(text);
    free(ids);
    /* a byte without any token is an error (llama.cpp throws) */
    T_CHECK(v && vocab_tokenize(v, "z", 1, false, false, &ids, &n, &err) == -1 && strstr(err.msg, "0x7A"),
            "got: %s", err.msg);
    vocab_free(v);
    t_end();
    unlink(path);
}

/* ---- the pre-tokenizer table ---- */

static void pretok_table(void)
{
    t_begin("every pre-tokenizer name compiles");
    size_t n = pre_count();
    for (size_t i = 0; i < n; i++) {
        pretok *p;
        unsigned flags;
        sl_err err;
        T_CHECK(pretok_create(&p, pre_at(i)->name, &flags, &err) == 0, "%s: %s", pre_at(i)->name, err.msg);
        pretok_free(p);
    }
    T_CHECK(n >= 80, "only %zu names", n);
    t_end();
}

/* ---- streaming detokenization ---- */

static void streaming(void)
{
    t_begin("streaming detok holds back incomplete UTF-8");
    sl_vocab *v = load_vocab("models/tinymoe-q8_0.gguf", NULL);
    const char *text = "caf\xc3\xa9 \xe2\x82\xac" "5 \xf0\x9f\x98\x80\xf0\x9f\x91\x8d!";
    int32_t *ids = NULL;
    size_t n = 0;
    sl_err err;
    T_CHECK(v && vocab_tokenize(v, text, strlen(text), false, false, &ids, &n, &err) == 0, "tokenize");
    char all[256], out[64];
    size_t total = 0;
    int held = 0;
    sl_detok d = {0};
    for (size_t i = 0; v && i < n; i++) {
        size_t w = detok_push(&d, v, ids[i], out, sizeof out);
        char piece[64];
        int pl = vocab_token_to_piece(v, ids[i], false, piece, sizeof piece);
        held += (size_t)pl != w;
        /* what was printed so far never ends inside a sequence */
        memcpy(all + total, out, w);
        total += w;
        size_t k = total;
        while (k > 0 && ((unsigned char)all[k - 1] & 0xC0) == 0x80) k--;
        if (k > 0) {
            unsigned char c = (unsigned char)all[k - 1];
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            T_CHECK(total - (k - 1) == need, "output after token %zu ends inside a sequence", i);
        }
    }
    total += detok_flush(&d, all + total, sizeof all - total);
    T_CHECK(total == strlen(text) && !memcmp(all, text, total), "streamed text differs");
    T_CHECK(held > 0, "no token ended inside a sequence (the test would prove nothing)");
    /* an unfinished sequence at the end comes out of flush */
    int32_t e2 = vocab_find(v, "\xc3\xa2"); /* byte 0xE2 in GPT-2's alphabet */
    size_t w = detok_push(&d, v, e2, out, sizeof out);
    T_CHECK(w == 0 && detok_flush(&d, out, sizeof out) == 1 && (unsigned char)out[0] == 0xE2, "flush");
    /* control tokens print only when asked */
    T_CHECK(detok_push(&d, v, 50256, out, sizeof out) == 0, "control token printed");
    T_CHECK(detok_push_special(&d, v, 50256, true, out, sizeof out) == 13 && !memcmp(out, "<|endoftext|>", 13),
            "control token with unparse_special");
    free(ids);
    vocab_free(v);
    t_end();
}

int main(void)
{
    verbose = getenv("TOK_VERBOSE") != NULL;
    bundled_gpt2();
    quirks();
    streaming();
    pretok_table();
    error_cases();
    shared_tests_json();
    upstream_vectors();
    eog_sets();
    return t_done();
}
