"""Every trainer and evaluator honours the device it is given: no model or tensor of the product source is
put on a hard-coded CPU.

The source of ``ontology_compiler``, ``hrr_kernel``, ``model`` and ``pipelines`` is read with :mod:`ast`;
these count as a hard-coded CPU placement (``"cpu"``, ``"cpu:0"`` or ``torch.device("cpu")``):

- ``x.to(<cpu>)`` or ``x.to(device=<cpu>)``;
- ``device=<cpu>`` or ``map_location=<cpu>`` as a call argument (``dict(..., device="cpu")`` included);
- ``torch.device(<cpu>)`` anywhere;
- ``device = <cpu>`` assigned (a name, attribute or item called ``device``) and ``{"device": <cpu>}``.

Not counted: a parameter's default (``device: str = "cpu"``: the caller decides), ``.cpu()`` (results
read back for NumPy), and the CLI's option defaults. A legitimate use goes in :data:`ALLOWED`, keyed by file
and enclosing function, with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ontology_compiler", "hrr_kernel", "model", "pipelines")

# (file, enclosing function) -> why a CPU there is right; keep it short
ALLOWED: dict[tuple[str, str], str] = {
    # the baselines are NumPy / scikit-learn: the program is read for its codes and ids, no torch model runs
    ("pipelines/eval/baselines.py", "compute_baselines"): "scikit-learn baselines on the CPU",
}


def _is_cpu(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0] == "cpu"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "device":
        return bool(node.args) and _is_cpu(node.args[0])
    return False


def _named_device(target: ast.AST) -> bool:
    if isinstance(target, ast.Name):
        return target.id == "device"
    if isinstance(target, ast.Attribute):
        return target.attr == "device"
    if isinstance(target, ast.Subscript):
        return isinstance(target.slice, ast.Constant) and target.slice.value == "device"
    return False


class _Finder(ast.NodeVisitor):
    """Hard-coded CPU placements of one file: ``(line, enclosing function, source)``."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.found: list[tuple[int, str, str]] = []

    def _hit(self, node: ast.AST) -> None:
        self.found.append((node.lineno, ".".join(self.stack), ast.unparse(node)[:100]))

    def _scope(self, node) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        to_cpu = isinstance(f, ast.Attribute) and f.attr == "to" and any(_is_cpu(a) for a in node.args)
        kw = any(k.arg in ("device", "map_location") and _is_cpu(k.value) for k in node.keywords)
        if to_cpu or kw or _is_cpu(node):
            self._hit(node)
            return  # one finding per placement (not again for its torch.device("cpu") argument)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if _is_cpu(node.value) and any(_named_device(t) for t in node.targets):
            self._hit(node)
            return
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if any(
            isinstance(k, ast.Constant) and k.value == "device" and _is_cpu(v)
            for k, v in zip(node.keys, node.values, strict=True)
        ):
            self._hit(node)
        self.generic_visit(node)


def _placements() -> list[tuple[str, int, str, str]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("pipelines/cli/"):  # the command layer only declares option defaults
                continue
            finder = _Finder()
            finder.visit(ast.parse(path.read_text(encoding="utf-8"), filename=rel))
            out += [(rel, line, func, src) for line, func, src in finder.found]
    return out


def test_no_model_or_tensor_is_put_on_a_hard_coded_cpu():
    bad = [
        f"{rel}:{line} in {func or '<module>'}: {src}"
        for rel, line, func, src in _placements()
        if (rel, func) not in ALLOWED
    ]
    assert not bad, (
        "hard-coded CPU placements (thread the device given to the trainer or evaluator instead, or add an "
        "entry with its reason to ALLOWED):\n" + "\n".join(bad)
    )


def test_every_allowed_entry_is_still_used():
    used = {(rel, func) for rel, _, func, _ in _placements()}
    assert set(ALLOWED) <= used, f"stale ALLOWED entries: {sorted(set(ALLOWED) - used)}"


def test_the_finder_sees_each_form():
    src = """
import torch
def f(model, x, device: str = "cpu"):
    model.to("cpu")
    x.to(device=torch.device("cpu"))
    load(p, device="cpu:0")
    torch.load(p, map_location="cpu")
    base = dict(epochs=1, device="cpu")
    device = torch.device("cpu")
    cfg["device"] = "cpu"
    opts = {"device": "cpu"}
    y = x.cpu().numpy()
    model.to(device)
"""
    finder = _Finder()
    finder.visit(ast.parse(src))
    assert [line for line, _, _ in finder.found] == list(range(4, 12))  # every line but the last two
    assert {func for _, func, _ in finder.found} == {"f"}
