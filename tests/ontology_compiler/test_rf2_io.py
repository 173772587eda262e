"""RF2 writer round trip, and the synthetic full-scale generator at a tiny scale."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ontology_compiler import compile_ontology
from ontology_compiler import rf2_schema as S
from ontology_compiler.rf2_read import read_rf2_file
from ontology_compiler.rf2_write import rf2_file_name, write_rf2_file
from ontology_compiler.sctid import make_sctid

ROOT = Path(__file__).resolve().parents[2]


def test_writer_round_trip_crlf_no_quoting(tmp_path):
    p = tmp_path / rf2_file_name("Description", "Snapshot", "INT", "20220531", lang="en")
    rows = {
        "id": [make_sctid(100001, "01"), make_sctid(100002, "01")],
        "effectiveTime": [20220131, 20220131],
        "active": [1, 0],
        "moduleId": [S.CORE_MODULE] * 2,
        "conceptId": [make_sctid(9990001)] * 2,
        "languageCode": ["en", "en"],
        "typeId": [S.FSN, S.SYNONYM],
        "term": ['Ménière "disease" (disorder)', "x"],
        "caseSignificanceId": [S.CASE_INSENSITIVE] * 2,
    }
    write_rf2_file(p, "Description", rows)
    raw = p.read_bytes()
    assert raw.count(b"\r\n") == 3 and b'"disease"' in raw and not raw.startswith(b"\xef\xbb\xbf")
    t, report = read_rf2_file(p, "Description", strict=True)
    assert t["term"].to_pylist() == rows["term"] and t["id"].to_pylist() == rows["id"]
    assert t["_line"].to_pylist() == [2, 3] and report.rows == 2
    with pytest.raises(ValueError):
        write_rf2_file(p, "Description", {**rows, "term": ["tab\there", "x"]})


def test_blocks_keep_rows_and_line_numbers(tmp_path, monkeypatch):
    """A file read in many blocks gives the rows of one read, lines numbered across blocks; a bad value
    in a later block is named by its line; an empty file is an empty table."""
    from ontology_compiler import rf2_read
    from ontology_compiler.errors import InputFileError

    p = tmp_path / rf2_file_name("Relationship", "Snapshot", "INT", "20220531")
    n = 3000
    rows = {
        "id": [make_sctid(500000 + i, "02") for i in range(n)],
        "effectiveTime": [20220131] * n,
        "active": [1, 0] * (n // 2),
        "moduleId": [S.CORE_MODULE] * n,
        "sourceId": [make_sctid(9990001 + i % 7) for i in range(n)],
        "destinationId": [make_sctid(9990100 + i % 11) for i in range(n)],
        "relationshipGroup": [i % 3 for i in range(n)],
        "typeId": [S.IS_A] * n,
        "characteristicTypeId": [S.INFERRED] * n,
        "modifierId": [S.EXISTENTIAL] * n,
    }
    write_rf2_file(p, "Relationship", rows)
    whole, _ = read_rf2_file(p, "Relationship", strict=True)
    monkeypatch.setattr(rf2_read, "BLOCK_BYTES", 4096)  # about 40 rows a block
    blocks, report = read_rf2_file(p, "Relationship", strict=True)
    assert blocks.equals(whole) and report.rows == n
    assert blocks["_line"].to_pylist() == list(range(2, n + 2))
    lines = p.read_bytes().split(b"\r\n")
    lines[2500] = lines[2500].replace(b"\t20220131\t", b"\t20221331\t", 1)  # line 2501: no month 13
    p.write_bytes(b"\r\n".join(lines))
    with pytest.raises(InputFileError, match="line 2501.*not a calendar date"):
        read_rf2_file(p, "Relationship")
    p.write_bytes(b"\r\n".join(lines[:1]) + b"\r\n")
    empty, report = read_rf2_file(p, "Relationship")
    assert empty.num_rows == 0 and report.rows == 0 and "sourceId" in empty.column_names


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "synthetic_release", ROOT / "benchmarks" / "synthetic_release.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("synthetic_release", mod)
    spec.loader.exec_module(mod)
    return mod


def test_synthetic_release_compiles_snapshot_and_full(tmp_path):
    gen = _load_generator()
    rel = tmp_path / "synthetic"
    gen.generate_release(rel, scale=0.002, seed=1, full=True)
    snap = compile_ontology(rel, out=tmp_path / "out")
    full = compile_ontology(rel, out=tmp_path / "out", as_of="20220531")
    mid = compile_ontology(rel, out=tmp_path / "out", as_of="20190731")
    assert snap.manifest["counts"]["relationships_is_a"] > 0
    assert snap.manifest["counts"]["edges"] > snap.manifest["counts"]["concepts"] > 5
    tables = ("atoms", "relations", "concepts", "edges", "slices")
    assert all(
        pq.read_table(full.path / f"{n}.parquet").equals(pq.read_table(snap.path / f"{n}.parquet"))
        for n in tables
    )
    assert mid.manifest["counts"]["concepts_active"] < snap.manifest["counts"]["concepts_active"]
