import numpy as np
import pytest
import torch

from hrr_kernel import MODES, HRREmbedding, ShapeError, compose, load_program
from hrr_kernel import composer as composer_mod


@pytest.fixture
def program(make_program):
    edges = (
        np.array([0, 0, 1, 1, 1, 2, 4, 5, 5, 6, 7, 7]),
        np.array([0, 1, 0, 1, 1, 2, 0, 0, 1, 1, 0, 2]),
        np.array([1, 2, 1, 3, 4, 0, 5, 2, 3, 4, 5, 0]),
    )  # concept 3 has no edges
    return load_program(make_program(n_concepts=8, n_atoms=6, n_relations=3, edges=edges))


@pytest.mark.parametrize("mode", MODES)
def test_modes_shapes_and_parameters(program, mode):
    torch.manual_seed(0)
    kw = {"log_frequency": torch.linspace(0, 5, 8)} if mode == "freq" else {}
    emb = HRREmbedding(program, 10, mode, **kw)
    assert emb.matrix().shape == (8, 10)
    ids = torch.tensor([[0, 3, 7], [7, 7, 1]])
    out = emb(ids)
    assert out.shape == (2, 3, 10)
    torch.testing.assert_close(out, emb.matrix()[ids])
    names = {n for n, _ in emb.named_parameters()}
    expected = {
        "unstructured": {"table"},
        "base": {"atoms", "relations"},
        "freq": {"atoms", "relations"},
        "add": {"atoms", "relations", "table"},
        "cat": {"atoms", "relations", "table"},
        "gram": {"atoms", "table", "attention.weight", "attention.bias", "attention.score"},
        "ancestors": {"atoms", "table"},
    }[mode]
    assert names == expected


def test_cat_splits_dimension_and_hrr_part_is_composed(program):
    emb = HRREmbedding(program, 11, "cat")
    assert emb.atoms.shape == (6, 5) and emb.table.shape == (8, 6)
    m = emb.matrix()
    torch.testing.assert_close(m[:, :5], compose(program, emb.atoms, emb.relations))
    torch.testing.assert_close(m[:, 5:], emb.table)


def test_add_and_freq_compose_their_parts(program):
    emb = HRREmbedding(program, 12, "add")
    torch.testing.assert_close(emb.matrix(), compose(program, emb.atoms, emb.relations) + emb.table)
    logf = torch.tensor([0.0, 0.04, 0.06, 1.0, 2.0, 2.0, 3.0, 9.0])
    fr = HRREmbedding(program, 12, "freq", log_frequency=logf, freq_resolution=10.0)
    enc = fr.freq_encoding
    torch.testing.assert_close(enc.norm(dim=1), torch.ones(8))  # normalized encoding
    torch.testing.assert_close(enc[0], enc[1])  # 0.0 and 0.04 fall in the same bin
    assert not torch.allclose(enc[0], enc[2])
    assert not enc.requires_grad
    torch.testing.assert_close(fr.matrix(), compose(program, fr.atoms, fr.relations) + enc)


def test_initialization_is_normal_002(make_program):
    p = load_program(make_program(n_concepts=300, n_atoms=400, n_relations=20, n_edges=600))
    emb = HRREmbedding(p, 64, "add")
    for t in (emb.atoms, emb.relations, emb.table):
        assert abs(t.detach().std().item() - 0.02) < 0.002 and abs(t.detach().mean().item()) < 0.002


def test_normalize_gives_unit_rows_not_unit_columns(program):
    """The original code normalized over dim 0 (each dimension across the vocabulary)."""
    emb = HRREmbedding(program, 16, "base", normalize=True)
    m = emb.matrix().detach()
    norms = m.norm(dim=1)
    has_edges = torch.tensor([True, True, True, False, True, True, True, True])
    torch.testing.assert_close(norms[has_edges], torch.ones(7))
    assert norms[3] == 0  # no edges: stays zero, no NaN
    assert not torch.allclose(m.norm(dim=0), torch.ones(16))
    rows = emb(torch.tensor([5, 3]))
    torch.testing.assert_close(rows.norm(dim=1), torch.tensor([1.0, 0.0]))


def test_training_lookup_builds_only_needed_rows(program, monkeypatch):
    """The original rebuilt the whole matrix on every forward even when a batch needed few rows."""
    seen = []
    real = composer_mod.compose_plan

    def spy(plan, *args, **kw):
        seen.append(plan.n_out)
        return real(plan, *args, **kw)

    monkeypatch.setattr(composer_mod, "compose_plan", spy)
    emb = HRREmbedding(program, 8, "base").train()
    out = emb(torch.tensor([[1, 1, 2]]))
    assert seen == [2]  # two distinct ids, not all 8 concepts
    out.sum().backward()
    touched = (emb.atoms.grad.abs().sum(1) > 0).tolist()
    assert touched == [True, True, False, True, True, False]  # concept 1: atoms 1, 3, 4; concept 2: atom 0
    torch.testing.assert_close(out[0], emb.matrix().detach()[[1, 1, 2]])


def test_eval_cache_until_parameters_change(program):
    emb = HRREmbedding(program, 8, "add").eval()
    with torch.no_grad():
        m1 = emb.matrix()
        assert emb.matrix() is m1  # cached
        emb.atoms.add_(0.1)  # in-place change bumps the version counter
        m2 = emb.matrix()
        assert m2 is not m1 and not torch.allclose(m1, m2)
        emb.load_state_dict({k: v * 2 for k, v in emb.state_dict().items()})
        m3 = emb.matrix()
        assert m3 is not m2
        torch.testing.assert_close(m3, compose(program, emb.atoms, emb.relations) + emb.table)
    emb.train()
    with torch.no_grad():
        assert emb.matrix() is not emb.matrix()  # no cache while training


def test_optimizer_step_invalidates_cache(program):
    emb = HRREmbedding(program, 8, "base")
    opt = torch.optim.SGD(emb.parameters(), lr=1.0)
    emb.eval()
    with torch.no_grad():
        before = emb.matrix()
    emb.train()
    emb(torch.tensor([0, 1])).sum().backward()
    opt.step()
    emb.eval()
    with torch.no_grad():
        after = emb.matrix()
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, compose(program, emb.atoms, emb.relations).detach())


def test_rows_of_concepts_without_edges_only(program):
    emb = HRREmbedding(program, 8, "base")
    out = emb(torch.tensor([3, 3]))
    assert torch.all(out == 0)
    out.sum().backward()
    assert torch.all(emb.atoms.grad == 0)


def test_float64_embedding_gradcheck(program):
    emb = HRREmbedding(program, 6, "base", normalize=True, dtype=torch.float64)
    ids = torch.tensor([0, 2, 5])

    def f(a, r):
        c = compose(program, a, r, ids)
        return torch.nn.functional.normalize(c, dim=1)

    assert torch.autograd.gradcheck(
        f, (emb.atoms.detach().requires_grad_(), emb.relations.detach().requires_grad_())
    )
    torch.testing.assert_close(emb(ids), f(emb.atoms, emb.relations))


def test_embedding_validates_arguments(program):
    with pytest.raises(ShapeError, match="mode must be one of"):
        HRREmbedding(program, 8, "sum")
    with pytest.raises(ValueError, match="needs log_frequency"):
        HRREmbedding(program, 8, "freq")
    with pytest.raises(ValueError, match=r"log_frequency must have shape \(8,\), got \(3,\)"):
        HRREmbedding(program, 8, "freq", log_frequency=torch.zeros(3))
    emb = HRREmbedding(program, 8, "base")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 7\], got \[0, 8\]"):
        emb(torch.tensor([0, 8]))
    with pytest.raises(ValueError, match="integer"):
        emb(torch.tensor([0.0]))


def test_unstructured_eval_does_not_register_the_table_twice(make_program):
    """Regression: the eval cache must not hold the table Parameter (state dict keys stay the same)."""
    p = load_program(make_program())
    emb = HRREmbedding(p, dim=8, mode="unstructured").eval()
    keys = set(emb.state_dict())
    with torch.no_grad():
        emb.matrix()
        emb(torch.tensor([[1, 2]]))
    assert set(emb.state_dict()) == keys and emb.matrix() is emb.table
