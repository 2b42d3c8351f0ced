/* Element-wise ops, activations, Softmax, LayerNormalization and the strided copy that
 * Transpose, Concat, Expand and Gemm's transposes are made of.
 *
 * Shapes and strides arrive in an int32 array: p = [ndim, shape[ndim], strides...], strides in
 * elements, 0 along broadcast axes.  The host collapses contiguous axes first, so the inner
 * loop is usually long and, for unit or zero strides, vectorised.
 */
#include "common.h"

enum { ADD, SUB, MUL, DIV, MAX, MIN, PRELU };

static inline float binop(int op, float a, float b) {
    switch (op) {
    case ADD: return a + b;
    case SUB: return a - b;
    case MUL: return a * b;
    case DIV: return a / b;
    case MAX: return (a != a || b != b) ? a + b : (a > b ? a : b);
    case MIN: return (a != a || b != b) ? a + b : (a < b ? a : b);
    default: return a < 0.0f ? a * b : a;
    }
}

static inline v128_t binop4(int op, v128_t a, v128_t b) {
    switch (op) {
    case ADD: return wasm_f32x4_add(a, b);
    case SUB: return wasm_f32x4_sub(a, b);
    case MUL: return wasm_f32x4_mul(a, b);
    case DIV: return wasm_f32x4_div(a, b);
    default: return a;  /* not used: MAX/MIN/PRELU take the scalar path (NaN rules) */
    }
}

static void binary_row(int op, int n, const float *a, int sa, const float *b, int sb, float *y) {
    int j = 0;
    if (op <= DIV) {
        if (sa == 1 && sb == 1)
            for (; j + 4 <= n; j += 4) wasm_v128_store(y + j, binop4(op, wasm_v128_load(a + j), wasm_v128_load(b + j)));
        else if (sa == 1 && sb == 0) {
            v128_t bv = wasm_f32x4_splat(b[0]);
            for (; j + 4 <= n; j += 4) wasm_v128_store(y + j, binop4(op, wasm_v128_load(a + j), bv));
        } else if (sa == 0 && sb == 1) {
            v128_t av = wasm_f32x4_splat(a[0]);
            for (; j + 4 <= n; j += 4) wasm_v128_store(y + j, binop4(op, av, wasm_v128_load(b + j)));
        }
    }
    for (; j < n; j++) y[j] = binop(op, a[j * sa], b[j * sb]);
}

/* p = [ndim, shape[ndim], a_strides[ndim], b_strides[ndim]]; y is contiguous. */
EXPORT(binary)
void binary(int op, const int *p, const float *a, const float *b, float *y) {
    int nd = p[0];
    const int *shape = p + 1, *as = p + 1 + nd, *bs = p + 1 + 2 * nd;
    int idx[8] = {0};
    int inner = shape[nd - 1];
    long rows = 1;
    for (int d = 0; d < nd - 1; d++) rows *= shape[d];
    for (long r = 0; r < rows; r++) {
        long ao = 0, bo = 0;
        for (int d = 0; d < nd - 1; d++) { ao += (long)idx[d] * as[d]; bo += (long)idx[d] * bs[d]; }
        binary_row(op, inner, a + ao, as[nd - 1], b + bo, bs[nd - 1], y + r * inner);
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* p = [ndim, shape[ndim], x_strides[ndim], y_strides[ndim]]: y viewed through its strides gets
 * x viewed through its own (a transpose, a broadcast, or one input's slot in a concatenation). */
EXPORT(copy_strided)
void copy_strided(const int *p, const float *x, float *y) {
    int nd = p[0];
    const int *shape = p + 1, *xs = p + 1 + nd, *ys = p + 1 + 2 * nd;
    int idx[8] = {0};
    int inner = shape[nd - 1], xstep = xs[nd - 1], ystep = ys[nd - 1];
    long rows = 1;
    for (int d = 0; d < nd - 1; d++) rows *= shape[d];
    for (long r = 0; r < rows; r++) {
        long xo = 0, yo = 0;
        for (int d = 0; d < nd - 1; d++) { xo += (long)idx[d] * xs[d]; yo += (long)idx[d] * ys[d]; }
        const float *src = x + xo;
        float *dst = y + yo;
        if (xstep == 1 && ystep == 1) {
            int j = 0;
            for (; j + 4 <= inner; j += 4) wasm_v128_store(dst + j, wasm_v128_load(src + j));
            for (; j < inner; j++) dst[j] = src[j];
        } else {
            for (int j = 0; j < inner; j++) dst[(long)j * ystep] = src[(long)j * xstep];
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

enum { RELU, LEAKY_RELU, SIGMOID, TANH, EXP, LOG, ABS, NEG, SQRT, RECIPROCAL, CLIP, HARD_SIGMOID, ELU,
       SOFTPLUS, ERF, GELU, HARD_SWISH, SELU, IDENTITY, AFFINE };

static inline float unop(int op, float x, float alpha, float beta) {
    switch (op) {
    case RELU: return x < 0.0f ? 0.0f : x;
    case LEAKY_RELU: return x < 0.0f ? alpha * x : x;
    case SIGMOID: return k_sigmoid(x);
    case TANH: return k_tanhf(x);
    case EXP: return k_expf(x);
    case LOG: return k_logf(x);
    case ABS: return __builtin_fabsf(x);
    case NEG: return -x;
    case SQRT: return __builtin_sqrtf(x);
    case RECIPROCAL: return 1.0f / x;
    case CLIP: {  /* min after max: with min > max every value becomes max, as ONNX says */
        if (x != x) return x;
        float v = x < alpha ? alpha : x;
        return v > beta ? beta : v;
    }
    case HARD_SIGMOID: { float v = alpha * x + beta; return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }
    case ELU: return x < 0.0f ? alpha * (k_expf(x) - 1.0f) : x;
    case SOFTPLUS: return x > 20.0f ? x : k_logf(1.0f + k_expf(x));
    case ERF: return k_erff(x);
    case GELU: return 0.5f * x * (1.0f + k_erff(x * 0.70710678118654752f));
    case HARD_SWISH: { float v = x / 6.0f + 0.5f; return x * (v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v)); }
    case SELU: return x <= 0.0f ? beta * alpha * (k_expf(x) - 1.0f) : beta * x;  /* beta: gamma */
    case AFFINE: return alpha * x + beta;
    default: return x;
    }
}

EXPORT(unary)
void unary(int op, int n, const float *x, float alpha, float beta, float *y) {
    int j = 0;
    if (op == RELU) {
        v128_t zero = wasm_f32x4_splat(0.0f);
        for (; j + 4 <= n; j += 4) wasm_v128_store(y + j, wasm_f32x4_pmax(zero, wasm_v128_load(x + j)));
    }
    for (; j < n; j++) y[j] = unop(op, x[j], alpha, beta);
}

/* Softmax / LogSoftmax over the middle axis of [outer, n, inner]. */
EXPORT(softmax)
void softmax(int outer, int n, int inner, const float *x, float *y, int log_softmax) {
    for (long o = 0; o < outer; o++) {
        for (int i = 0; i < inner; i++) {
            const float *src = x + o * n * inner + i;
            float *dst = y + o * n * inner + i;
            float mx = -bits_to_float(0x7f800000u);
            for (int j = 0; j < n; j++) if (src[j * inner] > mx) mx = src[j * inner];
            float sum = 0.0f;
            for (int j = 0; j < n; j++) {
                float e = k_expf(src[j * inner] - mx);
                sum += e;
                if (!log_softmax) dst[j * inner] = e;
            }
            if (log_softmax) {
                float lse = k_logf(sum);
                for (int j = 0; j < n; j++) dst[j * inner] = src[j * inner] - mx - lse;
            } else {
                float inv = 1.0f / sum;
                for (int j = 0; j < n; j++) dst[j * inner] *= inv;
            }
        }
    }
}

/* LayerNormalization over the last n elements of each of the outer rows; scale and bias have
 * n elements (bias may be 0); mean and inv_std (one per row) may be 0. */
EXPORT(layernorm)
void layernorm(int outer, int n, const float *x, const float *scale, const float *bias, float eps, float *y,
               float *mean_out, float *inv_out) {
    for (long o = 0; o < outer; o++) {
        const float *src = x + o * n;
        float *dst = y + o * n;
        float sum = 0.0f;
        for (int j = 0; j < n; j++) sum += src[j];
        float mean = sum / (float)n;
        float var = 0.0f;
        for (int j = 0; j < n; j++) { float d = src[j] - mean; var += d * d; }
        float inv = 1.0f / __builtin_sqrtf(var / (float)n + eps);
        for (int j = 0; j < n; j++) dst[j] = (src[j] - mean) * inv * scale[j] + (bias ? bias[j] : 0.0f);
        if (mean_out) mean_out[o] = mean;
        if (inv_out) inv_out[o] = inv;
    }
}
