from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "snomed_mini_20220531"


@pytest.fixture(scope="session")
def fixture_release() -> Path:
    assert FIXTURE.is_dir(), f"{FIXTURE} missing: run python tests/data/make_rf2_fixture.py"
    return FIXTURE


@pytest.fixture
def release_copy(tmp_path, fixture_release) -> Path:
    """A writable copy of the fixture release, to corrupt."""
    dst = tmp_path / "snomed_mini_20220531"
    shutil.copytree(fixture_release, dst)
    return dst


@pytest.fixture(scope="session")
def compiled(tmp_path_factory, fixture_release):
    """The fixture compiled once (Snapshot, defaults)."""
    from ontology_compiler import compile_ontology

    out = tmp_path_factory.mktemp("programs")
    return compile_ontology(fixture_release, out=out)


@pytest.fixture(autouse=True)
def _restore_root_logger():
    """compile-ontology configures the root logger (handler on the runner's stream); undo it after a test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
