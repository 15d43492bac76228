/* GGUF writing.  Key/values and tensor infos are encoded into two byte
 * buffers as they are added, so the metadata costs its encoded size and
 * nothing else; tensor data only ever passes through the output buffer.
 *
 * With `background`, a second thread does the write() calls: the caller
 * fills one buffer while the other drains, which is what lets a generator
 * keep the disk busy.  With `drop_cache`, ranges already on their way to the
 * disk are waited for and dropped from the page cache (sync_file_range +
 * POSIX_FADV_DONTNEED) once they are 64 MiB behind the write position:
 * writing an 18 GB file on a 24 GB machine otherwise fills memory with
 * dirty pages and evicts every other process's cache.  With `direct`, the
 * output buffers are page-aligned and always written whole (the last one
 * zero-padded, then the file truncated to its true size), which O_DIRECT
 * needs; that skips the page cache altogether and measured 2x faster than
 * buffered writes with write-back throttling on this machine's disk. */
#include "gguf/gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/fault.h"

#define DEFAULT_ALIGNMENT 32
#define DEFAULT_BUF (8u << 20)
#define DROP_LAG (64ull << 20)
#define DIRECT_ALIGN 4096
#define MAX_DIMS 4

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bytes;

typedef struct {
    char *name;
    uint64_t offset, nbytes;
} wtensor;

struct gguf_writer {
    gguf_w_opts o;
    bytes kv, ti;
    uint64_t n_kv, n_tensors;
    char **keys;
    size_t cap_keys;
    wtensor *t;
    size_t cap_t;
    bool raw_tensors;
    uint64_t data_end; /* end of the last checked tensor's data */

    bool ov;
    char ov_magic[4];
    uint32_t ov_version;
    uint64_t ov_n_tensors, ov_n_kv;

    /* output */
    int fd;
    char *path;
    uint8_t *buf[2];
    int cur;
    size_t fill;
    uint64_t file_pos;   /* bytes handed to the output, buffered or not */
    uint64_t data_start; /* file offset of the data section */
    uint64_t data_pos;   /* relative to data_start, padding included */
    uint64_t data_written;
    uint64_t t_cur;      /* tensor whose data comes next */

    /* write path state, owned by whichever thread writes */
    bool direct; /* the fd is O_DIRECT */
    uint64_t disk_pos, dropped_to;
    int io_failed;
    sl_err io_err;

    /* background writer */
    bool th_on, job, quit;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const uint8_t *job_p;
    size_t job_n;
};

/* ---- byte buffers ---- */

static void put(bytes *b, const void *p, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q, b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }

static void put_str(bytes *b, const char *s, uint64_t len)
{
    put_u64(b, len);
    put(b, s, (size_t)len);
}

/* ---- life cycle ---- */

gguf_writer *gguf_w_new(const gguf_w_opts *opts)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    if (opts) w->o = *opts;
    if (!w->o.version) w->o.version = 3;
    if (!w->o.alignment) w->o.alignment = DEFAULT_ALIGNMENT;
    if (!w->o.buf_bytes) w->o.buf_bytes = DEFAULT_BUF;
    w->fd = -1;
    if (w->o.alignment != DEFAULT_ALIGNMENT &&
        gguf_w_kv_u32(w, "general.alignment", w->o.alignment, NULL)) {
        gguf_w_free(w);
        return NULL;
    }
    return w;
}

static void stop_thread(gguf_writer *w);

void gguf_w_free(gguf_writer *w)
{
    if (!w) return;
    stop_thread(w);
    if (w->fd >= 0) close(w->fd);
    for (uint64_t i = 0; i < w->n_kv && w->keys; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv.p);
    free(w->ti.p);
    free(w->buf[0]);
    free(w->buf[1]);
    free(w->path);
    free(w);
}

/* ---- key/values ---- */

static int check_open(const gguf_writer *w, const char *what, sl_err *err)
{
    if (w->fd >= 0 || w->path)
        return sl_errf(err, "gguf writer: %s added after the output was opened", what);
    return 0;
}

static int add_key(gguf_writer *w, const char *key, uint64_t key_len, sl_err *err)
{
    if (check_open(w, "key/value", err)) return -1;
    if (key_len == strnlen(key, (size_t)key_len + 1)) /* duplicates only among NUL-free keys */
        for (uint64_t i = 0; i < w->n_kv; i++)
            if (w->keys[i] && strcmp(w->keys[i], key) == 0)
                return sl_errf(err, "gguf writer: duplicate key '%s'", key);
    if (w->n_kv >= w->cap_keys) {
        size_t cap = w->cap_keys ? w->cap_keys * 2 : 64;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k) return sl_errf(err, "gguf writer: out of memory");
        w->keys = k, w->cap_keys = cap;
    }
    bool plain = key_len == strnlen(key, (size_t)key_len + 1);
    w->keys[w->n_kv] = plain ? strdup(key) : NULL;
    if (plain && !w->keys[w->n_kv]) return sl_errf(err, "gguf writer: out of memory");
    w->n_kv++;
    put_str(&w->kv, key, key_len);
    return 0;
}

static int finish(const bytes *b, sl_err *err)
{
    return b->oom ? sl_errf(err, "gguf writer: out of memory") : 0;
}

static int encode_value(bytes *b, const gguf_value *v, bool tagged, int depth, sl_err *err);

static int encode_array(bytes *b, gguf_vtype et, const void *data, uint64_t n, int depth, sl_err *err)
{
    if (et >= GGUF_NTYPES) return sl_errf(err, "gguf writer: unknown array element type %u", et);
    put_u32(b, et);
    put_u64(b, n);
    if (et == GGUF_STRING) {
        const gguf_str *s = data;
        for (uint64_t i = 0; i < n; i++) put_str(b, s[i].s, s[i].len);
    } else if (et == GGUF_ARRAY) {
        const gguf_value *a = data;
        for (uint64_t i = 0; i < n; i++)
            if (encode_value(b, &a[i], false, depth + 1, err)) return -1;
    } else {
        put(b, data, (size_t)(n * gguf_scalar_size(et)));
    }
    return 0;
}

/* Scalars are held widened in gguf_value; narrow them to the file type. */
static int encode_value(bytes *b, const gguf_value *v, bool tagged, int depth, sl_err *err)
{
    if (depth > 64) return sl_errf(err, "gguf writer: arrays nested too deep");
    if (v->type >= GGUF_NTYPES) return sl_errf(err, "gguf writer: unknown value type %u", v->type);
    if (!tagged && v->type != GGUF_ARRAY)
        return sl_errf(err, "gguf writer: element of an array of arrays has type %s", gguf_vtype_name(v->type));
    if (tagged) put_u32(b, v->type);
    uint8_t raw[8];
    switch (v->type) {
    case GGUF_STRING: put_str(b, v->str.s, v->str.len); return 0;
    case GGUF_ARRAY: return encode_array(b, v->arr.type, v->arr.data, v->arr.n, depth, err);
    case GGUF_FLOAT32: { float f = (float)v->f; memcpy(raw, &f, 4); break; }
    case GGUF_FLOAT64: memcpy(raw, &v->f, 8); break;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64: memcpy(raw, &v->i, 8); break;
    default: memcpy(raw, &v->u, 8); break; /* unsigned and bool */
    }
    put(b, raw, gguf_scalar_size(v->type));
    return 0;
}

int gguf_w_kv(gguf_writer *w, const char *key, const gguf_value *v, sl_err *err)
{
    bytes enc = {0}; /* encoded first, so a bad value leaves the writer unchanged */
    int rc = encode_value(&enc, v, true, 0, err);
    if (rc) sl_err_wrap(err, "key '%s'", key);
    else if (enc.oom) rc = sl_errf(err, "gguf writer: out of memory");
    else if (!(rc = add_key(w, key, strlen(key), err))) {
        put(&w->kv, enc.p, enc.n);
        rc = finish(&w->kv, err);
    }
    free(enc.p);
    return rc;
}

static int kv_scalar(gguf_writer *w, const char *key, gguf_vtype t, const void *p, sl_err *err)
{
    if (add_key(w, key, strlen(key), err)) return -1;
    put_u32(&w->kv, t);
    put(&w->kv, p, gguf_scalar_size(t));
    return finish(&w->kv, err);
}

int gguf_w_kv_u32(gguf_writer *w, const char *key, uint32_t v, sl_err *err) { return kv_scalar(w, key, GGUF_UINT32, &v, err); }
int gguf_w_kv_i32(gguf_writer *w, const char *key, int32_t v, sl_err *err) { return kv_scalar(w, key, GGUF_INT32, &v, err); }
int gguf_w_kv_u64(gguf_writer *w, const char *key, uint64_t v, sl_err *err) { return kv_scalar(w, key, GGUF_UINT64, &v, err); }
int gguf_w_kv_f32(gguf_writer *w, const char *key, float v, sl_err *err) { return kv_scalar(w, key, GGUF_FLOAT32, &v, err); }

int gguf_w_kv_bool(gguf_writer *w, const char *key, bool v, sl_err *err)
{
    uint8_t b = v ? 1 : 0;
    return kv_scalar(w, key, GGUF_BOOL, &b, err);
}

int gguf_w_kv_str_n(gguf_writer *w, const char *key, const char *s, uint64_t len, sl_err *err)
{
    if (add_key(w, key, strlen(key), err)) return -1;
    put_u32(&w->kv, GGUF_STRING);
    put_str(&w->kv, s, len);
    return finish(&w->kv, err);
}

int gguf_w_kv_str(gguf_writer *w, const char *key, const char *s, sl_err *err)
{
    return gguf_w_kv_str_n(w, key, s, strlen(s), err);
}

int gguf_w_kv_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data, uint64_t n, sl_err *err)
{
    if (elem >= GGUF_NTYPES || elem == GGUF_ARRAY)
        return sl_errf(err, "gguf writer: key '%s': arrays of %s need gguf_w_kv", key, gguf_vtype_name(elem));
    if (add_key(w, key, strlen(key), err)) return -1;
    put_u32(&w->kv, GGUF_ARRAY);
    if (encode_array(&w->kv, elem, data, n, 0, err)) return -1;
    return finish(&w->kv, err);
}

int gguf_w_kv_raw(gguf_writer *w, const char *key, uint64_t key_len, uint32_t type, const void *value,
                  size_t len, sl_err *err)
{
    if (add_key(w, key, key_len, err)) return -1;
    put_u32(&w->kv, type);
    put(&w->kv, value, len);
    return finish(&w->kv, err);
}

/* ---- tensor infos ---- */

static int grow_tensors(gguf_writer *w, sl_err *err)
{
    if (w->n_tensors < w->cap_t) return 0;
    size_t cap = w->cap_t ? w->cap_t * 2 : 256;
    wtensor *t = realloc(w->t, cap * sizeof *t);
    if (!t) return sl_errf(err, "gguf writer: out of memory");
    w->t = t, w->cap_t = cap;
    return 0;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                  sl_err *err)
{
    if (check_open(w, "tensor", err)) return -1;
    if (w->raw_tensors) return sl_errf(err, "gguf writer: tensor '%s': cannot mix with raw tensor infos", name);
    const ggml_type_info *ti = ggml_type_get(type);
    if (!ti) return sl_errf(err, "gguf writer: tensor '%s': unknown ggml type %u", name, type);
    if (n_dims < 1 || n_dims > MAX_DIMS)
        return sl_errf(err, "gguf writer: tensor '%s': %u dimensions (must be 1..%d)", name, n_dims, MAX_DIMS);
    if (!*name) return sl_errf(err, "gguf writer: empty tensor name");
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->t[i].name, name) == 0) return sl_errf(err, "gguf writer: duplicate tensor '%s'", name);
    uint64_t nbytes = 0;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1) return sl_errf(err, "gguf writer: tensor '%s': dimension %u is %lld", name, d, (long long)ne[d]);
        if (d == 0) {
            nbytes = ggml_row_bytes(type, (uint64_t)ne[0]);
            if (!nbytes)
                return sl_errf(err, "gguf writer: tensor '%s': row length %lld is not a multiple of the %s block size %u",
                               name, (long long)ne[0], ti->name, ti->blck_size);
        } else if (nbytes > UINT64_MAX / (uint64_t)ne[d]) {
            return sl_errf(err, "gguf writer: tensor '%s': size overflows", name);
        } else {
            nbytes *= (uint64_t)ne[d];
        }
    }
    if (grow_tensors(w, err)) return -1;
    uint64_t off = align_up(w->data_end, w->o.alignment);
    wtensor *t = &w->t[w->n_tensors];
    t->name = strdup(name);
    if (!t->name) return sl_errf(err, "gguf writer: out of memory");
    t->offset = off, t->nbytes = nbytes;
    w->data_end = off + nbytes;
    put_str(&w->ti, name, strlen(name));
    put_u32(&w->ti, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) put_u64(&w->ti, (uint64_t)ne[d]);
    put_u32(&w->ti, type);
    put_u64(&w->ti, off);
    if (finish(&w->ti, err)) return -1;
    return (int)w->n_tensors++;
}

int gguf_w_tensor_raw(gguf_writer *w, const char *name, uint64_t name_len, uint32_t n_dims,
                      const uint64_t *ne, uint32_t type, uint64_t offset, sl_err *err)
{
    if (check_open(w, "tensor", err)) return -1;
    if (w->n_tensors && !w->raw_tensors)
        return sl_errf(err, "gguf writer: raw tensor infos cannot follow checked ones");
    if (grow_tensors(w, err)) return -1;
    w->raw_tensors = true;
    wtensor *t = &w->t[w->n_tensors];
    t->name = strndup(name, (size_t)name_len);
    if (!t->name) return sl_errf(err, "gguf writer: out of memory");
    t->offset = offset, t->nbytes = 0;
    put_str(&w->ti, name, name_len);
    put_u32(&w->ti, n_dims);
    for (uint32_t d = 0; d < n_dims && d < 16; d++) put_u64(&w->ti, ne[d]); /* n_dims may lie */
    put_u32(&w->ti, type);
    put_u64(&w->ti, offset);
    if (finish(&w->ti, err)) return -1;
    return (int)w->n_tensors++;
}

void gguf_w_override_header(gguf_writer *w, const char *magic4, uint32_t version, uint64_t n_tensors,
                            uint64_t n_kv)
{
    w->ov = true;
    memcpy(w->ov_magic, magic4 ? magic4 : "GGUF", 4);
    w->ov_version = version;
    w->ov_n_tensors = n_tensors;
    w->ov_n_kv = n_kv;
}

uint64_t gguf_w_n_tensors(const gguf_writer *w) { return w->n_tensors; }
uint64_t gguf_w_n_kv(const gguf_writer *w) { return w->n_kv; }

uint64_t gguf_w_data_offset(const gguf_writer *w)
{
    uint64_t meta = 4 + 4 + 8 + 8 + w->kv.n + w->ti.n;
    return w->n_tensors ? align_up(meta, w->o.alignment) : meta;
}

uint64_t gguf_w_file_size(const gguf_writer *w)
{
    uint64_t end = w->n_tensors ? align_up(w->data_end, w->o.alignment) : 0;
    return gguf_w_data_offset(w) + end;
}

/* ---- the write path ---- */

/* Some filesystems accept O_DIRECT at open and refuse it at write. */
static int write_all(gguf_writer *w, const uint8_t *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = sl_sys_write(w->fd, p + done, n - done);
        if (k < 0 && sl_errno_transient(errno)) continue;
        if (k < 0 && errno == EINVAL && w->direct && done == 0) {
            int fl = fcntl(w->fd, F_GETFL);
            if (fl >= 0 && fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
                w->direct = false;
                continue;
            }
        }
        if (k <= 0)
            return sl_errf(&w->io_err, "%s: write of %zu bytes at offset %llu failed: %s", w->path, n - done,
                           (unsigned long long)(w->disk_pos + done), k < 0 ? strerror(errno) : "no progress");
        done += (size_t)k;
    }
    return 0;
}

static int io_write(gguf_writer *w, const uint8_t *p, size_t n)
{
    if (w->io_failed) return -1;
    if (write_all(w, p, n)) {
        w->io_failed = 1;
        return -1;
    }
    uint64_t start = w->disk_pos;
    w->disk_pos += n;
    if (w->o.drop_cache && !w->direct) {
        /* start write-back now; wait for and drop what is far enough behind */
        sync_file_range(w->fd, (off64_t)start, (off64_t)n, SYNC_FILE_RANGE_WRITE);
        if (w->disk_pos - w->dropped_to > 2 * DROP_LAG) {
            uint64_t upto = w->disk_pos - DROP_LAG;
            sync_file_range(w->fd, (off64_t)w->dropped_to, (off64_t)(upto - w->dropped_to),
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
            posix_fadvise(w->fd, (off_t)w->dropped_to, (off_t)(upto - w->dropped_to), POSIX_FADV_DONTNEED);
            w->dropped_to = upto;
        }
    }
    return 0;
}

static void *writer_main(void *arg)
{
    gguf_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->job && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->job) break;
        const uint8_t *p = w->job_p;
        size_t n = w->job_n;
        pthread_mutex_unlock(&w->mu);
        io_write(w, p, n);
        pthread_mutex_lock(&w->mu);
        w->job = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Waits until the writer thread holds no buffer. */
static void drain(gguf_writer *w)
{
    if (!w->th_on) return;
    pthread_mutex_lock(&w->mu);
    while (w->job) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void stop_thread(gguf_writer *w)
{
    if (!w->th_on) return;
    pthread_mutex_lock(&w->mu);
    while (w->job) pthread_cond_wait(&w->cv, &w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    w->th_on = false;
}

static int io_failed(gguf_writer *w, sl_err *err)
{
    if (!w->io_failed) return 0;
    if (err) *err = w->io_err;
    return -1;
}

/* Hands the current buffer to the disk and switches to the other one. */
static int flush_buf(gguf_writer *w, sl_err *err)
{
    if (w->fill == 0) return io_failed(w, err);
    if (!w->th_on) {
        io_write(w, w->buf[w->cur], w->fill);
        w->fill = 0;
        return io_failed(w, err);
    }
    /* the lock orders the writer thread's io_failed/io_err before this read */
    pthread_mutex_lock(&w->mu);
    while (w->job) pthread_cond_wait(&w->cv, &w->mu);
    int failed = w->io_failed;
    if (!failed) {
        w->job_p = w->buf[w->cur];
        w->job_n = w->fill;
        w->job = true;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    w->cur ^= 1;
    w->fill = 0;
    return failed ? io_failed(w, err) : 0;
}

static int out(gguf_writer *w, const void *data, size_t len, sl_err *err)
{
    const uint8_t *p = data;
    while (len > 0) {
        size_t room = w->o.buf_bytes - w->fill;
        size_t take = len < room ? len : room;
        memcpy(w->buf[w->cur] + w->fill, p, take);
        w->fill += take, p += take, len -= take;
        w->file_pos += take;
        if (w->fill == w->o.buf_bytes && flush_buf(w, err)) return -1;
    }
    return 0;
}

static int out_zeros(gguf_writer *w, uint64_t n, sl_err *err)
{
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t take = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (out(w, zeros, take, err)) return -1;
        n -= take;
    }
    return 0;
}

static int start_output(gguf_writer *w, const char *path, sl_err *err)
{
    if (w->o.direct) w->o.buf_bytes = (w->o.buf_bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    for (int i = 0; i < (w->o.background ? 2 : 1); i++)
        if (posix_memalign((void **)&w->buf[i], DIRECT_ALIGN, w->o.buf_bytes) != 0) w->buf[i] = NULL;
    w->path = strdup(path);
    if (!w->buf[0] || (w->o.background && !w->buf[1]) || !w->path)
        return sl_errf(err, "gguf writer: out of memory for a %zu-byte output buffer", w->o.buf_bytes);
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    w->fd = w->o.direct ? open(path, flags | O_DIRECT, 0644) : -1;
    w->direct = w->fd >= 0;
    if (w->fd < 0) w->fd = open(path, flags, 0644); /* tmpfs and friends refuse O_DIRECT */
    if (w->fd < 0) return sl_errf(err, "%s: cannot create: %s", path, strerror(errno));
    if (w->o.background) {
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
            pthread_mutex_destroy(&w->mu);
            pthread_cond_destroy(&w->cv);
            return sl_errf(err, "%s: cannot start the writer thread", path);
        }
        w->th_on = true;
    }
    return 0;
}

int gguf_w_open(gguf_writer *w, const char *path, sl_err *err)
{
    if (w->fd >= 0 || w->path) return sl_errf(err, "gguf writer: output already opened");
    if (w->kv.oom || w->ti.oom) return sl_errf(err, "gguf writer: out of memory");
    if (start_output(w, path, err)) return -1;
    bytes h = {0};
    put(&h, w->ov ? w->ov_magic : "GGUF", 4);
    put_u32(&h, w->ov ? w->ov_version : w->o.version);
    put_u64(&h, w->ov ? w->ov_n_tensors : w->n_tensors);
    put_u64(&h, w->ov ? w->ov_n_kv : w->n_kv);
    int rc = h.oom ? sl_errf(err, "gguf writer: out of memory") : out(w, h.p, h.n, err);
    free(h.p);
    if (!rc) rc = out(w, w->kv.p, w->kv.n, err);
    if (!rc) rc = out(w, w->ti.p, w->ti.n, err);
    if (!rc && !w->raw_tensors) rc = out_zeros(w, gguf_w_data_offset(w) - w->file_pos, err);
    w->data_start = w->file_pos;
    return rc;
}

int gguf_w_write(gguf_writer *w, const void *data, size_t len, sl_err *err)
{
    if (w->fd < 0) return sl_errf(err, "gguf writer: output not open");
    if (w->raw_tensors) return sl_errf(err, "%s: raw tensor infos take their data through gguf_w_write_raw", w->path);
    const uint8_t *p = data;
    while (len > 0) {
        if (w->t_cur >= w->n_tensors)
            return sl_errf(err, "%s: %zu bytes of tensor data beyond the last tensor", w->path, len);
        const wtensor *t = &w->t[w->t_cur];
        if (w->data_pos < t->offset) {
            if (out_zeros(w, t->offset - w->data_pos, err)) return -1;
            w->data_pos = t->offset;
        }
        uint64_t left = t->offset + t->nbytes - w->data_pos;
        size_t take = len < left ? len : (size_t)left;
        if (out(w, p, take, err)) return -1;
        w->data_pos += take, w->data_written += take, p += take, len -= take;
        if (w->data_pos == t->offset + t->nbytes) w->t_cur++;
    }
    return 0;
}

int gguf_w_write_raw(gguf_writer *w, const void *data, size_t len, sl_err *err)
{
    if (w->fd < 0) return sl_errf(err, "gguf writer: output not open");
    return out(w, data, len, err);
}

uint64_t gguf_w_data_written(const gguf_writer *w) { return w->data_written; }

static int check_complete(gguf_writer *w, sl_err *err)
{
    if (w->raw_tensors || w->t_cur >= w->n_tensors) return 0;
    const wtensor *t = &w->t[w->t_cur];
    uint64_t have = w->data_pos > t->offset ? w->data_pos - t->offset : 0;
    return sl_errf(err, "%s: tensor '%s' got %llu of its %llu bytes of data", w->path, t->name,
                   (unsigned long long)have, (unsigned long long)t->nbytes);
}

int gguf_w_close(gguf_writer *w, sl_err *err)
{
    if (w->fd < 0) return sl_errf(err, "gguf writer: output not open");
    int rc = check_complete(w, err);
    if (!rc && !w->raw_tensors && w->n_tensors) {
        uint64_t end = align_up(w->data_pos, w->o.alignment);
        rc = out_zeros(w, end - w->data_pos, err);
        w->data_pos = end;
    }
    uint64_t size = w->file_pos;
    if (!rc && w->o.direct && w->fill % DIRECT_ALIGN) { /* whole pages for O_DIRECT; truncated below */
        size_t pad = DIRECT_ALIGN - w->fill % DIRECT_ALIGN;
        memset(w->buf[w->cur] + w->fill, 0, pad);
        w->fill += pad;
    }
    if (!rc) rc = flush_buf(w, err);
    drain(w);
    stop_thread(w);
    if (!rc) rc = io_failed(w, err);
    if (!rc && w->disk_pos != size && ftruncate(w->fd, (off_t)size) != 0)
        rc = sl_errf(err, "%s: cannot truncate to %llu bytes: %s", w->path, (unsigned long long)size, strerror(errno));
    if (!rc && w->o.sync && sl_fdatasync_retry(w->fd) != 0)
        rc = sl_errf(err, "%s: fdatasync failed: %s", w->path, strerror(errno));
    if (!rc && w->o.drop_cache) posix_fadvise(w->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (close(w->fd) != 0 && !rc) rc = sl_errf(err, "%s: close failed: %s", w->path, strerror(errno));
    w->fd = -1;
    return rc;
}
