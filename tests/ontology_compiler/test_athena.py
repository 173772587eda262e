"""Athena vocabulary downloads: the reader, the compile, the export and its round trip, and bad input.

The hand-built download below follows the OMOP CDM v5.4 vocabulary layout (TAB-separated, header,
YYYYMMDD dates); its SNOMED concepts carry synthetic SCTIDs, not SNOMED content.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ontology_compiler.athena_export import export_athena
from ontology_compiler.athena_read import load_athena
from ontology_compiler.athena_schema import FILES
from ontology_compiler.errors import InputFileError, MissingInputError, OptionError, OutputExistsError
from ontology_compiler.front import compile_source, detect_format

END = "20991231"
# concept_id, name, domain, vocabulary, class, standard, code, start, end, invalid_reason
CONCEPTS = [
    ["1", "Disorder of lung", "Condition", "SNOMED", "Disorder", "S", "100000101", "20020131", END, ""],
    ["2", "Pneumonia", "Condition", "SNOMED", "Disorder", "S", "100000202", "20020131", END, ""],
    [
        "3",
        "Lung structure",
        "Spec Anatomic Site",
        "SNOMED",
        "Body Structure",
        "S",
        "100000303",
        "20020131",
        END,
        "",
    ],
    ["4", "Inflammation", "Observation", "SNOMED", "Morph Abnormality", "", "100000404", "20020131", END, ""],
    [
        "5",
        "Old pneumonia concept",
        "Condition",
        "SNOMED",
        "Disorder",
        "",
        "100000505",
        "20020131",
        "20200130",
        "U",
    ],
    ["6", '"Viral" pneumonia', "Condition", "SNOMED", "Disorder", "S", "100000606", "20020131", END, ""],
    ["7", "Virus", "Observation", "SNOMED", "Organism", "S", "100000707", "20020131", END, ""],
    [
        "10",
        "Pneumonia, unspecified organism",
        "Condition",
        "ICD10CM",
        "4-char billing code",
        "",
        "J18.9",
        "20151001",
        END,
        "",
    ],
    [
        "11",
        "Viral pneumonia, unspecified",
        "Condition",
        "ICD10CM",
        "4-char billing code",
        "",
        "J12.9",
        "20151001",
        END,
        "",
    ],
    [
        "12",
        "Pneumonia, organism unspecified",
        "Condition",
        "ICD9CM",
        "3-dig billing code",
        "",
        "486",
        "19700101",
        END,
        "",
    ],
    [
        "13",
        "Personal history of pneumonia",
        "Observation",
        "ICD9CM",
        "4-dig billing code",
        "",
        "V12.61",
        "19700101",
        END,
        "",
    ],
    [
        "14",
        "Accidental fall",
        "Observation",
        "ICD9CM",
        "4-dig billing code",
        "",
        "E888.9",
        "19700101",
        END,
        "",
    ],
    [
        "15",
        "Deleted code",
        "Condition",
        "ICD10CM",
        "4-char billing code",
        "",
        "J18.8",
        "20151001",
        "20181001",
        "D",
    ],
]
RELATIONSHIPS = [
    ["2", "1", "Is a", "20020131", END, ""],
    ["1", "2", "Subsumes", "20020131", END, ""],
    ["2", "3", "Has finding site", "20020131", END, ""],
    ["2", "4", "Has asso morph", "20020131", END, ""],
    ["6", "2", "Is a", "20020131", END, ""],
    ["6", "7", "Has causative agent", "20020131", END, ""],
    ["6", "3", "Has finding site", "20020131", END, ""],
    ["5", "2", "Concept replaced by", "20200131", END, ""],
    ["2", "1", "Has some new attribute", "20020131", END, ""],
    ["10", "2", "Maps to", "20151001", END, ""],
    ["11", "6", "Maps to", "20151001", END, ""],
    ["11", "2", "Maps to", "20151001", "20191231", "D"],
    ["12", "5", "Maps to", "19700101", END, ""],
    ["13", "2", "Maps to", "19700101", END, ""],
    ["14", "1", "Maps to", "19700101", END, ""],
    ["15", "2", "Maps to", "20151001", "20181001", "D"],
]
SYNONYMS = [
    ["2", "Pneumonia (disorder)", "4180186"],
    ["2", "Lung inflammation", "4180186"],
    ["2", "Pneumonie", "4180190"],
    ["6", "Viral pneumonia (disorder)", "4180186"],
]


def write_download(root: Path, concepts=CONCEPTS, relationships=RELATIONSHIPS, synonyms=SYNONYMS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, rows in (
        ("CONCEPT.csv", concepts),
        ("CONCEPT_RELATIONSHIP.csv", relationships),
        ("CONCEPT_SYNONYM.csv", synonyms),
    ):
        text = "\n".join(["\t".join(FILES[name])] + ["\t".join(r) for r in rows]) + "\n"
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def download(tmp_path) -> Path:
    return write_download(tmp_path / "athena_v5")


def _edges(program: Path) -> set[tuple]:
    atoms = {
        r["atom_id"]: (r["kind"], r["key"]) for r in pq.read_table(program / "atoms.parquet").to_pylist()
    }
    rels = {
        r["relation_id"]: (r["kind"], r["sctid"] if r["sctid"] is not None else r["label"])
        for r in pq.read_table(program / "relations.parquet").to_pylist()
    }
    toks = {
        r["concept_id"]: (r["vocabulary"], r["code"])
        for r in pq.read_table(program / "concepts.parquet").to_pylist()
    }
    e = pq.read_table(program / "edges.parquet", columns=["concept_id", "relation_id", "atom_id"]).to_pylist()
    return {(toks[x["concept_id"]], rels[x["relation_id"]], atoms[x["atom_id"]]) for x in e}


def _tokens(program: Path) -> dict[tuple[str, str], tuple[int, ...]]:
    return {
        (r["vocabulary"], r["code"]): tuple(sorted(r["snomed_ids"]))
        for r in pq.read_table(program / "concepts.parquet").to_pylist()
    }


def test_reader_resolves_validity_descriptions_and_relationships(download):
    rel, info = load_athena(download)
    assert sorted(rel.concepts["id"].to_pylist()) == [
        100000101,
        100000202,
        100000303,
        100000404,
        100000606,
        100000707,
    ]
    assert rel.counts["concepts_upgraded"] == 1 and rel.counts["concepts_inactive"] == 1
    assert 100000505 in rel.known_concepts.to_pylist()
    # concept_name is the preferred synonym, a tagged synonym the FSN, the French one is skipped
    d = {(r["conceptId"], r["term"]): r["typeId"] for r in rel.descriptions.to_pylist()}
    assert d[(100000202, "Pneumonia")] == 900000000000013009
    assert d[(100000202, "Pneumonia (disorder)")] == 900000000000003001
    assert (100000202, "Pneumonie") not in d and rel.counts["synonyms_not_english"] == 1
    assert d[(100000606, '"Viral" pneumonia')]  # quotes inside an unquoted field are text
    r = {(x["sourceId"], x["typeId"], x["destinationId"]) for x in rel.relationships.to_pylist()}
    assert (100000202, 116680003, 100000101) in r and (100000202, 363698007, 100000303) in r
    assert len(r) == 6  # the reverse (Subsumes) and the history rows are not attributes
    assert set(rel.relationships["relationshipGroup"].to_pylist()) == {0}
    assert info["unknown_relationship_ids"] == {"Has some new attribute": 1}
    a = rel.associations.to_pylist()
    assert [(x["referencedComponentId"], x["targetComponentId"]) for x in a] == [(100000505, 100000202)]


def test_compile_maps_icd_codes_through_maps_to(download, tmp_path, caplog):
    assert detect_format(download) == "athena"
    with caplog.at_level(logging.WARNING):
        res = compile_source(download, out=tmp_path / "programs")
    assert any("OHDSI" in r.getMessage() for r in caplog.records)  # the licence reminder
    toks = _tokens(res.path)
    assert toks[("ICD10CM", "J189")] == (100000202,)
    assert toks[("ICD10CM", "J129")] == (100000606,)  # the deprecated Maps to is not read now
    assert toks[("ICD9CM", "486")] == (100000202,)  # upgraded target -> Concept replaced by
    assert toks[("ICD9CM", "V1261")] == (100000202,)
    assert toks[("ICD9CM", "E8889")] == (100000101,)
    assert ("ICD10CM", "J188") not in toks  # the code is deleted
    edges = _edges(res.path)
    assert (("ICD10CM", "J129"), ("attribute", 246075003), ("concept", "100000707")) in edges
    assert (("ICD10CM", "J129"), ("description", "description"), ("word", "viral")) in edges
    m = res.manifest
    assert m["release"]["type"] == "Athena" and "OHDSI" in m["release"]["note"]
    assert m["counts"]["unknown_relationship_ids"] == {"Has some new attribute": 1}
    assert m["counts"]["mapping_map_targets_redirected_by_association"] == 1
    again = compile_source(download, out=tmp_path / "programs")
    assert not again.written and again.program_id == res.program_id


def test_as_of_reads_the_rows_valid_then(download, tmp_path):
    res = compile_source(download, out=tmp_path / "p", as_of="20170101")
    toks = _tokens(res.path)
    assert toks[("ICD10CM", "J129")] == (100000202, 100000606)  # both Maps to valid in 2017
    assert toks[("ICD10CM", "J188")] == (100000202,)  # the code was valid then
    assert toks[("ICD9CM", "486")] == (100000505,)  # its concept was not yet replaced


def test_export_round_trip_equals_the_rf2_program(compiled, tmp_path):
    exp = export_athena(compiled.path, tmp_path / "athena")
    back = compile_source(exp.path, out=tmp_path / "programs")
    assert _tokens(back.path) == _tokens(compiled.path)
    lost = {("attribute", t) for t in exp.counts["attribute_types_not_expressible"]}
    rf2 = {e for e in _edges(compiled.path) if e[1] not in lost}
    assert _edges(back.path) == rf2
    a1 = {
        (r["kind"], r["key"], r["label"]) for r in pq.read_table(compiled.path / "atoms.parquet").to_pylist()
    }
    a2 = {(r["kind"], r["key"], r["label"]) for r in pq.read_table(back.path / "atoms.parquet").to_pylist()}
    assert a2 <= a1 and {(k, key) for k, key, _ in a1 - a2} <= {
        a for e in _edges(compiled.path) - rf2 for a in [e[2]]
    }
    with pytest.raises(OutputExistsError):
        export_athena(compiled.path, tmp_path / "athena")


# ------------------------------------------------------------------------------------------ bad input


def test_missing_required_file(download, tmp_path):
    (download / "CONCEPT_RELATIONSHIP.csv").unlink()
    with pytest.raises(MissingInputError, match="CONCEPT_RELATIONSHIP.csv missing"):
        compile_source(download, format="athena", out=tmp_path / "p")
    assert detect_format(download) == "rf2"  # auto: no longer an Athena folder
    (download / "CONCEPT.csv").unlink()
    with pytest.raises(MissingInputError, match="CONCEPT.csv, CONCEPT_RELATIONSHIP.csv missing"):
        load_athena(download)


def test_comma_separated_file(download):
    text = (download / "CONCEPT.csv").read_text().replace("\t", ",")
    (download / "CONCEPT.csv").write_text(text)
    with pytest.raises(InputFileError, match="comma-separated") as e:
        load_athena(download)
    assert e.value.line == 1 and e.value.path.name == "CONCEPT.csv"


def test_duplicated_concept_id(tmp_path):
    rows = [
        *CONCEPTS,
        ["2", "Pneumonia again", "Condition", "SNOMED", "Disorder", "S", "100000808", "20020131", END, ""],
    ]
    root = write_download(tmp_path / "a", concepts=rows)
    with pytest.raises(InputFileError, match="concept_id 2 appears twice") as e:
        load_athena(root)
    assert e.value.line == len(rows) + 1


def test_maps_to_non_standard_or_missing_concept_is_warned_and_dropped(tmp_path, caplog):
    rels = [
        *RELATIONSHIPS,
        ["10", "4", "Maps to", "20151001", END, ""],
        ["11", "99", "Maps to", "20151001", END, ""],
    ]
    root = write_download(tmp_path / "a", relationships=rels)
    with caplog.at_level(logging.WARNING):
        res = compile_source(root, out=tmp_path / "p")
    toks = _tokens(res.path)
    assert toks[("ICD10CM", "J189")] == (100000202,) and toks[("ICD10CM", "J129")] == (100000606,)
    c = res.manifest["counts"]
    assert (
        c["mapping_omop_maps_to_non_standard_target"] == 1 and c["mapping_omop_maps_to_missing_concept"] == 1
    )
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "not a standard concept" in text and "concept_id 99" in text


def test_unknown_relationship_ids_are_counted_and_listed(tmp_path, caplog):
    rels = [
        *RELATIONSHIPS,
        ["6", "1", "Has thing", "20020131", END, ""],
        ["2", "1", "Has thing", "20020131", END, ""],
    ]
    root = write_download(tmp_path / "a", relationships=rels)
    with caplog.at_level(logging.WARNING):
        rel, info = load_athena(root)
    assert info["unknown_relationship_ids"] == {"Has thing": 2, "Has some new attribute": 1}
    assert rel.counts["relationship_rows_unknown_id"] == 3
    assert "'Has thing' (2)" in caplog.text


@pytest.mark.parametrize("value", ["20221301", "2022-05-31", "20210229"])
def test_dates_that_are_not_calendar_dates(tmp_path, value):
    rows = [list(r) for r in CONCEPTS]
    rows[3][7] = value
    root = write_download(tmp_path / "a", concepts=rows)
    with pytest.raises(InputFileError, match="valid_start_date is not a calendar date") as e:
        load_athena(root)
    assert e.value.line == 5


def test_end_before_start(tmp_path):
    rels = [list(r) for r in RELATIONSHIPS]
    rels[2][4] = "20010101"
    root = write_download(tmp_path / "a", relationships=rels)
    with pytest.raises(InputFileError, match="valid_end_date before valid_start_date") as e:
        load_athena(root)
    assert e.value.line == 4


def test_rf2_only_options_are_refused(download, tmp_path):
    with pytest.raises(OptionError, match="--stated"):
        compile_source(download, out=tmp_path / "p", stated=True)


# ------------------------------------------------------------------------------------ SNOMED tokens


def test_snomed_concept_tokens_below_a_root(download, tmp_path):
    res = compile_source(download, out=tmp_path / "p", tokens="both", snomed_roots=(100000101,))
    toks = _tokens(res.path)
    snomed = {k: v for k, v in toks.items() if k[0] == "SNOMEDCT"}
    assert snomed == {("SNOMEDCT", str(s)): (s,) for s in (100000101, 100000202, 100000606)}
    assert ("ICD10CM", "J189") in toks  # both: the ICD tokens stay
    edges = _edges(res.path)
    assert (("SNOMEDCT", "100000606"), ("attribute", 246075003), ("concept", "100000707")) in edges
    assert not any(e[0][0] == "SNOMEDCT" and e[1][0] == "icd_hierarchy" for e in edges)
    only = compile_source(download, out=tmp_path / "p", tokens="snomed", snomed_roots=(100000101,))
    assert {k[0] for k in _tokens(only.path)} == {"SPECIAL", "SNOMEDCT"}
    assert only.program_id != res.program_id
    plain = compile_source(download, out=tmp_path / "q")
    assert "tokens" not in plain.manifest["options"]  # ICD programs keep their ids


def test_snomed_tokens_from_a_concept_set(download, tmp_path, caplog):
    cs = tmp_path / "concepts.tsv"
    cs.write_text("sctid\tname\n100000202\tPneumonia\n100000505  # retired\n100000303\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        res = compile_source(download, out=tmp_path / "p", tokens="snomed", concept_set=cs)
    assert sorted(k[1] for k in _tokens(res.path) if k[0] == "SNOMEDCT") == ["100000202", "100000303"]
    assert res.manifest["counts"]["mapping_snomed_tokens_not_active"] == 1 and "not active" in caplog.text
    cs.write_text("100000202\nE11.9\n", encoding="utf-8")
    with pytest.raises(InputFileError, match="not an SCTID") as e:
        compile_source(download, out=tmp_path / "p2", tokens="snomed", concept_set=cs)
    assert e.value.line == 2
    with pytest.raises(OptionError, match="--tokens snomed or both"):
        compile_source(download, out=tmp_path / "p3", concept_set=cs)
