"""Statistics across trials against hand-checked and published values."""

from __future__ import annotations

import math

import pytest

from pipelines.eval.stats import bootstrap_ci, dunnett_vs_control, fisher, mean_ci, welch


def test_fisher_reproduces_the_papers_neighbour_test():
    # paper: 28/40 related neighbours (HRRBase) vs 4/40 (unstructured), one-tailed p = 2.44e-8
    r = fisher(28, 40, 4, 40, alternative="greater")
    assert r["odds_ratio"] == pytest.approx(28 * 36 / (12 * 4))
    assert r["pvalue"] == pytest.approx(2.44e-8, rel=1e-2)
    assert fisher(2, 4, 2, 4)["pvalue"] == pytest.approx(1.0)


def test_fisher_rejects_impossible_counts():
    with pytest.raises(ValueError, match="related counts"):
        fisher(5, 4, 0, 4)
    assert math.isnan(fisher(0, 0, 1, 4)["pvalue"])


def test_welch_by_hand():
    # a: mean 2.5, var 5/3, n 4; b: mean 6, var 10, n 5 -> se^2 = 5/12 + 2, t = -3.5 / sqrt(29/12)
    a, b = [1, 2, 3, 4], [2, 4, 6, 8, 10]
    se2 = (5 / 3) / 4 + 10 / 5
    t = -3.5 / math.sqrt(se2)
    df = se2**2 / (((5 / 3) / 4) ** 2 / 3 + (10 / 5) ** 2 / 4)
    from scipy.stats import t as student

    r = welch(a, b)
    assert r["statistic"] == pytest.approx(t, rel=1e-9)
    assert r["pvalue"] == pytest.approx(2 * student.sf(abs(t), df), rel=1e-9)
    assert r["diff"] == pytest.approx(-3.5)


def test_welch_degenerate_inputs_give_nan():
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


def test_dunnett_too_few_values_and_bad_control():
    r = dunnett_vs_control({"control": [1.0], "x": [2.0, 3.0]}, "control")
    assert math.isnan(r["x"]["pvalue"]) and r["x"]["diff"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="control group"):
        dunnett_vs_control({"x": [1.0]}, "control")


def test_bootstrap_interval():
    lo, hi = bootstrap_ci([1, 2, 3, 4, 5])
    assert lo < 3 < hi and 1 <= lo and hi <= 5
    assert bootstrap_ci([1, 2, 3, 4, 5]) == (lo, hi)  # seeded
    assert bootstrap_ci([7.0]) == (7.0, 7.0)
    assert bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)
    m = mean_ci([1.0, float("nan"), 3.0, None])
    assert m.mean == pytest.approx(2.0) and m.n == 2
    assert math.isnan(mean_ci([]).mean)
