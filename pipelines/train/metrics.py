"""Classification metrics in NumPy (no scikit-learn): accuracy, precision, recall, F1, AUROC, AUPRC.

Conventions follow scikit-learn's so numbers are comparable: a ratio with an empty denominator is 0
(``zero_division=0``); AUROC is the Mann-Whitney statistic with ties counted one half (equal to the
trapezoidal ROC area); AUPRC is average precision, ``sum_n (R_n - R_{n-1}) P_n`` over distinct score
thresholds. AUROC is undefined (NaN) when only one class is present, AUPRC when there are no positives.
For multi-label tasks, precision, recall, F1, AUROC and AUPRC are macro averages over labels (AUROC and
AUPRC over the labels where they are defined); ``accuracy`` is label-wise, ``subset_accuracy`` exact-match.

Dimension legend: P samples, L labels.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["auroc", "average_precision", "binary_metrics", "multilabel_metrics", "precision_recall_f1"]


def _as_arrays(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_true, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape:
        raise ValueError(f"y_true shape {y.shape} != scores shape {s.shape}")
    if y.size and not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("y_true must hold only 0/1 (or booleans)")
    return y, s


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b else 0.0


def precision_recall_f1(y_true, y_pred) -> tuple[float, float, float]:
    """Precision, recall and F1 of binary predictions. Shapes: ``(P,)`` each."""
    y, p = _as_arrays(y_true, y_pred)
    tp = float(((y == 1) & (p == 1)).sum())
    fp = float(((y == 0) & (p == 1)).sum())
    fn = float(((y == 1) & (p == 0)).sum())
    prec, rec = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return prec, rec, _ratio(2 * tp, 2 * tp + fp + fn)


def _average_ranks(s: np.ndarray) -> np.ndarray:
    """1-based ranks of ``s``, ties sharing their average rank."""
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    avg = (starts + ends + 1) / 2.0  # mean of 1-based ranks starts+1 .. ends
    ranks = np.empty(len(s))
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def auroc(y_true, scores) -> float:
    """Area under the ROC curve (NaN with a single class). Shapes: ``(P,)`` each."""
    y, s = _as_arrays(y_true, scores)
    n_pos, n_neg = float(y.sum()), float(len(y) - y.sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    r = _average_ranks(s)
    return float((r[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def average_precision(y_true, scores) -> float:
    """Area under the precision-recall curve as average precision (NaN without positives)."""
    y, s = _as_arrays(y_true, scores)
    n_pos = float(y.sum())
    if n_pos == 0:
        return math.nan
    order = np.argsort(-s, kind="mergesort")
    ys, ss = y[order], s[order]
    last = np.r_[np.flatnonzero(ss[1:] != ss[:-1]), len(ss) - 1]  # last index of each distinct score
    tp = np.cumsum(ys)[last]
    precision = tp / (last + 1)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def binary_metrics(y_true, scores, threshold: float = 0.5) -> dict[str, float]:
    """Metrics of a binary task from probabilities. Shapes: ``(P,)`` each."""
    y, s = _as_arrays(y_true, scores)
    pred = (s >= threshold).astype(np.float64)
    prec, rec, f1 = precision_recall_f1(y, pred)
    return {
        "accuracy": float((pred == y).mean()) if len(y) else 0.0,
        "precision": prec,
        "recall": rec,
        "f1": f1,
        "auroc": auroc(y, s),
        "auprc": average_precision(y, s),
        "n": int(len(y)),
        "positives": int(y.sum()),
    }


def multilabel_metrics(y_true, scores, threshold: float = 0.5) -> dict[str, float]:
    """Metrics of a multi-label task from probabilities (macro over labels). Shapes: ``(P, L)`` each."""
    y, s = _as_arrays(y_true, scores)
    if y.ndim != 2:
        raise ValueError(f"multi-label inputs must be (P, L), got shape {y.shape}")
    pred = (s >= threshold).astype(np.float64)
    per = [precision_recall_f1(y[:, j], pred[:, j]) for j in range(y.shape[1])]
    aurocs = [auroc(y[:, j], s[:, j]) for j in range(y.shape[1])]
    aps = [average_precision(y[:, j], s[:, j]) for j in range(y.shape[1])]
    _, _, f1_micro = precision_recall_f1(y.ravel(), pred.ravel())
    return {
        "accuracy": float((pred == y).mean()) if y.size else 0.0,
        "subset_accuracy": float((pred == y).all(1).mean()) if len(y) else 0.0,
        "precision": float(np.mean([p[0] for p in per])) if per else 0.0,
        "recall": float(np.mean([p[1] for p in per])) if per else 0.0,
        "f1": float(np.mean([p[2] for p in per])) if per else 0.0,
        "f1_micro": f1_micro,
        "auroc": _nanmean(aurocs),
        "auprc": _nanmean(aps),
        "n": int(len(y)),
        "labels_with_positives": int((y.sum(0) > 0).sum()),
    }


def _nanmean(xs: list[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return float(np.mean(vals)) if vals else math.nan
