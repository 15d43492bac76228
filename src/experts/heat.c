/* The heat table, the model identity, and the heat file: its byte format
 * (docs/HEAT.md), validation, atomic replacement and the locked merge. */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include "experts/heat.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "util/fileio.h"
#include "util/fault.h"

static const char HEAT_MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'H', 'T'};
enum {
    HEAT_VERSION = 1,
    HEAT_HEADER = 80,          /* bytes before the counts */
    HEAT_TRAILER = 8,          /* xxh3-64 of everything before it */
    HEAT_MAX_KEYS = 1 << 24,   /* layers x experts; bounds any allocation */
};

int heat_table_init(heat_table *h, const uint8_t id[HEAT_ID_BYTES], int n_layers, int n_expert, sl_err *err)
{
    *h = (heat_table){.n_layers = n_layers, .n_expert = n_expert};
    if (n_layers <= 0 || n_expert <= 0 || (int64_t)n_layers * n_expert > HEAT_MAX_KEYS)
        return sl_errf(err, "heat: bad geometry %d layers x %d experts", n_layers, n_expert);
    memcpy(h->model_id, id, HEAT_ID_BYTES);
    h->count = calloc((size_t)n_layers * (size_t)n_expert, sizeof *h->count);
    return h->count ? 0 : sl_errf(err, "heat: out of memory");
}

void heat_table_free(heat_table *h)
{
    free(h->count);
    h->count = NULL;
}

double heat_rate(const heat_table *h, int layer, int expert)
{
    return h->weight > 0 ? h->count[(int64_t)layer * h->n_expert + expert] / h->weight : 0;
}

double heat_share(const heat_table *h, int layer, int expert)
{
    const float *row = h->count + (int64_t)layer * h->n_expert;
    double sum = 0;
    for (int e = 0; e < h->n_expert; e++) sum += row[e];
    return sum > 0 ? row[expert] / sum : 0;
}

/* ---- identity ---- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static void put_f64(uint8_t *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    put_u64(p, v);
}
static double get_f64(const uint8_t *p)
{
    uint64_t v = get_u64(p);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

/* Hashes each tensor's name, type, shape, data offset and split part as
 * fixed little-endian fields, so the id does not depend on the host. */
void heat_model_id(const gguf_file *g, uint8_t id[HEAT_ID_BYTES])
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    uint8_t b[8];
    put_u64(b, g->n_tensors);
    XXH3_128bits_update(&st, b, 8);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        uint8_t f[4 + 4 + 4 + 32 + 8 + 4];
        size_t len = strlen(t->name);
        put_u32(f, (uint32_t)len);
        put_u32(f + 4, t->type);
        put_u32(f + 8, t->n_dims);
        for (int d = 0; d < 4; d++) put_u64(f + 12 + 8 * d, (uint64_t)t->ne[d]);
        put_u64(f + 44, t->offset);
        put_u32(f + 52, t->file);
        XXH3_128bits_update(&st, t->name, len);
        XXH3_128bits_update(&st, f, sizeof f);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(id, c.digest, HEAT_ID_BYTES);
}

void heat_id_hex(const uint8_t id[HEAT_ID_BYTES], char hex[2 * HEAT_ID_BYTES + 1])
{
    for (int i = 0; i < HEAT_ID_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
}

/* ---- location ---- */

int heat_default_path(const uint8_t id[HEAT_ID_BYTES], char *buf, size_t cap, sl_err *err)
{
    char hex[2 * HEAT_ID_BYTES + 1];
    heat_id_hex(id, hex);
    /* the XDG spec says relative values are to be ignored */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(buf, cap, "%s/sluice/%s.heat", xdg, hex);
    else if (home && *home) n = snprintf(buf, cap, "%s/.cache/sluice/%s.heat", home, hex);
    else return sl_errf(err, "heat: neither XDG_CACHE_HOME nor HOME is set; use --heat-file");
    return n < 0 || (size_t)n >= cap ? sl_errf(err, "heat: cache path too long") : 0;
}

int heat_beside_path(const char *model_path, char *buf, size_t cap, sl_err *err)
{
    int n = snprintf(buf, cap, "%s.heat", model_path);
    return n < 0 || (size_t)n >= cap ? sl_errf(err, "%s: path too long", model_path) : 0;
}

/* ---- the file ---- */

static size_t file_bytes(int n_layers, int n_expert)
{
    return HEAT_HEADER + 4 * (size_t)n_layers * (size_t)n_expert + HEAT_TRAILER;
}

static uint8_t *encode(const heat_table *h, size_t *len)
{
    size_t n = (size_t)h->n_layers * (size_t)h->n_expert, size = file_bytes(h->n_layers, h->n_expert);
    uint8_t *b = calloc(1, size);
    if (!b) return NULL;
    memcpy(b, HEAT_MAGIC, 8);
    put_u32(b + 8, HEAT_VERSION);
    put_u32(b + 12, HEAT_HEADER);
    memcpy(b + 16, h->model_id, HEAT_ID_BYTES);
    put_u32(b + 32, (uint32_t)h->n_layers);
    put_u32(b + 36, (uint32_t)h->n_expert);
    put_u64(b + 40, h->passes);
    put_f64(b + 48, h->weight);
    put_f64(b + 56, h->half_life);
    put_u64(b + 64, (uint64_t)h->created);
    put_u64(b + 72, (uint64_t)h->updated);
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, &h->count[i], 4);
        put_u32(b + HEAT_HEADER + 4 * i, v);
    }
    put_u64(b + size - HEAT_TRAILER, XXH3_64bits(b, size - HEAT_TRAILER));
    *len = size;
    return b;
}

/* Checks the header and size; NULL if fine, else the reason. */
static const char *check_frame(const uint8_t *b, size_t len, char *why, size_t cap)
{
    if (len < HEAT_HEADER + HEAT_TRAILER)
        return snprintf(why, cap, "truncated (%zu bytes; the header alone is %d)", len, HEAT_HEADER), why;
    if (memcmp(b, HEAT_MAGIC, 8)) return "not a sluice heat file (bad magic)";
    uint32_t version = get_u32(b + 8);
    if (version != HEAT_VERSION)
        return snprintf(why, cap, "unsupported version %u (this build reads %d)", version, HEAT_VERSION), why;
    if (get_u32(b + 12) != HEAT_HEADER) return "bad header size";
    uint32_t nl = get_u32(b + 32), ne = get_u32(b + 36);
    if (!nl || !ne || (uint64_t)nl * ne > HEAT_MAX_KEYS)
        return snprintf(why, cap, "bad geometry %u x %u", nl, ne), why;
    size_t want = file_bytes((int)nl, (int)ne);
    if (len != want)
        return snprintf(why, cap, "size %zu bytes, expected %zu for %u layers x %u experts (truncated?)", len,
                        want, nl, ne),
               why;
    if (get_u64(b + len - HEAT_TRAILER) != XXH3_64bits(b, len - HEAT_TRAILER))
        return "checksum mismatch (damaged file)";
    return NULL;
}

/* Decodes a checked frame; NULL if fine, else the reason. */
static const char *decode(heat_table *h, const uint8_t *b, sl_err *err)
{
    if (heat_table_init(h, b + 16, (int)get_u32(b + 32), (int)get_u32(b + 36), err)) return err->msg;
    h->passes = get_u64(b + 40);
    h->weight = get_f64(b + 48);
    h->half_life = get_f64(b + 56);
    h->created = (int64_t)get_u64(b + 64);
    h->updated = (int64_t)get_u64(b + 72);
    bool ok = isfinite(h->weight) && h->weight >= 0 && isfinite(h->half_life) && h->half_life >= 0;
    size_t n = (size_t)h->n_layers * (size_t)h->n_expert;
    for (size_t i = 0; i < n && ok; i++) {
        uint32_t v = get_u32(b + HEAT_HEADER + 4 * i);
        memcpy(&h->count[i], &v, 4);
        ok = isfinite(h->count[i]) && h->count[i] >= 0;
    }
    if (!ok) heat_table_free(h);
    return ok ? NULL : "negative or non-finite values";
}

/* Reads the whole file if it is of a plausible size. */
/* slurp's verdict for a file that exists but could not be read (an I/O
 * error, no memory): ignored by a reader like a damaged one, but never
 * replaced by a merge, which would lose its history over a passing fault. */
enum { HEAT_UNREAD = 100 };

static int slurp(const char *path, uint8_t **out, size_t *len, const char **why, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return HEAT_ABSENT;
    struct stat st;
    sl_err e;
    *why = buf;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(buf, cap, "cannot open: %s", strerror(errno));
        if (fd >= 0) close(fd);
        return HEAT_UNREAD;
    }
    if ((uint64_t)st.st_size > file_bytes(1, HEAT_MAX_KEYS)) {
        snprintf(buf, cap, "too large (%lld bytes)", (long long)st.st_size);
        close(fd);
        return HEAT_IGNORED;
    }
    *len = (size_t)st.st_size;
    *out = malloc(*len ? *len : 1);
    int rc = !*out ? (snprintf(buf, cap, "out of memory"), HEAT_UNREAD)
             : sl_pread_full(fd, *out, *len, 0, path, &e) ? (snprintf(buf, cap, "%s", e.msg), HEAT_UNREAD)
                                                             : HEAT_LOADED;
    close(fd);
    if (rc != HEAT_LOADED) free(*out), *out = NULL;
    return rc;
}

static const char *check_owner(const heat_table *h, const uint8_t *id, int n_layers, int n_expert, char *why,
                               size_t cap)
{
    if (id && memcmp(h->model_id, id, HEAT_ID_BYTES)) {
        char a[2 * HEAT_ID_BYTES + 1], b[2 * HEAT_ID_BYTES + 1];
        heat_id_hex(h->model_id, a), heat_id_hex(id, b);
        return snprintf(why, cap, "written for another model (id %s, this model is %s)", a, b), why;
    }
    if ((n_layers && h->n_layers != n_layers) || (n_expert && h->n_expert != n_expert))
        return snprintf(why, cap, "geometry %d layers x %d experts, this model has %d x %d", h->n_layers,
                        h->n_expert, n_layers, n_expert),
               why;
    return NULL;
}

/* heat_load; *UNREAD tells an I/O failure from a damaged or foreign file. */
static heat_status load_file(heat_table *h, const char *path, const uint8_t *id, int n_layers, int n_expert,
                             bool *unread, sl_err *warn)
{
    *h = (heat_table){0};
    uint8_t *b = NULL;
    size_t len = 0;
    char buf[sizeof(sl_err)];
    const char *why = NULL;
    int st = slurp(path, &b, &len, &why, buf, sizeof buf);
    if (st == HEAT_ABSENT) return HEAT_ABSENT;
    *unread = st == HEAT_UNREAD;
    sl_err e;
    if (st == HEAT_LOADED) why = check_frame(b, len, buf, sizeof buf);
    if (st == HEAT_LOADED && !why) why = decode(h, b, &e);
    if (st == HEAT_LOADED && !why) why = check_owner(h, id, n_layers, n_expert, buf, sizeof buf);
    free(b);
    if (!why) return HEAT_LOADED;
    heat_table_free(h);
    sl_errf(warn, "heat file %s ignored: %s", path, why);
    return HEAT_IGNORED;
}

heat_status heat_load(heat_table *h, const char *path, const uint8_t *id, int n_layers, int n_expert,
                      sl_err *warn)
{
    bool unread;
    return load_file(h, path, id, n_layers, n_expert, &unread, warn);
}

/* ---- atomic replacement ---- */

static int make_parents(const char *path, sl_err *err)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return sl_errf(err, "%s: path too long", path);
    for (char *p = dir + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return sl_errf(err, "%s: cannot create directory: %s", dir, strerror(errno));
        *p = '/';
    }
    return 0;
}

/* Makes the rename durable; filesystems that cannot sync a directory are
 * left alone (the data itself was synced before the rename), an I/O error
 * is reported (the file is in place, but may not survive a crash). */
static int sync_dir(const char *path, sl_err *err)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int rc = sl_fsync_retry(fd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS
                 ? sl_errf(err, "%s: written, but the fsync of its directory %s failed: %s", path, dir, strerror(errno))
                 : 0;
    close(fd);
    return rc;
}

int heat_write(const heat_table *h, const char *path, sl_err *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp)
        return sl_errf(err, "%s: path too long", path);
    size_t len;
    uint8_t *b = encode(h, &len);
    if (!b) return sl_errf(err, "%s: out of memory", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(b);
        return sl_errf(err, "%s: cannot create a temporary file: %s", tmp, strerror(errno));
    }
    int rc = sl_write_full(fd, b, len, tmp, err);
    free(b);
    if (!rc && fchmod(fd, 0644) != 0) rc = sl_errf(err, "%s: chmod failed: %s", tmp, strerror(errno));
    if (!rc && sl_fsync_retry(fd) != 0) rc = sl_errf(err, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc) rc = sl_errf(err, "%s: close failed: %s", tmp, strerror(errno));
    if (!rc && sl_rename_retry(tmp, path) != 0) rc = sl_errf(err, "%s: rename to %s failed: %s", tmp, path, strerror(errno));
    if (rc) unlink(tmp);
    else rc = sync_dir(path, err);
    return rc;
}

void heat_merge(heat_table *into, const heat_table *delta, double half_life)
{
    double d = half_life > 0 ? pow(0.5, (double)delta->passes / half_life) : 1.0;
    size_t n = (size_t)into->n_layers * (size_t)into->n_expert;
    for (size_t i = 0; i < n; i++) into->count[i] = (float)(into->count[i] * d + delta->count[i]);
    into->weight = into->weight * d + delta->weight;
    into->passes += delta->passes;
    into->half_life = half_life > 0 ? half_life : 0;
    if (!into->created) into->created = delta->created;
    if (delta->updated > into->updated) into->updated = delta->updated;
}

/* An exclusive flock on "<path>.lock"; returns its fd. */
static int lock_heat(const char *path, sl_err *err)
{
    char lp[PATH_MAX];
    if (snprintf(lp, sizeof lp, "%s.lock", path) >= (int)sizeof lp) return sl_errf(err, "%s: path too long", path);
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return sl_errf(err, "%s: cannot open lock file: %s", lp, strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        sl_errf(err, "%s: cannot lock: %s", lp, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int heat_save_merge(const char *path, const heat_table *delta, double half_life, sl_err *warn)
{
    sl_err e;
    if (make_parents(path, &e)) return sl_errf(warn, "heat not saved: %s", e.msg);
    int lock = lock_heat(path, &e);
    if (lock < 0) return sl_errf(warn, "heat not saved: %s", e.msg);
    heat_table cur;
    int rc = 0;
    bool unread = false;
    heat_status st = load_file(&cur, path, delta->model_id, delta->n_layers, delta->n_expert, &unread, &e);
    if (st == HEAT_IGNORED && unread) {
        rc = -1; /* kept as it is: the next save tries again */
    } else if (st == HEAT_IGNORED) {
        sl_errf(warn, "%s; replacing it", e.msg);
        rc = 1;
    }
    if (rc >= 0 && st != HEAT_LOADED && heat_table_init(&cur, delta->model_id, delta->n_layers, delta->n_expert, &e))
        rc = -1;
    if (rc >= 0) {
        heat_merge(&cur, delta, half_life);
        cur.updated = (int64_t)time(NULL);
        if (!cur.created) cur.created = cur.updated;
        if (heat_write(&cur, path, &e)) rc = -1;
    }
    if (rc < 0) sl_errf(warn, "heat not saved: %s", e.msg);
    heat_table_free(&cur);
    close(lock);
    return rc;
}

int heat_reset(const char *path, sl_err *err)
{
    int lock = lock_heat(path, err);
    if (lock < 0) return -1;
    int rc = 0;
    if (unlink(path) != 0) rc = errno == ENOENT ? 1 : sl_errf(err, "%s: cannot delete: %s", path, strerror(errno));
    if (rc == 0) rc = sync_dir(path, err);
    close(lock);
    return rc;
}
