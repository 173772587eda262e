"""Pure holographic reduced representation (HRR) operations in the half-spectrum.

Binding is circular convolution, computed as ``irfft(rfft(a) * rfft(b), n=D)``; passing ``n=D`` makes
odd ``D`` exact (``irfft`` without ``n`` would return ``2 * (F - 1)`` samples).

Dimension legend: ``*`` any leading batch dims, N concepts (cleanup memory rows), K top-k, D vector
dimension, F = D // 2 + 1 frequencies.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .errors import ShapeError

__all__ = ["bind", "unbind", "inverse", "project_unitary", "bundle", "similarity", "cleanup"]


def _check_real(name: str, x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise ShapeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ShapeError(f"{name} must be a real floating tensor, got dtype {x.dtype}")
    if x.dim() < 1:
        raise ShapeError(f"{name} must have at least one dimension, got shape {tuple(x.shape)}")


def _check_pair(a: Tensor, b: Tensor) -> int:
    _check_real("a", a)
    _check_real("b", b)
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"last dimensions differ: a has D={a.shape[-1]}, b has D={b.shape[-1]}")
    return a.shape[-1]


def _spectrum(name: str, x: Tensor) -> Tensor:
    """The half-spectrum ``rfft`` of a checked real tensor along its last dimension: ``(*, D) -> (*, F)``."""
    _check_real(name, x)
    return torch.fft.rfft(x, dim=-1)


def _unit_magnitude(spec: Tensor, eps: float) -> Tensor:
    """Every frequency scaled to magnitude 1, its phase kept: ``(*, F) -> (*, F)``."""
    return spec / spec.abs().clamp_min(eps)


def bind(a: Tensor, b: Tensor) -> Tensor:
    """Circular convolution ``a ⊛ b``.

    Shapes:
        - a: ``(*, D)``; b: ``(*, D)`` (broadcastable leading dims)
        - output: ``(*, D)``
    """
    d = _check_pair(a, b)
    return torch.fft.irfft(torch.fft.rfft(a, dim=-1) * torch.fft.rfft(b, dim=-1), n=d, dim=-1)


def inverse(a: Tensor, *, exact: bool = False, eps: float = 1e-12) -> Tensor:
    """Inverse of ``a`` under binding.

    ``exact=False`` gives Plate's approximate inverse (the involution ``a[-t mod D]``, i.e. the complex
    conjugate spectrum). ``exact=True`` gives the exact inverse ``1 / rfft(a)``, which is unstable where a
    frequency is near zero; use it on vectors projected with :func:`project_unitary` (Ganesan et al. 2021).

    Shapes:
        - a: ``(*, D)``
        - output: ``(*, D)``
    """
    spec = _spectrum("a", a)  # (*, F)
    if exact:
        mag2 = spec.real.square() + spec.imag.square()
        spec = spec.conj() / mag2.clamp_min(eps)
    else:
        spec = spec.conj()
    return torch.fft.irfft(spec, n=a.shape[-1], dim=-1)


def project_unitary(a: Tensor, *, eps: float = 1e-12) -> Tensor:
    """Project ``a`` onto vectors whose spectrum has unit magnitude (Ganesan et al. 2021, eq. 5).

    Such vectors have an exact inverse equal to their approximate inverse, so unbinding is lossless.

    Shapes:
        - a: ``(*, D)``
        - output: ``(*, D)``
    """
    spec = _unit_magnitude(_spectrum("a", a), eps)  # (*, F)
    return torch.fft.irfft(spec, n=a.shape[-1], dim=-1)


def unbind(c: Tensor, key: Tensor, *, exact: bool = False, eps: float = 1e-12) -> Tensor:
    """Retrieve the vector bound to ``key`` in ``c``: ``c ⊛ key⁻¹``.

    With ``exact=False`` the approximate inverse is used (circular correlation, robust to noise). With
    ``exact=True`` the key is first projected to unit spectral magnitude (Ganesan et al. 2021) and
    its exact inverse is used; for a key that is already unitary both give the same result, and
    ``unbind(bind(x, project_unitary(k)), k, exact=True) == x`` up to rounding.

    Shapes:
        - c: ``(*, D)``; key: ``(*, D)``
        - output: ``(*, D)``
    """
    d = _check_pair(c, key)
    spec_k = torch.fft.rfft(key, dim=-1)  # (*, F)
    if exact:
        spec_k = _unit_magnitude(spec_k, eps)  # unit magnitude: the inverse is the conjugate
    return torch.fft.irfft(torch.fft.rfft(c, dim=-1) * spec_k.conj(), n=d, dim=-1)


def bundle(*vectors: Tensor, dim: int | None = None) -> Tensor:
    """Superposition (sum) of vectors.

    Either ``bundle(a, b, c)`` (broadcast sum) or ``bundle(stack, dim=k)`` (sum over dimension ``k``).

    Shapes:
        - each vector: ``(*, D)``; or one stack ``(*, K, *, D)`` with ``dim``
        - output: ``(*, D)``
    """
    if not vectors:
        raise ShapeError("bundle needs at least one tensor, got none")
    for i, v in enumerate(vectors):
        _check_real(f"vectors[{i}]", v)
    if dim is not None:
        if len(vectors) != 1:
            raise ShapeError(f"bundle(..., dim={dim}) takes one stacked tensor, got {len(vectors)}")
        return vectors[0].sum(dim=dim)
    out = vectors[0]
    for v in vectors[1:]:
        if v.shape[-1] != out.shape[-1]:
            raise ShapeError(f"last dimensions differ: {out.shape[-1]} and {v.shape[-1]}")
        out = out + v
    return out


def similarity(a: Tensor, b: Tensor, *, eps: float = 1e-12) -> Tensor:
    """Cosine similarity along the last dimension (broadcasting leading dims).

    Shapes:
        - a: ``(*, D)``; b: ``(*, D)``
        - output: ``(*)``
    """
    _check_pair(a, b)
    num = (a * b).sum(-1)
    den = a.norm(dim=-1) * b.norm(dim=-1)
    return num / den.clamp_min(eps)


def cleanup(query: Tensor, memory: Tensor, *, k: int = 1) -> tuple[Tensor, Tensor]:
    """Nearest rows of ``memory`` to each query by cosine similarity.

    Shapes:
        - query: ``(*, D)``; memory: ``(N, D)``
        - output: ``(values, indices)``, each ``(*, K)``
    """
    _check_pair(query, memory)
    if memory.dim() != 2:
        raise ShapeError(f"memory must be (N, D), got shape {tuple(memory.shape)}")
    if not 1 <= k <= memory.shape[0]:
        raise ShapeError(f"k must be in [1, {memory.shape[0]}] (memory rows), got k={k}")
    q = torch.nn.functional.normalize(query, dim=-1, eps=1e-12)  # (*, D)
    m = torch.nn.functional.normalize(memory, dim=-1, eps=1e-12)  # (N, D)
    sims = q @ m.T  # (*, N)
    values, indices = sims.topk(k, dim=-1)  # (*, K)
    return values, indices
