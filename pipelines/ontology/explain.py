"""Explain a trained code vector by unbinding (``hrrbert explain MODEL CODE``).

The code's trained vector ``v`` (the HRR part of its embedding row, see :mod:`pipelines.ontology.trained`) is
unbound with each relation asked, ``v ⊛ r⁻¹``, and cleaned up by cosine against the trained atoms that fill
that relation anywhere in the program (:func:`hrr_kernel.relation_range`: a finding site is a body structure,
never a word), or against all atoms with ``any_atom`` (:func:`hrr_kernel.explain_vector`). Relations asked:
the distinct relations of the code's edges in the program (default), the ``relations`` named, or every
relation (``all_relations``). For each, the result lists the top atoms (key, label, kind, similarity, whether
the program holds that edge) and the program's own atoms for that relation with their rank in the same memory
(0 = nearest; the number of atoms strictly more similar, as :func:`hrr_kernel.unbinding_recall` counts it).

``drift`` says how far the trained vector is from its ontology composition ``C`` (computed by the mode's
spec, :meth:`hrr_kernel.EmbeddingMode.drift`, and noted by its ``explain_note``):

- ``base``: identical by construction (cosine 1, nothing beside ``C``);
- ``freq``: cosine of the embedding ``C + PE`` with ``C``, and the share ``|PE|² / (|C|² + |PE|²)`` of the
  fixed frequency encoding (explain itself unbinds ``C``);
- ``add``: cosine of ``C + W`` with ``C``, and the share ``|W|² / (|C|² + |W|²)`` carried by the table;
- ``cat``: the table half's share ``|W|² / (|C|² + |W|²)`` of the squared norm of ``[C, W]``, and the cosine
  of ``[C, W]`` with ``[C, 0]`` (``sqrt(1 - share)``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipelines.errors import PipelineError

from .trained import TrainedVectors, code_edges, load_trained, resolve_code, resolve_relation

__all__ = [
    "AtomHit",
    "ProgramAtom",
    "RelationExplanation",
    "Drift",
    "Explanation",
    "explain",
    "explain_code",
    "drift_of",
    "summary_lines",
    "write_json",
]


@dataclass
class AtomHit:
    """One atom of a cleanup: its id, key, label, kind, cosine with the unbound vector, and whether the
    program binds it to the code by that relation."""

    atom_id: int
    key: str
    label: str
    kind: str
    similarity: float
    in_program: bool


@dataclass
class ProgramAtom:
    """An atom the program binds to the code by the relation, with its rank among all atoms (0 = nearest)."""

    atom_id: int
    key: str
    label: str
    kind: str
    similarity: float
    rank: int


@dataclass
class RelationExplanation:
    relation_id: int
    key: str
    label: str
    kind: str
    top: list[AtomHit]  # the top-k atoms after unbinding
    program_atoms: list[ProgramAtom]  # the program's atoms for this relation and code (may be empty)


@dataclass
class Drift:
    """How far the trained vector is from its composition ``C`` (see the module docstring)."""

    mode: str
    cosine: float  # cosine of the embedding row with C (cat: with [C, 0])
    beside_share: float  # share of the squared norm carried by what the mode adds beside C
    note: str


@dataclass
class Explanation:
    model: str
    mode: str
    row: int
    code: str  # VOCABULARY:dotted
    title: str
    exact: bool
    top_k: int
    memory: str = "range"  # cleanup memory: range (the relation's atoms) or all
    relations: list[RelationExplanation] = field(default_factory=list)
    drift: Drift | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def drift_of(trained: TrainedVectors, row: int) -> Drift:
    """The :class:`Drift` of one code's trained vector from its composition."""
    from hrr_kernel import mode_spec

    spec = mode_spec(trained.mode)
    c = trained.composition[row].double()  # (H,)
    w = None if trained.extra is None else trained.extra[row].double()  # (H,) or (D - H,)
    cosine, share = spec.drift(c, w)
    return Drift(trained.mode, cosine, share, spec.explain_note)


def _relations_asked(trained: TrainedVectors, row: int, names: tuple[str, ...], every: bool) -> list[int]:
    program = trained.program
    if every:
        return list(range(program.n_relations))
    if names:
        return list(dict.fromkeys(resolve_relation(program, n) for n in names))
    return sorted({r for r, _ in code_edges(program, row)})


def _explain_relations(
    trained: TrainedVectors, row: int, relations: list[int], k: int, exact: bool, any_atom: bool = False
) -> list[RelationExplanation]:
    """Unbind the code's vector with each relation; the top-k atoms and the ranks of the program's atoms."""
    import torch
    import torch.nn.functional as F

    from hrr_kernel import explain_vector, relation_range, unbind_pairs

    p = trained.program
    memory = None if any_atom else relation_range(p).to(trained.atoms.device)
    if memory is not None:  # a relation without edges in the program (--all-relations) gets every atom
        memory[memory.sum(1) == 0] = True
    ids = torch.tensor(relations, dtype=torch.int64)
    vector = trained.vectors[row]  # (H,)
    values, indices = explain_vector(
        vector, trained.atoms, trained.relations, ids, k=k, exact=exact, memory=memory
    )  # (K, k)
    q = unbind_pairs(vector.expand(len(relations), -1), trained.relations, ids, exact=exact)  # (K, H)
    sims = F.normalize(q, dim=-1) @ F.normalize(trained.atoms, dim=-1).T  # (K, A)
    if memory is not None:  # atoms outside a relation's memory never outrank its own
        sims = sims.masked_fill(~memory.index_select(0, ids), -float("inf"))
    edges = code_edges(p, row)
    out = []
    for i, j in enumerate(relations):
        held = [a for r, a in edges if r == j]
        top = [
            AtomHit(a, p.atom_keys[a], p.atom_labels[a], p.atom_kinds[a], float(v), a in held)
            for v, a in zip(values[i].tolist(), indices[i].tolist(), strict=True)
        ]
        own = [
            ProgramAtom(
                a,
                p.atom_keys[a],
                p.atom_labels[a],
                p.atom_kinds[a],
                float(sims[i, a]),
                int((sims[i] > sims[i, a]).sum()),
            )
            for a in held
        ]
        out.append(
            RelationExplanation(j, p.relation_keys[j], p.relation_labels[j], p.relation_kinds[j], top, own)
        )
    return out


def explain_code(
    trained: TrainedVectors,
    code: str,
    *,
    relations: tuple[str, ...] = (),
    all_relations: bool = False,
    top: int = 5,
    drift: bool = False,
    exact: bool = False,
    any_atom: bool = False,
) -> Explanation:
    """Explain one code of an already loaded model (see the module docstring)."""
    if top < 1:
        raise PipelineError(f"top must be at least 1, got {top}")
    if relations and all_relations:
        raise PipelineError("give relations or all_relations, not both")
    p = trained.program
    row = resolve_code(p, code)
    asked = _relations_asked(trained, row, tuple(relations), all_relations)
    cc = p.code(row)
    result = Explanation(
        str(trained.folder),
        trained.mode,
        row,
        str(cc),
        cc.title,
        exact,
        min(top, p.n_atoms),
        "all" if any_atom else "range",
    )
    if asked:
        result.relations = _explain_relations(trained, row, asked, result.top_k, exact, any_atom)
    if drift:
        result.drift = drift_of(trained, row)
    return result


def explain(
    model: str | Path, code: str, *, device: str = "cpu", program: str | Path | None = None, **options: Any
) -> Explanation:
    """Load the model folder ``model`` (with ``program``, default the copy it carries) and explain ``code``
    (options: see :func:`explain_code`)."""
    return explain_code(load_trained(model, device=device, program=program), code, **options)


def write_json(result: Any, path: str | Path) -> Path:
    """Write a result (:class:`Explanation` or a query result) as JSON to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.as_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def summary_lines(result: Explanation) -> list[str]:
    """What ``hrrbert explain`` prints: per relation the top atoms (``*`` the program holds the edge) and the
    ranks of the program's own atoms."""
    memory = "every atom" if result.memory == "all" else "the atoms each relation takes in the program"
    lines = [
        f"{result.code} {result.title}".rstrip(),
        f"model {result.model} ({result.mode}); cleanup: {memory}",
    ]
    if not result.relations:
        lines.append("the code has no edges in the program; ask for --relation NAME or --all-relations")
    for r in result.relations:
        lines.append(f"{r.label}:")
        for h in r.top:
            mark = "*" if h.in_program else " "
            lines.append(f"  {mark} {h.similarity:+.3f}  {h.label} [{h.kind} {h.key}]")
        if r.program_atoms:
            ranks = ", ".join(f"{a.label} #{a.rank + 1}" for a in r.program_atoms)
            lines.append(f"    program: {ranks}")
    if result.drift is not None:
        d = result.drift
        lines.append(
            f"drift: cosine with the composition {d.cosine:.3f}, "
            f"share beside it {d.beside_share:.3f} ({d.note})"
        )
    return lines
