"""The ICD classifications inside a program: every ICD token bound to the ICD-10-CM / ICD-9-CM nodes above
its code (atoms of kind ``icd``, relations of kind ``icd_hierarchy``), on by default, left out by
``--no-icd-hierarchy``; hand-checked codes of both classifications, WHO-only codes, the id layout, SQL, the
kernel, and the section table itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from hrr_kernel import bind, compose, load_program
from ontology_compiler import compile_ontology, compile_source, run_sql
from ontology_compiler import icd as icd_codes
from ontology_compiler.cli import main as compile_main
from ontology_compiler.icd9_sections import ICD9_SECTIONS, icd9_levels
from ontology_compiler.icd_hierarchy import RELATION_LABELS, icd_hierarchy
from pipelines.cli import main as hrrbert_main

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURE = DATA / "snomed_mini_20220531"
# a code universe with ICD-9-CM codes too (the fixture maps only ICD-10); --fallback icd makes the unmapped
# ones title-only tokens
CODES = """icd_code,icd_version,long_title
E1165,10,Type 2 diabetes mellitus with hyperglycemia
E119,10,Type 2 diabetes mellitus without complications
E149,10,"Diabetes mellitus, unspecified"
J450,10,Predominantly allergic asthma
J45909,10,"Unspecified asthma, uncomplicated"
I10,10,Essential (primary) hypertension
25000,9,"Diabetes mellitus without mention of complication, type II or unspecified type"
250,9,Diabetes mellitus
V5861,9,Long-term (current) use of anticoagulants
E8798,9,"Other specified procedures as the cause of abnormal reaction of patient, or of later complication"
042,9,Human immunodeficiency virus [HIV] disease
"""


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The fixture with the code list above, compiled with the hierarchy (the default) and without."""
    root = tmp_path_factory.mktemp("icd_hierarchy")
    codes = root / "codes.csv"
    codes.write_text(CODES, "utf-8")
    on = compile_ontology(FIXTURE, out=root / "programs", codes=codes, fallback="icd")
    off = compile_ontology(FIXTURE, out=root / "programs", codes=codes, fallback="icd", icd_hierarchy=False)
    return on, off


HIERARCHY_SQL = """
SELECT r.label AS level, e.slot, a.kind, a.key, a.label, e.provenance, e.role_group, e.source_sctid
FROM edges e JOIN concepts c USING (concept_id) JOIN relations r USING (relation_id)
JOIN atoms a USING (atom_id)
WHERE r.kind = 'icd_hierarchy' AND c.vocabulary = '{vocabulary}' AND c.code = '{code}'
ORDER BY e.relation_id, e.slot
"""


def _nodes(result, vocabulary: str, code: str) -> list[tuple[str, int, str, str]]:
    """(level, slot, atom key, atom label) of a token's ICD hierarchy edges, by SQL over the program."""
    rows = run_sql(result.path, HIERARCHY_SQL.format(vocabulary=vocabulary, code=code)).rows
    assert all(r[2] == "icd" and r[6] == 0 and r[7] is None for r in rows)  # kind icd, group 0, no SCTID
    return [(r[0], r[1], r[3], r[4]) for r in rows]


def _provenance(result, vocabulary: str, code: str) -> set[str]:
    return {r[5] for r in run_sql(result.path, HIERARCHY_SQL.format(vocabulary=vocabulary, code=code)).rows}


def test_icd10cm_code_gets_chapter_block_category_and_subcategory(programs):
    on, _ = programs
    assert _nodes(on, "ICD10CM", "E1165") == [
        (
            "ICD-10-CM chapter",
            0,
            "ICD10CM:chapter:4",
            "Endocrine, nutritional and metabolic diseases (E00-E89)",
        ),
        ("ICD-10-CM block", 0, "ICD10CM:block:E08-E13", "Diabetes mellitus (E08-E13)"),
        ("ICD-10-CM category", 0, "ICD10CM:E11", "Type 2 diabetes mellitus"),
        (
            "ICD-10-CM subcategory",
            0,
            "ICD10CM:E11.6",
            "Type 2 diabetes mellitus with other specified complications",
        ),
    ]
    assert _provenance(on, "ICD10CM", "E1165") == {"icd10cm_tabular"}


def test_a_code_under_its_category_has_no_subcategory_and_a_category_neither(programs):
    on, _ = programs
    assert [n[:3] for n in _nodes(on, "ICD10CM", "E119")] == [
        ("ICD-10-CM chapter", 0, "ICD10CM:chapter:4"),
        ("ICD-10-CM block", 0, "ICD10CM:block:E08-E13"),
        ("ICD-10-CM category", 0, "ICD10CM:E11"),
    ]
    assert [n[:3] for n in _nodes(on, "ICD10CM", "I10")] == [
        ("ICD-10-CM chapter", 0, "ICD10CM:chapter:9"),
        ("ICD-10-CM block", 0, "ICD10CM:block:I10-I1A"),
    ]


def test_several_subcategories_take_successive_slots_shortest_first(programs):
    on, _ = programs
    sub = [n for n in _nodes(on, "ICD10CM", "J45909") if n[0] == "ICD-10-CM subcategory"]
    assert [(s, k) for _, s, k, _ in sub] == [(0, "ICD10CM:J45.9"), (1, "ICD10CM:J45.90")]
    rel = pq.read_table(on.path / "relations.parquet").to_pylist()
    assert next(r for r in rel if r["label"] == "ICD-10-CM subcategory")["max_multiplicity"] == 2


def test_who_only_codes_take_the_nearest_known_ancestor_or_the_chapter(programs):
    """The SNOMED CT International map targets WHO ICD-10: J45.0 is not in ICD-10-CM (its category J45
    is), E14.9 not even as a category (E14): the chapter by range."""
    on, _ = programs
    assert [n[2] for n in _nodes(on, "ICD10CM", "J450")] == [
        "ICD10CM:chapter:10",
        "ICD10CM:block:J40-J4A",
        "ICD10CM:J45",
    ]
    assert _provenance(on, "ICD10CM", "J450") == {"icd10cm_nearest_ancestor"}
    assert _nodes(on, "ICD10CM", "E149") == [
        (
            "ICD-10-CM chapter",
            0,
            "ICD10CM:chapter:4",
            "Endocrine, nutritional and metabolic diseases (E00-E89)",
        )
    ]
    assert _provenance(on, "ICD10CM", "E149") == {"icd10_chapter_range"}
    counts = on.manifest["counts"]["icd_hierarchy"]["ICD10CM"]
    assert counts["tokens"] == 6
    assert counts["sources"] == {"tabular": 4, "nearest_ancestor": 1, "chapter_range": 1}
    assert counts["levels"] == {
        "chapter+block+category": 2,  # E11.9, J45.0
        "chapter+block+category+subcategory": 2,  # E11.65, J45.909
        "chapter": 1,  # E14.9
        "chapter+block": 1,  # I10
    }


def test_icd9cm_numeric_v_and_e_codes(programs):
    on, _ = programs
    endocrine = "Endocrine, nutritional and metabolic diseases, and immunity disorders (240-279)"
    assert _nodes(on, "ICD9CM", "25000") == [
        ("ICD-9-CM chapter", 0, "ICD9CM:chapter:3", endocrine),
        ("ICD-9-CM section", 0, "ICD9CM:section:249-259", "Diseases of other endocrine glands (249-259)"),
        ("ICD-9-CM category", 0, "ICD9CM:250", "Diabetes mellitus"),  # the program's token 250's title
    ]
    assert [n[2] for n in _nodes(on, "ICD9CM", "V5861")] == [
        "ICD9CM:chapter:18",
        "ICD9CM:section:V50-V59",
        "ICD9CM:V58",
    ]
    assert [n[2] for n in _nodes(on, "ICD9CM", "E8798")] == [
        "ICD9CM:chapter:19",
        "ICD9CM:section:E878-E879",
        "ICD9CM:E879",  # an E code's category has four characters
    ]
    assert _nodes(on, "ICD9CM", "V5861")[2][3] == "V58"  # no title anywhere: the code
    assert _provenance(on, "ICD9CM", "E8798") == {"icd9cm_ranges"}


def test_an_icd9cm_category_token_gets_chapter_and_section_only(programs):
    on, _ = programs
    assert [n[2:] for n in _nodes(on, "ICD9CM", "042")] == [
        ("ICD9CM:chapter:1", "Infectious and parasitic diseases (001-139)"),
        ("ICD9CM:section:042", "Human immunodeficiency virus (HIV) infection (042)"),
    ]
    assert [n[2] for n in _nodes(on, "ICD9CM", "250")] == ["ICD9CM:chapter:3", "ICD9CM:section:249-259"]
    counts = on.manifest["counts"]["icd_hierarchy"]["ICD9CM"]
    assert counts == {
        "tokens": 5,
        "sources": {"ranges": 5},
        "levels": {"chapter+section+category": 3, "chapter+section": 2},
    }


def test_ids_come_after_everything_else_and_the_rest_is_unchanged(programs):
    """ICD atoms after the words (by key), ICD relations after the attributes (in level order): the other
    atoms, relations and tokens keep the ids they have without the hierarchy."""
    on, off = programs
    t_on, t_off = (
        {n: pq.read_table(r.path / f"{n}.parquet") for n in ("atoms", "relations", "concepts")}
        for r in (on, off)
    )
    n_a, n_r = t_off["atoms"].num_rows, t_off["relations"].num_rows
    assert t_on["atoms"].slice(0, n_a).equals(t_off["atoms"])
    assert t_on["concepts"].equals(t_off["concepts"])
    icd_atoms = t_on["atoms"].slice(n_a)
    assert (
        set(icd_atoms["kind"].to_pylist()) == {"icd"} and icd_atoms["sctid"].null_count == icd_atoms.num_rows
    )
    keys = icd_atoms["key"].to_pylist()
    assert keys == sorted(keys, key=str.encode) and len(set(keys)) == len(keys)
    rel = t_on["relations"]
    assert (
        rel.slice(0, n_r)
        .drop_columns(["max_multiplicity", "edges"])
        .equals(t_off["relations"].drop_columns(["max_multiplicity", "edges"]))
    )
    assert rel["label"].to_pylist()[n_r:] == list(RELATION_LABELS)
    assert (
        set(rel["kind"].to_pylist()[n_r:]) == {"icd_hierarchy"}
        and rel["sctid"].to_pylist()[n_r:] == [None] * 7
    )
    c_on, c_off = on.manifest["counts"], off.manifest["counts"]
    assert c_on["atoms_by_kind"]["icd"] == len(keys) and "icd" not in c_off["atoms_by_kind"]
    assert c_on["icd_hierarchy"]["edges"] == {
        "ICD-10-CM chapter": 6,
        "ICD-10-CM block": 5,
        "ICD-10-CM category": 4,
        "ICD-10-CM subcategory": 3,
        "ICD-9-CM chapter": 5,
        "ICD-9-CM section": 5,
        "ICD-9-CM category": 3,
    }
    assert c_on["edges"] - c_off["edges"] == sum(c_on["icd_hierarchy"]["edges"].values())


def test_the_option_enters_the_manifest_inputs_and_id(programs):
    on, off = programs
    assert (
        on.manifest["options"]["icd_hierarchy"] is True and off.manifest["options"]["icd_hierarchy"] is False
    )
    assert on.program_id != off.program_id and on.path != off.path
    roles = {i["role"] for i in on.manifest["inputs"]}
    assert {"icd10cm_tabular", "icd9cm_titles"} <= roles
    assert not {"icd10cm_tabular", "icd9cm_titles"} & {i["role"] for i in off.manifest["inputs"]}
    assert "icd_hierarchy" not in off.manifest["counts"]
    rels = pq.read_table(off.path / "relations.parquet")["kind"].to_pylist()
    assert "icd_hierarchy" not in rels


def test_no_icd_hierarchy_flag_and_compile_source(tmp_path):
    res = CliRunner().invoke(compile_main, [str(FIXTURE), "--out", str(tmp_path), "--no-icd-hierarchy", "-q"])
    assert res.exit_code == 0, res.output
    path = Path(res.output.strip().splitlines()[-1])
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["options"]["icd_hierarchy"] is False and "icd" not in manifest["counts"]["atoms_by_kind"]
    assert compile_source(FIXTURE, out=tmp_path, icd_hierarchy=False).program_id == path.name  # the same
    default = compile_source(FIXTURE, out=tmp_path)
    assert default.program_id != path.name and default.manifest["counts"]["atoms_by_kind"]["icd"] > 0


def test_hrrbert_sql_joins_edges_relations_and_atoms(programs):
    on, _ = programs
    query = (
        "SELECT r.label, a.key FROM edges e JOIN concepts c USING (concept_id) JOIN relations r "
        "USING (relation_id) JOIN atoms a USING (atom_id) "
        "WHERE r.kind = 'icd_hierarchy' AND c.code = 'E1165' ORDER BY e.relation_id"
    )
    res = CliRunner().invoke(hrrbert_main, ["sql", str(on.path), query, "--format", "csv"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("ICD-10-CM")]
    assert lines == [
        "ICD-10-CM chapter,ICD10CM:chapter:4",
        "ICD-10-CM block,ICD10CM:block:E08-E13",
        "ICD-10-CM category,ICD10CM:E11",
        "ICD-10-CM subcategory,ICD10CM:E11.6",
    ]


def test_the_kernel_loads_and_composes_the_hierarchy(programs):
    """A token's vector with the hierarchy is its vector without it plus its ICD nodes bound to their
    levels (the shared atoms and relations have the same ids in both programs)."""
    on, off = programs
    p_on, p_off = load_program(on.path), load_program(off.path)
    assert p_on.relation_kinds[-7:] == ["icd_hierarchy"] * 7 and "icd" in p_on.atom_kinds
    assert p_on.relation_keys[-7:] == list(RELATION_LABELS)  # distinct keys: carried by label
    g = torch.Generator().manual_seed(0)
    atoms = torch.randn(p_on.n_atoms, 32, dtype=torch.float64, generator=g)
    relations = torch.randn(p_on.n_relations, 32, dtype=torch.float64, generator=g)
    c_on = compose(p_on, atoms, relations)
    c_off = compose(p_off, atoms[: p_off.n_atoms], relations[: p_off.n_relations])
    row = p_on.row("ICD10CM", "E11.65")
    assert row == p_off.row("ICD10CM", "E11.65")
    mine = (p_on.edge_concept == row) & (p_on.edge_relation >= p_off.n_relations)
    added = sum(
        bind(relations[r], atoms[a])
        for r, a in zip(p_on.edge_relation[mine], p_on.edge_atom[mine], strict=True)
    )
    assert int(mine.sum()) == 4
    torch.testing.assert_close(c_on[row], c_off[row] + added)
    other = [i for i in range(p_on.n_concepts) if p_on.concept_vocabularies[i] == "SPECIAL"]
    torch.testing.assert_close(c_on[other], c_off[other])  # special tokens have no ICD nodes


def test_icd9_category_title_from_the_published_titles():
    """A category that is a code itself has its ICD-9-CM v32 title (only such a category has one)."""
    tokens = pa.table({"vocabulary": ["ICD9CM"], "code": ["0429"], "title": ["not a real code"]})
    e = icd_hierarchy(tokens).edges.to_pylist()
    assert [(r["key"], r["label"]) for r in e][-1] == (
        "ICD9CM:042",
        "Human immunodeficiency virus [HIV] disease",
    )


def test_the_icd9_section_table_is_ordered_and_each_section_in_one_chapter():
    families: dict[str, list[tuple[str, str]]] = {}
    for first, last, title in ICD9_SECTIONS:
        assert title and len(first) == len(last) and first <= last
        families.setdefault(first[0] if first[0] in "VE" else "0", []).append((first, last))
        ch = icd_codes.chapters(pa.array([first, last]), icd_codes.ICD9CM).to_pylist()
        assert ch[0] == ch[1] is not None, (first, last)
    for ranges in families.values():
        assert ranges == sorted(ranges) and all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    assert len(families["0"]) + len(families["V"]) + len(families["E"]) == len(ICD9_SECTIONS)
    levels = icd9_levels(pa.array(["4019", "0430", "E0001", "V9", "XYZ"])).to_pylist()
    assert levels == [
        {"chapter": 7, "section": "401-405", "category": "401"},
        {"chapter": 1, "section": None, "category": "043"},  # between sections: no code uses 043
        {"chapter": 19, "section": "E000", "category": "E000"},
        {"chapter": None, "section": None, "category": None},
        {"chapter": None, "section": None, "category": None},
    ]
    assert np.all(np.diff([int(f) for f, _, _ in ICD9_SECTIONS if f.isdigit()]) > 0)


def test_a_carry_matches_icd_atoms_by_key_and_icd_relations_by_level(programs, compiled):
    """Two programs holding some of the same ICD nodes at other ids (the fixture's default universe, and
    the code list above): a carry copies each shared node's vector and each level's relation vector."""
    from hrr_kernel import carry_parameters

    old, new = load_program(compiled.path), load_program(programs[0].path)
    g = torch.Generator().manual_seed(1)
    atoms = torch.randn(old.n_atoms, 8, generator=g)
    relations = torch.randn(old.n_relations, 8, generator=g)
    carried = carry_parameters(old, new, atoms, relations)
    old_icd = {
        k: i for i, (k, kind) in enumerate(zip(old.atom_keys, old.atom_kinds, strict=True)) if kind == "icd"
    }
    shared = [
        (i, old_icd[k]) for i, k in enumerate(new.atom_keys) if new.atom_kinds[i] == "icd" and k in old_icd
    ]
    assert len(shared) > 5 and any(i != j for i, j in shared)  # same node, another id
    for i, j in shared:
        assert int(carried.atom_source[i]) == j and torch.equal(carried.atoms[i], atoms[j])
    for j, label in enumerate(new.relation_labels[-7:], start=new.n_relations - 7):
        assert int(carried.relation_source[j]) == old.relation_labels.index(label)
