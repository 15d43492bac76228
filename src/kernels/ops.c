/* Element-wise ops, written to give ggml's results on the AVX-512 build that
 * made the goldens:
 *  - rms_norm: ggml_compute_forward_rms_norm_f32 (sum of float squares in
 *    double, scale = 1/sqrtf(mean + eps), out = x*scale*w);
 *  - silu/swiglu/softmax: ggml's vector expf (ggml_v_expf, AVX-512 variant)
 *    for every full group of 16 elements, libm expf for the n%16 tail, as
 *    ggml_vec_swiglu_f32 / ggml_vec_soft_max_f32 do; the softmax sum adds
 *    each 16-group's tree sum (_mm512_reduce_add_ps) into a double.
 * The SIMD forms of swiglu (ops_avx512.c, ops_avx2.c) run the same
 * operations per lane, so results are identical on every path. */
#include <math.h>

#include "kernels/kq.h"

/* ggml_v_expf (AVX-512 form) one lane at a time: same FMAs, same constants;
 * _mm512_scalef_ps(j, n) is an exact power-of-two scaling, i.e. ldexpf. */
static float v_expf(float x)
{
    if (isnan(x)) return x;
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

float op_silu(float x)
{
    return x / (1.0f + v_expf(0.0f - x));
}

void op_swiglu_isa(float *out, const float *g, const float *u, int64_t n, sl_isa isa)
{
    int64_t i = 0, nv = n - n % 16;
    if (isa > kernels_isa_detected()) isa = kernels_isa_detected();
    if (isa == SL_ISA_AVX512) kq_swiglu_avx512(out, g, u, nv), i = nv;
    else if (isa == SL_ISA_AVX2) kq_swiglu_avx2(out, g, u, nv), i = nv;
    for (; i < nv; i++) out[i] = op_silu(g[i]) * u[i];
    for (; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void op_silu_vec_isa(float *out, const float *x, int64_t n, sl_isa isa)
{
    int64_t i = 0, nv = n - n % 16;
    if (isa > kernels_isa_detected()) isa = kernels_isa_detected();
    if (isa == SL_ISA_AVX512) kq_silu_avx512(out, x, nv), i = nv;
    else if (isa == SL_ISA_AVX2) kq_silu_avx2(out, x, nv), i = nv;
    for (; i < nv; i++) out[i] = op_silu(x[i]);
    for (; i < n; i++) out[i] = x[i] / (1.0f + expf(-x[i]));
}

void op_weighted_sum_isa(float *out, const float *y, const float *w, int k, int64_t n, sl_isa isa)
{
    int64_t i = 0;
    if (isa > kernels_isa_detected()) isa = kernels_isa_detected();
    if (isa == SL_ISA_AVX512) kq_weighted_sum_avx512(out, y, w, k, i = n - n % 16, n);
    else if (isa == SL_ISA_AVX2) kq_weighted_sum_avx2(out, y, w, k, i = n - n % 8, n);
    for (; i < n; i++) {
        float o = y[i] * w[0];
        for (int j = 1; j < k; j++) o = o + y[(size_t)j * (size_t)n + (size_t)i] * w[j];
        out[i] = o;
    }
}

void op_weighted_sum(float *out, const float *y, const float *w, int k, int64_t n)
{
    op_weighted_sum_isa(out, y, w, k, n, kernels_isa_detected());
}

void op_silu_vec(float *out, const float *x, int64_t n)
{
    op_silu_vec_isa(out, x, n, kernels_isa_detected());
}

void op_swiglu(float *out, const float *g, const float *u, int64_t n)
{
    op_swiglu_isa(out, g, u, n, kernels_isa_detected());
}

/* Sum of (double)(x[i] * x[i]), which ggml adds in index order.  Every
 * square is a float and so a multiple of u, the unit in the last place of
 * the smallest nonzero one; while the total stays below 2^53 u, every
 * partial sum in any order is exact, and eight interleaved sums give the
 * ordered sum's bits without its chain of dependent double adds (most of
 * a norm's time).  A total below 2^28 times the smallest nonzero square
 * is within that bound with room for the estimate's own rounding; past it
 * (tiny squares beside large ones, an infinity, a NaN) the sum is redone
 * in order. */
static double sum_squares(const float *x, int64_t n, sl_isa isa)
{
    double s[8] = {0};
    float tmin = INFINITY;
    int64_t i = 0;
    if (isa == SL_ISA_AVX512) i = n & ~(int64_t)7, kq_sumsq8_avx512(x, i, s, &tmin);
    else if (isa == SL_ISA_AVX2) i = n & ~(int64_t)7, kq_sumsq8_avx2(x, i, s, &tmin);
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            float p = x[i + k] * x[i + k];
            s[k] += (double)p;
            tmin = p > 0.0f && p < tmin ? p : tmin;
        }
    for (; i < n; i++) {
        float p = x[i] * x[i];
        s[0] += (double)p;
        tmin = p > 0.0f && p < tmin ? p : tmin;
    }
    double sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    if (sum < 0x1p28 * (double)tmin) return sum;
    sum = 0.0;
    for (i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    return sum;
}

void op_rms_norm_isa(float *out, const float *x, const float *w, int64_t n, float eps, sl_isa isa)
{
    if (isa > kernels_isa_detected()) isa = kernels_isa_detected();
    float mean = (float)(sum_squares(x, n, isa) / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    int64_t i = 0;
    if (isa == SL_ISA_AVX512) i = n & ~(int64_t)15, kq_norm_apply_avx512(out, x, scale, w, i);
    else if (isa == SL_ISA_AVX2) i = n & ~(int64_t)7, kq_norm_apply_avx2(out, x, scale, w, i);
    if (w)
        for (; i < n; i++) out[i] = x[i] * scale * w[i];
    else
        for (; i < n; i++) out[i] = x[i] * scale;
}

void op_rms_norm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    op_rms_norm_isa(out, x, w, n, eps, kernels_isa_detected());
}

void op_rms_norm_rows(float *out, const float *x, const float *w, int64_t rows, int64_t n, float eps)
{
    for (int64_t r = 0; r < rows; r++) op_rms_norm(out + r * n, x + r * n, w, n, eps);
}

/* One pass: a value replaces the best only when strictly above it, so the
 * first of equal maxima stays and a NaN never enters.  Only when nothing
 * was above -inf (every value -inf or NaN) is the first -inf looked for. */
int32_t op_argmax_isa(const float *x, int32_t n, sl_isa isa)
{
    float max = -INFINITY;
    int64_t at = -1, i = 0;
    if (isa > kernels_isa_detected()) isa = kernels_isa_detected();
    if (isa == SL_ISA_AVX512) i = n & ~(int64_t)15, kq_argmax_avx512(x, i, &max, &at);
    else if (isa == SL_ISA_AVX2) i = n & ~(int64_t)7, kq_argmax_avx2(x, i, &max, &at);
    for (; i < n; i++)
        if (x[i] > max) max = x[i], at = i;
    for (i = 0; at < 0 && i < n; i++)
        if (x[i] == -INFINITY) at = i;
    return (int32_t)at;
}

int32_t op_argmax(const float *x, int32_t n) { return op_argmax_isa(x, n, kernels_isa_detected()); }

void op_softmax(float *x, int64_t n) { op_softmax_sink(x, n, NULL); }

double op_soft_max_sum_isa(float *y, const float *x, int64_t n, float max, sl_isa isa)
{
    double sum = 0.0;
    int64_t i = 0, nv = n - n % 16;
    if (isa > kernels_isa_detected()) isa = kernels_isa_detected();
    if (isa == SL_ISA_AVX512) sum = kq_exp_sum_avx512(y, x, nv, max), i = nv;
    else if (isa == SL_ISA_AVX2) sum = kq_exp_sum_avx2(y, x, nv, max), i = nv;
    for (; i < nv; i += 16) {
        float l[16];
        for (int k = 0; k < 16; k++) l[k] = y[i + k] = v_expf(x[i + k] - max);
        sum += (double)kq_tree16(l);
    }
    for (; i < n; i++) {
        y[i] = expf(x[i] - max);
        sum += (double)y[i];
    }
    return sum;
}

/* ggml_compute_forward_soft_max_f32 with a sink: the sink's logit raises
 * the maximum and adds libm expf(sink - max) to the double sum. */
void op_softmax_sink(float *x, int64_t n, const float *sink)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    if (sink && *sink > max) max = *sink;
    double sum = op_soft_max_sum(x, x, n, max);
    if (sink) sum += (double)expf(*sink - max);
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

double op_soft_max_sum(float *y, const float *x, int64_t n, float max)
{
    return op_soft_max_sum_isa(y, x, n, max, kernels_isa_detected());
}
