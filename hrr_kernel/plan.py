"""Composition plans: the sparse structure that turns atom and relation spectra into concept rows.

The concept matrix is ``C[i] = Σ_{(j,k) ∈ G_i} r_j ⊛ a_k``. In the half-spectrum, with ``u`` running
over the distinct (relation, atom) pairs of the program::

    B[u]  = A_hat[atom(u)] * R_hat[relation(u)]        # (P, F), one complex product per pair
    C_hat = M @ B                                       # M: (U, P) sparse, entries = edge counts
    C     = irfft(C_hat, n=D)[row_map]                  # U distinct rows, expanded to the N requested

Concepts with identical edge multisets share one computed row (``row_map``). The backward pass uses
the transposed structures ``Mᵀ`` (pairs × rows) and ``Q`` (atoms × pairs, ones).

Dimension legend: N requested rows (concepts), U distinct computed rows, P (relation, atom) pairs,
A atoms, R relations, E edges, F = D // 2 + 1 frequencies.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from . import native
from .errors import ShapeError

__all__ = ["BasePlan", "ComposePlan", "Workspace", "build_base_plan", "plan_rows"]


def _csr(crow: Tensor, col: Tensor, val: Tensor, size: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta" / invariant-check notices
        return torch.sparse_csr_tensor(crow, col, val, size, check_invariants=False)


def _crow(row_of_entry: Tensor, n_rows: int) -> Tensor:
    counts = torch.bincount(row_of_entry, minlength=n_rows)  # (n_rows,)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # (n_rows + 1,)


@dataclass(eq=False)
class BasePlan:
    """The program's pair table and its (distinct rows × pairs) count matrix, as index tensors."""

    n_concepts: int
    n_atoms: int
    n_relations: int
    pair_atom: Tensor  # (P,) int64, pairs sorted by (relation, atom)
    pair_relation: Tensor  # (P,) int64
    row_crow: Tensor  # (U + 1,) int64
    row_col: Tensor  # (nnz,) int64, pair ids
    row_val: Tensor  # (nnz,) float64, edge counts
    row_map: Tensor  # (N,) int64, concept -> distinct row
    identity_rows: bool  # row_map == arange(N)
    _marks: native.Marks | None = field(default=None, repr=False)  # the native plan builder's scratch

    @property
    def n_pairs(self) -> int:
        return int(self.pair_atom.numel())

    def marks(self) -> native.Marks:
        """The native plan builder's mark arrays for this plan (made on first use)."""
        if self._marks is None:
            self._marks = native.Marks(self.n_unique_rows, self.n_pairs, self.n_atoms)
        return self._marks

    @property
    def n_unique_rows(self) -> int:
        return int(self.row_crow.numel()) - 1

    @property
    def device(self) -> torch.device:
        return self.pair_atom.device

    def to(self, device: torch.device) -> BasePlan:
        return BasePlan(
            n_concepts=self.n_concepts,
            n_atoms=self.n_atoms,
            n_relations=self.n_relations,
            pair_atom=self.pair_atom.to(device),
            pair_relation=self.pair_relation.to(device),
            row_crow=self.row_crow.to(device),
            row_col=self.row_col.to(device),
            row_val=self.row_val.to(device),
            row_map=self.row_map.to(device),
            identity_rows=self.identity_rows,
        )


def _dedup_rows(
    crow: np.ndarray, col: np.ndarray, val: np.ndarray, n_concepts: int
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Merge concepts whose rows of the count matrix are identical (same pairs, same counts).

    Takes the CSR rows of all N concepts; returns ``row_map (N,)`` (concept -> distinct row, numbered in
    order of first appearance) and the CSR ``(crow, col, val)`` of the U distinct rows.
    """
    first: dict[bytes, int] = {}
    row_map = np.empty(n_concepts, dtype=np.int64)
    cols_b, vals_b = col.tobytes(), val.astype(np.int64).tobytes()
    for i in range(n_concepts):
        s, e = crow[i] * 8, crow[i + 1] * 8  # byte offsets: 8 bytes per int64 entry
        row_map[i] = first.setdefault(cols_b[s:e] + b"|" + vals_b[s:e], len(first))
    keep = np.full(len(first), -1, dtype=np.int64)
    keep[row_map[::-1]] = np.arange(n_concepts - 1, -1, -1)  # first concept of each distinct row
    lens = np.diff(crow)[keep]
    crow_u = np.concatenate(([0], np.cumsum(lens)))
    take = np.repeat(crow[keep] - crow_u[:-1], lens) + np.arange(crow_u[-1])
    return row_map, (crow_u, col[take], val[take])


def build_base_plan(
    *,
    n_concepts: int,
    n_atoms: int,
    n_relations: int,
    edge_concept: np.ndarray,
    edge_relation: np.ndarray,
    edge_atom: np.ndarray,
    dedup_rows: bool = True,
) -> BasePlan:
    """Build the pair table and count matrix from an edge list (any order; NumPy, on the host)."""
    ec = np.asarray(edge_concept, dtype=np.int64)
    er = np.asarray(edge_relation, dtype=np.int64)
    ea = np.asarray(edge_atom, dtype=np.int64)
    pair_keys, edge_pair = np.unique(er * n_atoms + ea, return_inverse=True)  # sorted by (relation, atom)
    n_pairs = pair_keys.size
    entry_keys, counts = np.unique(ec * max(n_pairs, 1) + edge_pair.reshape(-1), return_counts=True)
    entry_row = entry_keys // max(n_pairs, 1)
    entry_col = entry_keys % max(n_pairs, 1)
    crow = np.concatenate(([0], np.cumsum(np.bincount(entry_row, minlength=n_concepts))))
    if dedup_rows:
        row_map, (crow_u, col_u, val_u) = _dedup_rows(crow, entry_col, counts, n_concepts)
    else:
        row_map = np.arange(n_concepts, dtype=np.int64)
        crow_u, col_u, val_u = crow, entry_col, counts
    return BasePlan(
        n_concepts=n_concepts,
        n_atoms=n_atoms,
        n_relations=n_relations,
        pair_atom=torch.from_numpy(pair_keys % n_atoms if n_atoms else pair_keys),
        pair_relation=torch.from_numpy(pair_keys // n_atoms if n_atoms else pair_keys),
        row_crow=torch.from_numpy(np.ascontiguousarray(crow_u, dtype=np.int64)),
        row_col=torch.from_numpy(np.ascontiguousarray(col_u, dtype=np.int64)),
        row_val=torch.from_numpy(np.ascontiguousarray(val_u, dtype=np.float64)),
        row_map=torch.from_numpy(row_map),
        identity_rows=bool(np.array_equal(row_map, np.arange(n_concepts))),
    )


@dataclass(eq=False)
class ComposePlan:
    """Everything one composition needs, on one device; CSR matrices are cached per dtype.

    ``atoms_used`` is None when the plan addresses every atom (``pair_atom`` indexes the atom table);
    otherwise ``pair_atom`` indexes ``atoms_used`` (sorted, distinct). ``row_map`` is None when computed
    rows are the output rows in order. ``native``: built by :mod:`hrr_kernel.native` (rows and pairs
    numbered in order of first appearance, columns unsorted within a row), and composed by its kernels.
    """

    n_out: int  # N
    n_rows: int  # U
    n_atoms: int  # A (whole program)
    n_relations: int  # R
    atoms_used: Tensor | None  # (A',) int64
    pair_atom: Tensor  # (P,) int64
    pair_relation: Tensor  # (P,) int64 (non-decreasing unless native)
    row_map: Tensor | None  # (N,) int64 into the U computed rows
    m_index: tuple[Tensor, Tensor, Tensor]  # crow (U+1,), col (nnz,), val (nnz,) float64
    mt_index: tuple[Tensor, Tensor, Tensor]  # pairs × rows
    q_index: tuple[Tensor, Tensor]  # crow (A'+1,), col (P,) : atoms × pairs, ones
    native: bool = False
    _csr_cache: dict = field(default_factory=dict)

    @property
    def n_pairs(self) -> int:
        return int(self.pair_atom.numel())

    @property
    def n_atoms_used(self) -> int:
        return self.n_atoms if self.atoms_used is None else int(self.atoms_used.numel())

    def matrices(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """(M, Mᵀ, Q) as CSR tensors with real ``dtype`` values."""
        hit = self._csr_cache.get(dtype)
        if hit is None:
            crow, col, val = self.m_index
            m = _csr(crow, col, val.to(dtype), (self.n_rows, self.n_pairs))
            crow, col, val = self.mt_index
            mt = _csr(crow, col, val.to(dtype), (self.n_pairs, self.n_rows))
            crow, col = self.q_index
            q = _csr(
                crow,
                col,
                torch.ones(col.numel(), dtype=dtype, device=col.device),
                (self.n_atoms_used, self.n_pairs),
            )
            hit = self._csr_cache[dtype] = (m, mt, q)
        return hit


def _checked_rows(base: BasePlan, rows: Tensor) -> Tensor:
    """``rows`` as int64 on the plan's device; raises unless a 1-D integer tensor of valid concept ids."""
    if not isinstance(rows, Tensor) or rows.dim() != 1 or rows.dtype.is_floating_point or rows.is_complex():
        raise ShapeError(f"rows must be a 1-D integer tensor, got {getattr(rows, 'shape', rows)!r}")
    rows = rows.to(device=base.device, dtype=torch.int64)
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= base.n_concepts):
        raise ShapeError(
            f"rows must lie in [0, {base.n_concepts - 1}] (n_concepts={base.n_concepts}), got values in "
            f"[{int(rows.min())}, {int(rows.max())}]"
        )
    return rows


def _select_rows(base: BasePlan, rows: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor]]:
    """The distinct computed rows the requested concepts need, and their slice of the count matrix.

    Returns ``(uniq_rows (U,), row_map (N,), (crow (U+1,), col (nnz,), val (nnz,)))``; ``col`` still
    indexes the program's pair table.
    """
    uniq_rows, row_map = torch.unique(base.row_map[rows], return_inverse=True)  # (U,), (N,)
    starts = base.row_crow[uniq_rows]  # (U,)
    lens = base.row_crow[uniq_rows + 1] - starts  # (U,)
    crow = torch.cat([lens.new_zeros(1), lens.cumsum(0)])  # (U + 1,)
    total = int(crow[-1])
    offs = torch.repeat_interleave(starts - crow[:-1], lens, output_size=total)  # (nnz,)
    take = offs + torch.arange(total, device=base.device)  # (nnz,)
    return uniq_rows, row_map, (crow, base.row_col[take], base.row_val[take])


def plan_rows(base: BasePlan, rows: Tensor | None) -> ComposePlan:
    """Plan for the given concept ids (any order, repeats allowed; ``None`` means all concepts).

    Shapes:
        - rows: ``(N,)`` integer concept ids in ``[0, n_concepts)``, or None
    """
    dev = base.device
    if rows is not None and dev.type == "cpu" and native.available():
        return _plan_rows_native(base, _checked_rows(base, rows))
    # --- the computed rows (U) and their entries of the count matrix M
    if rows is None:
        uniq_rows = None
        row_map = None if base.identity_rows else base.row_map
        crow, col, val = base.row_crow, base.row_col, base.row_val
        n_out = base.n_concepts
    else:
        rows = _checked_rows(base, rows)
        n_out = rows.numel()
        uniq_rows, row_map, (crow, col, val) = _select_rows(base, rows)
    n_rows = crow.numel() - 1

    # --- the pairs (P) those rows use, renumbered when a subset, and the atoms (A') they read
    if uniq_rows is None:
        pairs_pa, pairs_pr = base.pair_atom, base.pair_relation
        atoms_used, pair_atom = None, base.pair_atom
        n_atoms_used = base.n_atoms
    else:
        pairs_used, col = torch.unique(col, return_inverse=True)  # (P',), (nnz,)
        pairs_pa, pairs_pr = base.pair_atom[pairs_used], base.pair_relation[pairs_used]
        atoms_used, pair_atom = torch.unique(pairs_pa, return_inverse=True)  # (A',), (P',)
        n_atoms_used = atoms_used.numel()
    n_pairs = pairs_pa.numel()

    # --- transposed structures for the backward pass: Mᵀ (pairs × rows) and Q (atoms × pairs)
    row_of_entry = torch.repeat_interleave(
        torch.arange(n_rows, device=dev), crow.diff(), output_size=col.numel()
    )
    order = torch.argsort(col, stable=True)  # (nnz,) entries by pair
    mt_index = (_crow(col, n_pairs), row_of_entry[order], val[order])
    q_order = torch.argsort(pair_atom, stable=True)  # (P,) pairs by atom
    q_index = (_crow(pair_atom, n_atoms_used), q_order)
    return ComposePlan(
        n_out=n_out,
        n_rows=n_rows,
        n_atoms=base.n_atoms,
        n_relations=base.n_relations,
        atoms_used=atoms_used,
        pair_atom=pair_atom,
        pair_relation=pairs_pr,
        row_map=row_map,
        m_index=(crow, col, val),
        mt_index=mt_index,
        q_index=q_index,
    )


def _plan_rows_native(base: BasePlan, rows: Tensor) -> ComposePlan:
    """:func:`plan_rows` of selected rows by the native builder: time linear in the rows' entries."""
    marks = base.marks()
    rows = rows.contiguous()
    uniq, row_map, nnz = native.plan_select(rows, base.row_map, base.row_crow, marks)
    parts = native.plan_build(
        uniq, nnz, base.row_crow, base.row_col, base.row_val, base.pair_atom, base.pair_relation, marks
    )
    # distinct requested rows with distinct edge sets: the computed rows are the output rows, in order
    identity = uniq.numel() == rows.numel()
    return ComposePlan(
        n_out=rows.numel(),
        n_rows=uniq.numel(),
        n_atoms=base.n_atoms,
        n_relations=base.n_relations,
        row_map=None if identity else row_map,
        native=True,
        **parts,
    )


class Workspace:
    """A pool of reusable scratch buffers, one per (name, dtype, device).

    Fresh large allocations are expensive on CPU (first-touch page faults); reusing buffers across
    steps avoids them. A buffer taken and not yet given back is never handed out twice: a second
    taker gets a fresh tensor. Not thread-safe; use one program object per thread.
    """

    def __init__(self) -> None:
        self._free: dict[tuple, Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
        key = (name, dtype, torch.device(device))
        numel = int(np.prod(shape)) if shape else 1
        buf = self._free.pop(key, None)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=dtype, device=device)
        return buf[:numel].view(shape)

    def give(self, name: str, tensor: Tensor) -> None:
        base = tensor._base if tensor._base is not None else tensor
        key = (name, tensor.dtype, tensor.device)
        old = self._free.get(key)
        if old is None or old.numel() < base.numel():
            self._free[key] = base.reshape(-1)

    def clear(self) -> None:
        """Drop every pooled buffer (frees the memory; later steps allocate afresh)."""
        self._free.clear()

    @property
    def nbytes(self) -> int:
        """Bytes held by the pooled buffers."""
        return sum(t.numel() * t.element_size() for t in self._free.values())
