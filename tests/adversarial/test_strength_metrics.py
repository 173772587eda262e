"""Metrics on examples where accuracy, precision, recall and F1 all differ (the hand-worked example of
test_metrics has accuracy = precision = recall = F1 = 2/3, so F1 replaced by accuracy, or by the mean of
precision and recall, passed it), binary and multi-label, macro and micro."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.train.metrics import binary_metrics, multilabel_metrics, precision_recall_f1


def test_binary_f1_is_the_harmonic_mean_not_accuracy():
    # predictions at 0.5: tp 2, fp 2, fn 1, tn 5
    y = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    s = [0.9, 0.8, 0.2, 0.7, 0.6, 0.1, 0.1, 0.1, 0.1, 0.1]
    m = binary_metrics(y, s)
    assert m["accuracy"] == pytest.approx(7 / 10)
    assert m["precision"] == pytest.approx(2 / 4) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 * 2 / (2 * 2 + 2 + 1))  # 4/7, not 0.7 nor (1/2 + 2/3) / 2
    assert precision_recall_f1(y, (np.array(s) >= 0.5).astype(int)) == pytest.approx((0.5, 2 / 3, 4 / 7))


def test_binary_threshold_is_used():
    y, s = [1, 0, 1, 0], [0.6, 0.4, 0.3, 0.2]
    assert binary_metrics(y, s)["recall"] == pytest.approx(1 / 2)
    assert binary_metrics(y, s, threshold=0.25)["recall"] == pytest.approx(1.0)
    assert binary_metrics(y, s, threshold=0.25)["precision"] == pytest.approx(2 / 3)


def test_multilabel_macro_and_micro_f1_differ_from_accuracy():
    # label 0: tp 2 fp 2 fn 1 tn 1 -> P 1/2 R 2/3 F1 4/7; label 1: tp 1 fp 0 fn 2 tn 3 -> P 1 R 1/3 F1 1/2
    y = np.array([[1, 1], [1, 1], [1, 1], [0, 0], [0, 0], [0, 0]])
    p = np.array([[1, 1], [1, 0], [0, 0], [1, 0], [1, 0], [0, 0]], dtype=float)
    m = multilabel_metrics(y, p)
    assert m["precision"] == pytest.approx((1 / 2 + 1) / 2) and m["recall"] == pytest.approx(
        (2 / 3 + 1 / 3) / 2
    )
    assert m["f1"] == pytest.approx((4 / 7 + 1 / 2) / 2)
    # micro over both labels: tp 3, fp 2, fn 3 -> 6 / 11
    assert m["f1_micro"] == pytest.approx(6 / 11)
    assert m["accuracy"] == pytest.approx(7 / 12) and m["subset_accuracy"] == pytest.approx(2 / 6)
