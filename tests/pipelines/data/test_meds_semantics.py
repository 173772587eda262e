"""MEDS semantics (issue 34, items 1 and 2): a label's input is exactly the events known at or before its
``prediction_time``; MIMIC-IV diagnoses are known at discharge; the exported ``mortality_6m`` task sees
what ``--task mortality`` sees; the export holds what MEDS consumers read (``numeric_value``,
``subject_splits``, ``MEDS_BIRTH`` and ``GENDER//…``).

The consumers' reads are checked here by the files and columns they open (meds-torch-data 0.9.0:
``metadata/subject_splits.parquet`` and ``data/**/*.parquet`` with ``subject_id``, ``time``, ``code``,
``numeric_value``; PyHealth 2.1 ``MEDSDataset``: the same four columns), since neither is a test
dependency; the ``meds`` 0.4 schemas are checked directly."""

from __future__ import annotations

from datetime import datetime as dt

import meds
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ehr_fixtures import mini_program, write_mimic

from pipelines.data.export_meds import MEDS_SPLITS, export_meds
from pipelines.data.label_tasks import _running_max, place_labels, read_label_task
from pipelines.data.prepare import prepare
from pipelines.data.splits import SplitOptions


@pytest.fixture(scope="module")
def mimic(tmp_path_factory):
    return write_mimic(tmp_path_factory.mktemp("mimic") / "mimic")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, mimic):
    program = mini_program(tmp_path_factory.mktemp("programs"))
    opts = SplitOptions(finetune_train=1, finetune_val=1, test=1, rood_codes=0)
    return prepare(mimic=mimic, program=program, out=tmp_path_factory.mktemp("ds"), splits=opts)[0].path


@pytest.fixture(scope="module")
def export(tmp_path_factory, mimic):
    return export_meds("mimic-iv", mimic, tmp_path_factory.mktemp("meds") / "out")


def _labels(tmp_path, rows):
    folder = tmp_path / "task"
    folder.mkdir()
    t = pa.table(
        {
            "subject_id": pa.array([r[0] for r in rows], pa.int64()),
            "prediction_time": pa.array([r[1] for r in rows], pa.timestamp("us")),
            "boolean_value": pa.array([True] * len(rows)),
        }
    )
    pq.write_table(t, folder / "0.parquet")
    return read_label_task(folder)


def test_a_label_sees_exactly_the_visits_known_by_its_prediction_time(tmp_path, dataset):
    """Patient 5: admission 503 (2113-01-01..03-01) holds 502 (2113-01-10..01-20) inside it; 501 is
    2114-06-01..06-05 (one code each). Patient 1: one visit the program knows (two codes), 2116-01-01
    10:00..20:00."""
    patients = pq.read_table(dataset / "patients.parquet")
    by = {r["subject_id"]: r for r in patients.to_pylist()}
    assert by[5]["n_visits"] == 3 and by[1]["n_visits"] == 1
    rows = [
        (1, dt(2116, 1, 1, 10)),  # at the admission: its codes are not known yet -> no input
        (1, dt(2116, 1, 1, 20)),  # at its discharge: the visit
        (5, dt(2113, 1, 25)),  # 502 is discharged, but 503 (before it in the sequence) is not -> no input
        (5, dt(2113, 3, 1, 9)),  # 503 discharged: 503 and 502
        (5, dt(2114, 6, 1, 9)),  # at 501's admission: 503 and 502 only (what --task mortality reads)
        (5, dt(2114, 6, 5, 9)),  # 501 discharged: all three
    ]
    placed = place_labels(_labels(tmp_path, rows), patients, dataset)
    assert placed.counts["rows_without_history"] == 2
    assert placed.length.tolist() == [3, 3, 3, 4]  # [CLS] + two codes (patient 1), one per visit (5)
    assert placed.length[2] == by[5]["last_visit_start"]
    assert placed.prediction_time.tolist() == [r[1] for i, r in enumerate(rows) if i not in (0, 2)]


def test_the_exported_mortality_task_sees_what_task_mortality_sees(tmp_path, dataset, export):
    patients = pq.read_table(dataset / "patients.parquet")
    placed = place_labels(read_label_task(export.path / "labels" / "mortality_6m"), patients, dataset)
    by = {r["subject_id"]: r for r in patients.to_pylist()}
    got = dict(
        zip(patients["subject_id"].to_numpy()[placed.row].tolist(), placed.length.tolist(), strict=True)
    )
    # patient 5 (three visits): the label's input is [CLS] + the visits before the last, the input of
    # --task mortality, and its label is the dataset's mortality_6m
    assert got[5] == by[5]["last_visit_start"] == 3
    assert placed.label[list(got).index(5)] == by[5]["mortality_6m"]
    # patients 1, 2, 3: one visit, nothing before it: no input, as --task mortality has none (they are
    # not eligible for fine-tuning). Patient 6's last admission holds only a code the program does not
    # know, so its dataset ends a visit earlier (prepare's patients_last_visit_unknown): the exported
    # label, about the admission it does not have, sees that earlier visit
    assert placed.counts["rows_without_history"] == 3 and got[6] == 2


def test_the_export_holds_what_meds_consumers_read(export):
    root = export.path
    data = pa.concat_tables(pq.read_table(f) for f in sorted((root / "data").glob("*/*.parquet")))
    meds.DataSchema.validate(data)
    assert data.schema.field("numeric_value").type == pa.float32()
    assert data["numeric_value"].null_count == data.num_rows  # every event is a code
    mine = [r for r in data.to_pylist() if r["subject_id"] == 1]
    assert [(r["time"], r["code"]) for r in mine] == [
        (None, "GENDER//F"),  # static, first
        (dt(2040, 1, 1), "MEDS_BIRTH"),  # anchor_year 2110 - anchor_age 70
        (dt(2114, 5, 3, 12), "DIAGNOSIS//ICD//9//4019"),  # at the discharge
        (dt(2114, 5, 3, 12), "DIAGNOSIS//ICD//9//25000"),
        (dt(2116, 1, 1, 20), "DIAGNOSIS//ICD//10//I10"),
        (dt(2116, 1, 1, 20), "DIAGNOSIS//ICD//10//E119"),
        (dt(2116, 4, 10), "MEDS_DEATH"),
    ]
    assert export.counts["births"] == export.counts["static_events"] == export.counts["subjects"]
    labels = pq.read_table(root / "labels" / "mortality_6m" / "labels.parquet").to_pylist()
    assert next(r for r in labels if r["subject_id"] == 1)["prediction_time"] == dt(2116, 1, 1, 10)
    splits = pq.read_table(root / "metadata" / "subject_splits.parquet")
    meds.SubjectSplitSchema.validate(splits)
    assert sorted(splits["subject_id"].to_pylist()) == sorted(set(data["subject_id"].to_pylist()))
    assert set(splits["split"].to_pylist()) <= {"train", "tuning", "held_out"}
    assert export.counts["splits_from"] == "random"
    codes = pq.read_table(root / "metadata" / "codes.parquet")
    meds.CodeMetadataSchema.validate(codes)
    desc = dict(zip(codes["code"].to_pylist(), codes["description"].to_pylist(), strict=True))
    assert desc["MEDS_BIRTH"] and desc["GENDER//F"] and desc["DIAGNOSIS//ICD//9//4019"]


def test_splits_from_a_dataset_carry_its_splits_as_meds_names(tmp_path, mimic, dataset):
    r = export_meds("mimic-iv", mimic, tmp_path / "out", splits_from=dataset, labels=False)
    got = dict(zip(*pq.read_table(r.path / "metadata" / "subject_splits.parquet").to_pydict().values(),
                   strict=True))  # fmt: skip
    p = pq.read_table(dataset / "patients.parquet")
    want = dict(zip(p["subject_id"].to_pylist(), p["split"].cast(pa.string()).to_pylist(), strict=True))
    assert got == {s: MEDS_SPLITS[v] for s, v in want.items()}
    assert r.counts["splits_from"] == "dataset"


def test_running_max_stays_within_each_patient():
    x = np.array([5, 3, 7, 2, 1, 9, 4], np.int64)
    assert _running_max(x, np.array([0, 3, 3, 7])).tolist() == [5, 5, 7, 2, 2, 9, 9]
    assert _running_max(np.zeros(0, np.int64), np.array([0])).tolist() == []


def test_rows_whose_history_truncation_cut_are_counted_as_such(tmp_path, mimic):
    from pipelines.data.config import PrepareConfig

    program = mini_program(tmp_path / "programs")
    opts = SplitOptions(finetune_train=1, finetune_val=1, test=1, rood_codes=0)
    ds = prepare(
        mimic=mimic, program=program, out=tmp_path / "ds", splits=opts, config=PrepareConfig(max_len=3)
    )
    ds = ds[0].path
    patients = pq.read_table(ds / "patients.parquet")
    by = {r["subject_id"]: r for r in patients.to_pylist()}
    assert by[5]["truncated"] and by[5]["n_visits"] == 2  # 503, the oldest, is cut
    rows = [(5, dt(2113, 1, 15)), (1, dt(2116, 1, 1, 10)), (5, dt(2114, 6, 1, 9))]
    placed = place_labels(_labels(tmp_path, rows), patients, ds)
    c = placed.counts
    assert c["rows_cut_by_truncation"] == 1 and c["rows_without_history"] == 1
    assert c["examples"]["rows_cut_by_truncation"] == ["subject_id 5 at 2113-01-15 00:00:00"]
    assert placed.length.tolist() == [2]  # [CLS] + 502's code, known before 501's admission
    assert c["rows_outside_finetuning_splits"] == int(
        by[5]["split"] not in ("finetune_train", "finetune_val", "test")
    )
