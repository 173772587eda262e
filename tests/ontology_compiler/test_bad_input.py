"""Bad input: each failure names the file, the line and what was expected; nothing half-written."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ontology_compiler import (
    AsOfError,
    HierarchyCycleError,
    InputFileError,
    MissingInputError,
    OutputExistsError,
    compile_ontology,
)
from ontology_compiler import rf2_schema as S
from ontology_compiler.sctid import make_sctid

INT = "SnomedCT_MiniInternationalRF2_PRODUCTION_20220531T120000Z"


def find_file(root: Path, pattern: str) -> Path:
    hits = sorted(root.rglob(pattern))
    assert hits, f"no {pattern} under {root}"
    return hits[0]


def _edit_line(path: Path, lineno: int, fn) -> str:
    raw = path.read_bytes().split(b"\r\n")
    raw[lineno - 1] = fn(raw[lineno - 1])
    path.write_bytes(b"\r\n".join(raw))
    return raw[lineno - 1].decode("utf-8", "replace")


def test_missing_required_file_lists_what_was_found(release_copy, tmp_path):
    for p in release_copy.rglob("sct2_Relationship_*.txt"):
        p.unlink()
    with pytest.raises(MissingInputError) as e:
        compile_ontology(release_copy, out=tmp_path / "out")
    msg = str(e.value)
    assert "sct2_Relationship_Snapshot_*.txt" in msg
    assert "sct2_Concept_Snapshot_INT_20220531.txt" in msg  # what was found is listed
    assert not (tmp_path / "out").exists()


def test_wrong_header(release_copy, tmp_path):
    p = find_file(release_copy / INT / "Snapshot", "sct2_Concept_*")
    _edit_line(p, 1, lambda b: b.replace(b"definitionStatusId", b"definitionStatus"))
    with pytest.raises(InputFileError) as e:
        compile_ontology(release_copy, out=tmp_path / "out")
    assert e.value.path == p and e.value.line == 1
    assert "definitionStatusId" in str(e.value) and "definitionStatus " in str(e.value)


def test_wrong_column_count_names_line(release_copy, tmp_path):
    p = find_file(release_copy / INT / "Snapshot", "sct2_Description_*")
    _edit_line(p, 4, lambda b: b + b"\textra")
    with pytest.raises(InputFileError) as e:
        compile_ontology(release_copy, out=tmp_path / "out")
    assert e.value.path == p and e.value.line == 4
    assert "9 TAB-separated columns" in str(e.value) and "10" in str(e.value)


def test_invalid_utf8_names_line(release_copy, tmp_path):
    p = find_file(release_copy / INT / "Snapshot", "sct2_Description_*")
    _edit_line(p, 3, lambda b: b + b"\xff")  # a stray byte at the end of the term
    with pytest.raises(InputFileError) as e:
        compile_ontology(release_copy, out=tmp_path / "out")
    assert e.value.line == 3 and "UTF-8" in str(e.value)


def test_bad_check_digit_warns_by_default_and_fails_strict(release_copy, tmp_path, caplog):
    p = find_file(release_copy / INT / "Snapshot", "sct2_Relationship_Snapshot*")
    line = 3

    def bump(b: bytes) -> bytes:
        f = b.split(b"\t")
        f[0] = str(int(f[0]) + 1).encode()  # one digit off: the Verhoeff check fails
        return b"\t".join(f)

    _edit_line(p, line, bump)
    r = compile_ontology(release_copy, out=tmp_path / "out")
    assert r.manifest["counts"]["ids_bad_check_digit"] == 1
    assert any(f"line {line}" in m for m in r.manifest["findings"])
    with pytest.raises(InputFileError) as e:
        compile_ontology(release_copy, out=tmp_path / "out2", strict=True)
    assert e.value.path == p and e.value.line == line and "check digit" in str(e.value)


def test_non_numeric_id_dropped_or_fatal(release_copy, tmp_path):
    p = find_file(release_copy / INT / "Snapshot", "sct2_Relationship_Snapshot*")
    _edit_line(p, 5, lambda b: b"12AB34\t" + b.split(b"\t", 1)[1])
    r = compile_ontology(release_copy, out=tmp_path / "out")
    assert r.manifest["counts"]["ids_dropped_non_numeric"] == 1
    with pytest.raises(InputFileError) as e:
        compile_ontology(release_copy, out=tmp_path / "out2", strict=True)
    assert e.value.line == 5 and "non-numeric" in str(e.value) and "12AB34" in str(e.value)


def test_bad_effective_time_is_structural(release_copy, tmp_path):
    p = find_file(release_copy / INT / "Snapshot", "sct2_Concept_*")
    _edit_line(p, 2, lambda b: b"\t".join([b.split(b"\t")[0], b"2022-01-31", *b.split(b"\t")[2:]]))
    with pytest.raises(InputFileError) as e:
        compile_ontology(release_copy, out=tmp_path / "out")
    assert e.value.line == 2


def test_is_a_cycle_names_members(release_copy, tmp_path):
    p = find_file(release_copy / INT / "Snapshot", "sct2_Relationship_Snapshot*")
    lines = p.read_bytes().split(b"\r\n")
    header = lines[0].decode().split("\t")
    rows = [dict(zip(header, ln.decode().split("\t"), strict=True)) for ln in lines[1:] if ln]
    isa = [r for r in rows if r["typeId"] == str(S.IS_A) and r["active"] == "1"]
    child = isa[0]
    # parent of the child's parent -> child closes a loop: child -> parent -> child
    new = dict(
        child,
        id=str(make_sctid(8888001, "02")),
        sourceId=child["destinationId"],
        destinationId=child["sourceId"],
    )
    lines.insert(
        len(lines) - 1 if lines[-1] == b"" else len(lines), "\t".join(new[h] for h in header).encode()
    )
    p.write_bytes(b"\r\n".join(lines))
    with pytest.raises(HierarchyCycleError) as e:
        compile_ontology(release_copy, out=tmp_path / "out")
    assert set(e.value.members) == {int(child["sourceId"]), int(child["destinationId"])}
    assert child["sourceId"] in str(e.value)


def test_as_of_before_first_effective_time(fixture_release, tmp_path):
    with pytest.raises(AsOfError) as e:
        compile_ontology(fixture_release, out=tmp_path / "out", as_of="19990101")
    assert "19990101" in str(e.value) and "first effective time" in str(e.value)
    with pytest.raises(AsOfError):
        compile_ontology(fixture_release, out=tmp_path / "out", as_of="2022-01-31")


def test_output_holding_different_content_is_never_overwritten(fixture_release, tmp_path):
    r = compile_ontology(fixture_release, out=tmp_path / "out")
    victim = r.path / "atoms.parquet"
    victim.write_bytes(victim.read_bytes() + b"tampered")
    before = {p: p.read_bytes() for p in r.path.rglob("*") if p.is_file()}
    with pytest.raises(OutputExistsError) as e:
        compile_ontology(fixture_release, out=tmp_path / "out")
    assert "never overwritten" in str(e.value)
    assert {p: p.read_bytes() for p in r.path.rglob("*") if p.is_file()} == before


def test_killed_compile_leaves_no_program(fixture_release, tmp_path):
    """SIGKILL in the middle of writing: no program folder appears; the next run cleans up and succeeds."""
    out = tmp_path / "out"
    code = (
        "import os, signal, sys\n"
        "import ontology_compiler.program as P\n"
        "orig = P.write_encoded\n"
        "n = [0]\n"
        "def slow(*a, **k):\n"
        "    r = orig(*a, **k); n[0] += 1\n"
        "    if n[0] == 3: os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return r\n"
        "P.write_encoded = slow\n"
        "from ontology_compiler import compile_ontology\n"
        f"compile_ontology({str(fixture_release)!r}, out={str(out)!r})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    release_dir = out / fixture_release.name
    leftovers = list(release_dir.iterdir())
    assert leftovers and all(p.name.startswith(".tmp-") for p in leftovers)  # only a hidden temp folder
    r = compile_ontology(fixture_release, out=out)
    assert r.written
    assert [p.name for p in release_dir.iterdir()] == [r.program_id]
