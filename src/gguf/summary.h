/* How a model's weights split into the resident spine and the routed experts
 * (tensors named *_exps) that sluice streams from disk. */
#ifndef SLUICE_SUMMARY_H
#define SLUICE_SUMMARY_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct {
    char arch[64];
    char tokenizer[256];          /* one-line description */
    uint64_t spine_bytes, spine_tensors;
    uint64_t expert_bytes, expert_tensors;
    uint64_t total_bytes;         /* all tensor data = spine + experts */
    uint32_t n_layers;            /* from <arch>.block_count, or highest blk.N + 1 */
    uint32_t moe_layers;          /* layers holding routed experts */
    uint32_t n_expert, n_expert_used;
    uint64_t expert_bytes_min, expert_bytes_max; /* one expert (all its tensors) in one layer */
    uint64_t expert_bytes_per_token;              /* n_expert_used experts in every MoE layer */
    uint64_t *layer_expert_bytes;                 /* [n_layers]; 0 for dense layers */
} model_summary;

/* Routed-expert tensors: ffn_{gate,up,down,gate_up}_exps weights and their
 * per-expert biases/scales; not the router or its bias. */
bool gguf_is_expert_tensor(const char *name);

/* N for names "blk.N.*", else -1. */
int gguf_tensor_layer(const char *name);

int model_summary_build(model_summary *s, const gguf_file *g, sl_err *err);
void model_summary_free(model_summary *s);

#endif
