"""Role readout: the task heads query each code vector of a history for its ICD chapter, HRR's own way.

A composed code vector is ``C = Σ r ⊛ a`` over its edges, so unbinding a relation ``r`` gives the atoms it
binds plus the other edges' crosstalk: ``C ⊛ r⁻¹ ≈ a + noise``, and the nearest of the relation's atoms by
cosine is the filler (:mod:`hrr_kernel.unbinding`). A pretrained ``base`` makes that query clean for the
ICD chapter relations: on the demo release the nearest chapter atom is the code's own chapter for 99.7 % of
the ICD-10-CM codes and 99.5 % of the codes no training saw (AMD EPYC, seed 0; at random atoms it is
78 %). A head reading only the sum of a history's code vectors, or the Transformer's states, sees the
chapter under the crosstalk of some 300 bound pairs; the history's chapters regression reads it exactly.

:class:`RoleReadout` gives the heads the query's answer. Per distinct code of a batch and per role
relation ``r`` (the program's ICD hierarchy chapter relations, :func:`role_relations`) it unbinds ``r``
(Plate's approximate inverse, circular correlation), takes the cosine ``s_k`` with each atom ``k`` of the
relation's range (the atoms that fill ``r`` in some edge), and turns ``τ s_k`` together with a learned
"none" level ``τ b_r`` into a softmax, of which the atoms' part is the code's soft chapter (a code of
another vocabulary, with no such edge, scores under ``b`` and puts its mass on "none"). Summed like the
regression's counts over the history's distinct codes, those at two visits or more and those of its latest
visit, ``log1p``, plus ``log1p`` of the number of visits, they feed one linear layer per task whose output
is added to the pooled head's logits. Everything is differentiable: fine-tuning moves ``τ``, ``b``, the
atoms and the relations with the heads. Nothing reads the program's edges at run time; the program gives
only which relations to query and each one's range of atoms, and an unseen code is read from its
composition like any other.

Dimension legend: B batch, T codes per sequence, U distinct codes of a batch, H HRR width, F = H // 2 + 1,
Q role relations, K atoms of all the roles' ranges, L task labels, G = 3K + 1 features.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hrr_kernel import relation_range, unbind_relations

__all__ = [
    "ROLE_KIND", "ROLE_LEVEL", "RoleReadout", "carry_readout_state", "carry_readout_weights",
    "history_groups", "role_relations",
]  # fmt: skip

ROLE_KIND = "icd_hierarchy"  # the relation kind the roles are drawn from (ontology_compiler's ICD hierarchy)
ROLE_LEVEL = "chapter"  # the level queried: the relations whose label ends with it
INIT_SHARPNESS = 20.0  # τ at the start: cosines 0.05 apart weigh e times apart
INIT_NONE = 0.6  # b at the start: the "none" level of the cosine (pretrained base: a chapter edge's cosine
# is above 0.75 for 90 % of the codes that hold one, the best atom's below 0.51 for 90 % of those without)


def role_relations(program) -> list[int]:
    """The relation ids a role readout queries: kind :data:`ROLE_KIND` whose label ends with
    :data:`ROLE_LEVEL` (``ICD-10-CM chapter``, ``ICD-9-CM chapter``) and that some edge holds, in id
    order."""
    used = set(torch.unique(program.edge_relation).tolist())
    return [
        i
        for i, (kind, label) in enumerate(zip(program.relation_kinds, program.relation_labels, strict=True))
        if kind == ROLE_KIND and label.endswith(ROLE_LEVEL) and i in used
    ]


def history_groups(
    input_ids: Tensor, segment_ids: Tensor, keep: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The positions the regression's counts read, each ``(B, T)`` bool, and the visits ``(B,)``: a code's
    first position in the history (its distinct codes), that position where the code is written at two
    visits or more, its first position within the latest visit; ``keep`` marks the real codes."""
    same = (input_ids[:, :, None] == input_ids[:, None, :]) & keep[:, :, None] & keep[:, None, :]  # (B, T, T)
    t = input_ids.shape[1]
    before = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril(-1)  # [i, j]: j < i
    first = keep & ~(same & before).any(-1)  # (B, T)
    other_visit = segment_ids[:, :, None] != segment_ids[:, None, :]  # (B, T, T)
    repeated = first & (same & other_visit).any(-1)
    seg = segment_ids.masked_fill(~keep, -1)
    last_visit = seg.max(1, keepdim=True).values  # (B, 1)
    in_last = keep & (segment_ids == last_visit)
    first_in_last = in_last & ~(same & before & in_last[:, None, :]).any(-1)
    visits = torch.zeros(seg.shape[0], int(seg.max().clamp_min(0)) + 2, device=seg.device)  # (B, S + 1)
    visits.scatter_(1, (seg + 1).long(), 1.0)
    return first, repeated, first_in_last, visits[:, 1:].sum(1)


class RoleReadout(nn.Module):
    """Soft chapters of a batch's codes by unbinding (module docstring) and per-task linear heads on the
    history's counts of them.

    Args:
        program: the loaded program (relations to query, their atoms' ranges).
        tasks: task name -> number of labels.
    """

    def __init__(self, program, tasks: dict[str, int]) -> None:
        super().__init__()
        rels = role_relations(program)
        if not rels:
            raise ValueError(
                f"program {program.program_id} has no {ROLE_KIND} relation ending in {ROLE_LEVEL!r} to read "
                "roles from (compile it with the ICD hierarchy, without --no-icd-hierarchy), or choose "
                "pooling cls or cls+mean"
            )
        fills = relation_range(program)  # (R, A): each relation's cleanup memory
        atoms, group = [], []
        for q, r in enumerate(rels):
            rng = torch.nonzero(fills[r]).flatten()  # (K_r,) sorted atom ids
            atoms.append(rng)
            group.append(torch.full_like(rng, q))
        self.register_buffer("role_ids", torch.tensor(rels, dtype=torch.long), persistent=False)  # (Q,)
        self.register_buffer("atom_ids", torch.cat(atoms), persistent=False)  # (K,)
        self.register_buffer("atom_role", torch.cat(group), persistent=False)  # (K,)
        self.sizes = [len(a) for a in atoms]
        self.log_sharpness = nn.Parameter(torch.tensor(math.log(INIT_SHARPNESS)))
        self.none_level = nn.Parameter(torch.full((len(rels),), INIT_NONE))
        self.tasks = nn.ModuleDict({name: nn.Linear(self.n_features, n) for name, n in tasks.items()})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """τ and the "none" levels at their starting values, the task layers at zero: a new readout adds
        nothing until it is trained."""
        with torch.no_grad():
            self.log_sharpness.fill_(math.log(INIT_SHARPNESS))
            self.none_level.fill_(INIT_NONE)
        for lin in self.tasks.values():
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    @property
    def n_features(self) -> int:
        """G = 3K + 1: per role atom, its count over distinct, repeated and latest-visit codes; visits."""
        return 3 * int(self.atom_ids.numel()) + 1

    def soft_roles(self, c: Tensor, atoms: Tensor, relations: Tensor) -> Tensor:
        """Each code's soft filler of every role: ``(U, K)``, per role a softmax's atoms part (the rest is
        the "none" level). ``c`` the codes' compositions ``(U, H)``, ``atoms`` ``(A, H)``, ``relations``
        ``(R, H)`` as signals."""
        q = unbind_relations(
            c.float(), relations.index_select(0, self.role_ids).float()
        )  # (U, Q, H): C ⊛ r⁻¹
        q = F.normalize(q, dim=2, eps=1e-12)
        a = F.normalize(atoms.index_select(0, self.atom_ids).float(), dim=1, eps=1e-12)  # (K, H)
        # (U, K): each atom against the query of its own role
        sims = (q.index_select(1, self.atom_role) * a[None]).sum(2)
        tau = self.log_sharpness.exp()
        out = []
        for j, part in enumerate(sims.split(self.sizes, dim=1)):  # (U, K_j)
            none = self.none_level[j].expand(part.shape[0], 1)  # (U, 1)
            out.append(torch.softmax(tau * torch.cat([part, none], 1), dim=1)[:, :-1])
        return torch.cat(out, 1)  # (U, K)

    def features(
        self, roles: Tensor, inv: Tensor, input_ids: Tensor, segment_ids: Tensor, keep: Tensor
    ) -> Tensor:
        """The history's counts ``(B, G)``: ``log1p`` of the soft roles summed over its distinct codes, over
        those written at two visits or more and over its latest visit's, then ``log1p`` of its visits.
        ``roles`` ``(U, K)``, ``inv`` ``(B, T)`` each position's row of ``roles``."""
        per_pos = roles.index_select(0, inv.reshape(-1)).view(*inv.shape, -1)  # (B, T, K)
        first, repeated, last, visits = history_groups(input_ids, segment_ids, keep)
        sums = [(per_pos * m.unsqueeze(-1).to(per_pos.dtype)).sum(1) for m in (first, repeated, last)]
        return torch.log1p(torch.cat([*sums, visits.unsqueeze(1).to(per_pos.dtype)], 1))  # (B, G)

    def forward(self, feats: Tensor, task: str) -> Tensor:
        """The logits ``(B, L)`` this readout adds for ``task``."""
        return self.tasks[task](feats)


def carry_readout_weights(
    old: RoleReadout, old_program, new: RoleReadout, new_program, weight: Tensor
) -> Tensor:
    """A task layer's weight ``(L, G_old)`` of ``old`` laid out for ``new`` on another program ``(L, G_new)``
    (carrying a model, :mod:`model.carry`): each feature column follows its atom, matched by the role
    relation's label and the atom's kind and key; a chapter atom the old program did not have (or a role
    it did not query) gets zero weights, so it counts for nothing until trained; the visits column is kept."""
    old_col = {}
    for i, (a, q) in enumerate(zip(old.atom_ids.tolist(), old.atom_role.tolist(), strict=True)):
        rel = old_program.relation_labels[int(old.role_ids[q])]
        old_col[(rel, old_program.atom_kinds[a], old_program.atom_keys[a])] = i
    k_old, k_new = int(old.atom_ids.numel()), int(new.atom_ids.numel())
    out = weight.new_zeros(weight.shape[0], 3 * k_new + 1)  # (L, G_new)
    for j, (a, q) in enumerate(zip(new.atom_ids.tolist(), new.atom_role.tolist(), strict=True)):
        rel = new_program.relation_labels[int(new.role_ids[q])]
        i = old_col.get((rel, new_program.atom_kinds[a], new_program.atom_keys[a]))
        if i is not None:
            for g in range(3):  # distinct codes, repeated codes, latest visit
                out[:, g * k_new + j] = weight[:, g * k_old + i]
    out[:, -1] = weight[:, -1]
    return out


def carry_readout_state(old: RoleReadout, old_program, new: RoleReadout, new_program) -> dict[str, Tensor]:
    """The state of ``new`` (keys as in its ``state_dict``) that carrying ``old`` to another program
    replaces: every task layer's weight by :func:`carry_readout_weights`, and each role's "none" level from
    the old role of the same relation label (else the starting value). Biases and the sharpness keep their
    shapes and are copied as they are."""
    out = {
        f"tasks.{task}.weight": carry_readout_weights(
            old, old_program, new, new_program, layer.weight.detach().to(new.atom_ids.device)
        )
        for task, layer in old.tasks.items()
    }
    level = {
        old_program.relation_labels[r]: v
        for r, v in zip(old.role_ids.tolist(), old.none_level.detach().tolist(), strict=True)
    }
    out["none_level"] = torch.tensor(
        [level.get(new_program.relation_labels[r], INIT_NONE) for r in new.role_ids.tolist()],
        dtype=old.none_level.dtype,
        device=new.atom_ids.device,
    )
    return out
