/* Attention's forward and backward for the update on a CPU, each query over one or two runs of keys.
 *
 * The reference is torch.nn.functional.scaled_dot_product_attention with a boolean mask (or the causal flag) and
 * grouped key/value heads; this computes the same softmax(q k^T * scale) v, and the gradients of q, k and v, in
 * float32. Every query row i of batch row b attends the keys [lo, hi) of its span but those of a gap [gap_lo, gap_hi)
 * inside it (empty where gap_lo >= gap_hi), and no other: one or two runs of keys. The update's masks
 * (a prompt's columns past its padding, then the sample's own columns up to the query) are all of that form, and
 * accel/train_attention.py checks it before it calls here, as are a packed row's (a completion's columns read its
 * prompt and themselves, not the samples between). The work follows the spans: a causal block costs half a full
 * one, and the 16-column blocks inside the gaps of all eight rows of a tile are skipped, where SDPA's CPU kernel
 * visits every masked column.
 *
 * Per batch row, once: its spans and its tile table (each tile of eight query rows: the 16-column blocks its spans
 * cover, and the hole inside them that none of its rows attends). Its tiles fall into chunks: where the tiles'
 * columns run in ascending order, the runs of tiles that start at the same column (the groups of a packed row, whose
 * queries read no key before their own group's first); else one chunk. While a chunk's planes (below) fit in
 * `whole_floats`, or the row's do, the row's queries times scale (and in the backward the output gradient and
 * dO . O) over every head, and its keys (and values) by column over every key/value head, are read once, position by
 * position, each position's heads together, and the chunks run one after another, each over every head, so that a
 * chunk's planes and weights stay in cache; past it one head (key/value head) at a time over the whole row. Keys and
 * values by column lie in panels of 16 columns (dim x 16 floats each), so that a block's columns are together however
 * long the row. Per head, eight query rows at a time (on the tiny anchor's update 6% less attention time than four):
 *   forward   scores of the tile over the 16-column blocks its spans cover, a softmax per row, the values mixed in
 *             registers; the output and each row's log-sum-exp (the backward's softmax without a second max);
 *   backward  the same scores, P = exp(s - lse), dP = dO v^T, dS = P (dP - dO . O), dq = scale dS k, each tile's
 *             weights kept at its own columns only; then for every eight key columns of the chunk,
 *             dk += dS^T (q scale) and dv += P^T dO over the chunk's rows whose blocks cover them.
 * Layouts (elements; each position's `dim` values contiguous):
 *   q          View (batch, heads, queries, dim)          k, v   View (batch, kv_heads, keys, dim)
 *   out, dout, dq  (batch, queries, heads, dim) contiguous  lse   (batch, heads, queries)
 *   dk, dv     (batch, kv_heads, keys, dim) contiguous, overwritten
 *   lo, hi, gap_lo, gap_hi   int32 (batch or 1, queries): batch row b's span and gap at b * span_b + i
 * Returns 0; -1 when dim is not a multiple of 8 or exceeds 256, or heads are not a multiple of kv_heads (the caller
 * then keeps SDPA); -2 when scratch memory could not be had.
 */
#include <stdlib.h>

#include "native_vec.h"

#define MAX_DIM 256
#define TILE 8 /* query rows per tile */
#define MIX_CHUNKS 3 /* chunks of 8 dimensions per pass of `mix`: TILE x MIX_CHUNKS sums in registers */

typedef struct {
    const float *p;
    int64_t b, h, i; /* strides of the batch row, the head and the position */
} View;

typedef struct {
    int64_t batch, heads, kv_heads, queries, keys, dim;
    float scale;
    const int32_t *lo, *hi, *gap_lo, *gap_hi;
    int64_t span_b; /* stride of the spans over batch rows (0: one span row for all) */
    int64_t whole_floats; /* a batch row's heads are read at once while their planes fit in this many floats */
} Shape;

typedef struct { /* one call's scratch, sized for its shape */
    int64_t n;        /* a score row: keys rounded up to 16 */
    int64_t rows;     /* queries rounded up to TILE */
    float *kt, *vt;   /* (kv_heads, dim, n) the batch row's keys and values by column (one head's: the first) */
    float *qs, *go;   /* (heads, rows, dim) the batch row's queries times scale; their output gradient */
    float *s, *w;     /* scores, then weights; dP, then dS: the forward's one tile at stride n, the backward's
                       * every tile's rows at toff, stride tld (the tile's columns only) */
    int64_t *lo, *hi, *glo, *ghi; /* (rows,) the spans and their gaps; padding rows empty */
    int64_t *wlo, *whi; /* (rows,) the columns the row's tile wrote in s and w */
    int64_t *wglo, *wghi; /* (rows,) the hole in them its tile skipped (wglo == whi: none) */
    int64_t *toff, *tld; /* (rows,) at a tile's first row: where column c of its row r lies in s and w,
                          * toff + r * tld + c */
    float *delta;     /* (heads, rows) dO . O */
} Scratch;

static void *grab(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

static int scratch_of(const Shape *sh, Scratch *x) {
    x->n = (sh->keys + LANES - 1) / LANES * LANES;
    x->rows = (sh->queries + TILE - 1) / TILE * TILE;
    const size_t f = sizeof(float), e = sizeof(int64_t);
    const int64_t heads = sh->heads, kv_heads = sh->kv_heads; /* room for every head: `whole_row` */
    x->kt = grab(kv_heads * sh->dim * x->n * f);
    x->vt = grab(kv_heads * sh->dim * x->n * f);
    x->qs = grab(heads * x->rows * sh->dim * f);
    x->go = grab(heads * x->rows * sh->dim * f);
    x->s = grab((x->rows + 1) * x->n * f); /* the tiles' columns (at most n each), and n in front: toff >= 0 */
    x->w = grab((x->rows + 1) * x->n * f);
    x->lo = grab(x->rows * e);
    x->hi = grab(x->rows * e);
    x->glo = grab(x->rows * e);
    x->ghi = grab(x->rows * e);
    x->wlo = grab(x->rows * e);
    x->whi = grab(x->rows * e);
    x->wglo = grab(x->rows * e);
    x->wghi = grab(x->rows * e);
    x->toff = grab(x->rows * e);
    x->tld = grab(x->rows * e);
    x->delta = grab(heads * x->rows * f);
    const int all = x->kt && x->vt && x->qs && x->go && x->s && x->w && x->lo && x->hi && x->glo && x->ghi &&
                    x->wlo && x->whi && x->wglo && x->wghi && x->toff && x->tld && x->delta;
    return all ? 0 : -2;
}

static void scratch_free(Scratch *x) {
    void *all[] = {x->kt,  x->vt,   x->qs,   x->go,   x->s,    x->w,    x->lo,  x->hi, x->glo,
                   x->ghi, x->wlo,  x->whi,  x->wglo, x->wghi, x->toff, x->tld, x->delta};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) free(all[k]);
}

/* Column block c (a multiple of 16) of a head's keys or values by column: its (dim, 16) panel. */
static inline const float *panel(const float *t, int64_t dim, int64_t c) { return t + c * dim; }

/* Key/value heads [g0, g1) of batch row b of `x` (keys or values) by column, (g1 - g0) x n / 16 panels of (dim, 16)
 * (`panel`: a block's columns lie together, however long the row); columns past the keys are 0. Position by
 * position, so that the reads run along memory where the heads of a position are side by side. */
static void by_column(const View *x, const Shape *sh, int64_t b, int64_t g0, int64_t g1, int64_t n, float *t) {
    const int64_t dim = sh->dim, keys = sh->keys;
    for (int64_t c = 0; c < keys; c++)
        for (int64_t g = g0; g < g1; g++) {
            const float *src = x->p + b * x->b + g * x->h + c * x->i;
            float *col = t + (g - g0) * dim * n + (c / LANES) * dim * LANES + c % LANES;
            for (int64_t d = 0; d < dim; d++) col[d * LANES] = src[d];
        }
    for (int64_t g = 0; g < g1 - g0; g++)
        for (int64_t c = keys; c < n; c++)
            for (int64_t d = 0; d < dim; d++)
                t[g * dim * n + (c / LANES) * dim * LANES + d * LANES + c % LANES] = 0.0f;
}

/* s[r * ld + c] = sum_d a[r * dim + d] t[d][c] for the tile's TILE rows, columns [c0, c1) (multiples of 16), t by
 * column in panels (`by_column`) */
static void tile_products(const float *a, int64_t dim, const float *t, int64_t c0, int64_t c1, float *s,
                          int64_t ld) {
    int64_t c = c0;
    for (; c + 2 * LANES <= c1; c += 2 * LANES) { /* 2 blocks x TILE rows: 2 TILE independent sums */
        v16f x[TILE], y[TILE];
        const float *p = panel(t, dim, c), *p2 = panel(t, dim, c + LANES);
        for (int r = 0; r < TILE; r++) x[r] = y[r] = splat(0.0f);
        for (int64_t d = 0; d < dim; d++) {
            const v16f k = load16(p + d * LANES), l = load16(p2 + d * LANES);
            for (int r = 0; r < TILE; r++) {
                const v16f q = splat(a[r * dim + d]);
                x[r] += q * k;
                y[r] += q * l;
            }
        }
        for (int r = 0; r < TILE; r++) {
            store16(s + r * ld + c, x[r]);
            store16(s + r * ld + c + LANES, y[r]);
        }
    }
    if (c < c1) {
        v16f x[TILE];
        const float *p = panel(t, dim, c);
        for (int r = 0; r < TILE; r++) x[r] = splat(0.0f);
        for (int64_t d = 0; d < dim; d++) {
            const v16f k = load16(p + d * LANES);
            for (int r = 0; r < TILE; r++) x[r] += splat(a[r * dim + d]) * k;
        }
        for (int r = 0; r < TILE; r++) store16(s + r * ld + c, x[r]);
    }
}

/* The next 16-column block after c of a tile's blocks [c0, c1) less its hole [h0, h1) (h0 == c1: none). */
static inline int64_t next_block(int64_t c, int64_t h0, int64_t h1) { return c + LANES == h0 ? h1 : c + LANES; }

static inline v16i lanes_from(int64_t c) {
    const v16i iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return iota + (int32_t)c;
}

/* All ones in the lanes of columns c..c+15 that row i attends: inside its span, outside its gap. */
static inline v16i attended(const Scratch *x, int64_t i, int64_t c) {
    const v16i at = lanes_from(c), zero = {0};
    const v16i in = (at >= zero + (int32_t)x->lo[i]) & (at < zero + (int32_t)x->hi[i]);
    return in & ~((at >= zero + (int32_t)x->glo[i]) & (at < zero + (int32_t)x->ghi[i]));
}

/* Row i's scores s over [c0, c1) less [h0, h1): e^(s - m) where attended, 0 elsewhere, m their max; returns the
 * sum, *top = m. */
static float softmax_row(const Scratch *x, int64_t i, float *s, int64_t c0, int64_t c1, int64_t h0, int64_t h1,
                         float *top) {
    v16f best = splat(-INFINITY);
    for (int64_t c = c0; c < c1; c = next_block(c, h0, h1))
        best = select16(attended(x, i, c), select16(load16(s + c) > best, load16(s + c), best), best);
    const float m = max16(best);
    const v16f mv = splat(m), zero = splat(0.0f);
    v16f total = zero;
    for (int64_t c = c0; c < c1; c = next_block(c, h0, h1)) {
        const v16f p = select16(attended(x, i, c), exp_nonpositive(load16(s + c) - mv), zero);
        store16(s + c, p);
        total += p;
    }
    *top = m;
    return sum16(total);
}

/* Row i's scores s over [c0, c1) less [h0, h1): e^(s - lse) where attended, 0 elsewhere. */
static void weights_row(const Scratch *x, int64_t i, float *s, int64_t c0, int64_t c1, int64_t h0, int64_t h1,
                        float lse) {
    const v16f base = splat(lse), zero = splat(0.0f);
    for (int64_t c = c0; c < c1; c = next_block(c, h0, h1)) {
        const v16f t = load16(s + c) - base;
        store16(s + c, select16(attended(x, i, c), exp_nonpositive(select16(t > zero, zero, t)), zero));
    }
}

/* acc[r * dim + d0 + d] = sum_c w[r * n + c] x[c * stride + d0 + d] for the tile's rows, c in [c0, c1) less the
 * hole [h0, h1), NC chunks of 8 dimensions */
static inline __attribute__((always_inline)) void mix_chunk(const int NC, const float *w, int64_t n,
                                                            const float *x, int64_t stride, int64_t c0,
                                                            int64_t c1, int64_t h0, int64_t h1, int64_t d0,
                                                            float *acc, int64_t dim) {
    v8f a[TILE][MIX_CHUNKS];
    for (int r = 0; r < TILE; r++)
        for (int k = 0; k < NC; k++) a[r][k] = splat8(0.0f);
    for (int64_t c = c0; c < c1; c = c + 1 == h0 ? h1 : c + 1) {
        const float *row = x + c * stride + d0;
        v8f v[MIX_CHUNKS];
        for (int k = 0; k < NC; k++) v[k] = load8(row + 8 * k);
        for (int r = 0; r < TILE; r++) {
            const v8f p = splat8(w[r * n + c]);
            for (int k = 0; k < NC; k++) a[r][k] += p * v[k];
        }
    }
    for (int r = 0; r < TILE; r++)
        for (int k = 0; k < NC; k++) store8(acc + r * dim + d0 + 8 * k, a[r][k]);
}

static void mix(const float *w, int64_t n, const float *x, int64_t stride, int64_t c0, int64_t c1, int64_t h0,
                int64_t h1, float *acc, int64_t dim) {
    for (int64_t d0 = 0; d0 < dim; d0 += 8 * MIX_CHUNKS) {
        switch ((dim - d0) / 8 < MIX_CHUNKS ? (dim - d0) / 8 : MIX_CHUNKS) {
            case 1: mix_chunk(1, w, n, x, stride, c0, c1, h0, h1, d0, acc, dim); break;
            case 2: mix_chunk(2, w, n, x, stride, c0, c1, h0, h1, d0, acc, dim); break;
            default: mix_chunk(3, w, n, x, stride, c0, c1, h0, h1, d0, acc, dim);
        }
    }
}

/* out[(c + j) * dim + d0 + d] += sum_i w_i[c + j] x[i * dim + d0 + d] for the eight columns c + j < keys (w_i: row i
 * of its tile's weights, `Scratch.toff`),
 * over the rows of the tiles from `from` on that wrote column c (their weights are 0 outside each row's span; a
 * tile's hole holds no weights), up to the first that starts past c where the tiles are `sorted` (see `gather`); NC
 * chunks of 8 dimensions, 8 NC sums in registers */
static inline __attribute__((always_inline)) void gather_chunk(const int NC, const float *w,
                                                               const float *x, int64_t dim, int64_t d0, int64_t c,
                                                               const Scratch *sc, int64_t from, int sorted,
                                                               int64_t rows, int64_t keys, float *out) {
    v8f a[8][3];
    for (int j = 0; j < 8; j++)
        for (int k = 0; k < NC; k++) a[j][k] = splat8(0.0f);
    for (int64_t i0 = from; i0 < rows; i0 += TILE) {
        if (sc->wlo[i0] == sc->whi[i0]) continue; /* a tile of padding rows */
        if (sorted && c < sc->wlo[i0]) break;
        if (c < sc->wlo[i0] || c >= sc->whi[i0] || (c >= sc->wglo[i0] && c < sc->wghi[i0])) continue;
        for (int64_t i = i0; i < i0 + TILE; i++) {
            v8f v[3];
            for (int k = 0; k < NC; k++) v[k] = load8(x + i * dim + d0 + 8 * k);
            const float *wi = w + sc->toff[i0] + (i - i0) * sc->tld[i0] + c;
            for (int j = 0; j < 8; j++) {
                const v8f p = splat8(wi[j]);
                for (int k = 0; k < NC; k++) a[j][k] += p * v[k];
            }
        }
    }
    for (int j = 0; j < 8 && c + j < keys; j++)
        for (int k = 0; k < NC; k++) {
            float *o = out + (c + j) * dim + d0 + 8 * k;
            store8(o, load8(o) + a[j][k]);
        }
}

/* 1 when the tiles' columns [wlo, whi), padding tiles left out, start and end in ascending order, as in the rows of
 * causal spans and of packed groups one after another: the tiles that wrote a column are then a run of them. */
static int tiles_sorted(const Scratch *sc, int64_t rows) {
    int64_t lo = 0, hi = 0;
    for (int64_t i0 = 0; i0 < rows; i0 += TILE) {
        if (sc->wlo[i0] == sc->whi[i0]) continue;
        if (sc->wlo[i0] < lo || sc->whi[i0] < hi) return 0;
        lo = sc->wlo[i0];
        hi = sc->whi[i0];
    }
    return 1;
}

/* `gather_chunk` over every eight columns of [c_lo, c_hi) (c_lo a multiple of 8). With the tiles `sorted`, each
 * column visits only the run of tiles that wrote it: from the first that ends past it (*from, which moves forward
 * with the column: calls over ascending ranges share it) to the first that starts past it, so that a long row of
 * several packed groups costs its tiles' spans, not its length squared. */
static void gather(const float *w, const float *x, int64_t dim, const Scratch *sc, int sorted,
                   int64_t *from_tile, int64_t rows, int64_t c_lo, int64_t c_hi, int64_t keys, float *out) {
    int64_t from = *from_tile;
    for (int64_t c = c_lo; c < c_hi; c += 8) {
        while (sorted && from < rows && sc->whi[from] <= c) from += TILE; /* padding tiles too: whi 0 */
        for (int64_t d0 = 0; d0 < dim; d0 += 24) {
            switch ((dim - d0) / 8 < 3 ? (dim - d0) / 8 : 3) {
                case 1: gather_chunk(1, w, x, dim, d0, c, sc, from, sorted, rows, keys, out); break;
                case 2: gather_chunk(2, w, x, dim, d0, c, sc, from, sorted, rows, keys, out); break;
                default: gather_chunk(3, w, x, dim, d0, c, sc, from, sorted, rows, keys, out);
            }
        }
    }
    *from_tile = from;
}

static int shape_ok(const Shape *sh) {
    return sh->dim % 8 == 0 && sh->dim <= MAX_DIM && sh->kv_heads > 0 && sh->heads % sh->kv_heads == 0;
}

/* Batch row b's spans into the scratch (padding rows: empty). */
static void row_spans(const Shape *sh, int64_t b, Scratch *x) {
    for (int64_t i = 0; i < x->rows; i++) {
        const int64_t at = b * sh->span_b + i;
        const int real = i < sh->queries;
        x->lo[i] = real ? sh->lo[at] : 0;
        x->hi[i] = real ? sh->hi[at] : 0;
        x->glo[i] = real ? sh->gap_lo[at] : 0;
        x->ghi[i] = real ? sh->gap_hi[at] : 0;
    }
}

/* Batch row b's queries of heads [h0, h1) times scale, (h1 - h0, rows, dim) (padding rows: 0), read position by
 * position. */
static void row_queries(const View *q, const Shape *sh, int64_t b, int64_t h0, int64_t h1, Scratch *x) {
    const int64_t dim = sh->dim, Q = sh->queries, plane = x->rows * dim;
    const v8f scale = splat8(sh->scale);
    for (int64_t i = 0; i < x->rows; i++) {
        const int real = i < Q;
        for (int64_t h = h0; h < h1; h++) {
            float *qs = x->qs + (h - h0) * plane + i * dim;
            if (!real) {
                for (int64_t d = 0; d < dim; d += 8) store8(qs + d, splat8(0.0f));
                continue;
            }
            const float *src = q->p + b * q->b + h * q->h + i * q->i;
            for (int64_t d = 0; d < dim; d += 8) store8(qs + d, load8(src + d) * scale);
        }
    }
}

/* Batch row b's output gradient of heads [h0, h1), (h1 - h0, rows, dim), and dO . O per head and row (padding
 * rows: 0). */
static void row_grads(const float *out, const float *dout, const Shape *sh, int64_t b, int64_t h0, int64_t h1,
                      Scratch *x) {
    const int64_t dim = sh->dim, Q = sh->queries, plane = x->rows * dim;
    for (int64_t i = 0; i < x->rows; i++)
        for (int64_t h = h0; h < h1; h++) {
            float *go = x->go + (h - h0) * plane + i * dim;
            v8f dot = splat8(0.0f);
            if (i < Q) {
                const float *src = dout + ((b * Q + i) * sh->heads + h) * dim;
                const float *o = out + ((b * Q + i) * sh->heads + h) * dim;
                for (int64_t d = 0; d < dim; d += 8) {
                    const v8f g = load8(src + d);
                    store8(go + d, g);
                    dot += g * load8(o + d);
                }
            } else {
                for (int64_t d = 0; d < dim; d += 8) store8(go + d, splat8(0.0f));
            }
            float total = 0.0f;
            for (int k = 0; k < 8; k++) total += dot[k];
            x->delta[(h - h0) * x->rows + i] = total;
        }
}

/* The 16-column blocks [c0, c1) that tile i0's spans cover (c0 == c1 when they are all empty), and the hole
 * [h0, h1) of whole blocks that no row of the tile attends (h0 == h1 == c1: none): inside every non-empty row's
 * gap, or for a row without one, before its first column (a tile across two packed groups: the first group's
 * samples between its prompt and the rows' own columns). */
static void tile_blocks(const Scratch *x, int64_t i0, int64_t *c0, int64_t *c1, int64_t *h0, int64_t *h1) {
    int64_t lo = INT64_MAX, hi = 0, g0 = 0, g1 = INT64_MAX;
    for (int r = 0; r < TILE; r++) {
        const int64_t i = i0 + r;
        if (x->lo[i] >= x->hi[i]) continue;
        lo = x->lo[i] < lo ? x->lo[i] : lo;
        hi = x->hi[i] > hi ? x->hi[i] : hi;
    }
    for (int r = 0; r < TILE; r++) {
        const int64_t i = i0 + r;
        if (x->lo[i] >= x->hi[i]) continue;
        const int gap = x->glo[i] < x->ghi[i];
        const int64_t a = gap ? x->glo[i] : lo, z = gap ? x->ghi[i] : x->lo[i]; /* [a, z): not attended */
        g0 = a > g0 ? a : g0;
        g1 = z < g1 ? z : g1;
    }
    if (hi == 0) {
        *c0 = *c1 = *h0 = *h1 = 0;
        return;
    }
    *c0 = lo / LANES * LANES;
    *c1 = (hi + LANES - 1) / LANES * LANES;
    *h0 = (g0 + LANES - 1) / LANES * LANES;
    *h1 = g1 / LANES * LANES;
    if (!(*c0 < *h0 && *h0 < *h1 && *h1 < *c1)) *h0 = *h1 = *c1;
}

/* A call's checks and scratch: 0, or the entry points' error code (the scratch then freed). */
static int begin(const Shape *sh, Scratch *x) {
    if (!shape_ok(sh)) return -1;
    if (scratch_of(sh, x) != 0) {
        scratch_free(x);
        return -2;
    }
    return 0;
}

/* Batch row b's tile table: each tile's blocks and hole (at its first row in wlo, whi, wglo, wghi; every row of
 * the tile holds them) and where its weights lie in the backward's s and w (toff, tld: its rows side by side, its
 * columns only, so that the weights a column's gather reads lie together, not a row of keys apart). */
static void tile_table(Scratch *x) {
    for (int64_t i0 = 0, used = 0; i0 < x->rows; i0 += TILE) {
        int64_t c0, c1, h0, h1;
        tile_blocks(x, i0, &c0, &c1, &h0, &h1);
        for (int r = 0; r < TILE; r++) {
            x->wlo[i0 + r] = c0;
            x->whi[i0 + r] = c1;
            x->wglo[i0 + r] = h0;
            x->wghi[i0 + r] = h1;
        }
        x->toff[i0] = x->n + used - c0;
        x->tld[i0] = c1 - c0;
        used += TILE * (c1 - c0);
    }
}

/* The end of the chunk of tiles that starts at row t0: with the tiles sorted, the run of tiles from the same first
 * column (a packed group: no query past it reads a key before that column); else every tile. */
static int64_t chunk_end(const Scratch *x, int sorted, int64_t t0) {
    if (!sorted) return x->rows;
    int64_t t1 = t0 + TILE;
    while (t1 < x->rows && x->wlo[t1] == x->wlo[t0]) t1 += TILE;
    return t1;
}

/* Whether batch row b runs chunk by chunk with every head's planes read at once (1), or head by head over the whole
 * row (0): the first where a chunk's planes fit in `whole_floats`, or the row's. */
static int whole_row(const Shape *sh, const Scratch *x, int sorted) {
    int64_t rows = 0, cols = 0;
    for (int64_t t0 = 0; t0 < x->rows;) {
        const int64_t t1 = chunk_end(x, sorted, t0);
        int64_t hi = 0;
        for (int64_t i0 = t0; i0 < t1; i0 += TILE) hi = x->whi[i0] > hi ? x->whi[i0] : hi;
        rows = t1 - t0 > rows ? t1 - t0 : rows;
        cols = hi > x->wlo[t0] && hi - x->wlo[t0] > cols ? hi - x->wlo[t0] : cols;
        t0 = t1;
    }
    const int64_t per_chunk = 2 * (sh->heads * rows + sh->kv_heads * cols) * sh->dim;
    const int64_t per_row = 2 * (sh->heads * x->rows + sh->kv_heads * x->n) * sh->dim;
    return per_chunk <= sh->whole_floats || per_row <= sh->whole_floats;
}

/* The forward of head h over the tiles [t0, t1) of batch row b. */
static void forward_tiles(const View *v, const Shape *sh, Scratch *x, int64_t b, int64_t h, int whole, int64_t t0,
                          int64_t t1, float *out, float *lse) {
    const int64_t dim = sh->dim, n = x->n, Q = sh->queries, g = h / (sh->heads / sh->kv_heads);
    const float *values = v->p + b * v->b + g * v->h, *kt = x->kt + (whole ? g : 0) * dim * n;
    const float *qs = x->qs + (whole ? h : 0) * x->rows * dim;
    float acc[TILE * MAX_DIM];
    for (int64_t i0 = t0; i0 < t1; i0 += TILE) {
        const int64_t c0 = x->wlo[i0], c1 = x->whi[i0], h0 = x->wglo[i0], h1 = x->wghi[i0];
        float total[TILE], top[TILE];
        if (c0 < c1) { /* the tile's scores in the scratch's first rows: nothing reads them later */
            tile_products(qs + i0 * dim, dim, kt, c0, h0, x->s, n);
            tile_products(qs + i0 * dim, dim, kt, h1, c1, x->s, n);
            for (int r = 0; r < TILE; r++)
                total[r] = softmax_row(x, i0 + r, x->s + r * n, c0, c1, h0, h1, &top[r]);
            mix(x->s, n, values, v->i, c0, c1 < sh->keys ? c1 : sh->keys, h0, h1, acc, dim);
        }
        for (int r = 0; r < TILE && i0 + r < Q; r++) {
            const int64_t i = i0 + r;
            float *o = out + ((b * Q + i) * sh->heads + h) * dim;
            const int empty = c0 == c1 || x->lo[i] >= x->hi[i];
            const float inv = empty ? 0.0f : 1.0f / total[r];
            for (int64_t d = 0; d < dim; d++) o[d] = empty ? 0.0f : acc[r * dim + d] * inv;
            lse[(b * sh->heads + h) * Q + i] = empty ? INFINITY : top[r] + logf(total[r]);
        }
    }
}

int pasodoble_attention_forward_f32(const View *q, const View *k, const View *v, const Shape *sh, float *out,
                                    float *lse) {
    Scratch x;
    const int code = begin(sh, &x);
    if (code != 0) return code;
    const int64_t n = x.n, group = sh->heads / sh->kv_heads;
    for (int64_t b = 0; b < sh->batch; b++) {
        row_spans(sh, b, &x);
        tile_table(&x);
        const int sorted = tiles_sorted(&x, x.rows), whole = whole_row(sh, &x, sorted);
        if (whole) { /* chunk by chunk, every head: a chunk's queries and keys stay in cache over its heads */
            row_queries(q, sh, b, 0, sh->heads, &x);
            by_column(k, sh, b, 0, sh->kv_heads, n, x.kt);
            for (int64_t t0 = 0, t1; t0 < x.rows; t0 = t1) {
                t1 = chunk_end(&x, sorted, t0);
                for (int64_t h = 0; h < sh->heads; h++) forward_tiles(v, sh, &x, b, h, 1, t0, t1, out, lse);
            }
            continue;
        }
        for (int64_t g = 0; g < sh->kv_heads; g++) {
            by_column(k, sh, b, g, g + 1, n, x.kt);
            for (int64_t h = g * group; h < (g + 1) * group; h++) {
                row_queries(q, sh, b, h, h + 1, &x);
                forward_tiles(v, sh, &x, b, h, 0, 0, x.rows, out, lse);
            }
        }
    }
    scratch_free(&x);
    return 0;
}

/* The backward of head h over the tiles [t0, t1) of batch row b: dq of their rows, and their shares of dk and dv
 * (added to the columns they cover, gathered from these tiles only). */
static void backward_tiles(const View *k, const Shape *sh, Scratch *x, int64_t b, int64_t h, int whole, int sorted,
                           int64_t t0, int64_t t1, const float *lse, float *dq, float *dk, float *dv) {
    const int64_t dim = sh->dim, n = x->n, Q = sh->queries, K = sh->keys, g = h / (sh->heads / sh->kv_heads);
    const int64_t at = whole ? g : 0, plane = (whole ? h : 0) * x->rows;
    const float *keys = k->p + b * k->b + g * k->h, *kt = x->kt + at * dim * n, *vt = x->vt + at * dim * n;
    const float *qs = x->qs + plane * dim, *go = x->go + plane * dim, *delta = x->delta + plane;
    float acc[TILE * MAX_DIM];
    int64_t hi = 0;
    for (int64_t i0 = t0; i0 < t1; i0 += TILE) {
        const int64_t c0 = x->wlo[i0], c1 = x->whi[i0], h0 = x->wglo[i0], h1 = x->wghi[i0];
        if (c0 == c1) {
            for (int r = 0; r < TILE && i0 + r < Q; r++) {
                float *o = dq + ((b * Q + i0 + r) * sh->heads + h) * dim;
                for (int64_t d = 0; d < dim; d++) o[d] = 0.0f;
            }
            continue;
        }
        hi = c1 > hi ? c1 : hi;
        const int64_t ld = x->tld[i0];
        float *s = x->s + x->toff[i0], *w = x->w + x->toff[i0];
        tile_products(qs + i0 * dim, dim, kt, c0, h0, s, ld);
        tile_products(qs + i0 * dim, dim, kt, h1, c1, s, ld);
        tile_products(go + i0 * dim, dim, vt, c0, h0, w, ld);
        tile_products(go + i0 * dim, dim, vt, h1, c1, w, ld);
        for (int r = 0; r < TILE; r++) {
            const int64_t i = i0 + r;
            const float row_lse = i < Q ? lse[(b * sh->heads + h) * Q + i] : INFINITY;
            float *sr = s + r * ld, *wr = w + r * ld;
            weights_row(x, i, sr, c0, c1, h0, h1, row_lse);
            const v16f dl = splat(delta[i]);
            for (int64_t c = c0; c < c1; c = next_block(c, h0, h1))
                store16(wr + c, load16(sr + c) * (load16(wr + c) - dl));
        }
        mix(w, ld, keys, k->i, c0, c1 < K ? c1 : K, h0, h1, acc, dim);
        for (int r = 0; r < TILE && i0 + r < Q; r++) {
            float *o = dq + ((b * Q + i0 + r) * sh->heads + h) * dim;
            for (int64_t d = 0; d < dim; d++) o[d] = acc[r * dim + d] * sh->scale;
        }
    }
    const int64_t c_lo = x->wlo[t0], c_hi = hi < K ? hi : K; /* sorted: the chunk's tiles start at wlo[t0] */
    float *gk = dk + (b * sh->kv_heads + g) * K * dim, *gv = dv + (b * sh->kv_heads + g) * K * dim;
    int64_t from_k = t0, from_v = t0;
    gather(x->w, qs, dim, x, sorted, &from_k, t1, sorted ? c_lo : 0, c_hi, K, gk);
    gather(x->s, go, dim, x, sorted, &from_v, t1, sorted ? c_lo : 0, c_hi, K, gv);
}

int pasodoble_attention_backward_f32(const View *q, const View *k, const View *v, const Shape *sh,
                                     const float *out, const float *dout, const float *lse, float *dq, float *dk,
                                     float *dv) {
    Scratch x;
    const int code = begin(sh, &x);
    if (code != 0) return code;
    const int64_t n = x.n, group = sh->heads / sh->kv_heads, K = sh->keys;
    for (int64_t b = 0; b < sh->batch; b++) {
        row_spans(sh, b, &x);
        tile_table(&x);
        const int sorted = tiles_sorted(&x, x.rows), whole = whole_row(sh, &x, sorted);
        memset(dk + b * sh->kv_heads * K * sh->dim, 0, sh->kv_heads * K * sh->dim * sizeof(float));
        memset(dv + b * sh->kv_heads * K * sh->dim, 0, sh->kv_heads * K * sh->dim * sizeof(float));
        if (whole) { /* chunk by chunk, every head: a chunk's planes and weights stay in cache over its heads */
            row_queries(q, sh, b, 0, sh->heads, &x);
            row_grads(out, dout, sh, b, 0, sh->heads, &x);
            by_column(k, sh, b, 0, sh->kv_heads, n, x.kt);
            by_column(v, sh, b, 0, sh->kv_heads, n, x.vt);
            for (int64_t t0 = 0, t1; t0 < x.rows; t0 = t1) {
                t1 = chunk_end(&x, sorted, t0);
                for (int64_t h = 0; h < sh->heads; h++)
                    backward_tiles(k, sh, &x, b, h, 1, sorted, t0, t1, lse, dq, dk, dv);
            }
            continue;
        }
        for (int64_t g = 0; g < sh->kv_heads; g++) {
            by_column(k, sh, b, g, g + 1, n, x.kt);
            by_column(v, sh, b, g, g + 1, n, x.vt);
            for (int64_t h = g * group; h < (g + 1) * group; h++) {
                row_queries(q, sh, b, h, h + 1, &x);
                row_grads(out, dout, sh, b, h, h + 1, &x);
                for (int64_t t0 = 0, t1; t0 < x.rows; t0 = t1) {
                    t1 = chunk_end(&x, sorted, t0);
                    backward_tiles(k, sh, &x, b, h, 0, sorted, t0, t1, lse, dq, dk, dv);
                }
            }
        }
    }
    scratch_free(&x);
    return 0;
}
