"""Carry trained atom and relation vectors from one program to another (a new release of the ontology).

Two programs share atoms and relations by key, not by id: an atom is the same when its kind and key
agree (``concept`` + SCTID, ``word`` + the word, ``special`` + the token), a relation when its key
agrees (the attribute type's SCTID, or ``identity`` / ``description``), a token when its
(vocabulary, code) agrees. :func:`carry_parameters` gives every atom and relation of the new program a
vector: the trained one where the key matches, else one set by the initialisation rule:

- ``zero`` (the default): a new atom or relation contributes nothing, so a new token is composed from
  the trained vectors it shares with the old program and nothing else; training moves it from zero.
- ``kind_mean``: the mean of the trained atoms of the same kind (relations: of all trained relations).
- ``random``: N(0, ``std``) draws, as a fresh model starts (``generator`` makes them reproducible).
- ``parents``: a new concept atom starts at the mean of its is-a parents' vectors (``atom_parents``, from
  the new release's is-a graph; parents that are new themselves are set first), so a concept the release
  added sits where the ontology puts it; atoms without known parents (words, roots) start at zero, as do
  new relations.

Dimension legend: A atoms, R relations, N concepts (tokens), H HRR dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import ShapeError
from .program import Program

__all__ = [
    "INIT_RULES",
    "Carried",
    "match_keys",
    "carry_parameters",
    "token_sources",
    "token_provenance",
    "PROVENANCE",
]

INIT_RULES = ("zero", "kind_mean", "random", "parents")
# what a token of the new program is, relative to the old one (token_provenance's codes, in order)
PROVENANCE = ("carried", "composed_trained", "composed_some_new", "entirely_new")


def match_keys(old_keys: Sequence[object], new_keys: Sequence[object]) -> Tensor:
    """For each new key, the index of the same key among the old ones, or -1.

    Shapes:
        - output: ``(len(new_keys),)`` int64
    """
    index: dict[object, int] = {}
    for i, k in enumerate(old_keys):
        index.setdefault(k, i)
    return torch.tensor([index.get(k, -1) for k in new_keys], dtype=torch.int64)


def _atom_keys(program: Program) -> list[tuple[str, str]]:
    kinds = program.atom_kinds or ["concept"] * program.n_atoms
    return list(zip(kinds, program.atom_keys, strict=True))


def token_sources(old: Program, new: Program) -> Tensor:
    """For each token of ``new``, its row in ``old`` by (vocabulary, code), or -1.

    Shapes:
        - output: ``(new.n_concepts,)`` int64
    """
    old_keys = list(zip(old.concept_vocabularies, old.concept_codes, strict=True))
    new_keys = list(zip(new.concept_vocabularies, new.concept_codes, strict=True))
    return match_keys(old_keys, new_keys)


@dataclass
class Carried:
    """The new program's atom and relation vectors, and where each came from.

    ``atom_source[i]`` / ``relation_source[j]`` is the old id a vector was copied from, -1 when it was
    initialised by ``rule``.
    """

    atoms: Tensor  # (A_new, H)
    relations: Tensor  # (R_new, H)
    atom_source: Tensor  # (A_new,) int64
    relation_source: Tensor  # (R_new,) int64
    rule: str
    atom_kinds: list[str]

    def counts(self) -> dict[str, object]:
        """Atoms and relations matched and new (atoms also per kind)."""
        matched = (self.atom_source >= 0).tolist()
        by_kind: dict[str, dict[str, int]] = {}
        for kind, hit in zip(self.atom_kinds, matched, strict=True):
            row = by_kind.setdefault(kind, {"matched": 0, "new": 0})
            row["matched" if hit else "new"] += 1
        return {
            "atoms_matched": int(sum(matched)),
            "atoms_new": len(matched) - int(sum(matched)),
            "atoms_by_kind": dict(sorted(by_kind.items())),
            "relations_matched": int((self.relation_source >= 0).sum()),
            "relations_new": int((self.relation_source < 0).sum()),
            "init_rule": self.rule,
        }


def _fill(
    trained: Tensor,
    source: Tensor,
    groups: list[str],
    old_groups: list[str],
    rule: str,
    std: float,
    generator: torch.Generator | None,
) -> Tensor:
    """Copy matched rows of ``trained``; set the others by ``rule`` (``kind_mean`` averages the trained
    rows of the same group). Shapes: trained ``(A_old, H)``, source ``(A_new,)`` -> ``(A_new, H)``."""
    out = torch.zeros(source.numel(), trained.shape[1], dtype=trained.dtype, device=trained.device)
    hit = source >= 0
    src = source.to(trained.device)
    out[hit.to(trained.device)] = trained[src[hit.to(trained.device)]]
    new_rows = torch.nonzero(~hit).flatten().tolist()
    if not new_rows or rule == "zero":
        return out
    if rule == "random":
        draw = torch.randn(len(new_rows), trained.shape[1], generator=generator, dtype=trained.dtype) * std
        out[torch.tensor(new_rows, device=trained.device)] = draw.to(trained.device)
        return out
    means: dict[str, Tensor] = {}
    for g in sorted(set(groups[i] for i in new_rows)):
        rows = [i for i, og in enumerate(old_groups) if og == g]
        means[g] = trained[rows].mean(0) if rows else torch.zeros_like(trained[0])
    for i in new_rows:
        out[i] = means[groups[i]]
    return out


def _from_parents(atoms: Tensor, source: Tensor, parents: Sequence[Sequence[int]]) -> None:
    """Set each new atom (``source < 0``) with parents to the mean of its parents, in place, once all its
    parents are set (trained, or new and already resolved); atoms left unresolved (no parents, or a cycle of
    new atoms) stay as they are. Shapes: atoms ``(A, H)``, source ``(A,)``."""
    done = (source >= 0).tolist()
    todo = [i for i, d in enumerate(done) if not d and len(parents[i])]
    while todo:
        ready = [i for i in todo if all(done[p] for p in parents[i])]
        if not ready:
            return
        for i in ready:
            atoms[i] = atoms[torch.as_tensor(list(parents[i]), device=atoms.device)].mean(0)
            done[i] = True
        todo = [i for i in todo if not done[i]]


def carry_parameters(
    old: Program,
    new: Program,
    atoms: Tensor,
    relations: Tensor,
    *,
    init: str = "zero",
    std: float = 0.02,
    generator: torch.Generator | None = None,
    atom_parents: Sequence[Sequence[int]] | None = None,
) -> Carried:
    """The new program's atoms and relations: trained vectors where keys match, ``init`` elsewhere.

    ``atom_parents`` (for ``init="parents"``, required then): per atom of ``new``, the ids (in ``new``) of its
    is-a parents; only the entries of new atoms are read.

    Shapes:
        - atoms: ``(old.n_atoms, H)``; relations: ``(old.n_relations, H)``
        - output: :class:`Carried` with atoms ``(new.n_atoms, H)`` and relations ``(new.n_relations, H)``
    """
    if init not in INIT_RULES:
        raise ShapeError(f"init must be one of {INIT_RULES}, got {init!r}")
    if atoms.dim() != 2 or atoms.shape[0] != old.n_atoms:
        raise ShapeError(f"atoms must be ({old.n_atoms}, H) for the old program, got {tuple(atoms.shape)}")
    if relations.dim() != 2 or relations.shape != (old.n_relations, atoms.shape[1]):
        raise ShapeError(
            f"relations must be ({old.n_relations}, {atoms.shape[1]}), got {tuple(relations.shape)}"
        )
    old_atoms, new_atoms = _atom_keys(old), _atom_keys(new)
    atom_source = match_keys(old_atoms, new_atoms)
    relation_source = match_keys(
        old.relation_keys or old.relation_labels, new.relation_keys or new.relation_labels
    )
    if init == "parents" and (atom_parents is None or len(atom_parents) != new.n_atoms):
        raise ShapeError(f"init 'parents' needs atom_parents with one entry per new atom ({new.n_atoms})")
    rule = "zero" if init == "parents" else init
    with torch.no_grad():
        kinds_new, kinds_old = [k for k, _ in new_atoms], [k for k, _ in old_atoms]
        a = _fill(atoms.detach(), atom_source, kinds_new, kinds_old, rule, std, generator)
        if init == "parents":
            _from_parents(a, atom_source, atom_parents)
        one = ["relation"] * new.n_relations
        r = _fill(
            relations.detach(), relation_source, one, ["relation"] * old.n_relations, rule, std, generator
        )
    return Carried(a, r, atom_source, relation_source, init, [k for k, _ in new_atoms])


def token_provenance(old: Program, new: Program, carried: Carried) -> Tensor:
    """What each token of ``new`` is, as an index into :data:`PROVENANCE`: 0 ``carried`` (the token exists
    in ``old``), 1 ``composed_trained`` (a new token whose atoms and relations are all trained), 2
    ``composed_some_new`` (a new token with some new atoms or relations), 3 ``entirely_new`` (a new token
    none of whose atoms was trained, or with no edges).

    Shapes:
        - output: ``(new.n_concepts,)`` int64
    """
    n = new.n_concepts
    edge_concept = new.edge_concept.cpu()
    known = (carried.atom_source[new.edge_atom.cpu()] >= 0) & (
        carried.relation_source[new.edge_relation.cpu()] >= 0
    )
    atom_known = carried.atom_source[new.edge_atom.cpu()] >= 0
    edges = torch.bincount(edge_concept, minlength=n)
    all_known = torch.bincount(edge_concept, weights=known.double(), minlength=n).long() == edges
    any_atom = torch.bincount(edge_concept, weights=atom_known.double(), minlength=n) > 0
    out = torch.where(all_known & (edges > 0), 1, torch.where(any_atom, 2, 3))
    out[token_sources(old, new) >= 0] = 0
    return out.to(torch.int64)
