/* AVX-512 (BW + VNNI) products of the IQ1/IQ2/IQ3/TQ types: iq_simd.h on
 * 512-bit vectors. */
#define IQ_W 64
#define IQ_ROWS_FN kq_rows_iq_avx512
#include "kernels/iq_simd.h"
