"""Metrics against values computed by hand (and scikit-learn's conventions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.train.metrics import (
    auroc,
    average_precision,
    best_f1_threshold,
    binary_metrics,
    f1_thresholds,
    multilabel_metrics,
    precision_recall_f1,
)


def test_binary_by_hand():
    y = [1, 0, 1, 1, 0, 0]
    s = [0.9, 0.8, 0.7, 0.3, 0.2, 0.1]
    m = binary_metrics(y, s)
    # predictions at 0.5: 1 1 1 0 0 0 -> tp 2, fp 1, fn 1, tn 2
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    # positive/negative pairs ordered correctly: 0.9 beats 3, 0.7 beats 2 (0.2, 0.1), 0.3 beats 2 -> 7 of 9
    assert m["auroc"] == pytest.approx(7 / 9)
    # AP: ranks 1 (P=1, dR=1/3), 3 (P=2/3, dR=1/3), 4 (P=3/4, dR=1/3)
    assert m["auprc"] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)


def test_ties():
    # all scores equal: AUROC 0.5, AP = prevalence (one threshold)
    assert auroc([1, 0, 1, 0], [0.5] * 4) == pytest.approx(0.5)
    assert average_precision([1, 0, 0, 0], [0.5] * 4) == pytest.approx(0.25)
    # a tie between one positive and one negative counts one half: pairs (p1>n1, p1~n2? no)
    # y: 1 0 1 0, s: .8 .8 .4 .1 -> pairs: (p.8,n.8)=.5, (p.8,n.1)=1, (p.4,n.8)=0, (p.4,n.1)=1 -> 2.5/4
    assert auroc([1, 0, 1, 0], [0.8, 0.8, 0.4, 0.1]) == pytest.approx(2.5 / 4)
    # AP with a tied top group {p, n}: P=1/2 at R=1/2, then P=2/3 at R=1 -> 1/4 + 1/3
    assert average_precision([1, 0, 1, 0], [0.8, 0.8, 0.4, 0.1]) == pytest.approx(0.25 + 1 / 3)


def test_edge_cases():
    assert math.isnan(auroc([1, 1], [0.2, 0.3])) and math.isnan(average_precision([0, 0], [0.2, 0.3]))
    assert precision_recall_f1([0, 0], [0, 0]) == (0.0, 0.0, 0.0)
    assert auroc([0, 1], [0.1, 0.9]) == 1.0 and auroc([1, 0], [0.1, 0.9]) == 0.0
    with pytest.raises(ValueError, match="shape"):
        binary_metrics([1, 0], [0.5])
    with pytest.raises(ValueError, match="0/1"):
        binary_metrics([2, 0], [0.5, 0.1])


def test_multilabel_macro_by_hand():
    y = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
    s = np.array([[0.9, 0.2, 0.1], [0.6, 0.7, 0.3], [0.4, 0.8, 0.6], [0.1, 0.3, 0.2]])
    m = multilabel_metrics(y, s)
    # label 0: pred 1 1 0 0 -> tp1 fp1 fn1: P .5 R .5 F1 .5; label 1: pred 0 1 1 0 -> P1 R1 F1 1;
    # label 2: pred 0 0 1 0, no positives -> P0 R0 F1 0
    assert m["precision"] == pytest.approx(1.5 / 3) and m["recall"] == pytest.approx(1.5 / 3)
    assert m["f1"] == pytest.approx(1.5 / 3)
    assert m["accuracy"] == pytest.approx(9 / 12) and m["subset_accuracy"] == pytest.approx(2 / 4)
    # micro: tp 3, fp 2, fn 1 -> 6 / 9
    assert m["f1_micro"] == pytest.approx(6 / 9)
    # AUROC label 0: positives .9 .4 vs negatives .6 .1 -> 3/4; label 1: .7 .8 vs .2 .3 -> 1;
    # label 2 undefined
    assert m["auroc"] == pytest.approx((0.75 + 1.0) / 2)
    # AP label 0: order .9(p) .6(n) .4(p) .1(n) -> (1 + 2/3)/2; label 1: 1
    assert m["auprc"] == pytest.approx(((1 + 2 / 3) / 2 + 1) / 2)


def test_random_scores_agree_with_pairwise_definition():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = np.round(rng.random(200), 1)  # many ties
    pos, neg = s[y == 1], s[y == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert auroc(y, s) == pytest.approx(pairs)


def _brute_force_best_f1(y, s):
    """Max F1 of ``s >= t`` over every candidate threshold (each distinct score, and above all)."""
    cands = np.r_[np.unique(s), np.max(s) + 1.0]
    return max(precision_recall_f1(y, (s >= t).astype(float))[2] for t in cands)


def test_best_f1_threshold_by_hand():
    y = np.array([1, 0, 1, 1, 0, 0])
    s = np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1])
    # F1 at each cut: 2/4, 2/5, 4/6, 6/7 (predict >= 0.3), 6/8, 6/9 -> the cut below 0.3, halfway to 0.2
    t, f1 = best_f1_threshold(y, s)
    assert f1 == pytest.approx(6 / 7) and t == pytest.approx(0.25)
    assert binary_metrics(y, s, t)["f1"] == pytest.approx(6 / 7)
    # the best is every sample positive: threshold 0
    assert best_f1_threshold([1, 1, 0], [0.1, 0.2, 0.3]) == (0.0, pytest.approx(0.8))
    # no positives: the default (F1 is 0 whatever the threshold)
    assert best_f1_threshold([0, 0, 0], [0.1, 0.2, 0.3], default=0.4) == (0.4, 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_best_f1_threshold_matches_a_brute_force_scan(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    y = (rng.random(n) < rng.uniform(0.02, 0.6)).astype(float)
    y[0] = 1.0
    s = np.round(np.clip(0.3 * y + rng.random(n) * 0.8, 0, 1), 2 if seed % 2 else 6).astype(
        np.float32
    )  # ties too
    t, f1 = best_f1_threshold(y, s)
    best = _brute_force_best_f1(y, s)
    assert f1 == pytest.approx(best)
    # the returned threshold gives that F1 (as float32 probabilities and thresholds, as stored)
    assert precision_recall_f1(y, (s >= np.float32(t)).astype(float))[2] == pytest.approx(best)


def test_f1_thresholds_per_label_and_per_label_scoring():
    rng = np.random.default_rng(3)
    y = (rng.random((80, 4)) < [0.05, 0.2, 0.5, 0.0]).astype(float)
    s = np.clip(0.4 * y + 0.6 * rng.random((80, 4)), 0, 1)
    t = f1_thresholds(y, s, default=0.5)
    assert t.shape == (4,) and t[3] == 0.5  # no positives: the default
    for j in range(3):
        assert t[j] == pytest.approx(best_f1_threshold(y[:, j], s[:, j])[0])
    m = multilabel_metrics(y, s, t)
    per = [binary_metrics(y[:, j], s[:, j], t[j])["f1"] for j in range(4)]
    assert m["f1"] == pytest.approx(np.mean(per))
    assert m["f1"] >= multilabel_metrics(y, s, 0.5)["f1"]
