"""Atoms and relations that training never reached, and the rule that settles them.

A model trains the atoms and relations on the edges of the tokens its data hold. An atom that only
tokens absent from the training data use (a word of one rare code's title, the concept of a condition no
training patient had) keeps its random start: composed into a token's vector it adds noise of the same
size as a trained atom's contribution. :func:`settle_untrained` replaces such vectors, once training
ends, by the ``kind_mean`` rule of :mod:`hrr_kernel.carry`: an untrained ``concept``, ``word`` or ``icd``
(ICD classification node) atom becomes the mean of the trained atoms of its kind, an untrained relation
the mean of the trained relations. So a token the model never saw is composed from what training taught
about its other atoms, plus the typical vector of an atom it knows nothing about: the same rule a new
release's new atoms get.
``special`` atoms are left alone (a special token is trained wherever it occurs, and there are too few of
them for a mean to mean anything). In a mode whose rows take only some edges' atoms (``gram`` and
``ancestors``: the ancestors, :mod:`hrr_kernel.ancestry`), an atom counts as trained when one of those
edges of a trained token holds it (``edges``), and there are no relations to settle.

Dimension legend: N concepts (tokens), A atoms, R relations, E edges, H HRR dimension (or the width of
whichever linear parameterisation of the rows is passed: the rule is a mean over rows, so it holds for
spectra as well as signals).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .carry import _fill
from .errors import ShapeError
from .program import Program

__all__ = ["SETTLED_KINDS", "trained_parts", "settle_untrained"]

SETTLED_KINDS = ("concept", "word", "icd")  # atom kinds the rule settles


def trained_parts(program: Program, tokens: Tensor, edges: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Which atoms and relations lie on an edge of a trained token (only the ``edges`` marked, when given:
    the ones that reach the row, :meth:`hrr_kernel.modes.EmbeddingMode.row_edges`).

    Shapes:
        - tokens: ``(N,)`` bool, True for a token the training data held; edges: ``(E,)`` bool or None
        - output: atoms ``(A,)`` bool, relations ``(R,)`` bool
    """
    if tokens.dtype != torch.bool or tokens.shape != (program.n_concepts,):
        raise ShapeError(
            f"tokens must be a ({program.n_concepts},) bool tensor, got {tokens.dtype} {tuple(tokens.shape)}"
        )
    on = tokens.cpu()[program.edge_concept.cpu()]  # (E,)
    if edges is not None:
        if edges.dtype != torch.bool or edges.shape != (program.n_edges,):
            raise ShapeError(f"edges must be a ({program.n_edges},) bool tensor, got {tuple(edges.shape)}")
        on &= edges.cpu()
    atoms = torch.zeros(program.n_atoms, dtype=torch.bool)
    atoms[program.edge_atom.cpu()[on]] = True
    relations = torch.zeros(program.n_relations, dtype=torch.bool)
    relations[program.edge_relation.cpu()[on]] = True
    return atoms, relations


def _settle_rows(rows: Tensor, groups: list[str], trained: Tensor, settle: set[str]) -> int:
    """Set each untrained row of a settled group to the mean of the trained rows of its group, in place
    (the ``kind_mean`` rule of :func:`hrr_kernel.carry._fill`, with only the trained rows averaged); a
    group without trained rows is left as it is. Returns how many rows changed.
    Shapes: rows ``(A, H)``, trained ``(A,)`` bool."""
    has_trained = {g for g, t in zip(groups, trained.tolist(), strict=True) if t}
    todo = torch.tensor(
        [not t and g in settle and g in has_trained for g, t in zip(groups, trained.tolist(), strict=True)],
        dtype=torch.bool,
    )
    if not todo.any():
        return 0
    source = torch.where(todo, -1, torch.arange(len(groups)))
    mean_over = [g if t else "" for g, t in zip(groups, trained.tolist(), strict=True)]  # untrained: no group
    rows.copy_(_fill(rows.detach(), source, groups, mean_over, "kind_mean", 0.0, None))
    return int(todo.sum())


def settle_untrained(
    program: Program, atoms: Tensor, relations: Tensor | None, tokens: Tensor, edges: Tensor | None = None
) -> dict[str, int]:
    """Apply the rule in place to ``atoms`` and ``relations`` (parameters or their spectra; ``relations``
    None: a mode without them, e.g. ``gram``); returns the counts of atoms and relations set. ``edges``: the
    edges that reach a row (:func:`trained_parts`; None: all).

    Shapes:
        - atoms: ``(A, H)``; relations: ``(R, H)``; tokens: ``(N,)`` bool (the trained tokens);
          edges: ``(E,)`` bool
    """
    rel_rows = program.n_relations if relations is None else relations.shape[0]
    if atoms.shape[0] != program.n_atoms or rel_rows != program.n_relations:
        raise ShapeError(
            f"atoms and relations must have {program.n_atoms} and {program.n_relations} rows, got "
            f"{tuple(atoms.shape)} and {None if relations is None else tuple(relations.shape)}"
        )
    trained_atoms, trained_relations = trained_parts(program, tokens, edges)
    kinds = program.atom_kinds or ["concept"] * program.n_atoms
    with torch.no_grad():
        n_atoms = _settle_rows(atoms, kinds, trained_atoms, set(SETTLED_KINDS))
        n_rel = 0
        if relations is not None:
            one = ["relation"] * program.n_relations
            n_rel = _settle_rows(relations, one, trained_relations, {"relation"})
    return {
        "atoms_settled": n_atoms,
        "relations_settled": n_rel,
        "atoms_trained": int(trained_atoms.sum()),
        "relations_trained": 0 if relations is None else int(trained_relations.sum()),
    }
