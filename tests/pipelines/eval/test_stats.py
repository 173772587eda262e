"""The report's statistics against SciPy, scikit-learn and published values on known data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pipelines.eval.stats import (
    PatientScorer,
    bootstrap_patients,
    compare_over_seeds,
    dunnett_vs_control,
    fisher,
    paired_bootstrap_diff,
    predicts_constant,
    proportion_interval,
    t_interval,
    trial_mean,
    welch,
)
from pipelines.train.predictions import score_predictions

X = np.array([2.1, 3.4, 1.9, 5.6, 4.4, 3.3, 2.8, 6.1, 4.0, 3.7, 2.2, 5.0])
Y = np.array([1.0, 3.9, 2.5, 4.1, 4.8, 2.9, 2.0, 5.5, 3.1, 3.0, 2.6, 4.2])


def test_bootstrap_patients_matches_scipy():
    iv = bootstrap_patients(lambda rows: X[rows].mean(), len(X), n_boot=999, seed=3)
    ref = sps.bootstrap((X,), np.mean, n_resamples=999, method="percentile", rng=np.random.default_rng(3))
    assert iv.estimate == pytest.approx(X.mean())
    assert iv.low == pytest.approx(ref.confidence_interval.low, rel=1e-12)
    assert iv.high == pytest.approx(ref.confidence_interval.high, rel=1e-12)
    assert iv.n == len(X) and "patient bootstrap" in iv.method and "999 resamples" in iv.method
    # a 90 % interval lies inside the 95 % one; the same seed gives the same interval
    narrow = bootstrap_patients(lambda rows: X[rows].mean(), len(X), n_boot=999, seed=3, level=0.9)
    assert iv.low <= narrow.low and narrow.high <= iv.high
    assert bootstrap_patients(lambda rows: X[rows].mean(), len(X), n_boot=999, seed=3) == iv


def test_paired_bootstrap_diff_matches_scipy_paired():
    iv = paired_bootstrap_diff(lambda r: X[r].mean(), lambda r: Y[r].mean(), len(X), n_boot=999, seed=1)
    ref = sps.bootstrap(
        (X, Y),
        lambda a, b, axis=-1: a.mean(axis) - b.mean(axis),
        paired=True,
        n_resamples=999,
        method="percentile",
        rng=np.random.default_rng(1),
    )
    assert iv.estimate == pytest.approx(X.mean() - Y.mean())
    assert (iv.low, iv.high) == pytest.approx(tuple(ref.confidence_interval), rel=1e-12)
    # pairing: the difference's interval is narrower than unpaired resampling would give
    unpaired = sps.bootstrap(
        (X, Y),
        lambda a, b, axis=-1: a.mean(axis) - b.mean(axis),
        n_resamples=999,
        method="percentile",
        rng=np.random.default_rng(1),
    )
    assert iv.width < unpaired.confidence_interval.high - unpaired.confidence_interval.low


def test_bootstrap_drops_undefined_resamples():
    y = np.array([1, 0, 0, 0, 0, 0, 0, 0], dtype=float)  # one positive: many resamples lack it
    s = PatientScorer(y, np.linspace(0.9, 0.1, 8), [0.5])
    iv = bootstrap_patients(s.metric("auroc"), 8, n_boot=200)
    assert iv.estimate == pytest.approx(1.0)
    assert 0 < iv.extra["undefined_resamples"] < 200 and iv.as_dict()["undefined_resamples"] > 0


def test_t_interval_matches_scipy_and_one_seed():
    v = [0.61, 0.66, 0.58, 0.64]
    iv = t_interval(v)
    lo, hi = sps.t.interval(0.95, 3, loc=np.mean(v), scale=sps.sem(v))
    assert (iv.estimate, iv.low, iv.high, iv.n) == pytest.approx((np.mean(v), lo, hi, 4))
    one = t_interval([0.7, float("nan")])
    assert one.estimate == 0.7 and math.isnan(one.low) and one.note == "1 seed: no interval over seeds"
    same = t_interval([0.5, 0.5, 0.5])
    assert same.width == 0 and same.note  # constant data: zero width, said so


def test_proportion_interval_clopper_pearson():
    iv = proportion_interval(3, 40)
    ref = sps.binomtest(3, 40).proportion_ci(method="exact")
    assert (iv.estimate, iv.low, iv.high) == pytest.approx((3 / 40, ref.low, ref.high))
    assert proportion_interval(0, 40).low == 0 and proportion_interval(0, 40).high > 0
    assert math.isnan(proportion_interval(0, 0).estimate)
    with pytest.raises(ValueError, match="hits"):
        proportion_interval(5, 4)


def test_compare_over_seeds_paired_welch_dunnett_and_too_few():
    ctrl = {0: 0.50, 1: 0.55, 2: 0.52}
    base = {0: 0.60, 1: 0.66, 2: 0.61}
    r = compare_over_seeds({"unstructured": ctrl, "base": base}, "unstructured")["base"]
    ref = sps.ttest_rel([0.60, 0.66, 0.61], [0.50, 0.55, 0.52])
    assert r["test"] == "paired t" and r["pvalue"] == pytest.approx(ref.pvalue)
    assert r["diff"] == pytest.approx(np.mean([0.1, 0.11, 0.09]))
    r = compare_over_seeds({"unstructured": [0.50, 0.55, 0.52], "base": [0.60, 0.66]}, "unstructured")["base"]
    assert r["test"] == "Welch t" and r["pvalue"] == pytest.approx(
        welch([0.60, 0.66], [0.50, 0.55, 0.52])["pvalue"]
    )
    r = compare_over_seeds({"unstructured": {0: 0.5}, "base": {0: 0.6}}, "unstructured")["base"]
    assert r["test"] is None and math.isnan(r["pvalue"]) and r["note"] == "n too small for a test"
    three = {"unstructured": ctrl, "base": base, "add": {0: 0.52, 1: 0.50, 2: 0.58}}
    r = compare_over_seeds(three, "unstructured")
    d = dunnett_vs_control({k: list(v.values()) for k, v in three.items()}, "unstructured")
    assert r["base"]["test"] == "Dunnett" and r["base"]["pvalue"] == pytest.approx(d["base"]["pvalue"])
    with pytest.raises(ValueError, match="control group"):
        compare_over_seeds({"base": base}, "unstructured")


def _heads(seed: int = 0, p: int = 60, labels: int = 5):
    rng = np.random.default_rng(seed)
    y = (rng.random((p, labels)) < 0.3).astype(np.int8)
    probs = np.clip(0.5 * y + rng.random((p, labels)) * 0.6, 0, 1).astype(np.float32)
    probs[:10, 0] = 0.25  # ties
    return y, probs, rng.uniform(0.3, 0.6, labels).astype(np.float32)


@pytest.mark.parametrize("labels", [1, 5])
def test_patient_scorer_equals_the_training_metrics(labels):
    y, probs, thr = _heads(labels=labels)
    task = "mortality" if labels == 1 else "chapters"
    s = PatientScorer(y, probs, thr)
    rows = np.random.default_rng(4).integers(0, len(y), len(y))
    for r in (None, rows):
        ref = score_predictions(task, y if r is None else y[r], probs if r is None else probs[r], thr)
        got = s.scores(r)
        for m in ("accuracy", "precision", "recall", "f1", "auroc"):
            assert got[m] == pytest.approx(ref[m], abs=1e-12), m


def test_vectorized_bootstrap_equals_the_loop():
    y, probs, thr = _heads(seed=2, p=50)
    for name in ("f1", "auroc", "accuracy"):
        a, b = PatientScorer(y, probs, thr), PatientScorer(y, probs[::-1].copy(), thr)
        m = trial_mean([a, b], name)
        loop = bootstrap_patients(m, len(y), n_boot=300)
        vec = bootstrap_patients(m, len(y), n_boot=300, vectorized=True)
        assert (vec.estimate, vec.low, vec.high) == pytest.approx(
            (loop.estimate, loop.low, loop.high), abs=1e-12
        )
        d1 = paired_bootstrap_diff(a.metric(name), b.metric(name), len(y), n_boot=300)
        d2 = paired_bootstrap_diff(a.metric(name), b.metric(name), len(y), n_boot=300, vectorized=True)
        assert (d1.low, d1.high) == pytest.approx((d2.low, d2.high), abs=1e-12)


def test_trial_mean_and_constant_heads():
    y, probs, thr = _heads()
    a, b = PatientScorer(y, probs, thr), PatientScorer(y, probs[::-1].copy(), thr)
    rows = np.arange(len(y))
    assert trial_mean([a, b], "f1")(rows) == pytest.approx((a.scores()["f1"] + b.scores()["f1"]) / 2)
    const = np.tile(np.float32([0.1, 0.2, 0.3, 0.4, 0.5]), (len(y), 1))
    assert predicts_constant(const) and PatientScorer(y, const, thr).constant
    assert not predicts_constant(probs) and not a.constant
    const[3, 2] += 1e-3
    assert not predicts_constant(const)


def test_fisher_reproduces_the_papers_neighbour_test():
    # paper: 28/40 related neighbours (HRRBase) vs 4/40 (unstructured), one-tailed p = 2.44e-8
    r = fisher(28, 40, 4, 40, alternative="greater")
    assert r["odds_ratio"] == pytest.approx(28 * 36 / (12 * 4))
    assert r["pvalue"] == pytest.approx(2.44e-8, rel=1e-2)
    assert fisher(2, 4, 2, 4)["pvalue"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="related counts"):
        fisher(5, 4, 0, 4)
    assert math.isnan(fisher(0, 0, 1, 4)["pvalue"])


def test_welch_by_hand():
    # a: mean 2.5, var 5/3, n 4; b: mean 6, var 10, n 5 -> se^2 = 5/12 + 2, t = -3.5 / sqrt(29/12)
    a, b = [1, 2, 3, 4], [2, 4, 6, 8, 10]
    se2 = (5 / 3) / 4 + 10 / 5
    t = -3.5 / math.sqrt(se2)
    df = se2**2 / (((5 / 3) / 4) ** 2 / 3 + (10 / 5) ** 2 / 4)
    r = welch(a, b)
    assert r["statistic"] == pytest.approx(t, rel=1e-9)
    assert r["pvalue"] == pytest.approx(2 * sps.t.sf(abs(t), df), rel=1e-9)
    assert r["diff"] == pytest.approx(-3.5)
    assert math.isnan(welch([1.0], [2.0, 3.0])["pvalue"])
    assert math.isnan(welch([1.0, 1.0], [1.0, 1.0])["pvalue"])


def test_dunnett_published_example():
    # Dunnett (1955), blood counts; the published two-sided p-values are 0.620 and 0.006
    groups = {
        "control": [7.40, 8.50, 7.20, 8.24, 9.84, 8.32],
        "a": [9.76, 8.80, 7.68, 9.36],
        "b": [12.80, 9.68, 12.16, 9.20, 10.55],
    }
    r = dunnett_vs_control(groups, "control")
    assert set(r) == {"a", "b"}
    assert r["a"]["pvalue"] == pytest.approx(0.620, abs=2e-3)
    assert r["b"]["pvalue"] == pytest.approx(0.006, abs=1e-3)
    assert r["b"]["diff"] == pytest.approx(10.878 - 8.25)
    r = dunnett_vs_control({"control": [1.0], "x": [2.0, 3.0]}, "control")
    assert math.isnan(r["x"]["pvalue"]) and r["x"]["diff"] == pytest.approx(1.5)
