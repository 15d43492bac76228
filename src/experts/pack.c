/* Writing a pack: plan where every expert goes, then stream the experts out
 * of the GGUF into per-drive buffers and write those with large aligned
 * (O_DIRECT where the filesystem allows) writes.  Drive files are written
 * under temporary names, fsynced and renamed; the manifest is written last
 * the same way, so a crash never leaves a manifest pointing at partial
 * data (and a drive file rewritten later carries a new pack id, which the
 * old manifest refuses). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include "experts/pack.h"
#include "experts/pack_format.h"
#include "util/fileio.h"
#include "util/fault.h"

enum { WRITE_BUFFER = 8 << 20 };

static uint64_t align_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

typedef struct {
    int fd;
    char *tmp;
    uint8_t *buf;
    uint64_t cap, fill, pos; /* buffer capacity and fill; file offset of buf[0] */
    int direct;
} drive_out;

typedef struct {
    const gguf_file *g;
    const expert_layout *L;
    const pack_options *o;
    pack_manifest m;
    drive_out *out;
    char *manifest_tmp;
    uint64_t done, total;
    sl_err *err;
} writer;

int pack_drive_path(char *buf, size_t cap, const char *dir, const char *out, int d)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", out);
    int n = snprintf(buf, cap, "%s/%s.%d.data", dir, basename(tmp), d);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* ---- planning ---- */

static int plan_layers(writer *w)
{
    const expert_layout *L = w->L;
    pack_manifest *m = &w->m;
    m->n_layers = (uint32_t)L->n_layers;
    m->n_expert = (uint32_t)L->n_expert;
    m->data_offset = PACK_DRIVE_HEADER_BYTES;
    m->layer = calloc((size_t)L->n_layers, sizeof *m->layer);
    if (!m->layer) return sl_errf(w->err, "out of memory");
    for (int l = 0; l < L->n_layers; l++) {
        pack_layer *pl = &m->layer[l];
        uint64_t cur = 0;
        pl->n_parts = (uint32_t)L->layer[l].n_parts;
        for (int p = 0; p < L->layer[l].n_parts; p++) {
            const expert_part *ep = &L->layer[l].parts[p];
            int8_t kind = L->layer[l].part_kind[p];
            pl->part[p] = (pack_part){.gguf_file = ep->file, .kind = kind < 0 ? 0xffffffffu : (uint32_t)kind,
                                      .gguf_off = ep->off, .stride = ep->stride, .bytes = ep->bytes, .rec_off = cur};
            cur = align_to(cur + ep->bytes, PACK_PART_ALIGN);
        }
        pl->used_bytes = cur;
        uint64_t rb = align_to(cur, PACK_ALIGN);
        if (rb > m->record_bytes) m->record_bytes = rb;
        if (pl->n_parts) m->n_records += m->n_expert;
    }
    if (!m->n_records) return sl_errf(w->err, "%s: no routed experts to pack", w->g->path);
    if (m->record_bytes > (1ull << 30)) return sl_errf(w->err, "%s: an expert of over 1 GiB cannot be packed", w->g->path);
    m->rec = calloc(m->n_records, sizeof *m->rec);
    if (!m->rec) return sl_errf(w->err, "out of memory");
    uint32_t i = 0;
    for (uint32_t l = 0; l < m->n_layers; l++)
        for (uint32_t e = 0; m->layer[l].n_parts && e < m->n_expert; e++) m->rec[i++] = (pack_record){.layer = l, .expert = e};
    return 0;
}

typedef struct {
    double heat;
    uint32_t i;
} ranked;

static int by_heat(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->heat != y->heat) return x->heat > y->heat ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The order records are placed in: hottest first when heat is known (so
 * hot experts alternate drives), else model order (round-robin).  The
 * first HOT of that order are replicated; without heat an evenly spaced
 * fraction is. */
static int placement_order(writer *w, uint32_t *order, uint8_t *hot)
{
    const pack_manifest *m = &w->m;
    double f = w->o->replicate_hot;
    if (!w->o->heat) {
        for (uint32_t i = 0; i < m->n_records; i++) {
            order[i] = i;
            hot[i] = floor((i + 1) * f) > floor(i * f);
        }
        return 0;
    }
    ranked *r = malloc(m->n_records * sizeof *r);
    if (!r) return sl_errf(w->err, "out of memory");
    for (uint32_t i = 0; i < m->n_records; i++)
        r[i] = (ranked){w->o->heat[(uint64_t)m->rec[i].layer * m->n_expert + m->rec[i].expert], i};
    qsort(r, m->n_records, sizeof *r, by_heat);
    uint64_t n_hot = (uint64_t)llround(f * m->n_records);
    for (uint32_t k = 0; k < m->n_records; k++) order[k] = r[k].i, hot[r[k].i] = k < n_hot;
    free(r);
    return 0;
}

static uint32_t least_loaded(const uint64_t *bytes, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t d = 1; d < n; d++)
        if (bytes[d] < bytes[best]) best = d;
    return best;
}

/* The two drives for a replicated record: fewest bytes together, then the
 * pair used least so far.  Cycling through all pairs matters: the reader
 * balances a step's reads by choosing between an expert's two drives, and
 * if replicas always paired the same drives ({0,1}, {2,3}) a step whose
 * experts lean to one pair could not be evened out. */
static void pick_pair(const uint64_t *bytes, uint32_t n, uint32_t *uses, uint32_t *a, uint32_t *b)
{
    uint64_t best_sum = UINT64_MAX;
    uint32_t best_uses = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++) {
            uint64_t sum = bytes[i] + bytes[j];
            uint32_t u = uses[i * n + j];
            if (sum < best_sum || (sum == best_sum && u < best_uses)) best_sum = sum, best_uses = u, *a = i, *b = j;
        }
    uses[*a * n + *b]++;
}

/* Each record to the drive with the fewest bytes so far, hot ones to a
 * pair (pick_pair); then slots numbered in model order per drive. */
static int plan_drives(writer *w)
{
    pack_manifest *m = &w->m;
    uint32_t n = m->n_drives;
    uint32_t *order = malloc(m->n_records * sizeof *order), *uses = calloc((size_t)n * n, sizeof *uses);
    uint8_t *hot = malloc(m->n_records);
    uint64_t bytes[PACK_MAX_DRIVES] = {0};
    int rc = (!order || !hot || !uses) ? sl_errf(w->err, "out of memory") : placement_order(w, order, hot);
    for (uint32_t k = 0; !rc && k < m->n_records; k++) {
        pack_record *r = &m->rec[order[k]];
        r->n_copies = 1 + (hot[order[k]] && n > 1);
        if (r->n_copies == 2) pick_pair(bytes, n, uses, &r->copy[0].drive, &r->copy[1].drive);
        else r->copy[0].drive = least_loaded(bytes, n);
        for (uint32_t c = 0; c < r->n_copies; c++) bytes[r->copy[c].drive] += m->record_bytes;
    }
    for (uint32_t i = 0; !rc && i < m->n_records; i++)
        for (uint32_t c = 0; c < m->rec[i].n_copies; c++) {
            pack_drive *dr = &m->drive[m->rec[i].copy[c].drive];
            m->rec[i].copy[c].off = m->data_offset + (uint64_t)dr->n_records++ * m->record_bytes;
        }
    for (uint32_t d = 0; !rc && d < m->n_drives; d++) {
        m->drive[d].file_bytes = m->data_offset + (uint64_t)m->drive[d].n_records * m->record_bytes;
        w->total += m->drive[d].file_bytes - m->data_offset;
    }
    free(order);
    free(hot);
    free(uses);
    return rc;
}

static int plan_paths(writer *w, const char *out)
{
    pack_manifest *m = &w->m;
    m->n_drives = (uint32_t)w->o->n_drives;
    m->drive = calloc(m->n_drives, sizeof *m->drive);
    if (!m->drive) return sl_errf(w->err, "out of memory");
    for (uint32_t d = 0; d < m->n_drives; d++) {
        char abs[PATH_MAX], path[PATH_MAX];
        const char *dir = w->o->drives[d];
        struct stat st;
        if (!realpath(dir, abs) || stat(abs, &st) || !S_ISDIR(st.st_mode))
            return sl_errf(w->err, "drive %u: '%s' is not a directory", d, dir);
        if (pack_drive_path(path, sizeof path, abs, out, (int)d)) return sl_errf(w->err, "drive %u: path too long", d);
        if (!(m->drive[d].path = strdup(path))) return sl_errf(w->err, "out of memory");
    }
    return 0;
}

/* Drives sharing a filesystem need room for all their files together. */
static int check_space(writer *w)
{
    const pack_manifest *m = &w->m;
    for (uint32_t d = 0; d < m->n_drives; d++) {
        struct stat a, b;
        struct statvfs vs;
        if (stat(w->o->drives[d], &a) || statvfs(w->o->drives[d], &vs)) continue;
        uint64_t need = 0;
        for (uint32_t e = 0; e < m->n_drives; e++)
            if (!stat(w->o->drives[e], &b) && b.st_dev == a.st_dev) need += m->drive[e].file_bytes;
        uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
        if (need > avail)
            return sl_errf(w->err, "drive %u (%s): the pack needs %llu bytes there, %llu are free", d,
                           w->o->drives[d], (unsigned long long)need, (unsigned long long)avail);
    }
    return 0;
}

/* ---- writing ---- */

static int flush_drive(writer *w, uint32_t d)
{
    drive_out *o = &w->out[d];
    uint64_t done = 0;
    while (done < o->fill) {
        ssize_t n = sl_sys_pwrite(o->fd, o->buf + done, o->fill - done, (off_t)(o->pos + done));
        if (n < 0 && sl_errno_transient(errno)) continue;
        if (n < 0 && errno == EINVAL && o->direct) {
            /* the filesystem refused O_DIRECT after all: write through the cache */
            o->direct = 0;
            if (fcntl(o->fd, F_SETFL, fcntl(o->fd, F_GETFL) & ~O_DIRECT) == 0) continue;
        }
        if (n <= 0)
            return sl_errf(w->err, "%s: write of %llu bytes at offset %llu failed: %s", o->tmp,
                           (unsigned long long)(o->fill - done), (unsigned long long)(o->pos + done),
                           n < 0 ? strerror(errno) : "no progress");
        done += (uint64_t)n;
    }
    o->pos += o->fill;
    o->fill = 0;
    return 0;
}

/* Room for one record at the end of drive D's buffer. */
static uint8_t *record_space(writer *w, uint32_t d)
{
    drive_out *o = &w->out[d];
    if (o->fill + w->m.record_bytes > o->cap && flush_drive(w, d)) return NULL;
    uint8_t *p = o->buf + o->fill;
    o->fill += w->m.record_bytes;
    return p;
}

static int open_drives(writer *w)
{
    pack_manifest *m = &w->m;
    uint64_t cap = align_to(WRITE_BUFFER > m->record_bytes + PACK_ALIGN ? WRITE_BUFFER : m->record_bytes + PACK_ALIGN,
                            PACK_ALIGN);
    w->out = calloc(m->n_drives, sizeof *w->out);
    if (!w->out) return sl_errf(w->err, "out of memory");
    for (uint32_t d = 0; d < m->n_drives; d++) w->out[d].fd = -1;
    for (uint32_t d = 0; d < m->n_drives; d++) {
        drive_out *o = &w->out[d];
        size_t n = strlen(m->drive[d].path) + 5;
        if (!(o->tmp = malloc(n))) return sl_errf(w->err, "out of memory");
        snprintf(o->tmp, n, "%s.tmp", m->drive[d].path);
        int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
        o->direct = !w->o->buffered;
        o->fd = open(o->tmp, flags | (o->direct ? O_DIRECT : 0), 0644);
        if (o->fd < 0 && errno == EINVAL && o->direct) o->direct = 0, o->fd = open(o->tmp, flags, 0644);
        if (o->fd < 0) return sl_errf(w->err, "drive %u: cannot create %s: %s", d, o->tmp, strerror(errno));
        if (posix_memalign((void **)&o->buf, PACK_ALIGN, cap)) return sl_errf(w->err, "out of memory");
        o->cap = cap;
        pack_drive_header_encode(m, d, o->buf);
        o->fill = PACK_DRIVE_HEADER_BYTES;
    }
    return 0;
}

static int read_record(writer *w, const pack_record *r, uint8_t *dst)
{
    const pack_layer *pl = &w->m.layer[r->layer];
    memset(dst, 0, w->m.record_bytes);
    for (uint32_t p = 0; p < pl->n_parts; p++) {
        const pack_part *pt = &pl->part[p];
        const gguf_part *gp = &w->g->parts[pt->gguf_file];
        if (sl_pread_full(gp->fd, dst + pt->rec_off, pt->bytes, pt->gguf_off + (uint64_t)r->expert * pt->stride,
                          gp->path, w->err))
            return -1;
    }
    return 0;
}

/* Experts are read once: drop the layer's expert tensors from the page
 * cache so packing a model larger than RAM does not evict everything else. */
static void forget_layer(const writer *w, uint32_t l)
{
    const pack_layer *pl = &w->m.layer[l];
    for (uint32_t p = 0; p < pl->n_parts; p++)
        posix_fadvise(w->g->parts[pl->part[p].gguf_file].fd, (off_t)pl->part[p].gguf_off,
                      (off_t)(pl->part[p].stride * w->m.n_expert), POSIX_FADV_DONTNEED);
}

static int write_records(writer *w)
{
    pack_manifest *m = &w->m;
    for (uint32_t i = 0; i < m->n_records; i++) {
        pack_record *r = &m->rec[i];
        uint8_t *dst = record_space(w, r->copy[0].drive);
        if (!dst || read_record(w, r, dst)) return -1;
        r->xxh3 = XXH3_64bits(dst, m->layer[r->layer].used_bytes);
        for (uint32_t c = 1; c < r->n_copies; c++) {
            uint8_t *rep = record_space(w, r->copy[c].drive);
            if (!rep) return -1;
            memcpy(rep, dst, m->record_bytes);
        }
        w->done += m->record_bytes * r->n_copies;
        if (w->o->progress) w->o->progress(w->o->progress_ctx, w->done, w->total);
        if (i + 1 == m->n_records || m->rec[i + 1].layer != r->layer) forget_layer(w, r->layer);
    }
    return 0;
}

static int sync_dir_of(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    int fd = open(dirname(tmp), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = sl_fsync_retry(fd);
    close(fd);
    return rc;
}

static int finish_drives(writer *w)
{
    for (uint32_t d = 0; d < w->m.n_drives; d++) {
        drive_out *o = &w->out[d];
        if (flush_drive(w, d)) return -1;
        if (o->pos != w->m.drive[d].file_bytes)
            return sl_errf(w->err, "%s: wrote %llu bytes, planned %llu", o->tmp, (unsigned long long)o->pos,
                           (unsigned long long)w->m.drive[d].file_bytes);
        if (sl_fsync_retry(o->fd)) return sl_errf(w->err, "%s: fsync failed: %s", o->tmp, strerror(errno));
        close(o->fd);
        o->fd = -1;
        if (sl_rename_retry(o->tmp, w->m.drive[d].path))
            return sl_errf(w->err, "cannot rename %s to %s: %s", o->tmp, w->m.drive[d].path, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        sync_dir_of(w->m.drive[d].path);
    }
    return 0;
}

static int write_manifest(writer *w, const char *out)
{
    uint8_t *b;
    uint64_t len;
    if (pack_manifest_encode(&w->m, &b, &len, w->err)) return -1;
    size_t n = strlen(out) + 5;
    w->manifest_tmp = malloc(n);
    int fd = -1, rc = w->manifest_tmp ? 0 : sl_errf(w->err, "out of memory");
    if (!rc) snprintf(w->manifest_tmp, n, "%s.tmp", out);
    if (!rc && (fd = open(w->manifest_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        rc = sl_errf(w->err, "cannot create %s: %s", w->manifest_tmp, strerror(errno));
    if (!rc) rc = sl_write_full(fd, b, len, w->manifest_tmp, w->err);
    if (!rc && sl_fsync_retry(fd)) rc = sl_errf(w->err, "%s: fsync failed: %s", w->manifest_tmp, strerror(errno));
    if (fd >= 0) close(fd);
    if (!rc && sl_rename_retry(w->manifest_tmp, out))
        rc = sl_errf(w->err, "cannot rename %s to %s: %s", w->manifest_tmp, out, strerror(errno));
    if (!rc) free(w->manifest_tmp), w->manifest_tmp = NULL, sync_dir_of(out);
    free(b);
    return rc;
}

static void cleanup(writer *w)
{
    for (uint32_t d = 0; w->out && d < w->m.n_drives; d++) {
        drive_out *o = &w->out[d];
        if (o->fd >= 0) close(o->fd);
        if (o->tmp) unlink(o->tmp), free(o->tmp);
        free(o->buf);
    }
    if (w->manifest_tmp) unlink(w->manifest_tmp), free(w->manifest_tmp);
    free(w->out);
    pack_manifest_free(&w->m);
}

static int check_options(const pack_options *o, sl_err *err)
{
    if (o->n_drives < 1 || o->n_drives > PACK_MAX_DRIVES)
        return sl_errf(err, "a pack needs 1 to %d drives, got %d", PACK_MAX_DRIVES, o->n_drives);
    if (!(o->replicate_hot >= 0 && o->replicate_hot <= 1))
        return sl_errf(err, "the replicated fraction must be between 0 and 1, got %g", o->replicate_hot);
    if (o->replicate_hot > 0 && o->n_drives < 2) return sl_errf(err, "replicating experts needs at least 2 drives");
    return 0;
}

static void summarise(const writer *w, pack_summary *s)
{
    *s = (pack_summary){.records = w->m.n_records, .record_bytes = w->m.record_bytes, .direct = 1};
    for (uint32_t i = 0; i < w->m.n_records; i++) s->replicated += w->m.rec[i].n_copies > 1;
    for (uint32_t d = 0; d < w->m.n_drives; d++) {
        s->drive_bytes[d] = w->m.drive[d].file_bytes;
        s->drive_records[d] = w->m.drive[d].n_records;
        s->bytes_written += w->m.drive[d].file_bytes;
        s->direct &= w->out[d].direct;
    }
}

int pack_write(const gguf_file *g, const expert_layout *L, const char *out, const pack_options *o,
               pack_summary *sum, sl_err *err)
{
    if (check_options(o, err)) return -1;
    writer w = {.g = g, .L = L, .o = o, .err = err};
    int rc = plan_paths(&w, out);
    if (!rc) rc = plan_layers(&w);
    if (!rc) rc = plan_drives(&w);
    if (!rc) rc = pack_model_id(g, w.m.model_id, err);
    if (!rc && getrandom(w.m.pack_id, 16, 0) != 16) rc = sl_errf(err, "getrandom failed: %s", strerror(errno));
    if (!rc) rc = check_space(&w);
    if (!rc) rc = open_drives(&w);
    if (!rc) rc = write_records(&w);
    if (!rc) rc = finish_drives(&w);
    if (!rc) rc = write_manifest(&w, out);
    if (!rc && sum) summarise(&w, sum);
    cleanup(&w);
    return rc;
}
