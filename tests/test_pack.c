/* Multi-drive packs against the GGUF they were made from.
 *
 *  - format: every record on every drive equals the GGUF slices of its
 *    expert (read back with plain preads at the manifest's offsets), its
 *    xxh3 matches, padding is zero, placement is balanced and replicas sit
 *    on distinct drives;
 *  - reading: every expert the store hands out from a pack equals the GGUF
 *    bytes, for uring and pread, heavy eviction, with and without verify;
 *  - integrity: a flipped byte is caught by --verify and served from the
 *    replica, or is an error naming drive, file and offset; a missing drive
 *    falls back or is refused at open; failed reads fall back; a pack of
 *    another model and damaged manifests are refused without crashing;
 *  - scheduling: with simulated drives (a pure event simulation, and the
 *    throttled pread backend in real time) a 2x faster drive takes about
 *    2x the bytes, equal drives about the same, and an expert held on one
 *    drive is always read there. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "experts/layout.h"
#include "experts/pack.h"
#include "experts/pack_format.h"
#include "experts/sched.h"
#include "experts/store.h"
#include "util/fileio.h"
#include "t.h"
#include "view_check.h"

#define MODEL "models/tinymoe-q8_0.gguf"
enum { N_LAYERS = 6, N_EXPERT = 32, N_USED = 4 };

static char root[64];

typedef struct {
    gguf_file *g;
    expert_layout L;
} model;

static int model_open(model *m, const char *path, sl_err *err)
{
    m->L.layer = NULL;
    if (gguf_open(&m->g, path, err)) return -1;
    if (expert_layout_from_gguf(&m->L, m->g, N_LAYERS, N_EXPERT, N_USED, err)) {
        gguf_close(m->g);
        return -1;
    }
    return 0;
}

static void model_close(model *m)
{
    expert_layout_free(&m->L);
    gguf_close(m->g);
}

/* Packs MODEL onto N drive directories root/NAME-dK; manifest root/NAME.pack. */
static int make_pack(const model *m, const char *name, int n, double frac, char *manifest, sl_err *err)
{
    char dirs[8][256];
    const char *dp[8];
    for (int d = 0; d < n; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/%s-d%d", root, name, d);
        mkdir(dirs[d], 0755);
        dp[d] = dirs[d];
    }
    snprintf(manifest, 256, "%s/%s.pack", root, name);
    pack_options o = {.drives = dp, .n_drives = n, .replicate_hot = frac};
    pack_summary s;
    return pack_write(m->g, &m->L, manifest, &o, &s, err);
}

/* Reads expert (l, e) part P from the GGUF. */
static int gguf_slice(const model *m, int l, int e, int p, uint8_t *buf, sl_err *err)
{
    const expert_part *pt = &m->L.layer[l].parts[p];
    return sl_pread_full(m->g->parts[pt->file].fd, buf, pt->bytes, pt->off + (uint64_t)e * pt->stride, m->g->path, err);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* ---- format ---- */

/* Reads every copy of every record straight from the drive files and
 * compares it with the GGUF. */
static void format_matches_gguf(const model *m, const char *manifest, int n_drives, double frac)
{
    char name[128];
    snprintf(name, sizeof name, "pack: %d drives, %.2f replicated: records equal the GGUF slices", n_drives, frac);
    t_begin(name);
    sl_err err;
    pack_manifest pm;
    if (pack_manifest_read(&pm, manifest, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    T_CHECK(pm.n_drives == (uint32_t)n_drives && pm.n_records == N_LAYERS * N_EXPERT, "counts");
    static uint8_t rec[1 << 20], ref[1 << 20];
    int fds[8], bad = 0, replicated = 0, pair_uses[8][8] = {{0}};
    uint64_t per_drive[8] = {0};
    for (uint32_t d = 0; d < pm.n_drives; d++) fds[d] = open(pm.drive[d].path, O_RDONLY);
    for (uint32_t i = 0; i < pm.n_records && !bad; i++) {
        const pack_record *r = &pm.rec[i];
        const pack_layer *pl = &pm.layer[r->layer];
        replicated += r->n_copies > 1;
        if (r->n_copies > 1) pair_uses[r->copy[0].drive][r->copy[1].drive]++, pair_uses[r->copy[1].drive][r->copy[0].drive]++;
        T_CHECK(r->n_copies < 2 || r->copy[0].drive != r->copy[1].drive, "replica on the same drive");
        for (uint32_t c = 0; c < r->n_copies; c++) {
            per_drive[r->copy[c].drive] += pm.record_bytes;
            if (sl_pread_full(fds[r->copy[c].drive], rec, pm.record_bytes, r->copy[c].off, "drive", &err)) bad++;
            if (XXH3_64bits(rec, pl->used_bytes) != r->xxh3) bad++;
            uint64_t end = 0;
            for (uint32_t p = 0; p < pl->n_parts; p++) {
                if (gguf_slice(m, (int)r->layer, (int)r->expert, (int)p, ref, &err) ||
                    memcmp(ref, rec + pl->part[p].rec_off, pl->part[p].bytes))
                    bad++;
                for (uint64_t k = end; k < pl->part[p].rec_off; k++) bad += rec[k] != 0;
                end = pl->part[p].rec_off + pl->part[p].bytes;
            }
            for (uint64_t k = end; k < pm.record_bytes; k++) bad += rec[k] != 0;
        }
    }
    T_CHECK(!bad, "%d record mismatches", bad);
    T_CHECK(replicated == (int)(frac * N_LAYERS * N_EXPERT + 0.5), "%d replicated, wanted %.0f", replicated,
            frac * N_LAYERS * N_EXPERT);
    uint64_t lo = per_drive[0], hi = per_drive[0];
    for (int d = 1; d < n_drives; d++) lo = per_drive[d] < lo ? per_drive[d] : lo, hi = per_drive[d] > hi ? per_drive[d] : hi;
    T_CHECK(hi - lo <= pm.record_bytes, "unbalanced drives: %llu vs %llu bytes", (unsigned long long)lo,
            (unsigned long long)hi);
    /* replicas spread over every pair of drives, evenly */
    int pmin = 1 << 30, pmax = 0;
    for (int a = 0; a < n_drives; a++)
        for (int b = a + 1; b < n_drives; b++)
            pmin = pair_uses[a][b] < pmin ? pair_uses[a][b] : pmin, pmax = pair_uses[a][b] > pmax ? pair_uses[a][b] : pmax;
    T_CHECK(!replicated || n_drives < 2 || (pmin > 0 && pmax - pmin <= 1 + replicated / 20),
            "replica pairs used between %d and %d times", pmin, pmax);
    for (uint32_t d = 0; d < pm.n_drives; d++) close(fds[d]);
    pack_manifest_free(&pm);
    t_end();
}

/* With a heat table, exactly the hottest experts get a second copy. */
static void hottest_replicated(const model *m)
{
    t_begin("pack: with heat, the hottest experts are the replicated ones");
    static double heat[N_LAYERS * N_EXPERT];
    for (int k = 0; k < N_LAYERS * N_EXPERT; k++) heat[k] = (double)((k * 37) % (N_LAYERS * N_EXPERT));
    char dirs[2][256], manifest[256];
    const char *dp[2] = {dirs[0], dirs[1]};
    for (int d = 0; d < 2; d++) snprintf(dirs[d], sizeof dirs[d], "%s/three-d%d", root, d);
    snprintf(manifest, sizeof manifest, "%s/hot.pack", root);
    pack_options o = {.drives = dp, .n_drives = 2, .replicate_hot = 0.1, .heat = heat};
    sl_err err;
    pack_manifest pm;
    if (pack_write(m->g, &m->L, manifest, &o, NULL, &err) || pack_manifest_read(&pm, manifest, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    /* heat values are a permutation of 0..191: the top 19 are >= 173 */
    int wrong = 0, n = 0;
    for (uint32_t i = 0; i < pm.n_records; i++) {
        double h = heat[pm.rec[i].layer * N_EXPERT + pm.rec[i].expert];
        wrong += (pm.rec[i].n_copies == 2) != (h >= 173);
        n += pm.rec[i].n_copies == 2;
    }
    T_CHECK(n == 19 && !wrong, "%d replicated, %d misplaced", n, wrong);
    for (uint32_t d = 0; d < pm.n_drives; d++) unlink(pm.drive[d].path);
    unlink(manifest);
    pack_manifest_free(&pm);
    t_end();
}

/* ---- reading through the store ---- */

typedef struct {
    store_io io;
    int slots, batch, passes, verify;
    uint32_t chunk;
    const io_throttle *throttle;
    int (*fault)(void *, uint32_t, uint64_t, uint32_t);
    void *fault_ctx;
} read_cfg;

static int open_store(const model *m, const char *manifest, const read_cfg *rc, expert_provider **p,
                      expert_source **src, sl_err *err)
{
    pack_source_opts po = {.verify = rc->verify};
    if (source_pack_create(src, &m->L, manifest, &po, err)) return -1;
    store_config cfg = store_config_default((*src)->ops->slot_bytes(*src) * (uint64_t)rc->slots);
    cfg.io = rc->io;
    cfg.chunk_bytes = rc->chunk ? rc->chunk : 64 << 10;
    cfg.source = *src;
    cfg.throttle = rc->throttle;
    cfg.fault = rc->fault, cfg.fault_ctx = rc->fault_ctx;
    return expert_store_create(p, &m->L, &cfg, err);
}

/* Random routing, every view checked; returns views that differ, -1 on error. */
static int read_passes(const model *m, expert_provider *p, const read_cfg *rc, sl_err *err)
{
    int bad = 0;
    for (int pass = 0; pass < rc->passes; pass++)
        for (int l = 0; l < N_LAYERS; l++) {
            int32_t ids[N_EXPERT];
            uint32_t used = 0;
            int n = 0;
            while (n < rc->batch) {
                uint32_t e = rnd(N_EXPERT);
                if (!(used >> e & 1)) used |= 1u << e, ids[n++] = (int32_t)e;
            }
            if (p->ops->begin(p, l, ids, n, err)) return -1;
            expert_view v;
            int i, got = 0;
            while ((i = p->ops->next(p, &v, err)) >= 0) {
                bad += v.id != ids[i] || view_matches_gguf(m->g, &m->L, l, &v);
                got++;
                p->ops->release(p, i);
            }
            p->ops->end(p, l);
            if (i == -2) return -1;
            if (got != n) return sl_errf(err, "%d of %d experts handed out", got, n);
        }
    return bad;
}

static void reads_equal_gguf(const model *m, const char *manifest, const char *what, read_cfg rc)
{
    char name[160];
    snprintf(name, sizeof name, "pack: reads equal the GGUF (%s, %s, %d slots, batch %d%s)", what,
             store_io_name(rc.io), rc.slots, rc.batch, rc.verify ? ", verify" : "");
    t_begin(name);
    sl_err err;
    expert_provider *p;
    expert_source *src;
    if (open_store(m, manifest, &rc, &p, &src, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    int bad = read_passes(m, p, &rc, &err);
    T_CHECK(bad == 0, bad < 0 ? "%s" : "%d views differ", bad < 0 ? err.msg : "", bad);
    pack_source_stats ps;
    store_stats st;
    source_pack_stats(src, &ps);
    expert_store_stats(p, &st);
    uint64_t sum = 0;
    for (int d = 0; d < ps.n_drives; d++) sum += ps.bytes[d];
    T_CHECK(sum == st.bytes_read, "per-drive bytes %llu != store bytes %llu", (unsigned long long)sum,
            (unsigned long long)st.bytes_read);
    T_CHECK(!rc.verify || ps.verified == st.misses, "verified %llu of %llu loads", (unsigned long long)ps.verified,
            (unsigned long long)st.misses);
    T_CHECK(st.retries == 0 && ps.fallbacks == 0, "unexpected fallbacks");
    p->ops->destroy(p);
    t_end();
}

/* Every chunk of an expert held on one drive is planned on that drive, and
 * (plans only, nothing completes) an all-replicated pack splits experts
 * over both drives. */
static void single_copy_stays(const model *m, const char *manifest, int all_replicated)
{
    t_begin(all_replicated ? "pack: replicated experts are assembled from both drives"
                           : "pack: an expert held on one drive is always read from it");
    sl_err err;
    expert_source *src;
    pack_manifest pm;
    if (source_pack_create(&src, &m->L, manifest, NULL, &err) || pack_manifest_read(&pm, manifest, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    static uint8_t slot[1 << 20];
    static read_plan rp;
    int wrong = 0, split = 0;
    for (uint32_t i = 0; i < pm.n_records; i++) {
        const pack_record *r = &pm.rec[i];
        T_CHECK(src->ops->plan(src, (int)r->layer, (int)r->expert, slot, 16 << 10, &rp, &err) == 0, "%s", err.msg);
        int on[2] = {0, 0};
        for (int k = 0; k < rp.n; k++) {
            if (r->n_copies == 1) wrong += rp.file[k] != r->copy[0].drive;
            else on[rp.file[k] == r->copy[1].drive]++;
        }
        split += r->n_copies > 1 && on[0] && on[1];
    }
    T_CHECK(!wrong, "%d chunks of single-copy experts planned elsewhere", wrong);
    T_CHECK(!all_replicated || split == (int)pm.n_records, "%d of %u experts assembled from both drives", split,
            pm.n_records);
    pack_manifest_free(&pm);
    src->ops->destroy(src);
    t_end();
}

/* ---- integrity ---- */

static int flip_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    int rc = fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1 ? 0 : -1;
    b ^= 0x40;
    if (!rc && pwrite(fd, &b, 1, (off_t)off) != 1) rc = -1;
    if (fd >= 0) close(fd);
    return rc;
}

/* Loads expert (layer, e) once through a fresh store; returns next()'s result. */
static int load_one(const model *m, const char *manifest, const read_cfg *rc, int layer, int e, sl_err *err,
                    store_stats *st, pack_source_stats *ps)
{
    expert_provider *p;
    expert_source *src;
    if (open_store(m, manifest, rc, &p, &src, err)) return -3;
    int32_t id = e;
    expert_view v;
    int i = p->ops->begin(p, layer, &id, 1, err) ? -2 : p->ops->next(p, &v, err);
    if (i >= 0 && view_matches_gguf(m->g, &m->L, layer, &v)) i = -4;
    if (i >= 0) p->ops->release(p, i);
    p->ops->end(p, layer);
    expert_store_stats(p, st);
    source_pack_stats(src, ps);
    p->ops->destroy(p);
    return i;
}

static void corrupt_record(const model *m, const char *manifest, int replicated)
{
    t_begin(replicated ? "pack: a corrupted record is caught by verify and read from the replica"
                       : "pack: a corrupted record without replica is an error naming drive, file and offset");
    sl_err err;
    pack_manifest pm;
    if (pack_manifest_read(&pm, manifest, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    /* corrupt the first copy of expert 7 of layer 3 */
    const pack_record *r = &pm.rec[pm.rec_of[3 * N_EXPERT + 7]];
    T_CHECK((int)r->n_copies == (replicated ? 2 : 1), "copies %u", r->n_copies);
    const pack_copy bad = r->copy[0];
    pack_check_result cr;
    T_CHECK(pack_check(manifest, m->g, NULL, &cr, &err) == 0 && cr.bad == 0 && cr.copies == cr.total_copies &&
                cr.records == pm.n_records,
            "check of the intact pack: %s / %llu bad", err.msg, (unsigned long long)cr.bad);
    T_CHECK(flip_byte(pm.drive[bad.drive].path, bad.off + 5000) == 0, "flip");
    char at[64];
    snprintf(at, sizeof at, "at offset %llu", (unsigned long long)bad.off);
    T_CHECK(pack_check(manifest, NULL, NULL, &cr, &err) == 0 && cr.bad == 1 && cr.lost == (uint64_t)!replicated &&
                strstr(cr.first_bad, pm.drive[bad.drive].path) && strstr(cr.first_bad, at) &&
                strstr(cr.first_bad, "expert 7 of layer 3"),
            "check: %llu bad, %llu lost: %s", (unsigned long long)cr.bad, (unsigned long long)cr.lost, cr.first_bad);
    store_stats st;
    pack_source_stats ps;
    read_cfg rc = {.io = STORE_IO_URING, .slots = 4, .verify = 1};
    int i = load_one(m, manifest, &rc, 3, 7, &err, &st, &ps);
    if (replicated) {
        T_CHECK(i == 0, "load failed (%d): %s", i, err.msg);
        T_CHECK(st.retries >= 1 && ps.fallbacks >= 1 && ps.errors[bad.drive] >= 1, "fallback not counted");
    } else {
        char off[64], want_drive[32];
        snprintf(off, sizeof off, "offset %llu", (unsigned long long)bad.off);
        snprintf(want_drive, sizeof want_drive, "drive %u,", bad.drive);
        T_CHECK(i == -2 && strstr(err.msg, "checksum mismatch") && strstr(err.msg, pm.drive[bad.drive].path) &&
                    strstr(err.msg, off) && strstr(err.msg, want_drive),
                "message: %s", i == -2 ? err.msg : "(no error)");
        /* without verify the damage goes unnoticed: that is what --verify is for */
        rc.verify = 0;
        i = load_one(m, manifest, &rc, 3, 7, &err, &st, &ps);
        T_CHECK(i == -4, "expected different bytes without verify, got %d", i);
    }
    T_CHECK(flip_byte(pm.drive[bad.drive].path, bad.off + 5000) == 0, "flip back");
    pack_manifest_free(&pm);
    t_end();
}

typedef struct {
    uint32_t file;
    int hits;
} drive_fault;

static int fail_drive(void *ctx, uint32_t file, uint64_t off, uint32_t len)
{
    drive_fault *f = ctx;
    (void)off, (void)len;
    return file == f->file ? (f->hits++, -EIO) : 0;
}

static void failing_drive(const model *m, const char *manifest, int replicated)
{
    t_begin(replicated ? "pack: reads failing on one drive are served from the replicas"
                       : "pack: a failed read without replica is an error naming the drive file and offset");
    sl_err err;
    drive_fault f = {.file = 0};
    read_cfg rc = {.io = STORE_IO_PREAD, .slots = 6, .batch = 4, .passes = 6, .fault = fail_drive, .fault_ctx = &f};
    expert_provider *p;
    expert_source *src;
    if (open_store(m, manifest, &rc, &p, &src, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    int bad = read_passes(m, p, &rc, &err);
    if (replicated) {
        T_CHECK(bad == 0, bad < 0 ? "%s" : "%d views differ", bad < 0 ? err.msg : "", bad);
        T_CHECK(f.hits > 0, "the fault never fired");
        /* after a run of failures the drive is avoided where a copy exists */
        pack_source_stats ps;
        store_stats st;
        source_pack_stats(src, &ps);
        expert_store_stats(p, &st);
        T_CHECK(ps.errors[0] < 40 && st.misses > 100, "%u failed reads on the failing drive over %llu loads",
                ps.errors[0], (unsigned long long)st.misses);
    } else {
        T_CHECK(bad == -1 && strstr(err.msg, ".0.data") && strstr(err.msg, "offset") &&
                    strstr(err.msg, "Input/output error"),
                "message: %s", bad == -1 ? err.msg : "(no error)");
    }
    p->ops->destroy(p);
    t_end();
}

static void missing_drive(const model *m, const char *manifest, int replicated)
{
    t_begin(replicated ? "pack: a missing drive file is served from the replicas"
                       : "pack: a missing drive file without replicas is refused, naming drive, file and offset");
    sl_err err;
    pack_manifest pm;
    if (pack_manifest_read(&pm, manifest, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    char moved[300];
    snprintf(moved, sizeof moved, "%s.away", pm.drive[1].path);
    T_CHECK(rename(pm.drive[1].path, moved) == 0, "rename");
    read_cfg rc = {.io = STORE_IO_URING, .slots = 6, .batch = 4, .passes = 4, .verify = 1};
    expert_provider *p;
    expert_source *src;
    int rc_open = open_store(m, manifest, &rc, &p, &src, &err);
    if (replicated) {
        T_CHECK(rc_open == 0, "%s", err.msg);
        if (!rc_open) {
            int bad = read_passes(m, p, &rc, &err);
            T_CHECK(bad == 0, bad < 0 ? "%s" : "%d views differ", bad < 0 ? err.msg : "", bad);
            pack_source_stats ps;
            source_pack_stats(src, &ps);
            T_CHECK(ps.missing[1] && ps.bytes[1] == 0 && ps.bytes[0] > 0, "drive 1 should be skipped");
            p->ops->destroy(p);
        }
    } else {
        T_CHECK(rc_open == -1 && strstr(err.msg, "drive 1") && strstr(err.msg, pm.drive[1].path) &&
                    strstr(err.msg, "missing") && strstr(err.msg, "offset"),
                "message: %s", rc_open ? err.msg : "(opened)");
        if (!rc_open) p->ops->destroy(p);
    }
    T_CHECK(rename(moved, pm.drive[1].path) == 0, "rename back");
    pack_manifest_free(&pm);
    t_end();
}

/* A copy of the model with one byte of the spine changed (a fine-tune with
 * the same shapes) must not accept the pack. */
static void other_model(const char *manifest)
{
    t_begin("pack: a pack is refused for another model");
    sl_err err;
    char path[300];
    snprintf(path, sizeof path, "%s/other.gguf", root);
    char *data = NULL;
    size_t len = 0;
    int fd = -1;
    if (sl_read_file(MODEL, &data, &len, &err) || (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0 ||
        sl_write_full(fd, data, len, path, &err)) {
        T_CHECK(0, "copy: %s", err.msg);
        free(data);
        t_end();
        return;
    }
    close(fd);
    free(data);
    model m;
    T_CHECK(model_open(&m, path, &err) == 0, "%s", err.msg);
    /* the identity samples include the start of the data section */
    const gguf_tensor *t = gguf_find_tensor(m.g, "output_norm.weight");
    uint64_t off = t ? t->file_off + 3 : 0;
    model_close(&m);
    T_CHECK(off && flip_byte(path, off) == 0, "flip");
    T_CHECK(model_open(&m, path, &err) == 0, "%s", err.msg);
    expert_source *src;
    int rc = source_pack_create(&src, &m.L, manifest, NULL, &err);
    T_CHECK(rc == -1 && strstr(err.msg, "another model"), "message: %s", rc ? err.msg : "(accepted)");
    if (!rc) src->ops->destroy(src);
    model_close(&m);
    unlink(path);
    t_end();
}

/* Damaged manifests: truncations and byte flips (with the trailer checksum
 * recomputed, so the field checks are what stands) never crash or hang. */
static void damaged_manifest(const model *m, const char *manifest)
{
    t_begin("pack: damaged manifests are refused without crashing");
    sl_err err;
    char *data = NULL;
    size_t len = 0;
    if (sl_read_file(manifest, &data, &len, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    char path[300];
    snprintf(path, sizeof path, "%s/damaged.pack", root);
    uint8_t *b = malloc(len);
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 300; trial++) {
        memcpy(b, data, len);
        size_t n = len;
        if (trial < 40) n = rnd((uint32_t)len); /* truncated */
        else {
            for (int k = 0; k < 1 + trial % 3; k++) b[rnd((uint32_t)(len - 8))] ^= (uint8_t)(1 + rnd(255));
            if (trial % 5) pk_put_u64(b + len - 8, XXH3_64bits(b, len - 8));
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || sl_write_full(fd, b, n, path, &err)) break;
        close(fd);
        expert_source *src;
        if (source_pack_create(&src, &m->L, path, NULL, &err) == 0) {
            accepted++; /* a flip in a checksum or path-padding byte can be harmless */
            src->ops->destroy(src);
        } else refused++;
    }
    T_CHECK(refused > 250, "only %d of 300 damaged manifests refused", refused);
    (void)accepted;
    /* an unflipped byte with a stale trailer is the checksum's job */
    memcpy(b, data, len);
    b[200] ^= 1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    T_CHECK(fd >= 0 && sl_write_full(fd, b, len, path, &err) == 0, "write");
    close(fd);
    expert_source *src;
    T_CHECK(source_pack_create(&src, &m->L, path, NULL, &err) == -1 && strstr(err.msg, "checksum"), "message: %s",
            err.msg);
    unlink(path);
    free(b);
    free(data);
    t_end();
}

/* ---- scheduling ---- */

/* An event simulation: two drives serve their reads one after the other at
 * RATE bytes/s; each "layer" submits N experts of 4 chunks, all held on
 * both drives except every SINGLE-th expert (drive 0 only), then reaps every
 * completion, working WORK seconds after each (so completions that land
 * meanwhile are seen late, in bursts), and computes for a while.  A drive
 * is busy from the layer's submit to its last read's landing, as the I/O
 * backend reports it (io_done.busy_s).  Returns the bytes each drive was
 * given; EST gets the scheduler's rate estimates. */
static void simulate(const double rate[2], int single, double work, uint64_t bytes[2], double est[2])
{
    drive_sched s;
    sl_err err;
    sched_init(&s, 2, &err);
    enum { CHUNK = 256 << 10, EXPERTS = 8, CHUNKS = 4, LAYERS = 2000, MAXEV = EXPERTS * CHUNKS };
    double t = 0, busy[2] = {0, 0};
    for (int layer = 0; layer < LAYERS; layer++) {
        double t0 = t, free_at[2] = {t, t}, fin[2][MAXEV];
        int n[2] = {0, 0};
        for (int e = 0; e < EXPERTS; e++) {
            uint32_t cand[2] = {0, 1};
            int nc = single && (layer * EXPERTS + e) % single == 0 ? 1 : 2;
            for (int c = 0; c < CHUNKS; c++) {
                int d = sched_pick(&s, cand, nc, CHUNK);
                sched_submit(&s, d, CHUNK);
                free_at[d] += CHUNK / rate[d];
                fin[d][n[d]++] = free_at[d];
            }
        }
        /* completions in time order */
        int k[2] = {0, 0};
        while (k[0] < n[0] || k[1] < n[1]) {
            int d = k[1] >= n[1] || (k[0] < n[0] && fin[0][k[0]] <= fin[1][k[1]]) ? 0 : 1;
            double seen = fin[d][k[d]++];
            t = seen > t ? seen : t;
            sched_complete(&s, d, CHUNK, busy[d] + (seen - t0));
            t += work;
        }
        for (int d = 0; d < 2; d++) busy[d] += n[d] ? free_at[d] - t0 : 0;
        t += 0.002; /* compute */
    }
    for (int d = 0; d < 2; d++) bytes[d] = s.d[d].bytes, est[d] = sched_rate(&s, d);
    sched_free(&s);
}

static void sched_simulated(void)
{
    t_begin("sched: simulated 1x/2x drives split bytes ~1:2 (also when reaped late), equal drives ~1:1, rates measured");
    uint64_t b[2];
    double est[2];
    simulate((double[]){200e6, 400e6}, 0, 0, b, est);
    double ratio = (double)b[1] / (double)b[0];
    T_CHECK(ratio > 1.8 && ratio < 2.2, "2x drive got %.2fx the bytes", ratio);
    T_CHECK(est[0] > 200e6 * 0.85 && est[0] < 200e6 * 1.15 && est[1] > 400e6 * 0.85 && est[1] < 400e6 * 1.15,
            "rate estimates %.0f, %.0f MB/s", est[0] / 1e6, est[1] / 1e6);
    simulate((double[]){300e6, 300e6}, 0, 0, b, est);
    ratio = (double)b[1] / (double)b[0];
    T_CHECK(ratio > 0.95 && ratio < 1.05, "equal drives split %.2f", ratio);
    /* a slow drive 0 that also holds every 4th expert alone: it still gets
     * those, and the shared ones balance around them */
    simulate((double[]){200e6, 400e6}, 4, 0, b, est);
    ratio = (double)b[1] / (double)b[0];
    T_CHECK(ratio > 1.7 && ratio < 2.3, "with single-copy experts the 2x drive got %.2fx", ratio);
    /* the caller works 1 ms after each completion: completions are seen
     * late and in bursts, yet the split stays close */
    simulate((double[]){200e6, 400e6}, 0, 1e-3, b, est);
    ratio = (double)b[1] / (double)b[0];
    T_CHECK(ratio > 1.6 && ratio < 2.4, "with late reaping the 2x drive got %.2fx (rates %.0f, %.0f MB/s)", ratio,
            est[0] / 1e6, est[1] / 1e6);
    t_end();
}

/* The same with real reads through the store and the throttled pread
 * backend: drive 1 twice as fast as drive 0.  The simulated drives are
 * slow (tens of MB/s) so that the real reads inside them, on a disk other
 * jobs may be using, stay a small part of each read's time. */
static void sched_throttled(const model *m, const char *manifest, double r0, double r1, double lo, double hi)
{
    char name[128];
    snprintf(name, sizeof name, "sched: throttled drives at %.0f and %.0f MB/s split bytes %.1f-%.1fx", r0 / 1e6,
             r1 / 1e6, lo, hi);
    t_begin(name);
    sl_err err;
    expert_source *src;
    if (source_pack_create(&src, &m->L, manifest, NULL, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    io_throttle th = {.n = 2, .fds = {src->ops->file_fd(src, 0), src->ops->file_fd(src, 1)}, .rates = {r0, r1}};
    store_config cfg = store_config_default(src->ops->slot_bytes(src) * 8);
    cfg.chunk_bytes = 32 << 10;
    cfg.source = src;
    cfg.throttle = &th;
    expert_provider *p;
    if (expert_store_create(&p, &m->L, &cfg, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    read_cfg rc = {.io = STORE_IO_PREAD, .slots = 8, .batch = 8, .passes = 8};
    int bad = read_passes(m, p, &rc, &err);
    T_CHECK(bad == 0, bad < 0 ? "%s" : "%d views differ", bad < 0 ? err.msg : "", bad);
    pack_source_stats ps;
    source_pack_stats(src, &ps);
    double ratio = (double)ps.bytes[1] / (double)ps.bytes[0];
    T_CHECK(ratio > lo && ratio < hi, "drive 1 read %.2fx drive 0's bytes (%llu vs %llu); rates %.0f / %.0f MB/s",
            ratio, (unsigned long long)ps.bytes[1], (unsigned long long)ps.bytes[0], ps.rate[1] / 1e6,
            ps.rate[0] / 1e6);
    p->ops->destroy(p);
    t_end();
}

/* ---- driver ---- */

static void remove_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (strncmp(dir, "/var/tmp/sluice-pack-", 21) == 0 && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

int main(void)
{
    snprintf(root, sizeof root, "/var/tmp/sluice-pack-XXXXXX");
    if (!mkdtemp(root)) {
        t_skip("pack: all cases", "cannot create a temporary directory under /var/tmp");
        return t_done();
    }
    model m;
    sl_err err;
    char one[256], three[256], half[256], full[256], four[256];
    t_begin("pack: write tinymoe onto 1, 3, 2 and 4 drive directories");
    int ok = model_open(&m, MODEL, &err) == 0;
    T_CHECK(ok, "%s", err.msg);
    ok = ok && make_pack(&m, "one", 1, 0, one, &err) == 0 && make_pack(&m, "three", 3, 0, three, &err) == 0 &&
         make_pack(&m, "half", 2, 0.5, half, &err) == 0 && make_pack(&m, "full", 2, 1.0, full, &err) == 0 &&
         make_pack(&m, "four", 4, 1.0, four, &err) == 0;
    T_CHECK(ok, "%s", err.msg);
    t_end();
    if (!ok) {
        remove_tree(root);
        return t_done();
    }
    format_matches_gguf(&m, one, 1, 0);
    format_matches_gguf(&m, three, 3, 0);
    format_matches_gguf(&m, half, 2, 0.5);
    format_matches_gguf(&m, full, 2, 1.0);
    format_matches_gguf(&m, four, 4, 1.0);
    hottest_replicated(&m);

    reads_equal_gguf(&m, three, "3 drives", (read_cfg){.io = STORE_IO_URING, .slots = 6, .batch = 4, .passes = 20});
    reads_equal_gguf(&m, three, "3 drives", (read_cfg){.io = STORE_IO_PREAD, .slots = 6, .batch = 4, .passes = 20});
    reads_equal_gguf(&m, half, "2 drives, half replicated",
                     (read_cfg){.io = STORE_IO_URING, .slots = 6, .batch = 4, .passes = 20, .verify = 1});
    reads_equal_gguf(&m, half, "2 drives, half replicated",
                     (read_cfg){.io = STORE_IO_PREAD, .slots = 3, .batch = 4, .passes = 10, .verify = 1});
    reads_equal_gguf(&m, full, "2 drives, all replicated, 16 KiB chunks",
                     (read_cfg){.io = STORE_IO_URING, .slots = 10, .batch = 32, .passes = 3, .verify = 1, .chunk = 16 << 10});
    reads_equal_gguf(&m, one, "1 drive", (read_cfg){.io = STORE_IO_URING, .slots = 64, .batch = 4, .passes = 10});
    single_copy_stays(&m, half, 0);
    single_copy_stays(&m, full, 1);

    corrupt_record(&m, full, 1);
    corrupt_record(&m, three, 0);
    failing_drive(&m, full, 1);
    failing_drive(&m, three, 0);
    missing_drive(&m, full, 1);
    missing_drive(&m, three, 0);
    other_model(three);
    damaged_manifest(&m, half);

    sched_simulated();
    sched_throttled(&m, full, 25e6, 50e6, 1.5, 2.7);
    sched_throttled(&m, full, 40e6, 40e6, 0.75, 1.33);

    model_close(&m);
    remove_tree(root);
    return t_done();
}
