"""Program format 1: build the id-assigned tables and write them atomically with a manifest.

Ids are deterministic: special tokens first, then SNOMED concept atoms by SCTID, then words in byte
order, then ICD classification nodes (:mod:`icd_hierarchy`) by key in byte order; relations identity,
description, is-a, then attributes by SCTID, then the ICD hierarchy's levels; concepts (tokens) special
tokens first, then by (vocabulary, code). Edges are stored sorted by (relation_id, slot, concept_id) so each
(relation, slot) slice is a contiguous run of distinct concepts. The format is described in
``docs/program-format.md``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import rf2_schema as S
from .artifact import FORMAT_VERSION, publish, read_json_manifest, verify_manifest_files
from .errors import OntologyCompilerError, OutputExistsError, ProgramFormatError, ProgramWriteError
from .graph import DESCRIPTION_KEY, IDENTITY_KEY, TOKEN_WORDS_SCHEMA
from .icd_hierarchy import ATOM_KIND as ICD_ATOM_KIND
from .icd_hierarchy import RELATION_KIND as ICD_RELATION_KIND
from .icd_hierarchy import RELATION_LABELS as ICD_RELATION_LABELS
from .memory import give_back
from .order import stable_order
from .words import strip_semantic_tag

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")
EDGE_KEY = ["concept_id", "relation_id", "atom_id"]  # an edge is unique by these
WRITE_THREADS = 1  # tables encoded at once (one beside the compile: less memory, no slower on two cores)


def build_tables(
    tokens: pa.Table,
    snomed_rel_edges: pa.Table,
    snomed_word_edges: pa.Table,
    token_snomed: pa.Table,
    concept_labels: pa.Table,
    token_words: pa.Table | None = None,
    icd_edges: pa.Table | None = None,
) -> dict[str, pa.Table]:
    """Assign ids and build atoms, relations, concepts, edges and slices.

    ``tokens``: one row per ICD token (vocabulary, code, code_dotted, title, snomed_ids, mapping_source,
    mapping_kind, chapter), any order. ``snomed_rel_edges``: (sctid, relation_key, atom_sctid,
    role_group, provenance). ``snomed_word_edges``: (sctid, word, provenance). ``token_snomed``: chosen
    (vocabulary, code, sctid). ``concept_labels``: (sctid, fsn, preferred) for atom labels.
    ``token_words``: (vocabulary, code, word) bound to tokens directly (the ICD title fallback).
    ``icd_edges``: the ICD hierarchy (``icd_hierarchy.EDGES_SCHEMA``: vocabulary, code, relation, key,
    label, provenance), or None for a program without it (no ``icd`` atoms, no ``icd_hierarchy`` relations).
    """
    if token_words is None:
        token_words = TOKEN_WORDS_SCHEMA.empty_table()
    atom_sctids = np.unique(snomed_rel_edges["atom_sctid"].to_numpy())
    words = pc.unique(
        pa.concat_arrays([snomed_word_edges["word"].combine_chunks(), token_words["word"].combine_chunks()])
    ).sort()
    nodes = _icd_nodes(icd_edges)
    atoms = _atoms(atom_sctids, words, concept_labels, nodes)
    rel_keys = _relation_keys(snomed_rel_edges)
    concepts = _concepts(tokens)
    ids = _AtomIds(atom_sctids, words, rel_keys, nodes["key"])
    per_sctid = _edges_per_sctid(snomed_rel_edges, snomed_word_edges, ids)
    edges = _token_edges(concepts, token_snomed, per_sctid, token_words, ids)
    if icd_edges is not None:
        edges = pa.concat_tables([edges, _icd_token_edges(concepts, icd_edges, ids)])
    edges = _with_slots(edges)
    slices = _slices(edges)
    relations = _relations(rel_keys, concept_labels, edges, icd_edges is not None)
    return {"atoms": atoms, "relations": relations, "concepts": concepts, "edges": edges, "slices": slices}


def _icd_nodes(icd_edges: pa.Table | None) -> pa.Table:
    """The ICD nodes the hierarchy edges name, ``(key, label)`` sorted by key in byte order."""
    if icd_edges is None or icd_edges.num_rows == 0:
        return pa.table({"key": pa.array([], pa.string()), "label": pa.array([], pa.string())})
    nodes = icd_edges.group_by("key", use_threads=False).aggregate([("label", "first")])
    return nodes.rename_columns(["key", "label"]).sort_by("key")


def _atoms(atom_sctids: np.ndarray, words: pa.Array, concept_labels: pa.Table, nodes: pa.Table) -> pa.Table:
    """Special tokens, then SNOMED concept atoms by SCTID, then words in byte order, then ICD nodes by key."""
    n_special, n_ca, n_w, n_icd = len(SPECIAL_TOKENS), len(atom_sctids), len(words), nodes.num_rows
    lab = concept_labels.filter(pc.is_in(concept_labels["sctid"], value_set=pa.array(atom_sctids)))
    lab = pa.table({"sctid": pa.array(atom_sctids)}).join(lab, keys="sctid").sort_by("sctid")
    concept_label = pc.coalesce(
        lab["preferred"], strip_semantic_tag(lab["fsn"]), pc.cast(lab["sctid"], pa.string())
    )
    specials = pa.array(SPECIAL_TOKENS, pa.string())
    return pa.table(
        {
            "atom_id": pa.array(np.arange(n_special + n_ca + n_w + n_icd, dtype=np.int32)),
            "kind": pa.array(
                ["special"] * n_special + ["concept"] * n_ca + ["word"] * n_w + [ICD_ATOM_KIND] * n_icd,
                pa.string(),
            ),
            "key": pa.concat_arrays(
                [specials, pc.cast(pa.array(atom_sctids), pa.string()), words, nodes["key"].combine_chunks()]
            ),
            "label": pa.concat_arrays(
                [specials, concept_label.combine_chunks(), words, nodes["label"].combine_chunks()]
            ),
            "sctid": pa.concat_arrays(
                [
                    pa.nulls(n_special, pa.int64()),
                    pa.array(atom_sctids, pa.int64()),
                    pa.nulls(n_w + n_icd, pa.int64()),
                ]
            ),
        }
    )


def _relation_keys(snomed_rel_edges: pa.Table) -> np.ndarray:
    """Relation keys in id order: identity, description, is-a, then attributes by SCTID."""
    attr_keys = np.unique(snomed_rel_edges["relation_key"].to_numpy())
    attr_keys = attr_keys[attr_keys != S.IS_A]
    return np.concatenate([[IDENTITY_KEY, DESCRIPTION_KEY, S.IS_A], attr_keys]).astype(np.int64)


def _concepts(tokens: pa.Table) -> pa.Table:
    """Special tokens first, then the tokens by (vocabulary, code); ``concept_id`` is the row."""
    tokens = tokens.sort_by([("vocabulary", "ascending"), ("code", "ascending")])
    n_special = len(SPECIAL_TOKENS)
    specials = pa.table(
        {
            "vocabulary": pa.array(["SPECIAL"] * n_special),
            "code": pa.array(SPECIAL_TOKENS),
            "code_dotted": pa.array(SPECIAL_TOKENS),
            "title": pa.array(SPECIAL_TOKENS),
            "snomed_ids": pa.array([[] for _ in SPECIAL_TOKENS], pa.list_(pa.int64())),
            "mapping_source": pa.array(["special"] * n_special),
            "mapping_kind": pa.array(["special"] * n_special),
            "chapter": pa.nulls(n_special, pa.int8()),
        }
    )
    concepts = pa.concat_tables([specials, tokens.select(specials.column_names).cast(specials.schema)])
    n = n_special + tokens.num_rows
    return concepts.add_column(0, "concept_id", pa.array(np.arange(n, dtype=np.int32)))


class _AtomIds:
    """Keyed atoms and relations -> their ids (as :func:`_atoms` and :func:`_relation_keys` number them)."""

    def __init__(
        self, atom_sctids: np.ndarray, words: pa.Array, rel_keys: np.ndarray, icd_keys: pa.ChunkedArray
    ) -> None:
        self.atom_sctids, self.words, self.rel_keys = atom_sctids, words, rel_keys
        self.icd_keys = icd_keys.combine_chunks()
        self.sorter = np.argsort(rel_keys)

    def concept(self, sctids: np.ndarray) -> np.ndarray:
        return len(SPECIAL_TOKENS) + np.searchsorted(self.atom_sctids, sctids)

    def word(self, words: pa.Array | pa.ChunkedArray) -> np.ndarray:
        offset = len(SPECIAL_TOKENS) + len(self.atom_sctids)
        return offset + pc.index_in(words, value_set=self.words).to_numpy()

    def icd(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        offset = len(SPECIAL_TOKENS) + len(self.atom_sctids) + len(self.words)
        return offset + pc.index_in(keys, value_set=self.icd_keys).to_numpy()

    def relation(self, keys: np.ndarray) -> np.ndarray:
        return self.sorter[np.searchsorted(self.rel_keys, keys, sorter=self.sorter)]


def _edges_per_sctid(rel_edges: pa.Table, word_edges: pa.Table, ids: _AtomIds) -> pa.Table:
    """Relationship and description-word edges of each SNOMED concept, with relation and atom ids."""
    n_w = word_edges.num_rows
    return pa.table(
        {
            "sctid": pa.concat_arrays(
                [rel_edges["sctid"].combine_chunks(), word_edges["sctid"].combine_chunks()]
            ),
            "relation_id": pa.array(
                np.concatenate(
                    [ids.relation(rel_edges["relation_key"].to_numpy()), np.full(n_w, 1, dtype=np.int32)]
                ).astype(np.int32)
            ),
            "atom_id": pa.array(
                np.concatenate(
                    [ids.concept(rel_edges["atom_sctid"].to_numpy()), ids.word(word_edges["word"])]
                ).astype(np.int32)
            ),
            "role_group": pa.concat_arrays(
                [rel_edges["role_group"].combine_chunks(), pa.array(np.zeros(n_w, dtype=np.int32))]
            ),
            "provenance": _provenance(rel_edges["provenance"], word_edges["provenance"]),
        }
    )


def _provenance(*parts: pa.ChunkedArray) -> pa.DictionaryArray:
    """The parts' provenance strings end to end, dictionary-encoded: a handful of distinct values over some
    1.7 M edges at International scale, whose text is written once, by :func:`_token_edges`' cast, for the
    edges kept (a string copy here was part of the compile's peak)."""
    prov = pa.chunked_array([c for p in parts for c in p.chunks], pa.string())
    values = pc.unique(prov)
    codes = pc.index_in(prov, value_set=values).combine_chunks()
    return pa.DictionaryArray.from_arrays(codes, values)


def _token_edges(
    concepts: pa.Table, token_snomed: pa.Table, per_sctid: pa.Table, token_words: pa.Table, ids: _AtomIds
) -> pa.Table:
    """Edges of every concept: specials' identity, the SNOMED concepts' edges, fallback title words.

    An edge that several of a token's SNOMED concepts give is kept once, from the lowest role group, then
    the lowest SCTID. Columnar: the (concept, SCTID) pairs expand into each SCTID's run of edges."""
    tok_index = concepts.select(["concept_id", "vocabulary", "code"])
    ts = token_snomed.join(tok_index, keys=["vocabulary", "code"], join_type="inner")
    pair_concept, pair_sctid = ts["concept_id"].to_numpy(), ts["sctid"].to_numpy()
    sctid = per_sctid["sctid"].to_numpy()
    by_sctid = stable_order(sctid)
    sorted_sctid = sctid[by_sctid]
    lo = np.searchsorted(sorted_sctid, pair_sctid, side="left")
    n_each = np.searchsorted(sorted_sctid, pair_sctid, side="right") - lo
    del sorted_sctid
    # pos: each expanded edge's place in the SCTID order of per_sctid (so its rank by SCTID)
    pos = np.repeat(lo - np.concatenate([[0], np.cumsum(n_each)[:-1]]), n_each)
    pos += np.arange(len(pos))
    c = np.repeat(pair_concept, n_each).astype(np.int32)
    rows = by_sctid[pos]  # rows of per_sctid, pair by pair
    del by_sctid
    r = per_sctid["relation_id"].to_numpy()[rows]
    a = per_sctid["atom_id"].to_numpy()[rows]
    g = per_sctid["role_group"].to_numpy()[rows]
    first = _first_per_edge(c, r, a, tie=(pos, g))  # least role group, then least SCTID
    del pos
    rows, c, r, a, g = rows[first], c[first], r[first], a[first], g[first]
    n_special = len(SPECIAL_TOKENS)
    specials = _edge_table(np.arange(n_special), 0, np.arange(n_special), pa.array(["special"] * n_special))
    e = pa.table(
        {
            "concept_id": pa.array(c),
            "relation_id": pa.array(r.astype(np.int32)),
            "atom_id": pa.array(a.astype(np.int32)),
            "role_group": pa.array(g.astype(np.int32)),
            "provenance": pc.take(per_sctid["provenance"], pa.array(rows)),
            "source_sctid": pa.array(sctid[rows], pa.int64()),
        }
    )
    tw = token_words.join(tok_index, keys=["vocabulary", "code"], join_type="inner")
    title_words = _edge_table(
        tw["concept_id"], 1, ids.word(tw["word"]), pa.array(["fallback_title"] * tw.num_rows, pa.string())
    )
    e = pa.concat_tables([specials, e.cast(specials.schema), title_words])
    # a title word the ancestor's concepts also give stays once (the concept's edge wins: it comes first);
    # the rows stay in their order (_with_slots sorts the edges), and without a repeat nothing is copied
    keep = _first_per_edge(e["concept_id"].to_numpy(), e["relation_id"].to_numpy(), e["atom_id"].to_numpy())
    if len(keep) == e.num_rows:
        return e
    mask = np.zeros(e.num_rows, dtype=bool)
    mask[keep] = True
    return e.filter(pa.array(mask))


def _first_per_edge(
    c: np.ndarray, r: np.ndarray, a: np.ndarray, tie: tuple[np.ndarray, ...] = ()
) -> np.ndarray:
    """The row of each distinct (concept, relation, atom), in key order: the one least by ``tie`` (keys
    from the least significant, as ``np.lexsort``), else the first."""
    if not len(c):
        return np.zeros(0, dtype=np.int64)
    order = stable_order(c, r, a, *tie[::-1])
    cs, rs, as_ = c[order], r[order], a[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = (cs[1:] != cs[:-1]) | (rs[1:] != rs[:-1]) | (as_[1:] != as_[:-1])
    return order[start]


def _icd_token_edges(concepts: pa.Table, icd_edges: pa.Table, ids: _AtomIds) -> pa.Table:
    """The ICD hierarchy's edges: token, the relation of its (vocabulary, level), the node's atom."""
    tok_index = concepts.select(["concept_id", "vocabulary", "code"])
    e = icd_edges.join(tok_index, keys=["vocabulary", "code"], join_type="inner")
    first_icd_relation = len(ids.rel_keys)
    return _edge_table(
        e["concept_id"].to_numpy(),
        first_icd_relation + e["relation"].to_numpy(),
        ids.icd(e["key"]),
        e["provenance"].combine_chunks(),
    )


def _edge_table(concept_id, relation_id, atom_id, provenance: pa.Array) -> pa.Table:
    """Edges in group 0 with no source SCTID (special tokens, fallback title words, ICD hierarchy);
    ``relation_id`` is one id or one per edge."""
    n = len(provenance)
    return pa.table(
        {
            "concept_id": pa.array(np.asarray(concept_id, dtype=np.int32)),
            "relation_id": pa.array(np.broadcast_to(np.asarray(relation_id, dtype=np.int32), n).copy()),
            "atom_id": pa.array(np.asarray(atom_id).astype(np.int32)),
            "role_group": pa.array(np.zeros(n, dtype=np.int32)),
            "provenance": provenance,
            "source_sctid": pa.nulls(n, pa.int64()),
        }
    )


def _with_slots(e: pa.Table) -> pa.Table:
    """Add ``slot`` (the k-th use of the relation by the concept, atoms in id order) and store the edges
    sorted by (relation_id, slot, concept_id)."""
    c = e["concept_id"].to_numpy()
    r = e["relation_id"].to_numpy()
    a = e["atom_id"].to_numpy()
    order = stable_order(c, r, a)
    cs, rs = c[order], r[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = (cs[1:] != cs[:-1]) | (rs[1:] != rs[:-1])
    pos = np.arange(len(order))
    run_start = np.maximum.accumulate(np.where(start, pos, 0))
    slot = np.empty(len(order), dtype=np.int32)
    slot[order] = (pos - run_start).astype(np.int32)
    e = e.append_column("slot", pa.array(slot))
    store = stable_order(r, slot, c)
    return e.take(pa.array(store)).select(
        ["concept_id", "relation_id", "atom_id", "slot", "role_group", "provenance", "source_sctid"]
    )


def _slices(e: pa.Table) -> pa.Table:
    """One row per (relation, slot): where its contiguous run of edges starts and how long it is."""
    rr, ss = e["relation_id"].to_numpy(), e["slot"].to_numpy()
    brk = np.ones(len(rr), dtype=bool)
    brk[1:] = (rr[1:] != rr[:-1]) | (ss[1:] != ss[:-1])
    starts = np.flatnonzero(brk)
    lengths = np.diff(np.append(starts, len(rr)))
    return pa.table(
        {
            "relation_id": pa.array(rr[starts].astype(np.int32)),
            "slot": pa.array(ss[starts].astype(np.int32)),
            "start": pa.array(starts.astype(np.int64)),
            "length": pa.array(lengths.astype(np.int64)),
        }
    )


def _relations(rel_keys: np.ndarray, concept_labels: pa.Table, e: pa.Table, icd: bool) -> pa.Table:
    """One row per relation: kind, SCTID, label, max multiplicity and number of edges; with ``icd`` the
    ICD hierarchy's relations last."""
    attr_sctids = rel_keys[2:]  # is-a and the attributes
    lab_keys = concept_labels.filter(pc.is_in(concept_labels["sctid"], value_set=pa.array(attr_sctids)))
    names = pc.coalesce(lab_keys["preferred"], strip_semantic_tag(lab_keys["fsn"]))
    label_of = dict(zip(lab_keys["sctid"].to_pylist(), names.to_pylist(), strict=True))
    rr, ss = e["relation_id"].to_numpy(), e["slot"].to_numpy()
    icd_labels = list(ICD_RELATION_LABELS) if icd else []
    n_snomed = len(rel_keys)
    n_rel = n_snomed + len(icd_labels)
    max_mult = np.zeros(n_rel, dtype=np.int32)
    np.maximum.at(max_mult, rr, ss + 1)
    return pa.table(
        {
            "relation_id": pa.array(np.arange(n_rel, dtype=np.int32)),
            "kind": pa.array(
                ["identity", "description", "is_a"]
                + ["attribute"] * (n_snomed - 3)
                + [ICD_RELATION_KIND] * len(icd_labels),
                pa.string(),
            ),
            "sctid": pa.array(
                [None, None] + [int(k) for k in attr_sctids] + [None] * len(icd_labels), pa.int64()
            ),
            "label": pa.array(
                ["identity", "description"]
                + [label_of.get(int(k)) or str(int(k)) for k in attr_sctids]
                + icd_labels,
                pa.string(),
            ),
            "max_multiplicity": pa.array(max_mult),
            "edges": pa.array(np.bincount(rr, minlength=n_rel).astype(np.int64)),
        }
    )


def table_counts(tables: dict[str, pa.Table]) -> dict:
    """Rows of each program table, atoms by kind, and the max multiplicity of each relation."""
    out: dict = {"atoms": tables["atoms"].num_rows}
    kinds, n = np.unique(tables["atoms"]["kind"].to_numpy(zero_copy_only=False), return_counts=True)
    out["atoms_by_kind"] = {str(k): int(v) for k, v in zip(kinds, n, strict=True)}
    for name in ("relations", "concepts", "edges", "slices"):
        out[name] = tables[name].num_rows
    rels = tables["relations"]
    out["max_multiplicity"] = {
        str(lab): int(m)
        for lab, m in zip(rels["label"].to_pylist(), rels["max_multiplicity"].to_pylist(), strict=True)
    }
    return out


@dataclass(frozen=True)
class Encoded:
    """One table as its Parquet file: the bytes (``data``), or, spilled, an open unnamed temporary file
    holding them (``spill``); its ``rows``, ``sha256`` and ``size`` in bytes."""

    data: pa.Buffer | None
    rows: int
    sha256: str
    size: int
    spill: IO[bytes] | None = None


@dataclass(frozen=True)
class Chunks:
    """A table built a row group at a time: ``prepare()`` (run by the encoder, off the caller's thread)
    returns ``(rows, build)``, ``build(start, stop)`` the table of rows ``start``..``stop`` (fresh and
    small each time: the whole table never exists at once)."""

    prepare: Callable[[], tuple[int, Callable[[int, int], pa.Table]]]

    def table(self) -> pa.Table:
        rows, build = self.prepare()
        return build(0, rows)


ROW_GROUP_ROWS = 1 << 16  # rows per row group of a table encoded from Chunks


def encode_parquet(table: pa.Table | Chunks, program_id: str, *, spill: bool = False) -> Encoded:
    """The Parquet file of ``table`` (zstd), stamped with the program id and format version: in memory,
    or (``spill``) written to an unnamed temporary file, so that a table encoded long before the program
    is written holds no memory meanwhile; :class:`Chunks` are written a row group of
    :data:`ROW_GROUP_ROWS` at a time."""
    sink = tempfile.TemporaryFile(prefix="hrrbert-encoded-") if spill else pa.BufferOutputStream()
    try:
        rows = _write_parquet(table, program_id, sink)
        if not spill:
            data = sink.getvalue()
            return Encoded(data, rows, hashlib.sha256(data).hexdigest(), data.size)
        sink.seek(0)
        digest = hashlib.file_digest(sink, "sha256").hexdigest()
        size = sink.tell()
        sink.seek(0)
        return Encoded(None, rows, digest, size, sink)
    except BaseException:
        if spill:
            sink.close()
        raise


def _write_parquet(table: pa.Table | Chunks, program_id: str, sink) -> int:
    """Write ``table`` as Parquet to ``sink``; returns its rows."""
    rows, build = table.prepare() if isinstance(table, Chunks) else (0, None)
    if build is not None and rows > 0:
        writer = None
        for start in range(0, rows, ROW_GROUP_ROWS):
            part = build(start, min(rows, start + ROW_GROUP_ROWS))
            part = part.replace_schema_metadata(_stamp(part, program_id))
            if writer is None:
                writer = pq.ParquetWriter(sink, part.schema, compression="zstd")
            writer.write_table(part)
            del part
            give_back()  # this thread's heap: the part is written
        writer.close()
        return rows
    t = build(0, rows) if build is not None else table
    pq.write_table(t.replace_schema_metadata(_stamp(t, program_id)), sink, compression="zstd")
    return t.num_rows


def _stamp(table: pa.Table, program_id: str) -> dict:
    meta = dict(table.schema.metadata or {})
    meta.update({b"program_id": program_id.encode(), b"format_version": str(FORMAT_VERSION).encode()})
    return meta


def write_encoded(path: Path, enc: Encoded) -> None:
    """Write the bytes of one encoded table to ``path`` (a spilled table's file is closed after)."""
    with open(path, "wb") as out:
        if enc.spill is None:
            out.write(enc.data)
            return
        try:
            enc.spill.seek(0)
            shutil.copyfileobj(enc.spill, out, 1 << 20)
        finally:
            enc.spill.close()


class BackgroundEncoder:
    """Encodes tables (:func:`encode_parquet`) on :data:`WRITE_THREADS` threads as they are handed over;
    the encoder leaves Python's lock, so the compile goes on beside it, and a table is freed once encoded
    when the caller keeps no other reference. Each encoded file waits in an unnamed temporary file (the
    system's temporary folder; gone when closed or when the process ends), not in memory, until
    :func:`write_program` copies it into place. ``futures`` (name -> future) go to
    :func:`write_program`."""

    def __init__(self, program_id: str) -> None:
        self.program_id = program_id
        self.futures: dict[str, Future] = {}
        self._pool = ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="encode")

    def submit(self, name: str, table: pa.Table | Chunks) -> None:
        self.futures[name] = self._pool.submit(encode_parquet, table, self.program_id, spill=True)

    def close(self) -> dict[str, Future]:
        """No more tables; the submitted ones still run. Returns ``futures``."""
        self._pool.shutdown(wait=False)
        return self.futures


TableLike = pa.Table | Chunks | Future


def write_program(
    out_dir: Path,
    program_id: str,
    tables: dict[str, TableLike],
    graph_tables: dict[str, TableLike],
    manifest: dict,
) -> tuple[Path, bool]:
    """Write into a temporary folder beside the target, then rename into place.

    A table may come as a ``pa.Table``, as :class:`Chunks`, or as a future of its :class:`Encoded` bytes
    (:class:`BackgroundEncoder`). Returns ``(path, written)``; ``written`` is False when an identical
    program was already there. Raises :class:`OutputExistsError` when the target holds anything else, and
    :class:`ProgramWriteError` (naming the target and the file) when writing fails — disk full, no
    permission, a Parquet writer error; the temporary folder is then gone and nothing is published.
    """
    final = out_dir / program_id
    current: list[str] = []  # the file being written, for the error

    def write_files(tmp: Path) -> list[dict]:
        """Every table encoded (on :data:`WRITE_THREADS` threads, unless already a future), then written
        in order."""
        jobs = [(f"{folder}{name}.parquet", t) for folder, group in (("", tables), ("graph/", graph_tables))
                for name, t in group.items()]  # fmt: skip
        if graph_tables:
            (tmp / "graph").mkdir(exist_ok=True)
        with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
            pending = [
                t if isinstance(t, Future) else pool.submit(encode_parquet, t, program_id)
                for _path, t in jobs
            ]
            files = []
            for (rel_path, _t), f in zip(jobs, pending, strict=True):
                current[:] = [rel_path]
                enc = f.result()
                write_encoded(tmp / rel_path, enc)
                files.append({"path": rel_path, "sha256": enc.sha256, "rows": enc.rows, "bytes": enc.size})
        current[:] = ["manifest.json"]
        return files

    created = [d for d in (out_dir.parent, out_dir) if not d.exists()]
    try:
        written = publish(final, program_id, write_files, manifest, lambda: _same_or_raise(final, program_id))
    except Exception as e:
        if not _is_write_failure(e):
            raise
        for d in reversed(created):  # folders this call created, if they stayed empty
            try:
                d.rmdir()
            except OSError:
                pass
        raise ProgramWriteError(final, current[0] if current else None, e) from e
    return final, written


def _is_write_failure(e: BaseException) -> bool:
    """An OS, pyarrow or DuckDB error, a writer's RuntimeError, or the artifact writer's own wrapping of
    an OS error (an ``OSError`` too) — not the package's other errors (an existing different program)."""
    if isinstance(e, OntologyCompilerError):
        return isinstance(e, OSError)
    return isinstance(e, OSError | pa.ArrowException | RuntimeError) or type(e).__module__.startswith(
        "duckdb"
    )


def _same_or_raise(final: Path, program_id: str) -> bool:
    try:
        manifest = verify_program(final)
    except ProgramFormatError as e:
        raise OutputExistsError(
            f"{final} exists but does not hold an intact program {program_id}: {e}\n"
            "  it is never overwritten; move or remove it, or choose another --out"
        ) from e
    if manifest.get("program_id") != program_id:
        raise OutputExistsError(
            f"{final} holds program {manifest.get('program_id')!r}, not {program_id!r}; "
            "it is never overwritten"
        )
    return False


def read_manifest(path: str | Path) -> dict:
    return read_json_manifest(path, "compiled program")


def verify_program(path: str | Path, *, hashes: bool = True) -> dict:
    """Check a program folder against its manifest: format version, every file's presence, size and
    sha256 (``hashes``), and that every Parquet file opens with the manifest's row count. A truncated or
    damaged file is a :class:`ProgramFormatError` naming it, never a pyarrow error."""
    manifest = read_manifest(path)
    _check_program_manifest(Path(path), manifest)
    for f in manifest.get("files", []):
        _check_file(Path(path) / f["path"], f)
    return verify_manifest_files(path, manifest, hashes=hashes)


PROGRAM_FILES = tuple(f"{name}.parquet" for name in ("atoms", "relations", "concepts", "edges", "slices"))


def _check_program_manifest(path: Path, manifest: dict) -> None:
    """The manifest is a program's (a ``program_id``, not a dataset's ``dataset_id``) and lists every file a
    program has (:data:`PROGRAM_FILES`)."""
    m = path / "manifest.json"
    if "dataset_id" in manifest:
        raise ProgramFormatError(
            f"{path}: this is a dataset folder, not a program (its manifest has a dataset_id); give the "
            f"program folder it was made with (program_id {manifest.get('program_id')!r})"
        )
    if "program_id" not in manifest:
        raise ProgramFormatError(f"{m}: no program_id; expected a compiled program's manifest")
    files = manifest.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and "path" in f for f in files):
        raise ProgramFormatError(f"{m}: 'files' must be a list of {{path, sha256, rows, bytes}}")
    listed = {f["path"] for f in files}
    missing = [name for name in PROGRAM_FILES if name not in listed]
    if missing:
        raise ProgramFormatError(
            f"{m}: does not list the program file(s) {', '.join(missing)}; expected all of "
            f"{', '.join(PROGRAM_FILES)} (not a complete program; compile it again)"
        )


def _check_file(p: Path, entry: dict) -> None:
    """Size as listed, and for Parquet a readable footer with the listed rows (presence is checked by
    ``verify_manifest_files``)."""
    if not p.is_file():
        if p.exists():
            raise ProgramFormatError(
                f"{p}: not a regular file (a device, FIFO or folder); expected the program file the "
                "manifest lists"
            )
        return
    size, listed = p.stat().st_size, entry.get("bytes")
    if isinstance(listed, int) and size != listed:
        raise ProgramFormatError(
            f"{p}: {size:,} bytes, the manifest lists {listed:,} (truncated or modified after compiling); "
            "compile the program again"
        )
    if p.suffix != ".parquet":
        return
    try:
        rows = pq.read_metadata(p).num_rows
    except (pa.ArrowException, OSError) as e:
        raise ProgramFormatError(
            f"{p}: not a readable Parquet file ({e}); truncated or damaged; compile the program again"
        ) from e
    if isinstance(entry.get("rows"), int) and rows != entry["rows"]:
        raise ProgramFormatError(f"{p}: {rows:,} rows, the manifest lists {entry['rows']:,}")
