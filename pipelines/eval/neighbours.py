"""Nearest neighbours of codes by cosine similarity of the token embedding matrix, scored against the
ontology (evaluation (d); the paper's physician rating replaced by an automatic one).

A neighbour is *related* to a code when some SNOMED concept of the one lies within two is-a steps of
some SNOMED concept of the other (undirected: parent, grandparent, child, sibling, ...; the same concept
counts), or when they share both a finding site and an associated morphology. The codes studied are the
paper's case studies (2724 and 9916 in ICD-9, K219 in ICD-10, where the program has them) and seeded
samples of common, rare and random codes; the samples depend only on the dataset and the seed, so every
configuration is scored on the same codes.

Dimension legend: N concepts, D embedding dim, Q query codes, K neighbours.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

IS_A = 116680003
FINDING_SITE = 363698007
MORPHOLOGY = 116676008
# (vocabulary, code) of the paper's case studies
CASE_STUDIES = (("ICD9CM", "2724"), ("ICD9CM", "9916"), ("ICD10CM", "K219"))
GROUPS = ("common", "rare", "random")
RARE_MAX_COUNT = 3  # a rare code occurs 1..RARE_MAX_COUNT times in pretraining
IS_A_STEPS = 2


class Ontology:
    """The program's is-a graph and defining attributes, per ICD code (from ``concepts.parquet`` and
    ``graph/snomed_relationships.parquet``)."""

    def __init__(self, program_dir: str | Path) -> None:
        p = Path(program_dir)
        concepts = pq.read_table(
            p / "concepts.parquet", columns=["code", "vocabulary", "title", "snomed_ids"]
        )
        self.codes = concepts.column("code").to_pylist()
        self.vocabulary = concepts.column("vocabulary").to_pylist()
        self.titles = concepts.column("title").to_pylist()
        self.snomed = [set(s or ()) for s in concepts.column("snomed_ids").to_pylist()]
        rel = pq.read_table(
            p / "graph" / "snomed_relationships.parquet", columns=["source_id", "destination_id", "type_id"]
        ).to_pydict()
        self.neigh: dict[int, set[int]] = defaultdict(set)  # undirected is-a adjacency
        self.site: dict[int, set[int]] = defaultdict(set)
        self.morph: dict[int, set[int]] = defaultdict(set)
        for s, d, t in zip(rel["source_id"], rel["destination_id"], rel["type_id"], strict=True):
            if t == IS_A:
                self.neigh[s].add(d)
                self.neigh[d].add(s)
            elif t == FINDING_SITE:
                self.site[s].add(d)
            elif t == MORPHOLOGY:
                self.morph[s].add(d)

    def within(self, concepts: set[int], steps: int = IS_A_STEPS) -> set[int]:
        """Concepts at most ``steps`` undirected is-a edges from any of ``concepts``."""
        seen, frontier = set(concepts), set(concepts)
        for _ in range(steps):
            frontier = {n for c in frontier for n in self.neigh.get(c, ())} - seen
            seen |= frontier
        return seen

    def related(self, a: int, b: int) -> bool:
        """Whether concept ids (rows) ``a`` and ``b`` are related (see the module docstring)."""
        sa, sb = self.snomed[a], self.snomed[b]
        if not sa or not sb:
            return False
        if self.within(sa) & sb:
            return True
        site_a = set().union(*(self.site.get(c, set()) for c in sa))
        morph_a = set().union(*(self.morph.get(c, set()) for c in sa))
        site_b = set().union(*(self.site.get(c, set()) for c in sb))
        morph_b = set().union(*(self.morph.get(c, set()) for c in sb))
        return bool(site_a & site_b) and bool(morph_a & morph_b)

    def find(self, vocabulary: str, code: str) -> int | None:
        for i, (v, c) in enumerate(zip(self.vocabulary, self.codes, strict=True)):
            if v == vocabulary and c == code:
                return i
        return None


def choose_codes(
    ontology: Ontology, count_train: np.ndarray, *, per_group: int = 10, seed: int = 0
) -> dict[str, list[int]]:
    """The codes studied: ``case_studies`` present in the program, and ``per_group`` common (most
    frequent in pretraining), rare (seen 1..3 times) and random (any non-special, mapped) codes."""
    n = len(ontology.codes)
    normal = np.array(
        [i for i in range(n) if ontology.vocabulary[i] != "SPECIAL" and ontology.snomed[i]], dtype=np.int64
    )
    rng = np.random.default_rng([seed, 4])
    counts = count_train[normal]
    common = normal[np.argsort(-counts, kind="stable")[:per_group]]
    rare_pool = normal[(counts >= 1) & (counts <= RARE_MAX_COUNT)]
    rare = rng.choice(rare_pool, size=min(per_group, len(rare_pool)), replace=False) if len(rare_pool) else []
    rand = rng.choice(normal, size=min(per_group, len(normal)), replace=False) if len(normal) else []
    cases = [i for v, c in CASE_STUDIES if (i := ontology.find(v, c)) is not None]
    return {
        "case_studies": cases,
        "common": [int(i) for i in common],
        "rare": sorted(int(i) for i in rare),
        "random": sorted(int(i) for i in rand),
    }


@torch.no_grad()
def nearest(matrix: torch.Tensor, queries: list[int], k: int, exclude: list[int]) -> np.ndarray:
    """Top-``k`` neighbours by cosine of each query row, never itself nor ``exclude``.

    Shapes: matrix ``(N, D)``; output ``(Q, K)`` row ids.
    """
    if not queries:
        return np.zeros((0, k), dtype=np.int64)
    e = torch.nn.functional.normalize(matrix.detach().float(), dim=1)  # (N, D)
    sim = e[torch.as_tensor(queries)] @ e.t()  # (Q, N)
    sim[:, torch.as_tensor(exclude, dtype=torch.int64)] = -float("inf")
    sim[torch.arange(len(queries)), torch.as_tensor(queries)] = -float("inf")
    return sim.topk(k, dim=1).indices.cpu().numpy()  # (Q, K)


def neighbour_study(
    matrix: torch.Tensor, ontology: Ontology, codes: dict[str, list[int]], *, k: int = 4
) -> dict[str, Any]:
    """Neighbours of every studied code and, per group, how many of the top-``k`` are related."""
    special = [i for i, v in enumerate(ontology.vocabulary) if v == "SPECIAL"]
    out: dict[str, Any] = {"k": k, "groups": {}}
    for group, ids in codes.items():
        nn_ids = nearest(matrix, ids, k, special)
        rows, related = [], 0
        for q, nbrs in zip(ids, nn_ids, strict=True):
            flags = [ontology.related(q, int(j)) for j in nbrs]
            related += sum(flags)
            rows.append(
                {
                    "code": _label(ontology, q),
                    "title": ontology.titles[q],
                    "neighbours": [
                        {"code": _label(ontology, int(j)), "title": ontology.titles[int(j)], "related": f}
                        for j, f in zip(nbrs, flags, strict=True)
                    ],
                }
            )
        out["groups"][group] = {"related": related, "total": k * len(ids), "codes": rows}
    return out


def _label(ontology: Ontology, i: int) -> str:
    v = ontology.vocabulary[i]
    return f"{ontology.codes[i]} ({'ICD-9' if v == 'ICD9CM' else 'ICD-10' if v == 'ICD10CM' else v})"
