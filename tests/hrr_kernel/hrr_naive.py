"""Slow, obvious float64 references for golden tests (imported by the tests in this folder)."""

from __future__ import annotations

import numpy as np


def naive_circular_convolution(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(x ⊛ y)[t] = Σ_k x[k] y[(t - k) mod D], in float64, by the definition."""
    d = x.shape[0]
    out = np.zeros(d, dtype=np.float64)
    for t in range(d):
        for k in range(d):
            out[t] += x[k] * y[(t - k) % d]
    return out


def naive_matrix(n_concepts, edges, atoms: np.ndarray, relations: np.ndarray) -> np.ndarray:
    """C[i] = Σ_{(i, j, k)} r_j ⊛ a_k over an edge list, the slow obvious way."""
    c = np.zeros((n_concepts, atoms.shape[1]), dtype=np.float64)
    for i, j, k in zip(*edges, strict=True):
        c[i] += naive_circular_convolution(relations[j].astype(np.float64), atoms[k].astype(np.float64))
    return c
