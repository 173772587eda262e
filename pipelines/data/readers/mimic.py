"""MIMIC-IV (v2.x ``hosp`` module) diagnoses -> the common long table and visit labels, with DuckDB.

The files read and their columns: ``docs/input-formats.md``, "MIMIC-IV".

Visits are admissions ordered by ``admittime`` (then ``hadm_id``); codes within a visit by ``seq_num``.
``visit_time`` is ``admittime``; its codes are known at ``dischtime`` (``known_time``: MIMIC-IV codes the
diagnoses at discharge; ``admittime`` where ``dischtime`` is empty). A visit's ``mortality_6m`` is death
(``deathtime`` of that admission, or ``dod`` at most 182 days after its ``dischtime``); ``prepare``
labels each patient with the last visit of its sequence. Patients of ``patients.csv.gz`` without any
diagnosis are dropped and counted.

Checks before anything is used: required ids and ``admittime`` present; exact duplicate rows dropped
(a finding); one row per ``subject_id`` in ``patients`` and per ``hadm_id`` in ``admissions``, else an
error naming the ids and lines. Findings (counted, warned with examples): diagnosis rows without their
admission, unknown ``icd_version``, empty codes, admissions of patients missing from ``patients``, and
a ``dod`` before the patient's last discharge (such a death still counts for ``mortality_6m``).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from duckdb import DuckDBPyConnection

from pipelines.errors import InputFileError, PipelineError

from .common import (
    EXAMPLES,
    MORTALITY_DAYS,
    Findings,
    ReadResult,
    connect,
    drop_duplicates,
    duckdb_path,
    find_table,
    input_record,
    load_tables,
    one,
    read_result,
    require,
    to_tables,
)

# table -> (file, full header of the release, columns read with their SQL types)
TABLES: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "patients": (
        "hosp/patients.csv.gz",
        ("subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"),
        {"subject_id": "BIGINT", "dod": "DATE"},
    ),
    "admissions": (
        "hosp/admissions.csv.gz",
        ("subject_id", "hadm_id", "admittime", "dischtime", "deathtime", "admission_type",
         "admit_provider_id", "admission_location", "discharge_location", "insurance", "language",
         "marital_status", "race", "edregtime", "edouttime", "hospital_expire_flag"),
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
TITLES = "hosp/d_icd_diagnoses.csv.gz"  # the ICD titles (optional), for export-meds's codes.parquet
# Doctor2Vec's demographics: (file under the root, SQL over {csv}: subject_id, sex 'F'/'M', age)
DEMOGRAPHICS = (
    "hosp/patients.csv.gz",
    "SELECT TRY_CAST(subject_id AS BIGINT) AS subject_id, "
    "min(CASE gender WHEN 'F' THEN 'F' WHEN 'M' THEN 'M' END) AS sex, "
    "min(TRY_CAST(anchor_age AS INTEGER)) AS age FROM {csv} GROUP BY 1",
)


def mimic_root(path: str | Path) -> Path:
    """Accept the release root (holding ``hosp/``) or the ``hosp`` folder itself."""
    p = Path(path)
    if not p.is_dir():
        raise InputFileError(p, "not a folder", hint="point --mimic at the MIMIC-IV root that holds hosp/")
    return p.parent if p.name == "hosp" and not (p / "hosp").is_dir() else p


def mimic_files(path: str | Path) -> list[Path]:
    """The tables :func:`read_mimic` reads (their hashes make a dataset's id)."""
    root = mimic_root(path)
    return [find_table(root, rel) for rel, _, _ in TABLES.values()]


def meds_export(path: str | Path, *, threads: int | None = None) -> tuple[pa.Table, dict, pa.Table]:
    """What ``export-meds`` writes beyond the reader's result: each dead subject's time of death
    (``subject_id``, ``time``: the first ``deathtime``, else ``dod``), the ICD titles of
    ``hosp/d_icd_diagnoses`` ((vocabulary, dotless code) -> long title; empty without the file) and the
    static events of ``patients`` (``subject_id``, ``time``, ``code``): ``GENDER//F`` or ``GENDER//M``
    without a time, and ``MEDS_BIRTH`` on 1 January of ``anchor_year - anchor_age`` (the year of birth
    MIMIC-IV's anchors give; day and month are not published)."""
    root = mimic_root(path)
    name, header, types = TABLES["patients"]
    extra = {"gender": "VARCHAR", "anchor_age": "INTEGER", "anchor_year": "INTEGER"}
    tables = {"patients": (name, header, {**types, **extra}), "admissions": TABLES["admissions"]}
    con, _ = load_tables(root, tables, threads)
    static = (
        con.sql(
            "SELECT subject_id, NULL::TIMESTAMP AS time, 'GENDER//' || gender AS code, 0 AS k FROM "
            "(SELECT DISTINCT subject_id, gender FROM patients) WHERE gender IN ('F', 'M') "
            "UNION ALL SELECT subject_id, make_timestamp(anchor_year - anchor_age, 1, 1, 0, 0, 0), "
            "'MEDS_BIRTH', 1 FROM (SELECT DISTINCT subject_id, anchor_year, anchor_age FROM patients) "
            "WHERE anchor_year IS NOT NULL AND anchor_age IS NOT NULL ORDER BY subject_id, k"
        )
        .to_arrow_table()
        .drop_columns(["k"])
    )
    deaths = con.sql(
        "SELECT * FROM (SELECT subject_id, coalesce(min(a.deathtime), any_value(p.dod)::TIMESTAMP) AS time "
        "FROM "
        "(SELECT DISTINCT subject_id, dod FROM patients) p FULL JOIN (SELECT subject_id, deathtime FROM "
        "admissions WHERE deathtime IS NOT NULL) a USING (subject_id) GROUP BY subject_id) "
        "WHERE time IS NOT NULL "
        "ORDER BY subject_id"
    ).to_arrow_table()
    try:
        titles = find_table(root, TITLES)
    except PipelineError:
        return deaths, {}, static
    sql = (
        "SELECT icd_version::VARCHAR, upper(replace(trim(icd_code), '.', '')), long_title FROM read_csv($1, "
        "header = true, all_varchar = true)"
    )
    rows = connect().execute(sql, [duckdb_path(titles)]).fetchall()
    titled = {("ICD9CM" if v == "9" else "ICD10CM", c): t for v, c, t in rows if v in ("9", "10")}
    return deaths, titled, static


def read_mimic(path: str | Path, *, threads: int | None = None) -> ReadResult:
    """Read MIMIC-IV ``hosp/{patients,admissions,diagnoses_icd}.csv.gz`` into a :class:`ReadResult`."""
    root = mimic_root(path)
    con, files = load_tables(root, TABLES, threads)
    f = Findings("mimic-iv")
    f.count("patients_in_source", one(con, "SELECT count(DISTINCT subject_id) FROM patients")[0])
    f.count("admissions_in_source", one(con, "SELECT count(*) FROM admissions")[0])
    f.count("diagnosis_rows", one(con, "SELECT count(*) FROM diagnoses_icd")[0])
    _check_tables(con, files, f)
    _diagnoses(con, files, f)
    _findings(con, files, f)
    _visits(con)
    events, visits = to_tables(
        con,
        "SELECT subject_id, visit_index, visit_time, known_time, "
        "(row_number() OVER (PARTITION BY subject_id, visit_index ORDER BY seq_num, code) - 1)::INT AS seq, "
        "vocabulary, code FROM ev ORDER BY subject_id, visit_index, seq",
        "SELECT subject_id, visit_index, mortality_6m, NULL AS given_split FROM vm "
        "ORDER BY subject_id, visit_index",
    )
    f.count("patients_with_codes", one(con, "SELECT count(*) FROM lastv")[0])
    f.count(
        "dropped_no_diagnoses",
        one(con, "SELECT count(DISTINCT subject_id) FROM patients ANTI JOIN lastv USING (subject_id)")[0],
    )
    f.count(
        "patients_not_in_patients_table",
        one(con, "SELECT count(*) FROM lastv ANTI JOIN patients USING (subject_id)")[0],
    )
    return read_result(
        "mimic-iv", root, [input_record(root, p) for p in files.values()], events, visits, f.as_dict()
    )


def _check_tables(con: DuckDBPyConnection, files: dict[str, Path], f: Findings) -> None:
    """Required values present; exact duplicates dropped (findings); conflicting rows of one key raise."""
    require(con, "patients", files["patients"], ("subject_id",))
    require(con, "admissions", files["admissions"], ("subject_id", "hadm_id", "admittime"))
    require(con, "diagnoses_icd", files["diagnoses_icd"], ("subject_id", "hadm_id"))
    drop_duplicates(con, "patients", files["patients"], ("subject_id",), f, "duplicate_patient_rows")
    drop_duplicates(con, "admissions", files["admissions"], ("hadm_id",), f, "duplicate_admission_rows")
    drop_duplicates(con, "diagnoses_icd", files["diagnoses_icd"], None, f, "duplicate_diagnosis_rows")


def _diagnoses(con: DuckDBPyConnection, files: dict[str, Path], f: Findings) -> None:
    """``dx``: each diagnosis row with its admission, vocabulary and dotless code; the rows left out,
    counted."""
    con.execute(
        "CREATE TEMP TABLE dx AS SELECT d.rowid + 2 AS line, d.subject_id, d.hadm_id, d.seq_num, "
        "d.icd_version, "
        "d.icd_code, a.admittime, a.dischtime, a.deathtime, "
        "CASE d.icd_version WHEN 9 THEN 'ICD9CM' WHEN 10 THEN 'ICD10CM' END AS vocabulary, "
        "upper(replace(trim(d.icd_code), '.', '')) AS code, a.hadm_id IS NULL AS orphan "
        "FROM diagnoses_icd d LEFT JOIN admissions a ON a.hadm_id = d.hadm_id AND a.subject_id = d.subject_id"
    )
    name = files["diagnoses_icd"].name
    where = {
        "rows_without_admission": "orphan",
        "rows_unknown_icd_version": "NOT orphan AND vocabulary IS NULL",
        "rows_empty_code": "NOT orphan AND vocabulary IS NOT NULL AND (code IS NULL OR code = '')",
    }
    example = {
        "rows_without_admission": "printf('%s line %d: subject_id %d, hadm_id %d', $n, line, "
        "subject_id, hadm_id)",
        "rows_unknown_icd_version": "printf('%s line %d: icd_version %s, icd_code %s', $n, line, "
        "coalesce(icd_version::VARCHAR, '(empty)'), coalesce(icd_code, '(empty)'))",
        "rows_empty_code": "printf('%s line %d: subject_id %d, hadm_id %d', $n, line, subject_id, hadm_id)",
    }
    what = {
        "rows_without_admission": "diagnosis rows whose (subject_id, hadm_id) is not in admissions dropped",
        "rows_unknown_icd_version": "diagnosis rows with an icd_version other than 9 or 10 dropped",
        "rows_empty_code": "diagnosis rows with an empty icd_code dropped",
    }
    for key, cond in where.items():
        n = one(con, f"SELECT count(*) FROM dx WHERE {cond}")[0]
        ex = (
            [
                r[0]
                for r in con.execute(
                    f"SELECT {example[key]} FROM dx WHERE {cond} ORDER BY line LIMIT {EXAMPLES}", {"n": name}
                ).fetchall()
            ]
            if n
            else []
        )
        f.finding(key, n, ex, what[key])


def _findings(con: DuckDBPyConnection, files: dict[str, Path], f: Findings) -> None:
    """Admissions of patients missing from ``patients``; a ``dod`` before the patient's last discharge."""
    adm, pat = files["admissions"].name, files["patients"].name
    cond = "FROM admissions a ANTI JOIN patients p USING (subject_id)"
    n = one(con, f"SELECT count(*) {cond}")[0]
    ex = [
        r[0]
        for r in con.execute(
            "SELECT printf('%s line %d: hadm_id %d, subject_id %d', $n, a.rowid + 2, a.hadm_id, "
            f"a.subject_id) {cond} "
            f"ORDER BY a.rowid LIMIT {EXAMPLES}",
            {"n": adm},
        ).fetchall()
    ]
    f.finding("admissions_of_unknown_patients", n, ex, f"admissions of patients not in {pat} (kept; no dod)")
    cond = (
        "FROM patients p JOIN (SELECT subject_id, arg_max(hadm_id, dischtime) AS hadm_id, "
        "max(dischtime) AS disch "
        "FROM admissions GROUP BY subject_id) a USING (subject_id) WHERE p.dod < a.disch::DATE"
    )
    n = one(con, f"SELECT count(*) {cond}")[0]
    ex = [
        r[0]
        for r in con.execute(
            f"SELECT printf('%s line %d: subject_id %d, dod %s before the discharge %s of hadm_id %d', $n, "
            f"p.rowid + 2, p.subject_id, p.dod, a.disch, a.hadm_id) {cond} ORDER BY p.rowid LIMIT {EXAMPLES}",
            {"n": pat},
        ).fetchall()
    ]
    f.finding(
        "dod_before_last_discharge",
        n,
        ex,
        "patients whose dod is before their last discharge (still counted as deaths)",
    )


def _visits(con: DuckDBPyConnection) -> None:
    """``ev`` (the kept codes with their admission's rank), ``vm`` (each visit's mortality) and ``lastv``."""
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT subject_id, "
        "(dense_rank() OVER (PARTITION BY subject_id ORDER BY admittime, hadm_id) - 1)::INT AS visit_index, "
        "admittime AS visit_time, coalesce(dischtime, admittime) AS known_time, seq_num, hadm_id, dischtime, "
        "deathtime, vocabulary, code FROM dx "
        "WHERE NOT orphan AND vocabulary IS NOT NULL AND code IS NOT NULL AND code <> ''"
    )
    con.execute(
        "CREATE TEMP TABLE vm AS SELECT e.subject_id, e.visit_index, "
        f"coalesce(any_value(e.deathtime) IS NOT NULL OR date_diff('day', any_value(e.dischtime)::DATE, "
        f"any_value(p.dod)) <= {MORTALITY_DAYS}, false) AS mortality_6m FROM ev e "
        "LEFT JOIN patients p USING (subject_id) GROUP BY e.subject_id, e.visit_index"
    )
    con.execute(
        "CREATE TEMP TABLE lastv AS SELECT subject_id, max(visit_index) AS visit_index FROM ev GROUP BY ALL"
    )
