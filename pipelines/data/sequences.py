"""Read a tokenized dataset (format 1) for training: padded split tensors, labels, and the data order
(a permutation per epoch, per-step seeds) that makes a resumed run repeat an uninterrupted one.

The dataset is known through its files only (``docs/dataset-format.md``): ``manifest.json``
(``program_id``, ``dataset_id``), ``patients.parquet`` and ``code_counts.parquet``. A dataset tokenized
against another program than the model's is refused. MLM masking lives in :mod:`pipelines.train.mlm`.
A MEDS label task (:mod:`pipelines.data.label_tasks`) is placed with :meth:`TokenizedDataset.place_labels` and
read per split with :meth:`TokenizedDataset.label_sequences` (sequences cut at each row's prediction time).

Dimension legend: P patients in a split, T codes per sequence (padded), B batch, N concepts,
L task labels (1 mortality, 22 chapters).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch import Tensor

from pipelines.errors import InputFileError, PipelineError

from .label_tasks import LabelTask, PlacedLabels, place_labels
from .splits import SPLITS
from .tasks import TASK_LABELS

log = logging.getLogger(__name__)

PATIENTS_FILE = "patients.parquet"
CODE_COUNTS_FILE = "code_counts.parquet"
MANIFEST_FILE = "manifest.json"
SEQUENCE_COLUMNS = ("subject_id", "split", "input_ids", "segment_ids")
# splits of a task restricted to the rows flagged in this column, when the dataset has it
TASK_SUBSET_COLUMN = {"chapters": "disease_task"}
TASK_SUBSET_SPLITS = ("finetune_train", "finetune_val")


class DatasetProgramMismatchError(PipelineError):
    """The dataset was tokenized against another program than the one given."""

    def __init__(self, path: Path, dataset_program: str, program: str) -> None:
        self.path, self.dataset_program, self.program = path, dataset_program, program
        super().__init__(
            f"{path}: dataset was tokenized against program {dataset_program!r}, but program {program!r} "
            "was given; pass the program the dataset was prepared with, "
            "or re-run `hrrbert prepare` against this one"
        )


class LabelsMissingError(InputFileError):
    """A task's label column is missing from the dataset or holds no labels for a split."""


@dataclass
class Sequences:
    """One split as padded tensors (pad id where ``attention_mask`` is False)."""

    input_ids: Tensor  # (P, T) int64
    segment_ids: Tensor  # (P, T) int64
    attention_mask: Tensor  # (P, T) bool
    subject_id: Tensor  # (P,) int64
    labels: Tensor | None = None  # (P, L) float32, for a task

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def tokens(self, n_concepts: int) -> Tensor:
        """Which tokens the sequences hold (padding left out). Shapes: output ``(n_concepts,)`` bool."""
        out = torch.zeros(n_concepts, dtype=torch.bool)
        out[self.input_ids[self.attention_mask.bool()].unique()] = True
        return out

    def batch(self, idx: Tensor) -> dict[str, Tensor]:
        """Rows ``idx``, trimmed to the longest sequence among them. Shapes: values ``(B, T_b)``."""
        mask = self.attention_mask[idx]  # (B, T)
        t = max(int(mask.sum(1).max()), 1) if len(idx) else 1
        out = {
            "input_ids": self.input_ids[idx, :t],
            "segment_ids": self.segment_ids[idx, :t],
            "attention_mask": mask[:, :t],
        }
        if self.labels is not None:
            out["labels"] = self.labels[idx]  # (B, L)
        return out


def _pad(column: pa.ChunkedArray, lengths: np.ndarray, width: int, fill: int) -> Tensor:
    """Left-aligned padding of a list column to ``width``, cutting each row at ``lengths``."""
    arr = column.combine_chunks()
    offsets = arr.offsets.to_numpy().astype(np.int64)  # (P+1,)
    values = arr.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    p = len(lengths)
    out = np.full((p, width), fill, dtype=np.int64)
    rows = np.repeat(np.arange(p), lengths)
    cols = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, cols] = values[np.repeat(offsets[:-1], lengths) + cols]
    return torch.from_numpy(out)


class TokenizedDataset:
    """A format-1 tokenized dataset opened against one program.

    Args:
        path: the dataset folder (holding ``manifest.json``, ``patients.parquet``, ``code_counts.parquet``).
        program_id: the id of the program the model uses; must equal the manifest's.
        n_concepts: vocabulary size of that program (ids are checked against it).
        pad_id: the program's ``[PAD]`` concept id.
    """

    def __init__(self, path: str | Path, program_id: str, n_concepts: int, pad_id: int = 0) -> None:
        self.path = Path(path)
        self.manifest = self._read_manifest()
        found = self.manifest.get("program_id")
        if found != program_id:
            raise DatasetProgramMismatchError(self.path / MANIFEST_FILE, str(found), program_id)
        self.dataset_id = str(self.manifest.get("dataset_id", ""))
        self.program_id = program_id
        self.n_concepts = n_concepts
        self.pad_id = pad_id
        self.patients_path = self.path / PATIENTS_FILE
        if not self.patients_path.is_file():
            raise InputFileError(self.patients_path, "missing; not a tokenized dataset folder")
        try:
            self.table = pq.read_table(self.patients_path)
        except (pa.ArrowException, OSError) as e:
            raise InputFileError(self.patients_path, f"not a readable Parquet file ({e})") from e
        missing = [c for c in SEQUENCE_COLUMNS if c not in self.table.column_names]
        if missing:
            raise InputFileError(
                self.patients_path, f"missing column(s) {missing}", expected=", ".join(SEQUENCE_COLUMNS)
            )
        meta_pid = (self.table.schema.metadata or {}).get(b"program_id")
        if meta_pid is not None and meta_pid.decode() != program_id:
            raise DatasetProgramMismatchError(self.patients_path, meta_pid.decode(), program_id)
        self.split_names = np.asarray(self.table.column("split").cast(pa.string()).to_pylist(), dtype=object)

    def _read_manifest(self) -> dict[str, Any]:
        p = self.path / MANIFEST_FILE
        if not p.is_file():
            raise InputFileError(p, "missing; not a tokenized dataset folder (run `hrrbert prepare`)")
        try:
            manifest = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputFileError(p, f"not valid JSON ({e})") from e
        if manifest.get("format_version") != 1:
            raise InputFileError(
                p,
                "unsupported dataset format_version",
                expected="1",
                found=repr(manifest.get("format_version")),
            )
        return manifest

    def rows(self, split: str, task: str | None = None) -> np.ndarray:
        """Row numbers of ``split`` (restricted to a task's subset where the dataset flags one)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
        keep = self.split_names == split
        col = TASK_SUBSET_COLUMN.get(task or "")
        if col and split in TASK_SUBSET_SPLITS and col in self.table.column_names:
            keep &= np.asarray(self.table.column(col).fill_null(False).to_numpy(zero_copy_only=False), bool)
        return np.flatnonzero(keep)

    def sequences(
        self,
        split: str,
        *,
        max_len: int,
        max_segments: int,
        task: str | None = None,
        before_last_visit: bool = False,
    ) -> Sequences:
        """A split as padded tensors; with ``task``, with labels; ``before_last_visit`` cuts each sequence
        at ``last_visit_start`` (the fine-tuning tasks predict from the earlier visits)."""
        rows = self.rows(split, task)
        labels = None
        if task is not None:
            rows, labels = self._labels(task, split, rows)
        cut = None
        if before_last_visit:
            if "last_visit_start" not in self.table.column_names:
                raise InputFileError(
                    self.patients_path, "missing column 'last_visit_start' needed by the fine-tuning tasks"
                )
            col = self.table.column("last_visit_start").take(pa.array(rows, pa.int64()))
            cut = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return self._padded(rows, split, max_len=max_len, max_segments=max_segments, cut=cut, labels=labels)

    def place_labels(self, task: LabelTask) -> PlacedLabels:
        """The rows of a MEDS label task placed in this dataset: patient, split and input length of each
        (:func:`pipelines.data.label_tasks.place_labels`)."""
        return place_labels(task, self.table, self.patients_path)

    def label_sequences(
        self, placed: PlacedLabels, split: str, *, max_len: int, max_segments: int
    ) -> Sequences:
        """The label rows of ``split`` as padded tensors: each its patient's sequence cut after the last visit
        at or before its ``prediction_time``, labels ``(P, 1)`` the rows' ``boolean_value``. A patient with
        several label rows appears once per row. ``split="all"``: the rows of every split (in the order of
        ``placed``)."""
        if split not in (*SPLITS, "all"):
            raise ValueError(f"unknown split {split!r}; choose one of {SPLITS} or 'all'")
        sel = placed.split == split if split != "all" else np.ones(len(placed.split), bool)
        labels = torch.from_numpy(placed.label[sel].astype(np.float32))[:, None]  # (P, 1)
        return self._padded(
            placed.row[sel],
            split,
            max_len=max_len,
            max_segments=max_segments,
            cut=placed.length[sel],
            labels=labels,
        )

    def _padded(
        self,
        rows: np.ndarray,
        split: str,
        *,
        max_len: int,
        max_segments: int,
        cut: np.ndarray | None,
        labels: Tensor | None,
    ) -> Sequences:
        """Rows ``rows`` of ``patients.parquet`` padded into tensors, each cut at ``cut`` tokens when
        given."""
        t = self.table.take(pa.array(rows, pa.int64()))
        ids_col = t.column("input_ids")
        lengths = pc.list_value_length(ids_col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        if cut is not None:
            lengths = np.clip(np.minimum(lengths, cut), 1 if len(lengths) else 0, None)
        if len(lengths) and lengths.max() > max_len:
            raise InputFileError(
                self.patients_path,
                f"split {split!r} has sequences of {int(lengths.max())} codes, "
                f"more than the model's max_len {max_len}",
            )
        width = max(int(lengths.max()) if len(lengths) else 1, 1)
        input_ids = _pad(ids_col, lengths, width, self.pad_id)
        segment_ids = _pad(t.column("segment_ids"), lengths, width, 0)
        self._check_range(input_ids, 0, self.n_concepts, "input_ids", split)
        self._check_range(segment_ids, 0, max_segments, "segment_ids", split)
        mask = torch.arange(width)[None, :] < torch.from_numpy(lengths)[:, None]  # (P, T)
        subject = torch.from_numpy(t.column("subject_id").to_numpy(zero_copy_only=False).astype(np.int64))
        return Sequences(input_ids, segment_ids, mask, subject, labels)

    def _check_range(self, x: Tensor, lo: int, hi: int, name: str, split: str) -> None:
        if x.numel() and (int(x.min()) < lo or int(x.max()) >= hi):
            raise InputFileError(
                self.patients_path,
                f"{name} of split {split!r} out of range",
                expected=f"[{lo}, {hi - 1}]",
                found=f"[{int(x.min())}, {int(x.max())}]",
            )

    def _labels(self, task: str, split: str, rows: np.ndarray) -> tuple[np.ndarray, Tensor]:
        if task not in TASK_LABELS:
            raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASK_LABELS)}")
        column, n = TASK_LABELS[task]
        if column not in self.table.column_names:
            raise LabelsMissingError(
                self.patients_path, f"task {task!r} needs label column {column!r}, which is missing"
            )
        values = self.table.column(column).take(pa.array(rows, pa.int64()))
        present = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
        if not present.any():
            raise LabelsMissingError(
                self.patients_path,
                f"label column {column!r} holds no labels for split {split!r} ({len(rows)} rows)",
            )
        if not present.all():
            log.warning(
                "%s: %d of %d %s rows have no %r label; skipped",
                self.patients_path,
                (~present).sum(),
                len(rows),
                split,
                column,
            )
        rows, values = rows[present], values.filter(pa.array(present))
        if n == 1:
            y = torch.from_numpy(np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32))[:, None]
            return rows, y  # (P, 1)
        arr = values.combine_chunks()
        chap = arr.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        if chap.size and (chap.min() < 1 or chap.max() > n):
            raise InputFileError(
                self.patients_path,
                f"{column!r} out of range",
                expected=f"1..{n}",
                found=f"{chap.min()}..{chap.max()}",
            )
        lens = np.diff(arr.offsets.to_numpy())
        y = np.zeros((len(rows), n), np.float32)
        y[np.repeat(np.arange(len(rows)), lens), chap - 1] = 1.0
        return rows, torch.from_numpy(y)  # (P, L)

    def log_frequency(self) -> Tensor:
        """``(N,)`` log code frequencies from ``code_counts.parquet`` (missing concepts: the minimum)."""
        p = self.path / CODE_COUNTS_FILE
        if not p.is_file():
            raise InputFileError(p, "missing; mode 'freq' needs code frequencies")
        t = pq.read_table(p)
        for c in ("concept_id", "log_frequency"):
            if c not in t.column_names:
                raise InputFileError(p, f"missing column {c!r}")
        ids = t.column("concept_id").to_numpy().astype(np.int64)
        lf = t.column("log_frequency").to_numpy().astype(np.float64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_concepts):
            raise InputFileError(p, "concept_id out of range", expected=f"[0, {self.n_concepts - 1}]")
        out = np.full(self.n_concepts, lf.min() if lf.size else 0.0)
        out[ids] = lf
        return torch.from_numpy(out).float()


# Seed mixing: (seed, epoch) and (seed, step, rank, salt) are folded into one integer by multiplying with
# primes larger than any realistic epoch / step count, rank count and salt, so that different tuples do not
# collide in practice (1_000_003 > steps of a run, 1009 > ranks, 31 > salts).
SEED_STRIDE = 1_000_003
RANK_STRIDE = 1009
SALT_STRIDE = 31
# Salts of the per-step random streams (step_seed's last argument): the masking of a training step uses
# salt 0, its dropout SALT_DROPOUT, the fixed masking of validation SALT_VALIDATION.
SALT_DROPOUT = 1
SALT_VALIDATION = 7
SALT_BUCKETS = 17  # the batch order of length buckets (one stream per (seed, epoch))


def epoch_order(n: int, seed: int, epoch: int) -> Tensor:
    """The data order of one epoch: a permutation depending only on (seed, epoch). Shapes: ``(n,)``."""
    g = torch.Generator().manual_seed(seed * SEED_STRIDE + epoch)
    return torch.randperm(n, generator=g)


def step_seed(seed: int, step: int, rank: int, salt: int = 0) -> int:
    """A seed depending only on (seed, step, rank, salt), so masking and dropout survive a resume."""
    return (((seed * SEED_STRIDE + step) * RANK_STRIDE + rank) * SALT_STRIDE + salt) % 2**63


def step_generator(seed: int, step: int, rank: int, salt: int = 0) -> torch.Generator:
    """A CPU generator seeded with :func:`step_seed`."""
    return torch.Generator().manual_seed(step_seed(seed, step, rank, salt))


def length_buckets(
    order: Tensor, lengths: Tensor, batch_size: int, per_bucket: int, generator: torch.Generator
) -> list[Tensor]:
    """Batches of ``order`` (a shuffled epoch, ``(P,)``) that hold sequences of similar ``lengths (P,)``:
    the order is cut into buckets of ``per_bucket`` batches, each bucket sorted by length and cut into
    batches, and the batches shuffled with ``generator``. Every row appears once; a batch is padded only to
    its own longest sequence, so short patients no longer pay for the long ones."""
    batches: list[Tensor] = []
    for bucket in order.split(batch_size * per_bucket):
        batches += list(bucket[torch.argsort(lengths[bucket], stable=True)].split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def epoch_batches(
    order: Tensor, lengths: Tensor, batch_size: int, per_bucket: int, seed: int, epoch: int
) -> list[Tensor]:
    """The batches of one epoch's ``order (P,)``: consecutive cuts, or with ``per_bucket`` > 0 the
    :func:`length_buckets` of ``lengths (P,)``, shuffled by the (seed, epoch) stream :data:`SALT_BUCKETS`."""
    if per_bucket <= 0:
        return list(order.split(batch_size))
    gen = step_generator(seed, epoch, 0, salt=SALT_BUCKETS)
    return length_buckets(order, lengths, batch_size, per_bucket, gen)
