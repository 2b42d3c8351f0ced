/* An example third-party op library whose kernels run sandboxed (see manifest.json).
 * ABI (onnxplug_wasm.sandbox): f(n, inputs..., outputs...) -> status, float32 arrays of n. */
#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

/* Squareplus(x) = (x + sqrt(x^2 + 4)) / 2: a smooth ReLU. */
EXPORT(squareplus)
int squareplus(int n, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = 0.5f * (x[i] + __builtin_sqrtf(x[i] * x[i] + 4.0f));
    return 0;
}

/* SquaredDifference(a, b) = (a - b)^2. */
EXPORT(squared_difference)
int squared_difference(int n, const float *a, const float *b, float *y) {
    for (int i = 0; i < n; i++) {
        float d = a[i] - b[i];
        y[i] = d * d;
    }
    return 0;
}
