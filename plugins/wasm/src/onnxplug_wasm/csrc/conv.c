/* Convolution (im2col + the blocked GEMM), pooling and inference BatchNormalization, NCHW.
 *
 * The geometry arrives as an int32 array in linear memory (see the layouts below) so one call
 * carries a whole op.  Conv writes the im2col matrix of one image and group into ``col``
 * (scratch the host allocated: (C/group)*kh*kw x OH*OW floats) and multiplies it by the
 * group's filters; a 1x1, stride-1, unpadded convolution skips im2col and reads x directly.
 */
#include "common.h"

void sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *y, int ldy);

/* p: N C H W  M kh kw  OH OW  sh sw  dh dw  top left  group */
EXPORT(conv2d)
void conv2d(const int *p, const float *x, const float *w, const float *bias, float *col, float *y) {
    int n = p[0], c = p[1], h = p[2], wd = p[3], m = p[4], kh = p[5], kw = p[6], oh = p[7], ow = p[8];
    int sh = p[9], sw = p[10], dh = p[11], dw = p[12], top = p[13], left = p[14], group = p[15];
    int cg = c / group, mg = m / group, kk = cg * kh * kw, spatial = oh * ow;
    int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && top == 0 && left == 0 && oh == h && ow == wd;
    for (int img = 0; img < n; img++) {
        for (int g = 0; g < group; g++) {
            const float *xg = x + ((long)img * c + g * cg) * h * wd;
            const float *cols = xg;
            if (!direct) {
                float *dst = col;
                for (int ci = 0; ci < cg; ci++)
                    for (int ki = 0; ki < kh; ki++)
                        for (int kj = 0; kj < kw; kj++) {
                            const float *plane = xg + ci * h * wd;
                            for (int oi = 0; oi < oh; oi++) {
                                int ii = oi * sh - top + ki * dh;
                                if (ii < 0 || ii >= h) {
                                    for (int oj = 0; oj < ow; oj++) *dst++ = 0.0f;
                                    continue;
                                }
                                const float *row = plane + ii * wd;
                                int jj = kj * dw - left;
                                for (int oj = 0; oj < ow; oj++, jj += sw) *dst++ = (jj >= 0 && jj < wd) ? row[jj] : 0.0f;
                            }
                        }
                cols = col;
            }
            float *yg = y + ((long)img * m + g * mg) * spatial;
            sgemm(mg, spatial, kk, w + (long)g * mg * kk, kk, cols, spatial, yg, spatial);
            if (bias) {
                for (int mi = 0; mi < mg; mi++) {
                    float bv = bias[g * mg + mi];
                    v128_t bb = wasm_f32x4_splat(bv);
                    float *row = yg + mi * spatial;
                    int j = 0;
                    for (; j + 4 <= spatial; j += 4) wasm_v128_store(row + j, wasm_f32x4_add(wasm_v128_load(row + j), bb));
                    for (; j < spatial; j++) row[j] += bv;
                }
            }
        }
    }
}

/* p: N*C H W  OH OW  kh kw  sh sw  dh dw  top left  count_include_pad  bottom right
 * kind 0: max, 1: average.  An average divides by the window positions inside the input, or
 * with count_include_pad by those inside the padded input [-top, H+bottom) x [-left, W+right). */
EXPORT(pool2d)
void pool2d(int kind, const int *p, const float *x, float *y) {
    int planes = p[0], h = p[1], w = p[2], oh = p[3], ow = p[4], kh = p[5], kw = p[6];
    int sh = p[7], sw = p[8], dh = p[9], dw = p[10], top = p[11], left = p[12], include_pad = p[13];
    int bottom = p[14], right = p[15];
    for (int pl = 0; pl < planes; pl++) {
        const float *plane = x + (long)pl * h * w;
        float *out = y + (long)pl * oh * ow;
        for (int oi = 0; oi < oh; oi++) {
            for (int oj = 0; oj < ow; oj++) {
                float acc = kind == 0 ? -bits_to_float(0x7f800000u) : 0.0f;
                int count = 0, padded = 0;
                for (int ki = 0; ki < kh; ki++) {
                    int ii = oi * sh - top + ki * dh;
                    for (int kj = 0; kj < kw; kj++) {
                        int jj = oj * sw - left + kj * dw;
                        if (ii >= -top && ii < h + bottom && jj >= -left && jj < w + right) padded++;
                        if (ii < 0 || ii >= h || jj < 0 || jj >= w) continue;
                        float v = plane[ii * w + jj];
                        if (kind == 0) {
                            if (v > acc || v != v) acc = v;
                        } else {
                            acc += v;
                        }
                        count++;
                    }
                }
                if (kind == 1) {
                    int divisor = include_pad ? padded : count;
                    acc = divisor > 0 ? acc / (float)divisor : 0.0f;
                }
                out[oi * ow + oj] = acc;
            }
        }
    }
}

/* y = (x - mean) / sqrt(var + eps) * scale + bias over N, C, S (S: spatial size). */
EXPORT(batchnorm)
void batchnorm(int n, int c, int s, const float *x, const float *scale, const float *bias, const float *mean,
               const float *var, float eps, float *y) {
    for (int ci = 0; ci < c; ci++) {
        float k = scale[ci] / __builtin_sqrtf(var[ci] + eps);
        float off = bias[ci] - mean[ci] * k;
        v128_t kv = wasm_f32x4_splat(k), ov = wasm_f32x4_splat(off);
        for (int img = 0; img < n; img++) {
            const float *src = x + ((long)img * c + ci) * s;
            float *dst = y + ((long)img * c + ci) * s;
            int j = 0;
            for (; j + 4 <= s; j += 4) wasm_v128_store(dst + j, wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(src + j), kv), ov));
            for (; j < s; j++) dst[j] = src[j] * k + off;
        }
    }
}
