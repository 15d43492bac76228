#include "arch/rope.h"

#include <math.h>
#include <stdbool.h>

static float maxf(float a, float b) { return a > b ? a : b; }
static float minf(float a, float b) { return a < b ? a : b; }

/* Dimension at which a rotation completes n_rot(beta) turns over the
 * original context (the YaRN correction range). */
static float corr_dim(int n_dims, int n_ctx_orig, float beta, float base)
{
    return n_dims * logf(n_ctx_orig / (beta * 2 * (float)M_PI)) / (2 * logf(base));
}

static void corr_dims(const rope_params *rp, float dims[2])
{
    float start = floorf(corr_dim(rp->n_rot, rp->n_ctx_orig, rp->beta_fast, rp->freq_base));
    float end = ceilf(corr_dim(rp->n_rot, rp->n_ctx_orig, rp->beta_slow, rp->freq_base));
    dims[0] = maxf(0, start);
    dims[1] = minf(rp->n_rot - 1, end);
}

static float yarn_ramp(float low, float high, int i0)
{
    /* integer halving first, as ggml does */
    float y = (i0 / 2 - low) / maxf(0.001f, high - low);
    return 1 - minf(1, maxf(0, y));
}

/* IMROPE (ggml_mrope_cache_init, interleaved): whether pair I reads one of
 * the three streams that carry a text token's position, not the fourth. */
static int imrope_text(const int32_t sec[4], int i)
{
    int n = sec[0] + sec[1] + sec[2] + sec[3], s = n > 0 ? i % n : 0;
    return (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]) || (s % 3 == 0 && s < 3 * sec[0]);
}

/* MROPE (ggml_mrope_cache_init, contiguous sections): whether pair I is
 * in the t, h or w section (a text token's position), not in e (0). */
static int mrope_text(const int32_t sec[4], int i)
{
    int n = sec[0] + sec[1] + sec[2] + sec[3];
    return (n > 0 ? i % n : 0) < sec[0] + sec[1] + sec[2];
}

void rope_cache(const rope_params *rp, int32_t pos, float *cache)
{
    float theta_scale = powf(rp->freq_base, -2.0f / rp->n_rot);
    float dims[2] = {0, 0};
    if (rp->ext_factor != 0.0f) corr_dims(rp, dims);
    float theta = (float)pos;
    for (int i0 = 0; i0 < rp->n_rot; i0 += 2) {
        float ff = rp->freq_factors ? rp->freq_factors[i0 / 2] : 1.0f;
        float extrap = theta / ff;
        float interp = rp->freq_scale * extrap;
        if ((rp->mode == ROPE_MODE_IMROPE && !imrope_text(rp->sections, i0 / 2)) ||
            (rp->mode == ROPE_MODE_MROPE && !mrope_text(rp->sections, i0 / 2)))
            extrap = interp = 0.0f;
        float th = interp, mscale = rp->attn_factor;
        if (rp->ext_factor != 0.0f) {
            float mix = yarn_ramp(dims[0], dims[1], i0) * rp->ext_factor;
            th = fmaf(interp, 1 - mix, extrap * mix);
            mscale *= fmaf(0.1f, logf(1.0f / rp->freq_scale), 1.0f);
        }
        cache[i0] = cosf(th) * mscale;
        cache[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

void rope_apply(const rope_params *rp, const float *cache, float *x)
{
    int n = rp->n_rot;
    if (rp->mode == ROPE_MODE_NONE) return;
    bool neox = rope_pairs_halves(rp);
    for (int i0 = 0; i0 < n; i0 += 2) {
        float c = cache[i0], s = cache[i0 + 1];
        int a = neox ? i0 / 2 : i0;
        int b = neox ? i0 / 2 + n / 2 : i0 + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = fmaf(x0, c, -(x1 * s));
        x[b] = fmaf(x0, s, x1 * c);
    }
}
