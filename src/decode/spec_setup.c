#include <stdio.h>
#include <string.h>

#include "decode/draft_model.h"
#include "decode/spec_setup.h"

int spec_setup_check(const spec_setup_opts *o, sl_err *err)
{
    if (o->k_max < 0 || o->k_max > DRAFT_MAX) return sl_errf(err, "draft_max must be in [0, %d]", DRAFT_MAX);
    if (o->k_min < 0 || o->k_min > DRAFT_MAX) return sl_errf(err, "draft_min must be in [0, %d]", DRAFT_MAX);
    if (o->k_max > 0 && o->k_min > o->k_max)
        return sl_errf(err, "draft_min (%d) is above draft_max (%d)", (int)o->k_min, (int)o->k_max);
    if (!(o->p_min >= 0 && o->p_min <= 1)) return sl_errf(err, "draft_p_min must be in [0, 1]");
    if (o->vocab < -1) return sl_errf(err, "draft_vocab must be -1 (every id), 0 (auto) or a number of ids");
    if (o->ngram_min < 0 || o->ngram_max < 0 || o->ngram_min > 64 || o->ngram_max > 64)
        return sl_errf(err, "ngram_min and ngram_max must be in [0, 64]");
    return 0;
}

bool spec_setup_has_model(const spec_setup_opts *o)
{
    return o->draft && strcmp(o->draft, "ngram") && strcmp(o->draft, "random");
}

int spec_setup_reserve(const spec_setup_opts *o, uint64_t *mem, int32_t n_ctx, int threads, uint64_t *taken,
                       sl_err *err)
{
    *taken = 0;
    if (!*mem || !spec_setup_has_model(o)) return 0;
    uint64_t r;
    sl_err e;
    if (draft_model_ram_bytes(o->draft, n_ctx, threads, &r, &e)) return sl_errf(err, "draft %s: %s", o->draft, e.msg);
    if (r >= *mem)
        return sl_errf(err, "the memory budget of %llu bytes does not even hold the draft model %s (%llu bytes)",
                       (unsigned long long)*mem, o->draft, (unsigned long long)r);
    *mem -= r, *taken = r;
    return 0;
}

static int open_model(spec_setup *ss, const spec_setup_opts *o, const sl_model *target, sl_pool *pool, int32_t n_ctx,
                      sl_err *err)
{
    draft_model *dm;
    if (draft_model_open(&dm, o->draft, target, pool, n_ctx, o->p_min, o->vocab, true, err)) return -1;
    drafter_set_model(ss->d, dm);
    if (draft_model_xvocab(dm))
        snprintf(ss->note, sizeof ss->note,
                 "draft %s has another vocabulary (%s): drafting across vocabularies (text re-tokenized)", o->draft,
                 draft_model_xvocab(dm));
    return 0;
}

int spec_setup_open(spec_setup *ss, const spec_setup_opts *o, sl_model *target, sl_pool *pool, int32_t n_ctx,
                    const expert_provider *store, bool observe, sl_err *err)
{
    *ss = (spec_setup){0};
    if (spec_setup_check(o, err)) return -1;
    int32_t nv = model_n_vocab(target);
    /* random proposals reach past the vocabulary: garbage must change nothing */
    drafter_opts d = {.ngram_min = o->ngram_min, .ngram_max = o->ngram_max, .seed = 1234,
                      .random_range = nv + 16, .p_min = o->p_min};
    draft_kind kind = !strcmp(o->draft, "ngram") ? DRAFT_NGRAM : !strcmp(o->draft, "random") ? DRAFT_RANDOM : DRAFT_MODEL;
    if (drafter_create(&ss->d, kind, &d, err)) return -1;
    spec_opts so = {.k_max = o->k_max, .k_min = o->k_min};
    if ((kind == DRAFT_MODEL && open_model(ss, o, target, pool, n_ctx, err)) ||
        spec_create(&ss->sp, ss->d, &so, nv, err)) {
        spec_setup_close(ss);
        return -1;
    }
    spec_set_layout(ss->sp, model_expert_layout(target));
    spec_set_store(ss->sp, store);
    if (observe) {
        route_observer ob = {.route = spec_observe_route, .ctx = ss->sp};
        model_set_route_observer(target, &ob);
        ss->observed = target;
    }
    return 0;
}

void spec_setup_close(spec_setup *ss)
{
    if (ss->observed) model_set_route_observer(ss->observed, NULL);
    spec_free(ss->sp);
    drafter_free(ss->d);
    *ss = (spec_setup){0};
}

int spec_setup_begin(spec_setup *ss, const sl_sampler *smp, sl_err *err)
{
    spec_reset_stats(ss->sp);
    spec_begin(ss->sp, sampler_get_params(smp)->seed);
    draft_model *dm = drafter_model(ss->d);
    return dm ? draft_model_set_sampling(dm, sampler_get_params(smp), err) : 0;
}

const char *spec_setup_mode(const spec_setup *ss)
{
    draft_model *dm = drafter_model(ss->d);
    return dm && draft_model_xvocab(dm) ? "model-xvocab+ngram" : drafter_name(ss->d);
}

static json_t *depth_json(const spec_stats *d)
{
    json_t *a = json_array();
    int top = DRAFT_MAX;
    while (top > 0 && !d->depth_tried[top - 1]) top--;
    for (int i = 0; i < top; i++)
        json_array_append_new(a, json_real(d->depth_tried[i] ? (double)d->depth_accepted[i] / (double)d->depth_tried[i] : 0));
    return a;
}

static json_t *k_hist_json(const spec_stats *d)
{
    json_t *a = json_array();
    int top = DRAFT_MAX + 1;
    while (top > 1 && !d->k_hist[top - 1]) top--;
    for (int i = 0; i < top; i++) json_array_append_new(a, json_integer(d->k_hist[i]));
    return a;
}

json_t *spec_setup_json(const spec_setup *ss, const spec_stats *d)
{
    json_t *o = json_object();
    json_object_set_new(o, "mode", json_string(spec_setup_mode(ss)));
    json_object_set_new(o, "proposed", json_integer(d->proposed));
    json_object_set_new(o, "accepted", json_integer(d->accepted));
    json_object_set_new(o, "acceptance", json_real(d->proposed ? (double)d->accepted / (double)d->proposed : 0));
    json_object_set_new(o, "acceptance_by_depth", depth_json(d));
    json_object_set_new(o, "k_hist", k_hist_json(d));
    json_object_set_new(o, "steps", json_integer(d->steps));
    json_object_set_new(o, "plain_steps", json_integer(d->plain_steps));
    json_object_set_new(o, "shadow_tried", json_integer(d->shadow_tried));
    json_object_set_new(o, "shadow_kept", json_integer(d->shadow_kept));
    /* each verification yields its accepted drafts plus the target's own token */
    int64_t toks = d->accepted + d->steps;
    json_object_set_new(o, "union_expert_bytes_per_accepted_token",
                        ss->observed ? json_real((double)d->union_expert_bytes / (double)(toks ? toks : 1)) : json_null());
    json_object_set_new(o, "draft_s", json_real(d->draft_s));
    json_object_set_new(o, "verify_s", json_real(d->verify_s));
    /* the cost model's quality: its prediction of each verification it
     * could price against that pass's measured time */
    json_object_set_new(o, "verify_predicted_s", json_real(d->verify_predicted_s));
    json_object_set_new(o, "verify_priced_s", json_real(d->verify_priced_s));
    json_object_set_new(o, "verify_cost_mae_s",
                        json_real(d->priced_steps ? d->verify_abs_err_s / (double)d->priced_steps : 0));
    return o;
}
