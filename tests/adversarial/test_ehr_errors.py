"""Inputs that used to end in a traceback (or in a 0-patient dataset and then a ``TypeError``) are refused
by ``hrrbert prepare`` with an error naming the file (and line where there is one), exit code 1, no
dataset folder and no ``.tmp-*`` folder."""

from __future__ import annotations

import gzip
from datetime import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ehr_fixtures import (
    assert_refused,
    edit_lines,
    meds_shard,
    mini_program,
    prepare_cli,
    write_csv_gz,
    write_eicu,
    write_meds_shards,
    write_mimic,
)

from pipelines.demo.cohort_write import MIMIC_COLUMNS


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


def test_header_only_diagnoses_is_refused_before_writing(program, tmp_path):
    root = write_mimic(tmp_path / "m")
    write_csv_gz(root / "hosp" / "diagnoses_icd.csv.gz", MIMIC_COLUMNS["diagnoses_icd"], [])
    out = tmp_path / "out"
    assert_refused(
        prepare_cli("--mimic", root, out=out, program=program), out, "no patient has a usable diagnosis code"
    )


def test_meds_rows_without_time_only_is_refused_before_writing(program, tmp_path):
    root = write_meds_shards(tmp_path / "meds", {"0.parquet": meds_shard([(1, None, "ICD10CM/E11.9")])})
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--meds", root, out=out, program=program), out, "no patient has a usable"
    )
    assert "diagnosis_rows_without_time 1" in msg


def test_no_code_known_to_the_program_is_refused(program, tmp_path):
    root = write_mimic(tmp_path / "m", diagnoses=[[1, 102, 1, "K219", 10], [3, 301, 1, "4019", 9]])
    out = tmp_path / "out"
    assert_refused(prepare_cli("--mimic", root, out=out, program=program), out, "none of the 2 code rows")


def test_truncated_gzip_names_file_and_line(program, tmp_path):
    root = write_mimic(tmp_path / "m", diagnoses=[[1, 102, i, "E119", 10] for i in range(20000)])
    p = root / "hosp" / "diagnoses_icd.csv.gz"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--mimic", root, out=out, program=program), out, "diagnoses_icd.csv.gz, line "
    )
    assert "truncated" in msg


def test_not_gzip_names_the_file(program, tmp_path):
    root = write_eicu(tmp_path / "e")
    (root / "diagnosis.csv.gz").write_bytes(b"diagnosisid,patientunitstayid\n1,2\n")
    out = tmp_path / "out"
    assert_refused(prepare_cli("--eicu", root, out=out, program=program), out, "diagnosis.csv.gz")


@pytest.mark.parametrize("extra", [",surplus", None])
def test_ragged_rows_name_file_and_line(program, tmp_path, extra):
    root = write_mimic(tmp_path / "m")

    def edit(lines):
        lines[4] = lines[4] + extra if extra else lines[4].rsplit(",", 1)[0]
        return lines

    edit_lines(root / "hosp" / "admissions.csv.gz", edit)
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--mimic", root, out=out, program=program), out, "admissions.csv.gz, line 5"
    )
    assert "wrong number of fields" in msg and ("17 fields" if extra else "15 fields") in msg


def test_bad_utf8_names_the_line(program, tmp_path):
    root = write_eicu(tmp_path / "e")
    p = root / "diagnosis.csv.gz"
    lines = gzip.decompress(p.read_bytes()).split(b"\n")
    lines[3] = lines[3].replace(b"cardiovascular", b"cardiovascul\xe4r")
    p.write_bytes(gzip.compress(b"\n".join(lines)))
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--eicu", root, out=out, program=program), out, "diagnosis.csv.gz, line 4"
    )
    assert "not UTF-8" in msg


def test_wrong_value_type_names_line_column_and_value(program, tmp_path):
    root = write_mimic(tmp_path / "m")
    edit_lines(
        root / "hosp" / "diagnoses_icd.csv.gz", lambda ls: [*ls[:3], ls[3].replace(",9", ",nine"), *ls[4:]]
    )
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--mimic", root, out=out, program=program), out, "diagnoses_icd.csv.gz, line 4"
    )
    assert "icd_version" in msg and "'nine'" in msg


def test_meds_integer_code_column_names_the_shard(program, tmp_path):
    root = tmp_path / "meds"
    (root / "data").mkdir(parents=True)
    t = pa.table(
        {
            "subject_id": pa.array([1], pa.int64()),
            "time": pa.array([dt(2110, 1, 1)], pa.timestamp("us")),
            "code": pa.array([250], pa.int64()),
        }
    )
    pq.write_table(t, root / "data" / "0.parquet")
    out = tmp_path / "out"
    msg = assert_refused(
        prepare_cli("--meds", root, out=out, program=program), out, "0.parquet", "column code"
    )
    assert "expected: code: string" in msg


def test_meds_corrupt_shard_names_it(program, tmp_path):
    root = write_meds_shards(
        tmp_path / "meds", {"a.parquet": meds_shard([(1, dt(2110, 1, 1), "ICD10CM/E11.9")] * 500)}
    )
    write_meds_shards(root, {"b.parquet": meds_shard([(2, dt(2110, 1, 1), "ICD10CM/I10")] * 500)})
    p = root / "data" / "b.parquet"
    raw = bytearray(p.read_bytes())
    raw[60:400] = b"\x00" * 340  # page data broken, footer intact
    p.write_bytes(bytes(raw))
    out = tmp_path / "out"
    assert_refused(prepare_cli("--meds", root, out=out, program=program), out, "b.parquet")
