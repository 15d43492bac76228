/* Q8_0 weights interleaved by 16 rows (SL_LAYOUT_Q8_0_R16; kq.h draws the
 * layout).  In GGUF's row order a 16-row product leaves each row's block sum
 * spread over 8 lanes, and folding 8 vectors into one of 16 sums costs about
 * 20 shuffles and adds per block and token, more than the 8 vpdpbusd that
 * formed them: with one token and cold weights the memory mostly hides it,
 * with weights in cache or the 2-9 positions a draft verification
 * multiplies it is most of the product's cost.
 * Interleaved, dword i of 16 rows is one vector, a broadcast activation dword
 * feeds all 16 rows, and the sums come out already in row order.  The integer
 * block sums and the float steps are those of the canonical order, so an
 * interleaved matrix gives the same bits as the rows it came from. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kq.h"

bool mat_interleavable(const sl_mat *w)
{
    return w->type == GGML_TYPE_Q8_0 && w->layout == SL_LAYOUT_ROWS && w->ne0 > 0 && w->ne0 % QK == 0 &&
           w->ne1 > 0 && w->row_bytes == (size_t)(w->ne0 / QK) * sizeof(blk_q8_0);
}

bool mat_interleave_pays(const sl_mat *w)
{
    return mat_interleavable(w) && kernels_isa_detected() >= SL_ISA_AVX512;
}

size_t mat_interleaved_bytes(const sl_mat *w)
{
    return (size_t)((w->ne1 + 15) / 16) * 16 * w->row_bytes;
}

/* One group from its (up to 16) rows in GGUF order; missing rows are zero. */
void kq_r16_interleave_scalar(uint8_t *dst, const uint8_t *src, int nv, int64_t nb, size_t row_bytes)
{
    uint16_t *sc = (uint16_t *)dst;
    uint8_t *q = dst + kq_r16_quant_off(nb);
    for (int64_t b = 0; b < nb; b++)
        for (int j = 0; j < 16; j++) {
            blk_q8_0 blk = {0};
            if (j < nv) memcpy(&blk, src + (size_t)j * row_bytes + (size_t)b * sizeof blk, sizeof blk);
            sc[b * 16 + j] = blk.d;
            for (int w = 0; w < QK / 4; w++) { /* 4 bytes at a time: q + 128 is q ^ 0x80 on every byte */
                uint32_t v;
                memcpy(&v, blk.qs + 4 * w, 4);
                v ^= 0x80808080u;
                memcpy(q + (size_t)b * 512 + (size_t)w * 64 + (size_t)j * 4, &v, 4);
            }
        }
}

int mat_interleave_n(sl_mat *w, void *buf, size_t n, size_t stride)
{
    if (!mat_interleavable(w) || buf != w->data) return -1;
    int64_t nb = w->ne0 / QK;
    uint8_t *tmp = malloc(16 * w->row_bytes); /* before any change: all or nothing */
    if (!tmp) return -1;
    /* the scalar path moved 2-3 GB/s: a streamed expert's rewrite cost more
     * than its product (docs/CACHE.md) */
    bool fast = kernels_isa_detected() >= SL_ISA_AVX512 && w->row_bytes <= INT32_MAX / 16; /* gather offsets */
    void (*group)(uint8_t *, const uint8_t *, int, int64_t, size_t) =
        fast ? kq_r16_interleave_avx512 : kq_r16_interleave_scalar;
    /* in place: group g's interleaved bytes occupy exactly its 16 rows' bytes */
    for (size_t i = 0; i < n; i++)
        for (int64_t r = 0; r < w->ne1; r += 16) {
            int nv = (int)(w->ne1 - r < 16 ? w->ne1 - r : 16);
            uint8_t *g = (uint8_t *)buf + i * stride + (size_t)r * w->row_bytes;
            memcpy(tmp, g, (size_t)nv * w->row_bytes);
            group(g, tmp, nv, nb, w->row_bytes);
        }
    free(tmp);
    w->layout = SL_LAYOUT_Q8_0_R16;
    return 0;
}

int mat_interleave(sl_mat *w, void *buf) { return mat_interleave_n(w, buf, 1, 0); }

/* Row r's block b back in GGUF form. */
void kq_r16_block(const sl_mat *w, int64_t r, int64_t b, void *out)
{
    int64_t nb = w->ne0 / QK;
    const uint8_t *g = kq_r16_group(w, r / 16);
    int j = (int)(r % 16);
    blk_q8_0 blk;
    memcpy(&blk.d, g + (size_t)(b * 16 + j) * 2, 2);
    const uint8_t *q = g + kq_r16_quant_off(nb) + (size_t)b * 512 + (size_t)j * 4;
    for (int e = 0; e < QK; e++) blk.qs[e] = (int8_t)(q[(e / 4) * 64 + e % 4] - 128);
    memcpy(out, &blk, sizeof blk);
}

/* The canonical order (matmul.c's dot_q8_0) on the interleaved layout. */
void kq_rows_r16_scalar(const sl_mat *w, const sl_act *x, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    int64_t nb = w->ne0 / QK;
    for (int64_t t = 0; t < x->rows; t++) {
        const blk_q8_0 *a = (const blk_q8_0 *)((const char *)x->data + (size_t)t * x->row_bytes);
        for (int64_t r = r0; r < r1; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                blk_q8_0 wb;
                kq_r16_block(w, r, b, &wb);
                int s = 0;
                for (int e = 0; e < QK; e++) s += wb.qs[e] * a[b].qs[e];
                acc = fmaf(fp16_to_fp32(wb.d) * fp16_to_fp32(a[b].d), (float)s, acc);
            }
            y[(size_t)t * y_stride + (size_t)r] = acc;
        }
    }
}
