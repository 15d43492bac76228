/* Runs a synthesized model through llama.cpp and reports what `sluice synth`
 * promises: every logit finite (prefill of a real text, then greedy decode),
 * and the routing llama.cpp actually does per layer (expert popularity from
 * the ffn_moe_topk tensors, fitted Zipf exponent), plus the normed skew
 * coordinate the router sees (from ffn_norm).  Not part of the build: it
 * links libllama from a llama.cpp checkout.
 *
 *   LL=/work/llama.cpp
 *   cc -O2 -o /tmp/synth_llama_check bench/synth_llama_check.c -I$LL/include -I$LL/ggml/include \
 *      -L$LL/build/bin -lllama -lggml -lggml-base -lm -Wl,-rpath,$LL/build/bin
 *   /tmp/synth_llama_check MODEL.gguf [n_generate]
 *
 * Weight repacking is off: this machine's AMX path crashes on multi-token
 * batches (also for llama-quantize output). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "llama.h"

#define MAX_LAYERS 256
#define MAX_EXPERTS 1024

typedef struct {
    int n_expert, skew_dim;
    unsigned long long counts[MAX_LAYERS][MAX_EXPERTS];
    double k_sum[MAX_LAYERS], k_sq[MAX_LAYERS], rms_sum[MAX_LAYERS];
    long k_n[MAX_LAYERS];
    /* the part of the normed hidden state all tokens share: |mean x|^2 / mean |x|^2 */
    double *mean[MAX_LAYERS], sq[MAX_LAYERS];
    int64_t width[MAX_LAYERS];
    int max_layer;
} stats;

static int layer_of(const char *name, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) || name[n] != '-') return -1;
    int il = atoi(name + n + 1);
    return il >= 0 && il < MAX_LAYERS ? il : -1;
}

static bool on_tensor(struct ggml_tensor *t, bool ask, void *ud)
{
    stats *s = ud;
    int topk = layer_of(t->name, "ffn_moe_topk"), norm = layer_of(t->name, "ffn_norm");
    if (ask) return topk >= 0 || norm >= 0;
    if (topk >= 0 && t->type == GGML_TYPE_I32) {
        for (int64_t tok = 0; tok < t->ne[1]; tok++)
            for (int64_t j = 0; j < t->ne[0]; j++) {
                int32_t e = *(const int32_t *)((const char *)t->data + tok * t->nb[1] + j * t->nb[0]);
                if (e >= 0 && e < MAX_EXPERTS) s->counts[topk][e]++;
            }
        if (topk > s->max_layer) s->max_layer = topk;
    }
    if (norm >= 0 && t->type == GGML_TYPE_F32) {
        for (int64_t tok = 0; tok < t->ne[1]; tok++) {
            const float *x = (const float *)((const char *)t->data + tok * t->nb[1]);
            double ss = 0;
            for (int64_t i = 0; i < t->ne[0]; i++) ss += (double)x[i] * x[i];
            s->rms_sum[norm] += sqrt(ss / (double)t->ne[0]);
            if (s->skew_dim >= 0 && s->skew_dim < t->ne[0]) {
                s->k_sum[norm] += x[s->skew_dim];
                s->k_sq[norm] += (double)x[s->skew_dim] * x[s->skew_dim];
            }
            s->k_n[norm]++;
            if (!s->mean[norm]) {
                s->mean[norm] = calloc((size_t)t->ne[0], sizeof(double));
                s->width[norm] = t->ne[0];
            }
            for (int64_t i = 0; i < t->ne[0] && s->width[norm] == t->ne[0]; i++) s->mean[norm][i] += x[i];
            s->sq[norm] += ss;
        }
    }
    return true;
}

static int cmp_desc(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static double zipf(const unsigned long long *counts, int n, double *top_share, double *max_mean)
{
    unsigned long long c[MAX_EXPERTS], sum = 0;
    memcpy(c, counts, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp_desc);
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int m = 0;
    for (int i = 0; i < n; i++) sum += c[i];
    for (int i = 0; i < n && c[i]; i++, m++) {
        double x = log(i + 1.0), y = log((double)c[i]);
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    *top_share = sum ? (double)c[0] / sum : 0;
    *max_mean = sum ? (double)c[0] * n / sum : 0;
    double den = m * sxx - sx * sx;
    return m >= 2 && den > 0 ? -(m * sxy - sx * sy) / den : 0;
}

static const char *TEXT =
    "The history of the lighthouse begins in the ancient world, where fires were lit on hilltops to guide "
    "ships into harbour. Over the centuries these beacons became towers of stone, and the keepers who tended "
    "them lived lonely lives on rocky islands far from the mainland. In 1822 Augustin Fresnel designed a lens "
    "that gathered the light of a single lamp into a powerful beam, visible for more than twenty miles. "
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"
    "Today most lighthouses are automated, yet many still stand as monuments to the people who kept them.";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [n_generate]\n", argv[0]);
        return 2;
    }
    int n_gen = argc > 2 ? atoi(argv[2]) : 32;
    static stats st;
    st.skew_dim = -1;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = false;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    char buf[64];
    if (llama_model_meta_val_str(model, "sluice.synth.skew_dim", buf, sizeof buf) > 0) st.skew_dim = atoi(buf);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    llama_token toks[1024];
    int n = llama_tokenize(vocab, TEXT, (int)strlen(TEXT), toks, 1024, true, false);
    if (n <= 0) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024, cp.n_batch = 1024, cp.n_ubatch = 1024, cp.n_threads = cp.n_threads_batch = 2;
    cp.cb_eval = on_tensor, cp.cb_eval_user_data = &st;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    long bad = 0, total = 0;
    double lo = INFINITY, hi = -INFINITY;
    struct llama_batch b = llama_batch_get_one(toks, n);
    for (int step = 0; step <= n_gen; step++) {
        if (llama_decode(ctx, b)) {
            fprintf(stderr, "decode failed at step %d\n", step);
            return 1;
        }
        const float *lg = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int i = 0; i < n_vocab; i++) {
            total++;
            if (!isfinite(lg[i])) bad++;
            else lo = fmin(lo, lg[i]), hi = fmax(hi, lg[i]);
            if (lg[i] > lg[best]) best = i;
        }
        toks[0] = best;
        b = llama_batch_get_one(toks, 1);
    }
    printf("%d prompt tokens + %d generated: %ld of %ld logits non-finite; range [%.3g, %.3g]\n", n, n_gen, bad,
           total, lo, hi);
    int n_exp = 0;
    for (int e = 0; e < MAX_EXPERTS; e++)
        for (int l = 0; l <= st.max_layer; l++)
            if (st.counts[l][e] && e + 1 > n_exp) n_exp = e + 1;
    if (llama_model_meta_val_str(model, "general.architecture", buf, sizeof buf) > 0) {
        char key[96], v[32];
        snprintf(key, sizeof key, "%s.expert_count", buf);
        if (llama_model_meta_val_str(model, key, v, sizeof v) > 0) n_exp = atoi(v);
    }
    printf("%5s %10s %9s %8s %12s %12s %7s\n", "layer", "top share", "max/mean", "zipf s", "normed x_k", "ffn_norm rms",
           "shared");
    for (int l = 0; l <= st.max_layer; l++) {
        double top, mm, s = zipf(st.counts[l], n_exp, &top, &mm);
        double kn = st.k_n[l] ? st.k_sum[l] / st.k_n[l] : 0;
        double ksd = st.k_n[l] ? sqrt(fmax(0, st.k_sq[l] / st.k_n[l] - kn * kn)) : 0;
        double rms = st.k_n[l] ? st.rms_sum[l] / st.k_n[l] : 0;
        unsigned long long any = 0;
        for (int e = 0; e < n_exp; e++) any += st.counts[l][e];
        if (!any) continue;
        double m2 = 0;
        for (int64_t i = 0; st.mean[l] && i < st.width[l]; i++) m2 += (st.mean[l][i] / st.k_n[l]) * (st.mean[l][i] / st.k_n[l]);
        double shared = st.k_n[l] && st.sq[l] > 0 ? m2 / (st.sq[l] / st.k_n[l]) : 0;
        printf("%5d %9.1f%% %9.2f %8.2f %6.2f+-%-5.2f %12.3f %7.2f\n", l, 100 * top, mm, s, kn, ksd, rms, shared);
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return bad ? 1 : 0;
}
