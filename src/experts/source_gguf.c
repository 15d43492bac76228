/* Experts read straight from the GGUF: each part of an expert is a
 * contiguous slice of a *_exps tensor at an arbitrary 32-byte alignment, so
 * the read covers the enclosing 4 KiB-aligned range (O_DIRECT's rule) and
 * the view points at the slice inside it.  No copy, and the alignment
 * overhead is at most two pages per part. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "experts/source.h"

#define ALIGN 4096u

typedef struct {
    expert_source base;
    int *fds;
} gguf_source;

static uint64_t align_down(uint64_t x) { return x & ~(uint64_t)(ALIGN - 1); }
static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) & ~(uint64_t)(ALIGN - 1); }

/* Worst case per part: the slice plus a partial page at each end. */
uint64_t source_gguf_slot_bytes(const expert_layout *L)
{
    uint64_t best = 0;
    for (int l = 0; l < L->n_layers; l++) {
        uint64_t b = 0;
        for (int p = 0; p < L->layer[l].n_parts; p++) b += align_up(L->layer[l].parts[p].bytes) + ALIGN;
        if (b > best) best = b;
    }
    return best;
}

static uint64_t gs_slot_bytes(const expert_source *s) { return source_gguf_slot_bytes(s->L); }

static int gs_plan(expert_source *s, int layer, int expert, uint8_t *base, uint32_t chunk, read_plan *rp,
                   sl_err *err)
{
    const gguf_source *gs = (const gguf_source *)s;
    const expert_layer *el = &s->L->layer[layer];
    uint64_t cursor = 0;
    rp->n = 0, rp->expect = 0;
    for (int p = 0; p < el->n_parts; p++) {
        const expert_part *pt = &el->parts[p];
        uint64_t start = pt->off + (uint64_t)expert * pt->stride;
        uint64_t a0 = align_down(start), a1 = align_up(start + pt->bytes);
        uint64_t fsize = s->L->g->parts[pt->file].size;
        if (a1 > align_up(fsize)) a1 = align_up(fsize);
        rp->expect += (a1 < fsize ? a1 : fsize) - a0; /* O_DIRECT stops at EOF */
        for (uint64_t o = a0; o < a1; o += chunk) {
            if (rp->n == SOURCE_MAX_READS)
                return sl_errf(err, "expert %d of layer %d needs more than %d reads; raise the chunk size", expert,
                               layer, SOURCE_MAX_READS);
            uint64_t len = a1 - o < chunk ? a1 - o : chunk;
            rp->file[rp->n] = pt->file;
            rp->req[rp->n++] = (io_req){.fd = gs->fds[pt->file], .off = o, .len = (uint32_t)len,
                                        .dst = base + cursor + (o - a0)};
        }
        cursor += a1 - a0;
    }
    return 0;
}

static void gs_view(const expert_source *s, int layer, int expert, const uint8_t *base, expert_view *v)
{
    const expert_layer *el = &s->L->layer[layer];
    uint64_t cursor = 0;
    v->id = expert;
    for (int p = 0; p < el->n_parts; p++) {
        const expert_part *pt = &el->parts[p];
        uint64_t start = pt->off + (uint64_t)expert * pt->stride;
        v->parts[p] = base + cursor + (start - align_down(start));
        cursor += align_up(start + pt->bytes) - align_down(start);
    }
}

static const char *gs_path(const expert_source *s, uint32_t f) { return s->L->g->parts[f].path; }
static int gs_fd(const expert_source *s, uint32_t f) { return ((const gguf_source *)s)->fds[f]; }
static uint64_t gs_size(const expert_source *s, uint32_t f) { return s->L->g->parts[f].size; }

static void gs_destroy(expert_source *s)
{
    gguf_source *gs = (gguf_source *)s;
    for (uint32_t f = 0; gs->fds && f < s->L->g->n_parts; f++)
        if (gs->fds[f] >= 0) close(gs->fds[f]);
    free(gs->fds);
    free(gs);
}

static const expert_source_ops GGUF_SOURCE_OPS = {.slot_bytes = gs_slot_bytes, .plan = gs_plan,     .view = gs_view,
                                                  .file_path = gs_path,         .file_fd = gs_fd,   .file_size = gs_size,
                                                  .destroy = gs_destroy};

int source_gguf_create(expert_source **out, const expert_layout *L, sl_err *err)
{
    gguf_source *gs = calloc(1, sizeof *gs);
    const gguf_file *g = L->g;
    if (gs) gs->fds = malloc(g->n_parts * sizeof *gs->fds);
    if (!gs || !gs->fds) {
        free(gs);
        return sl_errf(err, "out of memory");
    }
    gs->base = (expert_source){.ops = &GGUF_SOURCE_OPS, .L = L, .direct = 1, .n_files = (int)g->n_parts};
    for (uint32_t f = 0; f < g->n_parts; f++) gs->fds[f] = -1;
    for (uint32_t f = 0; f < g->n_parts; f++) {
        gs->fds[f] = open(g->parts[f].path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (gs->fds[f] < 0 && errno == EINVAL) {
            /* filesystems without O_DIRECT (tmpfs) still work, but the page
             * cache then holds a second copy; the stats say so */
            gs->base.direct = 0;
            gs->fds[f] = open(g->parts[f].path, O_RDONLY | O_CLOEXEC);
        }
        if (gs->fds[f] < 0) {
            sl_errf(err, "%s: cannot open for expert reads: %s", g->parts[f].path, strerror(errno));
            gs_destroy(&gs->base);
            return -1;
        }
    }
    *out = &gs->base;
    return 0;
}
