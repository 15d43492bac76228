/* Expert heat: the file format against an independent decoder of the bytes
 * documented in docs/HEAT.md, decay and merge arithmetic against direct
 * sums, concurrent writers (fork) against the exact expected merge, damaged
 * and foreign files ignored with a warning, $XDG_CACHE_HOME, the pinned
 * tier in the real store on tinymoe (loaded before the first token, never
 * evicted, every view equal to the GGUF bytes), the history guard, held-out
 * trace replays, and the SVG map's structure. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "experts/heat.h"
#include "experts/heat_svg.h"
#include "experts/layout.h"
#include "experts/store.h"
#include "experts/trace.h"
#include "util/fileio.h"
#include "t.h"
#include "view_check.h"

static const uint8_t ID_A[HEAT_ID_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t ID_B[HEAT_ID_BYTES] = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};

static char tmpdir[256];

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sluice-heat-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int slot;
    char *p = buf[slot++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void fill_table(heat_table *h, const uint8_t *id, int nl, int ne)
{
    sl_err err;
    if (heat_table_init(h, id, nl, ne, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    for (int i = 0; i < nl * ne; i++) h->count[i] = (float)rnd(100000) / 7.0f;
    h->passes = 1000 + rnd(1000);
    h->weight = 900.25;
    h->half_life = 4096;
    h->created = 1700000000;
    h->updated = 1700000123;
}

/* ---- an independent reader of the documented layout ---- */

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void format_by_hand(void)
{
    t_begin("heat: file bytes follow docs/HEAT.md (independent decoder)");
    heat_table h;
    fill_table(&h, ID_A, 3, 5);
    sl_err err;
    const char *path = tmp_path("fmt.heat");
    T_CHECK(heat_write(&h, path, &err) == 0, "%s", err.msg);
    char *b = NULL;
    size_t len = 0;
    T_CHECK(sl_read_file(path, &b, &len, &err) == 0, "%s", err.msg);
    const uint8_t *u = (const uint8_t *)b;
    T_CHECK(len == 80 + 4 * 15 + 8, "size %zu", len);
    if (len == 80 + 4 * 15 + 8) {
        T_CHECK(!memcmp(u, "SLUICEHT", 8), "magic");
        T_CHECK(le(u + 8, 4) == 1 && le(u + 12, 4) == 80, "version / header size");
        T_CHECK(!memcmp(u + 16, ID_A, 16), "model id");
        T_CHECK(le(u + 32, 4) == 3 && le(u + 36, 4) == 5, "geometry");
        T_CHECK(le(u + 40, 8) == h.passes, "passes");
        uint64_t w = le(u + 48, 8), hl = le(u + 56, 8);
        double wd, hd;
        memcpy(&wd, &w, 8), memcpy(&hd, &hl, 8);
        T_CHECK(wd == 900.25 && hd == 4096, "weight %g half-life %g", wd, hd);
        T_CHECK(le(u + 64, 8) == 1700000000 && le(u + 72, 8) == 1700000123, "times");
        int same = 1;
        for (int i = 0; i < 15; i++) {
            uint32_t v = (uint32_t)le(u + 80 + 4 * i, 4);
            float f;
            memcpy(&f, &v, 4);
            same &= f == h.count[i];
        }
        T_CHECK(same, "counts (layer-major float32)");
        T_CHECK(le(u + len - 8, 8) == XXH3_64bits(u, len - 8), "trailer is xxh3-64 of the rest");
    }
    free(b);
    heat_table_free(&h);
    t_end();
}

static void round_trip(void)
{
    t_begin("heat: write then load gives the same table");
    heat_table h, back;
    fill_table(&h, ID_A, 6, 32);
    sl_err err;
    const char *path = tmp_path("rt.heat");
    T_CHECK(heat_write(&h, path, &err) == 0, "%s", err.msg);
    T_CHECK(heat_load(&back, path, ID_A, 6, 32, &err) == HEAT_LOADED, "%s", err.msg);
    if (back.count) {
        T_CHECK(!memcmp(back.count, h.count, 6 * 32 * sizeof(float)), "counts differ");
        T_CHECK(back.passes == h.passes && back.weight == h.weight && back.half_life == h.half_life &&
                    back.created == h.created && back.updated == h.updated,
                "header fields differ");
    }
    heat_table_free(&back);
    T_CHECK(heat_load(&back, path, NULL, 0, 0, &err) == HEAT_LOADED, "any id / geometry: %s", err.msg);
    heat_table_free(&back);
    T_CHECK(heat_load(&back, tmp_path("none.heat"), ID_A, 6, 32, &err) == HEAT_ABSENT && !back.count,
            "a missing file is HEAT_ABSENT");
    heat_table_free(&h);
    t_end();
}

/* ---- damaged and foreign files ---- */

static void write_bytes(const char *path, const void *b, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    sl_err err;
    if (fd < 0 || sl_write_full(fd, b, len, path, &err)) {
        perror(path);
        exit(1);
    }
    close(fd);
}

/* Loads PATH expecting it to be ignored with a warning naming it and WHY. */
static void expect_ignored(const char *what, const char *path, const char *why)
{
    heat_table h;
    sl_err warn = {{0}};
    heat_status st = heat_load(&h, path, ID_A, 6, 32, &warn);
    T_CHECK(st == HEAT_IGNORED && !h.count, "%s: status %d", what, st);
    T_CHECK(strstr(warn.msg, path) && strstr(warn.msg, why), "%s: warning '%s' (want '%s')", what, warn.msg, why);
}

static void damaged_files(void)
{
    t_begin("heat: damaged and foreign files are ignored with a warning naming file and reason");
    heat_table h;
    fill_table(&h, ID_A, 6, 32);
    sl_err err;
    const char *good = tmp_path("good.heat"), *bad = tmp_path("bad.heat");
    T_CHECK(heat_write(&h, good, &err) == 0, "%s", err.msg);
    char *b;
    size_t len;
    T_CHECK(sl_read_file(good, &b, &len, &err) == 0, "%s", err.msg);
    write_bytes(bad, b, len - 5);
    expect_ignored("truncated", bad, "truncated");
    write_bytes(bad, b, 40);
    expect_ignored("truncated header", bad, "truncated");
    write_bytes(bad, b, 0);
    expect_ignored("empty", bad, "truncated");
    b[100] ^= 0x10;
    write_bytes(bad, b, len);
    expect_ignored("flipped count byte", bad, "checksum");
    b[100] ^= 0x10;
    b[0] = 'X';
    write_bytes(bad, b, len);
    expect_ignored("wrong magic", bad, "bad magic");
    b[0] = 'S';
    b[8] = 7;
    write_bytes(bad, b, len);
    expect_ignored("wrong version", bad, "version 7");
    b[8] = 1;
    char *longer = calloc(1, len + 4);
    memcpy(longer, b, len);
    write_bytes(bad, longer, len + 4);
    expect_ignored("padded", bad, "expected");
    free(longer);
    free(b);
    heat_table other;
    fill_table(&other, ID_B, 6, 32);
    T_CHECK(heat_write(&other, bad, &err) == 0, "%s", err.msg);
    expect_ignored("other model id", bad, "another model");
    heat_table_free(&other);
    fill_table(&other, ID_A, 6, 16);
    T_CHECK(heat_write(&other, bad, &err) == 0, "%s", err.msg);
    expect_ignored("other geometry", bad, "geometry 6 layers x 16 experts");
    heat_table_free(&other);
    /* negative counts cannot come from a writer: a damaged but checksummed file */
    fill_table(&other, ID_A, 6, 32);
    other.count[3] = -1;
    T_CHECK(heat_write(&other, bad, &err) == 0, "%s", err.msg);
    expect_ignored("negative count", bad, "non-finite");
    heat_table_free(&other);
    /* a merge over a damaged file replaces it, with the warning */
    write_bytes(bad, "garbage", 7);
    sl_err warn = {{0}};
    T_CHECK(heat_save_merge(bad, &h, 1000, &warn) == 1 && strstr(warn.msg, "replacing"), "merge over damage: %s",
            warn.msg);
    heat_table back;
    T_CHECK(heat_load(&back, bad, ID_A, 6, 32, &err) == HEAT_LOADED, "%s", err.msg);
    if (back.count) T_CHECK(!memcmp(back.count, h.count, 6 * 32 * sizeof(float)), "replaced content");
    heat_table_free(&back);
    heat_table_free(&h);
    t_end();
}

/* ---- decay and merging ---- */

/* A recorder's counts against the direct sum of 0.5^((P - p) / H) over uses. */
static void recorder_decay(void)
{
    t_begin("heat: recorder decay equals the direct sum over uses");
    const double H = 50;
    heat_recorder *r;
    sl_err err;
    T_CHECK(heat_recorder_create(&r, ID_A, 4, 8, H, &err) == 0, "%s", err.msg);
    enum { P = 300 };
    static int used[P][4][2];
    for (int p = 0; p < P; p++)
        for (int l = 0; l < 4; l++) {
            used[p][l][0] = (int)rnd(8);
            used[p][l][1] = (used[p][l][0] + 1 + (int)rnd(7)) % 8;
            int32_t ids[2] = {used[p][l][0], used[p][l][1]};
            heat_recorder_use(r, l, ids, 2);
        }
    T_CHECK(heat_recorder_pending(r) == P, "passes %llu", (unsigned long long)heat_recorder_pending(r));
    heat_table d;
    T_CHECK(heat_recorder_snapshot(r, &d, &err) == 0, "%s", err.msg);
    double ref[4][8] = {{0}}, wref = 0;
    for (int p = 0; p < P; p++) {
        double w = pow(0.5, (P - 1 - p) / H);
        wref += w;
        for (int l = 0; l < 4; l++) ref[l][used[p][l][0]] += w, ref[l][used[p][l][1]] += w;
    }
    double worst = 0;
    for (int l = 0; l < 4; l++)
        for (int e = 0; e < 8; e++) worst = fmax(worst, fabs(d.count[l * 8 + e] - ref[l][e]) / (ref[l][e] + 1e-9));
    T_CHECK(worst < 1e-5, "relative error %g", worst);
    T_CHECK(fabs(d.weight - wref) < 1e-9 * wref, "weight %g vs %g", d.weight, wref);
    heat_table_free(&d);
    heat_recorder_free(r);
    t_end();
}

/* Two saves in a row: the file holds d1 decayed by d2's passes plus d2. */
static void sequential_merge(void)
{
    t_begin("heat: merged file = stored decayed by the new passes + new counts");
    const char *path = tmp_path("seq.heat");
    heat_table d1, d2, back;
    fill_table(&d1, ID_A, 6, 32);
    fill_table(&d2, ID_A, 6, 32);
    d1.passes = 700, d2.passes = 300;
    d1.weight = 600, d2.weight = 250;
    sl_err warn;
    T_CHECK(heat_save_merge(path, &d1, 600, &warn) == 0, "%s", warn.msg);
    T_CHECK(heat_save_merge(path, &d2, 600, &warn) == 0, "%s", warn.msg);
    T_CHECK(heat_load(&back, path, ID_A, 6, 32, &warn) == HEAT_LOADED, "%s", warn.msg);
    if (back.count) {
        double f = pow(0.5, 300.0 / 600.0), worst = 0;
        for (int i = 0; i < 6 * 32; i++) {
            double want = d1.count[i] * f + d2.count[i];
            worst = fmax(worst, fabs(back.count[i] - want) / (want + 1e-9));
        }
        T_CHECK(worst < 1e-6, "relative error %g", worst);
        T_CHECK(back.passes == 1000, "passes %llu", (unsigned long long)back.passes);
        T_CHECK(fabs(back.weight - (600 * f + 250)) < 1e-9, "weight %g", back.weight);
        T_CHECK(back.half_life == 600 && back.updated > 0 && back.created > 0, "header");
    }
    heat_table_free(&back);
    heat_table_free(&d1);
    heat_table_free(&d2);
    t_end();
}

/* Writer WHO saves N deltas: one pass each, a use of its own key and of
 * the shared key 0. */
static int writer(const char *path, int who, int n, double half_life)
{
    heat_table d;
    sl_err err;
    if (heat_table_init(&d, ID_A, 6, 32, &err)) return 1;
    d.passes = 1, d.weight = 1;
    d.count[0] = 1;
    d.count[1 + who] = 1;
    for (int i = 0; i < n; i++)
        if (heat_save_merge(path, &d, half_life, &err) != 0) return 2;
    heat_table_free(&d);
    return 0;
}

/* Reads while the writers write: every read must be a whole, valid file. */
static int reader(const char *path, int n)
{
    for (int i = 0; i < n; i++) {
        heat_table h;
        sl_err err;
        heat_status st = heat_load(&h, path, ID_A, 6, 32, &err);
        heat_table_free(&h);
        if (st == HEAT_IGNORED) return 3;
    }
    return 0;
}

static void concurrent(double half_life, const char *name)
{
    t_begin(name);
    enum { N = 50, W = 4 }; /* issue 13: 4 processes x 50 rounds on one file */
    char file[64];
    snprintf(file, sizeof file, "conc-%g.heat", half_life);
    const char *path = tmp_path(file);
    pid_t pid[W + 1];
    for (int w = 0; w <= W; w++) {
        pid[w] = fork();
        if (pid[w] == 0) _exit(w < W ? writer(path, w, N, half_life) : reader(path, 400));
    }
    int bad = 0;
    for (int w = 0; w <= W; w++) {
        int status;
        waitpid(pid[w], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) bad++;
    }
    T_CHECK(!bad, "%d children failed (writer error or torn read)", bad);
    heat_table h;
    sl_err err;
    T_CHECK(heat_load(&h, path, ID_A, 6, 32, &err) == HEAT_LOADED, "%s", err.msg);
    if (h.count) {
        /* each save is one pass, so a delta saved k saves before the end is
         * worth d^k, whichever writer it came from */
        double d = half_life > 0 ? pow(0.5, 1 / half_life) : 1, all = 0;
        for (int k = 0; k < W * N; k++) all += pow(d, k);
        T_CHECK(h.passes == W * N, "passes %llu, want %d (an update was lost)", (unsigned long long)h.passes, W * N);
        T_CHECK(fabs(h.count[0] - all) < 1e-4 * all, "shared key %g, want %g", h.count[0], all);
        T_CHECK(fabs(h.weight - all) < 1e-9 * all, "weight %g, want %g", h.weight, all);
        double mine = 0;
        for (int w = 0; w < W; w++) {
            mine += h.count[1 + w];
            if (half_life == 0) T_CHECK(h.count[1 + w] == N, "writer %d's key %g, want %d", w, h.count[1 + w], N);
        }
        T_CHECK(fabs(mine - all) < 1e-4 * all, "writer keys sum %g, want %g", mine, all);
    }
    heat_table_free(&h);
    t_end();
}

static void reset_file(void)
{
    t_begin("heat: reset deletes the file under its lock");
    const char *path = tmp_path("reset.heat");
    heat_table h;
    fill_table(&h, ID_A, 2, 2);
    sl_err err;
    T_CHECK(heat_write(&h, path, &err) == 0, "%s", err.msg);
    T_CHECK(heat_reset(path, &err) == 0 && access(path, F_OK) != 0, "not deleted");
    T_CHECK(heat_reset(path, &err) == 1, "second reset should find nothing");
    heat_table_free(&h);
    t_end();
}

static void xdg_cache(void)
{
    t_begin("heat: default path honours XDG_CACHE_HOME, then HOME");
    char want[600], path[1024], hex[33];
    sl_err err;
    heat_id_hex(ID_A, hex);
    setenv("XDG_CACHE_HOME", tmp_path("xdg"), 1);
    T_CHECK(heat_default_path(ID_A, path, sizeof path, &err) == 0, "%s", err.msg);
    snprintf(want, sizeof want, "%s/xdg/sluice/%s.heat", tmpdir, hex);
    T_CHECK(!strcmp(path, want), "path %s, want %s", path, want);
    heat_table d;
    fill_table(&d, ID_A, 6, 32);
    T_CHECK(heat_save_merge(path, &d, 100, &err) == 0, "%s", err.msg);
    T_CHECK(access(want, R_OK) == 0, "the cache directory was not created");
    heat_table_free(&d);
    setenv("XDG_CACHE_HOME", "relative/dir", 1); /* the spec says: ignore */
    setenv("HOME", tmp_path("home"), 1);
    T_CHECK(heat_default_path(ID_A, path, sizeof path, &err) == 0, "%s", err.msg);
    snprintf(want, sizeof want, "%s/home/.cache/sluice/%s.heat", tmpdir, hex);
    T_CHECK(!strcmp(path, want), "path %s, want %s", path, want);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    T_CHECK(heat_default_path(ID_A, path, sizeof path, &err) == -1 && strstr(err.msg, "--heat-file"), "no home: %s",
            err.msg);
    t_end();
}

/* The id hashes the tensor table, not the path. */
static void model_identity(void)
{
    t_begin("heat: model id follows the tensor table, not the path");
    sl_err err;
    char *data;
    size_t len;
    const char *copy = tmp_path("copy.gguf");
    T_CHECK(sl_read_file("models/tinymoe-q8_0.gguf", &data, &len, &err) == 0, "%s", err.msg);
    write_bytes(copy, data, len);
    free(data);
    gguf_file *a, *b, *c;
    T_CHECK(gguf_open(&a, "models/tinymoe-q8_0.gguf", &err) == 0 && gguf_open(&b, copy, &err) == 0 &&
                gguf_open(&c, "models/tinydraft-f16.gguf", &err) == 0,
            "%s", err.msg);
    uint8_t ia[16], ib[16], ic[16];
    heat_model_id(a, ia), heat_model_id(b, ib), heat_model_id(c, ic);
    T_CHECK(!memcmp(ia, ib, 16), "a copy has another id");
    T_CHECK(memcmp(ia, ic, 16), "two models share an id");
    /* one tensor's offset moved: another id */
    a->tensors[a->n_tensors - 1].offset += 32;
    heat_model_id(a, ib);
    T_CHECK(memcmp(ia, ib, 16), "a moved tensor keeps the id");
    gguf_close(a), gguf_close(b), gguf_close(c);
    t_end();
}

/* A run's session: periodic and final saves, reload, one warning only. */
static void session(void)
{
    t_begin("heat: a run's session saves periodically and at the end, warns once about a bad file");
    gguf_file *g;
    sl_err warn = {{0}};
    T_CHECK(gguf_open(&g, "models/tinymoe-q8_0.gguf", &warn) == 0, "%s", warn.msg);
    const char *path = tmp_path("session/model.heat");
    heat_session s;
    T_CHECK(heat_session_open(&s, g, path, 6, 32, 1000, &warn) == 0 && !s.table.count, "fresh: %s", warn.msg);
    int32_t ids[4] = {1, 5, 9, 30};
    int saves = 0;
    for (int pass = 0; pass < 300; pass++) {
        for (int l = 0; l < 6; l++) heat_recorder_use(s.rec, l, ids, 4);
        T_CHECK(heat_session_tick(&s, &warn) == 0, "tick: %s", warn.msg);
        saves += heat_recorder_pending(s.rec) == 0;
    }
    heat_table h;
    T_CHECK(saves == 1 && heat_load(&h, path, NULL, 6, 32, &warn) == HEAT_LOADED && h.passes == HEAT_SAVE_EVERY,
            "periodic save: %d saves, %s", saves, warn.msg);
    heat_table_free(&h);
    T_CHECK(heat_session_close(&s, &warn) == 0, "close: %s", warn.msg);
    T_CHECK(heat_session_open(&s, g, path, 6, 32, 1000, &warn) == 0 && s.table.count && s.table.passes == 300,
            "reload: %llu passes", (unsigned long long)s.table.passes);
    heat_session_close(&s, &warn);
    write_bytes(path, "junk", 4);
    T_CHECK(heat_session_open(&s, g, path, 6, 32, 1000, &warn) == 1 && strstr(warn.msg, path), "bad file: %s",
            warn.msg);
    for (int l = 0; l < 6; l++) heat_recorder_use(s.rec, l, ids, 4);
    T_CHECK(heat_session_close(&s, &warn) == 0, "second warning: %s", warn.msg);
    T_CHECK(heat_load(&h, path, NULL, 6, 32, &warn) == HEAT_LOADED && h.passes == 1, "replaced: %s", warn.msg);
    heat_table_free(&h);
    gguf_close(g);
    t_end();
}

/* ---- pins ---- */

static void pick_pins(void)
{
    t_begin("heat: pins are the hottest experts, capped per layer, never unused ones; history guard");
    heat_table h;
    sl_err err;
    heat_table_init(&h, ID_A, 4, 8, &err);
    h.passes = 1000, h.weight = 1000;
    /* layer 0 holds the 5 hottest; a few others warm; the rest unused */
    for (int e = 0; e < 5; e++) h.count[e] = 900 - 10 * e;
    h.count[8 + 3] = 500, h.count[16 + 1] = 400, h.count[24 + 7] = 300;
    int32_t keys[32];
    heat_pin_opts o = {.min_passes = 100};
    char note[200];
    int n = heat_pick_pins(&h, 4, &o, keys, note, sizeof note);
    T_CHECK(n == 4 && keys[0] == 0 && keys[1] == 1 && keys[2] == 2 && keys[3] == 3, "plain: %d %s", n, note);
    n = heat_pick_pins(&h, 20, &o, keys, note, sizeof note);
    T_CHECK(n == 8, "only the 8 experts with uses are pinned, got %d", n);
    o.layer_cap = 0.5;
    n = heat_pick_pins(&h, 6, &o, keys, note, sizeof note);
    int layer0 = 0;
    for (int i = 0; i < n; i++) layer0 += keys[i] < 8;
    T_CHECK(n == 6 && layer0 == 3, "cap 0.5 of 6: %d pins, %d from layer 0", n, layer0);
    o.min_passes = 1001;
    n = heat_pick_pins(&h, 6, &o, keys, note, sizeof note);
    T_CHECK(n == 0 && strstr(note, "no experts pinned") && strstr(note, "1000"), "guard: %d, %s", n, note);
    heat_table_free(&h);
    t_end();
}

/* ---- the store ---- */

typedef struct {
    gguf_file *g;
    expert_layout L;
} model;

static int open_model(model *m, sl_err *err)
{
    if (gguf_open(&m->g, "models/tinymoe-q8_0.gguf", err)) return -1;
    if (expert_layout_from_gguf(&m->L, m->g, 6, 32, 4, err)) return gguf_close(m->g), -1;
    return 0;
}

static void close_model(model *m)
{
    expert_layout_free(&m->L);
    gguf_close(m->g);
}

/* One layer: begin, take every expert, check it, release, end. */
static int run_layer(expert_provider *p, const model *m, int layer, const int32_t *ids, int n, int *bad)
{
    sl_err err;
    if (p->ops->begin(p, layer, ids, n, &err)) return -1;
    expert_view v;
    int i, got = 0;
    while ((i = p->ops->next(p, &v, &err)) >= 0) {
        if (v.id != ids[i] || view_matches_gguf(m->g, &m->L, layer, &v)) ++*bad;
        got++;
        p->ops->release(p, i);
    }
    p->ops->end(p, layer);
    return i == -1 && got == n ? 0 : -1;
}

/* Heat favouring expert (3l + 1) % 32 and (5l + 2) % 32 of each layer. */
static void hot_table(heat_table *h, uint64_t passes)
{
    sl_err err;
    heat_table_init(h, ID_A, 6, 32, &err);
    h->passes = passes, h->weight = (double)passes;
    for (int l = 0; l < 6; l++)
        for (int e = 0; e < 32; e++) h->count[l * 32 + e] = (float)passes * 0.05f;
    for (int l = 0; l < 6; l++) {
        h->count[l * 32 + (3 * l + 1) % 32] = (float)passes * 0.9f;
        h->count[l * 32 + (5 * l + 2) % 32] = (float)passes * 0.8f;
    }
}

static void store_pinned(store_io io)
{
    char name[96];
    snprintf(name, sizeof name, "heat: pinned tier read at creation, never evicted, views exact (%s)",
             store_io_name(io));
    t_begin(name);
    model m;
    sl_err err;
    if (open_model(&m, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    heat_table h;
    hot_table(&h, 4096);
    uint64_t sb = store_slot_bytes(&m.L);
    store_config cfg = store_config_default(sb * 18);
    cfg.io = io;
    cfg.heat = &h;
    cfg.pin_bytes = sb * 12;
    cfg.half_life = 1; /* the seeded counts fade at once: only pinning keeps them */
    expert_provider *p;
    if (expert_store_create(&p, &m.L, &cfg, &err)) {
        T_CHECK(0, "%s", err.msg);
        goto out;
    }
    store_stats st0, st;
    expert_store_stats(p, &st0);
    T_CHECK(st0.pinned == 12 && strstr(st0.heat_note, "pinned 12"), "pinned %d: %s", st0.pinned, st0.heat_note);
    T_CHECK(st0.reads > 0 && st0.layers == 0 && st0.bytes_needed == 12 * expert_layout_bytes(&m.L, 0),
            "reads %llu, needed %llu before the first begin", (unsigned long long)st0.reads,
            (unsigned long long)st0.bytes_needed);
    /* heavy eviction: 6 dynamic slots against random routing */
    int bad = 0, fails = 0;
    for (int pass = 0; pass < 30; pass++)
        for (int l = 0; l < 6; l++) {
            int32_t ids[4];
            uint32_t used = 0;
            for (int n = 0; n < 4;) {
                uint32_t e = rnd(32);
                if (!(used >> e & 1)) used |= 1u << e, ids[n++] = (int32_t)e;
            }
            fails += run_layer(p, &m, l, ids, 4, &bad) != 0;
        }
    expert_store_stats(p, &st);
    T_CHECK(st.evictions > 100, "only %llu evictions", (unsigned long long)st.evictions);
    /* the pinned experts are all still there: hits, no reads */
    uint64_t reads = st.reads, hits = st.hits;
    for (int l = 0; l < 6; l++) {
        int32_t ids[2] = {(3 * l + 1) % 32, (5 * l + 2) % 32};
        fails += run_layer(p, &m, l, ids, 2, &bad) != 0;
    }
    expert_store_stats(p, &st);
    T_CHECK(st.reads == reads && st.hits == hits + 12, "pinned experts were evicted (%llu reads, %llu hits)",
            (unsigned long long)(st.reads - reads), (unsigned long long)(st.hits - hits));
    T_CHECK(!bad && !fails, "%d views differ from the GGUF, %d layers failed", bad, fails);
    p->ops->destroy(p);
out:
    heat_table_free(&h);
    close_model(&m);
    t_end();
}

static void store_guard(void)
{
    t_begin("heat: below the history minimum the store pins nothing and says so");
    model m;
    sl_err err;
    if (open_model(&m, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    heat_table h;
    hot_table(&h, 100);
    uint64_t sb = store_slot_bytes(&m.L);
    store_config cfg = store_config_default(sb * 18);
    cfg.heat = &h;
    cfg.pin_bytes = sb * 12;
    cfg.pin.min_passes = 512;
    expert_provider *p;
    T_CHECK(expert_store_create(&p, &m.L, &cfg, &err) == 0, "%s", err.msg);
    store_stats st;
    expert_store_stats(p, &st);
    T_CHECK(st.pinned == 0 && st.reads == 0 && strstr(st.heat_note, "no experts pinned") &&
                strstr(st.heat_note, "100 forward passes"),
            "pinned %d, reads %llu: %s", st.pinned, (unsigned long long)st.reads, st.heat_note);
    p->ops->destroy(p);
    /* heat of another geometry is ignored, not fatal */
    heat_table_free(&h);
    heat_table_init(&h, ID_A, 5, 32, &err);
    h.passes = 5000;
    T_CHECK(expert_store_create(&p, &m.L, &cfg, &err) == 0, "%s", err.msg);
    expert_store_stats(p, &st);
    T_CHECK(st.pinned == 0 && strstr(st.heat_note, "heat ignored"), "note: %s", st.heat_note);
    p->ops->destroy(p);
    heat_table_free(&h);
    close_model(&m);
    t_end();
}

/* The begin() hook records exactly the experts handed to the store. */
static void store_records(void)
{
    t_begin("heat: the store's begin records each pass's experts");
    model m;
    sl_err err;
    if (open_model(&m, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    heat_recorder *r;
    T_CHECK(heat_recorder_create(&r, ID_A, 6, 32, 0, &err) == 0, "%s", err.msg);
    store_config cfg = store_config_default(store_slot_bytes(&m.L) * 8);
    cfg.record = r;
    expert_provider *p;
    T_CHECK(expert_store_create(&p, &m.L, &cfg, &err) == 0, "%s", err.msg);
    int ref[6][32] = {{0}}, bad = 0;
    for (int pass = 0; pass < 10; pass++)
        for (int l = 0; l < 6; l++) {
            int32_t ids[3] = {(int32_t)rnd(10), (int32_t)(10 + rnd(10)), (int32_t)(20 + rnd(12))};
            for (int k = 0; k < 3; k++) ref[l][ids[k]]++;
            T_CHECK(run_layer(p, &m, l, ids, 3, &bad) == 0, "layer %d", l);
        }
    heat_table d;
    T_CHECK(heat_recorder_snapshot(r, &d, &err) == 0, "%s", err.msg);
    int diff = 0;
    for (int l = 0; l < 6; l++)
        for (int e = 0; e < 32; e++) diff += d.count[l * 32 + e] != (float)ref[l][e];
    T_CHECK(d.passes == 10 && d.weight == 10 && !diff && !bad, "passes %llu, %d counts differ",
            (unsigned long long)d.passes, diff);
    heat_table_free(&d);
    p->ops->destroy(p);
    heat_recorder_free(r);
    close_model(&m);
    t_end();
}

/* ---- held-out replay on the trained fixture's trace ---- */

static double hit_rate(const route_trace *t, replay_opts o)
{
    uint64_t hits = 0, misses = 0;
    /* each 512-token window of the held-out half is a fresh run */
    for (int s = 4096; s < 8192; s += 512) {
        o.start = o.first = s, o.end = s + 512;
        cache_counters c;
        sl_err err;
        if (trace_replay_ex(t, &o, &c, &err)) return -1;
        hits += c.hits, misses += c.misses;
    }
    return (double)hits / (double)(hits + misses);
}

static void held_out(void)
{
    const char *path = t_shared("traces/tinymoe-valid-routes.json");
    const char *name = "heat: held-out replay, heat from the first half never lowers the LFRU hit rate";
    if (!path) {
        t_skip(name, "../shared not present");
        return;
    }
    t_begin(name);
    route_trace t;
    sl_err err;
    if (trace_load(&t, path, &err)) {
        T_CHECK(0, "%s", err.msg);
        t_end();
        return;
    }
    heat_recorder *r;
    heat_table h;
    T_CHECK(heat_recorder_create(&r, ID_A, t.n_layers, t.n_expert, HEAT_DEFAULT_HALF_LIFE, &err) == 0, "%s", err.msg);
    trace_record_heat(&t, 0, 4096, r);
    T_CHECK(heat_recorder_snapshot(r, &h, &err) == 0 && h.passes == 4096, "snapshot");
    double gain = 0;
    for (int slots = 12; slots <= 96; slots *= 2) {
        replay_opts o = {.n_slots = slots, .policy = CACHE_LFRU, .half_life = 128};
        double plain = hit_rate(&t, o);
        o.heat = &h;
        double seeded = hit_rate(&t, o);
        int32_t keys[192];
        heat_pin_opts po = heat_pin_defaults();
        o.n_pinned = heat_pick_pins(&h, slots / 2, &po, keys, NULL, 0);
        o.pinned = keys;
        double pinned = hit_rate(&t, o);
        T_CHECK(o.n_pinned == slots / 2, "%d slots: %d pinned", slots, o.n_pinned);
        T_CHECK(seeded >= plain && pinned >= plain, "%d slots: lfru %.4f, +heat %.4f, +pin %.4f", slots, plain,
                seeded, pinned);
        gain += seeded - plain;
    }
    T_CHECK(gain > 0, "heat seeding gained nothing (%g)", gain);
    heat_table_free(&h);
    heat_recorder_free(r);
    trace_free(&t);
    t_end();
}

/* ---- SVG ---- */

/* Checks tags nest and close; counts <rect class="cell"> and legend rects. */
static int svg_check(const char *s, int *cells, int *legend, int *texts, char *why, size_t cap)
{
    char stack[16][16];
    int depth = 0, roots = 0;
    *cells = *legend = *texts = 0;
    for (const char *p = s; (p = strchr(p, '<'));) {
        const char *end = strchr(p, '>');
        if (!end) return snprintf(why, cap, "unterminated tag"), -1;
        if (p[1] == '?') {
            p = end;
            continue;
        }
        int closing = p[1] == '/', selfclose = end[-1] == '/';
        const char *n = p + 1 + closing;
        size_t len = strcspn(n, " />");
        if (len == 0 || len >= 16) return snprintf(why, cap, "bad tag name"), -1;
        char tag[16];
        memcpy(tag, n, len), tag[len] = 0;
        for (const char *q = p; q < end; q++)
            if (*q == '<' && q != p) return snprintf(why, cap, "'<' inside a tag"), -1;
        if (closing) {
            if (!depth || strcmp(stack[depth - 1], tag)) return snprintf(why, cap, "</%s> does not match", tag), -1;
            depth--;
        } else {
            if (!strcmp(tag, "rect") && strstr(p, "class=\"cell\"") && strstr(p, "class=\"cell\"") < end) ++*cells;
            if (!strcmp(tag, "rect") && strstr(p, "class=\"legend\"") && strstr(p, "class=\"legend\"") < end)
                ++*legend;
            *texts += !strcmp(tag, "text");
            if (!depth) roots++;
            if (!selfclose) {
                if (depth == 16) return snprintf(why, cap, "too deep"), -1;
                snprintf(stack[depth++], 16, "%s", tag);
            }
        }
        p = end;
    }
    if (depth) return snprintf(why, cap, "%d unclosed tags", depth), -1;
    if (roots != 1) return snprintf(why, cap, "%d root elements", roots), -1;
    return 0;
}

static void svg_case(int nl, int ne)
{
    char name[96];
    snprintf(name, sizeof name, "heat: SVG map is well-formed (%d layers x %d experts)", nl, ne);
    t_begin(name);
    heat_table h;
    fill_table(&h, ID_A, nl, ne);
    const char *path = tmp_path("map.svg");
    FILE *f = fopen(path, "w");
    T_CHECK(f && heat_svg_write(&h, "a<b & \"c\"", f) == 0, "write");
    if (f) fclose(f);
    char *s;
    size_t len;
    sl_err err;
    T_CHECK(sl_read_file(path, &s, &len, &err) == 0, "%s", err.msg);
    int cells, legend, texts;
    char why[128] = "";
    T_CHECK(svg_check(s, &cells, &legend, &texts, why, sizeof why) == 0, "not well-formed: %s", why);
    T_CHECK(cells == nl * ne, "%d cells, want %d", cells, nl * ne);
    T_CHECK(legend > 8 && texts > 6, "%d legend rects, %d texts", legend, texts);
    T_CHECK(strstr(s, "<svg ") && strstr(s, "a&lt;b &amp; &quot;c&quot;") && strstr(s, ">layer<") &&
                strstr(s, ">expert<"),
            "root, escaped title or axis labels missing");
    free(s);
    heat_table_free(&h);
    t_end();
}

int main(void)
{
    make_tmpdir();
    format_by_hand();
    round_trip();
    damaged_files();
    recorder_decay();
    sequential_merge();
    concurrent(0, "heat: four processes x 50 merges lose nothing, readers never see a torn file");
    concurrent(25, "heat: four processes x 50 merges with decay equal the order-free expected sum");
    reset_file();
    xdg_cache();
    model_identity();
    session();
    pick_pins();
    store_pinned(STORE_IO_URING);
    store_pinned(STORE_IO_PREAD);
    store_guard();
    store_records();
    held_out();
    svg_case(6, 32);
    svg_case(61, 256);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return t_done();
}
