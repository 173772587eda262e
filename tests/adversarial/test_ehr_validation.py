"""EHR validation of ``hrrbert prepare``: exact duplicates are dropped and counted with a warning,
conflicting duplicates are errors naming the file, lines and ids, and data-quality findings (orphan
rows, unknown patients, ``dod`` before discharge, unknown ``icd_version``, empty codes) are counted,
warned with examples and printed in the summary."""

from __future__ import annotations

import json
from datetime import datetime as dt

import pyarrow.parquet as pq
import pytest
from ehr_fixtures import (
    adm,
    assert_refused,
    edit_lines,
    meds_shard,
    mini_program,
    prepare_cli,
    write_eicu,
    write_meds,
    write_meds_shards,
    write_mimic,
    written_datasets,
)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


def _dataset(out):
    (path,) = written_datasets(out)
    manifest = json.loads((path / "manifest.json").read_text())
    return pq.read_table(path / "patients.parquet").drop_columns(["split"]).to_pylist(), manifest


def _duplicate(lines, every=1):
    """Each data line written twice (the header once)."""
    return [lines[0]] + [
        x for i, line in enumerate(lines[1:]) for x in ([line, line] if i % every == 0 else [line])
    ]


@pytest.mark.parametrize("table", ["diagnoses_icd", "admissions", "patients"])
def test_mimic_exact_duplicates_are_dropped_counted_and_printed(program, tmp_path, table):
    clean, dup = write_mimic(tmp_path / "clean"), write_mimic(tmp_path / "dup")
    edit_lines(dup / "hosp" / f"{table}.csv.gz", _duplicate)
    assert prepare_cli("--mimic", clean, out=tmp_path / "a", program=program).exit_code == 0
    res = prepare_cli("--mimic", dup, out=tmp_path / "b", program=program)
    assert res.exit_code == 0, res.output
    key = {
        "diagnoses_icd": "duplicate_diagnosis_rows",
        "admissions": "duplicate_admission_rows",
        "patients": "duplicate_patient_rows",
    }[table]
    n = {"diagnoses_icd": 12, "admissions": 10, "patients": 6}[table]
    (rows_a, man_a), (rows_b, man_b) = _dataset(tmp_path / "a"), _dataset(tmp_path / "b")
    assert rows_b == rows_a  # the same tokens and labels: nothing multiplied
    assert man_b["counts"]["codes"]["tokens"] == man_a["counts"]["codes"]["tokens"]
    assert man_b["counts"]["reader"][key] == n
    assert f"warning   {key} {n}: e.g. line 3 repeats line 2" in res.output
    assert f"mimic-iv: {n} exact duplicate rows in {table}.csv.gz dropped" in res.stderr  # the logged warning


def test_mimic_two_dods_for_one_patient_is_an_error(program, tmp_path):
    root = write_mimic(tmp_path / "m")
    edit_lines(root / "hosp" / "patients.csv.gz", lambda ls: [*ls, ls[1].replace("2116-04-10", "2116-05-01")])
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--mimic", root, out=out, program=program), out, "patients.csv.gz", "line 2"
    )
    assert "subject_id 1" in msg and "line 8: dod 2116-05-01" in msg and "dod 2116-04-10" in msg


def test_mimic_two_admit_times_for_one_hadm_id_is_an_error(program, tmp_path):
    root = write_mimic(tmp_path / "m")
    other = adm(1, 102, "2116-01-02 10:00:00", "2116-01-03 20:00:00")
    edit_lines(
        root / "hosp" / "admissions.csv.gz",
        lambda ls: [*ls, ",".join("" if v is None else str(v) for v in other)],
    )
    out = tmp_path / "out"
    msg = assert_refused(prepare_cli("--mimic", root, out=out, program=program), out, "admissions.csv.gz")
    assert "hadm_id 102" in msg and "line 2:" in msg and "line 12:" in msg and "2116-01-02 10:00:00" in msg


def test_mimic_findings_are_counted_warned_and_printed(program, tmp_path):
    patients = [[1, "F", 70, 2110, "2008 - 2010", "2115-04-10"], [3, "F", 50, 2112, "2011 - 2013", None]]
    diagnoses = [
        [1, 102, 2, "E119", 10], [1, 102, 1, "I10", 11], [1, 101, 1, "", 9], [1, 101, 2, "25000", 9],
        [2, 201, 1, "J45909", 10], [3, 999, 1, "N1830", 10], [3, 301, 1, "N1830", 10],
    ]  # fmt: skip
    root = write_mimic(tmp_path / "m", patients=patients, diagnoses=diagnoses)
    res = prepare_cli("--mimic", root, out=tmp_path / "out", program=program)
    assert res.exit_code == 0, res.output
    (rows, manifest) = _dataset(tmp_path / "out")
    reader = manifest["counts"]["reader"]
    expected = {
        "rows_without_admission": "diagnoses_icd.csv.gz line 7: subject_id 3, hadm_id 999",
        "rows_unknown_icd_version": "diagnoses_icd.csv.gz line 3: icd_version 11, icd_code I10",
        "rows_empty_code": "diagnoses_icd.csv.gz line 4: subject_id 1, hadm_id 101",
        "admissions_of_unknown_patients": "admissions.csv.gz line 4: hadm_id 201, subject_id 2",
        "dod_before_last_discharge": (
            "patients.csv.gz line 2: subject_id 1, dod 2115-04-10 before the discharge"
        ),
    }
    for key, example in expected.items():
        assert reader[key] > 0 and example in reader["examples"][key][0], (key, reader)
        assert f"warning   {key} {reader[key]}: e.g. {example}" in res.output, res.output
        assert example in res.stderr, key  # the logged warning
    assert reader["admissions_of_unknown_patients"] == 7
    # a dod before the last discharge still counts as a death (and is warned)
    assert {r["subject_id"]: r["mortality_6m"] for r in rows}[1] is True


def test_eicu_duplicates_dropped_and_conflicts_refused(program, tmp_path):
    clean, dup = write_eicu(tmp_path / "clean"), write_eicu(tmp_path / "dup")
    edit_lines(dup / "patient.csv.gz", _duplicate)
    edit_lines(dup / "diagnosis.csv.gz", _duplicate)
    assert prepare_cli("--eicu", clean, out=tmp_path / "a", program=program).exit_code == 0
    res = prepare_cli("--eicu", dup, out=tmp_path / "b", program=program)
    assert res.exit_code == 0, res.output
    (rows_a, _), (rows_b, man) = _dataset(tmp_path / "a"), _dataset(tmp_path / "b")
    assert rows_b == rows_a
    assert man["counts"]["reader"]["duplicate_patient_rows"] == 6
    assert man["counts"]["reader"]["duplicate_diagnosis_rows"] == 9
    assert "warning   duplicate_diagnosis_rows 9" in res.output
    bad = write_eicu(tmp_path / "bad")
    edit_lines(bad / "patient.csv.gz", lambda ls: [*ls, ls[1].replace("002-00001", "002-00009")])
    out = tmp_path / "c"
    msg = assert_refused(prepare_cli("--eicu", bad, out=out, program=program), out, "patient.csv.gz")
    assert "patientunitstayid 112" in msg and "line 2:" in msg and "line 8:" in msg


def test_meds_duplicate_rows_counted_and_two_splits_refused(program, tmp_path):
    clean, dup = write_meds(tmp_path / "clean"), write_meds(tmp_path / "dup")
    rows = [
        (9, dt(2111, 1, 1), "ICD10CM/I10"),
        (9, dt(2111, 1, 1), "ICD10CM/I10"),
        (9, dt(2112, 1, 1), "ICD10CM/I10"),
    ]
    write_meds_shards(clean, {"train/2.parquet": meds_shard(rows[1:])})
    write_meds_shards(dup, {"train/2.parquet": meds_shard(rows)})
    assert prepare_cli("--meds", clean, out=tmp_path / "a", program=program).exit_code == 0
    res = prepare_cli("--meds", dup, out=tmp_path / "b", program=program)
    assert res.exit_code == 0, res.output
    (rows_a, _), (rows_b, man) = _dataset(tmp_path / "a"), _dataset(tmp_path / "b")
    assert rows_b == rows_a and man["counts"]["reader"]["duplicate_diagnosis_rows"] == 1
    assert (
        "data/train/2.parquet file_row_number 1 repeats data/train/2.parquet file_row_number 0" in res.output
    )
    bad = write_meds(tmp_path / "bad")
    write_meds_shards(bad, {}, {1: "train", 2: "held_out"})
    import pyarrow as pa

    pq.write_table(
        pa.table({"subject_id": pa.array([1, 1, 2], pa.int64()), "split": ["train", "held_out", "train"]}),
        bad / "metadata" / "subject_splits.parquet",
    )
    out = tmp_path / "c"
    msg = assert_refused(prepare_cli("--meds", bad, out=out, program=program), out, "subject_splits.parquet")
    assert "subject_id(s) 1 with more than one split" in msg
