#include "experts/timeline_svg.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WIDTH = 1100, LEFT = 70, ROW_H = 64, TOP = 74, READ_LANES = 8 };

/* Row geometry (y offsets inside a row). */
enum { Y_LAYER = 2, H_LAYER = 6, Y_READ = 10, H_READ = 24, Y_BUSY = 36, H_BUSY = 5, Y_COMP = 44, H_COMP = 10,
       Y_WAIT = 56, H_WAIT = 5 };

static const char *const READ_COLOUR[] = {"#d9480f", "#1c7ed6"}; /* demand, prefetch */

typedef struct {
    double t0, t1;
} span;

static int by_t0(const void *a, const void *b)
{
    double x = ((const span *)a)->t0, y = ((const span *)b)->t0;
    return x < y ? -1 : x > y;
}

/* Sum of the union of SPANS (sorted by start), clipped to [a, b). */
static double union_len(const span *sp, size_t n, double a, double b)
{
    double total = 0, end = a;
    for (size_t i = 0; i < n; i++) {
        double s = sp[i].t0 > end ? sp[i].t0 : end, e = sp[i].t1 < b ? sp[i].t1 : b;
        if (e > s) total += e - s, end = e;
    }
    return total;
}

static void rect(FILE *f, double x, double y, double w, double h, const char *fill, const char *extra)
{
    if (w < 0.3) w = 0.3;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s/>\n", x, y, w, h, fill,
            extra ? extra : "");
}

int timeline_svg_write(const char *path, const store_event *ev, size_t n, double t_from, double t_to,
                       const char *title, int max_rows, sl_err *err)
{
    /* rows: begins of the lowest layer seen */
    int low = 1 << 30;
    for (size_t i = 0; i < n; i++)
        if (ev[i].kind == TL_LAYER && ev[i].t0 >= t_from && ev[i].t0 < t_to && ev[i].layer < low) low = ev[i].layer;
    double *row = malloc(((size_t)max_rows + 1) * sizeof *row);
    span *reads = malloc((n ? n : 1) * sizeof *reads);
    if (!row || !reads) return free(row), free(reads), sl_errf(err, "timeline: out of memory");
    int rows = 0;
    bool more = false; /* a token after the last row drawn: it ends that row */
    for (size_t i = 0; i < n && !more; i++)
        if (ev[i].kind == TL_LAYER && ev[i].layer == low && ev[i].t0 >= t_from && ev[i].t0 < t_to) {
            if (rows == max_rows) more = true;
            row[rows] = ev[i].t0;
            rows += !more;
        }
    if (!rows) return free(row), free(reads), sl_errf(err, "%s: no decode steps recorded in the window", path);
    if (!more) row[rows] = t_to;
    double longest = 0;
    for (int r = 0; r < rows; r++)
        if (row[r + 1] - row[r] > longest) longest = row[r + 1] - row[r];
    double scale = longest > 0 ? (WIDTH - LEFT - 10) / longest : 1;
    FILE *f = fopen(path, "w");
    if (!f) return free(row), free(reads), sl_errf(err, "%s: cannot write: %s", path, strerror(errno));
    int height = TOP + rows * ROW_H + 30;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", WIDTH, height);
    fprintf(f, "<text x=\"10\" y=\"18\" font-size=\"14\">");
    for (const char *p = title ? title : ""; *p; p++)
        if (*p == '<') fputs("&lt;", f);
        else if (*p == '&') fputs("&amp;", f);
        else if ((unsigned char)*p >= 0x20) fputc(*p, f);
    fputs("</text>\n", f);
    double busy_all = 0, comp_all = 0, wait_all = 0, time_all = 0;
    for (int r = 0; r < rows; r++) {
        double a = row[r], b = row[r + 1], y = TOP + r * ROW_H;
        size_t nr = 0;
        double comp = 0, wait = 0;
        int lane = 0;
        fprintf(f, "<text x=\"4\" y=\"%.0f\">token %d</text>\n", y + 24, r + 1);
        for (size_t i = 0; i < n; i++) {
            const store_event *e = &ev[i];
            if (e->t1 < a || e->t0 >= b) continue;
            double s = e->t0 < a ? a : e->t0, t = e->t1 > b ? b : e->t1;
            double x = LEFT + (s - a) * scale, w = (t - s) * scale;
            char tip[96];
            switch (e->kind) {
            case TL_LAYER:
                rect(f, x, y + Y_LAYER, w, H_LAYER, e->layer % 2 ? "#adb5bd" : "#dee2e6", NULL);
                break;
            case TL_READ_DEMAND:
            case TL_READ_PREFETCH:
                snprintf(tip, sizeof tip, "><title>layer %d expert %d: %.2f ms%s</title></rect", e->layer, e->expert,
                         (e->t1 - e->t0) * 1e3, e->dropped ? " (dropped)" : "");
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"2.2\" fill=\"%s\"%s>\n", x,
                        y + Y_READ + (lane++ % READ_LANES) * 3.0, w < 0.3 ? 0.3 : w,
                        e->dropped ? "#868e96" : READ_COLOUR[e->kind == TL_READ_PREFETCH], strchr(tip, '>'));
                if (!e->dropped) reads[nr++] = (span){s, t};
                break;
            case TL_COMPUTE:
                rect(f, x, y + Y_COMP, w, H_COMP, "#2f9e44", NULL);
                comp += t - s;
                break;
            case TL_WAIT:
                rect(f, x, y + Y_WAIT, w, H_WAIT, "#e03131", NULL);
                wait += t - s;
                break;
            }
        }
        qsort(reads, nr, sizeof *reads, by_t0);
        double end = a;
        for (size_t i = 0; i < nr; i++) { /* the disk's busy strip */
            double s = reads[i].t0 > end ? reads[i].t0 : end, e = reads[i].t1;
            if (e > s) rect(f, LEFT + (s - a) * scale, y + Y_BUSY, (e - s) * scale, H_BUSY, "#343a40", NULL), end = e;
        }
        double busy = union_len(reads, nr, a, b), len = b - a;
        fprintf(f, "<text x=\"4\" y=\"%.0f\" fill=\"#495057\">%.0f ms</text>\n", y + 38, len * 1e3);
        fprintf(f, "<text x=\"4\" y=\"%.0f\" fill=\"#495057\">disk %.0f%%</text>\n", y + 52,
                len > 0 ? 100 * busy / len : 0);
        busy_all += busy, comp_all += comp, wait_all += wait, time_all += len;
    }
    double bs = time_all > 0 ? busy_all / time_all : 0, cs = time_all > 0 ? comp_all / time_all : 0;
    double ws = time_all > 0 ? wait_all / time_all : 0;
    fprintf(f, "<text x=\"10\" y=\"36\">over the first %d tokens: disk busy %.0f%%, experts computing %.0f%%, compute waiting "
               "on reads %.0f%% of the time: %s</text>\n",
            rows, 100 * bs, 100 * cs, 100 * ws,
            ws > 0.3 || bs > 0.9 ? "the disk set the pace" : "the CPU set the pace (the disk had slack)");
    const char *legend[][2] = {{"#dee2e6", "layers"},        {"#d9480f", "demand read"},
                               {"#1c7ed6", "prefetch read"}, {"#868e96", "dropped guess"},
                               {"#343a40", "disk busy"},     {"#2f9e44", "expert compute"},
                               {"#e03131", "waiting on a read"}};
    for (int i = 0; i < 7; i++) {
        rect(f, 10 + i * 150, 48, 12, 10, legend[i][0], NULL);
        fprintf(f, "<text x=\"%d\" y=\"57\">%s</text>\n", 26 + i * 150, legend[i][1]);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#495057\">time within each token (full width = %.0f ms)</text>\n",
            LEFT, height - 10, longest * 1e3);
    fputs("</svg>\n", f);
    int bad = ferror(f);
    free(row), free(reads);
    if (fclose(f) || bad) return sl_errf(err, "%s: write failed", path);
    return 0;
}
