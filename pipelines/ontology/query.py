"""Query a trained model by composition (``hrrbert query MODEL PAIR...``).

A query is composed from the model's trained atoms and relations, ``q = Σ r ⊛ a`` over the pairs
``"RELATION=ATOM"`` given (:func:`hrr_kernel.compose_query`, the row the composer would build for a code
with exactly those edges), and compared by cosine with every code's trained vector (the HRR part of the
embedding, see :mod:`pipelines.ontology.trained`; special tokens and codes without edges are left out).
With ``like=CODE`` the query starts from that code's trained vector: ``q = v(CODE) − Σ_minus r ⊛ a +
Σ_plus r ⊛ a`` (the pairs given without ``--plus`` are added too), e.g. the same disorder at another site;
``CODE`` itself is left out of the results, and so are the codes the program composes from the same edges
(an ICD-9-CM twin, say), which would otherwise top the list. Each hit says how many of the wanted pairs
(the added ones) the program gives it as edges.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipelines.errors import PipelineError

from .trained import (
    TrainedVectors,
    code_edges,
    describe_atom,
    describe_relation,
    load_trained,
    parse_pair,
    resolve_code,
)

__all__ = ["QueryHit", "QueryResult", "query", "query_codes", "summary_lines"]


@dataclass
class QueryHit:
    row: int
    vocabulary: str
    code: str  # dotless
    code_dotted: str
    title: str
    similarity: float
    edges_held: int  # how many of the wanted pairs the program gives this code


@dataclass
class QueryResult:
    model: str
    mode: str
    pairs: list[
        str
    ]  # the wanted pairs (positional and plus), resolved: "Finding site = Pancreatic islets (...)"
    minus: list[str]
    like: str | None  # VOCABULARY:dotted of the starting code
    hits: list[QueryHit] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _describe_pair(program, pair: tuple[int, int]) -> str:
    return f"{describe_relation(program, pair[0])} = {describe_atom(program, pair[1])}"


def _candidates(trained: TrainedVectors, exclude: int | None):
    """Rows a query may return: not special tokens, a nonzero vector, not ``exclude`` nor a code with the same
    composition (the same edges) as ``exclude``. ``(N,)`` bool."""
    import torch
    import torch.nn.functional as F

    p = trained.program
    keep = trained.vectors.norm(dim=1) > 0  # (N,)
    special = torch.tensor([v == "SPECIAL" for v in p.concept_vocabularies], dtype=torch.bool)
    keep &= ~special.to(keep.device)
    if exclude is not None:  # the code and its twins: codes composed from the same edges
        c = trained.composition
        same = F.normalize(c, dim=1, eps=1e-12) @ F.normalize(c[exclude], dim=0, eps=1e-12) > 1 - 1e-6  # (N,)
        keep &= ~same
        keep[exclude] = False
    return keep


def query_codes(
    trained: TrainedVectors,
    pairs: tuple[str, ...] = (),
    *,
    like: str | None = None,
    minus: tuple[str, ...] = (),
    plus: tuple[str, ...] = (),
    top: int = 10,
) -> QueryResult:
    """Run a query on an already loaded model (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from hrr_kernel import compose_query

    p = trained.program
    if top < 1:
        raise PipelineError(f"top must be at least 1, got {top}")
    if minus and like is None:
        raise PipelineError("--minus takes something away from a code: give --like CODE")
    wanted = [parse_pair(p, t) for t in (*pairs, *plus)]
    removed = [parse_pair(p, t) for t in minus]
    if not wanted and like is None:
        raise PipelineError("nothing to query: give at least one RELATION=ATOM pair, or --like CODE")
    start = None if like is None else resolve_code(p, like)
    add = compose_query(trained.atoms, trained.relations, wanted)  # (H,)
    take = compose_query(trained.atoms, trained.relations, removed)  # (H,)
    base = trained.vectors[start] if start is not None else torch.zeros_like(add)  # (H,)
    q = base + add - take
    if float(q.norm()) <= 1e-6 * float(base.norm() + add.norm() + take.norm()):
        raise PipelineError("the query vector is zero (its parts cancel out); nothing to compare")
    sims = F.normalize(trained.vectors, dim=1, eps=1e-12) @ F.normalize(q, dim=0)  # (N,)
    sims = torch.where(_candidates(trained, start), sims, torch.tensor(float("-inf")))
    values, rows = sims.topk(min(top, int(torch.isfinite(sims).sum())))
    want = set(wanted)
    hits = []
    for v, r in zip(values.tolist(), rows.tolist(), strict=True):
        c = p.code(r)
        held = sum(1 for e in set(code_edges(p, r)) if e in want)
        hits.append(QueryHit(r, c.vocabulary, c.code, c.code_dotted, c.title, float(v), held))
    return QueryResult(
        str(trained.folder),
        trained.mode,
        [_describe_pair(p, x) for x in wanted],
        [_describe_pair(p, x) for x in removed],
        None if start is None else str(p.code(start)),
        hits,
    )


def query(
    model: str | Path,
    pairs: tuple[str, ...] = (),
    *,
    device: str = "cpu",
    program: str | Path | None = None,
    **options: Any,
) -> QueryResult:
    """Load the model folder ``model`` (with ``program``, default the copy it carries) and run a query
    (options: see :func:`query_codes`)."""
    return query_codes(load_trained(model, device=device, program=program), tuple(pairs), **options)


def summary_lines(result: QueryResult) -> list[str]:
    """What ``hrrbert query`` prints: the query, then one line per hit (similarity, code, title, held
    pairs)."""
    lines = [f"model {result.model} ({result.mode})"]
    if result.like:
        lines.append(f"like  {result.like}")
    lines += [f"minus {x}" for x in result.minus]
    lines += [f"plus  {x}" for x in result.pairs]
    n = len(result.pairs)
    for h in result.hits:
        lines.append(
            f"  {h.similarity:+.3f}  {h.vocabulary}:{h.code_dotted}  {h.title}  [{h.edges_held}/{n} pairs]"
        )
    return lines
