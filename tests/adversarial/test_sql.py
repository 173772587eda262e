"""``hrrbert sql`` is a sandbox: no statement reads or writes outside the program, whatever the SQL or
the manifest says, and it answers only from files whose hashes match the manifest."""

from __future__ import annotations

import json
import logging
import re
import shlex
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ontology_compiler.errors import ProgramFormatError
from ontology_compiler.sql import LOCKED, PROGRAM_TABLES, SQLError, connect, run_sql
from pipelines.cli import main as hrrbert_main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "snomed_mini_20220531"
SECRET = "s3cr3t-line-that-must-not-leak"


@pytest.fixture(scope="module")
def compiled_program(tmp_path_factory) -> Path:
    """The fixture release compiled once with its OMOP and NLM map files (as the README's mapping example
    does, so that the README's OMOP query has codes both sources map), under a folder whose name needs
    quoting in SQL."""
    from ontology_compiler import compile_ontology

    out = tmp_path_factory.mktemp("programs") / 'O\'Brien "x"; {y}'
    maps = ROOT / "tests" / "data" / "mapping_sources"
    return compile_ontology(FIXTURE, out=out, omop=maps / "omop", nlm_icd9=maps / "nlm").path


@pytest.fixture
def sandbox(tmp_path, monkeypatch, compiled_program):
    """cwd is an empty folder holding a secret file; after the test, nothing new may be in it."""
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    monkeypatch.chdir(work)
    before_program = sorted(p.relative_to(compiled_program) for p in compiled_program.rglob("*"))
    yield work
    assert sorted(p.name for p in work.iterdir()) == ["secret.txt"], "a statement wrote a file into cwd"
    assert sorted(p.relative_to(compiled_program) for p in compiled_program.rglob("*")) == before_program
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd"]


def _program_copy(compiled_program: Path, tmp_path: Path, name: str = "prog") -> Path:
    dst = tmp_path / name
    shutil.copytree(compiled_program, dst)
    return dst


ESCAPES = [
    # EXPLAIN ANALYZE runs its statement: only a SELECT may be explained
    "EXPLAIN ANALYZE COPY (SELECT 42) TO 'x.csv'",
    "explain analyse copy (select 42) to 'x.csv'",
    "EXPLAIN (ANALYZE) COPY (SELECT 42) TO 'x.csv'",
    "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 42) TO 'x.csv'",
    "/* c */ EXPLAIN /* d */ ANALYZE COPY (SELECT 42) TO 'x.csv'",
    "-- c\nEXPLAIN ANALYZE\n-- d\nCOPY (SELECT 42) TO 'x.csv'",
    "EXPLAIN COPY (SELECT 42) TO 'x.csv'",
    "EXPLAIN ANALYZE INSTALL httpfs",
    "EXPLAIN ANALYZE LOAD httpfs",
    "EXPLAIN ANALYZE ATTACH 'x.db'",
    "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
    "EXPLAIN ANALYZE EXPORT DATABASE 'exp'",
    # file readers inside a SELECT
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv('secret.txt', header = false)",
    "SELECT * FROM read_csv_auto('secret.txt')",
    "SELECT * FROM read_text('secret.txt')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM read_json('secret.txt')",
    "SELECT * FROM read_json_auto('secret.txt')",
    "SELECT * FROM read_ndjson('secret.txt')",
    "SELECT * FROM sniff_csv('secret.txt')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM glob('/')",
    "SELECT * FROM glob('*')",
    "SELECT * FROM 'secret.txt'",
    "FROM '/etc/passwd'",
    "SELECT * FROM query('SELECT * FROM read_text(''secret.txt'')')",
    "WITH s AS (SELECT * FROM read_text('secret.txt')) SELECT * FROM s",
    "SELECT (SELECT content FROM read_text('secret.txt'))",
    # statements that are not reads
    "COPY (SELECT 1) TO 'x.csv'",
    "COPY atoms TO 'x.parquet' (FORMAT parquet)",
    "COPY atoms FROM 'secret.txt'",
    "EXPORT DATABASE 'exp'",
    "IMPORT DATABASE 'exp'",
    "INSTALL httpfs",
    "FORCE INSTALL httpfs",
    "LOAD httpfs",
    "ATTACH 'x.db' AS x",
    "ATTACH ':memory:' AS m",
    "DETACH memory",
    "USE memory",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET lock_configuration",
    "SET temp_directory = '.'",
    "PRAGMA enable_profiling",
    "PRAGMA profiling_output = 'x.txt'",
    "CALL duckdb_views()",
    "CREATE TABLE t AS SELECT 1",
    "CREATE MACRO m() AS 1",
    "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    "DROP VIEW atoms",
    "INSERT INTO atoms SELECT * FROM atoms",
    "DELETE FROM atoms",
    "UPDATE atoms SET label = 'x'",
    "ALTER VIEW atoms RENAME TO a",
    "CHECKPOINT",
    "VACUUM",
    "BEGIN TRANSACTION",
    "SELECT 1; COPY (SELECT 1) TO 'x.csv'",
    "SELECT 1; SET enable_external_access = true; SELECT * FROM read_text('secret.txt')",
]


@pytest.mark.parametrize("query", ESCAPES)
def test_escape_is_refused_and_writes_nothing(sandbox, compiled_program, query):
    with pytest.raises(SQLError) as e:
        run_sql(compiled_program, query)
    assert SECRET not in str(e.value) and "root:" not in str(e.value)


@pytest.mark.parametrize(
    "query",
    [
        "EXPLAIN ANALYZE COPY (SELECT 42) TO 'x.csv'",
        "EXPLAIN ANALYZE INSTALL httpfs",
        "SELECT * FROM read_text('secret.txt')",
        "SELECT * FROM glob('/*')",
        "COPY (SELECT 1) TO 'x.csv'",
    ],
)
def test_escape_through_the_command_exits_1(sandbox, compiled_program, query):
    res = CliRunner().invoke(hrrbert_main, ["sql", str(compiled_program), query])
    assert res.exit_code == 1, res.output
    assert "Error" in res.output and SECRET not in res.output and "Traceback" not in res.output


def test_reads_are_refused_with_a_clear_message(sandbox, compiled_program):
    with pytest.raises(
        SQLError,
        match=r"(?s)disabled by configuration.*views \(atoms, .*open the program's Parquet files with DuckDB",
    ):
        run_sql(compiled_program, "SELECT * FROM read_text('secret.txt')")
    with pytest.raises(SQLError, match="read-only.*EXPLAIN of COPY"):
        run_sql(compiled_program, "EXPLAIN ANALYZE COPY (SELECT 42) TO 'x.csv'")


def test_the_connection_is_locked(sandbox, compiled_program):
    con = connect(compiled_program)
    for name, value in LOCKED.items():
        got = con.execute("SELECT current_setting($1)", [name]).fetchone()[0]
        assert str(got).lower() == str(value).lower(), name


@pytest.mark.parametrize(
    "query",
    [
        "SELECT count(*) FROM edges",
        "EXPLAIN SELECT count(*) FROM edges",
        "EXPLAIN ANALYZE SELECT count(*) FROM edges",
        "/* why */ EXPLAIN (FORMAT json) SELECT 1",
        "WITH a AS (SELECT * FROM atoms) SELECT count(*) FROM a",
        "FROM concepts LIMIT 3",
        "DESCRIBE atoms",
        "SUMMARIZE slices",
        "SHOW TABLES",
        "SELECT 1; SELECT 2",
        "SELECT 'COPY (SELECT 1) TO ''x.csv''' AS s",
    ],
)
def test_reads_of_the_program_still_work(sandbox, compiled_program, query):
    assert run_sql(compiled_program, query).rows


@pytest.mark.parametrize(
    "name",
    [
        "x'); COPY (SELECT 1) TO 'pwned.txt'; --.parquet",
        "x\" AS SELECT 1; COPY (SELECT 1) TO 'pwned.txt'; --.parquet",
        "../../pwned.parquet",
        "graph/../atoms.parquet",
    ],
)
def test_crafted_manifest_file_name_is_ignored(sandbox, compiled_program, tmp_path, caplog, name):
    prog = _program_copy(compiled_program, tmp_path / "cwd")  # inside cwd: a file written there shows
    manifest = json.loads((prog / "manifest.json").read_text(encoding="utf-8"))
    atoms = next(f for f in manifest["files"] if f["path"] == "atoms.parquet")
    if "/" not in name:
        shutil.copy(prog / "atoms.parquet", prog / name)
    manifest["files"].append(dict(atoms, path=name))
    (prog / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="ontology_compiler.sql"):
        r = run_sql(prog, "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1")
    assert sorted(v for (v,) in r.rows) == sorted(
        PROGRAM_TABLES[f["path"]] for f in manifest["files"] if f["path"] in PROGRAM_TABLES
    )
    assert "not a program table" in caplog.text
    assert not list(tmp_path.rglob("pwned*.txt"))
    res = CliRunner().invoke(hrrbert_main, ["sql", str(prog), "SELECT count(*) FROM atoms"])
    assert res.exit_code == 0, res.output
    shutil.rmtree(prog)


def test_swapped_parquet_file_is_refused(sandbox, compiled_program, tmp_path):
    prog = _program_copy(compiled_program, tmp_path)
    relations = pq.read_table(prog / "relations.parquet")
    pq.write_table(relations.slice(0, 1), prog / "relations.parquet")  # a valid Parquet file, other rows
    with pytest.raises(ProgramFormatError, match=r"relations\.parquet: sha256 .* differs from the manifest"):
        run_sql(prog, "SELECT count(*) FROM atoms")
    res = CliRunner().invoke(hrrbert_main, ["sql", str(prog), "SELECT count(*) FROM relations"])
    assert res.exit_code == 1 and "relations.parquet" in res.output and "sha256" in res.output
    shutil.rmtree(prog)


def test_missing_or_non_parquet_file_is_refused(sandbox, compiled_program, tmp_path):
    import hashlib

    prog = _program_copy(compiled_program, tmp_path)
    (prog / "graph" / "icd_map.parquet").unlink()
    with pytest.raises(ProgramFormatError, match=r"icd_map\.parquet: listed in the manifest but missing"):
        run_sql(prog, "SELECT 1")
    manifest = json.loads((prog / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"] = [f for f in manifest["files"] if f["path"] != "graph/icd_map.parquet"]
    data = b"not parquet"
    (prog / "slices.parquet").write_bytes(data)
    for f in manifest["files"]:
        if f["path"] == "slices.parquet":
            f["sha256"] = hashlib.sha256(data).hexdigest()
    (prog / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ProgramFormatError, match=r"slices\.parquet: not a readable Parquet file"):
        run_sql(prog, "SELECT 1")
    shutil.rmtree(prog)


def test_readme_queries_answer_under_a_quoted_folder(sandbox, compiled_program):
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    cmds = [shlex.split(line)[1:] for line in lines if re.match(r"^\.venv/bin/hrrbert sql ", line)]
    assert len(cmds) >= 3
    for argv in cmds:
        res = CliRunner().invoke(hrrbert_main, [argv[0], str(compiled_program.parent), *argv[2:]])
        assert res.exit_code == 0, res.output
        assert re.match(r"^\((\d+) rows?", res.output.strip().splitlines()[-1])
        assert not res.output.strip().splitlines()[-1].startswith("(0 rows")


def test_program_tables_cover_what_the_compilers_write(compiled_program, tmp_path):
    from ontology_compiler import compile_source

    owl = compile_source(
        ROOT / "tests" / "data" / "owl_mini.owl",
        out=tmp_path,
        codes=ROOT / "tests" / "data" / "owl_mini_codes.txt",
    ).path
    for program in (compiled_program, owl):
        manifest = json.loads((program / "manifest.json").read_text(encoding="utf-8"))
        assert {f["path"] for f in manifest["files"]} <= set(PROGRAM_TABLES)
    assert run_sql(owl, "SELECT count(*) FROM owl_classes JOIN owl_code_map USING (key)").rows[0][0] > 0
    assert len(set(PROGRAM_TABLES.values())) == len(PROGRAM_TABLES)
