/* Pack manifest and drive-header encoding (docs/PACK.md has the byte
 * layout).  All integers are little-endian and written byte by byte, so the
 * files are the same on every host.  Reading trusts nothing: the trailer
 * checksum, then every count, offset and size is checked before use. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "experts/pack.h"
#include "experts/pack_format.h"
#include "experts/layout.h"
#include "util/fileio.h"

static const char MANIFEST_MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'P', 'K'};
static const char DRIVE_MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'D', 'R'};
enum { MAX_MANIFEST = 1 << 30, MAX_PATH_LEN = 4095, NO_DRIVE = -1 };

void pk_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
void pk_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
uint32_t pk_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
uint64_t pk_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

uint64_t pack_read_bytes(const pack_manifest *m, int layer)
{
    return (m->layer[layer].used_bytes + PACK_ALIGN - 1) & ~(uint64_t)(PACK_ALIGN - 1);
}

/* ---- encoding ---- */

static uint64_t drive_table_bytes(const pack_manifest *m)
{
    uint64_t n = 0;
    for (uint32_t d = 0; d < m->n_drives; d++) n += pad8(16 + strlen(m->drive[d].path));
    return n;
}

static void encode_header(const pack_manifest *m, uint8_t *b, uint64_t layer_off, uint64_t rec_off, uint64_t total)
{
    memcpy(b, MANIFEST_MAGIC, 8);
    pk_put_u32(b + 8, PACK_VERSION);
    pk_put_u32(b + 12, PACK_HEADER_BYTES);
    memcpy(b + 16, m->pack_id, 16);
    memcpy(b + 32, m->model_id, 16);
    pk_put_u32(b + 48, m->n_layers);
    pk_put_u32(b + 52, m->n_expert);
    pk_put_u32(b + 56, m->n_drives);
    pk_put_u32(b + 60, m->n_records);
    pk_put_u64(b + 64, m->record_bytes);
    pk_put_u64(b + 72, m->data_offset);
    pk_put_u64(b + 80, PACK_HEADER_BYTES);
    pk_put_u64(b + 88, layer_off);
    pk_put_u64(b + 96, rec_off);
    pk_put_u64(b + 104, total);
}

static void encode_layer(const pack_layer *l, uint8_t *b)
{
    pk_put_u32(b, l->n_parts);
    pk_put_u64(b + 8, l->used_bytes);
    for (uint32_t p = 0; p < l->n_parts; p++) {
        const pack_part *pt = &l->part[p];
        uint8_t *q = b + 16 + PACK_PART_ENTRY_BYTES * p;
        pk_put_u32(q, pt->gguf_file);
        pk_put_u32(q + 4, pt->kind);
        pk_put_u64(q + 8, pt->gguf_off);
        pk_put_u64(q + 16, pt->stride);
        pk_put_u64(q + 24, pt->bytes);
        pk_put_u64(q + 32, pt->rec_off);
    }
}

static void encode_record(const pack_record *r, uint8_t *b)
{
    pk_put_u32(b, r->layer);
    pk_put_u32(b + 4, r->expert);
    pk_put_u64(b + 8, r->xxh3);
    pk_put_u32(b + 16, r->n_copies);
    for (int c = 0; c < PACK_MAX_COPIES; c++) {
        int on = c < (int)r->n_copies;
        pk_put_u32(b + 20 + 16 * c, on ? r->copy[c].drive : 0xffffffffu);
        pk_put_u64(b + 24 + 16 * c, on ? r->copy[c].off : 0);
    }
}

int pack_manifest_encode(const pack_manifest *m, uint8_t **out, uint64_t *len, sl_err *err)
{
    uint64_t layer_off = PACK_HEADER_BYTES + drive_table_bytes(m);
    uint64_t rec_off = layer_off + (uint64_t)m->n_layers * PACK_LAYER_ENTRY_BYTES;
    uint64_t total = rec_off + (uint64_t)m->n_records * PACK_RECORD_ENTRY_BYTES + 8;
    uint8_t *b = calloc(1, total);
    if (!b) return sl_errf(err, "out of memory for a %llu-byte manifest", (unsigned long long)total);
    encode_header(m, b, layer_off, rec_off, total);
    uint8_t *q = b + PACK_HEADER_BYTES;
    for (uint32_t d = 0; d < m->n_drives; d++) {
        uint32_t n = (uint32_t)strlen(m->drive[d].path);
        pk_put_u64(q, m->drive[d].file_bytes);
        pk_put_u32(q + 8, m->drive[d].n_records);
        pk_put_u32(q + 12, n);
        memcpy(q + 16, m->drive[d].path, n);
        q += pad8(16 + n);
    }
    for (uint32_t l = 0; l < m->n_layers; l++) encode_layer(&m->layer[l], b + layer_off + (uint64_t)l * PACK_LAYER_ENTRY_BYTES);
    for (uint32_t r = 0; r < m->n_records; r++) encode_record(&m->rec[r], b + rec_off + (uint64_t)r * PACK_RECORD_ENTRY_BYTES);
    pk_put_u64(b + total - 8, XXH3_64bits(b, total - 8));
    *out = b;
    *len = total;
    return 0;
}

/* ---- decoding ---- */

typedef struct {
    const uint8_t *b;
    uint64_t len;
    const char *path;
    sl_err *err;
} reader;

static int bad(const reader *r, const char *what, unsigned long long v)
{
    return sl_errf(r->err, "%s: not a usable sluice pack manifest: %s (%llu)", r->path, what, v);
}

static int decode_header(pack_manifest *m, const reader *r, uint64_t *layer_off, uint64_t *rec_off)
{
    const uint8_t *b = r->b;
    if (memcmp(b, MANIFEST_MAGIC, 8)) return sl_errf(r->err, "%s: not a sluice pack manifest (bad magic)", r->path);
    if (pk_get_u32(b + 8) != PACK_VERSION) return bad(r, "unsupported version", pk_get_u32(b + 8));
    if (pk_get_u32(b + 12) != PACK_HEADER_BYTES) return bad(r, "header size", pk_get_u32(b + 12));
    memcpy(m->pack_id, b + 16, 16);
    memcpy(m->model_id, b + 32, 16);
    m->n_layers = pk_get_u32(b + 48);
    m->n_expert = pk_get_u32(b + 52);
    m->n_drives = pk_get_u32(b + 56);
    m->n_records = pk_get_u32(b + 60);
    m->record_bytes = pk_get_u64(b + 64);
    m->data_offset = pk_get_u64(b + 72);
    *layer_off = pk_get_u64(b + 88);
    *rec_off = pk_get_u64(b + 96);
    if (m->n_layers < 1 || m->n_layers > 65536) return bad(r, "layer count", m->n_layers);
    if (m->n_expert < 1 || m->n_expert > 65536) return bad(r, "expert count", m->n_expert);
    if ((uint64_t)m->n_layers * m->n_expert > (1u << 26)) return bad(r, "layers x experts", (uint64_t)m->n_layers * m->n_expert);
    if (m->n_drives < 1 || m->n_drives > PACK_MAX_DRIVES) return bad(r, "drive count", m->n_drives);
    if ((uint64_t)m->n_records > (uint64_t)m->n_layers * m->n_expert) return bad(r, "record count", m->n_records);
    if (!m->record_bytes || m->record_bytes % PACK_ALIGN || m->record_bytes > (1ull << 30))
        return bad(r, "record size", m->record_bytes);
    if (m->data_offset != PACK_DRIVE_HEADER_BYTES) return bad(r, "data offset", m->data_offset);
    if (pk_get_u64(b + 80) != PACK_HEADER_BYTES) return bad(r, "drive table offset", pk_get_u64(b + 80));
    if (pk_get_u64(b + 104) != r->len) return bad(r, "total size field vs file size", pk_get_u64(b + 104));
    uint64_t layer_end = *layer_off + (uint64_t)m->n_layers * PACK_LAYER_ENTRY_BYTES;
    if (*layer_off < PACK_HEADER_BYTES || *layer_off % 8 || layer_end > r->len) return bad(r, "layer table offset", *layer_off);
    if (*rec_off != layer_end || *rec_off + (uint64_t)m->n_records * PACK_RECORD_ENTRY_BYTES + 8 != r->len)
        return bad(r, "record table offset", *rec_off);
    return 0;
}

static int decode_drives(pack_manifest *m, const reader *r, uint64_t end)
{
    m->drive = calloc(m->n_drives, sizeof *m->drive);
    if (!m->drive) return sl_errf(r->err, "out of memory");
    uint64_t q = PACK_HEADER_BYTES;
    for (uint32_t d = 0; d < m->n_drives; d++) {
        if (q + 16 > end) return bad(r, "drive table overruns", d);
        pack_drive *dr = &m->drive[d];
        dr->file_bytes = pk_get_u64(r->b + q);
        dr->n_records = pk_get_u32(r->b + q + 8);
        uint32_t n = pk_get_u32(r->b + q + 12);
        if (n < 1 || n > MAX_PATH_LEN || q + 16 + n > end) return bad(r, "drive path length", n);
        if (dr->n_records > m->n_records * (uint64_t)PACK_MAX_COPIES) return bad(r, "drive record count", dr->n_records);
        if (dr->file_bytes != m->data_offset + (uint64_t)dr->n_records * m->record_bytes)
            return bad(r, "drive file size", dr->file_bytes);
        dr->path = malloc(n + 1);
        if (!dr->path) return sl_errf(r->err, "out of memory");
        memcpy(dr->path, r->b + q + 16, n);
        dr->path[n] = 0;
        if (strlen(dr->path) != n) return bad(r, "NUL in drive path", d);
        q += pad8(16 + n);
    }
    return q == end ? 0 : bad(r, "drive table size", q);
}

static int decode_layer(pack_manifest *m, const reader *r, uint32_t l, const uint8_t *b)
{
    pack_layer *ly = &m->layer[l];
    ly->n_parts = pk_get_u32(b);
    ly->used_bytes = pk_get_u64(b + 8);
    if (ly->n_parts > EXPERT_MAX_PARTS) return bad(r, "parts in a layer", ly->n_parts);
    if (ly->used_bytes > m->record_bytes || ly->used_bytes % PACK_PART_ALIGN || (ly->n_parts && !ly->used_bytes))
        return bad(r, "layer record bytes", ly->used_bytes);
    uint64_t end = 0;
    for (uint32_t p = 0; p < ly->n_parts; p++) {
        const uint8_t *q = b + 16 + PACK_PART_ENTRY_BYTES * p;
        pack_part *pt = &ly->part[p];
        *pt = (pack_part){.gguf_file = pk_get_u32(q), .kind = pk_get_u32(q + 4), .gguf_off = pk_get_u64(q + 8),
                          .stride = pk_get_u64(q + 16), .bytes = pk_get_u64(q + 24), .rec_off = pk_get_u64(q + 32)};
        if (pt->kind >= EXPERT_PART_KINDS && pt->kind != 0xffffffffu) return bad(r, "part kind", pt->kind);
        if (!pt->bytes || pt->rec_off % PACK_PART_ALIGN || pt->rec_off < end || pt->bytes > ly->used_bytes ||
            pt->rec_off > ly->used_bytes - pt->bytes)
            return bad(r, "part placement in record, layer", l);
        end = pt->rec_off + pt->bytes;
    }
    return 0;
}

/* Marks record slot SLOT of drive D used; every slot must be used once. */
static int claim_slot(const pack_manifest *m, const reader *r, uint8_t **used, const pack_copy *c)
{
    if (c->drive >= m->n_drives) return bad(r, "record drive", c->drive);
    const pack_drive *dr = &m->drive[c->drive];
    if (c->off < m->data_offset || (c->off - m->data_offset) % m->record_bytes ||
        c->off > dr->file_bytes - m->record_bytes)
        return bad(r, "record offset", c->off);
    uint64_t slot = (c->off - m->data_offset) / m->record_bytes;
    if (used[c->drive][slot]) return bad(r, "two records share an offset", c->off);
    used[c->drive][slot] = 1;
    return 0;
}

static int decode_record(pack_manifest *m, const reader *r, uint32_t i, const uint8_t *b, uint8_t **used)
{
    pack_record *rec = &m->rec[i];
    rec->layer = pk_get_u32(b);
    rec->expert = pk_get_u32(b + 4);
    rec->xxh3 = pk_get_u64(b + 8);
    rec->n_copies = pk_get_u32(b + 16);
    if (rec->layer >= m->n_layers || !m->layer[rec->layer].n_parts) return bad(r, "record layer", rec->layer);
    if (rec->expert >= m->n_expert) return bad(r, "record expert", rec->expert);
    int64_t key = (int64_t)rec->layer * m->n_expert + rec->expert;
    if (m->rec_of[key] >= 0) return bad(r, "duplicate record for layer", rec->layer);
    m->rec_of[key] = (int32_t)i;
    if (rec->n_copies < 1 || rec->n_copies > PACK_MAX_COPIES) return bad(r, "copies of a record", rec->n_copies);
    for (uint32_t c = 0; c < rec->n_copies; c++) {
        rec->copy[c] = (pack_copy){.drive = pk_get_u32(b + 20 + 16 * c), .off = pk_get_u64(b + 24 + 16 * c)};
        if (c && rec->copy[c].drive == rec->copy[0].drive) return bad(r, "two copies on one drive", rec->copy[c].drive);
        if (claim_slot(m, r, used, &rec->copy[c])) return -1;
    }
    return 0;
}

static int decode_records(pack_manifest *m, const reader *r, uint64_t rec_off)
{
    uint64_t cells = (uint64_t)m->n_layers * m->n_expert;
    m->rec = calloc(m->n_records ? m->n_records : 1, sizeof *m->rec);
    m->rec_of = malloc(cells * sizeof *m->rec_of);
    uint8_t **used = calloc(m->n_drives, sizeof *used);
    int rc = (!m->rec || !m->rec_of || !used) ? sl_errf(r->err, "out of memory") : 0;
    for (uint32_t d = 0; !rc && d < m->n_drives; d++)
        if (!(used[d] = calloc(m->drive[d].n_records + 1, 1))) rc = sl_errf(r->err, "out of memory");
    for (uint64_t k = 0; !rc && k < cells; k++) m->rec_of[k] = -1;
    for (uint32_t i = 0; !rc && i < m->n_records; i++)
        rc = decode_record(m, r, i, r->b + rec_off + (uint64_t)i * PACK_RECORD_ENTRY_BYTES, used);
    /* every expert of every MoE layer has a record; every drive slot is used */
    for (uint64_t k = 0; !rc && k < cells; k++)
        if (m->layer[k / m->n_expert].n_parts && m->rec_of[k] < 0) rc = bad(r, "missing record for layer", k / m->n_expert);
    for (uint32_t d = 0; !rc && d < m->n_drives; d++)
        for (uint32_t s = 0; !rc && s < m->drive[d].n_records; s++)
            if (!used[d][s]) rc = bad(r, "unused record slot on drive", d);
    for (uint32_t d = 0; used && d < m->n_drives; d++) free(used[d]);
    free(used);
    return rc;
}

static int decode(pack_manifest *m, const reader *r)
{
    if (r->len < PACK_HEADER_BYTES + 8) return sl_errf(r->err, "%s: too small for a sluice pack manifest", r->path);
    if (pk_get_u64(r->b + r->len - 8) != XXH3_64bits(r->b, r->len - 8))
        return sl_errf(r->err, "%s: pack manifest checksum mismatch (damaged or truncated file)", r->path);
    uint64_t layer_off = 0, rec_off = 0;
    if (decode_header(m, r, &layer_off, &rec_off) || decode_drives(m, r, layer_off)) return -1;
    m->layer = calloc(m->n_layers, sizeof *m->layer);
    if (!m->layer) return sl_errf(r->err, "out of memory");
    for (uint32_t l = 0; l < m->n_layers; l++)
        if (decode_layer(m, r, l, r->b + layer_off + (uint64_t)l * PACK_LAYER_ENTRY_BYTES)) return -1;
    return decode_records(m, r, rec_off);
}

int pack_manifest_read(pack_manifest *m, const char *path, sl_err *err)
{
    *m = (pack_manifest){0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sl_errf(err, "%s: cannot open pack manifest: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || st.st_size < 0 || st.st_size > MAX_MANIFEST) {
        close(fd);
        return sl_errf(err, "%s: not a sluice pack manifest (size %lld)", path, (long long)st.st_size);
    }
    uint8_t *b = malloc((size_t)st.st_size + 1);
    int rc = b ? sl_pread_full(fd, b, (size_t)st.st_size, 0, path, err) : sl_errf(err, "out of memory");
    close(fd);
    if (!rc) rc = decode(m, &(reader){b, (uint64_t)st.st_size, path, err});
    free(b);
    if (rc) pack_manifest_free(m);
    return rc;
}

void pack_manifest_free(pack_manifest *m)
{
    for (uint32_t d = 0; m->drive && d < m->n_drives; d++) free(m->drive[d].path);
    free(m->drive), free(m->layer), free(m->rec), free(m->rec_of);
    *m = (pack_manifest){0};
}

/* ---- drive file header ---- */

void pack_drive_header_encode(const pack_manifest *m, uint32_t d, uint8_t *b)
{
    memset(b, 0, PACK_DRIVE_HEADER_BYTES);
    memcpy(b, DRIVE_MAGIC, 8);
    pk_put_u32(b + 8, PACK_VERSION);
    pk_put_u32(b + 12, d);
    memcpy(b + 16, m->pack_id, 16);
    memcpy(b + 32, m->model_id, 16);
    pk_put_u32(b + 48, m->n_drives);
    pk_put_u32(b + 52, m->drive[d].n_records);
    pk_put_u64(b + 56, m->record_bytes);
    pk_put_u64(b + 64, m->data_offset);
    pk_put_u64(b + 72, m->drive[d].file_bytes);
    pk_put_u64(b + 80, XXH3_64bits(b, 80));
}

int pack_drive_header_check(const pack_manifest *m, uint32_t d, int fd, sl_err *err)
{
    const char *path = m->drive[d].path;
    uint8_t *want = malloc(PACK_DRIVE_HEADER_BYTES), *got = NULL;
    /* O_DIRECT needs an aligned buffer */
    if (!want || posix_memalign((void **)&got, PACK_ALIGN, PACK_DRIVE_HEADER_BYTES)) {
        free(want);
        return sl_errf(err, "out of memory");
    }
    pack_drive_header_encode(m, d, want);
    int rc = sl_pread_full(fd, got, PACK_DRIVE_HEADER_BYTES, 0, path, err);
    struct stat st;
    if (!rc && memcmp(got, DRIVE_MAGIC, 8)) rc = sl_errf(err, "%s: not a sluice pack drive file", path);
    else if (!rc && memcmp(got + 16, m->pack_id, 16))
        rc = sl_errf(err, "%s: drive file belongs to another pack (rewritten since the manifest was made?)", path);
    else if (!rc && memcmp(got, want, PACK_DRIVE_HEADER_BYTES))
        rc = sl_errf(err, "%s: drive file header does not match the manifest (drive %u)", path, d);
    else if (!rc && (fstat(fd, &st) || (uint64_t)st.st_size != m->drive[d].file_bytes))
        rc = sl_errf(err, "%s: drive file is %lld bytes, the manifest says %llu (truncated?)", path,
                     (long long)st.st_size, (unsigned long long)m->drive[d].file_bytes);
    free(want);
    free(got);
    return rc;
}

/* ---- model identity ---- */

enum { SAMPLES = 16, SAMPLE_BYTES = 4096, HEADER_CHUNK = 1 << 20 };

static int hash_range(XXH3_state_t *st, const gguf_part *p, uint64_t off, uint64_t len, uint8_t *buf, sl_err *err)
{
    while (len) {
        uint64_t n = len < HEADER_CHUNK ? len : HEADER_CHUNK;
        if (sl_pread_full(p->fd, buf, n, off, p->path, err)) return -1;
        XXH3_128bits_update(st, buf, n);
        off += n, len -= n;
    }
    return 0;
}

static int hash_part(XXH3_state_t *st, const gguf_part *p, uint8_t *buf, sl_err *err)
{
    uint8_t le[8];
    pk_put_u64(le, p->size);
    XXH3_128bits_update(st, le, 8);
    if (p->data_off > p->size) return sl_errf(err, "%s: data offset beyond the end of the file", p->path);
    if (hash_range(st, p, 0, p->data_off, buf, err)) return -1;
    uint64_t region = p->size - p->data_off;
    uint64_t n = region < SAMPLE_BYTES ? region : SAMPLE_BYTES;
    for (int k = 0; k < SAMPLES && n; k++)
        if (hash_range(st, p, p->data_off + (region - n) / (SAMPLES - 1) * (uint64_t)k, n, buf, err)) return -1;
    return 0;
}

int pack_model_id(const gguf_file *g, uint8_t id[16], sl_err *err)
{
    XXH3_state_t *st = XXH3_createState();
    uint8_t *buf = malloc(HEADER_CHUNK);
    int rc = (!st || !buf) ? sl_errf(err, "out of memory") : 0;
    if (!rc) {
        static const char tag[] = "sluice model id 1";
        uint8_t le[4];
        XXH3_128bits_reset(st);
        XXH3_128bits_update(st, tag, sizeof tag);
        pk_put_u32(le, g->n_parts);
        XXH3_128bits_update(st, le, 4);
    }
    for (uint32_t f = 0; !rc && f < g->n_parts; f++) rc = hash_part(st, &g->parts[f], buf, err);
    if (!rc) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
        memcpy(id, c.digest, 16);
    }
    free(buf);
    if (st) XXH3_freeState(st);
    return rc;
}
