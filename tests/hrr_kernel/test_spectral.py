"""The spectral path: compose_spectrum is the half spectrum of compose (values and explicit adjoints, float64,
odd and even D), Parseval's bin weights, and HRREmbedding.decode equal to h @ matrix().T in every mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hrr_kernel import MODES, HRREmbedding, load_program
from hrr_kernel.composer import bin_weights, compose, compose_spectrum
from tests.helpers.synthetic_program import random_edges, write_program


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
    gb = torch.autograd.grad(
        (
            torch.view_as_real(torch.fft.rfft(compose(program, a, r, ids), dim=1)).reshape(spec.shape) * w
        ).sum(),
        (a, r),
    )
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
    if MODES[mode].composes:  # the others have no spectrum
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


def half(x):
    """rfft as the (n, 2F) real view the composer takes for half-spectrum inputs."""
    return torch.view_as_real(torch.fft.rfft(x, dim=1)).reshape(x.shape[0], -1)


@pytest.mark.parametrize("d", [8, 9])
@pytest.mark.parametrize("rows", [None, [3, 0, 3, 11]])
def test_half_spectrum_inputs_compose_the_same_rows_with_exact_adjoints(program, d, rows):
    a, r = vectors(program, d)
    ids = None if rows is None else torch.tensor(rows)
    ah, rh = half(a.detach()).requires_grad_(), half(r.detach()).requires_grad_()
    torch.testing.assert_close(
        compose(program, ah, rh, ids, dim=d), compose(program, a, r, ids), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(
        compose_spectrum(program, ah, rh, ids, dim=d),
        compose_spectrum(program, a, r, ids),
        rtol=0,
        atol=1e-12,
    )
    # gradcheck perturbs the imaginary parts of the DC / Nyquist bins too: the adjoint is exact off the
    # real-signal subspace as well
    for spectral in (False, True):
        fn = compose_spectrum if spectral else compose
        assert torch.autograd.gradcheck(lambda x, y, fn=fn: fn(program, x, y, ids, dim=d), (ah, rh))
    # the chain rule through rfft: the gradient wrt the spectra, mapped back, is the signal gradient
    w = torch.randn(compose(program, a, r, ids).shape, dtype=torch.float64)
    ga = torch.autograd.grad((compose(program, ah, rh, ids, dim=d) * w).sum(), (ah, rh))
    a2, r2 = a.detach().clone().requires_grad_(), r.detach().clone().requires_grad_()
    gb = torch.autograd.grad((compose(program, half(a2), half(r2), ids, dim=d) * w).sum(), (a2, r2))
    gs = torch.autograd.grad((compose(program, a, r, ids) * w).sum(), (a, r))
    for x, y in zip(gb, gs, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)
    # real signals have no imaginary part at DC (and Nyquist, even D): their gradient keeps it at zero
    for g in ga:
        z = torch.view_as_complex(g.reshape(g.shape[0], -1, 2))
        assert float(z[:, 0].imag.abs().max()) < 1e-12
        if d % 2 == 0:
            assert float(z[:, -1].imag.abs().max()) < 1e-12


def test_half_spectrum_inputs_are_validated(program):
    ah = torch.zeros(program.n_atoms, 10)
    rh = torch.zeros(program.n_relations, 10)
    with pytest.raises(Exception, match="half-spectrum inputs of D=7"):
        compose(program, ah, rh, dim=7)  # 2 * (7 // 2 + 1) = 8 columns expected
    assert compose(program, ah, rh, dim=8).shape == (program.n_concepts, 8)
    assert compose(program, ah, rh, dim=9).shape == (program.n_concepts, 9)


@pytest.mark.parametrize("mode", ["base", "add", "cat", "freq"])
@pytest.mark.parametrize("d", [8, 9])
def test_spectral_atoms_give_the_same_embedding_and_save_as_signals(program, mode, d):
    logf = torch.linspace(-5, -1, program.n_concepts) if mode == "freq" else None
    torch.manual_seed(3)
    plain = HRREmbedding(program, d, mode, log_frequency=logf, dtype=torch.float64)
    torch.manual_seed(3)
    spec = HRREmbedding(program, d, mode, log_frequency=logf, dtype=torch.float64, spectral_atoms=True)
    assert spec.atoms is None and spec.atoms_spectrum.shape == (program.n_atoms, 2 * (spec.hrr_dim // 2 + 1))
    # the same N(0, 0.02) draws: the same vectors, embedding, decoder and spectrum at initialisation
    torch.testing.assert_close(spec.atom_vectors(), plain.atoms, rtol=0, atol=1e-15)
    torch.testing.assert_close(spec.relation_vectors(), plain.relations, rtol=0, atol=1e-15)
    ids = torch.tensor([4, 0, 11, 4])
    torch.testing.assert_close(spec(ids), plain(ids), rtol=0, atol=1e-14)
    torch.testing.assert_close(spec.matrix(), plain.matrix(), rtol=0, atol=1e-14)
    h = torch.randn(3, d, dtype=torch.float64)
    torch.testing.assert_close(spec.decode(h), plain.decode(h), rtol=0, atol=1e-14)
    # an isometry: the parameters' squared norm is the signals'
    torch.testing.assert_close(spec.atoms_spectrum.square().sum(), plain.atoms.square().sum())
    # the state dict holds signals under the usual keys, so a saved model does not say how it was trained
    state = spec.state_dict()
    assert set(state) == set(plain.state_dict())
    torch.testing.assert_close(state["atoms"], plain.atoms.detach(), rtol=0, atol=1e-15)
    torch.manual_seed(9)
    other = HRREmbedding(program, d, mode, log_frequency=logf, dtype=torch.float64, spectral_atoms=True)
    other.load_state_dict(plain.state_dict())
    torch.testing.assert_close(other.atoms_spectrum, spec.atoms_spectrum, rtol=0, atol=1e-15)
    signal = HRREmbedding(program, d, mode, log_frequency=logf, dtype=torch.float64)
    signal.load_state_dict(state)
    torch.testing.assert_close(signal.matrix(), plain.matrix(), rtol=0, atol=1e-14)


def test_spectral_atoms_gradient_is_the_signal_gradient_in_orthogonal_coordinates(program):
    d = 8
    torch.manual_seed(4)
    plain = HRREmbedding(program, d, "base", dtype=torch.float64)
    torch.manual_seed(4)
    spec = HRREmbedding(program, d, "base", dtype=torch.float64, spectral_atoms=True)
    w = torch.randn(program.n_concepts, d, dtype=torch.float64)
    (plain.matrix() * w).sum().backward()
    (spec.matrix() * w).sum().backward()
    # orthogonal change of coordinates: the gradient maps like the parameters and keeps its norm
    torch.testing.assert_close(
        spec.atoms_spectrum.grad, spec._to_spectrum(plain.atoms.grad), rtol=1e-10, atol=1e-12
    )
    torch.testing.assert_close(spec.atoms_spectrum.grad.norm(), plain.atoms.grad.norm())
    assert torch.autograd.gradcheck(
        lambda a, r: compose(program, a, r, dim=d),
        (spec._inputs()[0].detach().requires_grad_(), spec._inputs()[1].detach().requires_grad_()),
    )
