#include "gguf/summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool gguf_is_expert_tensor(const char *name)
{
    return strstr(name, "_exps.") != NULL || (strlen(name) > 5 && !strcmp(name + strlen(name) - 5, "_exps"));
}

int gguf_tensor_layer(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long n = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || n < 0 || n > 100000) return -1;
    return (int)n;
}

static void describe_tokenizer(model_summary *s, const gguf_file *g)
{
    const gguf_str *model = NULL, *pre = NULL, *tmpl = NULL;
    const void *data;
    uint64_t n_tok = 0, n_merges = 0;
    gguf_get_str(g, "tokenizer.ggml.model", &model, NULL);
    gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL);
    gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL);
    gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING, &data, &n_tok, NULL);
    gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_STRING, &data, &n_merges, NULL);
    uint32_t bos = UINT32_MAX, eos = UINT32_MAX;
    gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos, NULL);
    gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos, NULL);
    if (!model) {
        snprintf(s->tokenizer, sizeof s->tokenizer, "(none)");
        return;
    }
    char ids[64] = "";
    if (bos != UINT32_MAX || eos != UINT32_MAX)
        snprintf(ids, sizeof ids, ", bos %d, eos %d", (int)bos, (int)eos);
    snprintf(s->tokenizer, sizeof s->tokenizer, "%s (pre %s), %llu tokens, %llu merges%s, chat template %s",
             model->s, pre ? pre->s : "default", (unsigned long long)n_tok, (unsigned long long)n_merges, ids,
             tmpl ? "present" : "none");
}

static void read_counts(model_summary *s, const gguf_file *g)
{
    char key[128];
    snprintf(key, sizeof key, "%s.block_count", s->arch);
    gguf_get_u32(g, key, &s->n_layers, NULL);
    snprintf(key, sizeof key, "%s.expert_count", s->arch);
    gguf_get_u32(g, key, &s->n_expert, NULL);
    snprintf(key, sizeof key, "%s.expert_used_count", s->arch);
    gguf_get_u32(g, key, &s->n_expert_used, NULL);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        int l = gguf_tensor_layer(g->tensors[i].name);
        if (l >= 0 && (uint32_t)l + 1 > s->n_layers) s->n_layers = (uint32_t)l + 1;
    }
}

/* Number of experts a *_exps tensor holds: its outermost dimension. */
static int64_t experts_in(const gguf_tensor *t) { return t->ne[t->n_dims - 1]; }

int model_summary_build(model_summary *s, const gguf_file *g, sl_err *err)
{
    memset(s, 0, sizeof *s);
    const gguf_str *arch = NULL;
    if (gguf_get_str(g, "general.architecture", &arch, err) < 0) return -1;
    snprintf(s->arch, sizeof s->arch, "%s", arch ? arch->s : "");
    describe_tokenizer(s, g);
    read_counts(s, g);
    s->layer_expert_bytes = calloc(s->n_layers + 1, sizeof *s->layer_expert_bytes);
    if (!s->layer_expert_bytes) return sl_errf(err, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        s->total_bytes += t->nbytes;
        int l = gguf_tensor_layer(t->name);
        if (!gguf_is_expert_tensor(t->name) || l < 0) {
            s->spine_bytes += t->nbytes, s->spine_tensors++;
            continue;
        }
        s->expert_bytes += t->nbytes, s->expert_tensors++;
        int64_t ne = experts_in(t);
        if (s->n_expert == 0) s->n_expert = (uint32_t)ne;
        if (ne != (int64_t)s->n_expert || t->nbytes % (uint64_t)ne)
            return sl_errf(err, "%s: expert tensor '%s' holds %lld experts, but the model has %u", g->path,
                           t->name, (long long)ne, s->n_expert);
        s->layer_expert_bytes[l] += t->nbytes / (uint64_t)ne;
    }
    for (uint32_t l = 0; l < s->n_layers; l++) {
        uint64_t b = s->layer_expert_bytes[l];
        if (!b) continue;
        s->moe_layers++;
        if (!s->expert_bytes_min || b < s->expert_bytes_min) s->expert_bytes_min = b;
        if (b > s->expert_bytes_max) s->expert_bytes_max = b;
        s->expert_bytes_per_token += b * s->n_expert_used;
    }
    return 0;
}

void model_summary_free(model_summary *s)
{
    free(s->layer_expert_bytes);
    s->layer_expert_bytes = NULL;
}
