"""``HRREmbedding``: concept embeddings generated from a program, in the paper's configurations.

Modes (Kang et al., HRR-ontology paper) are declared in :mod:`hrr_kernel.modes` (:data:`MODES`), one
:class:`~hrr_kernel.modes.EmbeddingMode` each; this module asks the spec and never compares mode names:

- ``unstructured``: a plain learnable table (the control).
- ``base``: pure HRR, ``E = C`` with ``C`` composed from learnable atoms and relations.
- ``freq``: ``E = C + PE(bin(log_frequency))``, a unit-norm sinusoidal encoding of the discretized log
  code frequency (frequencies supplied from data; fixed, not learned).
- ``add``: ``E = C + W`` with a learnable table ``W``.
- ``cat``: ``E = [C, W]``, a D/2 HRR half concatenated with a learnable D - D/2 table.
- ``gram``, ``ancestors`` (:mod:`hrr_kernel.ancestry`): an attention-weighted mix (GRAM) or the mean of the
  token's own free vector (a row of the table) and its ancestors' (D-wide atoms); nothing is composed.

All parameters start N(0, 0.02) (GRAM's attention bias: zero). ``normalize=True`` rescales each HRR row
(each concept vector) to unit L2 norm; rows without edges stay zero; a mode that composes nothing ignores it.

``hrr_width=H`` composes the rows wider than the embedding (base and freq only) and maps them to D by a
learned ``projection`` ``(H, D)``, drawn N(0, 1/D) so that it keeps a row's norm on average: ``E = C P``
(``freq`` adds its encoding after the map). The crosstalk of a code's other edges, which a query of one
relation has to read through, falls as 1/√H, so a wide composition keeps each edge readable while the model
that reads the rows stays narrow (at H = 128 the demo release's ICD-10-CM chapter of a code is the nearest
chapter atom after unbinding for 78 % of the codes with random atoms; at H = 512 for all of them).

``spectral_atoms=True`` stores the atoms and relations as half spectra instead of signals: the parameter
of a vector ``x`` is ``rfft(x) * sqrt(w / H)`` as its real view ``(n, 2F)`` (``w``:
:func:`~hrr_kernel.composer.bin_weights`), an orthogonal change of coordinates (its squared norm is
``x``'s), initialised from the same N(0, 0.02) draws, so the composer skips the atoms' ``rfft`` and the
``irfft`` of their gradients. ``atoms`` / ``relations`` are then None and :meth:`atom_vectors` /
:meth:`relation_vectors` give the signals; ``state_dict`` always holds the signals under the usual
``atoms`` / ``relations`` keys (a saved model does not depend on how it was trained), and loading one
converts them back.

Dimension legend: N concepts, B batch, T codes per sequence, A atoms, R relations, D dimension,
H = HRR part dimension (D, D // 2 in ``cat``, or ``hrr_width``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .composer import bin_weights, compose, compose_spectrum
from .errors import ShapeError
from .lookup import IdMarks, gather_rows, unique_ids
from .modes import MODES, EmbeddingMode, mode_spec
from .program import Program

__all__ = ["HRREmbedding", "MODES", "sinusoidal_encoding"]

INIT_STD = 0.02
# fraction of the vocabulary above which a lookup builds the full matrix instead of selected rows
FULL_MATRIX_FRACTION = 0.5


def _spectral_scale(h: int, dtype: torch.dtype, device) -> Tensor:
    """``sqrt(w_k / H)`` per real-view column ``(2F,)``: the spectral coordinates' isometric scale."""
    return (bin_weights(h, torch.float64) / h).sqrt().repeat_interleave(2).to(dtype=dtype, device=device)


def _signals_in_state_dict(module: HRREmbedding, state: dict, prefix: str, _meta) -> None:
    """``state_dict`` hook: the spectral parameters are saved as the signals they stand for."""
    for name in ("atoms", "relations"):
        p = state.pop(prefix + name + "_spectrum")
        state[prefix + name] = module._from_spectrum(p.detach())


def _spectra_from_state_dict(module: HRREmbedding, state: dict, prefix: str, *_args) -> None:
    """``load_state_dict`` pre-hook: signals saved under ``atoms`` / ``relations`` become spectra."""
    for name in ("atoms", "relations"):
        key = prefix + name
        if key in state:
            x = state.pop(key)
            if x.dim() == 2 and x.shape[1] == module.hrr_dim:
                x = module._to_spectrum(x.to(module.spectral_scale))
            state[key + "_spectrum"] = x


def sinusoidal_encoding(positions: Tensor, dim: int) -> Tensor:
    """Transformer sinusoidal encoding of (possibly fractional) positions, each row scaled to unit norm.

    Shapes:
        - positions: ``(N,)``
        - output: ``(N, D)``
    """
    if positions.dim() != 1:
        raise ShapeError(f"positions must be 1-D, got shape {tuple(positions.shape)}")
    pos = positions.to(torch.float64).unsqueeze(1)  # (N, 1)
    i = torch.arange(dim, dtype=torch.float64, device=positions.device)  # (D,)
    rate = torch.exp(-math.log(10000.0) * (2 * (i // 2)) / dim)  # (D,), 10000: Vaswani et al.'s base
    angle = pos * rate  # (N, D)
    enc = torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))  # (N, D)
    return F.normalize(enc, dim=1).to(torch.float32)


class HRREmbedding(nn.Module):
    """Concept embeddings of a program; ``forward(ids)`` looks rows up, :meth:`matrix` gives them all.

    Args:
        program: a loaded program (:func:`hrr_kernel.load_program`).
        dim: embedding dimension D.
        mode: a name of :data:`~hrr_kernel.modes.MODES` (``unstructured``, ``base``, ``freq``, ``add``,
            ``cat``, ``gram``, ``ancestors``) or an :class:`~hrr_kernel.modes.EmbeddingMode`.
        normalize: scale each HRR row to unit L2 norm (per concept, not per dimension).
        log_frequency: ``(N,)`` log code frequencies, required for ``freq``.
        freq_resolution: bins per unit of log frequency when discretizing for ``freq``.
        dtype: parameter dtype (float32 default; float64 for checks).
        spectral_atoms: keep atoms and relations as (scaled) half spectra (module docstring).
        hrr_width: compose at this width H and map to D by a learned ``projection`` (module docstring);
            None composes at the mode's own width.

    In eval mode with gradients disabled the full matrix is cached until a parameter changes
    (tracked by each parameter's in-place version counter and storage).

    ``sparse_grads`` (an attribute, False by default; a training choice, not part of the model): rows
    composed or looked up for a batch give the atoms and the table sparse gradients holding only the
    rows they read (:func:`~hrr_kernel.composer.compose` ``sparse_grad``; ``embedding(sparse=True)``),
    for an optimizer that updates only those (``pipelines.train.sparse.LazyAdamW``). The full matrix
    still gives dense ones; ``gram`` and ``ancestors`` keep dense gradients.
    """

    def __init__(
        self,
        program: Program,
        dim: int,
        mode: str | EmbeddingMode = "base",
        *,
        normalize: bool = False,
        log_frequency: Tensor | None = None,
        freq_resolution: float = 10.0,
        dtype: torch.dtype = torch.float32,
        spectral_atoms: bool = False,
        hrr_width: int | None = None,
    ) -> None:
        super().__init__()
        spec = mode if isinstance(mode, EmbeddingMode) else mode_spec(mode)
        spec.check_dim(dim)
        spec.check_width(hrr_width)
        self.program = program
        self.spec = spec
        self.mode = spec.name
        self.dim = dim
        self.normalize = normalize
        self.sparse_grads = False
        self._id_marks = IdMarks(program.n_concepts)  # unique_ids' scratch, not state
        n, dev = program.n_concepts, program.device
        self.hrr_dim = spec.hrr_dim(dim) if hrr_width is None else int(hrr_width)
        table_dim = spec.table_dim(dim)

        def param(rows: int, cols: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(rows, cols, dtype=dtype, device=dev) * INIT_STD)

        self.spectral_atoms = bool(spectral_atoms) and self.hrr_dim > 0
        # H; D where the atoms are free vectors of ancestors (gram, ancestors)
        atom_dim = self.hrr_dim if spec.composes else spec.atom_dim(dim)
        self.atoms = param(program.n_atoms, atom_dim) if atom_dim else None
        self.relations = param(program.n_relations, self.hrr_dim) if self.hrr_dim else None
        if self.spectral_atoms:  # the same draws, moved to the spectral coordinates
            self.register_buffer(
                "spectral_scale", _spectral_scale(self.hrr_dim, dtype, dev), persistent=False
            )
            self.atoms_spectrum = nn.Parameter(self._to_spectrum(self.atoms.detach()))
            self.relations_spectrum = nn.Parameter(self._to_spectrum(self.relations.detach()))
            self.atoms = self.relations = None
            self._register_state_dict_hook(_signals_in_state_dict)
            self._register_load_state_dict_pre_hook(_spectra_from_state_dict, with_module=True)
        self.table = param(n, table_dim) if table_dim else None
        self.projection = (
            nn.Parameter(torch.randn(self.hrr_dim, dim, dtype=dtype, device=dev) / math.sqrt(dim))
            if self.hrr_dim and self.hrr_dim != spec.hrr_dim(dim)
            else None
        )  # (H, D): E = C P where the composition is wider than the row
        if spec.frequency:
            if log_frequency is None:
                raise ShapeError(f"mode {spec.name!r} needs log_frequency, a (n_concepts,) tensor; got None")
            if log_frequency.shape != (n,):
                raise ShapeError(f"log_frequency must have shape ({n},), got {tuple(log_frequency.shape)}")
            bins = torch.round(log_frequency.to(torch.float64) * freq_resolution)  # (N,)
            self.register_buffer("freq_encoding", sinusoidal_encoding(bins, dim).to(dtype=dtype, device=dev))
        else:
            self.freq_encoding = None
        spec.init_parameters(self, program, dim, dtype)
        self._cache: Tensor | None = None
        self._cache_key: tuple | None = None
        self._spec_cache: Tensor | None = None
        self._spec_key: tuple | None = None

    def extra_repr(self) -> str:
        return (
            f"program={self.program.program_id}, n={self.program.n_concepts}, dim={self.dim}, "
            f"mode={self.mode}, "
            + (f"hrr_width={self.hrr_dim}, " if self.projection is not None else "")
            + f"normalize={self.normalize}"
            + (", spectral_atoms=True" if self.spectral_atoms else "")
        )

    # --- spectral parameters ---------------------------------------------------------------------------

    def _to_spectrum(self, x: Tensor) -> Tensor:
        """Signals ``(n, H)`` -> the spectral parameters ``(n, 2F)``."""
        z = torch.view_as_real(torch.fft.rfft(x, dim=1)).reshape(x.shape[0], -1)  # (n, 2F)
        return z * self.spectral_scale

    def _from_spectrum(self, p: Tensor) -> Tensor:
        """The spectral parameters ``(n, 2F)`` -> signals ``(n, H)`` (differentiable)."""
        z = torch.view_as_complex((p / self.spectral_scale).reshape(p.shape[0], -1, 2).contiguous())  # (n, F)
        return torch.fft.irfft(z, n=self.hrr_dim, dim=1)

    def _inputs(self) -> tuple[Tensor, Tensor, int | None]:
        """What the composer takes: signals, or half spectra and the dimension they belong to."""
        if self.spectral_atoms:
            s = self.spectral_scale
            return self.atoms_spectrum / s, self.relations_spectrum / s, self.hrr_dim
        return self.atoms, self.relations, None

    def atom_vectors(self) -> Tensor:
        """The atom vectors as signals, whatever the parameterisation. Shapes: output ``(A, H)`` (``(A, D)``
        where they are free vectors of ancestors)."""
        if not self.spec.has_atoms:
            raise ShapeError(f"mode {self.mode!r} has no atoms")
        return self._from_spectrum(self.atoms_spectrum) if self.spectral_atoms else self.atoms

    def relation_vectors(self) -> Tensor:
        """The relation vectors as signals, whatever the parameterisation. Shapes: output ``(R, H)``."""
        if self.hrr_dim == 0:
            raise ShapeError(f"mode {self.mode!r} has no relations")
        return self._from_spectrum(self.relations_spectrum) if self.spectral_atoms else self.relations

    def compose_rows(self, rows: Tensor | None) -> Tensor:
        """The composition ``C`` of the given rows (all when None), before any normalisation.

        Shapes: rows ``(U,)`` -> ``(U, H)``.
        """
        a, r, dim = self._inputs()
        return compose(self.program, a, r, rows, dim=dim, sparse_grad=self.sparse_grads and rows is not None)

    def _build(self, rows: Tensor | None) -> Tensor:
        """Embedding rows (all when ``rows`` is None), as the mode builds them.
        Shapes: ``(N,)`` -> ``(N, D)``."""
        return self.spec.build(self, rows)

    def _check_ids(self, ids: Tensor) -> None:
        n = self.program.n_concepts
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise ShapeError(f"ids must lie in [0, {n - 1}], got [{int(ids.min())}, {int(ids.max())}]")

    def _key(self) -> tuple:
        return tuple((p._version, p.data_ptr(), p.dtype, p.device) for p in self.parameters()) + (
            self.normalize,
        )

    def _cacheable(self) -> bool:
        return not self.training and not (
            torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        )

    def matrix(self) -> Tensor:
        """The full embedding matrix (for a tied decoder). Shapes: output ``(N, D)``."""
        if self.spec.row_is_table:  # the table itself; caching it would register it a second time
            return self.table
        if not self._cacheable():
            self._cache = self._cache_key = None
            return self._build(None)
        key = self._key()
        if self._cache is None or self._cache_key != key:
            self._cache, self._cache_key = self._build(None), key
        return self._cache

    def spectrum(self) -> Tensor:
        """The half spectrum of every concept's HRR part (``rfft`` of the composition ``C``, before any
        normalisation) as its real view, for :meth:`decode`; cached like :meth:`matrix`.

        Shapes: output ``(N, 2F)``, ``F = H // 2 + 1``.
        """
        if self.hrr_dim == 0:
            raise ShapeError(f"mode {self.mode!r} has no HRR part, so no spectrum")
        if not self._cacheable():
            self._spec_cache = self._spec_key = None
            a, r, dim = self._inputs()
            return compose_spectrum(self.program, a, r, dim=dim)
        key = self._key()
        if self._spec_cache is None or self._spec_key != key:
            a, r, dim = self._inputs()
            self._spec_cache, self._spec_key = compose_spectrum(self.program, a, r, dim=dim), key
        return self._spec_cache

    def rows_from_spectrum(self, ids: Tensor, spectrum: Tensor) -> Tensor:
        """Embedding rows for concept ids, their HRR part taken from ``spectrum`` (:meth:`spectrum`) by an
        ``irfft`` of those rows only: the input side of a step whose tied decoder reads the same spectrum
        (one composition serves both; equal to :meth:`rows` up to float rounding).

        Shapes:
            - ids: ``(U,)``; spectrum: ``(N, 2F)``
            - output: ``(U, D)``
        """
        self._check_ids(ids)
        sel = spectrum.index_select(0, ids)  # (U, 2F)
        z = torch.view_as_complex(sel.reshape(sel.shape[0], -1, 2).contiguous())  # (U, F)
        return self.spec.finish(self, torch.fft.irfft(z, n=self.hrr_dim, dim=1), ids)  # (U, H) -> (U, D)

    def decode(self, h: Tensor, spectrum: Tensor | None = None) -> Tensor:
        """Scores ``h @ E.T`` of every concept against the embedding matrix ``E`` (a tied decoder), with
        the HRR part computed in the spectral domain: ``<h, C[i]> = Σ_k (w_k / H) Re(conj(rfft(h)_k)
        C_hat[i, k])`` (Parseval; :func:`~hrr_kernel.composer.bin_weights`), so neither ``C`` nor the
        ``irfft`` of the whole matrix (nor, backward, the ``rfft`` of its gradient) is formed. Equal to
        ``h @ self.matrix().T`` up to float rounding, in every mode (``normalize`` divides by each row's
        norm, computed from its spectrum). ``spectrum``: :meth:`spectrum` when the caller already has it.

        Shapes:
            - h: ``(M, D)``
            - output: ``(M, N)``
        """
        if h.dim() != 2 or h.shape[1] != self.dim:
            raise ShapeError(f"h must be (M, {self.dim}), got shape {tuple(h.shape)}")
        if not self.spec.composes:  # the whole row lies beside a composition: the table, or built rows
            return self.spec.decode_extra(self, h)
        hdim = self.hrr_dim
        spec = self.spectrum() if spectrum is None else spectrum  # (N, 2F)
        with torch.autocast(h.device.type, enabled=False):
            w = bin_weights(hdim, spec.dtype, spec.device) / hdim  # (F,)
            hc = h[:, :hdim] if self.projection is None else h @ self.projection.t().to(h.dtype)  # (M, H)
            hh = torch.fft.rfft(hc.to(spec.dtype), dim=1) * w  # (M, F)
            hw = torch.view_as_real(hh).reshape(h.shape[0], -1)  # (M, 2F)
        out = hw.to(h.dtype) @ spec.to(h.dtype).t()  # (M, N)
        if self.normalize:
            power = spec.reshape(spec.shape[0], -1, 2).square().sum(-1)  # (N, F)
            norm = (power * w).sum(-1).sqrt()  # (N,)
            out = out / norm.clamp_min(1e-12).to(out.dtype)
        extra = self.spec.decode_extra(self, h)  # (M, N): the parts beside the composition
        return out if extra is None else out + extra

    def rows(self, ids: Tensor) -> Tensor:
        """Embedding rows for concept ids, composing only the rows needed.

        Shapes:
            - ids: ``(N,)``
            - output: ``(N, D)``
        """
        return self._build(ids)

    def forward(self, ids: Tensor) -> Tensor:
        """Look up embeddings.

        Shapes:
            - ids: ``(*)`` integer concept ids, e.g. ``(B, T)``
            - output: ``(*, D)``
        """
        if ids.dtype.is_floating_point or ids.is_complex():
            raise ShapeError(f"ids must be an integer tensor, got dtype {ids.dtype}")
        flat = ids.reshape(-1).to(torch.int64)  # (B*T,)
        self._check_ids(flat)
        if self._cacheable() or self.spec.row_is_table:
            out = F.embedding(flat, self.matrix())  # (B*T, D)
        else:
            uniq, inv = unique_ids(flat, self._id_marks)  # (U,), (B*T,)
            if uniq.numel() > FULL_MATRIX_FRACTION * self.program.n_concepts:
                out = F.embedding(flat, self._build(None))
            else:
                # the distinct rows built once, then gathered (hrr_kernel.lookup: natively on the CPU, whose
                # backward sums each row's positions on one thread; else index_select)
                out = gather_rows(self._build(uniq), inv)  # (B*T, D)
        return out.view(*ids.shape, self.dim)  # (*, D)
