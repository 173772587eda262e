"""Take HRR code vectors apart again: unbind relations, clean up against the atoms, compose queries.

A code vector composed from a program is ``C = Σ_{(r, a) ∈ G} r ⊛ a``. Unbinding a relation ``r`` gives
``C ⊛ r⁻¹ ≈ Σ_{a: (r, a) ∈ G} a + noise`` (the other edges' crosstalk), so the atoms bound to ``r`` are the
ones nearest to it by cosine. This module holds the pure tensor side of that:

- :func:`unbind_relations`: every vector unbound with every relation, ``(N, R, H)``;
  :func:`unbind_pairs`: one relation per vector, ``(P, H)``;
- :func:`explain_vector`: for each of some relations, the top-k atoms of one vector after unbinding;
- :func:`unbinding_recall`: how many of a program's (relation, atom) edges of some rows come back in the
  top-k (overall, per relation kind, per relation), see :class:`UnbindingRecall`;
- :func:`compose_query`: ``Σ r ⊛ a`` over given (relation, atom) pairs, the row the composer would build
  for a concept with exactly those edges;
- :func:`hrr_vectors`: the trained code vectors of an :class:`~hrr_kernel.embedding.HRREmbedding`, its HRR
  part (``base``, ``freq``, ``cat``: the composition ``C``; ``add``: ``C + W``).

``exact=False`` unbinds with Plate's approximate inverse (circular correlation); ``exact=True`` first
projects the relation to unit spectral magnitude and uses its exact inverse (see
:func:`hrr_kernel.ops.unbind`).

Dimension legend: N vectors (rows), R relations, A atoms, K relations asked, k top-k, P (row, relation)
pairs, E edges, H HRR dimension, F = H // 2 + 1 frequencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from .composer import compose
from .errors import ShapeError
from .ops import cleanup, unbind

__all__ = [
    "unbind_relations",
    "unbind_pairs",
    "explain_vector",
    "relation_range",
    "unbinding_recall",
    "UnbindingRecall",
    "compose_query",
    "hrr_vectors",
]

# bytes of the (pairs, atoms) similarity block scored at once by unbinding_recall
_RECALL_CHUNK_BYTES = 64 << 20


def _check_matrix(name: str, x: Tensor, width: int | None = None) -> None:
    if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ShapeError(
            f"{name} must be a real 2-D floating tensor, got {type(x).__name__} of shape "
            f"{tuple(getattr(x, 'shape', ()))}"
        )
    if width is not None and x.shape[1] != width:
        raise ShapeError(f"{name} must have H={width} columns (the vectors' width), got {x.shape[1]}")


def _check_ids(name: str, ids: Tensor, n: int, what: str) -> Tensor:
    """``ids`` as a 1-D int64 tensor whose values lie in ``[0, n)``."""
    ids = torch.as_tensor(ids)
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.is_complex():
        raise ShapeError(
            f"{name} must be a 1-D integer tensor, got dtype {ids.dtype}, shape {tuple(ids.shape)}"
        )
    ids = ids.to(torch.int64)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
        raise ShapeError(
            f"{name} must lie in [0, {n - 1}] ({n} {what}), got [{int(ids.min())}, {int(ids.max())}]"
        )
    return ids


def unbind_relations(vectors: Tensor, relations: Tensor, *, exact: bool = False) -> Tensor:
    """Every vector unbound with every relation: ``out[i, j] = vectors[i] ⊛ relations[j]⁻¹``.

    Shapes:
        - vectors: ``(N, H)``; relations: ``(R, H)``
        - output: ``(N, R, H)``
    """
    _check_matrix("vectors", vectors)
    _check_matrix("relations", relations, vectors.shape[1])
    return unbind(vectors.unsqueeze(1), relations.unsqueeze(0), exact=exact)  # (N, R, H)


def unbind_pairs(vectors: Tensor, relations: Tensor, relation_ids: Tensor, *, exact: bool = False) -> Tensor:
    """Each vector unbound with its own relation: ``out[p] = vectors[p] ⊛ relations[relation_ids[p]]⁻¹``.

    Shapes:
        - vectors: ``(P, H)``; relations: ``(R, H)``; relation_ids: ``(P,)``
        - output: ``(P, H)``
    """
    _check_matrix("vectors", vectors)
    _check_matrix("relations", relations, vectors.shape[1])
    ids = _check_ids("relation_ids", relation_ids, relations.shape[0], "relations").to(vectors.device)
    if ids.numel() != vectors.shape[0]:
        raise ShapeError(f"relation_ids must have one id per vector ({vectors.shape[0]}), got {ids.numel()}")
    return unbind(vectors, relations.index_select(0, ids), exact=exact)  # (P, H)


def relation_range(program) -> Tensor:
    """Which atoms fill each relation somewhere in the program: the role's cleanup memory.

    A finding site is a body structure, never a description word; cleaning an unbound vector up against
    the atoms its relation takes anywhere in the program (instead of all atoms) is the usual role-specific
    item memory of HRR decoding, and uses no knowledge of the code being explained.

    Shapes:
        - output: ``(R, A)`` bool
    """
    out = torch.zeros(program.n_relations, program.n_atoms, dtype=torch.bool)
    out[program.edge_relation.cpu(), program.edge_atom.cpu()] = True
    return out


def explain_vector(
    vector: Tensor,
    atoms: Tensor,
    relations: Tensor,
    relation_ids: Sequence[int] | Tensor,
    *,
    k: int = 5,
    exact: bool = False,
    memory: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """For each relation asked, the ``k`` atoms nearest (cosine) to ``vector ⊛ relation⁻¹``.

    Row ``i`` of the output belongs to ``relation_ids[i]``; values are sorted descending (ties in
    ``torch.topk`` order). ``memory`` (``(R, A)`` bool, e.g. :func:`relation_range`) restricts each
    relation's cleanup to its atoms; ``k`` is then capped at the smallest memory asked (values of atoms
    outside it never appear).

    Shapes:
        - vector: ``(H,)``; atoms: ``(A, H)``; relations: ``(R, H)``; relation_ids: ``(K,)``
        - output: ``(values, indices)``, each ``(K, k)``; indices are atom ids
    """
    if not isinstance(vector, Tensor) or vector.dim() != 1:
        raise ShapeError(f"vector must be a 1-D tensor (H,), got shape {tuple(getattr(vector, 'shape', ()))}")
    _check_matrix("atoms", atoms, vector.shape[0])
    ids = torch.as_tensor(relation_ids, dtype=torch.int64)
    queries = unbind_pairs(vector.expand(ids.numel(), -1), relations, ids, exact=exact)  # (K, H)
    if memory is None:
        return cleanup(queries, atoms, k=k)
    allowed = _memory_rows(memory, relations.shape[0], atoms.shape[0], ids).to(vector.device)  # (K, A)
    k = min(k, int(allowed.sum(1).min()))
    if k < 1:
        raise ShapeError(
            "a relation asked has no atom in its memory (no edge of that relation in the program)"
        )
    sims = F.normalize(queries, dim=-1, eps=1e-12) @ F.normalize(atoms, dim=-1, eps=1e-12).T  # (K, A)
    return sims.masked_fill(~allowed, -float("inf")).topk(k, dim=-1)


def _memory_rows(memory: Tensor, n_relations: int, n_atoms: int, ids: Tensor) -> Tensor:
    """The ``(R, A)`` bool ``memory``'s rows for relation ids ``ids``: ``(K, A)``."""
    if memory.dtype != torch.bool or tuple(memory.shape) != (n_relations, n_atoms):
        raise ShapeError(
            f"memory must be a ({n_relations}, {n_atoms}) bool tensor, got {memory.dtype} "
            f"{tuple(memory.shape)}"
        )
    return memory.index_select(0, ids.to(memory.device))


def compose_query(atoms: Tensor, relations: Tensor, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """``Σ_{(j, a) ∈ pairs} relations[j] ⊛ atoms[a]``, computed as the composer does (the spectra summed,
    then one inverse FFT), so it equals ``compose(program, atoms, relations)`` on a concept whose edges are
    exactly ``pairs`` (to rounding). A repeated pair counts twice; no pairs give the zero vector.

    Shapes:
        - atoms: ``(A, H)``; relations: ``(R, H)``; pairs: ``P`` (relation id, atom id) tuples
        - output: ``(H,)``
    """
    _check_matrix("atoms", atoms)
    _check_matrix("relations", relations, atoms.shape[1])
    h = atoms.shape[1]
    if not len(pairs):
        return atoms.new_zeros(h)
    ids = torch.as_tensor([tuple(p) for p in pairs], dtype=torch.int64, device=atoms.device)  # (P, 2)
    if ids.dim() != 2 or ids.shape[1] != 2:
        raise ShapeError(f"pairs must be (relation id, atom id) tuples, got {list(pairs)[:3]}...")
    rel = _check_ids("pairs' relation ids", ids[:, 0], relations.shape[0], "relations")
    atom = _check_ids("pairs' atom ids", ids[:, 1], atoms.shape[0], "atoms")
    spec = torch.fft.rfft(relations[rel], dim=-1) * torch.fft.rfft(atoms[atom], dim=-1)  # (P, F)
    return torch.fft.irfft(spec.sum(0), n=h, dim=-1)  # (H,)


@dataclass
class UnbindingRecall:
    """What :func:`unbinding_recall` measured; :meth:`as_dict` is its JSON form.

    ``recall[k]`` is the share of the scored edges whose atom ranked below ``k``; ``per_kind`` and
    ``per_relation`` hold ``{"edges": n, "recall": {k: share}}`` per relation kind / relation id.
    ``ranks`` (``(E,)``, int64) and ``edge_relation`` / ``edge_row`` (``(E,)``: relation id and position in
    ``rows``) give every scored edge, for finer breakdowns.
    """

    ks: tuple[int, ...]
    rows: int  # rows asked for
    rows_with_edges: int  # of those, rows with at least one edge
    edges: int  # edges scored
    recall: dict[int, float]
    per_kind: dict[str, dict] = field(default_factory=dict)
    per_relation: dict[int, dict] = field(default_factory=dict)
    exact: bool = False
    memory: str = "range"  # the cleanup memory: range (each relation's atoms) or all
    ranks: Tensor | None = field(default=None, repr=False)
    edge_relation: Tensor | None = field(default=None, repr=False)
    edge_row: Tensor | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        """JSON-ready: everything but the per-edge tensors (k keys become strings ``"1"``, ``"5"``)."""

        def part(d: dict) -> dict:
            return {"edges": d["edges"], "recall": {str(k): v for k, v in d["recall"].items()}}

        return {
            "ks": list(self.ks),
            "rows": self.rows,
            "rows_with_edges": self.rows_with_edges,
            "edges": self.edges,
            "exact": self.exact,
            "memory": self.memory,
            "recall": {str(k): v for k, v in self.recall.items()},
            "per_kind": {name: part(d) for name, d in self.per_kind.items()},
            "per_relation": {str(j): part(d) for j, d in self.per_relation.items()},
        }


def _row_edges(program, rows: Tensor, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """The program's edges whose concept is in ``rows``: ``(position in rows, relation, atom)``, each
    ``(E,)``."""
    position = torch.full((program.n_concepts,), -1, dtype=torch.int64, device=device)
    position[rows] = torch.arange(rows.numel(), device=device)
    pos = position[program.edge_concept.to(device)]  # (E_all,)
    keep = pos >= 0
    return pos[keep], program.edge_relation.to(device)[keep], program.edge_atom.to(device)[keep]


def _edge_ranks(
    vectors: Tensor,
    atoms: Tensor,
    relations: Tensor,
    edges: tuple[Tensor, Tensor, Tensor],
    exact: bool,
    memory: Tensor | None = None,
) -> Tensor:
    """Rank of each edge's atom among all atoms: how many atoms are strictly more similar (cosine) to
    ``vectors[row] ⊛ relation⁻¹`` than it is. Each (row, relation) pair is unbound once; pairs are scored
    in chunks of about ``_RECALL_CHUNK_BYTES``.

    Shapes:
        - vectors: ``(N, H)``; atoms: ``(A, H)``; relations: ``(R, H)``; edges: three ``(E,)``
        - output: ``(E,)`` int64
    """
    pos, rel, atom = edges
    n_rel = relations.shape[0]
    pair_key, pair_of_edge = torch.unique(pos * n_rel + rel, return_inverse=True)  # (P,), (E,)
    allowed = None if memory is None else memory.to(pos.device)  # (R, A)
    memory = F.normalize(atoms, dim=-1, eps=1e-12)  # (A, H)
    order = torch.argsort(pair_of_edge, stable=True)  # edges grouped by pair
    bounds = torch.searchsorted(pair_of_edge[order], torch.arange(pair_key.numel() + 1, device=pos.device))
    ranks = torch.empty_like(pos)
    step = max(1, _RECALL_CHUNK_BYTES // max(1, atoms.shape[0] * atoms.element_size()))
    for s in range(0, pair_key.numel(), step):
        e = min(pair_key.numel(), s + step)
        keys = pair_key[s:e]  # (p,)
        q = unbind_pairs(
            vectors.index_select(0, keys // n_rel), relations, keys % n_rel, exact=exact
        )  # (p, H)
        sims = F.normalize(q, dim=-1, eps=1e-12) @ memory.T  # (p, A)
        if allowed is not None:  # atoms outside the relation's memory never outrank
            sims = sims.masked_fill(~allowed.index_select(0, keys % n_rel), -float("inf"))
        idx = order[int(bounds[s]) : int(bounds[e])]  # edges of these pairs
        local = pair_of_edge[idx] - s  # (e,)
        own = sims[local, atom[idx]]  # (e,)
        ranks[idx] = (sims[local] > own.unsqueeze(1)).sum(1)
    return ranks


def _recall_at(ranks: Tensor, ks: tuple[int, ...]) -> dict[int, float]:
    n = ranks.numel()
    return {k: (float((ranks < k).sum()) / n if n else float("nan")) for k in ks}


def unbinding_recall(
    program,
    vectors: Tensor,
    atoms: Tensor,
    relations: Tensor,
    rows: Tensor,
    ks: Sequence[int] = (1, 5),
    *,
    exact: bool = False,
    memory: str = "range",
) -> UnbindingRecall:
    """How many of the program's edges of ``rows`` unbinding recovers from the rows' vectors.

    What counts: every edge ``(c, r, a)`` of the program whose concept ``c`` is in ``rows`` is scored once.
    Its query is ``vectors[i] ⊛ r⁻¹`` (``i``: the position of ``c`` in ``rows``); the cleanup memory is
    ``memory``: ``range`` (the default), the atoms that fill ``r`` anywhere in the program
    (:func:`relation_range`), or ``all``, every atom of the program; the atom's rank is the number of atoms
    whose cosine with the query is strictly greater than ``a``'s (0 = nearest; ties are resolved in the atom's
    favour). The edge is recovered at ``k`` when its rank is below ``k``. A relation with ``m`` edges on one
    concept gives ``m`` scored edges against the same query, each ranked among all atoms (the other ``m - 1``
    true atoms included), so at most ``k`` of them can be recovered at ``k``; a repeated edge is scored each
    time it is stored. ``recall[k]`` = recovered / scored (NaN when no edge was scored), overall, per relation
    kind (``program.relation_kinds``) and per relation id.

    Args:
        program: a loaded :class:`~hrr_kernel.program.Program` (its edge tensors are read).
        vectors: the rows' vectors, ``vectors[i]`` for concept ``rows[i]`` (a trained or composed matrix).
        atoms, relations: the atom and relation vectors the cleanup and unbinding use.
        rows: distinct concept ids.
        ks: the cut-offs, each at least 1 (one above ``A`` recovers every edge).
        exact: unbind with the exact inverse of the unitary-projected relation.
        memory: ``range`` or ``all`` (see above).

    Shapes:
        - vectors: ``(N, H)``; atoms: ``(A, H)``; relations: ``(R, H)``; rows: ``(N,)``
        - output: :class:`UnbindingRecall` (its ``ranks``: ``(E,)``)
    """
    _check_matrix("vectors", vectors)
    _check_matrix("atoms", atoms, vectors.shape[1])
    _check_matrix("relations", relations, vectors.shape[1])
    if atoms.shape[0] != program.n_atoms or relations.shape[0] != program.n_relations:
        raise ShapeError(
            f"atoms and relations must have the program's {program.n_atoms} and {program.n_relations} rows, "
            f"got {atoms.shape[0]} and {relations.shape[0]}"
        )
    dev = vectors.device
    rows = _check_ids("rows", rows, program.n_concepts, "concepts").to(dev)
    if rows.numel() != vectors.shape[0]:
        raise ShapeError(f"rows must give one concept per vector ({vectors.shape[0]}), got {rows.numel()}")
    if torch.unique(rows).numel() != rows.numel():
        raise ShapeError("rows must be distinct concept ids; some repeat")
    ks = tuple(int(k) for k in ks)
    if not ks or any(k < 1 for k in ks):
        raise ShapeError(f"ks must be positive cut-offs (top-k), got {ks}")
    if memory not in ("range", "all"):
        raise ShapeError(f"memory must be 'range' or 'all', got {memory!r}")
    edges = _row_edges(program, rows, dev)
    allowed = relation_range(program) if memory == "range" else None
    ranks = _edge_ranks(vectors, atoms.to(dev), relations.to(dev), edges, exact, allowed)  # (E,)
    pos, rel, _ = edges
    kinds = program.relation_kinds
    per_relation = {
        int(j): {"edges": int((rel == j).sum()), "recall": _recall_at(ranks[rel == j], ks)}
        for j in torch.unique(rel).tolist()
    }
    per_kind = {}
    for kind in sorted({kinds[j] for j in per_relation}):
        ids = torch.tensor([j for j in per_relation if kinds[j] == kind], dtype=torch.int64, device=dev)
        sel = torch.isin(rel, ids)
        per_kind[kind] = {"edges": int(sel.sum()), "recall": _recall_at(ranks[sel], ks)}
    return UnbindingRecall(
        ks=ks,
        rows=int(rows.numel()),
        rows_with_edges=int(torch.unique(pos).numel()),
        edges=int(ranks.numel()),
        recall=_recall_at(ranks, ks),
        per_kind=per_kind,
        per_relation=per_relation,
        exact=exact,
        memory=memory,
        ranks=ranks,
        edge_relation=rel,
        edge_row=pos,
    )


def hrr_vectors(embedding, rows: Tensor | None = None) -> Tensor:
    """The code vectors an :class:`~hrr_kernel.embedding.HRREmbedding` holds in HRR space, the ones to unbind.

    ``base``: the composition ``C`` (the embedding itself); ``freq``: ``C``, without the fixed frequency
    encoding the embedding adds (a function of the code's frequency, not of its edges); ``add``: ``C + W``,
    the whole embedding; ``cat``: ``C``, the HRR half of ``[C, W]``. ``C`` is scaled to unit rows when the
    embedding normalizes. Not differentiable (computed without gradients, detached).

    Raises:
        ShapeError: the embedding composes nothing (``unstructured``, ``gram``, ``ancestors``: no HRR part).

    Shapes:
        - rows: ``(N,)`` concept ids, or None for all concepts
        - output: ``(N, H)``
    """
    if not embedding.spec.composes:
        raise ShapeError(
            f"an {embedding.mode!r} embedding has no HRR part (it composes nothing from atoms and "
            f"relations); got mode {embedding.mode!r}"
        )
    with torch.no_grad():
        a, r = embedding.atom_vectors().detach(), embedding.relation_vectors().detach()  # (A, H), (R, H)
        c = compose(embedding.program, a, r, rows)  # (N, H)
        if embedding.normalize:
            c = F.normalize(c, dim=1, eps=1e-12)
        c = embedding.spec.hrr_space(embedding, c, rows)  # C, or C + W where the table is added
    return c
