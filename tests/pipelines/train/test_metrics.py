"""Metrics against values computed by hand (and scikit-learn's conventions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.train.metrics import (
    auroc,
    average_precision,
    binary_metrics,
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
    # AUROC label 0: positives .9 .4 vs negatives .6 .1 -> 3/4; label 1: .7 .8 vs .2 .3 -> 1; label 2 undefined
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
