/* Random numbers and weight blocks for synthetic models (internal to synth/).
 *
 * sy_gen_blocks writes quantised blocks directly from random bits: the
 * quants are uniform over their range and the block scales are set so each
 * element has standard deviation SIGMA (and mean ~0), with a per-block
 * jitter like the spread of real blocks' scales.  That is an order of
 * magnitude faster than drawing floats and quantising them, which is what
 * makes writing an 18 GB model disk-bound.  sy_quantize_blocks is a plain
 * (not error-optimal) quantiser for the few blocks that need a particular
 * value, such as the routing-skew coordinate of the embeddings. */
#ifndef SLUICE_SYNTH_GEN_H
#define SLUICE_SYNTH_GEN_H

#include <stdbool.h>
#include <stdint.h>

/* xoshiro256** seeded through splitmix64, one stream per (seed, tensor) so
 * the output never depends on buffer sizes.  Quant bits come from four
 * xorshift64 lanes instead (`lane`, same seeding): they only need to look
 * uniform, and at well under one instruction per byte they keep an 18 GB
 * file disk-bound on a shared core. */
typedef struct {
    uint64_t s[4];
    uint64_t lane[4];
} sy_rng;

void sy_rng_seed(sy_rng *r, uint64_t seed, uint64_t stream);

static inline uint64_t sy_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t sy_next(sy_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = sy_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3];
    s[2] ^= t;
    s[3] = sy_rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1). */
static inline float sy_unif(sy_rng *r) { return (float)(sy_next(r) >> 40) * (1.0f / 16777216.0f); }

/* Approximately N(0, 1): Irwin-Hall sum of four 16-bit uniforms (bounded at
 * +-3.46, which only trims tails that random weights do not need). */
static inline float sy_gauss(sy_rng *r)
{
    uint64_t x = sy_next(r);
    uint32_t sum = (uint32_t)(x & 0xffff) + (uint32_t)((x >> 16) & 0xffff) + (uint32_t)((x >> 32) & 0xffff) +
                   (uint32_t)(x >> 48);
    return ((float)sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* Types the generator can write. */
bool sy_type_supported(uint32_t type);
/* The codebook and ternary types (IQ1_S .. IQ3_S, TQ1_0, TQ2_0): written
 * from random bits only (sy_quantize_blocks has no quantiser for them). */
bool sy_type_low_bit(uint32_t type);

/* Random blocks of one type and element scale.  The block scales a tensor
 * uses (nominal scale times 16 jitter steps in 0.75..1.25) are converted to
 * f16 once, and the K-quants' sub-block scales are drawn from 64 random
 * patterns made here: per block, a few random bits pick from both tables,
 * so the per-byte cost is the random fill alone. */
#define SY_PATTERNS 64
typedef struct {
    uint32_t type;
    float sigma;
    uint16_t d[16], dmin[16];
    uint8_t pat[SY_PATTERNS][16];
} sy_gen;

void sy_gen_init(sy_gen *g, uint32_t type, float sigma, sy_rng *r);

/* N_BLOCKS random blocks (for F32/F16 one "block" is one element). */
void sy_gen_blocks(const sy_gen *g, void *dst, uint64_t n_blocks, sy_rng *r);

/* Quantises N floats (a multiple of TYPE's block size) into DST. */
void sy_quantize_blocks(uint32_t type, const float *x, void *dst, uint64_t n);

#endif
