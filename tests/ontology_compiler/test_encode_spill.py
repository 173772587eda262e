"""The compile's encoder: a table spilled to a temporary file while it waits is byte for byte the file an
in-memory encode gives, and the write copies it into place; Arrow's pool is tuned once."""

import os
import platform
import subprocess
import sys

import pyarrow as pa
import pytest

from ontology_compiler import memory
from ontology_compiler.program import Chunks, encode_parquet, write_encoded


def _chunks(n: int) -> Chunks:
    def prepare():
        def build(s, e):
            return pa.table({"x": pa.array(range(s, e), pa.int64()), "y": [str(i) for i in range(s, e)]})

        return n, build

    return Chunks(prepare)


def test_spilled_encode_is_the_in_memory_file(tmp_path):
    for table in (pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), _chunks(70_000)):
        mem = encode_parquet(table, "p123")
        spilled = encode_parquet(table, "p123", spill=True)
        assert spilled.data is None and spilled.spill is not None
        assert (spilled.sha256, spilled.rows, spilled.size) == (mem.sha256, mem.rows, mem.size)
        write_encoded(tmp_path / "m.parquet", mem)
        write_encoded(tmp_path / "s.parquet", spilled)
        assert spilled.spill.closed  # the temporary file is gone once written
        assert (tmp_path / "m.parquet").read_bytes() == (tmp_path / "s.parquet").read_bytes()
        assert (tmp_path / "s.parquet").stat().st_size == mem.size


def test_tune_pool_names_the_backend():
    backend = memory.tune_pool()
    assert backend == pa.default_memory_pool().backend_name
    assert memory.tune_pool() == backend  # idempotent


def _backend(env: dict) -> str:
    code = "import ontology_compiler, pyarrow as pa; print(pa.default_memory_pool().backend_name)"
    full = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"} | env
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=full
    ).stdout.strip()


def test_linux_compiles_with_jemalloc_unless_the_user_chose():
    if (
        sys.platform != "linux"
        or platform.machine() != "x86_64"
        or "jemalloc" not in pa.supported_memory_backends()
    ):
        pytest.skip("jemalloc is the Linux wheels' pool")
    assert _backend({}) == "jemalloc"
    assert _backend({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}) == "mimalloc"  # the user's choice kept
