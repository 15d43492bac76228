/* AVX2 products of the IQ1/IQ2/IQ3/TQ types: iq_simd.h on 256-bit vectors. */
#define IQ_W 32
#define IQ_ROWS_FN kq_rows_iq_avx2
#include "kernels/iq_simd.h"
