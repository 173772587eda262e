"""Carry a trained :class:`~model.HRRBert` over to a new program (a new release of the ontology).

:func:`carry_model` builds an HRRBert with the same config on the new program and fills every weight:

- **Everything that does not depend on the vocabulary** is copied unchanged: the Transformer layers, the
  position and visit-segment embeddings, the embedding and MLM-head layer norms, the MLM transform and
  the pooled task heads (so a fine-tuned model keeps its task head).
- **Atoms and relations** (modes ``base``, ``freq``, ``add``, ``cat``; ``gram`` and ``ancestors`` have
  atoms, the ancestors' free vectors, and no relations) come from
  :func:`hrr_kernel.carry_parameters`: the trained vector where the key matches (an atom by kind and key, a
  relation by its SCTID key), else the ``init`` rule (``zero``, ``kind_mean``, ``random`` or ``parents``).
  GRAM's attention MLP does not depend on the vocabulary and is copied.
- **Per-token tensors** are carried by (vocabulary, code) (:func:`hrr_kernel.token_sources`): a token of
  both programs keeps its trained row. A token only the new program has gets:

  ========================== ===============================================================================
  tensor                     row of a new token
  ========================== ===============================================================================
  ``unstructured`` table     the trained ``[UNK]`` row: what the plain embedding model does with a code it
                             never saw (it maps it to ``[UNK]``); when no training data held ``[UNK]``,
                             training settled that row to the mean of the trained rows
                             (:meth:`model.HRRBert.settle_untrained`)
  ``cat`` table half         the trained ``[UNK]`` row, for the same reason (its HRR half is composed)
  ``add`` table              zero: the new token is its composition and nothing else
  ``gram``, ``ancestors``    zero: the new code's own vector (its table row) is zero, so its row is the
                             mix of its ancestors' vectors (carried by key, new ones by ``init``)
  ``freq`` encoding          the trained ``[UNK]`` row, which is the encoding of the lowest frequency bin
                             (special tokens have count 0, and a never-seen code gets that same bin)
  MLM decoder bias           the median bias of the trained codes (special tokens left out; the lower
                             middle value for an even count): as likely as a typical code, neither boosted
                             nor suppressed
  ========================== ===============================================================================

A token of the old program that the new one lacks is dropped with its rows. The report
(:func:`carry_model`'s second value) counts the tokens by provenance (:data:`hrr_kernel.PROVENANCE`:
carried / composed from trained atoms only / composed with some new atoms / entirely new), the carried
tokens whose edges changed, the new table rows and their rule, atoms matched and new (by kind),
relations matched and new, and the old tokens dropped.

A carried token whose edges (its (relation key, atom kind, atom key) multiset) are unchanged keeps exactly
its embedding row and its MLM logit (up to the summation order of the composition), so a carried
model scores the old vocabulary as the original did; only new and changed tokens move.

Dimension legend: N concepts (tokens), A atoms, R relations, E edges, D model dimension, H HRR dimension.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from hrr_kernel import (
    PROVENANCE,
    SPECIAL_TOKENS,
    Program,
    ProgramError,
    carry_parameters,
    token_provenance,
    token_sources,
)

from .bert import HRRBert
from .errors import ModelError
from .roles import carry_readout_state

__all__ = ["carry_model", "unchanged_tokens", "TOKEN_TENSORS"]

UNK = "[UNK]"
# state-dict keys of the tensors with one row (or entry) per token; every other key is copied unchanged
ATOMS, RELATIONS = "embeddings.token.atoms", "embeddings.token.relations"
TABLE, FREQ, BIAS = "embeddings.token.table", "embeddings.token.freq_encoding", "mlm.bias"
TOKEN_TENSORS = (ATOMS, RELATIONS, TABLE, FREQ, BIAS)
# a new token's MLM bias (the report names it; the embedding's per-token rows follow the mode's spec:
# hrr_kernel.modes new_row, new_row_note)
BIAS_RULE = "median bias of the trained codes"
EXAMPLES = 10  # codes listed in the report per group (dropped, new)


def _old_row(old: Program, token: str, mode: str) -> int:
    """The row of a special token in the old program; an error naming the mode when it has none."""
    try:
        return old.special_id(token)
    except ProgramError as e:
        raise ModelError(
            f"program {old.program_id} has no {token} token, but a {mode!r} model gives the new program's "
            f"new codes the trained {token} row; carry a model whose program has the special tokens"
        ) from e


def _carry_rows(trained: Tensor, sources: Tensor, fill: Tensor) -> Tensor:
    """Rows of ``trained`` by ``sources`` (-1: ``fill``, broadcast).

    Shapes:
        - trained: ``(N_old, *)``; sources: ``(N_new,)``; fill: ``(*)``
        - output: ``(N_new, *)``
    """
    src = sources.to(trained.device)
    out = fill.to(trained).expand(src.numel(), *trained.shape[1:]).clone()
    hit = src >= 0
    out[hit] = trained[src[hit]]
    return out


def _bias_fill(old: Program, bias: Tensor) -> Tensor:
    """The MLM bias of a new token: the median over the old program's codes (specials left out)."""
    codes = [i for i, c in enumerate(old.concept_codes) if c not in SPECIAL_TOKENS]
    rows = torch.tensor(codes or list(range(old.n_concepts)), device=bias.device)
    return bias[rows].median()


def _token_tensors(model: HRRBert, sources: Tensor, has_new: bool) -> dict[str, Tensor]:
    """The new per-token tables of ``model`` (table, freq encoding, MLM bias) by the documented rules."""
    old, spec = model.program, model.config.spec
    state = model.state_dict()
    out = {BIAS: _carry_rows(state[BIAS], sources, _bias_fill(old, state[BIAS]))}
    key = {"table": TABLE, "freq_encoding": FREQ}.get(spec.per_token_tensor)
    if key is not None:
        rows = state[key]
        if spec.new_row == "zero":
            fill = torch.zeros_like(rows[0])
        else:  # "[UNK]": the trained [UNK] row
            fill = rows[_old_row(old, UNK, spec.name) if has_new else 0]
        out[key] = _carry_rows(rows, sources, fill)
    return out


def _carry_hrr(model: HRRBert, new: Program, init: str, seed: int, atom_parents=None):
    """:func:`hrr_kernel.carry_parameters` on the model's atoms and relations (an unstructured model has none:
    its matching is computed on placeholder vectors, for the report)."""
    token = model.embeddings.token
    old = model.program
    atoms = token.atom_vectors() if token.spec.has_atoms else torch.zeros(old.n_atoms, 1)
    relations = (  # gram and ancestors have atoms and no relations: matched on placeholders too
        token.relation_vectors() if token.hrr_dim > 0 else torch.zeros(old.n_relations, atoms.shape[1])
    )
    g = torch.Generator().manual_seed(seed)
    return carry_parameters(
        old, new, atoms.detach(), relations.detach(), init=init, generator=g, atom_parents=atom_parents
    )


def _edge_key_sets(program: Program, relation_ids: dict, atom_ids: dict) -> list[tuple[int, ...]]:
    """Each concept's sorted (relation key, atom key) codes, keys numbered by the shared dictionaries."""
    rel = np.array([relation_ids.setdefault(k, len(relation_ids)) for k in _relation_keys(program)])
    kinds = program.atom_kinds or ["concept"] * program.n_atoms
    atom = np.array(
        [atom_ids.setdefault(k, len(atom_ids)) for k in zip(kinds, program.atom_keys, strict=True)]
    )
    c = program.edge_concept.cpu().numpy()
    key = (
        rel[program.edge_relation.cpu().numpy()].astype(np.int64) * (1 << 32)
        + atom[program.edge_atom.cpu().numpy()]
    )
    order = np.lexsort((key, c))
    c, key = c[order], key[order]
    bounds = np.searchsorted(c, np.arange(program.n_concepts + 1))
    return [tuple(key[bounds[i] : bounds[i + 1]].tolist()) for i in range(program.n_concepts)]


def _relation_keys(program: Program) -> list[str]:
    return program.relation_keys or program.relation_labels


def unchanged_tokens(old: Program, new: Program) -> Tensor:
    """For each token of ``new``: True when ``old`` has it (same vocabulary and code) with the same edges
    (the same multiset of (relation key, atom kind and key)), so its composition is the same.

    Shapes:
        - output: ``(new.n_concepts,)`` bool
    """
    relation_ids: dict = {}
    atom_ids: dict = {}
    old_sets = _edge_key_sets(old, relation_ids, atom_ids)
    new_sets = _edge_key_sets(new, relation_ids, atom_ids)
    sources = token_sources(old, new).tolist()
    return torch.tensor([s >= 0 and old_sets[s] == new_sets[i] for i, s in enumerate(sources)])


def _codes(program: Program, rows: list[int]) -> list[str]:
    return [str(program.code(i)) for i in rows[:EXAMPLES]]


def _report(model: HRRBert, new: Program, carried, sources: Tensor, init: str, seed: int) -> dict[str, Any]:
    """What the carry did (see the module docstring)."""
    old, spec = model.program, model.config.spec
    provenance = token_provenance(old, new, carried)
    counts = torch.bincount(provenance, minlength=len(PROVENANCE)).tolist()
    unchanged = unchanged_tokens(old, new)
    new_rows = torch.nonzero(sources < 0).flatten().tolist()
    kept = set(sources[sources >= 0].tolist())
    dropped = [i for i in range(old.n_concepts) if i not in kept]
    atoms = carried.counts()
    rules = {}
    if spec.per_token_tensor is not None:
        rules[spec.per_token_tensor] = spec.new_row_note
    rules["mlm_bias"] = BIAS_RULE
    return {
        "mode": spec.name,
        "init": init,
        "seed": seed,
        "old_program_id": old.program_id,
        "new_program_id": new.program_id,
        "old_tokens": old.n_concepts,
        "new_tokens": new.n_concepts,
        "tokens": dict(zip(PROVENANCE, counts, strict=True)),
        "carried_edges_unchanged": int(unchanged.sum()),
        "carried_edges_changed": counts[0] - int(unchanged.sum()),
        "new_token_rows": {"count": len(new_rows), "rules": rules},
        "new_examples": _codes(new, new_rows),
        "old_tokens_dropped": len(dropped),
        "dropped_examples": _codes(old, dropped),
        "atoms": {
            "matched": atoms["atoms_matched"],
            "new": atoms["atoms_new"],
            "by_kind": atoms["atoms_by_kind"],
            "used": spec.has_atoms,
        },
        "relations": {"matched": atoms["relations_matched"], "new": atoms["relations_new"]},
    }


def carry_model(
    model: HRRBert,
    new_program: Program,
    *,
    init: str = "zero",
    seed: int = 0,
    atom_parents: list[list[int]] | None = None,
) -> tuple[HRRBert, dict[str, Any]]:
    """A new :class:`HRRBert` with ``model``'s config on ``new_program``, and the report of the carry.

    See the module docstring for what is copied and the rule of each new row. ``seed`` seeds the
    ``random`` initialisation of new atoms and relations (the only random draw); ``atom_parents`` (per atom
    of ``new_program``, its is-a parents' atom ids) is what ``init="parents"`` reads. The new model has the
    dtype of ``model`` and lives on ``new_program``'s device; ``model`` is not changed.
    """
    old = model.program
    sources = token_sources(old, new_program)  # (N_new,)
    carried = _carry_hrr(model, new_program, init, seed, atom_parents)
    with torch.random.fork_rng(devices=[]):  # the throwaway initialisation leaves the global RNG alone
        placeholder = torch.zeros(new_program.n_concepts) if model.config.spec.frequency else None
        new = HRRBert(model.config, new_program, log_frequency=placeholder)
    new.to(dtype=next(model.parameters()).dtype)
    state = {k: v.to(new_program.device) for k, v in model.state_dict().items()}
    replaced = _token_tensors(model, sources, bool((sources < 0).any()))
    if model.embeddings.token.spec.has_atoms:
        replaced[ATOMS] = carried.atoms
    if model.embeddings.token.hrr_dim > 0:
        replaced[RELATIONS] = carried.relations
    if model.roles is not None:  # the readout's feature columns follow their chapter atoms
        state_roles = carry_readout_state(model.roles, old, new.roles, new_program)
        replaced.update({f"roles.{k}": v for k, v in state_roles.items()})
    target = new.state_dict()
    for key, value in target.items():
        given = replaced[key] if key in replaced else state.get(key)
        if given is None or given.shape != value.shape:
            raise ModelError(
                f"cannot carry weight {key!r} to program {new_program.program_id}: "
                f"the new model expects shape {tuple(value.shape)}, the trained model has "
                f"{'none' if given is None else tuple(given.shape)}"
            )
        with torch.no_grad():
            value.copy_(given)
    return new, _report(model, new_program, carried, sources, init, seed)
