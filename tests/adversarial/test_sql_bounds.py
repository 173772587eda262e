"""``hrrbert sql`` is bounded: a timeout interrupts a runaway query, DuckDB's memory limit and threads are
fixed before the configuration is locked, ``--max-rows`` bounds what is fetched (not only what is printed),
and every error is one clear message (exit 1; a bad option is a usage error, exit 2)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from ontology_compiler import sql
from ontology_compiler.sql import SQLError, run_sql
from pipelines.cli import data as cli_data
from pipelines.cli import main as hrrbert_main

RUNAWAY = "SELECT count(*) FROM range(100000000000)"
CROSS_JOIN = "SELECT count(*) FROM edges a, edges b, edges c, edges d, edges e"
HUGE = "SELECT * FROM range(1000000000000)"  # a trillion rows: fetching them all never ends
NON_FINITE = (
    "SELECT 'nan'::DOUBLE AS a, 'inf'::DOUBLE AS b, '-inf'::FLOAT AS c, 1.5::DOUBLE AS d, "
    "['nan'::DOUBLE, 2.0] AS l, {'x': 'inf'::DOUBLE, 'y': 'q'} AS s"
)


@pytest.fixture(scope="module")
def program(baseline):
    return baseline.path


def _sql(program, *args: str):
    return CliRunner().invoke(hrrbert_main, ["sql", str(program), *args])


def _no_nan(token: str):
    raise AssertionError(f"invalid JSON number {token}")


@pytest.mark.parametrize("query", [RUNAWAY, CROSS_JOIN])
def test_a_runaway_query_stops_at_its_timeout(program, query):
    t0 = time.monotonic()
    with pytest.raises(SQLError, match=r"ran past its timeout of 0.5 s and was interrupted.*--timeout"):
        run_sql(program, query, timeout=0.5, threads=1)
    assert time.monotonic() - t0 < 5


def test_a_timeout_through_the_command_is_one_clear_line(program):
    t0 = time.monotonic()
    res = _sql(program, RUNAWAY, "--timeout", "0.5", "--threads", "1")
    assert time.monotonic() - t0 < 5
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines() == [
        "Error: the query ran past its timeout of 0.5 s and was interrupted "
        "(raise it with --timeout SECONDS, or timeout= in run_sql)"
    ]


def test_timeout_zero_or_none_means_no_limit(program):
    assert run_sql(program, "SELECT 42", timeout=0).rows == [(42,)]
    assert run_sql(program, "SELECT 42", timeout=None).rows == [(42,)]
    assert _sql(program, "SELECT 42", "--timeout", "0").exit_code == 0


def test_exceeding_the_memory_limit_is_a_clear_error(program):
    query = "SELECT list(range) FROM range(100000000)"
    with pytest.raises(SQLError, match=r"Out of Memory.*\n.*memory limit of 50MB.*--memory-limit") as e:
        run_sql(program, query, memory_limit="50MB", threads=1)
    assert "SET " not in str(e.value)
    res = _sql(program, query, "--memory-limit", "50MB", "--threads", "1")
    assert res.exit_code == 1, res.output
    assert res.output.startswith("Error: Out of Memory") and "--memory-limit" in res.output
    assert "Traceback" not in res.output and "SET " not in res.output


def test_limits_are_set_before_the_configuration_is_locked(program):
    got = run_sql(
        program,
        "SELECT current_setting('threads'), current_setting('memory_limit')",
        memory_limit="100MB",
        threads=1,
    )
    assert got.rows[0][0] == 1 and "MiB" in got.rows[0][1]
    with pytest.raises(SQLError, match="read-only"):
        run_sql(program, "SET threads = 8")
    con = sql.connect(program, threads=1)
    try:
        with pytest.raises(Exception, match="(?i)lock"):
            con.execute("SET threads = 8")
    finally:
        con.close()


@pytest.mark.parametrize(
    "args, name",
    [
        (["--memory-limit", "lots"], "--memory-limit"),
        (["--threads", "0"], "--threads"),
        (["--timeout", "-1"], "--timeout"),
        (["--max-rows", "-1"], "--max-rows"),
    ],
)
def test_bad_limits_are_usage_errors_naming_the_option(program, args, name):
    res = _sql(program, "SELECT 1", *args)
    assert res.exit_code == 2, res.output
    assert name in res.output and "Traceback" not in res.output


def test_bad_limits_through_the_api(program):
    with pytest.raises(SQLError, match="invalid memory limit 'lots'"):
        run_sql(program, "SELECT 1", memory_limit="lots")
    with pytest.raises(SQLError, match="threads"):
        run_sql(program, "SELECT 1", threads=0)
    with pytest.raises(SQLError, match="max_rows"):
        run_sql(program, "SELECT 1", max_rows=-1)
    with pytest.raises(SQLError, match="timeout"):
        run_sql(program, "SELECT 1", timeout=-1)


def test_max_rows_fetches_at_most_n_rows(program):
    t0 = time.monotonic()
    r = run_sql(program, HUGE, max_rows=3)
    assert time.monotonic() - t0 < 5
    assert r.rows == [(0,), (1,), (2,)] and r.truncated
    exact = run_sql(program, "SELECT * FROM range(3)", max_rows=3)
    assert exact.rows == [(0,), (1,), (2,)] and not exact.truncated
    assert len(run_sql(program, "SELECT * FROM range(70)").rows) == 70  # the API's default: all rows


def test_the_command_prints_exactly_n_rows_and_says_it_cut(program):
    res = _sql(program, HUGE, "--max-rows", "3")
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert lines[2:5] == ["0", "1", "2"] and len(lines) == 6
    assert lines[-1].startswith("(3 rows shown; output cut") and "--max-rows" in lines[-1]
    for fmt, header in (("csv", ["range"]), ("json", [])):
        res = _sql(program, HUGE, "--max-rows", "3", "--format", fmt)
        assert res.exit_code == 0, res.output
        assert res.stdout.strip().splitlines() == header + (
            ["0", "1", "2"] if fmt == "csv" else ['{"range": 0}', '{"range": 1}', '{"range": 2}']
        )
        assert "output cut at --max-rows 3" in res.stderr


@pytest.mark.parametrize("n", [1, 2, 50])
def test_no_row_is_lost_when_the_result_has_exactly_max_rows(program, n):
    res = _sql(program, f"SELECT * FROM range({n})", "--max-rows", str(n))
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert lines[2:-1] == [str(i) for i in range(n)]
    assert lines[-1] == f"({n} row{'s' if n != 1 else ''})"
    assert res.stderr == ""


def test_max_rows_zero_prints_every_row(program):
    res = _sql(program, "SELECT * FROM range(120)", "--max-rows", "0")
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert lines[2:-1] == [str(i) for i in range(120)] and lines[-1] == "(120 rows)"
    res = _sql(program, "SELECT * FROM range(120)", "--max-rows", "0", "--format", "csv")
    assert len(res.stdout.strip().splitlines()) == 121


def test_json_output_is_valid_json_with_null_for_nan_and_infinity(program):
    res = _sql(program, NON_FINITE, "--format", "json")
    assert res.exit_code == 0, res.output
    (line,) = res.stdout.strip().splitlines()
    row = json.loads(line, parse_constant=_no_nan)
    assert row == {"a": None, "b": None, "c": None, "d": 1.5, "l": [None, 2.0], "s": {"x": None, "y": "q"}}
    text = sql.format_result(run_sql(program, NON_FINITE), fmt="json")
    json.dumps(json.loads(text, parse_constant=_no_nan), allow_nan=False)


def test_the_depth_error_advises_what_works(program):
    deep = "SELECT " + "(" * 1100 + "1" + ")" * 1100
    with pytest.raises(SQLError, match="expression depth") as e:
        run_sql(program, deep)
    assert "SET " not in str(e.value) and "nest fewer expressions" in str(e.value)
    res = _sql(program, deep)
    assert res.exit_code == 1 and "SET " not in res.output and "Traceback" not in res.output


def test_the_command_defaults_are_the_api_defaults():
    assert cli_data.SQL_TIMEOUT == sql.DEFAULT_TIMEOUT
    assert cli_data.SQL_MEMORY_LIMIT == sql.DEFAULT_MEMORY_LIMIT
    assert cli_data.SQL_THREADS == sql.DEFAULT_THREADS
    params = {p.name: p.default for p in cli_data.sql_cmd.params}
    assert (params["timeout"], params["memory_limit"], params["threads"]) == (
        sql.DEFAULT_TIMEOUT,
        sql.DEFAULT_MEMORY_LIMIT,
        sql.DEFAULT_THREADS,
    )
