"""Fine-tuned models on held-out patients (evaluations (b) and (c)).

- ROOD: the chapters model on the ``rood`` split (patients holding codes no model ever trained on) and
  on its ``rood_unseen`` subset (patients whose codes are mostly held-out ones).
- Transfer: the mortality model fine-tuned on one dataset (MIMIC layout) scored on another dataset's
  ``test`` split (eICU layout), tokenized against the same program.

Each fine-tuning trial is scored separately so the statistics see one value per trial.

Dimension legend: P patients, T codes, L labels.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipelines.data.sequences import Sequences, TokenizedDataset
from pipelines.errors import PipelineError

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


def _score(model, seqs: Sequences, task: str, device, batch_size: int) -> dict[str, float]:
    from pipelines.train.finetune import predict, score

    if len(seqs) == 0:
        return {"n": 0}
    p, loss = predict(model, seqs, task, device, batch_size)
    return {"loss": loss, **score(task, seqs.labels.numpy(), p, 0.5)}


def _unseen_mask(ds: TokenizedDataset, seqs: Sequences) -> np.ndarray:
    if "rood_unseen" not in ds.table.column_names:
        return np.zeros(len(seqs), dtype=bool)
    sid = ds.table.column("subject_id").to_numpy()
    flag = np.asarray(ds.table.column("rood_unseen").fill_null(False).to_numpy(zero_copy_only=False), bool)
    unseen = set(sid[flag].tolist())
    return np.array([int(s) in unseen for s in seqs.subject_id.tolist()], dtype=bool)


def rood_eval(
    finetune_run: str | Path, ds: TokenizedDataset, program, *, device, batch_size: int = 256
) -> list[dict[str, Any]]:
    """Chapters metrics of each trial on ``rood`` and on ``rood_unseen``."""
    from model import HRRBert

    out = []
    for k, mdir in enumerate(trial_models(finetune_run)):
        model = HRRBert.from_pretrained(mdir, program)
        mc = model.config
        if not ds.rows("rood").size:
            log.warning("%s: split 'rood' is empty; no ROOD evaluation", ds.patients_path)
            return []
        seqs = ds.sequences(
            "rood", max_len=mc.max_len, max_segments=mc.max_segments, task="chapters", before_last_visit=True
        )
        unseen = _unseen_mask(ds, seqs)
        out.append(
            {
                "trial": k,
                "model": str(mdir),
                "rood": _score(model, seqs, "chapters", device, batch_size),
                "rood_unseen": _score(model, subset(seqs, unseen), "chapters", device, batch_size),
            }
        )
    return out


def transfer_eval(
    finetune_run: str | Path,
    ds: TokenizedDataset,
    program,
    *,
    device,
    split: str = "test",
    batch_size: int = 256,
) -> list[dict[str, Any]]:
    """Mortality metrics of each trial on another dataset's ``split``."""
    from model import HRRBert

    out = []
    for k, mdir in enumerate(trial_models(finetune_run)):
        model = HRRBert.from_pretrained(mdir, program)
        mc = model.config
        seqs = ds.sequences(
            split, max_len=mc.max_len, max_segments=mc.max_segments, task="mortality", before_last_visit=True
        )
        out.append(
            {"trial": k, "model": str(mdir), "test": _score(model, seqs, "mortality", device, batch_size)}
        )
    return out
