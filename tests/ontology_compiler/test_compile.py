"""Compiling the fixture release: counts, ICD mapping, Full --as-of, words, and program format 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ontology_compiler import compile_ontology, verify_program
from ontology_compiler import rf2_schema as S

EXPECTED = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "snomed_mini_expected.json").read_text("utf-8")
)


def _table(result, name):
    return pq.read_table(result.path / f"{name}.parquet")


def _codes(result) -> dict[str, list[int]]:
    c = _table(result, "concepts").to_pylist()
    return {r["code_dotted"]: sorted(r["snomed_ids"]) for r in c if r["vocabulary"] != "SPECIAL"}


def _words(result, code: str) -> set[str]:
    concepts = _table(result, "concepts")
    cid = concepts.filter(pc.equal(concepts["code_dotted"], code))["concept_id"][0].as_py()
    edges = _table(result, "edges")
    rel = _table(result, "relations")
    desc_rel = rel.filter(pc.equal(rel["kind"], "description"))["relation_id"][0].as_py()
    mine = edges.filter(pc.and_(pc.equal(edges["concept_id"], cid), pc.equal(edges["relation_id"], desc_rel)))
    atoms = _table(result, "atoms")
    return {atoms["key"][i].as_py() for i in mine["atom_id"].to_pylist()}


def _attribute_atoms(result, code: str, type_id: int) -> set[int]:
    concepts, edges, rel, atoms = (_table(result, n) for n in ("concepts", "edges", "relations", "atoms"))
    cid = concepts.filter(pc.equal(concepts["code_dotted"], code))["concept_id"][0].as_py()
    rid = rel.filter(pc.equal(rel["sctid"], type_id))["relation_id"][0].as_py()
    mine = edges.filter(pc.and_(pc.equal(edges["concept_id"], cid), pc.equal(edges["relation_id"], rid)))
    return {atoms["sctid"][i].as_py() for i in mine["atom_id"].to_pylist()}


def _expected_codes(*sources) -> dict[str, list[int]]:
    """Union of sources; for a code in several, unconditional beats conditional, then source order."""
    out: dict[str, list[int]] = {}
    for src in sources:  # unconditional first, in precedence order
        for code, ids in src["static"].items():
            out.setdefault(code, sorted(ids))
    for src in sources:
        for code, rows in src["conditional"].items():
            if code not in out:
                out[code] = sorted({r["concept"] for r in rows})
    return out


def test_counts_match_the_fixture(compiled):
    exp = EXPECTED["combined"]
    c = compiled.manifest["counts"]
    assert c["concepts_active"] == exp["concepts_active"]
    assert c["descriptions_active"] == exp["descriptions_active_on_active_concepts"]
    assert c["descriptions_dropped_inactive_concept"] == exp["descriptions_dropped_inactive_concept"]
    assert c["relationships_active"] == exp["relationships_inferred_active_on_active_concepts"]
    assert c["relationships_dropped_inactive_concept"] == exp["relationships_dropped_inactive_concept"]
    # the map row on an inactive concept follows its REPLACED BY association
    assert c["map_rows_on_inactive_concept"] == exp["map_rows_dropped_inactive_concept"]
    assert c["mapping_map_targets_redirected_by_association"] == exp["map_rows_dropped_inactive_concept"]
    assert c["concrete_values_active"] == exp["concrete_values_active"]
    assert c["text_definitions_active"] == exp["text_definitions_active"]
    us_rows = exp["language_rows_active_by_refset"][str(S.US_ENGLISH)]
    assert c["language_rows_active"] + c["language_rows_dropped_inactive_description"] == us_rows
    assert (
        0 < c["language_rows_dropped_inactive_description"] <= exp["language_rows_dropped_inactive_concept"]
    )
    assert compiled.manifest["release"]["namespaces"] == ["INT", "US1000124"]


def test_icd_codes_and_their_concepts(compiled):
    expected = _expected_codes(EXPECTED["icd10cm"], EXPECTED["icd10"])
    assert _codes(compiled) == expected
    concepts = _table(compiled, "concepts").to_pylist()
    kinds = {r["code_dotted"]: r["mapping_kind"] for r in concepts}
    for code in EXPECTED["icd10"]["ifa_only_codes"]:
        assert kinds[code] == "conditional"
    assert kinds["E11.9"] == "unconditional"
    dotless = {r["code"]: r["code_dotted"] for r in concepts}
    assert dotless["E119"] == "E11.9" and dotless["J45909"] == "J45.909"
    assert {r["chapter"] for r in concepts if r["code"] == "E119"} == {4}


def test_full_as_of_resolves_history(fixture_release, tmp_path):
    old = compile_ontology(fixture_release, out=tmp_path, as_of="20200131")
    assert old.manifest["release"]["type"] == "Full"
    assert _codes(old) == _expected_codes(EXPECTED["icd10_as_of_20200131"])  # the US package is not yet out
    h = EXPECTED["history"]["relationship_change"]
    code = "K37"
    assert _attribute_atoms(old, code, h["type"]) == {h["20200131"]["destination"]}
    new = compile_ontology(fixture_release, out=tmp_path, as_of="20220531")
    assert _attribute_atoms(new, code, h["type"]) == {h["20220131"]["destination"]}
    assert old.program_id != new.program_id
    # Full resolved at the latest date equals the Snapshot
    snap = compile_ontology(fixture_release, out=tmp_path)
    for name in ("atoms", "relations", "concepts", "edges", "slices"):
        assert _table(new, name).equals(_table(snap, name)), name


def test_description_words_follow_the_language_refset(compiled, fixture_release, tmp_path):
    us = EXPECTED["description_words_us"]
    by_concept = {}
    for r in _table(compiled, "concepts").to_pylist():
        if len(r["snomed_ids"]) == 1:
            by_concept.setdefault(r["snomed_ids"][0], r["code_dotted"])
    for case in us.values():
        assert _words(compiled, by_concept[case["concept"]]) == set(case["words"]), case["fsn"]
    gb = compile_ontology(fixture_release, out=tmp_path, languages=(S.GB_ENGLISH,))
    for case in EXPECTED["description_words_gb"].values():
        assert _words(gb, by_concept[case["concept"]]) == set(case["words"]), case["fsn"]


def test_one_to_many_code_takes_the_union_of_edges(compiled):
    concepts, edges = _table(compiled, "concepts"), _table(compiled, "edges")
    row = concepts.filter(pc.equal(concepts["code_dotted"], "J45.9")).to_pylist()[0]
    assert len(row["snomed_ids"]) == 2
    rel = _table(compiled, "relations")
    icd = rel.filter(pc.equal(rel["kind"], "icd_hierarchy"))["relation_id"]
    mine = edges.filter(pc.equal(edges["concept_id"], row["concept_id"]))
    pairs = list(zip(mine["relation_id"].to_pylist(), mine["atom_id"].to_pylist(), strict=True))
    assert len(pairs) == len(set(pairs))  # union, no duplicates
    snomed = mine.filter(pc.invert(pc.is_in(mine["relation_id"], value_set=icd)))  # not the ICD hierarchy's
    assert set(snomed["source_sctid"].to_pylist()) == set(row["snomed_ids"])


def test_program_format_1(compiled):
    m = verify_program(compiled.path)
    assert m["format_version"] == 1 and m["program_id"] == compiled.program_id
    assert compiled.path.name == compiled.program_id and compiled.path.parent.name == "snomed_mini_20220531"
    for f in m["files"]:
        md = pq.read_schema(compiled.path / f["path"]).metadata
        assert md[b"program_id"].decode() == compiled.program_id and md[b"format_version"] == b"1"
        assert pq.read_metadata(compiled.path / f["path"]).num_rows == f["rows"]
    for key in (
        "created_at",
        "compiler_version",
        "release",
        "inputs",
        "options",
        "counts",
        "coverage",
        "timings",
    ):
        assert key in m
    assert all(len(i["sha256"]) == 64 for i in m["inputs"])
    atoms, rel, con, edges, slices = (
        _table(compiled, n) for n in ("atoms", "relations", "concepts", "edges", "slices")
    )
    for t, col in ((atoms, "atom_id"), (rel, "relation_id"), (con, "concept_id")):
        assert t[col].type == "int32" and t[col].to_pylist() == list(range(t.num_rows))
    assert set(atoms["kind"].to_pylist()) == {"concept", "word", "special", "icd"}
    assert rel["kind"].to_pylist()[:3] == ["identity", "description", "is_a"]
    assert rel["kind"].to_pylist()[-7:] == ["icd_hierarchy"] * 7  # the ICD hierarchy's levels come last
    # special tokens: their own atom bound with identity
    sp = edges.filter(pc.less(edges["concept_id"], 5)).to_pylist()
    assert [(e["concept_id"], e["relation_id"], e["atom_id"]) for e in sp] == [(i, 0, i) for i in range(5)]
    assert con["code"].to_pylist()[:5] == ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
    # storage order and slices
    r, s, c = (edges[k].to_numpy() for k in ("relation_id", "slot", "concept_id"))
    assert np.all(np.lexsort((c, s, r)) == np.arange(len(r)))
    covered = 0
    for sl in slices.to_pylist():
        run = slice(sl["start"], sl["start"] + sl["length"])
        assert (r[run] == sl["relation_id"]).all() and (s[run] == sl["slot"]).all()
        assert len(set(c[run])) == sl["length"]
        covered += sl["length"]
    assert covered == edges.num_rows
    # slot = k-th use of the relation by the concept; max multiplicity and edge counts agree
    for rr in rel.to_pylist():
        mine = s[r == rr["relation_id"]]
        assert rr["edges"] == len(mine) and rr["max_multiplicity"] == (mine.max() + 1 if len(mine) else 0)
    pairs = {}
    for ci, ri, si in zip(c, r, s, strict=True):
        pairs.setdefault((ci, ri), []).append(si)
    assert all(sorted(v) == list(range(len(v))) for v in pairs.values())


def test_recompile_is_a_no_op(fixture_release, tmp_path):
    a = compile_ontology(fixture_release, out=tmp_path)
    stamp = {p: p.stat().st_mtime_ns for p in a.path.rglob("*")}
    b = compile_ontology(fixture_release, out=tmp_path)
    assert not b.written and b.program_id == a.program_id
    assert {p: p.stat().st_mtime_ns for p in a.path.rglob("*")} == stamp
    c = compile_ontology(fixture_release, out=tmp_path, stated=True)  # other options -> another program
    assert c.program_id != a.program_id and c.written


def test_inactive_concepts_are_not_in_the_graph(compiled):
    inactive = EXPECTED["edge_cases"]["inactive_concept_with_active_rows"]
    sc = _table(compiled, "graph/snomed_concepts")
    assert inactive["concept"] not in set(sc["id"].to_pylist())
    sd = _table(compiled, "graph/snomed_descriptions")
    assert not set(inactive["active_descriptions"]) & set(sd["id"].to_pylist())
    sr = _table(compiled, "graph/snomed_relationships")
    assert inactive["active_relationship"] not in set(sr["id"].to_pylist())


@pytest.mark.parametrize("stated", [False, True])
def test_stated_or_inferred(fixture_release, tmp_path, stated):
    r = compile_ontology(fixture_release, out=tmp_path, stated=stated)
    prov = set(_table(r, "edges")["provenance"].to_pylist())
    assert ("stated" in prov) == stated and ("inferred" in prov) != stated


def test_output_is_deterministic(fixture_release, tmp_path):
    a = compile_ontology(fixture_release, out=tmp_path / "a")
    b = compile_ontology(fixture_release, out=tmp_path / "b")
    assert a.program_id == b.program_id
    fa = {f["path"]: f["sha256"] for f in verify_program(a.path)["files"]}
    fb = {f["path"]: f["sha256"] for f in verify_program(b.path)["files"]}
    assert fa == fb
