/* sluice check MODEL [--pack PACK]: reads every tensor once, as a user
 * would after a 500 GB download, and checks that it lies inside its file,
 * that its rows are whole blocks of its type, and that every block decodes
 * to finite values (the scales of a quantized block, the values of a float
 * tensor); the first bad tensor, row and block is printed.  With a pack,
 * every copy of every record's checksum is verified as well. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "experts/pack.h"
#include "gguf/ggml_type.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "util/clock.h"

enum { CHUNK = 8 << 20 }; /* bytes of a tensor read at once */

typedef struct {
    uint64_t tensors, bytes, skipped, bad;
    char first_bad[1024];
} check_stats;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sluice check MODEL.gguf [--pack PACK] [-q]\n"
            "  Reads every tensor once: each must lie inside its file, hold whole blocks of its\n"
            "  type, and decode to finite values; prints the first bad tensor, row and block.\n"
            "  --pack PACK   also verify every record copy's checksum of the pack made from MODEL\n"
            "  -q            no progress line\n"
            "  Exit status 1 if anything is bad.\n");
}

static void note_bad(check_stats *s, const char *fmt, const char *a, unsigned long long x, unsigned long long y,
                     const char *why)
{
    if (!s->bad++) snprintf(s->first_bad, sizeof s->first_bad, fmt, a, x, y, why);
}

/* Rows [r0, r0 + n) of tensor T (row bytes RB) in BUF: each decodes finite.
 * Returns 0, or 1 at the first bad value (noted in S). */
static int check_rows(const gguf_tensor *t, const uint8_t *buf, int64_t r0, int64_t n, uint64_t rb, float *row,
                      check_stats *s)
{
    const ggml_type_info *ti = ggml_type_get(t->type);
    sl_mat m = {.type = t->type, .ne0 = t->ne[0], .ne1 = n, .row_bytes = rb, .data = buf};
    for (int64_t r = 0; r < n; r++) {
        mat_get_row(&m, r, row);
        for (int64_t i = 0; i < t->ne[0]; i++) {
            if (isfinite(row[i])) continue;
            char why[96];
            snprintf(why, sizeof why, "element %lld decodes to %s", (long long)i, isnan(row[i]) ? "NaN" : "infinity");
            note_bad(s, "tensor %s: row %llu, block %llu: %s", t->name, (unsigned long long)(r0 + r),
                     (unsigned long long)(i / (ti ? ti->blck_size : 1)), why);
            return 1;
        }
    }
    return 0;
}

/* One tensor: placement, shape, then every row.  -1 on a read error. */
static int check_tensor(const gguf_file *g, const gguf_tensor *t, uint8_t *buf, uint64_t cap, float *row,
                        check_stats *s, sl_err *err)
{
    const ggml_type_info *ti = ggml_type_get(t->type);
    const gguf_part *p = &g->parts[t->file];
    uint64_t rb = ti ? ggml_row_bytes(t->type, (uint64_t)t->ne[0]) : 0;
    s->tensors++;
    if (t->file_off > p->size || t->nbytes > p->size - t->file_off) {
        note_bad(s, "tensor %s: bytes %llu..%llu lie outside its file (%s)", t->name, (unsigned long long)t->file_off,
                 (unsigned long long)(t->file_off + t->nbytes), p->path);
        return 0;
    }
    if (!ti || !rb || t->nbytes % rb) {
        note_bad(s, "tensor %s: %llu bytes, rows of %llu bytes: %s", t->name, (unsigned long long)t->nbytes,
                 (unsigned long long)rb, ti ? "not whole rows of whole blocks" : "unknown type");
        return 0;
    }
    int decode = kernels_supports(t->type) || t->type == GGML_TYPE_F32;
    if (!decode) s->skipped++;
    uint64_t rows = t->nbytes / rb, per = cap / rb ? cap / rb : 1;
    for (uint64_t r = 0; r < rows; r += per) {
        uint64_t n = rows - r < per ? rows - r : per;
        if (gguf_read_tensor(g, t, r * rb, buf, n * rb, err)) return -1;
        s->bytes += n * rb;
        if (decode && check_rows(t, buf, (int64_t)r, (int64_t)n, rb, row, s)) return 0;
    }
    return 0;
}

static int check_pack(const char *pack, const gguf_file *g, check_stats *s)
{
    pack_check_result r;
    sl_err err;
    if (pack_check(pack, g, NULL, &r, &err)) return cli_fail("%s", err.msg);
    printf("pack %s: %llu records, %llu of %llu copies checked, %llu bad, %llu records lost\n", pack,
           (unsigned long long)r.records, (unsigned long long)r.copies, (unsigned long long)r.total_copies,
           (unsigned long long)r.bad, (unsigned long long)r.lost);
    if (r.bad) {
        printf("first bad copy: %s\n", r.first_bad);
        s->bad += r.bad;
    }
    return 0;
}

int cmd_check(int argc, char **argv)
{
    const char *model = NULL, *pack = NULL;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pack") && i + 1 < argc) pack = argv[++i];
        else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-q")) quiet = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout), 0;
        else if (argv[i][0] != '-' && !model) model = argv[i];
        else return usage(stderr), cli_fail("check: unexpected argument %s", argv[i]), 2;
    }
    if (!model) return usage(stderr), cli_fail("check: no model given"), 2;
    gguf_file *g;
    sl_err err;
    if (gguf_open(&g, model, &err)) return cli_fail("%s", err.msg);
    int64_t widest = 1;
    uint64_t cap = CHUNK; /* room for a whole row, however wide */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        uint64_t rb = ggml_row_bytes(t->type, (uint64_t)t->ne[0]);
        widest = t->ne[0] > widest ? t->ne[0] : widest;
        cap = rb > cap ? rb : cap;
    }
    uint8_t *buf = malloc(cap);
    float *row = malloc((size_t)widest * sizeof *row);
    check_stats s = {0};
    double t0 = sl_now();
    int rc = buf && row ? 0 : cli_fail("check: out of memory");
    for (uint64_t i = 0; !rc && i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (check_tensor(g, t, buf, cap, row, &s, &err)) rc = cli_fail("%s", err.msg);
        if (!quiet && !rc) fprintf(stderr, "\rchecked %llu of %llu tensors", (unsigned long long)(i + 1),
                                   (unsigned long long)g->n_tensors);
    }
    if (!quiet) fprintf(stderr, "\n");
    if (!rc) {
        char b[32];
        printf("%s: %llu tensors, %s read in %.1f s; %llu of a type not decoded here (placement and size checked)\n",
               model, (unsigned long long)s.tensors, cli_fmt_bytes(s.bytes, b, sizeof b), sl_now() - t0,
               (unsigned long long)s.skipped);
        if (s.bad) printf("first bad: %s\n", s.first_bad);
    }
    if (!rc && pack) rc = check_pack(pack, g, &s);
    free(buf), free(row);
    gguf_close(g);
    if (rc) return rc;
    printf("%s\n", s.bad ? "BAD" : "OK");
    return s.bad ? 1 : 0;
}
