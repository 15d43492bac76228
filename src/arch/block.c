#include "arch/block.h"

#include <math.h>

#include "arch/attn.h"
#include "arch/ffn.h"
#include "arch/pilot.h"

void norm_rows(float *xn, const float *x, const float *w, int T, int64_t n, float eps)
{
    op_rms_norm_rows(xn, x, w, T, n, eps);
}

typedef struct {
    float *xn;
    const float *x, *w;
    int64_t n;
    float eps;
} norm_job;

static void norm_share(void *ctx, int t0, int t1, int thread)
{
    (void)thread;
    const norm_job *j = ctx;
    op_rms_norm_rows(j->xn + t0 * j->n, j->x + t0 * j->n, j->w, t1 - t0, j->n, j->eps);
}

/* norm_rows over the pool (run_rows) */
static void norm_pass(sl_session *s, float *xn, const float *x, const float *w, int T, int64_t n, float eps)
{
    run_rows(s, T, norm_share, &(norm_job){.xn = xn, .x = x, .w = w, .n = n, .eps = eps});
}

void add_rows(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

int layer_attn_half(sl_session *s, int il, const batch *b, attn_fn attn, float **xn, float **out, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const layer_w *L = &s->m->layers[il];
    int64_t n = (int64_t)b->T * hp->n_embd;
    float *x = s->scr[SCR_X];
    *xn = scr_get(s, SCR_XN, (size_t)n * sizeof(float), err);
    *out = scr_get(s, SCR_OUT, (size_t)n * sizeof(float), err);
    if (!*xn || !*out || pilot_layer_start(s, il, err)) return -1;
    norm_pass(s, *xn, x, L->attn_norm, b->T, hp->n_embd, hp->rms_eps);
    if (attn(s, il, b, *xn, *out, err)) return -1;
    add_rows(x, *out, n);
    norm_pass(s, *xn, x, L->ffn_norm, b->T, hp->n_embd, hp->rms_eps);
    return 0;
}

int decoder_layer(sl_session *s, int il, const batch *b, sl_err *err)
{
    const layer_w *L = &s->m->layers[il];
    int T = b->T;
    int64_t n = (int64_t)T * s->m->hp.n_embd;
    float *x = s->scr[SCR_X], *xn, *out;
    if (layer_attn_half(s, il, b, attn_block, &xn, &out, err)) return -1;
    int rc = L->moe ? moe_block(s, il, T, xn, out, err)
                    : ffn_block(s, &L->ffn_gate, &L->ffn_up, &L->ffn_down, L->b_gate, L->b_up, L->b_down, xn, T,
                                out, err);
    if (rc) return -1;
    add_rows(x, out, n);
    return 0;
}

int layer_ffn_half(sl_session *s, int il, int T, const float *xn, float *out, sl_err *err)
{
    const layer_w *L = &s->m->layers[il];
    int64_t d = s->m->hp.n_embd, n = (int64_t)T * d;
    float *x = s->scr[SCR_X];
    if (!L->moe) { /* a dense layer: predict the next one's experts while its FFN runs */
        if (pilot_attn_tap(s, il, err) ||
            ffn_block(s, &L->ffn_gate, &L->ffn_up, &L->ffn_down, L->b_gate, L->b_up, L->b_down, xn, T, out, err))
            return -1;
        add_rows(x, out, n);
        return 0;
    }
    if (moe_block(s, il, T, xn, out, err)) return -1;
    if (L->sh_down.data) { /* the shared expert in its own buffer: moe_out + shexp, then + residual */
        float *sh = scr_get(s, SCR_T4, (size_t)n * sizeof(float), err);
        if (!sh || ffn_block(s, &L->sh_gate, &L->sh_up, &L->sh_down, NULL, NULL, NULL, xn, T, sh, err)) return -1;
        if (L->sh_gate_inp.data) { /* scaled by sigmoid(w . x) per token */
            float *gate = scr_get(s, SCR_T3, (size_t)T * sizeof(float), err);
            if (!gate || linear(s, &s->act[ACT_A], &L->sh_gate_inp, NULL, xn, T, gate, err)) return -1;
            for (int t = 0; t < T; t++) {
                float g = 1.0f / (1.0f + expf(-gate[t]));
                for (int64_t i = 0; i < d; i++) sh[t * d + i] *= g;
            }
        }
        add_rows(out, sh, n);
    }
    add_rows(x, out, n);
    return 0;
}
