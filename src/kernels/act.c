/* Activation conversion (act_prepare): float rows to the weight type's
 * vec_dot_type, bit-exact with ggml's x86 CPU backend (AVX2/AVX-512 build):
 *   Q8_0: quantize_row_q8_0 (arch/x86/quants.c): d = amax/127, id = 127/amax,
 *         q = round-half-even(x*id) (_mm256_round_ps + cvtps + packs).
 *   Q8_1: quantize_row_q8_1 (x86): as Q8_0, plus s = fp16(d * sum(q)).
 *   Q8_K: quantize_row_q8_K (x86 = quantize_row_q8_K_ref): iscale = -127/max
 *         (max = first value of largest magnitude), q = nearest_int(iscale*x)
 *         capped at 127, d = 1/iscale, bsums = sums of 16 quants.
 *   F16:  ggml_cpu_fp32_to_fp16 (VCVTPS2PH, round to nearest even).
 *   BF16: ggml_cpu_fp32_to_bf16 (ggml_compute_fp32_to_bf16).
 * The repacked paths' quantizers (ggml_quantize_mat_q8_0_4x8 /
 * q8_K_4x8) produce the same values (Q8_K at most with both d and q negated,
 * which leaves every product unchanged), so one row quantizer serves all. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kq.h"

bool kernels_supports(uint32_t wtype)
{
    switch (wtype) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16:
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0: case GGML_TYPE_MXFP4: case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_XS:
    case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_TQ1_0:
    case GGML_TYPE_TQ2_0:
        return true;
    default:
        return false;
    }
}

uint32_t kernels_vec_dot_type(uint32_t wtype)
{
    switch (wtype) {
    case GGML_TYPE_F16: return GGML_TYPE_F16;
    case GGML_TYPE_BF16: return GGML_TYPE_BF16;
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0:
    case GGML_TYPE_MXFP4: case GGML_TYPE_IQ4_NL:
        return GGML_TYPE_Q8_0;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1:
        return GGML_TYPE_Q8_1;
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_XS:
    case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_TQ1_0:
    case GGML_TYPE_TQ2_0:
        return GGML_TYPE_Q8_K;
    default:
        return GGML_TYPE_F32;
    }
}

/* _mm256_round_ps(nearest) + _mm256_cvtps_epi32 + packs: NaN and values out
 * of int32 range become 0x80000000, which saturates to -128. */
static int8_t cvt_rne_sat8(float v)
{
    if (!(fabsf(v) < 2147483648.0f)) return -128;
    float r = rintf(v); /* default rounding mode: nearest even */
    if (r > 127.0f) return 127;
    if (r < -128.0f) return -128;
    return (int8_t)r;
}

static float absmax32(const float *x)
{
    float m = 0.0f;
    for (int j = 0; j < QK; j++) {
        float a = fabsf(x[j]);
        if (a > m) m = a;
    }
    return m;
}

/* Returns sum of the quants (for Q8_1). */
static int quant_q8_block(const float *x, uint16_t *dh, int8_t *qs, float *d_out)
{
    float amax = absmax32(x);
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    *dh = fp32_to_fp16(d);
    for (int j = 0; j < QK; j++) {
        qs[j] = cvt_rne_sat8(x[j] * id);
        sum += qs[j];
    }
    *d_out = d;
    return sum;
}

static void quant_row_q8_0(const float *x, blk_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d;
        quant_q8_block(x + i * QK, &y[i].d, y[i].qs, &d);
    }
}

static void quant_row_q8_1(const float *x, blk_q8_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d;
        int sum = quant_q8_block(x + i * QK, &y[i].d, y[i].qs, &d);
        y[i].s = fp32_to_fp16(d * (float)sum);
    }
}

/* ggml nearest_int: round half to even through the 1.5*2^23 trick. */
static int nearest_int(float f)
{
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static void quant_row_q8_K(const float *x, blk_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QKK) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QKK; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        memset(y[i].bsums, 0, sizeof y[i].bsums);
        if (amax == 0.0f) { /* ggml leaves bsums unset here; they are only ever multiplied by d = 0 */
            y[i].d = 0.0f;
            memset(y[i].qs, 0, QKK);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < QKK; j++) {
            int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
            y[i].bsums[j / 16] = (int16_t)(y[i].bsums[j / 16] + y[i].qs[j]);
        }
        y[i].d = 1.0f / iscale;
    }
}

static void convert_row(uint32_t vtype, const float *x, void *dst, int64_t n, sl_isa isa)
{
    if (isa >= SL_ISA_AVX512 && kq_act_row_avx512(vtype, x, dst, n)) return;
    switch (vtype) {
    case GGML_TYPE_F32:
        memcpy(dst, x, (size_t)n * sizeof(float));
        break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_fp16(x[i]);
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_bf16(x[i]);
        break;
    case GGML_TYPE_Q8_0: quant_row_q8_0(x, dst, n / QK); break;
    case GGML_TYPE_Q8_1: quant_row_q8_1(x, dst, n / QK); break;
    case GGML_TYPE_Q8_K: quant_row_q8_K(x, dst, n / QKK); break;
    }
}

typedef struct {
    sl_act *a;
    const float *x;
    size_t x_stride;
    int64_t rows_per_task;
    sl_isa isa;
} act_job;

static void act_task(void *ctx, int task, int thread)
{
    (void)thread;
    act_job *j = ctx;
    int64_t r0 = (int64_t)task * j->rows_per_task;
    int64_t r1 = r0 + j->rows_per_task;
    if (r1 > j->a->rows) r1 = j->a->rows;
    for (int64_t r = r0; r < r1; r++)
        convert_row(j->a->vtype, j->x + (size_t)r * j->x_stride,
                    (char *)j->a->data + (size_t)r * j->a->row_bytes, j->a->n, j->isa);
}

static int act_reserve(sl_act *a, size_t bytes, sl_err *err)
{
    if (bytes <= a->cap && a->data) return 0;
    size_t cap = bytes + bytes / 2 + 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0)
        return sl_errf(err, "act_prepare: cannot allocate %zu bytes for activations", cap);
    free(a->data);
    a->data = p;
    a->cap = cap;
    return 0;
}

int act_prepare(sl_act *a, uint32_t wtype, const float *x, int64_t n, int64_t rows, size_t x_stride,
                sl_pool *pool, sl_err *err)
{
    if (!kernels_supports(wtype))
        return sl_errf(err, "act_prepare: unsupported weight type %s", ggml_type_name(wtype));
    const ggml_type_info *wt = ggml_type_get(wtype);
    uint32_t vtype = kernels_vec_dot_type(wtype);
    if (n <= 0 || rows < 0 || n % wt->blck_size != 0 || (rows > 1 && x_stride < (size_t)n))
        return sl_errf(err, "act_prepare: bad shape n=%lld rows=%lld stride=%zu for %s weights "
                       "(row length must be a multiple of %u)", (long long)n, (long long)rows,
                       x_stride, wt->name, wt->blck_size);
    size_t row_bytes = ggml_row_bytes(vtype, (uint64_t)n);
    if (rows > 0 && row_bytes > (SIZE_MAX - 64) / (size_t)rows)
        return sl_errf(err, "act_prepare: %lld rows of %lld elements overflow", (long long)rows, (long long)n);
    if (act_reserve(a, row_bytes * (size_t)(rows > 0 ? rows : 1), err)) return -1;
    a->vtype = vtype;
    a->n = n;
    a->rows = rows;
    a->row_bytes = row_bytes;
    if (rows == 0) return 0;
    int nt = pool_threads(pool);
    act_job job = {a, x, x_stride, 1, pool_isa(pool)};
    int tasks = (int)(rows < nt ? rows : nt);
    job.rows_per_task = (rows + tasks - 1) / tasks;
    tasks = (int)((rows + job.rows_per_task - 1) / job.rows_per_task);
    if (tasks <= 1 || (int64_t)row_bytes * rows < 16384) { /* small: not worth a dispatch */
        job.rows_per_task = rows;
        act_task(&job, 0, 0);
    } else {
        pool_run(pool, tasks, act_task, &job);
    }
    return 0;
}

void act_free(sl_act *a)
{
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}
