"""Statistics of the report (pure functions on arrays; SciPy for the reference distributions).

Which interval answers which question:

- one trained model on held-out patients: :func:`bootstrap_patients`, a seeded percentile bootstrap that
  resamples *patients* (a model with several fine-tuning trials is scored by the mean over its trials on
  the same resample, so the trials never count as independent replicates);
  :func:`paired_bootstrap_diff`, the difference of two models scored on the same resampled patients;
- across pretraining seeds (or the runs of a comparison): :func:`t_interval` (Student t over the values) and
  :func:`compare_over_seeds` (paired t when the seeds are matched, Welch otherwise, Dunnett when every
  configuration has at least 3 seeds and more than one is compared with the control);
- a share of probes (frequency bins): :func:`proportion_interval` (Clopper-Pearson);
- related-neighbour counts: :func:`fisher`.

:class:`PatientScorer` computes the task metrics of :mod:`pipelines.train.metrics` on a resample from
per-patient counts (a resample is a multiset of patient rows), without re-sorting: thousands of
resamples of a 22-label head take seconds. When a patient has several rows (MEDS label tasks: one row
per prediction time), ``groups`` makes a resample a multiset of *patients*, each bringing all its rows
(a cluster bootstrap): :meth:`PatientScorer.metric` and :func:`trial_mean` take it.

NaN policy: NaN and None values are dropped before an interval or a test; a resample on which a metric is
undefined (AUROC of a resample with one class) is dropped from the bootstrap distribution; too few values
give NaN bounds and a note instead of an error, so the report of a tiny run still renders.

Dimension legend: B resamples, P patients, L labels, T fine-tuning trials.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Interval", "PatientScorer", "bootstrap_patients", "paired_bootstrap_diff", "t_interval",
    "proportion_interval", "compare_over_seeds", "predicts_constant", "bootstrap_means",
    "dunnett_vs_control", "welch", "fisher", "finite", "CONSTANT", "NO_PREDICTIONS",
]  # fmt: skip

N_BOOT = 2000  # bootstrap resamples of patients
SEED = 0  # bootstrap seed (intervals are reproducible)
CONSTANT_PTP = 1e-6  # a head whose probabilities span less than this across patients predicts a constant
METRICS = ("accuracy", "precision", "recall", "f1", "auroc")  # what PatientScorer.scores computes
SCORABLE = (*METRICS, "auprc")  # what PatientScorer.metric computes (AUPRC: average precision)
TOO_FEW = "n too small for a test"
ONE_SEED = "1 seed: no interval over seeds"
# notes of an Interval that its cell states instead of bounds (pipelines.eval.markdown.format_cell)
CONSTANT = "predicts a constant"
NO_PREDICTIONS = "no per-patient predictions: mean over fine-tuning trials, no interval"


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval, the number of units behind it and how it was made."""

    estimate: float  # the statistic on the full data (bootstrap) or the mean (t, proportion)
    low: float
    high: float
    n: int  # patients resampled, seeds, or probes
    method: str  # e.g. "patient bootstrap (percentile, 2000 resamples, 95 %)"
    note: str = ""  # why the bounds are missing or degenerate, when they are
    extra: dict = field(default_factory=dict, compare=False)  # per-method details (dropped resamples, ...)

    @property
    def width(self) -> float:
        return self.high - self.low

    @classmethod
    def from_dict(cls, d: dict) -> Interval:
        """The interval :meth:`as_dict` wrote (its null bounds read back as NaN)."""
        num = lambda k: math.nan if d.get(k) is None else float(d[k])  # noqa: E731
        return cls(num("estimate"), num("low"), num("high"), int(d.get("n") or 0), str(d.get("method") or ""),
                   str(d.get("note") or ""))  # fmt: skip

    def as_dict(self) -> dict:
        out = {
            "estimate": _num(self.estimate),
            "low": _num(self.low),
            "high": _num(self.high),
            "n": self.n,
            "method": self.method,
        }
        if self.note:
            out["note"] = self.note
        return out | {k: _num(v) if isinstance(v, float) else v for k, v in self.extra.items()}


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def finite(x: object) -> bool:
    """Whether ``x`` is a finite number (False for None, NaN, infinities and anything not a number)."""
    return isinstance(x, int | float) and math.isfinite(x)


def _clean(values: Iterable[float | None]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=np.float64).ravel()
    return x[np.isfinite(x)]


# ----------------------------------------------------------------------------- the patient bootstrap


def _boot_rows(n: int, n_boot: int, seed: int) -> np.ndarray:
    """``(n_boot, n)`` patient rows drawn with replacement; the same draw ``scipy.stats.bootstrap`` makes
    with ``rng=np.random.default_rng(seed)`` (one batch)."""
    return np.random.default_rng(seed).integers(0, n, (n_boot, n))


def _percentile_interval(
    stat: Callable[[np.ndarray], float],
    n: int,
    n_boot: int,
    seed: int,
    level: float,
    method: str,
    vectorized: bool,
) -> Interval:
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if n < 1:
        return Interval(math.nan, math.nan, math.nan, 0, method, "no patients")
    estimate = float(stat(np.arange(n)))
    rows = _boot_rows(n, n_boot, seed)  # (B, n)
    if vectorized:
        dist = np.asarray(stat(rows), dtype=np.float64).reshape(n_boot)  # (B,)
    else:
        dist = np.array([stat(r) for r in rows], dtype=np.float64)  # (B,)
    kept = dist[np.isfinite(dist)]
    extra = (
        {"resamples": n_boot, "undefined_resamples": int(n_boot - kept.size)} if kept.size < n_boot else {}
    )
    if kept.size < 2:
        return Interval(
            estimate, math.nan, math.nan, n, method, "the metric is undefined on the resamples", extra
        )
    alpha = (1 - level) / 2
    low, high = np.quantile(kept, [alpha, 1 - alpha])
    return Interval(estimate, float(low), float(high), n, method, "", extra)


def bootstrap_method(n_boot: int = N_BOOT, level: float = 0.95) -> str:
    return f"patient bootstrap (percentile, {n_boot} resamples, {100 * level:g} %)"


def bootstrap_patients(
    metric: Callable[[np.ndarray], float],
    n: int,
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    level: float = 0.95,
    vectorized: bool = False,
) -> Interval:
    """Percentile-bootstrap interval of ``metric`` over ``n`` patients.

    ``metric(rows)`` scores the patient rows ``rows`` (``(n,)`` ints, with repeats); the estimate is
    ``metric(arange(n))``. With ``vectorized``, ``metric`` also takes all resamples at once, ``(B, n)`` ->
    ``(B,)`` (:meth:`PatientScorer.metric` does). For a model with several fine-tuning trials, ``metric``
    is the mean over the trials on the same rows. The resamples equal ``scipy.stats.bootstrap(...,
    method="percentile", rng=np.random.default_rng(seed))``'s.
    """
    return _percentile_interval(metric, n, n_boot, seed, level, bootstrap_method(n_boot, level), vectorized)


def paired_bootstrap_diff(
    metric_a: Callable[[np.ndarray], float],
    metric_b: Callable[[np.ndarray], float],
    n: int,
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    level: float = 0.95,
    vectorized: bool = False,
) -> Interval:
    """Percentile-bootstrap interval of ``metric_a - metric_b``, both scored on the same resampled rows of
    the same ``n`` patients (two models on one test set)."""
    method = "paired " + bootstrap_method(n_boot, level)
    diff = lambda r: np.subtract(metric_a(r), metric_b(r))  # noqa: E731
    return _percentile_interval(diff, n, n_boot, seed, level, method, vectorized)


# ----------------------------------------------------------------------------- across seeds


def t_interval(values: Iterable[float | None], level: float = 0.95) -> Interval:
    """Mean of ``values`` (one per pretraining seed, or per run) with its Student-t interval
    ``mean ± t(level, n-1) * sd / sqrt(n)`` (``scipy.stats.t``); None and NaN are dropped, not counted.

    Fewer than two values give NaN bounds and the note ``"1 seed: no interval over seeds"``; identical
    values give a zero-width interval (the data are constant).
    """
    from scipy import stats

    x = _clean(values)
    method = f"t interval over seeds ({100 * level:g} %)"
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0, method, "no values")
    mean = float(x.mean())
    if x.size == 1:
        return Interval(mean, math.nan, math.nan, 1, method, ONE_SEED)
    sem = float(x.std(ddof=1) / math.sqrt(x.size))
    if sem == 0:
        return Interval(mean, mean, mean, int(x.size), method, "identical values over seeds")
    low, high = stats.t.interval(level, x.size - 1, loc=mean, scale=sem)
    return Interval(mean, float(low), float(high), int(x.size), method)


def proportion_interval(hits: int, n: int, level: float = 0.95) -> Interval:
    """Share ``hits / n`` with its exact Clopper-Pearson interval (``scipy.stats.binomtest``)."""
    from scipy import stats

    method = f"Clopper-Pearson ({100 * level:g} %)"
    if n <= 0:
        return Interval(math.nan, math.nan, math.nan, 0, method, "no probes")
    if not 0 <= hits <= n:
        raise ValueError(f"hits must lie in [0, n], got {hits}/{n}")
    ci = stats.binomtest(int(hits), int(n)).proportion_ci(confidence_level=level, method="exact")
    return Interval(hits / n, float(ci.low), float(ci.high), int(n), method)


def compare_over_seeds(
    groups: Mapping[str, Mapping[int, float] | Sequence[float]], control: str
) -> dict[str, dict[str, object]]:
    """Each configuration against ``control`` over its per-seed values.

    ``groups`` maps a configuration to its values, as ``{seed: value}`` (seeds matched across
    configurations make the test paired) or a plain sequence (independent). Returns ``{config: {"test",
    "statistic", "pvalue", "diff", "note"}}`` for every non-control configuration (diff = mean - control
    mean): Dunnett (family-wise, ``scipy.stats.dunnett``) when every configuration has >= 3 seeds and
    more than one is compared; otherwise the paired t-test when both have the same seeds, else Welch;
    with fewer than 2 values on either side no test (``test`` None, note ``"n too small for a test"``).
    """
    from scipy import stats

    if control not in groups:
        raise ValueError(f"control group {control!r} not among {sorted(groups)}")

    def values(g) -> dict:
        items = g.items() if isinstance(g, Mapping) else enumerate(g)
        return {k: float(v) for k, v in items if v is not None and math.isfinite(float(v))}

    vals = {k: values(v) for k, v in groups.items()}
    ctrl = vals[control]
    others = [k for k in vals if k != control]
    out: dict[str, dict[str, object]] = {}
    for k in others:
        a, b = np.array(list(vals[k].values())), np.array(list(ctrl.values()))
        r = {"test": None, "statistic": math.nan, "pvalue": math.nan, "diff": _diff(a, b), "note": ""}
        matched = isinstance(groups[k], Mapping) and isinstance(groups[control], Mapping)
        matched = matched and set(vals[k]) == set(ctrl)
        if a.size < 2 or b.size < 2:
            r["note"] = TOO_FEW
        elif matched:
            seeds = sorted(ctrl)
            d = np.array([vals[k][s] - ctrl[s] for s in seeds])
            r.update(test="paired t", note=f"paired over {len(seeds)} matched seeds")
            if np.ptp(d) == 0:
                r["note"] = "identical differences over seeds: no variance to test"
            else:
                t = stats.ttest_rel(a=[vals[k][s] for s in seeds], b=[ctrl[s] for s in seeds])
                r.update(statistic=float(t.statistic), pvalue=float(t.pvalue))
        else:
            w = welch(a, b)
            r.update(test="Welch t", statistic=w["statistic"], pvalue=w["pvalue"], note="independent seeds")
        out[k] = r
    if len(others) > 1 and all(len(v) >= 3 for v in vals.values()):
        d = dunnett_vs_control({k: list(v.values()) for k, v in vals.items()}, control)
        for k in others:
            out[k].update(
                test="Dunnett",
                statistic=d[k]["statistic"],
                pvalue=d[k]["pvalue"],
                note=f"many-to-one against {control}, family-wise",
            )
    return out


def predicts_constant(probs: np.ndarray, tol: float = CONSTANT_PTP) -> bool:
    """Whether a head's probabilities ``(P, L)`` (or ``(P,)``) are constant across patients: every label's
    range below ``tol``."""
    p = np.asarray(probs, dtype=np.float64)
    if p.shape[0] == 0:
        return False
    return bool(np.ptp(p.reshape(p.shape[0], -1), axis=0).max() < tol)


# ----------------------------------------------------------------------------- metrics on a resample


class PatientScorer:
    """The task metrics of one head on ``P`` patients, for any multiset of patient rows.

    ``labels (P, L)``, ``probs (P, L)``, ``thresholds (L,)``: the same definitions as
    :func:`pipelines.train.metrics.multilabel_metrics` (macro over labels; a ratio with an empty
    denominator is 0; AUROC over the labels where both classes occur, NaN when none) and, for one label,
    :func:`~pipelines.train.metrics.binary_metrics`. Scores are computed from per-patient counts, so a
    resample costs O(P L) and no sort.
    """

    def __init__(self, labels: np.ndarray, probs: np.ndarray, thresholds: np.ndarray) -> None:
        y = np.asarray(labels, dtype=np.float64)
        p = np.asarray(probs, dtype=np.float64)
        if y.ndim == 1:
            y, p = y[:, None], p[:, None]
        if y.shape != p.shape:
            raise ValueError(f"labels {y.shape} and probs {p.shape} differ")
        thr = np.asarray(thresholds, dtype=np.float64).reshape(-1)
        if thr.size not in (1, y.shape[1]):
            raise ValueError(f"thresholds of length {thr.size} for {y.shape[1]} labels")
        self.n, self.n_labels = y.shape
        pred = p >= thr[None, :]
        self._tp, self._fp = y * pred, (1 - y) * pred  # (P, L) each
        self._fn, self._pos = y * ~pred, y
        self.constant = predicts_constant(p)
        # AUROC: patients sorted by score per label, flattened label after label (index l * P + rank), with
        # each position's tie group start and end (inclusive) and its label's first position
        order = np.argsort(p, axis=0, kind="stable").T  # (L, P)
        s = np.take_along_axis(p.T, order, axis=1)  # (L, P)
        new = np.ones_like(s, dtype=bool)
        new[:, 1:] = s[:, 1:] != s[:, :-1]
        idx = np.broadcast_to(np.arange(self.n), s.shape)
        start = np.maximum.accumulate(np.where(new, idx, 0), axis=1)  # (L, P)
        last = np.ones_like(new)
        last[:, :-1] = new[:, 1:]
        end = np.minimum.accumulate(np.where(last, idx, self.n - 1)[:, ::-1], axis=1)[:, ::-1]  # (L, P)
        base = (np.arange(self.n_labels) * self.n)[:, None]  # (L, 1)
        self._order = order.ravel()  # (L*P,)
        self._start, self._end = (start + base).ravel(), (end + base).ravel()  # (L*P,) each
        self._row_start = np.repeat(base.ravel(), self.n)  # (L*P,)
        self._y_sorted = np.take_along_axis(y.T, order, axis=1).ravel()  # (L*P,)

    def counts(self, rows: np.ndarray | None) -> np.ndarray:
        """How often each patient occurs in ``rows``: ``(n,)`` -> ``(P,)``, ``(B, n)`` -> ``(B, P)``
        (all once when None)."""
        if rows is None:
            return np.ones(self.n)
        r = np.asarray(rows)
        if r.ndim == 1:
            return np.bincount(r, minlength=self.n).astype(np.float64)
        flat = (r + self.n * np.arange(r.shape[0])[:, None]).ravel()
        return np.bincount(flat, minlength=r.shape[0] * self.n).reshape(r.shape[0], self.n).astype(np.float64)

    def scores(self, rows: np.ndarray | None = None) -> dict[str, float]:
        """All of :data:`METRICS` on ``rows``."""
        c = self.counts(rows)
        return {m: float(self._metric(m, c)) for m in METRICS}

    def metric(
        self, name: str, groups: np.ndarray | None = None
    ) -> Callable[[np.ndarray], float | np.ndarray]:
        """``rows -> value`` of one metric of :data:`SCORABLE`: ``(n,)`` -> float, ``(B, n)`` -> ``(B,)``
        (vectorized). With ``groups`` (``(P,)`` ints in ``[0, G)``, each row's patient), ``rows`` are
        patients (``n`` of ``G``), and each patient drawn brings all its rows."""
        if name not in SCORABLE:
            raise ValueError(f"unknown metric {name!r}; expected one of {SCORABLE}")

        def f(rows: np.ndarray):
            v = self._metric(name, self.group_counts(rows, groups))
            return float(v) if np.ndim(rows) == 1 else v

        return f

    def group_counts(self, rows: np.ndarray | None, groups: np.ndarray | None) -> np.ndarray:
        """How often each row occurs when ``rows`` are drawn: rows themselves (``groups`` None), else
        patients (``groups (P,)``: each row's patient), whose rows all count as often as the patient."""
        if groups is None or rows is None:
            return self.counts(rows)
        g = np.asarray(groups, dtype=np.int64)
        if g.shape != (self.n,):
            raise ValueError(f"groups must be ({self.n},), got {g.shape}")
        r = np.asarray(rows)
        n_groups = int(g.max(initial=-1)) + 1
        if r.ndim == 1:
            per = np.bincount(r, minlength=n_groups).astype(np.float64)
        else:
            flat = (r + n_groups * np.arange(r.shape[0])[:, None]).ravel()
            per = np.bincount(flat, minlength=r.shape[0] * n_groups).reshape(r.shape[0], n_groups)
        return per[..., g].astype(np.float64)  # (P,) or (B, P)

    def _metric(self, name: str, c: np.ndarray) -> np.ndarray:
        """Metric ``name`` from counts ``c`` ``(P,)`` or ``(B, P)``: ``()`` or ``(B,)``."""
        if name in ("auroc", "auprc"):
            return self._ranked(c, self._auroc_chunk if name == "auroc" else self._auprc_chunk)
        tp, fp, fn = c @ self._tp, c @ self._fp, c @ self._fn  # (..., L) each
        if name == "accuracy":
            cells = c.sum(-1) * self.n_labels
            return np.divide(
                cells - fp.sum(-1) - fn.sum(-1), cells, out=np.zeros_like(cells), where=cells > 0
            )
        num, den = {"precision": (tp, tp + fp), "recall": (tp, tp + fn), "f1": (2 * tp, 2 * tp + fp + fn)}[
            name
        ]
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0).mean(-1)

    def _ranked(self, c: np.ndarray, chunk: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        if c.ndim == 1:
            return self._ranked(c[None], chunk)[0]
        step = max(1, 2_000_000 // (self.n * self.n_labels))  # resamples per chunk (bounded memory)
        return np.concatenate([chunk(c[i : i + step]) for i in range(0, c.shape[0], step)])

    def _auprc_chunk(self, c: np.ndarray) -> np.ndarray:
        """Average precision (``sklearn.metrics.average_precision_score`` with the counts as sample
        weights): per label, each positive weighs the precision among the rows scored at least its score
        (its tie group included); macro over the labels with positives, NaN when none."""
        b = c.shape[0]
        w = c[:, self._order]  # (B, L*P)
        wp = w * self._y_sorted
        before_p, before_w = np.cumsum(wp, axis=1) - wp, np.cumsum(w, axis=1) - w
        n_pos = wp.reshape(b, self.n_labels, -1).sum(-1)  # (B, L)
        n_all = w.reshape(b, self.n_labels, -1).sum(-1)  # (B, L)
        pos_ge = np.repeat(n_pos, self.n, axis=1) - (before_p[:, self._start] - before_p[:, self._row_start])
        all_ge = np.repeat(n_all, self.n, axis=1) - (before_w[:, self._start] - before_w[:, self._row_start])
        prec = np.divide(pos_ge, all_ge, out=np.zeros_like(pos_ge), where=all_ge > 0)
        ap = (wp * prec).reshape(b, self.n_labels, -1).sum(-1)  # (B, L)
        ok = n_pos > 0
        ap = np.divide(ap, n_pos, out=np.zeros_like(ap), where=ok)
        k = ok.sum(-1)
        return np.divide((ap * ok).sum(-1), k, out=np.full(b, np.nan), where=k > 0)

    def _auroc_chunk(self, c: np.ndarray) -> np.ndarray:
        b = c.shape[0]
        w = c[:, self._order]  # (B, L*P) counts in score order, label after label
        wp, wn = w * self._y_sorted, w * (1 - self._y_sorted)
        cum = np.cumsum(wn, axis=1)  # negatives up to and including each position (label offsets cancel)
        before = cum - wn
        below = before[:, self._start] - before[:, self._row_start]  # the label's negatives scored lower
        tied = cum[:, self._end] - before[:, self._start]  # the label's negatives in the same tie group
        n_pos = wp.reshape(b, self.n_labels, -1).sum(-1)  # (B, L)
        n_neg = wn.reshape(b, self.n_labels, -1).sum(-1)  # (B, L)
        u = (wp * (below + 0.5 * tied)).reshape(b, self.n_labels, -1).sum(-1)  # (B, L) Mann-Whitney U
        ok = (n_pos > 0) & (n_neg > 0)
        auc = np.divide(u, n_pos * n_neg, out=np.zeros_like(u), where=ok)
        k = ok.sum(-1)  # (B,) labels where AUROC is defined
        return np.divide((auc * ok).sum(-1), k, out=np.full(b, np.nan), where=k > 0)


def trial_mean(
    scorers: Sequence[PatientScorer], name: str, groups: np.ndarray | None = None
) -> Callable[[np.ndarray], float | np.ndarray]:
    """``rows -> mean over trials`` of metric ``name`` (rows ``(n,)`` or ``(B, n)``): one model with several
    fine-tuning trials (scorers of the same patients) scored on the same resampled patients; with
    ``groups`` (each row's patient) ``rows`` are patients, each bringing all its rows
    (:meth:`PatientScorer.metric`)."""
    if name not in SCORABLE:
        raise ValueError(f"unknown metric {name!r}; expected one of {SCORABLE}")
    if len({s.n for s in scorers}) != 1:
        raise ValueError(f"the trials score different numbers of patients: {[s.n for s in scorers]}")

    def f(rows: np.ndarray):
        c = scorers[0].group_counts(rows, groups)  # (P,) or (B, P), shared by the trials
        v = np.mean([s._metric(name, c) for s in scorers], axis=0)
        return float(v) if np.ndim(rows) == 1 else v

    return f


# ----------------------------------------------------------------------------- tests kept from before


def bootstrap_means(x: np.ndarray, *, n_boot: int = 10_000, seed: int = SEED) -> np.ndarray:
    """Means of ``n_boot`` resamples (with replacement, seeded) of the 1-D array ``x``: ``(n_boot,)``."""
    from scipy import stats

    x = np.asarray(x, dtype=np.float64)
    res = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=n_boot,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return res.bootstrap_distribution


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
    with warnings.catch_warnings():  # nearly identical values: SciPy warns of precision loss
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
