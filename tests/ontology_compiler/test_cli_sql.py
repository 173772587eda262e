"""CLI and SQL: compile-ontology prints a summary; hrrbert sql is read-only; the README's queries run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from ontology_compiler import run_sql
from ontology_compiler.cli import main as compile_main
from ontology_compiler.sql import SQLError
from pipelines.cli import main as hrrbert_main

README = Path(__file__).resolve().parents[2] / "README.md"


def test_compile_ontology_cli_prints_summary(fixture_release, tmp_path):
    runner = CliRunner()
    res = runner.invoke(compile_main, [str(fixture_release), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for word in ("concepts", "atoms", "relations", "edges", "max multiplicity", "coverage", "program"):
        assert word in res.output
    path = Path(res.output.strip().splitlines()[-1].split()[1])
    assert (path / "manifest.json").is_file()
    again = runner.invoke(compile_main, [str(fixture_release), "--out", str(tmp_path)])
    assert again.exit_code == 0 and "up to date" in again.output


def test_cli_reports_bad_input_clearly(tmp_path):
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(compile_main, [str(tmp_path / "empty"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "required RF2 Snapshot file(s) missing" in res.output


def test_sql_views_and_read_only(compiled):
    r = run_sql(compiled.path, "SELECT count(*) FROM edges; ")
    assert r.rows[0][0] == compiled.manifest["counts"]["edges"]
    names = {
        row[0]
        for row in run_sql(compiled.path, "SELECT view_name FROM duckdb_views() WHERE NOT internal").rows
    }
    assert {
        "atoms",
        "relations",
        "concepts",
        "edges",
        "slices",
        "snomed_concepts",
        "snomed_relationships",
        "snomed_descriptions",
        "icd_map",
    } <= names
    for bad in ("CREATE TABLE t AS SELECT 1", "COPY (SELECT 1) TO 'x.csv'", "SELECT 1; DROP VIEW atoms"):
        with pytest.raises(SQLError, match="read-only"):
            run_sql(compiled.path, bad)
    with pytest.raises(SQLError, match="views"):
        run_sql(compiled.path, "SELECT * FROM no_such_table")


def test_sql_accepts_a_release_folder_of_programs(compiled):
    r = run_sql(compiled.path.parent, "SELECT count(*) FROM concepts")
    assert r.rows[0][0] == compiled.manifest["counts"]["concepts"]


def _readme_sql_commands() -> list[list[str]]:
    cmds = []
    for line in README.read_text(encoding="utf-8").splitlines():
        if re.match(r"^\.venv/bin/hrrbert sql ", line):
            cmds.append(shlex.split(line)[1:])
    return cmds


def test_readme_queries_run_as_written(fixture_release, tmp_path):
    """Every README query answers rows on the fixture compiled with its OMOP and NLM maps (the OMOP query
    reads codes both sources map)."""
    from ontology_compiler import compile_ontology

    maps = Path(__file__).resolve().parents[1] / "data" / "mapping_sources"
    compiled = compile_ontology(fixture_release, out=tmp_path, omop=maps / "omop", nlm_icd9=maps / "nlm")
    cmds = _readme_sql_commands()
    assert len(cmds) >= 4
    runner = CliRunner()
    for argv in cmds:
        assert argv[0] == "sql" and argv[1] == "artifacts/programs/demo_icd10cm_default"
        argv = [argv[0], str(compiled.path.parent), *argv[2:]]
        res = runner.invoke(hrrbert_main, argv)
        assert res.exit_code == 0, res.output
        lines = res.output.strip().splitlines()
        assert re.match(r"^\((\d+) rows?", lines[-1]) and not lines[-1].startswith("(0 rows")


def test_sql_output_formats(compiled):
    runner = CliRunner()
    q = "SELECT code, code_dotted FROM concepts WHERE code = 'E119'"
    csv_out = runner.invoke(hrrbert_main, ["sql", str(compiled.path), q, "--format", "csv"]).output
    assert csv_out.strip().splitlines() == ["code,code_dotted", "E119,E11.9"]
    js = runner.invoke(hrrbert_main, ["sql", str(compiled.path), q, "--format", "json"]).output
    assert '"code_dotted": "E11.9"' in js


def test_readme_queries_are_the_demo_queries():
    from pipelines.demo.run import QUERIES

    assert [argv[2] for argv in _readme_sql_commands()] == list(QUERIES.values())


def test_cli_mapping_options_print_the_coverage_table(fixture_release, tmp_path):
    m = Path(__file__).resolve().parents[1] / "data" / "mapping_sources"
    args = [
        str(fixture_release),
        "--out",
        str(tmp_path),
        "--omop",
        str(m / "omop"),
        "--nlm-icd9",
        str(m / "nlm"),
        "--gem",
        str(m / "gem"),
        "--codes",
        str(m / "d_icd_diagnoses.csv"),
        "--code-counts",
        str(m / "code_counts.csv"),
        "--fallback",
        "icd",
    ]
    res = CliRunner().invoke(compile_main, args)
    assert res.exit_code == 0, res.output
    header = next(line for line in res.output.splitlines() if "one_to_one" in line)
    assert header.split() == ["one_to_one", "one_to_many", "conditional", "chain", "fallback", "unmapped"]
    assert "occurrences lost: 30 of 27,940 (0.11 %)" in res.output
    bad = CliRunner().invoke(compile_main, [*args[:3], "--map-policy", str(m / "code_counts.csv")])
    assert bad.exit_code == 1 and "TOML" in bad.output
