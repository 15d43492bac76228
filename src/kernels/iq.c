/* The codebook and ternary types (kq_iq.h): the scalar definition of their
 * products, in ggml's x86 float order, and their dequantisation with the
 * float operations of ggml's dequantize_row_*.
 *
 * Each superblock is first decoded to integer element values (codebook
 * coordinate x sign x the sub-block's odd scale 2s+1; IQ1: the grid value,
 * its delta kept apart; TQ: the stored trit 0..2, its -1 applied through
 * the activation block sums, as ggml does), then summed into the 8 lanes of
 * kq_iq.h. */
#include <math.h>

#include "kernels/kq_iq.h"

#define H2F fp16_to_fp32

/* Element values of one superblock: v = main part, v2 = IQ1_M delta part. */
typedef struct {
    int16_t v[QKK], v2[QKK];
    int32_t s1; /* IQ1_S: sum of scale * delta sign * activation sums (needs bsums) */
} iq_vals;

static void put8(int16_t *v, uint64_t grid, uint8_t signs, int scale)
{
    for (int j = 0; j < 8; j++) {
        int g = (int)((grid >> (8 * j)) & 0xff);
        v[j] = (int16_t)(scale * ((signs >> j) & 1 ? -g : g));
    }
}

/* IQ1 grids hold int8 values -1, 0, 1. */
static void put8s(int16_t *v, uint64_t grid, int scale)
{
    for (int j = 0; j < 8; j++) v[j] = (int16_t)(scale * (int8_t)(grid >> (8 * j)));
}

static void put4x2(int16_t *v, uint32_t g1, uint32_t g2, uint8_t signs, int scale)
{
    put8(v, (uint64_t)g1 | (uint64_t)g2 << 32, signs, scale);
}

static void vals_iq2_xxs(const uint8_t *b, iq_vals *o)
{
    const uint8_t *qs = b + 2;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t idx = kq_le32(qs + 8 * ib), ss = kq_le32(qs + 8 * ib + 4);
        int scale = 2 * (int)(ss >> 28) + 1;
        for (int l = 0; l < 4; l++)
            put8(o->v + 32 * ib + 8 * l, kq_iq2xxs_grid[(idx >> (8 * l)) & 255], kq_even_signs(ss >> (7 * l)), scale);
    }
}

static void vals_iq2_xs(const uint8_t *b, iq_vals *o)
{
    const blk_iq2_xs *x = (const void *)b;
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++) {
            uint16_t q = kq_le16(x->qs + 2 * (4 * ib + l));
            int s = l < 2 ? x->scales[ib] & 0xf : x->scales[ib] >> 4;
            put8(o->v + 32 * ib + 8 * l, kq_iq2xs_grid[q & 511], kq_even_signs(q >> 9), 2 * s + 1);
        }
}

static void vals_iq2_s(const uint8_t *b, iq_vals *o)
{
    const blk_iq2_s *x = (const void *)b;
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++) {
            int idx = x->qs[4 * ib + l] | ((x->qh[ib] << (8 - 2 * l)) & 0x300);
            int s = l < 2 ? x->scales[ib] & 0xf : x->scales[ib] >> 4;
            put8(o->v + 32 * ib + 8 * l, kq_iq2s_grid[idx], x->qs[32 + 4 * ib + l], 2 * s + 1);
        }
}

static void vals_iq3_xxs(const uint8_t *b, iq_vals *o)
{
    const blk_iq3_xxs *x = (const void *)b;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t ss = kq_le32(x->qs + 64 + 4 * ib);
        int scale = 2 * (int)(ss >> 28) + 1;
        for (int l = 0; l < 4; l++)
            put4x2(o->v + 32 * ib + 8 * l, kq_iq3xxs_grid[x->qs[8 * ib + 2 * l]], kq_iq3xxs_grid[x->qs[8 * ib + 2 * l + 1]],
                   kq_even_signs(ss >> (7 * l)), scale);
    }
}

static void vals_iq3_s(const uint8_t *b, iq_vals *o)
{
    const blk_iq3_s *x = (const void *)b;
    for (int ib = 0; ib < 8; ib++) {
        int s = ib & 1 ? x->scales[ib / 2] >> 4 : x->scales[ib / 2] & 0xf;
        for (int l = 0; l < 4; l++) {
            const uint8_t *q = x->qs + 8 * ib + 2 * l;
            uint32_t g1 = kq_iq3s_grid[q[0] | ((x->qh[ib] << (8 - 2 * l)) & 256)];
            uint32_t g2 = kq_iq3s_grid[q[1] | ((x->qh[ib] << (7 - 2 * l)) & 256)];
            put4x2(o->v + 32 * ib + 8 * l, g1, g2, x->signs[4 * ib + l], 2 * s + 1);
        }
    }
}

static void vals_iq1_s(const uint8_t *b, const blk_q8_K *y, iq_vals *o)
{
    const blk_iq1_s *x = (const void *)b;
    o->s1 = 0;
    for (int ib = 0; ib < 8; ib++) {
        uint16_t qh = kq_le16(x->qh + 2 * ib);
        int scale = 2 * ((qh >> 12) & 7) + 1;
        for (int l = 0; l < 4; l++)
            put8s(o->v + 32 * ib + 8 * l, kq_iq1s_grid[x->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], scale);
        o->s1 += scale * (qh & 0x8000 ? -1 : 1) * (y->bsums[2 * ib] + y->bsums[2 * ib + 1]);
    }
}

static void vals_iq1_m(const uint8_t *b, iq_vals *o)
{
    const blk_iq1_m *x = (const void *)b;
    for (int ib = 0; ib < 8; ib++) {
        uint16_t sc = kq_le16(x->scales + 2 * (ib / 2));
        const uint8_t *qs = x->qs + 4 * ib, *qh = x->qh + 2 * ib;
        for (int l = 0; l < 4; l++) {
            int h = qh[l / 2] >> (4 * (l & 1)); /* grid bits 8-10 in bits 0-2, delta sign in bit 3 */
            int s = (sc >> (6 * (ib & 1) + 3 * (l / 2))) & 7;
            int16_t *v = o->v + 32 * ib + 8 * l, *v2 = o->v2 + 32 * ib + 8 * l;
            put8s(v, kq_iq1s_grid[qs[l] | ((h & 7) << 8)], 2 * s + 1);
            for (int j = 0; j < 8; j++) v2[j] = (int16_t)((h & 8 ? -1 : 1) * (2 * s + 1));
        }
    }
}

static void vals_tq1_0(const uint8_t *b, iq_vals *o)
{
    const blk_tq1_0 *x = (const void *)b;
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) o->v[32 * n + m] = (int16_t)kq_trit(x->qs[m], n);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) o->v[160 + 16 * n + m] = (int16_t)kq_trit(x->qs[32 + m], n);
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < 4; j++) o->v[240 + 4 * n + j] = (int16_t)kq_trit(x->qh[j], n);
}

static void vals_tq2_0(const uint8_t *b, iq_vals *o)
{
    const blk_tq2_0 *x = (const void *)b;
    for (int c = 0; c < 2; c++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) o->v[128 * c + 32 * l + m] = (int16_t)((x->qs[32 * c + m] >> (2 * l)) & 3);
}

static float block_d(uint32_t type, const uint8_t *b)
{
    switch (type) {
    case GGML_TYPE_IQ1_M: return H2F(kq_iq1m_d(b + 48));
    case GGML_TYPE_TQ1_0: return H2F(kq_le16(b + 52));
    case GGML_TYPE_TQ2_0: return H2F(kq_le16(b + 64));
    default: return H2F(kq_le16(b));
    }
}

static void lanes(const int16_t *v, const int8_t *q, int32_t *L)
{
    for (int k = 0; k < 8; k++) L[k] = 0;
    for (int e = 0; e < QKK; e++) L[(e & 31) >> 2] += v[e] * q[e];
}

float kq_dot_iq(uint32_t type, const void *w, const void *a, int64_t n)
{
    const uint8_t *x = w;
    const blk_q8_K *y = a;
    size_t bs = ggml_type_get(type)->type_size;
    float acc[8] = {0}, acc2[8] = {0}, acc1 = 0.0f;
    iq_vals o;
    for (int64_t i = 0; i < n / QKK; i++, x += bs, y++) {
        switch (type) {
        case GGML_TYPE_IQ2_XXS: vals_iq2_xxs(x, &o); break;
        case GGML_TYPE_IQ2_XS: vals_iq2_xs(x, &o); break;
        case GGML_TYPE_IQ2_S: vals_iq2_s(x, &o); break;
        case GGML_TYPE_IQ3_XXS: vals_iq3_xxs(x, &o); break;
        case GGML_TYPE_IQ3_S: vals_iq3_s(x, &o); break;
        case GGML_TYPE_IQ1_S: vals_iq1_s(x, y, &o); break;
        case GGML_TYPE_IQ1_M: vals_iq1_m(x, &o); break;
        case GGML_TYPE_TQ1_0: vals_tq1_0(x, &o); break;
        default: vals_tq2_0(x, &o); break;
        }
        int32_t L[8];
        lanes(o.v, y->qs, L);
        if (type == GGML_TYPE_TQ1_0 || type == GGML_TYPE_TQ2_0) /* value = trit - 1 */
            for (int k = 0; k < 8; k++) L[k] -= y->bsums[2 * k] + y->bsums[2 * k + 1];
        float d = block_d(type, x) * y->d;
        for (int k = 0; k < 8; k++) acc[k] = fmaf(d, (float)L[k], acc[k]);
        if (type == GGML_TYPE_IQ1_M) {
            lanes(o.v2, y->qs, L);
            for (int k = 0; k < 8; k++) acc2[k] = fmaf(d, (float)L[k], acc2[k]);
        }
        if (type == GGML_TYPE_IQ1_S) acc1 = fmaf((float)o.s1, d, acc1);
    }
    return kq_iq_result(type, acc, acc2, acc1);
}

/* ---- dequantisation (ggml-quants.c float operations, in order) ---- */

static void dq_grid8(float *y, float db, uint64_t grid, uint8_t signs)
{
    for (int j = 0; j < 8; j++) y[j] = db * (float)((grid >> (8 * j)) & 0xff) * ((signs >> j) & 1 ? -1.f : 1.f);
}

static void dq_iq2(uint32_t type, const uint8_t *b, float *y)
{
    float d = H2F(kq_le16(b));
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++, y += 8) {
            uint64_t grid;
            uint8_t signs;
            int s;
            if (type == GGML_TYPE_IQ2_XXS) {
                uint32_t idx = kq_le32(b + 2 + 8 * ib), ss = kq_le32(b + 6 + 8 * ib);
                grid = kq_iq2xxs_grid[(idx >> (8 * l)) & 255], signs = kq_even_signs(ss >> (7 * l)), s = (int)(ss >> 28);
            } else if (type == GGML_TYPE_IQ2_XS) {
                const blk_iq2_xs *x = (const void *)b;
                uint16_t q = kq_le16(x->qs + 2 * (4 * ib + l));
                grid = kq_iq2xs_grid[q & 511], signs = kq_even_signs(q >> 9);
                s = l < 2 ? x->scales[ib] & 0xf : x->scales[ib] >> 4;
            } else {
                const blk_iq2_s *x = (const void *)b;
                grid = kq_iq2s_grid[x->qs[4 * ib + l] | ((x->qh[ib] << (8 - 2 * l)) & 0x300)];
                signs = x->qs[32 + 4 * ib + l];
                s = l < 2 ? x->scales[ib] & 0xf : x->scales[ib] >> 4;
            }
            float db = d * (0.5f + (float)s) * 0.25f;
            dq_grid8(y, db, grid, signs);
        }
}

static void dq_iq3_xxs(const uint8_t *b, float *y)
{
    const blk_iq3_xxs *x = (const void *)b;
    float d = H2F(x->d);
    for (int ib = 0; ib < 8; ib++) {
        uint32_t ss = kq_le32(x->qs + 64 + 4 * ib);
        float db = d * (0.5f + (float)(ss >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++, y += 8)
            dq_grid8(y, db, (uint64_t)kq_iq3xxs_grid[x->qs[8 * ib + 2 * l]] | (uint64_t)kq_iq3xxs_grid[x->qs[8 * ib + 2 * l + 1]] << 32,
                     kq_even_signs(ss >> (7 * l)));
    }
}

static void dq_iq3_s(const uint8_t *b, float *y)
{
    const blk_iq3_s *x = (const void *)b;
    float d = H2F(x->d);
    for (int ib = 0; ib < 8; ib++) {
        int s = ib & 1 ? x->scales[ib / 2] >> 4 : x->scales[ib / 2] & 0xf;
        float db = d * (float)(1 + 2 * s);
        for (int l = 0; l < 4; l++, y += 8) {
            const uint8_t *q = x->qs + 8 * ib + 2 * l;
            uint64_t g1 = kq_iq3s_grid[q[0] | ((x->qh[ib] << (8 - 2 * l)) & 256)];
            uint64_t g2 = kq_iq3s_grid[q[1] | ((x->qh[ib] << (7 - 2 * l)) & 256)];
            dq_grid8(y, db, g1 | g2 << 32, x->signs[4 * ib + l]);
        }
    }
}

static void dq_iq1_grid(float *y, float dl, uint64_t grid, float delta)
{
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)(grid >> (8 * j)) + delta);
}

static void dq_iq1_s(const uint8_t *b, float *y)
{
    const blk_iq1_s *x = (const void *)b;
    float d = H2F(x->d);
    for (int ib = 0; ib < 8; ib++) {
        uint16_t qh = kq_le16(x->qh + 2 * ib);
        float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        float delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
        for (int l = 0; l < 4; l++, y += 8)
            dq_iq1_grid(y, dl, kq_iq1s_grid[x->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], delta);
    }
}

static void dq_iq1_m(const uint8_t *b, float *y)
{
    const blk_iq1_m *x = (const void *)b;
    float d = H2F(kq_iq1m_d(x->scales));
    for (int ib = 0; ib < 8; ib++) {
        uint16_t sc = kq_le16(x->scales + 2 * (ib / 2));
        float dl1 = d * (float)(2 * ((sc >> (6 * (ib % 2))) & 7) + 1);
        float dl2 = d * (float)(2 * ((sc >> (6 * (ib % 2) + 3)) & 7) + 1);
        const uint8_t *qs = x->qs + 4 * ib, *qh = x->qh + 2 * ib;
        for (int l = 0; l < 4; l++, y += 8) {
            int h = qh[l / 2] >> (4 * (l & 1));
            dq_iq1_grid(y, l < 2 ? dl1 : dl2, kq_iq1s_grid[qs[l] | ((h & 7) << 8)], h & 8 ? -IQ1_DELTA : IQ1_DELTA);
        }
    }
}

static void dq_tq(uint32_t type, const uint8_t *b, float *y)
{
    iq_vals o;
    if (type == GGML_TYPE_TQ1_0) vals_tq1_0(b, &o);
    else vals_tq2_0(b, &o);
    float d = block_d(type, b);
    for (int e = 0; e < QKK; e++) y[e] = (float)(o.v[e] - 1) * d;
}

void kq_dequant_iq(uint32_t type, const void *row, int64_t n, float *out)
{
    const uint8_t *b = row;
    size_t bs = ggml_type_get(type)->type_size;
    for (int64_t i = 0; i < n / QKK; i++, b += bs, out += QKK) {
        switch (type) {
        case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S: dq_iq2(type, b, out); break;
        case GGML_TYPE_IQ3_XXS: dq_iq3_xxs(b, out); break;
        case GGML_TYPE_IQ3_S: dq_iq3_s(b, out); break;
        case GGML_TYPE_IQ1_S: dq_iq1_s(b, out); break;
        case GGML_TYPE_IQ1_M: dq_iq1_m(b, out); break;
        default: dq_tq(type, b, out); break;
        }
    }
}
