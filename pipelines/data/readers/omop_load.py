"""Find and load the OMOP CDM tables the OMOP reader reads (:mod:`.omop_layout`): from a folder of CSV,
CSV.gz or Parquet files (one per table, names in any case), or from one schema of a DuckDB database
opened read-only; the concept table from the CDM or from an Athena vocabulary folder's ``CONCEPT.csv``.

Each table becomes a temp table of the reader's connection holding the columns read, typed (``id``
BIGINT, ``date`` DATE, ``datetime`` TIMESTAMP, ``text`` VARCHAR) under their DDL names whatever their case
in the source, plus ``_row``: the record's position, which :meth:`Where.at` turns into "line N" (CSV:
the header is line 1), "file_row_number N" (Parquet) or "row N" (a DuckDB table). A value that does not
convert (``2114-02-30``, ``abc`` as an id), an empty required value, a missing column or a missing table
raises :class:`~pipelines.errors.InputFileError` naming the file, the line (or row) and what was expected.

No SQL text is built from data: paths are bound parameters, column and table names go through
``quote_identifier``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from ontology_compiler.api import columns_literal, quote_identifier, quote_literal
from pipelines.errors import InputFileError, MissingTableError

from .common import compression_option, connect, duckdb_path, input_record, load_csv, one, read_header
from .omop_layout import (
    ATHENA_CONCEPT,
    CDM_COLUMNS,
    CONCEPT,
    DATE_FORMATS,
    DATETIME_FORMATS,
    EVENT_TABLES,
    READ,
    REQUIRED,
)

SUFFIXES = (".csv", ".csv.gz", ".parquet")  # the file forms of a table in a folder
DUCKDB_MAGIC = b"DUCK"  # bytes 8 to 11 of a DuckDB database file
DOCS = "docs/input-formats.md, OMOP CDM v5.4 event tables"


@dataclass
class Where:
    """Where one loaded table came from, to name its records in errors and findings."""

    path: Path  # the file (a CSV or Parquet file, Athena's CONCEPT.csv, or the DuckDB database)
    kind: str  # "csv", "parquet" or "duckdb"
    table: str  # the table's name in the source (a DuckDB table: schema.table)

    @property
    def name(self) -> str:
        return self.path.name if self.kind != "duckdb" else f"{self.path.name} {self.table}"

    def at(self, row: int) -> str:
        """The record ``row`` (``_row``) as the source numbers it."""
        if self.kind == "csv":
            return f"{self.name} line {int(row) + 2}"
        if self.kind == "parquet":
            return f"{self.name} file_row_number {int(row)}"
        return f"{self.name} row {int(row) + 1}"

    def error(
        self, message: str, row: int | None = None, *, header: bool = False, **kw: str
    ) -> InputFileError:
        """An error about the record ``row``, the header (``header``) or the whole table; a CSV record's
        line (the header's: 1) is the error's line, a Parquet or database row is named in the message."""
        if self.kind == "csv":
            line = 1 if header else None if row is None else int(row) + 2
            return InputFileError(self.path, message, line=line, **kw)
        if self.kind == "duckdb":
            message = f"table {self.table}: {message}" + ("" if row is None else f" at row {int(row) + 1}")
        elif row is not None:
            message = f"{message} at file_row_number {int(row)}"
        return InputFileError(self.path, message, **kw)


@dataclass
class CdmSource:
    """An OMOP CDM's tables: the files of a folder (``files``), or the tables of one schema of a DuckDB
    database (``tables``: CDM name -> its name there); ``vocabulary``: an Athena ``CONCEPT.csv`` that is
    the concept table (None: the CDM's own)."""

    path: Path  # the folder, or the database file
    schema: str | None = None  # a database's schema; None for a folder
    files: dict[str, Path] = field(default_factory=dict)
    tables: dict[str, str] = field(default_factory=dict)
    vocabulary: Path | None = None

    @property
    def database(self) -> bool:
        return self.schema is not None

    def input_files(self) -> list[Path]:
        """The files whose content the tables are: each table's file (or the database), then the vocabulary's
        ``CONCEPT.csv`` when it is the concept table."""
        own = [self.path] if self.database else list(self.files.values())
        return own + ([self.vocabulary] if self.vocabulary is not None else [])

    def input_records(self) -> list[dict]:
        """The manifest's ``source.inputs``: paths relative to the folder (a database: to the folder holding
        it), the vocabulary's ``CONCEPT.csv`` as ``<outside>/CONCEPT.csv``."""
        root = self.path.parent if self.database else self.path
        return [input_record(root, f) for f in self.input_files()]

    def connect(self, threads: int | None) -> duckdb.DuckDBPyConnection:
        """The reader's connection: in memory for a folder; the database itself, read-only."""
        if not self.database:
            return connect(threads)
        try:
            return connect(threads, database=self.path)
        except duckdb.Error as e:
            raise InputFileError(self.path, f"cannot be opened read-only as a DuckDB database: {e}") from e


def is_duckdb_file(path: Path) -> bool:
    """True when ``path`` is a DuckDB database file (its magic bytes)."""
    try:
        with open(path, "rb") as f:
            return f.read(12)[8:12] == DUCKDB_MAGIC
    except OSError:
        return False


def locate(path: str | Path, *, schema: str | None = None, vocabulary: str | Path | None = None) -> CdmSource:
    """The CDM's tables under ``path`` (a folder, or a DuckDB database file with the tables in ``schema``,
    default ``main``); the concept table from ``vocabulary`` (an Athena folder) when given, else from the
    CDM. Raises naming the folder (or database) and the tables expected when one is missing."""
    p = Path(path)
    vocab = _athena_concept(Path(vocabulary)) if vocabulary is not None else None
    wanted = EVENT_TABLES + (() if vocab is not None else (CONCEPT,))
    if p.is_dir():
        if schema is not None:
            raise InputFileError(
                p, "is a folder; --omop-schema names a schema of a DuckDB database", hint="leave it out"
            )
        files = _folder_tables(p)
        _require_tables(p, wanted, files, vocab is None, "as <table>.csv, .csv.gz or .parquet (any case)")
        return CdmSource(p, files={t: files[t] for t in wanted}, vocabulary=vocab)
    if not p.is_file():
        raise InputFileError(p, "not found", hint="point --omop at a folder of CDM tables or a DuckDB file")
    if not is_duckdb_file(p):
        raise InputFileError(
            p,
            "not a DuckDB database",
            expected="a folder of OMOP CDM tables (CSV, CSV.gz or Parquet) or a DuckDB database file",
        )
    schema = schema or "main"
    found, elsewhere = _database_tables(p, schema)
    hint = f"; schema(s) holding them: {', '.join(elsewhere)} (give --omop-schema)" if elsewhere else ""
    _require_tables(p, wanted, found, vocab is None, f"in schema {schema}{hint}")
    return CdmSource(p, schema=schema, tables={t: found[t] for t in wanted}, vocabulary=vocab)


def _folder_tables(root: Path) -> dict[str, Path]:
    """CDM table (lower case) -> its file in ``root``; a table given twice is an error."""
    out: dict[str, list[Path]] = {}
    pattern = re.compile(r"^([a-z_]+)(\.csv|\.csv\.gz|\.parquet)$")
    for f in sorted(root.iterdir()):
        m = pattern.match(f.name.lower())
        if m and f.is_file() and m.group(1) in (*EVENT_TABLES, CONCEPT):
            out.setdefault(m.group(1), []).append(f)
    for table, fs in out.items():
        if len(fs) > 1:
            raise InputFileError(
                root,
                f"table {table} is given {len(fs)} times: {', '.join(f.name for f in fs)}",
                expected="one file per table",
            )
    return {t: fs[0] for t, fs in out.items()}


def _database_tables(path: Path, schema: str) -> tuple[dict[str, str], list[str]]:
    """The CDM tables of ``schema`` (CDM name -> name in the database), and the other schemas holding
    ``person`` and ``condition_occurrence`` (for the error's hint)."""
    try:
        con = connect(database=path)
    except duckdb.Error as e:
        raise InputFileError(path, f"cannot be opened read-only as a DuckDB database: {e}") from e
    rows = con.execute(
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_catalog = "
        "current_database()"
    ).fetchall()
    con.close()
    found = {n.lower(): n for s, n in rows if s == schema}
    by_schema: dict[str, set[str]] = {}
    for s, n in rows:
        by_schema.setdefault(s, set()).add(n.lower())
    elsewhere = sorted(
        s for s, names in by_schema.items() if s != schema and {"person", "condition_occurrence"} <= names
    )
    return {t: n for t, n in found.items() if t in (*EVENT_TABLES, CONCEPT)}, elsewhere


def _require_tables(
    where: Path, wanted: tuple[str, ...], found: dict, concept_needed: bool, how: str
) -> None:
    missing = [t for t in wanted if t not in found]
    if not missing:
        return
    concept = f" and {CONCEPT} (or --omop-vocabulary DIR, an Athena download)" if concept_needed else ""
    if missing == [CONCEPT]:
        raise MissingTableError(
            where,
            "no concept table: the CDM holds none and --omop-vocabulary is not given",
            hint=f"put {CONCEPT} beside the other tables ({how}), or give --omop-vocabulary DIR, an Athena "
            f"vocabulary folder holding {ATHENA_CONCEPT}",
        )
    raise MissingTableError(
        where,
        f"OMOP CDM table(s) not found: {', '.join(missing)}",
        hint=f"expected {', '.join(EVENT_TABLES)}{concept} {how}",
    )


def _athena_concept(folder: Path) -> Path:
    """``CONCEPT.csv`` (name in any case) of the Athena folder ``folder``."""
    if not folder.is_dir():
        raise InputFileError(folder, "not a folder", hint="--omop-vocabulary is an Athena vocabulary folder")
    found = [f for f in sorted(folder.iterdir()) if f.name.lower() == ATHENA_CONCEPT.lower() and f.is_file()]
    if not found:
        raise MissingTableError(
            folder,
            f"no {ATHENA_CONCEPT}",
            hint=f"expected the Athena download's {ATHENA_CONCEPT} in {folder}",
        )
    return found[0]


# --- loading ----------------------------------------------------------------------------------------


def temp_name(table: str) -> str:
    """The temp table a CDM table is loaded into (``omop_person``, ...): never a name of the database's."""
    return f"omop_{table}"


def load(con: duckdb.DuckDBPyConnection, src: CdmSource, table: str) -> Where:
    """Load ``table`` of ``src`` into the temp table :func:`temp_name` (the columns of :data:`READ`, typed,
    and ``_row``); check its values and required values. Returns where it came from."""
    if table == CONCEPT and src.vocabulary is not None:
        where = Where(src.vocabulary, "csv", ATHENA_CONCEPT)
        _raw_athena(con, where)
    elif src.database:
        where = Where(src.path, "duckdb", f"{src.schema}.{src.tables[table]}")
        _raw_database(con, where, src.schema, src.tables[table], table)
    else:
        f = src.files[table]
        kind = "parquet" if f.name.lower().endswith(".parquet") else "csv"
        where = Where(f, kind, table)
        (_raw_parquet if kind == "parquet" else _raw_csv)(con, where, table)
    _typed(con, where, table)
    _require(con, where, table)
    return where


def _match(where: Where, names: list[str], table: str) -> dict[str, str]:
    """DDL column -> the source's column of that name (any case); raises naming the columns expected."""
    lower: dict[str, list[str]] = {}
    for n in names:
        lower.setdefault(n.strip().lower(), []).append(n)
    want = list(READ[table])
    twice = [c for c in want if len(lower.get(c, [])) > 1]
    missing = [c for c in want if c not in lower]
    if missing or twice:
        what = f"missing column(s) {', '.join(missing)}" if missing else f"column(s) {', '.join(twice)} twice"
        raise where.error(
            what,
            header=True,
            expected=", ".join(want) + f" (of the v5.4 {table} table: {', '.join(CDM_COLUMNS[table])})",
            found=", ".join(names),
            hint=f"see {DOCS}",
        )
    return {c: lower[c][0] for c in want}


def _raw_csv(con: duckdb.DuckDBPyConnection, where: Where, table: str) -> None:
    """``_omop_raw`` from a comma-separated CDM file (header, ``"`` quotes), every column read as text."""
    header = read_header(where.path)
    cols = _match(where, header, table)
    load_csv(con, "_omop_csv", where.path, {src: "VARCHAR" for src in cols.values()})
    select = ", ".join(f"{quote_identifier(src)} AS {quote_identifier(c)}" for c, src in cols.items())
    con.execute(f"CREATE OR REPLACE TEMP TABLE _omop_raw AS SELECT rowid AS _row, {select} FROM _omop_csv")
    con.execute("DROP TABLE _omop_csv")


def _raw_athena(con: duckdb.DuckDBPyConnection, where: Where) -> None:
    """``_omop_raw`` from an Athena ``CONCEPT.csv``: TAB-separated, no quoting, exactly the concept header."""
    path = where.path
    first = read_header(path)  # split at commas: Athena's header has none, so it is one cell
    header = first[0].split("\t") if len(first) == 1 else first
    expected = CDM_COLUMNS[CONCEPT]
    if len(first) != 1 or [h.strip().lower() for h in header] != list(expected):
        raise InputFileError(
            path,
            "not an Athena CONCEPT.csv header",
            line=1,
            expected="\t".join(expected) + " (TAB-separated, unquoted)",
            found=repr("\t".join(header)),
        )
    cols = columns_literal({c: "VARCHAR" for c in expected})
    wanted = ", ".join(quote_identifier(c) for c in READ[CONCEPT])
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _omop_csv AS SELECT {wanted} FROM read_csv($1, columns = {cols}, "
            f"header = true, delim = '\t', quote = '', escape = '', nullstr = '', "
            f"{compression_option(path)})",
            [duckdb_path(path)],
        )
    except duckdb.Error as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputFileError(
            path, f"cannot be read as a TAB-separated Athena file: {first_line}", expected="10 fields a line"
        ) from e
    con.execute(f"CREATE OR REPLACE TEMP TABLE _omop_raw AS SELECT rowid AS _row, {wanted} FROM _omop_csv")
    con.execute("DROP TABLE _omop_csv")


def _raw_parquet(con: duckdb.DuckDBPyConnection, where: Where, table: str) -> None:
    """``_omop_raw`` from a Parquet file, the columns in their own types."""
    try:
        names = pq.read_schema(where.path).names
    except Exception as e:  # pyarrow raises several types for a non-Parquet file
        raise InputFileError(where.path, f"not a readable Parquet file: {e}") from e
    cols = _match(where, names, table)
    select = ", ".join(f"{quote_identifier(src)} AS {quote_identifier(c)}" for c, src in cols.items())
    try:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _omop_raw AS SELECT file_row_number AS _row, {select} "
            "FROM read_parquet($1, file_row_number = true)",
            [duckdb_path(where.path)],
        )
    except duckdb.Error as e:
        raise InputFileError(where.path, f"cannot be read: {str(e).strip().splitlines()[0]}") from e


def _raw_database(con: duckdb.DuckDBPyConnection, where: Where, schema: str, name: str, table: str) -> None:
    """``_omop_raw`` from the table ``schema.name`` of the database of ``con``, the columns in their types."""
    names = [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() "
            "AND table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
            [schema, name],
        ).fetchall()
    ]
    cols = _match(where, names, table)
    select = ", ".join(f"{quote_identifier(src)} AS {quote_identifier(c)}" for c, src in cols.items())
    ref = f"{quote_identifier(schema)}.{quote_identifier(name)}"
    try:  # a base table numbers its rows; a view does not
        con.execute(f"CREATE OR REPLACE TEMP TABLE _omop_raw AS SELECT rowid AS _row, {select} FROM {ref}")
    except duckdb.BinderException:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _omop_raw AS SELECT (row_number() OVER () - 1) AS _row, "
            f"{select} FROM {ref}"
        )


INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                 "UBIGINT", "UHUGEINT")  # fmt: skip
EXPECTED = {
    "id": "an integer",
    "date": f"a date ({DATE_FORMATS[0]})",
    "datetime": f"a date and time ({DATETIME_FORMATS[0]})",
    "text": "text",
}


def _formats(formats: tuple[str, ...]) -> str:
    return "[" + ", ".join(quote_literal(f) for f in formats) + "]"


def _convert(col: str, kind: str, sql_type: str) -> tuple[str, str | None] | None:
    """(SQL of the typed value, SQL true where a value does not convert, or None) for the column ``col`` of
    the DuckDB type ``sql_type``; None when that type cannot hold a value of ``kind``."""
    c = quote_identifier(col)
    t = sql_type.upper()
    text = f"nullif(trim({c}), '')"
    if t == "VARCHAR":
        typed = {
            "id": f"try_cast({text} AS BIGINT)",
            "date": f"try_strptime({text}, {_formats(DATE_FORMATS)})::DATE",
            "datetime": f"try_strptime({text}, {_formats(DATETIME_FORMATS)})",
            "text": c,
        }[kind]
        return typed, (None if kind == "text" else f"({text} IS NOT NULL AND {typed} IS NULL)")
    if kind == "text":
        return f"{c}::VARCHAR", None
    if kind == "id":
        if t in INTEGER_TYPES:
            return f"{c}::BIGINT", None
        if t in ("FLOAT", "DOUBLE") or t.startswith("DECIMAL"):  # ids written as floats (pandas)
            return (
                f"CASE WHEN {c} = round({c}) THEN {c}::BIGINT END",
                f"({c} IS NOT NULL AND {c} <> round({c}))",
            )
        return None
    if t == "DATE" or t.startswith("TIMESTAMP"):
        return (f"{c}::TIMESTAMP::DATE" if kind == "date" else f"{c}::TIMESTAMP"), None
    return None


def _typed(con: duckdb.DuckDBPyConnection, where: Where, table: str) -> None:
    """The temp table of ``table`` from ``_omop_raw``: each column read converted to its kind; the first
    value that does not convert raises naming its line (or row), column and value."""
    types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE _omop_raw)").fetchall())
    exprs, bad = [], []
    for col, kind in READ[table].items():
        conv = _convert(col, kind, types[col])
        if conv is None:
            raise where.error(f"column {col} has type {types[col]}", expected=f"{col}: {EXPECTED[kind]}")
        exprs.append(f"{conv[0]} AS {quote_identifier(col)}")
        if conv[1] is not None:
            bad.append((col, conv[1]))
    flag = " ".join(f"WHEN {test} THEN {quote_literal(col)}" for col, test in bad)
    value = " ".join(f"WHEN {test} THEN {quote_identifier(col)}::VARCHAR" for col, test in bad)
    extra = f", CASE {flag} END AS _bad, CASE {value} END AS _raw" if bad else ", NULL AS _bad, NULL AS _raw"
    name = quote_identifier(temp_name(table))
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT _row, {', '.join(exprs)}{extra} FROM _omop_raw"
    )
    con.execute("DROP TABLE _omop_raw")
    first = one(con, f"SELECT _row, _bad, _raw FROM {name} WHERE _bad IS NOT NULL ORDER BY _row LIMIT 1")
    if first:
        row, col, value = first
        kind = READ[table][col]
        raise where.error(
            f"malformed {'date' if kind in ('date', 'datetime') else 'value'} in column {col}",
            row,
            expected=EXPECTED[kind],
            found=repr(value),
        )
    con.execute(f"ALTER TABLE {name} DROP COLUMN _bad")
    con.execute(f"ALTER TABLE {name} DROP COLUMN _raw")


def _require(con: duckdb.DuckDBPyConnection, where: Where, table: str) -> None:
    """Raise at the first record where a column of :data:`REQUIRED` is empty."""
    for col in REQUIRED[table]:
        t, c = quote_identifier(temp_name(table)), quote_identifier(col)
        row = one(con, f"SELECT min(_row) FROM {t} WHERE {c} IS NULL")
        if row and row[0] is not None:
            raise where.error(f"empty {col}", int(row[0]), expected=f"a {col} on every row")
