import numpy as np
import pytest
import torch
from hrr_naive import naive_matrix

from hrr_kernel import ShapeError, compose, load_program


def _edges(p):
    return p.edge_concept.tolist(), p.edge_relation.tolist(), p.edge_atom.tolist()


def _params(p, d, dtype, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(p.n_atoms, d, dtype=dtype, generator=g).requires_grad_(requires_grad)
    r = torch.randn(p.n_relations, d, dtype=dtype, generator=g).requires_grad_(requires_grad)
    return a, r


def _naive_grads(p, a, r, weight, rows=None):
    """Float64 reference gradients of ``(C[rows] * weight).sum()`` with respect to atoms and relations,
    autograd through the definition of circular convolution, (r ⊛ a)[t] = Σ_k r[k] a[(t - k) mod D]."""
    a64 = a.detach().double().requires_grad_()
    r64 = r.detach().double().requires_grad_()
    d = a.shape[1]
    t, k = torch.meshgrid(torch.arange(d), torch.arange(d), indexing="ij")
    shifted = a64[p.edge_atom][:, (t - k) % d]  # (E, D, D): a[(t - k) mod D]
    bound = torch.einsum("ek,etk->et", r64[p.edge_relation], shifted)  # (E, D)
    c = torch.zeros(p.n_concepts, d, dtype=torch.float64).index_add(0, p.edge_concept, bound)
    (c if rows is None else c[rows]).mul(weight.double()).sum().backward()
    return a64.grad, r64.grad


def _rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("d", [8, 17, 64])
@pytest.mark.parametrize("seed", [0, 1])
def test_forward_matches_naive_float64_reference(make_program, d, seed):
    p = load_program(make_program(n_concepts=12, n_atoms=9, n_relations=4, n_edges=50, seed=seed))
    a64, r64 = _params(p, d, torch.float64, seed)
    ref = naive_matrix(p.n_concepts, _edges(p), a64.numpy(), r64.numpy())
    got64 = compose(p, a64, r64).numpy()
    assert _rel_err(got64, ref) < 1e-12
    got32 = compose(p, a64.float(), r64.float())
    assert got32.dtype == torch.float32
    assert _rel_err(got32.double().numpy(), ref) < 1e-5


def test_odd_dimension_gives_d_columns(make_program):
    p = load_program(make_program())
    a, r = _params(p, 7, torch.float64)
    out = compose(p, a, r)
    assert out.shape == (p.n_concepts, 7)
    np.testing.assert_allclose(
        out.numpy(), naive_matrix(p.n_concepts, _edges(p), a.numpy(), r.numpy()), atol=1e-12
    )


@pytest.mark.parametrize("rows", [None, [3, 1, 3, 6, 0]])
@pytest.mark.parametrize("d", [6, 9])
def test_gradcheck_float64(make_program, rows, d):
    p = load_program(make_program(n_concepts=7, n_atoms=5, n_relations=3, n_edges=25, seed=4))
    a, r = _params(p, d, torch.float64, requires_grad=True)
    idx = None if rows is None else torch.tensor(rows)
    assert torch.autograd.gradcheck(lambda a, r: compose(p, a, r, idx), (a, r))


def test_gradients_match_autograd_through_naive_torch(make_program):
    p = load_program(make_program(n_concepts=20, n_atoms=11, n_relations=5, n_edges=80, seed=5))
    a, r = _params(p, 31, torch.float32, requires_grad=True)
    a2, r2 = a.detach().clone().requires_grad_(), r.detach().clone().requires_grad_()
    weight = torch.randn(p.n_concepts, 31)
    (compose(p, a, r) * weight).sum().backward()
    bound = torch.fft.irfft(torch.fft.rfft(a2[p.edge_atom]) * torch.fft.rfft(r2[p.edge_relation]), n=31)
    ref = torch.zeros(p.n_concepts, 31).index_add(0, p.edge_concept, bound)
    (ref * weight).sum().backward()
    torch.testing.assert_close(a.grad, a2.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(r.grad, r2.grad, atol=1e-5, rtol=1e-4)


def test_selected_rows_equal_full_matrix_rows(make_program):
    p = load_program(make_program(n_concepts=30, n_atoms=12, n_relations=5, n_edges=120, seed=6))
    a, r = _params(p, 24, torch.float32)
    full = compose(p, a, r)
    rows = torch.tensor([29, 0, 5, 5, 17, 3])
    torch.testing.assert_close(compose(p, a, r, rows), full[rows], atol=1e-5, rtol=1e-5)
    assert compose(p, a, r, torch.tensor([], dtype=torch.int64)).shape == (0, 24)


def test_selected_rows_gradients_touch_only_their_atoms(make_program):
    edges = (np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), np.array([0, 1, 2, 3]))
    p = load_program(make_program(n_concepts=3, n_atoms=5, n_relations=2, edges=edges))
    a, r = _params(p, 8, torch.float64, requires_grad=True)
    compose(p, a, r, torch.tensor([1])).sum().backward()
    nonzero = (a.grad.abs().sum(1) > 0).tolist()
    assert nonzero == [False, False, True, False, False]


def test_concepts_without_edges_are_zero_rows(make_program):
    """Rows without edges are zero, and the backward through such a matrix gives the float64 reference
    gradients (guards against a wrong but finite atom or relation gradient, which ``isfinite`` missed)."""
    edges = (np.array([1, 1, 3]), np.array([0, 1, 0]), np.array([0, 2, 1]))
    p = load_program(make_program(n_concepts=5, n_atoms=3, n_relations=2, edges=edges))
    a, r = _params(p, 10, torch.float64, requires_grad=True)
    out = compose(p, a, r)
    assert torch.all(out[[0, 2, 4]] == 0) and torch.all(out[[1, 3]].abs().sum(1) > 0)
    # a weighted loss (a plain sum only reaches the DC bin, where a wrong conjugate cannot show)
    w = torch.randn(5, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (out * w).sum().backward()
    ga, gr = _naive_grads(p, a, r, w)
    torch.testing.assert_close(a.grad, ga, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(r.grad, gr, rtol=1e-10, atol=1e-12)


def test_relation_multiplicity_above_100_and_repeated_atoms(make_program):
    rng = np.random.default_rng(7)
    n = 150  # concept 0 uses relation 1 150 times, with repeated atoms (counts > 1 in M)
    concept = np.concatenate([np.zeros(n, np.int64), [1, 2, 2]])
    relation = np.concatenate([np.ones(n, np.int64), [0, 1, 1]])
    atom = np.concatenate([rng.integers(0, 6, n), [3, 4, 4]])
    root = make_program(n_concepts=3, n_atoms=6, n_relations=2, edges=(concept, relation, atom))
    p = load_program(root)
    assert p.slice_length.numel() >= 150
    a, r = _params(p, 12, torch.float64)
    ref = naive_matrix(3, _edges(p), a.numpy(), r.numpy())
    np.testing.assert_allclose(compose(p, a, r).numpy(), ref, atol=1e-10)


def test_dedup_of_identical_rows_gives_same_result(make_program):
    c = np.array([0, 0, 1, 1, 2, 3, 3])
    rel = np.array([0, 1, 0, 1, 0, 0, 1])
    atom = np.array([2, 1, 2, 1, 0, 2, 1])  # concepts 0, 1 and 3 share one edge multiset
    root = make_program(n_concepts=4, n_atoms=3, n_relations=2, edges=(c, rel, atom))
    p, q = load_program(root), load_program(root, dedup_rows=False)
    assert p.counts["distinct_rows"] == 2 and q.counts["distinct_rows"] == 4
    a, r = _params(p, 9, torch.float64, requires_grad=True)
    a2, r2 = a.detach().clone().requires_grad_(), r.detach().clone().requires_grad_()
    w = torch.randn(4, 9, dtype=torch.float64)
    x, y = compose(p, a, r), compose(q, a2, r2)
    torch.testing.assert_close(x, y)
    (x * w).sum().backward()
    (y * w).sum().backward()
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(r.grad, r2.grad)
    assert torch.autograd.gradcheck(lambda a, r: compose(p, a, r, torch.tensor([3, 0, 2])), (a, r))


def test_reused_buffers_never_leak_between_steps(make_program):
    """Poisoned pooled buffers, repeated steps, and a retained graph backwarded after another forward; the
    gradients equal the float64 reference (guards against the second backward reading a pooled atom
    spectrum that another forward reused: a wrong but finite relation gradient)."""
    p = load_program(make_program(n_concepts=15, n_atoms=8, n_relations=3, n_edges=60, seed=8))
    a, r = _params(p, 16, torch.float64, requires_grad=True)
    ref = naive_matrix(p.n_concepts, _edges(p), a.detach().numpy(), r.detach().numpy())
    out = compose(p, a, r)
    out.sum().backward()
    for buf in p.workspace._free.values():
        buf.fill_(float("nan"))
    g1 = a.grad.clone()
    a.grad = None
    out1 = compose(p, a, r)
    np.testing.assert_allclose(out1.detach().numpy(), ref, atol=1e-10)
    out1.sum().backward(retain_graph=True)
    torch.testing.assert_close(a.grad, g1)
    a.grad = None
    b2 = a.detach() * 2
    b2.requires_grad_()
    compose(p, b2, r).sum().backward()  # reuses the pooled atom-spectrum buffer
    r.grad = None
    out1.sum().backward()  # second backward through the retained graph
    torch.testing.assert_close(a.grad, g1)
    # both against the float64 reference: a stale pooled atom spectrum (b2's, twice a's) would double
    # the relations' gradient while leaving it finite
    ga, gr = _naive_grads(p, a, r, torch.ones(p.n_concepts, 16))
    torch.testing.assert_close(g1, ga, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(r.grad, gr, rtol=1e-10, atol=1e-10)


def test_in_place_change_of_atoms_before_backward_is_detected(make_program):
    p = load_program(make_program())
    a, r = _params(p, 8, torch.float32, requires_grad=True)
    out = compose(p, a, r)
    with torch.no_grad():
        a.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_compose_validates_inputs(make_program):
    p = load_program(make_program(n_atoms=5, n_relations=3))
    with pytest.raises(ShapeError, match="atoms must have 5 rows"):
        compose(p, torch.randn(4, 8), torch.randn(3, 8))
    with pytest.raises(ValueError, match="D=8 but relations have D=6"):
        compose(p, torch.randn(5, 8), torch.randn(3, 6))
    with pytest.raises(ValueError, match="float32 or float64"):
        compose(p, torch.randn(5, 8).half(), torch.randn(3, 8).half())
    with pytest.raises(ValueError, match=r"rows must lie in \[0, 6\]"):
        compose(p, torch.randn(5, 8), torch.randn(3, 8), torch.tensor([7]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(make_program):
    root = make_program(n_concepts=40, n_atoms=20, n_relations=5, n_edges=200, seed=9)
    p_cpu, p_gpu = load_program(root), load_program(root, device="cuda")
    a, r = _params(p_cpu, 33, torch.float32)
    ag, rg = a.cuda().requires_grad_(), r.cuda().requires_grad_()
    out = compose(p_gpu, ag, rg)
    torch.testing.assert_close(out.cpu(), compose(p_cpu, a, r), atol=1e-5, rtol=1e-5)
    rows = torch.tensor([3, 39, 3], device="cuda")
    torch.testing.assert_close(compose(p_gpu, ag, rg, rows), out[rows])
    out.square().sum().backward()
    a64, r64 = a.double().cuda().requires_grad_(), r.double().cuda().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, y: compose(p_gpu, x, y),
        (
            a64[:, :6].contiguous().detach().requires_grad_(),
            r64[:, :6].contiguous().detach().requires_grad_(),
        ),
    )


def test_workspace_pool_can_be_measured_and_cleared(make_program):
    p = load_program(make_program(n_concepts=15, n_atoms=8, n_relations=3, n_edges=60, seed=8))
    a, r = _params(p, 16, torch.float64, requires_grad=True)
    ref = compose(p, a, r).detach()
    assert p.workspace.nbytes > 0
    p.workspace.clear()
    assert p.workspace.nbytes == 0
    torch.testing.assert_close(compose(p, a, r).detach(), ref, rtol=0, atol=0)
