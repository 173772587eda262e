"""The one quoting helper for SQL handed to DuckDB.

Prefer bound parameters wherever DuckDB accepts them::

    con.execute("SELECT * FROM read_parquet($1)", [str(path)])
    con.execute("CREATE TABLE t AS SELECT * FROM read_csv($1, header = true)", [str(path)])

DuckDB (2.0) refuses parameters in statements it cannot prepare -- ``CREATE VIEW``, ``COPY ... TO``,
``ATTACH``, ``SET`` -- and a parameter can never stand for a name (a table, a column, an alias) or
for the keys of a ``columns = {...}`` struct. There, and only there, build the text with these
functions; never with an f-string around a raw value.

- :func:`quote_identifier` -- a table/view/column name: ``"..."``, embedded ``"`` doubled.
- :func:`quote_literal` -- a string value (a path, a format): ``'...'``, embedded ``'`` doubled.
- :func:`columns_literal` -- the ``{'col': 'TYPE', ...}`` struct of ``read_csv(..., columns = ...)``,
  the keys quoted, the types checked against :data:`TYPES`.

DuckDB's string literals have no backslash escapes (``'a\\b'`` is the three characters ``a\\b``), so
doubling the quote character is the complete escape. NUL cannot be represented and is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["TYPES", "columns_literal", "quote_identifier", "quote_literal"]

# DuckDB type names accepted as column types in ``columns_literal`` (plus DECIMAL(p, s)).
TYPES = frozenset(
    {
        "VARCHAR",
        "BOOLEAN",
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "FLOAT",
        "DOUBLE",
        "DATE",
        "TIME",
        "TIMESTAMP",
        "TIMESTAMPTZ",
        "INTERVAL",
        "BLOB",
        "UUID",
    }
)
_DECIMAL = re.compile(r"DECIMAL\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)")


def _check(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character: {value!r}")
    return value


def quote_identifier(name: str) -> str:
    """``name`` as a DuckDB identifier: ``"..."`` with embedded ``"`` doubled (refuses empty and NUL)."""
    _check(name, "an SQL identifier")
    if not name:
        raise ValueError("an SQL identifier cannot be empty")
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """``value`` as a DuckDB string literal: ``'...'`` with embedded ``'`` doubled (refuses NUL)."""
    _check(value, "an SQL string literal")
    return "'" + value.replace("'", "''") + "'"


def _type_name(sql_type: object, column: str) -> str:
    _check(sql_type, f"the type of column {column!r}")
    t = " ".join(sql_type.upper().split())
    if t in TYPES:
        return t
    m = _DECIMAL.fullmatch(t)
    if m and 1 <= int(m.group(1)) <= 38 and int(m.group(2)) <= int(m.group(1)):
        return f"DECIMAL({int(m.group(1))}, {int(m.group(2))})"
    raise ValueError(
        f"column {column!r}: {sql_type!r} is not an allowed DuckDB type "
        f"(one of {', '.join(sorted(TYPES))}, or DECIMAL(p, s))"
    )


def columns_literal(columns: Mapping[str, str]) -> str:
    """The struct literal ``{'name': 'TYPE', ...}`` for ``read_csv(..., columns = ...)``.

    Keys are quoted with :func:`quote_literal` (so any column name round-trips); values must be type
    names from :data:`TYPES` or ``DECIMAL(p, s)`` (case-insensitive, written back upper-case).
    """
    if not columns:
        raise ValueError("columns_literal needs at least one column")
    parts = []
    for name, sql_type in columns.items():
        _check(name, "a column name")
        if not name:
            raise ValueError("a column name cannot be empty")
        parts.append(f"{quote_literal(name)}: {quote_literal(_type_name(sql_type, name))}")
    return "{" + ", ".join(parts) + "}"
