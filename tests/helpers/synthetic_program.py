"""Write synthetic programs in format 1, for tests and benchmarks.

This is a minimal writer of the documented file format (``docs/program-format.md``), not the ontology
compiler: it takes an edge list and writes ``manifest.json`` (with each file's sha256) and the five
Parquet files, each carrying ``program_id`` and ``format_version`` in its key-value metadata.
:func:`paper_scale_edges` draws an edge list with the paper's sizes and realistic multiplicities.

Dimension legend: N concepts, A atoms, R relations, E edges.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hrr_kernel import SPECIAL_TOKENS

__all__ = ["write_program", "paper_scale_edges", "random_edges", "cached_paper_program", "PAPER"]

FORMAT_VERSION = 1
# Synthetic identifiers: any distinct integers do; these bases keep atom keys, attribute SCTIDs and the
# concepts' SNOMED ids visibly apart.
ATOM_KEY_BASE = 100_000
ATTRIBUTE_SCTID_BASE = 900_000
SNOMED_ID_BASE = 1_000
# Relation ids of paper_scale_edges (and the default kinds of write_program): attributes follow identity.
IS_A, DESCRIPTION, IDENTITY, FIRST_ATTRIBUTE = 0, 1, 2, 3
# Paper-scale sizes (25,493 codes; 13,887 SNOMED target concepts; 8,833 words) used by the benchmarks.
PAPER = {"n_concepts": 25_493, "n_targets": 13_887, "n_words": 8_833}


def _order_edges(concept: np.ndarray, relation: np.ndarray, atom: np.ndarray):
    """Assign slots (k-th use of a relation by a concept) and sort by (relation, slot, concept)."""
    o = np.lexsort((atom, relation, concept))
    c, r, a = concept[o], relation[o], atom[o]
    n = c.size
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (c[1:] != c[:-1]) | (r[1:] != r[:-1])
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    slot = np.arange(n) - group_start
    o2 = np.lexsort((c, slot, r))
    return c[o2], r[o2], a[o2], slot[o2]


def _write_parquet(table: pa.Table, path: Path, program_id: str) -> None:
    meta = {b"program_id": program_id.encode(), b"format_version": str(FORMAT_VERSION).encode()}
    pq.write_table(table.replace_schema_metadata(meta), path)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _content_program_id(
    c: np.ndarray, r: np.ndarray, a: np.ndarray, sizes: tuple[int, int, int], keys: tuple = ()
) -> str:
    """A program id derived from the ordered edges, the sizes and any given keys (same content, same id)."""
    h = hashlib.sha256()
    for x in (c, r, a, np.array(sizes)):
        h.update(x.tobytes())
    if any(k is not None for k in keys):
        h.update(json.dumps(keys).encode())
    return h.hexdigest()[:16]


def _default_relation_kinds(n_relations: int) -> list[str]:
    """``is_a``, ``description``, ``identity``, then ``attribute`` for every further relation."""
    return [
        ["is_a", "description", "identity"][j] if j < FIRST_ATTRIBUTE else "attribute"
        for j in range(n_relations)
    ]


def _atoms_table(n_atoms: int, keys: list[str] | None = None, kinds: list[str] | None = None) -> pa.Table:
    keys = keys if keys is not None else [str(ATOM_KEY_BASE + i) for i in range(n_atoms)]
    kinds = kinds if kinds is not None else ["concept"] * n_atoms
    if len(keys) != n_atoms or len(kinds) != n_atoms:
        raise ValueError(f"atom_keys and atom_kinds need {n_atoms} entries, got {len(keys)} and {len(kinds)}")
    sctids = [
        int(k) if kind == "concept" and k.isdigit() else None for k, kind in zip(keys, kinds, strict=True)
    ]
    return pa.table(
        {
            "atom_id": pa.array(np.arange(n_atoms, dtype=np.int32)),
            "kind": pa.array(kinds),
            "key": pa.array(keys),
            "label": pa.array([f"atom {k}" for k in keys]),
            "sctid": pa.array(sctids, pa.int64()),
        }
    )


def _relations_table(
    kinds: list[str],
    r: np.ndarray,
    slot: np.ndarray,
    n_relations: int,
    sctids: list[int | None] | None = None,
) -> pa.Table:
    """One row per relation, with its largest multiplicity (max slot + 1) and its edge count."""
    mult = np.zeros(n_relations, dtype=np.int64)
    np.maximum.at(mult, r, slot + 1)
    n_edges_rel = np.bincount(r, minlength=n_relations)
    return pa.table(
        {
            "relation_id": pa.array(np.arange(n_relations, dtype=np.int32)),
            "kind": pa.array(kinds),
            "sctid": pa.array(
                sctids
                if sctids is not None
                else [None if k != "attribute" else ATTRIBUTE_SCTID_BASE + j for j, k in enumerate(kinds)],
                pa.int64(),
            ),
            "label": pa.array([f"{k} {j}" for j, k in enumerate(kinds)]),
            "max_multiplicity": pa.array(mult.astype(np.int32)),
            "edges": pa.array(n_edges_rel.astype(np.int64)),
        }
    )


def _concepts_table(n_concepts: int, codes: list[str] | None = None) -> pa.Table:
    """ICD-10-CM-shaped codes ``X00000`` (dotted ``X00.000``), or the given dotless ``codes``, each mapped
    one-to-one to a SNOMED id."""
    codes = codes if codes is not None else [f"X{i:05d}" for i in range(n_concepts)]
    if len(codes) != n_concepts:
        raise ValueError(f"concept_codes needs {n_concepts} entries, got {len(codes)}")
    return pa.table(
        {
            "concept_id": pa.array(np.arange(n_concepts, dtype=np.int32)),
            "vocabulary": pa.array(["ICD10CM"] * n_concepts),
            "code": pa.array(codes),
            "code_dotted": pa.array([c[:3] + "." + c[3:] if len(c) > 3 else c for c in codes]),
            "title": pa.array([f"code {i}" for i in range(n_concepts)]),
            "snomed_ids": pa.array([[SNOMED_ID_BASE + i] for i in range(n_concepts)], pa.list_(pa.int64())),
            "mapping_source": pa.array(["synthetic"] * n_concepts),
            "mapping_kind": pa.array(["one_to_one"] * n_concepts),
            "chapter": pa.array(np.ones(n_concepts, dtype=np.int8)),
        }
    )


def _edges_table(c: np.ndarray, r: np.ndarray, a: np.ndarray, slot: np.ndarray) -> pa.Table:
    return pa.table(
        {
            "concept_id": pa.array(c.astype(np.int32)),
            "relation_id": pa.array(r.astype(np.int32)),
            "atom_id": pa.array(a.astype(np.int32)),
            "slot": pa.array(slot.astype(np.int32)),
            "role_group": pa.array(np.zeros(c.size, dtype=np.int32)),
            "provenance": pa.array(["synthetic"] * c.size),
        }
    )


def _slices_table(r: np.ndarray, slot: np.ndarray) -> pa.Table:
    """One row per (relation, slot) run of the ordered edges: where it starts and how long it is."""
    change = (
        np.flatnonzero((r[1:] != r[:-1]) | (slot[1:] != slot[:-1])) + 1 if r.size else np.zeros(0, np.int64)
    )
    starts = np.concatenate(([0], change)) if r.size else np.zeros(0, np.int64)
    lengths = np.diff(np.concatenate((starts, [r.size]))) if r.size else np.zeros(0, np.int64)
    return pa.table(
        {
            "relation_id": pa.array(r[starts].astype(np.int32)),
            "slot": pa.array(slot[starts].astype(np.int32)),
            "start": pa.array(starts.astype(np.int64)),
            "length": pa.array(lengths.astype(np.int64)),
        }
    )


def _manifest(program_id: str, files: list[dict], counts: dict[str, int]) -> dict:
    """``manifest.json`` of a synthetic program (fixed creation time: the same edges give the same bytes)."""
    return {
        "format_version": FORMAT_VERSION,
        "program_id": program_id,
        "created_at": "1970-01-01T00:00:00Z",
        "compiler_version": "tests.helpers.synthetic_program",
        "release": {"name": "synthetic"},
        "inputs": [],
        "options": {},
        "files": files,
        "counts": counts,
        "coverage": {},
    }


def write_program(
    root: str | Path,
    *,
    n_concepts: int,
    n_atoms: int,
    n_relations: int,
    edges: tuple[np.ndarray, np.ndarray, np.ndarray],
    relation_kinds: list[str] | None = None,
    program_id: str | None = None,
    atom_keys: list[str] | None = None,
    atom_kinds: list[str] | None = None,
    relation_sctids: list[int | None] | None = None,
    concept_codes: list[str] | None = None,
) -> Path:
    """Write a format-1 program to ``root`` (created) and return ``root``.

    ``edges`` is ``(concept_id, relation_id, atom_id)``, three equal-length integer arrays in any order.
    Relation kinds default to ``is_a``, ``description``, ``identity``, then ``attribute``. Keys default to
    synthetic ones; pass ``atom_keys`` (with ``atom_kinds``), ``relation_sctids`` and ``concept_codes``
    (dotless ICD-10-CM codes) to build programs whose atoms, relations and codes match across releases.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    concept, relation, atom = (np.asarray(x, dtype=np.int64).reshape(-1) for x in edges)
    c, r, a, slot = _order_edges(concept, relation, atom)
    if program_id is None:
        keys = (atom_keys, atom_kinds, relation_sctids, concept_codes)
        program_id = _content_program_id(c, r, a, (n_concepts, n_atoms, n_relations), keys)
    kinds = relation_kinds or _default_relation_kinds(n_relations)
    tables = {
        "atoms.parquet": _atoms_table(n_atoms, atom_keys, atom_kinds),
        "relations.parquet": _relations_table(kinds, r, slot, n_relations, relation_sctids),
        "concepts.parquet": _concepts_table(n_concepts, concept_codes),
        "edges.parquet": _edges_table(c, r, a, slot),
        "slices.parquet": _slices_table(r, slot),
    }
    files = []
    for name, table in tables.items():
        _write_parquet(table, root / name, program_id)
        files.append({"path": name, "sha256": _sha256(root / name), "rows": table.num_rows})
    counts = {
        "concepts": n_concepts,
        "atoms": n_atoms,
        "relations": n_relations,
        "edges": int(c.size),
        "slices": tables["slices.parquet"].num_rows,
    }
    (root / "manifest.json").write_text(
        json.dumps(_manifest(program_id, files, counts), indent=2), encoding="utf-8"
    )
    return root


def random_edges(
    rng: np.random.Generator, n_concepts: int, n_atoms: int, n_relations: int, n_edges: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uniformly random edges (duplicates possible): ``(concept, relation, atom)``, each ``(E,)``."""
    return (
        rng.integers(0, n_concepts, n_edges),
        rng.integers(0, n_relations, n_edges),
        rng.integers(0, n_atoms, n_edges),
    )


def _zipf_choice(rng: np.random.Generator, n: int, size: int, s: float = 1.0) -> np.ndarray:
    """``size`` draws from ``n`` items with P(rank k) ~ 1 / k^s, the ranks shuffled over the items."""
    w = 1.0 / np.arange(1, n + 1) ** s
    return rng.permutation(n)[rng.choice(n, size=size, p=w / w.sum())]


def _code_edges(
    rng: np.random.Generator, n_codes: int, n_targets: int, n_words: int, n_attributes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """is_a, description and attribute edges of the ordinary codes (atoms: targets first, then words).

    Multiplicities and Zipf exponents mimic the paper's compiled program: 1 + Poisson(0.65) parents
    (at most 4); Poisson(8.1) description words, 2 % of codes with 5-17 more (long titles), clipped to
    1-25; Poisson(2.1) attribute edges. Draw order is part of the output (same seed, same program).
    """
    n_isa = np.minimum(1 + rng.poisson(0.65, n_codes), 4)
    n_desc = np.clip(
        rng.poisson(8.1, n_codes) + np.where(rng.random(n_codes) < 0.02, rng.integers(5, 18, n_codes), 0),
        1,
        25,
    )
    n_attr = rng.poisson(2.1, n_codes)
    cc, rr, aa = [], [], []
    codes = np.arange(n_codes)
    cc.append(np.repeat(codes, n_isa))
    rr.append(np.full(n_isa.sum(), IS_A, np.int64))
    aa.append(_zipf_choice(rng, n_targets, int(n_isa.sum()), 0.5))
    cc.append(np.repeat(codes, n_desc))
    rr.append(np.full(n_desc.sum(), DESCRIPTION, np.int64))
    aa.append(n_targets + _zipf_choice(rng, n_words, int(n_desc.sum()), 1.0))
    att_c = np.repeat(codes, n_attr)
    att_rel = FIRST_ATTRIBUTE + _zipf_choice(rng, n_attributes, att_c.size, 1.2)
    cc.append(att_c)
    rr.append(att_rel)
    # each attribute draws targets from its own window of half the target space; a prime stride
    # (7919) scatters the windows' offsets
    span = max(1, n_targets // 2)
    offs = (att_rel * 7919) % max(1, n_targets - span)
    aa.append(offs + _zipf_choice(rng, span, att_c.size, 0.95))
    return np.concatenate(cc), np.concatenate(rr), np.concatenate(aa)


def _share_edge_sets(
    rng: np.random.Generator, edges: tuple[np.ndarray, ...], n_codes: int, fraction: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Give ``fraction`` of the codes a copy of another code's edge set instead of their own."""
    c, r, a = edges
    codes = np.arange(n_codes)
    n_copy = int(fraction * n_codes)
    copies = rng.choice(n_codes, n_copy, replace=False)
    sources = rng.choice(np.setdiff1d(codes, copies), n_copy)
    keep = ~np.isin(c, copies)
    c, r, a = c[keep], r[keep], a[keep]
    add_c, add_r, add_a = [], [], []
    order = np.argsort(c, kind="stable")
    c_sorted = c[order]
    for dst, src in zip(copies.tolist(), sources.tolist(), strict=True):
        lo, hi = np.searchsorted(c_sorted, [src, src + 1])
        sel = order[lo:hi]
        add_c.append(np.full(sel.size, dst))
        add_r.append(r[sel])
        add_a.append(a[sel])
    return np.concatenate([c, *add_c]), np.concatenate([r, *add_r]), np.concatenate([a, *add_a])


def paper_scale_edges(
    rng: np.random.Generator,
    n_concepts: int = PAPER["n_concepts"],
    n_targets: int = PAPER["n_targets"],
    n_words: int = PAPER["n_words"],
    n_attributes: int = 39,
    shared_mapping_fraction: float = 0.0,
) -> tuple[dict[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A synthetic program shaped like the paper's (defaults: 25,493 codes, 22,725 atoms, 42 relations).

    Relations: 0 is_a (1–4 per concept), 1 description (words, 1–25, about 8 per concept), 2 identity
    (5 special tokens), 3.. attributes (0–6 uses each, about 2 attribute edges per concept). Targets and
    words are drawn Zipf-like, as in an ontology. With ``shared_mapping_fraction`` > 0 that fraction of
    codes copies the edge set of another code (several ICD codes mapping to one SNOMED concept).

    Returns ``(sizes, (concept, relation, atom))``; sizes has n_concepts, n_atoms, n_relations.
    """
    n_special = len(SPECIAL_TOKENS)  # the last concepts, each bound to its own identity atom
    n_atoms = n_targets + n_words + n_special
    n_codes = n_concepts - n_special
    c, r, a = _code_edges(rng, n_codes, n_targets, n_words, n_attributes)
    if shared_mapping_fraction > 0:
        c, r, a = _share_edge_sets(rng, (c, r, a), n_codes, shared_mapping_fraction)
    special = n_codes + np.arange(n_special)
    c = np.concatenate([c, special])
    r = np.concatenate([r, np.full(n_special, IDENTITY)])
    a = np.concatenate([a, n_targets + n_words + np.arange(n_special)])
    sizes = {"n_concepts": n_concepts, "n_atoms": n_atoms, "n_relations": FIRST_ATTRIBUTE + n_attributes}
    return sizes, (c, r, a)


def cached_paper_program(cache: str | Path, n_concepts: int, shared: float = 0.0, seed: int = 0) -> Path:
    """A paper-shaped synthetic program with ``n_concepts`` codes, written once under ``cache``."""
    scale = n_concepts / PAPER["n_concepts"]
    root = Path(cache) / f"synthetic-n{n_concepts}-shared{shared:g}-seed{seed}"
    if (root / "manifest.json").is_file():
        return root
    sizes, edges = paper_scale_edges(
        np.random.default_rng(seed),
        n_concepts=n_concepts,
        # at least 10 targets and words, so that tiny sweep points still have a vocabulary
        n_targets=max(10, round(PAPER["n_targets"] * scale)),
        n_words=max(10, round(PAPER["n_words"] * scale)),
        shared_mapping_fraction=shared,
    )
    write_program(root, **sizes, edges=edges)
    return root
