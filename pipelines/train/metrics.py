"""Classification metrics: accuracy, precision, recall, F1, AUROC, AUPRC, computed by ``sklearn.metrics``.

A ratio with an empty denominator is 0 (``zero_division=0``); AUROC is ``roc_auc_score`` (the
Mann-Whitney statistic, ties counted one half); AUPRC is ``average_precision_score``
(``sum_n (R_n - R_{n-1}) P_n`` over distinct score thresholds). AUROC is undefined (NaN) when only one
class is present, AUPRC when there are no positives (scikit-learn would warn and return a number).
For multi-label tasks, precision, recall, F1, AUROC and AUPRC are macro averages over labels (AUROC and
AUPRC over the labels where they are defined); ``accuracy`` is label-wise, ``subset_accuracy`` exact-match.
A prediction is positive when its score is at least the threshold (one for all labels, or one per label).

:func:`f1_thresholds` chooses per label the threshold that maximises F1 on known data (the fine-tuning
keeps the ones of its validation split with the model).

Dimension legend: P samples, L labels.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "auroc",
    "average_precision",
    "best_f1_threshold",
    "binary_metrics",
    "f1_thresholds",
    "multilabel_metrics",
    "precision_recall_f1",
    "undefined_metrics",
]


def _as_arrays(y_true, scores) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_true, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape:
        raise ValueError(f"y_true shape {y.shape} != scores shape {s.shape}")
    if y.size and not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("y_true must hold only 0/1 (or booleans)")
    return y, s


def precision_recall_f1(y_true, y_pred) -> tuple[float, float, float]:
    """Precision, recall and F1 of binary predictions (``sklearn.metrics``). Shapes: ``(P,)`` each."""
    from sklearn.metrics import precision_recall_fscore_support

    y, p = _as_arrays(y_true, y_pred)
    if not len(y):
        return 0.0, 0.0, 0.0
    prec, rec, f1, _ = precision_recall_fscore_support(
        y, p, average="binary", pos_label=1.0, labels=[0.0, 1.0], zero_division=0
    )
    return float(prec), float(rec), float(f1)


def auroc(y_true, scores) -> float:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``; NaN with a single class)."""
    from sklearn.metrics import roc_auc_score

    y, s = _as_arrays(y_true, scores)
    if y.sum() == 0 or y.sum() == len(y):
        return math.nan
    return float(roc_auc_score(y, s))


def undefined_metrics(y_true) -> str | None:
    """Why AUROC (and AUPRC) cannot be computed on the labels ``y_true`` (``(P,)`` or ``(P, L)``), as one
    phrase for a warning; None when AUROC is defined (for a multi-label task: on at least one label).

    AUROC needs both classes: all-negative labels leave AUROC and AUPRC undefined, all-positive ones AUROC
    (they are NaN in memory, ``null`` in the JSON files, ``n/a`` where printed)."""
    y = np.asarray(y_true, dtype=np.float64)
    if y.size == 0:
        return "AUROC and AUPRC are undefined: no rows"
    y = y.reshape(len(y), -1) if y.ndim else y.reshape(1, 1)
    n = len(y)
    pos = y.sum(0)  # (L,)
    if ((pos > 0) & (pos < n)).any():
        return None
    if y.shape[1] > 1:
        return f"AUROC is undefined: each of the {y.shape[1]} labels has one class only in the {n} rows"
    if pos[0] == 0:
        return f"AUROC and AUPRC are undefined: all {n} labels are negative (one class)"
    return f"AUROC is undefined: all {n} labels are positive (one class)"


def average_precision(y_true, scores) -> float:
    """Area under the precision-recall curve as average precision (``sklearn.metrics``; NaN without
    positives)."""
    from sklearn.metrics import average_precision_score

    y, s = _as_arrays(y_true, scores)
    if y.sum() == 0:
        return math.nan
    return float(average_precision_score(y, s))


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


def multilabel_metrics(y_true, scores, threshold: float | np.ndarray = 0.5) -> dict[str, float]:
    """Metrics of a multi-label task from probabilities (macro over labels). Shapes: ``(P, L)`` each;
    ``threshold`` one, or one per label ``(L,)``."""
    y, s = _as_arrays(y_true, scores)
    if y.ndim != 2:
        raise ValueError(f"multi-label inputs must be (P, L), got shape {y.shape}")
    pred = (s >= np.asarray(threshold, dtype=np.float64).reshape(1, -1)).astype(np.float64)
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


def best_f1_threshold(y_true, scores, default: float = 0.5) -> tuple[float, float]:
    """The threshold with the highest F1 of ``scores >= threshold`` against ``y_true``, and that F1. Shapes:
    ``(P,)`` each.

    Every distinct score is a candidate (F1 changes only there); among equal F1 the highest threshold wins
    (the fewest positive predictions). The threshold returned lies halfway between the lowest score
    predicted positive and the next lower score (same predictions on these data, a margin for new ones);
    predicting every sample positive gives threshold 0. Without positives (F1 0 whatever the threshold)
    it is ``default``.
    """
    y, s = _as_arrays(y_true, scores)
    if y.ndim != 1:
        raise ValueError(f"best_f1_threshold takes (P,) arrays, got shape {y.shape}")
    n_pos = float(y.sum())
    if n_pos == 0:
        return float(default), 0.0
    order = np.argsort(-s, kind="stable")
    s_desc, tp = s[order], np.cumsum(y[order])
    last = np.flatnonzero(np.r_[s_desc[1:] != s_desc[:-1], True])  # last sample of each distinct score
    f1 = 2.0 * tp[last] / (last + 1.0 + n_pos)  # F1 = 2 TP / (predicted positives + positives)
    i = int(np.argmax(f1))  # the first maximum: the highest threshold
    cut = last[i]
    if cut + 1 == len(s_desc):
        return 0.0, float(f1[i])
    hi, lo = s_desc[cut], s_desc[cut + 1]
    mid = float(np.float32(0.5 * (hi + lo)))  # thresholds are stored as float32
    return (mid if lo < mid <= hi else float(hi)), float(f1[i])


def f1_thresholds(y_true, scores, default: float = 0.5) -> np.ndarray:
    """Per label the threshold of :func:`best_f1_threshold` (``default`` for a label without positives).
    Shapes: ``(P, L)`` in, ``(L,)`` out."""
    y, s = _as_arrays(y_true, scores)
    if y.ndim != 2:
        raise ValueError(f"f1_thresholds takes (P, L) arrays, got shape {y.shape}")
    return np.array([best_f1_threshold(y[:, j], s[:, j], default)[0] for j in range(y.shape[1])])
