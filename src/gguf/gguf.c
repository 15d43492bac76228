/* GGUF parsing.  The file is untrusted: the cursor below refuses any read
 * that would pass the end of the file, and every count is bounded by the
 * bytes left before memory is allocated for it (an element needs at least
 * its minimum encoded size), so a hostile header cannot cause a huge
 * allocation, an overflow or a hang. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "util/fileio.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NESTING 4
#define GGUF_MAX_NAME 1024
#define RD_BUF (1u << 20)

/* ---- name index: open addressing over xxh3, so duplicate checks stay
 * linear even for files with millions of (hostile) entries ---- */

typedef struct gguf_index {
    uint64_t cap;
    int64_t *slot; /* entry index or -1 */
} gguf_index;

static gguf_index *index_new(uint64_t n)
{
    gguf_index *ix = calloc(1, sizeof *ix);
    if (!ix) return NULL;
    ix->cap = 16;
    while (ix->cap < n * 2) ix->cap <<= 1;
    ix->slot = malloc(ix->cap * sizeof *ix->slot);
    if (!ix->slot) {
        free(ix);
        return NULL;
    }
    memset(ix->slot, 0xff, ix->cap * sizeof *ix->slot);
    return ix;
}

static void index_free(gguf_index *ix)
{
    if (ix) free(ix->slot);
    free(ix);
}

/* Returns the existing entry with NAME, or inserts ID and returns -1. */
static int64_t index_put(gguf_index *ix, const char *name, int64_t id,
                         const char *(*name_of)(const void *, int64_t), const void *ctx)
{
    uint64_t h = XXH3_64bits(name, strlen(name)) & (ix->cap - 1);
    for (;; h = (h + 1) & (ix->cap - 1)) {
        int64_t s = ix->slot[h];
        if (s < 0) {
            ix->slot[h] = id;
            return -1;
        }
        if (strcmp(name_of(ctx, s), name) == 0) return s;
    }
}

static int64_t index_get(const gguf_index *ix, const char *name,
                         const char *(*name_of)(const void *, int64_t), const void *ctx)
{
    if (!ix) return -1;
    uint64_t h = XXH3_64bits(name, strlen(name)) & (ix->cap - 1);
    for (;; h = (h + 1) & (ix->cap - 1)) {
        int64_t s = ix->slot[h];
        if (s < 0) return -1;
        if (strcmp(name_of(ctx, s), name) == 0) return s;
    }
}

static const char *kv_name(const void *ctx, int64_t i) { return ((const gguf_kv *)ctx)[i].key; }
static const char *tensor_name(const void *ctx, int64_t i) { return ((const gguf_tensor *)ctx)[i].name; }

/* ---- bounded cursor ---- */

typedef struct {
    int fd;
    const char *path;
    uint64_t size, pos;
    uint8_t *buf;
    size_t buf_cap; /* RD_BUF, or the whole file when it is smaller */
    uint64_t buf_off;
    size_t buf_len;
    sl_err *err;
} cursor;

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

static int truncated(cursor *c, uint64_t need, const char *what)
{
    return sl_errf(c->err, "%s: truncated or corrupt at byte %llu: %s needs %llu bytes but only %llu remain",
                   c->path, (unsigned long long)c->pos, what, (unsigned long long)need,
                   (unsigned long long)remaining(c));
}

static int rd(cursor *c, void *dst, uint64_t n, const char *what)
{
    if (n > remaining(c)) return truncated(c, n, what);
    uint8_t *out = dst;
    while (n > 0) {
        if (c->pos >= c->buf_off && c->pos < c->buf_off + c->buf_len) {
            uint64_t have = c->buf_off + c->buf_len - c->pos;
            uint64_t take = have < n ? have : n;
            memcpy(out, c->buf + (c->pos - c->buf_off), take);
            out += take, c->pos += take, n -= take;
            continue;
        }
        if (n >= c->buf_cap) { /* large blocks bypass the buffer */
            if (sl_pread_full(c->fd, out, n, c->pos, c->path, c->err)) return -1;
            c->pos += n;
            return 0;
        }
        uint64_t want = remaining(c) < c->buf_cap ? remaining(c) : c->buf_cap;
        if (sl_pread_full(c->fd, c->buf, want, c->pos, c->path, c->err)) return -1;
        c->buf_off = c->pos;
        c->buf_len = want;
    }
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

static int rd_str(cursor *c, gguf_str *s, const char *what)
{
    uint64_t at = c->pos, len;
    if (rd_u64(c, &len, what)) return -1;
    if (len > remaining(c)) {
        c->pos = at;
        return sl_errf(c->err, "%s: corrupt %s at byte %llu: string length %llu exceeds the %llu bytes left in the file",
                       c->path, what, (unsigned long long)at, (unsigned long long)len,
                       (unsigned long long)(remaining(c) - 8));
    }
    s->s = malloc(len + 1);
    if (!s->s) return sl_errf(c->err, "%s: out of memory for %s", c->path, what);
    if (rd(c, s->s, len, what)) {
        free(s->s);
        s->s = NULL;
        return -1;
    }
    s->s[len] = 0;
    s->len = len;
    return 0;
}

/* ---- values ---- */

static const char *VTYPE_NAMES[GGUF_NTYPES] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};
static const uint8_t SCALAR_SIZE[GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_vtype_name(gguf_vtype t) { return t < GGUF_NTYPES ? VTYPE_NAMES[t] : "invalid"; }
uint32_t gguf_scalar_size(gguf_vtype t) { return t < GGUF_NTYPES ? SCALAR_SIZE[t] : 0; }

static void value_free(gguf_value *v)
{
    if (v->type == GGUF_STRING) {
        free(v->str.s);
    } else if (v->type == GGUF_ARRAY && v->arr.data) {
        if (v->arr.type == GGUF_STRING) {
            gguf_str *s = v->arr.data;
            for (uint64_t i = 0; i < v->arr.n; i++) free(s[i].s);
        } else if (v->arr.type == GGUF_ARRAY) {
            gguf_value *a = v->arr.data;
            for (uint64_t i = 0; i < v->arr.n; i++) value_free(&a[i]);
        }
        free(v->arr.data);
    }
    v->type = GGUF_UINT8;
}

static int scalar_from_bytes(gguf_value *v, gguf_vtype t, const uint8_t *b)
{
    v->type = t;
    switch (t) {
    case GGUF_UINT8: case GGUF_BOOL: v->u = b[0]; break;
    case GGUF_INT8: v->i = (int8_t)b[0]; break;
    case GGUF_UINT16: { uint16_t x; memcpy(&x, b, 2); v->u = x; break; }
    case GGUF_INT16: { int16_t x; memcpy(&x, b, 2); v->i = x; break; }
    case GGUF_UINT32: { uint32_t x; memcpy(&x, b, 4); v->u = x; break; }
    case GGUF_INT32: { int32_t x; memcpy(&x, b, 4); v->i = x; break; }
    case GGUF_FLOAT32: { float x; memcpy(&x, b, 4); v->f = x; break; }
    case GGUF_UINT64: memcpy(&v->u, b, 8); break;
    case GGUF_INT64: memcpy(&v->i, b, 8); break;
    case GGUF_FLOAT64: memcpy(&v->f, b, 8); break;
    default: return -1;
    }
    return 0;
}

static int read_value(cursor *c, gguf_value *v, gguf_vtype t, int depth, const char *what);

gguf_value gguf_arr_scalar(const gguf_value *arr, uint64_t i)
{
    gguf_value v = {0};
    gguf_vtype t = arr->arr.type;
    if (arr->type == GGUF_ARRAY && i < arr->arr.n && SCALAR_SIZE[t])
        scalar_from_bytes(&v, t, (const uint8_t *)arr->arr.data + i * SCALAR_SIZE[t]);
    return v;
}

static int read_array(cursor *c, gguf_value *v, int depth, const char *what)
{
    uint64_t at = c->pos;
    uint32_t et;
    uint64_t n;
    if (rd_u32(c, &et, what) || rd_u64(c, &n, what)) return -1;
    if (et >= GGUF_NTYPES)
        return sl_errf(c->err, "%s: corrupt %s at byte %llu: unknown array element type %u",
                       c->path, what, (unsigned long long)at, et);
    if (et == GGUF_ARRAY && depth >= GGUF_MAX_NESTING)
        return sl_errf(c->err, "%s: corrupt %s at byte %llu: arrays nested deeper than %d",
                       c->path, what, (unsigned long long)at, GGUF_MAX_NESTING);
    /* minimum encoded size of one element bounds n before allocating */
    uint64_t min = et == GGUF_STRING ? 8 : et == GGUF_ARRAY ? 12 : SCALAR_SIZE[et];
    if (n > remaining(c) / min)
        return sl_errf(c->err, "%s: corrupt %s at byte %llu: array of %llu %s elements cannot fit in the %llu bytes left",
                       c->path, what, (unsigned long long)at, (unsigned long long)n,
                       VTYPE_NAMES[et], (unsigned long long)remaining(c));
    v->type = GGUF_ARRAY;
    v->arr.type = (gguf_vtype)et;
    v->arr.n = 0;
    if (et != GGUF_STRING && et != GGUF_ARRAY) {
        v->arr.data = malloc(n * min + 1);
        if (!v->arr.data) return sl_errf(c->err, "%s: out of memory for %s", c->path, what);
        v->arr.n = n;
        return rd(c, v->arr.data, n * min, what);
    }
    size_t esz = et == GGUF_STRING ? sizeof(gguf_str) : sizeof(gguf_value);
    v->arr.data = calloc(n + 1, esz);
    if (!v->arr.data) return sl_errf(c->err, "%s: out of memory for %s", c->path, what);
    for (uint64_t i = 0; i < n; i++) {
        int rc = et == GGUF_STRING
                     ? rd_str(c, &((gguf_str *)v->arr.data)[i], what)
                     : read_value(c, &((gguf_value *)v->arr.data)[i], GGUF_ARRAY, depth + 1, what);
        v->arr.n = i + 1; /* so value_free releases what was read */
        if (rc) return sl_err_wrap(c->err, "element %llu", (unsigned long long)i);
    }
    return 0;
}

static int read_value(cursor *c, gguf_value *v, gguf_vtype t, int depth, const char *what)
{
    if (t == GGUF_STRING) {
        v->type = GGUF_STRING;
        return rd_str(c, &v->str, what);
    }
    if (t == GGUF_ARRAY) return read_array(c, v, depth, what);
    uint8_t b[8];
    if (rd(c, b, SCALAR_SIZE[t], what)) return -1;
    return scalar_from_bytes(v, t, b);
}

/* ---- one file ---- */

static void part_free_meta(gguf_file *g)
{
    for (uint64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        value_free(&g->kv[i].v);
    }
    free(g->kv);
    for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    index_free(g->kv_index);
    index_free(g->tensor_index);
    g->kv = NULL, g->tensors = NULL, g->kv_index = g->tensor_index = NULL;
    g->n_kv = g->n_tensors = 0;
}

static int read_header(cursor *c, gguf_file *g, uint64_t *n_tensors, uint64_t *n_kv)
{
    char magic[4];
    if (rd(c, magic, 4, "magic")) return -1;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return sl_errf(c->err, "%s: not a GGUF file (bad magic at byte 0)", c->path);
    if (rd_u32(c, &g->version, "version")) return -1;
    if (g->version == 1)
        return sl_errf(c->err, "%s: GGUF version 1 is not supported (byte 4); reconvert the model", c->path);
    if (g->version < 2 || g->version > 3)
        return sl_errf(c->err, "%s: unsupported GGUF version %u at byte 4 (sluice reads v2 and v3)",
                       c->path, g->version);
    if (rd_u64(c, n_tensors, "tensor count") || rd_u64(c, n_kv, "metadata key count")) return -1;
    if (*n_kv > remaining(c) / 13) /* key length + type + 1-byte value */
        return sl_errf(c->err, "%s: corrupt header: metadata key count %llu (byte 16) cannot fit in the file",
                       c->path, (unsigned long long)*n_kv);
    if (*n_tensors > remaining(c) / 28) /* name length + n_dims + 1 dim + type + offset */
        return sl_errf(c->err, "%s: corrupt header: tensor count %llu (byte 8) cannot fit in the file",
                       c->path, (unsigned long long)*n_tensors);
    return 0;
}

static int read_kvs(cursor *c, gguf_file *g, uint64_t n_kv)
{
    g->kv = calloc(n_kv + 1, sizeof *g->kv);
    g->kv_index = index_new(n_kv);
    if (!g->kv || !g->kv_index) return sl_errf(c->err, "%s: out of memory", c->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        kv->offset = c->pos;
        char what[64];
        snprintf(what, sizeof what, "key #%llu", (unsigned long long)i);
        gguf_str key = {0};
        if (rd_str(c, &key, what)) return -1;
        kv->key = key.s;
        g->n_kv = i + 1;
        if (strlen(key.s) != key.len)
            return sl_errf(c->err, "%s: corrupt key at byte %llu: embedded NUL", c->path,
                           (unsigned long long)kv->offset);
        if (index_put(g->kv_index, kv->key, (int64_t)i, kv_name, g->kv) >= 0)
            return sl_errf(c->err, "%s: duplicate metadata key '%s' at byte %llu", c->path, kv->key,
                           (unsigned long long)kv->offset);
        uint32_t t;
        uint64_t tat = c->pos;
        char vwhat[GGUF_MAX_NAME + 64];
        snprintf(vwhat, sizeof vwhat, "value of key '%.*s'", GGUF_MAX_NAME, kv->key);
        if (rd_u32(c, &t, vwhat)) return -1;
        if (t >= GGUF_NTYPES)
            return sl_errf(c->err, "%s: corrupt key '%s': unknown value type %u at byte %llu", c->path,
                           kv->key, t, (unsigned long long)tat);
        if (read_value(c, &kv->v, (gguf_vtype)t, 0, vwhat)) return -1;
    }
    return 0;
}

static int read_tensor_info(cursor *c, gguf_tensor *t, uint64_t i)
{
    uint64_t at = c->pos;
    char what[64];
    snprintf(what, sizeof what, "tensor info #%llu", (unsigned long long)i);
    gguf_str name = {0};
    if (rd_str(c, &name, what)) return -1;
    t->name = name.s;
    if (name.len == 0 || name.len >= GGUF_MAX_NAME || strlen(name.s) != name.len)
        return sl_errf(c->err, "%s: corrupt %s at byte %llu: bad tensor name", c->path, what,
                       (unsigned long long)at);
    if (rd_u32(c, &t->n_dims, t->name)) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return sl_errf(c->err, "%s: tensor '%s' (byte %llu): %u dimensions (must be 1..%d)", c->path,
                       t->name, (unsigned long long)at, t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (rd_u64(c, &ne, t->name)) return -1;
        if (ne > (uint64_t)INT64_MAX)
            return sl_errf(c->err, "%s: tensor '%s' (byte %llu): dimension %u is %llu", c->path, t->name,
                           (unsigned long long)at, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if (rd_u32(c, &t->type, t->name) || rd_u64(c, &t->offset, t->name)) return -1;
    const ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti)
        return sl_errf(c->err, "%s: tensor '%s' (byte %llu): unknown ggml type %u", c->path, t->name,
                       (unsigned long long)at, t->type);
    if (t->ne[0] % ti->blck_size)
        return sl_errf(c->err, "%s: tensor '%s': row length %lld is not a multiple of the %s block size %u",
                       c->path, t->name, (long long)t->ne[0], ti->name, ti->blck_size);
    /* element count and byte size must both fit; ggml requires the count in int64 */
    uint64_t elems = 1, bytes = (uint64_t)t->ne[0] / ti->blck_size;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = (uint64_t)t->ne[d];
        if ((ne && elems > (uint64_t)INT64_MAX / ne) || (d && ne && bytes > UINT64_MAX / ne))
            return sl_errf(c->err, "%s: tensor '%s' (byte %llu): size overflows (shape too large)", c->path,
                           t->name, (unsigned long long)at);
        elems *= ne;
        if (d) bytes *= ne;
    }
    if (bytes > UINT64_MAX / ti->type_size)
        return sl_errf(c->err, "%s: tensor '%s' (byte %llu): size overflows (shape too large)", c->path, t->name,
                       (unsigned long long)at);
    bytes *= ti->type_size;
    t->nbytes = bytes;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Data placement: aligned, inside the file, not overlapping. */
static int check_tensor_data(cursor *c, gguf_file *g, uint64_t data_off)
{
    gguf_tensor **sorted = malloc((g->n_tensors + 1) * sizeof *sorted);
    if (!sorted) return sl_errf(c->err, "%s: out of memory", c->path);
    int rc = 0;
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        gguf_tensor *t = &g->tensors[i];
        sorted[i] = t;
        if (t->offset % g->alignment)
            rc = sl_errf(c->err, "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
                         c->path, t->name, (unsigned long long)t->offset, g->alignment);
        else if (t->offset > c->size - data_off || t->nbytes > c->size - data_off - t->offset)
            rc = sl_errf(c->err, "%s: tensor '%s': data [%llu, +%llu) at file byte %llu runs past the end of the file (%llu bytes)",
                         c->path, t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                         (unsigned long long)(data_off + t->offset), (unsigned long long)c->size);
        t->file_off = data_off + t->offset;
    }
    if (!rc) qsort(sorted, g->n_tensors, sizeof *sorted, cmp_by_offset);
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++)
        if (sorted[i - 1]->offset + sorted[i - 1]->nbytes > sorted[i]->offset)
            rc = sl_errf(c->err, "%s: tensors '%s' and '%s' overlap at data offset %llu", c->path,
                         sorted[i - 1]->name, sorted[i]->name, (unsigned long long)sorted[i]->offset);
    free(sorted);
    return rc;
}

static int read_alignment(cursor *c, gguf_file *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(g, "general.alignment");
    if (!kv) return 0;
    if (kv->v.type != GGUF_UINT32 || kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)))
        return sl_errf(c->err, "%s: key 'general.alignment' (byte %llu) must be a power-of-two uint32",
                       c->path, (unsigned long long)kv->offset);
    g->alignment = (uint32_t)kv->v.u;
    return 0;
}

static int parse_part(gguf_file *g, const char *path, int fd, uint64_t *data_off, sl_err *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return sl_errf(err, "%s: cannot stat: %s", path, strerror(errno));
    cursor c = {.fd = fd, .path = path, .size = (uint64_t)st.st_size, .err = err};
    c.buf_cap = c.size < RD_BUF ? (size_t)c.size + 1 : RD_BUF;
    c.buf = malloc(c.buf_cap);
    if (!c.buf) return sl_errf(err, "%s: out of memory", path);
    uint64_t n_tensors, n_kv;
    int rc = read_header(&c, g, &n_tensors, &n_kv);
    if (!rc) rc = read_kvs(&c, g, n_kv);
    if (!rc) rc = read_alignment(&c, g);
    if (!rc) {
        g->tensors = calloc(n_tensors + 1, sizeof *g->tensors);
        g->tensor_index = index_new(n_tensors);
        if (!g->tensors || !g->tensor_index) rc = sl_errf(err, "%s: out of memory", path);
    }
    for (uint64_t i = 0; i < n_tensors && !rc; i++) {
        g->n_tensors = i + 1;
        rc = read_tensor_info(&c, &g->tensors[i], i);
        if (!rc && index_put(g->tensor_index, g->tensors[i].name, (int64_t)i, tensor_name, g->tensors) >= 0)
            rc = sl_errf(err, "%s: duplicate tensor name '%s' (tensor info #%llu)", path,
                         g->tensors[i].name, (unsigned long long)i);
    }
    if (!rc) {
        uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
        if (n_tensors > 0 && pad > remaining(&c))
            rc = truncated(&c, pad, "padding before tensor data");
        *data_off = c.pos + (n_tensors > 0 ? pad : 0);
    }
    if (!rc) rc = check_tensor_data(&c, g, *data_off);
    free(c.buf);
    return rc;
}

static int add_part(gguf_file *g, const char *path, sl_err *err, int *fd_out, uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sl_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sl_errf(err, "%s: not a regular file", path);
    }
    gguf_part *p = realloc(g->parts, (g->n_parts + 1) * sizeof *p);
    if (!p) {
        close(fd);
        return sl_errf(err, "%s: out of memory", path);
    }
    g->parts = p;
    char *name = strdup(path);
    if (!name) {
        close(fd);
        return sl_errf(err, "%s: out of memory", path);
    }
    p[g->n_parts] = (gguf_part){.path = name, .fd = fd, .size = (uint64_t)st.st_size};
    g->n_parts++;
    *fd_out = fd;
    *size = (uint64_t)st.st_size;
    return 0;
}

/* ---- split models: NAME-00001-of-0000N.gguf ---- */

static int split_prefix(const char *path, char *prefix, size_t cap)
{
    size_t n = strlen(path);
    const char *tail = "-00001-of-00000.gguf"; /* 20 chars; digits vary */
    size_t tl = strlen(tail);
    if (n <= tl || n - tl >= cap) return -1;
    const char *s = path + n - tl;
    if (strncmp(s, "-00001-of-", 10) != 0 || strcmp(s + 15, ".gguf") != 0) return -1;
    memcpy(prefix, path, n - tl);
    prefix[n - tl] = 0;
    return 0;
}

static int merge_split(gguf_file *g, uint32_t idx, const char *path, sl_err *err)
{
    gguf_file part = {0};
    int fd;
    uint64_t size, data_off;
    if (add_part(g, path, err, &fd, &size)) return -1;
    int rc = parse_part(&part, path, fd, &data_off, err);
    g->parts[idx].data_off = data_off;
    uint32_t no = UINT32_MAX;
    if (!rc && gguf_get_u32(&part, "split.no", &no, err) <= 0)
        rc = rc ? rc : sl_errf(err, "%s: split part has no 'split.no' key", path);
    if (!rc && no != idx) rc = sl_errf(err, "%s: split.no is %u, expected %u", path, no, idx);
    if (!rc) {
        gguf_tensor *grown = realloc(g->tensors, (g->n_tensors + part.n_tensors + 1) * sizeof *grown);
        if (!grown) rc = sl_errf(err, "%s: out of memory", path);
        else g->tensors = grown;
    }
    for (uint64_t i = 0; !rc && i < part.n_tensors; i++) {
        gguf_tensor *t = &g->tensors[g->n_tensors++];
        *t = part.tensors[i];
        t->file = idx;
        part.tensors[i].name = NULL; /* ownership moved */
    }
    part_free_meta(&part);
    return rc;
}

static int open_splits(gguf_file *g, sl_err *err)
{
    uint32_t count = 1;
    int rc = gguf_get_u32(g, "split.count", &count, err);
    if (rc < 0) return -1;
    if (rc == 0 || count <= 1) return 0;
    char prefix[4096];
    if (count > 9999 || split_prefix(g->path, prefix, sizeof prefix))
        return sl_errf(err, "%s: split model with %u parts, but the file name is not NAME-00001-of-%05u.gguf",
                       g->path, count, count);
    for (uint32_t i = 1; i < count; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s-%05u-of-%05u.gguf", prefix, i + 1, count);
        if (merge_split(g, i, path, err)) return -1;
    }
    /* rebuild the name index over all parts; duplicates across parts are errors */
    index_free(g->tensor_index);
    g->tensor_index = index_new(g->n_tensors);
    if (!g->tensor_index) return sl_errf(err, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (index_put(g->tensor_index, g->tensors[i].name, (int64_t)i, tensor_name, g->tensors) >= 0)
            return sl_errf(err, "%s: tensor '%s' appears in more than one split part (part %u)", g->path,
                           g->tensors[i].name, g->tensors[i].file + 1);
    int64_t want;
    if (gguf_get_i64(g, "split.tensors.count", &want, err) == 1 && (uint64_t)want != g->n_tensors)
        return sl_errf(err, "%s: split.tensors.count is %lld but the %u parts hold %llu tensors", g->path,
                       (long long)want, count, (unsigned long long)g->n_tensors);
    return 0;
}

int gguf_open(gguf_file **out, const char *path, sl_err *err)
{
    gguf_file *g = calloc(1, sizeof *g);
    if (!g) return sl_errf(err, "out of memory");
    g->path = strdup(path);
    if (!g->path) {
        free(g);
        return sl_errf(err, "%s: out of memory", path);
    }
    int fd;
    uint64_t size, data_off = 0;
    int rc = add_part(g, path, err, &fd, &size);
    if (!rc) rc = parse_part(g, path, fd, &data_off, err);
    if (!rc) g->parts[0].data_off = data_off;
    if (!rc) rc = open_splits(g, err);
    if (rc) {
        gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void gguf_close(gguf_file *g)
{
    if (!g) return;
    part_free_meta(g);
    for (uint32_t i = 0; i < g->n_parts; i++) {
        close(g->parts[i].fd);
        free(g->parts[i].path);
    }
    free(g->parts);
    free(g->path);
    free(g);
}

/* ---- lookups ---- */

const gguf_kv *gguf_find(const gguf_file *g, const char *key)
{
    int64_t i = index_get(g->kv_index, key, kv_name, g->kv);
    return i < 0 ? NULL : &g->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name)
{
    int64_t i = index_get(g->tensor_index, name, tensor_name, g->tensors);
    return i < 0 ? NULL : &g->tensors[i];
}

static int wrong_type(const gguf_file *g, const gguf_kv *kv, const char *want, sl_err *err)
{
    return sl_errf(err, "%s: key '%s' (byte %llu) has type %s, expected %s", g->path, kv->key,
                   (unsigned long long)kv->offset, gguf_vtype_name(kv->v.type), want);
}

static bool is_unsigned(gguf_vtype t)
{
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}

static bool is_signed(gguf_vtype t)
{
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, sl_err *err)
{
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (is_unsigned(kv->v.type)) *out = kv->v.u;
    else if (is_signed(kv->v.type) && kv->v.i >= 0) *out = (uint64_t)kv->v.i;
    else return wrong_type(g, kv, "a non-negative integer", err);
    return 1;
}

int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, sl_err *err)
{
    uint64_t v;
    int rc = gguf_get_u64(g, key, &v, err);
    if (rc <= 0) return rc;
    if (v > UINT32_MAX)
        return sl_errf(err, "%s: key '%s' value %llu is out of range", g->path, key, (unsigned long long)v);
    *out = (uint32_t)v;
    return 1;
}

int gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, sl_err *err)
{
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (is_signed(kv->v.type)) *out = kv->v.i;
    else if (is_unsigned(kv->v.type) && kv->v.u <= INT64_MAX) *out = (int64_t)kv->v.u;
    else return wrong_type(g, kv, "an integer", err);
    return 1;
}

int gguf_get_f32(const gguf_file *g, const char *key, float *out, sl_err *err)
{
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->v.type == GGUF_FLOAT32 || kv->v.type == GGUF_FLOAT64) *out = (float)kv->v.f;
    else if (is_unsigned(kv->v.type)) *out = (float)kv->v.u;
    else if (is_signed(kv->v.type)) *out = (float)kv->v.i;
    else return wrong_type(g, kv, "a number", err);
    return 1;
}

int gguf_get_bool(const gguf_file *g, const char *key, bool *out, sl_err *err)
{
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->v.type != GGUF_BOOL) return wrong_type(g, kv, "bool", err);
    *out = kv->v.u != 0;
    return 1;
}

int gguf_get_str(const gguf_file *g, const char *key, const gguf_str **out, sl_err *err)
{
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->v.type != GGUF_STRING) return wrong_type(g, kv, "string", err);
    *out = &kv->v.str;
    return 1;
}

int gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype elem, const void **data,
                 uint64_t *n, sl_err *err)
{
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->v.type != GGUF_ARRAY || kv->v.arr.type != elem) {
        char want[48];
        snprintf(want, sizeof want, "array of %s", gguf_vtype_name(elem));
        if (kv->v.type == GGUF_ARRAY)
            return sl_errf(err, "%s: key '%s' (byte %llu) is an array of %s, expected %s", g->path, key,
                           (unsigned long long)kv->offset, gguf_vtype_name(kv->v.arr.type), want);
        return wrong_type(g, kv, want, err);
    }
    *data = kv->v.arr.data;
    *n = kv->v.arr.n;
    return 1;
}

int gguf_read_tensor(const gguf_file *g, const gguf_tensor *t, uint64_t off, void *dst, uint64_t len,
                     sl_err *err)
{
    if (off > t->nbytes || len > t->nbytes - off)
        return sl_errf(err, "%s: read [%llu, +%llu) outside tensor '%s' (%llu bytes)", g->path,
                       (unsigned long long)off, (unsigned long long)len, t->name,
                       (unsigned long long)t->nbytes);
    const gguf_part *p = &g->parts[t->file];
    if (sl_pread_full(p->fd, dst, len, t->file_off + off, p->path, err))
        return sl_err_wrap(err, "tensor '%s'", t->name);
    return 0;
}
