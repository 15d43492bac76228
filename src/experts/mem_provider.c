#include "experts/mem_provider.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "util/bigbuf.h"
#include "util/fileio.h"

typedef struct {
    int n_parts;
    const unsigned char *data[EXPERT_MAX_PARTS];
    uint64_t stride[EXPERT_MAX_PARTS];
    uint8_t layout[EXPERT_MAX_PARTS];
} mem_layer;

typedef struct {
    expert_provider base;
    int n_layers, n_expert;
    mem_layer *layers;
    unsigned char *buf; /* every part's slices (all_parts_bytes) */
    uint64_t bytes;
    /* the current request */
    int layer;
    int32_t *ids;
    int n_ids, cursor;
} mem_provider;

static int mp_begin(expert_provider *p, int layer, const int32_t *ids, int n, sl_err *err)
{
    mem_provider *m = (mem_provider *)p;
    if (layer < 0 || layer >= m->n_layers || m->layers[layer].n_parts == 0)
        return sl_errf(err, "expert provider: layer %d has no experts", layer);
    if (n < 0 || n > m->n_expert)
        return sl_errf(err, "expert provider: %d experts requested, the model has %d", n, m->n_expert);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->n_expert)
            return sl_errf(err, "expert provider: expert id %d out of range [0, %d)", ids[i], m->n_expert);
    memcpy(m->ids, ids, (size_t)n * sizeof *ids);
    m->layer = layer;
    m->n_ids = n;
    m->cursor = 0;
    return 0;
}

static int mp_next(expert_provider *p, expert_view *v, sl_err *err)
{
    (void)err;
    mem_provider *m = (mem_provider *)p;
    if (m->cursor >= m->n_ids) return -1;
    int i = m->cursor++;
    const mem_layer *L = &m->layers[m->layer];
    memset(v, 0, sizeof *v);
    v->id = m->ids[i];
    for (int k = 0; k < L->n_parts; k++) {
        v->parts[k] = L->data[k] + (uint64_t)v->id * L->stride[k];
        v->layout[k] = L->layout[k];
    }
    return i;
}

static void mp_end(expert_provider *p, int layer)
{
    (void)layer;
    mem_provider *m = (mem_provider *)p;
    m->n_ids = m->cursor = 0;
}

static void mp_destroy(expert_provider *p)
{
    mem_provider *m = (mem_provider *)p;
    if (!m) return;
    free(m->buf);
    free(m->layers);
    free(m->ids);
    free(m);
}

static const expert_provider_ops mem_ops = {
    .begin = mp_begin, .next = mp_next, .release = NULL, .end = mp_end, .hint = NULL, .destroy = mp_destroy,
};

/* What a part's N_EXPERT slices take of the one buffer: rounded to 64, so
 * the next part starts aligned. */
static uint64_t part_span(const expert_part *part, int n_expert)
{
    return (part->stride * (uint64_t)n_expert + 63) & ~(uint64_t)63;
}

/* One part: all n_expert slices, read in one go (they are usually one
 * contiguous tensor) to BUF. */
static int load_part(mem_provider *m, mem_layer *ml, int k, const expert_layout *L, const expert_part *part,
                     unsigned char *buf, sl_err *err)
{
    const gguf_part *f = &L->g->parts[part->file];
    uint64_t len = part->stride * (uint64_t)m->n_expert;
    if (sl_pread_full(f->fd, buf, (size_t)len, part->off, f->path, err)) return -1;
    ml->data[k] = buf;
    ml->stride[k] = part->stride;
    m->bytes += len;
    /* Q8_0 experts in RAM are interleaved where that pays */
    ml->layout[k] = (uint8_t)expert_part_interleave(part, buf, (size_t)m->n_expert, (size_t)part->stride);
    return 0;
}

/* The bytes of every part, each rounded to 64: one buffer holds them all,
 * so that it is large enough for huge pages (sl_big_alloc); a part of
 * tinymoe's 32 experts is 1.7 MB, and 4 KiB pages cost its reads from the
 * last-level cache about a fifth of their rate (bench/membw.c).  An error
 * on a slice layout this provider does not hold, or on overflow. */
static int all_parts_bytes(const expert_layout *L, int n_expert, uint64_t *out, sl_err *err)
{
    uint64_t total = 0;
    for (int il = 0; il < L->n_layers; il++)
        for (int k = 0; k < L->layer[il].n_parts; k++) {
            const expert_part *part = &L->layer[il].parts[k];
            uint64_t stride = part->stride, len = stride * (uint64_t)n_expert;
            if (!stride || part->bytes != stride || len / stride != (uint64_t)n_expert || len > SIZE_MAX - total - 63)
                return sl_errf(err, "%s: expert slices of %llu bytes every %llu are not supported",
                               L->g->parts[part->file].path, (unsigned long long)part->bytes,
                               (unsigned long long)stride);
            total += part_span(part, n_expert);
        }
    *out = total;
    return 0;
}

int mem_provider_create(expert_provider **out, const expert_layout *L, sl_err *err)
{
    *out = NULL;
    mem_provider *m = calloc(1, sizeof *m);
    if (!m) return sl_errf(err, "out of memory creating the expert provider");
    m->base.ops = &mem_ops;
    m->n_layers = L->n_layers;
    m->n_expert = L->n_expert;
    m->layers = calloc((size_t)(L->n_layers > 0 ? L->n_layers : 1), sizeof *m->layers);
    m->ids = calloc((size_t)(L->n_expert > 0 ? L->n_expert : 1), sizeof *m->ids);
    if (!m->layers || !m->ids) {
        mp_destroy(&m->base);
        return sl_errf(err, "out of memory creating the expert provider");
    }
    uint64_t total = 0;
    if (all_parts_bytes(L, m->n_expert, &total, err)) {
        mp_destroy(&m->base);
        return -1;
    }
    unsigned char *buf = m->buf = total ? sl_big_alloc((size_t)total) : NULL;
    if (total && !buf) {
        mp_destroy(&m->base);
        return sl_errf(err, "out of memory loading %llu bytes of experts", (unsigned long long)total);
    }
    for (int il = 0; il < L->n_layers; il++) {
        const expert_layer *src = &L->layer[il];
        m->layers[il].n_parts = src->n_parts;
        for (int k = 0; k < src->n_parts; k++) {
            if (load_part(m, &m->layers[il], k, L, &src->parts[k], buf, err)) {
                mp_destroy(&m->base);
                return -1;
            }
            buf += part_span(&src->parts[k], m->n_expert);
        }
    }
    *out = &m->base;
    return 0;
}

uint64_t mem_provider_bytes(const expert_provider *p)
{
    return ((const mem_provider *)p)->bytes;
}
