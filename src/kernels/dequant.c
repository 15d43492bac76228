/* mat_get_row: one weight row to floats, with the float operations (and
 * their order) of ggml's dequantize_row_* (ggml-quants.c), so embedding
 * lookups equal llama.cpp's get_rows bit for bit. */
#include "kernels/kq_iq.h"

#define H2F fp16_to_fp32

static void dq_q4_0(const blk_q4_0 *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[i].qs[j] & 0xf) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dq_q4_1(const blk_q4_1 *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = H2F(b[i].d), m = H2F(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[i].qs[j] & 0xf) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t qh32(const uint8_t *qh)
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void dq_q5_0(const blk_q5_0 *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = H2F(b[i].d);
        uint32_t qh = qh32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int x0 = ((b[i].qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4)) - 16;
            int x1 = ((b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

static void dq_q5_1(const blk_q5_1 *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = H2F(b[i].d), m = H2F(b[i].m);
        uint32_t qh = qh32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int x0 = (b[i].qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
            int x1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        }
    }
}

static void dq_q8_0(const blk_q8_0 *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void dq_iq4_nl(const blk_iq4_nl *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)KV_IQ4NL[b[i].qs[j] & 0xf];
            y[j + 16] = d * (float)KV_IQ4NL[b[i].qs[j] >> 4];
        }
    }
}

static void dq_mxfp4(const blk_mxfp4 *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d = kq_e8m0_half(b[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)KV_MXFP4[b[i].qs[j] & 0xf] * d;
            y[j + 16] = (float)KV_MXFP4[b[i].qs[j] >> 4] * d;
        }
    }
}

static void dq_q2_K(const blk_q2_K *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d), mn = H2F(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int n = 0; n < QKK; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = b[i].scales[is++];
                    float dl = d * (float)(sc & 0xf), ml = mn * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
    }
}

static void dq_q3_K(const blk_q3_K *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d);
        const uint8_t *q = b[i].qs;
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < QKK; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1))
                for (int half = 0; half < 2; half++) {
                    float dl = d * (float)kq_q3k_scale(b[i].scales, is++);
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int v = ((q[l] >> shift) & 3) - ((b[i].hmask[l] & m) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
    }
}

static void dq_q4_K(const blk_q4_K *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d), mn = H2F(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32) {
            int sc, m;
            kq_scale_min_k4(is, b[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = mn * (float)m;
            kq_scale_min_k4(is + 1, b[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = mn * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void dq_q5_K(const blk_q5_K *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d), mn = H2F(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, q += 32, u1 = (uint8_t)(u1 << 2), u2 = (uint8_t)(u2 << 2)) {
            int sc, m;
            kq_scale_min_k4(is, b[i].scales, &sc, &m);
            float d1 = d * (float)sc, m1 = mn * (float)m;
            kq_scale_min_k4(is + 1, b[i].scales, &sc, &m);
            float d2 = d * (float)sc, m2 = mn * (float)m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void dq_q6_K(const blk_q6_K *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < QKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
    }
}

static void dq_iq4_xs(const blk_iq4_xs *b, int64_t nb, float *y)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = H2F(b[i].d);
        const uint8_t *qs = b[i].qs;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            float dl = d * (float)kq_iq4xs_scale(&b[i], ib);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)KV_IQ4NL[qs[j] & 0xf];
                y[j + 16] = dl * (float)KV_IQ4NL[qs[j] >> 4];
            }
        }
    }
}

void mat_get_row(const sl_mat *w, int64_t r, float *out)
{
    if (w->layout == SL_LAYOUT_Q8_0_R16) {
        for (int64_t b = 0; b < w->ne0 / QK; b++) {
            blk_q8_0 blk;
            kq_r16_block(w, r, b, &blk);
            dq_q8_0(&blk, 1, out + b * QK);
        }
        return;
    }
    const void *row = (const char *)w->data + (size_t)r * w->row_bytes;
    int64_t n = w->ne0;
    switch (w->type) {
    case GGML_TYPE_F32: memcpy(out, row, (size_t)n * sizeof(float)); break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) out[i] = fp16_to_fp32(((const uint16_t *)row)[i]);
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = bf16_to_fp32(((const uint16_t *)row)[i]);
        break;
    case GGML_TYPE_Q4_0: dq_q4_0(row, n / QK, out); break;
    case GGML_TYPE_Q4_1: dq_q4_1(row, n / QK, out); break;
    case GGML_TYPE_Q5_0: dq_q5_0(row, n / QK, out); break;
    case GGML_TYPE_Q5_1: dq_q5_1(row, n / QK, out); break;
    case GGML_TYPE_Q8_0: dq_q8_0(row, n / QK, out); break;
    case GGML_TYPE_IQ4_NL: dq_iq4_nl(row, n / QK, out); break;
    case GGML_TYPE_MXFP4: dq_mxfp4(row, n / QK, out); break;
    case GGML_TYPE_Q2_K: dq_q2_K(row, n / QKK, out); break;
    case GGML_TYPE_Q3_K: dq_q3_K(row, n / QKK, out); break;
    case GGML_TYPE_Q4_K: dq_q4_K(row, n / QKK, out); break;
    case GGML_TYPE_Q5_K: dq_q5_K(row, n / QKK, out); break;
    case GGML_TYPE_Q6_K: dq_q6_K(row, n / QKK, out); break;
    case GGML_TYPE_IQ4_XS: dq_iq4_xs(row, n / QKK, out); break;
    default:
        if (kq_is_iq(w->type)) {
            kq_dequant_iq(w->type, row, n, out);
            break;
        }
        for (int64_t i = 0; i < n; i++) out[i] = 0.0f; /* unsupported: callers check kernels_supports */
    }
}
