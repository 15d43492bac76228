/* The recurrent-state ring (src/arch/rstate.c) against a replay of the
 * token history: a toy recurrence per layer is run through the ring's
 * slots by evaluations of random lengths, with random rewinds, checkpoints,
 * failed evaluations and a save / load; after every operation the current
 * state must equal the recurrence recomputed from scratch over the tokens
 * the sequence holds, and every position the ring claims to keep must
 * restore to exactly that. */
#include <math.h>
#include <stdint.h>

#include "arch/rstate.h"
#include "t.h"

enum { NL = 3, MAXP = 400 };
static const int64_t FLOATS[NL] = {5, 0, 7};

/* One token of the toy recurrence (depends on the whole history). */
static void step(const float *in, float *out, int64_t n, int32_t tok, int il)
{
    for (int64_t i = 0; i < n; i++) out[i] = in[i] * 0.75f + (float)(tok % 13) * 0.125f + (float)(i + il) * 0.01f;
}

static void replay(const int32_t *toks, int32_t n, int il, float *st)
{
    memset(st, 0, sizeof(float) * (size_t)FLOATS[il]);
    for (int32_t p = 0; p < n; p++) step(st, st, FLOATS[il], toks[p], il);
}

/* An evaluation of N tokens through the ring; FAIL_AT >= 0 stops there as a
 * failed one would (after some layers wrote their slots). */
static void eval(rstate *r, const int32_t *toks, int32_t n, int fail_at)
{
    int32_t pos0 = rstate_pos(r);
    rstate_begin(r, n);
    for (int il = 0; il < NL && il != fail_at; il++)
        for (int32_t t = 0; t < n; t++)
            step(rstate_at(r, il, pos0 + t), rstate_at(r, il, pos0 + t + 1), FLOATS[il], toks[pos0 + t], il);
    rstate_end(r, fail_at < 0);
}

static int matches(rstate *r, const int32_t *toks)
{
    float ref[8];
    int ok = 1;
    for (int il = 0; il < NL; il++) {
        replay(toks, rstate_pos(r), il, ref);
        ok &= memcmp(ref, rstate_current(r, il), sizeof(float) * (size_t)FLOATS[il]) == 0;
    }
    return ok;
}

static uint32_t rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void random_run(int32_t n_rollback, int32_t n_ckpt, uint32_t seed)
{
    char name[96];
    snprintf(name, sizeof name, "rstate: random evaluations and rewinds (n_rollback %d, %d checkpoints)", n_rollback,
             n_ckpt);
    t_begin(name);
    sl_err err;
    rstate *r;
    T_CHECK(rstate_create(&r, NL, FLOATS, n_rollback, n_ckpt, &err) == 0, "%s", err.msg);
    int32_t toks[MAXP];
    for (int i = 0; i < MAXP; i++) toks[i] = (int32_t)(rnd(&seed) % 1000);
    int rewinds = 0, ckpt_rewinds = 0;
    int32_t ckpt_at = -1, lo = 0, start = 0;
    for (int it = 0; it < 300 && !t_cur.failed; it++) {
        int32_t pos = rstate_pos(r);
        int op = (int)(rnd(&seed) % 10);
        if (op < 5 && pos < MAXP - 20) {
            int32_t n = 1 + (int32_t)(rnd(&seed) % (rnd(&seed) % 3 ? 3 : 17));
            if (rnd(&seed) % 4 == 0) toks[pos] = (int32_t)(rnd(&seed) % 1000); /* a new branch */
            eval(r, toks, n, -1);
            T_CHECK(rstate_pos(r) == pos + n, "position after an evaluation");
            lo = pos + n - n_rollback > pos + 1 ? pos + n - n_rollback : pos + 1, start = pos;
        } else if (op < 8) {
            /* after an evaluation from START to P: START and the positions
             * max(START + 1, P - n_rollback) .. P are kept (until a rewind
             * goes before them) */
            int32_t cand[64], nc = 0;
            if (start <= pos) cand[nc++] = start;
            for (int32_t q = lo; q <= pos && nc < 64; q++) cand[nc++] = q;
            int32_t to = nc ? cand[rnd(&seed) % (uint32_t)nc] : pos;
            T_CHECK(rstate_can_rewind(r, to), "position %d (%d back) not kept", to, pos - to);
            T_CHECK(rstate_rewind(r, to) == 0, "rewind to %d", to);
            rewinds++;
        } else if (op == 8) {
            rstate_checkpoint(r);
            ckpt_at = pos;
        } else if (ckpt_at >= 0 && ckpt_at <= pos && n_ckpt > 0) {
            T_CHECK(rstate_rewind(r, ckpt_at) == 0, "rewind to the checkpoint at %d", ckpt_at);
            ckpt_rewinds++;
        } else if (pos > 0) { /* a failed evaluation changes nothing */
            eval(r, toks, 5, (int)(rnd(&seed) % NL));
            T_CHECK(rstate_pos(r) == pos, "a failed evaluation moved the position");
            start = pos, lo = pos + 1; /* the snapshots it began to overwrite are gone */
        }
        if (ckpt_at > rstate_pos(r)) ckpt_at = -1; /* dropped by the rewind */
        T_CHECK(matches(r, toks), "iteration %d (op %d): state differs from the replay at position %d", it, op,
                rstate_pos(r));
    }
    T_CHECK(rewinds > 20 && (n_ckpt == 0 || ckpt_rewinds > 3), "exercised: %d rewinds, %d to checkpoints", rewinds,
            ckpt_rewinds);
    /* position 0 is always restorable, an unkept one is refused */
    int32_t pos = rstate_pos(r);
    if (pos > n_rollback + 2 && n_ckpt == 0) {
        T_CHECK(!rstate_can_rewind(r, pos - n_rollback - 2) || pos - n_rollback - 2 == 0, "unkept position claimed");
        T_CHECK(rstate_rewind(r, pos - n_rollback - 2) != 0 || pos - n_rollback - 2 == 0, "unkept position restored");
        T_CHECK(rstate_pos(r) == pos && matches(r, toks), "a refused rewind changed the state");
    }
    T_CHECK(rstate_rewind(r, 0) == 0 && matches(r, toks), "rewind to 0");
    T_CHECK(rstate_rewind(r, 1) != 0, "rewind forward refused");
    rstate_free(r);
    t_end();
}

static void save_load(void)
{
    t_begin("rstate: save and load round trip, mismatches refused");
    sl_err err;
    rstate *a, *b, *c;
    static const int64_t other[NL] = {5, 0, 6};
    T_CHECK(rstate_create(&a, NL, FLOATS, 2, 1, &err) == 0 && rstate_create(&b, NL, FLOATS, 0, 1, &err) == 0 &&
                rstate_create(&c, NL, other, 0, 1, &err) == 0,
            "%s", err.msg);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = i * 7 + 3;
    eval(a, toks, 9, -1);
    eval(a, toks, 4, -1);
    FILE *f = tmpfile();
    T_CHECK(rstate_write(a, rstate_pos(a), f, &err) == 0, "%s", err.msg);
    long size = ftell(f);
    rewind(f);
    int32_t pos = -1;
    T_CHECK(rstate_read(b, f, &pos, &err) == 0 && pos == 13 && rstate_pos(b) == 13, "read: %s", err.msg);
    T_CHECK(matches(b, toks), "loaded state differs");
    T_CHECK(!rstate_can_rewind(b, 12) && rstate_can_rewind(b, 0), "only the loaded position and 0 are kept");
    eval(b, toks, 3, -1);
    T_CHECK(matches(b, toks), "evaluation after a load");
    rewind(f);
    T_CHECK(rstate_read(c, f, &pos, &err) != 0 && strstr(err.msg, "layer 2"), "other geometry: %s", err.msg);
    T_CHECK(rstate_pos(c) == 0, "a refused read changed the state");
    /* a truncated file: nothing changes */
    rewind(f);
    char *buf = malloc((size_t)size);
    T_CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size, "reread");
    FILE *g = tmpfile();
    fwrite(buf, 1, (size_t)size - 4, g);
    rewind(g);
    T_CHECK(rstate_read(b, g, &pos, &err) != 0 && strstr(err.msg, "truncated"), "truncated: %s", err.msg);
    T_CHECK(rstate_pos(b) == 16 && matches(b, toks), "a truncated read changed the state");
    fclose(g);
    free(buf);
    fclose(f);
    rstate_free(a), rstate_free(b), rstate_free(c);
    t_end();
}

int main(void)
{
    random_run(0, 0, 11);
    random_run(0, 1, 12);
    random_run(1, 0, 13);
    random_run(4, 2, 14);
    random_run(8, 3, 15);
    save_load();
    return t_done();
}
