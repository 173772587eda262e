"""The import rules of docs/architecture.md, checked on the source: packages and ``pipelines`` rooms
import one way only (a static check of every ``import`` statement, including the ones inside functions)."""

from __future__ import annotations

import ast
import subprocess
import sys
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


def _compiler_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, imported names) of every absolute import of ontology_compiler in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.startswith("ontology_compiler")]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] == "ontology_compiler":
                out.append((node.lineno, node.module, [a.name for a in node.names]))
    return out


def test_pipelines_import_the_compiler_through_its_public_module():
    """pipelines imports ontology_compiler only as ``from ontology_compiler.api import NAME`` with NAME in
    ``ontology_compiler.api.__all__``; every other module of ontology_compiler is private to it."""
    from ontology_compiler import api

    public = set(api.__all__)
    bad = []
    for p in sorted((ROOT / "pipelines").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        for line, mod, names in _compiler_imports(p):
            if mod == "ontology_compiler.api" and names and set(names) <= public:
                continue
            hidden = sorted(set(names) - public) if mod == "ontology_compiler.api" else []
            note = f" ({', '.join(hidden)}: not public)" if hidden else ""
            bad.append(f"{rel}:{line} imports {mod}{note}")
    assert not bad, "import these from ontology_compiler.api (add a name there if needed):\n" + "\n".join(bad)


def test_compiler_public_module_is_light_and_complete():
    """Every public name resolves, and importing the public module loads no heavy dependency."""
    from ontology_compiler import api

    assert [n for n in api.__all__ if not hasattr(api, n)] == []
    heavy = "('pyarrow', 'duckdb', 'numpy', 'owlready2', 'torch')"
    code = f"import sys, ontology_compiler.api; print([m for m in {heavy} if m in sys.modules])"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]", res.stdout


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
