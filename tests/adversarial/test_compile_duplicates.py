"""Two rows of one component with the same id and effectiveTime: identical repeats are dropped and
counted; rows that differ are an error naming both lines.

Before: the pick among such rows followed file order, so an inactive copy of concept 9990104001 placed
before its active row made the concept and its relationships vanish (30 tokens instead of 31), exit 0.
"""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from rf2_edit import INT, one, read_lines, write_lines

from ontology_compiler import DuplicateRowError, InputFileError, compile_ontology
from ontology_compiler.cli import main

US = "SnomedCT_MiniUSExtensionRF2_PRODUCTION_20220301T120000Z"
CONCEPT = b"9990104001\t"  # Type 2 diabetes mellitus, mapped (E11.9) and with relationships


def _line_of(lines: list[bytes], prefix: bytes) -> int:
    """0-based index of the line that starts with ``prefix`` (the file's line number is this + 1)."""
    return next(i for i, b in enumerate(lines) if b.startswith(prefix))


def _set(line: bytes, column: int, value: bytes) -> bytes:
    parts = line.split(b"\t")
    parts[column] = value
    return b"\t".join(parts)


def test_inactive_copy_before_the_active_row_is_an_error(release, tmp_path):
    p = one(release / INT / "Snapshot", "sct2_Concept_Snapshot_*")
    lines = read_lines(p)
    i = _line_of(lines, CONCEPT)
    lines.insert(i, _set(lines[i], 2, b"0"))  # same id, same effectiveTime, active 0, read first
    write_lines(p, lines)
    with pytest.raises(DuplicateRowError) as e:
        compile_ontology(release, out=tmp_path / "out")
    err = e.value
    assert (err.path, err.line) == (p, i + 1) and (err.other_path, err.other_line) == (p, i + 2)
    msg = str(err)
    assert "9990104001" in msg and "active=0" in msg and "active=1" in msg
    assert f"line {i + 1}" in msg and f"line {i + 2}" in msg
    assert not (tmp_path / "out").exists()


def test_conflict_across_packages_names_both_files(release, tmp_path):
    """The US package repeats an International concept row with the same effectiveTime but another
    definition status."""
    intl = one(release / INT / "Snapshot", "sct2_Concept_Snapshot_*")
    row = read_lines(intl)[_line_of(read_lines(intl), CONCEPT)]
    us = one(release / US / "Snapshot", "sct2_Concept_Snapshot_*")
    lines = read_lines(us)
    lines.insert(1, _set(row, 4, b"900000000000073002"))
    write_lines(us, lines)
    with pytest.raises(DuplicateRowError) as e:
        compile_ontology(release, out=tmp_path / "out")
    assert {e.value.path, e.value.other_path} == {intl, us}
    assert "definitionStatusId" in str(e.value)


def test_conflict_in_a_full_file(release, tmp_path):
    p = one(release / INT / "Full", "sct2_Relationship_Full_*")
    lines = read_lines(p)
    lines[-1:-1] = [_set(lines[1], 8, b"900000000000010007")]  # same id and time, another type
    write_lines(p, lines)
    with pytest.raises(DuplicateRowError) as e:
        compile_ontology(release, out=tmp_path / "out", as_of="20220131")
    assert e.value.path == p and {e.value.line, e.value.other_line} == {2, len(lines) - 1}
    assert isinstance(e.value, InputFileError)


def test_identical_repeats_are_dropped_and_counted(release, tmp_path, baseline):
    concept = one(release / INT / "Snapshot", "sct2_Concept_Snapshot_*")
    lines = read_lines(concept)
    i = _line_of(lines, CONCEPT)
    lines.insert(i, lines[i])
    write_lines(concept, lines)
    rel = one(release / INT / "Snapshot", "sct2_Relationship_Snapshot_*")
    lines = read_lines(rel)
    lines[-1:-1] = [lines[1], lines[2]]  # two identical repeats at the end
    write_lines(rel, lines)
    r = compile_ontology(release, out=tmp_path / "out")
    c = r.manifest["counts"]
    assert c["rows_duplicate_dropped_Concept"] == 1 and c["rows_duplicate_dropped_Relationship"] == 2
    assert c["concepts"] == baseline.manifest["counts"]["concepts"] == 31
    for name in ("concepts", "edges", "atoms", "graph/snomed_relationships"):
        assert pq.read_table(r.path / f"{name}.parquet").equals(
            pq.read_table(baseline.path / f"{name}.parquet")
        )
    out = CliRunner().invoke(main, [str(release), "--out", str(tmp_path / "out2")])
    assert out.exit_code == 0, out.output
    assert "3 identical repeated rows (Concept 1, Relationship 2) (dropped)" in out.output


def test_identical_repeat_across_packages(release, tmp_path, baseline):
    """The same International package twice (e.g. an Edition that bundles it, next to it)."""
    shutil.copytree(release / INT, release / "copy" / INT)
    r = compile_ontology(release, out=tmp_path / "out")
    c = r.manifest["counts"]
    assert c["rows_duplicate_dropped_Concept"] == 90 and c["concepts"] == 31
    assert pq.read_table(r.path / "edges.parquet").equals(pq.read_table(baseline.path / "edges.parquet"))
