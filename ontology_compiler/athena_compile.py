"""``compile_athena``: an Athena vocabulary download -> the same HRR program format as an RF2 release.

The download is read into the resolved state of :mod:`athena_read`; from there the steps are the RF2
path's own (:mod:`compiler`): ``Maps to`` (read by the OMOP mapping source from the same files, valid at
``as_of``) and any other mapping source given decide each ICD token's SNOMED concepts under the mapping
policy, then the graph, the ICD classification and the program tables. Identical inputs and options give
the same program id; recompiling is then a no-op.

Licence: an Athena download's SNOMED CT content is distributed under OHDSI's grant for use within OHDSI
tools, which is not an RF2 affiliate licence; :data:`LICENCE_NOTE` is logged on every compile that reads
SNOMED content and written to the manifest.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .athena_read import find_athena, load_athena
from .codes import read_code_counts, read_code_universe
from .compiler import _counts, _mapping_sources, _program_tables, encode_release_tables
from .front import DEFAULT_OUT, FALLBACKS
from .graph import check_is_a_acyclic
from .manifest import (
    CompileResult,
    input_entry,
    manifest_head,
    option_file_input,
    program_id,
    publish_program,
    stopwords_input,
    timed,
    up_to_date,
)
from .map_codes import map_codes
from .map_policy import load_policy
from .map_sources import OmopValidity
from .memory import tune_pool
from .program import BackgroundEncoder
from .release import parse_as_of
from .rf2_schema import US_ENGLISH
from .snomed_tokens import token_options, with_snomed_tokens

log = logging.getLogger(__name__)

LICENCE_NOTE = (
    "SNOMED CT content from an Athena download comes under OHDSI's grant (use within OHDSI tools); "
    "it is not an RF2 affiliate licence: check yours before you share this program"
)


def compile_athena(
    src: str | Path,
    *,
    out: str | Path = DEFAULT_OUT,
    name: str | None = None,
    as_of: str | int | None = None,
    stopwords: str | Path | None = None,
    map_policy: str | Path | None = None,
    nlm_icd9: str | Path | None = None,
    gem: str | Path | None = None,
    icd10cm_map: str | Path | None = None,
    codes: str | Path | None = None,
    code_counts: str | Path | None = None,
    fallback: str = "none",
    icd_hierarchy: bool = True,
    tokens: str = "icd",
    snomed_roots: tuple[int, ...] = (),
    concept_set: str | Path | None = None,
) -> CompileResult:
    """Compile the Athena download in ``src`` into ``out/<name>/<program_id>/``.

    ``as_of`` (YYYYMMDD) takes every concept and relationship valid at that date (without it: those
    whose ``invalid_reason`` is empty). ``nlm_icd9``, ``gem``, ``icd10cm_map``: further mapping sources
    (the policy's precedence decides; the download's ``Maps to`` is the ``omop`` source); ``stopwords``,
    ``map_policy``, ``codes``, ``code_counts``, ``fallback``, ``icd_hierarchy``, ``tokens``,
    ``snomed_roots`` and ``concept_set`` as for RF2 (:func:`compiler.compile_ontology`).
    """
    t_start = time.perf_counter()
    tune_pool()
    src = Path(src)
    name = name or src.resolve().name
    out_dir = Path(out) / name
    at = parse_as_of(as_of)
    files = find_athena(src)
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
    stop_words, stop_input = stopwords_input(stopwords)
    policy = load_policy(map_policy)
    extra = _mapping_sources(src, [nlm_icd9, gem, icd10cm_map]) if any((nlm_icd9, gem, icd10cm_map)) else {}
    sources = {k: v for k, v in extra.items() if not k.startswith("omop_")}
    sources["omop_concept"] = [files.paths["CONCEPT.csv"]]
    sources["omop_relationship"] = [files.paths["CONCEPT_RELATIONSHIP.csv"]]
    named = (("codes", codes), ("code_counts", code_counts), ("concept_set", concept_set))
    inputs = _inputs(files.paths, stop_input, sources, policy, named, icd_hierarchy)
    options = {
        "format": "athena",
        "as_of": None if at is None else str(at),
        "fallback": fallback,
        "map_policy": policy.as_dict(),
        "icd_hierarchy": bool(icd_hierarchy),
        **token_options(tokens, tuple(snomed_roots), concept_set),
    }
    pid = program_id(inputs, options)
    if (done := up_to_date(out_dir, pid)) is not None:
        return done
    t_hash = time.perf_counter() - t_start
    rel, info = load_athena(src, as_of=at)
    if rel.concepts.num_rows:
        log.warning("%s", LICENCE_NOTE)
    with timed(rel.timings, "is_a_check"):
        check_is_a_acyclic(rel.relationships)
    with timed(rel.timings, "mapping"):
        mres = map_codes(
            rel.maps,
            rel.concepts["id"].combine_chunks(),
            rel.known_concepts,
            rel.associations,
            sources,
            policy,
            universe=read_code_universe(codes) if codes is not None else None,
            fallback=fallback,
            code_counts=read_code_counts(code_counts) if code_counts is not None else None,
            omop_validity=OmopValidity(at),
        )
    mres = with_snomed_tokens(mres, rel, tokens, tuple(snomed_roots), concept_set)
    encoder = BackgroundEncoder(pid)
    encode_release_tables(rel, encoder)
    tables, graph_tables, coverage, hierarchy = _program_tables(
        rel, mres, stop_words, US_ENGLISH, icd_hierarchy, encoder
    )
    manifest = {
        **manifest_head(pid),
        "release": _release_entry(name, info["snomed_version"], options["as_of"]),
        "inputs": inputs,
        "options": options,
        "counts": {
            **_counts(rel, tables, mres, hierarchy),
            "unknown_relationship_ids": info["unknown_relationship_ids"],
        },
        "coverage": coverage,
        "findings": mres.findings[:100],
        "mapping_sources": mres.sources_used,
        "timings": {"hash_inputs": round(t_hash, 3), **rel.timings},
    }
    return publish_program(out_dir, pid, tables, graph_tables, manifest, t_start)


def _inputs(
    paths: dict[str, Path], stop_input: dict, sources: dict, policy, named: tuple, icd_hierarchy: bool
) -> list[dict]:
    """The manifest's inputs, which the program id hashes: the download's files, the stopwords, the
    mapping sources besides the download's own, the policy, the option files ``named`` ((role, path or
    None) pairs) and, with ``icd_hierarchy``, the ICD classification's data."""
    inputs = [input_entry(f"athena:{n}", p, n) for n, p in sorted(paths.items())]
    inputs += [stop_input]
    inputs += [
        input_entry(f"map:{k}", p, str(p))
        for k, ps in sorted(sources.items())
        if k[:5] != "omop_"
        for p in ps
    ]
    inputs += [{"role": "map_policy", "path": policy.path, "sha256": policy.sha256, "bytes": None}]
    inputs += [option_file_input(r, f) for r, f in named if f]
    if icd_hierarchy:
        from .icd_hierarchy import hierarchy_inputs

        inputs += hierarchy_inputs()
    return inputs


def _release_entry(name: str, snomed_version, as_of: str | None) -> dict:
    """The manifest's ``release`` entry of an Athena download."""
    return {
        "name": name,
        "date": snomed_version,
        "as_of": as_of,
        "type": "Athena",
        "namespaces": [],
        "modules": [],
        "note": LICENCE_NOTE,
    }
