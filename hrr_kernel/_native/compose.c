/* Fused bind kernels of the HRR composer for plans of selected rows (hrr_kernel/native.py loads them).
 *
 * The torch path materialises the pair table B = A_hat[atom] * R_hat[rel] (P x F) and multiplies it by
 * the sparse count matrix M; the forward kernel walks each row's entries and multiplies on the fly
 * (one thread per row), the adjoint walks the atoms, their pairs and the rows each pair feeds (one thread
 * per atom), so nothing of size (P, F) is written, forward or backward. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int hrr_native_abi(void) { return 5; }


/* Ask for a row's cache lines ahead of its use: the forward's next atom, and the adjoint's next row of
 * the gradient, are at addresses no hardware prefetcher can guess (about 10 % of the forward and 13 % of
 * the adjoint at D = 768 on the 2-core VM; prefetching two rows ahead, or the adjoint's next atom as
 * well, did no better). */
static inline void hrr_prefetch(const void *p, size_t bytes) {
    const char *c = (const char *)p;
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 3);
}

/* Complex products on interleaved float32, one register of VW complex values at a time: the real and
 * imaginary parts of y are duplicated in lane (moveldup / movehdup), x's pairs swapped in lane, and one
 * fmaddsub (or fmsubadd for conj(x)) gives (xr yr -+ xi yi, xi yr +- xr yi); no cross-lane shuffle. The
 * same loop serves AVX-512 (VW 8) and AVX2 + FMA (VW 4): V(op) names the width's intrinsic. */
#if defined(__AVX512F__)
#include <immintrin.h>
typedef __m512 vreal;
#define V(op) _mm512_##op
#define VW 8
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 vreal;
#define V(op) _mm256_##op
#define VW 4
#endif

#ifdef VW
static inline int64_t cmac_simd_f32(float *restrict o, const float *restrict x, const float *restrict y,
                                    float w, int64_t nf) {
    const vreal wv = V(set1_ps)(w);
    int64_t k = 0;
    for (; k + VW <= nf; k += VW) {
        const vreal xv = V(loadu_ps)(x + 2 * k), yv = V(loadu_ps)(y + 2 * k);
        const vreal t = V(mul_ps)(V(permute_ps)(xv, 0xB1), V(movehdup_ps)(yv));
        const vreal prod = V(fmaddsub_ps)(xv, V(moveldup_ps)(yv), t);
        V(storeu_ps)(o + 2 * k, V(fmadd_ps)(wv, prod, V(loadu_ps)(o + 2 * k)));
    }
    return k;
}

static inline int64_t cmac_conj_simd_f32(float *restrict o, const float *restrict x,
                                         const float *restrict y, float w, int store, int64_t nf) {
    const vreal wv = V(set1_ps)(w);
    int64_t k = 0;
    for (; k + VW <= nf; k += VW) {
        const vreal xv = V(loadu_ps)(x + 2 * k), yv = V(loadu_ps)(y + 2 * k);
        /* conj(x) y = (xr yr + xi yi, xr yi - xi yr): y * xr, then -/+ swap(y) * xi */
        const vreal t = V(mul_ps)(V(permute_ps)(yv, 0xB1), V(movehdup_ps)(xv));
        const vreal prod = V(mul_ps)(wv, V(fmsubadd_ps)(yv, V(moveldup_ps)(xv), t));
        V(storeu_ps)(o + 2 * k, store ? prod : V(add_ps)(prod, V(loadu_ps)(o + 2 * k)));
    }
    return k;
}
#undef V
#undef VW
#define HRR_SIMD 1
#else
#define HRR_SIMD 0
#endif

#define REAL float
#define NAME(x) x##_f32
#include "bind_impl.h"
#undef REAL
#undef NAME
#undef HRR_SIMD

#define HRR_SIMD 0
#define REAL double
#define NAME(x) x##_f64
#include "bind_impl.h"
#undef REAL
#undef NAME
#undef HRR_SIMD
