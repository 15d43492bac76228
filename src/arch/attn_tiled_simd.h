/* The tiled flash kernel (attn_simd.h) written once for every vector width.
 * An ISA file defines its vector type and operations and includes this
 * header, which defines `static void tiled(...)`:
 *   VT           the f32 vector type, VW lanes (8 or 16)
 *   VZERO()      all lanes 0          VSET1(x)   all lanes x
 *   VLOAD(p)     VW floats at p       VSTORE(p, v)
 *   VFMA(a,b,c)  a * b + c, fused     VMUL(a, b)
 *   VLDH(p)      VW halves at p, as f32
 * Each tile of keys is converted and transposed once (cell j of dimension d
 * at kt[d * ATTN_TILE + j], as ggml packs it) and serves every row; a row's
 * ATTN_TILE scores are ATTN_TILE / VW registers of fused multiply-add chains
 * over d, its values are added VW dimensions at a time, as
 * attn_tiled_generic does per element, so every width gives the same bits. */
#ifndef VLDH
#error "define the vector operations before including attn_tiled_simd.h"
#endif

/* the keys of cells C0 .. C0 + NT - 1 as f32, transposed; zero past NT */
static void tile_keys(const uint16_t *k, size_t k_stride, int c0, int nt, int dk, float *kt)
{
    for (int j = 0; j < ATTN_TILE; j++) {
        const uint16_t *kp = k + (size_t)(c0 + j) * k_stride;
        if (j >= nt) {
            for (int d = 0; d < dk; d++) kt[(size_t)d * ATTN_TILE + j] = 0.0f;
            continue;
        }
        int d = 0;
        for (; d + VW <= dk; d += VW) {
            float tmp[VW];
            VSTORE(tmp, VLDH(kp + d));
            for (int l = 0; l < VW; l++) kt[(size_t)(d + l) * ATTN_TILE + j] = tmp[l];
        }
        for (; d < dk; d++) kt[(size_t)d * ATTN_TILE + j] = _cvtsh_ss(kp[d]);
    }
}

/* one row's scores against a transposed tile, scaled, -inf past NTR */
static void tile_scores(const float *kt, const float *qr, int dk, float scale, int ntr, float *sc)
{
    enum { NB = ATTN_TILE / VW };
    VT a[NB];
    for (int b = 0; b < NB; b++) a[b] = VZERO();
    for (int d = 0; d < dk; d++) {
        const float *kd = kt + (size_t)d * ATTN_TILE;
        VT qd = VSET1(qr[d]);
        for (int b = 0; b < NB; b++) a[b] = VFMA(VLOAD(kd + VW * b), qd, a[b]);
    }
    VT vscale = VSET1(scale);
    for (int b = 0; b < NB; b++) VSTORE(sc + VW * b, VMUL(a[b], vscale));
    for (int j = ntr; j < ATTN_TILE; j++) sc[j] = -INFINITY;
}

static void tiled(const uint16_t *k, size_t k_stride, const uint16_t *v, size_t v_stride, const float *q,
                  size_t q_stride, int rows, int n0, int dk, int dv, float scale, float *out, size_t out_stride,
                  float *work)
{
    if (dv % 16) {
        attn_tiled_generic(k, k_stride, v, v_stride, q, q_stride, rows, n0, dk, dv, scale, out, out_stride, work);
        return;
    }
    float *kt = work, *acc = kt + (size_t)ATTN_TILE * dk, *sc = acc + (size_t)rows * dv, *S = sc + ATTN_TILE,
          *M = S + ATTN_TILE;
    memset(acc, 0, sizeof(float) * (size_t)rows * dv);
    for (int r = 0; r < rows; r++) S[r] = 0.0f, M[r] = -INFINITY;
    int n_all = n0 + rows - 1;
    for (int c0 = 0; c0 < n_all; c0 += ATTN_TILE) {
        tile_keys(k, k_stride, c0, n_all - c0 < ATTN_TILE ? n_all - c0 : ATTN_TILE, dk, kt);
        for (int r = 0; r < rows; r++) {
            int n = n0 + r;
            if (c0 >= n) continue; /* a tile this row does not see */
            int ntr = n - c0 < ATTN_TILE ? n - c0 : ATTN_TILE;
            tile_scores(kt, q + (size_t)r * q_stride, dk, scale, ntr, sc);
            float *ar = acc + (size_t)r * dv;
            attn_tile_softmax(sc, ar, dv, &S[r], &M[r]);
            for (int j = 0; j < ntr; j++) {
                const uint16_t *vp = v + (size_t)(c0 + j) * v_stride;
                VT p = VSET1(sc[j]);
                for (int d = 0; d < dv; d += VW) VSTORE(ar + d, VFMA(VLDH(vp + d), p, VLOAD(ar + d)));
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        VT inv = VSET1(S[r] == 0.0f ? 0.0f : 1.0f / S[r]);
        float *o = out + (size_t)r * out_stride, *ar = acc + (size_t)r * dv;
        for (int d = 0; d < dv; d += VW) VSTORE(o + d, VMUL(VLOAD(ar + d), inv));
    }
}
