"""How the program writer lays out edges: slots in atom order per (concept, relation), and each edge's
role group (and source concept) taken from its first giver by (role group, SCTID).

Guards against bugs that leave the HRR sum unchanged, so the composer tests do not see them (issue 35).
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ontology_compiler import rf2_schema as S
from ontology_compiler.program import build_tables

FINDING_SITE, MORPHOLOGY = 363698007, 116676008


def _read(result, name: str) -> list[dict]:
    return pq.read_table(result.path / f"{name}.parquet").to_pylist()


def _build(rel_rows: list[tuple], token_sctids: dict[str, list[int]]) -> dict[str, pa.Table]:
    """``build_tables`` on a synthetic graph: ``rel_rows`` are (sctid, type, destination, group), in
    input order; ``token_sctids`` maps an ICD-10-CM code to its SNOMED concepts."""
    cols = list(zip(*rel_rows, strict=True))
    rel_edges = pa.table(
        {
            "sctid": pa.array(cols[0], pa.int64()),
            "relation_key": pa.array(cols[1], pa.int64()),
            "atom_sctid": pa.array(cols[2], pa.int64()),
            "role_group": pa.array(cols[3], pa.int32()),
            "provenance": pa.array(["inferred"] * len(rel_rows), pa.string()),
        }
    )
    codes = sorted(token_sctids)
    tokens = pa.table(
        {
            "vocabulary": ["ICD10CM"] * len(codes),
            "code": codes,
            "code_dotted": codes,
            "title": codes,
            "snomed_ids": pa.array([sorted(token_sctids[c]) for c in codes], pa.list_(pa.int64())),
            "mapping_source": ["snomed_icd10cm_map"] * len(codes),
            "mapping_kind": ["unconditional"] * len(codes),
            "chapter": pa.array([None] * len(codes), pa.int8()),
        }
    )
    pairs = [(c, s) for c in codes for s in token_sctids[c]]
    token_snomed = pa.table(
        {
            "vocabulary": ["ICD10CM"] * len(pairs),
            "code": [c for c, _ in pairs],
            "sctid": pa.array([s for _, s in pairs], pa.int64()),
        }
    )
    labelled = sorted({*cols[1], *cols[2]})
    labels = pa.table(
        {
            "sctid": pa.array(labelled, pa.int64()),
            "fsn": [f"c{s} (finding)" for s in labelled],
            "preferred": [f"c{s}" for s in labelled],
        }
    )
    words = pa.table(
        {
            "sctid": pa.array([], pa.int64()),
            "word": pa.array([], pa.string()),
            "provenance": pa.array([], pa.string()),
        }
    )
    return build_tables(tokens, rel_edges, words, token_snomed, labels)


def _edges_of(tables: dict[str, pa.Table], concept_id: int) -> list[tuple]:
    return sorted(
        (e["relation_id"], e["atom_id"], e["slot"], e["role_group"], e["source_sctid"])
        for e in tables["edges"].to_pylist()
        if e["concept_id"] == concept_id
    )


def test_slots_follow_atom_order_when_a_concepts_relations_interleave():
    """Bug guarded: the (relation, atom) sort order swapped when slots are assigned (atoms ordered before
    relations, or atoms taken in reverse), so a concept's slots of one relation collide or no longer go
    in atom_id order."""
    # concept 100: is-a 10 and 30, finding site 20 and 40: by atom id the relations alternate
    rows = [
        (100, S.IS_A, 10, 0),
        (100, FINDING_SITE, 20, 1),
        (100, S.IS_A, 30, 0),
        (100, FINDING_SITE, 40, 2),
    ]
    t = _build(rows, {"A01": [100]})
    # atoms: 5 specials, then 10 -> 5, 20 -> 6, 30 -> 7, 40 -> 8; relations: is-a 2, finding site 3
    assert _edges_of(t, 5) == [
        (2, 5, 0, 0, 100),
        (2, 7, 1, 0, 100),
        (3, 6, 0, 1, 100),
        (3, 8, 1, 2, 100),
    ]
    assert [(s["relation_id"], s["slot"], s["length"]) for s in t["slices"].to_pylist()] == [
        (0, 0, 5),
        (2, 0, 1),
        (2, 1, 1),
        (3, 0, 1),
        (3, 1, 1),
    ]


def test_fixture_slots_are_atom_order_per_concept_and_relation(compiled):
    """Bug guarded: the (relation, atom) order inside a multiplicity slice swapped when the program is
    written: slot k of (concept, relation) must hold its k-th atom in atom_id order."""
    runs: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in _read(compiled, "edges"):
        runs[(e["concept_id"], e["relation_id"])].append((e["slot"], e["atom_id"]))
    multi = {rel for (_, rel), run in runs.items() if len(run) > 1}
    assert {1, 2} <= multi and any(r > 2 for r in multi)  # description, is-a and an attribute
    for key, run in runs.items():
        run.sort()
        slots, atoms = [s for s, _ in run], [a for _, a in run]
        assert slots == list(range(len(run))), (key, run)
        assert atoms == sorted(set(atoms)), (key, run)


def test_role_group_of_a_shared_edge_is_the_smallest_then_the_smallest_sctid():
    """Bug guarded: the role group ignored when a token's edges are grouped: an edge several
    relationships give takes role_group and source_sctid from the first by (role group, SCTID)."""
    rows = [
        (100, MORPHOLOGY, 10, 2),  # 100 < 200, but in group 2
        (200, MORPHOLOGY, 10, 1),
        (300, FINDING_SITE, 20, 3),  # one concept, one edge in groups 3 and 1 (group 3 read first)
        (300, FINDING_SITE, 20, 1),
    ]
    t = _build(rows, {"A01": [100, 200], "B02": [300]})
    # atoms 10 -> 5, 20 -> 6; relations: morphology 3, finding site 4; concepts A01 5, B02 6
    assert _edges_of(t, 5) == [(3, 5, 0, 1, 200)]
    assert _edges_of(t, 6) == [(4, 6, 0, 1, 300)]


def test_fixture_role_groups_follow_the_relationship_groups(compiled):
    """Bug guarded: the RF2 relationshipGroup ignored when relationships become edges (every edge in
    group 0, or the group not taken from the first giver by (role group, SCTID))."""
    relations = {r["sctid"]: r["relation_id"] for r in _read(compiled, "relations") if r["sctid"] is not None}
    atoms = {a["sctid"]: a["atom_id"] for a in _read(compiled, "atoms") if a["sctid"] is not None}
    concepts = _read(compiled, "concepts")
    mapped = {s for c in concepts for s in c["snomed_ids"]}
    by_source: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for r in (r for r in _read(compiled, "graph/snomed_relationships") if r["source_id"] in mapped):
        by_source[r["source_id"]].append(
            (relations[r["type_id"]], atoms[r["destination_id"]], r["relationship_group"])
        )
    givers: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for c in concepts:
        for s in c["snomed_ids"]:
            for rel, atom, group in by_source[s]:
                givers[(c["concept_id"], rel, atom)].append((group, s))
    got = {
        (e["concept_id"], e["relation_id"], e["atom_id"]): (e["role_group"], e["source_sctid"])
        for e in _read(compiled, "edges")
        if e["relation_id"] >= 2
        and e["relation_id"] in relations.values()  # SNOMED's, not the ICD hierarchy's
    }
    assert got == {k: min(v) for k, v in givers.items()}
    assert {g for g, _ in got.values()} == {0, 1, 2}
    # not vacuous: 9990114005 has the same morphology in groups 1 and 2
    assert any(len({g for g, _ in v}) > 1 for v in givers.values())


def test_stable_order_is_numpys_lexsort():
    """``order.stable_order`` (the compile's row orders: the edges' slots and storage, the first edge per
    key, preferred terms, the release tables by id, Full resolution) equals ``np.lexsort`` of the same keys
    in every case it takes apart: keys that all pack with the row number, groups packed one after the
    other, a key too wide to pack (distinct values, or repeats ordered by rank), negative and boolean keys,
    keys already in order, one row and no rows."""
    import numpy as np

    from ontology_compiler.order import stable_order

    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 500, 3000):
        small = [rng.integers(0, m, n) for m in (5, 3, 7)]
        wide = rng.integers(0, 2**60, n)  # distinct (almost surely)
        wide_rep = rng.integers(0, 2**60, max(n // 4, 1))[rng.integers(0, max(n // 4, 1), n)] if n else wide
        cases = [
            small,
            small[:1],
            [small[0], rng.integers(0, 2**40, n), small[1]],  # groups: the 2**40 key fits only with the last
            [wide],
            [wide_rep],
            [wide_rep, small[2]],
            [small[0], wide_rep],
            [rng.integers(-3, 3, n), rng.integers(-(2**50), 0, n)],
            [rng.integers(0, 2, n).astype(bool), small[1]],
            [np.sort(rng.integers(0, 9, n)), np.arange(n)],  # already in order
            [rng.integers(0, 2**63, n).astype(np.uint64) * np.uint64(2), small[0]],  # digests, past int64
            [(np.uint64(2**63) + rng.integers(0, 9, n).astype(np.uint64)), small[1]],  # narrow, past int64
        ]
        for keys in cases:
            want = np.lexsort(keys[::-1])
            np.testing.assert_array_equal(stable_order(*keys), want)
    with pytest.raises(ValueError, match="different lengths"):
        stable_order(np.zeros(2, np.int64), np.zeros(3, np.int64))
