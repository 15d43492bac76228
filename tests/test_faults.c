/* I/O fault injection (util/fault.h, the test build): every read, write,
 * fsync, rename and io_uring completion of an operation is failed in turn,
 * one run per N, with each kind of fault.
 *
 *  - EINTR, EAGAIN and short transfers are retried: the run succeeds and its
 *    output is bit-identical to the run without a fault.
 *  - EIO and ENOSPC are an error naming the file (and, for reads and
 *    writes, the offset), never a wrong result, a crash or a damaged file:
 *    a file being replaced is afterwards either the old or the new version,
 *    checked by reading it back.
 *
 * The reference for "identical" is the same program's run without a fault
 * (what is checked is that a fault changes nothing), and for "old or new"
 * the two versions' bytes. */
#include <errno.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/state.h"
#include "experts/heat.h"
#include "util/fault.h"
#include "util/fileio.h"
#include "t.h"

static const char *MODEL = "models/tinymoe-q8_0.gguf";
static const int32_t PROMPT[] = {464, 1468, 582, 3114, 379, 262, 5417, 290, 531};
enum { N_PROMPT = sizeof PROMPT / sizeof *PROMPT, STEPS = 3 };

typedef struct {
    const char *name;
    int code; /* errno, or SL_FAULT_SHORT */
    int transient;
} kind;

static const kind KINDS[] = {{"EINTR", EINTR, 1},  {"EAGAIN", EAGAIN, 1}, {"short", SL_FAULT_SHORT, 1},
                             {"EIO", EIO, 0},      {"ENOSPC", ENOSPC, 0}};
enum { N_KINDS = sizeof KINDS / sizeof *KINDS };

/* Most values of N tried per operation and kind: all of them up to this,
 * else this many spread evenly over the range, the first and last
 * included.  SLUICE_FAULT_EVERY=1 tries every N (bench/faults_all.sh: many
 * minutes); the default keeps `make test` short. */
static long max_n(void)
{
    const char *v = getenv("SLUICE_FAULT_EVERY");
    return v && atoi(v) > 0 ? 1L << 30 : 12;
}

static long nth_of(long i, long count)
{
    long m = max_n();
    if (count <= m) return i + 1;
    return 1 + i * (count - 1) / (m - 1);
}

static long tries_of(long count) { return count < max_n() ? count : max_n(); }

/* ---- a model run: open, prompt, a few greedy steps ---- */

typedef struct {
    uint64_t mem;
    store_io io;
} run_cfg;

/* Logits of the last prompt position and of STEPS greedy steps. */
static int run_model(const run_cfg *c, float **out, size_t *n, sl_err *err)
{
    sl_engine e;
    engine_opts o = {.model_path = MODEL, .n_ctx = 64, .threads = 2, .mem = c->mem, .io = c->io,
                     .io_set = c->mem > 0, .no_heat = true, .prefetch = SL_PREFETCH_OFF, .prefetch_set = true};
    *out = NULL;
    if (engine_open(&e, &o, err)) return -1;
    int32_t nv = model_n_vocab(e.model);
    *n = (size_t)(STEPS + 1) * (size_t)nv;
    float *l = *out = calloc(*n, sizeof *l);
    int rc = l ? session_eval(e.session, PROMPT, N_PROMPT, l, false, err) : sl_errf(err, "out of memory");
    for (int s = 0; s < STEPS && !rc; s++) {
        const float *last = l + (size_t)s * (size_t)nv;
        int32_t best = 0;
        for (int32_t v = 1; v < nv; v++) best = last[v] > last[best] ? v : best;
        rc = session_eval(e.session, &best, 1, l + (size_t)(s + 1) * (size_t)nv, false, err);
    }
    engine_close(&e);
    if (rc) free(*out), *out = NULL;
    return rc;
}

/* Whether a failure message names a file of the model and an offset (or,
 * for fsync / rename, just the file). */
static int names_place(const char *msg, const char *file, int with_offset)
{
    return strstr(msg, file) && (!with_offset || strstr(msg, "offset") || strstr(msg, "byte"));
}

static void model_faults(const char *title, const run_cfg *c, sl_fault_op op)
{
    t_begin(title);
    sl_err err;
    float *ref;
    size_t n;
    sl_fault_arm(op, 0, 0);
    if (run_model(c, &ref, &n, &err)) {
        T_CHECK(0, "the run without a fault failed: %s", err.msg);
        t_end();
        return;
    }
    long count = sl_fault_count(op);
    T_CHECK(count > 0, "the run made no %s", sl_fault_op_name(op));
    long runs = 0, fired = 0;
    for (int k = 0; k < N_KINDS; k++)
        for (long i = 0; i < tries_of(count); i++) {
            long nth = nth_of(i, count);
            sl_fault_arm(op, nth, KINDS[k].code);
            float *got;
            size_t m;
            int rc = run_model(c, &got, &m, &err);
            int hit = sl_fault_fired();
            sl_fault_arm(op, 0, 0);
            runs++, fired += hit;
            if (!hit || KINDS[k].transient) {
                T_CHECK(rc == 0, "%s %s #%ld of %ld: %s", KINDS[k].name, sl_fault_op_name(op), nth, count, err.msg);
                T_CHECK(rc || (m == n && !memcmp(got, ref, n * sizeof *ref)), "%s %s #%ld: logits differ",
                        KINDS[k].name, sl_fault_op_name(op), nth);
            } else {
                T_CHECK(rc != 0, "%s %s #%ld of %ld went unnoticed", KINDS[k].name, sl_fault_op_name(op), nth, count);
                T_CHECK(rc == 0 || (names_place(err.msg, "tinymoe-q8_0.gguf", 1) && strstr(err.msg, strerror(KINDS[k].code))),
                        "%s %s #%ld: message \"%s\"", KINDS[k].name, sl_fault_op_name(op), nth, err.msg);
            }
            free(got);
        }
    printf("# %s: %ld %s ops in a run, %ld faulted runs, %ld faults fired\n", title, count, sl_fault_op_name(op),
           runs, fired);
    T_CHECK(fired > 0, "no fault fired");
    free(ref);
    t_end();
}

/* ---- files replaced atomically: heat and saved contexts ---- */

static char dir[] = "/var/tmp/sluice-faults-XXXXXX";

/* No temporary file left behind in the directory. */
static int no_leftovers(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
    return system(cmd) != 0;
}

/* A file replaced by an operation: SETUP writes the old version (no fault
 * armed), RUN replaces it with the new one, VERSION reads it back: 1 old,
 * 2 new, 0 neither (damaged, absent, unreadable). */
typedef struct {
    int (*setup)(const char *path, sl_err *err);
    int (*run)(const char *path, sl_err *err);
    int (*version)(const char *path);
} replaced_file;

static void replace_faults(const char *title, const char *file, const replaced_file *f)
{
    t_begin(title);
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sl_err err;
    unlink(path);
    long runs = 0, fired = 0;
    static const sl_fault_op OPS[] = {SL_FAULT_READ, SL_FAULT_WRITE, SL_FAULT_FSYNC, SL_FAULT_RENAME};
    for (size_t o = 0; o < sizeof OPS / sizeof *OPS; o++) {
        const char *what = sl_fault_op_name(OPS[o]);
        int rc = f->setup(path, &err);
        sl_fault_arm(OPS[o], 0, 0);
        rc = rc || f->run(path, &err);
        long count = sl_fault_count(OPS[o]);
        T_CHECK(rc == 0 && f->version(path) == 2, "unfaulted: %s", rc ? err.msg : "not the new version");
        for (int k = 0; !rc && k < N_KINDS; k++)
            for (long i = 0; i < tries_of(count); i++) {
                long nth = nth_of(i, count);
                if (f->setup(path, &err)) {
                    T_CHECK(0, "setup: %s", err.msg);
                    break;
                }
                sl_fault_arm(OPS[o], nth, KINDS[k].code);
                int r = f->run(path, &err);
                int hit = sl_fault_fired();
                sl_fault_arm(OPS[o], 0, 0);
                runs++, fired += hit;
                int v = f->version(path);
                if (!hit || KINDS[k].transient) {
                    T_CHECK(r == 0, "%s %s #%ld of %ld: %s", KINDS[k].name, what, nth, count, err.msg);
                    T_CHECK(r || v == 2, "%s %s #%ld: not the new version (%d)", KINDS[k].name, what, nth, v);
                } else {
                    T_CHECK(r != 0, "%s %s #%ld of %ld went unnoticed", KINDS[k].name, what, nth, count);
                    /* a read of the model (the saved context's identity) names the model */
                    int named = strstr(err.msg, file) || (OPS[o] == SL_FAULT_READ && strstr(err.msg, "tinymoe"));
                    int placed = OPS[o] > SL_FAULT_WRITE || strstr(err.msg, "offset") || strstr(err.msg, "byte");
                    T_CHECK(r == 0 || (named && placed && strstr(err.msg, strerror(KINDS[k].code))),
                            "%s %s #%ld: message \"%s\"", KINDS[k].name, what, nth, err.msg);
                    T_CHECK(v == 1 || v == 2, "%s %s #%ld: the file is neither version", KINDS[k].name, what, nth);
                }
                T_CHECK(no_leftovers(), "%s %s #%ld: a temporary file was left behind", KINDS[k].name, what, nth);
            }
    }
    printf("# %s: %ld faulted runs, %ld faults fired\n", title, runs, fired);
    T_CHECK(fired > 0, "no fault fired");
    unlink(path);
    t_end();
}

static const uint8_t HEAT_ID[HEAT_ID_BYTES] = {1, 2, 3};

static int heat_table_of(heat_table *h, uint64_t passes, sl_err *err)
{
    if (heat_table_init(h, HEAT_ID, 6, 32, err)) return -1;
    h->passes = passes, h->weight = (double)passes;
    for (int i = 0; i < 6 * 32; i++) h->count[i] = (float)(i % 7);
    return 0;
}

/* Old: 10 passes; the merge adds one. */
static int heat_setup(const char *path, sl_err *err)
{
    heat_table h;
    if (heat_table_of(&h, 10, err)) return -1;
    int rc = heat_write(&h, path, err);
    heat_table_free(&h);
    return rc;
}

static int heat_run(const char *path, sl_err *err)
{
    heat_table d;
    if (heat_table_of(&d, 1, err)) return -1;
    int rc = heat_save_merge(path, &d, 0, err);
    heat_table_free(&d);
    return rc == 0 ? 0 : -1;
}

static int heat_version(const char *path)
{
    heat_table h;
    sl_err w;
    if (heat_load(&h, path, HEAT_ID, 6, 32, &w) != HEAT_LOADED) return 0;
    int v = h.passes == 10 ? 1 : h.passes == 11 && h.count[3] == 6.0f ? 2 : 0;
    heat_table_free(&h);
    return v;
}

/* ---- saved contexts (the server's --kv-dir files) ---- */

static sl_engine ctx_engine;

/* Version V: the prompt with its first token moved by V. */
static int state_save_version(const char *path, int v, sl_err *err)
{
    int32_t toks[N_PROMPT];
    memcpy(toks, PROMPT, sizeof toks);
    toks[0] += v;
    if (session_rewind(ctx_engine.session, 0, err)) return -1;
    float *l = malloc((size_t)model_n_vocab(ctx_engine.model) * sizeof *l);
    int rc = !l || session_eval(ctx_engine.session, toks, N_PROMPT, l, false, err) ||
             engine_state_save(&ctx_engine, toks, N_PROMPT, path, err);
    free(l);
    return rc ? -1 : 0;
}

static int state_setup(const char *path, sl_err *err) { return state_save_version(path, 1, err); }
static int state_run(const char *path, sl_err *err) { return state_save_version(path, 2, err); }

/* The version a saved context loads as (checksum verified). */
static int state_version(const char *path)
{
    int32_t *toks = NULL, n_eval;
    size_t n;
    sl_err err;
    int v = 0;
    if (engine_state_load(&ctx_engine, path, &toks, &n, &n_eval, &err) == 0 && n == N_PROMPT)
        v = toks[0] == PROMPT[0] + 1 ? 1 : toks[0] == PROMPT[0] + 2 ? 2 : 0;
    free(toks);
    return v;
}

/* Loading a saved context: transient faults restore the same state, EIO
 * is an error naming the file and the session is left empty. */
static void state_load_faults(void)
{
    t_begin("faults: loading a saved context: every read, transient ones retried, EIO an error naming file and byte");
    char path[128];
    snprintf(path, sizeof path, "%s/ctx.slkv", dir);
    sl_err err;
    int rc = state_setup(path, &err);
    T_CHECK(rc == 0, "%s", err.msg);
    int32_t nv = rc ? 0 : model_n_vocab(ctx_engine.model), next = 11;
    float *ref = malloc((size_t)(nv ? nv : 1) * sizeof *ref), *got = malloc((size_t)(nv ? nv : 1) * sizeof *got);
    int32_t *toks = NULL, n_eval;
    size_t n;
    sl_fault_arm(SL_FAULT_READ, 0, 0);
    rc = rc || engine_state_load(&ctx_engine, path, &toks, &n, &n_eval, &err) ||
         session_eval(ctx_engine.session, &next, 1, ref, false, &err);
    free(toks), toks = NULL;
    long count = sl_fault_count(SL_FAULT_READ), fired = 0;
    T_CHECK(rc == 0, "unfaulted: %s", err.msg);
    for (int k = 0; !rc && k < N_KINDS; k++)
        for (long i = 0; i < tries_of(count); i++) {
            long nth = nth_of(i, count);
            session_rewind(ctx_engine.session, 0, &err);
            sl_fault_arm(SL_FAULT_READ, nth, KINDS[k].code);
            int r = engine_state_load(&ctx_engine, path, &toks, &n, &n_eval, &err);
            int hit = sl_fault_fired();
            sl_fault_arm(SL_FAULT_READ, 0, 0);
            fired += hit;
            free(toks), toks = NULL;
            if (!hit || KINDS[k].transient) {
                T_CHECK(r == 0, "%s read #%ld of %ld: %s", KINDS[k].name, nth, count, err.msg);
                r = r || session_eval(ctx_engine.session, &next, 1, got, false, &err);
                T_CHECK(r || !memcmp(got, ref, (size_t)nv * sizeof *ref), "%s read #%ld: the next logits differ",
                        KINDS[k].name, nth);
            } else {
                T_CHECK(r != 0, "%s read #%ld went unnoticed", KINDS[k].name, nth);
                T_CHECK(r == 0 || (names_place(err.msg, "tinymoe", 1) || names_place(err.msg, "ctx.slkv", 1)),
                        "%s read #%ld: message \"%s\"", KINDS[k].name, nth, err.msg);
                T_CHECK(r == 0 || session_pos(ctx_engine.session) == 0, "%s read #%ld: the session kept %d tokens",
                        KINDS[k].name, nth, (int)session_pos(ctx_engine.session));
            }
        }
    printf("# loading a saved context: %ld reads, %ld faults fired\n", count, fired);
    unlink(path);
    free(ref), free(got);
    t_end();
}

int main(void)
{
    if (access(MODEL, R_OK) != 0) {
        t_skip("faults", "models/tinymoe-q8_0.gguf not found");
        return t_done();
    }
    if (!mkdtemp(dir)) {
        printf("not ok faults: mkdtemp failed\n");
        return 1;
    }
    run_cfg ram = {0}, uring = {.mem = 64ull << 20, .io = STORE_IO_URING},
            pread_ = {.mem = 64ull << 20, .io = STORE_IO_PREAD};
    model_faults("faults: model open and run in RAM, every read", &ram, SL_FAULT_READ);
    model_faults("faults: streaming decode (uring), every completion", &uring, SL_FAULT_URING);
    model_faults("faults: streaming decode (pread), every read", &pread_, SL_FAULT_READ);
    static const replaced_file heat = {heat_setup, heat_run, heat_version},
                               ctx = {state_setup, state_run, state_version};
    replace_faults("faults: heat-file merge, every read / write / fsync / rename: old or new, never damaged",
                   "m.heat", &heat);
    engine_opts o = {.model_path = MODEL, .n_ctx = 64, .threads = 2, .no_heat = true};
    sl_err err;
    if (engine_open(&ctx_engine, &o, &err) == 0) {
        replace_faults("faults: saving a context (--kv-dir), every read / write / fsync / rename: old or new",
                       "ctx.slkv", &ctx);
        state_load_faults();
        engine_close(&ctx_engine);
    } else {
        printf("not ok faults: saved contexts: %s\n", err.msg);
    }
    rmdir(dir);
    return t_done();
}
