/* Recurrent state ring and checkpoints (see rstate.h). */
#include "arch/rstate.h"

#include <stdlib.h>
#include <string.h>

enum { NO_POS = -1 };

struct rstate {
    int32_t n_layer;
    int64_t *off, *len;   /* per layer, in floats within a state */
    size_t floats;        /* one state */
    int n_ring, n_ckpt;
    float **ring, **ckpt; /* calloc'd: a slot costs memory once written */
    int32_t *ring_pos, *ckpt_pos;
    uint64_t *ckpt_age;   /* creation order, to replace the oldest */
    uint64_t clock;
    int cur;              /* ring slot of the current position */
    int32_t pos;
    /* the evaluation in progress (rstate_begin .. rstate_end) */
    int32_t n_eval;
    int *order;           /* n_ring - 1 ring slots other than cur, oldest position first */
};

uint64_t rstate_one_bytes(int32_t n_layer, const int64_t *layer_floats)
{
    uint64_t n = 0;
    for (int32_t il = 0; il < n_layer; il++) n += (uint64_t)layer_floats[il];
    return n * sizeof(float);
}

int64_t rstate_n_states(int32_t n_rollback, int32_t n_ckpt)
{
    return (int64_t)(n_rollback > 0 ? n_rollback : 0) + 2 + (n_ckpt > 0 ? n_ckpt : 0);
}

void rstate_free(rstate *r)
{
    if (!r) return;
    for (int i = 0; r->ring && i < r->n_ring; i++) free(r->ring[i]);
    for (int i = 0; r->ckpt && i < r->n_ckpt; i++) free(r->ckpt[i]);
    free(r->ring), free(r->ckpt), free(r->ring_pos), free(r->ckpt_pos), free(r->ckpt_age);
    free(r->off), free(r->len), free(r->order);
    free(r);
}

static int alloc_slots(rstate *r)
{
    size_t nr = (size_t)r->n_ring, nc = (size_t)(r->n_ckpt ? r->n_ckpt : 1);
    r->ring = calloc(nr, sizeof *r->ring), r->ring_pos = malloc(nr * sizeof *r->ring_pos);
    r->ckpt = calloc(nc, sizeof *r->ckpt), r->ckpt_pos = malloc(nc * sizeof *r->ckpt_pos);
    r->ckpt_age = calloc(nc, sizeof *r->ckpt_age), r->order = malloc(nr * sizeof *r->order);
    if (!r->ring || !r->ring_pos || !r->ckpt || !r->ckpt_pos || !r->ckpt_age || !r->order) return -1;
    for (int i = 0; i < r->n_ring; i++) {
        r->ring[i] = calloc(r->floats, sizeof(float));
        r->ring_pos[i] = NO_POS;
        if (!r->ring[i]) return -1;
    }
    for (int i = 0; i < r->n_ckpt; i++) {
        r->ckpt[i] = calloc(r->floats, sizeof(float));
        r->ckpt_pos[i] = NO_POS;
        if (!r->ckpt[i]) return -1;
    }
    r->ring_pos[0] = 0; /* calloc: slot 0 holds the zero state of a fresh sequence */
    return 0;
}

int rstate_create(rstate **out, int32_t n_layer, const int64_t *layer_floats, int32_t n_rollback, int32_t n_ckpt,
                  sl_err *err)
{
    *out = NULL;
    if (n_rollback < 0 || n_ckpt < 0 || n_rollback > 4096 || n_ckpt > 4096)
        return sl_errf(err, "recurrent state: n_rollback %d / checkpoints %d out of range [0, 4096]", n_rollback,
                       n_ckpt);
    rstate *r = calloc(1, sizeof *r);
    if (!r) return sl_errf(err, "out of memory");
    r->n_layer = n_layer;
    r->n_ring = n_rollback + 2;
    r->n_ckpt = n_ckpt;
    r->off = calloc((size_t)n_layer, sizeof *r->off);
    r->len = calloc((size_t)n_layer, sizeof *r->len);
    if (!r->off || !r->len) goto oom;
    for (int32_t il = 0; il < n_layer; il++) {
        r->off[il] = (int64_t)r->floats;
        r->len[il] = layer_floats[il];
        r->floats += (size_t)layer_floats[il];
    }
    if (alloc_slots(r)) goto oom;
    *out = r;
    return 0;
oom:
    rstate_free(r);
    return sl_errf(err, "out of memory for %d recurrent states of %zu bytes", (int)rstate_n_states(n_rollback, n_ckpt),
                   r ? r->floats * sizeof(float) : 0);
}

int32_t rstate_pos(const rstate *r) { return r->pos; }

const float *rstate_current(const rstate *r, int il) { return r->ring[r->cur] + r->off[il]; }

/* ------------------------------------------------------------ evaluation */

void rstate_begin(rstate *r, int32_t n)
{
    /* the other ring slots, the ones holding the oldest positions (or none) first */
    int k = 0;
    for (int i = 0; i < r->n_ring; i++)
        if (i != r->cur) r->order[k++] = i;
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && r->ring_pos[r->order[b]] < r->ring_pos[r->order[b - 1]]; b--) {
            int t = r->order[b];
            r->order[b] = r->order[b - 1];
            r->order[b - 1] = t;
        }
    r->n_eval = n;
    /* slots this evaluation writes hold nothing valid until it ends */
    for (int j = 0; j < k && j < n; j++) r->ring_pos[r->order[j]] = NO_POS;
}

/* Slot of position pos0 + t: the last n_ring - 1 positions get distinct
 * slots (the newest the oldest slot); earlier ones of a long evaluation
 * cycle through the same slots, never the one of pos0, and two
 * consecutive positions share one only when the ring has a single free
 * slot (then the update is in place, which gives the same bits). */
static int slot_of(const rstate *r, int32_t t)
{
    if (t == 0) return r->cur;
    int k = r->n_ring - 1;
    return r->order[(r->n_eval - t) % k];
}

float *rstate_at(rstate *r, int il, int32_t pos)
{
    return r->ring[slot_of(r, pos - r->pos)] + r->off[il];
}

void rstate_end(rstate *r, bool ok)
{
    int32_t n = r->n_eval, k = r->n_ring - 1;
    if (ok && n > 0) {
        for (int32_t t = n > k ? n - k + 1 : 1; t <= n; t++) r->ring_pos[slot_of(r, t)] = r->pos + t;
        r->cur = slot_of(r, n);
        r->pos += n;
    }
    r->n_eval = 0;
}

/* --------------------------------------------------------------- rewind */

static int find(const int32_t *tags, int n, int32_t pos)
{
    for (int i = 0; i < n; i++)
        if (tags[i] == pos) return i;
    return -1;
}

bool rstate_can_rewind(const rstate *r, int32_t pos)
{
    if (pos < 0 || pos > r->pos) return false;
    return pos == r->pos || pos == 0 || find(r->ring_pos, r->n_ring, pos) >= 0 ||
           find(r->ckpt_pos, r->n_ckpt, pos) >= 0;
}

int rstate_rewind(rstate *r, int32_t pos)
{
    if (!rstate_can_rewind(r, pos)) return -1;
    if (pos == r->pos) return 0;
    int s = find(r->ring_pos, r->n_ring, pos), c = find(r->ckpt_pos, r->n_ckpt, pos);
    if (s >= 0) {
        r->cur = s;
    } else if (c >= 0) {
        memcpy(r->ring[r->cur], r->ckpt[c], r->floats * sizeof(float));
    } else { /* position 0: a fresh sequence */
        memset(r->ring[r->cur], 0, r->floats * sizeof(float));
    }
    r->ring_pos[r->cur] = pos;
    for (int i = 0; i < r->n_ring; i++)
        if (r->ring_pos[i] > pos) r->ring_pos[i] = NO_POS;
    for (int i = 0; i < r->n_ckpt; i++)
        if (r->ckpt_pos[i] > pos) r->ckpt_pos[i] = NO_POS;
    r->pos = pos;
    return 0;
}

void rstate_checkpoint(rstate *r)
{
    if (r->n_ckpt == 0 || r->pos == 0 || find(r->ckpt_pos, r->n_ckpt, r->pos) >= 0) return;
    int c = find(r->ckpt_pos, r->n_ckpt, NO_POS);
    if (c < 0) /* all taken: replace the oldest */
        for (int i = c = 0; i < r->n_ckpt; i++)
            if (r->ckpt_age[i] < r->ckpt_age[c]) c = i;
    memcpy(r->ckpt[c], r->ring[r->cur], r->floats * sizeof(float));
    r->ckpt_pos[c] = r->pos;
    r->ckpt_age[c] = ++r->clock;
}

/* --------------------------------------------------------- serialization */

static const char MAGIC[8] = {'S', 'L', 'R', 'S', 'T', 'A', 'T', '1'};

int rstate_write(const rstate *r, int32_t pos, FILE *f, sl_err *err)
{
    uint32_t nl = r ? (uint32_t)r->n_layer : 0;
    bool ok = fwrite(MAGIC, 1, 8, f) == 8 && fwrite(&nl, sizeof nl, 1, f) == 1 &&
              (!r || fwrite(r->len, sizeof *r->len, nl, f) == nl) && fwrite(&pos, sizeof pos, 1, f) == 1 &&
              (!r || fwrite(r->ring[r->cur], sizeof(float), r->floats, f) == r->floats);
    return ok ? 0 : sl_errf(err, "recurrent state: write failed");
}

int rstate_read(rstate *r, FILE *f, int32_t *pos, sl_err *err)
{
    char magic[8];
    uint32_t nl;
    uint32_t want = r ? (uint32_t)r->n_layer : 0;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, MAGIC, 8))
        return sl_errf(err, "recurrent state: bad magic (not a sluice recurrent state)");
    if (fread(&nl, sizeof nl, 1, f) != 1) return sl_errf(err, "recurrent state: truncated header");
    if (nl != want) return sl_errf(err, "recurrent state: %u layers, this model has %u", nl, want);
    for (uint32_t il = 0; il < nl; il++) {
        int64_t len;
        if (fread(&len, sizeof len, 1, f) != 1) return sl_errf(err, "recurrent state: truncated header");
        if (len != r->len[il])
            return sl_errf(err, "recurrent state: layer %u holds %lld floats, this model %lld", il, (long long)len,
                           (long long)r->len[il]);
    }
    int32_t p;
    if (fread(&p, sizeof p, 1, f) != 1 || p < 0) return sl_errf(err, "recurrent state: bad position");
    if (!r) {
        *pos = p;
        return 0;
    }
    /* into a spare slot first: a short read leaves the current state as it was */
    int dst = (r->cur + 1) % r->n_ring;
    r->ring_pos[dst] = NO_POS;
    if (fread(r->ring[dst], sizeof(float), r->floats, f) != r->floats)
        return sl_errf(err, "recurrent state: truncated data (expected %zu bytes)", r->floats * sizeof(float));
    for (int i = 0; i < r->n_ring; i++) r->ring_pos[i] = NO_POS;
    for (int i = 0; i < r->n_ckpt; i++) r->ckpt_pos[i] = NO_POS;
    r->cur = dst;
    r->ring_pos[dst] = p;
    r->pos = p;
    *pos = p;
    return 0;
}
