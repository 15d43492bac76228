/* The random source of sampling: the 32-bit Mersenne Twister (MT19937) and
 * the [0, 1) double that a C++ std::uniform_real_distribution<double> draws
 * from it with libstdc++.  llama.cpp's sampler uses exactly that pair, so a
 * given --seed makes the same draws in sluice as in llama.cpp. */
#ifndef SLUICE_RNG_H
#define SLUICE_RNG_H

#include <stdint.h>

typedef struct {
    uint32_t mt[624];
    int idx;
} sl_rng;

void rng_seed(sl_rng *r, uint32_t seed);
uint32_t rng_u32(sl_rng *r);
/* Uniform in [0, 1), from two 32-bit draws (low word first), 53-bit precision. */
double rng_uniform(sl_rng *r);

#endif
