"""The ontology graph of the mapped concepts: relationship and description-word edges, is-a check.

Edges are keyed before ids exist: a relation key is the attribute's SCTID (is-a 116680003 included),
:data:`DESCRIPTION_KEY` for description words, :data:`IDENTITY_KEY` for special tokens; an atom is a
SNOMED concept (its SCTID) or a word.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import rf2_schema as S
from .errors import HierarchyCycleError
from .order import stable_order
from .words import explode_words, strip_semantic_tag

log = logging.getLogger(__name__)

DESCRIPTION_KEY = 0
IDENTITY_KEY = -1
# words bound to tokens directly (the ICD title fallback)
TOKEN_WORDS_SCHEMA = pa.schema([("vocabulary", pa.string()), ("code", pa.string()), ("word", pa.string())])


def check_is_a_acyclic(relationships: pa.Table) -> None:
    """Raise :class:`HierarchyCycleError` naming one cycle when is-a has one.

    Leaves are peeled off in vectorised rounds (Kahn's algorithm, one round per hierarchy level); any
    residue holds a cycle, which networkx finds and names.
    """
    isa = relationships.filter(pc.equal(relationships["typeId"], pa.scalar(S.IS_A, pa.int64())))
    if isa.num_rows == 0:
        return
    child = isa["sourceId"].to_numpy()
    parent = isa["destinationId"].to_numpy()
    nodes, inv = np.unique(np.concatenate([child, parent]), return_inverse=True)
    c, p = inv[: len(child)], inv[len(child) :]
    alive = np.ones(len(c), dtype=bool)
    while True:
        indeg = np.bincount(p[alive], minlength=len(nodes))  # children still pointing at each node
        leaf_edges = alive & (indeg[c] == 0)
        if not leaf_edges.any():
            break
        alive &= ~leaf_edges
    if not alive.any():
        return
    import networkx as nx  # the error path only (16 MB a compile need not hold)

    g = nx.DiGraph()
    g.add_edges_from(zip(nodes[c[alive]].tolist(), nodes[p[alive]].tolist(), strict=True))
    cycle = nx.find_cycle(g)
    members = [int(u) for u, _v in cycle]
    raise HierarchyCycleError(members)


def relationship_edges(relationships: pa.Table, sctids: pa.Array) -> pa.Table:
    """Edges ``(sctid, relation_key, atom_sctid, role_group, provenance)`` of the given concepts."""
    r = relationships.filter(pc.is_in(relationships["sourceId"], value_set=sctids))
    prov = pc.if_else(
        pc.equal(r["characteristicTypeId"], pa.scalar(S.STATED, pa.int64())),
        pa.scalar("stated"),
        pa.scalar("inferred"),
    )
    return pa.table(
        {
            "sctid": r["sourceId"],
            "relation_key": r["typeId"],
            "atom_sctid": r["destinationId"],
            "role_group": pc.cast(r["relationshipGroup"], pa.int32()),
            "provenance": prov,
        }
    )


def description_terms(descriptions: pa.Table, language: pa.Table, sctids: pa.Array) -> pa.Table:
    """The terms that give a concept its words: FSN (tag removed) + synonyms in the language refset.

    An FSN counts when the language refset lists it; a concept whose FSN the refset does not list keeps
    its active FSN(s). Returns ``(sctid, description_id, type, term)``.
    """
    d = descriptions.filter(pc.is_in(descriptions["conceptId"], value_set=sctids))
    # the language rows of these descriptions first: a set of the few thousand kept ids to look the refset's
    # rows up in, rather than a set of all its rows (some 70 MB at International scale, at the compile's peak)
    ref = language["referencedComponentId"]
    listed = ref.filter(pc.is_in(ref, value_set=d["id"].combine_chunks())).combine_chunks()
    accepted = pc.is_in(d["id"], value_set=listed)
    is_fsn = pc.equal(d["typeId"], pa.scalar(S.FSN, pa.int64()))
    is_syn = pc.equal(d["typeId"], pa.scalar(S.SYNONYM, pa.int64()))
    fsn_acc = pc.and_(is_fsn, accepted)
    with_fsn = pc.unique(d["conceptId"].filter(fsn_acc))
    fsn_fallback = pc.and_(is_fsn, pc.invert(pc.is_in(d["conceptId"], value_set=with_fsn)))
    keep = pc.or_(pc.or_(fsn_acc, fsn_fallback), pc.and_(is_syn, accepted))
    d = d.filter(keep)
    is_fsn = pc.equal(d["typeId"], pa.scalar(S.FSN, pa.int64()))
    term = pc.if_else(is_fsn, strip_semantic_tag(d["term"]), d["term"])
    return pa.table(
        {
            "sctid": d["conceptId"],
            "description_id": d["id"],
            "type": pc.if_else(is_fsn, pa.scalar("fsn"), pa.scalar("synonym")),
            "term": term,
        }
    )


WORD_SLICE = 1 << 16  # terms split into words at a time


def word_edges(terms: pa.Table, stopwords: list[str]) -> pa.Table:
    """Distinct ``(sctid, word)`` pairs, sorted, with the least provenance (``type``) that gave the word
    (``fsn`` before ``synonym``). Columnar: one sort of packed integer keys."""
    # a slice of terms at a time: lower-cased copies and split lists of one slice, not of all the terms
    parts = [
        explode_words(pa.array(np.arange(start, min(start + WORD_SLICE, terms.num_rows))), part, stopwords)
        for start in range(0, terms.num_rows, WORD_SLICE)
        for part in [terms["term"].slice(start, WORD_SLICE)]
    ]
    w = pa.concat_tables(parts) if parts else pa.table({"owner": pa.array([], pa.int64()), "word": []})
    del parts
    if w.num_rows == 0:
        empty = pa.array([], pa.string())
        return pa.table({"sctid": pa.array([], pa.int64()), "word": empty, "provenance": empty})
    idx = w["owner"].to_numpy()
    sctids, sctid_rank = np.unique(terms["sctid"].to_numpy(), return_inverse=True)
    words, word_rank = _sorted_codes(w["word"])
    del w  # the split words' text (the owners stay, in idx): this step is the compile's peak
    provs, prov_rank = _sorted_codes(terms["type"])
    n_w, n_p = len(words), len(provs)
    key = sctid_rank[idx].astype(np.int64)  # the packed key built in place: one (E,) int64 at a time
    key *= n_w
    key += word_rank
    del word_rank
    key *= n_p
    key += prov_rank[idx]
    key.sort()
    pair = key // n_p
    start = np.ones(len(key), dtype=bool)
    start[1:] = pair[1:] != pair[:-1]
    key = key[start]
    pair = key // n_p
    return pa.table(
        {
            "sctid": pa.array(sctids[pair // n_w], pa.int64()),
            "word": pc.take(words, pa.array(pair % n_w)),
            "provenance": pc.take(provs, pa.array(key % n_p)),
        }
    )


def _sorted_codes(values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """``(distinct values in byte order, each value's position among them)``."""
    d = pc.dictionary_encode(values)
    d = d.combine_chunks() if isinstance(d, pa.ChunkedArray) else d
    order = pc.array_sort_indices(d.dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return pc.take(d.dictionary, pa.array(order)), rank[d.indices.to_numpy()]


def preferred_terms(descriptions: pa.Table, language: pa.Table, language_refset: int) -> pa.Table:
    """Per concept: the preferred synonym in ``language_refset`` and the FSN
    -> ``(sctid, fsn, preferred)``."""
    pref_ids = language.filter(
        pc.and_(
            pc.equal(language["refsetId"], pa.scalar(language_refset, pa.int64())),
            pc.equal(language["acceptabilityId"], pa.scalar(S.PREFERRED, pa.int64())),
        )
    )["referencedComponentId"].combine_chunks()
    is_pref = pc.is_in(descriptions["id"], value_set=pref_ids)
    syn = descriptions.filter(
        pc.and_(is_pref, pc.equal(descriptions["typeId"], pa.scalar(S.SYNONYM, pa.int64())))
    )
    fsn = descriptions.filter(pc.equal(descriptions["typeId"], pa.scalar(S.FSN, pa.int64())))
    fsn_pref = pc.is_in(fsn["id"], value_set=pref_ids).to_numpy(zero_copy_only=False)
    # preferred FSN first, then any FSN; ties broken by description id for determinism
    f_ids, f_rows = _first_per_concept(fsn, (fsn["id"].to_numpy(), ~fsn_pref))
    p_ids, p_rows = _first_per_concept(syn, (syn["id"].to_numpy(),))
    ids = np.union1d(f_ids, p_ids)
    return pa.table(
        {
            "sctid": pa.array(ids, pa.int64()),
            "fsn": _spread(fsn["term"], f_rows, f_ids, ids),
            "preferred": _spread(syn["term"], p_rows, p_ids, ids),
        }
    )


def _first_per_concept(t: pa.Table, tie: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``(conceptIds in order, the row of each)``: per concept the row least by ``tie`` (``np.lexsort``
    keys, least significant first)."""
    c = t["conceptId"].to_numpy()
    order = stable_order(c, *tie[::-1])
    cs = c[order]
    start = np.ones(len(cs), dtype=bool)
    start[1:] = cs[1:] != cs[:-1]
    return cs[start], order[start]


def _spread(values: pa.ChunkedArray, rows: np.ndarray, keys: np.ndarray, all_keys: np.ndarray) -> pa.Array:
    """``values[rows]`` placed at the positions of ``keys`` among the sorted ``all_keys``; null elsewhere."""
    at = np.full(len(all_keys), -1, dtype=np.int64)
    at[np.searchsorted(all_keys, keys)] = rows
    return pc.take(values, pa.array(at, mask=at < 0))


def token_word_edges(token_terms: pa.Table, stopwords: list[str]) -> pa.Table:
    """Distinct ``(vocabulary, code, word)`` from token titles (the ICD fallback)."""
    if token_terms.num_rows == 0:
        return TOKEN_WORDS_SCHEMA.empty_table()
    w = explode_words(pa.array(np.arange(token_terms.num_rows)), token_terms["term"], stopwords)
    t = pa.table(
        {
            "vocabulary": pc.take(token_terms["vocabulary"], w["owner"]),
            "code": pc.take(token_terms["code"], w["owner"]),
            "word": w["word"],
        }
    )
    return (
        t.group_by(["vocabulary", "code", "word"], use_threads=False)
        .aggregate([])
        .sort_by([("vocabulary", "ascending"), ("code", "ascending"), ("word", "ascending")])
    )
