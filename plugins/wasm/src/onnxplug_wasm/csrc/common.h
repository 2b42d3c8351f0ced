/* Shared definitions of onnxplug-wasm's kernels: export macro, math without libc.
 *
 * The module is built with -nostdlib (no libc, no libm), so the few transcendental functions
 * the activations need are written here: range reduction plus short polynomials, accurate to
 * a few float32 ulps, which is what ONNX's node cases (rtol 1e-3) and the CPU provider's
 * float32 results need.  Every kernel takes byte offsets into linear memory as pointers.
 */
#ifndef ONNXPLUG_WASM_COMMON_H
#define ONNXPLUG_WASM_COMMON_H

#include <stdint.h>
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

static inline float bits_to_float(uint32_t u) { union { uint32_t u; float f; } v = {u}; return v.f; }
static inline uint32_t float_to_bits(float f) { union { float f; uint32_t u; } v = {f}; return v.u; }

/* exp(x): x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), e^r by a degree-6
 * Taylor polynomial, 2^n put into the exponent bits (in two steps, so subnormals survive). */
static inline float k_expf(float x) {
    if (x != x) return x;
    if (x > 88.72283935546875f) return bits_to_float(0x7f800000u);
    if (x < -103.97208404541016f) return 0.0f;
    float n = __builtin_rintf(x * 1.4426950408889634f);
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.041666668f + r * (0.008333334f
              + r * 0.0013888889f)))));
    int e = (int)n;
    if (e < -126) {  /* split the scale: 2^(e+64) then 2^-64 */
        p *= bits_to_float((uint32_t)(e + 64 + 127) << 23);
        return p * bits_to_float((uint32_t)(-64 + 127) << 23);
    }
    if (e > 127) {
        p *= 2.0f;
        e -= 1;
    }
    return p * bits_to_float((uint32_t)(e + 127) << 23);
}

/* log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1). */
static inline float k_logf(float x) {
    if (x != x || x < 0.0f) return bits_to_float(0x7fc00000u);
    if (x == 0.0f) return -bits_to_float(0x7f800000u);
    if (x == bits_to_float(0x7f800000u)) return x;
    int e = 0;
    if (x < 1.17549435e-38f) {  /* subnormal: scale up first */
        x *= 16777216.0f;
        e = -24;
    }
    uint32_t u = float_to_bits(x);
    e += (int)((u >> 23) & 0xff) - 127;
    float m = bits_to_float((u & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m *= 0.5f;
        e += 1;
    }
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float poly = s * (2.0f + s2 * (0.6666667f + s2 * (0.4f + s2 * (0.2857143f + s2 * 0.22222222f))));
    return poly + (float)e * 0.6931471805599453f;
}

static inline float k_sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + k_expf(-x));
    float e = k_expf(x);
    return e / (1.0f + e);
}

static inline float k_tanhf(float x) {
    float a = __builtin_fabsf(x);
    float y;
    if (a < 0.0625f) {
        float x2 = x * x;
        return x * (1.0f + x2 * (-0.33333334f + x2 * (0.13333334f - x2 * 0.053968254f)));
    }
    if (a > 9.0f) {
        y = 1.0f;
    } else {
        float t = k_expf(-2.0f * a);
        y = (1.0f - t) / (1.0f + t);
    }
    return x < 0.0f ? -y : y;
}

/* erf by Abramowitz-Stegun 7.1.26 is too coarse (1e-7 absolute is needed near 0), so: a series
 * for |x| < 2 and 1 - erfc's continued-fraction-free asymptotic form (exp-based) beyond. */
static inline float k_erff(float x) {
    float a = __builtin_fabsf(x);
    float y;
    if (a < 2.0f) {
        /* Maclaurin series of erf, summed in double-like fashion in float; 20 terms reach 1e-7 at 2. */
        float x2 = a * a, term = a, sum = a;
        for (int n = 1; n < 24; n++) {
            term *= -x2 / (float)n;
            sum += term / (float)(2 * n + 1);
        }
        y = sum * 1.1283791670955126f;
    } else if (a < 4.0f) {
        /* erfc(a) = exp(-a^2) * t * poly(t), t = 1/(1+p a): W. J. Cody-style rational fit. */
        float t = 1.0f / (1.0f + 0.5f * a);
        float tau = t * k_expf(-a * a - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f
                    + t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f
                    + t * (-0.82215223f + t * 0.17087277f)))))))));
        y = 1.0f - tau;
    } else {
        y = 1.0f;
    }
    return x < 0.0f ? -y : y;
}

#endif
