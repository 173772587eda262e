"""Hostile names never become SQL: CSV header names, folder names and MEDS shard names reach DuckDB only
as bound parameters or through the one quoting helper, so each entry point of ``hrrbert prepare`` gives
the dataset of the same data under plain names, and writes nothing else."""

from __future__ import annotations

from datetime import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ehr_fixtures import (
    add_column,
    assert_refused,
    meds_shard,
    mini_program,
    prepare_cli,
    write_eicu,
    write_meds_shards,
    write_mimic,
    written_datasets,
)

# the header of the issue: pasted into the old ``columns={...}`` text it ran a COPY that wrote x.txt
INJECTION = "z': 'VARCHAR'}, header=true); COPY (SELECT 1) TO 'x.txt'; SELECT * FROM (SELECT {'a"
IDENT_INJECTION = "a\" FROM t; COPY (SELECT 1) TO 'y.txt'; --"
HOSTILE_FOLDERS = ("O'Brien", "it's [1] *", "q?x", "a'; COPY (SELECT 1) TO 'w.txt'; --")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return mini_program(tmp_path_factory.mktemp("programs"))


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """Run in an empty folder, so that a file an injected COPY writes would show up here."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _patients(out: Path) -> list[dict]:
    (path,) = written_datasets(out)
    t = pq.read_table(path / "patients.parquet").drop_columns(["split"])
    return t.to_pylist()


def _no_stray_files(tmp_path: Path, cwd: Path) -> None:
    stray = [p for p in tmp_path.rglob("*") if p.name in ("x.txt", "y.txt", "w.txt")]
    assert stray == [] and list(cwd.iterdir()) == []


@pytest.mark.parametrize("table", ["diagnoses_icd", "patients"])
def test_mimic_header_injection_of_the_issue_writes_nothing(program, tmp_path, cwd, table):
    clean, hostile = write_mimic(tmp_path / "clean"), write_mimic(tmp_path / "hostile")
    add_column(hostile / "hosp" / f"{table}.csv.gz", INJECTION)
    assert prepare_cli("--mimic", clean, out=tmp_path / "a", program=program).exit_code == 0
    res = prepare_cli("--mimic", hostile, out=tmp_path / "b", program=program)
    assert res.exit_code == 0, res.output
    _no_stray_files(tmp_path, cwd)
    assert _patients(tmp_path / "b") == _patients(tmp_path / "a")


@pytest.mark.parametrize("folder", HOSTILE_FOLDERS)
def test_mimic_hostile_header_and_folder_names(program, tmp_path, cwd, folder):
    clean = write_mimic(tmp_path / "clean")
    hostile = write_mimic(tmp_path / folder)
    for table in ("patients", "admissions", "diagnoses_icd"):
        add_column(hostile / "hosp" / f"{table}.csv.gz", INJECTION)
        add_column(hostile / "hosp" / f"{table}.csv.gz", IDENT_INJECTION)
    assert prepare_cli("--mimic", clean, out=tmp_path / "a", program=program).exit_code == 0
    res = prepare_cli("--mimic", hostile, out=tmp_path / "b", program=program)
    assert res.exit_code == 0, res.output
    assert _patients(tmp_path / "b") == _patients(tmp_path / "a")
    _no_stray_files(tmp_path, cwd)


def test_mimic_hostile_folder_with_a_bad_file_names_it(program, tmp_path, cwd):
    root = write_mimic(tmp_path / "O'Brien")
    (root / "hosp" / "admissions.csv.gz").write_bytes(b"not gzip")
    out = tmp_path / "out"
    assert_refused(
        prepare_cli("--mimic", root, out=out, program=program), out, "O'Brien", "admissions.csv.gz"
    )
    _no_stray_files(tmp_path, cwd)


@pytest.mark.parametrize("folder", HOSTILE_FOLDERS[:3])
def test_eicu_hostile_header_and_folder_names(program, tmp_path, cwd, folder):
    clean = write_eicu(tmp_path / "clean")
    hostile = write_eicu(tmp_path / folder)
    for table in ("patient", "diagnosis"):
        add_column(hostile / f"{table}.csv.gz", INJECTION)
    assert prepare_cli("--eicu", clean, out=tmp_path / "a", program=program).exit_code == 0
    res = prepare_cli("--eicu", hostile, out=tmp_path / "b", program=program)
    assert res.exit_code == 0, res.output
    assert _patients(tmp_path / "b") == _patients(tmp_path / "a")
    _no_stray_files(tmp_path, cwd)


def test_meds_hostile_shard_names_are_read_once_each(program, tmp_path, cwd):
    root = tmp_path / "meds [1] O'Brien"
    shard = meds_shard([(1, dt(2110, 1, 1), "ICD10CM/E11.9")])
    hostile = shard.append_column(INJECTION, pa.array(["x"]))  # a hostile extra column is ignored
    write_meds_shards(
        root,
        {
            "it's.parquet": hostile,
            "q?.parquet": meds_shard([(2, dt(2110, 1, 1), "ICD10CM/I10")]),
            "qz.parquet": meds_shard(
                [(3, dt(2110, 1, 1), "ICD10CM/J45909")]
            ),  # what a glob q? would also match
            "*/[ab].parquet": meds_shard([(4, dt(2110, 1, 1), "ICD10CM/N18.30")]),
            "a/a.parquet": meds_shard([(5, dt(2110, 1, 1), "ICD10CM/I10")]),  # what a glob */[ab] would match
        },
        {1: "train", 2: "train", 3: "train", 4: "train", 5: "held_out"},
    )
    res = prepare_cli("--meds", root, out=tmp_path / "out", program=program)
    assert res.exit_code == 0, res.output
    rows = _patients(tmp_path / "out")
    assert [r["subject_id"] for r in rows] == [1, 2, 3, 4, 5]
    assert [len(r["input_ids"]) for r in rows] == [2] * 5  # each shard read exactly once
    _no_stray_files(tmp_path, cwd)


def test_meds_hostile_split_file_folder(program, tmp_path, cwd):
    root = write_meds_shards(
        tmp_path / "it's",
        {"0.parquet": meds_shard([(1, dt(2110, 1, 1), "ICD10CM/E11.9"), (2, dt(2110, 1, 1), "ICD10CM/I10")])},
        {1: "train", 2: "held_out"},
    )
    res = prepare_cli("--meds", root, out=tmp_path / "out", program=program)
    assert res.exit_code == 0, res.output
    assert "subjects_with_given_split 2" in res.output
    _no_stray_files(tmp_path, cwd)
