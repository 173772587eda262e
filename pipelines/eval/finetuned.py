"""Fine-tuned models on held-out patients (evaluations (b) and (c)).

- ROOD: the chapters model on the ``rood`` split (patients holding codes no model ever trained on) and
  on its ``rood_unseen`` subset (patients whose codes are mostly held-out ones).
- Transfer: the mortality model fine-tuned on one dataset (MIMIC layout) scored on another dataset's
  ``test`` split (eICU layout), tokenized against the same program.

Each fine-tuning trial is scored separately so the statistics see one value per trial, at the decision
thresholds kept with its model (``thresholds.json``, chosen on its validation split; 0.5 for an older model
without them, said in a log line). Both also return the per-patient predictions
(:mod:`pipelines.train.predictions`) that the evaluation writes next to its record.

Dimension legend: P patients, T codes, L labels.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipelines.data.sequences import Sequences, TokenizedDataset
from pipelines.errors import PipelineError
from pipelines.train.predictions import Predictions

log = logging.getLogger(__name__)


def trial_models(finetune_run: str | Path) -> list[Path]:
    """The ``model/`` folders of a fine-tuning run's trials (or the folder itself when it is a model)."""
    p = Path(finetune_run)
    if (p / "config.json").is_file() and (p / "model.safetensors").exists():
        return [p]
    found = sorted(
        (d / "model" for d in p.glob("trial-*") if (d / "model" / "config.json").is_file()),
        key=lambda m: int(m.parent.name.split("-")[1]),
    )
    if not found:
        raise PipelineError(
            f"{p}: no fine-tuned model found (expected trial-*/model/config.json or config.json + "
            "model.safetensors); run `hrrbert finetune` first"
        )
    return found


def subset(seqs: Sequences, keep: np.ndarray) -> Sequences:
    """Rows of ``seqs`` where ``keep`` is True. Shapes: keep ``(P,)``."""
    idx = torch.from_numpy(np.flatnonzero(keep))
    return Sequences(
        seqs.input_ids[idx],
        seqs.segment_ids[idx],
        seqs.attention_mask[idx],
        seqs.subject_id[idx],
        None if seqs.labels is None else seqs.labels[idx],
    )


def _trial_index(mdir: Path, position: int) -> int:
    """The trial number of a ``trial-<k>/model`` folder (else its position in the list)."""
    m = re.fullmatch(r"trial-(\d+)", mdir.parent.name)
    return int(m.group(1)) if m else position


def _predict(
    model, mdir: Path, seqs: Sequences, task: str, split: str, label: str, trial: int, device, batch_size: int
) -> tuple[dict[str, Any], Predictions | None]:
    """Metrics of a fine-tuned model on ``seqs`` at the thresholds kept with it (:data:`THRESHOLDS_FILE`;
    0.5 for an older model without them), and its predictions block (None when ``seqs`` is empty)."""
    from pipelines.train.finetune import predict, read_thresholds

    if len(seqs) == 0:
        return {"n": 0}, None
    thresholds = read_thresholds(mdir, task, seqs.labels.shape[1])
    p, loss = predict(model, seqs, task, device, batch_size)
    block = Predictions(
        label, task, split, trial, seqs.subject_id.numpy(), seqs.labels.numpy(), p, thresholds
    )
    return {"loss": loss, **block.scores()}, block


def _unseen_mask(ds: TokenizedDataset, seqs: Sequences) -> np.ndarray:
    if "rood_unseen" not in ds.table.column_names:
        return np.zeros(len(seqs), dtype=bool)
    sid = ds.table.column("subject_id").to_numpy()
    flag = np.asarray(ds.table.column("rood_unseen").fill_null(False).to_numpy(zero_copy_only=False), bool)
    unseen = set(sid[flag].tolist())
    return np.array([int(s) in unseen for s in seqs.subject_id.tolist()], dtype=bool)


def rood_eval(
    finetune_run: str | Path,
    ds: TokenizedDataset,
    program,
    *,
    device,
    batch_size: int = 256,
    label: str = "model",
) -> tuple[list[dict[str, Any]], list[Predictions]]:
    """Chapters metrics of each trial on ``rood`` and on ``rood_unseen``, and the per-patient predictions
    (splits ``rood`` and ``rood_unseen``, model name ``label``, trial = the trial number)."""
    from model import HRRBert

    out: list[dict[str, Any]] = []
    blocks: list[Predictions] = []
    for i, mdir in enumerate(trial_models(finetune_run)):
        model = HRRBert.from_pretrained(mdir, program)
        mc = model.config
        if not ds.rows("rood").size:
            log.warning("%s: split 'rood' is empty; no ROOD evaluation", ds.patients_path)
            return [], []
        seqs = ds.sequences(
            "rood", max_len=mc.max_len, max_segments=mc.max_segments, task="chapters", before_last_visit=True
        )
        unseen = subset(seqs, _unseen_mask(ds, seqs))
        k = _trial_index(mdir, i)
        rec: dict[str, Any] = {"trial": k, "model": str(mdir)}
        for split, part in (("rood", seqs), ("rood_unseen", unseen)):
            rec[split], block = _predict(model, mdir, part, "chapters", split, label, k, device, batch_size)
            blocks += [block] if block is not None else []
        out.append(rec)
    return out, blocks


def transfer_eval(
    finetune_run: str | Path,
    ds: TokenizedDataset,
    program,
    *,
    device,
    split: str = "test",
    batch_size: int = 256,
    label: str = "model",
) -> tuple[list[dict[str, Any]], list[Predictions]]:
    """Mortality metrics of each trial on another dataset's ``split``, and the per-patient predictions
    (split ``transfer``, model name ``label``, trial = the trial number)."""
    from model import HRRBert

    out: list[dict[str, Any]] = []
    blocks: list[Predictions] = []
    for i, mdir in enumerate(trial_models(finetune_run)):
        model = HRRBert.from_pretrained(mdir, program)
        mc = model.config
        seqs = ds.sequences(
            split, max_len=mc.max_len, max_segments=mc.max_segments, task="mortality", before_last_visit=True
        )
        k = _trial_index(mdir, i)
        metrics, block = _predict(model, mdir, seqs, "mortality", "transfer", label, k, device, batch_size)
        out.append({"trial": k, "model": str(mdir), "test": metrics})
        blocks += [block] if block is not None else []
    return out, blocks
