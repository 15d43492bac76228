/* Dense SwiGLU FFN and the routed mixture of experts.
 *
 * MoE numerics follow llama.cpp's build_moe_ffn: gating (softmax or
 * sigmoid), optional selection bias, group-limited top-k, weights taken from
 * the unbiased probabilities, renormalised (sum clamped at 2^-14) and scaled;
 * each expert output is multiplied by its weight and the K products are added
 * in router-rank order.  The layer decides for the whole batch first, asks
 * the provider for the distinct experts, and applies each expert to all the
 * positions that chose it as it arrives; results land in per-(position,
 * rank) slots so arrival order cannot change a bit. */
#include "arch/ffn.h"

#include "arch/pilot.h"

#include <math.h>
#include <string.h>

/* ggml applies swiglu per row (its vector tail differs from a flat pass
 * when n_ff is not a multiple of the vector width), so do the same. */
static void swiglu_rows(float *h, const float *g, const float *u, int64_t rows, int64_t n_ff)
{
    for (int64_t r = 0; r < rows; r++) op_swiglu(h + r * n_ff, g + r * n_ff, u + r * n_ff, n_ff);
}

/* gpt-oss's clamped SwiGLU as ggml_compute_forward_swiglu_oai_f32 computes
 * it: scalar, libm expf, x / (1 + e^(alpha * -x)) * (y + 1). */
static void swiglu_oai_rows(float *h, const float *g, const float *u, int64_t n, float alpha, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        float x = limit < g[i] ? limit : g[i];
        float y = u[i] < -limit ? -limit : limit < u[i] ? limit : u[i];
        float glu = x / (1.f + expf(alpha * (-x)));
        h[i] = glu * (y + 1.f);
    }
}

/* An expert's bias of part PART (f32 slice of its view). */
static const float *expert_bias(const expert_view *v, int part) { return (const float *)v->parts[part]; }

/* The routed experts' activation over ROWS rows of n_ff: h = act(g, u). */
static void expert_act(const hparams *hp, bool gate, float *h, const float *g, const float *u, int64_t rows,
                       int64_t n_ff)
{
    if (gate && hp->swiglu_oai) swiglu_oai_rows(h, g, u, rows * n_ff, hp->swiglu_alpha, hp->swiglu_limit);
    else if (gate) swiglu_rows(h, g, u, rows, n_ff);
    else
        for (int64_t i = 0; i < rows * n_ff; i++) h[i] = op_silu(u[i]);
}

/* Adds expert V's gate and up biases to its N rows (ggml_add_id). */
static void expert_bias_in(const layer_w *L, const expert_view *v, float *g, float *u, int n, int64_t n_ff)
{
    if (!L->exp_bias) return;
    add_bias(u, expert_bias(v, L->part_up_b), n, n_ff);
    if (L->part_gate >= 0) add_bias(g, expert_bias(v, L->part_gate_b), n, n_ff);
}

int ffn_block(sl_session *s, const sl_mat *gate, const sl_mat *up, const sl_mat *down, const float *bg,
              const float *bu, const float *bd, const float *xn, int T, float *out, sl_err *err)
{
    int64_t n_ff = up->ne1, n_in = up->ne0;
    float *u = scr_get(s, SCR_T1, (size_t)T * n_ff * sizeof(float), err);
    float *g = scr_get(s, SCR_T2, (size_t)T * n_ff * sizeof(float), err);
    float *h = scr_get(s, SCR_T3, (size_t)T * n_ff * sizeof(float), err);
    if (!u || !g || !h) return -1;
    sl_act *a = &s->act[ACT_A];
    if (act_prepare(a, up->type, xn, n_in, T, (size_t)n_in, s->pool, err)) return -1;
    bool has_gate = gate && gate->data;
    const sl_mat *w[2] = {up, gate};
    const sl_act *x[2] = {a, a};
    float *y[2] = {u, g};
    size_t stride[2] = {(size_t)n_ff, (size_t)n_ff};
    if (has_gate && kernels_vec_dot_type(gate->type) != a->vtype) {
        if (act_prepare(&s->act[ACT_B], gate->type, xn, n_in, T, (size_t)n_in, s->pool, err)) return -1;
        x[1] = &s->act[ACT_B];
    }
    if (matmul_multi(s, has_gate ? 2 : 1, w, x, y, stride, err)) return -1;
    if (bu) add_bias(u, bu, T, n_ff);
    if (has_gate) {
        if (bg) add_bias(g, bg, T, n_ff);
        swiglu_rows(h, g, u, T, n_ff);
    } else {
        for (int64_t i = 0; i < (int64_t)T * n_ff; i++) h[i] = op_silu(u[i]);
    }
    return linear(s, &s->act[ACT_C], down, bd, h, T, out, err);
}

/* ------------------------------------------------------------ router */

/* Index of the largest value not yet taken (ties: lowest index), -1 if none. */
static int argmax_free(const float *v, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

/* moe_route's work area: selection scores (E), group scores (G), taken
 * flags for experts (E) and for groups or a group's experts. */
size_t moe_route_work_bytes(const hparams *hp)
{
    size_t E = (size_t)hp->n_expert, G = hp->n_expert_groups > 1 ? (size_t)hp->n_expert_groups : 1;
    size_t per = E / G;
    return (E + G) * sizeof(float) + E + (G > per ? G : per);
}

/* DeepSeek-V3 group limiting: a group scores the sum of its two best
 * selection scores; only the best n_group_used groups stay selectable. */
static void limit_groups(const hparams *hp, float *sel, float *score, unsigned char *taken)
{
    int G = hp->n_expert_groups, per = hp->n_expert / G;
    if (G < 2 || per < 1) return; /* checked at load */
    for (int g = 0; g < G; g++) {
        const float *v = sel + g * per;
        memset(taken, 0, (size_t)per);
        int a = argmax_free(v, taken, per);
        score[g] = -INFINITY;
        if (a < 0) continue;
        taken[a] = 1;
        int b = argmax_free(v, taken, per);
        double sum = (double)v[a];
        if (b >= 0) sum += (double)v[b];
        score[g] = (float)sum;
    }
    memset(taken, 0, (size_t)G);
    for (int k = 0; k < hp->n_group_used; k++) {
        int g = argmax_free(score, taken, G);
        if (g >= 0) taken[g] = 1;
    }
    for (int g = 0; g < G; g++)
        if (!taken[g])
            for (int i = 0; i < per; i++) sel[g * per + i] = -INFINITY;
}

void moe_route(const hparams *hp, const layer_w *L, float *logits, int32_t *ids, float *w, void *work)
{
    int E = hp->n_expert, K = hp->n_expert_used;
    int G = hp->n_expert_groups > 1 ? hp->n_expert_groups : 1;
    float *probs = logits, *sel = work, *gscore = sel + E;
    unsigned char *taken = (unsigned char *)(gscore + G), *gtaken = taken + E;
    if (hp->gating == GATING_SIGMOID)
        for (int e = 0; e < E; e++) probs[e] = 1.f / (1.f + expf(-probs[e]));
    else if (hp->gating == GATING_SOFTMAX)
        op_softmax(probs, E);
    for (int e = 0; e < E; e++) sel[e] = L->exp_probs_b ? probs[e] + L->exp_probs_b[e] : probs[e];
    if (G > 1) limit_groups(hp, sel, gscore, gtaken);
    memset(taken, 0, (size_t)E);
    for (int k = 0; k < K; k++) {
        int e = argmax_free(sel, taken, E);
        if (e < 0) e = 0; /* unreachable: K <= E is checked at load */
        taken[e] = 1;
        ids[k] = e;
        w[k] = probs[e];
    }
    if (hp->gating == GATING_SOFTMAX_WEIGHT) op_softmax(w, K); /* over the selected logits */
    if (hp->expert_weights_norm) {
        double sum = 0.0;
        for (int k = 0; k < K; k++) sum += (double)w[k];
        float fs = (float)sum;
        if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
        for (int k = 0; k < K; k++) w[k] = w[k] / fs;
    }
    if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f)
        for (int k = 0; k < K; k++) w[k] = w[k] * hp->expert_weights_scale;
}

/* ------------------------------------------------------------ experts */

typedef struct {
    int T, K, E;
    int32_t *ids;   /* T x K */
    float *w;       /* T x K */
    int32_t *count; /* per expert */
    int32_t *start; /* per expert: offset into slots */
    int32_t *slots; /* grouped by expert: t * K + k */
    int32_t *list;  /* distinct experts, ascending */
    int32_t *fill;  /* per expert: next free slot while grouping */
    int n_list;
} routing;

static void group_by_expert(routing *r)
{
    memset(r->count, 0, sizeof(int32_t) * (size_t)r->E);
    for (int i = 0; i < r->T * r->K; i++) r->count[r->ids[i]]++;
    int32_t off = 0;
    r->n_list = 0;
    for (int e = 0; e < r->E; e++) {
        r->start[e] = off;
        off += r->count[e];
        if (r->count[e]) r->list[r->n_list++] = e;
    }
    memcpy(r->fill, r->start, sizeof(int32_t) * (size_t)r->E);
    for (int i = 0; i < r->T * r->K; i++) r->slots[r->fill[r->ids[i]]++] = i;
}

/* llama.cpp's expert products (mul_mat_id) sum float weights in vec_dot's
 * order, not the dense sgemm order, so experts say so (kernels.h). */
static sl_mat expert_mat(const sl_mat *geom, const expert_view *v, int part, size_t off)
{
    sl_mat w = *geom;
    w.data = (const char *)v->parts[part] + off;
    w.order = SL_ORDER_VEC_DOT;
    w.layout = v->layout[part];
    return w;
}

/* Applies expert E (weights in V) to its n rows; writes each result to its
 * slot row of y (T*K x n_embd). */
static int run_expert(sl_session *s, const layer_w *L, const routing *r, int e, const expert_view *v,
                      const sl_act *xa, const sl_act *xa_up, float *y, sl_err *err)
{
    int n = r->count[e];
    const int32_t *sl = r->slots + r->start[e];
    int64_t n_ff = L->x_up.ne1;
    int64_t n_embd = L->x_down.ne1;
    size_t rb = xa->row_bytes, rbu = xa_up->row_bytes;
    char *gx = scr_get(s, SCR_R_GATHER, (size_t)n * (rb + rbu), err);
    float *u = scr_get(s, SCR_T1, (size_t)n * n_ff * sizeof(float), err);
    float *g = scr_get(s, SCR_T2, (size_t)n * n_ff * sizeof(float), err);
    float *h = scr_get(s, SCR_T3, (size_t)n * n_ff * sizeof(float), err);
    float *d = scr_get(s, SCR_R_ROWS, (size_t)n * n_embd * sizeof(float), err);
    if (!gx || !u || !g || !h || !d) return -1;
    for (int j = 0; j < n; j++) {
        int t = sl[j] / r->K;
        memcpy(gx + (size_t)j * rb, (const char *)xa->data + (size_t)t * rb, rb);
        if (xa_up != xa) memcpy(gx + (size_t)n * rb + (size_t)j * rbu, (const char *)xa_up->data + (size_t)t * rbu, rbu);
    }
    sl_act xg = {.vtype = xa->vtype, .n = xa->n, .rows = n, .row_bytes = rb, .data = gx};
    sl_act xu = xa_up == xa ? xg
                            : (sl_act){.vtype = xa_up->vtype, .n = xa_up->n, .rows = n, .row_bytes = rbu,
                                       .data = gx + (size_t)n * rb};
    sl_mat wu = expert_mat(&L->x_up, v, L->part_up, L->off_up), wg = {0};
    if (L->part_gate >= 0) wg = expert_mat(&L->x_gate, v, L->part_gate, 0);
    const sl_mat *w[2] = {&wu, &wg};
    const sl_act *x[2] = {&xu, &xg};
    float *out[2] = {u, g};
    size_t stride[2] = {(size_t)n_ff, (size_t)n_ff};
    if (matmul_multi(s, L->part_gate >= 0 ? 2 : 1, w, x, out, stride, err)) return -1;
    expert_bias_in(L, v, g, u, n, n_ff);
    expert_act(&s->m->hp, L->part_gate >= 0, h, g, u, n, n_ff);
    sl_mat wd = expert_mat(&L->x_down, v, L->part_down, 0);
    if (act_prepare(&s->act[ACT_C], wd.type, h, n_ff, n, (size_t)n_ff, s->pool, err)) return -1;
    const sl_mat *wdp = &wd;
    const sl_act *xd = &s->act[ACT_C];
    size_t sd = (size_t)n_embd;
    if (matmul_multi(s, 1, &wdp, &xd, &d, &sd, err)) return -1;
    if (L->exp_bias) add_bias(d, expert_bias(v, L->part_down_b), n, n_embd);
    for (int j = 0; j < n; j++) memcpy(y + (size_t)sl[j] * n_embd, d + (size_t)j * n_embd, sizeof(float) * n_embd);
    return 0;
}

/* The experts of a layer in groups, when the provider hands out every
 * expert without waiting for releases (the in-RAM one has no release):
 * per group one dispatch for all gate/up products and one for all down
 * products, instead of two per expert.  At decode each expert is a few
 * small products, so the per-dispatch wake-up and the wait for the slowest
 * thread cost as much as the work between them.  Every row meets the same
 * weights and activation bytes as in run_expert, so the bits are the same. */
typedef struct {
    const layer_w *L;
    const routing *r;
    const expert_view *v; /* by index in r->list */
    const sl_act *xa, *xa_up;
    float *y;
} expert_batch;

/* Every product of a batch fits its activations (matmul_check). */
static int check_jobs(const sl_matmul_job *jobs, int n, sl_err *err)
{
    for (int i = 0; i < n; i++)
        if (matmul_check(jobs[i].w, jobs[i].x, err)) return -1;
    return 0;
}

static int run_group(sl_session *s, const expert_batch *b, int i0, int i1, int rows, sl_err *err)
{
    const layer_w *L = b->L;
    const routing *r = b->r;
    int64_t n_ff = L->x_up.ne1, n_embd = L->x_down.ne1;
    size_t rb = b->xa->row_bytes, rbu = b->xa_up->row_bytes;
    bool gate = L->part_gate >= 0, two = b->xa_up != b->xa;
    int ne = i1 - i0;
    char *gx = scr_get(s, SCR_R_GATHER, (size_t)rows * (rb + rbu), err);
    float *u = scr_get(s, SCR_T1, (size_t)rows * n_ff * sizeof(float), err);
    float *g = scr_get(s, SCR_T2, (size_t)rows * n_ff * sizeof(float), err);
    float *h = scr_get(s, SCR_T3, (size_t)rows * n_ff * sizeof(float), err);
    float *d = scr_get(s, SCR_R_ROWS, (size_t)rows * n_embd * sizeof(float), err);
    char *js = scr_get(s, SCR_R_JOBS, (size_t)ne * (3 * sizeof(sl_mat) + 3 * sizeof(sl_matmul_job) + 3 * sizeof(sl_act)), err);
    if (!gx || !u || !g || !h || !d || !js) return -1;
    sl_mat *w = (sl_mat *)js;
    sl_matmul_job *jobs = (sl_matmul_job *)(w + 3 * ne);
    sl_act *xs = (sl_act *)(jobs + 3 * ne);
    int row = 0, nj = 0;
    for (int i = i0; i < i1; i++) { /* gather each expert's rows, expert by expert */
        int e = r->list[i], n = r->count[e];
        const int32_t *sl = r->slots + r->start[e];
        for (int j = 0; j < n; j++) {
            int t = sl[j] / r->K;
            memcpy(gx + (size_t)(row + j) * rb, (const char *)b->xa->data + (size_t)t * rb, rb);
            if (two) memcpy(gx + (size_t)rows * rb + (size_t)(row + j) * rbu, (const char *)b->xa_up->data + (size_t)t * rbu, rbu);
        }
        sl_act *xg = &xs[3 * (i - i0)], *xu = xg + 1;
        *xg = (sl_act){.vtype = b->xa->vtype, .n = b->xa->n, .rows = n, .row_bytes = rb, .data = gx + (size_t)row * rb};
        *xu = two ? (sl_act){.vtype = b->xa_up->vtype, .n = b->xa_up->n, .rows = n, .row_bytes = rbu,
                             .data = gx + (size_t)rows * rb + (size_t)row * rbu}
                  : *xg;
        sl_mat *wi = &w[3 * (i - i0)];
        wi[0] = expert_mat(&L->x_up, &b->v[i], L->part_up, L->off_up);
        jobs[nj++] = (sl_matmul_job){&wi[0], xu, u + (size_t)row * n_ff, (size_t)n_ff};
        if (gate) {
            wi[1] = expert_mat(&L->x_gate, &b->v[i], L->part_gate, 0);
            jobs[nj++] = (sl_matmul_job){&wi[1], xg, g + (size_t)row * n_ff, (size_t)n_ff};
        }
        row += n;
    }
    if (check_jobs(jobs, nj, err)) return -1;
    matmul_many(jobs, nj, s->pool);
    for (int i = i0, r0 = 0; L->exp_bias && i < i1; r0 += r->count[r->list[i]], i++)
        expert_bias_in(L, &b->v[i], g + (size_t)r0 * n_ff, u + (size_t)r0 * n_ff, r->count[r->list[i]], n_ff);
    expert_act(&s->m->hp, gate, h, g, u, rows, n_ff);
    sl_act *xd = &s->act[ACT_C];
    if (act_prepare(xd, L->x_down.type, h, n_ff, rows, (size_t)n_ff, s->pool, err)) return -1;
    row = nj = 0;
    for (int i = i0; i < i1; i++) {
        int n = r->count[r->list[i]];
        sl_act *xi = &xs[3 * (i - i0) + 2];
        *xi = *xd;
        xi->rows = n;
        xi->data = (char *)xd->data + (size_t)row * xd->row_bytes;
        sl_mat *wd = &w[3 * (i - i0) + 2];
        *wd = expert_mat(&L->x_down, &b->v[i], L->part_down, 0);
        jobs[nj++] = (sl_matmul_job){wd, xi, d + (size_t)row * n_embd, (size_t)n_embd};
        row += n;
    }
    if (check_jobs(jobs, nj, err)) return -1;
    matmul_many(jobs, nj, s->pool);
    row = 0;
    for (int i = i0; i < i1; i++) {
        int e = r->list[i], n = r->count[e];
        const int32_t *sl = r->slots + r->start[e];
        if (L->exp_bias) add_bias(d + (size_t)row * n_embd, expert_bias(&b->v[i], L->part_down_b), n, n_embd);
        for (int j = 0; j < n; j++)
            memcpy(b->y + (size_t)sl[j] * n_embd, d + (size_t)(row + j) * n_embd, sizeof(float) * n_embd);
        row += n;
    }
    return 0;
}

/* Takes every expert from the provider, then runs them in groups of at most
 * max(n_batch, K) rows: the scratch the budget counts for a full pass
 * (session_scratch_bytes), so that a short pass (a verification's few
 * positions, a short prompt) runs all its experts in one group, each
 * product one task set of one matmul_many, not a fork and join per T
 * rows. */
static int run_experts_all(sl_session *s, int il, const routing *r, const sl_act *xa, const sl_act *xa_up, float *y,
                           int *done, sl_err *err)
{
    expert_provider *p = s->m->provider;
    expert_view *v = scr_get(s, SCR_R_VIEWS, sizeof(expert_view) * (size_t)r->n_list + (size_t)r->n_list, err);
    if (!v) return -1;
    unsigned char *seen = (unsigned char *)(v + r->n_list);
    memset(seen, 0, (size_t)r->n_list);
    for (;;) {
        expert_view x = {0};
        int idx = p->ops->next(p, &x, err);
        if (idx == -1) break;
        if (idx < 0 || idx >= r->n_list || x.id != r->list[idx] || seen[idx]) {
            if (idx >= 0) sl_errf(err, "layer %d: expert provider returned an unexpected expert", il);
            return -1;
        }
        seen[idx] = 1;
        v[idx] = x;
        (*done)++;
    }
    if (*done != r->n_list) return 0; /* the caller reports it */
    expert_batch b = {&s->m->layers[il], r, v, xa, xa_up, y};
    int cap = s->n_batch > r->K ? s->n_batch : r->K;
    for (int i0 = 0; i0 < r->n_list;) {
        int i1 = i0, rows = 0;
        while (i1 < r->n_list && (i1 == i0 || rows + r->count[r->list[i1]] <= cap)) rows += r->count[r->list[i1++]];
        if (run_group(s, &b, i0, i1, rows, err)) return -1;
        i0 = i1;
    }
    return 0;
}

typedef struct {
    const hparams *hp;
    const layer_w *L;
    float *logits; /* moe_route works on each position's row in place */
    routing *r;
    char *work; /* moe_route's, one per thread */
    size_t work_bytes;
} route_job;

static void route_rows(void *ctx, int t0, int t1, int thread)
{
    const route_job *j = ctx;
    int E = j->r->E, K = j->r->K;
    for (int t = t0; t < t1; t++)
        moe_route(j->hp, j->L, j->logits + (size_t)t * E, j->r->ids + t * K, j->r->w + t * K,
                  j->work + (size_t)thread * j->work_bytes);
}

static int route_batch(sl_session *s, const layer_w *L, int T, const float *xn, routing *r, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    int E = hp->n_expert, K = hp->n_expert_used;
    float *logits = scr_get(s, SCR_R_LOGITS, (size_t)T * E * sizeof(float), err);
    r->ids = scr_get(s, SCR_R_IDS, (size_t)T * K * sizeof(int32_t), err);
    r->w = scr_get(s, SCR_R_W, (size_t)T * K * sizeof(float), err);
    size_t work_bytes = (moe_route_work_bytes(hp) + 63) & ~(size_t)63;
    r->count = scr_get(s, SCR_R_COUNT, (size_t)E * 3 * sizeof(int32_t) + 64 + work_bytes * (size_t)s->n_threads, err);
    r->slots = scr_get(s, SCR_R_SLOTS, (size_t)T * K * sizeof(int32_t), err);
    r->list = scr_get(s, SCR_R_LIST, (size_t)E * sizeof(int32_t), err);
    if (!logits || !r->ids || !r->w || !r->count || !r->slots || !r->list) return -1;
    r->start = r->count + E;
    r->fill = r->start + E;
    uintptr_t work = ((uintptr_t)(r->fill + E) + 63) & ~(uintptr_t)63;
    r->T = T, r->K = K, r->E = E;
    if (linear(s, &s->act[ACT_A], &L->router, L->router_b, xn, T, logits, err)) return -1;
    run_rows(s, T, route_rows,
             &(route_job){.hp = hp, .L = L, .logits = logits, .r = r, .work = (char *)work, .work_bytes = work_bytes});
    group_by_expert(r);
    return 0;
}

/* Converts xn once for the gate (and, if its type differs, the up) experts. */
static int prepare_inputs(sl_session *s, const layer_w *L, const float *xn, int T, const sl_act **xa,
                          const sl_act **xa_up, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const sl_mat *first = L->part_gate >= 0 ? &L->x_gate : &L->x_up;
    sl_act *a = &s->act[ACT_B];
    if (act_prepare(a, first->type, xn, hp->n_embd, T, (size_t)hp->n_embd, s->pool, err)) return -1;
    *xa = *xa_up = a;
    if (kernels_vec_dot_type(L->x_up.type) != a->vtype) {
        if (act_prepare(&s->act[ACT_A], L->x_up.type, xn, hp->n_embd, T, (size_t)hp->n_embd, s->pool, err))
            return -1;
        *xa_up = &s->act[ACT_A];
    }
    return 0;
}

static int run_experts(sl_session *s, int il, const routing *r, const sl_act *xa, const sl_act *xa_up, float *y,
                       sl_err *err)
{
    const sl_model *m = s->m;
    expert_provider *p = m->provider;
    if (!p) return sl_errf(err, "layer %d: no expert provider attached", il);
    if (p->ops->begin(p, il, r->list, r->n_list, err)) return -1;
    /* the next layer's prediction: its reads queue behind this layer's
     * demand reads and overlap this layer's experts */
    int rc = pilot_attn_tap(s, il, err), done = 0;
    /* a provider that never waits for a release, or whose experts are all
     * ready (a store's hits): take them all and run them in groups, a
     * fork and join per group instead of three per expert */
    bool all = !p->ops->release || (p->ops->ready && p->ops->ready(p) == r->n_list);
    if (rc == 0 && all) rc = run_experts_all(s, il, r, xa, xa_up, y, &done, err);
    while (rc == 0 && !all) {
        expert_view v = {0};
        int idx = p->ops->next(p, &v, err);
        if (idx == -1) break;
        if (idx < 0 || idx >= r->n_list || v.id != r->list[idx]) {
            if (idx >= 0) sl_errf(err, "layer %d: expert provider returned an unexpected expert", il);
            rc = -1;
            break;
        }
        if (run_expert(s, &m->layers[il], r, r->list[idx], &v, xa, xa_up, y, err)) {
            rc = -1;
            break;
        }
        if (p->ops->release) p->ops->release(p, idx);
        done++;
    }
    p->ops->end(p, il);
    if (rc == 0 && done != r->n_list)
        rc = sl_errf(err, "layer %d: expert provider delivered %d of %d experts", il, done, r->n_list);
    return rc;
}

typedef struct {
    float *out;
    const float *y, *w;
    int K;
    int64_t n_embd;
} combine_job;

/* out[t] = sum over k of y[t][k] w[t][k], in k order whichever thread
 * runs position t */
static void combine_rows(void *ctx, int t0, int t1, int thread)
{
    (void)thread;
    const combine_job *j = ctx;
    int K = j->K;
    int64_t d = j->n_embd;
    for (int t = t0; t < t1; t++)
        op_weighted_sum(j->out + (size_t)t * d, j->y + (size_t)t * K * d, j->w + (size_t)t * K, K, d);
}

int moe_block(sl_session *s, int il, int T, const float *xn, float *out, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const layer_w *L = &s->m->layers[il];
    int K = hp->n_expert_used;
    int64_t n_embd = hp->n_embd;
    routing r;
    const sl_act *xa, *xa_up;
    if (route_batch(s, L, T, xn, &r, err) || prepare_inputs(s, L, xn, T, &xa, &xa_up, err)) return -1;
    pilot_observe(s, il, r.ids);
    if (s->m->obs.route) s->m->obs.route(s->m->obs.ctx, il, r.ids, T, K);
    float *y = scr_get(s, SCR_T4, (size_t)T * K * n_embd * sizeof(float), err);
    if (!y || run_experts(s, il, &r, xa, xa_up, y, err)) return -1;
    run_rows(s, T, combine_rows, &(combine_job){.out = out, .y = y, .w = r.w, .K = K, .n_embd = n_embd});
    return 0;
}
