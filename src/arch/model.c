/* Model loading: architecture dispatch, the hyperparameters every
 * architecture shares, tensor binding with shape/type checks, and RoPE /
 * attention-scale resolution.  The per-architecture files read their own
 * keys and bind their own tensors through the helpers here. */
#include "arch/arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experts/mem_provider.h"
#include "util/bigbuf.h"

/* Upper bounds that keep a damaged file from causing huge allocations;
 * llama.cpp's own limits where it has them. */
enum { MAX_LAYERS = 512, MAX_DIM = 1 << 20 };

static const arch_ops *const all_archs[] = {&arch_llama, &arch_qwen3, &arch_qwen3moe, &arch_deepseek2,
                                            &arch_kimi_linear, &arch_qwen35moe, &arch_glm4moe, &arch_gpt_oss};

/* ---------------------------------------------------------------- keys */

const char *arch_key(const sl_model *m, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", m->ops->name, suffix);
    return buf;
}

int key_in_range(const sl_model *m, const char *suffix, int32_t v, int32_t lo, int32_t hi, sl_err *err)
{
    char key[160];
    if (v < lo || v > hi)
        return sl_errf(err, "%s: '%s' = %d is out of range [%d, %d]", m->g->path, arch_key(m, suffix, key, sizeof key),
                       v, lo, hi);
    return 0;
}

static int missing(const sl_model *m, const char *key, sl_err *err)
{
    return sl_errf(err, "%s: missing required key '%s'", m->g->path, key);
}

int key_u32(const sl_model *m, const char *suffix, int32_t *out, bool required, sl_err *err)
{
    char key[160];
    uint32_t v;
    int rc = gguf_get_u32(m->g, arch_key(m, suffix, key, sizeof key), &v, err);
    if (rc < 0) return -1;
    if (rc == 0) return required ? missing(m, key, err) : 0;
    if (v > INT32_MAX) return sl_errf(err, "%s: key '%s' value %u is out of range", m->g->path, key, v);
    *out = (int32_t)v;
    return 0;
}

int key_f32(const sl_model *m, const char *suffix, float *out, bool required, sl_err *err)
{
    char key[160];
    int rc = gguf_get_f32(m->g, arch_key(m, suffix, key, sizeof key), out, err);
    if (rc < 0) return -1;
    return rc == 0 && required ? missing(m, key, err) : 0;
}

int key_bool(const sl_model *m, const char *suffix, bool *out, bool required, sl_err *err)
{
    char key[160];
    int rc = gguf_get_bool(m->g, arch_key(m, suffix, key, sizeof key), out, err);
    if (rc < 0) return -1;
    return rc == 0 && required ? missing(m, key, err) : 0;
}

int key_u32_or_arr(const sl_model *m, const char *suffix, int32_t *out, bool required, sl_err *err)
{
    char key[160];
    const gguf_kv *kv = gguf_find(m->g, arch_key(m, suffix, key, sizeof key));
    if (!kv || kv->v.type != GGUF_ARRAY) return key_u32(m, suffix, out, required, err);
    uint64_t n = kv->v.arr.n;
    if (n == 0 || n != (uint64_t)m->hp.n_layer)
        return sl_errf(err, "%s: key '%s' has %llu entries, expected one per layer (%d)", m->g->path, key,
                       (unsigned long long)n, m->hp.n_layer);
    gguf_value first = gguf_arr_scalar(&kv->v, 0);
    for (uint64_t i = 0; i < n; i++) {
        gguf_value e = gguf_arr_scalar(&kv->v, i);
        if (e.u != first.u)
            return sl_errf(err, "%s: key '%s' varies per layer, which sluice does not support", m->g->path, key);
    }
    if (kv->v.arr.type != GGUF_UINT32 && kv->v.arr.type != GGUF_INT32)
        return sl_errf(err, "%s: key '%s' is an array of %s, expected integers", m->g->path, key,
                       gguf_vtype_name(kv->v.arr.type));
    if (first.u > INT32_MAX) return sl_errf(err, "%s: key '%s' value is out of range", m->g->path, key);
    *out = (int32_t)first.u;
    return 0;
}

int key_rope_sections(sl_model *m, bool required, sl_err *err)
{
    int32_t *sec = m->hp.rope.sections;
    char key[160];
    const gguf_kv *kv = gguf_find(m->g, arch_key(m, "rope.dimension_sections", key, sizeof key));
    if (!kv) return required ? missing(m, key, err) : 0;
    if (kv->v.type != GGUF_ARRAY) {
        if (key_u32(m, "rope.dimension_sections", &sec[0], true, err)) return -1;
        if (sec[0] > 1 << 20) return sl_errf(err, "%s: key '%s' is out of range", m->g->path, key);
        sec[1] = sec[2] = sec[3] = sec[0];
        return 1;
    }
    if (kv->v.arr.n != 4 || (kv->v.arr.type != GGUF_UINT32 && kv->v.arr.type != GGUF_INT32))
        return sl_errf(err, "%s: key '%s' must hold 4 integers (%llu of %s)", m->g->path, key,
                       (unsigned long long)kv->v.arr.n, gguf_vtype_name(kv->v.arr.type));
    for (int i = 0; i < 4; i++) {
        gguf_value e = gguf_arr_scalar(&kv->v, (uint64_t)i);
        if (e.u > 1u << 20) return sl_errf(err, "%s: key '%s' entry %d is out of range", m->g->path, key, i);
        sec[i] = (int32_t)e.u;
    }
    return 1;
}

static int key_str(const sl_model *m, const char *suffix, char *out, size_t cap, sl_err *err)
{
    char key[160];
    const gguf_str *s;
    int rc = gguf_get_str(m->g, arch_key(m, suffix, key, sizeof key), &s, err);
    if (rc <= 0) return rc;
    snprintf(out, cap, "%s", s->s);
    return 1;
}

/* ------------------------------------------------------------ tensors */

static void *spine_alloc(sl_model *m, uint64_t bytes, const char *what, sl_err *err)
{
    if (m->n_bufs == m->cap_bufs) {
        size_t cap = m->cap_bufs ? m->cap_bufs * 2 : 64;
        void **nb = realloc(m->bufs, cap * sizeof *nb);
        if (!nb) return sl_errf(err, "out of memory"), NULL;
        m->bufs = nb;
        m->cap_bufs = cap;
    }
    uint64_t len = (bytes + 63) & ~(uint64_t)63;
    /* a dry load only plans: calloc's untouched pages cost no memory */
    void *p = !len || len > SIZE_MAX ? NULL : m->dry ? calloc(1, (size_t)len) : sl_big_alloc((size_t)bytes);
    if (!p) return sl_errf(err, "out of memory loading '%s' (%llu bytes)", what, (unsigned long long)bytes), NULL;
    m->bufs[m->n_bufs++] = p;
    m->spine_bytes += len;
    return p;
}

static void tensor_name(char *buf, size_t cap, int il, const char *name)
{
    if (il < 0) snprintf(buf, cap, "%s", name);
    else snprintf(buf, cap, "blk.%d.%s", il, name);
}

static void shape_str(char *buf, size_t cap, const int64_t *ne, int n)
{
    int o = snprintf(buf, cap, "{");
    for (int i = 0; i < n && o > 0 && (size_t)o < cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o > 0 && (size_t)o < cap) snprintf(buf + o, cap - (size_t)o, "}");
}

/* Finds NAME and checks it has exactly the expected dims (trailing 1s). */
static int find_checked(sl_model *m, const gguf_tensor **out, const char *name, const int64_t *ne, int n, int flags,
                        sl_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(m->g, name);
    *out = t;
    if (!t) {
        if (flags & T_OPTIONAL) return 0;
        char want[96];
        shape_str(want, sizeof want, ne, n);
        return sl_errf(err, "%s: missing tensor '%s' (expected shape %s)", m->g->path, name, want);
    }
    bool ok = true;
    for (int i = 0; i < 4; i++) ok = ok && t->ne[i] == (i < n ? ne[i] : 1);
    if (!ok) {
        char want[96], got[96];
        shape_str(want, sizeof want, ne, n);
        shape_str(got, sizeof got, t->ne, (int)(t->n_dims ? t->n_dims : 1));
        return sl_errf(err, "%s: tensor '%s' has wrong shape: expected %s, got %s", m->g->path, name, want, got);
    }
    if (!ggml_type_get(t->type) || ggml_row_bytes(t->type, (uint64_t)ne[0]) == 0)
        return sl_errf(err, "%s: tensor '%s' has unsupported type %s for a row of %lld", m->g->path, name,
                       ggml_type_name(t->type), (long long)ne[0]);
    return 0;
}

static int check_matmul_type(const sl_model *m, const gguf_tensor *t, sl_err *err)
{
    if (!kernels_supports(t->type))
        return sl_errf(err, "%s: tensor '%s' has type %s, which sluice cannot multiply", m->g->path, t->name,
                       ggml_type_name(t->type));
    return 0;
}

/* Reads a spine tensor's bytes (nothing in a dry load). */
static int spine_read(const sl_model *m, const gguf_tensor *t, void *dst, sl_err *err)
{
    return m->dry ? 0 : gguf_read_tensor(m->g, t, 0, dst, t->nbytes, err);
}

/* Frees spine buffer P (a tensor replaced by a derived copy). */
static void spine_release(sl_model *m, const void *p, uint64_t bytes)
{
    for (size_t i = 0; i < m->n_bufs; i++)
        if (m->bufs[i] == p) {
            free(m->bufs[i]);
            m->bufs[i] = m->bufs[--m->n_bufs];
            m->spine_bytes -= (bytes + 63) & ~(uint64_t)63;
            return;
        }
}

/* Rows of float matrix W as Q8_0 rows at DST, 64 at a time. */
static int quantize_q8_0(const sl_mat *w, uint8_t *dst, size_t row_bytes, sl_err *err)
{
    float *x = malloc(sizeof(float) * 64 * (size_t)w->ne0);
    sl_act a = {0};
    int rc = x ? 0 : sl_errf(err, "out of memory");
    for (int64_t r = 0; !rc && r < w->ne1; r += 64) {
        int n = (int)(w->ne1 - r < 64 ? w->ne1 - r : 64);
        for (int i = 0; i < n; i++) mat_get_row(w, r + i, x + (size_t)i * (size_t)w->ne0);
        rc = act_prepare(&a, GGML_TYPE_Q8_0, x, w->ne0, n, (size_t)w->ne0, NULL, err);
        if (!rc && a.row_bytes != row_bytes) rc = sl_errf(err, "Q8_0 rows of %zu bytes, not %zu", a.row_bytes, row_bytes);
        for (int i = 0; !rc && i < n; i++)
            memcpy(dst + (size_t)(r + i) * row_bytes, (const char *)a.data + (size_t)i * a.row_bytes, row_bytes);
    }
    act_free(&a);
    free(x);
    return rc;
}

/* model_opts.q8_weights: float matrix O requantized to Q8_0 (and
 * interleaved where that pays) in place of the float one.  For a draft,
 * whose logits only choose what to propose: a small draft's f16 head cost
 * about what the target's whole decode step does, and drafting pays only
 * if drafts are cheap. */
static int requant_q8(sl_model *m, sl_mat *o, sl_err *err)
{
    if ((o->type != GGML_TYPE_F32 && o->type != GGML_TYPE_F16 && o->type != GGML_TYPE_BF16) || o->ne0 % 32) return 0;
    sl_mat q = {.type = GGML_TYPE_Q8_0, .ne0 = o->ne0, .ne1 = o->ne1,
                .row_bytes = (size_t)ggml_row_bytes(GGML_TYPE_Q8_0, (uint64_t)o->ne0)};
    bool il = mat_interleave_pays(&q);
    size_t bytes = il ? mat_interleaved_bytes(&q) : q.row_bytes * (size_t)q.ne1;
    uint8_t *p = spine_alloc(m, bytes, "a Q8_0 copy", err);
    if (!p) return -1;
    q.data = p;
    if (!m->dry && quantize_q8_0(o, p, q.row_bytes, err)) return -1;
    if (il && !m->dry && mat_interleave(&q, p)) return sl_errf(err, "out of memory interleaving a Q8_0 copy");
    /* the float matrix goes (a tied embedding's lookups read the copy) */
    m->derived_bytes += (int64_t)bytes;
    spine_release(m, o->data, (uint64_t)o->row_bytes * (uint64_t)o->ne1);
    m->derived_bytes -= (int64_t)(o->row_bytes * (size_t)o->ne1);
    *o = q;
    return 0;
}

/* T_INTERLEAVE: Q8_0 weights are interleaved by 16 rows where that pays
 * (kernels.h: mat_interleave_pays). */
static int load_mat(sl_model *m, sl_mat *w, const gguf_tensor *t, int64_t ne0, int64_t ne1, int flags, sl_err *err)
{
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = (size_t)ggml_row_bytes(t->type, (uint64_t)ne0);
    bool il = (flags & T_INTERLEAVE) && mat_interleave_pays(w);
    void *p = spine_alloc(m, il ? mat_interleaved_bytes(w) : t->nbytes, t->name, err); /* a dry load plans it too */
    if (!p || spine_read(m, t, p, err)) return -1;
    w->data = p;
    if (il && !m->dry && mat_interleave(w, p)) return sl_errf(err, "out of memory interleaving '%s'", t->name);
    return (flags & T_INTERLEAVE) && m->q8_weights ? requant_q8(m, w, err) : 0;
}

int bind_mat(sl_model *m, sl_mat *w, int il, const char *name, int64_t ne0, int64_t ne1, int flags, sl_err *err)
{
    char full[160];
    tensor_name(full, sizeof full, il, name);
    const gguf_tensor *t;
    const int64_t ne[2] = {ne0, ne1};
    memset(w, 0, sizeof *w);
    if (find_checked(m, &t, full, ne, 2, flags, err)) return -1;
    if (!t) return 0;
    if (check_matmul_type(m, t, err)) return -1;
    return load_mat(m, w, t, ne0, ne1, flags | T_INTERLEAVE, err); /* 2-D weights are only multiplied */
}

int bind_mat3(sl_model *m, sl_mat *w, int il, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, int flags,
              sl_err *err)
{
    char full[160];
    tensor_name(full, sizeof full, il, name);
    const gguf_tensor *t;
    const int64_t ne[3] = {ne0, ne1, ne2};
    memset(w, 0, sizeof *w);
    if (find_checked(m, &t, full, ne, 3, flags, err)) return -1;
    if (!t) return 0;
    if (check_matmul_type(m, t, err)) return -1;
    return load_mat(m, w, t, ne0, ne1, flags, err);
}

int bind_f32(sl_model *m, const float **v, int il, const char *name, const int64_t *ne, int nd, int flags,
             sl_err *err)
{
    char full[160];
    tensor_name(full, sizeof full, il, name);
    const gguf_tensor *t;
    *v = NULL;
    if (find_checked(m, &t, full, ne, nd, flags, err)) return -1;
    if (!t) return 0;
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= ne[i];
    float *out = spine_alloc(m, (uint64_t)n * sizeof(float), full, err);
    if (!out) return -1;
    if (t->type == GGML_TYPE_F32 || m->dry) {
        if (spine_read(m, t, out, err)) return -1;
    } else {
        if (t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16)
            return sl_errf(err, "%s: tensor '%s' has type %s; it must be f32, f16 or bf16", m->g->path, full,
                           ggml_type_name(t->type));
        sl_mat tmp = {.type = t->type, .ne0 = n, .ne1 = 1, .row_bytes = (size_t)t->nbytes};
        void *raw = malloc((size_t)t->nbytes);
        if (!raw) return sl_errf(err, "out of memory reading '%s'", full);
        tmp.data = raw;
        int rc = gguf_read_tensor(m->g, t, 0, raw, t->nbytes, err);
        if (rc == 0) mat_get_row(&tmp, 0, out);
        free(raw);
        if (rc) return -1;
    }
    *v = out;
    return 0;
}

int bind_vec(sl_model *m, const float **v, int il, const char *name, int64_t n, int flags, sl_err *err)
{
    return bind_f32(m, v, il, name, &n, 1, flags, err);
}

int bind_experts(sl_model *m, sl_mat *x, int *part, int il, const char *name, int64_t ne0, int64_t ne1, int flags,
                 sl_err *err)
{
    char full[160];
    tensor_name(full, sizeof full, il, name);
    const gguf_tensor *t;
    const int64_t ne[3] = {ne0, ne1, m->hp.n_expert};
    memset(x, 0, sizeof *x);
    *part = -1;
    if (find_checked(m, &t, full, ne, 3, flags, err)) return -1;
    if (!t) return 0;
    if (check_matmul_type(m, t, err)) return -1;
    const expert_layer *L = m->xl.layer ? &m->xl.layer[il] : NULL;
    for (int p = 0; L && p < L->n_parts; p++)
        if (L->part_kind[p] >= 0 && !strcmp(EXPERT_PART_NAMES[L->part_kind[p]], name)) *part = p;
    if (*part < 0) return sl_errf(err, "%s: '%s' is not in the expert layout", m->g->path, full);
    x->type = t->type;
    x->ne0 = ne0;
    x->ne1 = ne1;
    x->row_bytes = (size_t)ggml_row_bytes(t->type, (uint64_t)ne0);
    return 0;
}

int bind_expert_vec(sl_model *m, int *part, int il, const char *name, int64_t n, sl_err *err)
{
    char full[160];
    tensor_name(full, sizeof full, il, name);
    const gguf_tensor *t;
    const int64_t ne[2] = {n, m->hp.n_expert};
    *part = -1;
    if (find_checked(m, &t, full, ne, 2, 0, err)) return -1;
    if (t->type != GGML_TYPE_F32)
        return sl_errf(err, "%s: tensor '%s' has type %s; expert biases must be f32", m->g->path, full,
                       ggml_type_name(t->type));
    const expert_layer *L = m->xl.layer ? &m->xl.layer[il] : NULL;
    for (int p = 0; L && p < L->n_parts; p++)
        if (L->part_kind[p] >= 0 && !strcmp(EXPERT_PART_NAMES[L->part_kind[p]], name)) *part = p;
    if (*part < 0) return sl_errf(err, "%s: '%s' is not in the expert layout", m->g->path, full);
    return 0;
}

int bind_io(sl_model *m, sl_err *err)
{
    const hparams *hp = &m->hp;
    /* bind_mat interleaves Q8_0 (kernels.h); embedding lookups read either layout */
    if (bind_mat(m, &m->tok_embd, -1, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, err)) return -1;
    if (bind_vec(m, &m->output_norm, -1, "output_norm.weight", hp->n_embd, 0, err)) return -1;
    if (bind_mat(m, &m->output, -1, "output.weight", hp->n_embd, hp->n_vocab, T_OPTIONAL, err)) return -1;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    return 0;
}

/* ------------------------------------------------------- hyperparameters */

enum { SCALING_NONE, SCALING_LINEAR, SCALING_YARN, SCALING_LONGROPE };

static int read_rope_keys(sl_model *m, int *scaling, float *attn_factor, sl_err *err)
{
    hparams *hp = &m->hp;
    rope_params *rp = &hp->rope;
    rp->n_ctx_orig = hp->n_ctx_train;
    if (key_u32(m, "rope.scaling.original_context_length", &rp->n_ctx_orig, false, err)) return -1;
    rp->freq_base = 10000.0f;
    if (key_f32(m, "rope.freq_base", &rp->freq_base, false, err)) return -1;

    char type[32] = "linear";
    if (key_str(m, "rope.scaling.type", type, sizeof type, err) < 0) return -1;
    static const char *const names[] = {"none", "linear", "yarn", "longrope"};
    *scaling = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(type, names[i])) *scaling = i;
    if (*scaling < 0) return sl_errf(err, "%s: unknown rope scaling type '%s'", m->g->path, type);
    if (*scaling == SCALING_LONGROPE)
        return sl_errf(err, "%s: rope scaling type 'longrope' is not supported", m->g->path);

    float factor = 0.0f;
    char key[160];
    int rc = gguf_get_f32(m->g, arch_key(m, "rope.scaling.factor", key, sizeof key), &factor, err);
    if (rc == 0) rc = gguf_get_f32(m->g, arch_key(m, "rope.scale_linear", key, sizeof key), &factor, err);
    if (rc < 0) return -1;
    rp->freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    *attn_factor = 1.0f;
    return key_f32(m, "rope.scaling.attn_factor", attn_factor, false, err);
}

static float yarn_get_mscale(float scale, float mscale)
{
    return scale <= 1.0f ? 1.0f : (0.1f * mscale * logf(scale) + 1.0f);
}

/* What llama_context derives from the training rope parameters (no user
 * overrides): ext_factor, attn_factor and the YaRN betas. */
static void resolve_rope(sl_model *m, int scaling, float rope_attn_factor)
{
    const hparams *hp = &m->hp;
    rope_params *rp = &m->hp.rope;
    if (scaling == SCALING_NONE) rp->freq_scale = 1.0f;
    rp->ext_factor = scaling == SCALING_YARN ? 1.0f : 0.0f;
    rp->attn_factor = 1.0f;
    rp->beta_fast = 32.0f; /* llama.cpp reads the GGUF betas only for grok and mistral3 */
    rp->beta_slow = 1.0f;
    if (rp->ext_factor != 0.0f) {
        float factor = 1.0f / rp->freq_scale;
        if (hp->rope_yarn_log_mul != 0.0f) {
            float mscale = 1.0f, mscale_all = hp->rope_yarn_log_mul;
            if (hp->yarn_mscale_is_all && mscale_all != 1.0f) mscale = mscale_all;
            rp->attn_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all);
        } else {
            rp->attn_factor = yarn_get_mscale(factor, 1.0f);
        }
        rp->attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    rp->attn_factor *= rope_attn_factor;
}

static int check_range(const sl_model *m, const char *what, int64_t v, int64_t lo, int64_t hi, sl_err *err)
{
    if (v < lo || v > hi)
        return sl_errf(err, "%s: %s = %lld is out of range [%lld, %lld]", m->g->path, what, (long long)v,
                       (long long)lo, (long long)hi);
    return 0;
}

static int read_moe_keys(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    if (key_u32(m, "expert_count", &hp->n_expert, false, err) ||
        key_u32(m, "expert_used_count", &hp->n_expert_used, false, err) ||
        key_u32(m, "expert_group_count", &hp->n_expert_groups, false, err) ||
        key_u32(m, "expert_group_used_count", &hp->n_group_used, false, err))
        return -1;
    if (check_range(m, "expert_count", hp->n_expert, 0, MOE_MAX_EXPERTS, err)) return -1;
    if (hp->n_expert == 0) {
        if (hp->n_expert_used || hp->n_expert_groups)
            return sl_errf(err, "%s: expert_used_count/expert_group_count set without expert_count", m->g->path);
        return 0;
    }
    if (check_range(m, "expert_used_count", hp->n_expert_used, 0, hp->n_expert, err)) return -1;
    char key[160];
    if (hp->n_expert_used == 0) return missing(m, arch_key(m, "expert_used_count", key, sizeof key), err);
    if (check_range(m, "expert_group_count", hp->n_expert_groups, 0, hp->n_expert - 1, err)) return -1;
    if (hp->n_expert_groups > 1) {
        if (hp->n_expert % hp->n_expert_groups)
            return sl_errf(err, "%s: expert_count %d is not a multiple of expert_group_count %d", m->g->path,
                           hp->n_expert, hp->n_expert_groups);
        if (hp->n_group_used == 0) return missing(m, arch_key(m, "expert_group_used_count", key, sizeof key), err);
        if (check_range(m, "expert_group_used_count", hp->n_group_used, 1, hp->n_expert_groups - 1, err))
            return -1;
    }
    return 0;
}

static int read_vocab_size(sl_model *m, sl_err *err)
{
    const void *data;
    uint64_t n;
    int rc = gguf_get_arr(m->g, "tokenizer.ggml.tokens", GGUF_STRING, &data, &n, err);
    if (rc < 0) return -1;
    if (rc == 0) return missing(m, "tokenizer.ggml.tokens", err);
    if (n == 0 || n > INT32_MAX) return sl_errf(err, "%s: vocabulary of %llu tokens", m->g->path, (unsigned long long)n);
    m->hp.n_vocab = (int32_t)n;
    return 0;
}

/* head_count_kv, a scalar or one entry per layer.  A per-layer array may
 * vary (Kimi-Linear marks its recurrent layers with 0 there): the entries
 * go to m->head_kv and n_head_kv is the largest; architectures that need
 * one value reject a varying one (check_common). */
static int read_head_kv(sl_model *m, sl_err *err)
{
    hparams *hp = &m->hp;
    char key[160];
    const gguf_kv *kv = gguf_find(m->g, arch_key(m, "attention.head_count_kv", key, sizeof key));
    if (!kv || kv->v.type != GGUF_ARRAY) return key_u32(m, "attention.head_count_kv", &hp->n_head_kv, false, err);
    if (kv->v.arr.n != (uint64_t)hp->n_layer)
        return sl_errf(err, "%s: key '%s' has %llu entries, expected one per layer (%d)", m->g->path, key,
                       (unsigned long long)kv->v.arr.n, hp->n_layer);
    if (kv->v.arr.type != GGUF_UINT32 && kv->v.arr.type != GGUF_INT32)
        return sl_errf(err, "%s: key '%s' is an array of %s, expected integers", m->g->path, key,
                       gguf_vtype_name(kv->v.arr.type));
    m->head_kv = calloc((size_t)hp->n_layer, sizeof *m->head_kv);
    if (!m->head_kv) return sl_errf(err, "out of memory");
    hp->n_head_kv = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        gguf_value e = gguf_arr_scalar(&kv->v, (uint64_t)il);
        if (e.u > MAX_DIM) return sl_errf(err, "%s: key '%s' entry %d is out of range", m->g->path, key, il);
        m->head_kv[il] = (int32_t)e.u;
        if (m->head_kv[il] != m->head_kv[0]) hp->n_head_kv_varies = true;
        if (m->head_kv[il] > hp->n_head_kv) hp->n_head_kv = m->head_kv[il];
    }
    return 0;
}

static int read_common(sl_model *m, int *scaling, float *rope_attn_factor, sl_err *err)
{
    hparams *hp = &m->hp;
    if (key_u32(m, "context_length", &hp->n_ctx_train, true, err) ||
        key_u32(m, "embedding_length", &hp->n_embd, true, err) ||
        key_u32(m, "block_count", &hp->n_layer, true, err))
        return -1;
    if (check_range(m, "block_count", hp->n_layer, 1, MAX_LAYERS, err) ||
        check_range(m, "embedding_length", hp->n_embd, 1, MAX_DIM, err) ||
        check_range(m, "context_length", hp->n_ctx_train, 1, INT32_MAX, err))
        return -1;
    if (read_moe_keys(m, err) || read_vocab_size(m, err)) return -1;
    if (key_u32_or_arr(m, "feed_forward_length", &hp->n_ff, false, err) ||
        key_u32_or_arr(m, "attention.head_count", &hp->n_head, true, err))
        return -1;
    if (check_range(m, "attention.head_count", hp->n_head, 1, MAX_DIM, err)) return -1;
    hp->n_head_kv = hp->n_head;
    if (read_head_kv(m, err)) return -1;
    if (read_rope_keys(m, scaling, rope_attn_factor, err)) return -1;
    hp->n_embd_head_k = hp->n_embd_head_v = hp->n_embd / hp->n_head;
    if (key_u32(m, "attention.key_length", &hp->n_embd_head_k, false, err) ||
        key_u32(m, "attention.value_length", &hp->n_embd_head_v, false, err))
        return -1;
    hp->n_rot = hp->n_embd_head_k;
    if (key_u32(m, "rope.dimension_count", &hp->n_rot, false, err)) return -1;
    if (check_range(m, "feed_forward_length", hp->n_ff, 0, MAX_DIM, err) ||
        check_range(m, "rope.dimension_count", hp->n_rot, 0, MAX_DIM, err) ||
        check_range(m, "attention.key_length", hp->n_embd_head_k, 1, MAX_DIM, err) ||
        check_range(m, "attention.value_length", hp->n_embd_head_v, 1, MAX_DIM, err))
        return -1;
    if (hp->n_rot % 2) return sl_errf(err, "%s: rope.dimension_count %d is odd", m->g->path, hp->n_rot);
    return 0;
}

int check_gqa(const sl_model *m, bool full_rotary, sl_err *err)
{
    const hparams *hp = &m->hp;
    if (hp->n_head_kv_varies) {
        char key[160];
        return sl_errf(err, "%s: key '%s' varies per layer, which sluice does not support for %s", m->g->path,
                       arch_key(m, "attention.head_count_kv", key, sizeof key), m->ops->name);
    }
    if (check_range(m, "attention.head_count_kv", hp->n_head_kv, 1, hp->n_head, err)) return -1;
    if (hp->n_head % hp->n_head_kv)
        return sl_errf(err, "%s: head_count %d is not a multiple of head_count_kv %d", m->g->path, hp->n_head,
                       hp->n_head_kv);
    if (hp->n_embd_head_k != hp->n_embd_head_v)
        return sl_errf(err, "%s: key_length %d != value_length %d is not supported for %s", m->g->path,
                       hp->n_embd_head_k, hp->n_embd_head_v, m->ops->name);
    if (full_rotary ? hp->n_rot != hp->n_embd_head_k : hp->n_rot > hp->n_embd_head_k)
        return sl_errf(err, "%s: invalid n_rot: %d, expected %s%d", m->g->path, hp->n_rot, full_rotary ? "" : "<= ",
                       hp->n_embd_head_k);
    return 0;
}

static int load_hparams(sl_model *m, sl_err *err)
{
    int scaling;
    float rope_attn_factor;
    if (read_common(m, &scaling, &rope_attn_factor, err)) return -1;
    m->hp.kq_scale = 1.0f / sqrtf((float)m->hp.n_embd_head_k);
    if (m->ops->load_hparams(m, err)) return -1;
    m->hp.rope.n_rot = m->hp.n_rot;
    resolve_rope(m, scaling, rope_attn_factor);
    return m->ops->finish_hparams ? m->ops->finish_hparams(m, err) : 0;
}

void arch_layer_cache(const sl_model *m, int il, layer_cache *out)
{
    const hparams *hp = &m->hp;
    *out = (layer_cache){
        .kind = LAYER_ATTN,
        .k_row = hp->n_head_kv * hp->n_embd_head_k, .v_row = hp->n_head_kv * hp->n_embd_head_v,
        .head_k = hp->n_embd_head_k, .head_v = hp->n_embd_head_v,
    };
    if (m->ops->cache) m->ops->cache(m, il, out);
}

/* --------------------------------------------------------------- load */

static int find_arch(sl_model *m, sl_err *err)
{
    const gguf_str *s;
    int rc = gguf_get_str(m->g, "general.architecture", &s, err);
    if (rc < 0) return -1;
    if (rc == 0) return sl_errf(err, "%s: missing required key 'general.architecture'", m->g->path);
    char names[256] = "";
    for (size_t i = 0, o = 0; i < sizeof all_archs / sizeof *all_archs; i++) {
        if (!strcmp(s->s, all_archs[i]->name)) {
            m->ops = all_archs[i];
            return 0;
        }
        int w = snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", all_archs[i]->name);
        if (w > 0 && o + (size_t)w < sizeof names) o += (size_t)w;
    }
    return sl_errf(err, "%s: unsupported architecture '%s' (supported: %s)", m->g->path, s->s, names);
}

int model_load(sl_model **out, const char *path, const model_opts *opts, sl_err *err)
{
    *out = NULL;
    sl_model *m = calloc(1, sizeof *m);
    if (!m) return sl_errf(err, "out of memory");
    /* a caller-given provider belongs to the model from here on if own_provider says so */
    if (opts && opts->provider) {
        m->provider = opts->provider;
        m->own_provider = opts->own_provider;
    }
    m->dry = opts && opts->dry_run;
    m->q8_weights = opts && opts->q8_weights;
    if (gguf_open(&m->g, path, err) || find_arch(m, err) || load_hparams(m, err)) goto fail;
    m->head_rows = m->hp.n_vocab;
    if (vocab_load(&m->vocab, m->g, err)) goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        sl_errf(err, "out of memory");
        goto fail;
    }
    if (m->hp.n_expert > 0 &&
        expert_layout_from_gguf(&m->xl, m->g, m->hp.n_layer, m->hp.n_expert, m->hp.n_expert_used, err))
        goto fail;
    if (m->ops->load_tensors(m, err)) goto fail;
    if (!m->provider && m->hp.n_expert > 0 && !m->dry && !(opts && opts->defer_experts)) {
        if (mem_provider_create(&m->provider, &m->xl, err)) goto fail;
        m->own_provider = true;
    }
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(sl_model *m)
{
    if (!m) return;
    if (m->provider && m->own_provider && m->provider->ops->destroy) m->provider->ops->destroy(m->provider);
    for (size_t i = 0; i < m->n_bufs; i++) free(m->bufs[i]);
    free(m->bufs);
    free(m->layers);
    free(m->head_kv);
    expert_layout_free(&m->xl);
    vocab_free(m->vocab);
    gguf_close(m->g);
    free(m);
}

const gguf_file *model_gguf(const sl_model *m) { return m->g; }
const sl_vocab *model_vocab(const sl_model *m) { return m->vocab; }
const char *model_arch(const sl_model *m) { return m->ops->name; }
int32_t model_n_vocab(const sl_model *m) { return m->hp.n_vocab; }

int32_t model_set_head_rows(sl_model *m, int32_t n)
{
    /* whole groups of 16 rows: an interleaved matrix's rows come in those */
    m->head_rows = n <= 0 || n > m->hp.n_vocab - 16 ? m->hp.n_vocab : (n + 15) / 16 * 16;
    return m->head_rows;
}

int32_t model_head_rows(const sl_model *m) { return m->head_rows; }
int32_t model_n_ctx_train(const sl_model *m) { return m->hp.n_ctx_train; }
int32_t model_n_layer(const sl_model *m) { return m->hp.n_layer; }
int32_t model_n_embd(const sl_model *m) { return m->hp.n_embd; }
int32_t model_n_expert(const sl_model *m) { return m->hp.n_expert; }
int32_t model_n_expert_used(const sl_model *m) { return m->hp.n_expert_used; }
const expert_layout *model_expert_layout(const sl_model *m) { return m->hp.n_expert > 0 ? &m->xl : NULL; }
expert_provider *model_provider(const sl_model *m) { return m->provider; }
uint64_t model_spine_bytes(const sl_model *m) { return m->spine_bytes; }
int64_t model_derived_bytes(const sl_model *m) { return m->derived_bytes; }

int model_attach_ram_experts(sl_model *m, sl_err *err)
{
    if (m->hp.n_expert <= 0 || m->provider) return 0;
    if (mem_provider_create(&m->provider, &m->xl, err)) return -1;
    m->own_provider = true;
    return 0;
}

void model_set_route_observer(sl_model *m, const route_observer *o)
{
    m->obs = o ? *o : (route_observer){0};
}

void model_set_provider(sl_model *m, expert_provider *p, bool own)
{
    if (m->provider && m->own_provider && m->provider != p && m->provider->ops->destroy)
        m->provider->ops->destroy(m->provider);
    m->provider = p;
    m->own_provider = own;
}
