/* The body of dn_conv_step (delta.h), included by each attention ISA file:
 * built where FMA is enabled, fmaf becomes one instruction instead of a
 * call into libm per tap (the correctly rounded result is the same), and
 * the window shift is a short loop rather than a memmove call per channel. */
#ifndef SLUICE_CONV_STEP_H
#define SLUICE_CONV_STEP_H

#include <math.h>
#include <stdint.h>

static inline void conv_step_body(const float *w, int K, int64_t C, const float *win_in, float *win_out,
                                  const float *x, float *out)
{
    int H = K - 1;
    for (int64_t c = 0; c < C; c++) {
        const float *u = win_in + c * H, *wc = w + c * K;
        float sum = 0.0f;
        for (int j = 0; j < H; j++) sum = fmaf(u[j], wc[j], sum);
        float xc = x[c];
        out[c] = fmaf(xc, wc[H], sum);
        float *o = win_out + c * H;
        for (int j = 0; j + 1 < H; j++) o[j] = u[j + 1]; /* ascending: safe when WIN_OUT is WIN_IN */
        if (H > 0) o[H - 1] = xc;
    }
}

#endif
