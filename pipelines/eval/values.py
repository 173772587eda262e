"""The numbers of the report's cells, with their intervals (:mod:`pipelines.eval.stats` applied to the
files :mod:`pipelines.eval.gather` read).

One trained model (one pretraining seed): a patient bootstrap of the metric, the mean over the model's
fine-tuning trials on each resample. Several pretraining seeds: the mean of the per-seed values with a
Student-t interval over seeds. A run without per-patient predictions (an older experiment) gives the mean
over its trials without an interval (note :data:`NO_PREDICTIONS`). The frequency-bin and neighbour numbers
come from the evaluations' typed records (:mod:`pipelines.eval.records`), one per pretraining run (None
where a run has none).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from .gather import Baselines, Experiment, Head, Run
from .stats import (  # noqa: F401  (CONSTANT, NO_PREDICTIONS: the notes the report's cells read, V.CONSTANT)
    CONSTANT,
    NO_PREDICTIONS,
    Interval,
    finite,
    paired_bootstrap_diff,
    proportion_interval,
    t_interval,
)

if TYPE_CHECKING:
    from .records import FrequencyBins, Neighbours

# metrics that get a patient-bootstrap interval; the others are point estimates (mean over trials)
INTERVAL_METRICS = {"mortality": ("f1", "auroc"), "chapters": ("f1",)}
POINT = "mean over fine-tuning trials on all patients (no interval)"
ONE_RUN = "one pretraining run (last validation)"
BASELINE_PREFIX = "baseline:"  # a rival that is a baseline model, not a configuration


def _point(value: float, n: int, method: str, note: str = "") -> Interval:
    return Interval(value, math.nan, math.nan, n, method, note)


def _constant_note(iv: Interval, h: Head) -> Interval:
    k = h.constant_trials
    if k == h.trials:
        return replace(iv, note=CONSTANT)
    if k:
        return replace(iv, note=f"{k}/{h.trials} trials predict a constant")
    return iv


def head_interval(h: Head, metric: str) -> Interval:
    """One model's metric on one split: bootstrap interval or point estimate, constant heads noted."""
    if metric in INTERVAL_METRICS.get(h.task, ()):
        return _constant_note(h.interval(metric), h)
    return _constant_note(_point(h.point(metric), h.n, POINT), h)


def seed_interval(run: Run, task: str, split: str, metric: str) -> Interval | None:
    """The metric of one pretraining seed's fine-tuned heads (None when not scored)."""
    h = run.heads.get((task, split))
    if h is not None:
        return head_interval(h, metric)
    vals = [float(t[metric]) for t in run.trial_scores.get((task, split), []) if finite(t.get(metric))]
    return (
        _point(float(np.mean(vals)), len(vals), "mean over fine-tuning trials", NO_PREDICTIONS)
        if vals
        else None
    )


def over_seeds(per_seed: list[Interval | None]) -> Interval | None:
    """One seed: its own interval; several: the t interval of their estimates (notes kept when shared)."""
    per = [p for p in per_seed if p is not None and math.isfinite(p.estimate)]
    if not per:
        return None
    if len(per) == 1:
        return per[0]
    iv = t_interval([p.estimate for p in per])
    notes = {p.note for p in per}
    return replace(iv, note=notes.pop()) if len(notes) == 1 and notes != {""} else iv


def conf_interval(runs: list[Run], task: str, split: str, metric: str) -> Interval | None:
    return over_seeds([seed_interval(r, task, split, metric) for r in runs])


def per_seed(runs: list[Run], task: str, split: str, metric: str) -> dict[int, float]:
    """``{seed: estimate}`` (for the tests over seeds)."""
    out = {}
    for r in runs:
        iv = seed_interval(r, task, split, metric)
        if iv is not None and math.isfinite(iv.estimate):
            out[r.seed] = iv.estimate
    return out


def baseline_interval(b: Baselines | None, model: str, task: str, split: str, metric: str) -> Interval | None:
    """A baseline's metric (the ``constant`` baseline is not flagged as predicting a constant: it is one)."""
    h = b.head(model, task, split) if b is not None else None
    if h is None:
        return None
    iv = head_interval(h, metric)
    return replace(iv, note="") if model == "constant" and iv.note == CONSTANT else iv


def mlm_interval(runs: list[Run], key: str) -> Interval | None:
    vals = [r.mlm[key] for r in runs if finite(r.mlm.get(key))]
    if not vals:
        return None
    if len(vals) == 1:
        return _point(float(vals[0]), 1, ONE_RUN, "1 seed: no interval over seeds")
    return t_interval(vals)


def _paired(ha: Head, hb: Head, metric: str) -> Interval | None:
    """``a - b`` on the patients both heads scored: a paired patient bootstrap (None: no common patient)."""
    common = np.intersect1d(ha.subject_id, hb.subject_id)
    if common.size == 0:
        return None
    a = ha if common.size == ha.n else ha.restrict(common)
    b = hb if common.size == hb.n else hb.restrict(common)
    return paired_bootstrap_diff(a.metric(metric), b.metric(metric), int(common.size), vectorized=True)


def diff_intervals(
    exp: Experiment,
    conf: str,
    task: str = "chapters",
    split: str = "rood_unseen",
    metric: str = "f1",
    rival: str | None = None,
) -> tuple[dict[int, Interval], Interval | None]:
    """``conf - rival`` on the same patients (``rival``: a configuration, ``baseline:<model>``, or None for
    the control): per seed a paired patient bootstrap (a baseline is one model, paired with every seed),
    and over seeds (when more than one) the t interval of the per-seed differences."""
    rival = exp.control if rival is None else rival
    fixed = None
    if rival.startswith(BASELINE_PREFIX):
        fixed = exp.baselines.head(rival[len(BASELINE_PREFIX) :], task, split) if exp.baselines else None
        if fixed is None:
            return {}, None
    ctrl = {r.seed: r for r in exp.configurations.get(rival, [])}
    out: dict[int, Interval] = {}
    for r in exp.configurations.get(conf, []):
        c = ctrl.get(r.seed)
        if c is None and fixed is None:
            continue
        ha, hb = r.heads.get((task, split)), fixed if fixed is not None else c.heads.get((task, split))
        if ha is not None and hb is not None:
            if (iv := _paired(ha, hb, metric)) is not None:
                out[r.seed] = iv
        elif c is not None:
            ia, ib = seed_interval(r, task, split, metric), seed_interval(c, task, split, metric)
            if ia is not None and ib is not None:
                out[r.seed] = _point(
                    ia.estimate - ib.estimate, 0, "difference of trial means", NO_PREDICTIONS
                )
    over = t_interval([iv.estimate for iv in out.values()]) if len(out) > 1 else None
    return out, over


def best_rival(
    exp: Experiment, conf: str, task: str, split: str, metric: str, rivals: tuple[str, ...]
) -> tuple[str, Interval] | None:
    """The best of ``rivals`` (configurations, or ``baseline:<model>``; never ``conf`` itself, never the
    ceiling) by point estimate on (task, split, metric): ``(name, its interval)``, None when none scored."""
    best: tuple[str, Interval] | None = None
    for name in rivals:
        if name == conf or name == BASELINE_PREFIX + "ceiling":
            continue
        if name.startswith(BASELINE_PREFIX):
            iv = baseline_interval(exp.baselines, name[len(BASELINE_PREFIX) :], task, split, metric)
        else:
            iv = conf_interval(exp.configurations.get(name, []), task, split, metric)
        if iv is not None and math.isfinite(iv.estimate) and (best is None or iv.estimate > best[1].estimate):
            best = (name, iv)
    return best


def _bins(rec: FrequencyBins | None) -> list:
    return rec.bins if rec is not None else []


def rarest_bin(bins_by_conf: dict[str, list[FrequencyBins | None]]) -> int | None:
    """Index of the lowest log-frequency bin with probes in some run (None without frequency bins)."""
    found = [j for recs in bins_by_conf.values() for r in recs for j, b in enumerate(_bins(r)) if b.probes]
    return min(found) if found else None


def bin_interval(recs: list[FrequencyBins | None], j: int, key: str = "top100") -> Interval | None:
    """Accuracy in frequency bin ``j``: Clopper-Pearson over the probes (one seed) or t over seeds."""
    per = []
    for r in recs:
        bins = _bins(r)
        if j < len(bins) and bins[j].probes and finite(getattr(bins[j], key)):
            n = int(bins[j].probes)
            per.append(proportion_interval(int(round(getattr(bins[j], key) * n)), n))
    return over_seeds(per)


def bin_median_rank(recs: list[FrequencyBins | None], j: int) -> float | None:
    """Median rank of bin ``j``'s probes (mean over seeds; None where no run recorded it)."""
    per = [float(b[j].median_rank) for r in recs if j < len(b := _bins(r)) and finite(b[j].median_rank)]
    return sum(per) / len(per) if per else None


def ranked_codes(bins_by_conf: dict[str, list[FrequencyBins | None]]) -> int | None:
    """How many concepts the frequency-bin probes were ranked among (None where no run recorded it)."""
    return next(
        (int(b.ranked) for recs in bins_by_conf.values() for r in recs for b in _bins(r) if b.ranked), None
    )


def rare_neighbours(recs: list[Neighbours | None], group: str = "rare") -> tuple[int, int]:
    """Related neighbours and neighbours scored in ``group``, summed over seeds."""
    gs = [r.group(group) for r in recs if r is not None]
    return sum(g.related for g in gs), sum(g.total for g in gs)


def patients(runs_by_conf: dict[str, list[Run]], task: str, split: str) -> int:
    """Patients scored on (task, split) by any run (0 when none)."""
    ns = [
        r.heads[(task, split)].n if (task, split) in r.heads else int(t.get("n") or 0)
        for runs in runs_by_conf.values()
        for r in runs
        for t in ([{}] if (task, split) in r.heads else r.trial_scores.get((task, split), []))
    ]
    return max(ns, default=0)
