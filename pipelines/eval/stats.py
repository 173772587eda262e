"""Statistics across trials (pure functions on arrays; SciPy for the tests and the bootstrap).

- :func:`mean_ci`: mean with a seeded percentile-bootstrap 95 % interval (``scipy.stats.bootstrap``).
- :func:`dunnett_vs_control`: two-sided Dunnett test of each configuration against the unstructured
  control (many-to-one comparisons with the family-wise error controlled; ``scipy.stats.dunnett``).
- :func:`welch`: two-sided Welch t-test (unequal variances) for the ROOD comparison.
- :func:`fisher`: Fisher's exact test on "related" counts out of totals (the neighbour study).

NaN values (a metric undefined in one trial) are dropped before testing; a test with too few values
returns NaN instead of raising, so a report of a tiny run still renders.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "bootstrap_means", "bootstrap_ci", "mean_ci", "dunnett_vs_control", "welch", "fisher"]

N_BOOT = 10_000  # bootstrap resamples
SEED = 0  # bootstrap seed (intervals are reproducible)


@dataclass(frozen=True)
class Interval:
    """A mean with its 95 % interval and the number of values behind it."""

    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def _clean(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=np.float64).ravel()
    return x[np.isfinite(x)]


def _bootstrap(x: np.ndarray, level: float, n_boot: int, seed: int):
    """``scipy.stats.bootstrap`` of the mean of the 1-D array ``x``: percentile method, seeded."""
    from scipy import stats

    return stats.bootstrap((x,), np.mean, n_resamples=n_boot, confidence_level=level, method="percentile",
                           vectorized=True, rng=np.random.default_rng(seed))  # fmt: skip


def bootstrap_means(x: np.ndarray, *, n_boot: int = N_BOOT, seed: int = SEED) -> np.ndarray:
    """Means of ``n_boot`` resamples (with replacement, seeded) of the 1-D array ``x``: ``(n_boot,)``."""
    return _bootstrap(np.asarray(x, dtype=np.float64), 0.95, n_boot, seed).bootstrap_distribution


def bootstrap_ci(
    values: Sequence[float], *, level: float = 0.95, n_boot: int = N_BOOT, seed: int = SEED
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values`` (seeded; NaN when empty).

    One value gives a zero-width interval at that value.
    """
    x = _clean(values)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), float(x[0])
    if np.all(
        x == x[0]
    ):  # constant data: SciPy declines (degenerate distribution); the interval is the value
        return float(x[0]), float(x[0])
    ci = _bootstrap(x, level, n_boot, seed).confidence_interval
    return float(ci.low), float(ci.high)


def mean_ci(values: Sequence[float], **kw) -> Interval:
    """Mean and bootstrap 95 % interval of ``values`` (NaN and None dropped)."""
    x = _clean(values)
    lo, hi = bootstrap_ci(x, **kw)
    return Interval(float(x.mean()) if x.size else math.nan, lo, hi, int(x.size))


def dunnett_vs_control(groups: Mapping[str, Sequence[float]], control: str) -> dict[str, dict[str, float]]:
    """Two-sided Dunnett test of every group against ``control``.

    Returns ``{group: {"statistic", "pvalue", "diff"}}`` (diff = group mean - control mean) for each
    non-control group; p-values are NaN when a group or the control has fewer than two values, or when
    all values are identical (no variance to test against).
    """
    from scipy import stats

    if control not in groups:
        raise ValueError(f"control group {control!r} not among {sorted(groups)}")
    ctrl = _clean(groups[control])
    others = {k: _clean(v) for k, v in groups.items() if k != control}
    out = {k: {"statistic": math.nan, "pvalue": math.nan, "diff": _diff(v, ctrl)} for k, v in others.items()}
    usable = {k: v for k, v in others.items() if v.size >= 2}
    pooled = np.concatenate([ctrl, *usable.values()]) if usable else ctrl
    if ctrl.size < 2 or not usable or np.ptp(pooled) == 0:
        return out
    with warnings.catch_warnings():  # nearly identical trials: SciPy warns of precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.dunnett(*usable.values(), control=ctrl, alternative="two-sided", random_state=SEED)
    for (k, _), s, p in zip(usable.items(), res.statistic, res.pvalue, strict=True):
        out[k].update(statistic=float(s), pvalue=float(p))
    return out


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Two-sided Welch t-test of ``a`` against ``b``: ``{"statistic", "pvalue", "diff"}``."""
    from scipy import stats

    x, y = _clean(a), _clean(b)
    out = {"statistic": math.nan, "pvalue": math.nan, "diff": _diff(x, y)}
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = stats.ttest_ind(x, y, equal_var=False)
    out.update(statistic=float(r.statistic), pvalue=float(r.pvalue))
    return out


def fisher(
    related_a: int, total_a: int, related_b: int, total_b: int, alternative: str = "two-sided"
) -> dict[str, float]:
    """Fisher's exact test of ``related_a / total_a`` against ``related_b / total_b``.

    ``alternative="greater"`` tests whether a's share is larger (the paper's one-tailed test).
    """
    from scipy import stats

    for name, v in (("total_a", total_a), ("total_b", total_b)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if not (0 <= related_a <= total_a and 0 <= related_b <= total_b):
        raise ValueError(
            f"related counts must lie in [0, total], got {related_a}/{total_a} and {related_b}/{total_b}"
        )
    table = [[related_a, total_a - related_a], [related_b, total_b - related_b]]
    if total_a == 0 or total_b == 0:
        return {"odds_ratio": math.nan, "pvalue": math.nan}
    r = stats.fisher_exact(table, alternative=alternative)
    return {"odds_ratio": float(r.statistic), "pvalue": float(r.pvalue)}


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(a.mean() - b.mean()) if a.size and b.size else math.nan
