"""``compile_ontology``: RF2 release folder -> content-addressed HRR program (format 1).

Steps: hash the inputs and options into the program id (a recompile with identical inputs is a no-op);
read and resolve the release (:mod:`release`); map ICD codes to SNOMED concepts (:mod:`map_codes`); build
the graph of the mapped concepts (:mod:`graph`), the ICD classification above each token's code
(:mod:`icd_hierarchy`) and the program's tables (:mod:`program`); write them with the manifest
(:mod:`manifest`). ``CompileResult`` lives in :mod:`manifest` and is re-exported here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import icd
from . import rf2_schema as S
from .beside import Beside
from .codes import read_code_counts, read_code_universe
from .errors import MissingInputError
from .front import DEFAULT_OUT, FALLBACKS
from .graph import (
    check_is_a_acyclic,
    description_terms,
    preferred_terms,
    relationship_edges,
    token_word_edges,
    word_edges,
)
from .icd10cm_tree import prefetch_tabular
from .icd_hierarchy import IcdHierarchy, hierarchy_inputs
from .icd_hierarchy import icd_hierarchy as build_icd_hierarchy
from .manifest import (
    CompileResult,
    holds_programs,
    input_entry,
    manifest_head,
    option_file_input,
    option_file_input_exists,
    program_id,
    publish_program,
    stopwords_input,
    timed,
    up_to_date,
)
from .map_codes import MappingResult, map_codes
from .map_policy import MapPolicy, load_policy
from .map_sources import find_sources
from .memory import give_back, tune_pool
from .order import stable_order
from .program import BackgroundEncoder, Chunks, build_tables, table_counts
from .release import MappingInputs, Release, load_release, parse_as_of
from .rf2_files import RF2File, choose_release_type, scan_release, select_files
from .snomed_tokens import token_options, with_snomed_tokens
from .words import semantic_tag

log = logging.getLogger(__name__)


def compile_ontology(
    src: str | Path,
    *,
    out: str | Path = DEFAULT_OUT,
    name: str | None = None,
    as_of: str | int | None = None,
    release: str = "auto",
    languages: tuple[int, ...] = (S.US_ENGLISH,),
    stopwords: str | Path | None = None,
    stated: bool = False,
    strict: bool = False,
    map_policy: str | Path | None = None,
    omop: str | Path | None = None,
    nlm_icd9: str | Path | None = None,
    gem: str | Path | None = None,
    icd10cm_map: str | Path | None = None,
    codes: str | Path | None = None,
    code_counts: str | Path | None = None,
    fallback: str = "none",
    packages: tuple[str, ...] = (),
    icd_hierarchy: bool = True,
    tokens: str = "icd",
    snomed_roots: tuple[int, ...] = (),
    concept_set: str | Path | None = None,
) -> CompileResult:
    """Compile the RF2 release folder ``src`` into ``out/<name>/<program_id>/``.

    ``as_of`` (YYYYMMDD) resolves a Full release at that date; ``release`` is ``auto`` (Snapshot when
    present), ``snapshot`` or ``full``. ``languages`` are the language refsets whose preferred and
    acceptable synonyms give words (the first also gives labels). ``stopwords`` replaces the shipped
    list. ``stated`` reads stated instead of inferred relationships. ``strict`` makes bad SCTIDs fatal.
    Mapping sources besides the RF2 ICD-10 maps (``omop``, ``nlm_icd9``, ``gem`` folders, ``icd10cm_map``
    tls file) are found by name under ``src`` unless given; ``map_policy`` replaces the shipped policy;
    ``codes`` (MIMIC-IV d_icd_diagnoses or a version,code list) decides which codes become tokens;
    ``code_counts`` adds the share of occurrences lost to the coverage; ``fallback="icd"`` gives unmapped
    codes their title words and nearest mapped ancestor's concepts. ``packages`` (``NAMESPACE_YYYYMMDD``)
    chooses the package to read where ``src`` holds several of one namespace with different dates.
    ``icd_hierarchy`` binds each ICD token to the ICD-10-CM / ICD-9-CM nodes above its code
    (:mod:`icd_hierarchy`; False leaves them out). ``tokens`` ``snomed`` or ``both`` makes SNOMED concepts
    tokens themselves (those below ``snomed_roots``, default Clinical finding, or those the
    ``concept_set`` file names; :mod:`snomed_tokens`). Identical inputs and options give the same
    ``program_id``; recompiling is then a no-op.
    """
    t_start = time.perf_counter()
    tune_pool()
    src = Path(src)
    name = name or src.resolve().name
    out_dir = Path(out) / name
    languages = tuple(int(x) for x in languages)
    packages = tuple(packages)
    parse_as_of(as_of)  # a bad date is an error before anything is hashed
    # ---- inputs and options -> program_id (before any parsing, so a recompile is a cheap no-op)
    all_files = scan_release(src)
    rtype = choose_release_type(all_files, release, None if as_of is None else str(as_of))
    selected = select_files(all_files, rtype, stated=stated, src=src, packages=packages)
    stop_words, stop_input = stopwords_input(stopwords)
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
    policy = load_policy(map_policy)
    map_sources = _mapping_sources(src, [omop, nlm_icd9, gem, icd10cm_map])
    for role, f in (("codes", codes), ("code_counts", code_counts), ("concept_set", concept_set)):
        if f is not None:
            option_file_input_exists(role, f)

    def hash_inputs() -> list[dict]:
        inputs = _inputs(src, selected, stop_input, map_sources, policy, codes=codes, code_counts=code_counts)
        inputs += hierarchy_inputs() if icd_hierarchy else []
        inputs += [option_file_input("concept_set", concept_set)] if concept_set is not None else []
        return inputs

    options = _options(rtype, as_of, languages, stated, strict, fallback, policy, icd_hierarchy)
    options |= token_options(tokens, tuple(snomed_roots), concept_set)
    if icd_hierarchy:
        prefetch_tabular()
    hashing = None
    if holds_programs(out_dir):  # the program may be there already: hash first, a recompile is a no-op
        inputs = hash_inputs()
        pid = program_id(inputs, options)
        if (done := up_to_date(out_dir, pid)) is not None:
            return done
        t_hash = time.perf_counter() - t_start
    else:  # nothing to be up to date with: hash on a thread beside the reading (hashlib leaves the lock)
        hashing = Beside(hash_inputs)
    # ---- read and resolve; the ICD mapping on a thread from the moment its inputs are read
    mapping: list[Beside] = []
    rel = load_release(
        src,
        as_of=as_of,
        release=rtype.lower(),
        languages=languages,
        stated=stated,
        strict=strict,
        packages=packages,
        early=lambda inputs: mapping.append(
            Beside(_map, inputs, map_sources, policy, codes, code_counts, fallback)
        ),
    )
    with timed(rel.timings, "is_a_check"):
        check_is_a_acyclic(rel.relationships)
    if hashing is not None:
        inputs, t_hash = hashing.result(), hashing.seconds
        pid = program_id(inputs, options)
    # the release as read (graph/) goes to the encoder now: it is encoded beside the rest of the compile
    encoder = BackgroundEncoder(pid)
    encode_release_tables(rel, encoder)
    with timed(rel.timings, "mapping_wait"):
        mres = mapping[0].result()
    rel.timings["mapping"] = mapping[0].seconds
    mres = with_snomed_tokens(mres, rel, tokens, tuple(snomed_roots), concept_set)
    # ---- graph and program tables
    tables, graph_tables, coverage, hierarchy = _program_tables(
        rel, mres, stop_words, languages[0], icd_hierarchy, encoder
    )
    manifest = {
        **manifest_head(pid),
        "release": _release_entry(rel, name, options["as_of"], rtype),
        "inputs": inputs,
        "options": options,
        "counts": _counts(rel, tables, mres, hierarchy),
        "coverage": coverage,
        "findings": ([e for r in rel.reports for e in r.examples] + mres.findings)[:100],
        "mapping_sources": mres.sources_used,
        "timings": {"hash_inputs": round(t_hash, 3), **rel.timings},
    }
    return publish_program(out_dir, pid, tables, graph_tables, manifest, t_start)


def _options(
    rtype: str,
    as_of: str | int | None,
    languages: tuple[int, ...],
    stated: bool,
    strict: bool,
    fallback: str,
    policy: MapPolicy,
    icd_hierarchy: bool,
) -> dict:
    """The manifest's ``options`` (with the token options added by the caller): part of the program id."""
    return {
        "release": rtype,
        "as_of": None if as_of is None else str(as_of),
        "languages": list(languages),
        "stated": stated,
        "strict": strict,
        "fallback": fallback,
        "map_policy": policy.as_dict(),
        "icd_hierarchy": bool(icd_hierarchy),
    }


def _map(
    inputs: MappingInputs,
    map_sources: dict[str, list[Path]],
    policy: MapPolicy,
    codes: str | Path | None,
    code_counts: str | Path | None,
    fallback: str,
) -> MappingResult:
    """The mapping step (:func:`map_codes`) over the release's map rows, with the code universe and counts
    read."""
    universe = read_code_universe(codes) if codes is not None else None
    counts_table = read_code_counts(code_counts) if code_counts is not None else None
    return map_codes(
        inputs.maps,
        inputs.live,
        inputs.known,
        inputs.associations,
        map_sources,
        policy,
        universe=universe,
        fallback=fallback,
        code_counts=counts_table,
    )


def _mapping_sources(src: Path, given: list[str | Path | None]) -> dict[str, list[Path]]:
    """Mapping source files by kind: under the folders/files given, then by name under ``src``."""
    paths = [Path(x) for x in given if x is not None]
    for g in paths:
        if not g.exists():
            raise MissingInputError(f"{g}: mapping source not found")
    found = find_sources(paths or [src])
    if paths:  # sources given explicitly; others still found by name under the release folder
        for kind, ps in find_sources([src]).items():
            found.setdefault(kind, ps)
    return found


def _inputs(
    src: Path,
    selected: dict[str, list[RF2File]],
    stop_input: dict,
    map_sources: dict[str, list[Path]],
    policy: MapPolicy,
    **option_files: str | Path | None,
) -> list[dict]:
    """The manifest's ``inputs``: RF2 files (paths relative to ``src``), stopwords, mapping sources, the
    mapping policy, then the files given by options (``codes``, ``code_counts``)."""
    rf2 = [
        input_entry(kind, f.path, str(f.path.relative_to(src)))
        for kind in sorted(selected)
        for f in selected[kind]
    ]
    maps = [
        input_entry(f"map:{kind}", mp, _rel(mp, src)) for kind, ps in sorted(map_sources.items()) for mp in ps
    ]
    policy_entry = {"role": "map_policy", "path": policy.path, "sha256": policy.sha256, "bytes": None}
    given = [option_file_input(role, f) for role, f in option_files.items() if f is not None]
    return [*rf2, stop_input, *maps, policy_entry, *given]


def _program_tables(
    rel: Release,
    mres: MappingResult,
    stop_words: list[str],
    label_language: int,
    icd_hierarchy: bool,
    encoder: BackgroundEncoder | None = None,
) -> tuple[dict[str, pa.Table], dict, dict, IcdHierarchy | None]:
    """``(tables, graph tables, coverage, ICD hierarchy)``: the graph of the mapped concepts, the release as
    read (``graph/``), the ICD hierarchy of the tokens (None when off), then the program's tables.

    With an ``encoder`` (given the release's tables by :func:`encode_release_tables`) the concepts and the
    ICD map go to it too and the graph tables returned are its futures (:func:`program.write_program`
    takes them); the release's descriptions, language rows and relationships are then dropped from
    ``rel``, and the program's tables are built in a fraction of the memory."""
    token_snomed = mres.token_snomed
    sctids = pc.unique(token_snomed["sctid"]) if token_snomed.num_rows else pa.array([], pa.int64())
    with timed(rel.timings, "graph"):
        labels = preferred_terms(rel.descriptions, rel.language, label_language)
        graph_tables: dict = _graph_tables(rel, labels, mres.candidates, encoder)
        rel_edges = relationship_edges(rel.relationships, sctids)
        tokens = _tokens(mres.tokens, token_snomed, labels)
        twords = token_word_edges(mres.token_terms, stop_words)
        wedges = word_edges(description_terms(rel.descriptions, rel.language, sctids), stop_words)
        if encoder is not None:  # the encoder holds what it still needs of the release; the release lets go
            graph_tables = encoder.close()
            rel.drop_graph_inputs(
                "relationships", "descriptions", "text_definitions", "language", "concrete_values"
            )
            give_back()
    hierarchy = None
    if icd_hierarchy:
        with timed(rel.timings, "icd_hierarchy"):
            hierarchy = build_icd_hierarchy(tokens)
    with timed(rel.timings, "program_tables"):
        icd_edges = hierarchy.edges if hierarchy is not None else None
        tables = build_tables(tokens, rel_edges, wedges, token_snomed, labels, twords, icd_edges)
    coverage = mres.coverage
    coverage["snomed_concepts_mapped"] = int(len(sctids))
    coverage["snomed_concepts_without_edges"] = _without_edges(sctids, rel_edges, wedges)
    return tables, graph_tables, coverage, hierarchy


def _release_entry(rel: Release, name: str, as_of: str | None, rtype: str) -> dict:
    """The manifest's ``release``: name, package date, type, namespaces and modules."""
    return {
        "name": name,
        "date": rel.release_date,
        "as_of": as_of,
        "type": rtype,
        "namespaces": rel.namespaces,
        "modules": sorted(int(m) for m in pc.unique(rel.concepts["moduleId"]).to_pylist()),
        "note": "SNOMED CT content is licensed; this program is derived from the user's own release",
    }


def _rel(path: Path, src: Path) -> str:
    try:
        return str(path.relative_to(src))
    except ValueError:
        return str(path)


def _tokens(tokens: pa.Table, token_snomed: pa.Table, labels: pa.Table) -> pa.Table:
    """One row per ICD token: dotted form, title, SNOMED ids, source, kind, chapter."""
    ts = token_snomed.sort_by([("vocabulary", "ascending"), ("code", "ascending"), ("sctid", "ascending")])
    ids = ts.group_by(["vocabulary", "code"], use_threads=False).aggregate([("sctid", "distinct")])
    ids = ids.rename_columns(["vocabulary", "code", "snomed_ids"])
    ids = ids.append_column("_k", pa.array(np.arange(ids.num_rows)))
    g = tokens.join(ids.drop_columns(["snomed_ids"]), keys=["vocabulary", "code"], join_type="left outer")
    g = g.sort_by([("vocabulary", "ascending"), ("code", "ascending")])
    empty = pa.scalar([], pa.list_(pa.int64()))
    picked = pc.take(ids["snomed_ids"], g["_k"])  # null where a token has no SNOMED concept (title fallback)
    snomed_ids = pc.if_else(pc.is_valid(picked), picked, empty)
    first = pc.list_element(pc.fill_null(picked, pa.scalar([-1], pa.list_(pa.int64()))), 0)
    lab = (
        pa.table({"sctid": first, "_i": pa.array(np.arange(g.num_rows))})
        .join(labels, keys="sctid")
        .sort_by("_i")
    )
    title = pc.coalesce(g["title"], lab["preferred"], lab["fsn"])
    chapter = np.zeros(g.num_rows, dtype=np.int8)
    mask = np.ones(g.num_rows, dtype=bool)
    for vocab in (icd.ICD9CM, icd.ICD10CM):
        sel = pc.equal(g["vocabulary"], vocab).to_numpy(zero_copy_only=False)
        if sel.any():
            ch = icd.chapters(g["code"].filter(pa.array(sel)), vocab)
            chapter[sel] = ch.fill_null(0).to_numpy()
            mask[sel] = ch.is_null().to_numpy(zero_copy_only=False)
    return pa.table(
        {
            "vocabulary": g["vocabulary"],
            "code": g["code"],
            "code_dotted": g["code_dotted"],
            "title": title,
            "snomed_ids": snomed_ids,
            "mapping_source": g["mapping_source"],
            "mapping_kind": g["mapping_kind"],
            "chapter": pa.array(chapter, mask=mask),
        }
    )


def encode_release_tables(rel: Release, encoder: BackgroundEncoder) -> None:
    """Hand the release's relationships, descriptions and concrete values (``graph/``) to ``encoder`` as
    :class:`Chunks`, which build them a row group at a time and hold the release's tables until encoded."""
    encoder.submit("snomed_descriptions", _description_table(rel))
    encoder.submit("snomed_relationships", _renamed(rel.relationships, RELATIONSHIP_COLUMNS))
    if rel.concrete_values.num_rows:
        encoder.submit("snomed_concrete_values", _renamed(rel.concrete_values, CONCRETE_VALUE_COLUMNS))


def _graph_tables(
    rel: Release, labels: pa.Table, candidates: pa.Table, encoder: BackgroundEncoder | None = None
) -> dict[str, pa.Table]:
    """The release as read (``graph/``): concepts, relationships, descriptions, concrete values, ICD map.

    With an ``encoder`` (which has the release's tables already, :func:`encode_release_tables`) the
    concepts and the ICD map go to it, its futures are put in the program's file order, and the dict
    returned is empty."""
    if encoder is not None:
        encoder.submit("snomed_concepts", _concept_table(rel.concepts, labels))
        encoder.submit("icd_map", candidates)
        encoder.futures = {k: encoder.futures[k] for k in GRAPH_TABLES if k in encoder.futures}
        return {}
    out = {
        "snomed_concepts": _concept_table(rel.concepts, labels),
        "snomed_relationships": _renamed(rel.relationships, RELATIONSHIP_COLUMNS).table(),
        "snomed_descriptions": _description_table(rel).table(),
        "icd_map": candidates,
    }
    if rel.concrete_values.num_rows:
        out["snomed_concrete_values"] = _renamed(rel.concrete_values, CONCRETE_VALUE_COLUMNS).table()
    return out


GRAPH_TABLES = (
    "snomed_concepts", "snomed_relationships", "snomed_descriptions", "icd_map", "snomed_concrete_values",
)  # fmt: skip


# graph/ column -> RF2 column (rows sorted by id)
RELATIONSHIP_COLUMNS = {
    "id": "id", "effective_time": "effectiveTime", "module_id": "moduleId", "source_id": "sourceId",
    "destination_id": "destinationId", "relationship_group": "relationshipGroup", "type_id": "typeId",
    "characteristic_type_id": "characteristicTypeId",
}  # fmt: skip
CONCRETE_VALUE_COLUMNS = {
    "id": "id", "source_id": "sourceId", "value": "value", "relationship_group": "relationshipGroup",
    "type_id": "typeId",
}  # fmt: skip


def _renamed(t: pa.Table, columns: dict[str, str]) -> Chunks:
    """``t``'s ``columns`` renamed, rows by id (slices of ``t`` when it is in id order already)."""
    t = pa.table({new: t[old] for new, old in columns.items()})

    def prepare() -> tuple[int, Callable[[int, int], pa.Table]]:
        ids = t["id"].to_numpy()
        if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):
            return t.num_rows, lambda start, stop: t.slice(start, stop - start)
        order = stable_order(ids)
        return t.num_rows, lambda start, stop: t.take(pa.array(order[start:stop]))

    return Chunks(prepare)


def _concept_table(c: pa.Table, labels: pa.Table) -> pa.Table:
    """The concepts by id, each with its FSN, preferred term and semantic tag (null where it has none);
    ``labels`` is sorted by ``sctid`` (:func:`graph.preferred_terms`)."""
    ids = c["id"].to_numpy()
    order = stable_order(ids)
    sorted_ids = ids[order]
    label_ids = labels["sctid"].to_numpy()
    at = np.minimum(np.searchsorted(label_ids, sorted_ids), max(len(label_ids) - 1, 0))
    found = label_ids[at] == sorted_ids if len(label_ids) else np.zeros(len(ids), dtype=bool)
    lab = pa.array(at, mask=~found)
    rows = pa.array(order)
    fsn = pc.take(labels["fsn"], lab)
    status = pc.take(c["definitionStatusId"], rows)
    return pa.table(
        {
            "id": pc.take(c["id"], rows),
            "effective_time": pc.take(c["effectiveTime"], rows),
            "module_id": pc.take(c["moduleId"], rows),
            "definition_status_id": status,
            "primitive": pc.equal(status, pa.scalar(S.PRIMITIVE, pa.int64())),
            "fsn": fsn,
            "preferred_term": pc.take(labels["preferred"], lab),
            "semantic_tag": semantic_tag(fsn),
        }
    )


def _description_table(rel: Release) -> Chunks:
    """Descriptions and text definitions, one row per (description, language refset) with acceptability,
    by description id then refset (built a row group at a time)."""
    d = (
        pa.concat_tables([rel.descriptions, rel.text_definitions])
        if rel.text_definitions.num_rows
        else rel.descriptions
    )
    lang = rel.language

    def prepare() -> tuple[int, Callable[[int, int], pa.Table]]:
        # one row per (description, language row), the description's rows by refset; none: one row of nulls
        ids = d["id"].to_numpy()
        lang_desc, lang_refset = lang["referencedComponentId"].to_numpy(), lang["refsetId"].to_numpy()
        lang_order = stable_order(lang_desc, lang_refset)
        lang_sorted = lang_desc[lang_order]
        desc_order = stable_order(ids)
        lo = np.searchsorted(lang_sorted, ids[desc_order], side="left")
        n_lang = np.searchsorted(lang_sorted, ids[desc_order], side="right") - lo
        n_rows = np.maximum(n_lang, 1)
        rows = np.repeat(desc_order, n_rows)
        within = np.arange(int(n_rows.sum())) - np.repeat(np.cumsum(n_rows) - n_rows, n_rows)
        has = np.repeat(n_lang > 0, n_rows)
        at = np.minimum(np.repeat(lo, n_rows) + within, max(len(lang_order) - 1, 0))
        lang_rows = pa.array(lang_order[at] if len(lang_order) else np.zeros(len(rows), np.int64), mask=~has)
        del lang_order, lang_sorted, desc_order, lo, n_lang, n_rows, within, has, at

        def build(start: int, stop: int) -> pa.Table:
            d_rows, l_rows = pa.array(rows[start:stop]), lang_rows.slice(start, stop - start)
            type_id = pc.take(d["typeId"], d_rows)
            acceptability_id = pc.take(lang["acceptabilityId"], l_rows)
            return pa.table(
                {
                    "id": pc.take(d["id"], d_rows),
                    "concept_id": pc.take(d["conceptId"], d_rows),
                    "effective_time": pc.take(d["effectiveTime"], d_rows),
                    "language_code": pc.take(d["languageCode"], d_rows),
                    "type_id": type_id,
                    "type": _named(type_id, {S.FSN: "fsn", S.SYNONYM: "synonym"}, "definition"),
                    "term": pc.take(d["term"], d_rows),
                    "language_refset_id": pc.take(lang["refsetId"], l_rows),
                    "acceptability_id": acceptability_id,
                    "acceptability": _named(
                        acceptability_id,
                        {S.PREFERRED: "preferred", S.ACCEPTABLE: "acceptable"},
                        pa.scalar(None, pa.string()),
                    ),
                }
            )

        return len(rows), build

    return Chunks(prepare)


def _named(ids: pa.ChunkedArray, names: dict[int, str], other) -> pa.Array:
    """The name of each SCTID in ``names``; ``other`` for the rest."""
    conditions = pc.make_struct(*(pc.equal(ids, pa.scalar(k, pa.int64())) for k in names))
    return pc.case_when(conditions, *names.values(), other)


def _counts(
    rel: Release, tables: dict[str, pa.Table], mres: MappingResult, hierarchy: IcdHierarchy | None
) -> dict:
    counts = {k: int(v) for k, v in sorted(rel.counts.items())}
    counts.update({f"mapping_{k}": int(v) for k, v in sorted(mres.counts.items())})
    counts["map_candidates"] = mres.candidates.num_rows
    if hierarchy is not None:
        counts["icd_hierarchy"] = hierarchy.counts
    return {**counts, **table_counts(tables)}


def _without_edges(sctids: pa.Array, rel_edges: pa.Table, wedges: pa.Table) -> int:
    if not len(sctids):
        return 0
    with_edges = pc.unique(
        pa.concat_arrays([rel_edges["sctid"].combine_chunks(), wedges["sctid"].combine_chunks()])
    )
    return int(len(sctids) - (pc.sum(pc.is_in(sctids, value_set=with_edges)).as_py() or 0))
