/* Float32 matrix products for narrow linear layers (in and out features multiples of 16) on one CPU thread.
 *
 * The three products of a linear layer's forward and backward, each written straight into its output with no
 * packing of the activations and no zeroing pass first, for one layer or for several that read the same input
 * (a block's q, k and v projections; its MLP's gate and up), parts p = 0 .. P - 1:
 *   nn      C (M x N) = sum_p A_p (M x K_p) . B_p (K_p x N)   the input gradient (sum_p g_p W_p); one part: the
 *                                                              forward over a weight transposed (x W^T)
 *   nn_out  C_p (M x N_p) = A (M x K) . B_p (K x N_p)          the forward of layers on one input, each row tile of A
 *                                                              read once for every layer while it is in cache
 *   tn      C_p (N_p x K) = A_p^T . B, A_p (M x N_p), B (M x K)  the weight gradients (g_p^T x), summed over M in
 *                                                              blocks of rows, each block of B read for every part
 * Every matrix is row-major with its own row stride (elements); rows of 16 * k floats are read as vectors.
 * A register tile is MR (8) rows by 32 (or a last 16) columns: per step of the sum, one or two vectors of B, MR
 * broadcasts of A, 2 MR fused multiply-adds into sums that stay in registers for the whole sum, over every part
 * (on a Zen 4 core 8 rows ran the tiny anchor's products 1.17x faster than MKL, 6 rows 1.11x, 4 rows 0.88x, 10 rows
 * 1.17x).
 *
 * Why: at the tiny anchor's shapes (2,112 rows of 96 to 256 features) the BLAS library packs both operands and
 * zeroes the output before each product; those passes took about a fifth of the products' time in an update
 * (docs/PERFORMANCE.md). One call for the layers that share an input reads it once, and its input gradient is
 * one sum with no separate additions of the parts' gradients.
 *
 * Each call's parts come as one int64 array, FIELDS values a part (see each function).
 * Returns 0; -1 when an N (nn, nn_out) or K (tn) is not a multiple of 16, or P is not in 1 .. MAX_PARTS.
 */
#include "native_vec.h"

#define MR 8 /* rows of a register tile: 16 sums, 2 vectors of B and a broadcast in 19 registers */
#define MAX_PARTS 8

/* C rows [0, R), columns [0, 16 NB) = sum_p A_p (R x K_p) . B_p (K_p x 16 NB), A_p at row `row`, B_p at column
 * `col` */
static inline __attribute__((always_inline)) void nn_tile(const int R, const int NB, int64_t parts,
                                                          const float *const *a, const int64_t *lda,
                                                          const float *const *b, const int64_t *ldb,
                                                          const int64_t *K, int64_t row, int64_t col, float *c,
                                                          int64_t ldc) {
    v16f acc[MR][2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++) acc[r][j] = splat(0.0f);
    for (int64_t p = 0; p < parts; p++) {
        const float *ap = a[p] + row * lda[p], *bp = b[p] + col;
        const int64_t la = lda[p], lb = ldb[p];
        for (int64_t k = 0; k < K[p]; k++) {
            v16f bv[2];
            for (int j = 0; j < NB; j++) bv[j] = load16(bp + k * lb + LANES * j);
            for (int r = 0; r < R; r++) {
                const v16f x = splat(ap[r * la + k]);
                for (int j = 0; j < NB; j++) acc[r][j] += x * bv[j];
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++) store16(c + r * ldc + col + LANES * j, acc[r][j]);
}

#define NN_TILE(R, NB) nn_tile(R, NB, parts, a, lda, b, ldb, K, row, n, c, ldc)
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

/* R (<= MR) rows of C from row `row` of the A_p, every column */
static void nn_rows(const int R, int64_t parts, const float *const *a, const int64_t *lda, const float *const *b,
                    const int64_t *ldb, const int64_t *K, int64_t row, int64_t N, float *c, int64_t ldc) {
    int64_t n = 0;
    for (; n + 2 * LANES <= N; n += 2 * LANES) BY_ROWS(NN_TILE, 2)
    if (n < N) BY_ROWS(NN_TILE, 1)
}

/* A call's parts come as one array of int64, FIELDS a part (pointers as integers), so that the caller builds one
 * array a call. */
#define FIELDS 5

int pasodoble_narrow_nn(const int64_t *desc, int64_t parts, float *c, int64_t ldc, int64_t M, int64_t N) {
    /* desc per part: A_p, its row stride, B_p, its row stride, K_p */
    if (N % LANES || parts < 1 || parts > MAX_PARTS) return -1;
    const float *a[MAX_PARTS], *b[MAX_PARTS];
    int64_t lda[MAX_PARTS], ldb[MAX_PARTS], K[MAX_PARTS];
    for (int64_t p = 0; p < parts; p++) {
        const int64_t *f = desc + FIELDS * p;
        a[p] = (const float *)(intptr_t)f[0], lda[p] = f[1], b[p] = (const float *)(intptr_t)f[2], ldb[p] = f[3];
        K[p] = f[4];
    }
    int64_t m = 0;
    for (; m + MR <= M; m += MR) nn_rows(MR, parts, a, lda, b, ldb, K, m, N, c + m * ldc, ldc);
    if (m < M) nn_rows((int)(M - m), parts, a, lda, b, ldb, K, m, N, c + m * ldc, ldc);
    return 0;
}

int pasodoble_narrow_nn_out(const float *a, int64_t lda, int64_t K, const int64_t *desc, int64_t parts, int64_t M) {
    /* desc per part: B_p, its row stride, C_p, its row stride, N_p */
    if (parts < 1 || parts > MAX_PARTS) return -1;
    for (int64_t p = 0; p < parts; p++)
        if (desc[FIELDS * p + 4] % LANES) return -1;
    for (int64_t m = 0; m < M; m += MR) {
        const int R = M - m < MR ? (int)(M - m) : MR;
        for (int64_t p = 0; p < parts; p++) {
            const int64_t *f = desc + FIELDS * p;
            const float *b = (const float *)(intptr_t)f[0];
            nn_rows(R, 1, &a, &lda, &b, &f[1], &K, m, f[4], (float *)(intptr_t)f[2] + m * f[3], f[3]);
        }
    }
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

/* Rows of the A_p and B are summed `block` at a time (the block of B stays in cache while every tile of every C_p
 * reads it). */
int pasodoble_narrow_tn(const int64_t *desc, int64_t parts, const float *b, int64_t ldb, int64_t M, int64_t K,
                        int64_t block) {
    /* desc per part: A_p, its row stride, N_p, C_p, its row stride */
    if (K % LANES || parts < 1 || parts > MAX_PARTS) return -1;
    if (block < 1) block = 1;
    int64_t m0 = 0;
    do {
        const int64_t m1 = m0 + block < M ? m0 + block : M;
        const int first = m0 == 0;
        for (int64_t p = 0; p < parts; p++) {
            const int64_t *f = desc + FIELDS * p;
            const float *a = (const float *)(intptr_t)f[0];
            float *c = (float *)(intptr_t)f[3];
            const int64_t lda = f[1], N = f[2], ldc = f[4];
            for (int64_t n = 0; n < N; n += MR) {
                const int R = N - n < MR ? (int)(N - n) : MR;
                int64_t k = 0;
                for (; k + 2 * LANES <= K; k += 2 * LANES) BY_ROWS(TN_TILE, 2)
                if (k < K) BY_ROWS(TN_TILE, 1)
            }
        }
        m0 = m1;
    } while (m0 < M);
    return 0;
}
