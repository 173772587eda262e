"""eICU-CRD v2.0 (``patient``, ``diagnosis``) -> the common long table and visit labels, with DuckDB.

The files read and their columns: ``docs/input-formats.md``, "eICU-CRD".

A patient is a ``uniquepid`` (``subject_id`` is its dense rank, so ids are stable for a given file).
A visit is a hospital stay (``patienthealthsystemstayid``), visits ordered by ``hospitaldischargeyear``
then stay id; within a visit, unit stays by ``unitvisitnumber`` (then ``hospitaladmitoffset``, most
negative = admitted to hospital longest before), diagnoses by priority (Primary, Major, Other),
``diagnosisoffset`` and ``diagnosisid``. ``icd9code`` is split on commas; each stripped part is ICD-9
(digits, V or E codes, dot optional) or ICD-10 (letter, digit, alphanumeric); empty parts are skipped,
unparseable ones counted. A code repeated within a visit is kept once. eICU has no absolute times
(``visit_time`` is null) and no follow-up after discharge: ``mortality_6m`` is true when any stay of the
patient ends with ``hospitaldischargestatus`` = ``Expired`` (the same for each of its visits).

Checks: ``patientunitstayid`` present in ``patient``; exact duplicate rows dropped (a finding); one row
per ``patientunitstayid`` in ``patient`` and per ``diagnosisid`` in ``diagnosis``, else an error naming
the ids and lines. Findings: diagnosis rows whose unit stay is not in ``patient``, unit stays without
``uniquepid``, unparseable code parts.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from duckdb import DuckDBPyConnection

from pipelines.errors import InputFileError

from .common import (
    EXAMPLES,
    ICD9_RE,
    ICD10_RE,
    Findings,
    ReadResult,
    drop_duplicates,
    find_table,
    input_record,
    load_tables,
    one,
    read_result,
    require,
    to_tables,
)

TABLES: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "patient": (
        "patient.csv.gz",
        (
            "patientunitstayid",
            "patienthealthsystemstayid",
            "gender",
            "age",
            "ethnicity",
            "hospitalid",
            "wardid",
            "apacheadmissiondx",
            "admissionheight",
            "hospitaladmittime24",
            "hospitaladmitoffset",
            "hospitaladmitsource",
            "hospitaldischargeyear",
            "hospitaldischargetime24",
            "hospitaldischargeoffset",
            "hospitaldischargelocation",
            "hospitaldischargestatus",
            "unittype",
            "unitadmittime24",
            "unitadmitsource",
            "unitvisitnumber",
            "unitstaytype",
            "admissionweight",
            "dischargeweight",
            "unitdischargetime24",
            "unitdischargeoffset",
            "unitdischargelocation",
            "unitdischargestatus",
            "uniquepid",
        ),
        {
            "patientunitstayid": "BIGINT",
            "patienthealthsystemstayid": "BIGINT",
            "hospitaladmitoffset": "BIGINT",
            "hospitaldischargeyear": "INTEGER",
            "hospitaldischargestatus": "VARCHAR",
            "unitvisitnumber": "INTEGER",
            "uniquepid": "VARCHAR",
        },
    ),
    "diagnosis": (
        "diagnosis.csv.gz",
        (
            "diagnosisid",
            "patientunitstayid",
            "activeupondischarge",
            "diagnosisoffset",
            "diagnosisstring",
            "icd9code",
            "diagnosispriority",
        ),
        {
            "diagnosisid": "BIGINT",
            "patientunitstayid": "BIGINT",
            "diagnosisoffset": "BIGINT",
            "icd9code": "VARCHAR",
            "diagnosispriority": "VARCHAR",
        },
    ),
}
PRIORITY = "CASE diagnosispriority WHEN 'Primary' THEN 0 WHEN 'Major' THEN 1 ELSE 2 END"
# Doctor2Vec's demographics: (file under the root, SQL over {csv}: subject_id, sex 'F'/'M', age); subject_id
# is the dense rank of uniquepid, as read_eicu numbers patients
DEMOGRAPHICS = (
    "patient.csv.gz",
    "SELECT dense_rank() OVER (ORDER BY uniquepid)::BIGINT AS subject_id, sex, age FROM (SELECT uniquepid, "
    "min(CASE gender WHEN 'Female' THEN 'F' WHEN 'Male' THEN 'M' END) AS sex, "
    "min(CASE WHEN trim(age) = '> 89' THEN 90 ELSE TRY_CAST(age AS INTEGER) END) AS age "
    "FROM {csv} WHERE uniquepid IS NOT NULL GROUP BY uniquepid)",
)


def eicu_root(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise InputFileError(p, "not a folder", hint="point --eicu at the folder holding patient.csv.gz")
    if not any((p / n).is_file() for n in ("patient.csv.gz", "patient.csv")) and (p / "eicu").is_dir():
        return p / "eicu"
    return p


def eicu_files(path: str | Path) -> list[Path]:
    """The tables :func:`read_eicu` reads (their hashes make a dataset's id)."""
    root = eicu_root(path)
    return [find_table(root, rel) for rel, _, _ in TABLES.values()]


def read_eicu(path: str | Path, *, threads: int | None = None) -> ReadResult:
    """Read eICU ``patient.csv.gz`` and ``diagnosis.csv.gz`` into a :class:`ReadResult`."""
    root = eicu_root(path)
    con, files = load_tables(root, TABLES, threads)
    f = Findings("eicu")
    require(con, "patient", files["patient"], ("patientunitstayid",))
    drop_duplicates(con, "patient", files["patient"], ("patientunitstayid",), f, "duplicate_patient_rows")
    drop_duplicates(con, "diagnosis", files["diagnosis"], ("diagnosisid",), f, "duplicate_diagnosis_rows")
    _split_codes(con)
    _visits_and_mortality(con)
    events, visits = to_tables(
        con,
        "SELECT subject_id, visit_index, visit_time, visit_time AS known_time, seq, vocabulary, code FROM ev "
        "ORDER BY ALL",
        "SELECT subject_id, visit_index, mortality_6m, NULL AS given_split FROM vm "
        "ORDER BY subject_id, visit_index",
    )
    _counts(con, files, f, events)
    return read_result(
        "eicu", root, [input_record(root, p) for p in files.values()], events, visits, f.as_dict()
    )


def _split_codes(con: DuckDBPyConnection) -> None:
    """``stays`` (a unit stay with its patient and hospital stay), ``parts`` (one row per
    comma-separated part of ``icd9code``) and ``dx`` (each non-empty part with its vocabulary, null
    when unparseable)."""
    con.execute(
        "CREATE TEMP TABLE stays AS SELECT patientunitstayid, patienthealthsystemstayid AS hss, "
        "hospitaldischargeyear AS year, unitvisitnumber, hospitaladmitoffset, "
        "hospitaldischargestatus AS status, "
        "dense_rank() OVER (ORDER BY uniquepid)::BIGINT AS subject_id FROM patient "
        "WHERE uniquepid IS NOT NULL"
    )
    con.execute(
        "CREATE TEMP TABLE parts AS SELECT s.subject_id, s.hss, s.year, s.unitvisitnumber, "
        "s.hospitaladmitoffset, "
        f"{PRIORITY} AS prio, d.diagnosisoffset, d.diagnosisid, d.rowid + 2 AS line, "
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
    """``ev`` (codes once per hospital stay, in order), ``lastv`` (each patient's last stay) and ``vm``
    (the mortality of each visit: any stay of the patient ended ``Expired``)."""
    con.execute(
        "CREATE TEMP TABLE ev0 AS SELECT * FROM (SELECT subject_id, hss, year, vocabulary, code, "
        "row_number() "
        "OVER (PARTITION BY subject_id, hss ORDER BY unitvisitnumber, hospitaladmitoffset DESC, prio, "
        "diagnosisoffset, diagnosisid, k) AS pos FROM dx WHERE vocabulary IS NOT NULL) "
        "QUALIFY row_number() OVER (PARTITION BY subject_id, hss, vocabulary, code ORDER BY pos) = 1"
    )
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT subject_id, "
        "(dense_rank() OVER (PARTITION BY subject_id ORDER BY year, hss) "
        "- 1)::INT AS visit_index, NULL::TIMESTAMP AS visit_time, "
        "(row_number() OVER (PARTITION BY subject_id, hss ORDER BY pos) - 1)::INT AS seq, vocabulary, code "
        "FROM ev0"
    )
    con.execute(
        "CREATE TEMP TABLE lastv AS SELECT subject_id, max(visit_index) AS visit_index FROM ev GROUP BY ALL"
    )
    con.execute(
        "CREATE TEMP TABLE vm AS SELECT v.subject_id, v.visit_index, m.mortality_6m FROM "
        "(SELECT DISTINCT subject_id, visit_index FROM ev) v JOIN (SELECT subject_id, "
        "coalesce(bool_or(status = 'Expired'), false) AS mortality_6m FROM stays GROUP BY ALL) m "
        "USING (subject_id)"
    )


def _counts(con: DuckDBPyConnection, files: dict[str, Path], f: Findings, events: pa.Table) -> None:
    dname, pname = files["diagnosis"].name, files["patient"].name
    f.count("patients_in_source", one(con, "SELECT count(DISTINCT subject_id) FROM stays")[0])
    f.count("unit_stays_in_source", one(con, "SELECT count(*) FROM stays")[0])
    f.count("diagnosis_rows", one(con, "SELECT count(*) FROM diagnosis")[0])
    cond = "FROM diagnosis d ANTI JOIN patient p USING (patientunitstayid)"
    f.finding(
        "diagnosis_rows_without_stay",
        one(con, f"SELECT count(*) {cond}")[0],
        [
            r[0]
            for r in con.execute(
                f"SELECT printf('%s line %d: patientunitstayid %s', $n, d.rowid + 2, "
                f"coalesce(d.patientunitstayid::VARCHAR, '(empty)')) {cond} "
                f"ORDER BY d.rowid LIMIT {EXAMPLES}",
                {"n": dname},
            ).fetchall()
        ],
        f"diagnosis rows whose patientunitstayid is not in {pname} dropped",
    )
    cond = "FROM patient WHERE uniquepid IS NULL"
    f.finding(
        "unit_stays_without_uniquepid",
        one(con, f"SELECT count(*) {cond}")[0],
        [
            r[0]
            for r in con.execute(
                f"SELECT printf('%s line %d: patientunitstayid %d', $n, rowid + 2, patientunitstayid) {cond} "
                f"ORDER BY rowid LIMIT {EXAMPLES}",
                {"n": pname},
            ).fetchall()
        ],
        "unit stays without uniquepid dropped (with their diagnoses)",
    )
    f.count(
        "diagnosis_rows_without_code",
        one(con, "SELECT count(*) FROM diagnosis WHERE icd9code IS NULL OR trim(icd9code) = ''")[0],
    )
    f.count("empty_code_parts", one(con, "SELECT count(*) FROM parts WHERE part = ''")[0])
    bad = one(
        con, "SELECT count(*), list(DISTINCT part ORDER BY part)[1:10] FROM dx WHERE vocabulary IS NULL"
    )
    f.finding(
        "unparseable_code_parts",
        bad[0],
        [
            r[0]
            for r in con.execute(
                f"SELECT printf('%s line %d: %s', $n, line, part) FROM dx WHERE vocabulary IS NULL "
                f"ORDER BY line, k LIMIT {EXAMPLES}",
                {"n": dname},
            ).fetchall()
        ],
        "icd9code parts that are neither ICD-9 nor ICD-10 codes dropped",
    )
    f.counts["unparseable_examples"] = bad[1] or []  # the distinct parts (first 10)
    f.count(
        "duplicate_codes_in_visit",
        one(con, "SELECT count(*) FROM dx WHERE vocabulary IS NOT NULL")[0] - events.num_rows,
    )
    f.count("patients_with_codes", one(con, "SELECT count(*) FROM lastv")[0])
    f.count("dropped_no_diagnoses", f.counts["patients_in_source"] - f.counts["patients_with_codes"])
