"""MEDS in and out: ``metadata/codes.parquet`` and ``dataset.json`` read and recorded as inputs, MEDS
label files placed in a dataset (the sequence cut at ``prediction_time``) and driving a fine-tuning,
``export-meds``; every MEDS folder written here is checked against the ``meds`` package's schemas."""

from __future__ import annotations

import json
import shutil
from datetime import datetime as dt
from datetime import timedelta
from pathlib import Path

import meds
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from ehr_fixtures import meds_shard, write_meds, write_meds_admissions, write_meds_shards
from train_fixtures import compile_fixture

from pipelines.data.export_meds import export_meds
from pipelines.data.label_tasks import place_labels, read_label_task
from pipelines.data.prepare import prepare
from pipelines.data.readers.meds import meds_files, read_meds
from pipelines.data.splits import SplitOptions
from pipelines.errors import InputFileError, MissingTableError, PipelineError

# ICD-10-CM codes of the fixture program (tests/data/snomed_mini_20220531)
KNOWN = ("E119", "I10", "J459", "K37", "N1830", "M819", "A491", "D509", "E1165", "J029", "K509", "N289")
T0 = dt(2110, 1, 1, 8, 0)
SPLITS = SplitOptions(finetune_train=24, finetune_val=10, test=10, rood_codes=0)


# ------------------------------------------------------------------------------------------ helpers


def assert_valid_meds(root: Path, *, sorted_subjects: bool = True) -> None:
    """``root`` passes the meds package's schemas (DataSchema, CodeMetadataSchema, DatasetMetadataSchema,
    SubjectSplitSchema, LabelSchema for every ``labels/<task>``); with ``sorted_subjects`` also the data
    rules the schema states in words: each subject in one shard, its rows contiguous and sorted by time."""
    shards = sorted((root / meds.data_subdirectory).rglob("*.parquet"))
    assert shards, root
    seen: set[int] = set()
    codes: set[str] = set()
    for s in shards:
        t = pq.read_table(s)
        meds.DataSchema.validate(t)
        codes |= set(t["code"].to_pylist())
        subj = t["subject_id"].to_numpy()
        runs = subj[np.r_[True, subj[1:] != subj[:-1]]] if len(subj) else subj
        if sorted_subjects:
            assert len(runs) == len(set(runs.tolist())), f"{s}: a subject's rows are not contiguous"
            assert not seen & set(runs.tolist()), f"{s}: a subject is in two shards"
            times = t["time"].cast(pa.int64()).fill_null(np.iinfo(np.int64).min).to_numpy()
            same = subj[1:] == subj[:-1]
            assert np.all(times[1:][same] >= times[:-1][same]), f"{s}: rows not sorted by time"
        seen |= set(runs.tolist())
    if (root / meds.code_metadata_filepath).is_file():
        cm = pq.read_table(root / meds.code_metadata_filepath)
        meds.CodeMetadataSchema.validate(cm)
        assert codes <= set(cm["code"].to_pylist()), "codes.parquet misses codes of the data"
    if (root / meds.dataset_metadata_filepath).is_file():
        meds.DatasetMetadataSchema.validate(json.loads((root / meds.dataset_metadata_filepath).read_text()))
    if (root / meds.subject_splits_filepath).is_file():
        meds.SubjectSplitSchema.validate(pq.read_table(root / meds.subject_splits_filepath))
    for task in sorted((root / "labels").glob("*")) if (root / "labels").is_dir() else []:
        for f in sorted(task.rglob("*.parquet")):
            meds.LabelSchema.validate(pq.read_table(f))


def cohort_rows(n: int) -> tuple[list[tuple], dict[int, list[dt]]]:
    """(subject_id, time, code) rows of ``n`` subjects with 2-4 visits 100 days apart (codes of the fixture
    program, in the MIMIC-IV MEDS ETL form) and a death for every fifth; and each subject's visit times."""
    rows, times = [], {}
    for s in range(1, n + 1):
        start = T0 + timedelta(days=7 * s)
        times[s] = [start + timedelta(days=100 * v) for v in range(2 + s % 3)]
        for v, t in enumerate(times[s]):
            for k in range(1 + (s + v) % 3):
                rows.append((s, t, f"DIAGNOSIS//ICD//10//{KNOWN[(s * 3 + v * 5 + k) % len(KNOWN)]}"))
        if s % 5 == 0:
            rows.append((s, times[s][-1] + timedelta(days=30), meds.death_code))
    return rows, times


def write_cohort(root: Path, n: int = 60, *, metadata: bool = False) -> tuple[Path, dict[int, list[dt]]]:
    """A MEDS root of :func:`cohort_rows` in two shards (subjects split between them), optionally with
    ``codes.parquet`` and ``dataset.json``."""
    rows, times = cohort_rows(n)
    half = n // 2
    write_meds_shards(
        root,
        {
            "train/0.parquet": meds_shard([r for r in rows if r[0] <= half]),
            "train/1.parquet": meds_shard([r for r in rows if r[0] > half]),
        },
    )
    if metadata:
        (root / "metadata").mkdir(exist_ok=True)
        codes = sorted({r[2] for r in rows})
        pq.write_table(
            pa.table(
                {
                    "code": codes,
                    "description": [f"title of {c}" for c in codes],
                    "parent_codes": pa.array([[] for _ in codes], pa.list_(pa.string())),
                }
            ),
            root / meds.code_metadata_filepath,
        )
        (root / meds.dataset_metadata_filepath).write_text(
            json.dumps(
                {
                    "dataset_name": "cohort",
                    "dataset_version": "1.0",
                    "etl_name": "test",
                    "meds_version": "0.4.1",
                }
            )
        )
    return root, times


def write_labels(folder: Path, rows: list[tuple], *, shards: int = 1, extra: dict | None = None) -> Path:
    """A MEDS label folder: ``rows`` of (subject_id, prediction_time, boolean_value) in ``shards`` files."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        part = rows[i::shards]
        t = {
            "subject_id": pa.array([r[0] for r in part], pa.int64()),
            "prediction_time": pa.array([r[1] for r in part], pa.timestamp("us")),
            "boolean_value": pa.array([r[2] for r in part], pa.bool_()),
        }
        for k, v in (extra or {}).items():
            t[k] = v[: len(part)]
        pq.write_table(pa.table(t), folder / f"part-{i}.parquet")
    return folder


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return compile_fixture(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> tuple[Path, dict[int, list[dt]]]:
    return write_cohort(tmp_path_factory.mktemp("meds") / "cohort")


@pytest.fixture(scope="module")
def dataset(cohort, program, tmp_path_factory) -> Path:
    (r,) = prepare(meds=cohort[0], program=program, out=tmp_path_factory.mktemp("ds"), splits=SPLITS)
    return r.path


# ------------------------------------------------------------------------------------ the meds schemas


def test_every_meds_fixture_passes_the_meds_schemas(tmp_path, cohort):
    assert_valid_meds(cohort[0])
    assert_valid_meds(write_cohort(tmp_path / "m", metadata=True)[0])
    assert_valid_meds(write_meds(tmp_path / "a"))
    # this fixture lists one admission's rows out of time order on purpose (visits follow time, not rows)
    assert_valid_meds(write_meds_admissions(tmp_path / "b"), sorted_subjects=False)


def test_the_validator_catches_what_meds_forbids(tmp_path):
    root = write_meds_shards(
        tmp_path / "m", {"0.parquet": meds_shard([(1, T0, "X"), (2, T0, "X"), (1, T0, "Y")])}
    )
    with pytest.raises(AssertionError, match="contiguous"):
        assert_valid_meds(root)
    pq.write_table(
        pa.table(
            {
                "subject_id": pa.array([1], pa.int32()),
                "time": pa.array([T0], pa.timestamp("us")),
                "code": ["X"],
            }
        ),
        root / "data" / "0.parquet",
    )
    with pytest.raises(Exception, match="subject_id"):
        assert_valid_meds(root)


# ------------------------------------------------------------------------- codes.parquet, dataset.json


def test_metadata_files_are_read_and_recorded_as_inputs(tmp_path, program):
    root, _ = write_cohort(tmp_path / "m", n=30, metadata=True)
    r = read_meds(root)
    inputs = [i["path"] for i in r.source["inputs"]]
    assert inputs[-2:] == ["metadata/codes.parquet", "metadata/dataset.json"]
    assert r.source["metadata"] == {
        "dataset_name": "cohort",
        "dataset_version": "1.0",
        "etl_name": "test",
        "meds_version": "0.4.1",
    }
    assert r.counts["codes_in_metadata"] == r.counts["codes_with_description"] == len(set(KNOWN)) + 1  # death
    assert [p.relative_to(root).as_posix() for p in meds_files(root)][-2:] == inputs[-2:]
    # both enter the dataset id: an edited dataset.json gives another dataset
    (a,) = prepare(meds=root, program=program, out=tmp_path / "ds", splits=SPLITS)
    assert a.manifest["source"]["metadata"]["dataset_name"] == "cohort"
    assert {"metadata/codes.parquet", "metadata/dataset.json"} <= {
        i["path"] for i in a.manifest["source"]["inputs"]
    }
    (root / meds.dataset_metadata_filepath).write_text(json.dumps({"dataset_name": "renamed"}))
    (b,) = prepare(meds=root, program=program, out=tmp_path / "ds", splits=SPLITS)
    assert b.dataset_id != a.dataset_id and b.manifest["source"]["metadata"] == {"dataset_name": "renamed"}


def test_parent_codes_read_codes_of_no_form_and_descriptions_name_the_rest(tmp_path):
    rows = [(1, T0, "ICD10/E11.9"), (1, T0, "LOCAL//DX//7"), (1, T0, "ICD10PCS/0DTJ4ZZ"),
            (1, T0, "ICD10/K37"), (1, T0, "LAB//1"), (1, T0, "ICD10/I10")]  # fmt: skip
    root = write_meds_shards(tmp_path / "m", {"0.parquet": meds_shard(rows)})
    (root / "metadata").mkdir()
    pq.write_table(
        pa.table(
            {
                "code": [
                    "ICD10/E11.9",
                    "LOCAL//DX//7",
                    "ICD10PCS/0DTJ4ZZ",
                    "ICD10/K37",
                    "LAB//1",
                    "ICD10/I10",
                ],
                "description": [
                    "Type 2 diabetes",
                    "local asthma",
                    "appendectomy",
                    "Acute appendicitis",
                    "a lab",
                    None,
                ],
                "parent_codes": [
                    ["SNOMED/44054006"],
                    ["OTHER/1", "ICD10CM/J45.9"],
                    ["SNOMED/80146002"],
                    ["OTHER/2"],
                    ["SNOMED/123456"],
                    None,
                ],
                "other": [1, 2, 3, 4, 5, 6],
            }
        ),
        root / meds.code_metadata_filepath,
    )
    assert_valid_meds(root)
    r = read_meds(root)
    got = [(e["vocabulary"], e["code"]) for e in r.events.to_pylist()]
    # a diagnosis-like code takes its SNOMED parent; any code takes an ICD parent (the first usable one);
    # ICD procedures and non-diagnoses never read through a SNOMED parent
    assert got == [("SNOMED", "44054006"), ("ICD10CM", "J459")]
    assert r.counts["rows_read_through_parent_codes"] == 2
    assert r.counts["unrecognised_diagnosis_codes"] == 3
    ex = r.counts["examples"]["unrecognised_diagnosis_codes"]
    assert "'ICD10/K37' (Acute appendicitis, 1 rows)" in ex and "'ICD10/I10' (1 rows)" in ex


@pytest.mark.parametrize(
    ("write", "match"),
    [
        (lambda p: pq.write_table(pa.table({"code": [1, 2]}), p / "codes.parquet"), "column code"),
        (
            lambda p: pq.write_table(pa.table({"code": ["a"], "parent_codes": ["b"]}), p / "codes.parquet"),
            "column parent_codes",
        ),
        (lambda p: (p / "codes.parquet").write_bytes(b"not parquet"), "not a readable Parquet"),
        (lambda p: (p / "dataset.json").write_text("{broken"), "not valid JSON"),
        (lambda p: (p / "dataset.json").write_text("[1, 2]"), "not a JSON object"),
    ],
)
def test_broken_metadata_files_are_errors_naming_them(tmp_path, write, match):
    root = write_meds_shards(tmp_path / "m", {"0.parquet": meds_shard([(1, T0, "ICD10CM/E11.9")])})
    (root / "metadata").mkdir()
    write(root / "metadata")
    with pytest.raises(InputFileError, match=match) as e:
        read_meds(root)
    assert "metadata" in str(e.value)


def test_dataset_json_fields_of_another_type_are_a_finding(tmp_path):
    root = write_meds_shards(tmp_path / "m", {"0.parquet": meds_shard([(1, T0, "ICD10CM/E11.9")])})
    (root / "metadata").mkdir()
    (root / meds.dataset_metadata_filepath).write_text(
        json.dumps({"etl_name": 3, "dataset_name": "x", "site_id_columns": ["site"]})
    )
    r = read_meds(root)
    assert r.source["metadata"] == {"dataset_name": "x", "site_id_columns": ["site"]}
    assert r.counts["dataset_metadata_fields_of_another_type"] == 1


# ------------------------------------------------------------------------------ visit times, labels


def test_prepare_stores_each_kept_visit_time(dataset, cohort):
    _, times = cohort
    t = pq.read_table(dataset / "patients.parquet")
    assert t.schema.field("visit_times").type == pa.list_(pa.timestamp("us"))
    for r in t.to_pylist():
        assert len(r["visit_times"]) == r["n_visits"] == max(r["segment_ids"]) + 1
        assert r["visit_times"] == times[r["subject_id"]][-r["n_visits"] :]


def _task(tmp_path, cohort, rows=None, name="task") -> Path:
    _, times = cohort
    if rows is None:  # at the second visit: was I10 coded in the first two visits? (learnable from the input)
        rows = []
        for s, ts in times.items():
            seen = {c for (s2, t, c) in cohort_rows(len(times))[0] if s2 == s and t <= ts[1]}
            rows.append((s, ts[1], "DIAGNOSIS//ICD//10//I10" in seen))
    return write_labels(tmp_path / name, rows, shards=2)


def test_a_label_row_sees_the_visits_up_to_and_including_its_prediction_time(tmp_path, dataset, cohort):
    from pipelines.data.sequences import TokenizedDataset

    _, times = cohort
    t = pq.read_table(dataset / "patients.parquet")
    pat = {r["subject_id"]: r for r in t.to_pylist()}
    s = next(s for s, r in pat.items() if r["n_visits"] == 4)
    ts = times[s]
    rows = [
        (s, ts[1], True),  # exactly at visit 1: visits 0 and 1
        (s, ts[1] + timedelta(days=50), False),  # between visits 1 and 2: the same
        (s, ts[3] + timedelta(days=1), True),  # after the last visit: everything
        (s, ts[0] - timedelta(seconds=1), True),  # before the first visit: no input, left out
        (999_999, ts[0], True),  # a subject the dataset does not hold
    ]
    task = read_label_task(write_labels(tmp_path / "cut", rows))
    placed = place_labels(task, t, dataset)
    seg = np.array(pat[s]["segment_ids"])
    upto = [1 + int((seg[1:] <= v).sum()) for v in (1, 1, 3)]
    assert placed.length.tolist() == upto and placed.label.tolist() == [True, False, True]
    assert placed.counts["rows_subject_not_in_dataset"] == 1 and placed.counts["rows_without_history"] == 1
    assert placed.counts["examples"]["subjects_not_in_dataset"] == [999_999]
    split = pat[s]["split"]
    assert set(placed.split) == {split} and placed.counts["rows_by_split"][split] == 3
    # the padded tensors: each row its patient's sequence up to that visit
    ds = TokenizedDataset(dataset, json.loads((dataset / "manifest.json").read_text())["program_id"], 10_000)
    seqs = ds.label_sequences(placed, split, max_len=128, max_segments=100)
    mine = [i for i, sid in enumerate(seqs.subject_id.tolist()) if sid == s]
    for i, n in zip(mine, upto, strict=True):
        assert int(seqs.attention_mask[i].sum()) == n
        assert seqs.input_ids[i, :n].tolist() == pat[s]["input_ids"][:n]
    assert seqs.labels[mine, 0].tolist() == [1.0, 0.0, 1.0]


def test_label_rows_follow_the_patients_splits(tmp_path, dataset, cohort):
    t = pq.read_table(dataset / "patients.parquet")
    placed = place_labels(read_label_task(_task(tmp_path, cohort)), t, dataset)
    split_of = dict(zip(t["subject_id"].to_pylist(), t["split"].cast(pa.string()).to_pylist(), strict=True))
    subj = t["subject_id"].to_numpy()[placed.row]
    assert [split_of[s] for s in subj.tolist()] == placed.split.tolist()
    assert placed.counts["rows_by_split"]["finetune_train"] == SPLITS.finetune_train
    assert sum(placed.counts["rows_by_split"].values()) == placed.counts["rows"] == t.num_rows


def test_label_files_are_checked(tmp_path):
    ok = [(1, T0, True), (2, T0, False)]
    with pytest.raises(MissingTableError):
        read_label_task((tmp_path / "empty").mkdir() or tmp_path / "empty")
    with pytest.raises(InputFileError, match="not a folder"):
        read_label_task(tmp_path / "missing")
    no_bool = tmp_path / "ints"
    no_bool.mkdir()
    pq.write_table(
        pa.table(
            {
                "subject_id": pa.array([1], pa.int64()),
                "prediction_time": pa.array([T0], pa.timestamp("us")),
                "integer_value": pa.array([3], pa.int64()),
            }
        ),
        no_bool / "0.parquet",
    )
    with pytest.raises(InputFileError, match="boolean_value") as e:
        read_label_task(no_bool)
    assert "integer_value" in str(e.value)
    with pytest.raises(InputFileError, match="prediction_time is null"):
        read_label_task(write_labels(tmp_path / "null", [*ok, (3, None, True)]))
    with pytest.raises(InputFileError, match="has both labels"):
        read_label_task(write_labels(tmp_path / "conflict", [*ok, (1, T0, False)], shards=2))
    # exact duplicates are dropped; the other label columns are not read
    task = read_label_task(
        write_labels(
            tmp_path / "dup",
            [*ok, (1, T0, True)],
            shards=3,
            extra={"float_value": pa.array([0.5, 1.5, 2.5], pa.float32())},
        )
    )
    assert task.rows.num_rows == 2 and task.counts["duplicate_rows"] == 1 and task.name == "dup"
    assert len(task.inputs) == 3 and all(len(i["sha256"]) == 64 for i in task.inputs)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    pq.write_table(
        pa.table(
            {
                "subject_id": ["1"],
                "prediction_time": pa.array([T0], pa.timestamp("us")),
                "boolean_value": [True],
            }
        ),
        wrong / "0.parquet",
    )
    with pytest.raises(InputFileError, match="column subject_id"):
        read_label_task(wrong)


def test_a_dataset_without_visit_times_is_refused_only_by_label_tasks(tmp_path, dataset, cohort):
    from pipelines.data.sequences import TokenizedDataset

    old = tmp_path / "old"
    shutil.copytree(dataset, old)
    t = pq.read_table(old / "patients.parquet")
    pq.write_table(t.drop_columns(["visit_times"]), old / "patients.parquet")
    task = read_label_task(_task(tmp_path, cohort))
    with pytest.raises(InputFileError, match="visit_times") as e:
        place_labels(task, pq.read_table(old / "patients.parquet"), old)
    assert "prepare" in str(e.value)
    ds = TokenizedDataset(old, json.loads((old / "manifest.json").read_text())["program_id"], 10_000)
    assert (
        len(
            ds.sequences(
                "finetune_train", max_len=128, max_segments=100, task="mortality", before_last_visit=True
            )
        )
        == SPLITS.finetune_train
    )
    # a source without visit times (eICU) has null elements: refused too
    nulls = pa.array([[None] * n for n in t["n_visits"].to_pylist()], pa.list_(pa.timestamp("us")))
    with pytest.raises(InputFileError, match="no visit times"):
        place_labels(task, t.set_column(t.schema.get_field_index("visit_times"), "visit_times", nulls), old)


# --------------------------------------------------------------------------------- fine-tuning on it


@pytest.fixture(scope="module")
def pretrained(dataset, program, tmp_path_factory) -> Path:
    from pipelines.train.pretrain import pretrain

    return pretrain(
        dataset,
        program,
        out=tmp_path_factory.mktemp("runs"),
        model="tiny",
        mode="base",
        max_steps=2,
        batch_size=8,
        device="cpu",
        progress=False,
    ).run_dir


def test_a_meds_label_folder_drives_a_fine_tuning(tmp_path, dataset, program, pretrained, cohort, one_thread):
    from pipelines.train.finetune import finetune

    labels = _task(tmp_path, cohort, name="i10 by visit 2")
    r = finetune(
        pretrained,
        dataset,
        program,
        out=tmp_path / "runs",
        labels=str(labels),
        epochs=2,
        batch_size=8,
        device="cpu",
        progress=False,
    )
    assert r.run_dir.name == f"finetune-labels-i10_by_visit_2-{pretrained.name}-seed0"
    res = json.loads((r.run_dir / "trial-0" / "results.json").read_text())
    assert res["config"]["labels"] == str(labels) and res["labels"]["name"] == "i10 by visit 2"
    placed = res["labels"]["placed"]
    assert placed["rows_by_split"]["finetune_train"] == SPLITS.finetune_train
    assert {"accuracy", "f1", "auroc", "auprc"} <= set(res["test"]) and res["best_epoch"] in (0, 1)
    # one record per epoch, with validation on the finetune_val label rows
    epochs = [json.loads(x) for x in (r.run_dir / "trial-0" / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1] and all("val_f1" in e for e in epochs)
    summary = json.loads((r.run_dir / "summary.json").read_text())
    assert summary["labels"]["inputs"] == res["labels"]["inputs"]
    # resuming with other label contents (one label flipped) is refused
    part = pq.read_table(labels / "part-0.parquet")
    flipped = pa.array([not part["boolean_value"][0].as_py(), *part["boolean_value"].to_pylist()[1:]])
    pq.write_table(part.set_column(2, "boolean_value", flipped), labels / "part-0.parquet")
    with pytest.raises(PipelineError, match="other label files"):
        finetune(
            pretrained,
            dataset,
            program,
            out=tmp_path / "runs",
            labels=str(labels),
            epochs=2,
            batch_size=8,
            device="cpu",
            progress=False,
            resume=True,
        )


def test_finetune_cli_takes_labels_and_keeps_them_binary(
    tmp_path, dataset, program, pretrained, cohort, one_thread
):
    from pipelines.cli import main

    labels = _task(tmp_path, cohort)
    args = [
        "finetune",
        str(pretrained),
        "--dataset",
        str(dataset),
        "--program",
        str(program),
        "--labels",
        str(labels),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--device",
        "cpu",
        "--no-progress",
    ]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "runs" / f"finetune-labels-task-{pretrained.name}-seed0" / "summary.json").is_file()
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "r2"), "--task", "chapters"])
    assert res.exit_code != 0 and "binary head" in res.output


# --------------------------------------------------------------------------------------- export-meds


@pytest.fixture(scope="module")
def demo_cohort(tmp_path_factory) -> Path:
    from pipelines.demo.cohort import generate_cohort

    return generate_cohort(tmp_path_factory.mktemp("demo") / "cohort", n_patients=150, seed=5)


def test_export_meds_writes_the_demo_cohort_as_valid_meds_that_reads_back(tmp_path, demo_cohort):
    from pipelines.data.readers.mimic import read_mimic

    r = export_meds("mimic-iv", demo_cohort, tmp_path / "meds", shard_subjects=40)
    assert_valid_meds(r.path)
    assert r.counts["shards"] == 5 and r.counts["subjects"] == 150  # random 80/10/10: 120, 15, 15
    shards = [f for f in r.files if f.startswith("data/")]
    assert shards == [*(f"data/train/{i}.parquet" for i in range(3)), "data/tuning/0.parquet",
                      "data/held_out/0.parquet"]  # fmt: skip
    a, b = read_mimic(demo_cohort), read_meds(r.path)
    cols = ["subject_id", "visit_index", "known_time", "vocabulary", "code"]
    assert b.events.select(cols).equals(a.events.select(cols))  # same visits, codes and order
    # the diagnoses are exported at discharge, when MIMIC-IV codes them: a MEDS visit starts there
    assert b.events["visit_time"].equals(a.events["known_time"])
    assert b.labels["chapters"].equals(a.labels["chapters"])
    agree = np.mean(np.asarray(b.labels["mortality_6m"]) == np.asarray(a.labels["mortality_6m"]))
    assert agree > 0.95  # deaths: 182 days from the discharge in both; in-hospital deaths only in MIMIC-IV
    # the label task is MIMIC-IV's mortality_6m of each subject's last visit, at that visit's admission
    task = read_label_task(r.path / "labels" / "mortality_6m")
    assert task.rows["subject_id"].equals(a.labels["subject_id"])
    assert task.rows["boolean_value"].equals(a.labels["mortality_6m"])
    assert task.counts["positives"] == r.counts["label_positives_mortality_6m"] > 0
    meta = json.loads((r.path / meds.dataset_metadata_filepath).read_text())
    assert meta["etl_name"] == "hrrbert export-meds" and meta["meds_version"] == "0.4"
    cm = pq.read_table(r.path / meds.code_metadata_filepath).to_pylist()
    dx = [c for c in cm if c["code"].startswith("DIAGNOSIS//ICD//10//")]
    assert dx and all(c["description"] for c in dx)  # titles from hosp/d_icd_diagnoses
    e = next(c for c in dx if len(c["code"]) > len("DIAGNOSIS//ICD//10//") + 3)
    assert e["parent_codes"] == [f"ICD10CM/{e['code'][20:23]}.{e['code'][23:]}"]
    assert next(c for c in cm if c["code"] == meds.death_code)["parent_codes"] == []


def test_export_meds_of_a_meds_source_keeps_its_splits_and_deaths(tmp_path):
    src = write_meds(tmp_path / "src")
    r = export_meds("meds", src, tmp_path / "out", labels=False)
    assert_valid_meds(r.path)
    assert not (r.path / "labels").exists()
    splits = pq.read_table(r.path / meds.subject_splits_filepath).to_pylist()
    assert splits == [{"subject_id": 1, "split": "train"}, {"subject_id": 2, "split": "held_out"}]
    data = pq.read_table(r.path / "data" / "train" / "0.parquet").to_pylist()
    assert [d["code"] for d in data if d["subject_id"] == 1] == [
        "MEDS_BIRTH",  # the source's static and birth events pass through (subject 3's GENDER//F: dropped)
        "DIAGNOSIS//ICD//9//4019",
        "DIAGNOSIS//ICD//9//25000",
        "DIAGNOSIS//ICD//10//E119",
        "DIAGNOSIS//ICD//10//I10",
        meds.death_code,
    ]
    assert read_meds(r.path).labels.equals(read_meds(src).labels)


def test_export_meds_label_window_ends_at_day_182(tmp_path):
    """Bug guarded: the exported ``mortality_6m`` label window moved by one at its far end: a MEDS_DEATH
    exactly MORTALITY_DAYS (182) days after ``prediction_time`` (the subject's last visit) is a positive,
    one 183 days after is not; the window starts at day 0 (a death at the visit's time counts)."""
    from pipelines.data.readers.common import MORTALITY_DAYS

    assert MORTALITY_DAYS == 182
    first, last = dt(2110, 1, 5, 12, 0), dt(2110, 9, 1, 12, 0)  # the label is at the last visit
    days = {1: MORTALITY_DAYS, 2: MORTALITY_DAYS + 1, 3: 0, 4: MORTALITY_DAYS - 1}
    rows = []
    for subject, d in days.items():
        rows += [
            (subject, first, "DIAGNOSIS//ICD//10//E119"),
            (subject, last, "DIAGNOSIS//ICD//10//I10"),
            (subject, last + timedelta(days=d), meds.death_code),
        ]
    rows.append((5, last, "DIAGNOSIS//ICD//10//J459"))  # no death
    src = write_meds_shards(tmp_path / "src", {"0.parquet": meds_shard(rows)})
    r = export_meds("meds", src, tmp_path / "out")
    assert_valid_meds(r.path)
    got = pq.read_table(r.path / "labels" / "mortality_6m" / "labels.parquet").to_pylist()
    assert {x["subject_id"]: x["prediction_time"] for x in got} == dict.fromkeys(range(1, 6), last)
    labels = {x["subject_id"]: x["boolean_value"] for x in got}
    assert labels == {1: True, 2: False, 3: True, 4: True, 5: False}
    assert r.counts["label_positives_mortality_6m"] == 3


def test_export_meds_refusals(tmp_path, demo_cohort):
    from pipelines.cli import main

    with pytest.raises(PipelineError, match="eICU has no absolute times"):
        export_meds("eicu", demo_cohort / "eicu", tmp_path / "x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(PipelineError, match="--force"):
        export_meds("meds", write_meds(tmp_path / "src"), foreign)
    with pytest.raises(PipelineError, match="never replaced"):
        export_meds("meds", tmp_path / "src", foreign, force=True)
    assert (foreign / "keep.txt").read_text() == "mine"
    runner = CliRunner()
    out = tmp_path / "cli"
    res = runner.invoke(main, ["export-meds", str(out), "--meds", str(tmp_path / "src")])
    assert res.exit_code == 0, res.output
    assert "subjects  2 in 2 shard(s)" in res.output  # one per split
    assert (out / "labels" / "mortality_6m").is_dir()
    res = runner.invoke(
        main, ["export-meds", str(out), "--meds", str(tmp_path / "src"), "--force", "--no-labels"]
    )
    assert res.exit_code == 0 and not (out / "labels").exists()
    res = runner.invoke(main, ["export-meds", str(out)])
    assert res.exit_code != 0 and "exactly one of" in res.output
    assert not list(tmp_path.glob(".tmp-*"))
    assert (
        pc.sum(pc.equal(pq.read_table(out / "data" / "train" / "0.parquet")["code"], meds.death_code)).as_py()
        == 1
    )


def test_a_codes_file_of_empty_parent_lists_is_read(tmp_path):
    """pyarrow types a column of empty lists ``list<null>``; MEDS writers produce such files."""
    root = write_meds_shards(tmp_path / "m", {"0.parquet": meds_shard([(1, T0, "ICD10CM/E11.9")])})
    (root / "metadata").mkdir()
    pq.write_table(
        pa.table({"code": ["ICD10CM/E11.9"], "parent_codes": [[]]}), root / meds.code_metadata_filepath
    )
    r = read_meds(root)
    assert r.counts["codes_in_metadata"] == 1 and r.counts["codes_with_parent_codes"] == 0
