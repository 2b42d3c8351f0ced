/* Kernels that misbehave on purpose: the sandbox must stop each with a clear error. */
#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

/* Never returns. */
EXPORT(spin)
int spin(int n, const float *x, float *y) {
    volatile int forever = 1;
    while (forever) y[0] = x[0];
    return 0;
}

/* Writes far past the end of its memory. */
EXPORT(scribble)
int scribble(int n, const float *x, float *y) {
    float *far = (float *)0x7ff00000;
    for (int i = 0; i < n; i++) far[i * 1024] = x[i];
    return 0;
}

/* Asks for 3 GiB more memory, ignores the refusal and writes there. */
EXPORT(hog)
int hog(int n, const float *x, float *y) {
    int old_pages = __builtin_wasm_memory_grow(0, 49152);
    float *block = (float *)(old_pages < 0 ? 0x80000000u : (unsigned)old_pages * 65536u);
    for (int i = 0; i < 49152 * 16384; i += 16384) block[i] = x[0];
    y[0] = x[0];
    return 0;
}

/* Reports failure. */
EXPORT(refuse)
int refuse(int n, const float *x, float *y) { return 7; }
