"""sqlsafe: identifiers, literals and read_csv column structs round-trip through DuckDB unchanged."""

from __future__ import annotations

import duckdb
import pytest

from ontology_compiler.sqlsafe import TYPES, columns_literal, quote_identifier, quote_literal

NASTY = [
    "O'Brien",
    "it's.parquet",
    "z': 'VARCHAR'}, header=true); COPY (SELECT 1) TO 'x.txt'; SELECT * FROM (SELECT {'a",
    'say "hi"',
    "\"; COPY (SELECT 1) TO 'x.txt'; --",
    "a;b",
    "{braces}",
    "back\\slash\\",
    "new\nline\r\n",
    "tab\there",
    "Ménière",
    "日本語 ✓",
    "--comment",
    "/* c */",
    "$1",
    "?",
    "''",
    '""',
    " ",
]


@pytest.fixture
def con(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = duckdb.connect(":memory:")
    yield c
    c.close()
    assert list(tmp_path.iterdir()) == [], "a statement wrote a file"


@pytest.mark.parametrize("value", NASTY)
def test_literal_round_trips(con, value):
    assert con.execute(f"SELECT {quote_literal(value)}").fetchone()[0] == value


@pytest.mark.parametrize("name", NASTY)
def test_identifier_round_trips(con, name):
    con.execute(f"CREATE VIEW {quote_identifier(name)} AS SELECT 1 AS {quote_identifier(name)}")
    cur = con.execute(f"SELECT {quote_identifier(name)} FROM {quote_identifier(name)}")
    assert cur.description[0][0] == name and cur.fetchone() == (1,)
    assert con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall() == [(name,)]


def test_columns_literal_round_trips_through_read_csv(con, tmp_path):
    cols = {name: "VARCHAR" for name in NASTY}
    cols["n"] = "bigint"
    data = tmp_path / "in.csv"
    data.write_text(",".join(["v"] * len(NASTY) + ["7"]) + "\n", encoding="utf-8")
    try:
        cur = con.execute(
            f"SELECT * FROM read_csv($1, header = false, columns = {columns_literal(cols)})", [str(data)]
        )
        assert [d[0] for d in cur.description] == list(cols)
        assert cur.fetchall() == [tuple(["v"] * len(NASTY) + [7])]
        assert [str(d[1]) for d in cur.description][-1] == "BIGINT"
    finally:
        data.unlink()


def test_columns_literal_types():
    assert (
        columns_literal({"a": "varchar", "b": " Decimal( 10 , 2 ) "})
        == "{'a': 'VARCHAR', 'b': 'DECIMAL(10, 2)'}"
    )
    assert {"VARCHAR", "BIGINT", "INTEGER", "SMALLINT", "DOUBLE", "BOOLEAN", "DATE", "TIMESTAMP"} <= TYPES
    for bad in (
        "VARCHAR'); COPY (SELECT 1) TO 'x",
        "TEXT[]",
        "DECIMAL(99, 2)",
        "DECIMAL(2, 3)",
        "",
        "STRUCT(a INT)",
    ):
        with pytest.raises(ValueError, match="not an allowed DuckDB type"):
            columns_literal({"a": bad})
    with pytest.raises(ValueError, match="at least one"):
        columns_literal({})
    with pytest.raises(ValueError, match="empty"):
        columns_literal({"": "VARCHAR"})
    with pytest.raises(TypeError):
        columns_literal({"a": 1})  # type: ignore[dict-item]


def test_refuses_nul_empty_and_non_strings():
    for f in (quote_identifier, quote_literal):
        with pytest.raises(ValueError, match="NUL"):
            f("a\x00b")
        with pytest.raises(TypeError):
            f(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        quote_identifier("")
    assert quote_literal("") == "''"
    with pytest.raises(ValueError, match="NUL"):
        columns_literal({"a\x00": "VARCHAR"})


def test_exact_forms():
    assert quote_identifier('a"b') == '"a""b"'
    assert quote_literal("it's") == "'it''s'"
    assert quote_literal("a\\'b") == "'a\\''b'"
