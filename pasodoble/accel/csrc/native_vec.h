/* Vector helpers shared by the project's compiled kernels (decode_kernel.c, train_attention.c): GCC and Clang
 * vector types, unaligned loads and stores, and an exponential for non-positive arguments. */
#ifndef PASODOBLE_NATIVE_VEC_H
#define PASODOBLE_NATIVE_VEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Sixteen floats as one value: GCC and Clang lower it to the widest vectors the CPU has (AVX-512: one register). */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define LANES 16

static inline v16f load16(const float *p) {
    v16f x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void store16(float *p, v16f x) { memcpy(p, &x, sizeof x); }

static inline v16f splat(float x) { return (v16f){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

/* a where keep is all ones, else b */
static inline v16f select16(v16i keep, v16f a, v16f b) { return (v16f)(((v16i)a & keep) | ((v16i)b & ~keep)); }

/* e^x for x <= 0: 2^(x log2 e) split into an integer power, rounded with the 1.5 * 2^23 trick, and a degree-6
 * polynomial on [-0.5, 0.5] (relative error about 2e-7). */
static inline v16f exp_nonpositive(v16f x) {
    const v16f floor_ = splat(-87.0f), magic = splat(12582912.0f);
    x = select16(x < floor_, floor_, x);
    const v16f t = x * splat(1.44269504088896341f);
    const v16f shifted = t + magic;
    const v16f n = shifted - magic;
    const v16f f = t - n;
    v16f p = splat(1.535336188319500e-4f);
    p = p * f + splat(1.339887440266574e-3f);
    p = p * f + splat(9.618437357674640e-3f);
    p = p * f + splat(5.550332471162809e-2f);
    p = p * f + splat(2.402264791363012e-1f);
    p = p * f + splat(6.931472028550421e-1f);
    p = p * f + splat(1.0f);
    /* `shifted`'s bits are magic's plus n (|t| < 2^22), so their difference is n, 2^n's exponent field */
    const v16i power = ((v16i)shifted - (v16i)magic + 127) << 23;
    return p * (v16f)power;
}

static inline float sum16(v16f x) {
    float out = 0.0f;
    for (int k = 0; k < LANES; k++) out += x[k];
    return out;
}

static inline float max16(v16f x) {
    float out = x[0];
    for (int k = 1; k < LANES; k++) out = x[k] > out ? x[k] : out;
    return out;
}

typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float *p) {
    v8f x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void store8(float *p, v8f x) { memcpy(p, &x, sizeof x); }

static inline v8f splat8(float x) { return (v8f){x, x, x, x, x, x, x, x}; }

/* Scores of G rows (G <= 4) over two blocks of 16 columns: x[i] (columns c..c+15) and y[i] (c+16..c+31) are
 * sum_d a[i * dim + d] t[d * t_row + c ...], with t at column c. 2 G independent sums hide the FMA's latency. */
static inline __attribute__((always_inline)) void two_blocks(const int G, const float *a, int64_t dim,
                                                             const float *t, int64_t t_row, v16f *x, v16f *y) {
    for (int i = 0; i < G; i++) x[i] = y[i] = splat(0.0f);
    for (int64_t d = 0; d < dim; d++) {
        const v16f k = load16(t + d * t_row), l = load16(t + d * t_row + LANES);
        for (int i = 0; i < G; i++) {
            const v16f q = splat(a[i * dim + d]);
            x[i] += q * k;
            y[i] += q * l;
        }
    }
}

#endif
