"""The import rules of docs/architecture.md, checked on the source: packages and ``pipelines`` rooms
import one way only (a static check of every ``import`` statement, including the ones inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> packages it must never import
PACKAGE_RULES = {
    "ontology_compiler": {"torch", "hrr_kernel", "model", "pipelines"},
    "hrr_kernel": {"ontology_compiler", "model", "pipelines"},
    "model": {"ontology_compiler", "pipelines"},
}
# pipelines rooms in import order: a room may import the rooms before it, never after it
ROOM_ORDER = ["errors", "data", "train", "eval", "ontology", "demo|qa|doctor2vec", "cli"]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path`` (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    if path.name == "__init__.py":
        package = ".".join(path.relative_to(ROOT).parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names if not node.module or node.level]
    return out


def _rank(room: str) -> int:
    return next(i for i, r in enumerate(ROOM_ORDER) if room in r.split("|"))


@pytest.mark.parametrize("package", sorted(PACKAGE_RULES))
def test_packages_import_one_way(package):
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {mod}"
        for p in sorted((ROOT / package).rglob("*.py"))
        for line, mod in _imports(p)
        if mod.split(".")[0] in PACKAGE_RULES[package]
    ]
    assert not bad, "\n".join(bad)


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "pipelines" or len(parts) < 2:
        return None
    return parts[1] if any(parts[1] in r.split("|") for r in ROOM_ORDER) else None


def test_pipelines_rooms_import_one_way():
    bad = []
    for p in sorted((ROOT / "pipelines").rglob("*.py")):
        here = _room(".".join(p.relative_to(ROOT).with_suffix("").parts))
        if here is None:
            continue
        for line, mod in _imports(p):
            there = _room(mod)
            if there is None or there == here:
                continue
            if _rank(there) > _rank(here) or (_rank(there) == _rank(here) and there != here):
                bad.append(f"{p.relative_to(ROOT)}:{line} ({here}) imports {mod} ({there})")
    assert not bad, "\n".join(bad)


def test_every_pipelines_module_is_in_a_room():
    loose = [p.name for p in (ROOT / "pipelines").glob("*.py") if p.stem not in ("__init__", "errors")]
    assert not loose, f"modules outside the rooms: {loose}"


def test_light_copies_of_model_facts_agree():
    """The data room's task table (light, no torch) states the labels the model's task heads have."""
    from model import TASKS
    from pipelines.data.tasks import TASK_LABELS

    assert {task: n for task, (_, n) in TASK_LABELS.items()} == TASKS


def test_light_copy_of_demo_sizes_agrees():
    from pipelines.demo.defaults import DEMO_SIZES
    from pipelines.demo.release import SIZES

    assert set(DEMO_SIZES) == set(SIZES)
