"""Read-only DuckDB SQL over a compiled program: one view per program table, in a locked sandbox.

The sandbox (:func:`connect`):

- The views are named from :data:`PROGRAM_TABLES`, a fixed list of the tables the compilers write,
  never from the manifest's text; a manifest entry outside that list is ignored with a warning.
- Every exposed file is read once into memory and its sha256 checked against the manifest on those
  same bytes; only then is the buffer registered with DuckDB (a pyarrow dataset over the bytes, so a
  query still decodes only the columns it reads). A mismatch is refused naming the file. DuckDB itself
  never opens a file, and a file swapped after the check is never seen.
- The connection is opened with its configuration already locked (:data:`LOCKED`): no file system
  access (so ``read_csv``, ``read_text``, ``read_blob``, ``glob``, ``read_parquet``, ``COPY``,
  ``ATTACH``, ``EXPORT``, ``INSTALL`` and ``LOAD`` fail), no extension auto-install or auto-load, no
  spilling to a temporary folder, no scans of Python variables, and no ``SET``/``PRAGMA`` that could
  undo any of it.
- On top, :func:`check_read_only` admits only ``SELECT`` statements (``WITH``, ``FROM``-first,
  ``VALUES``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``) and ``EXPLAIN [ANALYZE]`` of one ``SELECT``.
- A query is bounded (:func:`run_sql`): DuckDB's ``memory_limit`` and ``threads`` are fixed with the
  rest of the configuration, a timer interrupts a query that runs past its timeout, and at most
  ``max_rows + 1`` rows are ever fetched from the (streaming) result.

Anyone who wants more than this opens the Parquet files with DuckDB directly (see the README).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from .errors import OntologyCompilerError, ProgramFormatError
from .printable import printable, printable_json
from .program import read_manifest
from .sql_limits import SQL_DEFAULT_MEMORY_LIMIT as DEFAULT_MEMORY_LIMIT
from .sql_limits import SQL_DEFAULT_THREADS as DEFAULT_THREADS
from .sql_limits import SQL_DEFAULT_TIMEOUT as DEFAULT_TIMEOUT

log = logging.getLogger(__name__)

# The program's tables (docs/program-format.md): manifest path -> view name. The only names a view gets.
PROGRAM_TABLES: dict[str, str] = {
    **{f"{t}.parquet": t for t in ("atoms", "relations", "concepts", "edges", "slices")},
    **{
        f"graph/{t}.parquet": t
        for t in (
            # RF2 input (ontology_compiler.compiler._graph_tables)
            "snomed_concepts",
            "snomed_relationships",
            "snomed_descriptions",
            "snomed_concrete_values",
            "icd_map",
            # OWL input (ontology_compiler.owl_input._graph_tables)
            "owl_classes",
            "owl_properties",
            "owl_edges",
            "owl_labels",
            "owl_code_map",
        )
    },
}

# DuckDB settings of the sandbox, fixed when the connection opens (lock_configuration last).
LOCKED: dict[str, object] = {
    "enable_external_access": False,  # no file system: read_*, glob, COPY, ATTACH, EXPORT, INSTALL, LOAD
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "allow_persistent_secrets": False,
    "temp_directory": "",  # never spill to disk
    "python_enable_replacements": False,  # no scans of the caller's Python variables
    "lock_configuration": True,  # no SET / PRAGMA / RESET afterwards
}


# Statement types a query may contain: reading only (EXPLAIN only of a SELECT, see check_read_only).
ALLOWED = {"SELECT", "EXPLAIN"}
_PARQUET = ds.ParquetFileFormat()
READ_ONLY = "only read-only queries are allowed (SELECT, WITH ... SELECT, EXPLAIN [ANALYZE] SELECT)"

_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*(?:[^*/]|\*(?!/)|/(?!\*))*\*/)*")
_OPTION = r"[A-Za-z_]+(?:\s+[A-Za-z_]+)?"
_EXPLAIN = re.compile(
    rf"EXPLAIN(?:\s+ANALY[SZ]E\b|\s*\(\s*{_OPTION}(?:\s*,\s*{_OPTION})*\s*\))?\s", re.IGNORECASE
)


class SQLError(OntologyCompilerError):
    """A query that is not read-only, or that DuckDB rejects."""


@dataclass
class SQLResult:
    columns: list[str]
    rows: list[tuple]
    truncated: bool = False  # rows beyond run_sql's max_rows exist and were never fetched


def resolve_program(path: str | Path) -> Path:
    """A program folder, or a release folder of programs (then the most recently created one)."""
    path = Path(path)
    if (path / "manifest.json").is_file():
        return path
    found = []
    for m in path.glob("*/manifest.json"):
        try:
            found.append((read_manifest(m.parent).get("created_at", ""), m.parent))
        except OntologyCompilerError:
            continue
    if not found:
        raise OntologyCompilerError(
            f"{path}: neither a program folder nor a folder of programs (no manifest.json)"
        )
    found.sort(key=lambda x: (str(x[0]), str(x[1])))
    if len(found) > 1:
        log.warning("%s holds %d programs; using the newest, %s", path, len(found), found[-1][1].name)
    return found[-1][1]


def program_tables(program: str | Path) -> dict[str, ds.Dataset]:
    """The program's tables by view name, each over in-memory bytes whose sha256 matches the manifest.

    Only files named in :data:`PROGRAM_TABLES` are read; other manifest entries are ignored with a
    warning. Raises :class:`ProgramFormatError` naming the file on a missing file, a hash mismatch or a
    file that is not Parquet.
    """
    program = Path(program)
    manifest = read_manifest(program)
    files = manifest.get("files")
    if not isinstance(files, list):
        raise ProgramFormatError(f"{program / 'manifest.json'}: 'files' is not a list")
    tables: dict[str, ds.Dataset] = {}
    for f in files:
        rel = f.get("path") if isinstance(f, dict) else None
        view = PROGRAM_TABLES.get(rel) if isinstance(rel, str) else None
        if view is None:
            log.warning(
                "%s: manifest entry %r is not a program table; not exposed to SQL",
                program / "manifest.json",
                rel,
            )
            continue
        if view in tables:
            raise ProgramFormatError(f"{program / 'manifest.json'}: {rel} is listed twice")
        path = program / Path(*rel.split("/"))  # the whitelisted name, not the manifest's text
        expected = f.get("sha256")
        if not isinstance(expected, str):
            raise ProgramFormatError(f"{program / 'manifest.json'}: {rel} has no sha256")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ProgramFormatError(f"{path}: listed in the manifest but missing") from None
        except OSError as e:
            raise ProgramFormatError(f"{path}: cannot be read: {e}") from e
        got = hashlib.sha256(data).hexdigest()
        if got != expected:
            raise ProgramFormatError(
                f"{path}: sha256 {got} differs from the manifest's {expected}; "
                "the file was changed after the program was compiled (compile again)"
            )
        try:
            fragment = _PARQUET.make_fragment(pa.BufferReader(data))
            tables[view] = ds.FileSystemDataset([fragment], schema=fragment.physical_schema, format=_PARQUET)
        except (pa.ArrowException, OSError) as e:
            raise ProgramFormatError(f"{path}: not a readable Parquet file: {e}") from e
    return tables


def connect(
    program: str | Path,
    *,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    threads: int = DEFAULT_THREADS,
) -> duckdb.DuckDBPyConnection:
    """A locked in-memory DuckDB connection with views over the program's tables (``atoms``, ``edges``, ...).

    ``memory_limit`` (DuckDB syntax, e.g. ``"2GB"``) and ``threads`` are set with the rest of the
    configuration, before it is locked; nothing can change them afterwards. See the module docstring
    for what the sandbox refuses.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise SQLError(f"threads must be a positive integer, got {threads!r}")
    tables = program_tables(resolve_program(program))
    config = {k: v for k, v in LOCKED.items() if k != "lock_configuration"}
    config.update(memory_limit=str(memory_limit), threads=threads, lock_configuration=True)
    try:
        con = duckdb.connect(":memory:", config=config)
    except duckdb.Error as e:
        raise SQLError(f"invalid memory limit {memory_limit!r} (e.g. '2GB', '512MB'): {e}") from e
    for view, table in tables.items():
        con.register(view, table)  # a view over the in-memory bytes; the name comes from PROGRAM_TABLES
    return con


def check_read_only(con: duckdb.DuckDBPyConnection, statement) -> None:
    """Refuse a parsed statement unless it is a SELECT, or EXPLAIN [ANALYZE] of exactly one SELECT."""
    kind = str(statement.type).rsplit(".", 1)[-1]
    if kind not in ALLOWED:
        raise SQLError(f"{READ_ONLY}; got {kind}")
    if kind == "SELECT":
        return
    text = statement.query
    text = text[_COMMENTS.match(text).end() :]
    m = _EXPLAIN.match(text)
    inner = []
    if m:
        try:
            inner = con.extract_statements(text[m.end() :])
        except duckdb.Error:
            inner = []
    if len(inner) != 1 or str(inner[0].type).rsplit(".", 1)[-1] != "SELECT":
        what = (
            str(inner[0].type).rsplit(".", 1)[-1] if len(inner) == 1 else "a statement this check cannot read"
        )
        raise SQLError(f"{READ_ONLY}; got EXPLAIN of {what}")


def run_sql(
    program: str | Path,
    query: str,
    *,
    max_rows: int | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    threads: int = DEFAULT_THREADS,
) -> SQLResult:
    """Run one or more read-only statements; the last one's result is returned.

    Bounds: ``timeout`` seconds for parsing, running and fetching (``None`` or ``0``: none; past it the
    query is interrupted and :class:`SQLError` is raised), DuckDB's ``memory_limit`` and ``threads``
    (exceeding the memory limit is a :class:`SQLError`), and ``max_rows``: at most that many rows are
    fetched (``None`` or ``0``: all); when more exist, ``truncated`` is set on the result.
    """
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
        raise SQLError(f"max_rows must be a non-negative integer or None, got {max_rows!r}")
    if timeout is not None and not (isinstance(timeout, int | float) and timeout >= 0):
        raise SQLError(f"timeout must be a non-negative number of seconds or None, got {timeout!r}")
    con = connect(program, memory_limit=memory_limit, threads=threads)
    timer = threading.Timer(timeout, con.interrupt) if timeout else None
    try:
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            columns, rows, truncated = _run(con, query, max_rows)
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()
    except duckdb.InterruptException as e:
        raise SQLError(
            f"the query ran past its timeout of {timeout:g} s and was interrupted "
            "(raise it with --timeout SECONDS, or timeout= in run_sql)"
        ) from e
    except duckdb.OutOfMemoryException as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SQLError(
            f"{first}\n  the query needs more than the memory limit of {memory_limit}: raise it with "
            "--memory-limit (memory_limit= in run_sql), use fewer --threads, or select fewer rows or columns"
        ) from e
    except duckdb.PermissionException as e:
        raise SQLError(
            f"{e}\n  hrrbert sql reads only the program's views ({', '.join(_views(con))}); for anything "
            "else, open the program's Parquet files with DuckDB directly (see the README)"
        ) from e
    except duckdb.Error as e:
        raise SQLError(f"{_advice(str(e))}\n  views: {', '.join(_views(con))}") from e
    finally:
        con.close()
    return SQLResult(columns, rows, truncated)


def _run(con: duckdb.DuckDBPyConnection, query: str, max_rows: int | None) -> tuple[list, list, bool]:
    try:
        statements = con.extract_statements(query)
    except duckdb.InterruptException:
        raise
    except duckdb.Error as e:
        raise SQLError(f"could not parse the query: {_advice(str(e))}") from e
    if not statements:
        raise SQLError("empty query")
    for st in statements:
        check_read_only(con, st)
    for st in statements[:-1]:
        con.execute(st)
    cur = con.execute(statements[-1])  # a streaming result: rows are produced as they are fetched
    columns = [d[0] for d in cur.description]
    if not max_rows:
        return columns, cur.fetchall(), False
    rows = cur.fetchmany(max_rows + 1)
    return columns, rows[:max_rows], len(rows) > max_rows


_DEPTH_ADVICE = re.compile(r'\s*Use "SET max_expression_depth TO x"[^.]*\.?')


def _advice(message: str) -> str:
    """DuckDB's message, without advice to run a ``SET`` that the locked sandbox refuses."""
    if _DEPTH_ADVICE.search(message):
        return _DEPTH_ADVICE.sub("", message) + (
            " The sandbox keeps this limit: nest fewer expressions (e.g. 'x IN (1, 2, ...)' instead of a "
            "chain of ORs, or a VALUES list joined in), or open the program's Parquet files with DuckDB "
            "directly (see the README)."
        )
    return message


def _views(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()
    ]


def format_result(result: SQLResult, fmt: str = "table", max_rows: int | None = 50) -> str:
    """Render as an aligned text table, CSV, or JSON lines; at most ``max_rows`` rows (``None``/``0``: all).

    The table is for a terminal: control characters in its names and values are escaped
    (:func:`ontology_compiler.printable.printable`). JSON writes them as ``\\u`` escapes (the same values);
    CSV keeps the values as they are.

    JSON has one object per row; NaN and infinite floats become ``null`` (JSON has no such numbers).
    The table ends with a row count that says when rows were cut (here, or by run_sql's ``max_rows``:
    ``result.truncated``); CSV and JSON carry only rows, so a caller says it elsewhere.
    """
    rows = result.rows[:max_rows] if max_rows else result.rows
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(result.columns)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    if fmt == "json":
        return "\n".join(
            printable_json(  # the same JSON, with C1 controls and DEL as \u escapes too
                json.dumps(
                    _json_safe(dict(zip(result.columns, r, strict=True))),
                    default=str,
                    ensure_ascii=False,
                    allow_nan=False,
                )
            )
            for r in rows
        )
    cells = [[printable(_cell(v)) for v in r] for r in rows]  # data text: terminal controls escaped
    columns = [printable(c) for c in result.columns]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    out = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    n = len(rows)
    plural = "s" if n != 1 else ""
    if result.truncated:
        out.append(f"({n} row{plural} shown; output cut, more rows were not fetched: raise --max-rows)")
    elif n < len(result.rows):
        out.append(f"({len(result.rows)} rows, {len(result.rows) - n} not shown)")
    else:
        out.append(f"({n} row{plural})")
    return "\n".join(out)


def _json_safe(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    return v


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v)
