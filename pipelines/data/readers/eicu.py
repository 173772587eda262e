"""eICU-CRD v2.0 (``patient``, ``diagnosis``) -> the common long table and labels, with DuckDB.

The files read and their columns: ``docs/input-formats.md``, "eICU-CRD".

A patient is a ``uniquepid`` (``subject_id`` is its dense rank, so ids are stable for a given file).
A visit is a hospital stay (``patienthealthsystemstayid``), visits ordered by ``hospitaldischargeyear``
then stay id; within a visit, unit stays by ``unitvisitnumber`` (then ``hospitaladmitoffset``, most
negative = admitted to hospital longest before), diagnoses by priority (Primary, Major, Other),
``diagnosisoffset`` and ``diagnosisid``. ``icd9code`` is split on commas; each stripped part is ICD-9
(digits, V or E codes, dot optional) or ICD-10 (letter, digit, alphanumeric); empty parts are skipped,
unparseable ones counted. A code repeated within a visit is kept once. eICU has no absolute times
(``visit_time`` is null) and no follow-up after discharge: ``mortality_6m`` is true when any stay of the
patient ends with ``hospitaldischargestatus`` = ``Expired``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from duckdb import DuckDBPyConnection

from pipelines.errors import InputFileError

from .common import (
    ICD9_RE,
    ICD10_RE,
    ReadResult,
    events_and_labels,
    input_record,
    load_tables,
    one,
    read_result,
)

TABLES: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "patient": (
        "patient.csv.gz",
        ("patientunitstayid", "patienthealthsystemstayid", "gender", "age", "ethnicity", "hospitalid", "wardid",
         "apacheadmissiondx", "admissionheight", "hospitaladmittime24", "hospitaladmitoffset",
         "hospitaladmitsource", "hospitaldischargeyear", "hospitaldischargetime24", "hospitaldischargeoffset",
         "hospitaldischargelocation", "hospitaldischargestatus", "unittype", "unitadmittime24", "unitadmitsource",
         "unitvisitnumber", "unitstaytype", "admissionweight", "dischargeweight", "unitdischargetime24",
         "unitdischargeoffset", "unitdischargelocation", "unitdischargestatus", "uniquepid"),
        {"patientunitstayid": "BIGINT", "patienthealthsystemstayid": "BIGINT", "hospitaladmitoffset": "BIGINT",
         "hospitaldischargeyear": "INTEGER", "hospitaldischargestatus": "VARCHAR", "unitvisitnumber": "INTEGER",
         "uniquepid": "VARCHAR"},
    ),
    "diagnosis": (
        "diagnosis.csv.gz",
        ("diagnosisid", "patientunitstayid", "activeupondischarge", "diagnosisoffset", "diagnosisstring",
         "icd9code", "diagnosispriority"),
        {"diagnosisid": "BIGINT", "patientunitstayid": "BIGINT", "diagnosisoffset": "BIGINT",
         "icd9code": "VARCHAR", "diagnosispriority": "VARCHAR"},
    ),
}  # fmt: skip
PRIORITY = "CASE diagnosispriority WHEN 'Primary' THEN 0 WHEN 'Major' THEN 1 ELSE 2 END"


def eicu_root(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise InputFileError(p, "not a folder", hint="point --eicu at the folder holding patient.csv.gz")
    if not any((p / n).is_file() for n in ("patient.csv.gz", "patient.csv")) and (p / "eicu").is_dir():
        return p / "eicu"
    return p


def read_eicu(path: str | Path, *, threads: int | None = None) -> ReadResult:
    """Read eICU ``patient.csv.gz`` and ``diagnosis.csv.gz`` into a :class:`ReadResult`."""
    root = eicu_root(path)
    con, files = load_tables(root, TABLES, threads)
    _split_codes(con)
    bad = one(con, "SELECT count(*), list(DISTINCT part)[1:10] FROM dx WHERE vocabulary IS NULL")
    _visits_and_mortality(con)
    events, labels = events_and_labels(
        con, "SELECT subject_id, visit_index, visit_time, seq, vocabulary, code FROM ev ORDER BY ALL"
    )
    counts = _counts(con, bad, events, labels)
    return read_result("eicu", root, [input_record(root, f) for f in files.values()], events, labels, counts)


def _split_codes(con: DuckDBPyConnection) -> None:
    """``stays`` (a unit stay with its patient and hospital stay), ``parts`` (one row per comma-separated part
    of ``icd9code``) and ``dx`` (each non-empty part with its vocabulary, null when unparseable)."""
    con.execute(
        "CREATE TEMP TABLE stays AS SELECT patientunitstayid, patienthealthsystemstayid AS hss, "
        "hospitaldischargeyear AS year, unitvisitnumber, hospitaladmitoffset, hospitaldischargestatus AS status, "
        "dense_rank() OVER (ORDER BY uniquepid)::BIGINT AS subject_id FROM patient WHERE uniquepid IS NOT NULL"
    )
    con.execute(
        "CREATE TEMP TABLE parts AS SELECT s.subject_id, s.hss, s.year, s.unitvisitnumber, s.hospitaladmitoffset, "
        f"{PRIORITY} AS prio, d.diagnosisoffset, d.diagnosisid, "
        "upper(trim(unnest(string_split(d.icd9code, ',')))) AS part, "
        "generate_subscripts(string_split(d.icd9code, ','), 1) AS k "
        "FROM diagnosis d JOIN stays s USING (patientunitstayid) WHERE d.icd9code IS NOT NULL"
    )
    con.execute(
        "CREATE TEMP TABLE dx AS SELECT *, CASE WHEN regexp_full_match(part, '"
        + ICD9_RE
        + "') THEN 'ICD9CM' "
        "WHEN regexp_full_match(part, '" + ICD10_RE + "') THEN 'ICD10CM' END AS vocabulary, "
        "replace(part, '.', '') AS code FROM parts WHERE part <> ''"
    )


def _visits_and_mortality(con: DuckDBPyConnection) -> None:
    """``ev`` (codes once per hospital stay, in order), ``lastv`` (each patient's last stay) and ``mort``."""
    con.execute(
        "CREATE TEMP TABLE ev0 AS SELECT * FROM (SELECT subject_id, hss, year, vocabulary, code, row_number() "
        "OVER (PARTITION BY subject_id, hss ORDER BY unitvisitnumber, hospitaladmitoffset DESC, prio, "
        "diagnosisoffset, diagnosisid, k) AS pos FROM dx WHERE vocabulary IS NOT NULL) "
        "QUALIFY row_number() OVER (PARTITION BY subject_id, hss, vocabulary, code ORDER BY pos) = 1"
    )
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT subject_id, (dense_rank() OVER (PARTITION BY subject_id ORDER BY year, hss) "
        "- 1)::INT AS visit_index, NULL::TIMESTAMP AS visit_time, "
        "(row_number() OVER (PARTITION BY subject_id, hss ORDER BY pos) - 1)::INT AS seq, vocabulary, code FROM ev0"
    )
    con.execute(
        "CREATE TEMP TABLE lastv AS SELECT subject_id, max(visit_index) AS visit_index FROM ev GROUP BY ALL"
    )
    con.execute(
        "CREATE TEMP TABLE mort AS SELECT subject_id, coalesce(bool_or(status = 'Expired'), false) AS mortality_6m, "
        "NULL AS given_split FROM stays SEMI JOIN lastv USING (subject_id) GROUP BY ALL"
    )


def _counts(con: DuckDBPyConnection, bad: tuple, events: pa.Table, labels: pa.Table) -> dict:
    counts = {
        "patients_in_source": one(con, "SELECT count(DISTINCT subject_id) FROM stays")[0],
        "unit_stays_in_source": one(con, "SELECT count(*) FROM stays")[0],
        "diagnosis_rows": one(con, "SELECT count(*) FROM diagnosis")[0],
        "diagnosis_rows_without_stay": one(con, "SELECT count(*) FROM diagnosis ANTI JOIN stays USING (patientunitstayid)")[0],
        "diagnosis_rows_without_code": one(con, "SELECT count(*) FROM diagnosis WHERE icd9code IS NULL OR trim(icd9code) = ''")[0],
        "empty_code_parts": one(con, "SELECT count(*) FROM parts WHERE part = ''")[0],
        "unparseable_code_parts": bad[0],
        "unparseable_examples": bad[1] or [],
        "duplicate_codes_in_visit": one(con, "SELECT count(*) FROM dx WHERE vocabulary IS NOT NULL")[0] - events.num_rows,
        "patients_with_codes": labels.num_rows,
    }  # fmt: skip
    counts["dropped_no_diagnoses"] = counts["patients_in_source"] - labels.num_rows
    return counts
