/* An embedding lookup's bookkeeping for a batch of ids (hrr_kernel/native.py loads it; hrr_kernel/lookup.py
 * uses it): the distinct ids in order of first appearance, the gather of their rows to the batch's
 * positions, and its adjoint, the sum of each row's positions' gradients.
 *
 * torch.unique sorts the batch; index_select's backward (index_add) zeroes the rows' gradient, then adds
 * the positions one at a time on one thread. Here a mark array (one slot per id, all -1 between calls)
 * finds the distinct ids in one pass, and the adjoint groups the positions by row (a counting sort) so
 * that each thread writes whole rows once, the first position copied and the others added: nothing is
 * zeroed, and no two threads write one row. Every row's sum runs in position order (bitwise the same
 * from call to call and at any thread count). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* uniq (U): the distinct ids of ids (n), in order of first appearance; inverse (n): each position's
 * number in uniq. mark (one slot per possible id) is all -1 on entry and on return. Returns U. */
int64_t hrr_unique_first(int64_t n, const int64_t *ids, int64_t *mark, int64_t *uniq, int64_t *inverse) {
    int64_t n_u = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t v = ids[i];
        if (mark[v] < 0) {
            mark[v] = n_u;
            uniq[n_u++] = v;
        }
        inverse[i] = mark[v];
    }
    for (int64_t u = 0; u < n_u; ++u) mark[uniq[u]] = -1;
    return n_u;
}

/* out[i] = rows[index[i]] for n positions, rows of `bytes` bytes each. */
void hrr_gather_rows(int64_t n, int64_t bytes, const int64_t *index, const char *rows, char *out,
                     int nthreads) {
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t i = 0; i < n; ++i) memcpy(out + i * bytes, rows + index[i] * bytes, (size_t)bytes);
}

/* The positions of each row, in position order: crow (n_rows + 1), pos (n). */
static void group_positions(int64_t n, int64_t n_rows, const int64_t *index, int64_t *crow, int64_t *pos) {
    for (int64_t u = 0; u <= n_rows; ++u) crow[u] = 0;
    for (int64_t i = 0; i < n; ++i) ++crow[index[i] + 1];
    for (int64_t u = 0; u < n_rows; ++u) crow[u + 1] += crow[u];
    for (int64_t i = 0; i < n; ++i) pos[crow[index[i]]++] = i;
    for (int64_t u = n_rows; u > 0; --u) crow[u] = crow[u - 1];
    crow[0] = 0;
}

/* out[u] = sum of grad[i] over the positions i with index[i] == u (zero for a row no position reads);
 * rows of `width` values. Returns 0, or 1 when the grouping's scratch could not be allocated. */
#define SCATTER(REAL, SUF)                                                                                   \
    int hrr_scatter_rows_##SUF(int64_t n, int64_t n_rows, int64_t width, const int64_t *index,              \
                               const REAL *grad, REAL *out, int nthreads) {                                 \
        int64_t *crow = malloc((size_t)(n_rows + 1) * sizeof(int64_t));                                     \
        int64_t *pos = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));                                  \
        if (!crow || !pos) {                                                                                 \
            free(crow);                                                                                      \
            free(pos);                                                                                       \
            return 1;                                                                                        \
        }                                                                                                    \
        group_positions(n, n_rows, index, crow, pos);                                                        \
        _Pragma("omp parallel for schedule(static) num_threads(nthreads)")                                  \
        for (int64_t u = 0; u < n_rows; ++u) {                                                               \
            REAL *restrict o = out + u * width;                                                              \
            const int64_t s = crow[u], e = crow[u + 1];                                                      \
            if (s == e) {                                                                                    \
                memset(o, 0, (size_t)width * sizeof(REAL));                                                  \
                continue;                                                                                    \
            }                                                                                                \
            memcpy(o, grad + pos[s] * width, (size_t)width * sizeof(REAL));                                  \
            for (int64_t q = s + 1; q < e; ++q) {                                                            \
                const REAL *restrict g = grad + pos[q] * width;                                              \
                _Pragma("omp simd") for (int64_t k = 0; k < width; ++k) o[k] += g[k];                       \
            }                                                                                                \
        }                                                                                                    \
        free(crow);                                                                                          \
        free(pos);                                                                                           \
        return 0;                                                                                            \
    }

SCATTER(float, f32)
SCATTER(double, f64)

