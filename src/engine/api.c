/* The public API (include/sluice.h): the engine (engine.h) for placement
 * and figures, a gen_seq for the context and the generation loop of
 * decode/generate.h.  The sluice commands are built on it, so embedders get
 * exactly what `sluice run` and `sluice chat` do. */
#include "sluice.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "chat/chat.h"
#include "decode/generate.h"
#include "decode/grammar.h"
#include "decode/json_schema.h"
#include "decode/spec_setup.h"
#include "engine/api_int.h"
#include "chat/openai.h"
#include "experts/pack.h"
#include "engine/engine.h"
#include "engine/state.h"
#include "util/clock.h"

enum { DEFAULT_CTX_CAP = 4096, MAX_PROBS = 64, PIECE_CAP = 512 };

struct sluice {
    sl_engine eng;
    gen_seq seq;
    double load_s;
    char *name;             /* general.name or the file's base name */
    /* chat template, parsed on first use */
    chat_tmpl *tmpl;
    const char *const *stops;
    size_t n_stops;
    char *tmpl_src;         /* sluice_options.chat_template, copied */
    /* the last generation */
    gen_stats last;
    gen_stop last_stop;
    uint32_t last_seed;
    char notes[2048];
    /* the vocabulary as grammars see it, built on first use */
    gram_tokens gtok;
    char *gt_bytes;
    uint32_t *gt_off;
    uint8_t *gt_eog;
    /* speculative decoding (sluice_options.draft), NULL when off */
    spec_setup ds;
    spec_stats last_spec;
    char draft_note[768];
};

struct sluice_sampler {
    sluice *s;
    sl_sampler *smp;
};

/* ------------------------------------------------------------- errors */

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int ok(char *err, size_t cap)
{
    if (err && cap) err[0] = 0;
    return 0;
}

void sluice_free(void *p) { free(p); }

/* --------------------------------------------------------------- open */

sluice_options sluice_options_default(void) { return (sluice_options){.flash_attn = -1}; }

/* The KV type and flash attention pair as the session names it. */
static int kv_mode(const sluice_options *o, sl_kv_mode *out, char *err, size_t cap)
{
    const char *t = o->kv_type ? o->kv_type : "f16";
    if (!strcmp(t, "f16")) *out = o->flash_attn == 0 ? SL_KV_F16 : SL_KV_F16_FLASH;
    else if (!strcmp(t, "f32")) {
        if (o->flash_attn == 1) return fail(err, cap, "flash attention needs an f16 KV cache (kv_type f32 given)");
        *out = SL_KV_F32;
    } else return fail(err, cap, "kv_type must be f16 or f32, not '%s'", t);
    return 0;
}

static spec_setup_opts draft_options(const sluice_options *o)
{
    return (spec_setup_opts){.draft = o->draft, .k_max = o->draft_max, .k_min = o->draft_min,
                             .ngram_min = o->ngram_min, .ngram_max = o->ngram_max, .p_min = o->draft_p_min,
                             .vocab = o->draft_vocab};
}

static int engine_options(const sluice_options *o, const sluice_open_extra *x, engine_opts *eo, uint64_t *x_reserve,
                          char *err, size_t cap)
{
    if (!o || !o->model) return fail(err, cap, "no model given (sluice_options.model is NULL)");
    *eo = (engine_opts){.model_path = o->model, .n_ctx = o->n_ctx, .threads = o->threads, .n_batch = o->n_batch,
                        .mem = o->mem_bytes, .pin = o->pin_bytes, .heat_file = o->heat_file,
                        .no_heat = o->no_heat, .pack = o->pack};
    eo->n_ctx_cap = x && x->n_ctx_cap > 0 ? x->n_ctx_cap : DEFAULT_CTX_CAP;
    if (x) eo->verify = x->verify, eo->fault = x->fault, eo->fault_ctx = x->fault_ctx;
    if (x) eo->policy = (cache_policy)x->policy, eo->policy_set = x->policy_set, eo->trace_out = x->trace_out;
    if (x && (x->prefetch_admit < 0 || x->prefetch_admit >= PF_ADMIT_N_MODES))
        return fail(err, cap, "prefetch_admit must be in [0, %d)", PF_ADMIT_N_MODES);
    if (x) eo->prefetch_admit = (pf_admit_mode)x->prefetch_admit;
    if (o->n_ctx < 0) eo->n_ctx = 0;
    if (o->io) {
        int io = store_io_parse(o->io);
        if (io < 0) return fail(err, cap, "io must be uring, pread or mmap, not '%s'", o->io);
        eo->io = (store_io)io, eo->io_set = true;
    }
    if (o->prefetch) {
        int m = sl_prefetch_mode_parse(o->prefetch);
        if (m < 0) return fail(err, cap, "prefetch must be auto, next or off, not '%s'", o->prefetch);
        eo->prefetch = (sl_prefetch_mode)m, eo->prefetch_set = true;
    }
    if (o->flash_attn < -1 || o->flash_attn > 1) return fail(err, cap, "flash_attn must be -1, 0 or 1");
    if (o->draft) {
        spec_setup_opts so = draft_options(o);
        sl_err e;
        if (spec_setup_check(&so, &e)) return fail(err, cap, "%s", e.msg);
        eo->n_rollback = DRAFT_MAX; /* a verification keeps any prefix of its K + 1 positions */
        int32_t c = eo->n_ctx > 0 ? eo->n_ctx : eo->n_ctx_cap;
        uint64_t r = 0;
        if (spec_setup_reserve(&so, &eo->mem, c, o->threads > 0 ? o->threads : cpu_physical_cores(), &r, &e))
            return fail(err, cap, "%s", e.msg);
        if (x_reserve) *x_reserve = r;
    }
    return kv_mode(o, &eo->kv_mode, err, cap);
}

static char *model_name(const sl_model *m, const char *path)
{
    const gguf_str *v;
    sl_err e;
    if (gguf_get_str(model_gguf(m), "general.name", &v, &e) == 1 && v->len) return strndup(v->s, v->len);
    const char *b = strrchr(path, '/');
    return strdup(b ? b + 1 : path);
}

/* The drafter and verifier of sluice_options.draft: "ngram", "random"
 * (uniform ids, some past the vocabulary: tests and the economics' worst
 * case) or a draft model's path. */
static void add_line(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *fmt_gib(uint64_t b, char *buf, size_t cap);

static int open_draft(sluice *s, const sluice_options *o, uint64_t draft_reserve, char *err, size_t cap)
{
    spec_setup_opts so = draft_options(o);
    sl_err e;
    /* with a routing trace on, the trace has the route observer: no union figure then */
    if (spec_setup_open(&s->ds, &so, s->eng.model, s->eng.pool, session_n_ctx(s->eng.session), s->eng.store,
                        !s->eng.trace, &e))
        return fail(err, cap, "%s", e.msg);
    if (draft_reserve) {
        char b[32];
        add_line(s->draft_note, sizeof s->draft_note, "draft model: %s of the memory budget set aside for it",
                 fmt_gib(draft_reserve, b, sizeof b));
    }
    if (s->ds.note[0]) add_line(s->draft_note, sizeof s->draft_note, "%s", s->ds.note);
    return 0;
}

int sluice_open_ex(sluice **out, const sluice_options *o, const sluice_open_extra *x, char *err, size_t cap)
{
    *out = NULL;
    engine_opts eo;
    uint64_t reserve = 0;
    if (engine_options(o, x, &eo, &reserve, err, cap)) return -1;
    sluice *s = calloc(1, sizeof *s);
    if (!s) return fail(err, cap, "out of memory");
    double t0 = sl_now();
    sl_err e;
    if (engine_open(&s->eng, &eo, &e)) {
        free(s);
        return fail(err, cap, "%s", e.msg);
    }
    s->load_s = sl_now() - t0;
    s->name = model_name(s->eng.model, o->model);
    if (o->chat_template) s->tmpl_src = strdup(o->chat_template);
    if (!s->name || (o->chat_template && !s->tmpl_src)) {
        sluice_close(s);
        return fail(err, cap, "out of memory");
    }
    if (seq_init(&s->seq, s->eng.session, model_n_vocab(s->eng.model), &e)) {
        sluice_close(s);
        return fail(err, cap, "%s", e.msg);
    }
    if (o->draft && open_draft(s, o, reserve, err, cap)) {
        sluice_close(s);
        return -1;
    }
    s->last.load_s = s->load_s;
    *out = s;
    return ok(err, cap);
}

int sluice_open(sluice **out, const sluice_options *o, char *err, size_t cap)
{
    return sluice_open_ex(out, o, NULL, err, cap);
}

void sluice_close(sluice *s)
{
    if (!s) return;
    seq_free(&s->seq);
    spec_setup_close(&s->ds);
    engine_close(&s->eng);
    chat_tmpl_free(s->tmpl);
    free(s->gt_bytes);
    free(s->gt_off);
    free(s->gt_eog);
    free(s->tmpl_src);
    free(s->name);
    free(s);
}

static void add_line(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_line(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    if (n + 2 >= cap) return;
    if (n) buf[n++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

static const char *fmt_gib(uint64_t b, char *buf, size_t cap)
{
    if (b >= 1ull << 30) snprintf(buf, cap, "%.2f GiB", (double)b / (1 << 30));
    else if (b >= 1ull << 20) snprintf(buf, cap, "%.1f MiB", (double)b / (1 << 20));
    else snprintf(buf, cap, "%.1f KiB", (double)b / (1 << 10)); /* a budget of 1K is not "0.0 MiB" */
    return buf;
}

const char *sluice_notes(const sluice *cs, int verbose)
{
    sluice *s = (sluice *)cs; /* the text is built in the handle's buffer */
    const sl_engine *e = &s->eng;
    snprintf(s->notes, sizeof s->notes, "%s", e->note);
    if (s->draft_note[0]) add_line(s->notes, sizeof s->notes, "%s", s->draft_note);
    if (!verbose || !e->streaming || e->io == STORE_IO_MMAP) return s->notes;
    char a[32], b[32], c[32], d[32], f[32];
    const mem_plan *p = &e->plan;
    add_line(s->notes, sizeof s->notes,
             "streaming experts (%s): budget %s = spine %s + KV %s + scratch/runtime %s + cache %s (%lld experts of %lld)",
             store_io_name(e->io), fmt_gib(p->total, a, 32), fmt_gib(p->spine, b, 32), fmt_gib(p->kv, c, 32),
             fmt_gib(p->scratch + p->runtime + p->meta, d, 32), fmt_gib(p->cache, f, 32), (long long)p->slots,
             (long long)p->experts);
    if (e->info[0]) add_line(s->notes, sizeof s->notes, "heat: %s", e->info);
    return s->notes;
}

const char *sluice_model_name(const sluice *s) { return s->name; }
const char *sluice_model_arch(const sluice *s) { return model_arch(s->eng.model); }
int32_t sluice_n_vocab(const sluice *s) { return model_n_vocab(s->eng.model); }
int32_t sluice_n_ctx(const sluice *s) { return session_n_ctx(s->eng.session); }
int32_t sluice_n_ctx_train(const sluice *s) { return model_n_ctx_train(s->eng.model); }

/* ------------------------------------------------------------- tokens */

static const sl_vocab *vocab(const sluice *s) { return model_vocab(s->eng.model); }

int sluice_tokenize(sluice *s, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
                    size_t *n_ids, char *err, size_t cap)
{
    *ids = NULL, *n_ids = 0;
    sl_err e;
    if (vocab_tokenize(vocab(s), text, len, add_bos, parse_special, ids, n_ids, &e)) return fail(err, cap, "%s", e.msg);
    return ok(err, cap);
}

int sluice_detokenize(sluice *s, const int32_t *ids, size_t n, int special, char **text, size_t *len, char *err,
                      size_t cap)
{
    *text = NULL;
    int32_t nv = sluice_n_vocab(s);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv)
            return fail(err, cap, "token id %d at index %zu is outside the vocabulary [0, %d)", ids[i], i, nv);
    sl_err e;
    size_t l = 0;
    if (vocab_detokenize(vocab(s), ids, n, false, special, text, &l, &e)) return fail(err, cap, "%s", e.msg);
    if (len) *len = l;
    return ok(err, cap);
}

int sluice_token_is_eog(const sluice *s, int32_t id) { return vocab_is_eog(vocab(s), id); }

/* --------------------------------------------------------------- chat */

/* ChatML, what llama.cpp falls back to for a model without a template. */
static const char CHATML[] =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}";

/* The template's source: sluice_options.chat_template (Jinja text, "chatml",
 * or the name of a template the GGUF carries), else the model's own, else
 * ChatML. */
static int template_text(sluice *s, const char **text, size_t *len, char *err, size_t cap)
{
    const gguf_file *g = model_gguf(s->eng.model);
    sl_err e;
    const char *t = s->tmpl_src;
    if (t && (strstr(t, "{{") || strstr(t, "{%"))) {
        *text = t, *len = strlen(t);
        return 0;
    }
    if (t && !strcmp(t, "chatml")) {
        *text = CHATML, *len = strlen(CHATML);
        return 0;
    }
    if (t) {
        if (chat_template_for_model(g, t, text, len, &e))
            return fail(err, cap, "chat template '%s' is neither Jinja text, \"chatml\" nor a template the model names: %s",
                        t, e.msg);
        return 0;
    }
    const gguf_str *v;
    int has = gguf_get_str(g, "tokenizer.chat_template", &v, &e);
    if (has < 0) return fail(err, cap, "%s", e.msg);
    *text = has ? v->s : CHATML;
    *len = has ? (size_t)v->len : strlen(CHATML);
    return 0;
}

static int chat_open(sluice *s, char *err, size_t cap)
{
    if (s->tmpl) return 0;
    const char *text;
    size_t len;
    if (template_text(s, &text, &len, err, cap)) return -1;
    sl_err e;
    if (chat_tmpl_parse(&s->tmpl, text, len, &e)) return fail(err, cap, "chat template: %s", e.msg);
    s->stops = chat_stop_strings(chat_detect_family(text, len));
    for (s->n_stops = 0; s->stops[s->n_stops]; s->n_stops++) {}
    return 0;
}

static const char *token_text(const sluice *s, int32_t id) { return id >= 0 ? vocab_token_text(vocab(s), id) : NULL; }

int sluice_chat_render(sluice *s, const sluice_message *msgs, size_t n, int add_generation_prompt, char **text,
                       char *err, size_t cap)
{
    *text = NULL;
    if (chat_open(s, err, cap)) return -1;
    chat_msg *m = malloc((n ? n : 1) * sizeof *m);
    if (!m) return fail(err, cap, "out of memory");
    for (size_t i = 0; i < n; i++) m[i] = (chat_msg){msgs[i].role, msgs[i].content};
    chat_req r = {.msgs = m, .n_msgs = n, .add_generation_prompt = add_generation_prompt,
                  .bos_token = token_text(s, vocab_bos(vocab(s))), .eos_token = token_text(s, vocab_eos(vocab(s)))};
    sl_err e;
    int rc = chat_tmpl_render(s->tmpl, &r, text, NULL, &e);
    free(m);
    return rc ? fail(err, cap, "chat template: %s", e.msg) : ok(err, cap);
}

const char *const *sluice_chat_stop_strings(const sluice *cs, size_t *n)
{
    sluice *s = (sluice *)cs; /* parses the template on first use */
    if (chat_open(s, NULL, 0)) {
        *n = 0;
        return NULL;
    }
    *n = s->n_stops;
    return s->stops;
}

/* ----------------------------------------------------------- sampling */

sluice_sampling sluice_sampling_default(void)
{
    sampler_params d = sampler_defaults();
    return (sluice_sampling){.temp = d.temp, .top_k = d.top_k, .top_p = d.top_p, .min_p = d.min_p,
                             .repeat_penalty = d.repeat_penalty, .repeat_last_n = d.repeat_last_n,
                             .presence_penalty = d.presence_penalty, .frequency_penalty = d.frequency_penalty,
                             .seed = SLUICE_SEED_RANDOM, .n_predict = 128, .logprobs = 1};
}

static uint32_t os_seed(void)
{
    uint32_t v;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint32_t)time(NULL) ^ (uint32_t)getpid() * 2654435761u;
    return v == SLUICE_SEED_RANDOM ? 0 : v;
}

/* Each token's bytes as the output shows them (control tokens: none), for
 * grammars; ids past the tokenizer's table (padded embeddings) have none. */
static const gram_tokens *grammar_tokens(sluice *s)
{
    if (s->gtok.n) return &s->gtok;
    int32_t n = sluice_n_vocab(s);
    size_t cap = (size_t)n * 8 + 64, len = 0;
    s->gt_off = malloc(((size_t)n + 1) * sizeof *s->gt_off);
    s->gt_eog = malloc((size_t)n);
    s->gt_bytes = malloc(cap);
    for (int32_t id = 0; id < n && s->gt_off && s->gt_eog && s->gt_bytes; id++) {
        char piece[PIECE_CAP];
        int k = vocab_token_to_piece(vocab(s), id, false, piece, sizeof piece);
        if (k < 0 || k > (int)sizeof piece) k = 0; /* longer than any real token: never allowed */
        if (len + (size_t)k > cap) {
            char *b = realloc(s->gt_bytes, cap = 2 * cap + (size_t)k);
            if (!b) free(s->gt_bytes);
            s->gt_bytes = b;
            if (!b) break;
        }
        memcpy(s->gt_bytes + len, piece, (size_t)k);
        s->gt_off[id] = (uint32_t)len;
        len += (size_t)k;
        s->gt_eog[id] = vocab_is_eog(vocab(s), id);
    }
    if (!s->gt_off || !s->gt_eog || !s->gt_bytes) {
        free(s->gt_off), free(s->gt_eog), free(s->gt_bytes);
        s->gt_off = NULL, s->gt_eog = NULL, s->gt_bytes = NULL;
        return NULL;
    }
    s->gt_off[n] = (uint32_t)len;
    s->gtok = (gram_tokens){n, s->gt_bytes, s->gt_off, s->gt_eog};
    return &s->gtok;
}

/* The grammar of SP (GBNF text or a JSON schema) onto sampler SMP. */
static int attach_grammar(sluice *s, const sluice_sampling *sp, sl_sampler *smp, char *err, size_t cap)
{
    if (sp->grammar && sp->json_schema) return fail(err, cap, "give a grammar or a JSON schema, not both");
    sl_err e;
    char *from_schema = NULL;
    if (sp->json_schema && json_schema_to_gbnf(sp->json_schema, strlen(sp->json_schema), &from_schema, &e))
        return fail(err, cap, "%s", e.msg);
    const char *text = from_schema ? from_schema : sp->grammar;
    sl_grammar *g;
    int bad = grammar_parse(&g, text, strlen(text), &e);
    free(from_schema);
    if (bad) return fail(err, cap, "%s%s", sp->json_schema ? "json_schema: the converted grammar: " : "", e.msg);
    gram_state *m;
    int rc = gstate_new(&m, g, &e);
    grammar_free(g); /* the state holds it */
    if (rc) return fail(err, cap, "%s", e.msg);
    const gram_tokens *t = grammar_tokens(s);
    if (!t) return gstate_free(m), fail(err, cap, "out of memory for the grammar's token table");
    if (sampler_set_grammar(smp, m, t, &e)) return fail(err, cap, "%s", e.msg);
    return 0;
}

static int make_sampler(sluice *s, const sluice_sampling *sp, sl_sampler **out, char *err, size_t cap)
{
    if (sp->repeat_last_n < -1) return fail(err, cap, "repeat_last_n must be -1 (the context), 0 (off) or more");
    if (sp->n_probs < 0 || sp->n_probs > MAX_PROBS) return fail(err, cap, "n_probs must be in [0, %d]", MAX_PROBS);
    sampler_params p = {.temp = sp->temp, .top_k = sp->top_k, .top_p = sp->top_p, .min_p = sp->min_p,
                        .seed = sp->seed == SLUICE_SEED_RANDOM ? os_seed() : sp->seed,
                        .repeat_penalty = sp->repeat_penalty, .frequency_penalty = sp->frequency_penalty,
                        .presence_penalty = sp->presence_penalty,
                        .repeat_last_n = sp->repeat_last_n < 0 ? sluice_n_ctx(s) : sp->repeat_last_n};
    sl_err e;
    if (sampler_create(out, &p, sluice_n_vocab(s), &e)) return fail(err, cap, "%s", e.msg);
    if ((sp->grammar || sp->json_schema) && attach_grammar(s, sp, *out, err, cap)) {
        sampler_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int sluice_sampler_new(sluice *s, const sluice_sampling *sp, sluice_sampler **out, char *err, size_t cap)
{
    *out = NULL;
    sluice_sampler *w = calloc(1, sizeof *w);
    if (!w) return fail(err, cap, "out of memory");
    w->s = s;
    if (make_sampler(s, sp, &w->smp, err, cap)) return free(w), -1;
    *out = w;
    return ok(err, cap);
}

void sluice_sampler_free(sluice_sampler *w)
{
    if (!w) return;
    sampler_free(w->smp);
    free(w);
}

int32_t sluice_sampler_sample(sluice_sampler *w, const float *logits) { return sampler_sample(w->smp, logits); }
void sluice_sampler_accept(sluice_sampler *w, int32_t id) { sampler_accept(w->smp, id); }

/* ------------------------------------------------------------ generate */

void sluice_result_free(sluice_result *r)
{
    if (!r) return;
    free(r->text);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

typedef struct {
    sluice *s;
    const sluice_callbacks *cb;
    sluice_text_fn text_fn;
    void *text_user;
} relay;

static int relay_text(void *ud, const char *text, size_t len)
{
    relay *r = ud;
    if (r->text_fn) return r->text_fn(r->text_user, text, len);
    return r->cb && r->cb->on_text ? r->cb->on_text(r->cb->user, text, len) : 0;
}

static int relay_prompt(void *ud, const float *logits, int32_t n)
{
    relay *r = ud;
    engine_mark_prompt_end(&r->s->eng);
    return r->cb && r->cb->on_prompt ? r->cb->on_prompt(r->cb->user, logits, n) : 0;
}

/* Once per generated token, i.e. once per forward pass: the engine's
 * periodic bookkeeping (heat saves), then the caller's view of the token. */
static int relay_token(void *ud, const gen_token *t)
{
    relay *r = ud;
    engine_tick(&r->s->eng);
    if (!r->cb || !r->cb->on_token) return 0;
    char piece[PIECE_CAP];
    int n = vocab_token_to_piece(vocab(r->s), t->id, true, piece, sizeof piece);
    sluice_logprob top[MAX_PROBS];
    for (int32_t i = 0; i < t->n_top && i < MAX_PROBS; i++) top[i] = (sluice_logprob){t->top[i].id, t->top[i].logprob};
    sluice_token tok = {.id = t->id, .piece = piece, .piece_len = n < 0 ? 0 : (size_t)n < sizeof piece ? (size_t)n : sizeof piece,
                        .logprob = t->logprob, .top = top, .n_top = t->n_top};
    return r->cb->on_token(r->cb->user, &tok);
}

static sluice_stop public_stop(gen_stop g)
{
    switch (g) {
    case GEN_STOP_EOG: return SLUICE_STOP_EOG;
    case GEN_STOP_STRING: return SLUICE_STOP_STRING;
    case GEN_STOP_CTX: return SLUICE_STOP_CTX;
    case GEN_STOP_CALLER: return SLUICE_STOP_CALLER;
    default: return SLUICE_STOP_LIMIT;
    }
}

const char *sluice_stop_name(sluice_stop st)
{
    static const gen_stop map[] = {GEN_RUNNING, GEN_STOP_EOG, GEN_STOP_LIMIT, GEN_STOP_STRING, GEN_STOP_CTX,
                                   GEN_STOP_CALLER};
    return (unsigned)st < sizeof map / sizeof map[0] ? gen_stop_name(map[st]) : "?";
}

/* Streaming figures into the generation's stats (engine counters). */
static void stream_figures(const sl_engine *e, gen_stats *st)
{
    engine_stream_stats ss;
    engine_stream_stats_get(e, &ss);
    st->streaming = ss.streaming;
    st->expert_bytes_read = ss.expert_bytes_read;
    int64_t toks = st->prompt_tokens + st->decode_steps;
    st->expert_bytes_per_token = toks ? (double)ss.expert_bytes_read / (double)toks : 0;
    st->distinct_experts = ss.distinct_experts;
    st->cache_hits = ss.cache_hits;
    st->cache_misses = ss.cache_misses;
    st->read_retries = ss.read_retries;
    st->io_wait_s = ss.io_wait_s;
    double busy = st->prompt_s + st->decode_s;
    st->compute_s = busy > ss.io_wait_s ? busy - ss.io_wait_s : 0;
    st->read_gbps = ss.read_gbps;
    st->prefill_read_amplification = ss.prefill_read_amplification;
    st->demand_misses = ss.demand_misses;
    st->prefetch_reads = ss.prefetch_reads;
    st->prefetch_used = ss.prefetch_used;
    st->prefetch_wasted_bytes = ss.prefetch_wasted_bytes;
    st->prefetch_cancelled = ss.prefetch_cancelled;
    st->prefetch_skipped = ss.prefetch_skipped;
    st->demand_reads = ss.demand_reads;
    st->demand_behind_prefetch = ss.demand_behind_prefetch;
    st->expert_bytes_loaded = ss.bytes_loaded;
    st->optimum_bytes = ss.optimum_bytes;
    st->optimum_ratio = ss.optimum_bytes ? (double)ss.bytes_loaded / (double)ss.optimum_bytes : 0;
    st->disk_busy_fraction = busy > 0 ? ss.read_busy_s / busy : 0;
}

int sluice_write_trace(sluice *s, char *err, size_t cap)
{
    sl_err e;
    if (engine_write_trace(&s->eng, &e)) return fail(err, cap, "%s", e.msg);
    return ok(err, cap);
}

/* Generation after the sequence already holds the prompt (seq_reuse or
 * appended tokens).  TEXT_FN, if set, receives the text instead of
 * cb->on_text. */
static int run_generation(sluice *s, const sluice_sampling *sp, const sluice_callbacks *cb, sluice_text_fn text_fn,
                          void *text_user, int64_t cached, sluice_result *res, char *err, size_t cap)
{
    sl_sampler *smp;
    if (make_sampler(s, sp, &smp, err, cap)) return -1;
    s->last_seed = sampler_get_params(smp)->seed;
    sampler_accept_prompt(smp, s->seq.toks, s->seq.n);
    relay r = {s, cb, text_fn, text_user};
    gen_opts go = {.n_predict = sp->n_predict, .ignore_eog = sp->ignore_eos, .stops = sp->stop,
                   .n_stops = sp->stop ? sp->n_stop : 0, .logprobs = cb && cb->on_token && (sp->logprobs || sp->n_probs > 0),
                   .n_probs = sp->n_probs};
    gen_callbacks gc = {&r, relay_prompt, relay_token, relay_text, NULL};
    gen_result g = {0};
    sl_err e;
    engine_mark_prompt_start(&s->eng);
    int rc = 0;
    if (s->ds.sp) rc = spec_setup_begin(&s->ds, smp, &e);
    if (rc == 0) rc = generate(s->eng.model, &s->seq, smp, &go, &gc, s->ds.sp, &g, &e);
    if (s->ds.sp) s->last_spec = *spec_get_stats(s->ds.sp);
    sampler_free(smp);
    g.stats.load_s = s->load_s;
    g.stats.cached_tokens = cached;
    stream_figures(&s->eng, &g.stats);
    s->last = g.stats;
    s->last_stop = g.stop;
    if (rc) {
        gen_result_free(&g);
        return fail(err, cap, "%s", e.msg);
    }
    if (res) {
        *res = (sluice_result){.text = g.text, .len = g.len, .ids = g.ids, .n_ids = g.n_ids, .stop = public_stop(g.stop),
                               .cached_tokens = (int32_t)cached};
        g.text = NULL, g.ids = NULL;
    }
    gen_result_free(&g);
    return ok(err, cap);
}

int sluice_generate_tokens(sluice *s, const int32_t *prompt, size_t n, const sluice_sampling *sp,
                           const sluice_callbacks *cb, sluice_result *res, char *err, size_t cap)
{
    if (res) memset(res, 0, sizeof *res);
    if (!n) return fail(err, cap, "the prompt has no tokens");
    for (size_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= sluice_n_vocab(s))
            return fail(err, cap, "prompt token %d at index %zu is outside the vocabulary [0, %d)", prompt[i], i,
                        sluice_n_vocab(s));
    sl_err e;
    int64_t cached = seq_reuse(&s->seq, prompt, n, &e);
    if (cached < 0) return fail(err, cap, "%s", e.msg);
    return run_generation(s, sp, cb, NULL, NULL, cached, res, err, cap);
}

/* PROMPT's tokens as sluice_generate appends them: BOS first into an empty
 * context (as the vocabulary asks), unless the text already starts with
 * the BOS token's text, as a rendered chat template may. */
static int prompt_tokens(sluice *s, const char *prompt, int32_t **ids, size_t *n, char *err, size_t cap)
{
    const char *bos = token_text(s, vocab_bos(vocab(s)));
    bool first = s->seq.n == 0, has_bos = bos && *bos && !strncmp(prompt, bos, strlen(bos));
    sl_err e;
    if (vocab_tokenize(vocab(s), prompt, strlen(prompt), first && !has_bos, true, ids, n, &e))
        return fail(err, cap, "%s", e.msg);
    return 0;
}

int sluice_generate(sluice *s, const char *prompt, const sluice_sampling *sp, sluice_text_fn on_text, void *user,
                    char **out, char *err, size_t cap)
{
    if (out) *out = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    if (prompt_tokens(s, prompt ? prompt : "", &ids, &n, err, cap)) return -1;
    if (!n && !s->seq.n) return free(ids), fail(err, cap, "the prompt has no tokens and the context is empty");
    size_t keep = s->seq.n;
    sl_err e;
    int rc = seq_push(&s->seq, ids, n, &e);
    free(ids);
    if (rc) return fail(err, cap, "the prompt does not fit: %s", e.msg);
    sluice_result r;
    rc = run_generation(s, sp, NULL, on_text, user, (int64_t)session_pos(s->eng.session), &r, err, cap);
    if (rc) {
        /* the prompt was never evaluated: take it back out */
        if (session_pos(s->eng.session) <= (int32_t)keep) seq_rewind(&s->seq, keep, &e);
        return -1;
    }
    if (out) *out = r.text, r.text = NULL;
    sluice_result_free(&r);
    return 0;
}

/* ----------------------------------------------------- token-level steps */

const int32_t *sluice_tokens(const sluice *s, size_t *n)
{
    *n = s->seq.n;
    return s->seq.toks;
}

int sluice_eval(sluice *s, const int32_t *ids, size_t n, float *logits, char *err, size_t cap)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= sluice_n_vocab(s))
            return fail(err, cap, "token id %d at index %zu is outside the vocabulary [0, %d)", ids[i], i,
                        sluice_n_vocab(s));
    size_t keep = s->seq.n;
    sl_err e;
    if (seq_push(&s->seq, ids, n, &e)) return fail(err, cap, "%s", e.msg);
    if (!s->seq.n) return fail(err, cap, "nothing to evaluate: the context is empty");
    engine_mark_prompt_start(&s->eng);
    if (seq_eval(&s->seq, &e)) {
        s->seq.n = keep; /* the session kept its position: so does the context */
        return fail(err, cap, "%s", e.msg);
    }
    engine_mark_prompt_end(&s->eng);
    engine_tick(&s->eng);
    if (logits && !s->seq.logits_ok) return fail(err, cap, "no logits: the context was rewound since the last evaluation");
    if (logits) memcpy(logits, s->seq.logits, (size_t)sluice_n_vocab(s) * sizeof *logits);
    return ok(err, cap);
}

int sluice_rewind(sluice *s, int32_t pos, char *err, size_t cap)
{
    sl_err e;
    if (pos < 0) return fail(err, cap, "cannot rewind to position %d", (int)pos);
    if (seq_rewind(&s->seq, (size_t)pos, &e)) return fail(err, cap, "%s", e.msg);
    return ok(err, cap);
}

void sluice_reset(sluice *s)
{
    sl_err e;
    seq_rewind(&s->seq, 0, &e); /* position 0 is always restorable */
}

/* -------------------------------------------------------------- figures */

void sluice_get_stats(const sluice *s, sluice_stats *out)
{
    const gen_stats *g = &s->last;
    engine_stream_stats ss;
    engine_stream_stats_get(&s->eng, &ss);
    sl_prefetch_stats ps;
    session_prefetch_stats(s->eng.session, &ps);
    uint64_t lookups = ss.cache_hits + ss.cache_misses;
    *out = (sluice_stats){.prompt_tokens = g->prompt_tokens, .generated_tokens = g->generated_tokens,
                          .cached_tokens = g->cached_tokens, .load_s = s->load_s, .prompt_s = g->prompt_s,
                          .decode_s = g->decode_s, .prompt_tps = g->prompt_tps, .decode_tps = g->decode_tps,
                          .ttft_s = g->ttft_s, .streaming = ss.streaming, .expert_bytes_read = ss.expert_bytes_read,
                          .cache_hits = ss.cache_hits, .cache_misses = ss.cache_misses,
                          .cache_hit_rate = lookups ? (double)ss.cache_hits / (double)lookups : 0,
                          .prefetch_recall = ps.mode == SL_PREFETCH_OFF ? 0 : ps.recall, .io_wait_s = ss.io_wait_s,
                          .draft_proposed = s->last_spec.proposed, .draft_accepted = s->last_spec.accepted,
                          .peak_rss_bytes = stats_peak_rss()};
}

/* One layer of the "prefetch" object. */
static json_t *prefetch_layer_json(const sl_prefetch_layer *l)
{
    json_t *o = json_object(), *src = json_object();
    json_object_set_new(o, "layer", json_integer(l->layer));
    json_object_set_new(o, "recall", json_real(l->recall));
    json_object_set_new(o, "precision", json_real(l->precision));
    json_object_set_new(o, "steps", json_integer((json_int_t)l->steps));
    json_object_set_new(o, "hinted_steps", json_integer((json_int_t)l->hinted_steps));
    /* each predictor's own recall (computed on every step, hinted or not) */
    for (int c = 0; c < SL_PRED_COUNT; c++)
        json_object_set_new(src, sl_pred_source_name(c), l->src_recall[c] < 0 ? json_null() : json_real(l->src_recall[c]));
    json_object_set_new(o, "predictor_recall", src);
    json_object_set_new(o, "auto_choice", json_string(sl_pred_source_name(l->choice)));
    return o;
}

/* Expert prediction figures (docs/PREFETCH.md); nothing when it is off. */
static void prefetch_json(const sluice *s, json_t *obj)
{
    sl_prefetch_stats ps;
    session_prefetch_stats(s->eng.session, &ps);
    if (ps.mode == SL_PREFETCH_OFF) return;
    engine_stream_stats ss;
    engine_stream_stats_get(&s->eng, &ss);
    json_t *o = json_object(), *layers = json_array();
    json_object_set_new(o, "mode", json_string(sl_prefetch_mode_name(ps.mode)));
    json_object_set_new(o, "steps", json_integer((json_int_t)ps.steps));
    json_object_set_new(o, "recall", json_real(ps.recall));
    json_object_set_new(o, "precision", json_real(ps.precision));
    json_object_set_new(o, "used", json_integer((json_int_t)ss.prefetch_used));
    json_object_set_new(o, "wasted_bytes", json_integer((json_int_t)ss.prefetch_wasted_bytes));
    for (int i = 0; i < ps.n_layers; i++) json_array_append_new(layers, prefetch_layer_json(&ps.layers[i]));
    json_object_set_new(o, "per_layer", layers);
    json_object_set_new(obj, "prefetch", o);
}

/* Speculative decoding figures of the last generation (spec.h). */
static void draft_json(const sluice *s, json_t *obj)
{
    if (s->ds.sp) json_object_set_new(obj, "draft", spec_setup_json(&s->ds, &s->last_spec));
}

/* Per-drive figures of a multi-drive pack (docs/PACK.md): bytes, requests,
 * busy share of the evaluation time, measured rate, replicated share. */
static void drives_json(const sluice *s, json_t *obj)
{
    if (!s->eng.store || !s->eng.opts.pack) return;
    const expert_source *src = expert_store_source(s->eng.store);
    if (!src) return;
    pack_source_stats ps;
    source_pack_stats(src, &ps);
    double t = s->last.prompt_s + s->last.decode_s;
    uint64_t total = 0;
    for (int d = 0; d < ps.n_drives; d++) total += ps.bytes[d];
    json_t *arr = json_array();
    for (int d = 0; d < ps.n_drives; d++) {
        json_t *o = json_object();
        json_object_set_new(o, "drive", json_integer(d));
        json_object_set_new(o, "bytes", json_integer((json_int_t)ps.bytes[d]));
        json_object_set_new(o, "requests", json_integer((json_int_t)ps.reads[d]));
        json_object_set_new(o, "share", json_real(total ? (double)ps.bytes[d] / (double)total : 0));
        json_object_set_new(o, "busy_s", json_real(ps.busy_s[d]));
        json_object_set_new(o, "busy_fraction", json_real(t > 0 ? ps.busy_s[d] / t : 0));
        json_object_set_new(o, "measured_rate", json_real(ps.rate[d]));
        json_object_set_new(o, "rate_while_busy", json_real(ps.busy_s[d] > 0 ? (double)ps.bytes[d] / ps.busy_s[d] : 0));
        json_object_set_new(o, "flexible_bytes", json_integer((json_int_t)ps.flexible_bytes[d]));
        json_object_set_new(o, "flexible_share",
                            json_real(ps.bytes[d] ? (double)ps.flexible_bytes[d] / (double)ps.bytes[d] : 0));
        json_object_set_new(o, "missing", json_boolean(ps.missing[d]));
        json_array_append_new(arr, o);
    }
    json_object_set_new(obj, "drives", arr);
}

char *sluice_stats_json(const sluice *s)
{
    json_t *o = json_object();
    if (!o || stats_to_json(&s->last, o)) return json_decref(o), NULL;
    json_object_set_new(o, "stop_reason", json_string(gen_stop_name(s->last_stop)));
    json_object_set_new(o, "seed", json_integer(s->last_seed));
    json_object_set_new(o, "io", json_string(s->eng.streaming ? store_io_name(s->eng.io) : "ram"));
    prefetch_json(s, o);
    drives_json(s, o);
    draft_json(s, o);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

/* ------------------------------------------- chat with tools, saved contexts */

int sluice_chat_render_json(sluice *s, const char *messages_json, const char *tools_json, const char *kwargs_json,
                            int add_generation_prompt, char **text, char *err, size_t cap)
{
    *text = NULL;
    if (chat_open(s, err, cap)) return -1;
    const char *src = sluice_chat_template(s);
    chat_syntax syn = chat_syntax_detect(src, strlen(src));
    chat_api_req r = {.messages_json = messages_json, .tools_json = tools_json, .kwargs_json = kwargs_json,
                      .add_generation_prompt = add_generation_prompt,
                      .bos_token = token_text(s, vocab_bos(vocab(s))), .eos_token = token_text(s, vocab_eos(vocab(s)))};
    sl_err e;
    if (chat_api_render(s->tmpl, syn, &r, text, &e)) return fail(err, cap, "chat template: %s", e.msg);
    return ok(err, cap);
}

const char *sluice_chat_template(const sluice *cs)
{
    const char *text;
    size_t len;
    return template_text((sluice *)cs, &text, &len, NULL, 0) ? NULL : text;
}

int sluice_state_save(sluice *s, const char *path, char *err, size_t cap)
{
    sl_err e;
    if (engine_state_save(&s->eng, s->seq.toks, s->seq.n, path, &e)) return fail(err, cap, "%s", e.msg);
    return ok(err, cap);
}

int sluice_state_load(sluice *s, const char *path, char *err, size_t cap)
{
    sl_err e;
    int32_t *toks, n_eval, before = session_pos(s->eng.session);
    size_t n;
    if (engine_state_load(&s->eng, path, &toks, &n, &n_eval, &e)) {
        /* a refused file left the session alone; a read failing halfway
         * emptied it, and the context with it */
        if (session_pos(s->eng.session) != before) s->seq.n = 0, s->seq.logits_ok = false;
        return fail(err, cap, "%s", e.msg);
    }
    s->seq.n = 0;
    s->seq.logits_ok = false;
    int rc = seq_push(&s->seq, toks, n, &e);
    free(toks);
    if (rc) {
        sluice_reset(s);
        return fail(err, cap, "%s", e.msg);
    }
    return ok(err, cap);
}

int sluice_state_peek(sluice *s, const char *path, int32_t **tokens, size_t *n, char *err, size_t cap)
{
    sl_err e;
    if (engine_state_peek(&s->eng, path, tokens, n, &e)) return fail(err, cap, "%s", e.msg);
    return ok(err, cap);
}
