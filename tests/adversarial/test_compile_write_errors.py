"""Failed writes and damaged programs give clean errors naming the file: a full disk during a compile
(the Parquet writer raising ENOSPC), a writer error, and a truncated Parquet inside a program.

Before: ENOSPC escaped as a bare ``OSError`` (a traceback from ``compile-ontology``); a truncated Parquet
whose manifest entry matched passed ``verify_program`` and then failed in pyarrow.
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from ontology_compiler import (
    OntologyCompilerError,
    OutputExistsError,
    ProgramFormatError,
    ProgramWriteError,
    compile_ontology,
    compile_owl,
    verify_program,
)
from ontology_compiler.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURE = DATA / "snomed_mini_20220531"


def _full_disk_after(monkeypatch, n_ok: int, exc: BaseException | None = None) -> None:
    """The program's files are written: ``n_ok`` of them, then a partial file and ``exc`` (ENOSPC)."""
    import ontology_compiler.program as P

    real = P.write_encoded
    calls = []

    def write_encoded(path, enc):
        calls.append(path)
        if len(calls) <= n_ok:
            return real(path, enc)
        Path(path).write_bytes(b"PAR1 partial")
        raise exc or OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(P, "write_encoded", write_encoded)


def _encoder_fails_after(monkeypatch, n_ok: int, exc: BaseException) -> None:
    """The Parquet encoder (in the background for the graph tables) raises ``exc`` after ``n_ok`` tables."""
    import pyarrow.parquet as pq

    real = pq.write_table
    calls = []

    def write_table(table, where, *args, **kwargs):
        calls.append(where)
        if len(calls) <= n_ok:
            return real(table, where, *args, **kwargs)
        raise exc

    monkeypatch.setattr(pq, "write_table", write_table)


def _leftovers(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.name.startswith(".tmp") or p.name.endswith(".tmp")]


@pytest.mark.parametrize("n_ok", [0, 3])
def test_disk_full_is_a_clean_error(tmp_path, monkeypatch, n_ok):
    _full_disk_after(monkeypatch, n_ok)
    out = tmp_path / "out"
    with pytest.raises(ProgramWriteError) as e:
        compile_ontology(FIXTURE, out=out)
    err = e.value
    assert isinstance(err, OntologyCompilerError)
    assert err.path.parent == out / "snomed_mini_20220531" and err.file.endswith(".parquet")
    assert str(err.path) in str(err) and err.file in str(err) and "disk is full" in str(err)
    assert not err.path.exists() and _leftovers(tmp_path) == []
    assert not any(out.rglob("manifest.json"))
    monkeypatch.undo()
    again = compile_ontology(FIXTURE, out=out)  # a later compile with space left works
    assert again.written and again.path == err.path


def test_cli_disk_full_exits_1(tmp_path, monkeypatch):
    _full_disk_after(monkeypatch, 1)
    r = CliRunner().invoke(main, [str(FIXTURE), "--out", str(tmp_path / "out"), "-q"])
    assert r.exit_code == 1, r.output
    assert "could not write the program" in r.output and "disk is full" in r.output
    assert "Traceback" not in r.output and _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "exc",
    [
        pa.ArrowInvalid("writer failed"),
        RuntimeError("enforce fail at writer"),
        OSError(errno.EACCES, "denied"),
    ],
)
def test_writer_errors_name_the_target(tmp_path, monkeypatch, exc):
    _full_disk_after(monkeypatch, 2, exc)
    with pytest.raises(ProgramWriteError) as e:
        compile_ontology(FIXTURE, out=tmp_path / "out")
    assert e.value.__cause__ is not None and str(exc) in str(e.value)
    assert _leftovers(tmp_path) == [] and not e.value.path.exists()


@pytest.mark.parametrize("n_ok", [0, 4])
def test_encoder_errors_name_the_file(tmp_path, monkeypatch, n_ok):
    """A table that fails to encode (in the background or in the write step) is named like a write."""
    _encoder_fails_after(monkeypatch, n_ok, pa.ArrowInvalid("encoder failed"))
    with pytest.raises(ProgramWriteError) as e:
        compile_ontology(FIXTURE, out=tmp_path / "out")
    assert "encoder failed" in str(e.value) and e.value.file.endswith(".parquet")
    assert _leftovers(tmp_path) == [] and not e.value.path.exists()


def test_owl_compile_disk_full(tmp_path, monkeypatch):
    _full_disk_after(monkeypatch, 0)
    with pytest.raises(ProgramWriteError, match="disk is full"):
        compile_owl(DATA / "owl_mini.owl", codes=DATA / "owl_mini_codes.txt", out=tmp_path / "out")
    assert _leftovers(tmp_path) == []


# ---- a truncated Parquet inside a program --------------------------------------------------------


@pytest.fixture
def program(tmp_path) -> Path:
    r = compile_ontology(FIXTURE, out=tmp_path / "programs")
    return r.path


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _rewrite_manifest_for(program: Path, name: str) -> None:
    """Make the manifest agree with the damaged file (as a writer that hashed a truncated file would)."""
    m = json.loads((program / "manifest.json").read_text())
    for f in m["files"]:
        if f["path"] == name:
            data = (program / name).read_bytes()
            f["sha256"], f["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    (program / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("hashes", [True, False])
def test_truncated_parquet_is_named(program, hashes):
    _truncate(program / "edges.parquet")
    with pytest.raises(ProgramFormatError) as e:
        verify_program(program, hashes=hashes)
    assert str(program / "edges.parquet") in str(e.value) and "truncated" in str(e.value)


@pytest.mark.parametrize("name", ["edges.parquet", "graph/icd_map.parquet"])
def test_truncated_parquet_with_a_matching_manifest_is_named(program, name):
    _truncate(program / name)
    _rewrite_manifest_for(program, name)
    for hashes in (True, False):
        with pytest.raises(ProgramFormatError) as e:
            verify_program(program, hashes=hashes)
        assert str(program / name) in str(e.value) and "not a readable Parquet file" in str(e.value)


def test_recompile_over_a_truncated_program_names_the_file(program):
    _truncate(program / "atoms.parquet")
    with pytest.raises(OutputExistsError) as e:
        compile_ontology(FIXTURE, out=program.parents[1])
    assert "atoms.parquet" in str(e.value)


def test_export_owl_of_a_truncated_program_names_the_file(program, tmp_path):
    from ontology_compiler import export_owl

    _truncate(program / "concepts.parquet")
    _rewrite_manifest_for(program, "concepts.parquet")
    with pytest.raises(ProgramFormatError, match="concepts.parquet"):
        export_owl(program, tmp_path / "x.owl")


def test_intact_program_verifies(program):
    assert verify_program(program)["program_id"] == program.name
    assert verify_program(program, hashes=False)["program_id"] == program.name
    shutil.copytree(program, program.parent / "copy")
    assert verify_program(program.parent / "copy")["program_id"] == program.name
