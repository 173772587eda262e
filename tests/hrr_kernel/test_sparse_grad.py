"""Sparse atom gradients (``compose(..., sparse_grad=True)``, ``HRREmbedding.sparse_grads``): the same
numbers as the dense gradient, held only in the rows the batch reads."""

from __future__ import annotations

import pytest
import torch

from hrr_kernel import HRREmbedding, compose, load_program


def _params(p, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(p.n_atoms, d, dtype=torch.float64, generator=g).requires_grad_()
    r = torch.randn(p.n_relations, d, dtype=torch.float64, generator=g).requires_grad_()
    return a, r


@pytest.mark.parametrize("spectral_inputs", [False, True])
def test_the_sparse_gradient_is_the_dense_one_in_the_rows_read(make_program, spectral_inputs):
    p = load_program(make_program(n_concepts=12, n_atoms=30, n_relations=4, n_edges=25, seed=3))
    d = 16
    rows = torch.tensor([2, 5, 5, 9])
    weight = torch.randn(len(rows), d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads = {}
    for sparse in (False, True):
        a, r = _params(p, d)
        if spectral_inputs:  # the half spectra as the parameters
            a = torch.view_as_real(torch.fft.rfft(a.detach(), dim=1)).flatten(1).requires_grad_()
            r = torch.view_as_real(torch.fft.rfft(r.detach(), dim=1)).flatten(1).requires_grad_()
        out = compose(p, a, r, rows, dim=d if spectral_inputs else None, sparse_grad=sparse)
        (out * weight).sum().backward()
        grads[sparse] = (a.grad, r.grad)
    (ga, gr), (sa, sr) = grads[False], grads[True]
    assert sa.is_sparse and not sr.is_sparse and not ga.is_sparse
    read = torch.unique(p.edge_atom[torch.isin(p.edge_concept, rows)])
    assert (
        sa.coalesce().indices()[0].tolist() == read.tolist() and len(read) < p.n_atoms
    )  # only the atoms read
    torch.testing.assert_close(sa.to_dense(), ga, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sr, gr, rtol=1e-12, atol=1e-12)


def test_the_full_matrix_keeps_a_dense_gradient(make_program):
    p = load_program(make_program(n_concepts=6, n_atoms=8, n_relations=3, seed=4))
    a, r = _params(p, 8)
    compose(p, a, r, None, sparse_grad=True).sum().backward()
    assert not a.grad.is_sparse


@pytest.mark.parametrize("mode", ["base", "add", "cat", "unstructured"])
def test_embedding_rows_give_sparse_atom_and_table_gradients(make_program, mode):
    p = load_program(make_program(n_concepts=20, n_atoms=25, n_relations=3, n_edges=40, seed=5))
    ids = torch.tensor([[1, 4, 4], [7, 1, 0]])
    grads = {}
    for sparse in (False, True):
        torch.manual_seed(0)
        emb = HRREmbedding(p, 16, mode, dtype=torch.float64).train()
        emb.sparse_grads = sparse
        rows = emb.rows(torch.unique(ids))
        rows.square().sum().backward()
        grads[sparse] = {n: q.grad for n, q in emb.named_parameters()}
    for name, g in grads[True].items():
        dense = grads[False][name]
        assert g.is_sparse == (name in ("atoms", "table")), name
        torch.testing.assert_close(g.to_dense() if g.is_sparse else g, dense, rtol=1e-12, atol=1e-12)
