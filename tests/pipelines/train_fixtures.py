"""Tiny tokenized datasets (format 1, as ``docs/dataset-format.md`` describes it) written by the
training tests against the compiled fixture program, independently of ``hrrbert prepare``.

Patients: ``[CLS]`` then 2-4 visits of 1-6 codes each (segment id = visit index, [CLS] in segment 0).
Mortality is true when the last visit before the final one holds a "deadly" code, so a model can learn it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_RELEASE = ROOT / "tests" / "data" / "snomed_mini_20220531"
SPLIT_SIZES = {
    "pretrain_train": 48,
    "pretrain_val": 12,
    "finetune_train": 24,
    "finetune_val": 12,
    "test": 12,
    "rood": 4,
}


def compile_fixture(out: Path) -> Path:
    from ontology_compiler import compile_ontology

    return compile_ontology(FIXTURE_RELEASE, out=out).path


def write_dataset(
    root: Path,
    program: Path,
    *,
    seed: int = 0,
    sizes: dict[str, int] | None = None,
    program_id: str | None = None,
    drop_columns: tuple[str, ...] = (),
    null_column: str | None = None,
) -> Path:
    """Write ``manifest.json``, ``patients.parquet`` and ``code_counts.parquet`` into ``root``."""
    manifest = json.loads((program / "manifest.json").read_text())
    concepts = pq.read_table(program / "concepts.parquet").to_pydict()
    codes, chapters = concepts["code"], concepts["chapter"]
    special = {c: i for i, c in enumerate(codes) if c.startswith("[")}
    normal = np.array([i for i, c in enumerate(codes) if not c.startswith("[")])
    deadly = set(normal[:3].tolist())
    rng = np.random.default_rng(seed)
    rows = {
        k: []
        for k in (
            "subject_id",
            "split",
            "input_ids",
            "segment_ids",
            "n_visits",
            "mortality_6m",
            "chapters",
            "last_visit_start",
            "disease_task",
        )
    }
    sid = 1000
    for split, n in (sizes or SPLIT_SIZES).items():
        for _ in range(n):
            n_vis = int(rng.integers(2, 5))
            ids, seg = [special["[CLS]"]], [0]
            last_start = 1
            visits = []
            for v in range(n_vis):
                if v == n_vis - 1:
                    last_start = len(ids)
                visit = rng.choice(normal, size=int(rng.integers(1, 7))).tolist()
                visits.append(visit)
                ids += visit
                seg += [v] * len(visit)
            chap = sorted({int(chapters[c]) for c in visits[-1] if chapters[c] is not None})
            rows["subject_id"].append(sid)
            rows["split"].append(split)
            rows["input_ids"].append(ids)
            rows["segment_ids"].append(seg)
            rows["n_visits"].append(n_vis)
            rows["mortality_6m"].append(bool(deadly & set(visits[-2])))
            rows["chapters"].append(chap)
            rows["last_visit_start"].append(last_start)
            rows["disease_task"].append(True)
            sid += 1
    table = pa.table(
        {
            "subject_id": pa.array(rows["subject_id"], pa.int64()),
            "split": pa.array(rows["split"]).dictionary_encode(),
            "input_ids": pa.array(rows["input_ids"], pa.list_(pa.int32())),
            "segment_ids": pa.array(rows["segment_ids"], pa.list_(pa.int16())),
            "n_visits": pa.array(rows["n_visits"], pa.int32()),
            "mortality_6m": pa.array(rows["mortality_6m"], pa.bool_()),
            "chapters": pa.array(rows["chapters"], pa.list_(pa.int8())),
            "last_visit_start": pa.array(rows["last_visit_start"], pa.int32()),
            "disease_task": pa.array(rows["disease_task"]),
        }
    )
    if null_column:
        i = table.column_names.index(null_column)
        table = table.set_column(
            i, null_column, pa.nulls(table.num_rows, table.schema.field(null_column).type)
        )
    for c in drop_columns:
        table = table.drop_columns([c])
    pid = program_id or manifest["program_id"]
    root.mkdir(parents=True, exist_ok=True)
    meta = {b"program_id": pid.encode(), b"format_version": b"1", b"dataset_id": b"testdataset0001"}
    pq.write_table(table.replace_schema_metadata(meta), root / "patients.parquet")
    pre = table.filter(pa.compute.equal(table.column("split").cast(pa.string()), "pretrain_train"))
    flat = np.concatenate([np.asarray(x) for x in pre.column("input_ids").to_pylist()])
    count = np.bincount(flat, minlength=len(codes))
    logf = np.log(np.maximum(count, 0.5) / max(flat.size, 1))
    counts = pa.table(
        {
            "concept_id": pa.array(np.arange(len(codes), dtype=np.int32)),
            "count": pa.array(count.astype(np.int64)),
            "log_frequency": pa.array(logf),
        }
    )
    pq.write_table(counts.replace_schema_metadata(meta), root / "code_counts.parquet")
    (root / "manifest.json").write_text(
        json.dumps(
            {
                "format_version": 1,
                "dataset_id": "testdataset0001",
                "program_id": pid,
                "source": {"kind": "test"},
                "options": {"max_len": 128},
                "counts": {"patients": table.num_rows},
            },
            indent=2,
        )
    )
    return root


@pytest.fixture(scope="session")
def program_dir(tmp_path_factory) -> Path:
    return compile_fixture(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory, program_dir) -> Path:
    return write_dataset(tmp_path_factory.mktemp("datasets") / "ds", program_dir)
