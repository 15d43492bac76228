/* Experts read from a multi-drive pack.  One expert is one record on one or
 * two drives; its read is cut into the store's chunks and each chunk goes
 * to the drive holding it that the scheduler (sched.h) expects to finish
 * first, so a replicated expert is assembled from both drives at once and
 * slow or busy drives get less.  Completions feed the scheduler's online
 * rate measurement.
 *
 * Failures fall back to another copy: a failed read marks that copy bad
 * for that expert and the whole expert is read again from the remaining
 * copies; a checksum mismatch (with verify on) does the same, reading one
 * whole copy at a time when the failed read was assembled from two drives
 * (so the bad copy is known).  Copies stay marked bad for the run.  A
 * drive that keeps failing is avoided wherever another copy exists.  The
 * file index the store sees is the drive index. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "experts/pack.h"
#include "experts/pack_format.h"
#include "experts/sched.h"
#include "util/clock.h"

enum { FAILING_AFTER = 8 }; /* consecutive failed reads before a drive is avoided */

typedef struct {
    expert_source base;
    pack_manifest m;
    char *pack_path;
    int *fd;                 /* [n_drives]; -1 if missing */
    uint32_t **slot_rec;     /* [n_drives][slot]: record held in that slot */
    uint32_t *fail_run;      /* [n_drives]: consecutive failed reads */
    uint64_t (*part_off)[EXPERT_MAX_PARTS]; /* [n_layers][layout part]: offset in record */
    uint8_t *used, *bad;     /* [n_records]: copy bits of the last plan; copies known bad */
    uint32_t chunk;          /* the chunk size plans use (for completion lengths) */
    int verify;
    drive_sched sched;
    pack_source_stats st;
} pack_source;

static const pack_record *record_of(const pack_source *ps, int layer, int expert)
{
    int32_t i = ps->m.rec_of[(int64_t)layer * ps->m.n_expert + expert];
    return &ps->m.rec[i];
}

static uint32_t rec_index(const pack_source *ps, const pack_record *r) { return (uint32_t)(r - ps->m.rec); }

/* ---- planning ---- */

/* Copies a read may use: present, not known bad for this record, and not
 * on a failing drive unless nothing else is left.  Returns the count. */
static int candidates(const pack_source *ps, const pack_record *r, uint32_t only, uint32_t *drive, int *copy)
{
    int n = 0, healthy = 0;
    uint8_t bad = ps->bad[rec_index(ps, r)];
    for (uint32_t c = 0; c < r->n_copies; c++) {
        uint32_t d = r->copy[c].drive;
        if (ps->fd[d] < 0 || (bad >> c & 1) || !(only >> c & 1)) continue;
        healthy += ps->fail_run[d] < FAILING_AFTER;
        drive[n] = d, copy[n++] = (int)c;
    }
    if (healthy && healthy < n) { /* drop failing drives */
        int k = 0;
        for (int i = 0; i < n; i++)
            if (ps->fail_run[drive[i]] < FAILING_AFTER) drive[k] = drive[i], copy[k++] = copy[i];
        n = k;
    }
    return n;
}

static int no_copy_left(const pack_source *ps, const pack_record *r, sl_err *err)
{
    const pack_copy *c = &r->copy[0];
    return sl_errf(err, "pack %s: no readable copy left of expert %u of layer %u (drive %u, %s, offset %llu%s)",
                   ps->pack_path, r->expert, r->layer, c->drive, ps->m.drive[c->drive].path,
                   (unsigned long long)c->off, r->n_copies > 1 ? ", and its replica" : "");
}

/* Plans the record's reads over the copies in mask ONLY. */
static int plan_copies(pack_source *ps, const pack_record *r, uint32_t only, uint8_t *base, uint32_t chunk,
                       read_plan *rp, sl_err *err)
{
    uint32_t drive[PACK_MAX_COPIES];
    int copy[PACK_MAX_COPIES];
    int n = candidates(ps, r, only, drive, copy);
    if (!n) return no_copy_left(ps, r, err);
    uint64_t len = pack_read_bytes(&ps->m, (int)r->layer);
    if ((len + chunk - 1) / chunk > SOURCE_MAX_READS)
        return sl_errf(err, "expert %u of layer %u needs more than %d reads; raise the chunk size", r->expert, r->layer,
                       SOURCE_MAX_READS);
    uint8_t used = 0;
    ps->chunk = chunk;
    rp->n = 0, rp->expect = len;
    for (uint64_t o = 0; o < len; o += chunk) {
        uint32_t n_bytes = (uint32_t)(len - o < chunk ? len - o : chunk);
        int d = sched_pick(&ps->sched, drive, n, n_bytes), c = 0;
        while (drive[c] != (uint32_t)d) c++;
        used |= (uint8_t)(1u << copy[c]);
        sched_submit(&ps->sched, d, n_bytes);
        if (n > 1) ps->st.flexible_bytes[d] += n_bytes;
        rp->file[rp->n] = (uint32_t)d;
        rp->req[rp->n++] = (io_req){.fd = ps->fd[d], .off = r->copy[copy[c]].off + o, .len = n_bytes, .dst = base + o};
    }
    ps->used[rec_index(ps, r)] = used;
    return 0;
}

static int pk_plan(expert_source *s, int layer, int expert, uint8_t *base, uint32_t chunk, read_plan *rp, sl_err *err)
{
    pack_source *ps = (pack_source *)s;
    return plan_copies(ps, record_of(ps, layer, expert), 0xff, base, chunk, rp, err);
}

/* The load failed: mark what is known bad, then read the whole expert again
 * from what is left.  After a checksum mismatch on a read assembled from
 * two copies, which copy is bad is unknown, so one whole copy is tried. */
static int pk_replan(expert_source *s, int layer, int expert, uint8_t *base, uint32_t chunk, int32_t code,
                     uint32_t file, int attempt, read_plan *rp, sl_err *err)
{
    pack_source *ps = (pack_source *)s;
    const pack_record *r = record_of(ps, layer, expert);
    uint32_t i = rec_index(ps, r);
    (void)attempt;
    uint8_t used = ps->used[i];
    for (uint32_t c = 0; c < r->n_copies; c++)
        if (code != -EBADMSG ? r->copy[c].drive == file : used == (1u << c)) ps->bad[i] |= (uint8_t)(1u << c);
    uint32_t drive[PACK_MAX_COPIES];
    int copy[PACK_MAX_COPIES];
    int n = candidates(ps, r, 0xff, drive, copy);
    if (!n) return 0;
    ps->st.fallbacks++;
    uint32_t only = code == -EBADMSG && (used & (used - 1)) ? 1u << copy[0] : 0xff;
    return plan_copies(ps, r, only, base, chunk, rp, err) ? -1 : 1;
}

/* ---- completions and checks ---- */

/* A completion's length follows from where it is: chunks are cut from the
 * start of their record at the plan's chunk size. */
static void pk_on_complete(expert_source *s, uint32_t f, uint64_t off, int64_t res, double busy_s)
{
    pack_source *ps = (pack_source *)s;
    const pack_manifest *m = &ps->m;
    if (f >= m->n_drives || off < m->data_offset || !ps->chunk) return;
    uint64_t slot = (off - m->data_offset) / m->record_bytes;
    if (slot >= m->drive[f].n_records) return;
    const pack_record *r = &m->rec[ps->slot_rec[f][slot]];
    uint64_t in_rec = off - m->data_offset - slot * m->record_bytes, len = pack_read_bytes(m, (int)r->layer);
    if (in_rec >= len) return;
    uint64_t n = len - in_rec < ps->chunk ? len - in_rec : ps->chunk;
    sched_complete(&ps->sched, (int)f, n, busy_s);
    if (res > 0) ps->st.bytes[f] += (uint64_t)res;
    ps->st.reads[f]++;
    if (res < 0) ps->st.errors[f]++, ps->fail_run[f]++;
    else ps->fail_run[f] = 0;
}

static void pk_on_drop(expert_source *s, uint32_t f, uint32_t len)
{
    pack_source *ps = (pack_source *)s;
    if (f < ps->m.n_drives) sched_drop(&ps->sched, (int)f, len);
}

static void describe_copies(const pack_source *ps, const pack_record *r, uint8_t used, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (uint32_t c = 0; c < r->n_copies && n < cap; c++) {
        if (!(used >> c & 1)) continue;
        const pack_copy *cp = &r->copy[c];
        int k = snprintf(buf + n, cap - n, "%sdrive %u, %s, offset %llu", n ? "; " : "", cp->drive,
                         ps->m.drive[cp->drive].path, (unsigned long long)cp->off);
        if (k > 0) n += (size_t)k;
    }
}

static int pk_check(expert_source *s, int layer, int expert, const uint8_t *base, sl_err *err)
{
    pack_source *ps = (pack_source *)s;
    if (!ps->verify) return 0;
    const pack_record *r = record_of(ps, layer, expert);
    uint64_t used_bytes = ps->m.layer[layer].used_bytes;
    double t0 = sl_now();
    uint64_t h = XXH3_64bits(base, used_bytes);
    ps->st.verify_s += sl_now() - t0;
    ps->st.verified++;
    ps->st.verify_bytes += used_bytes;
    if (h == r->xxh3) return 0;
    uint8_t used = ps->used[rec_index(ps, r)];
    char where[1024];
    describe_copies(ps, r, used, where, sizeof where);
    for (uint32_t c = 0; c < r->n_copies; c++)
        if (used >> c & 1) ps->st.errors[r->copy[c].drive]++;
    return sl_errf(err, "xxh3 checksum mismatch in the record of expert %d of layer %d (%s): expected %016llx, got %016llx",
                   expert, layer, where, (unsigned long long)r->xxh3, (unsigned long long)h);
}

/* ---- the rest of the source interface ---- */

static uint64_t pk_slot_bytes(const expert_source *s)
{
    const pack_source *ps = (const pack_source *)s;
    uint64_t best = 0;
    for (int l = 0; l < s->L->n_layers; l++)
        if (s->L->layer[l].n_parts && pack_read_bytes(&ps->m, l) > best) best = pack_read_bytes(&ps->m, l);
    return best;
}

static void pk_view(const expert_source *s, int layer, int expert, const uint8_t *base, expert_view *v)
{
    const pack_source *ps = (const pack_source *)s;
    v->id = expert;
    for (int p = 0; p < s->L->layer[layer].n_parts; p++) v->parts[p] = base + ps->part_off[layer][p];
}

static const char *pk_path(const expert_source *s, uint32_t f) { return ((const pack_source *)s)->m.drive[f].path; }
static int pk_fd(const expert_source *s, uint32_t f) { return ((const pack_source *)s)->fd[f]; }
static uint64_t pk_size(const expert_source *s, uint32_t f) { return ((const pack_source *)s)->m.drive[f].file_bytes; }

static void pk_destroy(expert_source *s)
{
    pack_source *ps = (pack_source *)s;
    for (uint32_t d = 0; d < ps->m.n_drives; d++) {
        if (ps->fd && ps->fd[d] >= 0) close(ps->fd[d]);
        if (ps->slot_rec) free(ps->slot_rec[d]);
    }
    free(ps->fd), free(ps->slot_rec), free(ps->fail_run), free(ps->part_off), free(ps->used), free(ps->bad);
    free(ps->pack_path);
    sched_free(&ps->sched);
    pack_manifest_free(&ps->m);
    free(ps);
}

static const expert_source_ops PACK_SOURCE_OPS = {
    .slot_bytes = pk_slot_bytes, .plan = pk_plan,       .view = pk_view,     .check = pk_check,
    .file_path = pk_path,        .file_fd = pk_fd,      .file_size = pk_size, .destroy = pk_destroy,
    .on_complete = pk_on_complete, .on_drop = pk_on_drop, .replan = pk_replan,
};

void source_pack_stats(const expert_source *s, pack_source_stats *out)
{
    const pack_source *ps = (const pack_source *)s;
    *out = ps->st;
    for (int d = 0; d < ps->st.n_drives; d++) {
        out->rate[d] = ps->sched.d[d].samples ? ps->sched.d[d].rate : 0;
        out->busy_s[d] = ps->sched.d[d].busy_total;
    }
}

/* ---- opening ---- */

/* Every part of the layout must be a part the pack holds. */
static int match_layout(pack_source *ps, const char *path, sl_err *err)
{
    const expert_layout *L = ps->base.L;
    const pack_manifest *m = &ps->m;
    if ((int)m->n_layers != L->n_layers || (int)m->n_expert != L->n_expert)
        return sl_errf(err, "pack %s has %u layers x %u experts, the model %d x %d", path, m->n_layers, m->n_expert,
                       L->n_layers, L->n_expert);
    for (int l = 0; l < L->n_layers; l++)
        for (int p = 0; p < L->layer[l].n_parts; p++) {
            const expert_part *ep = &L->layer[l].parts[p];
            const pack_layer *pl = &m->layer[l];
            uint32_t q = 0;
            while (q < pl->n_parts && (pl->part[q].gguf_file != ep->file || pl->part[q].gguf_off != ep->off ||
                                       pl->part[q].stride != ep->stride || pl->part[q].bytes != ep->bytes))
                q++;
            if (q == pl->n_parts)
                return sl_errf(err, "pack %s does not hold expert tensor %d of layer %d (GGUF offset %llu); repack the model",
                               path, p, l, (unsigned long long)ep->off);
            ps->part_off[l][p] = pl->part[q].rec_off;
        }
    return 0;
}

/* Missing drive files are fine while every record has a copy elsewhere. */
static int open_drive(pack_source *ps, uint32_t d, sl_err *err)
{
    const char *path = ps->m.drive[d].path;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) ps->base.direct = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
        ps->st.missing[d] = 1;
        return 0;
    }
    if (fd < 0) return sl_errf(err, "pack drive %u: cannot open %s: %s", d, path, strerror(errno));
    ps->fd[d] = fd;
    return pack_drive_header_check(&ps->m, d, fd, err);
}

static int check_reachable(const pack_source *ps, const char *path, sl_err *err)
{
    for (uint32_t i = 0; i < ps->m.n_records; i++) {
        const pack_record *r = &ps->m.rec[i];
        uint32_t c = 0;
        while (c < r->n_copies && ps->fd[r->copy[c].drive] < 0) c++;
        if (c < r->n_copies) continue;
        const pack_copy *cp = &r->copy[0];
        return sl_errf(err, "pack %s: drive %u file %s is missing, and expert %u of layer %u (at offset %llu there) has no other copy",
                       path, cp->drive, ps->m.drive[cp->drive].path, r->expert, r->layer, (unsigned long long)cp->off);
    }
    return 0;
}

static int alloc_tables(pack_source *ps, sl_err *err)
{
    pack_manifest *m = &ps->m;
    ps->fd = malloc(m->n_drives * sizeof *ps->fd);
    ps->slot_rec = calloc(m->n_drives, sizeof *ps->slot_rec);
    ps->fail_run = calloc(m->n_drives, sizeof *ps->fail_run);
    ps->part_off = calloc(m->n_layers, sizeof *ps->part_off);
    ps->used = calloc(m->n_records, 1);
    ps->bad = calloc(m->n_records, 1);
    if (!ps->fd || !ps->slot_rec || !ps->fail_run || !ps->part_off || !ps->used || !ps->bad) return sl_errf(err, "out of memory");
    for (uint32_t d = 0; d < m->n_drives; d++) {
        ps->fd[d] = -1;
        if (!(ps->slot_rec[d] = calloc(m->drive[d].n_records + 1, sizeof **ps->slot_rec))) return sl_errf(err, "out of memory");
    }
    for (uint32_t i = 0; i < m->n_records; i++)
        for (uint32_t c = 0; c < m->rec[i].n_copies; c++) {
            const pack_copy *cp = &m->rec[i].copy[c];
            ps->slot_rec[cp->drive][(cp->off - m->data_offset) / m->record_bytes] = i;
        }
    ps->st.n_drives = (int)m->n_drives;
    return sched_init(&ps->sched, (int)m->n_drives, err);
}

static int check_model(const pack_source *ps, const char *path, sl_err *err)
{
    uint8_t id[16];
    if (pack_model_id(ps->base.L->g, id, err)) return -1;
    if (memcmp(id, ps->m.model_id, 16))
        return sl_errf(err, "pack %s was made from another model (or %s changed since); repack it", path,
                       ps->base.L->g->path);
    return 0;
}

int source_pack_create(expert_source **out, const expert_layout *L, const char *pack_path,
                       const pack_source_opts *opts, sl_err *err)
{
    pack_source *ps = calloc(1, sizeof *ps);
    if (!ps) return sl_errf(err, "out of memory");
    ps->base = (expert_source){.ops = &PACK_SOURCE_OPS, .L = L, .direct = 1};
    ps->verify = opts && opts->verify;
    int rc = pack_manifest_read(&ps->m, pack_path, err);
    if (!rc) ps->base.n_files = (int)ps->m.n_drives;
    if (!rc) rc = (ps->pack_path = strdup(pack_path)) ? 0 : sl_errf(err, "out of memory");
    if (!rc) rc = alloc_tables(ps, err);
    if (!rc) rc = check_model(ps, pack_path, err);
    if (!rc) rc = match_layout(ps, pack_path, err);
    for (uint32_t d = 0; !rc && d < ps->m.n_drives; d++) rc = open_drive(ps, d, err);
    if (!rc) rc = check_reachable(ps, pack_path, err);
    if (rc) {
        pk_destroy(&ps->base);
        return -1;
    }
    *out = &ps->base;
    return 0;
}
