#include "experts/layout.h"

#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>

const char *const EXPERT_PART_NAMES[EXPERT_PART_KINDS] = {
    "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
    "ffn_gate_exps.bias",   "ffn_up_exps.bias",   "ffn_down_exps.bias",
    "ffn_gate_up_exps.weight", "ffn_gate_up_exps.bias",
};

int expert_layout_init(expert_layout *L, const gguf_file *g, int n_layers, int n_expert, int n_used,
                       sl_err *err)
{
    *L = (expert_layout){.g = g, .n_layers = n_layers, .n_expert = n_expert, .n_used = n_used};
    if (n_layers <= 0 || n_expert <= 0 || n_used <= 0 || n_used > n_expert)
        return sl_errf(err, "%s: bad expert geometry (%d layers, %d experts, %d used)", g->path, n_layers,
                       n_expert, n_used);
    L->layer = calloc((size_t)n_layers, sizeof *L->layer);
    return L->layer ? 0 : sl_errf(err, "out of memory");
}

void expert_layout_free(expert_layout *L)
{
    free(L->layer);
    L->layer = NULL;
}

int expert_layout_add(expert_layout *L, int layer, const gguf_tensor *t, sl_err *err)
{
    if (layer < 0 || layer >= L->n_layers)
        return sl_errf(err, "%s: tensor '%s': layer %d out of range", L->g->path, t->name, layer);
    expert_layer *l = &L->layer[layer];
    if (l->n_parts >= EXPERT_MAX_PARTS)
        return sl_errf(err, "%s: layer %d has more than %d expert tensors", L->g->path, layer, EXPERT_MAX_PARTS);
    int64_t ne = t->ne[t->n_dims - 1];
    if (t->n_dims < 2 || ne != L->n_expert || t->nbytes % (uint64_t)ne)
        return sl_errf(err, "%s: expert tensor '%s' has %lld experts in its last dimension, expected %d",
                       L->g->path, t->name, (long long)ne, L->n_expert);
    uint64_t stride = t->nbytes / (uint64_t)ne;
    l->part_kind[l->n_parts] = -1;
    l->parts[l->n_parts++] = (expert_part){.file = t->file, .off = t->file_off, .stride = stride, .bytes = stride,
                                           .type = t->type, .ne0 = t->ne[0], .ne1 = t->n_dims > 2 ? t->ne[1] : 1};
    return 0;
}

uint64_t expert_layout_bytes(const expert_layout *L, int layer)
{
    uint64_t b = 0;
    for (int p = 0; p < L->layer[layer].n_parts; p++) b += L->layer[layer].parts[p].bytes;
    return b;
}

int expert_layout_moe_layers(const expert_layout *L)
{
    int n = 0;
    for (int l = 0; l < L->n_layers; l++) n += L->layer[l].n_parts > 0;
    return n;
}

int expert_layout_from_gguf(expert_layout *L, const gguf_file *g, int n_layers, int n_expert, int n_used,
                            sl_err *err)
{
    if (expert_layout_init(L, g, n_layers, n_expert, n_used, err)) return -1;
    for (int l = 0; l < n_layers; l++)
        for (int k = 0; k < EXPERT_PART_KINDS; k++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, EXPERT_PART_NAMES[k]);
            const gguf_tensor *t = gguf_find_tensor(g, name);
            if (!t) continue;
            if (expert_layout_add(L, l, t, err)) {
                expert_layout_free(L);
                return -1;
            }
            L->layer[l].part_kind[L->layer[l].n_parts - 1] = (int8_t)k;
        }
    return 0;
}

int expert_part_interleave(const expert_part *pt, void *buf, size_t n, size_t stride)
{
    sl_mat w = {.type = pt->type, .ne0 = pt->ne0, .ne1 = pt->ne1,
                .row_bytes = (size_t)ggml_row_bytes(pt->type, (uint64_t)pt->ne0), .data = buf};
    if (!mat_interleave_pays(&w) || w.ne1 % 32 || (uint64_t)w.row_bytes * (uint64_t)w.ne1 != pt->bytes)
        return SL_LAYOUT_ROWS;
    return mat_interleave_n(&w, buf, n, stride) == 0 ? SL_LAYOUT_Q8_0_R16 : SL_LAYOUT_ROWS; /* else no memory */
}
