/* Checking a whole pack offline (`sluice pack --check`): every copy of every
 * record is read and its xxh3 compared with the manifest, drive by drive in
 * file order so the reads are sequential.  Run after copying a pack to its
 * drives, or to find a bad drive before --verify has to. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "experts/pack.h"
#include "experts/pack_format.h"
#include "util/fileio.h"

static void note(pack_check_result *r, uint8_t *badc, uint32_t i, const char *fmt, const char *path, uint32_t d,
                 const pack_record *rec, uint64_t off, const char *why)
{
    r->bad++;
    badc[i]++;
    if (r->first_bad[0]) return;
    snprintf(r->first_bad, sizeof r->first_bad, fmt, d, path, rec->expert, rec->layer, (unsigned long long)off, why);
}

/* Checks the records of drive D in slot order. */
static int check_drive(const pack_manifest *m, uint32_t d, const uint32_t *rec_of_slot, uint8_t *buf, uint8_t *badc,
                       pack_check_result *r, const pack_check_opts *o, sl_err *err)
{
    static const char FMT[] = "drive %u, %.1000s: expert %u of layer %u at offset %llu: %.900s";
    const pack_drive *dr = &m->drive[d];
    int fd = open(dr->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) fd = open(dr->path, O_RDONLY | O_CLOEXEC);
    int missing = fd < 0 ? errno : 0;
    if (fd >= 0 && pack_drive_header_check(m, d, fd, err)) {
        close(fd);
        return -1;
    }
    for (uint32_t k = 0; k < dr->n_records; k++) {
        uint32_t i = rec_of_slot[k];
        const pack_record *rec = &m->rec[i];
        uint64_t off = m->data_offset + (uint64_t)k * m->record_bytes, used = m->layer[rec->layer].used_bytes;
        r->copies++;
        sl_err e;
        if (missing) note(r, badc, i, FMT, dr->path, d, rec, off, strerror(missing));
        else if (sl_pread_full(fd, buf, pack_read_bytes(m, (int)rec->layer), off, dr->path, &e))
            note(r, badc, i, FMT, dr->path, d, rec, off, e.msg);
        else if (XXH3_64bits(buf, used) != rec->xxh3) note(r, badc, i, FMT, dr->path, d, rec, off, "xxh3 checksum mismatch");
        else r->bytes += used;
        if (o->progress) o->progress(o->progress_ctx, r->copies, r->total_copies);
    }
    if (fd >= 0) close(fd);
    return 0;
}

int pack_check(const char *manifest, const gguf_file *g, const pack_check_opts *o, pack_check_result *r, sl_err *err)
{
    static const pack_check_opts none;
    pack_manifest m;
    *r = (pack_check_result){0};
    if (!o) o = &none;
    if (pack_manifest_read(&m, manifest, err)) return -1;
    uint8_t id[16];
    int rc = g ? pack_model_id(g, id, err) : 0;
    if (!rc && g && memcmp(id, m.model_id, 16))
        rc = sl_errf(err, "pack %s was made from another model than %s", manifest, g->path);
    uint8_t *buf = NULL;
    uint32_t *slot_rec = NULL;
    uint8_t *badc = NULL;
    if (!rc && (posix_memalign((void **)&buf, PACK_ALIGN, m.record_bytes) ||
                !(slot_rec = malloc((m.n_records * (size_t)PACK_MAX_COPIES + 1) * sizeof *slot_rec)) ||
                !(badc = calloc(m.n_records + 1, 1))))
        rc = sl_errf(err, "out of memory");
    r->records = m.n_records;
    for (uint32_t d = 0; d < m.n_drives; d++) r->total_copies += m.drive[d].n_records;
    for (uint32_t d = 0; !rc && d < m.n_drives; d++) {
        for (uint32_t i = 0; i < m.n_records; i++)
            for (uint32_t c = 0; c < m.rec[i].n_copies; c++)
                if (m.rec[i].copy[c].drive == d) slot_rec[(m.rec[i].copy[c].off - m.data_offset) / m.record_bytes] = i;
        rc = check_drive(&m, d, slot_rec, buf, badc, r, o, err);
    }
    for (uint32_t i = 0; !rc && i < m.n_records; i++) r->lost += badc[i] == m.rec[i].n_copies;
    free(badc);
    free(buf);
    free(slot_rec);
    pack_manifest_free(&m);
    return rc;
}
