/* The draft-model proposer (draft_model.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/draft_model.h"

struct draft_model {
    sl_model *m;
    sl_session *s;
    int32_t n_vocab;
    int32_t *toks;   /* what the draft session has evaluated: toks[0, session_pos) */
    size_t cap;
    float *logits;
    float p_min;
    sl_sampler *smp; /* NULL: greedy */
    sl_cand *q;      /* DRAFT_MAX x n_vocab: the distributions drafts were drawn from */
    /* cross-vocabulary drafting: the draft reads and writes text */
    bool xvocab;
    const sl_vocab *tv; /* the target's vocabulary */
    char why[512];      /* how the vocabularies differ */
};

/* ------------------------------------------------------- vocabularies */

#define K "tokenizer.ggml."

static void piece(const gguf_str *a, uint64_t n, uint64_t i, char *buf, size_t cap)
{
    if (i >= n) {
        snprintf(buf, cap, "(none)");
        return;
    }
    snprintf(buf, cap, "'%.*s'", (int)(a[i].len < 64 ? a[i].len : 64), a[i].s);
}

/* Compares string array KEY; 1 with WHY on the first difference. */
static int same_strings(const gguf_file *a, const gguf_file *b, const char *key, const char *what, char *why,
                        size_t cap, sl_err *err)
{
    const void *da = NULL, *db = NULL;
    uint64_t na = 0, nb = 0;
    int ra = gguf_get_arr(a, key, GGUF_STRING, &da, &na, err), rb;
    if (ra < 0 || (rb = gguf_get_arr(b, key, GGUF_STRING, &db, &nb, err)) < 0) return -1;
    const gguf_str *sa = da, *sb = db;
    uint64_t n = na < nb ? na : nb;
    for (uint64_t i = 0; i < n; i++)
        if (sa[i].len != sb[i].len || memcmp(sa[i].s, sb[i].s, sa[i].len)) {
            char pa[96], pb[96];
            piece(sa, na, i, pa, sizeof pa), piece(sb, nb, i, pb, sizeof pb);
            snprintf(why, cap, "%s %llu differs: %s in the target, %s in the draft", what, (unsigned long long)i, pa, pb);
            return 1;
        }
    if (na != nb) {
        char pa[96], pb[96];
        piece(sa, na, n, pa, sizeof pa), piece(sb, nb, n, pb, sizeof pb);
        snprintf(why, cap, "%s lists differ in length (%llu in the target, %llu in the draft); %s %llu is %s in the target, %s in the draft",
                 what, (unsigned long long)na, (unsigned long long)nb, what, (unsigned long long)n, pa, pb);
        return 1;
    }
    return 0;
}

static int same_types(const gguf_file *a, const gguf_file *b, char *why, size_t cap, sl_err *err)
{
    const void *da = NULL, *db = NULL;
    uint64_t na = 0, nb = 0;
    if (gguf_get_arr(a, K "token_type", GGUF_INT32, &da, &na, err) < 0 ||
        gguf_get_arr(b, K "token_type", GGUF_INT32, &db, &nb, err) < 0)
        return -1;
    uint64_t n = na < nb ? na : nb;
    for (uint64_t i = 0; i < n; i++) {
        int32_t ta, tb;
        memcpy(&ta, (const char *)da + 4 * i, 4), memcpy(&tb, (const char *)db + 4 * i, 4);
        if (ta != tb) {
            snprintf(why, cap, "token %llu has type %d in the target, %d in the draft", (unsigned long long)i, ta, tb);
            return 1;
        }
    }
    if (na != nb) {
        snprintf(why, cap, "token type lists differ in length (%llu in the target, %llu in the draft)",
                 (unsigned long long)na, (unsigned long long)nb);
        return 1;
    }
    return 0;
}

static int same_str(const gguf_file *a, const gguf_file *b, const char *key, char *why, size_t cap, sl_err *err)
{
    const gguf_str *sa = NULL, *sb = NULL;
    int ra = gguf_get_str(a, key, &sa, err), rb;
    if (ra < 0 || (rb = gguf_get_str(b, key, &sb, err)) < 0) return -1;
    if (!ra && !rb) return 0;
    if (ra && rb && sa->len == sb->len && !memcmp(sa->s, sb->s, sa->len)) return 0;
    snprintf(why, cap, "%s is '%s' in the target, '%s' in the draft", key, ra ? sa->s : "(none)", rb ? sb->s : "(none)");
    return 1;
}

int draft_vocab_compare(const gguf_file *a, const gguf_file *b, char *why, size_t cap, sl_err *err)
{
    int r;
    if ((r = same_str(a, b, K "model", why, cap, err))) return r;
    if ((r = same_strings(a, b, K "tokens", "token", why, cap, err))) return r;
    if ((r = same_types(a, b, why, cap, err))) return r;
    if ((r = same_strings(a, b, K "merges", "merge", why, cap, err))) return r;
    return same_str(a, b, K "pre", why, cap, err);
}

/* ------------------------------------------------------------- model */

/* Session options of a draft: f32 KV, any prefix of a verification restorable. */
static session_opts draft_session_opts(void)
{
    return (session_opts){.kv_mode = SL_KV_F32, .n_rollback = DRAFT_MAX + 1, .prefetch = SL_PREFETCH_OFF};
}

static size_t draft_ctx(int32_t n_ctx, bool xvocab) { return (size_t)n_ctx * (xvocab ? 4 : 1) + DRAFT_MAX + 1; }

int draft_model_ram_bytes(const char *path, int32_t n_ctx, int threads, uint64_t *out, sl_err *err)
{
    sl_model *m;
    if (model_load(&m, path, &(model_opts){.dry_run = true, .q8_weights = true}, err)) return -1;
    const gguf_file *g = model_gguf(m);
    int64_t w = model_derived_bytes(m);
    for (uint64_t i = 0; i < g->n_tensors; i++) w += (int64_t)g->tensors[i].nbytes;
    session_opts so = draft_session_opts();
    /* the cross-vocabulary context bound: the most it could need */
    int32_t c = (int32_t)draft_ctx(n_ctx, true);
    *out = (uint64_t)(w > 0 ? w : 0) + session_kv_bytes(m, c, &so) + session_state_total_bytes(m, &so) +
           session_scratch_bytes(m, c, 0, threads) + (uint64_t)model_n_vocab(m) * (4 + sizeof(sl_cand) * DRAFT_MAX);
    model_free(m);
    return 0;
}

/* A small draft's head is most of its cost per token (tinydraft: 0.24 of
 * 0.29 ms, its 50k x 128 head against 4 layers of 128), so it proposes from
 * the first ids only: BPE and SentencePiece vocabularies number their
 * tokens roughly by frequency (merge order, score), and GPT-2's first 8192
 * ids hold 99.0% of tinymoe's greedy continuations of the bench's 28
 * prompts (3584 tokens; the first 16384, 99.97%).  A token it cannot
 * propose costs a rejection at most: the target verifies every draft. */
int32_t draft_auto_vocab(const sl_model *m)
{
    const gguf_file *g = model_gguf(m);
    const gguf_tensor *out = gguf_find_tensor(g, "output.weight"), *emb = gguf_find_tensor(g, "token_embd.weight");
    uint64_t head = out ? out->nbytes : emb ? emb->nbytes : 0, rest = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (&g->tensors[i] != out && &g->tensors[i] != emb) rest += g->tensors[i].nbytes;
    int32_t nv = model_n_vocab(m);
    if (!head || rest >= head) return nv;
    double rows = (double)nv * (double)rest / (double)head;
    return rows < DRAFT_VOCAB_MIN ? DRAFT_VOCAB_MIN : (int32_t)ceil(rows);
}

int draft_model_open(draft_model **out, const char *path, const sl_model *target, sl_pool *pool, int32_t n_ctx,
                     float p_min, int32_t vocab, bool cross, sl_err *err)
{
    *out = NULL;
    draft_model *dm = calloc(1, sizeof *dm);
    if (!dm) return sl_errf(err, "out of memory");
    if (model_load(&dm->m, path, &(model_opts){.q8_weights = true}, err)) {
        free(dm);
        return -1;
    }
    int r = draft_vocab_compare(model_gguf(target), model_gguf(dm->m), dm->why, sizeof dm->why, err);
    if (r < 0 || (r && !cross)) {
        if (r > 0) sl_errf(err, "draft %s has another vocabulary than the target: %s", path, dm->why);
        draft_model_free(dm);
        return -1;
    }
    dm->xvocab = r > 0;
    if (!dm->xvocab) dm->why[0] = 0;
    dm->tv = model_vocab(target);
    dm->n_vocab = model_n_vocab(dm->m);
    model_set_head_rows(dm->m, vocab == 0 ? draft_auto_vocab(dm->m) : vocab);
    dm->p_min = p_min;
    /* another tokenizer may need more tokens for the same text */
    dm->cap = draft_ctx(n_ctx, dm->xvocab);
    session_opts so = draft_session_opts();
    dm->toks = malloc(dm->cap * sizeof *dm->toks);
    dm->logits = malloc((size_t)dm->n_vocab * sizeof *dm->logits);
    if (!dm->toks || !dm->logits) {
        draft_model_free(dm);
        return sl_errf(err, "out of memory");
    }
    if (session_create_opts(&dm->s, dm->m, (int32_t)dm->cap, pool, &so, err)) {
        draft_model_free(dm);
        return -1;
    }
    *out = dm;
    return 0;
}

void draft_model_free(draft_model *dm)
{
    if (!dm) return;
    session_free(dm->s);
    model_free(dm->m);
    sampler_free(dm->smp);
    free(dm->q);
    free(dm->toks);
    free(dm->logits);
    free(dm);
}

const sl_model *draft_model_model(const draft_model *dm) { return dm->m; }
const char *draft_model_xvocab(const draft_model *dm) { return dm->xvocab ? dm->why : NULL; }

int draft_model_set_sampling(draft_model *dm, const sampler_params *p, sl_err *err)
{
    sampler_free(dm->smp);
    dm->smp = NULL;
    /* across vocabularies the draft's distribution says nothing about target
     * tokens: it proposes its argmax text, and the target tokens it fixes
     * are point masses */
    if (!p || p->temp <= 0 || dm->xvocab) return 0;
    sampler_params d = *p;
    d.repeat_penalty = 1, d.frequency_penalty = 0, d.presence_penalty = 0, d.repeat_last_n = 0;
    if (!dm->q && !(dm->q = malloc(sizeof(sl_cand) * (size_t)dm->n_vocab * DRAFT_MAX)))
        return sl_errf(err, "out of memory for the draft's distributions");
    return sampler_create(&dm->smp, &d, dm->n_vocab, err);
}

/* Brings the draft session to HIST[0, N) with the logits after it. */
static int sync(draft_model *dm, const int32_t *hist, size_t n, sl_err *err)
{
    if (n == 0 || n + DRAFT_MAX + 1 > dm->cap) return sl_errf(err, "draft: %zu tokens do not fit its context", n);
    size_t pos = (size_t)session_pos(dm->s), keep = 0;
    while (keep < pos && keep < n && dm->toks[keep] == hist[keep]) keep++;
    if (keep == n) keep = n - 1; /* the logits after the last token are not kept: evaluate it again */
    while (keep > 0 && !session_can_rewind(dm->s, (int32_t)keep)) keep--;
    if (session_rewind(dm->s, (int32_t)keep, err)) return -1;
    memcpy(dm->toks + keep, hist + keep, (n - keep) * sizeof *hist);
    return session_eval(dm->s, dm->toks + keep, (int32_t)(n - keep), dm->logits, false, err);
}

/* The most likely token's probability under the softmax of LOGITS. */
static double top_prob(const float *l, int32_t n, int32_t best)
{
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp((double)l[i] - l[best]);
    return 1 / s;
}

static int32_t draw(const sl_cand *c, size_t n, sl_rng *rng)
{
    double u = rng_uniform(rng), run = 0;
    for (size_t i = 0; i < n; i++) {
        run += c[i].p;
        if (run > u) return c[i].id;
    }
    return c[n - 1].id;
}

static int propose_same(draft_model *dm, const int32_t *hist, size_t n, int kmax, sl_rng *rng, draft_proposal *p,
                        sl_err *err)
{
    p->n = 0;
    if (sync(dm, hist, n, err)) return -1;
    size_t at = n;
    for (int k = 0; k < kmax; k++) {
        int32_t t;
        if (!dm->smp) {
            t = sampler_argmax(dm->logits, dm->n_vocab);
            if (t < 0) break; /* all-NaN draft logits: propose nothing */
            if (dm->p_min > 0 && top_prob(dm->logits, dm->n_vocab, t) < dm->p_min) break;
            p->q[k] = NULL, p->n_q[k] = 0;
        } else {
            const sl_cand *c;
            size_t nc = sampler_candidates(dm->smp, dm->logits, &c);
            if (!nc || (dm->p_min > 0 && c[0].p < dm->p_min)) break;
            sl_cand *q = dm->q + (size_t)k * dm->n_vocab;
            memcpy(q, c, nc * sizeof *c);
            t = draw(q, nc, rng);
            p->q[k] = q, p->n_q[k] = nc;
        }
        p->ids[k] = t, p->kind[k] = DRAFT_MODEL, p->n = k + 1;
        if (k + 1 == kmax) break;
        dm->toks[at++] = t;
        if (session_eval(dm->s, &t, 1, dm->logits, false, err)) return -1;
    }
    return 0;
}

/* ------------------------------------------------- across vocabularies */

enum { XV_CONTEXT = 4, XV_EXTRA = 3 };

/* The draft's tokens for the target's sequence HIST: its text, tokenized
 * with the draft's vocabulary (BOS as the draft's vocabulary asks). */
static int draft_ids(draft_model *dm, const int32_t *hist, size_t n, int32_t **ids, size_t *nid, sl_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = vocab_detokenize(dm->tv, hist, n, true, false, &text, &len, err);
    if (!rc) rc = vocab_tokenize(model_vocab(dm->m), text, len, vocab_add_bos(model_vocab(dm->m)), false, ids, nid, err);
    free(text);
    return rc;
}

/* Target tokens that the draft's text PROPOSAL fixes after the last target
 * tokens CTX[0, NC): the text of CTX followed by PROPOSAL, tokenized by the
 * target, must start with CTX itself (else the proposal's first bytes would
 * merge into a token already taken: nothing is fixed); its last token could
 * still grow with more text, so it is left out. */
static int fixed_tokens(draft_model *dm, const int32_t *ctx, size_t nc, const char *prop, size_t plen, int kmax,
                        draft_proposal *p, sl_err *err)
{
    char *ct = NULL;
    size_t cl = 0;
    int32_t *ids = NULL;
    size_t ni = 0;
    int rc = vocab_detokenize(dm->tv, ctx, nc, true, false, &ct, &cl, err);
    char *all = rc ? NULL : malloc(cl + plen + 1);
    if (!rc && !all) rc = sl_errf(err, "out of memory");
    if (!rc) {
        memcpy(all, ct, cl), memcpy(all + cl, prop, plen);
        rc = vocab_tokenize(dm->tv, all, cl + plen, false, false, &ids, &ni, err);
    }
    if (!rc && ni > nc + 1 && !memcmp(ids, ctx, nc * sizeof *ids)) {
        for (size_t i = nc; i + 1 < ni && p->n < kmax; i++) {
            p->ids[p->n] = ids[i], p->q[p->n] = NULL, p->n_q[p->n] = 0, p->kind[p->n] = DRAFT_MODEL;
            p->n++;
        }
    }
    free(ct), free(all), free(ids);
    return rc;
}

/* Text proposals: the draft follows the sequence's text in its own tokens,
 * drafts greedily a little beyond KMAX target tokens' worth, and the
 * target tokens its text fixes are proposed.  Failing to tokenize (bytes a
 * tokenizer refuses) proposes nothing rather than failing the step. */
static int propose_cross(draft_model *dm, const int32_t *hist, size_t n, int kmax, draft_proposal *p)
{
    p->n = 0;
    sl_err e;
    int32_t *ids = NULL;
    size_t nid = 0;
    if (draft_ids(dm, hist, n, &ids, &nid, &e) || nid == 0 || nid + DRAFT_MAX + XV_EXTRA + 1 > dm->cap) {
        free(ids);
        return 0;
    }
    int rc = sync(dm, ids, nid, &e);
    free(ids);
    if (rc) return 0;
    int32_t d[DRAFT_MAX + XV_EXTRA];
    int nd = 0, want = kmax + XV_EXTRA;
    size_t at = nid;
    while (nd < want) {
        int32_t t = sampler_argmax(dm->logits, dm->n_vocab);
        if (t < 0 || (dm->p_min > 0 && top_prob(dm->logits, dm->n_vocab, t) < dm->p_min)) break;
        d[nd++] = t;
        if (nd == want) break;
        dm->toks[at++] = t;
        if (session_eval(dm->s, &t, 1, dm->logits, false, &e)) return 0;
    }
    char *text = NULL;
    size_t len = 0;
    if (!nd || vocab_detokenize(model_vocab(dm->m), d, (size_t)nd, true, false, &text, &len, &e)) return 0;
    size_t nc = n < XV_CONTEXT ? n : XV_CONTEXT;
    fixed_tokens(dm, hist + n - nc, nc, text, len, kmax, p, &e);
    free(text);
    return 0;
}

int draft_model_propose(draft_model *dm, const int32_t *hist, size_t n, int kmax, sl_rng *rng, draft_proposal *p,
                        sl_err *err)
{
    if (dm->xvocab) return propose_cross(dm, hist, n, kmax, p);
    return propose_same(dm, hist, n, kmax, rng, p, err);
}
