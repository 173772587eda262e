"""The program id covers every option that changes a program: recompiling with another value of any of
them gives another id and writes another program (never the no-op of "identical inputs").

Planted bug that survived the suite before: dropping ``languages`` or ``fallback`` from the hash made a
recompile with ``--language GB`` (or ``--fallback icd``) return the earlier program unchanged.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ontology_compiler import InputFileError, compile_ontology, compile_owl
from ontology_compiler import rf2_schema as S
from ontology_compiler.front import COMMON_OPTIONS, OWL_OPTIONS, RF2_OPTIONS
from ontology_compiler.map_policy import default_policy_path

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURE = DATA / "snomed_mini_20220531"
M = DATA / "mapping_sources"
OWL = DATA / "owl_mini.owl"
US = "SnomedCT_MiniUSExtensionRF2_PRODUCTION_20220301T120000Z"

# Options that name where a program goes, not what it holds.
NOT_CONTENT = {"out", "name"}


def _policy_first(tmp: Path) -> Path:
    p = tmp / "policy_first.toml"
    p.write_text(default_policy_path().read_text().replace('mode = "union"', 'mode = "first"'))
    return p


def _stopwords(tmp: Path) -> Path:
    p = tmp / "stopwords.txt"
    p.write_text("a\nthe\nof\n")
    return p


def _tls(tmp: Path) -> Path:
    """The US extension's ICD-10-CM map rows as a tls_Icd10cmHumanReadableMap file."""
    src = next((FIXTURE / US / "Snapshot").rglob("der2_iisssccRefset_ExtendedMapSnapshot_*"))
    rows = src.read_text("utf-8").splitlines()[1:]
    header = (
        "id effectiveTime active moduleId refsetId referencedComponentId referencedComponentName mapGroup "
        "mapPriority mapRule mapAdvice mapTarget mapTargetName correlationId mapCategoryId mapCategoryName"
    )
    out = [header.replace(" ", "\t")]
    for r in rows:
        f = r.split("\t")
        out.append("\t".join([*f[:6], "name", *f[6:11], "target", f[11], f[12], "category"]))
    p = tmp / "tls" / "tls_Icd10cmHumanReadableMap_US1000124_20220301.tsv"
    p.parent.mkdir()
    p.write_text("\r\n".join(out) + "\r\n", "utf-8")
    return p


# option -> (base value, other value); base None means "not given" (the default)
RF2_VARIANTS = {
    "languages": lambda t: ((S.US_ENGLISH,), (S.GB_ENGLISH,)),
    "fallback": lambda t: ("none", "icd"),
    "as_of": lambda t: ("20200131", "20220131"),
    "release": lambda t: ("snapshot", "full"),
    "stated": lambda t: (False, True),
    "strict": lambda t: (False, True),
    "map_policy": lambda t: (None, _policy_first(t)),
    "stopwords": lambda t: (None, _stopwords(t)),
    "codes": lambda t: (None, M / "d_icd_diagnoses.csv"),
    "code_counts": lambda t: (None, M / "code_counts.csv"),
    "omop": lambda t: (None, M / "omop"),
    "nlm_icd9": lambda t: (None, M / "nlm"),
    "gem": lambda t: (None, M / "gem"),
    "icd10cm_map": lambda t: (None, _tls(t)),
    "packages": lambda t: ((), ("INT_20220531",)),  # see test_package_choice_changes_the_id
    "icd_hierarchy": lambda t: (None, False),
}


SNOMED_TOKEN_OPTIONS = {"tokens", "snomed_roots", "concept_set"}  # tested together, below


def test_every_rf2_option_has_a_variant():
    assert set(RF2_VARIANTS) | NOT_CONTENT | SNOMED_TOKEN_OPTIONS == set(COMMON_OPTIONS) | set(RF2_OPTIONS)


def test_snomed_token_options_are_part_of_the_id(tmp_path):
    out = tmp_path / "out"
    icd = compile_ontology(FIXTURE, out=out)
    both = compile_ontology(FIXTURE, out=out, tokens="both")
    snomed = compile_ontology(FIXTURE, out=out, tokens="snomed")
    root = compile_ontology(FIXTURE, out=out, tokens="both", snomed_roots=(S.ROOT,))
    cs = tmp_path / "set.txt"
    cs.write_text("404684003\n", encoding="utf-8")
    named = compile_ontology(FIXTURE, out=out, tokens="both", concept_set=cs)
    ids = [r.program_id for r in (icd, both, snomed, root, named)]
    assert len(set(ids)) == 5
    assert "tokens" not in icd.manifest["options"]


@pytest.mark.parametrize("option", sorted(set(RF2_VARIANTS) - {"packages"}))
def test_another_rf2_option_value_gives_another_program(tmp_path, option):
    base_value, other_value = RF2_VARIANTS[option](tmp_path)
    # with the four sources and a code list, every option (fallback too) changes the content
    common = {"omop": M / "omop", "nlm_icd9": M / "nlm", "gem": M / "gem", "codes": M / "d_icd_diagnoses.csv"}
    if option in common:
        common.pop(option)
    out = tmp_path / "out"
    kw = {} if base_value is None else {option: base_value}
    a = compile_ontology(FIXTURE, out=out, **common, **kw)
    b = compile_ontology(FIXTURE, out=out, **common, **{option: other_value})
    assert b.program_id != a.program_id, f"{option} is not part of the program id"
    assert b.written and b.path != a.path and a.path.is_dir() and b.path.is_dir()
    again = compile_ontology(FIXTURE, out=out, **common, **{option: other_value})
    assert not again.written and again.program_id == b.program_id


@pytest.mark.parametrize(
    ("option", "value", "table"),
    [("languages", (S.GB_ENGLISH,), "atoms"), ("fallback", "icd", "concepts")],
)
def test_languages_and_fallback_change_the_content(tmp_path, option, value, table):
    common = {"omop": M / "omop", "nlm_icd9": M / "nlm", "gem": M / "gem", "codes": M / "d_icd_diagnoses.csv"}
    a = compile_ontology(FIXTURE, out=tmp_path, **common)
    b = compile_ontology(FIXTURE, out=tmp_path, **common, **{option: value})
    assert b.written and b.program_id != a.program_id
    ta, tb = (pq.read_table(r.path / f"{table}.parquet") for r in (a, b))
    assert not ta.equals(tb)
    assert b.manifest["options"][option] == (list(value) if option == "languages" else value)


def test_language_order_is_part_of_the_id(tmp_path):
    a = compile_ontology(FIXTURE, out=tmp_path, languages=(S.US_ENGLISH, S.GB_ENGLISH))
    b = compile_ontology(FIXTURE, out=tmp_path, languages=(S.GB_ENGLISH, S.US_ENGLISH))
    assert a.program_id != b.program_id and b.written  # the first refset gives the labels


def test_strict_recompile_is_not_a_no_op(tmp_path):
    """A release with a bad check digit compiles leniently; --strict on it must fail, not return that
    program as up to date."""
    rel = tmp_path / "release"
    shutil.copytree(FIXTURE, rel)
    p = next(rel.rglob("sct2_Relationship_Snapshot_INT_*"))
    lines = p.read_bytes().split(b"\r\n")
    parts = lines[2].split(b"\t")
    parts[0] = parts[0][:-1] + str((int(parts[0][-1:]) + 1) % 10).encode()
    lines[2] = b"\t".join(parts)
    p.write_bytes(b"\r\n".join(lines))
    lenient = compile_ontology(rel, out=tmp_path / "out")
    assert lenient.manifest["counts"]["ids_bad_check_digit"] == 1
    with pytest.raises(InputFileError, match="check digit"):
        compile_ontology(rel, out=tmp_path / "out", strict=True)


def test_package_choice_changes_the_id(tmp_path):
    """--package chooses files, and the chosen files are the program's inputs."""
    rel = tmp_path / "release"
    shutil.copytree(FIXTURE, rel)
    old = rel / "SnomedCT_MiniInternationalRF2_PRODUCTION_20210131T120000Z"
    shutil.copytree(rel / "SnomedCT_MiniInternationalRF2_PRODUCTION_20220531T120000Z", old)
    for p in list(old.rglob("*_INT_20220531.txt")):
        p.rename(p.with_name(p.name.replace("20220531", "20210131")))
    for p in old.rglob("sct2_Description_*"):
        p.write_bytes(p.read_bytes().replace(b"Kidney disease", b"Renal disease"))
    a = compile_ontology(rel, out=tmp_path / "out", packages=("INT_20220531",))
    b = compile_ontology(rel, out=tmp_path / "out", packages=("INT_20210131",))
    assert a.program_id != b.program_id and a.written and b.written
    assert any("20210131" in i["path"] for i in b.manifest["inputs"])
    assert not any("20220531" in i["path"] for i in b.manifest["inputs"])


# ---- OWL -----------------------------------------------------------------------------------------

OWL_VARIANTS = {
    "codes": lambda t: (None, DATA / "owl_mini_codes.txt"),
    "code_property": lambda t: (None, "oboInOwl:hasDbXref"),
    "language": lambda t: ("en", None),
    "label_properties": lambda t: (("rdfs:label",), ("skos:prefLabel", "rdfs:label")),
    "synonym_properties": lambda t: (None, ("oboInOwl:hasExactSynonym",)),
    "stopwords": lambda t: (None, _stopwords(t)),
    "icd_hierarchy": lambda t: (None, False),
}


def test_every_owl_option_has_a_variant():
    assert set(OWL_VARIANTS) | NOT_CONTENT | {"code_prefixes"} == set(COMMON_OPTIONS) | set(OWL_OPTIONS)


@pytest.mark.parametrize("option", sorted(OWL_VARIANTS))
def test_another_owl_option_value_gives_another_program(tmp_path, option):
    base_value, other_value = OWL_VARIANTS[option](tmp_path)
    kw = {} if base_value is None else {option: base_value}
    a = compile_owl(OWL, out=tmp_path / "out", **kw)
    b = compile_owl(OWL, out=tmp_path / "out", **{option: other_value})
    assert b.program_id != a.program_id, f"{option} is not part of the program id"
    assert b.written and b.path.is_dir() and a.path.is_dir()


def test_owl_code_prefixes_are_part_of_the_id(tmp_path):
    a = compile_owl(OWL, out=tmp_path, code_property="oboInOwl:hasDbXref")
    b = compile_owl(OWL, out=tmp_path, code_property="oboInOwl:hasDbXref", code_prefixes=("ICD10CM",))
    assert a.program_id != b.program_id and b.written
