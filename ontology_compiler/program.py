"""Program format 1: build the id-assigned tables and write them atomically with a manifest.

Ids are deterministic: special tokens first, then SNOMED concept atoms by SCTID, then words in byte
order; relations identity, description, is-a, then attributes by SCTID; concepts (tokens) special tokens
first, then by (vocabulary, code). Edges are stored sorted by (relation_id, slot, concept_id) so each
(relation, slot) slice is a contiguous run of distinct concepts.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import rf2_schema as S
from .artifact import FORMAT_VERSION, publish, read_json_manifest, sha256_file, verify_manifest_files
from .errors import OutputExistsError, ProgramFormatError
from .graph import DESCRIPTION_KEY, IDENTITY_KEY
from .words import strip_semantic_tag

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")
TOP_FILES = ("atoms.parquet", "relations.parquet", "concepts.parquet", "edges.parquet", "slices.parquet")


def build_tables(
    tokens: pa.Table,
    snomed_rel_edges: pa.Table,
    snomed_word_edges: pa.Table,
    token_snomed: pa.Table,
    concept_labels: pa.Table,
    token_words: pa.Table | None = None,
) -> dict[str, pa.Table]:
    """Assign ids and build atoms, relations, concepts, edges and slices.

    ``tokens``: one row per ICD token (vocabulary, code, code_dotted, title, snomed_ids, mapping_source,
    mapping_kind, chapter), any order. ``snomed_rel_edges``: (sctid, relation_key, atom_sctid,
    role_group, provenance). ``snomed_word_edges``: (sctid, word, provenance). ``token_snomed``: chosen
    (vocabulary, code, sctid). ``concept_labels``: (sctid, fsn, preferred) for atom labels.
    ``token_words``: (vocabulary, code, word) bound to tokens directly (the ICD title fallback).
    """
    if token_words is None:
        token_words = pa.table({"vocabulary": pa.array([], pa.string()), "code": pa.array([], pa.string()),
                                "word": pa.array([], pa.string())})  # fmt: skip
    n_special = len(SPECIAL_TOKENS)
    # --- atoms
    atom_sctids = np.unique(snomed_rel_edges["atom_sctid"].to_numpy())
    words = pc.unique(
        pa.concat_arrays([snomed_word_edges["word"].combine_chunks(), token_words["word"].combine_chunks()])
    ).sort()
    n_ca, n_w = len(atom_sctids), len(words)
    lab = concept_labels.filter(pc.is_in(concept_labels["sctid"], value_set=pa.array(atom_sctids)))
    lab = pa.table({"sctid": pa.array(atom_sctids)}).join(lab, keys="sctid").sort_by("sctid")
    concept_label = pc.coalesce(
        lab["preferred"], strip_semantic_tag(lab["fsn"]), pc.cast(lab["sctid"], pa.string())
    )
    atoms = pa.table(
        {
            "atom_id": pa.array(np.arange(n_special + n_ca + n_w, dtype=np.int32)),
            "kind": pa.array(["special"] * n_special + ["concept"] * n_ca + ["word"] * n_w, pa.string()),
            "key": pa.concat_arrays(
                [
                    pa.array(SPECIAL_TOKENS, pa.string()),
                    pc.cast(pa.array(atom_sctids), pa.string()),
                    words,
                ]
            ),
            "label": pa.concat_arrays(
                [pa.array(SPECIAL_TOKENS, pa.string()), concept_label.combine_chunks(), words]
            ),
            "sctid": pa.concat_arrays(
                [
                    pa.nulls(n_special, pa.int64()),
                    pa.array(atom_sctids, pa.int64()),
                    pa.nulls(n_w, pa.int64()),
                ]
            ),
        }
    )
    # --- relations
    attr_keys = np.unique(snomed_rel_edges["relation_key"].to_numpy())
    attr_keys = attr_keys[attr_keys != S.IS_A]
    rel_keys = np.concatenate([[IDENTITY_KEY, DESCRIPTION_KEY, S.IS_A], attr_keys]).astype(np.int64)
    rel_kind = ["identity", "description", "is_a"] + ["attribute"] * len(attr_keys)
    lab_keys = concept_labels.filter(pc.is_in(concept_labels["sctid"], value_set=pa.array(rel_keys[2:])))
    names = pc.coalesce(lab_keys["preferred"], strip_semantic_tag(lab_keys["fsn"]))
    rel_label_map = dict(zip(lab_keys["sctid"].to_pylist(), names.to_pylist(), strict=True))
    rel_labels = ["identity", "description"] + [
        rel_label_map.get(int(k)) or str(int(k)) for k in rel_keys[2:]
    ]
    # --- concepts (tokens)
    tokens = tokens.sort_by([("vocabulary", "ascending"), ("code", "ascending")])
    n_tok = tokens.num_rows
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
    concepts = concepts.add_column(0, "concept_id", pa.array(np.arange(n_special + n_tok, dtype=np.int32)))
    # --- edges keyed -> ids
    rel_edges = snomed_rel_edges
    rel_atom = n_special + np.searchsorted(atom_sctids, rel_edges["atom_sctid"].to_numpy())
    sorter = np.argsort(rel_keys)
    rel_rel = sorter[np.searchsorted(rel_keys, rel_edges["relation_key"].to_numpy(), sorter=sorter)]
    word_atom = n_special + n_ca + pc.index_in(snomed_word_edges["word"], value_set=words).to_numpy()
    per_sctid = pa.table(
        {
            "sctid": pa.concat_arrays(
                [rel_edges["sctid"].combine_chunks(), snomed_word_edges["sctid"].combine_chunks()]
            ),
            "relation_id": pa.array(
                np.concatenate([rel_rel, np.full(snomed_word_edges.num_rows, 1, dtype=np.int32)]).astype(
                    np.int32
                )
            ),
            "atom_id": pa.array(np.concatenate([rel_atom, word_atom]).astype(np.int32)),
            "role_group": pa.concat_arrays(
                [
                    rel_edges["role_group"].combine_chunks(),
                    pa.array(np.zeros(snomed_word_edges.num_rows, dtype=np.int32)),
                ]
            ),
            "provenance": pa.concat_arrays(
                [rel_edges["provenance"].combine_chunks(), snomed_word_edges["provenance"].combine_chunks()]
            ),
        }
    )
    tok_index = concepts.select(["concept_id", "vocabulary", "code"])
    ts = token_snomed.join(tok_index, keys=["vocabulary", "code"], join_type="inner")
    joined = ts.select(["concept_id", "sctid"]).join(per_sctid, keys="sctid", join_type="inner")
    joined = joined.sort_by(
        [("concept_id", "ascending"), ("relation_id", "ascending"), ("atom_id", "ascending"),
         ("role_group", "ascending"), ("sctid", "ascending")]
    )  # fmt: skip
    e = joined.group_by(["concept_id", "relation_id", "atom_id"], use_threads=False).aggregate(
        [("role_group", "first"), ("provenance", "first"), ("sctid", "first")]
    )
    e = e.rename_columns(["concept_id", "relation_id", "atom_id", "role_group", "provenance", "source_sctid"])
    sp = pa.table(
        {
            "concept_id": pa.array(np.arange(n_special, dtype=np.int32)),
            "relation_id": pa.array(np.zeros(n_special, dtype=np.int32)),
            "atom_id": pa.array(np.arange(n_special, dtype=np.int32)),
            "role_group": pa.array(np.zeros(n_special, dtype=np.int32)),
            "provenance": pa.array(["special"] * n_special),
            "source_sctid": pa.nulls(n_special, pa.int64()),
        }
    )
    tw = token_words.join(tok_index, keys=["vocabulary", "code"], join_type="inner")
    tw = pa.table(
        {
            "concept_id": tw["concept_id"],
            "relation_id": pa.array(np.ones(tw.num_rows, dtype=np.int32)),
            "atom_id": pa.array(
                (n_special + n_ca + pc.index_in(tw["word"], value_set=words).to_numpy()).astype(np.int32)
            ),
            "role_group": pa.array(np.zeros(tw.num_rows, dtype=np.int32)),
            "provenance": pa.array(["fallback_title"] * tw.num_rows, pa.string()),
            "source_sctid": pa.nulls(tw.num_rows, pa.int64()),
        }
    )
    e = pa.concat_tables([sp, e.cast(sp.schema), tw.cast(sp.schema)])
    # a title word the ancestor's concepts also give stays once (the concept's edge wins)
    e = (
        e.group_by(["concept_id", "relation_id", "atom_id"], use_threads=False)
        .aggregate([("role_group", "first"), ("provenance", "first"), ("source_sctid", "first")])
        .rename_columns(sp.column_names)
    )
    # slot: k-th use of the relation by the concept, atoms in id order
    c = e["concept_id"].to_numpy()
    r = e["relation_id"].to_numpy()
    a = e["atom_id"].to_numpy()
    order = np.lexsort((a, r, c))
    cs, rs = c[order], r[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = (cs[1:] != cs[:-1]) | (rs[1:] != rs[:-1])
    pos = np.arange(len(order))
    run_start = np.maximum.accumulate(np.where(start, pos, 0))
    slot = np.empty(len(order), dtype=np.int32)
    slot[order] = (pos - run_start).astype(np.int32)
    e = e.append_column("slot", pa.array(slot))
    store = np.lexsort((c, slot, r))
    e = e.take(pa.array(store)).select(
        ["concept_id", "relation_id", "atom_id", "slot", "role_group", "provenance", "source_sctid"]
    )
    # slices
    rr, ss = e["relation_id"].to_numpy(), e["slot"].to_numpy()
    brk = np.ones(len(rr), dtype=bool)
    brk[1:] = (rr[1:] != rr[:-1]) | (ss[1:] != ss[:-1])
    starts = np.flatnonzero(brk)
    lengths = np.diff(np.append(starts, len(rr)))
    slices = pa.table(
        {
            "relation_id": pa.array(rr[starts].astype(np.int32)),
            "slot": pa.array(ss[starts].astype(np.int32)),
            "start": pa.array(starts.astype(np.int64)),
            "length": pa.array(lengths.astype(np.int64)),
        }
    )
    n_rel = len(rel_keys)
    edges_per_rel = np.bincount(rr, minlength=n_rel)
    max_mult = np.zeros(n_rel, dtype=np.int32)
    np.maximum.at(max_mult, rr, ss + 1)
    relations = pa.table(
        {
            "relation_id": pa.array(np.arange(n_rel, dtype=np.int32)),
            "kind": pa.array(rel_kind, pa.string()),
            "sctid": pa.array([None, None] + [int(k) for k in rel_keys[2:]], pa.int64()),
            "label": pa.array(rel_labels, pa.string()),
            "max_multiplicity": pa.array(max_mult),
            "edges": pa.array(edges_per_rel.astype(np.int64)),
        }
    )
    return {"atoms": atoms, "relations": relations, "concepts": concepts, "edges": e, "slices": slices}


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


def write_parquet(table: pa.Table, path: Path, program_id: str) -> dict:
    meta = dict(table.schema.metadata or {})
    meta.update({b"program_id": program_id.encode(), b"format_version": str(FORMAT_VERSION).encode()})
    table = table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return {"rows": table.num_rows}


def write_program(
    out_dir: Path,
    program_id: str,
    tables: dict[str, pa.Table],
    graph_tables: dict[str, pa.Table],
    manifest: dict,
) -> tuple[Path, bool]:
    """Write into a temporary folder beside the target, then rename into place.

    Returns ``(path, written)``; ``written`` is False when an identical program was already there.
    Raises :class:`OutputExistsError` when the target holds anything else.
    """
    final = out_dir / program_id

    def write_files(tmp: Path) -> list[dict]:
        files = []
        for folder, group in (("", tables), ("graph/", graph_tables)):
            for name, t in group.items():
                p = tmp / f"{folder}{name}.parquet"
                info = write_parquet(t, p, program_id)
                files.append({"path": f"{folder}{p.name}", "sha256": sha256_file(p), "rows": info["rows"],
                              "bytes": p.stat().st_size})  # fmt: skip
        return files

    written = publish(final, program_id, write_files, manifest, lambda: _same_or_raise(final, program_id))
    return final, written


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
            f"{final} holds program {manifest.get('program_id')!r}, not {program_id!r}; it is never overwritten"
        )
    return False


def read_manifest(path: str | Path) -> dict:
    return read_json_manifest(path, "compiled program")


def verify_program(path: str | Path, *, hashes: bool = True) -> dict:
    """Check a program folder against its manifest (format version, every file's presence and sha256)."""
    return verify_manifest_files(path, read_manifest(path), hashes=hashes)
