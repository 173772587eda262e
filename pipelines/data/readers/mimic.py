"""MIMIC-IV (v2.x ``hosp`` module) diagnoses -> the common long table and labels, with DuckDB.

The files read and their columns: ``docs/input-formats.md``, "MIMIC-IV".

Visits are admissions ordered by ``admittime`` (then ``hadm_id``); codes within a visit by ``seq_num``.
``visit_time`` is ``admittime``. The label ``mortality_6m`` is death (``dod``, or ``deathtime`` of the
last admission) within 182 days after the discharge of the last admission that has codes; ``chapters``
are the ICD-10-CM chapters of that admission's codes. Patients of ``patients.csv.gz`` without any
diagnosis are dropped and counted.
"""

from __future__ import annotations

from pathlib import Path

from duckdb import DuckDBPyConnection

from pipelines.errors import InputFileError

from .common import MORTALITY_DAYS, ReadResult, events_and_labels, input_record, load_tables, one, read_result

# table -> (file, full header of the release, columns read with their SQL types)
TABLES: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "patients": (
        "hosp/patients.csv.gz",
        ("subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"),
        {"subject_id": "BIGINT", "dod": "DATE"},
    ),
    "admissions": (
        "hosp/admissions.csv.gz",
        ("subject_id", "hadm_id", "admittime", "dischtime", "deathtime", "admission_type", "admit_provider_id",
         "admission_location", "discharge_location", "insurance", "language", "marital_status", "race",
         "edregtime", "edouttime", "hospital_expire_flag"),
        {"subject_id": "BIGINT", "hadm_id": "BIGINT", "admittime": "TIMESTAMP", "dischtime": "TIMESTAMP",
         "deathtime": "TIMESTAMP"},
    ),
    "diagnoses_icd": (
        "hosp/diagnoses_icd.csv.gz",
        ("subject_id", "hadm_id", "seq_num", "icd_code", "icd_version"),
        {"subject_id": "BIGINT", "hadm_id": "BIGINT", "seq_num": "INTEGER", "icd_code": "VARCHAR",
         "icd_version": "INTEGER"},
    ),
}  # fmt: skip


def mimic_root(path: str | Path) -> Path:
    """Accept the release root (holding ``hosp/``) or the ``hosp`` folder itself."""
    p = Path(path)
    if not p.is_dir():
        raise InputFileError(p, "not a folder", hint="point --mimic at the MIMIC-IV root that holds hosp/")
    return p.parent if p.name == "hosp" and not (p / "hosp").is_dir() else p


def read_mimic(path: str | Path, *, threads: int | None = None) -> ReadResult:
    """Read MIMIC-IV ``hosp/{patients,admissions,diagnoses_icd}.csv.gz`` into a :class:`ReadResult`."""
    root = mimic_root(path)
    con, files = load_tables(root, TABLES, threads)
    counts = {
        "patients_in_source": one(con, "SELECT count(DISTINCT subject_id) FROM patients")[0],
        "admissions_in_source": one(con, "SELECT count(*) FROM admissions")[0],
        "diagnosis_rows": one(con, "SELECT count(*) FROM diagnoses_icd")[0],
    }
    counts.update(_diagnoses(con))
    _visits_and_mortality(con)
    events, labels = events_and_labels(
        con,
        "SELECT subject_id, visit_index, visit_time, "
        "(row_number() OVER (PARTITION BY subject_id, visit_index ORDER BY seq_num, code) - 1)::INT AS seq, "
        "vocabulary, code FROM ev ORDER BY subject_id, visit_index, seq",
    )
    counts["patients_with_codes"] = labels.num_rows
    counts["dropped_no_diagnoses"] = one(
        con, "SELECT count(DISTINCT subject_id) FROM patients ANTI JOIN lastv USING (subject_id)"
    )[0]
    counts["patients_not_in_patients_table"] = one(
        con, "SELECT count(*) FROM lastv ANTI JOIN patients USING (subject_id)"
    )[0]
    return read_result(
        "mimic-iv", root, [input_record(root, f) for f in files.values()], events, labels, counts
    )


def _diagnoses(con: DuckDBPyConnection) -> dict[str, int]:
    """``dx``: each diagnosis row with its admission, vocabulary and dotless code; the rows left out, counted."""
    con.execute(
        "CREATE TEMP TABLE dx AS SELECT d.subject_id, d.hadm_id, d.seq_num, a.admittime, a.dischtime, "
        "a.deathtime, CASE d.icd_version WHEN 9 THEN 'ICD9CM' WHEN 10 THEN 'ICD10CM' END AS vocabulary, "
        "upper(replace(trim(d.icd_code), '.', '')) AS code, a.hadm_id IS NULL AS orphan "
        "FROM diagnoses_icd d LEFT JOIN admissions a ON a.hadm_id = d.hadm_id AND a.subject_id = d.subject_id"
    )
    bad = one(
        con,
        "SELECT count(*) FILTER (WHERE orphan), count(*) FILTER (WHERE NOT orphan AND vocabulary IS NULL), "
        "count(*) FILTER (WHERE NOT orphan AND vocabulary IS NOT NULL AND (code IS NULL OR code = '')) FROM dx",
    )
    return {"rows_without_admission": bad[0], "rows_unknown_icd_version": bad[1], "rows_empty_code": bad[2]}


def _visits_and_mortality(con: DuckDBPyConnection) -> None:
    """``ev`` (the kept codes with their admission's rank), ``lastv`` (each patient's last admission), ``mort``."""
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT subject_id, "
        "(dense_rank() OVER (PARTITION BY subject_id ORDER BY admittime, hadm_id) - 1)::INT AS visit_index, "
        "admittime AS visit_time, seq_num, hadm_id, dischtime, deathtime, vocabulary, code FROM dx "
        "WHERE NOT orphan AND vocabulary IS NOT NULL AND code IS NOT NULL AND code <> ''"
    )
    con.execute(
        "CREATE TEMP TABLE lastv AS SELECT subject_id, max(visit_index) AS visit_index FROM ev GROUP BY ALL"
    )
    con.execute(
        "CREATE TEMP TABLE mort AS SELECT l.subject_id, "
        f"coalesce(any_value(e.deathtime) IS NOT NULL OR date_diff('day', any_value(e.dischtime)::DATE, "
        f"any_value(p.dod)) <= {MORTALITY_DAYS}, false) AS mortality_6m, NULL AS given_split FROM lastv l "
        "JOIN ev e USING (subject_id, visit_index) LEFT JOIN patients p USING (subject_id) GROUP BY l.subject_id"
    )
