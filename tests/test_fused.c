/* Fused expert tensors: newer converters write ffn_gate_up_exps {n_embd,
 * 2 n_ff, n_expert} (expert e's gate rows, then its up rows) instead of
 * ffn_gate_exps and ffn_up_exps.  Each MoE fixture is rewritten that way
 * here with the GGUF writer, and the rewritten file must give the original's
 * logits bit for bit: every prompt position and 8 greedy steps, with the
 * experts in RAM and streamed under a budget that forces eviction (one slice
 * per expert).  The bundled tinymoe runs on a fresh clone; the shared
 * fixtures (qwen3moe, deepseek2 with a shared expert and groups, Mixtral's
 * Q4_0) when ../shared is present. */
#include <unistd.h>

#include "engine/engine.h"
#include "experts/layout.h"
#include "gguf/gguf_write.h"
#include "t.h"

static char dir[] = "/var/tmp/sluice-fused-XXXXXX";

/* Layer of "blk.N.SUFFIX", or -1 when NAME is not that tensor. */
static int layer_of(const char *name, const char *suffix)
{
    int il, used = 0;
    if (sscanf(name, "blk.%d.%n", &il, &used) != 1 || used == 0 || strcmp(name + used, suffix)) return -1;
    return il;
}

/* blk.N.ffn_gate_exps.weight -> its up partner, or NULL when it has none. */
static const gguf_tensor *up_of(const gguf_file *g, const gguf_tensor *gate)
{
    int il = layer_of(gate->name, "ffn_gate_exps.weight");
    char name[96];
    if (il < 0) return NULL;
    snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
    const gguf_tensor *up = gguf_find_tensor(g, name);
    return up && up->type == gate->type && up->ne[0] == gate->ne[0] && up->ne[1] == gate->ne[1] &&
                   up->ne[2] == gate->ne[2]
               ? up
               : NULL;
}

static bool is_fused_up(const gguf_file *g, const gguf_tensor *t)
{
    int il = layer_of(t->name, "ffn_up_exps.weight");
    char name[96];
    if (il < 0) return false;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", il);
    const gguf_tensor *gate = gguf_find_tensor(g, name);
    return gate && up_of(g, gate) == t;
}

/* Tensor T's data, or for a fused gate: expert by expert, gate's slice then up's. */
static int write_data(gguf_writer *w, const gguf_file *g, const gguf_tensor *t, sl_err *err)
{
    const gguf_tensor *up = up_of(g, t);
    uint64_t n = up ? (uint64_t)t->ne[2] : 1, slice = t->nbytes / n;
    void *buf = malloc(slice ? slice : 1);
    int rc = buf ? 0 : sl_errf(err, "out of memory");
    for (uint64_t e = 0; e < n && !rc; e++) {
        rc = gguf_read_tensor(g, t, e * slice, buf, slice, err) || gguf_w_write(w, buf, slice, err);
        if (!rc && up) rc = gguf_read_tensor(g, up, e * slice, buf, slice, err) || gguf_w_write(w, buf, slice, err);
    }
    free(buf);
    return rc ? -1 : 0;
}

/* Writes SRC to DST with every gate/up pair of routed experts fused. */
static int fuse(const char *src, const char *dst, int *n_fused, sl_err *err)
{
    gguf_file *g;
    if (gguf_open(&g, src, err)) return -1;
    gguf_w_opts o = {.alignment = g->alignment};
    gguf_writer *w = gguf_w_new(&o);
    int rc = w ? 0 : sl_errf(err, "out of memory");
    for (uint64_t i = 0; i < g->n_kv && !rc; i++)
        if (strcmp(g->kv[i].key, "general.alignment")) rc = gguf_w_kv(w, g->kv[i].key, &g->kv[i].v, err);
    *n_fused = 0;
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (is_fused_up(g, t)) continue;
        if (up_of(g, t)) {
            int il = layer_of(t->name, "ffn_gate_exps.weight");
            char name[96];
            snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", il);
            const int64_t ne[3] = {t->ne[0], 2 * t->ne[1], t->ne[2]};
            rc = gguf_w_tensor(w, name, t->type, 3, ne, err) < 0;
            ++*n_fused;
        } else {
            rc = gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, err) < 0;
        }
    }
    if (!rc) rc = gguf_w_open(w, dst, err);
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++)
        if (!is_fused_up(g, &g->tensors[i])) rc = write_data(w, g, &g->tensors[i], err);
    if (!rc) rc = gguf_w_close(w, err);
    gguf_w_free(w);
    gguf_close(g);
    return rc ? -1 : 0;
}

static const int32_t PROMPT[] = {464, 1468, 582, 3114, 379, 262, 5417, 290, 531};

/* Logits of every prompt position and of 8 greedy steps after it. */
static int run(const char *path, uint64_t mem, sl_kv_mode kv, float **out, size_t *n, sl_err *err)
{
    sl_engine e;
    engine_opts o = {.model_path = path, .n_ctx = 64, .threads = 2, .mem = mem, .no_heat = true, .kv_mode = kv};
    if (engine_open(&e, &o, err)) return -1;
    int32_t nv = model_n_vocab(e.model), np = (int32_t)(sizeof PROMPT / sizeof *PROMPT);
    *n = (size_t)(np + 8) * (size_t)nv;
    *out = malloc(*n * sizeof **out);
    int32_t toks[sizeof PROMPT / sizeof *PROMPT];
    for (int32_t i = 0; i < np; i++) toks[i] = PROMPT[i] % nv;
    int rc = *out ? session_eval(e.session, toks, np, *out, true, err) : sl_errf(err, "out of memory");
    for (int s = 0; s < 8 && !rc; s++) {
        const float *last = *out + (size_t)(np + s - 1) * (size_t)nv;
        int32_t best = 0;
        for (int32_t v = 1; v < nv; v++) best = last[v] > last[best] ? v : best;
        rc = session_eval(e.session, &best, 1, *out + (size_t)(np + s) * (size_t)nv, false, err);
    }
    engine_close(&e);
    return rc;
}

/* A --mem whose expert cache holds SLOTS experts of PATH. */
static uint64_t budget(const char *path, int64_t slots, sl_kv_mode kv, sl_err *err)
{
    mem_plan p;
    engine_opts o = {.model_path = path, .n_ctx = 64, .threads = 2, .mem = 4ull << 30, .kv_mode = kv};
    if (engine_plan(path, &o, &p, err)) return 0;
    return p.total - p.cache - p.unused + (uint64_t)slots * p.slot_bytes;
}

static bool layout_fused(const char *path)
{
    sl_err err;
    sl_model *m;
    if (model_load(&m, path, &(model_opts){.dry_run = true}, &err)) return false;
    const expert_layout *L = model_expert_layout(m);
    bool fused = false, separate = false;
    for (int l = 0; L && l < L->n_layers; l++)
        for (int p = 0; p < L->layer[l].n_parts; p++) {
            int k = L->layer[l].part_kind[p];
            fused |= k >= 0 && !strcmp(EXPERT_PART_NAMES[k], "ffn_gate_up_exps.weight");
            separate |= k >= 0 && (!strcmp(EXPERT_PART_NAMES[k], "ffn_gate_exps.weight") ||
                                   !strcmp(EXPERT_PART_NAMES[k], "ffn_up_exps.weight"));
        }
    model_free(m);
    return fused && !separate;
}

static void check_model(const char *label, const char *src, sl_kv_mode kv)
{
    char name[160], dst[300];
    sl_err err;
    snprintf(dst, sizeof dst, "%s/%s-fused.gguf", dir, label);
    int n_fused = 0;
    float *ref = NULL, *got = NULL;
    size_t n = 0, m = 0;

    snprintf(name, sizeof name, "fused gate_up: %s rewritten, experts in RAM = separate", label);
    t_begin(name);
    int ok = fuse(src, dst, &n_fused, &err) == 0;
    T_CHECK(ok, "%s", err.msg);
    T_CHECK(!ok || n_fused > 0, "no gate/up pair to fuse");
    T_CHECK(!ok || layout_fused(dst), "the expert layout of the rewritten file still has separate gate/up");
    ok = ok && run(src, 0, kv, &ref, &n, &err) == 0;
    T_CHECK(ok, "%s", err.msg);
    if (ok) {
        int rc = run(dst, 0, kv, &got, &m, &err);
        T_CHECK(rc == 0, "%s", err.msg);
        T_CHECK(rc || (m == n && !memcmp(ref, got, n * sizeof *ref)), "logits differ");
        free(got);
    }
    t_end();

    snprintf(name, sizeof name, "fused gate_up: %s streamed with 1 slice per expert, evicting = separate in RAM",
             label);
    t_begin(name);
    sl_model *probe;
    int used = 0;
    if (ok && model_load(&probe, dst, &(model_opts){.dry_run = true}, &err) == 0) {
        used = model_n_expert_used(probe);
        model_free(probe);
    }
    T_CHECK(ok, "the rewritten file did not load (above)");
    uint64_t mem = ok ? budget(dst, used + 2, kv, &err) : 0;
    T_CHECK(!ok || mem, "%s", err.msg);
    if (ok && mem) {
        int rc = run(dst, mem, kv, &got, &m, &err);
        T_CHECK(rc == 0, "%s", err.msg);
        T_CHECK(rc || (m == n && !memcmp(ref, got, n * sizeof *ref)), "logits differ");
        free(got);
    }
    t_end();
    free(ref);
    unlink(dst);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        printf("not ok fused gate_up: cannot make a scratch directory\n");
        return 1;
    }
    check_model("tinymoe-q8_0", "models/tinymoe-q8_0.gguf", SL_KV_F16_FLASH);
    static const char *const shared[] = {"qwen3moe-a3b-F16", "deepseek2-kimik2-F16", "deepseek2-dsv3-F16",
                                         "llama-mixtral-Q4_0"};
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        char rel[160];
        snprintf(rel, sizeof rel, "models/arch/%s.gguf", shared[i]);
        const char *p = t_shared(rel);
        if (!p) {
            char name[160];
            snprintf(name, sizeof name, "fused gate_up: %s", shared[i]);
            t_skip(name, "../shared fixtures not found");
            continue;
        }
        check_model(shared[i], p, SL_KV_F32);
    }
    rmdir(dir);
    return t_done();
}
