"""Two programs read and matched by key for :mod:`pipelines.ontology.diff`: tokens by (vocabulary, code),
atoms by (kind, key), relations by key, and their edge sets compared as (token, relation, atom) triples."""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.errors import InputFileError, PipelineError

__all__ = [
    "SPECIAL",
    "MAPPING_FIELDS",
    "Side",
    "read_side",
    "KeyIndex",
    "key_index",
    "Match",
    "match",
    "edge_keys",
    "split_key",
    "EdgeDiff",
    "diff_edges",
]


SPECIAL = "SPECIAL"
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
LABEL_KEYED_KINDS = ("icd_hierarchy",)  # relation kinds keyed by label (hrr_kernel.program.LABEL_KEYED_KINDS)


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
        """Each relation's key: its SCTID as text, else its label for ``icd_hierarchy`` relations (one per
        ICD level), else its kind (as ``hrr_kernel`` matches relations)."""
        kinds = self.relations.column("kind").to_pylist()
        sctids = self.relations.column("sctid").to_pylist()
        labels = self.relations.column("label").to_pylist()
        return [
            str(int(s)) if s is not None else str(lab) if k in LABEL_KEYED_KINDS else k
            for s, k, lab in zip(sctids, kinds, labels, strict=True)
        ]

    def atom_keys(self) -> list[tuple[str, str]]:
        return list(
            zip(self.atoms.column("kind").to_pylist(), self.atoms.column("key").to_pylist(), strict=True)
        )

    def token_keys(self) -> list[tuple[str, str]]:
        c = self.concepts
        return list(zip(c.column("vocabulary").to_pylist(), c.column("code").to_pylist(), strict=True))


def _read_listed(path: Path, listed: object, chunk: int = 1 << 22) -> bytes:
    """The bytes of the program file ``path``, read in chunks and no further than the manifest's ``bytes``
    (``listed``): a device (``/dev/zero``), a FIFO or a folder is refused before reading, a file longer
    than the manifest says is refused before it is read whole."""
    if not path.is_file():
        what = "not a regular file (a device, FIFO or folder)" if path.exists() else "missing"
        raise InputFileError(path, f"{what}; expected the program file manifest.json lists")
    limit = listed if isinstance(listed, int) and not isinstance(listed, bool) else None
    parts: list[bytes] = []
    seen = 0
    try:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                seen += len(block)
                if limit is not None and seen > limit:
                    raise InputFileError(
                        path,
                        f"holds more than the {limit:,} bytes manifest.json lists (changed after compiling)",
                    )
                parts.append(block)
    except OSError as e:
        raise InputFileError(path, f"cannot be read ({e})") from e
    return b"".join(parts)


def _verified_table(root: Path, manifest: dict[str, Any], name: str) -> pa.Table:
    """``name`` of the program at ``root``, after checking its sha256 against the manifest, with the columns
    :data:`COLUMNS` lists (optional ones as nulls when absent)."""
    entry = next(
        (f for f in manifest.get("files", []) if isinstance(f, dict) and f.get("path") == name), None
    )
    path = root / name
    if entry is None or not isinstance(entry.get("sha256"), str):
        raise InputFileError(path, "not listed with a sha256 in manifest.json", expected="a program file")
    data = _read_listed(path, entry.get("bytes"))
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
    from ontology_compiler.api import read_manifest

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
    for what, keys in (
        ("concepts", side.token_keys()),
        ("atoms", side.atom_keys()),
        ("relations", side.relation_keys()),
    ):
        dup = [k for k, n in Counter(keys).items() if n > 1]
        if dup:
            raise InputFileError(
                side.path / f"{what}.parquet",
                f"{len(dup)} key(s) occur twice, e.g. {dup[:3]}",
                expected="one row per key",
            )


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


def split_key(key: np.ndarray, m: Match) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
            f"{m.tokens.size} tokens x {m.relations.size} relations x {m.atoms.size} atoms do not fit one "
            "int64 edge key"
        )
    ok = edge_keys(old, m.tokens, m.atoms, m.relations, True)
    nk = edge_keys(new, m.tokens, m.atoms, m.relations, False)
    return EdgeDiff(ok, nk, np.flatnonzero(~np.isin(ok, nk)), np.flatnonzero(~np.isin(nk, ok)))
