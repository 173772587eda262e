"""The spectral path: compose_spectrum is the half spectrum of compose (values and explicit adjoints, float64,
odd and even D), Parseval's bin weights, and HRREmbedding.decode equal to h @ matrix().T in every mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hrr_kernel import MODES, HRREmbedding, load_program
from hrr_kernel.composer import bin_weights, compose, compose_spectrum
from hrr_kernel.synthetic import random_edges, write_program


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    root = tmp_path_factory.mktemp("spectral") / "p"
    edges = random_edges(np.random.default_rng(1), 12, 6, 4, 30)
    return load_program(write_program(root, n_concepts=12, n_atoms=6, n_relations=4, edges=edges))


def vectors(program, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(program.n_atoms, d, dtype=torch.float64, generator=g, requires_grad=True)
    r = torch.randn(program.n_relations, d, dtype=torch.float64, generator=g, requires_grad=True)
    return a, r


@pytest.mark.parametrize("d", [8, 9])
@pytest.mark.parametrize("rows", [None, [3, 0, 3, 11]])
def test_compose_spectrum_is_the_half_spectrum_of_compose(program, d, rows):
    a, r = vectors(program, d)
    ids = None if rows is None else torch.tensor(rows)
    spec = compose_spectrum(program, a, r, ids)
    c = compose(program, a, r, ids)
    assert spec.shape == (c.shape[0], 2 * (d // 2 + 1))
    ref = torch.view_as_real(torch.fft.rfft(c, dim=1)).reshape(c.shape[0], -1)
    torch.testing.assert_close(spec, ref, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x, y: compose_spectrum(program, x, y, ids), (a, r))
    # a loss of the spectrum and the same loss of the signal-domain rows give the same gradients
    w = torch.randn(spec.shape, dtype=torch.float64)
    ga = torch.autograd.grad((compose_spectrum(program, a, r, ids) * w).sum(), (a, r))
    gb = torch.autograd.grad((torch.view_as_real(torch.fft.rfft(compose(program, a, r, ids), dim=1))
                              .reshape(spec.shape) * w).sum(), (a, r))  # fmt: skip
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("d", [6, 7])
def test_bin_weights_give_parseval(d):
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(2, d, dtype=torch.float64, generator=g)
    fx, fy = torch.fft.rfft(x), torch.fft.rfft(y)
    w = bin_weights(d, torch.float64)
    assert w.shape == (d // 2 + 1,) and w[0] == 1 and (w[-1] == 1) == (d % 2 == 0)
    torch.testing.assert_close((w / d * (fx.conj() * fy).real).sum(), x @ y)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("d", [8, 9])
def test_decode_equals_the_tied_matrix_product(program, mode, normalize, d):
    torch.manual_seed(0)
    logf = torch.linspace(-5, -1, program.n_concepts) if mode == "freq" else None
    emb = HRREmbedding(program, d, mode, normalize=normalize, log_frequency=logf, dtype=torch.float64)
    h = torch.randn(5, d, dtype=torch.float64, requires_grad=True)
    got, ref = emb.decode(h), h @ emb.matrix().t()
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    if mode != "unstructured":
        ids = torch.tensor([4, 0, 11, 4])
        torch.testing.assert_close(
            emb.rows_from_spectrum(ids, emb.spectrum()), emb.rows(ids), rtol=1e-12, atol=1e-12
        )
    params = [h, *emb.parameters()]
    ga = torch.autograd.grad(got.square().sum(), params)
    gb = torch.autograd.grad(ref.square().sum(), params)
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_decode_caches_in_eval_and_rejects_bad_shapes(program):
    emb = HRREmbedding(program, 8, "base").eval()
    with torch.no_grad():
        assert emb.spectrum() is emb.spectrum()  # cached until a parameter changes
        first = emb.spectrum()
        emb.atoms.add_(1.0)
        assert emb.spectrum() is not first
    with pytest.raises(Exception, match="h must be"):
        emb.decode(torch.zeros(3, 7))
    with pytest.raises(Exception, match="no HRR part"):
        HRREmbedding(program, 8, "unstructured").spectrum()
