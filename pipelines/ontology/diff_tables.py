"""The tables of a program diff (:mod:`pipelines.ontology.diff`): tokens, mappings, edges, atoms and
relations, each built from the matched sides, and the counts of ``diff.json``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from .diff_match import MAPPING_FIELDS, SPECIAL, EdgeDiff, KeyIndex, Match, Side, split_key

__all__ = [
    "DIFF_FILES",
    "by_union",
    "tokens_table",
    "mappings_table",
    "edges_table",
    "atoms_table",
    "relations_table",
    "diff_counts",
]


DIFF_FILES = ("tokens.parquet", "edges.parquet", "atoms.parquet", "relations.parquet", "mappings.parquet")


# --- tables -----------------------------------------------------------------------------------------


def by_union(index: KeyIndex, old_values: list, new_values: list) -> list:
    """Per union id: the new program's value when it has the key, else the old one's."""
    return [
        new_values[n] if n >= 0 else old_values[o] for o, n in zip(index.old_row, index.new_row, strict=True)
    ]


def _ids(rows: np.ndarray) -> pa.Array:
    return pa.array([None if r < 0 else int(r) for r in rows], pa.int32())


def _status(index: KeyIndex, changed: np.ndarray) -> list[str]:
    out = np.where(changed, "changed", "unchanged").astype(object)
    out[index.old_row < 0], out[index.new_row < 0] = "added", "removed"
    return out.tolist()


def tokens_table(old: Side, new: Side, m: Match, d: EdgeDiff, rel_labels: list[str]) -> pa.Table:
    """One row per token of either program (see ``docs/diff-format.md``), in union-id order (OLD's tokens,
    then NEW's added ones), so that row ``u`` is ``m.tokens.keys[u]``."""
    t, n = m.tokens, m.tokens.size
    old_tok = m.tokens.old[old.edges.column("concept_id").to_numpy().astype(np.int64)]
    new_tok = m.tokens.new[new.edges.column("concept_id").to_numpy().astype(np.int64)]
    gained, lost = d.per(new_tok, d.gained_rows, n), d.per(old_tok, d.lost_rows, n)
    old_edges, new_edges = np.bincount(old_tok, minlength=n), np.bincount(new_tok, minlength=n)
    changed_relations = _changed_relations(d, m, n, rel_labels)
    table = pa.table(
        {
            "vocabulary": pa.array([k[0] for k in t.keys], pa.string()),
            "code": pa.array([k[1] for k in t.keys], pa.string()),
            "code_dotted": pa.array(_concept_column(t, old, new, "code_dotted"), pa.string()),
            "title": pa.array(_concept_column(t, old, new, "title"), pa.string()),
            "status": pa.array(_status(t, (gained + lost) > 0), pa.string()),
            "old_concept_id": _ids(t.old_row),
            "new_concept_id": _ids(t.new_row),
            "old_edges": pa.array(old_edges.astype(np.int64)),
            "new_edges": pa.array(new_edges.astype(np.int64)),
            "edges_gained": pa.array(gained.astype(np.int64)),
            "edges_lost": pa.array(lost.astype(np.int64)),
            "relations_changed": pa.array(changed_relations, pa.list_(pa.string())),
            "mapping_changed": pa.array(_mapping_changed(old, new, t), pa.bool_()),
        }
    )
    return table


def _concept_column(t: KeyIndex, old: Side, new: Side, name: str) -> list:
    """A ``concepts.parquet`` column per union token (NEW's value where NEW has the token)."""
    return by_union(t, old.concepts.column(name).to_pylist(), new.concepts.column(name).to_pylist())


def _changed_relations(d: EdgeDiff, m: Match, n: int, rel_labels: list[str]) -> list[list[str]]:
    """Per union token: the labels of the relations whose edges it gained or lost, sorted."""
    keys = np.concatenate([d.old_keys[d.lost_rows], d.new_keys[d.gained_rows]])
    tok, rel, _ = split_key(keys, m)
    out: list[set[str]] = [set() for _ in range(n)]
    for i, j in set(zip(tok.tolist(), rel.tolist(), strict=True)):
        out[i].add(rel_labels[j])
    return [sorted(s) for s in out]


def _mapping_values(side: Side) -> list[tuple]:
    c = side.concepts
    ids = [tuple(x) if x is not None else () for x in c.column("snomed_ids").to_pylist()]
    return list(
        zip(ids, c.column("mapping_source").to_pylist(), c.column("mapping_kind").to_pylist(), strict=True)
    )


def _mapping_fields_changed(t: KeyIndex, old: Side, new: Side) -> list[list[str] | None]:
    """Per union token in both programs: the mapping fields that differ; None for a token in one only."""
    ov, nv = _mapping_values(old), _mapping_values(new)
    out: list[list[str] | None] = []
    for o, n in zip(t.old_row, t.new_row, strict=True):
        out.append(
            None
            if o < 0 or n < 0
            else [f for f, a, b in zip(MAPPING_FIELDS, ov[o], nv[n], strict=True) if a != b]
        )
    return out


def _mapping_changed(old: Side, new: Side, t: KeyIndex) -> list[bool | None]:
    return [None if f is None else bool(f) for f in _mapping_fields_changed(t, old, new)]


def mappings_table(old: Side, new: Side, m: Match) -> pa.Table:
    """Codes (not special tokens) added, removed, or whose mapping fields differ, in (vocabulary, code)
    order."""
    t = m.tokens
    changed = _mapping_fields_changed(t, old, new)
    keep = [u for u, f in enumerate(changed) if t.keys[u][0] != SPECIAL and (f is None or f)]
    oc, nc = old.concepts, new.concepts
    titles, dotted = _concept_column(t, old, new, "title"), _concept_column(t, old, new, "code_dotted")
    status = _status(t, np.zeros(t.size, dtype=bool))
    table = pa.table(
        {
            "vocabulary": pa.array([t.keys[u][0] for u in keep], pa.string()),
            "code": pa.array([t.keys[u][1] for u in keep], pa.string()),
            "code_dotted": pa.array([dotted[u] for u in keep], pa.string()),
            "title": pa.array([titles[u] for u in keep], pa.string()),
            "change": pa.array([status[u] if changed[u] is None else "changed" for u in keep], pa.string()),
            "fields_changed": pa.array([changed[u] or [] for u in keep], pa.list_(pa.string())),
            **{
                f"{p}_{name}": pa.array(_at(rows, tab.column(name).to_pylist(), keep), tp)
                for name, tp in (
                    ("snomed_ids", pa.list_(pa.int64())),
                    ("mapping_source", pa.string()),
                    ("mapping_kind", pa.string()),
                )
                for p, tab, rows in (("old", oc, t.old_row), ("new", nc, t.new_row))
            },
        }
    )
    return table.sort_by([("vocabulary", "ascending"), ("code", "ascending")])


def edges_table(old: Side, new: Side, m: Match, d: EdgeDiff, status: dict[tuple[str, str], str]) -> pa.Table:
    """The lost (from OLD) and gained (from NEW) edges with readable labels."""
    parts = [_edge_rows(old, d.lost_rows, "lost", status), _edge_rows(new, d.gained_rows, "gained", status)]
    table = pa.concat_tables(parts)
    return table.sort_by(
        [
            (c, "ascending")
            for c in ("vocabulary", "code", "relation_label", "change", "atom_kind", "atom_key")
        ]
    )


def _take(table: pa.Table, name: str, rows: np.ndarray) -> pa.Array:
    """``table[name][rows]`` as one array."""
    return table.column(name).take(pa.array(rows, pa.int64())).combine_chunks()


def _edge_rows(side: Side, rows: np.ndarray, change: str, status: dict[tuple[str, str], str]) -> pa.Table:
    """The edges ``rows`` of ``side``, labelled from its own tables."""
    e = side.edges.take(pa.array(rows, pa.int64()))
    c = e.column("concept_id").to_numpy().astype(np.int64)
    r = e.column("relation_id").to_numpy().astype(np.int64)
    a = e.column("atom_id").to_numpy().astype(np.int64)
    cs, rs, at = side.concepts, side.relations, side.atoms
    keys = side.relation_keys()
    voc, code = _take(cs, "vocabulary", c), _take(cs, "code", c)
    return pa.table(
        {
            "change": pa.array([change] * len(rows), pa.string()),
            "vocabulary": voc,
            "code": code,
            "code_dotted": _take(cs, "code_dotted", c),
            "title": _take(cs, "title", c),
            "token_status": pa.array(
                [status[k] for k in zip(voc.to_pylist(), code.to_pylist(), strict=True)], pa.string()
            ),
            "relation_key": pa.array([keys[j] for j in r.tolist()], pa.string()),
            "relation_label": _take(rs, "label", r),
            "atom_kind": _take(at, "kind", a),
            "atom_key": _take(at, "key", a),
            "atom_label": _take(at, "label", a),
            "role_group": e.column("role_group").cast(pa.int32()),
            "provenance": e.column("provenance").cast(pa.string()),
            "source_sctid": e.column("source_sctid").cast(pa.int64()),
        }
    )


def _uses(side: Side, column: str, n: int) -> np.ndarray:
    """How many edges use each id of ``column`` (``atom_id`` or ``relation_id``)."""
    return np.bincount(side.edges.column(column).to_numpy().astype(np.int64), minlength=n)


def _at(rows: np.ndarray, values, keep: list[int]) -> list:
    """``values[rows[u]]`` for the union ids ``keep`` (None where the program lacks the key)."""
    return [None if rows[u] < 0 else values[rows[u]] for u in keep]


def _relabelled(t: KeyIndex, old_labels: list, new_labels: list) -> list[str]:
    """Per union id: ``added``, ``removed``, ``relabelled`` or ``unchanged``."""
    differ = np.array(
        [
            o >= 0 and n >= 0 and old_labels[o] != new_labels[n]
            for o, n in zip(t.old_row, t.new_row, strict=True)
        ],
        dtype=bool,
    )
    return ["relabelled" if s == "changed" else s for s in _status(t, differ)]


def _sides(
    t: KeyIndex, keep: list[int], name: str, old_values, new_values, tp: pa.DataType
) -> dict[str, pa.Array]:
    """``old_<name>`` and ``new_<name>`` columns for the union ids ``keep``."""
    return {
        f"old_{name}": pa.array(_at(t.old_row, old_values, keep), tp),
        f"new_{name}": pa.array(_at(t.new_row, new_values, keep), tp),
    }


def _side_columns(
    t: KeyIndex,
    keep: list[int],
    old: pa.Table,
    new: pa.Table,
    id_name: str,
    uses: tuple[np.ndarray, np.ndarray],
) -> dict[str, pa.Array]:
    """Labels, ids and edge counts on both sides, for the union ids ``keep``."""
    ids = np.arange(max(old.num_rows, new.num_rows))
    return {
        **_sides(
            t, keep, "label", old.column("label").to_pylist(), new.column("label").to_pylist(), pa.string()
        ),
        **_sides(t, keep, id_name, ids, ids, pa.int32()),
        **_sides(t, keep, "edges", uses[0].tolist(), uses[1].tolist(), pa.int64()),
    }


def atoms_table(old: Side, new: Side, m: Match) -> pa.Table:
    """Atoms added, removed or relabelled, in (kind, key) order."""
    t = m.atoms
    status = _relabelled(t, old.atoms.column("label").to_pylist(), new.atoms.column("label").to_pylist())
    keep = [u for u, s in enumerate(status) if s != "unchanged"]
    uses = (_uses(old, "atom_id", old.atoms.num_rows), _uses(new, "atom_id", new.atoms.num_rows))
    table = pa.table(
        {
            "change": pa.array([status[u] for u in keep], pa.string()),
            "kind": pa.array([t.keys[u][0] for u in keep], pa.string()),
            "key": pa.array([t.keys[u][1] for u in keep], pa.string()),
            **_side_columns(t, keep, old.atoms, new.atoms, "atom_id", uses),
        }
    )
    return table.sort_by([("kind", "ascending"), ("key", "ascending")])


def relations_table(old: Side, new: Side, m: Match, d: EdgeDiff) -> pa.Table:
    """Every relation of either program, with the edges it gained and lost, in (kind, key) order."""
    t = m.relations
    status = _relabelled(
        t, old.relations.column("label").to_pylist(), new.relations.column("label").to_pylist()
    )
    keep = list(range(t.size))
    kinds = by_union(t, old.relations.column("kind").to_pylist(), new.relations.column("kind").to_pylist())
    uses = (
        _uses(old, "relation_id", old.relations.num_rows),
        _uses(new, "relation_id", new.relations.num_rows),
    )
    _, rel_old, _ = split_key(d.old_keys, m)
    _, rel_new, _ = split_key(d.new_keys, m)
    table = pa.table(
        {
            "change": pa.array(status, pa.string()),
            "kind": pa.array(kinds, pa.string()),
            "key": pa.array(t.keys, pa.string()),
            **_side_columns(t, keep, old.relations, new.relations, "relation_id", uses),
            "edges_gained": pa.array(d.per(rel_new, d.gained_rows, t.size).astype(np.int64)),
            "edges_lost": pa.array(d.per(rel_old, d.lost_rows, t.size).astype(np.int64)),
        }
    )
    return table.sort_by([("kind", "ascending"), ("key", "ascending")])


# --- counts -----------------------------------------------------------------------------------------


def _tally(values: list) -> dict[str, int]:
    return dict(sorted(Counter(values).items()))


def diff_counts(old: Side, new: Side, tables: dict[str, pa.Table]) -> dict[str, Any]:
    """Every count of ``diff.json`` (see ``docs/diff-format.md``)."""
    tok, edges, atoms, rels, maps = (tables[f] for f in DIFF_FILES)
    status = tok.column("status").to_pylist()
    on_shared = [s in ("changed", "unchanged") for s in edges.column("token_status").to_pylist()]
    change = edges.column("change").to_pylist()
    rel_rows = [r for r in rels.to_pylist() if r["edges_gained"] or r["edges_lost"]]
    atom_rows = atoms.to_pylist()
    return {
        "tokens": {"old": old.concepts.num_rows, "new": new.concepts.num_rows, **_tally(status)},
        "tokens_by_vocabulary": {
            v: _tally(
                [s for s, w in zip(status, tok.column("vocabulary").to_pylist(), strict=True) if w == v]
            )
            for v in sorted(set(tok.column("vocabulary").to_pylist()))
        },
        "edges": {
            "old": old.edges.num_rows,
            "new": new.edges.num_rows,
            "gained": change.count("gained"),
            "lost": change.count("lost"),
            "gained_on_shared_tokens": sum(
                1 for c, s in zip(change, on_shared, strict=True) if s and c == "gained"
            ),
            "lost_on_shared_tokens": sum(
                1 for c, s in zip(change, on_shared, strict=True) if s and c == "lost"
            ),
        },
        "edges_by_relation": {
            r["new_label"] or r["old_label"]: {"gained": r["edges_gained"], "lost": r["edges_lost"]}
            for r in sorted(rel_rows, key=lambda r: -(r["edges_gained"] + r["edges_lost"]))
        },
        "atoms": {
            "old": old.atoms.num_rows,
            "new": new.atoms.num_rows,
            **_tally([r["change"] for r in atom_rows]),
            "added_by_kind": _tally([r["kind"] for r in atom_rows if r["change"] == "added"]),
            "removed_by_kind": _tally([r["kind"] for r in atom_rows if r["change"] == "removed"]),
        },
        "relations": {
            "old": old.relations.num_rows,
            "new": new.relations.num_rows,
            **_tally([c for c in rels.column("change").to_pylist() if c != "unchanged"]),
        },
        "mappings": {
            **_tally(maps.column("change").to_pylist()),
            **{f: sum(f in x for x in maps.column("fields_changed").to_pylist()) for f in MAPPING_FIELDS},
        },
    }
