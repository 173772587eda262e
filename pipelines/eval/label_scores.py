"""A model fine-tuned on a MEDS label task scored on label rows: ``hrrbert evaluate --labels DIR
--labels-run RUN``.

:func:`labels_eval` reads the label folder and places its rows in a dataset exactly as ``hrrbert finetune
--labels`` does (:mod:`pipelines.data.label_tasks`: each row's input is its patient's sequence cut after the
last visit at or before its ``prediction_time``; the row follows its patient's split; rows of subjects the
dataset does not hold and rows without any visit up to their prediction time are counted and left out). The
rows of one split are scored (default ``test``), or ``all`` of them (a dataset the model never trained on,
e.g. another hospital's, prepared against the same program).

Each trial model of the fine-tuning run predicts every row with the binary head and is scored at the
decision threshold kept with it (``thresholds.json``, chosen on its ``finetune_val`` rows): accuracy,
precision, recall, F1, AUROC, AUPRC (:func:`pipelines.train.metrics.binary_metrics`). The interval of each
metric is a percentile bootstrap over *patients* (:mod:`pipelines.eval.stats`): a resample draws patients
with replacement and every label row of a drawn patient enters with it (a patient with several prediction
times is one unit, so its correlated rows never count as independent); the statistic of a resample is the
mean over the trials on the same rows, so the trials never count as replicates either.

Outputs (written by :func:`pipelines.eval.pretrained.evaluate_pretrained`): the ``labels`` section of
``evaluation.json`` (:func:`labels_eval`'s record), the per-row predictions in ``predictions.parquet``
(:mod:`pipelines.train.predictions`: task ``mortality``, the binary head, as the fine-tuning writes it;
split ``labels``; one row per label row, in the label files' (``subject_id``, ``prediction_time``) order)
and :data:`LABELS_PREDICTIONS_DIR`, one file per trial (``trial_<k>.parquet``) of the same rows with
their ``prediction_time`` in meds-evaluation's PredictionSchema (``subject_id``, ``prediction_time``,
``boolean_value``, ``predicted_boolean_value`` at the trial's threshold, ``predicted_boolean_probability``
float32), so ``meds-evaluation-cli predictions_path=…/trial_0.parquet`` scores a trial as it is.

Dimension legend: N label rows scored, G their patients, T trials.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.data.label_tasks import read_label_task
from pipelines.data.sequences import TokenizedDataset
from pipelines.errors import PipelineError
from pipelines.train.config import LABELS_HEAD
from pipelines.train.metrics import undefined_metrics
from pipelines.train.predictions import Predictions

from .finetuned import _predict, _trial_index, trial_models
from .stats import N_BOOT, SEED, PatientScorer, bootstrap_method, bootstrap_patients, trial_mean

log = logging.getLogger(__name__)

LABELS_SPLIT = "labels"  # the split name of the label rows' predictions in predictions.parquet
LABELS_PREDICTIONS_DIR = "labels_predictions"  # one meds-evaluation file per trial: trial_<k>.parquet
METRICS = ("auroc", "auprc", "f1", "precision", "recall", "accuracy")  # scored, each with its interval
# meds-evaluation 0.0.6's PredictionSchema (the MEDS LabelSchema's three columns and the two predictions;
# it refuses any other column and a float64 probability)
LABELS_PREDICTIONS_SCHEMA = pa.schema(
    [
        ("subject_id", pa.int64()),
        ("prediction_time", pa.timestamp("us")),
        ("boolean_value", pa.bool_()),
        ("predicted_boolean_value", pa.bool_()),
        ("predicted_boolean_probability", pa.float32()),
    ]
)


def run_record(run: str | Path) -> dict[str, Any] | None:
    """What a fine-tuning run recorded about itself (its ``config.json``; for a trial's ``model/`` folder
    the trial's ``results.json``), or None when ``run`` is a model folder outside any run."""
    p = Path(run)
    for c in (p / "config.json", p.parent / "results.json", p.parent.parent / "config.json"):
        try:
            rec = json.loads(c.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("config"), dict) and "pretrained" in rec["config"]:
            return rec
    return None


def check_runs(*, mortality: str | None, chapters: str | None, labels_run: str | None) -> None:
    """Refuse, before any work, a label-task run given as a mortality or chapters run, and a ``labels_run``
    that was not fine-tuned on a label task (or is not a BERT)."""
    for option, run in (("--mortality", mortality), ("--chapters", chapters)):
        rec = run_record(run) if run else None
        name = ((rec or {}).get("labels") or {}).get("name") or (rec or {}).get("config", {}).get("labels")
        if name:
            raise PipelineError(
                f"{run}: fine-tuned on the MEDS label task {name!r} (`hrrbert finetune --labels`), not on "
                f"{option.removeprefix('--')}; score it on its label rows with "
                f"--labels LABEL_DIR --labels-run {run}"
            )
    if labels_run is None:
        return
    rec = run_record(labels_run)
    if rec is None:
        log.warning("%s: no fine-tuning record around the model; scored as a label-task model", labels_run)
        return
    if not rec["config"].get("labels"):
        raise PipelineError(
            f"{labels_run}: fine-tuned on task {rec['config'].get('task')!r}, not on a MEDS label task; "
            "--labels-run takes a run of `hrrbert finetune --labels DIR`"
        )
    if rec["config"].get("model", "bert") != "bert":
        raise PipelineError(
            f"{labels_run}: a {rec['config']['model']} run; the evaluation scores fine-tuned BERT models only"
        )


def labels_eval(
    labels: str | Path,
    finetune_run: str | Path,
    ds: TokenizedDataset,
    program,
    *,
    split: str = "test",
    device,
    batch_size: int = 256,
    label: str = "model",
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> tuple[dict[str, Any], list[Predictions], dict[int, pa.Table]]:
    """Score each trial of ``finetune_run`` on the rows of the MEDS label folder ``labels`` placed in ``ds``
    (those of ``split``, or ``"all"``); returns the record (module docstring), the predictions blocks
    (split ``labels``, model name ``label``) and each trial's meds-evaluation predictions table."""
    from model import HRRBert

    run = run_record(finetune_run) or {}
    task = read_label_task(labels)
    placed = ds.place_labels(task)
    trained = run.get("labels") or {}
    if trained and trained.get("name") != task.name:
        log.warning("labels %s: the run was fine-tuned on label task %r", task.name, trained.get("name"))
    if split == "all" and run.get("dataset_id") == ds.dataset_id:
        log.warning(
            "labels %s: split 'all' of the dataset the run was fine-tuned on holds its finetune_train and "
            "finetune_val rows: these scores are not on held-out rows",
            task.name,
        )
    sel = placed.split == split if split != "all" else np.ones(len(placed.split), bool)
    c = placed.counts
    if not sel.any():
        by = ", ".join(f"{s} {n}" for s, n in c["rows_by_split"].items() if n)
        raise PipelineError(
            f"{task.path}: no label rows in split {split!r} of {ds.path} (rows by split: {by or 'none'}); "
            "choose another --labels-split (all: every row, for a dataset the model never trained on)"
        )
    note = undefined_metrics(placed.label[sel])
    if note:
        log.warning(
            "labels %s, split %r (%d rows): %s; reported as n/a (null in evaluation.json)",
            task.name,
            split,
            int(sel.sum()),
            note,
        )
    blocks: list[Predictions] = []
    trials: list[dict[str, Any]] = []
    for i, mdir in enumerate(trial_models(finetune_run)):
        model = HRRBert.from_pretrained(mdir, program)
        mc = model.config
        seqs = ds.label_sequences(placed, split, max_len=mc.max_len, max_segments=mc.max_segments)
        k = _trial_index(mdir, i)
        metrics, block = _predict(model, mdir, seqs, LABELS_HEAD, LABELS_SPLIT, label, k, device, batch_size)
        trials.append({"trial": k, "model": str(mdir), "threshold": float(block.thresholds[0]), **metrics})
        blocks.append(block)
    subject = blocks[0].subject_id  # (N,)
    _, groups = np.unique(subject, return_inverse=True)  # (N,) each row's patient, in [0, G)
    n_patients = int(groups.max()) + 1
    scorers = [PatientScorer(b.labels, b.probs, b.thresholds) for b in blocks]
    intervals = {
        m: bootstrap_patients(
            trial_mean(scorers, m, groups), n_patients, n_boot=n_boot, seed=seed, vectorized=True
        ).as_dict()
        for m in METRICS
    }
    n_used = int(sel.sum())
    record = {
        "task": task.name,
        "path": str(task.path),
        "inputs": task.inputs,
        "run": str(finetune_run),
        "trained_on": {
            "task": trained.get("name"),
            "same_files": bool(trained) and trained.get("inputs") == task.inputs,
            "dataset_id": run.get("dataset_id"),
        },
        "dataset": str(ds.path),
        "dataset_id": ds.dataset_id,
        "split": split,
        "rows": {
            "in_files": task.counts["rows_in_files"],
            "duplicates_dropped": task.counts["duplicate_rows"],
            "labels": c["rows"],
            "used": n_used,
            "positives": int(placed.label[sel].sum()),
            "patients": n_patients,
            "dropped": {
                "subject_not_in_dataset": c["rows_subject_not_in_dataset"],
                "without_history": c["rows_without_history"],
                "cut_by_truncation": c.get("rows_cut_by_truncation", 0),
                "other_splits": int(len(sel) - n_used),
            },
            "of_truncated_sequences": _truncated(ds, placed.row[sel]),
            "examples": c["examples"],
        },
        "placed": {k: v for k, v in c.items() if k != "examples"},
        "trials": trials,
        "mean": {m: _mean([t.get(m) for t in trials]) for m in METRICS},
        "intervals": intervals,
        "interval_method": f"{bootstrap_method(n_boot)} over the {n_patients} patients: a drawn patient "
        f"brings all its label rows; each resample scored by the mean over the {len(trials)} trial(s)",
    }
    return record, blocks, _meds_predictions(blocks, placed.prediction_time[sel])


def _truncated(ds: TokenizedDataset, rows: np.ndarray) -> int:
    """Label rows whose patient's sequence ``prepare`` truncated (older visits may be missing)."""
    if "truncated" not in ds.table.column_names:
        return 0
    t = np.asarray(ds.table.column("truncated").fill_null(False).to_numpy(zero_copy_only=False), bool)
    return int(t[rows].sum())


def _mean(values: list) -> float | None:
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _meds_predictions(blocks: list[Predictions], times: np.ndarray) -> dict[int, pa.Table]:
    """Per trial, one row per label row: its key and label, the probability and the decision at the
    trial's threshold (:data:`LABELS_PREDICTIONS_SCHEMA`)."""
    out = {}
    for b in blocks:
        p = np.asarray(b.probs, dtype=np.float32)[:, 0]
        cols = [
            np.asarray(b.subject_id, np.int64),
            times,
            np.asarray(b.labels)[:, 0].astype(bool),
            p >= np.float32(b.thresholds[0]),
            p,
        ]
        arrays = [pa.array(c, f.type) for c, f in zip(cols, LABELS_PREDICTIONS_SCHEMA, strict=True)]
        out[int(b.trial)] = pa.Table.from_arrays(arrays, schema=LABELS_PREDICTIONS_SCHEMA)
    return out


def write_meds_predictions(tables: dict[int, pa.Table], out: Path) -> list[str]:
    """Write the trials' tables into ``out`` / :data:`LABELS_PREDICTIONS_DIR` (written beside it, then
    renamed into place; the evaluation's ``check_out`` already refused or cleared an earlier one); the
    files, relative to ``out``."""
    import pyarrow.parquet as pq

    from pipelines.data.folders import folder_written

    names = [f"{LABELS_PREDICTIONS_DIR}/trial_{k}.parquet" for k in sorted(tables)]
    with folder_written(out / LABELS_PREDICTIONS_DIR, "label-task predictions") as tmp:
        for k, name in zip(sorted(tables), names, strict=True):
            pq.write_table(tables[k], tmp / Path(name).name)
    return names


def summary_lines(rec: dict[str, Any]) -> list[str]:
    """What ``hrrbert evaluate`` prints about the label task."""
    r, d = rec["rows"], rec["rows"]["dropped"]
    lines = [
        f"labels    {rec['task']} on {rec['split']} rows of {rec['dataset_id']}: {r['used']} rows of "
        f"{r['patients']} patients ({r['positives']} positive); left out: {d['subject_not_in_dataset']} "
        f"of subjects not in the dataset, {d['without_history']} without history, "
        f"{d.get('cut_by_truncation', 0)} whose history truncation cut, {d['other_splits']} of other splits"
    ]
    for t in rec["trials"]:
        lines.append(
            f"labels    trial {t['trial']}: AUROC {_f(t.get('auroc'))}, AUPRC {_f(t.get('auprc'))}, "
            f"F1 {_f(t.get('f1'))} at threshold {t['threshold']:.3f}"
        )
    iv = rec["intervals"]
    lines.append(
        f"labels    mean of {len(rec['trials'])} trial(s), 95 % patient bootstrap: "
        + ", ".join(
            f"{n} {_f(iv[m]['estimate'])} [{_f(iv[m]['low'])}, {_f(iv[m]['high'])}]"
            for m, n in (("auroc", "AUROC"), ("auprc", "AUPRC"), ("f1", "F1"))
        )
    )
    return lines


def _f(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.3f}"
