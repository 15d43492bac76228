/* Test helper: whether an expert view a provider handed out holds the
 * GGUF's bytes of that expert, read again with a plain pread.  A store slot
 * handed out twice holds its Q8_0 parts interleaved (store.c), so the
 * reference is put in the view's layout before the comparison. */
#ifndef SLUICE_TEST_VIEW_CHECK_H
#define SLUICE_TEST_VIEW_CHECK_H

#include <stdint.h>
#include <string.h>

#include "experts/layout.h"
#include "gguf/gguf.h"
#include "util/fileio.h"

/* 0 if every part of V (expert V->id of LAYER) equals the file's. */
static int view_matches_gguf(const gguf_file *g, const expert_layout *L, int layer, const expert_view *v)
{
    static uint8_t ref[1 << 20];
    const expert_layer *el = &L->layer[layer];
    for (int p = 0; p < el->n_parts; p++) {
        const expert_part *pt = &el->parts[p];
        sl_err err;
        if (pt->bytes > sizeof ref ||
            sl_pread_full(g->parts[pt->file].fd, ref, pt->bytes, pt->off + (uint64_t)v->id * pt->stride, g->path,
                          &err))
            return -1;
        if (v->layout[p] && expert_part_interleave(pt, ref, 1, 0) != v->layout[p]) return -1;
        if (memcmp(ref, v->parts[p], pt->bytes)) return -1;
    }
    return 0;
}

#endif
