/* One entry point for the host: ``dispatch()`` takes no parameters and reads the kernel number
 * and its arguments from ``kernel_args`` (int32 slots; float arguments stored as their bits).
 *
 * Why: wasmtime's Python binding converts each call argument in Python, about 15-20 us apiece,
 * so a conv2d call with six arguments cost more than a small convolution.  Writing the
 * arguments into linear memory through a numpy view costs about a microsecond, and a call with
 * no parameters is the cheapest there is.  The typed exports stay for hosts with cheap calls
 * (Node, browsers), which the portability check uses.
 */
#include "common.h"

void matmul(int batch, int m, int n, int k, const float *a, int a_stride, const float *b, int b_stride, float *y);
void matmul_nt(int m, int n, int k, const float *a, const float *b, float *y);
void conv2d(const int *p, const float *x, const float *w, const float *bias, float *col, float *y);
void pool2d(int kind, const int *p, const float *x, float *y);
void batchnorm(int n, int c, int s, const float *x, const float *scale, const float *bias, const float *mean,
               const float *var, float eps, float *y);
void binary(int op, const int *p, const float *a, const float *b, float *y);
void copy_strided(const int *p, const float *x, float *y);
void unary(int op, int n, const float *x, float alpha, float beta, float *y);
void softmax(int outer, int n, int inner, const float *x, float *y, int log_softmax);
void layernorm(int outer, int n, const float *x, const float *scale, const float *bias, float eps, float *y,
               float *mean_out, float *inv_out);

__attribute__((export_name("kernel_args_ptr"))) int kernel_args_ptr(void);

static int kernel_args[16];

int kernel_args_ptr(void) { return (int)(long)kernel_args; }

#define P(i) ((void *)(long)kernel_args[i])
#define I(i) (kernel_args[i])
#define F(i) (bits_to_float((uint32_t)kernel_args[i]))

enum { K_MATMUL, K_CONV2D, K_POOL2D, K_BATCHNORM, K_BINARY, K_COPY, K_UNARY, K_SOFTMAX, K_LAYERNORM, K_MATMUL_NT };

EXPORT(dispatch)
int dispatch(void) {
    switch (I(0)) {
    case K_MATMUL: matmul(I(1), I(2), I(3), I(4), P(5), I(6), P(7), I(8), P(9)); return 0;
    case K_CONV2D: conv2d(P(1), P(2), P(3), P(4), P(5), P(6)); return 0;
    case K_POOL2D: pool2d(I(1), P(2), P(3), P(4)); return 0;
    case K_BATCHNORM: batchnorm(I(1), I(2), I(3), P(4), P(5), P(6), P(7), P(8), F(9), P(10)); return 0;
    case K_BINARY: binary(I(1), P(2), P(3), P(4), P(5)); return 0;
    case K_COPY: copy_strided(P(1), P(2), P(3)); return 0;
    case K_UNARY: unary(I(1), I(2), P(3), F(4), F(5), P(6)); return 0;
    case K_SOFTMAX: softmax(I(1), I(2), I(3), P(4), P(5), I(6)); return 0;
    case K_MATMUL_NT: matmul_nt(I(1), I(2), I(3), P(4), P(5), P(6)); return 0;
    case K_LAYERNORM: layernorm(I(1), I(2), P(3), P(4), P(5), F(6), P(7), P(8), P(9)); return 0;
    default: return -1;
    }
}
