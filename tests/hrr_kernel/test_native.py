"""The native CPU kernels (hrr_kernel/native.py): a batch's rows, their gradients and their plan agree
with the torch path and with the float64 definition; the build falls back cleanly."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hrr_naive import naive_matrix

from hrr_kernel import HRREmbedding, compose, load_program, native
from hrr_kernel.plan import plan_rows

ROOT = Path(__file__).resolve().parents[2]


def test_native_kernels_build_where_a_compiler_is():
    """CI has a C compiler, so the native path is what the other tests here exercise."""
    if shutil.which(os.environ.get("CC", "cc")) is None or os.environ.get("HRRBERT_NATIVE") == "0":
        pytest.skip("no C compiler, or turned off")
    assert native.available(), native.status()


needs_native = pytest.mark.skipif(not native.available(), reason=native.status())


def _params(p, d, dtype, spectral, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(p.n_atoms, d, dtype=torch.float64, generator=g)
    r = torch.randn(p.n_relations, d, dtype=torch.float64, generator=g)
    if spectral:  # the half spectra as real views (n, 2F): the parameters of --spectral-atoms
        a, r = (torch.view_as_real(torch.fft.rfft(x, dim=1)).reshape(x.shape[0], -1) for x in (a, r))
    return a.to(dtype).requires_grad_(), r.to(dtype).requires_grad_()


def _run(p, a, r, rows, weight, dim, sparse):
    a.grad = r.grad = None
    out = compose(p, a, r, rows, dim=dim, sparse_grad=sparse)
    (out * weight).sum().backward()
    ga = a.grad.to_dense() if a.grad.is_sparse else a.grad
    return out.detach().clone(), ga.clone(), r.grad.clone()


@needs_native
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("d", [8, 17, 64])
@pytest.mark.parametrize("spectral", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_batch_rows_and_gradients_match_the_torch_path(make_program, dtype, d, spectral, sparse):
    p = load_program(make_program(n_concepts=40, n_atoms=15, n_relations=5, n_edges=160, seed=d))
    rows = torch.tensor([39, 0, 5, 5, 17, 3, 0, 22, 22, 22, 11])  # repeats, any order
    a, r = _params(p, d, dtype, spectral)
    dim = d if spectral else None
    weight = torch.randn(rows.numel(), d, dtype=dtype, generator=torch.Generator().manual_seed(1))
    assert p.plan_for(rows).native
    got = _run(p, a, r, rows, weight, dim, sparse)
    with native.disabled():
        assert not p.plan_for(rows).native
        ref = _run(p, a, r, rows, weight, dim, sparse)
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 2e-5}
    for x, y in zip(got, ref, strict=True):
        torch.testing.assert_close(x, y, **tol)


@needs_native
@pytest.mark.parametrize("spectral", [False, True])
def test_the_whole_matrix_matches_the_torch_path(make_program, spectral):
    """The whole matrix's plan (torch-built, rows deduplicated) runs on the native kernels too."""
    edges = (
        np.array([0, 0, 1, 1, 2, 2, 2, 4]),
        np.array([0, 1, 1, 0, 0, 1, 1, 2]),
        np.array([3, 2, 2, 3, 3, 0, 0, 1]),
    )
    for prog in (
        load_program(make_program(n_concepts=5, n_atoms=4, n_relations=3, edges=edges)),
        load_program(make_program(n_concepts=40, n_atoms=15, n_relations=5, n_edges=160, seed=4)),
    ):
        for dtype in (torch.float64, torch.float32):
            a, r = _params(prog, 10, dtype, spectral)
            dim = 10 if spectral else None
            weight = torch.randn(prog.n_concepts, 10, dtype=dtype, generator=torch.Generator().manual_seed(2))
            got = _run(prog, a, r, None, weight, dim, False)
            with native.disabled():
                ref = _run(prog, a, r, None, weight, dim, False)
            tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 2e-5}
            for x, y in zip(got, ref, strict=True):
                torch.testing.assert_close(x, y, **tol)


@needs_native
def test_batch_rows_match_the_float64_definition(make_program):
    p = load_program(make_program(n_concepts=30, n_atoms=12, n_relations=4, n_edges=120, seed=3))
    a, r = _params(p, 13, torch.float64, spectral=False)
    rows = torch.tensor([29, 1, 1, 7])
    edges = (p.edge_concept.tolist(), p.edge_relation.tolist(), p.edge_atom.tolist())
    ref = naive_matrix(p.n_concepts, edges, a.detach().numpy(), r.detach().numpy())[rows.numpy()]
    np.testing.assert_allclose(compose(p, a, r, rows).detach().numpy(), ref, atol=1e-12)


@needs_native
def test_native_gradients_are_bitwise_reproducible(make_program):
    """Same inputs, same thread count: the same bits (the adjoint's threads take fixed blocks of atoms)."""
    p = load_program(make_program(n_concepts=200, n_atoms=60, n_relations=6, n_edges=1500, seed=5))
    a, r = _params(p, 48, torch.float32, spectral=False)
    rows = torch.randint(0, 200, (300,), generator=torch.Generator().manual_seed(0))
    weight = torch.randn(300, 48, generator=torch.Generator().manual_seed(1))
    first = _run(p, a, r, rows, weight, None, True)
    for _ in range(3):
        assert all(
            torch.equal(x, y) for x, y in zip(first, _run(p, a, r, rows, weight, None, True), strict=True)
        )


@needs_native
@pytest.mark.parametrize("mode", ["base", "freq", "cat"])
def test_training_an_embedding_follows_the_torch_path(make_program, mode):
    """A few AdamW steps of an HRREmbedding on batch rows end at the same parameters either way."""
    p = load_program(make_program(n_concepts=200, n_atoms=60, n_relations=6, n_edges=1500, seed=7))
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 200, (4, 16), generator=gen) for _ in range(4)]
    targets = [torch.randn(4, 16, 32, generator=gen) for _ in range(4)]

    def train():
        torch.manual_seed(0)
        extra = {"log_frequency": torch.linspace(0.0, 5.0, 200)} if mode == "freq" else {}
        emb = HRREmbedding(p, 32, mode, **extra)
        opt = torch.optim.AdamW(emb.parameters(), lr=1e-2)
        for ids, y in zip(batches, targets, strict=True):
            opt.zero_grad()
            ((emb(ids) - y) ** 2).mean().backward()
            opt.step()
        return [x.detach().clone() for x in emb.parameters()]

    got = train()
    with native.disabled():
        ref = train()
    for x, y in zip(got, ref, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


@needs_native
def test_native_gradcheck_float64(make_program):
    p = load_program(make_program(n_concepts=10, n_atoms=6, n_relations=3, n_edges=30, seed=2))
    a, r = _params(p, 6, torch.float64, spectral=False)
    rows = torch.tensor([9, 2, 2, 4])
    assert torch.autograd.gradcheck(lambda x, y: compose(p, x, y, rows), (a, r))


@needs_native
def test_native_plan_holds_the_torch_plans_entries_and_resets_its_marks(make_program):
    # concepts 0 and 1 have the same edge multiset: one computed row serves both
    edges = (
        np.array([0, 0, 1, 1, 2, 2, 2, 4]),
        np.array([0, 1, 1, 0, 0, 1, 1, 2]),
        np.array([3, 2, 2, 3, 3, 0, 0, 1]),
    )
    p = load_program(make_program(n_concepts=5, n_atoms=4, n_relations=3, edges=edges))
    rows = torch.tensor([4, 1, 0, 2, 3, 1])
    nat = plan_rows(p.base, rows)
    with native.disabled():
        ref = plan_rows(p.base, rows)
    assert nat.native and not ref.native
    assert (nat.n_out, nat.n_rows, nat.n_pairs) == (ref.n_out, ref.n_rows, ref.n_pairs)
    assert torch.equal(nat.atoms_used, ref.atoms_used)  # sorted, distinct

    def entries(plan, out_row):
        """{(relation, atom id, count)} of the computed row an output row reads."""
        u = out_row if plan.row_map is None else int(plan.row_map[out_row])
        crow, col, val = plan.m_index
        pairs = col[crow[u] : crow[u + 1]]
        atoms = plan.atoms_used[plan.pair_atom[pairs]]
        counts = val[crow[u] : crow[u + 1]].tolist()
        return sorted(zip(plan.pair_relation[pairs].tolist(), atoms.tolist(), counts, strict=True))

    for i in range(rows.numel()):
        assert entries(nat, i) == entries(ref, i)
    assert entries(nat, 3) == [(0, 3, 1.0), (1, 0, 2.0)]  # concept 2: the repeated edge counts twice
    assert entries(nat, 4) == []  # concept 3 has no edges
    assert int(nat.row_map[1]) == int(nat.row_map[2])  # concepts 1 and 0 share a row
    marks = p.base.marks()
    assert all(bool((m == -1).all()) for m in (marks.row, marks.pair, marks.atom))


def test_native_plan_sorts_used_atoms_beyond_one_radix_pass(make_program):
    """More than 2^11 atoms, so the used atoms' radix sort takes two passes; the plan still matches the
    torch plan's sorted atoms and the rows still match the torch path."""
    p = load_program(make_program(n_concepts=3000, n_atoms=9000, n_relations=4, n_edges=12000, seed=3))
    rows = torch.from_numpy(np.random.default_rng(0).choice(3000, 1200, replace=True))
    nat = plan_rows(p.base, rows)
    with native.disabled():
        ref = plan_rows(p.base, rows)
    assert nat.native and nat.n_atoms_used > 2048 and int(nat.atoms_used.max()) >= 2048
    assert torch.equal(nat.atoms_used, ref.atoms_used)
    atoms, rels = torch.randn(9000, 32, dtype=torch.float64), torch.randn(4, 32, dtype=torch.float64)
    got = compose(p, atoms, rels, rows=rows)
    with native.disabled():
        want = compose(p, atoms, rels, rows=rows)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def _child(code: str, **env) -> dict:
    full = {**os.environ, **env}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=full, check=True
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


STATUS = (
    "import json; from hrr_kernel import native; print(json.dumps([native.available(), native.status()]))"
)


def test_turned_off_or_without_a_compiler_the_torch_path_runs_and_says_why(tmp_path):
    ok, why = _child(STATUS, HRRBERT_NATIVE="0")
    assert not ok and "HRRBERT_NATIVE" in why
    ok, why = _child(STATUS, CC=str(tmp_path / "no-such-cc"), HRRBERT_NATIVE_CACHE=str(tmp_path))
    assert not ok and "no C compiler" in why


@needs_native
def test_the_library_is_built_once_into_the_cache(tmp_path):
    first = _child(STATUS, HRRBERT_NATIVE_CACHE=str(tmp_path))
    built = sorted(tmp_path.glob("hrr_native-*.so"))
    assert first[0] and len(built) == 1 and str(built[0]) in first[1]
    stamp = built[0].stat().st_mtime_ns
    assert _child(STATUS, HRRBERT_NATIVE_CACHE=str(tmp_path))[0]
    assert sorted(tmp_path.glob("*")) == built and built[0].stat().st_mtime_ns == stamp  # no temp left
