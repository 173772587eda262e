"""LazyAdamW and sparse-aware clipping: AdamW's numbers for dense gradients; for sparse ones, AdamW's
numbers when every step touches the same rows, and untouched rows left alone otherwise."""

from __future__ import annotations

import copy

import torch

from hrr_kernel import HRREmbedding, load_program
from pipelines.train.sparse import LazyAdamW, clip_grad_norm
from tests.helpers.synthetic_program import random_edges, write_program


def _program(tmp_path):
    import numpy as np

    root = tmp_path / "p"
    write_program(
        root, n_concepts=30, n_atoms=40, n_relations=3,
        edges=random_edges(np.random.default_rng(2), 30, 40, 3, 70),
    )  # fmt: skip
    return load_program(root)


def test_dense_gradients_get_adamw_exactly():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    twin = copy.deepcopy(model)
    kw = {"lr": 3e-2, "betas": (0.8, 0.95), "eps": 1e-7, "weight_decay": 0.1}
    opts = [LazyAdamW(model.parameters(), **kw), torch.optim.AdamW(twin.parameters(), foreach=False, **kw)]
    x = torch.randn(16, 6)
    for _ in range(7):
        for m, opt in zip((model, twin), opts, strict=True):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert int(opts[0].state[next(model.parameters())]["step"]) == 7


def test_the_sparse_update_equals_the_dense_one_when_every_step_touches_the_same_rows(tmp_path):
    p = _program(tmp_path)
    ids = torch.tensor([3, 7, 7, 12, 20])
    target = torch.randn(len(ids), 16, generator=torch.Generator().manual_seed(0))
    runs = {}
    for sparse in (False, True):
        torch.manual_seed(1)
        emb = HRREmbedding(p, 16, "add").train()
        emb.sparse_grads = sparse
        adam = LazyAdamW if sparse else torch.optim.AdamW
        opt = adam(emb.parameters(), lr=1e-2, weight_decay=0.0)
        for _ in range(6):
            opt.zero_grad(set_to_none=True)
            loss = (emb.rows(ids) - target).square().sum()
            loss.backward()
            clip_grad_norm(list(emb.parameters()), 0.5)  # clipping binds: the norm is above 0.5
            opt.step()
        runs[sparse] = {n: q.detach().clone() for n, q in emb.named_parameters()}
    for name in runs[False]:
        torch.testing.assert_close(runs[True][name], runs[False][name], rtol=1e-5, atol=1e-7)


def test_rows_a_step_leaves_out_keep_value_and_moments(tmp_path):
    p = _program(tmp_path)
    torch.manual_seed(1)
    emb = HRREmbedding(p, 16, "base").train()
    emb.sparse_grads = True
    opt = LazyAdamW(emb.parameters(), lr=1e-2, weight_decay=0.1)
    first, second = torch.tensor([1, 2]), torch.tensor([25, 26])
    read = {
        tuple(r.tolist()): set(p.edge_atom[torch.isin(p.edge_concept, r)].tolist()) for r in (first, second)
    }
    emb.rows(first).sum().backward()
    opt.step()
    state = {k: v.clone() for k, v in opt.state[emb.atoms].items()}
    before = emb.atoms.detach().clone()
    opt.zero_grad(set_to_none=True)
    emb.rows(second).sum().backward()
    opt.step()
    untouched = sorted(read[(1, 2)] - read[(25, 26)])
    assert untouched, "the fixture's two batches should read different atoms"
    changed = sorted(read[(25, 26)])
    after = emb.atoms.detach()
    torch.testing.assert_close(after[untouched], before[untouched], rtol=0, atol=0)
    torch.testing.assert_close(
        opt.state[emb.atoms]["exp_avg"][untouched], state["exp_avg"][untouched], rtol=0, atol=0
    )
    assert not torch.equal(after[changed], before[changed])


def test_clipping_reads_sparse_gradients_like_dense_ones():
    a = torch.nn.Parameter(torch.zeros(6, 3))
    b = torch.nn.Parameter(torch.zeros(4))
    rows, vals = torch.tensor([[1, 4, 1]]), torch.arange(9.0).view(3, 3)
    a.grad = torch.sparse_coo_tensor(rows, vals, (6, 3), check_invariants=True)  # row 1 twice: summed
    b.grad = torch.ones(4)
    dense_a = torch.zeros(6, 3).index_add(0, rows[0], vals)
    norm = clip_grad_norm([a, b], 1.0)
    expected = torch.cat([dense_a.flatten(), torch.ones(4)]).norm()
    torch.testing.assert_close(norm, expected)
    torch.testing.assert_close(a.grad.to_dense(), dense_a / (expected + 1e-6))
    torch.testing.assert_close(b.grad, torch.ones(4) / (expected + 1e-6))
