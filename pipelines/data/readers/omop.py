"""OMOP CDM v5.4 conditions -> the common long table and visit labels, with DuckDB.

The tables read and their columns: ``docs/input-formats.md``, "OMOP CDM v5.4 event tables"; where they
are found and how they are loaded: :mod:`.omop_load`; the codes (``--omop-codes source|standard``):
:mod:`.omop_codes`.

A patient is a ``person_id``. A visit is a ``visit_occurrence`` with conditions, ordered by its start
(``visit_start_datetime``, else ``visit_start_date``), then ``visit_occurrence_id``; its codes are known
at its end (``known_time``: ``visit_end_datetime``, else the end of ``visit_end_date``, 23:59:59, since a
date alone says the codes are known by the end of that day; the start where neither is given or the end
lies before the start), as MIMIC-IV's are at ``dischtime``. A condition row without a visit
(``visit_occurrence_id`` empty, or naming no visit of its person) is grouped with the person's other such
rows of its ``condition_start_date`` into one visit of that day (start at midnight, known at its end),
ordered among the others by that start. Codes within a visit: primary diagnoses first
(``condition_status_concept_id`` 32902), then by ``condition_occurrence_id`` (MIMIC-IV's ``seq_num``
order, when the ids follow it).

A visit's ``mortality_6m`` is MIMIC-IV's rule: a death at most 182 days after the day the visit ends (a
death before it counts too, as MIMIC-IV counts a ``dod`` before ``dischtime``); the day of death is the
earliest ``death_date`` (or date of ``death_datetime``) of the person. ``prepare`` labels each patient
with the last visit of its sequence. Persons of ``person`` without any code are dropped and counted.

Checks before anything is used: the tables and columns read present, every value of its kind, required
values given; exact duplicate rows dropped (findings); one row per ``visit_occurrence_id`` and per
``condition_occurrence_id``, else an error naming both lines. Findings (counted, warned with examples):
rows of persons missing from ``person`` (visits, conditions, deaths; kept), visits ending before they
start, condition rows naming a missing visit, persons with several death rows, a death before the
person's last visit ends (still a death), condition rows outside every observation period of their
person (kept), a concept id listed twice, and the code findings of :mod:`.omop_codes`.
"""

from __future__ import annotations

from pathlib import Path

from duckdb import DuckDBPyConnection

from pipelines.errors import InputFileError

from .common import MORTALITY_DAYS, Findings, ReadResult, one, read_result, to_tables
from .omop_checks import drop_duplicates, finding
from .omop_codes import CODES, concepts, tokens
from .omop_layout import CONCEPT, EVENT_TABLES, PRIMARY_DIAGNOSIS
from .omop_load import CdmSource, Where, load, locate, temp_name

END_OF_DAY = "INTERVAL 86399 SECOND"  # a date's last second: when what is dated that day is known


def omop_root(path: str | Path) -> Path:
    """The folder of the CDM tables given, or the folder holding the DuckDB database given."""
    p = Path(path)
    if p.is_dir():
        return p
    if p.is_file():
        return p.parent
    raise InputFileError(p, "not found", hint="point --omop at a folder of CDM tables or a DuckDB file")


def omop_files(
    path: str | Path,
    *,
    codes: str = "source",
    schema: str | None = None,
    vocabulary: str | Path | None = None,
) -> list[Path]:
    """The files :func:`read_omop` reads (their hashes make a dataset's id): each table's file (or the
    database), and the vocabulary's ``CONCEPT.csv`` when it is the concept table."""
    return locate(path, schema=schema, vocabulary=vocabulary).input_files()


def read_omop(
    path: str | Path,
    *,
    threads: int | None = None,
    codes: str = "source",
    schema: str | None = None,
    vocabulary: str | Path | None = None,
) -> ReadResult:
    """Read an OMOP CDM (a folder of its tables, or a DuckDB database with them in ``schema``, default
    ``main``) into a :class:`ReadResult`; ``codes``: ``source`` (ICD codes) or ``standard`` (SNOMED
    concepts); ``vocabulary``: an Athena folder whose ``CONCEPT.csv`` is the concept table."""
    if codes not in CODES:
        raise ValueError(f"codes must be one of {', '.join(CODES)}, got {codes!r}")
    src = locate(path, schema=schema, vocabulary=vocabulary)
    con = src.connect(threads)
    where = {t: load(con, src, t) for t in (*EVENT_TABLES, CONCEPT)}
    f = Findings("omop")
    t = {name: temp_name(name) for name in where}
    f.count("patients_in_source", one(con, f"SELECT count(DISTINCT person_id) FROM {t['person']}")[0])
    f.count("visits_in_source", one(con, f"SELECT count(*) FROM {t['visit_occurrence']}")[0])
    f.count("condition_rows", one(con, f"SELECT count(*) FROM {t['condition_occurrence']}")[0])
    f.count("death_rows", one(con, f"SELECT count(*) FROM {t['death']}")[0])
    _check_tables(con, where, f)
    concepts(con, f, where[CONCEPT], t[CONCEPT])
    _visits(con, where["visit_occurrence"], f)
    _conditions(con, where["condition_occurrence"], f)
    _unknown_persons(con, where, f)
    _observation(con, where["condition_occurrence"], f)
    tokens(con, f, where["condition_occurrence"], codes)
    _events(con, where["death"], f)
    events, visits = to_tables(
        con,
        "SELECT subject_id, visit_index, visit_time, known_time, "
        "(row_number() OVER (PARTITION BY subject_id, visit_index ORDER BY primary_rank, "
        "condition_occurrence_id, _row) - 1)::INT AS seq, vocabulary, code FROM ev "
        "ORDER BY subject_id, visit_index, seq",
        "SELECT subject_id, visit_index, mortality_6m, NULL AS given_split FROM vm "
        "ORDER BY subject_id, visit_index",
    )
    f.count("patients_with_codes", one(con, "SELECT count(*) FROM lastv")[0])
    f.count(
        "dropped_no_diagnoses",
        one(
            con,
            f"SELECT count(DISTINCT person_id) FROM {t['person']} p ANTI JOIN lastv l "
            "ON l.subject_id = p.person_id",
        )[0],
    )
    f.count(
        "patients_not_in_person_table",
        one(con, f"SELECT count(*) FROM lastv l ANTI JOIN {t['person']} p ON p.person_id = l.subject_id")[0],
    )
    result = read_result("omop", src.path, src.input_records(), events, visits, f.as_dict())
    result.source["omop"] = _source_record(src, codes)
    return result


def _source_record(src: CdmSource, codes: str) -> dict:
    """The manifest's ``source.omop``: how the CDM was read."""
    return {
        "codes": codes,
        "database_schema": src.schema,
        "concept_table": str(src.vocabulary.resolve()) if src.vocabulary is not None else "cdm",
    }


def _check_tables(con: DuckDBPyConnection, where: dict[str, Where], f: Findings) -> None:
    """Exact duplicate rows dropped (findings); two different rows of one visit or condition id raise."""
    ids = {"person": None, "visit_occurrence": ("visit_occurrence_id",), "death": None,
           "condition_occurrence": ("condition_occurrence_id",), "observation_period": None}  # fmt: skip
    for table, key in ids.items():
        drop_duplicates(con, f, f"duplicate_{table}_rows", where[table], temp_name(table), key)


def _visits(con: DuckDBPyConnection, where: Where, f: Findings) -> None:
    """``vis``: each visit's start and end (the start where the end is missing or earlier)."""
    con.execute(
        "CREATE TEMP TABLE vis0 AS SELECT _row, visit_occurrence_id, person_id, "
        "coalesce(visit_start_datetime, visit_start_date::TIMESTAMP) AS vstart, "
        f"coalesce(visit_end_datetime, visit_end_date::TIMESTAMP + {END_OF_DAY}) AS vend0 "
        f"FROM {temp_name('visit_occurrence')}"
    )
    finding(
        con,
        f,
        "visits_ending_before_start",
        where,
        "vis0",
        "vend0 < vstart",
        "printf('visit_occurrence_id %d ends %s, before its start %s', visit_occurrence_id, vend0, vstart)",
        "visits ending before they start (kept; their start taken as their end)",
    )
    con.execute(
        "CREATE TEMP TABLE vis AS SELECT *, CASE WHEN vend0 IS NULL OR vend0 < vstart THEN vstart "
        "ELSE vend0 END AS vend FROM vis0"
    )


def _conditions(con: DuckDBPyConnection, where: Where, f: Findings) -> None:
    """``co``: each condition row with its visit (``vkind`` 0, its id) or its day (``vkind`` 1, a visit of
    the person's rows without a visit that day), the visit's start, end and mortality reference day."""
    con.execute(
        "CREATE TEMP TABLE co0 AS SELECT c.*, v.visit_occurrence_id IS NOT NULL AS has_visit, v.vstart, "
        f"v.vend FROM {temp_name('condition_occurrence')} c LEFT JOIN vis v "
        "ON v.visit_occurrence_id = c.visit_occurrence_id AND v.person_id = c.person_id"
    )
    f.count(
        "condition_rows_without_visit",
        one(con, "SELECT count(*) FROM co0 WHERE visit_occurrence_id IS NULL")[0],
    )
    finding(
        con,
        f,
        "condition_rows_visit_not_found",
        where,
        "co0",
        "visit_occurrence_id IS NOT NULL AND NOT has_visit",
        "printf('condition_occurrence_id %d: visit_occurrence_id %d is no visit of person_id %d', "
        "condition_occurrence_id, visit_occurrence_id, person_id)",
        "condition rows whose visit_occurrence_id is no visit of their person in visit_occurrence "
        "(grouped by condition_start_date, as rows without a visit)",
    )
    con.execute(
        "CREATE TEMP TABLE co AS SELECT *, CASE WHEN has_visit THEN 0 ELSE 1 END AS vkind, "
        "CASE WHEN has_visit THEN visit_occurrence_id END AS vid, "
        "CASE WHEN has_visit THEN NULL ELSE condition_start_date END AS vday, "
        "CASE WHEN has_visit THEN vstart ELSE condition_start_date::TIMESTAMP END AS vtime, "
        f"CASE WHEN has_visit THEN vend ELSE condition_start_date::TIMESTAMP + {END_OF_DAY} END AS ktime "
        "FROM co0"
    )
    f.count(
        "visits_from_condition_dates",
        one(con, "SELECT count(*) FROM (SELECT DISTINCT person_id, vday FROM co WHERE vkind = 1)")[0],
    )


def _unknown_persons(con: DuckDBPyConnection, where: dict[str, Where], f: Findings) -> None:
    """Visits, condition rows and deaths of persons that ``person`` lacks (all kept)."""
    person = temp_name("person")
    for key, table, source, what in (
        ("visits_of_unknown_persons", "vis", "visit_occurrence", "visits"),
        ("condition_rows_of_unknown_persons", "co", "condition_occurrence", "condition rows"),
        ("deaths_of_unknown_persons", temp_name("death"), "death", "death rows"),
    ):
        finding(
            con,
            f,
            key,
            where[source],
            f"(SELECT * FROM {table} t ANTI JOIN {person} p ON p.person_id = t.person_id)",
            "true",
            "printf('person_id %d', person_id)",
            f"{what} of persons not in {where['person'].name} (kept)",
        )


def _observation(con: DuckDBPyConnection, where: Where, f: Findings) -> None:
    """Condition rows dated outside every observation period of their person (kept)."""
    finding(
        con,
        f,
        "condition_rows_outside_observation_period",
        where,
        f"(SELECT * FROM co c ANTI JOIN {temp_name('observation_period')} o ON o.person_id = c.person_id "
        "AND c.condition_start_date BETWEEN o.observation_period_start_date "
        "AND o.observation_period_end_date)",
        "true",
        "printf('condition_occurrence_id %d, person_id %d, condition_start_date %s', "
        "condition_occurrence_id, person_id, condition_start_date)",
        "condition rows dated outside every observation period of their person (kept)",
    )


def _events(con: DuckDBPyConnection, where: Where, f: Findings) -> None:
    """``ev`` (the codes with their visit's rank and times), ``dth`` (each person's day of death), ``vm``
    (each visit's mortality) and ``lastv``; the death findings."""
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT person_id AS subject_id, "
        "(dense_rank() OVER (PARTITION BY person_id ORDER BY vtime, vkind, vid, vday) - 1)::INT "
        "AS visit_index, "
        "vtime AS visit_time, ktime AS known_time, ktime::DATE AS mref, "
        f"CASE WHEN condition_status_concept_id = {PRIMARY_DIAGNOSIS} THEN 0 ELSE 1 END AS primary_rank, "
        "condition_occurrence_id, _row, vocabulary, code FROM dx WHERE code IS NOT NULL AND code <> ''"
    )
    death = temp_name("death")
    con.execute(
        "CREATE TEMP TABLE dth AS SELECT person_id, min(least(death_date, death_datetime::DATE)) AS day, "
        f"count(*) AS n FROM {death} GROUP BY person_id"
    )
    finding(
        con,
        f,
        "persons_with_several_death_rows",
        where,
        f"(SELECT d.*, row_number() OVER (PARTITION BY person_id ORDER BY _row) AS k FROM {death} d)",
        "k > 1",
        "printf('person_id %d again', person_id)",
        "death rows of a person with an earlier death row (the earliest day of death is used)",
    )
    finding(
        con,
        f,
        "death_before_last_visit_end",
        where,
        f"(SELECT d._row, d.person_id, d.death_date, v.last_end, v.last_id FROM {death} d JOIN "
        "(SELECT person_id, max(vend) AS last_end, arg_max(visit_occurrence_id, vend) AS last_id FROM vis "
        "GROUP BY person_id) v USING (person_id) WHERE d.death_date < v.last_end::DATE)",
        "true",
        "printf('person_id %d, death_date %s before the end %s of visit_occurrence_id %d', person_id, "
        "death_date, last_end, last_id)",
        "deaths dated before the person's last visit ends (still counted as deaths)",
    )
    con.execute(
        "CREATE TEMP TABLE vm AS SELECT e.subject_id, e.visit_index, "
        f"coalesce(date_diff('day', any_value(e.mref), any_value(d.day)) <= {MORTALITY_DAYS}, false) "
        "AS mortality_6m FROM ev e LEFT JOIN dth d ON d.person_id = e.subject_id "
        "GROUP BY e.subject_id, e.visit_index"
    )
    con.execute(
        "CREATE TEMP TABLE lastv AS SELECT subject_id, max(visit_index) AS visit_index FROM ev GROUP BY ALL"
    )
