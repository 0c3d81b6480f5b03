/* Float32 matrix products for narrow linear layers (in and out features multiples of 16) on one CPU thread.
 *
 * The three products of a linear layer's forward and backward, each written straight into its output with no
 * packing of the activations and no zeroing pass first:
 *   nn   C (M x N) = A (M x K) . B (K x N)      the forward over the weight transposed (x W^T, W^T kept by the
 *                                               caller), and the input gradient (g W)
 *   tn   C (N x K) = A^T . B, A (M x N), B (M x K)  the weight gradient (g^T x), summed over M in blocks of rows
 * Every matrix is row-major with its own row stride (elements); rows of 16 * k floats are read as vectors.
 * A register tile is MR (8) rows by 32 (or a last 16) columns: per step of the sum, one or two vectors of B, MR
 * broadcasts of A, 2 MR fused multiply-adds into sums that stay in registers for the whole sum (on a Zen 4 core 8
 * rows ran the tiny anchor's products 1.17x faster than MKL, 6 rows 1.11x, 4 rows 0.88x, 10 rows 1.17x).
 *
 * Why: at the tiny anchor's shapes (2,112 rows of 96 to 256 features) the BLAS library packs both operands and
 * zeroes the output before each product; those passes took about a fifth of the products' time in an update
 * (docs/PERFORMANCE.md).
 *
 * Returns 0; -1 when N (nn) or K (tn) is not a multiple of 16.
 */
#include "native_vec.h"

#define MR 8 /* rows of a register tile: 16 sums, 2 vectors of B and a broadcast in 19 registers */

/* C rows [0, R), columns [0, 16 NB) = A (R x K) . B (K x 16 NB) */
static inline __attribute__((always_inline)) void nn_tile(const int R, const int NB, const float *a, int64_t lda,
                                                          const float *b, int64_t ldb, int64_t K, float *c,
                                                          int64_t ldc) {
    v16f acc[MR][2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++) acc[r][j] = splat(0.0f);
    for (int64_t k = 0; k < K; k++) {
        v16f bv[2];
        for (int j = 0; j < NB; j++) bv[j] = load16(b + k * ldb + LANES * j);
        for (int r = 0; r < R; r++) {
            const v16f x = splat(a[r * lda + k]);
            for (int j = 0; j < NB; j++) acc[r][j] += x * bv[j];
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++) store16(c + r * ldc + LANES * j, acc[r][j]);
}

#define NN_TILE(R, NB) nn_tile(R, NB, a, lda, b + n, ldb, K, c + n, ldc)
#define BY_ROWS(CASE, NB) \
    switch (R) {          \
        case 8: CASE(8, NB); break; \
        case 7: CASE(7, NB); break; \
        case 6: CASE(6, NB); break; \
        case 5: CASE(5, NB); break; \
        case 4: CASE(4, NB); break; \
        case 3: CASE(3, NB); break; \
        case 2: CASE(2, NB); break; \
        default: CASE(1, NB);       \
    }

/* R (<= MR) rows of C, every column */
static void nn_rows(const int R, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t K, int64_t N,
                    float *c, int64_t ldc) {
    int64_t n = 0;
    for (; n + 2 * LANES <= N; n += 2 * LANES) BY_ROWS(NN_TILE, 2)
    if (n < N) BY_ROWS(NN_TILE, 1)
}

int pasodoble_narrow_nn(const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int64_t M,
                        int64_t K, int64_t N) {
    if (N % LANES) return -1;
    int64_t m = 0;
    for (; m + MR <= M; m += MR) nn_rows(MR, a + m * lda, lda, b, ldb, K, N, c + m * ldc, ldc);
    if (m < M) nn_rows((int)(M - m), a + m * lda, lda, b, ldb, K, N, c + m * ldc, ldc);
    return 0;
}

/* C rows [0, R), columns [0, 16 KB) (+)= sum over rows m in [m0, m1) of A[m, 0..R) (x) B[m, 0..16 KB) */
static inline __attribute__((always_inline)) void tn_tile(const int R, const int KB, const float *a, int64_t lda,
                                                          const float *b, int64_t ldb, int64_t m0, int64_t m1,
                                                          float *c, int64_t ldc, int first) {
    v16f acc[MR][2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < KB; j++) acc[r][j] = first ? splat(0.0f) : load16(c + r * ldc + LANES * j);
    for (int64_t m = m0; m < m1; m++) {
        v16f bv[2];
        for (int j = 0; j < KB; j++) bv[j] = load16(b + m * ldb + LANES * j);
        for (int r = 0; r < R; r++) {
            const v16f x = splat(a[m * lda + r]);
            for (int j = 0; j < KB; j++) acc[r][j] += x * bv[j];
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < KB; j++) store16(c + r * ldc + LANES * j, acc[r][j]);
}

#define TN_TILE(R, KB) tn_tile(R, KB, a + n, lda, b + k, ldb, m0, m1, c + n * ldc + k, ldc, first)

/* Rows of A and B are summed `block` at a time (both blocks stay in cache while every tile of C reads them). */
int pasodoble_narrow_tn(const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, int64_t M,
                        int64_t N, int64_t K, int64_t block) {
    if (K % LANES) return -1;
    if (block < 1) block = 1;
    int64_t m0 = 0;
    do {
        const int64_t m1 = m0 + block < M ? m0 + block : M;
        const int first = m0 == 0;
        for (int64_t n = 0; n < N; n += MR) {
            const int R = N - n < MR ? (int)(N - n) : MR;
            int64_t k = 0;
            for (; k + 2 * LANES <= K; k += 2 * LANES) BY_ROWS(TN_TILE, 2)
            if (k < K) BY_ROWS(TN_TILE, 1)
        }
        m0 = m1;
    } while (m0 < M);
    return 0;
}
