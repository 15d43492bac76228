/* The public API (include/sluice.h): a thin layer over the engine and the
 * generation loop, so embedders get exactly what `sluice run` does. */
#include "sluice.h"

#include <stdlib.h>
#include <string.h>

#include "decode/generate.h"
#include "engine/engine.h"

enum { DEFAULT_CTX_CAP = 4096 };

struct sluice {
    sl_engine eng;
    gen_stats last;
};

static int fail(char *err, size_t cap, const char *msg)
{
    if (err && cap) {
        strncpy(err, msg, cap - 1);
        err[cap - 1] = 0;
    }
    return -1;
}

sluice_sampling sluice_sampling_default(void)
{
    sampler_params d = sampler_defaults();
    return (sluice_sampling){.temp = d.temp, .top_k = d.top_k, .top_p = d.top_p, .min_p = d.min_p,
                             .seed = d.seed, .n_predict = 128};
}

int sluice_open(sluice **out, const sluice_options *o, char *err, size_t cap)
{
    *out = NULL;
    engine_opts eo = {.model_path = o->model, .n_ctx = o->n_ctx, .n_ctx_cap = DEFAULT_CTX_CAP,
                      .threads = o->threads, .mem = o->mem_bytes, .pack = o->pack};
    if (o->io) {
        int io = store_io_parse(o->io);
        if (io < 0) return fail(err, cap, "io must be uring, pread or mmap");
        eo.io = (store_io)io, eo.io_set = true;
    }
    sluice *s = calloc(1, sizeof *s);
    if (!s) return fail(err, cap, "out of memory");
    sl_err e;
    if (engine_open(&s->eng, &eo, &e)) {
        free(s);
        return fail(err, cap, e.msg);
    }
    *out = s;
    return 0;
}

void sluice_close(sluice *s)
{
    if (!s) return;
    engine_close(&s->eng);
    free(s);
}

void sluice_reset(sluice *s)
{
    sl_err e;
    session_rewind(s->eng.session, 0, &e); /* position 0 is always restorable */
}

typedef struct {
    sluice *s;
    sluice_text_fn fn;
    void *user;
} relay;

static int relay_text(void *ud, const char *text, size_t len)
{
    relay *r = ud;
    return r->fn ? r->fn(r->user, text, len) : 0;
}

static int relay_prompt(void *ud, const float *logits, int32_t n)
{
    (void)logits, (void)n;
    engine_mark_prompt_end(&((relay *)ud)->s->eng);
    return 0;
}

static int relay_token(void *ud, int32_t id)
{
    (void)id;
    engine_tick(&((relay *)ud)->s->eng);
    return 0;
}

int sluice_generate(sluice *s, const char *prompt, const sluice_sampling *sp, sluice_text_fn on_text, void *user,
                    char **out, char *err, size_t cap)
{
    sl_model *m = s->eng.model;
    sl_err e;
    int32_t *ids = NULL;
    size_t n = 0;
    bool first = session_pos(s->eng.session) == 0;
    if (vocab_tokenize(model_vocab(m), prompt, strlen(prompt), first, true, &ids, &n, &e)) return fail(err, cap, e.msg);
    if (!n) return free(ids), fail(err, cap, "the prompt has no tokens");
    sampler_params p = {.temp = sp->temp, .top_k = sp->top_k, .top_p = sp->top_p, .min_p = sp->min_p, .seed = sp->seed};
    sl_sampler *smp;
    if (sampler_create(&smp, &p, model_n_vocab(m), &e)) return free(ids), fail(err, cap, e.msg);
    relay r = {s, on_text, user};
    gen_opts go = {.n_predict = sp->n_predict};
    gen_callbacks cb = {&r, relay_prompt, relay_token, relay_text};
    gen_result res;
    engine_mark_prompt_start(&s->eng);
    int rc = generate(m, s->eng.session, smp, ids, n, &go, &cb, &res, &e);
    sampler_free(smp);
    free(ids);
    if (rc) return fail(err, cap, e.msg);
    s->last = res.stats;
    if (out) *out = res.text, res.text = NULL;
    gen_result_free(&res);
    return 0;
}

void sluice_get_stats(const sluice *s, sluice_stats *out)
{
    const gen_stats *g = &s->last;
    engine_stream_stats ss;
    engine_stream_stats_get(&s->eng, &ss);
    *out = (sluice_stats){.prompt_tokens = g->prompt_tokens, .generated_tokens = g->generated_tokens,
                          .prompt_tps = g->prompt_tps, .decode_tps = g->decode_tps, .ttft_s = g->ttft_s,
                          .streaming = ss.streaming, .expert_bytes_read = ss.expert_bytes_read,
                          .cache_hits = ss.cache_hits, .cache_misses = ss.cache_misses, .io_wait_s = ss.io_wait_s};
}
