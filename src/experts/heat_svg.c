/* An SVG heat map of a heat table: one cell per (layer, expert), coloured
 * by the expert's share of its layer's uses, with axes, a colour legend and
 * a title.  Written as plain text; cells carry a <title> tooltip. */
#include "experts/heat_svg.h"

#include <math.h>
#include <utf8proc.h>

/* Colour stops from dark (unused) to pale yellow (hottest). */
static const double STOPS[][4] = {
    {0.00, 20, 20, 60}, {0.35, 140, 30, 90}, {0.70, 240, 108, 40}, {1.00, 252, 245, 160},
};

static void colour(double x, char out[8])
{
    if (!(x > 0)) x = 0;
    if (x > 1) x = 1;
    int i = 0;
    while (i < 2 && x > STOPS[i + 1][0]) i++;
    double t = (x - STOPS[i][0]) / (STOPS[i + 1][0] - STOPS[i][0]);
    int c[3];
    for (int k = 0; k < 3; k++) c[k] = (int)lround(STOPS[i][k + 1] + t * (STOPS[i + 1][k + 1] - STOPS[i][k + 1]));
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
}

/* Text content: XML-escaped, invalid UTF-8 and control characters (not
 * allowed in XML 1.0) replaced. */
static void put_escaped(FILE *f, const char *s)
{
    while (*s) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s, -1, &cp);
        if (n <= 0 || cp < 0x20) {
            fputc('?', f);
            s++;
            continue;
        }
        if (n > 1) {
            fwrite(s, 1, (size_t)n, f);
            s += n;
            continue;
        }
        switch (*s++) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(s[-1], f);
        }
    }
}

typedef struct {
    int left, top, cw, ch, width, height;
    double max_share;
} svg_geom;

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static svg_geom layout(const heat_table *h)
{
    svg_geom g = {.left = 70, .top = 60};
    g.cw = clampi(800 / h->n_expert, 3, 28);
    g.ch = clampi(480 / h->n_layers, 3, 28);
    g.width = g.left + g.cw * h->n_expert + 130;
    g.height = g.top + g.ch * h->n_layers + 60;
    for (int l = 0; l < h->n_layers; l++)
        for (int e = 0; e < h->n_expert; e++) {
            double s = heat_share(h, l, e);
            if (s > g.max_share) g.max_share = s;
        }
    return g;
}

/* Ticks every STEP (1, 2, 5 x 10^k) so that about 16 labels fit. */
static int tick_step(int n)
{
    static const int STEPS[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
    for (int i = 0; i < 10; i++)
        if (n / STEPS[i] <= 16) return STEPS[i];
    return 1000;
}

static void cells(FILE *f, const heat_table *h, const svg_geom *g)
{
    fprintf(f, "<g stroke=\"none\">\n");
    for (int l = 0; l < h->n_layers; l++)
        for (int e = 0; e < h->n_expert; e++) {
            double s = heat_share(h, l, e);
            char c[8];
            colour(g->max_share > 0 ? s / g->max_share : 0, c);
            fprintf(f, "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">"
                       "<title>layer %d, expert %d: %.2f%% of the layer's uses</title></rect>\n",
                    g->left + e * g->cw, g->top + l * g->ch, g->cw, g->ch, c, l, e, 100 * s);
        }
    fprintf(f, "</g>\n");
}

static void axes(FILE *f, const heat_table *h, const svg_geom *g)
{
    int right = g->left + g->cw * h->n_expert, bottom = g->top + g->ch * h->n_layers;
    fprintf(f, "<g font-family=\"sans-serif\" font-size=\"11\" fill=\"#222\">\n");
    for (int e = 0, st = tick_step(h->n_expert); e < h->n_expert; e += st)
        fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
                g->left + e * g->cw + g->cw / 2, bottom + 14, e);
    for (int l = 0, st = tick_step(h->n_layers); l < h->n_layers; l += st)
        fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%d</text>\n", g->left - 6,
                g->top + l * g->ch + g->ch / 2 + 4, l);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">expert</text>\n", (g->left + right) / 2, bottom + 34);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 %d %d)\">layer</text>\n", 24,
            (g->top + bottom) / 2, 24, (g->top + bottom) / 2);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", g->left,
            g->top, right - g->left, bottom - g->top);
    fprintf(f, "</g>\n");
}

/* A vertical colour bar from 0 to the largest share. */
static void legend(FILE *f, const heat_table *h, const svg_geom *g)
{
    enum { STEPS = 32 };
    int x = g->left + g->cw * h->n_expert + 30, span = g->ch * h->n_layers, y0 = g->top;
    if (span < 64) span = 64;
    fprintf(f, "<g font-family=\"sans-serif\" font-size=\"11\" fill=\"#222\">\n");
    for (int i = 0; i < STEPS; i++) {
        char c[8];
        colour(1.0 - (i + 0.5) / STEPS, c);
        int ya = y0 + span * i / STEPS, yb = y0 + span * (i + 1) / STEPS;
        fprintf(f, "<rect class=\"legend\" x=\"%d\" y=\"%d\" width=\"14\" height=\"%d\" fill=\"%s\"/>\n", x, ya,
                yb - ya, c);
    }
    for (int i = 0; i <= 2; i++)
        fprintf(f, "<text x=\"%d\" y=\"%d\">%.1f%%</text>\n", x + 20, y0 + span * i / 2 + 4,
                100 * g->max_share * (1 - i / 2.0));
    fprintf(f, "<text x=\"%d\" y=\"%d\">share of layer</text>\n", x - 10, y0 - 10);
    fprintf(f, "</g>\n");
}

int heat_svg_write(const heat_table *h, const char *model_name, FILE *f)
{
    svg_geom g = layout(h);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n",
            g.width, g.height, g.width, g.height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"28\" font-family=\"sans-serif\" font-size=\"15\" fill=\"#111\">Expert heat: ",
            g.left);
    put_escaped(f, model_name);
    fprintf(f, " (%d layers x %d experts, %llu forward passes)</text>\n", h->n_layers, h->n_expert,
            (unsigned long long)h->passes);
    cells(f, h, &g);
    axes(f, h, &g);
    legend(f, h, &g);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
