/* One precision of the fused bind kernels; compose.c includes this file once per real type.
 *
 * Before inclusion: REAL is the real type (float or double), NAME(x) pastes its suffix onto x, HRR_SIMD
 * is 1 when compose.c defines NAME(cmac_simd) and NAME(cmac_conj_simd) (which handle a prefix of the
 * values and return its length), else 0.
 * Every complex array is interleaved (re, im) pairs, F of them per row: a torch complex tensor's memory,
 * or its real view (n, 2F). atom_row (A'): the row of a_hat that holds each used atom, or NULL when a_hat
 * holds exactly the used atoms in order.
 */

/* o[k] += w * x[k] * y[k] over nf complex values (the SIMD version in compose.c for float32 and AVX2). */
static inline void NAME(cmac)(REAL *restrict o, const REAL *restrict x, const REAL *restrict y, REAL w,
                              int64_t nf) {
    int64_t k = 0;
#if HRR_SIMD
    k = NAME(cmac_simd)(o, x, y, w, nf);
#endif
    for (; k < nf; ++k) {
        const REAL xr = x[2 * k], xi = x[2 * k + 1], yr = y[2 * k], yi = y[2 * k + 1];
        o[2 * k] += w * (xr * yr - xi * yi);
        o[2 * k + 1] += w * (xr * yi + xi * yr);
    }
}

/* o[k] = (store ? 0 : o[k]) + w * conj(x[k]) * y[k] over nf complex values. */
static inline void NAME(cmac_conj)(REAL *restrict o, const REAL *restrict x, const REAL *restrict y, REAL w,
                                   int store, int64_t nf) {
    int64_t k = 0;
#if HRR_SIMD
    k = NAME(cmac_conj_simd)(o, x, y, w, store, nf);
#endif
    for (; k < nf; ++k) {
        const REAL xr = x[2 * k], xi = x[2 * k + 1], yr = y[2 * k], yi = y[2 * k + 1];
        const REAL pr = w * (xr * yr + xi * yi), pi = w * (xr * yi - xi * yr);
        o[2 * k] = store ? pr : o[2 * k] + pr;
        o[2 * k + 1] = store ? pi : o[2 * k + 1] + pi;
    }
}

/* out[u] = sum over the entries e of row u of M: val[e] * a_hat[atom(p)] * r_hat[rel(p)], p = col[e].
 *
 * crow (n_rows + 1), col and val (nnz, float64 counts): M in CSR, col indexing the pair table.
 * pair_atom, pair_rel (P): each pair's used atom and relation. One thread writes each output row: no
 * atomics, no reduction. out (U, F) is overwritten.
 * A run of a row's entries under one relation j is summed first, s = sum val[e] * a_hat[atom(e)] (a real
 * axpy per entry), and multiplied by r_hat[j] once: out[u] += r_hat[j] * s. A run of one entry is
 * multiplied directly. Returns 0, or 1 when the per-thread run buffer could not be allocated. */
int NAME(hrr_bind_rows)(int64_t n_rows, int64_t nf, const int64_t *crow, const int64_t *col,
                        const double *val, const int64_t *pair_atom, const int64_t *pair_rel,
                        const int64_t *atom_row, const REAL *a_hat, const REAL *r_hat, REAL *out,
                        int nthreads) {
    const int64_t w2 = 2 * nf;
    const int64_t end = crow[n_rows];
    int failed = 0;
#pragma omp parallel num_threads(nthreads)
    {
        REAL *restrict s = malloc((size_t)w2 * sizeof(REAL));
        if (!s) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 16)
        for (int64_t u = 0; u < n_rows; ++u) {
            REAL *restrict o = out + u * w2;
            memset(o, 0, (size_t)w2 * sizeof(REAL));
            if (!s) continue;
            int64_t e = crow[u];
            const int64_t stop = crow[u + 1];
            while (e < stop) {
                const int64_t j = pair_rel[col[e]];
                int64_t f = e + 1; /* the run of relation j: entries e .. f - 1 */
                while (f < stop && pair_rel[col[f]] == j) ++f;
                const REAL *restrict r = r_hat + j * w2;
                for (int64_t i = e; i < f; ++i) {
                    const int64_t pa = pair_atom[col[i]];
                    const REAL *restrict a = a_hat + (atom_row ? atom_row[pa] : pa) * w2;
                    const REAL w = (REAL)val[i];
                    if (i + 1 < end) { /* the next entry's atom, while this one is read */
                        const int64_t pn = pair_atom[col[i + 1]];
                        hrr_prefetch(a_hat + (atom_row ? atom_row[pn] : pn) * w2, (size_t)w2 * sizeof(REAL));
                    }
                    if (f - e == 1) {
                        NAME(cmac)(o, a, r, w, nf);
                    } else if (i == e) {
#pragma omp simd
                        for (int64_t k = 0; k < w2; ++k) s[k] = w * a[k];
                    } else {
#pragma omp simd
                        for (int64_t k = 0; k < w2; ++k) s[k] += w * a[k];
                    }
                }
                if (f - e > 1) NAME(cmac)(o, s, r, (REAL)1, nf);
                e = f;
            }
        }
        free(s);
    }
    return failed;
}

/* The adjoint of hrr_bind_rows, one pass over the pairs grouped by atom:
 *
 *   gb[p]     = sum over the entries e of column p of M: val[e] * g_hat[row(e)]
 *   ga_hat[a] = sum over the pairs p of atom a: conj(r_hat[rel(p)]) * gb[p]      (unless ga_hat is NULL)
 *   gr_hat[j] = sum over the pairs p of relation j: conj(a_hat[atom(p)]) * gb[p] (unless gr_hat is NULL)
 *
 * q_crow (A' + 1), q_col (P): the pairs of each used atom; mt_crow (P + 1), mt_row, mt_val (nnz): Mᵀ in
 * CSR. Each ga_hat row belongs to one thread; gr_hat is summed in per-thread buffers, then reduced in
 * thread order. Both outputs are multiplied by `scale` (1, or the spectral inputs' 2 / D, folded in here
 * rather than in a pass over g_hat). The threads take contiguous blocks of atoms of about equal work (an atom costs 2, a pair
 * 2 plus its entries: a batch's atoms differ by hundreds of times in pairs, and halves by count differed
 * by half again in work), fixed by the plan, so at a given thread count every sum runs in the same order
 * from call to call (bitwise reproducible). Both outputs are overwritten. Returns 0, or 1 when the
 * per-thread scratch could not be allocated. */
int NAME(hrr_bind_rows_adjoint)(int64_t n_atoms, int64_t n_rel, int64_t nf, const int64_t *q_crow,
                                const int64_t *q_col, const int64_t *mt_crow, const int64_t *mt_row,
                                const double *mt_val, const int64_t *pair_rel, const int64_t *atom_row,
                                const REAL *a_hat, const REAL *r_hat, const REAL *g_hat, REAL *ga_hat,
                                REAL *gr_hat, REAL scale, int nthreads) {
    const int64_t w2 = 2 * nf;
    const size_t per_thread = (size_t)w2 + (gr_hat ? (size_t)(n_rel * w2) : 0);
    if (nthreads < 1) nthreads = 1;
    REAL *scratch = calloc((size_t)nthreads * per_thread, sizeof(REAL));
    int64_t *bound = malloc((size_t)(nthreads + 1) * sizeof(int64_t));
    if (!scratch || !bound) {
        free(scratch);
        free(bound);
        return 1;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int tid = 0, nt = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
#pragma omp single
        { /* block t is atoms bound[t] .. bound[t + 1] - 1: the work before bound[t] reaches t / nt */
            int64_t total = 0;
            for (int64_t a = 0; a < n_atoms; ++a) total += 2 + 2 * (q_crow[a + 1] - q_crow[a]);
            for (int64_t q = 0; q < q_crow[n_atoms]; ++q) total += mt_crow[q_col[q] + 1] - mt_crow[q_col[q]];
            int t = 1;
            int64_t done = 0;
            bound[0] = 0;
            for (int64_t a = 0; a < n_atoms && t < nt; ++a) {
                done += 2;
                for (int64_t q = q_crow[a]; q < q_crow[a + 1]; ++q)
                    done += 2 + mt_crow[q_col[q] + 1] - mt_crow[q_col[q]];
                while (t < nt && done * nt >= total * t) bound[t++] = a + 1;
            }
            while (t <= nt) bound[t++] = n_atoms;
        }
        REAL *restrict gb = scratch + (size_t)tid * per_thread;
        REAL *restrict grl = gb + w2;
        for (int64_t a = bound[tid]; a < bound[tid + 1]; ++a) {
            REAL *restrict ga = ga_hat ? ga_hat + a * w2 : NULL;
            const REAL *restrict av = a_hat + (atom_row ? atom_row[a] : a) * w2;
            int first = 1; /* the atom's first pair stores into ga: no memset, no read of it */
            for (int64_t q = q_crow[a]; q < q_crow[a + 1]; ++q) {
                const int64_t p = q_col[q];
                const REAL *gp = gb; /* the pair's summed gradient, times gw */
                if (q + 1 < q_crow[n_atoms]) { /* the next pair's first row, while this pair is read */
                    const int64_t pn = q_col[q + 1];
                    hrr_prefetch(g_hat + mt_row[mt_crow[pn]] * w2, (size_t)w2 * sizeof(REAL));
                }
                REAL gw = scale;
                if (mt_crow[p + 1] - mt_crow[p] == 1) { /* one row reads the pair: use its gradient */
                    gp = g_hat + mt_row[mt_crow[p]] * w2;
                    gw = scale * (REAL)mt_val[mt_crow[p]];
                } else {
                    memset(gb, 0, (size_t)w2 * sizeof(REAL));
                    for (int64_t e = mt_crow[p]; e < mt_crow[p + 1]; ++e) {
                        const REAL *restrict g = g_hat + mt_row[e] * w2;
                        if (e + 1 < mt_crow[p + 1]) /* and the pair's next row */
                            hrr_prefetch(g_hat + mt_row[e + 1] * w2, (size_t)w2 * sizeof(REAL));
                        const REAL w = (REAL)mt_val[e];
#pragma omp simd
                        for (int64_t k = 0; k < w2; ++k) gb[k] += w * g[k];
                    }
                }
                const int64_t j = pair_rel[p];
                if (ga) NAME(cmac_conj)(ga, r_hat + j * w2, gp, gw, first, nf);
                if (gr_hat) NAME(cmac_conj)(grl + j * w2, av, gp, gw, 0, nf);
                first = 0;
            }
            if (ga && first) memset(ga, 0, (size_t)w2 * sizeof(REAL));
        }
    }
    if (gr_hat) {
        memset(gr_hat, 0, (size_t)(n_rel * w2) * sizeof(REAL));
        for (int t = 0; t < nthreads; ++t) {
            const REAL *grl = scratch + (size_t)t * per_thread + w2;
            for (int64_t k = 0; k < n_rel * w2; ++k) gr_hat[k] += grl[k];
        }
    }
    free(scratch);
    free(bound);
    return 0;
}
