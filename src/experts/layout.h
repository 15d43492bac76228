/* Where each routed expert's bytes live: for every MoE layer, the *_exps
 * tensors that make up one expert ("parts": gate, up, down, biases...), in
 * the order the model's MoE code expects them in expert_view.parts.  Expert
 * e's slice of a part is the contiguous range [off + e*stride, +bytes). */
#ifndef SLUICE_LAYOUT_H
#define SLUICE_LAYOUT_H

#include <stdint.h>

#include "experts/provider.h"
#include "gguf/gguf.h"

typedef struct {
    uint32_t file;    /* gguf part (split file) index */
    uint64_t off;     /* absolute file offset of expert 0's slice */
    uint64_t stride;  /* bytes from one expert's slice to the next */
    uint64_t bytes;   /* bytes of one expert's slice */
    uint32_t type;    /* ggml_type of the tensor */
    int64_t ne0, ne1; /* one expert's matrix: ne1 rows of ne0 (ne1 = 1 for a vector) */
} expert_part;

typedef struct {
    int n_parts;      /* 0 for dense layers */
    expert_part parts[EXPERT_MAX_PARTS];
    int8_t part_kind[EXPERT_MAX_PARTS]; /* index into EXPERT_PART_NAMES, -1 if added by hand */
} expert_layer;

typedef struct {
    const gguf_file *g;
    int n_layers, n_expert, n_used;
    expert_layer *layer; /* [n_layers] */
} expert_layout;

int expert_layout_init(expert_layout *L, const gguf_file *g, int n_layers, int n_expert, int n_used,
                       sl_err *err);
void expert_layout_free(expert_layout *L);

/* Interleaves N slices of part PT (STRIDE bytes apart, from BUF) by 16
 * rows in place (kernels.h: SL_LAYOUT_Q8_0_R16) where that pays: Q8_0 on
 * AVX-512, every 16-row group inside one slice and a fused gate+up's
 * halves on a group (rows a multiple of 32).  Returns the slices' layout
 * afterwards (SL_LAYOUT_ROWS: left as read). */
int expert_part_interleave(const expert_part *pt, void *buf, size_t n, size_t stride);

/* Appends tensor T (whose outermost dimension is the expert index) as the
 * next part of LAYER's experts. */
int expert_layout_add(expert_layout *L, int layer, const gguf_tensor *t, sl_err *err);

/* The tensors an expert can be made of, in the canonical order every MoE
 * layer uses for expert_view.parts (a layer has at most EXPERT_MAX_PARTS of
 * them: fused converters write ffn_gate_up_exps instead of gate and up).
 * Packs store these indices, so new kinds are only ever appended. */
enum { EXPERT_PART_KINDS = 8 };
extern const char *const EXPERT_PART_NAMES[EXPERT_PART_KINDS];

/* Builds the layout from the GGUF's blk.N.<part> tensors in canonical order
 * (parts absent from a layer are skipped, so indices are per layer: the
 * model reads expert_layer.part_kind to know which is which). */
int expert_layout_from_gguf(expert_layout *L, const gguf_file *g, int n_layers, int n_expert, int n_used,
                            sl_err *err);

/* Bytes of one whole expert of LAYER (0 for dense layers). */
uint64_t expert_layout_bytes(const expert_layout *L, int layer);

/* Number of layers that have routed experts. */
int expert_layout_moe_layers(const expert_layout *L);

#endif
