"""Read-only DuckDB SQL over a compiled program, with one named view per Parquet file."""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import duckdb

from .errors import OntologyCompilerError
from .program import read_manifest

log = logging.getLogger(__name__)

# Statement types a query may contain: reading only.
ALLOWED = {"SELECT", "EXPLAIN"}


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
    found.sort()
    if len(found) > 1:
        log.warning("%s holds %d programs; using the newest, %s", path, len(found), found[-1][1].name)
    return found[-1][1]


def connect(program: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with views over the program's files (``atoms``, ``edges``, ...)."""
    program = resolve_program(program)
    manifest = read_manifest(program)
    con = duckdb.connect(":memory:")
    for f in manifest.get("files", []):
        view = Path(f["path"]).stem
        path = (program / f["path"]).resolve()
        if not path.is_file():
            raise OntologyCompilerError(f"{path}: listed in the manifest but missing")
        con.execute(f"CREATE VIEW \"{view}\" AS SELECT * FROM read_parquet('{_quote(str(path))}')")
    return con


def _quote(s: str) -> str:
    return s.replace("'", "''")


def run_sql(program: str | Path, query: str) -> SQLResult:
    """Run one or more read-only statements; the last one's result is returned."""
    con = connect(program)
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as e:
        raise SQLError(f"could not parse the query: {e}") from e
    if not statements:
        raise SQLError("empty query")
    for st in statements:
        kind = str(st.type).rsplit(".", 1)[-1]
        if kind not in ALLOWED:
            raise SQLError(
                f"only read-only queries are allowed (SELECT, WITH ... SELECT, EXPLAIN); got {kind}"
            )
    try:
        for st in statements[:-1]:
            con.execute(st)
        cur = con.execute(statements[-1])
        columns = [d[0] for d in cur.description]
        rows = cur.fetchall()
    except duckdb.Error as e:
        raise SQLError(f"{e}\n  views: {', '.join(_views(con))}") from e
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
