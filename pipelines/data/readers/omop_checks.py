"""Two checks the OMOP reader runs on its loaded tables (:mod:`.omop_load`): a data-quality finding counted
over the rows where a condition holds, with examples naming each row's file and line (or row); and exact
duplicate rows dropped, with two different rows of one key an error naming both lines."""

from __future__ import annotations

import duckdb

from ontology_compiler.api import quote_identifier

from .common import EXAMPLES, Findings, one
from .omop_load import Where


def finding(
    con: duckdb.DuckDBPyConnection,
    f: Findings,
    key: str,
    where: Where,
    table: str,
    cond: str,
    detail: str,
    what: str,
) -> int:
    """Record the rows of the temp table ``table`` where the SQL ``cond`` holds as the finding ``key``
    (``what`` says what was done with them); each example is a row's place (its ``_row`` in ``where``) and
    ``detail``, an SQL text expression over the row. Returns the count."""
    n = one(con, f"SELECT count(*) FROM {table} WHERE {cond}")[0]
    rows = (
        con.execute(
            f"SELECT _row, {detail} FROM {table} WHERE {cond} ORDER BY _row LIMIT {EXAMPLES}"
        ).fetchall()
        if n
        else []
    )
    f.finding(key, n, [f"{where.at(r)}: {d}" for r, d in rows], what)
    return int(n)


def drop_duplicates(
    con: duckdb.DuckDBPyConnection,
    f: Findings,
    key: str,
    where: Where,
    table: str,
    id_columns: tuple[str, ...] | None,
) -> None:
    """Drop the rows of the temp table ``table`` equal to an earlier one in every column read (the finding
    ``key``); then, with ``id_columns``, raise when two different rows share those columns' values."""
    t = quote_identifier(table)
    cols = [c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE {t})").fetchall() if c != "_row"]
    allc = ", ".join(quote_identifier(c) for c in cols)
    dup = con.execute(
        f"SELECT _row, first_value(_row) OVER (PARTITION BY {allc} ORDER BY _row) AS first FROM {t} "
        "QUALIFY _row <> first ORDER BY _row"
    ).fetchall()
    f.finding(
        key,
        len(dup),
        [f"{where.at(a)} repeats {where.at(b).removeprefix(where.name + ' ')}" for a, b in dup],
        f"exact duplicate rows of {where.name} dropped",
    )
    if dup:
        con.execute(f"DELETE FROM {t} WHERE _row NOT IN (SELECT min(_row) FROM {t} GROUP BY {allc})")
    if not id_columns:
        return
    k = ", ".join(quote_identifier(c) for c in id_columns)
    rows = con.execute(
        f"SELECT {k}, list(_row ORDER BY _row) FROM {t} WHERE "
        f"{' AND '.join(f'{quote_identifier(c)} IS NOT NULL' for c in id_columns)} GROUP BY {k} "
        "HAVING count(*) > 1 ORDER BY min(_row) LIMIT 1"
    ).fetchall()
    if rows:
        *ids, lines = rows[0]
        shown = ", ".join(f"{c} {v}" for c, v in zip(id_columns, ids, strict=True))
        raise where.error(
            f"{shown} on {len(lines)} different rows ({'; '.join(where.at(r) for r in lines[:EXAMPLES])})",
            lines[1],
            expected=f"one row per {', '.join(id_columns)} (rows equal in every column read are dropped as "
            "duplicates)",
        )
