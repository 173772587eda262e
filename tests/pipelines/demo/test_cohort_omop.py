"""The demo cohort as an OMOP CDM (``write_omop``): the v5.4 layouts, the concepts taken from an Athena
folder, byte-identical output, the MIMIC-IV files left as they are, and the key equality: the OMOP reader
(``--omop-codes source``) reads the same events and labels as the MIMIC-IV reader, and ``prepare`` makes
the same dataset from both."""

from __future__ import annotations

import csv
import hashlib

import duckdb
import pyarrow.parquet as pq
import pytest
from ehr_fixtures import mini_program, write_mimic
from omop_fixtures import athena_for_codes, write_athena

from pipelines.data.prepare import prepare
from pipelines.data.readers.mimic import read_mimic
from pipelines.data.readers.omop import read_omop
from pipelines.data.readers.omop_layout import CDM_COLUMNS
from pipelines.data.splits import SplitOptions
from pipelines.demo.cohort import generate_cohort
from pipelines.demo.cohort_write_omop import TABLES, write_omop
from pipelines.errors import InputFileError


def _csv(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _digests(folder) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_the_tables_of_a_small_cohort(tmp_path):
    """The MIMIC-IV fixture with the handful of Athena concepts: each diagnosis's ICD concept and its
    Maps to targets (N18.30 has two: two rows; K21.9 none: 0; ZZZ99 no concept: 0)."""
    mimic = write_mimic(tmp_path / "mimic")
    counts = write_omop(mimic, write_athena(tmp_path / "athena"), tmp_path / "omop", seed=1)
    for table in TABLES:
        with open(tmp_path / "omop" / f"{table}.csv", encoding="utf-8") as f:
            assert tuple(f.readline().rstrip("\n").split(",")) == CDM_COLUMNS[table], table
    assert counts["person"] == 6 and counts["visit_occurrence"] == 10 and counts["death"] == 4
    assert counts["diagnoses"] == 12 and counts["condition_occurrence"] == 13  # N18.30: two rows
    assert counts["diagnoses_without_source_concept"] == 1  # ZZZ99
    assert counts["diagnoses_without_standard_concept"] == 2  # ZZZ99, K21.9
    assert counts["diagnoses_with_several_standard_concepts"] == 1  # N18.30
    co = _csv(tmp_path / "omop" / "condition_occurrence.csv")
    by_code = {(r["person_id"], r["condition_source_value"]): r for r in co}
    e119 = by_code[("1", "E11.9")]
    assert (e119["condition_source_concept_id"], e119["condition_concept_id"]) == ("1001", "3001")
    assert e119["visit_occurrence_id"] == "102" and e119["condition_status_concept_id"] == "32908"  # seq 2
    assert by_code[("1", "I10")]["condition_status_concept_id"] == "32902"  # seq_num 1: primary
    assert by_code[("1", "401.9")]["condition_concept_id"] == "3002"  # ICD-9 through its own concept
    k219 = by_code[("6", "K21.9")]
    assert (k219["condition_source_concept_id"], k219["condition_concept_id"]) == ("1005", "0")  # no Maps to
    zzz = [r for r in co if r["person_id"] == "2" and r["condition_source_concept_id"] == "0"]
    assert [r["condition_source_value"] for r in zzz] == ["ZZZ.99"]  # a code the vocabulary lacks
    ids = [int(r["condition_occurrence_id"]) for r in co]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    death = {r["person_id"]: r for r in _csv(tmp_path / "omop" / "death.csv")}
    assert death["2"]["death_datetime"] == "2120-03-05 00:00:00" and death["1"]["death_datetime"] == ""
    visits = {r["visit_occurrence_id"]: r for r in _csv(tmp_path / "omop" / "visit_occurrence.csv")}
    assert visits["101"]["visit_start_datetime"] == "2114-05-01 08:00:00"
    assert visits["102"]["preceding_visit_occurrence_id"] == "101"
    concept = _csv(tmp_path / "omop" / "concept.csv")
    assert concept[0]["valid_start_date"] == "1970-01-01"  # Athena's YYYYMMDD in the CDM's layout
    n1830 = [r["condition_concept_id"] for r in co if r["condition_source_value"] == "N18.30"]
    assert n1830 == ["3004", "3005"]
    # read back (the CDM's own concept table, or the Athena folder): the two rows are one code
    r = read_omop(tmp_path / "omop")
    assert [e["code"] for e in r.events.to_pylist() if e["subject_id"] == 3] == ["N1830"]
    assert r.events.equals(read_omop(tmp_path / "omop", vocabulary=tmp_path / "athena").events)


def test_a_folder_that_is_not_athena_is_refused(tmp_path):
    mimic = write_mimic(tmp_path / "mimic")
    bad = tmp_path / "athena"
    bad.mkdir()
    (bad / "CONCEPT.csv").write_text("concept_id,concept_name\n1,x\n")
    (bad / "CONCEPT_RELATIONSHIP.csv").write_text("x\n")
    with pytest.raises(InputFileError, match="not an Athena header"):
        write_omop(mimic, bad, tmp_path / "omop")


# ------------------------------------------------------------------------- the demo cohort, both ways


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A 150-patient demo cohort, an Athena folder for its codes (a few left out: their rows fall back
    on condition_source_value) and its OMOP CDM."""
    root = tmp_path_factory.mktemp("omop_demo")
    cohort = generate_cohort(root / "cohort", n_patients=150, seed=5)
    codes = duckdb.sql(
        "SELECT DISTINCT CASE icd_version WHEN 9 THEN 'ICD9CM' ELSE 'ICD10CM' END, icd_code FROM "
        "read_csv($1, header = true, types = {'icd_code': 'VARCHAR'})",
        params=[str(cohort / "hosp" / "diagnoses_icd.csv.gz")],
    ).fetchall()
    # left out: every 40th code and every V and E code (of both shapes: read through the ICD code lists)
    leave = set(sorted(codes)[::40]) | {c for c in codes if c[1][0] in "VE"}
    vocabulary = athena_for_codes(root / "athena", codes, leave_out=leave)
    before = _digests(cohort)
    counts = write_omop(cohort, vocabulary, root / "omop", seed=5)
    return cohort, vocabulary, root / "omop", counts, before


def test_the_omop_reader_reads_what_the_mimic_reader_reads(demo):
    cohort, _, omop, counts, _ = demo
    assert (
        counts["diagnoses_without_source_concept"] > 0
        and counts["diagnoses_with_several_standard_concepts"] > 0
    )
    a, b = read_mimic(cohort), read_omop(omop, codes="source")
    assert b.events.num_rows == a.events.num_rows > 1000
    assert b.events.equals(a.events)  # subjects, visit order and times, codes in order
    assert b.visits.equals(a.visits) and b.labels.equals(a.labels)  # mortality_6m and chapters
    assert b.counts["rows_from_source_value"] == counts["diagnoses_without_source_concept"]
    assert b.counts["rows_of_a_source_mapped_to_another_concept"] > 0
    assert b.counts["source_values_not_icd"] == b.counts["source_values_ambiguous"] == 0
    assert b.counts["source_values_read_by_icd_code_lists"] > 0
    assert b.counts["patients_in_source"] == a.counts["patients_in_source"] == 150
    assert sum(b.labels["mortality_6m"].to_pylist()) > 0


def test_prepare_makes_the_same_dataset_from_both(demo, tmp_path):
    cohort, _, omop, _, _ = demo
    program = mini_program(tmp_path / "programs")
    splits = SplitOptions(rood_codes=2)
    (a,) = prepare(mimic=cohort, program=program, out=tmp_path / "ds", splits=splits)
    (b,) = prepare(omop=omop, program=program, out=tmp_path / "ds", splits=splits)
    assert a.manifest["counts"]["patients"]["kept"] > 20
    assert a.manifest["counts"]["patients"] == b.manifest["counts"]["patients"]
    for name in ("patients", "code_counts", "rood_codes", "unknown_codes"):
        assert pq.read_table(b.path / f"{name}.parquet").equals(pq.read_table(a.path / f"{name}.parquet")), (
            name
        )


def test_byte_identical_and_the_mimic_files_untouched(demo, tmp_path):
    cohort, vocabulary, omop, _, before = demo
    assert _digests(cohort) == before  # write_omop only reads the cohort
    write_omop(cohort, vocabulary, tmp_path / "again", seed=5)
    assert _digests(tmp_path / "again") == _digests(omop)
    write_omop(cohort, vocabulary, tmp_path / "other", seed=6)
    other = _digests(tmp_path / "other")
    assert other["condition_occurrence.csv"] != _digests(omop)["condition_occurrence.csv"]  # its own draws
    assert other["person.csv"] == _digests(omop)["person.csv"]
    assert read_omop(tmp_path / "other").events.equals(read_omop(omop).events)
