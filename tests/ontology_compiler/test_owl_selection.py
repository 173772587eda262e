"""OWL code selection as the Disease Ontology writes its cross-references (versioned SNOMED prefixes, ICD
ranges), prefixes that select nothing, and parse failures reported with the parser's own error."""

from __future__ import annotations

import logging
from pathlib import Path

import owlready2
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from ontology_compiler import InputFileError
from ontology_compiler.owl_input import base_prefix, compile_owl
from ontology_compiler.owl_read import parse

XREF = "oboInOwl:hasDbXref"
OBO = "http://purl.obolibrary.org/obo/"


def _class(n: int, label: str, xrefs: list[str], parent: int | None = 4) -> str:
    sub = f'<rdfs:subClassOf rdf:resource="{OBO}DOID_{parent}"/>' if parent else ""
    refs = "".join(f"<oboInOwl:hasDbXref>{x}</oboInOwl:hasDbXref>" for x in xrefs)
    return f'<owl:Class rdf:about="{OBO}DOID_{n}">{sub}<rdfs:label>{label}</rdfs:label>{refs}</owl:Class>\n'


@pytest.fixture(scope="module")
def doid(tmp_path_factory) -> Path:
    """A Disease-Ontology-shaped RDF/XML file (cross-references as in doid.owl of 2025-09)."""
    body = (
        _class(4, "disease", [], parent=None)
        + _class(
            1,
            "rheumatic fever",
            ["ICD10CM:I00-I02", "ICD9CM:390-392.99", "SNOMEDCT_US_2025_09_01:58718002", "UMLS_CUI:C0035436"],
        )
        + _class(
            2,
            "HIV infectious disease",
            [
                "ICD9CM:042-042.99",
                "ICD10CM:B20",
                "SNOMEDCT_US_2025_09_01:86406008",
                "ICD10CM:see B20",
                "MESH:D015658",
            ],
        )
        + _class(3, "asthma", ["ICD10CM:J45", "ICD9CM:493", "SNOMEDCT_US_2021_09_01:195967001"])
    )
    f = tmp_path_factory.mktemp("doid") / "doid_mini.owl"
    f.write_text(
        '<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
        'xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#" xmlns:owl="http://www.w3.org/2002/07/owl#" '
        'xmlns:oboInOwl="http://www.geneontology.org/formats/oboInOwl#">\n'
        f'<owl:Ontology rdf:about="{OBO}doid.owl"/>\n{body}</rdf:RDF>\n',
        encoding="utf-8",
    )
    return f


def _codes(result) -> set[tuple[str, str]]:
    t = pq.read_table(result.path / "concepts.parquet", columns=["vocabulary", "code"]).to_pylist()
    return {(r["vocabulary"], r["code"]) for r in t if r["vocabulary"] != "SPECIAL"}


# ---------------------------------------------------------------- prefixes and ranges


def test_base_prefix():
    assert base_prefix("SNOMEDCT_US_2025_09_01") == "SNOMEDCT_US"
    assert base_prefix("snomedct_us_20250901") == "SNOMEDCT_US"
    assert base_prefix("ICD10CM") == "ICD10CM" and base_prefix("ICD-10-CM") == "ICD-10-CM"


def test_versioned_prefixes_match_their_base(doid, tmp_path):
    snomed = {("SNOMEDCT", "58718002"), ("SNOMEDCT", "86406008"), ("SNOMEDCT", "195967001")}
    base = compile_owl(doid, code_property=XREF, code_prefixes=("SNOMEDCT_US",), out=tmp_path)
    assert _codes(base) == snomed
    assert base.manifest["counts"]["code_values_versioned_prefix"] == 3
    assert base.manifest["findings"] == []
    versioned = compile_owl(doid, code_property=XREF, code_prefixes=("SNOMEDCT_US_2025_09_01",), out=tmp_path)
    assert versioned.program_id == base.program_id and _codes(versioned) == snomed
    assert base.manifest["options"]["code_prefixes"] == ["SNOMEDCT_US"]
    with pytest.raises(ValueError, match="version suffix"):
        compile_owl(doid, code_property=XREF, code_prefixes=("SNOMEDCT_XX_2025_09_01",), out=tmp_path)


def test_ranges_and_malformed_values_are_skipped_counted_and_warned(doid, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ontology_compiler.owl_input"):
        r = compile_owl(doid, code_property=XREF, out=tmp_path)
    codes = _codes(r)
    assert {("ICD10CM", "B20"), ("ICD10CM", "J45"), ("ICD9CM", "493")} <= codes
    assert not any("-" in c or " " in c for _, c in codes)  # no I00-I02, 042-04299, SEEB20
    c = r.manifest["counts"]
    assert (c["code_ranges_skipped"], c["code_values_malformed"]) == (3, 1)
    assert c["code_values_ignored_prefix:UMLS_CUI"] == 1 and c["code_values_ignored_prefix:MESH"] == 1
    ranges = next(f for f in r.manifest["findings"] if f.startswith("code_ranges_skipped: 3"))
    assert "ICD10CM:I00-I02 (DOID:1)" in ranges and "ICD9CM:042-042.99 (DOID:2)" in ranges
    assert any(
        f.startswith("code_values_malformed: 1") and "ICD10CM:see B20" in f for f in r.manifest["findings"]
    )
    assert "code_ranges_skipped: 3" in caplog.text and "ICD9CM:390-392.99" in caplog.text
    assert r.manifest["options"]["code_value_rules"]  # the rules enter the program id


def test_a_prefix_that_selects_nothing_names_the_prefixes_found(doid, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="ontology_compiler.owl_input"):
        r = compile_owl(doid, code_property=XREF, code_prefixes=("ICD-10", "ICD10CM"), out=tmp_path)
    assert {v for v, _ in _codes(r)} == {"ICD10CM"}
    text = "--code-prefix ICD-10 selected no value of http://www.geneontology.org/formats/oboInOwl#hasDbXref"
    assert text in caplog.text
    finding = next(f for f in r.manifest["findings"] if f.startswith("--code-prefix ICD-10 "))
    for found in (
        "ICD10CM (4)",
        "ICD9CM (3)",
        "SNOMEDCT_US_2025_09_01 (2)",
        "SNOMEDCT_US_2021_09_01 (1)",
        "UMLS_CUI (1)",
        "MESH (1)",
    ):
        assert found in finding
    assert not any(f.startswith("--code-prefix ICD10CM") for f in r.manifest["findings"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ontology_compiler.owl_input"):
        none = compile_owl(doid, code_property="skos:notation", out=tmp_path)
    assert "no class has a value of it" in caplog.text and none.manifest["coverage"]["codes"] == 0


def test_code_prefix_needs_code_property(doid, tmp_path):
    from ontology_compiler.cli import main

    with pytest.raises(ValueError, match="give code_property too"):
        compile_owl(doid, code_prefixes=("SNOMEDCT_US",), out=tmp_path)
    res = CliRunner().invoke(main, [str(doid), "--code-prefix", "SNOMEDCT_US", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "give --code-property too" in res.output


def test_cli_prints_the_selection_findings(doid, tmp_path):
    from ontology_compiler.cli import main

    res = CliRunner().invoke(
        main, [str(doid), "--code-property", XREF, "--code-prefix", "ICD-10", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    assert "findings" in res.output and "--code-prefix ICD-10 selected no value" in res.output
    assert "SNOMEDCT_US_2025_09_01 (2)" in res.output


# ---------------------------------------------------------------- parse failures

OWX = (
    '<?xml version="1.0"?>\n<Ontology xmlns="http://www.w3.org/2002/07/owl#" ontologyIRI="http://example.invalid/x">\n'
    '<Declaration><Class IRI="http://example.invalid/x#A"/></Declaration>\n{body}\n</Ontology>\n'
)


@pytest.mark.parametrize(
    ("body", "line", "column", "cause"),
    [
        # owlready2's OWL/XML parser has no rule for an element: before, the RDF/XML parser took the file
        # and the compile said "no OWL classes found (parsed as rdfxml ...)"
        ('<SubClassOf><Class IRI="#B"/><FooBar/></SubClassOf>', 4, 51, "IndexError"),
        # an abbreviatedIRI whose prefix has no <Prefix> declaration
        (
            '<AnnotationAssertion><AnnotationProperty abbreviatedIRI="rdfs:label"/><IRI>#A</IRI>'
            "<Literal>a</Literal></AnnotationAssertion>",
            4,
            70,
            "KeyError: rdfs",
        ),
        # not well-formed
        ('<SubClassOf><Class IRI="#B"/>', 5, 2, "mismatched tag"),
    ],
)
def test_owlxml_rejected_reports_the_parsers_error(tmp_path, body, line, column, cause):
    f = tmp_path / "bad.owx"
    f.write_text(OWX.format(body=body), encoding="utf-8")
    with pytest.raises(InputFileError) as e:
        compile_owl(f, out=tmp_path / "p")
    msg = str(e.value)
    assert e.value.line == line and e.value.path == f
    assert "OWL/XML parser rejects this file" in msg and f"line {line}, column {column}: " in msg
    assert cause in msg and "no OWL classes" not in msg and "rdfxml" not in msg


def test_large_file_parsed_in_a_child_process_still_reports_the_cause(tmp_path, monkeypatch):
    """owlready2 parses files of 8 MB and more in a forked process, which loses the cause; the file is
    then parsed again in this process to report it."""
    f = tmp_path / "big.owx"
    f.write_text(OWX.format(body='<SubClassOf><Class IRI="#B"/><FooBar/></SubClassOf>'), encoding="utf-8")
    real = owlready2.driver.os.path.getsize
    monkeypatch.setattr(
        owlready2.driver.os.path, "getsize", lambda p: 10**9 if str(p).endswith(".owx") else real(p)
    )
    with pytest.raises(InputFileError) as e:
        parse(f)
    assert "line 4, column 51: IndexError" in str(e.value)


def test_xml_broken_before_its_root_element(tmp_path):
    f = tmp_path / "unbound.owl"
    f.write_text('<?xml version="1.0"?>\n<rdf:RDF>\n<owl:Class/>\n</rdf:RDF>\n', encoding="utf-8")
    with pytest.raises(InputFileError) as e:
        compile_owl(f, out=tmp_path / "p")
    assert e.value.line == 2 and "not well-formed XML" in str(e.value) and "unbound prefix" in str(e.value)


def test_text_formats_owlready2_does_not_read_get_a_hint(tmp_path):
    cases = {
        "t.ttl": ("@prefix owl: <http://www.w3.org/2002/07/owl#> .\n<a> a owl:Class .\n", "Turtle", 1),
        "t.obo": ("format-version: 1.2\n\n[Term]\nid: X:1\n", "OBO", 1),
        "t.nt": (
            '<http://e.x/a> <http://www.w3.org/2000/01/rdf-schema#label> "a" .\nnot a triple\n',
            None,
            2,
        ),
    }
    for name, (text, kind, line) in cases.items():
        f = tmp_path / name
        f.write_text(text, encoding="utf-8")
        with pytest.raises(InputFileError) as e:
            parse(f)
        msg = str(e.value)
        assert "N-Triples parser rejects this file" in msg and e.value.line == line, msg
        assert (f"looks like {kind}" in msg) if kind else "looks like" not in msg
        assert all(x in msg for x in ("RDF/XML", "OWL/XML", "N-Triples"))


def test_rdfxml_and_ntriples_still_parse(doid, tmp_path):
    world, fmt, _ = parse(doid)
    world.close()
    assert fmt == "rdfxml"
    nt = tmp_path / "ok.nt"
    nt.write_text(
        "<http://e.x/a> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> "
        "<http://www.w3.org/2002/07/owl#Class> .\n"
        '<http://e.x/a> <http://www.w3.org/2000/01/rdf-schema#label> "a"@en .\n',
        encoding="utf-8",
    )
    world, fmt, _ = parse(nt)
    world.close()
    assert fmt == "ntriples"
