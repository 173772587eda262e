"""Rows from a code's ancestors, the GRAM-style rivals of the composition: :class:`AncestryMode`.

GRAM (Choi et al., KDD 2017) gives code ``i`` the vector ``g_i = Σ_{j ∈ {i} ∪ anc(i)} α_ij e_j`` with
``α_i· = softmax_j(u · tanh(W [e_i ; e_j] + b))``: ``e_i`` a free vector of the code itself, ``e_j`` free
vectors of its ancestors. Two modes of :data:`hrr_kernel.modes.MODES` are built here:

- ``gram``: that attention; ``W`` is ``(K, 2D)``, ``b`` and ``u`` are ``(K,)``, with the hidden width
  ``K = min(D, attention_dim)`` (``attention_dim`` 128: GRAM's attention MLP has about 100-128 units);
  ``W`` and ``u`` start N(0, 0.02), ``b`` at zero, so the weights start near the plain mean.
- ``ancestors``: the plain mean of the same vectors, ``α_ij = 1 / (1 + |anc(i)|)``.

**Ancestors** (:func:`ancestor_edges`): the atoms of the token's edges whose relation kind is one of
:data:`ANCESTOR_RELATIONS`: ``identity`` (the SNOMED concepts it maps to, where the program binds them),
``is_a`` (those concepts' direct parents) and ``icd_hierarchy`` (its ICD chapter, block, category, ...
nodes), each atom once; ``special`` atoms never are one. Words (``description``) and attribute fillers are
not ancestors. So a special token (one ``identity`` edge, to its own special atom) has only itself, and so
has a token without such edges: its row is its own vector.

**Free vectors**: ``e_i`` is the token's row of the embedding's ``table`` ``(N, D)``, ``e_j`` the ancestor's
row of its ``atoms`` ``(A, D)``. Carrying a model to a new program therefore matches ancestors by atom key
(new ones by the carry's ``init`` rule) and own vectors by token, and settling resets the ancestors no
trained token reaches (:meth:`AncestryMode.row_edges`), as for the composing modes.

**Computation** (:meth:`AncestryMode.build`): the ancestor lists are held as CSR (``ancestor_crow``
``(N+1,)``, ``ancestor_atom`` ``(E_a,)``, with the rest of the full build's :class:`Edges`: non-persistent
buffers of the embedding, computed once); building ``U`` rows gathers their ``E_u`` ancestor edges. The
MLP's linear part is split, ``W [x; y] = W_own x + W_anc y``, so each vector is projected once (``(U, K)``
and ``(A_u, K)``), not once per pair; a pair's score is then ``u · tanh(P[i] + Q[j] + b)``, the hidden
layer ``(E_u, K)`` formed only inside the forward and the backward of :class:`_PairScores`. The softmax
over each row's own score and its edges' runs on segments (scatter max, ``index_add``), and the weighted
sum ``Σ α_ij a_j`` is the sparse ``(U, A)`` weight matrix times the atoms, with an explicit backward
(:class:`_AncestorSum`), so no ``(E_u, D)`` tensor is ever formed. Everything runs outside autocast, in the
parameters' dtype. ``normalize`` does not apply (there is no composed row to scale).

Dimension legend: N concepts, U rows built, A atoms (A_u those the rows need), E edges of the program,
E_a ancestor edges (E_u those of the U rows), D dimension, K attention hidden width, M decoded states.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .modes import EmbeddingMode
from .program import Program

__all__ = ["AncestryMode", "GramAttention", "ANCESTOR_RELATIONS", "ancestor_edges", "ancestor_lists"]

ANCESTOR_RELATIONS = ("identity", "is_a", "icd_hierarchy")  # relation kinds whose atoms are ancestors
NOT_ANCESTORS = ("special",)  # atom kinds that never are


def ancestor_edges(program: Program) -> Tensor:
    """Which edges of the program name an ancestor of their token. Shapes: output ``(E,)`` bool."""
    dev = program.edge_relation.device
    rel = torch.tensor([k in ANCESTOR_RELATIONS for k in program.relation_kinds], dtype=torch.bool)
    kinds = program.atom_kinds or ["concept"] * program.n_atoms
    atom = torch.tensor([k not in NOT_ANCESTORS for k in kinds], dtype=torch.bool)
    if not program.n_edges:
        return torch.zeros(0, dtype=torch.bool, device=dev)
    return rel.to(dev)[program.edge_relation] & atom.to(dev)[program.edge_atom]


def ancestor_lists(program: Program) -> tuple[Tensor, Tensor]:
    """Each token's ancestor atoms as CSR, each (token, atom) once, atoms ascending within a token.

    Shapes:
        - output: ptr ``(N + 1,)`` (token ``i``'s ancestors are ``atom[ptr[i]:ptr[i + 1]]``), atom ``(E_a,)``
    """
    keep = ancestor_edges(program)
    n_atoms = max(program.n_atoms, 1)
    key = torch.unique(program.edge_concept[keep] * n_atoms + program.edge_atom[keep])  # sorted
    token, atom = key // n_atoms, key % n_atoms
    ptr = torch.zeros(program.n_concepts + 1, dtype=torch.int64, device=key.device)
    ptr[1:] = torch.cumsum(torch.bincount(token, minlength=program.n_concepts), 0)
    return ptr, atom


def _csr(crow: Tensor, col: Tensor, val: Tensor, size: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta" / invariant-check notices
        return torch.sparse_csr_tensor(crow, col, val, size, check_invariants=False)


def _crow(counts: Tensor) -> Tensor:
    """CSR row pointers from the entries per row. Shapes: ``(n,)`` -> ``(n + 1,)``."""
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


class Edges(NamedTuple):
    """The ancestor edges of the rows being built, sorted by row, then atom, with the index tensors of their
    sparse products: the ``(U, A)`` row-major matrix and its transpose over the distinct atoms."""

    seg: Tensor  # (E_u,) the row (0..U-1) of each edge
    atom: Tensor  # (E_u,) its atom
    counts: Tensor  # (U,) ancestors per row
    crow: Tensor  # (U + 1,) row pointers
    needed: Tensor  # (A_u,) the distinct atoms of the edges, ascending
    inv: Tensor  # (E_u,) each edge's atom's position in needed
    order: Tensor  # (E_u,) the edges by atom, then row (the transpose's entry order)
    crow_t: Tensor  # (A_u + 1,) the transpose's row pointers


def _edges(seg: Tensor, atom: Tensor, counts: Tensor) -> Edges:
    needed, inv, per_atom = torch.unique(atom, return_inverse=True, return_counts=True)
    order = torch.argsort(inv, stable=True)
    return Edges(seg, atom, counts, _crow(counts), needed, inv, order, _crow(per_atom))


class _AncestorSum(torch.autograd.Function):
    """``out[seg[e]] += w[e] * atoms[atom[e]]``: the sparse ``(U, A)`` weight matrix times the atoms, with its
    exact backward: the atoms' gradient by the transposed matrix (over the distinct atoms), the weights' by
    the sampled product ``g[seg[e]] · atoms[atom[e]]``; no ``(E_u, D)`` tensor is formed.

    Shapes: w ``(E_u,)``; atoms ``(A, D)``; the index tensors: :class:`Edges` -> ``(U, D)``.
    """

    @staticmethod
    def forward(ctx, w, atoms, seg, atom, crow, needed, order, crow_t) -> Tensor:
        ctx.save_for_backward(w, atoms, seg, atom, crow, needed, order, crow_t)
        if not w.numel():
            return atoms.new_zeros(crow.numel() - 1, atoms.shape[1])
        return _csr(crow, atom, w, (crow.numel() - 1, atoms.shape[0])) @ atoms

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        w, atoms, seg, atom, crow, needed, order, crow_t = ctx.saved_tensors
        g = g.to(atoms.dtype).contiguous()
        gw = torch.zeros_like(w) if ctx.needs_input_grad[0] else None
        ga = torch.zeros_like(atoms) if ctx.needs_input_grad[1] else None
        if w.numel() and gw is not None:
            pattern = _csr(crow, atom, torch.zeros_like(w), (g.shape[0], atoms.shape[0]))
            gw = torch.sparse.sampled_addmm(pattern, g, atoms.t(), beta=0.0).values()  # (E_u,)
        if w.numel() and ga is not None:
            transposed = _csr(crow_t, seg[order], w[order], (needed.numel(), g.shape[0]))  # (A_u, U)
            ga.index_copy_(0, needed, transposed @ g)
        return gw, ga, None, None, None, None, None, None


class _PairScores(torch.autograd.Function):
    """``s[e] = u · tanh(p[seg[e]] + q[inv[e]])`` for every ancestor edge, with its exact backward. The
    ``(E_u, K)`` hidden layer is formed in the forward and again in the backward, never kept between them;
    the gradients of ``p`` and ``q`` are sums over edges, done as sparse products.

    Shapes: p ``(U, K)``, q ``(A_u, K)``, u ``(K,)``; the index tensors: :class:`Edges` -> ``(E_u,)``.
    """

    @staticmethod
    def forward(ctx, p, q, u, seg, inv, crow, order, crow_t) -> Tensor:
        ctx.save_for_backward(p, q, u, seg, inv, crow, order, crow_t)
        return torch.tanh(p.index_select(0, seg) + q.index_select(0, inv)) @ u

    @staticmethod
    @once_differentiable
    def backward(ctx, gs: Tensor):
        p, q, u, seg, inv, crow, order, crow_t = ctx.saved_tensors
        n = seg.numel()
        if not n:
            return torch.zeros_like(p), torch.zeros_like(q), torch.zeros_like(u), *(None,) * 5
        t = torch.tanh(p.index_select(0, seg) + q.index_select(0, inv))  # (E_u, K)
        gs = gs.to(t.dtype)
        gu = t.t() @ gs  # (K,)
        dh = t.square_().neg_().add_(1.0).mul_(gs.unsqueeze(1)).mul_(u)  # (E_u, K): tanh' times ds/dt
        ones = dh.new_ones(n)
        gp = _csr(crow, torch.arange(n, device=seg.device), ones, (p.shape[0], n)) @ dh  # sum per row
        gq = _csr(crow_t, order, ones, (q.shape[0], n)) @ dh  # sum per atom
        return gp, gq, gu, *(None,) * 5


class GramAttention(nn.Module):
    """GRAM's attention MLP, ``score(x, y) = u · tanh(W [x; y] + b)``: ``weight`` ``W`` ``(K, 2D)``,
    ``bias`` ``b`` ``(K,)``, ``score`` ``u`` ``(K,)``."""

    def __init__(self, dim: int, hidden: int, std: float, dtype: torch.dtype, device) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, 2 * dim, dtype=dtype, device=device) * std)
        self.bias = nn.Parameter(torch.zeros(hidden, dtype=dtype, device=device))
        self.score = nn.Parameter(torch.randn(hidden, dtype=dtype, device=device) * std)

    def weights(self, own: Tensor, atoms: Tensor, edges: Edges) -> tuple[Tensor, Tensor]:
        """The softmax over each row's own vector and its ancestors: (own weights, edge weights).

        Shapes: own ``(U, D)``; atoms ``(A, D)`` -> ``(U,)``, ``(E_u,)``.
        """
        d, k = own.shape[1], self.weight.shape[0]
        w_own, w_anc = self.weight[:, :d], self.weight[:, d:]  # (K, D) each
        pr = own @ torch.cat([w_own, w_anc]).t()  # (U, 2K): W_own e_i and W_anc e_i at once
        p = pr[:, :k] + self.bias  # (U, K)
        q = F.embedding(edges.needed, atoms) @ w_anc.t()  # (A_u, K); embedding's backward beats indexing's
        seg = edges.seg
        s_edge = _PairScores.apply(p, q, self.score, seg, edges.inv, edges.crow, edges.order, edges.crow_t)
        s_own = torch.tanh(p + pr[:, k:]) @ self.score  # (U,): the pair (e_i, e_i)
        top = s_own.detach().scatter_reduce(0, seg, s_edge.detach(), "amax")  # (U,), a constant shift
        x_own, x_edge = torch.exp(s_own - top), torch.exp(s_edge - top[seg])
        z = x_own.index_add(0, seg, x_edge)  # (U,)
        return x_own / z, x_edge / z[seg]


@dataclass(frozen=True)
class AncestryMode(EmbeddingMode):
    """A mode whose row mixes the token's own free vector (``table``) with its ancestors' (``atoms``):
    GRAM's attention (``attention``), or the plain mean."""

    ancestry: bool = True  # (EmbeddingMode's field) what this class builds
    attention: bool = True  # GRAM's attention weights; False: the plain mean
    attention_dim: int = 128  # the attention MLP's hidden width cap: K = min(D, attention_dim)

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.name
        if not self.ancestry:
            raise ValueError(f"mode {name!r}: an AncestryMode builds rows from ancestors (ancestry True)")
        if not isinstance(self.attention_dim, int) or self.attention_dim < 1:
            raise ValueError(f"mode {name!r}: attention_dim must be an int >= 1, got {self.attention_dim!r}")

    def init_parameters(self, emb, program, dim: int, dtype: torch.dtype) -> None:
        """The ancestor lists and the full build's :class:`Edges` (buffers ``ancestor_*``, not saved: they
        are the program's), and GRAM's attention MLP (``attention``)."""
        from .embedding import INIT_STD  # the embedding imports the modes, so not at the top

        ptr, atom = ancestor_lists(program)
        counts = ptr[1:] - ptr[:-1]  # (N,)
        seg = torch.repeat_interleave(torch.arange(counts.numel(), device=ptr.device), counts)
        for name, value in _edges(seg, atom, counts)._asdict().items():
            emb.register_buffer(f"ancestor_{name}", value, persistent=False)
        if self.attention:
            hidden = min(dim, self.attention_dim)
            emb.attention = GramAttention(dim, hidden, INIT_STD, dtype, program.device)

    def row_edges(self, program) -> Tensor:
        """Only the ancestor edges bring their atom into a row."""
        return ancestor_edges(program)

    def edges(self, emb, rows: Tensor | None) -> Edges:
        """The ancestor edges of ``rows`` (all rows when None: computed once, at construction)."""
        if rows is None:
            return Edges(*(getattr(emb, f"ancestor_{name}") for name in Edges._fields))
        ptr, atoms = emb.ancestor_crow, emb.ancestor_atom
        rows = rows.to(device=ptr.device, dtype=torch.int64)
        start, counts = ptr[rows], ptr[rows + 1] - ptr[rows]  # (U,)
        seg = torch.repeat_interleave(torch.arange(rows.numel(), device=ptr.device), counts)  # (E_u,)
        first = torch.cumsum(counts, 0) - counts  # (U,): each row's first edge among the E_u
        atom = atoms[start[seg] + torch.arange(seg.numel(), device=ptr.device) - first[seg]]
        return _edges(seg, atom, counts)

    def build(self, emb, rows: Tensor | None) -> Tensor:
        """``g_i = α_ii e_i + Σ_j α_ij a_j`` (all rows when ``rows`` is None). Shapes: rows ``(U,)`` ->
        ``(U, D)``."""
        own = emb.table if rows is None else F.embedding(rows, emb.table)  # (U, D)
        e = self.edges(emb, rows)
        with torch.autocast(own.device.type, enabled=False):
            if self.attention:
                w_own, w_edge = emb.attention.weights(own, emb.atoms, e)
            else:
                w_own = 1.0 / (1 + e.counts).to(own.dtype)  # (U,)
                w_edge = w_own[e.seg]  # (E_u,)
            mixed = _AncestorSum.apply(w_edge, emb.atoms, e.seg, e.atom, e.crow, e.needed, e.order, e.crow_t)
            return w_own.unsqueeze(1) * own + mixed

    def decode_extra(self, emb, h: Tensor) -> Tensor:
        """The whole tied score: the row is built, nothing is composed. Shapes: h ``(M, D)`` -> ``(M, N)``."""
        return h @ emb.matrix().to(h.dtype).t()
