"""Paths in the demo and Doctor2Vec data code reach DuckDB as bound parameters or through the one quoting
helper: quotes, braces and semicolons in folder names are data, never SQL."""

from __future__ import annotations

import gzip
import os

import pytest

from pipelines.doctor2vec.read import read_demographics

# the last two hold DuckDB's glob characters: the path must name this one file, not a pattern
HOSTILE = ["O'Brien", "it's {x}", "a'); COPY (SELECT 1) TO 'pwned.txt'; --", "Ménière", "site [1]", "q?x *"]


@pytest.mark.parametrize("folder", HOSTILE)
def test_hostile_folder_names_read_as_data(tmp_path, monkeypatch, folder):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / folder / "hosp" / "patients.csv.gz"
    f.parent.mkdir(parents=True)
    with gzip.open(f, "wt") as fh:
        fh.write(
            "subject_id,gender,anchor_age,anchor_year,anchor_year_group,dod\n"
            "1,F,40,2100,2008 - 2010,\n2,M,70,2100,2008 - 2010,\n"
        )
    rows = read_demographics(f, "mimic-iv").to_pylist()
    assert rows == [{"subject_id": 1, "sex": "F", "age": 40}, {"subject_id": 2, "sex": "M", "age": 70}]
    assert not any("pwned" in name for _, _, files in os.walk(tmp_path) for name in files)


def test_cohort_writer_takes_hostile_folder_names(tmp_path, monkeypatch):
    """The synthetic cohort is written with COPY ... TO a quoted literal: a folder named like SQL is data."""
    import duckdb

    from pipelines.demo.cohort_write import _copy

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "x'); COPY (SELECT 1) TO 'pwned.txt'; --" / "t.csv.gz"
    con = duckdb.connect()
    _copy(con, "SELECT 1 AS a, 'O''Brien' AS b", out, "a, b")
    assert duckdb.connect().execute("SELECT * FROM read_csv($1)", [str(out)]).fetchall() == [(1, "O'Brien")]
    assert not any("pwned" in name for _, _, files in __import__("os").walk(tmp_path) for name in files)


def test_load_csv_refuses_a_type_that_is_not_a_duckdb_type(tmp_path):
    """A column's type reaches the SQL text (``try_cast(... AS type)``) only after the quoting helper's
    type check, also for a column the header lacks."""
    import duckdb

    from pipelines.data.readers.common import load_csv

    f = tmp_path / "t.csv"
    f.write_text("a\n1\n")
    con = duckdb.connect()
    with pytest.raises(ValueError, match="not an allowed DuckDB type"):
        load_csv(con, "t", f, {"a": "INTEGER", "b": "INTEGER) IS NULL OR (1"})
    load_csv(con, "t", f, {"a": "INTEGER"})
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]
