/* One decode step's attention over a prompt's shared columns and a row's own, in one pass per row and head.
 *
 * The reference is update/prefix_attention.py's tensor_decode_attention (two partial softmaxes merged by their
 * log-sum-exp, about twenty tensor operations a layer); this computes the same softmax(q k^T * scale) v over the
 * concatenated columns, float32 throughout. Rows are visited in the caller's order: rows of one prompt are adjacent
 * in the decode batch, so a prompt's shared keys and values stay in cache across its samples.
 *
 * A `Part` is one side's keys and values: element (row or prompt n, head h, column c, dim d) of the keys at
 * n * k_row + h * k_head + c * k_col + d * k_dim, of the values at n * v_row + h * v_head + c * v_col + d (each
 * column's values contiguous). Keys stored by column (k_col == 1, as accel/decode_kernel.py lays out the caches it
 * serves) take the fast path: the scores of a head's queries accumulate one dimension at a time over contiguous
 * columns, with no horizontal sums. Other layouts take one dot product per column.
 *   q, out      (rows, kv, group, dim), contiguous
 *   mask        (rows or prompts, cols) bytes, nonzero: attend; NULL: every column
 *   prompt_of   (rows,) the prompt each row continues
 *   scratch     at least group * (pre.cols rounded up to a multiple of 16 + own.cols rounded up) floats
 * Returns 0, or -1 when dim or group exceeds the kernel's limits (the caller then takes the tensor path).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "native_vec.h"

#define MAX_DIM 256
#define MAX_GROUP 16

typedef struct {
    const float *k, *v;
    const uint8_t *mask;
    int64_t k_row, k_head, k_col, k_dim, v_row, v_head, v_col, cols;
} Part;

/* Softmax weights in place over s[0, padded) (padding columns hold -inf): returns their sum; 0 when no column is
 * attended (every weight is then 0). */
static float softmax_weights(float *s, int64_t padded) {
    v16f top = splat(-INFINITY);
    for (int64_t c = 0; c < padded; c += LANES) {
        const v16f x = load16(s + c);
        top = select16(x > top, x, top);
    }
    const float m = max16(top);
    if (m == -INFINITY) {
        for (int64_t c = 0; c < padded; c++) s[c] = 0.0f;
        return 0.0f;
    }
    const v16f mv = splat(m), none = splat(-INFINITY), zero = splat(0.0f);
    v16f total = zero;
    for (int64_t c = 0; c < padded; c += LANES) {
        const v16f x = load16(s + c);
        const v16f w = select16(x == none, zero, exp_nonpositive(x - mv));
        store16(s + c, w);
        total += w;
    }
    return sum16(total);
}

/* Scores of G queries over one part's columns, keys stored by column (k_col == 1): 16 columns at a time, the G
 * queries' sums in registers over the head's dimensions. Rows s + i * n get columns [0, cols rounded up to 16);
 * columns past `cols` are read only where `k_dim` (each dimension's row of columns) holds them, and are
 * overwritten by the caller. */
static inline __attribute__((always_inline)) void scores_by_column(const int G, const float *q, int64_t dim,
                                                                   const float *keys, int64_t k_dim,
                                                                   int64_t cols, float scale, float *s,
                                                                   int64_t n) {
    int64_t c0 = 0;
    /* two blocks at a time where both are readable: 2 G independent sums hide the FMA's latency */
    for (; c0 + LANES < cols && c0 + 2 * LANES <= k_dim; c0 += 2 * LANES) {
        v16f a[4], b[4];
        two_blocks(G, q, dim, keys + c0, k_dim, a, b);
        for (int i = 0; i < G; i++) {
            store16(s + i * n + c0, a[i] * splat(scale));
            store16(s + i * n + c0 + LANES, b[i] * splat(scale));
        }
    }
    for (; c0 < cols; c0 += LANES) {
        v16f acc[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};
        if (c0 + LANES <= k_dim) {
            for (int64_t d = 0; d < dim; d++) {
                const v16f k = load16(keys + d * k_dim + c0);
                for (int i = 0; i < G; i++) acc[i] += splat(q[i * dim + d]) * k;
            }
        } else { /* the last columns of a row that ends before a whole block */
            float tail[LANES] = {0};
            const int64_t left = cols - c0;
            for (int64_t d = 0; d < dim; d++) {
                memcpy(tail, keys + d * k_dim + c0, (size_t)left * sizeof(float));
                const v16f k = load16(tail);
                for (int i = 0; i < G; i++) acc[i] += splat(q[i * dim + d]) * k;
            }
        }
        for (int i = 0; i < G; i++) store16(s + i * n + c0, acc[i] * splat(scale));
    }
}

/* Rows s + i * n, columns [0, cols rounded up to 16): q_i . keys[c] * scale where attended, -inf elsewhere. */
static void scores_of(const float *q, int64_t group, int64_t dim, const Part *part, const float *keys,
                      const uint8_t *mask, float scale, float *s, int64_t n) {
    const int64_t cols = part->cols, padded = (cols + LANES - 1) / LANES * LANES;
    if (part->k_col == 1) {
        for (int64_t i0 = 0; i0 < group; i0 += 4) { /* four queries at a time: constant counts, registers */
            const float *qi = q + i0 * dim;
            float *si = s + i0 * n;
            switch (group - i0 < 4 ? group - i0 : 4) {
                case 1: scores_by_column(1, qi, dim, keys, part->k_dim, cols, scale, si, n); break;
                case 2: scores_by_column(2, qi, dim, keys, part->k_dim, cols, scale, si, n); break;
                case 3: scores_by_column(3, qi, dim, keys, part->k_dim, cols, scale, si, n); break;
                default: scores_by_column(4, qi, dim, keys, part->k_dim, cols, scale, si, n);
            }
        }
    } else {
        for (int64_t c = 0; c < cols; c++) {
            const float *k = keys + c * part->k_col;
            for (int64_t i = 0; i < group; i++) {
                const float *qi = q + i * dim;
                float acc = 0.0f;
                for (int64_t d = 0; d < dim; d++) acc += qi[d] * k[d * part->k_dim];
                s[i * n + c] = acc * scale;
            }
        }
    }
    for (int64_t i = 0; i < group; i++) {
        float *si = s + i * n;
        if (mask)
            for (int64_t c = 0; c < cols; c++) si[c] = mask[c] ? si[c] : -INFINITY;
        for (int64_t c = cols; c < padded; c++) si[c] = -INFINITY;
    }
}

/* acc[i][0, dim) += sum_c w[i * n + c] * values[c] for G queries, 16 and then 8 dimensions at a time (dim a
 * multiple of 8), the sums in registers over the columns. */
static inline __attribute__((always_inline)) void mix_chunks(const int G, const float *values, int64_t v_col,
                                                             int64_t cols, int64_t dim, const float *w,
                                                             int64_t n, float *acc) {
    int64_t j0 = 0;
    for (; j0 + LANES <= dim; j0 += LANES) { /* even and odd columns in separate sums: 2 G chains */
        v16f a[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};
        v16f b[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};
        int64_t c = 0;
        for (; c + 1 < cols; c += 2) {
            const v16f v = load16(values + c * v_col + j0), u = load16(values + (c + 1) * v_col + j0);
            for (int i = 0; i < G; i++) {
                a[i] += splat(w[i * n + c]) * v;
                b[i] += splat(w[i * n + c + 1]) * u;
            }
        }
        if (c < cols) {
            const v16f v = load16(values + c * v_col + j0);
            for (int i = 0; i < G; i++) a[i] += splat(w[i * n + c]) * v;
        }
        for (int i = 0; i < G; i++) store16(acc + i * dim + j0, load16(acc + i * dim + j0) + a[i] + b[i]);
    }
    if (j0 < dim) {
        v8f a[4] = {{0}, {0}, {0}, {0}};
        v8f b[4] = {{0}, {0}, {0}, {0}};
        int64_t c = 0;
        for (; c + 1 < cols; c += 2) {
            const v8f v = load8(values + c * v_col + j0), u = load8(values + (c + 1) * v_col + j0);
            for (int i = 0; i < G; i++) {
                const float x = w[i * n + c], y = w[i * n + c + 1];
                a[i] += (v8f){x, x, x, x, x, x, x, x} * v;
                b[i] += (v8f){y, y, y, y, y, y, y, y} * u;
            }
        }
        if (c < cols) {
            const v8f v = load8(values + c * v_col + j0);
            for (int i = 0; i < G; i++) {
                const float x = w[i * n + c];
                a[i] += (v8f){x, x, x, x, x, x, x, x} * v;
            }
        }
        for (int i = 0; i < G; i++) store8(acc + i * dim + j0, load8(acc + i * dim + j0) + a[i] + b[i]);
    }
}

/* acc_i += sum_c weights[i * n + c] * values[c] for each query i of the group. */
static void mix_values(int64_t group, int64_t dim, const float *values, int64_t cols, int64_t v_col,
                       const float *weights, int64_t n, float *acc) {
    if (dim % 8 == 0) {
        for (int64_t i0 = 0; i0 < group; i0 += 4) {
            const float *w = weights + i0 * n;
            float *a = acc + i0 * dim;
            switch (group - i0 < 4 ? group - i0 : 4) {
                case 1: mix_chunks(1, values, v_col, cols, dim, w, n, a); break;
                case 2: mix_chunks(2, values, v_col, cols, dim, w, n, a); break;
                case 3: mix_chunks(3, values, v_col, cols, dim, w, n, a); break;
                default: mix_chunks(4, values, v_col, cols, dim, w, n, a);
            }
        }
        return;
    }
    for (int64_t i = 0; i < group; i++) {
        for (int64_t c = 0; c < cols; c++) {
            const float x = weights[i * n + c];
            const float *v = values + c * v_col;
            for (int64_t d = 0; d < dim; d++) acc[i * dim + d] += x * v[d];
        }
    }
}

static int attend(const float *q, float *out, int64_t rows, int64_t kv, int64_t group, int64_t dim,
                  float scale_factor, const Part *own, const Part *pre, const int64_t *prompt_of, float *scratch) {
    if (dim > MAX_DIM || group > MAX_GROUP) return -1;
    /* a score row: the prompt's columns, then the row's own, each padded to a multiple of 16 with -inf */
    const int64_t pre_padded = (pre->cols + LANES - 1) / LANES * LANES;
    const int64_t n = pre_padded + (own->cols + LANES - 1) / LANES * LANES;
    float acc[MAX_GROUP * MAX_DIM];
    float total[MAX_GROUP];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t u = prompt_of[r];
        const uint8_t *pm = pre->mask ? pre->mask + u * pre->cols : 0;
        const uint8_t *om = own->mask ? own->mask + r * own->cols : 0;
        for (int64_t h = 0; h < kv; h++) {
            const float *qh = q + (r * kv + h) * group * dim;
            if (own->k_col == 1) { /* the next head's first key blocks: one line per dimension, far apart */
                const int64_t nr = h + 1 < kv ? r : r + 1, nh = h + 1 < kv ? h + 1 : 0;
                if (nr < rows)
                    for (int64_t d = 0; d < dim; d++)
                        __builtin_prefetch(own->k + nr * own->k_row + nh * own->k_head + d * own->k_dim);
            }
            scores_of(qh, group, dim, pre, pre->k + u * pre->k_row + h * pre->k_head, pm, scale_factor, scratch, n);
            scores_of(qh, group, dim, own, own->k + r * own->k_row + h * own->k_head, om, scale_factor,
                      scratch + pre_padded, n);
            for (int64_t i = 0; i < group; i++) total[i] = softmax_weights(scratch + i * n, n);
            for (int64_t d = 0; d < group * dim; d++) acc[d] = 0.0f;
            mix_values(group, dim, pre->v + u * pre->v_row + h * pre->v_head, pre->cols, pre->v_col, scratch, n,
                       acc);
            mix_values(group, dim, own->v + r * own->v_row + h * own->v_head, own->cols, own->v_col,
                       scratch + pre_padded, n, acc);
            float *o = out + (r * kv + h) * group * dim;
            for (int64_t i = 0; i < group; i++) {
                const float inv = total[i] > 0.0f ? 1.0f / total[i] : 0.0f;
                for (int64_t d = 0; d < dim; d++) o[i * dim + d] = acc[i * dim + d] * inv;
            }
        }
    }
    return 0;
}

/* The entry point, called through ctypes by accel/decode_kernel.py: `own` and `pre` point to `Part`s, which its
 * `_Part` mirrors field for field. */
int pasodoble_prefix_decode_f32(const float *q, float *out, int64_t rows, int64_t kv, int64_t group, int64_t dim,
                                float scale_factor, const int64_t *prompt_of, float *scratch, const Part *own,
                                const Part *pre) {
    return attend(q, out, rows, kv, group, dim, scale_factor, own, pre, prompt_of, scratch);
}
