/* The plan of a batch's rows in time linear in the batch's entries (hrr_kernel/native.py loads it).
 *
 * Scratch "mark" arrays, one slot per base row, pair and atom of the program, map a program id to its
 * number in the plan (-1: not in it). They are all -1 on entry, and every slot a call sets is reset
 * before it returns, so a call costs what the batch holds, not what the program holds. */
#include <stdint.h>
#include <stdlib.h>

/* Sort n non-negative ids below `bound` ascending: LSD radix sort, 11 bits a pass (two passes below
 * 2^22), in O(n + 2048) a pass; falls back to qsort when the scratch cannot be allocated. */
static int cmp_i64(const void *x, const void *y) {
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static void sort_ids(int64_t *v, int64_t n, int64_t bound) {
    enum { BITS = 11, BUCKETS = 1 << BITS };
    if (n < 64) {
        qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
        return;
    }
    int64_t *tmp = malloc((size_t)n * sizeof(int64_t));
    if (!tmp) {
        qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
        return;
    }
    int64_t *src = v, *dst = tmp;
    int64_t count[BUCKETS];
    for (int shift = 0; shift == 0 || (bound - 1) >> shift; shift += BITS) {
        for (int b = 0; b < BUCKETS; ++b) count[b] = 0;
        for (int64_t i = 0; i < n; ++i) ++count[(src[i] >> shift) & (BUCKETS - 1)];
        int64_t at = 0;
        for (int b = 0; b < BUCKETS; ++b) {
            const int64_t c = count[b];
            count[b] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; ++i) dst[count[(src[i] >> shift) & (BUCKETS - 1)]++] = src[i];
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != v)
        for (int64_t i = 0; i < n; ++i) v[i] = src[i];
    free(tmp);
}

/* Phase 1: the distinct base rows of the requested concepts, numbered in order of first appearance.
 * Writes row_map (n_req) and uniq (U); returns U; *nnz gets the count-matrix entries of those rows. */
int64_t hrr_plan_select(int64_t n_req, const int64_t *rows, const int64_t *base_row_map,
                        const int64_t *row_crow, int64_t *mark_row, int64_t *row_map, int64_t *uniq,
                        int64_t *nnz) {
    int64_t n_u = 0, total = 0;
    for (int64_t i = 0; i < n_req; ++i) {
        const int64_t b = base_row_map[rows[i]];
        if (mark_row[b] < 0) {
            mark_row[b] = n_u;
            uniq[n_u++] = b;
            total += row_crow[b + 1] - row_crow[b];
        }
        row_map[i] = mark_row[b];
    }
    for (int64_t u = 0; u < n_u; ++u) mark_row[uniq[u]] = -1;
    *nnz = total;
    return n_u;
}

/* Phase 2: the count matrix M of the U rows (CSR, columns renumbered to the plan's pairs in order of
 * first appearance), the pair table, the used atoms (sorted), Mᵀ (pairs x rows) and Q (atoms x pairs).
 * Every output is sized by nnz; sizes[0] = P, sizes[1] = A'. */
void hrr_plan_build(int64_t n_atoms_all, int64_t n_u, const int64_t *uniq, const int64_t *row_crow, const int64_t *row_col,
                    const double *row_val, const int64_t *pair_atom_all, const int64_t *pair_rel_all,
                    int64_t *mark_pair, int64_t *mark_atom, int64_t *crow, int64_t *col, double *val,
                    int64_t *pair_prog, int64_t *pair_atom, int64_t *pair_rel, int64_t *atoms_used,
                    int64_t *mt_crow, int64_t *mt_row, double *mt_val, int64_t *q_crow,
                    int64_t *q_col, int64_t *sizes) {
    int64_t n_p = 0, n_a = 0, e = 0;
    crow[0] = 0;
    for (int64_t u = 0; u < n_u; ++u) {
        const int64_t b = uniq[u];
        for (int64_t s = row_crow[b]; s < row_crow[b + 1]; ++s, ++e) {
            const int64_t p = row_col[s];
            if (mark_pair[p] < 0) {
                mark_pair[p] = n_p;
                pair_prog[n_p++] = p;
                const int64_t a = pair_atom_all[p];
                if (mark_atom[a] < 0) {
                    mark_atom[a] = 0;
                    atoms_used[n_a++] = a;
                }
            }
            col[e] = mark_pair[p];
            val[e] = row_val[s];
        }
        crow[u + 1] = e;
    }
    sort_ids(atoms_used, n_a, n_atoms_all);
    for (int64_t i = 0; i < n_a; ++i) mark_atom[atoms_used[i]] = i;
    /* pairs: atom (a plan number) and relation; Q by counting sort on the atom */
    for (int64_t i = 0; i <= n_a; ++i) q_crow[i] = 0;
    for (int64_t p = 0; p < n_p; ++p) {
        pair_atom[p] = mark_atom[pair_atom_all[pair_prog[p]]];
        pair_rel[p] = pair_rel_all[pair_prog[p]];
        ++q_crow[pair_atom[p] + 1];
    }
    for (int64_t i = 0; i < n_a; ++i) q_crow[i + 1] += q_crow[i];
    for (int64_t p = 0; p < n_p; ++p) q_col[q_crow[pair_atom[p]]++] = p;
    for (int64_t i = n_a; i > 0; --i) q_crow[i] = q_crow[i - 1];
    q_crow[0] = 0;
    /* Mᵀ by counting sort on the column, rows in increasing order within each pair */
    for (int64_t p = 0; p <= n_p; ++p) mt_crow[p] = 0;
    for (int64_t i = 0; i < e; ++i) ++mt_crow[col[i] + 1];
    for (int64_t p = 0; p < n_p; ++p) mt_crow[p + 1] += mt_crow[p];
    for (int64_t u = 0; u < n_u; ++u)
        for (int64_t i = crow[u]; i < crow[u + 1]; ++i) {
            const int64_t at = mt_crow[col[i]]++;
            mt_row[at] = u;
            mt_val[at] = val[i];
        }
    for (int64_t p = n_p; p > 0; --p) mt_crow[p] = mt_crow[p - 1];
    mt_crow[0] = 0;
    for (int64_t p = 0; p < n_p; ++p) mark_pair[pair_prog[p]] = -1;
    for (int64_t i = 0; i < n_a; ++i) mark_atom[atoms_used[i]] = -1;
    sizes[0] = n_p;
    sizes[1] = n_a;
}
