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

from hrr_kernel import (
    MODES,
    SPECIAL_TOKENS,
    EmbeddingMode,
    HRREmbedding,
    ShapeError,
    hrr_mode_names,
    hrr_vectors,
    load_program,
    mode_spec,
)
from hrr_kernel.ancestry import AncestryMode
from model import HRRBert, bert_tiny, carry_model
from pipelines.ontology.explain import explain
from pipelines.ontology.trained import NotHRRError

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
        # atoms are composed (H wide), free vectors of ancestors (D wide), or absent
        assert spec.atom_dim(dim) == (h if spec.composes else dim if spec.ancestry else 0)
    if spec.composes:
        assert spec.explain_note
    assert spec.has_atoms == (spec.composes or spec.ancestry)
    assert spec.row_is_table == (spec.per_token_tensor == "table" and not spec.has_atoms)
    if spec.ancestry:  # the code's own vector is a full table, left at its draw when untrained (GRAM)
        assert spec.table == "full" and not spec.composes and spec.untrained_fill is None
    else:
        assert (spec.untrained_fill is None) == (spec.table == "none")
    assert (name in hrr_mode_names()) == spec.composes


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
        # an ancestry row is built by a subclass, and composes nothing
        {"hrr": "none", "table": "full", "new_row": "zero", "ancestry": True},
    ],
)
def test_inconsistent_specs_are_refused(kwargs):
    with pytest.raises(ValueError, match="mode 'x'"):
        EmbeddingMode("x", "a note", **kwargs)


def test_an_ancestry_mode_composes_nothing():
    with pytest.raises(ValueError, match="mode 'x': an ancestry mode composes nothing"):
        AncestryMode("x", "a note", table="full", new_row="zero", ancestry=True)  # hrr "all"


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


OLD_CODES = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "A001", "A002", "A003"]  # carry_fixtures
UNCHANGED_OLD, UNCHANGED_NEW = [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]  # the specials and A001


@pytest.mark.parametrize("name", MODES)
def test_every_registered_mode_builds_trains_settles_carries_and_explains(tmp_path, name, one_thread):
    """Each mode of MODES through the embedding, the model, settling, carrying and explain, as its spec
    says."""
    spec = MODES[name]
    old = load_program(write_old_program(tmp_path / "old"))
    new = load_program(write_new_program(tmp_path / "new"))
    assert old.concept_codes == OLD_CODES
    torch.manual_seed(0)
    logf = torch.linspace(-5.0, -1.0, old.n_concepts) if spec.frequency else None
    model = HRRBert(bert_tiny(dim=16, n_layers=1, n_heads=2, ffn_dim=32, mode=name), old, logf).double()
    tok = model.embeddings.token
    # build and decode: selected rows are the matrix's, the tied decoder scores against the whole rows
    ids = torch.tensor([7, 0, 5, 7])
    torch.testing.assert_close(tok.rows(ids), tok.matrix()[ids], rtol=1e-12, atol=1e-12)
    h = torch.randn(3, 16, dtype=torch.float64)
    torch.testing.assert_close(tok.decode(h), h @ tok.matrix().t(), rtol=1e-12, atol=1e-12)
    assert (tok.atoms is not None) == spec.has_atoms and (tok.relations is not None) == spec.composes
    # train: every parameter of the token embedding gets a gradient
    seq = torch.tensor([[1, 5, 3, 7, 6, 2]])
    mask = torch.tensor([[False, True, True, False, True, False]])
    model.masked_log_probs(seq, torch.zeros_like(seq), torch.ones_like(seq), mask).sum().backward()
    for pname, p in tok.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname
    # settle: A002 and A003 untrained, so concept 200 (theirs alone) and, where words reach the row, the
    # word "100" (A003's alone) are settled; the untrained table rows follow untrained_fill
    trained = torch.tensor([True] * 6 + [False, False])
    table0 = None if tok.table is None else tok.table.detach().clone()
    counts = model.settle_untrained(trained)
    assert counts["atoms_settled"] == (2 if spec.composes else 1 if spec.has_atoms else 0)
    assert counts["relations_settled"] == 0  # every relation is on a trained token's edge
    if tok.table is not None:
        rows = tok.table.detach()[6:]
        special = torch.tensor([c in SPECIAL_TOKENS for c in OLD_CODES])
        want = {
            "mean": table0[trained & ~special].mean(0).expand(2, -1),
            "zero": torch.zeros_like(rows),
            None: table0[6:],
        }[spec.untrained_fill]
        torch.testing.assert_close(rows, want, rtol=0, atol=1e-12)
    # carry: rows of unchanged tokens kept exactly; the report names the rule of the per-token tensor
    carried, report = carry_model(model.eval(), new)
    assert report["mode"] == name and report["atoms"]["used"] == spec.has_atoms
    if spec.per_token_tensor is not None:
        assert report["new_token_rows"]["rules"][spec.per_token_tensor] == spec.new_row_note
    with torch.no_grad():
        torch.testing.assert_close(
            carried.eval().token_matrix()[UNCHANGED_NEW],
            model.token_matrix()[UNCHANGED_OLD],
            atol=1e-12,
            rtol=0,
        )
    # explain: what composes is unbound, the others are refused with a message naming the mode
    folder = model.save_pretrained(tmp_path / "model", card=False)
    if spec.composes:
        assert hrr_vectors(tok).shape == (old.n_concepts, tok.hrr_dim)
        assert explain(folder, "A00.1").mode == name
    else:
        with pytest.raises(ShapeError, match=f"'{name}' embedding has no HRR part"):
            hrr_vectors(tok)
        with pytest.raises(NotHRRError, match=f"the model is '{name}'.*composes nothing"):
            explain(folder, "A00.1")


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
