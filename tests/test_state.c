/* Saved contexts (engine/state.h, sluice_state_save / load): a context
 * saved and restored continues bit for bit as the live one does; a damaged,
 * truncated or other-model file is refused with the session unchanged; the
 * header lists the tokens without loading. */
#include <stdio.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/state.h"
#include "t.h"

#define MODEL "models/tinymoe-q8_0.gguf"
#define OTHER "models/tinydraft-f16.gguf"

static int open_engine(sl_engine *e, const char *path)
{
    engine_opts o = {.model_path = path, .n_ctx = 128, .threads = 2, .no_heat = true};
    sl_err err;
    if (engine_open(e, &o, &err)) {
        printf("# %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void corrupt(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
    int c = fgetc(f);
    fseek(f, -1, SEEK_CUR);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to, long cut)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    fseek(a, 0, SEEK_END);
    long n = ftell(a) - cut;
    rewind(a);
    for (long i = 0; i < n; i++) fputc(fgetc(a), b);
    fclose(a), fclose(b);
}

int main(void)
{
    if (access(MODEL, R_OK)) {
        t_skip("state: save / load", MODEL " not found");
        return 0;
    }
    sl_engine e;
    t_begin("state: a restored context continues bit for bit");
    if (open_engine(&e, MODEL)) {
        T_CHECK(0, "engine_open");
        t_end();
        return t_done();
    }
    int32_t nv = model_n_vocab(e.model);
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (int32_t)((i * 7919 + 13) % nv);
    float *live = malloc((size_t)nv * sizeof *live), *back = malloc((size_t)nv * sizeof *back);
    sl_err err;
    char path[] = "/tmp/sluice-state-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    T_CHECK(session_eval(e.session, toks, 32, NULL, false, &err) == 0, "%s", err.msg);
    /* the context holds 33 tokens, 32 evaluated: the last one is pending */
    T_CHECK(engine_state_save(&e, toks, 33, path, &err) == 0, "save: %s", err.msg);
    T_CHECK(session_eval(e.session, toks + 32, 8, live, false, &err) == 0, "%s", err.msg);
    T_CHECK(session_rewind(e.session, 0, &err) == 0, "%s", err.msg);
    int32_t *got = NULL, n_eval = -1;
    size_t n = 0;
    T_CHECK(engine_state_load(&e, path, &got, &n, &n_eval, &err) == 0, "load: %s", err.msg);
    T_CHECK(n == 33 && n_eval == 32 && session_pos(e.session) == 32, "n %zu, n_eval %d, pos %d", n, (int)n_eval,
            (int)session_pos(e.session));
    T_CHECK(got && !memcmp(got, toks, 33 * sizeof *toks), "tokens differ");
    free(got);
    T_CHECK(session_eval(e.session, toks + 32, 8, back, false, &err) == 0, "%s", err.msg);
    T_CHECK(!memcmp(live, back, (size_t)nv * sizeof *live), "logits after the restored context differ");
    t_end();

    t_begin("state: peek lists the tokens from the header");
    got = NULL;
    T_CHECK(engine_state_peek(&e, path, &got, &n, &err) == 0 && n == 33 && !memcmp(got, toks, 33 * sizeof *toks),
            "peek: %s", err.msg);
    free(got);
    t_end();

    t_begin("state: damaged, truncated and foreign files are refused, the session unchanged");
    char bad[64];
    snprintf(bad, sizeof bad, "%s.bad", path);
    struct {
        long off, cut;
        const char *why;
    } cases[] = {{-100, 0, "checksum"}, {60, 0, "checksum"}, {0, 0, "magic"}, {20, 0, "another model"},
                 {-1, 0, "checksum"}, {0, 9, "size"}, {0, 1000000, "short"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        copy_file(path, bad, cases[i].cut);
        if (cases[i].off || !cases[i].cut) corrupt(bad, cases[i].off);
        int32_t pos = session_pos(e.session);
        got = NULL;
        int rc = engine_state_load(&e, bad, &got, &n, &n_eval, &err);
        T_CHECK(rc != 0, "case %zu loaded", i);
        T_CHECK(rc == 0 || strstr(err.msg, cases[i].why), "case %zu: \"%s\" does not say %s", i, err.msg, cases[i].why);
        T_CHECK(session_pos(e.session) == pos, "case %zu: the session moved", i);
        free(got);
    }
    unlink(bad);
    t_end();

    if (access(OTHER, R_OK) == 0) {
        t_begin("state: a file of another model is refused");
        sl_engine o;
        if (open_engine(&o, OTHER) == 0) {
            got = NULL;
            int rc = engine_state_load(&o, path, &got, &n, &n_eval, &err);
            T_CHECK(rc != 0 && strstr(err.msg, "another model"), "rc %d: %s", rc, err.msg);
            free(got);
            engine_close(&o);
        }
        t_end();
    }
    unlink(path);
    free(live), free(back);
    engine_close(&e);
    return t_done();
}
