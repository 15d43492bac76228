/* A split model (NAME-0000k-of-0000n.gguf, split.* keys, as llama.cpp's
 * gguf-split writes them) runs exactly like the single file: the bundled
 * model is split into three parts here with the GGUF writer, experts of one
 * layer straddling parts, and the logits are compared with memcmp, with the
 * experts in RAM and streamed from the parts. */
#include <errno.h>
#include <unistd.h>

#include "engine/engine.h"
#include "gguf/gguf_write.h"
#include "t.h"

enum { PARTS = 3, MANY = 400 };

static char dir[] = "/var/tmp/sluice-split-XXXXXX";

static int copy_tensor(gguf_writer *w, const gguf_file *g, const gguf_tensor *t, sl_err *err)
{
    void *buf = malloc(t->nbytes ? t->nbytes : 1);
    int rc = !buf ? sl_errf(err, "out of memory")
                  : gguf_read_tensor(g, t, 0, buf, t->nbytes, err) || gguf_w_write(w, buf, t->nbytes, err);
    free(buf);
    return rc ? -1 : 0;
}

/* Part P gets tensors [first, last) and, in part 0, every key of G. */
static int write_part_of(const gguf_file *g, int p, int parts, uint64_t first, uint64_t last, sl_err *err)
{
    char path[256];
    snprintf(path, sizeof path, "%s/m-%05d-of-%05d.gguf", dir, p + 1, parts);
    gguf_writer *w = gguf_w_new(NULL);
    int rc = 0;
    for (uint64_t i = 0; p == 0 && i < g->n_kv && !rc; i++) rc = gguf_w_kv(w, g->kv[i].key, &g->kv[i].v, err);
    uint16_t no = (uint16_t)p, count = (uint16_t)parts;
    gguf_value vno = {.type = GGUF_UINT16, .u = no}, vcount = {.type = GGUF_UINT16, .u = count};
    if (!rc) rc = gguf_w_kv(w, "split.no", &vno, err) || gguf_w_kv(w, "split.count", &vcount, err) ||
                  gguf_w_kv_i32(w, "split.tensors.count", (int32_t)g->n_tensors, err);
    for (uint64_t i = first; i < last && !rc; i++) {
        const gguf_tensor *t = &g->tensors[i];
        rc = gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, err) < 0;
    }
    if (!rc) rc = gguf_w_open(w, path, err);
    for (uint64_t i = first; i < last && !rc; i++) rc = copy_tensor(w, g, &g->tensors[i], err);
    if (!rc) rc = gguf_w_close(w, err);
    gguf_w_free(w);
    return rc ? -1 : 0;
}

static int write_part(const gguf_file *g, int p, uint64_t first, uint64_t last, sl_err *err)
{
    return write_part_of(g, p, PARTS, first, last, err);
}

/* MANY parts, the tensors one per part in the last ones (all past part
 * 256: a file index the store once kept in 8 bits). */
static int make_many(sl_err *err)
{
    gguf_file *g;
    if (gguf_open(&g, "models/tinymoe-q8_0.gguf", err)) return -1;
    int rc = 0, empty = MANY - (int)g->n_tensors;
    for (int p = 0; p < MANY && !rc; p++) {
        uint64_t t = p < empty ? 0 : (uint64_t)(p - empty);
        rc = write_part_of(g, p, MANY, t, p < empty ? 0 : t + 1, err);
    }
    gguf_close(g);
    return rc;
}

static void remove_parts(int parts)
{
    for (int p = 0; p < parts; p++) {
        char path[300];
        snprintf(path, sizeof path, "%s/m-%05d-of-%05d.gguf", dir, p + 1, parts);
        unlink(path);
    }
}

static int make_split(sl_err *err)
{
    gguf_file *g;
    if (!mkdtemp(dir) || gguf_open(&g, "models/tinymoe-q8_0.gguf", err)) return -1;
    int rc = 0;
    for (int p = 0; p < PARTS && !rc; p++)
        rc = write_part(g, p, g->n_tensors * (uint64_t)p / PARTS, g->n_tensors * (uint64_t)(p + 1) / PARTS, err);
    gguf_close(g);
    return rc;
}

static const int32_t PROMPT[] = {464, 1468, 582, 3114, 379, 262, 5417, 290, 531};

/* Logits of every prompt position and of 8 greedy steps after it. */
static int run(const char *path, uint64_t mem, float **out, size_t *n, sl_err *err)
{
    sl_engine e;
    engine_opts o = {.model_path = path, .n_ctx = 64, .threads = 2, .mem = mem, .no_heat = true};
    if (engine_open(&e, &o, err)) return -1;
    int32_t nv = model_n_vocab(e.model), np = (int32_t)(sizeof PROMPT / sizeof *PROMPT);
    *n = (size_t)(np + 8) * (size_t)nv;
    *out = malloc(*n * sizeof **out);
    int rc = session_eval(e.session, PROMPT, np, *out, true, err);
    for (int s = 0; s < 8 && !rc; s++) {
        const float *last = *out + (size_t)(np + s - 1) * (size_t)nv;
        int32_t best = 0;
        for (int32_t v = 1; v < nv; v++) best = last[v] > last[best] ? v : best;
        rc = session_eval(e.session, &best, 1, *out + (size_t)(np + s) * (size_t)nv, false, err);
    }
    engine_close(&e);
    return rc;
}

/* Fails the first expert read, remembering which file it came from. */
static int fail_first(void *ctx, uint32_t file, uint64_t off, uint32_t len)
{
    (void)off, (void)len;
    int64_t *seen = ctx;
    if (*seen >= 0) return 0;
    *seen = file;
    return -EIO;
}

/* A read failing in part 300-odd names that part (and the store hands its
 * completion the right file, not the index modulo 256). */
static void many_parts(const float *ref, size_t n)
{
    sl_err err;
    t_begin("split model: 400 parts, a failed read in part > 256 names that part");
    int made = make_many(&err) == 0;
    T_CHECK(made, "%s", err.msg);
    char first[300];
    snprintf(first, sizeof first, "%s/m-00001-of-%05d.gguf", dir, MANY);
    gguf_file *g = NULL;
    T_CHECK(made && gguf_open(&g, first, &err) == 0, "%s", err.msg);
    T_CHECK(!g || g->n_parts == MANY, "%u parts", g ? g->n_parts : 0);
    float *got;
    size_t m;
    int rc = made ? run(first, 64ull << 20, &got, &m, &err) : -1;
    T_CHECK(rc == 0, "%s", err.msg);
    T_CHECK(rc || (m == n && !memcmp(ref, got, n * sizeof *ref)), "logits differ from the single file");
    if (!rc) free(got);
    int64_t seen = -1;
    sl_engine e;
    engine_opts o = {.model_path = first, .n_ctx = 64, .threads = 2, .mem = 64ull << 20, .no_heat = true,
                     .fault = fail_first, .fault_ctx = &seen, .prefetch = SL_PREFETCH_OFF, .prefetch_set = true};
    rc = made ? engine_open(&e, &o, &err) : -1;
    if (rc == 0) {
        int32_t np = (int32_t)(sizeof PROMPT / sizeof *PROMPT);
        float *lg = malloc((size_t)model_n_vocab(e.model) * sizeof *lg);
        rc = session_eval(e.session, PROMPT, np, lg, false, &err);
        free(lg);
        engine_close(&e);
        T_CHECK(rc != 0, "the failed read went unnoticed");
        T_CHECK(seen >= 256 && g && seen < (int64_t)g->n_parts, "the hook saw file %lld", (long long)seen);
        T_CHECK(seen < 0 || !g || strstr(err.msg, g->parts[seen].path), "error names another file: %s", err.msg);
    } else {
        T_CHECK(0, "%s", err.msg);
    }
    gguf_close(g);
    remove_parts(MANY);
    t_end();
}

int main(void)
{
    sl_err err;
    t_begin("split model: three parts open as one");
    char first[300];
    int made = make_split(&err) == 0;
    T_CHECK(made, "%s", err.msg);
    snprintf(first, sizeof first, "%s/m-00001-of-%05d.gguf", dir, PARTS);
    gguf_file *g = NULL;
    T_CHECK(made && gguf_open(&g, first, &err) == 0, "%s", err.msg);
    T_CHECK(g && g->n_parts == PARTS, "parts");
    gguf_close(g);
    t_end();

    float *ref, *got;
    size_t n, m;
    if (!made || run("models/tinymoe-q8_0.gguf", 0, &ref, &n, &err)) return t_done();
    const struct {
        const char *name;
        uint64_t mem;
    } cases[] = {{"split model: logits = single file, experts in RAM", 0},
                 {"split model: logits = single file, experts streamed from the parts", 64ull << 20}};
    for (int c = 0; c < 2; c++) {
        t_begin(cases[c].name);
        int rc = run(first, cases[c].mem, &got, &m, &err);
        T_CHECK(rc == 0, "%s", err.msg);
        T_CHECK(rc || (m == n && !memcmp(ref, got, n * sizeof *ref)), "logits differ");
        if (!rc) free(got);
        t_end();
    }
    many_parts(ref, n);
    free(ref);
    remove_parts(PARTS);
    rmdir(dir);
    return t_done();
}
