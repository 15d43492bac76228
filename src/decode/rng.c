/* MT19937 as specified by Matsumoto and Nishimura (1998) and by the C++
 * standard's std::mt19937 (seeding by the 1812433253 recurrence). */
#include "decode/rng.h"

enum { MT_N = 624, MT_M = 397 };

void rng_seed(sl_rng *r, uint32_t seed)
{
    r->mt[0] = seed;
    for (uint32_t i = 1; i < MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + i;
    r->idx = MT_N;
}

static void twist(sl_rng *r)
{
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (r->mt[i] & 0x80000000u) | (r->mt[(i + 1) % MT_N] & 0x7fffffffu);
        uint32_t v = r->mt[(i + MT_M) % MT_N] ^ (y >> 1);
        r->mt[i] = (y & 1u) ? v ^ 0x9908b0dfu : v;
    }
    r->idx = 0;
}

uint32_t rng_u32(sl_rng *r)
{
    if (r->idx >= MT_N) twist(r);
    uint32_t y = r->mt[r->idx++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* libstdc++'s generate_canonical<double, 53> with a 32-bit engine takes two
 * draws, sums them as lo + hi * 2^32 in double and divides by 2^64; a result
 * that rounds up to 1 is replaced by the largest double below 1. */
double rng_uniform(sl_rng *r)
{
    double lo = (double)rng_u32(r);
    double hi = (double)rng_u32(r);
    double u = (lo + hi * 4294967296.0) / 18446744073709551616.0;
    return u < 1.0 ? u : 0x1.fffffffffffffp-1;
}
