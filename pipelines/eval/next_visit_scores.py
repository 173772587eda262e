"""Top-k recall of next-visit category rankings: overall, per frequency quintile, with patient-bootstrap
intervals (pure NumPy on the rankings; :mod:`pipelines.eval.next_visit` makes the rankings).

Definitions, for P scored patients, patient p with its true set T_p (the categories of its last visit)
and its ranking R_p, ``top_k(R_p)`` the first k categories of R_p:

- **recall@k**, averaged over patients (every patient counts once, whatever the size of its last visit):
  ``mean_p |top_k(R_p) ∩ T_p| / |T_p|``;
- **pooled recall@k**, over true categories (every true category of every patient counts once; GRAM's
  "accuracy@k" as its figure 2 computes it for a group of codes): ``Σ_p |top_k(R_p) ∩ T_p| / Σ_p |T_p|``;
- **quintile recall@k**, pooled over the true categories of one frequency quintile Q:
  ``Σ_p |top_k(R_p) ∩ T_p ∩ Q| / Σ_p |T_p ∩ Q|``.

Quintiles: the categories that occur as a target of the scored (test) patients, sorted by their count in
the pretraining split (the pretraining patients' visits holding the category; ties by category index), cut
into five groups of (nearly) equal numbers of categories, quintile 1 the rarest (:func:`frequency_quintiles`;
each quintile's count range is reported). Ties of counts can fall on both sides of a cut.

Intervals: the percentile patient bootstrap of :mod:`pipelines.eval.stats` (2,000 resamples of the scored
patients, 95 %): a resample is a multiset of patients, each bringing all its true categories, so the pooled
and quintile recalls are ratios of sums over the resampled patients. A paired difference of two rankings is
scored on the same resamples (:func:`paired_difference`).

Dimension legend: P patients, C categories, K ranked categories per patient, B resamples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .stats import Interval, bootstrap_patients, paired_bootstrap_diff

__all__ = ["Hits", "KS", "N_QUINTILES", "QUINTILE_K", "Quintiles", "frequency_quintiles", "hits",
           "paired_difference", "scores"]  # fmt: skip

KS = (10, 20, 30)  # the k of recall@k (GRAM: 5 to 30)
QUINTILE_K = 20  # the k whose per-quintile recall gets an interval
N_QUINTILES = 5


@dataclass(frozen=True)
class Quintiles:
    """The frequency quintiles of the target categories: ``group (C,)`` each category's quintile (0..4;
    -1: not a target of the scored patients) and, per quintile, its categories and count range."""

    group: np.ndarray
    categories: list[int]
    low: list[int]  # smallest pretraining count in the quintile
    high: list[int]  # largest

    def as_list(self) -> list[dict[str, int]]:
        return [
            {"quintile": q + 1, "categories": n, "low": lo, "high": hi}
            for q, (n, lo, hi) in enumerate(zip(self.categories, self.low, self.high, strict=True))
        ]


def frequency_quintiles(target: sp.csr_matrix, count: np.ndarray) -> Quintiles:
    """Quintiles of the categories that occur in ``target (P, C)`` by ``count (C,)`` (module docstring)."""
    present = np.flatnonzero(np.asarray(target.sum(0)).ravel() > 0)
    order = present[np.lexsort((present, count[present]))]  # by count, then category index
    group = np.full(target.shape[1], -1, dtype=np.int64)
    cats, low, high = [], [], []
    for q, part in enumerate(np.array_split(order, N_QUINTILES)):
        group[part] = q
        cats.append(int(part.size))
        low.append(int(count[part].min()) if part.size else 0)
        high.append(int(count[part].max()) if part.size else 0)
    return Quintiles(group, cats, low, high)


@dataclass
class Hits:
    """Per patient: ``found[k] (P,)`` true categories in the top k, ``n_true (P,)``, and per quintile
    ``found_q[k] (P, 5)`` and ``true_q (P, 5)``."""

    found: dict[int, np.ndarray]
    n_true: np.ndarray
    found_q: dict[int, np.ndarray]
    true_q: np.ndarray

    @property
    def n(self) -> int:
        return int(self.n_true.size)

    def recall(self, k: int):
        """``rows -> recall@k`` averaged over the patients ``rows`` (``(n,)`` or ``(B, n)``)."""
        r = self.found[k] / np.maximum(self.n_true, 1)
        return lambda rows: np.take(r, rows).mean(-1)

    def pooled(self, k: int):
        """``rows -> pooled recall@k`` over the true categories of the patients ``rows``."""
        f, t = self.found[k].astype(np.float64), self.n_true.astype(np.float64)
        return lambda rows: _ratio(np.take(f, rows).sum(-1), np.take(t, rows).sum(-1))

    def quintile(self, k: int, q: int):
        """``rows -> recall@k`` pooled over the true categories of quintile ``q`` (0-based)."""
        f, t = self.found_q[k][:, q].astype(np.float64), self.true_q[:, q].astype(np.float64)
        return lambda rows: _ratio(np.take(f, rows).sum(-1), np.take(t, rows).sum(-1))


def _ratio(a, b):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.asarray(b) > 0, np.asarray(a) / np.where(np.asarray(b) > 0, b, 1), np.nan)


def hits(ranked: np.ndarray, target: sp.csr_matrix, quintiles: Quintiles, ks: tuple[int, ...] = KS) -> Hits:
    """The hits of ``ranked (P, K)`` (category indices, best first; -1 pads a shorter ranking; a category
    ranked twice counts once) against ``target (P, C)``."""
    p = target.shape[0]
    if ranked.shape[0] != p:
        raise ValueError(f"{ranked.shape[0]} rankings for {p} patients")
    if ranked.shape[1] < max(ks):
        ranked = np.pad(ranked, ((0, 0), (0, max(ks) - ranked.shape[1])), constant_values=-1)
    truth = target.toarray() > 0  # (P, C)
    group = np.append(quintiles.group, -1)  # index -1 (padding) -> no quintile
    rows = np.arange(p)[:, None]
    first = _first_occurrence(ranked)  # (P, K) the category's first place in its row
    is_hit = np.where(ranked >= 0, truth[rows, np.maximum(ranked, 0)], False) & first  # (P, K)
    q_of = group[np.where(ranked >= 0, ranked, -1)]  # (P, K)
    true_q = np.zeros((p, N_QUINTILES), dtype=np.int64)
    pr, pc = np.nonzero(truth)
    np.add.at(true_q, (pr[group[pc] >= 0], group[pc][group[pc] >= 0]), 1)
    found, found_q = {}, {}
    for k in ks:
        h = is_hit[:, :k]
        found[k] = h.sum(1)
        fq = np.zeros((p, N_QUINTILES), dtype=np.int64)
        hr, hc = np.nonzero(h & (q_of[:, :k] >= 0))
        np.add.at(fq, (hr, q_of[:, :k][hr, hc]), 1)
        found_q[k] = fq
    return Hits(found, truth.sum(1), found_q, true_q)


def _first_occurrence(ranked: np.ndarray) -> np.ndarray:
    """``(P, K)`` bool: the entry is its category's first place in its row."""
    order = np.argsort(ranked, axis=1, kind="stable")
    s = np.take_along_axis(ranked, order, 1)
    dup = np.zeros_like(s, dtype=bool)
    dup[:, 1:] = s[:, 1:] == s[:, :-1]
    out = np.empty_like(dup)
    np.put_along_axis(out, order, ~dup, 1)
    return out


def scores(h: Hits, ks: tuple[int, ...] = KS, intervals: bool = True) -> dict:
    """Point estimates and intervals of one ranking on one group of patients: ``n``, ``recall`` and
    ``pooled`` by k, ``quintiles`` by k (five values, None where the quintile has no true category among the
    patients), and ``intervals`` (``recall@k``, ``pooled@k`` for every k; ``q<i>@20``) as
    :meth:`Interval.as_dict`."""
    every = np.arange(h.n)
    out: dict = {
        "n": h.n,
        "recall": {str(k): _num(h.recall(k)(every)) for k in ks},
        "pooled": {str(k): _num(h.pooled(k)(every)) for k in ks},
        "quintiles": {str(k): [_num(h.quintile(k, q)(every)) for q in range(N_QUINTILES)] for k in ks},
        "intervals": {},
    }
    if not intervals or h.n == 0:
        return out
    iv: dict[str, Interval] = {}
    for k in ks:
        iv[f"recall@{k}"] = bootstrap_patients(h.recall(k), h.n, vectorized=True)
        iv[f"pooled@{k}"] = bootstrap_patients(h.pooled(k), h.n, vectorized=True)
    if QUINTILE_K in ks:
        for q in range(N_QUINTILES):
            iv[f"q{q + 1}@{QUINTILE_K}"] = bootstrap_patients(h.quintile(QUINTILE_K, q), h.n, vectorized=True)
    out["intervals"] = {name: v.as_dict() for name, v in iv.items()}
    return out


def paired_difference(a: Hits, b: Hits, k: int = QUINTILE_K) -> Interval:
    """recall@k of ``a`` minus that of ``b`` on the same patients: paired patient bootstrap."""
    if a.n != b.n:
        raise ValueError(f"paired difference of {a.n} and {b.n} patients")
    return paired_bootstrap_diff(a.recall(k), b.recall(k), a.n, vectorized=True)


def _num(x) -> float | None:
    v = float(x)
    return v if np.isfinite(v) else None
