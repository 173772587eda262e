"""Optional dependencies: a missing one names the extra that installs it."""

from __future__ import annotations

import sys

import pytest

from ontology_compiler.extras import EXTRAS, MissingExtraError, require


def test_missing_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "owlready2", None)  # an import of it now fails as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'hrrbert\[owl\]'"):
        require("owlready2")


def test_installed_extra_is_returned():
    assert require("matplotlib").__name__ == "matplotlib"


def test_every_extra_is_declared_in_pyproject():
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {extra for extra, _ in EXTRAS.values()} <= set(extras)
    assert "all" in extras
