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

int hrr_native_abi(void) { return 4; }


/* Ask for a row's cache lines ahead of its use: the forward's next atom is at an address no hardware
 * prefetcher can guess (about 10 % of the forward at D = 768; in the adjoint it did not pay). */
static inline void hrr_prefetch(const void *p, size_t bytes) {
    const char *c = (const char *)p;
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 0, 3);
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* The complex products below with AVX-512: eight values per register, the same in-lane shuffles; the
 * AVX2 + FMA versions after this block are the same loop at half the width. */
static inline int64_t cmac_simd_f32(float *restrict o, const float *restrict x, const float *restrict y,
                                    float w, int64_t nf) {
    const __m512 wv = _mm512_set1_ps(w);
    int64_t k = 0;
    for (; k + 8 <= nf; k += 8) {
        const __m512 xv = _mm512_loadu_ps(x + 2 * k), yv = _mm512_loadu_ps(y + 2 * k);
        const __m512 t = _mm512_mul_ps(_mm512_permute_ps(xv, 0xB1), _mm512_movehdup_ps(yv));
        const __m512 prod = _mm512_fmaddsub_ps(xv, _mm512_moveldup_ps(yv), t);
        _mm512_storeu_ps(o + 2 * k, _mm512_fmadd_ps(wv, prod, _mm512_loadu_ps(o + 2 * k)));
    }
    return k;
}

static inline int64_t cmac_conj_simd_f32(float *restrict o, const float *restrict x,
                                         const float *restrict y, float w, int store, int64_t nf) {
    const __m512 wv = _mm512_set1_ps(w);
    int64_t k = 0;
    for (; k + 8 <= nf; k += 8) {
        const __m512 xv = _mm512_loadu_ps(x + 2 * k), yv = _mm512_loadu_ps(y + 2 * k);
        const __m512 t = _mm512_mul_ps(_mm512_permute_ps(yv, 0xB1), _mm512_movehdup_ps(xv));
        const __m512 prod = _mm512_mul_ps(wv, _mm512_fmsubadd_ps(yv, _mm512_moveldup_ps(xv), t));
        _mm512_storeu_ps(o + 2 * k, store ? prod : _mm512_add_ps(prod, _mm512_loadu_ps(o + 2 * k)));
    }
    return k;
}
#define HRR_SIMD 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* Complex products on interleaved float32 with AVX2 + FMA, four values per register: the real and
 * imaginary parts of y are duplicated in lane (moveldup / movehdup), x's pairs swapped in lane, and one
 * fmaddsub (or fmsubadd for conj(x)) gives (xr yr -+ xi yi, xi yr +- xr yi); no cross-lane shuffle. */
static inline int64_t cmac_simd_f32(float *restrict o, const float *restrict x, const float *restrict y,
                                    float w, int64_t nf) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t k = 0;
    for (; k + 4 <= nf; k += 4) {
        const __m256 xv = _mm256_loadu_ps(x + 2 * k), yv = _mm256_loadu_ps(y + 2 * k);
        const __m256 t = _mm256_mul_ps(_mm256_permute_ps(xv, 0xB1), _mm256_movehdup_ps(yv));
        const __m256 prod = _mm256_fmaddsub_ps(xv, _mm256_moveldup_ps(yv), t);
        _mm256_storeu_ps(o + 2 * k, _mm256_fmadd_ps(wv, prod, _mm256_loadu_ps(o + 2 * k)));
    }
    return k;
}

static inline int64_t cmac_conj_simd_f32(float *restrict o, const float *restrict x,
                                         const float *restrict y, float w, int store, int64_t nf) {
    const __m256 wv = _mm256_set1_ps(w);
    int64_t k = 0;
    for (; k + 4 <= nf; k += 4) {
        const __m256 xv = _mm256_loadu_ps(x + 2 * k), yv = _mm256_loadu_ps(y + 2 * k);
        /* conj(x) y = (xr yr + xi yi, xr yi - xi yr): y * xr, then -/+ swap(y) * xi */
        const __m256 t = _mm256_mul_ps(_mm256_permute_ps(yv, 0xB1), _mm256_movehdup_ps(xv));
        const __m256 prod = _mm256_mul_ps(wv, _mm256_fmsubadd_ps(yv, _mm256_moveldup_ps(xv), t));
        _mm256_storeu_ps(o + 2 * k, store ? prod : _mm256_add_ps(prod, _mm256_loadu_ps(o + 2 * k)));
    }
    return k;
}
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
