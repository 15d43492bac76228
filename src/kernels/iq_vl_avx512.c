/* The 256-bit body of iq_simd.h built with AVX-512 VL + VNNI: thirty-two
 * vector registers, vpdpwssd for the scale products and vpdpbusd for the
 * ternary types (IQ_VNNI).  The AVX-512 path runs one token of some types
 * through it (kq_iq_one_token_256). */
#define IQ_W 32
#define IQ_ROWS_FN kq_rows_iq_vl_avx512
#include "kernels/iq_simd.h"
