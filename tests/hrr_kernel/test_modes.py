"""hrr_kernel.modes: each embedding mode is declared once, its spec is consistent, and a new mode registered
in MODES alone works through the embedding, the model, settling, carrying and explain."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from carry_fixtures import write_new_program, write_old_program

from hrr_kernel import MODES, EmbeddingMode, HRREmbedding, ShapeError, hrr_vectors, load_program, mode_spec
from model import HRRBert, bert_tiny, carry_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def program(make_program):
    edges = (
        np.array([0, 0, 1, 1, 1, 2, 4, 5, 5, 6, 7, 7]),
        np.array([0, 1, 0, 1, 1, 2, 0, 0, 1, 1, 0, 2]),
        np.array([1, 2, 1, 3, 4, 0, 5, 2, 3, 4, 5, 0]),
    )
    return load_program(make_program(n_concepts=8, n_atoms=6, n_relations=3, edges=edges))


@pytest.mark.parametrize("name", MODES)
def test_every_spec_is_consistent(name):
    spec = MODES[name]
    assert spec.name == name and spec.note
    for dim in (2, 7, 16):
        h, t = spec.hrr_dim(dim), spec.table_dim(dim)
        assert spec.composes == (h > 0)
        # a concatenated table fills the rest of the row; an added (or lone) table is the whole row
        assert (h + t == dim) if spec.table == "rest" else (t in (0, dim) and max(h, t) == dim)
    if spec.composes:
        assert spec.explain_note
    assert (spec.untrained_fill is None) == (spec.table == "none")


def test_the_paper_modes_are_registered_in_order():
    assert tuple(MODES)[:5] == ("unstructured", "base", "freq", "add", "cat")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hrr": "most"},
        {"hrr": "none", "table": "none"},
        {"hrr": "half", "table": "full"},
        {"table": "rest"},
        {"untrained_fill": "median", "table": "full"},
        {"table": "full", "untrained_fill": "zero"},  # a per-token table without a carry rule
    ],
)
def test_inconsistent_specs_are_refused(kwargs):
    with pytest.raises(ValueError, match="mode 'x'"):
        EmbeddingMode("x", "a note", **kwargs)


def test_unknown_mode_names_the_modes():
    with pytest.raises(ShapeError, match="mode must be one of .*'base'.*got 'nope'"):
        mode_spec("nope")


# a mode no module names: the composition with its rows scaled by a learnable-free constant 2
class Doubled(EmbeddingMode):
    def finish(self, emb, c, rows):
        return 2 * super().finish(emb, c, rows)

    def decode_extra(self, emb, h):
        return None


TOY = Doubled(
    "toy",
    "twice the composition (a test mode)",
    table="full",
    untrained_fill="zero",
    new_row="zero",
    new_row_note="zero",
    explain_note="twice C plus W",
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(MODES, "toy", TOY)
    return TOY


def test_a_registered_mode_builds_and_decodes(program, toy):
    torch.manual_seed(0)
    emb = HRREmbedding(program, 8, "toy").double()
    assert emb.spec is toy and emb.table.shape == (8, 8)
    c = emb.compose_rows(None)
    torch.testing.assert_close(emb.matrix(), 2 * (c + emb.table))
    ids = torch.tensor([0, 3, 7])
    torch.testing.assert_close(emb.rows(ids), emb.matrix()[ids])
    # the decoder adds nothing beside the HRR part here, which the spec says: decode follows the spec
    h = torch.randn(4, 8, dtype=torch.float64)
    torch.testing.assert_close(emb.decode(h), h @ c.t())


def test_a_registered_mode_trains_settles_carries_and_explains(tmp_path, toy):
    old = load_program(write_old_program(tmp_path / "old"))
    new = load_program(write_new_program(tmp_path / "new"))
    torch.manual_seed(0)
    model = HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode="toy"), old)
    assert model.config.spec is toy and not model.config.uses_spectral_decoder
    ids = torch.tensor([[0, 1, 2, 3]])
    mask = torch.tensor([[0, 1, 0, 1]])
    model.masked_log_probs(ids, torch.zeros_like(ids), torch.ones_like(ids), mask).sum().backward()
    assert model.embeddings.token.atoms.grad is not None
    trained = torch.zeros(old.n_concepts, dtype=torch.bool)
    trained[:3] = True
    counts = model.settle_untrained(trained)
    assert counts["rows_settled"] == old.n_concepts - 3
    assert torch.count_nonzero(model.embeddings.token.table[3:]) == 0  # untrained_fill "zero"
    carried, report = carry_model(model.eval(), new)
    assert report["mode"] == "toy" and report["new_token_rows"]["rules"]["table"] == "zero"
    assert report["atoms"]["used"]
    tok = carried.embeddings.token
    v = hrr_vectors(tok)  # the table is added, so explain unbinds C + W
    torch.testing.assert_close(v, tok.compose_rows(None).detach() + tok.table.detach())


def test_product_code_compares_no_mode_names():
    """Modes are asked, not compared: no ``mode == "..."`` / ``mode in (...)`` outside hrr_kernel/modes.py."""
    names = set(MODES)
    found = []
    for folder in ("hrr_kernel", "model", "pipelines"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "modes.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                named = any(
                    isinstance(s, ast.Name | ast.Attribute) and "mode" in ast.unparse(s) for s in sides
                )
                consts = {
                    c.value
                    for s in sides
                    for c in ast.walk(s)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
                if named and consts & names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "compare modes through hrr_kernel.modes specs:\n" + "\n".join(found)


def test_git_grep_finds_no_mode_comparison():
    out = subprocess.run(
        ["git", "grep", "-n", r"mode ==\|mode in (", "--", "pipelines/**.py", "model/*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert out.stdout == ""
