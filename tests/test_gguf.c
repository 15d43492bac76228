/* GGUF reader on real files: the bundled models and every GGUF in ../shared. */
#include <dirent.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "gguf/summary.h"
#include "t.h"

/* ggml's block sizes (elements, bytes) written out here from ggml's block
 * structs, independent of src/gguf/ggml_type.c: the reader's tensor sizes
 * are checked against them. */
static const struct {
    uint32_t type, blck, bytes;
} BLOCKS[] = {
    {0, 1, 4},       {1, 1, 2},       {2, 32, 18},     {3, 32, 20},     {6, 32, 22},    {7, 32, 24},
    {8, 32, 34},     {9, 32, 36},     {10, 256, 84},   {11, 256, 110},  {12, 256, 144}, {13, 256, 176},
    {14, 256, 210},  {15, 256, 292},  {16, 256, 66},   {17, 256, 74},   {18, 256, 98},  {19, 256, 50},
    {20, 32, 18},    {21, 256, 110},  {22, 256, 82},   {23, 256, 136},  {24, 1, 1},     {25, 1, 2},
    {26, 1, 4},      {27, 1, 8},      {28, 1, 8},      {29, 256, 56},   {30, 1, 2},     {34, 256, 54},
    {35, 256, 66},   {39, 32, 17},
};

/* Bytes of T from the table above; 0 when its type is not listed or its
 * rows are not whole blocks. */
static uint64_t expected_bytes(const gguf_tensor *t)
{
    for (size_t i = 0; i < sizeof BLOCKS / sizeof *BLOCKS; i++) {
        if (BLOCKS[i].type != t->type) continue;
        if (t->ne[0] % BLOCKS[i].blck) return 0;
        return (uint64_t)(t->ne[0] / BLOCKS[i].blck) * BLOCKS[i].bytes * (uint64_t)t->ne[1] *
               (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
    }
    return 0;
}

static int cmp_off(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Tensor data against the file itself: each tensor's size from the block
 * table, aligned, in order without overlap, and the data section ending
 * where the file does (writers pad the last tensor to the alignment). */
static void check_layout(const gguf_file *g, uint64_t *total, uint64_t *experts)
{
    const gguf_tensor **ts = malloc(sizeof *ts * (g->n_tensors ? g->n_tensors : 1));
    for (uint64_t i = 0; i < g->n_tensors; i++) ts[i] = &g->tensors[i];
    qsort(ts, g->n_tensors, sizeof *ts, cmp_off);
    uint64_t end = 0, al = g->alignment;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = ts[i];
        uint64_t want = expected_bytes(t);
        T_CHECK(want && t->nbytes == want, "%s: %llu bytes, ggml block sizes give %llu", t->name,
                (unsigned long long)t->nbytes, (unsigned long long)want);
        *total += want;
        if (strstr(t->name, "_exps")) *experts += want;
        if (i > 0 && ts[i - 1]->file != t->file) end = 0;
        T_CHECK(t->offset % al == 0 && t->offset >= end, "%s: offset %llu unaligned or overlapping (previous end %llu)",
                t->name, (unsigned long long)t->offset, (unsigned long long)end);
        end = t->offset + t->nbytes;
        const gguf_part *p = &g->parts[t->file];
        T_CHECK(p->data_off % al == 0 && t->file_off == p->data_off + t->offset, "%s: file offset", t->name);
        bool last = i + 1 == g->n_tensors || ts[i + 1]->file != t->file;
        if (last) {
            struct stat st;
            T_CHECK(stat(p->path, &st) == 0, "%s: stat", p->path);
            uint64_t padded = p->data_off + (end + al - 1) / al * al;
            T_CHECK((uint64_t)st.st_size == padded || (uint64_t)st.st_size == p->data_off + end,
                    "%s: %lld bytes, tensor data ends at %llu", p->path, (long long)st.st_size,
                    (unsigned long long)padded);
        }
    }
    free(ts);
}

static void check_model(const char *path)
{
    char name[512];
    snprintf(name, sizeof name, "gguf open + summary %s", path);
    t_begin(name);
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, path, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    struct stat st = {0};
    T_CHECK(g->n_tensors > 0 || (stat(path, &st) == 0 && (uint64_t)st.st_size <= g->parts[0].data_off),
            "no tensors, yet %llu bytes after the header", (unsigned long long)(st.st_size - g->parts[0].data_off));
    model_summary s;
    T_CHECK(model_summary_build(&s, g, &err) == 0, "%s", err.msg);
    uint64_t total = 0, experts = 0;
    check_layout(g, &total, &experts);
    T_CHECK(s.total_bytes == total, "total %llu, block sizes give %llu", (unsigned long long)s.total_bytes,
            (unsigned long long)total);
    T_CHECK(s.expert_bytes == experts && s.spine_bytes == total - experts, "spine %llu + experts %llu, want %llu + %llu",
            (unsigned long long)s.spine_bytes, (unsigned long long)s.expert_bytes,
            (unsigned long long)(total - experts), (unsigned long long)experts);
    model_summary_free(&s);
    gguf_close(g);
    t_end();
}

static void bundled_tinymoe(void)
{
    t_begin("gguf bundled tinymoe metadata");
    sl_err err;
    gguf_file *g;
    if (gguf_open(&g, "models/tinymoe-q8_0.gguf", &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    uint32_t u = 0;
    T_CHECK(gguf_get_u32(g, "qwen3moe.block_count", &u, &err) == 1 && u == 6, "block_count %u", u);
    T_CHECK(gguf_get_u32(g, "qwen3moe.expert_count", &u, &err) == 1 && u == 32, "expert_count %u", u);
    float f = 0;
    T_CHECK(gguf_get_f32(g, "qwen3moe.rope.freq_base", &f, &err) == 1 && f == 1e6f, "freq_base %g", f);
    const gguf_str *s = NULL;
    T_CHECK(gguf_get_str(g, "tokenizer.ggml.pre", &s, &err) == 1 && !strcmp(s->s, "gpt-2"), "pre");
    const void *data;
    uint64_t n = 0;
    T_CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING, &data, &n, &err) == 1 && n == 50257,
            "tokens %llu", (unsigned long long)n);
    T_CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_INT32, &data, &n, &err) == -1 &&
                strstr(err.msg, "array of string"), "wrong array type must fail: %s", err.msg);
    T_CHECK(gguf_get_u32(g, "no.such.key", &u, &err) == 0, "absent key");
    const gguf_tensor *t = gguf_find_tensor(g, "blk.5.ffn_down_exps.weight");
    T_CHECK(t && t->type == GGML_TYPE_Q8_0 && t->ne[0] == 192 && t->ne[1] == 256 && t->ne[2] == 32,
            "ffn_down_exps shape");
    T_CHECK(t && t->nbytes == 192 / 32 * 34 * 256 * 32ull, "ffn_down_exps bytes");
    /* the first row of token_embd read by range equals the start of a whole read */
    const gguf_tensor *e = gguf_find_tensor(g, "token_embd.weight");
    unsigned char a[68], b[34];
    T_CHECK(e && gguf_read_tensor(g, e, 0, a, 68, &err) == 0, "read");
    T_CHECK(e && gguf_read_tensor(g, e, 34, b, 34, &err) == 0 && !memcmp(a + 34, b, 34), "range read");
    T_CHECK(e && gguf_read_tensor(g, e, e->nbytes - 1, b, 2, &err) == -1, "read past tensor must fail");
    gguf_close(g);
    t_end();
}

static void scan_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char paths[64][512];
    int n = 0;
    while (d && (de = readdir(d)) && n < 64) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".gguf")) snprintf(paths[n++], 512, "%s/%s", dir, de->d_name);
    }
    if (d) closedir(d);
    if (n == 0) printf("not ok gguf %s: no models found\n", dir), t_nfail++;
    for (int i = 0; i < n; i++) check_model(paths[i]);
}

static void shared_dir(const char *rel)
{
    const char *dir = t_shared(rel);
    if (!dir) {
        t_skip(rel, "../shared not present");
        return;
    }
    scan_dir(dir);
}

int main(void)
{
    bundled_tinymoe();
    check_model("models/tinymoe-q8_0.gguf");
    check_model("models/tinydraft-f16.gguf");
    shared_dir("models");
    shared_dir("models/arch");
    shared_dir("vocab");
    scan_dir("tests/fixtures/lean/models");
    return t_done();
}
