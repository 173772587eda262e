"""The tokenized dataset, format 1: assemble the tables and write them content-addressed.

A dataset is ``<out>/<name>/<dataset_id>/`` with ``manifest.json``, ``patients.parquet``,
``code_counts.parquet``, ``rood_codes.parquet`` and ``unknown_codes.parquet`` (see
``docs/dataset-format.md``). ``dataset_id`` hashes the format version, the program id, the input
files' hashes and the options, so the same inputs give the same id and preparing again is a no-op. It
is written into a temporary folder beside the target and renamed into place; a different dataset is
never overwritten. Every Parquet file carries ``dataset_id``, ``program_id`` and ``format_version``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ontology_compiler.api import publish, read_json_manifest, sha256_file, verify_manifest_files
from pipelines.errors import DatasetExistsError, PipelineError

from .splits import SPLITS
from .tokenize import Tokenized, list_column

FORMAT_VERSION = 1
# 2: visit_times, labels of the last visit; 3: splits, hold-out; 4: visit_known_times
GENERATOR_VERSION = "pipelines.prepare/4"
MANIFEST_UNKNOWN_LIMIT = 1000  # unknown codes listed in the manifest (all are in unknown_codes.parquet)


def make_dataset_id(program_id: str, inputs: list[dict], options: dict) -> str:
    payload = {
        "format_version": FORMAT_VERSION,
        "generator": GENERATOR_VERSION,
        "program_id": program_id,
        "inputs": sorted((i["path"], i["sha256"]) for i in inputs),
        "options": options,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def patients_table(
    tok: Tokenized, labels: pa.Table, split: np.ndarray, disease: np.ndarray, rood_unseen: np.ndarray
) -> pa.Table:
    """One row per kept patient, in subject_id order."""
    lab_ids = labels["subject_id"].to_numpy()
    pos = np.searchsorted(lab_ids, tok.subject_id)
    if len(pos) and (pos.max() >= len(lab_ids) or np.any(lab_ids[pos] != tok.subject_id)):
        raise PipelineError("labels do not cover every tokenized patient (reader bug)")
    return pa.table(
        {
            "subject_id": pa.array(tok.subject_id, pa.int64()),
            "split": pa.DictionaryArray.from_arrays(pa.array(split, pa.int8()), pa.array(SPLITS)),
            "input_ids": list_column(tok.offsets, tok.input_ids),
            "segment_ids": list_column(tok.offsets, tok.segment_ids),
            "n_visits": pa.array(tok.n_visits, pa.int32()),
            "mortality_6m": labels["mortality_6m"].take(pa.array(pos)),
            "chapters": labels["chapters"].take(pa.array(pos)),
            "last_visit_start": pa.array(tok.last_visit_start, pa.int32()),
            "truncated": pa.array(tok.truncated),
            "disease_task": pa.array(disease),
            "rood_unseen": pa.array(rood_unseen),
            "visit_times": _visit_times(tok, tok.visit_times),
            "visit_known_times": _visit_times(tok, tok.visit_known_times),
        }
    )


def _visit_times(tok: Tokenized, times: np.ndarray | None) -> pa.ListArray:
    """``list<timestamp[us]>``: ``times`` of each kept visit (its start, or when its codes are known) in
    segment order (null elements where the source has none; all null for ``times`` None)."""
    n = int(tok.n_visits.sum())
    times = times if times is not None else np.full(n, np.datetime64("NaT"), "datetime64[us]")
    offsets = np.concatenate([[0], np.cumsum(tok.n_visits, dtype=np.int64)])
    return list_column(offsets, times.astype("datetime64[us]"))


def _write_parquet(table: pa.Table, path: Path, meta: dict[str, str]) -> dict:
    md = dict(table.schema.metadata or {})
    md.update({k.encode(): v.encode() for k, v in meta.items()})
    pq.write_table(table.replace_schema_metadata(md), path, compression="zstd")
    return {
        "path": path.name,
        "sha256": sha256_file(path),
        "rows": table.num_rows,
        "bytes": path.stat().st_size,
    }


def write_dataset(final: Path, tables: dict[str, pa.Table], manifest: dict) -> bool:
    """Write ``tables`` and ``manifest`` to ``final`` atomically; False when it already held this dataset."""
    dataset_id = manifest["dataset_id"]
    meta = {
        "dataset_id": dataset_id,
        "program_id": manifest["program_id"],
        "format_version": str(FORMAT_VERSION),
    }

    def write_files(tmp: Path) -> list[dict]:
        return [_write_parquet(t, tmp / f"{name}.parquet", meta) for name, t in tables.items()]

    return publish(
        final, dataset_id, write_files, manifest, lambda: same_or_raise(final, dataset_id), _json_default
    )


def _json_default(o: object) -> object:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_dataset_manifest(path: str | Path) -> dict:
    return read_json_manifest(path, "tokenized dataset", error=PipelineError)


def dataset_for_program(dataset: Path, program: Path, error: type[Exception]) -> tuple[dict, str]:
    """The dataset's manifest and the program id, after checking the dataset was tokenized with ``program``
    (what a generator reading both needs before it starts)."""
    dman = read_dataset_manifest(dataset)
    pman_path = program / "manifest.json"
    if not pman_path.is_file():
        raise error(f"{program}: no manifest.json (not a program folder)")
    program_id = json.loads(pman_path.read_text(encoding="utf-8")).get("program_id")
    if dman.get("program_id") != program_id:
        raise error(
            f"{dataset}: dataset was tokenized against program {dman.get('program_id')!r}, "
            f"but program {program_id!r} was given; pass the program the dataset was prepared with"
        )
    return dman, program_id


@dataclass
class Generated:
    """Data a generator derives from a tokenized dataset (a QA set, Doctor2Vec data), stored like a dataset:
    ``<folder>/<id>/``, the id hashing the generator, the program, the source dataset and the options."""

    generator: str  # name/version of the generator
    program_id: str
    source: dict  # the source dataset's manifest
    options: dict  # the generator's options (hashed into the id)
    folder: Path  # <out>/<name>

    @property
    def data_id(self) -> str:
        payload = {
            "generator": self.generator,
            "program_id": self.program_id,
            "dataset_id": self.source.get("dataset_id"),
            "options": self.options,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def path(self) -> Path:
        return self.folder / self.data_id

    def existing(self) -> dict | None:
        """The checked manifest when this data was generated before, else None."""
        if self.path.exists():
            manifest = verify_dataset(self.path)
            if manifest.get("dataset_id") == self.data_id:
                return manifest
        return None

    def manifest(self, kind: str, id_key: str, **rest: Any) -> dict:
        """The manifest: the header every generated data set shares (its id under ``dataset_id``, the key the
        dataset writer uses, and under ``id_key``), then ``rest``."""
        return {
            "format_version": 1,
            "kind": kind,
            "dataset_id": self.data_id,
            id_key: self.data_id,
            "program_id": self.program_id,
            "source_dataset_id": self.source.get("dataset_id"),
            "generator": self.generator,
            "options": self.options,
            **rest,
        }

    def write(self, tables: dict[str, pa.Table], manifest: dict) -> tuple[dict, bool]:
        """Write the tables and manifest into :attr:`path` (atomically); the checked manifest and whether
        anything was written."""
        written = write_dataset(self.path, tables, manifest)
        return verify_dataset(self.path), written


def verify_dataset(path: str | Path, *, hashes: bool = True) -> dict:
    """Check a dataset folder against its manifest (format version, every file's presence and sha256)."""
    return verify_manifest_files(path, read_dataset_manifest(path), hashes=hashes, error=PipelineError)


def same_or_raise(final: Path, dataset_id: str) -> bool:
    try:
        manifest = verify_dataset(final)
    except PipelineError as e:
        raise DatasetExistsError(
            f"{final} exists but does not hold an intact dataset {dataset_id}: {e}\n"
            "  it is never overwritten; move or remove it, or choose another --out"
        ) from e
    if manifest.get("dataset_id") != dataset_id:
        raise DatasetExistsError(
            f"{final} holds dataset {manifest.get('dataset_id')!r}, not {dataset_id!r}; "
            "it is never overwritten"
        )
    return False
