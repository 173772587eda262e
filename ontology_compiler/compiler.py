"""``compile_ontology``: RF2 release folder -> content-addressed HRR program (format 1)."""

from __future__ import annotations

import datetime as _dt
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import icd
from . import rf2_schema as S
from .codes import read_code_counts, read_code_universe
from .errors import MissingInputError
from .graph import (
    check_is_a_acyclic,
    description_terms,
    preferred_terms,
    relationship_edges,
    token_word_edges,
    word_edges,
)
from .manifest import compiler_version, existing_program
from .manifest import program_id as _program_id
from .map_codes import MappingResult, map_codes
from .map_policy import load_policy
from .map_sources import find_sources
from .program import FORMAT_VERSION, build_tables, sha256_file, table_counts, verify_program, write_program
from .release import Release, load_release
from .rf2_files import choose_release_type, scan_release, select_files
from .words import default_stopwords_path, load_stopwords, semantic_tag

log = logging.getLogger(__name__)


@dataclass
class CompileResult:
    """Where the program is and what it holds."""

    path: Path
    program_id: str
    written: bool  # False when an identical program already existed
    manifest: dict


def compile_ontology(
    src: str | Path,
    *,
    out: str | Path = "artifacts/programs",
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
    codes their title words and nearest mapped ancestor's concepts.
    Identical inputs and options give the same ``program_id``; recompiling is then a no-op.
    """
    t_start = time.perf_counter()
    src = Path(src)
    name = name or src.resolve().name
    out_dir = Path(out) / name
    languages = tuple(int(x) for x in languages)
    # ---- inputs and options -> program_id (before any parsing, so a recompile is a cheap no-op)
    all_files = scan_release(src)
    rtype = choose_release_type(all_files, release, None if as_of is None else str(as_of))
    selected = select_files(all_files, rtype, stated=stated, src=src)
    stop_path = Path(stopwords) if stopwords is not None else default_stopwords_path()
    stop_words = load_stopwords(stop_path)
    if fallback not in ("none", "icd"):
        raise ValueError(f"fallback must be 'none' or 'icd', got {fallback!r}")
    policy = load_policy(map_policy)
    given = [Path(x) for x in (omop, nlm_icd9, gem, icd10cm_map) if x is not None]
    for g in given:
        if not g.exists():
            raise MissingInputError(f"{g}: mapping source not found")
    map_sources = find_sources(given or [src])
    if given:  # sources given explicitly; others still found by name under the release folder
        for kind, paths in find_sources([src]).items():
            map_sources.setdefault(kind, paths)
    inputs = []
    for kind in sorted(selected):
        for f in selected[kind]:
            inputs.append(
                {
                    "role": kind,
                    "path": str(f.path.relative_to(src)),
                    "sha256": sha256_file(f.path),
                    "bytes": f.path.stat().st_size,
                }
            )
    inputs.append(
        {
            "role": "stopwords",
            "path": str(stop_path)
            if stopwords is not None
            else "ontology_compiler/data/stopwords.txt (shipped)",
            "sha256": sha256_file(stop_path),
            "bytes": stop_path.stat().st_size,
        }
    )
    for kind, paths in sorted(map_sources.items()):
        for mp in paths:
            inputs.append(
                {
                    "role": f"map:{kind}",
                    "path": _rel(mp, src),
                    "sha256": sha256_file(mp),
                    "bytes": mp.stat().st_size,
                }
            )
    inputs.append({"role": "map_policy", "path": policy.path, "sha256": policy.sha256, "bytes": None})
    for role, f in (("codes", codes), ("code_counts", code_counts)):
        if f is not None:
            fp = Path(f)
            if not fp.is_file():
                raise MissingInputError(f"{fp}: --{role.replace('_', '-')} file not found")
            inputs.append(
                {"role": role, "path": str(fp), "sha256": sha256_file(fp), "bytes": fp.stat().st_size}
            )
    options = {
        "release": rtype,
        "as_of": None if as_of is None else str(as_of),
        "languages": list(languages),
        "stated": stated,
        "strict": strict,
        "fallback": fallback,
        "map_policy": policy.as_dict(),
    }
    program_id = _program_id(inputs, options)
    final = out_dir / program_id
    manifest = existing_program(final, program_id)
    if manifest is not None:
        log.info("%s is up to date (identical inputs and options); nothing written", final)
        return CompileResult(final, program_id, False, manifest)
    t_hash = time.perf_counter() - t_start

    # ---- read and resolve
    rel = load_release(
        src, as_of=as_of, release=rtype.lower(), languages=languages, stated=stated, strict=strict
    )
    t = time.perf_counter()
    check_is_a_acyclic(rel.relationships)
    rel.timings["is_a_check"] = round(time.perf_counter() - t, 3)

    # ---- mapping
    t = time.perf_counter()
    universe = read_code_universe(codes) if codes is not None else None
    counts_table = read_code_counts(code_counts) if code_counts is not None else None
    mres = map_codes(rel.maps, rel.concepts["id"].combine_chunks(), rel.known_concepts, rel.associations, map_sources,
                     policy, universe=universe, fallback=fallback, code_counts=counts_table)  # fmt: skip
    token_snomed = mres.token_snomed
    sctids = pc.unique(token_snomed["sctid"]) if token_snomed.num_rows else pa.array([], pa.int64())
    rel.timings["mapping"] = round(time.perf_counter() - t, 3)

    # ---- graph
    t = time.perf_counter()
    rel_edges = relationship_edges(rel.relationships, sctids)
    terms = description_terms(rel.descriptions, rel.language, sctids)
    wedges = word_edges(terms, stop_words)
    labels = preferred_terms(rel.descriptions, rel.language, languages[0])
    tokens = _tokens(mres.tokens, token_snomed, labels)
    twords = token_word_edges(mres.token_terms, stop_words)
    rel.timings["graph"] = round(time.perf_counter() - t, 3)

    t = time.perf_counter()
    tables = build_tables(tokens, rel_edges, wedges, token_snomed, labels, twords)
    graph_tables = _graph_tables(rel, labels, mres.candidates)
    rel.timings["program_tables"] = round(time.perf_counter() - t, 3)

    counts = _counts(rel, tables, mres)
    coverage = mres.coverage
    coverage["snomed_concepts_mapped"] = int(len(sctids))
    coverage["snomed_concepts_without_edges"] = _without_edges(sctids, rel_edges, wedges)
    manifest = {
        "format_version": FORMAT_VERSION,
        "program_id": program_id,
        "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "compiler_version": compiler_version(),
        "release": {
            "name": name,
            "date": rel.release_date,
            "as_of": options["as_of"],
            "type": rtype,
            "namespaces": rel.namespaces,
            "modules": sorted(int(m) for m in pc.unique(rel.concepts["moduleId"]).to_pylist()),
            "note": "SNOMED CT content is licensed; this program is derived from the user's own release",
        },
        "inputs": inputs,
        "options": options,
        "counts": counts,
        "coverage": coverage,
        "findings": ([e for r in rel.reports for e in r.examples] + mres.findings)[:100],
        "mapping_sources": mres.sources_used,
        "timings": {"hash_inputs": round(t_hash, 3), **rel.timings},
    }
    t = time.perf_counter()
    path, written = write_program(out_dir, program_id, tables, graph_tables, manifest)
    manifest["timings"]["write"] = round(time.perf_counter() - t, 3)
    manifest["timings"]["total"] = round(time.perf_counter() - t_start, 3)
    if written:
        log.info("wrote program %s", path)
    return CompileResult(
        path, program_id, written, verify_program(path, hashes=False) if not written else manifest
    )


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


def _graph_tables(rel: Release, labels: pa.Table, candidates: pa.Table) -> dict[str, pa.Table]:
    c = rel.concepts
    fsn_tag = labels.append_column("semantic_tag", semantic_tag(labels["fsn"]))
    concepts = (
        pa.table(
            {
                "id": c["id"],
                "effective_time": c["effectiveTime"],
                "module_id": c["moduleId"],
                "definition_status_id": c["definitionStatusId"],
                "primitive": pc.equal(c["definitionStatusId"], pa.scalar(S.PRIMITIVE, pa.int64())),
            }
        )
        .join(fsn_tag.rename_columns(["id", "fsn", "preferred_term", "semantic_tag"]), keys="id")
        .sort_by("id")
    )
    r = rel.relationships
    relationships = pa.table(
        {
            "id": r["id"],
            "effective_time": r["effectiveTime"],
            "module_id": r["moduleId"],
            "source_id": r["sourceId"],
            "destination_id": r["destinationId"],
            "relationship_group": r["relationshipGroup"],
            "type_id": r["typeId"],
            "characteristic_type_id": r["characteristicTypeId"],
        }
    ).sort_by("id")
    d = (
        pa.concat_tables([rel.descriptions, rel.text_definitions])
        if rel.text_definitions.num_rows
        else rel.descriptions
    )
    lang = rel.language
    acc = pa.table(
        {
            "id": lang["referencedComponentId"],
            "language_refset_id": lang["refsetId"],
            "acceptability_id": lang["acceptabilityId"],
        }
    )
    desc = pa.table(
        {
            "id": d["id"],
            "concept_id": d["conceptId"],
            "effective_time": d["effectiveTime"],
            "language_code": d["languageCode"],
            "type_id": d["typeId"],
            "type": pc.case_when(
                pc.make_struct(
                    pc.equal(d["typeId"], pa.scalar(S.FSN, pa.int64())),
                    pc.equal(d["typeId"], pa.scalar(S.SYNONYM, pa.int64())),
                ),
                "fsn",
                "synonym",
                "definition",
            ),
            "term": d["term"],
        }
    ).join(acc, keys="id", join_type="left outer")
    acceptability = pc.case_when(
        pc.make_struct(
            pc.equal(desc["acceptability_id"], pa.scalar(S.PREFERRED, pa.int64())),
            pc.equal(desc["acceptability_id"], pa.scalar(S.ACCEPTABLE, pa.int64())),
        ),
        "preferred",
        "acceptable",
        pa.scalar(None, pa.string()),
    )
    desc = desc.append_column("acceptability", acceptability).sort_by(
        [("id", "ascending"), ("language_refset_id", "ascending")]
    )
    out = {
        "snomed_concepts": concepts,
        "snomed_relationships": relationships,
        "snomed_descriptions": desc,
        "icd_map": candidates,
    }
    if rel.concrete_values.num_rows:
        cv = rel.concrete_values
        out["snomed_concrete_values"] = pa.table(
            {
                "id": cv["id"],
                "source_id": cv["sourceId"],
                "value": cv["value"],
                "relationship_group": cv["relationshipGroup"],
                "type_id": cv["typeId"],
            }
        ).sort_by("id")
    return out


def _counts(rel: Release, tables: dict[str, pa.Table], mres: MappingResult) -> dict:
    counts = {k: int(v) for k, v in sorted(rel.counts.items())}
    counts.update({f"mapping_{k}": int(v) for k, v in sorted(mres.counts.items())})
    counts["map_candidates"] = mres.candidates.num_rows
    return {**counts, **table_counts(tables)}


def _without_edges(sctids: pa.Array, rel_edges: pa.Table, wedges: pa.Table) -> int:
    if not len(sctids):
        return 0
    with_edges = pc.unique(
        pa.concat_arrays([rel_edges["sctid"].combine_chunks(), wedges["sctid"].combine_chunks()])
    )
    return int(len(sctids) - (pc.sum(pc.is_in(sctids, value_set=with_edges)).as_py() or 0))
