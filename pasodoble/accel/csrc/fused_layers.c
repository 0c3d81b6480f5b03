/* RMSNorm, the gated MLP's SiLU(gate) * up and the rotary position embedding, forward and backward, each in one pass
 * over its rows, in float32.
 *
 * The references are transformers' RMSNorm (Llama, Qwen2, Qwen3: weight * (x * rsqrt(mean(x^2) + eps))), the gated
 * MLP's act_fn(gate_proj(x)) * up_proj(x) with act_fn SiLU, and apply_rotary_pos_emb (below). In torch each is a
 * chain of elementwise operators, every one a pass over memory with its own output (about six forward and ten
 * backward for the norm); here each is one pass forward and one backward, with nothing saved but the inputs (and the
 * norm's 1 / rms per row).
 *
 *   rms_norm forward   x (rows, dim) -> y = w * (x * r), r = 1 / sqrt(mean(x^2) + eps) per row, kept in rstd
 *   rms_norm backward  g = dy * w, xhat = x * r: dx = r * (g - xhat * mean(g * xhat)); dw += sum over rows dy * xhat
 *                      (summed in double; dw may be NULL when the weight takes no gradient); returns 0, or -2
 *                      when its scratch row could not be had
 *   silu_mul forward   out = gate * sigmoid(gate) * up
 *   silu_mul backward  s = sigmoid(gate): dup = dout * gate * s; dgate = dout * up * s * (1 + gate * (1 - s))
 *   rope               below
 * The norm's and the activation's arrays are contiguous. The activation's last block (n not a multiple of 16) goes
 * through a zero-padded block, so every element takes the same arithmetic.
 */
#include <stdlib.h>

#include "native_vec.h"

static inline v16f load_part(const float *p, int64_t n) {
    float b[LANES] = {0};
    memcpy(b, p, (size_t)n * sizeof(float));
    return load16(b);
}

static inline void store_part(float *p, v16f x, int64_t n) {
    float b[LANES];
    store16(b, x);
    memcpy(p, b, (size_t)n * sizeof(float));
}

/* x's lanes c..c+15 of a row of n, zero past n */
static inline v16f lanes(const float *x, int64_t c, int64_t n) {
    return c + LANES <= n ? load16(x + c) : load_part(x + c, n - c);
}

static inline void put(float *x, int64_t c, int64_t n, v16f v) {
    if (c + LANES <= n)
        store16(x + c, v);
    else
        store_part(x + c, v, n - c);
}

/* The norm's rows are short (a head's 24-128 values, or the hidden size): plain loops, which the compiler turns into
 * 16-lane vectors with 8-lane and scalar epilogues, beat a padded block per row. Each kernel's loops are compiled
 * once more for each width of WIDTHS, so that those rows take straight-line vector code with no loop epilogue
 * (on the tiny anchor's 24-wide heads the generic loop's bookkeeping outweighed its arithmetic). */
#define BY_WIDTH(CALL, dim)                       \
    switch (dim) {                                \
        case 24: CALL(24); break;                 \
        case 32: CALL(32); break;                 \
        case 48: CALL(48); break;                 \
        case 64: CALL(64); break;                 \
        case 96: CALL(96); break;                 \
        case 128: CALL(128); break;               \
        default: CALL(dim);                       \
    }

static inline __attribute__((always_inline)) void norm_rows(const float *restrict x, const float *restrict w,
                                                             float *restrict y, float *restrict rstd, int64_t rows,
                                                             const int64_t dim, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < dim; c++) ss += xr[c] * xr[c];
        const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
        rstd[r] = inv;
#pragma omp simd
        for (int64_t c = 0; c < dim; c++) yr[c] = w[c] * (xr[c] * inv);
    }
}

void pasodoble_rms_norm_forward_f32(const float *restrict x, const float *restrict w, float *restrict y,
                                    float *restrict rstd, int64_t rows, int64_t dim, float eps) {
#define NORM_ROWS(D) norm_rows(x, w, y, rstd, rows, D, eps)
    BY_WIDTH(NORM_ROWS, dim)
#undef NORM_ROWS
}

/* dw's sums run in float over blocks of this many rows, then join a double total */
#define DW_BLOCK 32

static inline __attribute__((always_inline)) void norm_backward_rows(
    const float *restrict x, const float *restrict w, const float *restrict rstd, const float *restrict dy,
    float *restrict dx, double *restrict dw, float *restrict part, int64_t rows, const int64_t dim) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim, *dyr = dy + r * dim;
        float *dxr = dx + r * dim;
        const float inv = rstd[r];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < dim; c++) dot += dyr[c] * w[c] * (xr[c] * inv);
        const float mean = dot / (float)dim;
#pragma omp simd
        for (int64_t c = 0; c < dim; c++) dxr[c] = (dyr[c] * w[c] - xr[c] * inv * mean) * inv;
        if (part) {
#pragma omp simd
            for (int64_t c = 0; c < dim; c++) part[c] += dyr[c] * (xr[c] * inv);
            if ((r + 1) % DW_BLOCK == 0 || r + 1 == rows) {
                for (int64_t c = 0; c < dim; c++) dw[c] += (double)part[c];
                memset(part, 0, (size_t)dim * sizeof(float));
            }
        }
    }
}

int pasodoble_rms_norm_backward_f32(const float *restrict x, const float *restrict w, const float *restrict rstd,
                                    const float *restrict dy, float *restrict dx, double *restrict dw, int64_t rows,
                                    int64_t dim) {
    float *part = dw ? calloc((size_t)dim, sizeof(float)) : NULL;
    if (dw && !part) return -2;
#define NORM_BACKWARD_ROWS(D) norm_backward_rows(x, w, rstd, dy, dx, dw, part, rows, D)
    BY_WIDTH(NORM_BACKWARD_ROWS, dim)
#undef NORM_BACKWARD_ROWS
    free(part);
    return 0;
}

/* sigmoid(g) from e^-|g| (never overflows) */
static inline v16f sigmoid16(v16f g) {
    const v16i negative = (v16i)(g < splat(0.0f));
    const v16f e = exp_nonpositive(select16(negative, g, -g)), one = splat(1.0f);
    return select16(negative, e, one) / (one + e);
}

void pasodoble_silu_mul_forward_f32(const float *gate, const float *up, float *out, int64_t n) {
    for (int64_t c = 0; c < n; c += LANES) {
        const v16f g = lanes(gate, c, n);
        put(out, c, n, g * sigmoid16(g) * lanes(up, c, n));
    }
}

void pasodoble_silu_mul_backward_f32(const float *gate, const float *up, const float *dout, float *dgate, float *dup,
                                     int64_t n) {
    const v16f one = splat(1.0f);
    for (int64_t c = 0; c < n; c += LANES) {
        const v16f g = lanes(gate, c, n), d = lanes(dout, c, n), s = sigmoid16(g);
        put(dup, c, n, d * g * s);
        put(dgate, c, n, d * lanes(up, c, n) * s * (one + g * (one - s)));
    }
}

/* Rotary position embedding of one (batch, heads, positions, dim) tensor, as transformers' apply_rotary_pos_emb
 * computes it: out = x cos + rotate_half(x) sin, rotate_half(x) = (-x[half:], x[:half]). The backward is its
 * transpose: dx = dout cos + (dout[half:] sin[half:], -dout[:half] sin[:half]).
 *   x, out     the tensors' data; strides xs, os (batch, head, position; each position's dim values contiguous)
 *   cosines, sines   (batch or 1, positions, dim) with strides cb (0: one row for every batch row) and ct */
static inline __attribute__((always_inline)) void rope_all(
    const float *x, const int64_t *xs, float *out, const int64_t *os, const float *cosines, const float *sines,
    int64_t cb, int64_t ct, int64_t batch, int64_t heads, int64_t positions, const int64_t half, int backward) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < positions; t++) {
            const float *c = cosines + b * cb + t * ct, *s = sines + b * cb + t * ct;
            for (int64_t h = 0; h < heads; h++) {
                const float *restrict xi = x + b * xs[0] + h * xs[1] + t * xs[2];
                float *restrict o = out + b * os[0] + h * os[1] + t * os[2];
                if (backward) {
#pragma omp simd
                    for (int64_t d = 0; d < half; d++) {
                        o[d] = xi[d] * c[d] + xi[d + half] * s[d + half];
                        o[d + half] = xi[d + half] * c[d + half] - xi[d] * s[d];
                    }
                } else {
#pragma omp simd
                    for (int64_t d = 0; d < half; d++) {
                        o[d] = xi[d] * c[d] - xi[d + half] * s[d];
                        o[d + half] = xi[d + half] * c[d + half] + xi[d] * s[d + half];
                    }
                }
            }
        }
}

void pasodoble_rope_f32(const float *x, const int64_t *xs, float *out, const int64_t *os, const float *cosines,
                        const float *sines, int64_t cb, int64_t ct, int64_t batch, int64_t heads, int64_t positions,
                        int64_t dim, int backward) {
#define ROPE_ALL(D) rope_all(x, xs, out, os, cosines, sines, cb, ct, batch, heads, positions, (D) / 2, backward)
    BY_WIDTH(ROPE_ALL, dim)
#undef ROPE_ALL
}
