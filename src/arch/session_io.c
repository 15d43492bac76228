#include "arch/session_io.h"

#include <xxhash.h>

#include "arch/sess.h"

/* Rows of layer L that hold positions [0, n): a windowed layer's ring
 * keeps at most L->rows (slot p % rows), and saving the slots as they are
 * restores the same ring. */
static size_t rows_of(const kv_layer *L, int32_t n) { return (size_t)(n < L->rows ? n : L->rows); }
static size_t v_row(const kv_layer *L) { return L->v ? (size_t)L->c.v_row : 0; }

uint64_t session_kv_layout(const sl_session *s)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    int64_t head[4] = {2 /* version of this layout */, s->m->hp.n_layer, (int64_t)s->kv_elt, s->kv_mode};
    XXH3_64bits_update(st, head, sizeof head);
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        const kv_layer *L = &s->kv[il];
        int64_t w[6] = {L->c.kind, L->c.k_row, (int64_t)v_row(L), L->rows, L->c.window, (int64_t)L->c.state_bytes};
        /* the recurrent state's own record names its geometry */
        XXH3_64bits_update(st, w, sizeof w);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

uint64_t session_kv_size(const sl_session *s, int32_t n)
{
    uint64_t t = 0;
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        const kv_layer *L = &s->kv[il];
        t += (uint64_t)rows_of(L, n) * ((size_t)L->c.k_row + v_row(L)) * s->kv_elt;
    }
    return t;
}

int session_kv_write(const sl_session *s, int32_t n, session_put_fn put, void *ud, sl_err *err)
{
    if (n != s->pos) return sl_errf(err, "session state: %d positions asked, %d held", (int)n, (int)s->pos);
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        const kv_layer *L = &s->kv[il];
        size_t rows = rows_of(L, n);
        if ((L->k && put(ud, L->k, rows * (size_t)L->c.k_row * s->kv_elt)) ||
            (L->v && put(ud, L->v, rows * v_row(L) * s->kv_elt)))
            return sl_errf(err, "session state: write failed");
    }
    return 0;
}

int session_kv_read(sl_session *s, int32_t n, session_get_fn get, void *ud, sl_err *err)
{
    s->pos = 0;
    if (n < 0 || n > s->n_ctx)
        return sl_errf(err, "session state: %d positions do not fit a context of %d", (int)n, (int)s->n_ctx);
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        kv_layer *L = &s->kv[il];
        size_t rows = rows_of(L, n);
        if ((L->k && get(ud, L->k, rows * (size_t)L->c.k_row * s->kv_elt)) ||
            (L->v && get(ud, L->v, rows * v_row(L) * s->kv_elt)))
            return sl_errf(err, "session state: short read in layer %d", il);
    }
    s->pos = n;
    return 0;
}
