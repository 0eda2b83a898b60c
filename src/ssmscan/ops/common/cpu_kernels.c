/* ssmscan CPU kernels: selective scan forward/backward and the first-order linear scan.
 *
 * Plain C, no torch headers and no Python C API: loaded with ctypes, which releases the GIL, so
 * the Python side runs one call per thread over disjoint row ranges. Each kernel is instantiated
 * for float and double from cpu_kernels_impl.h. Hot loops run over the state dimension N (or the
 * channel dimension for linear_scan) and are vectorized with `#pragma omp simd`; the float
 * exponential and logarithm below are written to vectorize (no libm calls in the hot loops).
 *
 * setup.py builds this file once per x86-64 ISA level (baseline, v3 = AVX2+FMA, v4 = AVX-512);
 * cpu_lib.py loads the best one the CPU supports.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>


#if defined(__GNUC__)
#define SSM_INLINE static inline __attribute__((always_inline))
#else
#define SSM_INLINE static inline
#endif

typedef union { float f; int32_t i; } ssm_f32bits;

/* exp(x) in float, ~1 ulp, vectorizable. NaN propagates; x > 88.72 gives inf; very negative x
 * underflows gradually through denormals to 0. Range reduction x = k ln2 + r, |r| <= ln2/2, then a
 * degree-6 minimax polynomial for exp(r) (the Cephes expf coefficients) and 2^k applied as two
 * factors so that k in [-150, 128] never overflows an exponent field. */
SSM_INLINE float ssm_expf(float x) {
    const float lo = -104.0f, hi = 88.7228394f;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer in the low bits */
    ssm_f32bits kb;
    kb.f = xc * 1.44269504088896341f + magic;
    float k = kb.f - magic;
    int32_t ki = kb.i - 0x4B400000; /* the bits of magic */
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t k1 = ki >> 1, k2 = ki - k1;
    ssm_f32bits s1, s2;
    s1.i = (k1 + 127) << 23;
    s2.i = (k2 + 127) << 23;
    float res = p * s1.f * s2.f;
    res = x > hi ? INFINITY : res;
    return x < lo ? 0.0f : res;
}

/* log(x) for finite x > 0 in float, vectorizable (Cephes logf polynomial). */
SSM_INLINE float ssm_logf(float x) {
    ssm_f32bits b;
    b.f = x;
    int32_t e = ((b.i >> 23) & 0xff) - 126;
    b.i = (b.i & 0x007fffff) | 0x3f000000; /* mantissa in [0.5, 1) */
    float m = b.f;
    int small = m < 0.707106781186547524f;
    float ef = (float)(e - small);
    m = small ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    y += ef * -2.12194440e-4f;
    y += -0.5f * z;
    return m + y + ef * 0.693359375f;
}

/* softplus(x) = log1p(exp(x)) with F.softplus's threshold 20; log1p through the
 * u = 1 + e, log(u) * e / (u - 1) correction, accurate for tiny e. */
SSM_INLINE float ssm_softplusf(float x) {
    float e = ssm_expf(x);
    float u = 1.0f + e;
    float d = u - 1.0f;
    float l = ssm_logf(u) * (e / (d == 0.0f ? 1.0f : d));
    l = d == 0.0f ? e : l;
    return x > 20.0f ? x : l;
}

SSM_INLINE double ssm_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

#define T float
#define SFX f32
#define EXP ssm_expf
#define SOFTPLUS ssm_softplusf
#include "cpu_kernels_impl.h"
#undef T
#undef SFX
#undef EXP
#undef SOFTPLUS

#define T double
#define SFX f64
#define EXP exp
#define SOFTPLUS ssm_softplus
#include "cpu_kernels_impl.h"
#undef T
#undef SFX
#undef EXP
#undef SOFTPLUS

/* For tests: the vectorizable float exp/log against libm. */
void ssm_math_f32(const float* x, int64_t n, float* out_exp, float* out_softplus) {
    for (int64_t i = 0; i < n; ++i) {
        out_exp[i] = ssm_expf(x[i]);
        out_softplus[i] = ssm_softplusf(x[i]);
    }
}
