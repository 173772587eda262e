"""What the release step keeps: the inferred view holds only inferred rows; rows of a concept that is not
in the release are counted apart from those of inactive concepts; an unknown ``--language`` refset is an
error; dates are calendar dates.

Before: stated rows inside ``sct2_Relationship_*`` were used as inferred edges; rows of unknown concepts
were reported as "of inactive concepts"; ``--language 999000001000000101`` compiled with no synonyms;
``effectiveTime 20201341`` and ``--as-of 20211399`` were accepted. All with exit code 0.
"""

from __future__ import annotations

import logging

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from rf2_edit import FIXTURE, INT, one, read_lines, write_lines

from ontology_compiler import AsOfError, InputFileError, OptionError, compile_ontology
from ontology_compiler import rf2_schema as S
from ontology_compiler.cli import main
from ontology_compiler.sctid import make_sctid
from ontology_compiler.summary import summary

T2DM = 9990104001  # Type 2 diabetes mellitus: mapped to E11.9, is-a Diabetes mellitus 9990103007
UNKNOWN = make_sctid(9999901)  # a valid SCTID that no Concept file holds


def _row(*values) -> bytes:
    return "\t".join(str(v) for v in values).encode()


def _is_a_row(lines: list[bytes], source: int) -> int:
    return next(
        i
        for i, b in enumerate(lines)
        if b.startswith(b"99")
        and b.split(b"\t")[4] == str(source).encode()
        and b.split(b"\t")[7] == str(S.IS_A).encode()
    )


# ---- characteristic types ------------------------------------------------------------------------


def test_stated_rows_in_the_inferred_file_are_not_edges(release, tmp_path, baseline, caplog):
    p = one(release / INT / "Snapshot", "sct2_Relationship_Snapshot_*")
    lines = read_lines(p)
    i = _is_a_row(lines, T2DM)
    parts = lines[i].split(b"\t")
    rel_id = int(parts[0])
    parts[8] = str(S.STATED).encode()
    lines[i] = b"\t".join(parts)
    write_lines(p, lines)
    with caplog.at_level(logging.WARNING):
        r = compile_ontology(release, out=tmp_path / "out")
    c = r.manifest["counts"]
    assert c["relationships_dropped_characteristic_type"] == 1
    assert c["relationships_active"] == baseline.manifest["counts"]["relationships_active"] - 1
    assert rel_id not in pq.read_table(r.path / "graph/snomed_relationships.parquet")["id"].to_pylist()
    assert any(str(rel_id) in m and str(S.STATED) in m for m in caplog.messages)
    assert "1 relationship rows of another characteristic type (dropped)" in summary(r)
    # the stated view is not affected by the inferred file, and ignores inferred rows in the stated file
    s = compile_ontology(release, out=tmp_path / "out", stated=True)
    assert s.manifest["counts"]["relationships_dropped_characteristic_type"] == 0


def test_inferred_rows_in_the_stated_file_are_not_stated_edges(release, tmp_path):
    p = one(release / INT / "Snapshot", "sct2_StatedRelationship_Snapshot_*")
    lines = read_lines(p)
    lines[1] = b"\t".join([*lines[1].split(b"\t")[:8], str(S.INFERRED).encode(), lines[1].split(b"\t")[9]])
    write_lines(p, lines)
    r = compile_ontology(release, out=tmp_path / "out", stated=True)
    assert r.manifest["counts"]["relationships_dropped_characteristic_type"] == 1
    assert (
        int(lines[1].split(b"\t")[0])
        not in pq.read_table(r.path / "graph/snomed_relationships.parquet")["id"].to_pylist()
    )


def test_additional_rows_stay_dropped_without_a_warning(release, tmp_path, baseline):
    p = one(release / INT / "Snapshot", "sct2_Relationship_Snapshot_*")
    lines = read_lines(p)
    i = _is_a_row(lines, T2DM)
    lines[i] = b"\t".join([*lines[i].split(b"\t")[:8], str(S.ADDITIONAL).encode(), lines[i].split(b"\t")[9]])
    write_lines(p, lines)
    r = compile_ontology(release, out=tmp_path / "out")
    assert r.manifest["counts"]["relationships_dropped_characteristic_type"] == 0
    assert (
        r.manifest["counts"]["relationships_active"]
        == baseline.manifest["counts"]["relationships_active"] - 1
    )


# ---- unknown concepts ----------------------------------------------------------------------------


def test_rows_of_unknown_concepts_are_counted_apart(release, tmp_path, baseline, caplog):
    rel = one(release / INT / "Snapshot", "sct2_Relationship_Snapshot_*")
    lines = read_lines(rel)
    rel_id = make_sctid(9999902, "02")
    lines[-1:-1] = [
        _row(rel_id, 20220131, 1, S.CORE_MODULE, T2DM, UNKNOWN, 0, S.IS_A, S.INFERRED, S.EXISTENTIAL)
    ]
    write_lines(rel, lines)
    desc = one(release / INT / "Snapshot", "sct2_Description_Snapshot-en_*")
    lines = read_lines(desc)
    desc_id = make_sctid(9999903, "01")
    lines[-1:-1] = [
        _row(desc_id, 20220131, 1, S.CORE_MODULE, UNKNOWN, "en", S.SYNONYM, "Orphan term", S.CASE_INSENSITIVE)
    ]
    write_lines(desc, lines)
    with caplog.at_level(logging.WARNING):
        r = compile_ontology(release, out=tmp_path / "out")
    c, b = r.manifest["counts"], baseline.manifest["counts"]
    assert c["relationships_dropped_unknown_concept"] == 1 and c["descriptions_dropped_unknown_concept"] == 1
    # the inactive-concept counts are what they were: the unknown rows are not in them
    assert c["relationships_dropped_inactive_concept"] == b["relationships_dropped_inactive_concept"] == 1
    assert c["descriptions_dropped_inactive_concept"] == b["descriptions_dropped_inactive_concept"] == 4
    assert any(str(rel_id) in m and str(UNKNOWN) in m for m in caplog.messages)
    assert any(str(desc_id) in m and str(UNKNOWN) in m for m in caplog.messages)
    text = summary(r)
    assert "1 relationships from or to a concept not in the release (dropped)" in text
    assert "1 descriptions of a concept not in the release (dropped)" in text
    assert "4 descriptions and 1 relationships of inactive concepts" in text


def test_baseline_summary_has_no_new_warnings(baseline):
    assert "warnings" not in summary(baseline)


# ---- --language ----------------------------------------------------------------------------------


def test_unknown_language_refset_is_an_error(tmp_path):
    with pytest.raises(OptionError) as e:
        compile_ontology(FIXTURE, out=tmp_path / "out", languages=(999000001000000101,))
    msg = str(e.value)
    assert "999000001000000101" in msg
    assert f"{S.US_ENGLISH} (US English)" in msg and f"{S.GB_ENGLISH} (GB English)" in msg
    assert "der2_cRefset_LanguageSnapshot-en_INT_20220531.txt" in msg
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("manifest.json"))


def test_one_unknown_among_several_languages_is_an_error(tmp_path):
    with pytest.raises(OptionError, match="999000001000000101"):
        compile_ontology(FIXTURE, out=tmp_path / "out", languages=(S.GB_ENGLISH, 999000001000000101))


def test_cli_unknown_language_exits_1(tmp_path):
    r = CliRunner().invoke(
        main, [str(FIXTURE), "--out", str(tmp_path), "-q", "--language", "999000001000000101"]
    )
    assert r.exit_code == 1 and "refsets found" in r.output and "Traceback" not in r.output


def test_known_languages_still_give_synonyms(tmp_path, baseline):
    gb = compile_ontology(FIXTURE, out=tmp_path / "out", languages=(S.GB_ENGLISH,))
    atoms = pq.read_table(gb.path / "atoms.parquet")
    words = set(atoms.filter(pc.equal(atoms["kind"], "word"))["key"].to_pylist())
    assert "anaemia" in words  # the GB-only synonym "Iron deficiency anaemia"


# ---- dates ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("date", [b"20201341", b"20210229", b"20200000"])
def test_effective_time_must_be_a_calendar_date(release, tmp_path, date):
    p = one(release / INT / "Snapshot", "sct2_Concept_Snapshot_*")
    lines = read_lines(p)
    parts = lines[5].split(b"\t")
    parts[1] = date
    lines[5] = b"\t".join(parts)
    write_lines(p, lines)
    with pytest.raises(InputFileError) as e:
        compile_ontology(release, out=tmp_path / "out")
    assert e.value.path == p and e.value.line == 6
    assert date.decode() in str(e.value) and "calendar date" in str(e.value)


def test_effective_time_in_a_refset_must_be_a_calendar_date(release, tmp_path):
    p = one(release / INT / "Snapshot", "der2_iisssccRefset_ExtendedMapSnapshot_*")
    lines = read_lines(p)
    parts = lines[3].split(b"\t")
    parts[1] = b"20221131"
    lines[3] = b"\t".join(parts)
    write_lines(p, lines)
    with pytest.raises(InputFileError) as e:
        compile_ontology(release, out=tmp_path / "out")
    assert e.value.path == p and e.value.line == 4 and "20221131" in str(e.value)


@pytest.mark.parametrize("as_of", ["20211399", "20210229", "20220132"])
def test_as_of_must_be_a_calendar_date(tmp_path, as_of):
    with pytest.raises(AsOfError, match=f"{as_of} is not a calendar date"):
        compile_ontology(FIXTURE, out=tmp_path / "out", as_of=as_of)
    assert not (tmp_path / "out").exists()


def test_cli_bad_as_of_exits_1(tmp_path):
    r = CliRunner().invoke(main, [str(FIXTURE), "--out", str(tmp_path / "out"), "--as-of", "20211399"])
    assert r.exit_code == 1 and "not a calendar date" in r.output


def test_leap_day_is_a_date(tmp_path):
    r = compile_ontology(FIXTURE, out=tmp_path / "out", as_of="20200229")
    assert r.manifest["release"]["as_of"] == "20200229"
