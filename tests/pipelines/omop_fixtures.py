"""Tiny OMOP CDM v5.4 fixtures in the real layouts, written by the tests into tmp_path: the CDM tables
(every DDL column, in DDL order) as CSV, CSV.gz, Parquet or a DuckDB database, and an Athena-layout
vocabulary folder (TAB-separated CONCEPT.csv and CONCEPT_RELATIONSHIP.csv, dates YYYYMMDD).

Synthetic content only: concept ids are made up, the SNOMED codes are the mini RF2 fixture's synthetic
SCTIDs (``tests/data/snomed_mini_20220531``), the ICD codes are public ICD-10-CM / ICD-9-CM codes.
"""

from __future__ import annotations

import csv
import gzip
from datetime import date, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.data.readers.omop_layout import CDM_COLUMNS

# (concept_id, vocabulary_id, concept_code, standard_concept, domain_id, concept_class_id, name)
CONCEPTS = [
    (1001, "ICD10CM", "E11.9", "", "Condition", "5-char billing code", "Type 2 diabetes mellitus"),
    (1002, "ICD10CM", "I10", "", "Condition", "3-char billing code", "Essential hypertension"),
    (1003, "ICD10CM", "J45.909", "", "Condition", "7-char billing code", "Asthma, uncomplicated"),
    (1004, "ICD10CM", "N18.30", "", "Condition", "6-char billing code", "Chronic kidney disease 3"),
    (1005, "ICD10CM", "K21.9", "", "Condition", "5-char billing code", "Reflux without esophagitis"),
    (2001, "ICD9CM", "401.9", "", "Condition", "5-dig billing code", "Hypertension NOS"),
    (2002, "ICD9CM", "250.00", "", "Condition", "5-dig billing code", "Diabetes mellitus type II"),
    (2003, "ICD9CM", "V10.01", "", "Condition", "5-dig billing code", "History of tongue malignancy"),
    (3001, "SNOMED", "9990104001", "S", "Condition", "Disorder", "Demo diabetes type 2"),
    (3002, "SNOMED", "9990112009", "S", "Condition", "Disorder", "Demo essential hypertension"),
    (3003, "SNOMED", "9990108003", "S", "Condition", "Disorder", "Demo asthma"),
    (3004, "SNOMED", "990041000124103", "S", "Condition", "Disorder", "Demo kidney disease"),
    (3005, "SNOMED", "9990106004", "S", "Condition", "Disorder", "Demo diabetic nephropathy"),
    (3006, "SNOMED", "9990105000", "", "Condition", "Disorder", "Demo retired concept"),
    (3007, "ICDO3", "8000/3", "S", "Condition", "ICDO Condition", "Demo neoplasm"),
]
MAPS_TO = [(1001, 3001), (1002, 3002), (1003, 3003), (1004, 3004), (1004, 3005), (2001, 3002), (2002, 3001)]


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _d(text: str) -> date:
    return date.fromisoformat(text)


def visit(vid: int, person: int, start: str, end: str | None, **kw) -> dict:
    """A visit_occurrence row (``start``/``end``: ``YYYY-MM-DD HH:MM:SS``; an Inpatient Visit)."""
    row = {
        "visit_occurrence_id": vid,
        "person_id": person,
        "visit_concept_id": 9201,
        "visit_start_date": _ts(start).date(),
        "visit_start_datetime": _ts(start),
        "visit_end_date": _ts(end).date() if end else None,
        "visit_end_datetime": _ts(end) if end else None,
        "visit_type_concept_id": 32817,
    }
    row.update(kw)
    return row


def condition(cid: int, person: int, visit_id: int | None, day: str, source: int | None, value: str | None,
              standard: int | None = 0, primary: bool = False, **kw) -> dict:  # fmt: skip
    """A condition_occurrence row (``day``: ``YYYY-MM-DD``)."""
    row = {
        "condition_occurrence_id": cid,
        "person_id": person,
        "condition_concept_id": standard,
        "condition_start_date": _d(day),
        "condition_start_datetime": None,
        "condition_type_concept_id": 32817,
        "condition_status_concept_id": 32902 if primary else 32908,
        "visit_occurrence_id": visit_id,
        "condition_source_value": value,
        "condition_source_concept_id": source,
    }
    row.update(kw)
    return row


def default_tables() -> dict[str, list[dict]]:
    """Person 1: two visits written out of time order (ICD-9 then ICD-10; in 102 the secondary E11.9 has
    the smaller condition_occurrence_id than the primary I10), died 99 days after the last visit. Person 2:
    died on the day its visit ends; one source value (``ZZZ99``) that is no ICD code. Person 3: died 200
    days after (label false); its N18.30 mapped to two standard concepts (two rows). Person 4: no
    conditions (dropped). Person 5: two rows without a visit on 2115-02-01 (source values only: ``K21.9``,
    dotless ``4019``), a visit starting later that day, and a row naming visit 999 (no such visit),
    dated 2115-03-01."""
    visits = [
        visit(102, 1, "2116-01-01 10:00:00", "2116-01-01 20:00:00"),
        visit(101, 1, "2114-05-01 08:00:00", "2114-05-03 12:00:00"),
        visit(201, 2, "2120-03-01 00:00:00", "2120-03-05 00:00:00"),
        visit(301, 3, "2112-07-01 00:00:00", "2112-07-04 00:00:00"),
        visit(501, 5, "2115-02-01 10:00:00", "2115-02-02 10:00:00"),
    ]
    conditions = [
        condition(11, 1, 102, "2116-01-01", 1001, "E119", 3001),
        condition(12, 1, 102, "2116-01-01", 1002, "I10", 3002, primary=True),
        condition(13, 1, 101, "2114-05-01", 2001, "4019", 3002, primary=True),
        condition(14, 1, 101, "2114-05-01", 2002, "25000", 3001),
        condition(21, 2, 201, "2120-03-01", 1003, "J45909", 3003, primary=True),
        condition(22, 2, 201, "2120-03-01", 0, "ZZZ99", 0),
        condition(31, 3, 301, "2112-07-01", 1004, "N1830", 3004, primary=True),
        condition(32, 3, 301, "2112-07-01", 1004, "N1830", 3005, primary=True),
        condition(51, 5, None, "2115-02-01", 0, "K21.9", 0),
        condition(52, 5, None, "2115-02-01", None, "4019", 3002),
        condition(53, 5, 501, "2115-02-01", 1003, "J45909", 3003),
        condition(54, 5, 999, "2115-03-01", 1002, "I10", 3002),
    ]
    return {
        "person": [
            {
                "person_id": p,
                "gender_concept_id": 8532,
                "year_of_birth": 2040,
                "race_concept_id": 0,
                "ethnicity_concept_id": 0,
                "person_source_value": str(p),
            }
            for p in (1, 2, 3, 4, 5)
        ],  # fmt: skip
        "observation_period": [
            {
                "observation_period_id": p,
                "person_id": p,
                "observation_period_start_date": _d("2110-01-01"),
                "observation_period_end_date": _d("2121-01-01"),
                "period_type_concept_id": 32817,
            }
            for p in (1, 2, 3, 4, 5)
        ],  # fmt: skip
        "visit_occurrence": visits,
        "condition_occurrence": conditions,
        "death": [
            {"person_id": 1, "death_date": _d("2116-04-10"), "death_type_concept_id": 32817},
            {"person_id": 2, "death_date": _d("2120-03-05"), "death_datetime": _ts("2120-03-05 00:00:00")},
            {"person_id": 3, "death_date": _d("2113-01-20")},
        ],
        "concept": concept_rows(),
    }


def concept_rows(concepts: list[tuple] = CONCEPTS) -> list[dict]:
    return [
        {"concept_id": c, "concept_name": name, "domain_id": dom, "vocabulary_id": v, "concept_class_id": cls,
         "standard_concept": s or None, "concept_code": code, "valid_start_date": _d("1970-01-01"),
         "valid_end_date": _d("2099-12-31"), "invalid_reason": None}
        for c, v, code, s, dom, cls, name in concepts
    ]  # fmt: skip


def _kind(col: str) -> pa.DataType:
    if col.endswith("_datetime"):
        return pa.timestamp("us")
    if col.endswith("_date"):
        return pa.date32()
    if col in ("domain_id", "vocabulary_id", "concept_class_id"):  # text despite the name
        return pa.string()
    if col.endswith("_id") or col in ("year_of_birth", "month_of_birth", "day_of_birth"):
        return pa.int64()
    return pa.string()


def arrow_table(table: str, rows: list[dict], columns: tuple[str, ...] | None = None) -> pa.Table:
    cols = columns or CDM_COLUMNS[table]
    return pa.table({c: pa.array([r.get(c) for r in rows], _kind(c)) for c in cols})


def _text(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def write_csv(path: Path, columns: tuple[str, ...], rows: list[dict], *, gz: bool = False) -> Path:
    """A comma-separated table with a header, ``"`` quotes where needed, empty for null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        w.writerows([[_text(r.get(c)) for c in columns] for r in rows])
    return path


def write_cdm(
    root: Path,
    fmt: str = "csv",
    tables: dict[str, list[dict]] | None = None,
    *,
    names: dict[str, str] | None = None,
    concept: bool = True,
    columns: dict[str, tuple[str, ...]] | None = None,
) -> Path:
    """The CDM in ``fmt`` (``csv``, ``csv.gz``, ``parquet``: one file per table under ``root``; ``duckdb``:
    ``root/cdm.duckdb`` with the tables in schema ``main``, returned). ``names``: a table's file name stem
    (``PERSON``); ``concept``: write the concept table; ``columns``: a table's columns, not the DDL's."""
    tables = tables or default_tables()
    if not concept:
        tables = {k: v for k, v in tables.items() if k != "concept"}
    root.mkdir(parents=True, exist_ok=True)
    if fmt == "duckdb":
        db = root / "cdm.duckdb"
        con = duckdb.connect(str(db))
        for t, rows in tables.items():
            con.register("t", arrow_table(t, rows, (columns or {}).get(t)))
            con.execute(f'CREATE TABLE "{t}" AS SELECT * FROM t')
            con.unregister("t")
        con.close()
        return db
    for t, rows in tables.items():
        stem = (names or {}).get(t, t)
        cols = (columns or {}).get(t) or CDM_COLUMNS[t]
        if fmt == "parquet":
            pq.write_table(arrow_table(t, rows, cols), root / f"{stem}.parquet")
        else:
            write_csv(root / f"{stem}.{fmt}", cols, rows, gz=fmt == "csv.gz")
    return root


def write_athena(root: Path, concepts: list[tuple] = CONCEPTS, maps_to: list[tuple] = MAPS_TO) -> Path:
    """An Athena vocabulary folder: CONCEPT.csv and CONCEPT_RELATIONSHIP.csv, TAB-separated, unquoted,
    dates YYYYMMDD; ``Maps to`` rows and their ``Mapped from`` reverses."""
    root.mkdir(parents=True, exist_ok=True)
    head = "\t".join(CDM_COLUMNS["concept"])
    lines = [
        f"{c}\t{name}\t{dom}\t{v}\t{cls}\t{s}\t{code}\t19700101\t20991231\t"
        for c, v, code, s, dom, cls, name in concepts
    ]
    (root / "CONCEPT.csv").write_text("\n".join([head, *lines]) + "\n", encoding="utf-8")
    rel = ["concept_id_1\tconcept_id_2\trelationship_id\tvalid_start_date\tvalid_end_date\tinvalid_reason"]
    for a, b in maps_to:
        rel += [f"{a}\t{b}\tMaps to\t19700101\t20991231\t", f"{b}\t{a}\tMapped from\t19700101\t20991231\t"]
    (root / "CONCEPT_RELATIONSHIP.csv").write_text("\n".join(rel) + "\n", encoding="utf-8")
    return root


def athena_for_codes(root: Path, codes: list[tuple[str, str]], *, leave_out: set = frozenset()) -> Path:
    """An Athena folder with an ICD concept for each (vocabulary, dotless code) of ``codes`` but those of
    ``leave_out``, each mapped to one synthetic SNOMED concept, every fifth to two and every seventh to
    none (a code OMOP leaves unmapped)."""
    from ontology_compiler.api import dotted_code

    concepts, maps = [], []
    for i, (vocab, code) in enumerate(sorted(codes)):
        if (vocab, code) in leave_out:
            continue
        cid = (45_000_000 if vocab == "ICD10CM" else 44_800_000) + i
        concepts.append(
            (cid, vocab, dotted_code(code, vocab), "", "Condition", "billing code", f"code {code}")
        )
        targets = [] if i % 7 == 3 else [4_000_000 + i] + ([4_500_000 + i] if i % 5 == 1 else [])
        for t in targets:
            concepts.append((t, "SNOMED", f"99{i:07d}0", "S", "Condition", "Disorder", f"demo {i}"))
            maps.append((cid, t))
    return write_athena(root, concepts, maps)
