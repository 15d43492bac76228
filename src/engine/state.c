#include "engine/state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "arch/session_io.h"
#include "experts/heat.h"
#include "util/fault.h"
#include "util/fileio.h"

static const char MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'K', 'V'};
enum { VERSION = 1, HEADER = 8 + 4 + 4 + HEAT_ID_BYTES + 8 + 8 + 4 + 4, SAMPLE = 65536 };

typedef struct {
    uint8_t id[HEAT_ID_BYTES];
    uint64_t data_hash, layout;
} identity;

/* The weights' identity: the tensor table, and a sample of the tensor data
 * at both ends (two models of one shape differ there). */
static int model_identity(sl_engine *e, identity *id, sl_err *err)
{
    const gguf_file *g = model_gguf(e->model);
    heat_model_id(g, id->id);
    const gguf_part *p = &g->parts[0];
    uint8_t *b = malloc(2 * SAMPLE);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &p->size, sizeof p->size);
    if (!b) return sl_errf(err, "state: out of memory");
    uint64_t span = p->size > p->data_off ? p->size - p->data_off : 0;
    size_t n = span < SAMPLE ? (size_t)span : SAMPLE;
    /* the whole sample or an error: a partial one would name another model */
    int rc = sl_pread_full(p->fd, b, n, p->data_off, p->path, err) ||
             sl_pread_full(p->fd, b + SAMPLE, n, p->size - n, p->path, err);
    if (!rc) XXH3_64bits_update(&st, b, n), XXH3_64bits_update(&st, b + SAMPLE, n);
    free(b);
    id->data_hash = XXH3_64bits_digest(&st);
    id->layout = session_kv_layout(e->session);
    return rc ? -1 : 0;
}

static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get_u32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

/* A saved context being written or read: the running checksum, where it
 * is in the file, and the first failure (errno 0: the file ended early). */
typedef struct {
    FILE *f;
    XXH3_state_t h;
    uint64_t off;
    int failed, err_no;
} hashed_io;

/* N bytes at the file's position; interrupted transfers are retried. */
static int xfer(hashed_io *io, void *p, size_t n, bool write)
{
    enum { MAX_TRIES = 16 };
    size_t done = 0;
    for (int tries = 0; done < n;) {
        errno = 0;
        size_t k = write ? sl_sys_fwrite((char *)p + done, 1, n - done, io->f)
                         : sl_sys_fread((char *)p + done, 1, n - done, io->f);
        done += k, io->off += k;
        if (done == n) break;
        int e = errno;
        if (sl_errno_transient(e) && ++tries < MAX_TRIES) {
            clearerr(io->f);
            continue;
        }
        io->failed = 1, io->err_no = e ? e : write || ferror(io->f) ? EIO : 0; /* 0: end of file */
        return -1;
    }
    return 0;
}

static int put(void *ud, const void *p, size_t n)
{
    hashed_io *io = ud;
    XXH3_64bits_update(&io->h, p, n);
    return xfer(io, (void *)p, n, true);
}

static int get(void *ud, void *p, size_t n)
{
    hashed_io *io = ud;
    if (xfer(io, p, n, false)) return -1;
    XXH3_64bits_update(&io->h, p, n);
    return 0;
}

/* The error for a failed transfer of IO, naming the file and offset. */
static int io_error(const hashed_io *io, const char *path, const char *op, sl_err *err)
{
    return sl_errf(err, "%s: %s of the saved context failed at byte %llu: %s", path, op,
                   (unsigned long long)io->off, io->err_no ? strerror(io->err_no) : "short read: the file ends early");
}

/* The recurrent layers' record (session_state_write; empty for
 * attention-only models), length-prefixed, inside the checksum. */
static int put_recurrent(sl_engine *e, hashed_io *io, sl_err *err)
{
    char *rec = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&rec, &len);
    if (!m) return sl_errf(err, "state save: out of memory");
    int rc = session_state_write(e->session, m, err);
    if (fclose(m) && rc == 0) rc = sl_errf(err, "state save: out of memory");
    uint8_t b[8];
    put_u64(b, (uint64_t)len);
    if (rc == 0 && (put(io, b, 8) || put(io, rec, len))) rc = sl_errf(err, "state save: write failed");
    free(rec);
    return rc;
}

static int get_recurrent(sl_engine *e, hashed_io *io, uint64_t len, sl_err *err)
{
    uint8_t b[8];
    char *rec = malloc(len ? len : 1);
    if (!rec) return sl_errf(err, "state load: out of memory for %llu bytes", (unsigned long long)len);
    int rc = get(io, b, 8) || get(io, rec, len) ? sl_errf(err, "state load: short read") : 0;
    FILE *m = rc == 0 ? fmemopen(rec, len ? len : 1, "rb") : NULL;
    if (rc == 0 && !m) rc = sl_errf(err, "state load: out of memory");
    if (rc == 0) rc = session_state_read(e->session, m, err);
    if (m) fclose(m);
    free(rec);
    return rc;
}

int engine_state_save(sl_engine *e, const int32_t *tokens, size_t n, const char *path, sl_err *err)
{
    int32_t n_eval = session_pos(e->session);
    if (n < (size_t)n_eval)
        return sl_errf(err, "state save: %zu tokens given, the session has evaluated %d", n, (int)n_eval);
    identity id;
    if (model_identity(e, &id, err)) return -1;
    uint8_t h[HEADER] = {0};
    memcpy(h, MAGIC, 8);
    put_u32(h + 8, VERSION);
    put_u32(h + 12, HEADER);
    memcpy(h + 16, id.id, HEAT_ID_BYTES);
    put_u64(h + 32, id.data_hash);
    put_u64(h + 40, id.layout);
    put_u32(h + 48, (uint32_t)n);
    put_u32(h + 52, (uint32_t)n_eval);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return sl_errf(err, "%s: path too long", path);
    hashed_io io = {.f = fopen(tmp, "wb")};
    if (!io.f) return sl_errf(err, "%s: %s", tmp, strerror(errno));
    XXH3_64bits_reset(&io.h);
    int rc = put(&io, h, sizeof h);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint8_t t[4];
        put_u32(t, (uint32_t)tokens[i]);
        rc = put(&io, t, 4);
    }
    if (rc == 0) rc = session_kv_write(e->session, n_eval, put, &io, err);
    if (rc == 0) rc = put_recurrent(e, &io, err);
    uint8_t sum[8];
    put_u64(sum, XXH3_64bits_digest(&io.h));
    if (rc == 0) rc = xfer(&io, sum, 8, true);
    if (io.failed) io_error(&io, tmp, "write", err);
    /* stdio writes late: the flush at close can fail too, and then the file
     * is incomplete; the data reaches the disk before the rename */
    if (fflush(io.f) && rc == 0) rc = sl_errf(err, "%s: write of the saved context failed at byte %llu: %s", tmp,
                                              (unsigned long long)io.off, strerror(errno));
    if (rc == 0 && sl_fsync_retry(fileno(io.f))) rc = sl_errf(err, "%s: fsync failed: %s", tmp, strerror(errno));
    if (fclose(io.f) && rc == 0) rc = sl_errf(err, "%s: close failed: %s", tmp, strerror(errno));
    if (rc == 0 && sl_rename_retry(tmp, path)) rc = sl_errf(err, "%s: rename to %s failed: %s", tmp, path, strerror(errno));
    if (rc) unlink(tmp); /* PATH keeps its old contents (or stays absent) */
    return rc ? -1 : 0;
}

/* Opens PATH and checks its header against this model; *N its tokens. */
static FILE *open_checked(sl_engine *e, const char *path, uint8_t h[HEADER], size_t *n, int32_t *n_eval,
                          uint64_t *rec_len, sl_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return sl_errf(err, "%s: %s", path, strerror(errno)), NULL;
    struct stat st;
    const char *why = NULL;
    identity id;
    if (model_identity(e, &id, err)) return fclose(f), NULL;
    hashed_io io = {.f = f};
    if (fstat(fileno(f), &st)) why = "cannot stat";
    else if (xfer(&io, h, HEADER, false))
        return io.err_no ? (io_error(&io, path, "read", err), fclose(f), NULL)
                         : (fclose(f), sl_errf(err, "%s: too short for a saved context", path), NULL);
    else if (memcmp(h, MAGIC, 8)) why = "not a sluice saved context (bad magic)";
    else if (get_u32(h + 8) != VERSION || get_u32(h + 12) != HEADER) why = "a saved context of another version";
    else if (memcmp(h + 16, id.id, HEAT_ID_BYTES) || get_u64(h + 32) != id.data_hash) why = "saved by another model";
    else if (get_u64(h + 40) != id.layout) why = "saved with another KV layout (KV type or architecture)";
    if (!why) {
        *n = get_u32(h + 48);
        *n_eval = (int32_t)get_u32(h + 52);
        uint64_t at = HEADER + 4ull * *n + session_kv_size(e->session, *n_eval);
        uint8_t lb[8] = {0};
        if (*n > (size_t)session_n_ctx(e->session)) why = "more tokens than this context holds";
        else if (*n_eval < 0 || (size_t)*n_eval > *n) why = "a damaged header (evaluated tokens)";
        else if ((uint64_t)st.st_size < at + 16) why = "truncated (shorter than its header says)";
        else if (sl_pread_full(fileno(f), lb, 8, at, path, err)) return fclose(f), NULL;
        else if ((*rec_len = get_u64(lb)) > (uint64_t)st.st_size || (uint64_t)st.st_size != at + 16 + *rec_len)
            why = "truncated or padded (its size does not match its header)";
    }
    if (why) {
        fclose(f);
        return sl_errf(err, "%s: %s", path, why), NULL;
    }
    return f;
}

static int read_tokens(FILE *f, XXH3_state_t *h, size_t n, int32_t **out, const char *path, sl_err *err)
{
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!t) return sl_errf(err, "%s: out of memory for %zu tokens", path, n);
    hashed_io io = {.f = f, .h = *h, .off = HEADER};
    for (size_t i = 0; i < n; i++) {
        uint8_t b[4];
        if (get(&io, b, 4)) return free(t), io_error(&io, path, "read", err);
        t[i] = (int32_t)get_u32(b);
    }
    *h = io.h;
    *out = t;
    return 0;
}

int engine_state_peek(sl_engine *e, const char *path, int32_t **tokens, size_t *n, sl_err *err)
{
    uint8_t h[HEADER];
    int32_t n_eval;
    uint64_t rec_len;
    FILE *f = open_checked(e, path, h, n, &n_eval, &rec_len, err);
    if (!f) return -1;
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    int rc = read_tokens(f, &hs, *n, tokens, path, err);
    fclose(f);
    return rc;
}

/* The checksum over the whole file, before anything is restored. */
static int verify(FILE *f, uint64_t size, const char *path, sl_err *err)
{
    XXH3_state_t h;
    XXH3_64bits_reset(&h);
    static const size_t CH = 1 << 20;
    uint8_t *b = malloc(CH);
    if (!b) return sl_errf(err, "%s: out of memory", path);
    uint64_t left = size - 8;
    rewind(f);
    hashed_io io = {.f = f};
    while (left) {
        size_t k = left < CH ? (size_t)left : CH;
        if (xfer(&io, b, k, false)) return free(b), io_error(&io, path, "read", err);
        XXH3_64bits_update(&h, b, k);
        left -= k;
    }
    uint8_t sum[8];
    int rc = xfer(&io, sum, 8, false) ? io_error(&io, path, "read", err) : 0;
    free(b);
    if (!rc && get_u64(sum) != XXH3_64bits_digest(&h)) rc = sl_errf(err, "%s: damaged (checksum mismatch)", path);
    return rc;
}

int engine_state_load(sl_engine *e, const char *path, int32_t **tokens, size_t *n, int32_t *n_eval, sl_err *err)
{
    uint8_t h[HEADER];
    *tokens = NULL;
    uint64_t rec_len = 0;
    FILE *f = open_checked(e, path, h, n, n_eval, &rec_len, err);
    if (!f) return -1;
    uint64_t size = HEADER + 4ull * *n + session_kv_size(e->session, *n_eval) + 16 + rec_len;
    int rc = verify(f, size, path, err);
    hashed_io io = {.f = f};
    XXH3_64bits_reset(&io.h);
    if (rc == 0 && fseek(f, HEADER, SEEK_SET)) rc = sl_errf(err, "%s: seek failed", path);
    if (rc == 0) rc = read_tokens(f, &io.h, *n, tokens, path, err);
    io.off = HEADER + 4ull * *n;
    if (rc == 0 && (session_kv_read(e->session, *n_eval, get, &io, err) || get_recurrent(e, &io, rec_len, err))) {
        sl_err e0;
        session_rewind(e->session, 0, &e0); /* the KV rows already changed: start over, empty */
        rc = -1;
    }
    if (rc && io.failed) io_error(&io, path, "read", err);
    fclose(f);
    if (rc) free(*tokens), *tokens = NULL;
    return rc;
}
