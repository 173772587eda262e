"""Fixtures of the adversarial compile tests: a writable copy of the fixture release, its clean program,
and the root logger restored after commands that configure logging."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from rf2_edit import FIXTURE

from ontology_compiler import compile_ontology


@pytest.fixture(autouse=True)
def _restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def release(tmp_path) -> Path:
    """A copy of the fixture release that a test may edit."""
    dst = tmp_path / "release"
    shutil.copytree(FIXTURE, dst)
    return dst


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The fixture release compiled as it is (what an edited release is compared with)."""
    return compile_ontology(FIXTURE, out=tmp_path_factory.mktemp("base"))
