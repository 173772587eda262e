import numpy as np
import pytest
import torch
from hrr_naive import naive_circular_convolution

from hrr_kernel import (
    HRRKernelError,
    ShapeError,
    bind,
    bundle,
    cleanup,
    inverse,
    project_unitary,
    similarity,
    unbind,
)


@pytest.mark.parametrize("d", [1, 2, 7, 8, 33, 64])
def test_bind_matches_naive_circular_convolution(d):
    rng = np.random.default_rng(d)
    x, y = rng.standard_normal(d), rng.standard_normal(d)
    got = bind(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    assert got.shape == (d,)  # irfft without n= would give 2 * (d // 2) samples: wrong for odd d
    np.testing.assert_allclose(got, naive_circular_convolution(x, y), rtol=0, atol=1e-12)


def test_bind_broadcasts_and_commutes():
    a, b = torch.randn(4, 1, 9, dtype=torch.float64), torch.randn(3, 9, dtype=torch.float64)
    out = bind(a, b)
    assert out.shape == (4, 3, 9)
    torch.testing.assert_close(out, bind(b, a))


def test_approximate_inverse_is_involution():
    a = torch.randn(11, dtype=torch.float64)
    inv = inverse(a)
    expected = torch.cat([a[:1], a[1:].flip(0)])  # a[-t mod D]
    torch.testing.assert_close(inv, expected)


def test_exact_inverse_gives_identity():
    a = torch.randn(16, dtype=torch.float64)
    ident = bind(a, inverse(a, exact=True))
    expected = torch.zeros(16, dtype=torch.float64)
    expected[0] = 1
    torch.testing.assert_close(ident, expected, atol=1e-9, rtol=0)


def test_unbind_approximate_retrieves_noisy_filler():
    torch.manual_seed(0)
    d = 1024
    role, filler, other_r, other_f = (torch.randn(d) / d**0.5 for _ in range(4))
    trace = bind(role, filler) + bind(other_r, other_f)
    got = unbind(trace, role)
    assert similarity(got, filler) > 0.5
    assert abs(similarity(got, other_f)) < 0.2


def test_unbind_exact_with_unitary_key_is_lossless():
    torch.manual_seed(1)
    key = project_unitary(torch.randn(31, dtype=torch.float64))
    x = torch.randn(31, dtype=torch.float64)
    torch.testing.assert_close(unbind(bind(x, key), key, exact=True), x, atol=1e-10, rtol=0)
    spec = torch.fft.rfft(key)
    torch.testing.assert_close(spec.abs(), torch.ones_like(spec.abs()))


def test_bundle_forms():
    a, b = torch.randn(2, 5), torch.randn(2, 5)
    torch.testing.assert_close(bundle(a, b), a + b)
    torch.testing.assert_close(bundle(torch.stack([a, b]), dim=0), a + b)


def test_similarity_and_cleanup():
    torch.manual_seed(2)
    memory = torch.randn(50, 64)
    query = memory[[7, 21]] + 0.1 * torch.randn(2, 64)
    values, idx = cleanup(query, memory, k=3)
    assert idx.shape == (2, 3) and idx[:, 0].tolist() == [7, 21]
    assert torch.all(values[:, :-1] >= values[:, 1:])
    torch.testing.assert_close(similarity(memory[0], memory[0]), torch.tensor(1.0))


def test_ops_reject_bad_input():
    with pytest.raises(ShapeError, match="D=4.*D=5"):
        bind(torch.randn(4), torch.randn(5))
    with pytest.raises(ValueError, match="int64"):
        bind(torch.ones(4, dtype=torch.int64), torch.randn(4))
    with pytest.raises(HRRKernelError, match="k must be in"):
        cleanup(torch.randn(4), torch.randn(3, 4), k=5)
