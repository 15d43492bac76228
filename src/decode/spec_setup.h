/* Speculative decoding as a user asks for it (--draft and its flags,
 * sluice_options' draft fields): the proposer (draft.h, a draft model in
 * RAM when --draft names a file) and the verifier (spec.h) for one target,
 * with the figures --stats-json and bench report.  The public API and
 * `sluice bench` both open drafting through here, so a benchmark drafts
 * exactly as a generation does. */
#ifndef SLUICE_SPEC_SETUP_H
#define SLUICE_SPEC_SETUP_H

#include <jansson.h>

#include "decode/spec.h"

typedef struct {
    const char *draft;            /* a draft GGUF path, "ngram" or "random" (NULL: off) */
    int32_t k_max, k_min;         /* --draft-max (0: adaptive), --draft-min */
    int32_t ngram_min, ngram_max; /* n-gram lookup lengths (0: defaults) */
    float p_min;                  /* --draft-p-min */
    int32_t vocab;                /* --draft-vocab: a draft model proposes ids [0, vocab) (0: auto, -1: all) */
} spec_setup_opts;

typedef struct {
    drafter *d;
    spec *sp;
    sl_model *observed; /* the target whose routes sp counts (NULL: not counted) */
    char note[512];     /* for the user: drafting across vocabularies */
} spec_setup;

/* Range checks of O's numbers (the flags' parsers check them too). */
int spec_setup_check(const spec_setup_opts *o, sl_err *err);
/* Whether O->draft names a draft model (not "ngram" or "random"). */
bool spec_setup_has_model(const spec_setup_opts *o);
/* A draft model lives in RAM: takes what it needs for a target context of
 * N_CTX tokens on THREADS threads out of the budget *MEM (0: no budget,
 * nothing taken) into *TAKEN; a budget that cannot hold it is an error. */
int spec_setup_reserve(const spec_setup_opts *o, uint64_t *mem, int32_t n_ctx, int threads, uint64_t *taken,
                       sl_err *err);
/* Opens drafting for TARGET: a draft model (with a session of N_CTX tokens
 * on POOL) when O names one, the verifier with the target's expert layout
 * and STORE (NULL: experts in RAM) for its costs, and, when OBSERVE, the
 * target's route observer to count each verification's expert union.  The
 * target's sessions must keep DRAFT_MAX positions of rollback
 * (session_opts.n_rollback).  On failure SS holds nothing. */
int spec_setup_open(spec_setup *ss, const spec_setup_opts *o, sl_model *target, sl_pool *pool, int32_t n_ctx,
                    const expert_provider *store, bool observe, sl_err *err);
void spec_setup_close(spec_setup *ss);
/* Gives the draft model the generation's sampling chain and restarts the
 * counters and acceptance draws: once before each generation. */
int spec_setup_begin(spec_setup *ss, const sl_sampler *smp, sl_err *err);
/* "ngram", "random", "model", "model+ngram", "model-xvocab+ngram". */
const char *spec_setup_mode(const spec_setup *ss);
/* The "draft" object of --stats-json for counters D (a new reference). */
json_t *spec_setup_json(const spec_setup *ss, const spec_stats *d);

#endif
