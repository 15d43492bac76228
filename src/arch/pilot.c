/* Next-layer expert prediction: see pilot.h and docs/PREFETCH.md. */
#include "arch/pilot.h"

#include <stdlib.h>
#include <string.h>

#include "arch/block.h"
#include "arch/ffn.h"

typedef struct {
    bool moe;
    float est[SL_PRED_COUNT];
    int64_t n_est[SL_PRED_COUNT];
    /* the current batch */
    bool have[SL_PRED_COUNT]; /* predictions computed (ATTN / OUT in their scratch) */
    bool decided;             /* choice made (at the ATTN tap, or at layer start) */
    int choice;               /* source to hint, -1 none */
    int32_t *hint;            /* the distinct experts hinted (E), n_hint of them */
    int n_hint;
    int32_t *prev; /* K: the experts of the last position routed here */
    bool has_prev;
    /* decode-step totals */
    uint64_t steps, hinted_steps, hits, predicted, actual;
    uint64_t src_steps[SL_PRED_COUNT], cand_hits[SL_PRED_COUNT], cand_actual[SL_PRED_COUNT];
    uint64_t rank_hits[8], rank_hinted[8];
} pilot_layer;

struct pilot {
    sl_prefetch_mode mode;
    int n_layer, E, K, T, n_moe;
    int first;               /* the first MoE layer: the one with the token table */
    int32_t n_vocab;
    bool decode;
    const int32_t *tokens;   /* of the current micro-batch */
    pilot_layer *L;
    int32_t *ids;            /* backing store of every layer's hint and prev */
    int16_t *tok;            /* n_vocab x K: the first layer's experts for each token id last time, -1 unseen */
    int32_t *count;          /* E: build_hint's tallies */
    int16_t *rank;           /* E: build_hint's best ranks */
    uint8_t *in_a;           /* E: pilot_observe's actual experts of a position */
    sl_prefetch_layer *out;  /* n_moe, filled by pilot_stats */
};

int pilot_create(pilot **out, const sl_model *m, sl_prefetch_mode mode, sl_err *err)
{
    *out = NULL;
    const hparams *hp = &m->hp;
    if (mode == SL_PREFETCH_OFF || hp->n_expert == 0) return 0;
    pilot *p = calloc(1, sizeof *p);
    if (!p) return sl_errf(err, "out of memory for the expert predictor");
    p->mode = mode;
    p->n_layer = hp->n_layer, p->E = hp->n_expert, p->K = hp->n_expert_used;
    p->L = calloc((size_t)p->n_layer, sizeof *p->L);
    p->ids = calloc((size_t)p->n_layer * (size_t)(p->E + p->K), sizeof *p->ids);
    p->out = calloc((size_t)p->n_layer, sizeof *p->out);
    p->n_vocab = hp->n_vocab;
    p->tok = malloc((size_t)p->n_vocab * (size_t)p->K * sizeof *p->tok);
    p->count = calloc((size_t)p->E, sizeof *p->count);
    p->rank = calloc((size_t)p->E, sizeof *p->rank);
    p->in_a = calloc((size_t)p->E, sizeof *p->in_a);
    if (!p->L || !p->ids || !p->out || !p->tok || !p->count || !p->rank || !p->in_a) {
        pilot_free(p);
        return sl_errf(err, "out of memory for the expert predictor (%d layers)", hp->n_layer);
    }
    memset(p->tok, 0xff, (size_t)p->n_vocab * (size_t)p->K * sizeof *p->tok); /* -1 */
    p->first = -1;
    for (int j = 0; j < p->n_layer; j++) {
        pilot_layer *l = &p->L[j];
        l->moe = m->layers[j].moe;
        if (l->moe && p->first < 0) p->first = j;
        p->n_moe += l->moe;
        l->hint = p->ids + (size_t)j * (size_t)(p->E + p->K);
        l->prev = l->hint + p->E;
        l->choice = -1;
    }
    *out = p;
    return 0;
}

uint64_t pilot_bytes(const sl_model *m)
{
    const hparams *hp = &m->hp;
    uint64_t L = (uint64_t)hp->n_layer, K = (uint64_t)hp->n_expert_used;
    return sizeof(pilot) + L * (sizeof(pilot_layer) + sizeof(sl_prefetch_layer)) +
           L * ((uint64_t)hp->n_expert + K) * sizeof(int32_t) + (uint64_t)hp->n_vocab * K * sizeof(int16_t) +
           (uint64_t)hp->n_expert * (sizeof(int32_t) + sizeof(int16_t) + sizeof(uint8_t));
}

void pilot_free(pilot *p)
{
    if (!p) return;
    free(p->L);
    free(p->ids);
    free(p->out);
    free(p->tok);
    free(p->count);
    free(p->rank);
    free(p->in_a);
    free(p);
}

void pilot_ubatch(pilot *p, const int32_t *tokens, int T, bool decode)
{
    if (!p) return;
    p->tokens = tokens;
    p->T = T;
    p->decode = decode;
    for (int j = 0; j < p->n_layer; j++) {
        pilot_layer *l = &p->L[j];
        memset(l->have, 0, sizeof l->have);
        l->decided = false;
        l->choice = -1;
        l->n_hint = 0;
    }
}

/* ------------------------------------------------------------ choice */

void pilot_est_update(float *est, int64_t *n, float x)
{
    float a = 1.0f / (float)(*n + 1);
    if (a < PILOT_EMA_ALPHA) a = PILOT_EMA_ALPHA;
    *est = *n ? *est + a * (x - *est) : x;
    ++*n;
}

int pilot_choose(const float est[SL_PRED_COUNT], const int64_t n[SL_PRED_COUNT], bool has_attn)
{
    int early = -1;
    for (int c = 0; c < SL_PRED_COUNT; c++) {
        if (c == SL_PRED_OUT || !n[c] || (c == SL_PRED_ATTN && !has_attn)) continue;
        if (early < 0 || est[c] > est[early]) early = c;
    }
    int pick = early;
    if (n[SL_PRED_OUT] && (pick < 0 || est[SL_PRED_OUT] > est[pick] + PILOT_LATE_MARGIN)) pick = SL_PRED_OUT;
    if (pick < 0) /* no sample yet: the pilot */
        return has_attn ? SL_PRED_ATTN : SL_PRED_OUT;
    return est[pick] >= PILOT_MIN_RECALL ? pick : -1;
}

static int decide(const pilot *p, const pilot_layer *l, bool has_attn)
{
    if (p->mode == SL_PREFETCH_NEXT) return has_attn ? SL_PRED_ATTN : SL_PRED_OUT;
    return pilot_choose(l->est, l->n_est, has_attn);
}

/* ------------------------------------------------------------ predict */

/* Layer J's norm and router on the T rows of X: the top-k of each row, in
 * rank order, into IDS (T x K).  Uses only the predictor's scratch. */
static int predict(sl_session *s, int j, const float *x, int T, int32_t *ids, sl_err *err)
{
    const hparams *hp = &s->m->hp;
    const layer_w *L = &s->m->layers[j];
    int E = hp->n_expert, K = hp->n_expert_used;
    float *xn = scr_get(s, SCR_P_XN, (size_t)T * hp->n_embd * sizeof(float), err);
    float *logits = scr_get(s, SCR_P_LOGITS, (size_t)T * E * sizeof(float), err);
    float *w = scr_get(s, SCR_P_W, (size_t)K * sizeof(float) + moe_route_work_bytes(hp), err);
    if (!xn || !logits || !w) return -1;
    norm_rows(xn, x, L->ffn_norm, T, hp->n_embd, hp->rms_eps);
    if (linear(s, &s->act[ACT_P], &L->router, L->router_b, xn, T, logits, err)) return -1;
    for (int t = 0; t < T; t++) moe_route(hp, L, logits + (size_t)t * E, ids + (size_t)t * K, w, w + K);
    return 0;
}

/* The distinct experts of the T x K predictions in PRED, most often
 * predicted first (then by best rank, then id), into l->hint. */
static void build_hint(const pilot *p, pilot_layer *l, const int32_t *pred, int T)
{
    int32_t *count = p->count;
    int16_t *rank = p->rank;
    l->n_hint = 0;
    for (int i = 0; i < T * p->K; i++) {
        int e = pred[i], k = i % p->K;
        if (!count[e]++) rank[e] = (int16_t)k, l->hint[l->n_hint++] = e;
        else if (k < rank[e]) rank[e] = (int16_t)k;
    }
    for (int a = 1; a < l->n_hint; a++) { /* insertion sort: at most E entries */
        int32_t e = l->hint[a];
        int b = a;
        for (; b > 0; b--) {
            int32_t f = l->hint[b - 1];
            bool before = count[e] > count[f] || (count[e] == count[f] && (rank[e] < rank[f] ||
                                                                            (rank[e] == rank[f] && e < f)));
            if (!before) break;
            l->hint[b] = f;
        }
        l->hint[b] = e;
    }
    for (int i = 0; i < l->n_hint; i++) count[l->hint[i]] = 0; /* zero again for the next call */
}

static int pred_slot(int src)
{
    return src == SL_PRED_ATTN ? SCR_P_ATTN : src == SL_PRED_OUT ? SCR_P_OUT : SCR_P_TOKEN;
}

/* Sends layer J's prediction from source SRC to the provider. */
static void issue(sl_session *s, int j, int src)
{
    pilot *p = s->pilot;
    pilot_layer *l = &p->L[j];
    l->n_hint = 0;
    if (src == SL_PRED_ATTN || src == SL_PRED_OUT || src == SL_PRED_TOKEN) {
        if (!l->have[src]) return;
        build_hint(p, l, s->scr[pred_slot(src)], p->T);
    } else if (src == SL_PRED_PREV) {
        if (!l->has_prev) return;
        build_hint(p, l, l->prev, 1);
    }
    expert_provider *pr = s->m->provider;
    if (l->n_hint && pr && pr->ops->hint) pr->ops->hint(pr, j, l->hint, l->n_hint);
    if (l->n_hint && s->m->obs.hint) s->m->obs.hint(s->m->obs.ctx, j, l->hint, l->n_hint);
}

/* The prediction scratch SLOT, sized for the batch (T x K ids). */
static int32_t *pred_buf(sl_session *s, int slot, sl_err *err)
{
    const pilot *p = s->pilot;
    return scr_get(s, slot, (size_t)p->T * p->K * sizeof(int32_t), err);
}

/* The first layer's token-table prediction for each position, OUT's
 * where the token was not seen yet. */
static int predict_token(sl_session *s, const int32_t *out_ids, sl_err *err)
{
    pilot *p = s->pilot;
    int32_t *ids = pred_buf(s, SCR_P_TOKEN, err);
    if (!ids) return -1;
    for (int t = 0; t < p->T; t++) {
        const int16_t *h = p->tok + (size_t)p->tokens[t] * p->K;
        for (int k = 0; k < p->K; k++)
            ids[t * p->K + k] = h[0] >= 0 ? h[k] : out_ids[t * p->K + k];
    }
    return 0;
}

int pilot_layer_start(sl_session *s, int il, sl_err *err)
{
    pilot *p = s->pilot;
    if (!p || !p->L[il].moe) return 0;
    pilot_layer *l = &p->L[il];
    int32_t *ids = pred_buf(s, SCR_P_OUT, err);
    if (!ids || predict(s, il, s->scr[SCR_X], p->T, ids, err)) return -1;
    l->have[SL_PRED_OUT] = true;
    if (il == p->first) {
        if (predict_token(s, ids, err)) return -1;
        l->have[SL_PRED_TOKEN] = true;
    }
    if (!l->decided) { /* no ATTN tap before this layer: choose now */
        l->decided = true;
        l->choice = decide(p, l, false);
        if (l->choice == SL_PRED_PREV || l->choice == SL_PRED_TOKEN) issue(s, il, l->choice);
    }
    if (l->choice == SL_PRED_OUT) issue(s, il, SL_PRED_OUT);
    return 0;
}

int pilot_attn_tap(sl_session *s, int il, sl_err *err)
{
    pilot *p = s->pilot;
    int j = il + 1;
    if (!p || j >= p->n_layer || !p->L[j].moe) return 0;
    pilot_layer *l = &p->L[j];
    int32_t *ids = pred_buf(s, SCR_P_ATTN, err);
    if (!ids || predict(s, j, s->scr[SCR_X], p->T, ids, err)) return -1;
    l->have[SL_PRED_ATTN] = true;
    l->decided = true;
    l->choice = decide(p, l, true);
    if (l->choice == SL_PRED_ATTN || l->choice == SL_PRED_PREV) issue(s, j, l->choice);
    return 0;
}

/* ------------------------------------------------------------ score */

static int overlap(const int32_t *a, int na, const uint8_t *in_b)
{
    int h = 0;
    for (int i = 0; i < na; i++) h += in_b[a[i]];
    return h;
}

/* Scores source SRC's prediction P (K ids) for one position whose actual
 * experts are marked in IN_A. */
static void score_one(pilot *p, pilot_layer *l, int src, const int32_t *pred, const uint8_t *in_a)
{
    int h = overlap(pred, p->K, in_a);
    pilot_est_update(&l->est[src], &l->n_est[src], (float)h / (float)p->K);
    if (p->decode) l->cand_hits[src] += (uint64_t)h, l->cand_actual[src] += (uint64_t)p->K;
}

void pilot_observe(sl_session *s, int il, const int32_t *ids)
{
    pilot *p = s->pilot;
    if (!p) return;
    pilot_layer *l = &p->L[il];
    int K = p->K;
    for (int t = 0; t < p->T; t++) {
        const int32_t *a = ids + (size_t)t * K;
        uint8_t *in_a = p->in_a; /* all zero between positions */
        for (int k = 0; k < K; k++) in_a[a[k]] = 1;
        for (int c = 0; c < SL_PRED_COUNT; c++) {
            if (c == SL_PRED_PREV || !l->have[c]) continue;
            score_one(p, l, c, (const int32_t *)s->scr[pred_slot(c)] + (size_t)t * K, in_a);
        }
        if (t > 0) score_one(p, l, SL_PRED_PREV, a - K, in_a);
        else if (l->has_prev) score_one(p, l, SL_PRED_PREV, l->prev, in_a);
        if (p->decode) {
            int h = overlap(l->hint, l->n_hint, in_a);
            for (int k = 0; k < l->n_hint && k < 8; k++) l->rank_hits[k] += in_a[l->hint[k]], l->rank_hinted[k]++;
            l->steps++;
            l->hits += (uint64_t)h, l->predicted += (uint64_t)l->n_hint, l->actual += (uint64_t)K;
            if (l->n_hint) l->hinted_steps++, l->src_steps[l->choice]++;
        }
        for (int k = 0; k < K; k++) in_a[a[k]] = 0;
    }
    memcpy(l->prev, ids + (size_t)(p->T - 1) * K, sizeof(int32_t) * (size_t)K);
    l->has_prev = true;
    if (il == p->first)
        for (int t = 0; t < p->T; t++)
            for (int k = 0; k < K; k++) p->tok[(size_t)p->tokens[t] * K + k] = (int16_t)ids[(size_t)t * K + k];
}

/* ------------------------------------------------------------ stats */

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

void pilot_stats(pilot *p, sl_prefetch_stats *out)
{
    memset(out, 0, sizeof *out);
    out->mode = p ? p->mode : SL_PREFETCH_OFF;
    if (!p) return;
    int n = 0;
    for (int j = 0; j < p->n_layer; j++) {
        const pilot_layer *l = &p->L[j];
        if (!l->moe) continue;
        sl_prefetch_layer *o = &p->out[n++];
        memset(o, 0, sizeof *o);
        o->layer = j;
        o->steps = l->steps, o->hinted_steps = l->hinted_steps;
        o->hits = l->hits, o->predicted = l->predicted, o->actual = l->actual;
        o->recall = ratio(l->hits, l->actual), o->precision = ratio(l->hits, l->predicted);
        for (int c = 0; c < SL_PRED_COUNT; c++) {
            o->src_steps[c] = l->src_steps[c];
            o->src_recall[c] = l->cand_actual[c] ? ratio(l->cand_hits[c], l->cand_actual[c]) : -1.0;
            o->est[c] = l->n_est[c] ? l->est[c] : -1.0f;
        }
        for (int k = 0; k < 8; k++) o->rank_precision[k] = ratio(l->rank_hits[k], l->rank_hinted[k]);
        o->choice = decide(p, l, j > 0);
        out->hits += l->hits, out->predicted += l->predicted, out->actual += l->actual;
        if (l->steps > out->steps) out->steps = l->steps;
    }
    out->recall = ratio(out->hits, out->actual);
    out->precision = ratio(out->hits, out->predicted);
    out->n_layers = n;
    out->layers = p->out;
}

static const char *const MODE_NAMES[] = {"auto", "off", "next"};
static const char *const SRC_NAMES[] = {"attn", "out", "prev", "token"};

const char *sl_prefetch_mode_name(sl_prefetch_mode m)
{
    return (unsigned)m < 3 ? MODE_NAMES[m] : "?";
}

int sl_prefetch_mode_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, MODE_NAMES[i])) return i;
    return -1;
}

const char *sl_pred_source_name(int src)
{
    return src >= 0 && src < SL_PRED_COUNT ? SRC_NAMES[src] : "off";
}
