/* Rotary position embedding, computed the way ggml's CPU rope op computes it
 * (same float operations in the same order), so K and Q match llama.cpp's to
 * the bit: theta advances by repeated multiplication, YaRN ramps between
 * interpolated and extrapolated angles, magnitude scaling folds into cos/sin.
 * ggml-cpu is built with -march=native in a GNU dialect, so GCC contracts
 * a*b + c into fused multiply-adds there; the fmaf calls in rope.c (and in
 * the flash-attention sum) reproduce the contractions found in its code. */
#ifndef SLUICE_ROPE_H
#define SLUICE_ROPE_H

#include <stdbool.h>
#include <stdint.h>

/* ggml's rope types.  NONE: no rotation at all (Kimi-Linear's MLA).
 * IMROPE: interleaved multi-section RoPE (Qwen3.5) reduced to what text
 * needs: llama.cpp feeds a text token the position streams (p, p, p, 0),
 * so a pair rotates by p when its section is one of the first three and
 * not at all when it falls in the fourth; pairs as NEOX.  MROPE: the
 * same with contiguous sections (GLM-4.x files that carry
 * rope.dimension_sections): pair i rotates by p iff i % sum(sections) <
 * sections[0] + sections[1] + sections[2]. */
enum { ROPE_MODE_NONE = -1, ROPE_MODE_NORM = 0, ROPE_MODE_NEOX = 2, ROPE_MODE_MROPE = 8, ROPE_MODE_IMROPE = 40 };

typedef struct {
    int32_t n_rot;       /* rotated dimensions (even) */
    int mode;            /* ROPE_MODE_NORM: pairs (2i, 2i+1); NEOX: (i, i + n_rot/2) */
    float freq_base, freq_scale;
    float ext_factor, attn_factor, beta_fast, beta_slow;
    int32_t n_ctx_orig;
    const float *freq_factors; /* n_rot/2 divisors of theta (llama3 rope_freqs), or NULL */
    int32_t sections[4];       /* IMROPE / MROPE: pairs per position stream (t, h, w, e) */
} rope_params;

/* Whether RP rotates the pairs (i, i + n_rot/2) (NEOX and the multi-section
 * modes), not (2i, 2i+1). */
static inline bool rope_pairs_halves(const rope_params *rp)
{
    return rp->mode == ROPE_MODE_NEOX || rp->mode == ROPE_MODE_IMROPE || rp->mode == ROPE_MODE_MROPE;
}

/* cos/sin for position POS: cache[2i] = cos, cache[2i+1] = sin of pair i
 * (n_rot floats). */
void rope_cache(const rope_params *rp, int32_t pos, float *cache);

/* Rotates the first n_rot values of one head vector in place. */
void rope_apply(const rope_params *rp, const float *cache, float *x);

#endif
