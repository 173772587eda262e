"""Results over seeds: the t-interval (:func:`pipelines.eval.stats.t_interval`) against SciPy and by hand
and its cell over runs, seed parsing, run-by-run wins and the wording of a claim that must hold in every
run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pipelines.eval.markdown import format_cell
from pipelines.eval.seeds import claim, parse_seeds, wins
from pipelines.eval.stats import t_interval


def test_t_interval_matches_scipy_and_hand_values():
    x = [0.688, 0.681, 0.702, 0.655]
    iv = t_interval(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert iv.n == 4 and iv.estimate == pytest.approx(np.mean(x))
    assert (iv.low, iv.high) == (pytest.approx(lo), pytest.approx(hi))
    # by hand: mean 2, sd 1, n 3 -> half-width t(0.975, 2) / sqrt(3) = 4.302653 / 1.732051 = 2.484138
    iv = t_interval([1.0, 2.0, 3.0])
    assert (iv.low, iv.high) == (pytest.approx(2 - 2.484138), pytest.approx(2 + 2.484138))
    assert t_interval([1.0, 2.0, 3.0], level=0.9).high < iv.high
    assert format_cell(iv) == "2.000 (-0.484 to 4.484)"
    assert t_interval(v for v in (1.0, 2.0, 3.0)).n == 3  # any iterable


def test_t_interval_without_enough_runs():
    one = t_interval([0.5, float("nan"), None])  # NaN and None are dropped, not counted
    assert one.n == 1 and one.estimate == 0.5 and math.isnan(one.low) and math.isnan(one.high)
    assert format_cell(one) == "0.500 (1 run)"
    assert format_cell(t_interval([])) == "n/a"
    same = t_interval([0.7, 0.7, 0.7])
    assert same.low == pytest.approx(0.7) and same.high == pytest.approx(0.7)  # no spread, no width
    assert format_cell(same) == "0.700 (0.700 to 0.700)"


def test_parse_seeds():
    assert parse_seeds(3) == [0, 1, 2] and parse_seeds("3") == [0, 1, 2]
    assert parse_seeds("0,5,7") == [0, 5, 7] and parse_seeds("7,") == [7] and parse_seeds([4, 1]) == [4, 1]
    for bad in (0, "0", "1,1", "-1,", "two", "", [], "1.5"):
        with pytest.raises(ValueError, match="data seeds"):
            parse_seeds(bad, "data seeds")


def test_wins_pair_by_run_and_claim_only_when_every_run_agrees():
    plain = {(0, 0): 0.50, (0, 1): 0.55, (1, 0): 0.40, (1, 1): 0.60}
    hrr = {(0, 0): 0.62, (0, 1): 0.75, (1, 0): 0.52, (1, 1): 0.72, (2, 0): 0.9}  # (2, 0) has no twin
    w = wins(hrr, plain)
    assert (w.better, w.worse, w.ties, w.n) == (4, 0, 0, 4)
    assert w.cell() == "4 of 4 (+0.120 to +0.200)"
    assert claim("HRR", "plain", "unseen-code accuracy", w) == (
        "HRR is better than plain on unseen-code accuracy in all 4 runs (differences +0.120 to +0.200)."
    )
    mixed = wins({**hrr, (1, 1): 0.54}, plain)  # reversed once
    assert (mixed.better, mixed.worse, mixed.cell()) == (3, 1, "3 of 4 (-0.060 to +0.200)")
    assert claim("HRR", "plain", "accuracy", mixed) is None
    worse = wins(plain, hrr)
    assert claim("plain", "HRR", "accuracy", worse).startswith(
        "plain is worse than HRR on accuracy in all 4 runs"
    )
    tie = wins({(0, 0): 0.5, (0, 1): 0.6}, {(0, 0): 0.5, (0, 1): 0.5})
    assert (tie.better, tie.ties) == (1, 1) and claim("a", "b", "m", tie) is None  # a tie breaks "every run"
    assert claim("a", "b", "m", wins({(0, 0): 0.9}, {(0, 0): 0.1})) is None  # one run claims nothing
    loss = wins({(0, 0): 2.0, (0, 1): 3.0}, {(0, 0): 1.0, (0, 1): 1.0}, higher_is_better=False)
    assert (loss.better, loss.worse) == (0, 2)
    assert wins({(0, 0): float("nan")}, {(0, 0): 0.1}).n == 0
