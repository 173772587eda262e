"""Compare two compiled programs, and the vectors one trained model composes under each (``hrrbert diff``).

Everything is matched by key, never by id (ids are dense and differ between programs): a token by
(``vocabulary``, ``code``), an atom by (``kind``, ``key``), a relation by its key (the SCTID as text, or
the kind for ``identity`` and ``description``), and an edge by (token, relation key, atom). Edges are
compared as sets of those triples.

:func:`diff_programs` reads ``atoms``, ``relations``, ``concepts`` and ``edges`` of both programs
(each file's sha256 checked against its manifest), and writes one folder (``docs/diff-format.md``):

* ``tokens.parquet``: every token of either program: ``added``, ``removed``, ``changed`` (edges gained
  or lost) or ``unchanged``, with its edge counts and the relations whose edges changed;
* ``edges.parquet``: the gained and lost edges, with readable relation and atom labels;
* ``atoms.parquet``: atoms added, removed or relabelled; ``relations.parquet``: every relation, with
  the edges it gained and lost;
* ``mappings.parquet``: codes whose ``snomed_ids``, ``mapping_source`` or ``mapping_kind`` differ;
* with a model, ``vectors.parquet``: per token of both programs the cosine between the vector composed
  under OLD and under NEW with the model's trained atoms and relations, lowest first. The program the
  model was not trained on gets the trained vectors by key (:func:`hrr_kernel.carry_parameters`, init
  ``zero``): its new atoms and relations contribute nothing, so the cosine measures what the edges the
  two programs share (and those one of them lost) do to the vector. Only the HRR composition is
  compared (modes ``base``, ``freq``, ``add``, ``cat``; the frequency encoding and free tables are the
  same per token on both sides and are left out); ``unstructured`` models have none and are refused;
* ``diff.json``: both program ids and paths, the model, and every count.

The folder (default ``artifacts/diffs/<old_id>__<new_id>``) is written into a temporary folder beside
it and renamed into place; an existing folder is refused unless ``force`` is given and it holds an
earlier diff (its ``diff.json``).
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.data.folders import check_out, folder_written
from pipelines.errors import InputFileError, PipelineError

__all__ = ["DiffResult", "diff_programs", "summary_lines", "default_out", "DIFF_FILES", "RECORD_FILE"]

log = logging.getLogger(__name__)

RECORD_FILE = "diff.json"
DIFF_FILES = ("tokens.parquet", "edges.parquet", "atoms.parquet", "relations.parquet", "mappings.parquet")
VECTORS_FILE = "vectors.parquet"
DEFAULT_ROOT = Path("artifacts") / "diffs"
SPECIAL = "SPECIAL"
INIT_RULE = "zero"  # how the program the model was not trained on gets vectors for its new atoms
# file -> (required columns, optional columns filled with nulls when absent)
COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "atoms.parquet": (("atom_id", "kind", "key", "label"), ()),
    "relations.parquet": (("relation_id", "kind", "sctid", "label"), ()),
    "concepts.parquet": (
        ("concept_id", "vocabulary", "code", "code_dotted", "title", "snomed_ids"),
        ("mapping_source", "mapping_kind"),
    ),
    "edges.parquet": (("concept_id", "relation_id", "atom_id"), ("role_group", "provenance", "source_sctid")),
}
MAPPING_FIELDS = ("snomed_ids", "mapping_source", "mapping_kind")


# --- reading ----------------------------------------------------------------------------------------


@dataclass
class Side:
    """One program's tables, each sorted by its id column (row i = id i)."""

    program_id: str
    path: Path
    manifest: dict[str, Any]
    atoms: pa.Table
    relations: pa.Table
    concepts: pa.Table
    edges: pa.Table

    def relation_keys(self) -> list[str]:
        """Each relation's key: its SCTID as text, else its kind (as ``hrr_kernel`` matches relations)."""
        kinds = self.relations.column("kind").to_pylist()
        sctids = self.relations.column("sctid").to_pylist()
        return [k if s is None else str(int(s)) for s, k in zip(sctids, kinds, strict=True)]

    def atom_keys(self) -> list[tuple[str, str]]:
        return list(
            zip(self.atoms.column("kind").to_pylist(), self.atoms.column("key").to_pylist(), strict=True)
        )

    def token_keys(self) -> list[tuple[str, str]]:
        c = self.concepts
        return list(zip(c.column("vocabulary").to_pylist(), c.column("code").to_pylist(), strict=True))


def _verified_table(root: Path, manifest: dict[str, Any], name: str) -> pa.Table:
    """``name`` of the program at ``root``, after checking its sha256 against the manifest, with the columns
    :data:`COLUMNS` lists (optional ones as nulls when absent)."""
    entry = next(
        (f for f in manifest.get("files", []) if isinstance(f, dict) and f.get("path") == name), None
    )
    path = root / name
    if entry is None or not isinstance(entry.get("sha256"), str):
        raise InputFileError(path, "not listed with a sha256 in manifest.json", expected="a program file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputFileError(path, f"cannot be read ({e})") from e
    got = hashlib.sha256(data).hexdigest()
    if got != entry["sha256"]:
        raise InputFileError(
            path, "changed after the program was compiled", expected=f"sha256 {entry['sha256']}", found=got
        )
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as e:
        raise InputFileError(path, f"not a readable Parquet file ({e})") from e
    required, optional = COLUMNS[name]
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise InputFileError(path, f"missing column(s) {missing}", expected=", ".join(required))
    for c in optional:
        if c not in table.column_names:
            table = table.append_column(c, pa.nulls(table.num_rows))
    return table.select([*required, *optional])


def read_side(path: str | Path) -> Side:
    """The program at ``path`` (a program folder, or a release folder: its newest program, as
    :func:`hrr_kernel.load_program` picks), its four tables read and verified."""
    from hrr_kernel import resolve_program
    from ontology_compiler.program import read_manifest

    root = resolve_program(path)
    manifest = read_manifest(root)
    tables = {}
    for name in COLUMNS:
        id_col = COLUMNS[name][0][0]
        t = _verified_table(root, manifest, name)
        tables[name.removesuffix(".parquet")] = t if name == "edges.parquet" else t.sort_by(id_col)
    side = Side(str(manifest.get("program_id")), root, manifest, **tables)
    _check_unique(side)
    return side


def _check_unique(side: Side) -> None:
    """Keys must name one row each, or the diff would be ambiguous."""
    for what, keys in (("concepts", side.token_keys()), ("atoms", side.atom_keys()),
                       ("relations", side.relation_keys())):  # fmt: skip
        dup = [k for k, n in Counter(keys).items() if n > 1]
        if dup:
            raise InputFileError(
                side.path / f"{what}.parquet", f"{len(dup)} key(s) occur twice, e.g. {dup[:3]}",
                expected="one row per key",
            )  # fmt: skip


# --- matching by key --------------------------------------------------------------------------------


@dataclass
class KeyIndex:
    """The union of two programs' keys: ``keys[u]`` is key ``u``; ``old`` / ``new`` map each program's id
    to its union id; ``old_row`` / ``new_row`` map a union id back to the id (-1: absent)."""

    keys: list
    old: np.ndarray  # (n_old,) int64
    new: np.ndarray  # (n_new,) int64
    old_row: np.ndarray  # (U,) int64
    new_row: np.ndarray  # (U,) int64

    @property
    def size(self) -> int:
        return len(self.keys)


def key_index(old_keys: list, new_keys: list) -> KeyIndex:
    """Match two id-ordered key lists (old keys first, then the new ones in their order)."""
    union: dict[Any, int] = {}
    for k in (*old_keys, *new_keys):
        union.setdefault(k, len(union))
    old = np.array([union[k] for k in old_keys], dtype=np.int64)
    new = np.array([union[k] for k in new_keys], dtype=np.int64)
    old_row = np.full(len(union), -1, dtype=np.int64)
    new_row = np.full(len(union), -1, dtype=np.int64)
    old_row[old], new_row[new] = np.arange(old.size), np.arange(new.size)
    return KeyIndex(list(union), old, new, old_row, new_row)


@dataclass
class Match:
    """Tokens, atoms and relations of two programs matched by key."""

    tokens: KeyIndex
    atoms: KeyIndex
    relations: KeyIndex


def match(old: Side, new: Side) -> Match:
    return Match(
        key_index(old.token_keys(), new.token_keys()),
        key_index(old.atom_keys(), new.atom_keys()),
        key_index(old.relation_keys(), new.relation_keys()),
    )


def _union_ids(index: KeyIndex, is_old: bool) -> np.ndarray:
    return index.old if is_old else index.new


def edge_keys(side: Side, tokens: KeyIndex, atoms: KeyIndex, relations: KeyIndex, is_old: bool) -> np.ndarray:
    """One int64 per edge of ``side``: (token, relation, atom) in union ids, in ``side.edges`` order."""
    c = _union_ids(tokens, is_old)[side.edges.column("concept_id").to_numpy().astype(np.int64)]
    r = _union_ids(relations, is_old)[side.edges.column("relation_id").to_numpy().astype(np.int64)]
    a = _union_ids(atoms, is_old)[side.edges.column("atom_id").to_numpy().astype(np.int64)]
    return (c * relations.size + r) * atoms.size + a


def _split_key(key: np.ndarray, m: Match) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token, relation, atom) union ids of edge keys."""
    a = key % m.atoms.size
    rest = key // m.atoms.size
    return rest // m.relations.size, rest % m.relations.size, a


@dataclass
class EdgeDiff:
    """Which edges of each program the other lacks (as rows of each program's ``edges`` table)."""

    old_keys: np.ndarray  # (E_old,) edge keys
    new_keys: np.ndarray  # (E_new,)
    lost_rows: np.ndarray  # rows of old.edges not in new
    gained_rows: np.ndarray  # rows of new.edges not in old

    def per(self, ids: np.ndarray, rows: np.ndarray, size: int) -> np.ndarray:
        """How many of the edge ``rows`` fall on each union id, given ``ids`` (one union id per edge)."""
        return np.bincount(ids[rows], minlength=size) if rows.size else np.zeros(size, dtype=np.int64)


def diff_edges(old: Side, new: Side, m: Match) -> EdgeDiff:
    """Compare the two edge sets by key (:func:`edge_keys`)."""
    if m.tokens.size * m.relations.size * m.atoms.size >= 2**63:
        raise PipelineError(
            f"{m.tokens.size} tokens x {m.relations.size} relations x {m.atoms.size} atoms do not fit one int64 "
            "edge key"
        )
    ok = edge_keys(old, m.tokens, m.atoms, m.relations, True)
    nk = edge_keys(new, m.tokens, m.atoms, m.relations, False)
    return EdgeDiff(ok, nk, np.flatnonzero(~np.isin(ok, nk)), np.flatnonzero(~np.isin(nk, ok)))


# --- tables -----------------------------------------------------------------------------------------


def _by_union(index: KeyIndex, old_values: list, new_values: list) -> list:
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
    table = pa.table({
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
    })  # fmt: skip
    return table


def _concept_column(t: KeyIndex, old: Side, new: Side, name: str) -> list:
    """A ``concepts.parquet`` column per union token (NEW's value where NEW has the token)."""
    return _by_union(t, old.concepts.column(name).to_pylist(), new.concepts.column(name).to_pylist())


def _changed_relations(d: EdgeDiff, m: Match, n: int, rel_labels: list[str]) -> list[list[str]]:
    """Per union token: the labels of the relations whose edges it gained or lost, sorted."""
    keys = np.concatenate([d.old_keys[d.lost_rows], d.new_keys[d.gained_rows]])
    tok, rel, _ = _split_key(keys, m)
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
    """Codes (not special tokens) added, removed, or whose mapping fields differ, in (vocabulary, code) order."""
    t = m.tokens
    changed = _mapping_fields_changed(t, old, new)
    keep = [u for u, f in enumerate(changed) if t.keys[u][0] != SPECIAL and (f is None or f)]
    oc, nc = old.concepts, new.concepts
    titles, dotted = _concept_column(t, old, new, "title"), _concept_column(t, old, new, "code_dotted")
    status = _status(t, np.zeros(t.size, dtype=bool))
    table = pa.table({
        "vocabulary": pa.array([t.keys[u][0] for u in keep], pa.string()),
        "code": pa.array([t.keys[u][1] for u in keep], pa.string()),
        "code_dotted": pa.array([dotted[u] for u in keep], pa.string()),
        "title": pa.array([titles[u] for u in keep], pa.string()),
        "change": pa.array([status[u] if changed[u] is None else "changed" for u in keep], pa.string()),
        "fields_changed": pa.array([changed[u] or [] for u in keep], pa.list_(pa.string())),
        **{f"{p}_{name}": pa.array(_at(rows, tab.column(name).to_pylist(), keep), tp)
           for name, tp in (("snomed_ids", pa.list_(pa.int64())), ("mapping_source", pa.string()),
                            ("mapping_kind", pa.string()))
           for p, tab, rows in (("old", oc, t.old_row), ("new", nc, t.new_row))},
    })  # fmt: skip
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
    return pa.table({
        "change": pa.array([change] * len(rows), pa.string()),
        "vocabulary": voc,
        "code": code,
        "code_dotted": _take(cs, "code_dotted", c),
        "title": _take(cs, "title", c),
        "token_status": pa.array([status[k] for k in zip(voc.to_pylist(), code.to_pylist(), strict=True)], pa.string()),
        "relation_key": pa.array([keys[j] for j in r.tolist()], pa.string()),
        "relation_label": _take(rs, "label", r),
        "atom_kind": _take(at, "kind", a),
        "atom_key": _take(at, "key", a),
        "atom_label": _take(at, "label", a),
        "role_group": e.column("role_group").cast(pa.int32()),
        "provenance": e.column("provenance").cast(pa.string()),
        "source_sctid": e.column("source_sctid").cast(pa.int64()),
    })  # fmt: skip


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


def _side_columns(t: KeyIndex, keep: list[int], old: pa.Table, new: pa.Table, id_name: str,
                  uses: tuple[np.ndarray, np.ndarray]) -> dict[str, pa.Array]:  # fmt: skip
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
    table = pa.table({
        "change": pa.array([status[u] for u in keep], pa.string()),
        "kind": pa.array([t.keys[u][0] for u in keep], pa.string()),
        "key": pa.array([t.keys[u][1] for u in keep], pa.string()),
        **_side_columns(t, keep, old.atoms, new.atoms, "atom_id", uses),
    })  # fmt: skip
    return table.sort_by([("kind", "ascending"), ("key", "ascending")])


def relations_table(old: Side, new: Side, m: Match, d: EdgeDiff) -> pa.Table:
    """Every relation of either program, with the edges it gained and lost, in (kind, key) order."""
    t = m.relations
    status = _relabelled(
        t, old.relations.column("label").to_pylist(), new.relations.column("label").to_pylist()
    )
    keep = list(range(t.size))
    kinds = _by_union(t, old.relations.column("kind").to_pylist(), new.relations.column("kind").to_pylist())
    uses = (
        _uses(old, "relation_id", old.relations.num_rows),
        _uses(new, "relation_id", new.relations.num_rows),
    )
    _, rel_old, _ = _split_key(d.old_keys, m)
    _, rel_new, _ = _split_key(d.new_keys, m)
    table = pa.table({
        "change": pa.array(status, pa.string()),
        "kind": pa.array(kinds, pa.string()),
        "key": pa.array(t.keys, pa.string()),
        **_side_columns(t, keep, old.relations, new.relations, "relation_id", uses),
        "edges_gained": pa.array(d.per(rel_new, d.gained_rows, t.size).astype(np.int64)),
        "edges_lost": pa.array(d.per(rel_old, d.lost_rows, t.size).astype(np.int64)),
    })  # fmt: skip
    return table.sort_by([("kind", "ascending"), ("key", "ascending")])


# --- vectors under a trained model ------------------------------------------------------------------


def _model_record(model: str | Path, old: Side, new: Side) -> tuple[Path, dict[str, Any]]:
    """The model folder and what the diff needs to know of it; refuses a model of neither program, or one
    without an HRR composition."""
    from model import HRRBert
    from pipelines.train.finetune import model_dir

    mdir = model_dir(model)
    meta = HRRBert.read_config(mdir)
    pid, mode = meta.get("program_id"), meta["config"].get("mode")
    if pid not in (old.program_id, new.program_id):
        raise PipelineError(
            f"{mdir}: the model was trained on program {pid!r}, but the diff compares {old.program_id} (OLD) "
            f"and {new.program_id} (NEW); pass a model of one of them"
        )
    if mode == "unstructured":
        raise PipelineError(
            f"{mdir}: mode 'unstructured' learns a free vector per token and composes nothing, so there is no "
            "HRR vector to compare across programs; pass a model of mode base, freq, add or cat"
        )
    trained_on = "old" if pid == old.program_id else "new"
    return mdir, {
        "path": str(mdir),
        "program_id": pid,
        "mode": mode,
        "trained_on": trained_on,
        "init": INIT_RULE,
    }


def composed_vectors(mdir: Path, record: dict[str, Any], old: Side, new: Side):
    """``(C_old, C_new)``, float64 ``(N_old, H)`` and ``(N_new, H)``: the model's HRR composition under each
    program; the other program's atoms and relations carried by key (:data:`INIT_RULE` for new ones)."""
    import torch

    from hrr_kernel import carry_parameters, compose, load_program
    from model import HRRBert

    programs = {"old": load_program(old.path), "new": load_program(new.path)}
    trained_on = record["trained_on"]
    other = "new" if trained_on == "old" else "old"
    token = HRRBert.from_pretrained(mdir, programs[trained_on]).embeddings.token
    with torch.no_grad():
        atoms, relations = token.atoms.detach().double(), token.relations.detach().double()
        carried = carry_parameters(programs[trained_on], programs[other], atoms, relations, init=INIT_RULE)
        out = {
            trained_on: compose(programs[trained_on], atoms, relations),
            other: compose(programs[other], carried.atoms, carried.relations),
        }
    record.update(dim=int(atoms.shape[1]), carried=carried.counts())
    return out["old"].numpy(), out["new"].numpy()


def vectors_table(tokens: pa.Table, m: Match, c_old: np.ndarray, c_new: np.ndarray) -> pa.Table:
    """Per token of both programs (``tokens`` in union order): the cosine between its two vectors, lowest
    first (null, first of all, where one vector is zero), ranked from 1."""
    both = np.flatnonzero((m.tokens.old_row >= 0) & (m.tokens.new_row >= 0))
    a, b = c_old[m.tokens.old_row[both]], c_new[m.tokens.new_row[both]]
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    ok = (na > 0) & (nb > 0)
    cos = np.full(both.size, np.nan)
    cos[ok] = (a[ok] * b[ok]).sum(1) / (na[ok] * nb[ok])
    cols = ["vocabulary", "code", "code_dotted", "title", "status", "old_concept_id", "new_concept_id",
            "edges_gained", "edges_lost"]  # fmt: skip
    table = tokens.take(pa.array(both, pa.int64())).select(cols)
    table = table.append_column("old_norm", pa.array(na)).append_column("new_norm", pa.array(nb))
    table = table.append_column("cosine", pa.array(np.clip(cos, -1.0, 1.0), pa.float64(), mask=~ok))
    table = table.append_column("_order", pa.array(np.where(ok, cos, -np.inf)))  # zero vectors first
    table = table.sort_by([("_order", "ascending"), ("vocabulary", "ascending"), ("code", "ascending")])
    table = table.drop_columns(["_order"])
    return table.append_column("rank", pa.array(np.arange(1, table.num_rows + 1, dtype=np.int32)))


def vector_counts(vectors: pa.Table) -> dict[str, Any]:
    """How far the vectors moved: tokens compared, zero vectors, cosine quantiles, tokens below thresholds."""
    cos = vectors.column("cosine").to_numpy(zero_copy_only=False)
    cos = cos[~np.isnan(cos)]
    q = np.quantile(cos, [0.0, 0.01, 0.5]).tolist() if cos.size else [None] * 3
    changed = vectors.column("status").to_numpy(zero_copy_only=False) == "changed"
    return {
        "tokens": vectors.num_rows,
        "zero_vector": vectors.num_rows - int(cos.size),
        "mean_cosine": float(cos.mean()) if cos.size else None,
        "min_cosine": q[0],
        "p01_cosine": q[1],
        "median_cosine": q[2],
        "below_0_99": int((cos < 0.99).sum()),
        "below_0_9": int((cos < 0.9).sum()),
        "changed_tokens": int(changed.sum()),
    }


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
            v: _tally([s for s, w in zip(status, tok.column("vocabulary").to_pylist(), strict=True) if w == v])
            for v in sorted(set(tok.column("vocabulary").to_pylist()))
        },
        "edges": {
            "old": old.edges.num_rows, "new": new.edges.num_rows,
            "gained": change.count("gained"), "lost": change.count("lost"),
            "gained_on_shared_tokens": sum(1 for c, s in zip(change, on_shared, strict=True) if s and c == "gained"),
            "lost_on_shared_tokens": sum(1 for c, s in zip(change, on_shared, strict=True) if s and c == "lost"),
        },
        "edges_by_relation": {
            r["new_label"] or r["old_label"]: {"gained": r["edges_gained"], "lost": r["edges_lost"]}
            for r in sorted(rel_rows, key=lambda r: -(r["edges_gained"] + r["edges_lost"]))
        },
        "atoms": {
            "old": old.atoms.num_rows, "new": new.atoms.num_rows, **_tally([r["change"] for r in atom_rows]),
            "added_by_kind": _tally([r["kind"] for r in atom_rows if r["change"] == "added"]),
            "removed_by_kind": _tally([r["kind"] for r in atom_rows if r["change"] == "removed"]),
        },
        "relations": {"old": old.relations.num_rows, "new": new.relations.num_rows,
                      **_tally([c for c in rels.column("change").to_pylist() if c != "unchanged"])},
        "mappings": {
            **_tally(maps.column("change").to_pylist()),
            **{f: sum(f in x for x in maps.column("fields_changed").to_pylist()) for f in MAPPING_FIELDS},
        },
    }  # fmt: skip


# --- writing ----------------------------------------------------------------------------------------


def default_out(old_id: str, new_id: str) -> Path:
    """``artifacts/diffs/<old_id>__<new_id>``."""
    return DEFAULT_ROOT / f"{old_id}__{new_id}"


def _write_folder(out: Path, tables: dict[str, pa.Table], record: dict[str, Any]) -> None:
    """Write the tables and ``diff.json`` into a temporary folder beside ``out``, then rename it into place
    (an earlier diff there is moved aside first and removed after)."""
    from pipelines.train.runtime import write_json

    meta = {b"old_program_id": record["old"]["program_id"].encode(),
            b"new_program_id": record["new"]["program_id"].encode()}  # fmt: skip
    with folder_written(out, "diff") as tmp:
        for name, table in tables.items():
            pq.write_table(table.replace_schema_metadata(meta), tmp / name, compression="zstd")
        write_json(tmp / RECORD_FILE, record)


# --- the diff ---------------------------------------------------------------------------------------


@dataclass
class DiffResult:
    """What :func:`diff_programs` compared and wrote."""

    out: Path
    old_id: str
    new_id: str
    old_path: Path
    new_path: Path
    counts: dict[str, Any]
    tokens: pa.Table  # tokens.parquet
    vectors: pa.Table | None  # vectors.parquet (with a model)
    model: dict[str, Any] | None  # path, program_id, mode, trained_on, init, dim, carried, counts
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _side_record(side: Side) -> dict[str, Any]:
    release = side.manifest.get("release") if isinstance(side.manifest.get("release"), dict) else {}
    return {"program_id": side.program_id, "path": str(side.path), "release": release.get("name"),
            "as_of": release.get("as_of"), "date": release.get("date")}  # fmt: skip


def diff_programs(
    old: str | Path, new: str | Path, *, out: str | Path | None = None, model: str | Path | None = None,
    force: bool = False,
) -> DiffResult:  # fmt: skip
    """Compare the programs ``old`` and ``new`` (program or release folders) and write the diff folder
    ``out`` (default :func:`default_out`); with ``model`` (a saved model folder, or its pretraining run, whose
    program is ``old`` or ``new``) also the per-token cosines. See the module docstring.

    Raises :class:`PipelineError` (or an ``hrr_kernel`` / ``model`` error) naming what is wrong; nothing is
    left under ``out`` on failure.
    """
    import time

    from pipelines.train.runtime import now_iso

    start = time.perf_counter()
    a, b = read_side(old), read_side(new)
    target = Path(out) if out is not None else default_out(a.program_id, b.program_id)
    check_out(target, force, record=RECORD_FILE, what="diff")  # before any work
    mdir, record = _model_record(model, a, b) if model is not None else (None, None)
    m = match(a, b)
    d = diff_edges(a, b, m)
    rel_labels = _by_union(
        m.relations, a.relations.column("label").to_pylist(), b.relations.column("label").to_pylist()
    )
    tokens_u = tokens_table(a, b, m, d, rel_labels)
    status = dict(zip(m.tokens.keys, tokens_u.column("status").to_pylist(), strict=True))
    tables = {
        "tokens.parquet": tokens_u.sort_by([("vocabulary", "ascending"), ("code", "ascending")]),
        "edges.parquet": edges_table(a, b, m, d, status),
        "atoms.parquet": atoms_table(a, b, m),
        "relations.parquet": relations_table(a, b, m, d),
        "mappings.parquet": mappings_table(a, b, m),
    }
    counts = diff_counts(a, b, tables)
    vectors = None
    if mdir is not None:
        vectors = vectors_table(tokens_u, m, *composed_vectors(mdir, record, a, b))
        tables[VECTORS_FILE] = vectors
        record["counts"] = vector_counts(vectors)
    files = [*tables, RECORD_FILE]
    diff_record = {"kind": "program_diff", "old": _side_record(a), "new": _side_record(b), "model": record,
                   "counts": counts, "files": files, "created_at": now_iso()}  # fmt: skip
    _write_folder(target, tables, diff_record)
    seconds = time.perf_counter() - start
    log.info("diff of %s and %s written to %s in %.1f s", a.program_id, b.program_id, target, seconds)
    return DiffResult(target, a.program_id, b.program_id, a.path, b.path, counts, tables["tokens.parquet"],
                      vectors, record, files, seconds)  # fmt: skip


# --- the printed summary ----------------------------------------------------------------------------


def top_changed(tokens: pa.Table, k: int) -> list[dict[str, Any]]:
    """The ``k`` tokens of both programs with the most edges gained plus lost (ties by code)."""
    rows = [r for r in tokens.to_pylist() if r["status"] == "changed"]
    rows.sort(key=lambda r: (-(r["edges_gained"] + r["edges_lost"]), r["vocabulary"], r["code"]))
    return rows[:k]


def _n(x: int) -> str:
    return f"{x:,}"


def _kinds(by_kind: dict[str, int]) -> str:
    return f" ({', '.join(f'{k} {_n(v)}' for k, v in by_kind.items())})" if by_kind else ""


def _token_line(r: dict[str, Any], lead: str = "") -> str:
    return f"    {lead}{r['vocabulary']}:{r['code_dotted']}  +{r['edges_gained']} -{r['edges_lost']}  {r['title'] or ''}"


def summary_lines(r: DiffResult, top: int = 10) -> list[str]:
    """What ``hrrbert diff`` prints: the counts, the ``top`` most changed tokens (and, with a model, the
    ``top`` lowest cosines), and where the tables went."""
    c = r.counts
    t, e, a, rel, mp = c["tokens"], c["edges"], c["atoms"], c["relations"], c["mappings"]
    by_rel = ", ".join(
        f"{k} +{_n(v['gained'])}/-{_n(v['lost'])}" for k, v in list(c["edges_by_relation"].items())[:6]
    )
    lines = [
        f"diff of program {r.old_id} (OLD, {r.old_path}) and {r.new_id} (NEW, {r.new_path})",
        f"  tokens: {_n(t['old'])} -> {_n(t['new'])}: {_n(t.get('added', 0))} added, {_n(t.get('removed', 0))} "
        f"removed, {_n(t.get('changed', 0))} changed, {_n(t.get('unchanged', 0))} unchanged",
        f"  edges: {_n(e['old'])} -> {_n(e['new'])}: {_n(e['gained'])} gained, {_n(e['lost'])} lost "
        f"({_n(e['gained_on_shared_tokens'])} and {_n(e['lost_on_shared_tokens'])} on tokens in both)",
        f"    by relation: {by_rel or 'none'}",
        f"  atoms: {_n(a['old'])} -> {_n(a['new'])}: {_n(a.get('added', 0))} added{_kinds(a['added_by_kind'])}, "
        f"{_n(a.get('removed', 0))} removed{_kinds(a['removed_by_kind'])}, {_n(a.get('relabelled', 0))} relabelled",
        f"  relations: {_n(rel['old'])} -> {_n(rel['new'])}: {_n(rel.get('added', 0))} added, "
        f"{_n(rel.get('removed', 0))} removed, {_n(rel.get('relabelled', 0))} relabelled",
        f"  mappings: {_n(mp.get('changed', 0))} codes in both changed ("
        + ", ".join(f"{f} {_n(mp[f])}" for f in MAPPING_FIELDS) + f"); {_n(mp.get('added', 0))} codes added, "
        f"{_n(mp.get('removed', 0))} removed",
    ]  # fmt: skip
    most = top_changed(r.tokens, top)
    if most:
        lines.append(f"  most changed tokens (edges gained/lost), top {len(most)}:")
        lines += [_token_line(x) for x in most]
    if r.vectors is not None and r.model is not None:
        lines += _vector_lines(r, top)
    lines.append(f"  wrote {r.out}: {', '.join(r.files)} ({r.seconds:.1f} s)")
    return lines


def _vector_lines(r: DiffResult, top: int) -> list[str]:
    m, v = r.model, r.model["counts"]
    other = "OLD" if m["trained_on"] == "new" else "NEW"

    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4f}"

    lines = [
        f"  vectors of model {m['path']} (mode {m['mode']}, trained on {m['trained_on'].upper()}; {other}'s new "
        f"atoms and relations set to zero): {_n(v['tokens'])} tokens in both, cosine mean {f(v['mean_cosine'])}, "
        f"median {f(v['median_cosine'])}, min {f(v['min_cosine'])}; {_n(v['below_0_99'])} below 0.99, "
        f"{_n(v['below_0_9'])} below 0.9, {_n(v['zero_vector'])} with a zero vector",
        f"  lowest cosine, top {min(top, r.vectors.num_rows)}:",
    ]  # fmt: skip
    for x in r.vectors.slice(0, top).to_pylist():
        cos = "zero vector" if x["cosine"] is None else f"{x['cosine']:.4f}"
        lines.append(_token_line(x, f"{cos}  "))
    return lines
