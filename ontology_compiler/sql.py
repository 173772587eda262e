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

Anyone who wants more than this opens the Parquet files with DuckDB directly (see the README).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from .errors import OntologyCompilerError, ProgramFormatError
from .program import read_manifest

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


def connect(program: str | Path) -> duckdb.DuckDBPyConnection:
    """A locked in-memory DuckDB connection with views over the program's tables (``atoms``, ``edges``, ...).

    See the module docstring for what the sandbox refuses.
    """
    tables = program_tables(resolve_program(program))
    con = duckdb.connect(":memory:", config=dict(LOCKED))
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


def run_sql(program: str | Path, query: str) -> SQLResult:
    """Run one or more read-only statements; the last one's result is returned."""
    con = connect(program)
    try:
        try:
            statements = con.extract_statements(query)
        except duckdb.Error as e:
            raise SQLError(f"could not parse the query: {e}") from e
        if not statements:
            raise SQLError("empty query")
        for st in statements:
            check_read_only(con, st)
        try:
            for st in statements[:-1]:
                con.execute(st)
            cur = con.execute(statements[-1])
            columns = [d[0] for d in cur.description]
            rows = cur.fetchall()
        except duckdb.PermissionException as e:
            raise SQLError(
                f"{e}\n  hrrbert sql reads only the program's views ({', '.join(_views(con))}); for anything "
                "else, open the program's Parquet files with DuckDB directly (see the README)"
            ) from e
        except duckdb.Error as e:
            raise SQLError(f"{e}\n  views: {', '.join(_views(con))}") from e
    finally:
        con.close()
    return SQLResult(columns, rows)


def _views(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()
    ]


def format_result(result: SQLResult, fmt: str = "table", max_rows: int = 50) -> str:
    """Render as an aligned text table, CSV, or JSON lines."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(result.columns)
        w.writerows(result.rows)
        return buf.getvalue().rstrip("\n")
    if fmt == "json":
        return "\n".join(
            json.dumps(dict(zip(result.columns, r, strict=True)), default=str, ensure_ascii=False)
            for r in result.rows
        )
    rows = [[_cell(v) for v in r] for r in result.rows[:max_rows]]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(result.columns)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    out = [line(result.columns), line(["-" * w for w in widths])] + [line(r) for r in rows]
    more = len(result.rows) - len(rows)
    out.append(
        f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''}"
        + (f", {more} not shown)" if more else ")")
    )
    return "\n".join(out)


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v)
