"""The demo cohort as an OMOP CDM v5.4: :func:`write_omop` turns the MIMIC-IV ``hosp/`` tables that
:func:`~pipelines.demo.cohort_write.write_mimic` wrote (the same patients, admissions and diagnoses,
read back with DuckDB, so the content is the MIMIC-IV cohort's by construction) into the CDM tables
``person``, ``visit_occurrence``, ``condition_occurrence``, ``death`` and ``observation_period`` (CSV,
comma-separated, a header, every v5.4 DDL column in DDL order, as ``COPY ... TO`` writes them), plus
``concept.csv``, the Athena vocabulary's ``CONCEPT.csv`` in the CDM's layout.

The ICD concepts come from an Athena vocabulary folder (``CONCEPT.csv`` and ``CONCEPT_RELATIONSHIP.csv``,
TAB-separated, unquoted; ``docs/input-formats.md``, "OMOP vocabulary"): a diagnosis's
``condition_source_concept_id`` is the ``ICD10CM`` / ``ICD9CM`` concept of its code (0 where the
vocabulary has none), its ``condition_concept_id`` each standard ``SNOMED`` concept its source concept
``Maps to`` (a valid row): one condition row per target, as OMOP's conventions write a code mapped to
several concepts, or one row with 0 where there is none. The OMOP reader with ``--omop-codes source``
reads the rows of one diagnosis as one code again.

Ids: ``person_id`` is ``subject_id``, ``visit_occurrence_id`` is ``hadm_id`` (so visits sort as MIMIC-IV's
admissions do); ``condition_occurrence_id`` increases in MIMIC-IV's order (``subject_id``, ``hadm_id``,
``seq_num``, code, target) with random gaps, and ``observation_period_id`` is random, both drawn from
``default_rng([seed, OMOP_STREAM])``: no draw of the cohort's own stream, and nothing of the MIMIC-IV or
eICU files, changes. Times: a visit spans ``admittime`` to ``dischtime``; a condition starts at its
admission's ``admittime`` and ends at its ``dischtime``; ``seq_num`` 1 is the primary diagnosis (32902),
the others secondary (32908), ``seq_num`` kept as ``condition_status_source_value``. A condition's
``condition_source_value`` is its code dotted, as the vocabulary writes it (``E11.9``; MIMIC-IV's own
is dotless), which keeps an ICD-10-CM ``E11.9`` apart from an ICD-9-CM E-code where a reader falls back
on the value (a code the vocabulary lacks). A death is
``patients.dod`` (else the date of a ``deathtime``), with ``deathtime`` as ``death_datetime`` where the
patient died in hospital. A person's observation period runs from the first admission's day to the last
discharge's day (or the day of death, when later).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from ontology_compiler.api import (
    ICD9CM,
    ICD10CM,
    OMOP_CONCEPT_COLUMNS,
    OMOP_RELATIONSHIP_COLUMNS,
    columns_literal,
    dotted_code,
    quote_literal,
)
from pipelines.data.readers.common import duckdb_path, read_header
from pipelines.data.readers.omop_layout import (
    CDM_COLUMNS,
    EHR_TYPE,
    ER_INPATIENT_VISIT,
    FEMALE,
    INPATIENT_VISIT,
    MALE,
    PRIMARY_DIAGNOSIS,
    SECONDARY_DIAGNOSIS,
)
from pipelines.errors import InputFileError, MissingTableError

OMOP_STREAM = 221  # default_rng([seed, OMOP_STREAM]): the OMOP tables' own draws
TABLES = ("person", "visit_occurrence", "condition_occurrence", "death", "observation_period", "concept")
ED_ADMISSIONS = ("EW EMER.", "DIRECT EMER.", "EU OBSERVATION")  # admission types through the ED
RACE = (("WHITE%", 8527), ("BLACK%", 8516), ("ASIAN%", 8515))  # race_concept_id by race prefix
HISPANIC, NOT_HISPANIC = 38003563, 38003564  # ethnicity_concept_id


def write_omop(
    mimic: str | Path, vocabulary: str | Path, out: str | Path, *, seed: int = 0, threads: int | None = None
) -> dict[str, int]:
    """Write the MIMIC-IV cohort under ``mimic`` (the folder holding ``hosp/``, or ``hosp/`` itself) as OMOP
    CDM v5.4 CSV tables into ``out`` (``person.csv``, ``visit_occurrence.csv``, ``condition_occurrence.csv``,
    ``death.csv``, ``observation_period.csv``, ``concept.csv``), with the concepts of the Athena folder
    ``vocabulary``. Returns the rows written per table and what the vocabulary lacked
    (``diagnoses_without_source_concept``, ``diagnoses_without_standard_concept``,
    ``diagnoses_with_several_standard_concepts``). The same arguments give byte-identical files; files of
    these names already in ``out`` are replaced (the caller owns the folder, as for ``generate_cohort``)."""
    hosp = Path(mimic)
    hosp = hosp if (hosp / "diagnoses_icd.csv.gz").is_file() else hosp / "hosp"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = true")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    _read_mimic(con, hosp)
    _read_vocabulary(con, Path(vocabulary))
    rng = np.random.default_rng([seed, OMOP_STREAM])
    counts = _conditions(con, rng)
    _persons(con, rng)
    for table in TABLES:
        _copy(con, f"omop_{table}", out / f"{table}.csv", CDM_COLUMNS[table])
        counts[table] = int(con.execute(f"SELECT count(*) FROM omop_{table}").fetchall()[0][0])
    return counts


def _read_mimic(con: duckdb.DuckDBPyConnection, hosp: Path) -> None:
    """``patients``, ``admissions`` and ``diagnoses`` from the cohort's ``hosp/`` tables."""
    for name in ("patients", "admissions", "diagnoses_icd"):
        path = hosp / f"{name}.csv.gz"
        if not path.is_file():
            raise MissingTableError(
                path, "table not found", hint="write_omop reads the cohort write_mimic wrote"
            )
        con.execute(
            f"CREATE TEMP TABLE {name} AS SELECT * FROM read_csv($1, header = true, "
            "types = {'icd_code': 'VARCHAR'})"
            if name == "diagnoses_icd"
            else f"CREATE TEMP TABLE {name} AS SELECT * FROM read_csv($1, header = true)",
            [duckdb_path(path)],
        )


def _athena(con: duckdb.DuckDBPyConnection, path: Path, table: str, header: tuple[str, ...]) -> None:
    """``table`` from an Athena file: TAB-separated, unquoted, exactly ``header``, every column text."""
    if not path.is_file():
        raise MissingTableError(path, "not found", hint="expected an Athena vocabulary folder")
    first = read_header(path)
    found = first[0].split("\t") if len(first) == 1 else first
    if len(first) != 1 or [h.strip().lower() for h in found] != list(header):
        raise InputFileError(
            path, "not an Athena header", line=1, expected="\t".join(header), found=repr(found)
        )
    cols = columns_literal(dict.fromkeys(header, "VARCHAR"))
    con.execute(
        f"CREATE TEMP TABLE {table} AS SELECT * FROM read_csv($1, columns = {cols}, header = true, "
        "delim = '\t', quote = '', escape = '', nullstr = '')",
        [duckdb_path(path)],
    )


def _read_vocabulary(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    """``athena_concept``, ``icd_concept`` ((vocabulary, dotless code) -> ICD concept id) and ``maps``
    (ICD concept id -> its valid ``Maps to`` standard SNOMED concepts)."""
    _athena(con, folder / "CONCEPT.csv", "athena_concept", OMOP_CONCEPT_COLUMNS)
    _athena(con, folder / "CONCEPT_RELATIONSHIP.csv", "athena_rel", OMOP_RELATIONSHIP_COLUMNS)
    con.execute(
        "CREATE TEMP TABLE icd_concept AS SELECT vocabulary_id AS vocabulary, "
        "upper(replace(trim(concept_code), '.', '')) AS code, min(concept_id::BIGINT) AS source_concept "
        "FROM athena_concept WHERE vocabulary_id IN ('ICD10CM', 'ICD9CM') GROUP BY ALL"
    )
    con.execute(
        "CREATE TEMP TABLE maps AS SELECT DISTINCT r.concept_id_1::BIGINT AS source_concept, "
        "r.concept_id_2::BIGINT AS target FROM athena_rel r JOIN athena_concept c "
        "ON c.concept_id = r.concept_id_2 WHERE r.relationship_id = 'Maps to' AND r.invalid_reason IS NULL "
        "AND c.vocabulary_id = 'SNOMED' AND c.standard_concept = 'S'"
    )
    con.execute(
        "CREATE TEMP TABLE omop_concept AS SELECT concept_id::BIGINT AS concept_id, concept_name, domain_id, "
        "vocabulary_id, concept_class_id, standard_concept, concept_code, "
        "strptime(valid_start_date, '%Y%m%d')::DATE AS valid_start_date, "
        "strptime(valid_end_date, '%Y%m%d')::DATE AS valid_end_date, invalid_reason FROM athena_concept"
    )


def _increasing_ids(rng: np.random.Generator, n: int, base: int) -> np.ndarray:
    """``n`` increasing ids from ``base``, with random gaps of 1 to 9."""
    return base + np.cumsum(rng.integers(1, 10, n, dtype=np.int64))


def _conditions(con: duckdb.DuckDBPyConnection, rng: np.random.Generator) -> dict[str, int]:
    """``omop_condition_occurrence`` and ``omop_visit_occurrence``; what the vocabulary lacked."""
    con.execute(
        "CREATE TEMP TABLE dx AS SELECT d.subject_id, d.hadm_id, d.seq_num, d.icd_code, d.icd_version, "
        "a.admittime, a.dischtime, coalesce(i.source_concept, 0) AS source_concept, "
        "coalesce(m.target, 0) AS target, count(m.target) OVER (PARTITION BY d.subject_id, d.hadm_id, "
        "d.seq_num, d.icd_code) AS n_targets "
        "FROM diagnoses_icd d JOIN admissions a ON a.hadm_id = d.hadm_id AND a.subject_id = d.subject_id "
        "LEFT JOIN icd_concept i "
        "ON i.vocabulary = CASE d.icd_version WHEN 9 THEN 'ICD9CM' ELSE 'ICD10CM' END "
        "AND i.code = upper(replace(trim(d.icd_code), '.', '')) "
        "LEFT JOIN maps m ON m.source_concept = i.source_concept "
        "ORDER BY d.subject_id, d.hadm_id, d.seq_num, d.icd_code, target"
    )
    n = con.execute("SELECT count(*) FROM dx").fetchall()[0][0]
    codes = con.execute("SELECT DISTINCT icd_code, icd_version FROM dx ORDER BY ALL").fetchall()
    dots = [dotted_code(c, ICD9CM if v == 9 else ICD10CM) for c, v in codes]
    con.register(
        "dotted",
        pa.table({"icd_code": [c for c, _ in codes], "icd_version": [v for _, v in codes], "dotted": dots}),
    )
    con.register("cid", pa.table({"k": np.arange(n, dtype=np.int64), "id": _increasing_ids(rng, n, 0)}))
    con.execute(
        "CREATE TEMP TABLE omop_condition_occurrence AS SELECT cid.id AS condition_occurrence_id, "
        "subject_id AS person_id, target AS condition_concept_id, admittime::DATE AS condition_start_date, "
        "admittime AS condition_start_datetime, dischtime::DATE AS condition_end_date, "
        f"dischtime AS condition_end_datetime, {EHR_TYPE} AS condition_type_concept_id, "
        f"CASE WHEN seq_num = 1 THEN {PRIMARY_DIAGNOSIS} ELSE {SECONDARY_DIAGNOSIS} END "
        "AS condition_status_concept_id, NULL AS stop_reason, NULL AS provider_id, "
        "hadm_id AS visit_occurrence_id, NULL AS visit_detail_id, dotted AS condition_source_value, "
        "source_concept AS condition_source_concept_id, seq_num::VARCHAR AS condition_status_source_value "
        "FROM (SELECT *, row_number() OVER (ORDER BY subject_id, hadm_id, seq_num, icd_code, target) - 1 "
        "AS k FROM dx) JOIN cid USING (k) JOIN dotted USING (icd_code, icd_version) ORDER BY k"
    )
    ed = ", ".join(quote_literal(t) for t in ED_ADMISSIONS)
    con.execute(
        "CREATE TEMP TABLE omop_visit_occurrence AS SELECT hadm_id AS visit_occurrence_id, "
        f"subject_id AS person_id, CASE WHEN admission_type IN ({ed}) THEN {ER_INPATIENT_VISIT} "
        f"ELSE {INPATIENT_VISIT} END AS visit_concept_id, admittime::DATE AS visit_start_date, "
        "admittime AS visit_start_datetime, coalesce(dischtime, admittime)::DATE AS visit_end_date, "
        f"dischtime AS visit_end_datetime, {EHR_TYPE} AS visit_type_concept_id, NULL AS provider_id, "
        "NULL AS care_site_id, hadm_id::VARCHAR AS visit_source_value, 0 AS visit_source_concept_id, "
        "0 AS admitted_from_concept_id, admission_location AS admitted_from_source_value, "
        "0 AS discharged_to_concept_id, discharge_location AS discharged_to_source_value, "
        "lag(hadm_id) OVER (PARTITION BY subject_id ORDER BY admittime, hadm_id) "
        "AS preceding_visit_occurrence_id FROM admissions ORDER BY subject_id, admittime, hadm_id"
    )
    rows = "(SELECT DISTINCT subject_id, hadm_id, seq_num, icd_code, source_concept, n_targets FROM dx)"
    one_dx = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE source_concept = 0), count(*) FILTER (WHERE n_targets = 0), "
        f"count(*) FILTER (WHERE n_targets > 1) FROM {rows}"
    ).fetchall()[0]
    return {
        "diagnoses": int(one_dx[0]),
        "diagnoses_without_source_concept": int(one_dx[1]),
        "diagnoses_without_standard_concept": int(one_dx[2]),
        "diagnoses_with_several_standard_concepts": int(one_dx[3]),
    }


def _persons(con: duckdb.DuckDBPyConnection, rng: np.random.Generator) -> None:
    """``omop_person``, ``omop_death`` and ``omop_observation_period``."""
    race = " ".join(f"WHEN r.race LIKE {quote_literal(p)} THEN {c}" for p, c in RACE)
    con.execute(
        "CREATE TEMP TABLE omop_person AS SELECT p.subject_id AS person_id, "
        f"CASE p.gender WHEN 'F' THEN {FEMALE} WHEN 'M' THEN {MALE} ELSE 0 END AS gender_concept_id, "
        "p.anchor_year - p.anchor_age AS year_of_birth, NULL AS month_of_birth, NULL AS day_of_birth, "
        f"NULL AS birth_datetime, CASE {race} ELSE 0 END AS race_concept_id, "
        f"CASE WHEN r.race LIKE 'HISPANIC%' THEN {HISPANIC} WHEN r.race IS NULL OR r.race IN ('UNKNOWN', "
        f"'OTHER') THEN 0 ELSE {NOT_HISPANIC} END AS ethnicity_concept_id, NULL AS location_id, "
        "NULL AS provider_id, NULL AS care_site_id, p.subject_id::VARCHAR AS person_source_value, "
        "p.gender AS gender_source_value, 0 AS gender_source_concept_id, r.race AS race_source_value, "
        "0 AS race_source_concept_id, r.race AS ethnicity_source_value, 0 AS ethnicity_source_concept_id "
        "FROM patients p LEFT JOIN (SELECT subject_id, arg_min(race, (admittime, hadm_id)) AS race "
        "FROM admissions GROUP BY subject_id) r USING (subject_id) ORDER BY p.subject_id"
    )
    con.execute(
        "CREATE TEMP TABLE omop_death AS SELECT subject_id AS person_id, "
        "coalesce(p.dod, a.deathtime::DATE) AS death_date, a.deathtime AS death_datetime, "
        f"{EHR_TYPE} AS death_type_concept_id, NULL AS cause_concept_id, NULL AS cause_source_value, "
        "NULL AS cause_source_concept_id FROM patients p LEFT JOIN (SELECT subject_id, min(deathtime) AS "
        "deathtime FROM admissions WHERE deathtime IS NOT NULL GROUP BY subject_id) a USING (subject_id) "
        "WHERE p.dod IS NOT NULL OR a.deathtime IS NOT NULL ORDER BY subject_id"
    )
    con.execute(
        "CREATE TEMP TABLE span AS SELECT a.subject_id, min(a.admittime)::DATE AS first_day, "
        "greatest(max(coalesce(a.dischtime, a.admittime))::DATE, any_value(d.death_date)) AS last_day "
        "FROM admissions a JOIN patients p USING (subject_id) LEFT JOIN omop_death d "
        "ON d.person_id = a.subject_id GROUP BY a.subject_id ORDER BY a.subject_id"
    )
    n = con.execute("SELECT count(*) FROM span").fetchall()[0][0]
    ids = np.sort(rng.choice(np.int64(9_000_000), size=n, replace=False)) + 1
    con.register("pid", pa.table({"k": np.arange(n, dtype=np.int64), "id": rng.permutation(ids)}))
    con.execute(
        "CREATE TEMP TABLE omop_observation_period AS SELECT pid.id AS observation_period_id, "
        "subject_id AS person_id, first_day AS observation_period_start_date, "
        f"last_day AS observation_period_end_date, {EHR_TYPE} AS period_type_concept_id "
        "FROM (SELECT *, row_number() OVER (ORDER BY subject_id) - 1 AS k FROM span) JOIN pid USING (k) "
        "ORDER BY subject_id"
    )


def _copy(con: duckdb.DuckDBPyConnection, table: str, path: Path, columns: tuple[str, ...]) -> None:
    """``table``'s ``columns`` as a CSV file with a header (COPY takes no bound parameter for its target:
    the path goes through the quoting helper)."""
    select = ", ".join(columns)
    con.execute(f"COPY (SELECT {select} FROM {table}) TO {quote_literal(str(path))} (HEADER, DELIMITER ',')")
