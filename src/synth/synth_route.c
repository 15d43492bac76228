/* The routing check for synthesized files, usable before any engine runs
 * them: random stand-ins for normed hidden states go through one layer's
 * real router (read from the file) and expert selection as llama.cpp does it
 * (softmax: top-k logits; sigmoid: top-k of sigmoid(logit) + exp_probs_b;
 * expert groups are not modelled, the presets use one group).  The stand-in
 * is N(0, 1) per coordinate with the skew coordinate at 1, which is what the
 * construction aims the norms at (synth_write.c); how far real hidden states
 * stray from that is what a run through an engine measures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth/synth.h"
#include "synth/synth_gen.h"

typedef struct {
    uint32_t n_embd, n_expert, n_used, gating;
    int32_t skew_dim;
    float *w, *bias; /* router [n_expert][n_embd]; selection bias or NULL */
} router;

static int read_f32_tensor(const gguf_file *g, const char *name, uint64_t want, float **out, sl_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return 0;
    if (t->type != GGML_TYPE_F32 || t->nbytes != want * 4)
        return sl_errf(err, "%s: tensor '%s' is not F32 of %llu elements", g->path, name, (unsigned long long)want);
    *out = malloc(t->nbytes);
    if (!*out) return sl_errf(err, "out of memory");
    return gguf_read_tensor(g, t, 0, *out, t->nbytes, err) ? -1 : 1;
}

static int load_router(const gguf_file *g, uint32_t layer, router *r, sl_err *err)
{
    const gguf_str *arch;
    if (gguf_get_str(g, "general.architecture", &arch, err) != 1)
        return sl_errf(err, "%s: no general.architecture", g->path);
    char key[160];
    int64_t skew = -1;
    gguf_get_i64(g, "sluice.synth.skew_dim", &skew, err);
    r->skew_dim = (int32_t)skew;
    r->gating = 1; /* qwen3moe hard-codes softmax; so does deepseek2 by default */
    snprintf(key, sizeof key, "%s.expert_gating_func", arch->s);
    if (gguf_get_u32(g, key, &r->gating, err) < 0) return -1;
    const char *names[3] = {"embedding_length", "expert_count", "expert_used_count"};
    uint32_t *dst[3] = {&r->n_embd, &r->n_expert, &r->n_used};
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s.%s", arch->s, names[i]);
        if (gguf_get_u32(g, key, dst[i], err) != 1) return sl_errf(err, "%s: no %s", g->path, key);
    }
    if (!r->n_expert || r->n_used > r->n_expert || r->skew_dim >= (int32_t)r->n_embd)
        return sl_errf(err, "%s: inconsistent expert metadata", g->path);
    snprintf(key, sizeof key, "blk.%u.ffn_gate_inp.weight", layer);
    int rc = read_f32_tensor(g, key, (uint64_t)r->n_embd * r->n_expert, &r->w, err);
    if (rc == 0) return sl_errf(err, "%s: layer %u has no router '%s'", g->path, layer, key);
    if (rc < 0) return -1;
    snprintf(key, sizeof key, "blk.%u.exp_probs_b.bias", layer);
    return read_f32_tensor(g, key, r->n_expert, &r->bias, err) < 0 ? -1 : 0;
}

/* Selection scores as llama.cpp's build_moe_ffn forms them from the logits:
 * the gating function, plus the selection bias when there is one.  Without
 * a bias softmax is monotonic and selecting on logits is the same. */
static void gate(const router *r, float *score)
{
    if (r->gating == 2) {
        for (uint32_t e = 0; e < r->n_expert; e++) score[e] = 1.0f / (1.0f + expf(-score[e]));
    } else if (r->bias) {
        float mx = score[0], sum = 0;
        for (uint32_t e = 1; e < r->n_expert; e++) mx = fmaxf(mx, score[e]);
        for (uint32_t e = 0; e < r->n_expert; e++) sum += score[e] = expf(score[e] - mx);
        for (uint32_t e = 0; e < r->n_expert; e++) score[e] /= sum;
    }
    for (uint32_t e = 0; r->bias && e < r->n_expert; e++) score[e] += r->bias[e];
}

/* Marks the N_USED best scores in CHOSEN (ties to the lower index). */
static void top_k(const float *score, uint32_t n, uint32_t k, uint64_t *counts, unsigned char *chosen)
{
    memset(chosen, 0, n);
    for (uint32_t s = 0; s < k; s++) {
        int64_t best = -1;
        for (uint32_t e = 0; e < n; e++)
            if (!chosen[e] && (best < 0 || score[e] > score[best])) best = e;
        chosen[best] = 1;
        counts[best]++;
    }
}

int synth_route_sample(const gguf_file *g, uint32_t layer, uint32_t n_samples, uint64_t seed, uint64_t *counts,
                       uint32_t cap, uint32_t *n_expert, sl_err *err)
{
    router r = {0};
    int rc = load_router(g, layer, &r, err);
    if (!rc && r.n_expert > cap) rc = sl_errf(err, "%s: %u experts (at most %u here)", g->path, r.n_expert, cap);
    float *x = rc ? NULL : malloc(r.n_embd * sizeof *x);
    float *score = rc ? NULL : malloc(r.n_expert * sizeof *score);
    unsigned char *chosen = rc ? NULL : malloc(r.n_expert);
    if (!rc && (!x || !score || !chosen)) rc = sl_errf(err, "out of memory");
    if (!rc) {
        memset(counts, 0, r.n_expert * sizeof *counts);
        *n_expert = r.n_expert;
    }
    sy_rng rng;
    sy_rng_seed(&rng, seed, layer);
    for (uint32_t s = 0; s < n_samples && !rc; s++) {
        for (uint32_t i = 0; i < r.n_embd; i++) x[i] = sy_gauss(&rng);
        if (r.skew_dim >= 0) x[r.skew_dim] = 1.0f;
        for (uint32_t e = 0; e < r.n_expert; e++) {
            const float *w = r.w + (uint64_t)e * r.n_embd;
            float dot = 0;
            for (uint32_t i = 0; i < r.n_embd; i++) dot += w[i] * x[i];
            score[e] = dot;
        }
        gate(&r, score);
        top_k(score, r.n_expert, r.n_used, counts, chosen);
    }
    free(x);
    free(score);
    free(chosen);
    free(r.w);
    free(r.bias);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

double synth_zipf_exponent(const uint64_t *counts, uint32_t n)
{
    uint64_t *c = malloc(n * sizeof *c);
    if (!c || n < 2) {
        free(c);
        return 0;
    }
    memcpy(c, counts, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp_desc);
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n && c[i] > 0; i++, m++) {
        double x = log(i + 1.0), y = log((double)c[i]);
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    free(c);
    double den = m * sxx - sx * sx;
    return m >= 2 && den > 0 ? -(m * sxy - sx * sy) / den : 0;
}
