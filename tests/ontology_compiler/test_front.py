"""One entry point for both input kinds (front.compile_source), the option rules, summaries, CLI flags."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from ontology_compiler import OptionError, compile_ontology, compile_owl, compile_source
from ontology_compiler.cli import main
from ontology_compiler.front import COMMON_OPTIONS, OWL_OPTIONS, RF2_OPTIONS, check_options, detect_format
from ontology_compiler.summary import owl_summary, rf2_summary, summary

DATA = Path(__file__).resolve().parents[1] / "data"
OWL = DATA / "owl_mini.owl"
CODES = DATA / "owl_mini_codes.txt"


def test_option_tables_are_the_compile_functions_keywords():
    def keywords(fn):
        return {n for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}

    assert keywords(compile_ontology) == set(COMMON_OPTIONS) | set(RF2_OPTIONS)
    assert keywords(compile_owl) == set(COMMON_OPTIONS) | set(OWL_OPTIONS)


def test_format_detection(fixture_release):
    assert detect_format(fixture_release) == "rf2" and detect_format(OWL) == "owl"
    assert detect_format(OWL, "owl") == "owl"
    with pytest.raises(OptionError, match="needs an OWL file"):
        detect_format(fixture_release, "owl")
    with pytest.raises(OptionError, match="needs an RF2 release folder"):
        detect_format(OWL, "rf2")
    with pytest.raises(OptionError, match="--format must be one of"):
        detect_format(OWL, "obo")


def test_option_rules():
    check_options("owl", {"codes": "x", "as_of": None, "stated": False, "code_prefixes": ()})  # not given
    with pytest.raises(OptionError, match=r"--as-of, --fallback: RF2 options, not for --format owl"):
        check_options("owl", {"as_of": "20220131", "fallback": "icd"})
    with pytest.raises(OptionError, match=r"--code-prefix: OWL options, only for --format owl"):
        check_options("rf2", {"code_prefixes": ("ICD10CM",)})
    with pytest.raises(OptionError, match="unknown option"):
        check_options("rf2", {"colour": "red"})


def test_compile_source_takes_both_kinds(compiled, fixture_release, tmp_path):
    rf2 = compile_source(fixture_release, out=compiled.path.parents[1])
    assert rf2.program_id == compiled.program_id and not rf2.written
    owl = compile_source(OWL, codes=CODES, out=tmp_path, as_of=None)
    assert owl.program_id == compile_owl(OWL, codes=CODES, out=tmp_path).program_id
    assert summary(rf2) == rf2_summary(rf2) and summary(owl) == owl_summary(owl)
    assert summary(rf2).endswith("(up to date: identical inputs, nothing written)")


def test_cli_version_and_logging_flags(fixture_release, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["--version"])
    assert res.exit_code == 0 and res.output.startswith("compile-ontology, version ")
    args = [str(fixture_release), "--out", str(tmp_path)]
    res = runner.invoke(main, args)  # INFO by default: the write is logged
    assert res.exit_code == 0 and "INFO ontology_compiler.manifest: wrote program" in res.output
    assert logging.getLogger().level == logging.INFO
    res = runner.invoke(main, [*args, "-q"])
    assert res.exit_code == 0 and res.output.strip() == res.output.strip().splitlines()[-1]
    assert logging.getLogger().level == logging.WARNING
    res = runner.invoke(main, [*args, "-v"])
    assert res.exit_code == 0 and logging.getLogger().level == logging.DEBUG
    res = runner.invoke(main, [*args, "-v", "-q"])
    assert res.exit_code == 1 and "exclude each other" in res.output


def test_cli_errors_are_click_errors(fixture_release, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, [str(fixture_release), "--release", "latest"])
    assert res.exit_code == 2 and "'latest' is not one of" in res.output
    res = runner.invoke(main, [str(OWL), "--stated", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "Error: --stated: RF2 options, not for --format owl" in res.output
    res = runner.invoke(main, [str(OWL), "--code-property", "oboInOwl:hasDbXref", "--code-prefix", "ICD-11"])
    assert res.exit_code == 1 and "code prefix 'ICD-11' is not one of" in res.output
