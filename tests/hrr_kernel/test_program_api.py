"""Program's code API: (vocabulary, code) -> row with dotted or dotless codes, rows(), code(row), the
errors for unknown codes (naming the vocabulary that has the code), and load_program on a release folder."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hrr_kernel import (
    ConceptCode,
    ProgramError,
    UnknownCodeError,
    load_program,
    normalize_code,
    resolve_program,
)
from hrr_kernel.program import sha256_file

DATA = Path(__file__).resolve().parents[1] / "data"

# (vocabulary, code, code_dotted, title, chapter): specials, then codes of which E030 is in both ICD versions
CONCEPTS = [
    ("SPECIAL", "[PAD]", "[PAD]", "[PAD]", None),
    ("SPECIAL", "[CLS]", "[CLS]", "[CLS]", None),
    ("SPECIAL", "[SEP]", "[SEP]", "[SEP]", None),
    ("SPECIAL", "[MASK]", "[MASK]", "[MASK]", None),
    ("SPECIAL", "[UNK]", "[UNK]", "[UNK]", None),
    ("ICD10CM", "E119", "E11.9", "Type 2 diabetes mellitus without complications", 4),
    ("ICD10CM", "E030", "E03.0", "Congenital hypothyroidism with diffuse goiter", 4),
    ("ICD9CM", "E030", "E030", "Unspecified activity", 19),
    ("ICD9CM", "25000", "250.00", "Diabetes mellitus without mention of complication", 3),
    ("ICD9CM", "E8798", "E879.8", "Other specified procedures", 19),
    ("ICD10CM", "I10", "I10", None, 9),
]


def _set_concepts(root: Path, rows=CONCEPTS, chapter: bool = True) -> Path:
    """Replace the concepts table of a synthetic program (keeping its metadata) and rehash it."""
    old = pq.read_table(root / "concepts.parquet")
    cols = {
        "concept_id": pa.array(np.arange(len(rows), dtype=np.int32)),
        "vocabulary": pa.array([r[0] for r in rows]),
        "code": pa.array([r[1] for r in rows]),
        "code_dotted": pa.array([r[2] for r in rows]),
        "title": pa.array([r[3] for r in rows], pa.string()),
        "snomed_ids": pa.array([[] for _ in rows], pa.list_(pa.int64())),
    }
    if chapter:
        cols["chapter"] = pa.array([r[4] for r in rows], pa.int8())
    table = pa.table(cols).replace_schema_metadata(old.schema.metadata)
    pq.write_table(table, root / "concepts.parquet")
    m = json.loads((root / "manifest.json").read_text())
    for f in m["files"]:
        if f["path"] == "concepts.parquet":
            f["sha256"], f["rows"] = sha256_file(root / "concepts.parquet"), len(rows)
    (root / "manifest.json").write_text(json.dumps(m))
    return root


@pytest.fixture
def program(make_program):
    return load_program(_set_concepts(make_program(n_concepts=len(CONCEPTS), n_edges=30)))


@pytest.mark.parametrize("code", ["E11.9", "E119", "e11.9", " E11.9 ", "E1.19"])
def test_row_takes_dotted_or_dotless_codes(program, code):
    assert program.row("ICD10CM", code) == 5
    assert program.row("icd10cm", code) == 5


def test_codes_in_both_icd_versions_are_told_apart_by_vocabulary(program):
    assert program.concept_codes.count("E030") == 2  # the ambiguity the vocabulary resolves
    assert program.row("ICD10CM", "E03.0") == 6
    assert program.row("ICD9CM", "E030") == 7
    assert program.row("ICD9CM", "E879.8") == 9 and program.row("ICD9CM", "250.00") == 8


def test_special_tokens_are_codes_of_the_special_vocabulary(program):
    assert program.row("SPECIAL", "[MASK]") == program.special_id("[MASK]") == 3
    assert program.vocabularies == ["ICD10CM", "ICD9CM", "SPECIAL"]


def test_code_gives_the_row_back(program):
    c = program.code(6)
    assert c == ConceptCode(6, "ICD10CM", "E030", "E03.0", "Congenital hypothyroidism with diffuse goiter", 4)
    assert str(c) == "ICD10CM:E03.0"
    assert program.code(np.int64(7)).vocabulary == "ICD9CM"
    assert program.code(0).chapter is None
    assert program.code(10).title == ""  # a null title
    for i in range(program.n_concepts):
        c = program.code(i)
        assert program.row(c.vocabulary, c.code) == program.row(c.vocabulary, c.code_dotted) == i


@pytest.mark.parametrize("row", [-1, len(CONCEPTS)])
def test_code_of_a_row_outside_the_program(program, row):
    with pytest.raises(IndexError, match=f"row {row} is outside program {program.program_id}"):
        program.code(row)


def test_rows_in_order_as_pairs_or_with_one_vocabulary(program):
    assert program.rows([("ICD9CM", "250.00"), ("ICD10CM", "E11.9"), ("ICD9CM", "E030")]) == [8, 5, 7]
    assert program.rows(["E11.9", "I10", "E030"], vocabulary="ICD10CM") == [5, 10, 6]
    assert program.rows([]) == []
    with pytest.raises(ValueError, match="has no vocabulary"):
        program.rows(["E11.9"])


def test_unknown_code_names_both_and_the_vocabulary_that_has_it(program):
    with pytest.raises(UnknownCodeError) as err:
        program.row("ICD10CM", "E879.8")
    msg = str(err.value)
    assert "ICD10CM" in msg and "'E879.8'" in msg and program.program_id in msg
    assert "it is an ICD9CM code: row('ICD9CM', 'E879.8')" in msg
    assert err.value.missing == [("ICD10CM", "E879.8")]
    assert err.value.elsewhere == {("ICD10CM", "E879.8"): ["ICD9CM"]}
    assert isinstance(err.value, ProgramError) and isinstance(err.value, LookupError)
    assert not msg.startswith("'")  # not KeyError's quoted message


def test_unknown_code_in_no_vocabulary_and_unknown_vocabulary(program):
    with pytest.raises(UnknownCodeError, match=r"has no ICD10CM code 'Z99\.9' \(looked up as 'Z999'\)"):
        program.row("ICD10CM", "Z99.9")
    with pytest.raises(UnknownCodeError, match=r"no vocabulary 'ICD11'; the program has \['ICD10CM'"):
        program.row("ICD11", "E11.9")


def test_rows_lists_every_missing_code(program):
    with pytest.raises(UnknownCodeError) as err:
        program.rows([("ICD10CM", "E11.9"), ("ICD10CM", "25000"), ("ICD9CM", "NOPE")])
    msg = str(err.value)
    assert "lacks 2 of 3 codes" in msg and "it is an ICD9CM code" in msg and "'NOPE'" in msg
    assert err.value.missing == [("ICD10CM", "25000"), ("ICD9CM", "NOPE")]
    many = [("ICD10CM", f"Q{i:03d}") for i in range(13)]
    with pytest.raises(UnknownCodeError, match="and 3 more"):
        program.rows(many)


def test_lookups_survive_a_move_to_another_device(program):
    moved = program.to("cpu")
    assert moved.row("ICD9CM", "E030") == 7 and moved.code(5).code_dotted == "E11.9"
    assert moved.concept_chapters == program.concept_chapters


def test_program_without_a_chapter_column(make_program):
    p = load_program(_set_concepts(make_program(n_concepts=len(CONCEPTS), n_edges=30), chapter=False))
    assert p.code(5).chapter is None and p.row("ICD10CM", "E11.9") == 5


def test_normalize_code_touches_only_icd_codes():
    assert normalize_code("ICD10CM", " e11.9") == "E119"
    assert normalize_code("ICD9CM", "E879.8") == "E8798"
    assert normalize_code("OWL", "HP:0001250") == "HP:0001250"
    assert normalize_code("OWL", "go.term") == "go.term"
    assert normalize_code("SPECIAL", "[PAD]") == "[PAD]"


# --- load_program on a release folder -------------------------------------------------------------------


def _created(root: Path, when: str) -> Path:
    m = json.loads((root / "manifest.json").read_text())
    m["created_at"] = when
    (root / "manifest.json").write_text(json.dumps(m))
    return root


def test_release_folder_gives_its_newest_program_and_says_so(make_program, tmp_path, caplog):
    old = _created(make_program(seed=1, name="release/b_old"), "2024-01-01T00:00:00+00:00")
    new = _created(make_program(seed=2, name="release/a_new"), "2025-06-01T00:00:00+00:00")
    hidden = _created(make_program(seed=3, name="release/.tmp-x-1-ab"), "2026-01-01T00:00:00+00:00")
    (tmp_path / "release" / "junk").mkdir()
    (tmp_path / "release" / "junk" / "manifest.json").write_text("not json")
    with caplog.at_level(logging.INFO, logger="hrr_kernel.program"):
        p = load_program(tmp_path / "release")
    assert p.path == new and resolve_program(tmp_path / "release") == new
    assert p.program_id == json.loads((new / "manifest.json").read_text())["program_id"]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and "holding 2 programs" in warned[0].getMessage() and "a_new" in warned[0].getMessage()
    assert resolve_program(old) == old and resolve_program(hidden) == hidden  # a program folder is itself


def test_release_folder_with_one_program_logs_it(make_program, tmp_path, caplog):
    only = make_program(name="rel/p")
    with caplog.at_level(logging.INFO, logger="hrr_kernel.program"):
        assert load_program(tmp_path / "rel").path == only
    assert any("using its program p" in r.getMessage() for r in caplog.records)


def test_folder_without_programs_is_refused(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ProgramError, match="manifest.json not found.*nor is it a release folder"):
        load_program(tmp_path / "empty")
    with pytest.raises(ProgramError, match="does not exist"):
        load_program(tmp_path / "missing")


def test_compiled_program_rows_match_its_concepts_table(tmp_path):
    """Contract: a compiled release folder loads, and row() agrees with concepts.parquet row by row."""
    from ontology_compiler import compile_ontology

    m = DATA / "mapping_sources"
    result = compile_ontology(
        DATA / "snomed_mini_20220531",
        out=tmp_path,
        omop=m / "omop",
        nlm_icd9=m / "nlm",
        gem=m / "gem",
        codes=m / "d_icd_diagnoses.csv",
        fallback="icd",
    )
    p = load_program(result.path.parent)  # the release folder
    assert p.path == result.path
    t = pq.read_table(result.path / "concepts.parquet").to_pylist()
    assert {r["vocabulary"] for r in t} >= {"ICD9CM", "ICD10CM", "SPECIAL"}
    for r in t:
        assert (
            p.row(r["vocabulary"], r["code_dotted"]) == p.row(r["vocabulary"], r["code"]) == r["concept_id"]
        )
        c = p.code(r["concept_id"])
        assert (c.vocabulary, c.code, c.code_dotted, c.title, c.chapter) == (
            r["vocabulary"],
            r["code"],
            r["code_dotted"],
            r["title"] or "",
            r["chapter"],
        )
    assert p.row("ICD10CM", "E11.9") == p.concept_codes.index("E119")
