/* GGUF writer: round trips through the reader (every value type, nested
 * arrays, strings with NULs, tensors of several types and odd shapes, their
 * data), streaming in small pieces through both write paths, and the
 * error cases.  The reader is the reference: it was tested on real files. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "t.h"

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char p[4][512];
    static int slot;
    char *s = p[slot++ & 3];
    snprintf(s, sizeof p[0], "%s/%s", tmpdir, name);
    return s;
}

/* ---- a file with every kind of value ---- */

static const char NUL_STR[] = "a\0b\0\0c";
#define NUL_LEN 6

typedef struct {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
} tdesc;

static const tdesc TENSORS[] = {
    {"f32.vec", GGML_TYPE_F32, 1, {7, 1, 1, 1}},
    {"f16.odd", GGML_TYPE_F16, 3, {3, 5, 7, 1}},
    {"q8_0.mat", GGML_TYPE_Q8_0, 2, {96, 3, 1, 1}},
    {"q4_k.experts", GGML_TYPE_Q4_K, 3, {256, 2, 3, 1}},
    {"q6_k.4d", GGML_TYPE_Q6_K, 4, {512, 1, 2, 1}},
    {"q4_0.row", GGML_TYPE_Q4_0, 1, {32, 1, 1, 1}},
    {"i32.one", GGML_TYPE_I32, 1, {1, 1, 1, 1}},
};
#define N_TENSORS (sizeof TENSORS / sizeof TENSORS[0])

static uint8_t data_byte(uint64_t tensor, uint64_t i) { return (uint8_t)(tensor * 131 + i * 7 + (i >> 8)); }

static int add_all_kvs(gguf_writer *w, sl_err *err)
{
    int rc = 0;
    gguf_value v = {0};
    v.type = GGUF_UINT8, v.u = 200;
    rc |= gguf_w_kv(w, "t.u8", &v, err);
    v.type = GGUF_INT8, v.i = -100;
    rc |= gguf_w_kv(w, "t.i8", &v, err);
    v.type = GGUF_UINT16, v.u = 65000;
    rc |= gguf_w_kv(w, "t.u16", &v, err);
    v.type = GGUF_INT16, v.i = -32000;
    rc |= gguf_w_kv(w, "t.i16", &v, err);
    rc |= gguf_w_kv_u32(w, "t.u32", 4000000000u, err);
    rc |= gguf_w_kv_i32(w, "t.i32", -2000000000, err);
    rc |= gguf_w_kv_f32(w, "t.f32", 0.1f, err);
    rc |= gguf_w_kv_bool(w, "t.bool", true, err);
    rc |= gguf_w_kv_str(w, "t.str", "hello", err);
    rc |= gguf_w_kv_str_n(w, "t.str_nul", NUL_STR, NUL_LEN, err);
    rc |= gguf_w_kv_str(w, "t.str_empty", "", err);
    rc |= gguf_w_kv_u64(w, "t.u64", UINT64_MAX - 5, err);
    v.type = GGUF_INT64, v.i = INT64_MIN + 3;
    rc |= gguf_w_kv(w, "t.i64", &v, err);
    v.type = GGUF_FLOAT64, v.f = 1.0 / 3.0;
    rc |= gguf_w_kv(w, "t.f64", &v, err);

    int32_t ints[5] = {1, -2, 3, -4, 5};
    rc |= gguf_w_kv_arr(w, "t.arr_i32", GGUF_INT32, ints, 5, err);
    float fl[3] = {1.5f, -0.0f, INFINITY};
    rc |= gguf_w_kv_arr(w, "t.arr_f32", GGUF_FLOAT32, fl, 3, err);
    rc |= gguf_w_kv_arr(w, "t.arr_empty", GGUF_UINT8, NULL, 0, err);
    gguf_str strs[3] = {{"x", 1}, {(char *)NUL_STR, NUL_LEN}, {"", 0}};
    rc |= gguf_w_kv_arr(w, "t.arr_str", GGUF_STRING, strs, 3, err);

    /* [[u16 x2], [string x1], [[bool x1]]] */
    uint16_t u16s[2] = {7, 65535};
    uint8_t bools[1] = {1};
    gguf_value inner_b = {.type = GGUF_ARRAY, .arr = {GGUF_BOOL, 1, bools}};
    gguf_value elems[3] = {
        {.type = GGUF_ARRAY, .arr = {GGUF_UINT16, 2, u16s}},
        {.type = GGUF_ARRAY, .arr = {GGUF_STRING, 1, strs}},
        {.type = GGUF_ARRAY, .arr = {GGUF_ARRAY, 1, &inner_b}},
    };
    gguf_value nested = {.type = GGUF_ARRAY, .arr = {GGUF_ARRAY, 3, elems}};
    rc |= gguf_w_kv(w, "t.nested", &nested, err);
    return rc ? -1 : 0;
}

static void check_kvs(const gguf_file *g)
{
    sl_err err;
    const gguf_kv *kv;
    kv = gguf_find(g, "t.u8");
    T_CHECK(kv && kv->v.type == GGUF_UINT8 && kv->v.u == 200, "u8");
    kv = gguf_find(g, "t.i8");
    T_CHECK(kv && kv->v.type == GGUF_INT8 && kv->v.i == -100, "i8");
    kv = gguf_find(g, "t.u16");
    T_CHECK(kv && kv->v.type == GGUF_UINT16 && kv->v.u == 65000, "u16");
    kv = gguf_find(g, "t.i16");
    T_CHECK(kv && kv->v.type == GGUF_INT16 && kv->v.i == -32000, "i16");
    kv = gguf_find(g, "t.u32");
    T_CHECK(kv && kv->v.type == GGUF_UINT32 && kv->v.u == 4000000000u, "u32");
    kv = gguf_find(g, "t.i32");
    T_CHECK(kv && kv->v.type == GGUF_INT32 && kv->v.i == -2000000000, "i32");
    kv = gguf_find(g, "t.f32");
    T_CHECK(kv && kv->v.type == GGUF_FLOAT32 && (float)kv->v.f == 0.1f, "f32");
    kv = gguf_find(g, "t.bool");
    T_CHECK(kv && kv->v.type == GGUF_BOOL && kv->v.u == 1, "bool");
    const gguf_str *s = NULL;
    T_CHECK(gguf_get_str(g, "t.str", &s, &err) == 1 && s->len == 5 && !strcmp(s->s, "hello"), "str");
    T_CHECK(gguf_get_str(g, "t.str_nul", &s, &err) == 1 && s->len == NUL_LEN && !memcmp(s->s, NUL_STR, NUL_LEN),
            "str with NULs");
    T_CHECK(gguf_get_str(g, "t.str_empty", &s, &err) == 1 && s->len == 0, "empty str");
    kv = gguf_find(g, "t.u64");
    T_CHECK(kv && kv->v.type == GGUF_UINT64 && kv->v.u == UINT64_MAX - 5, "u64");
    kv = gguf_find(g, "t.i64");
    T_CHECK(kv && kv->v.type == GGUF_INT64 && kv->v.i == INT64_MIN + 3, "i64");
    kv = gguf_find(g, "t.f64");
    T_CHECK(kv && kv->v.type == GGUF_FLOAT64 && kv->v.f == 1.0 / 3.0, "f64");

    const void *d;
    uint64_t n;
    T_CHECK(gguf_get_arr(g, "t.arr_i32", GGUF_INT32, &d, &n, &err) == 1 && n == 5 &&
                ((const int32_t *)d)[1] == -2 && ((const int32_t *)d)[4] == 5, "arr i32");
    T_CHECK(gguf_get_arr(g, "t.arr_f32", GGUF_FLOAT32, &d, &n, &err) == 1 && n == 3 &&
                ((const float *)d)[0] == 1.5f && signbit(((const float *)d)[1]) && isinf(((const float *)d)[2]),
            "arr f32");
    T_CHECK(gguf_get_arr(g, "t.arr_empty", GGUF_UINT8, &d, &n, &err) == 1 && n == 0, "empty arr");
    T_CHECK(gguf_get_arr(g, "t.arr_str", GGUF_STRING, &d, &n, &err) == 1 && n == 3, "arr str");
    if (n == 3) {
        const gguf_str *a = d;
        T_CHECK(a[0].len == 1 && a[0].s[0] == 'x', "arr str 0");
        T_CHECK(a[1].len == NUL_LEN && !memcmp(a[1].s, NUL_STR, NUL_LEN), "arr str NULs");
        T_CHECK(a[2].len == 0, "arr str empty");
    }
    kv = gguf_find(g, "t.nested");
    T_CHECK(kv && kv->v.type == GGUF_ARRAY && kv->v.arr.type == GGUF_ARRAY && kv->v.arr.n == 3, "nested outer");
    if (kv && kv->v.arr.n == 3 && kv->v.arr.type == GGUF_ARRAY) {
        const gguf_value *e = kv->v.arr.data;
        T_CHECK(e[0].arr.type == GGUF_UINT16 && e[0].arr.n == 2 && gguf_arr_scalar(&e[0], 1).u == 65535, "nested u16");
        T_CHECK(e[1].arr.type == GGUF_STRING && e[1].arr.n == 1 && ((gguf_str *)e[1].arr.data)[0].s[0] == 'x',
                "nested str");
        T_CHECK(e[2].arr.type == GGUF_ARRAY && e[2].arr.n == 1, "nested 3 deep");
        if (e[2].arr.type == GGUF_ARRAY && e[2].arr.n == 1) {
            const gguf_value *b = e[2].arr.data;
            T_CHECK(b->arr.type == GGUF_BOOL && b->arr.n == 1 && gguf_arr_scalar(b, 0).u == 1, "nested bool");
        }
    }
}

static void check_tensors(const gguf_file *g, uint32_t alignment)
{
    sl_err err;
    T_CHECK(g->n_tensors == N_TENSORS, "tensor count %llu", (unsigned long long)g->n_tensors);
    for (size_t i = 0; i < N_TENSORS; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, TENSORS[i].name);
        T_CHECK(t != NULL, "tensor %s missing", TENSORS[i].name);
        if (!t) continue;
        T_CHECK(t->type == TENSORS[i].type && t->n_dims == TENSORS[i].n_dims, "%s type/dims", t->name);
        for (int d = 0; d < 4; d++) T_CHECK(t->ne[d] == TENSORS[i].ne[d], "%s ne[%d]", t->name, d);
        T_CHECK(t->file_off % alignment == 0, "%s alignment", t->name);
        uint8_t *buf = malloc(t->nbytes);
        T_CHECK(buf && gguf_read_tensor(g, t, 0, buf, t->nbytes, &err) == 0, "%s read", t->name);
        uint64_t bad = 0;
        for (uint64_t k = 0; buf && k < t->nbytes; k++) bad += buf[k] != data_byte(i, k);
        T_CHECK(bad == 0, "%s: %llu data bytes differ", t->name, (unsigned long long)bad);
        free(buf);
    }
}

/* Writes the data of every tensor in pieces of CHUNK bytes. */
static int write_data(gguf_writer *w, size_t chunk, sl_err *err)
{
    uint8_t *buf = malloc(chunk);
    int rc = buf ? 0 : -1;
    for (size_t i = 0; i < N_TENSORS && !rc; i++) {
        const tdesc *d = &TENSORS[i];
        uint64_t nb = ggml_row_bytes(d->type, (uint64_t)d->ne[0]) * (uint64_t)(d->ne[1] * d->ne[2] * d->ne[3]);
        for (uint64_t k = 0; k < nb && !rc; k += chunk) {
            size_t take = nb - k < chunk ? (size_t)(nb - k) : chunk;
            for (size_t j = 0; j < take; j++) buf[j] = data_byte(i, k + j);
            rc = gguf_w_write(w, buf, take, err);
        }
    }
    free(buf);
    return rc;
}

static void round_trip(const char *label, gguf_w_opts o, size_t chunk)
{
    t_begin(label);
    sl_err err = {{0}};
    const char *path = tmp_path("rt.gguf");
    gguf_writer *w = gguf_w_new(&o);
    T_CHECK(w && add_all_kvs(w, &err) == 0, "kvs: %s", err.msg);
    for (size_t i = 0; w && i < N_TENSORS; i++)
        T_CHECK(gguf_w_tensor(w, TENSORS[i].name, TENSORS[i].type, TENSORS[i].n_dims, TENSORS[i].ne, &err) == (int)i,
                "tensor %zu: %s", i, err.msg);
    uint64_t want_size = w ? gguf_w_file_size(w) : 0;
    T_CHECK(w && gguf_w_open(w, path, &err) == 0, "open: %s", err.msg);
    T_CHECK(w && write_data(w, chunk, &err) == 0, "data: %s", err.msg);
    T_CHECK(w && gguf_w_close(w, &err) == 0, "close: %s", err.msg);
    gguf_w_free(w);
    struct stat st;
    T_CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == want_size, "file size %lld, planned %llu",
            (long long)st.st_size, (unsigned long long)want_size);
    gguf_file *g = NULL;
    if (gguf_open(&g, path, &err)) {
        T_CHECK(0, "reopen: %s", err.msg);
    } else {
        uint32_t align = o.alignment ? o.alignment : 32;
        T_CHECK(g->version == (o.version ? o.version : 3), "version %u", g->version);
        T_CHECK(g->alignment == align, "alignment %u", g->alignment);
        T_CHECK(g->n_kv == 19 + (align != 32), "kv count %llu", (unsigned long long)g->n_kv);
        check_kvs(g);
        check_tensors(g, align);
        gguf_close(g);
    }
    unlink(path);
    t_end();
}

/* ---- errors ---- */

static void errors(void)
{
    t_begin("gguf writer rejects bad input");
    sl_err err = {{0}};
    gguf_writer *w = gguf_w_new(NULL);
    int64_t ne[2] = {100, 2};
    T_CHECK(gguf_w_kv_u32(w, "k", 1, &err) == 0, "first key");
    T_CHECK(gguf_w_kv_u32(w, "k", 2, &err) == -1 && strstr(err.msg, "duplicate"), "duplicate key: %s", err.msg);
    gguf_value bad = {.type = GGUF_NTYPES};
    T_CHECK(gguf_w_kv(w, "bad", &bad, &err) == -1, "unknown value type");
    gguf_value elems[1] = {{.type = GGUF_UINT8, .u = 1}};
    gguf_value nested = {.type = GGUF_ARRAY, .arr = {GGUF_ARRAY, 1, elems}};
    T_CHECK(gguf_w_kv(w, "bad2", &nested, &err) == -1, "array of arrays holding a scalar");
    T_CHECK(gguf_w_n_kv(w) == 1, "failed adds leave no key (%llu)", (unsigned long long)gguf_w_n_kv(w));
    T_CHECK(gguf_w_tensor(w, "q", GGML_TYPE_Q4_K, 2, ne, &err) == -1 && strstr(err.msg, "block size"),
            "row not a block multiple: %s", err.msg);
    T_CHECK(gguf_w_tensor(w, "q", 4, 2, ne, &err) == -1 && strstr(err.msg, "unknown"), "removed type 4");
    T_CHECK(gguf_w_tensor(w, "q", GGML_TYPE_F32, 5, ne, &err) == -1, "5 dims");
    T_CHECK(gguf_w_tensor(w, "a", GGML_TYPE_F32, 2, ne, &err) == 0, "tensor a");
    T_CHECK(gguf_w_tensor(w, "a", GGML_TYPE_F32, 2, ne, &err) == -1 && strstr(err.msg, "duplicate"), "dup tensor");
    T_CHECK(gguf_w_tensor(w, "b", GGML_TYPE_F16, 1, ne, &err) == 1, "tensor b");
    const char *path = tmp_path("err.gguf");
    T_CHECK(gguf_w_open(w, path, &err) == 0, "open: %s", err.msg);
    T_CHECK(gguf_w_kv_u32(w, "late", 1, &err) == -1, "key after open");
    float f[200] = {0};
    T_CHECK(gguf_w_write(w, f, 800, &err) == 0, "a's data");
    T_CHECK(gguf_w_write(w, f, 100, &err) == 0, "half of b");
    T_CHECK(gguf_w_close(w, &err) == -1 && strstr(err.msg, "'b'") && strstr(err.msg, "100 of its 200"),
            "incomplete data: %s", err.msg);
    gguf_w_free(w);
    gguf_file *g;
    T_CHECK(gguf_open(&g, path, &err) == -1, "the incomplete file must not open");

    w = gguf_w_new(NULL);
    T_CHECK(gguf_w_tensor(w, "a", GGML_TYPE_F32, 1, ne, &err) == 0, "tensor");
    T_CHECK(gguf_w_open(w, path, &err) == 0, "open");
    T_CHECK(gguf_w_write(w, f, 404, &err) == -1 && strstr(err.msg, "beyond"), "too much data: %s", err.msg);
    gguf_w_free(w);
    unlink(path);
    T_CHECK(gguf_w_open(w = gguf_w_new(NULL), "/nonexistent-dir/x.gguf", &err) == -1 &&
                strstr(err.msg, "nonexistent"), "bad path: %s", err.msg);
    gguf_w_free(w);
    t_end();
}

/* ---- damaged files: the reader must refuse each with a precise message ---- */

static void damaged(void)
{
    t_begin("gguf writer builds damaged files the reader rejects");
    sl_err err = {{0}};
    const char *path = tmp_path("bad.gguf");
    gguf_file *g;
    uint64_t ne[2] = {32, 2};
    uint8_t zeros[4096] = {0};

    /* tensor data offset past the end of the file */
    gguf_writer *w = gguf_w_new(NULL);
    gguf_w_tensor_raw(w, "t", 1, 2, ne, GGML_TYPE_F32, 1u << 20, &err);
    T_CHECK(gguf_w_open(w, path, &err) == 0 && gguf_w_write_raw(w, zeros, 300, &err) == 0 &&
                gguf_w_close(w, &err) == 0, "write: %s", err.msg);
    gguf_w_free(w);
    T_CHECK(gguf_open(&g, path, &err) == -1 && strstr(err.msg, "past the end"), "offset past end: %s", err.msg);

    /* misaligned offset */
    w = gguf_w_new(NULL);
    gguf_w_tensor_raw(w, "t", 1, 2, ne, GGML_TYPE_F32, 4, &err);
    gguf_w_open(w, path, &err);
    gguf_w_write_raw(w, zeros, sizeof zeros, &err);
    gguf_w_close(w, &err);
    gguf_w_free(w);
    T_CHECK(gguf_open(&g, path, &err) == -1 && strstr(err.msg, "alignment"), "misaligned: %s", err.msg);

    /* unknown type id, and a count that lies */
    w = gguf_w_new(NULL);
    gguf_w_tensor_raw(w, "t", 1, 2, ne, 99, 0, &err);
    gguf_w_open(w, path, &err);
    gguf_w_write_raw(w, zeros, sizeof zeros, &err);
    gguf_w_close(w, &err);
    gguf_w_free(w);
    T_CHECK(gguf_open(&g, path, &err) == -1 && strstr(err.msg, "unknown ggml type 99"), "type 99: %s", err.msg);

    w = gguf_w_new(NULL);
    gguf_w_kv_u32(w, "a", 1, &err);
    gguf_w_override_header(w, NULL, 3, 0, 1000000);
    gguf_w_open(w, path, &err);
    gguf_w_close(w, &err);
    gguf_w_free(w);
    T_CHECK(gguf_open(&g, path, &err) == -1 && strstr(err.msg, "key count"), "kv count lie: %s", err.msg);

    /* string length running past the end of the file */
    w = gguf_w_new(NULL);
    uint64_t huge = 1ull << 40;
    gguf_w_kv_raw(w, "s", 1, GGUF_STRING, &huge, 8, &err);
    gguf_w_open(w, path, &err);
    gguf_w_close(w, &err);
    gguf_w_free(w);
    T_CHECK(gguf_open(&g, path, &err) == -1 && strstr(err.msg, "string length"), "string length: %s", err.msg);

    /* bad magic */
    w = gguf_w_new(NULL);
    gguf_w_override_header(w, "GGUX", 3, 0, 0);
    gguf_w_open(w, path, &err);
    gguf_w_close(w, &err);
    gguf_w_free(w);
    T_CHECK(gguf_open(&g, path, &err) == -1 && strstr(err.msg, "magic"), "magic: %s", err.msg);
    unlink(path);
    t_end();
}

int main(void)
{
    (void)t_skip, (void)t_shared; /* harness helpers this file has no use for */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-test-gguf-write-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    round_trip("gguf writer round trip (defaults, one write per 4 KiB)", (gguf_w_opts){0}, 4096);
    round_trip("gguf writer round trip (v2, alignment 64, 1-byte writes, tiny buffer)",
               (gguf_w_opts){.version = 2, .alignment = 64, .buf_bytes = 100}, 1);
    round_trip("gguf writer round trip (background thread, drop_cache, sync, 333-byte buffer)",
               (gguf_w_opts){.background = true, .drop_cache = true, .sync = true, .buf_bytes = 333}, 77);
    round_trip("gguf writer round trip (O_DIRECT, background, 5000-byte buffer)",
               (gguf_w_opts){.direct = true, .background = true, .sync = true, .buf_bytes = 5000}, 999);
    errors();
    damaged();
    rmdir(tmpdir);
    return t_done();
}
