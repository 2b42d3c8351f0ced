/* Y[M,N] = A[M,K] @ B[K,N] (row-major, leading dimensions lda/ldb/ldy), register-blocked for
 * wasm SIMD: a 4x8 block of Y lives in eight v128 accumulators while K is walked, so each
 * k step costs two loads of B, four broadcasts of A and eight multiplies and adds (plain
 * SIMD has no fused multiply-add; relaxed SIMD's would make results engine-dependent).  K is
 * cut into panels of KC, and each KC x 8 panel of B is packed once and reused by every row
 * block.  Edges (M % 4, N % 8) fall to
 * a 1x8 and a scalar loop.  One call does the whole product: a call from Python costs tens of
 * microseconds, so nothing smaller than an op crosses the boundary.
 */
#include "common.h"

#define KC 256

/* The current KC x 8 panel of B, packed row after row: the micro-kernels then read B
 * sequentially instead of at a stride of N floats (a power-of-two N otherwise maps every row
 * to the same cache sets). */
static float panel[KC * 8] __attribute__((aligned(16)));

static void block4x8(int kc, const float *a, int lda, float *y, int ldy, int first) {
    v128_t c00, c01, c10, c11, c20, c21, c30, c31;
    if (first) {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = wasm_f32x4_splat(0.0f);
    } else {
        c00 = wasm_v128_load(y); c01 = wasm_v128_load(y + 4);
        c10 = wasm_v128_load(y + ldy); c11 = wasm_v128_load(y + ldy + 4);
        c20 = wasm_v128_load(y + 2 * ldy); c21 = wasm_v128_load(y + 2 * ldy + 4);
        c30 = wasm_v128_load(y + 3 * ldy); c31 = wasm_v128_load(y + 3 * ldy + 4);
    }
    for (int k = 0; k < kc; k++) {
        v128_t b0 = wasm_v128_load(panel + 8 * k), b1 = wasm_v128_load(panel + 8 * k + 4);
        v128_t a0 = wasm_v128_load32_splat(a + k), a1 = wasm_v128_load32_splat(a + lda + k);
        v128_t a2 = wasm_v128_load32_splat(a + 2 * lda + k), a3 = wasm_v128_load32_splat(a + 3 * lda + k);
        c00 = wasm_f32x4_add(c00, wasm_f32x4_mul(a0, b0)); c01 = wasm_f32x4_add(c01, wasm_f32x4_mul(a0, b1));
        c10 = wasm_f32x4_add(c10, wasm_f32x4_mul(a1, b0)); c11 = wasm_f32x4_add(c11, wasm_f32x4_mul(a1, b1));
        c20 = wasm_f32x4_add(c20, wasm_f32x4_mul(a2, b0)); c21 = wasm_f32x4_add(c21, wasm_f32x4_mul(a2, b1));
        c30 = wasm_f32x4_add(c30, wasm_f32x4_mul(a3, b0)); c31 = wasm_f32x4_add(c31, wasm_f32x4_mul(a3, b1));
    }
    wasm_v128_store(y, c00); wasm_v128_store(y + 4, c01);
    wasm_v128_store(y + ldy, c10); wasm_v128_store(y + ldy + 4, c11);
    wasm_v128_store(y + 2 * ldy, c20); wasm_v128_store(y + 2 * ldy + 4, c21);
    wasm_v128_store(y + 3 * ldy, c30); wasm_v128_store(y + 3 * ldy + 4, c31);
}

static void block1x8(int kc, const float *a, float *y, int first) {
    v128_t c0 = first ? wasm_f32x4_splat(0.0f) : wasm_v128_load(y);
    v128_t c1 = first ? wasm_f32x4_splat(0.0f) : wasm_v128_load(y + 4);
    for (int k = 0; k < kc; k++) {
        v128_t av = wasm_v128_load32_splat(a + k);
        c0 = wasm_f32x4_add(c0, wasm_f32x4_mul(av, wasm_v128_load(panel + 8 * k)));
        c1 = wasm_f32x4_add(c1, wasm_f32x4_mul(av, wasm_v128_load(panel + 8 * k + 4)));
    }
    wasm_v128_store(y, c0);
    wasm_v128_store(y + 4, c1);
}

void sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *y, int ldy) {
    int n8 = n - n % 8, m4 = m - m % 4;
    if (k == 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) y[i * ldy + j] = 0.0f;
        return;
    }
    for (int k0 = 0; k0 < k; k0 += KC) {
        int kc = k - k0 < KC ? k - k0 : KC;
        int first = k0 == 0;
        for (int j = 0; j < n8; j += 8) {
            const float *src = b + k0 * ldb + j;
            for (int p = 0; p < kc; p++) {
                wasm_v128_store(panel + 8 * p, wasm_v128_load(src + p * ldb));
                wasm_v128_store(panel + 8 * p + 4, wasm_v128_load(src + p * ldb + 4));
            }
            int i = 0;
            for (; i < m4; i += 4) block4x8(kc, a + i * lda + k0, lda, y + i * ldy + j, ldy, first);
            for (; i < m; i++) block1x8(kc, a + i * lda + k0, y + i * ldy + j, first);
        }
        for (int i = 0; i < m; i++) {
            for (int j = n8; j < n; j++) {
                float s = first ? 0.0f : y[i * ldy + j];
                for (int p = 0; p < kc; p++) s += a[i * lda + k0 + p] * b[(k0 + p) * ldb + j];
                y[i * ldy + j] = s;
            }
        }
    }
}

/* batch products with element strides between the batch items (0: the same matrix for all). */
EXPORT(matmul)
void matmul(int batch, int m, int n, int k, const float *a, int a_stride, const float *b, int b_stride, float *y) {
    for (int i = 0; i < batch; i++) sgemm(m, n, k, a + i * a_stride, k, b + i * b_stride, n, y + i * m * n, n);
}

static inline float hsum(v128_t v) {
    return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
           (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

/* Y[M,N] = A[M,K] @ B[N,K]^T for few rows of A (a fully connected layer at small batch, B as
 * Gemm's transB=1 stores it): four dot products at a time over contiguous rows, so B is read
 * once instead of being transposed (read, written and read again) first. */
EXPORT(matmul_nt)
void matmul_nt(int m, int n, int k, const float *a, const float *b, float *y) {
    int k4 = k - k % 4;
    for (int i = 0; i < m; i++) {
        const float *row = a + (long)i * k;
        float *out = y + (long)i * n;
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            const float *b0 = b + (long)j * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
            v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0, s2 = s0, s3 = s0;
            for (int p = 0; p < k4; p += 4) {
                v128_t av = wasm_v128_load(row + p);
                s0 = wasm_f32x4_add(s0, wasm_f32x4_mul(av, wasm_v128_load(b0 + p)));
                s1 = wasm_f32x4_add(s1, wasm_f32x4_mul(av, wasm_v128_load(b1 + p)));
                s2 = wasm_f32x4_add(s2, wasm_f32x4_mul(av, wasm_v128_load(b2 + p)));
                s3 = wasm_f32x4_add(s3, wasm_f32x4_mul(av, wasm_v128_load(b3 + p)));
            }
            float t0 = hsum(s0), t1 = hsum(s1), t2 = hsum(s2), t3 = hsum(s3);
            for (int p = k4; p < k; p++) {
                t0 += row[p] * b0[p]; t1 += row[p] * b1[p]; t2 += row[p] * b2[p]; t3 += row[p] * b3[p];
            }
            out[j] = t0; out[j + 1] = t1; out[j + 2] = t2; out[j + 3] = t3;
        }
        for (; j < n; j++) {
            const float *bj = b + (long)j * k;
            v128_t s = wasm_f32x4_splat(0.0f);
            for (int p = 0; p < k4; p += 4) s = wasm_f32x4_add(s, wasm_f32x4_mul(wasm_v128_load(row + p), wasm_v128_load(bj + p)));
            float t = hsum(s);
            for (int p = k4; p < k; p++) t += row[p] * bj[p];
            out[j] = t;
        }
    }
}
