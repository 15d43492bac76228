/* fp16 / bf16 conversions, bit-exact with what ggml's x86 build does:
 * fp32 -> fp16 is VCVTPS2PH with round-to-nearest-even (ggml_cpu_fp32_to_fp16,
 * GGML_CPU_FP32_TO_FP16 under F16C), fp32 -> bf16 is ggml_compute_fp32_to_bf16
 * (round-to-nearest-even, NaN -> quiet NaN, no flushing). */
#include "kernels/kernels.h"

#include <string.h>

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t fp32_to_fp16(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quieted, payload truncated like VCVTPS2PH */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00);
    if (a >= 0x38800000u) { /* normal half: rebias, round to nearest even */
        uint32_t h = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
        return (uint16_t)(sign | h);
    }
    /* Subnormal half: adding 0.5 puts the 2^-24 unit in the last mantissa
     * bit, and the float addition rounds to nearest even for us. */
    float s = u2f(a) + 0.5f;
    return (uint16_t)(sign | (f2u(s) - 0x3f000000u));
}

float fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return u2f(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t fp32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

float bf16_to_fp32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}
