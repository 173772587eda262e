"""Per-patient predictions of a model on held-out patients: one Parquet layout for every producer (the
fine-tuning trials, the ROOD and transfer evaluations, the baselines) so that the report can resample
patients and score every model the same way.

``predictions.parquet`` columns (one row per (model, task, split, trial, patient)):

    model       string          who predicted: a configuration ("base"), or a baseline ("logistic_regression")
    task        string          "mortality" or "chapters" (pipelines.data.tasks.TASK_LABELS)
    split       string          "test", "rood", "rood_unseen", "transfer"
    trial       int32           fine-tuning trial (0 for a baseline)
    subject_id  int64
    labels      list<int8>      multi-hot truth, length L (1 for mortality, 22 for chapters)
    probs       list<float32>   predicted probabilities, length L
    thresholds  list<float32>   the per-label decision thresholds the model uses for F1, length L

Dimension legend: P patients, L labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .metrics import binary_metrics, multilabel_metrics

PREDICTIONS_FILE = "predictions.parquet"
SCHEMA = pa.schema(
    [
        ("model", pa.string()),
        ("task", pa.string()),
        ("split", pa.string()),
        ("trial", pa.int32()),
        ("subject_id", pa.int64()),
        ("labels", pa.list_(pa.int8())),
        ("probs", pa.list_(pa.float32())),
        ("thresholds", pa.list_(pa.float32())),
    ]
)


@dataclass
class Predictions:
    """One (model, task, split, trial) block: arrays ``subject_id (P,)``, ``labels``/``probs (P, L)``,
    ``thresholds (L,)``."""

    model: str
    task: str
    split: str
    trial: int
    subject_id: np.ndarray
    labels: np.ndarray
    probs: np.ndarray
    thresholds: np.ndarray

    def scores(self, rows: np.ndarray | None = None) -> dict[str, float]:
        """The task's metrics on all patients, or on the patient rows ``rows`` (a bootstrap resample)."""
        y, p = (self.labels, self.probs) if rows is None else (self.labels[rows], self.probs[rows])
        return score_predictions(self.task, y, p, self.thresholds)


def score_predictions(task: str, labels: np.ndarray, probs: np.ndarray, thresholds) -> dict[str, float]:
    """Metrics of ``probs (P, L)`` against ``labels (P, L)`` with per-label ``thresholds (L,)`` (or one)."""
    t = np.asarray(thresholds, dtype=np.float64)
    if task == "mortality":
        return binary_metrics(labels[:, 0], probs[:, 0], float(t.reshape(-1)[0]))
    return multilabel_metrics(labels, probs, t if t.ndim == 0 else t.reshape(1, -1))


def to_table(blocks: list[Predictions]) -> pa.Table:
    """The Parquet table of ``blocks`` (in :data:`SCHEMA`)."""
    cols: dict[str, list] = {name: [] for name in SCHEMA.names}
    for b in blocks:
        n, l_ = b.probs.shape if b.probs.ndim == 2 else (len(b.probs), 1)
        if b.labels.shape != (n, l_) or np.asarray(b.thresholds).reshape(-1).shape != (l_,):
            raise ValueError(
                f"predictions of {b.model}/{b.task}/{b.split}: labels {b.labels.shape}, "
                f"probs {b.probs.shape}, "
                f"thresholds {np.shape(b.thresholds)} do not agree"
            )
        cols["model"] += [b.model] * n
        cols["task"] += [b.task] * n
        cols["split"] += [b.split] * n
        cols["trial"] += [int(b.trial)] * n
        cols["subject_id"] += np.asarray(b.subject_id, dtype=np.int64).tolist()
        cols["labels"] += np.asarray(b.labels, dtype=np.int8).reshape(n, l_).tolist()
        cols["probs"] += np.asarray(b.probs, dtype=np.float32).reshape(n, l_).tolist()
        thr = np.asarray(b.thresholds, dtype=np.float32).reshape(-1).tolist()
        cols["thresholds"] += [thr] * n
    return pa.table(cols, schema=SCHEMA)


def write_predictions(path: str | Path, blocks: list[Predictions]) -> Path:
    """Write ``blocks`` to ``path`` atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(to_table(blocks), tmp)
    tmp.replace(path)
    return path


def read_predictions(path: str | Path) -> list[Predictions]:
    """The blocks of a predictions file, in file order of first appearance."""
    t = pq.read_table(path)
    missing = [c for c in SCHEMA.names if c not in t.column_names]
    if missing:
        raise ValueError(f"{path}: not a predictions file (missing columns {missing})")
    keys = list(zip(*(t.column(c).to_pylist() for c in ("model", "task", "split", "trial")), strict=True))
    order: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        order.setdefault(k, []).append(i)
    out = []
    for (model, task, split, trial), rows in order.items():
        sub = t.take(pa.array(rows))
        labels = np.asarray(sub.column("labels").to_pylist(), dtype=np.int8)
        probs = np.asarray(sub.column("probs").to_pylist(), dtype=np.float32)
        out.append(
            Predictions(
                model,
                task,
                split,
                int(trial),
                sub.column("subject_id").to_numpy(),
                labels,
                probs,
                np.asarray(sub.column("thresholds")[0].as_py(), np.float32),
            )
        )
    return out
