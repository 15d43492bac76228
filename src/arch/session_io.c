#include "arch/session_io.h"

#include <xxhash.h>

#include "arch/sess.h"

uint64_t session_state_layout(const sl_session *s)
{
    const hparams *hp = &s->m->hp;
    int64_t w[4 + 2 * 1024];
    size_t k = 0;
    w[k++] = 1; /* version of this layout */
    w[k++] = hp->n_layer;
    w[k++] = (int64_t)s->kv_elt;
    w[k++] = s->kv_mode;
    for (int il = 0; il < hp->n_layer && k + 2 <= sizeof w / sizeof w[0]; il++)
        w[k++] = s->kv[il].k_row, w[k++] = s->kv[il].v ? s->kv[il].v_row : 0;
    return XXH3_64bits(w, k * sizeof w[0]);
}

uint64_t session_state_size(const sl_session *s, int32_t n)
{
    uint64_t t = 0;
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        const kv_layer *L = &s->kv[il];
        t += (uint64_t)n * (uint64_t)(L->k_row + (L->v ? L->v_row : 0)) * s->kv_elt;
    }
    return t;
}

int session_state_write(const sl_session *s, int32_t n, session_put_fn put, void *ud, sl_err *err)
{
    if (n < 0 || n > s->pos) return sl_errf(err, "session state: %d positions asked, %d held", (int)n, (int)s->pos);
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        const kv_layer *L = &s->kv[il];
        if (put(ud, L->k, (size_t)n * (size_t)L->k_row * s->kv_elt)) return sl_errf(err, "session state: write failed");
        if (L->v && put(ud, L->v, (size_t)n * (size_t)L->v_row * s->kv_elt))
            return sl_errf(err, "session state: write failed");
    }
    return 0;
}

int session_state_read(sl_session *s, int32_t n, session_get_fn get, void *ud, sl_err *err)
{
    s->pos = 0;
    if (n < 0 || n > s->n_ctx)
        return sl_errf(err, "session state: %d positions do not fit a context of %d", (int)n, (int)s->n_ctx);
    for (int il = 0; il < s->m->hp.n_layer; il++) {
        kv_layer *L = &s->kv[il];
        if (get(ud, L->k, (size_t)n * (size_t)L->k_row * s->kv_elt) ||
            (L->v && get(ud, L->v, (size_t)n * (size_t)L->v_row * s->kv_elt)))
            return sl_errf(err, "session state: short read in layer %d", il);
    }
    s->pos = n;
    return 0;
}
