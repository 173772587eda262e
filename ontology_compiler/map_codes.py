"""The mapping step: sources -> candidates -> choice -> GEM chains -> fallback -> tokens and coverage."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import icd
from .map_policy import MapPolicy
from .map_sources import OmopValidity, SourceFindings, read_gem, read_nlm, read_omop, read_tls_map
from .mapping import (
    CANDIDATE_SCHEMA,
    MappingStats,
    _fill,
    choose,
    extended_map_candidates,
    nlm_candidates,
    omop_candidates,
    resolve_targets,
)
from .rf2_schema import ICD10CM_MAP_REFSET

log = logging.getLogger(__name__)

TOKEN_TERMS_SCHEMA = pa.schema([("vocabulary", pa.string()), ("code", pa.string()), ("term", pa.string())])
CATEGORIES = ("one_to_one", "one_to_many", "conditional", "chain", "fallback", "unmapped")


@dataclass
class MappingResult:
    candidates: pa.Table  # graph/icd_map: every candidate, chain, fallback and unmapped row
    token_snomed: pa.Table  # (vocabulary, code, sctid) that give tokens their edges
    tokens: pa.Table  # (vocabulary, code, code_dotted, title, mapping_source, mapping_kind)
    token_terms: pa.Table  # (vocabulary, code, term): fallback title text
    coverage: dict
    counts: dict
    findings: list[str] = field(default_factory=list)
    sources_used: dict[str, list[str]] = field(default_factory=dict)


def map_codes(
    maps: pa.Table,
    concepts_active: pa.Array,
    concepts_known: pa.Array,
    associations: pa.Table,
    sources: dict[str, list[Path]],
    policy: MapPolicy,
    universe: pa.Table | None = None,
    fallback: str = "none",
    code_counts: pa.Table | None = None,
    omop_validity: OmopValidity | None = None,
) -> MappingResult:
    """Candidates from every source, the policy's choice, GEM chains, fallback, then tokens and coverage.

    ``omop_validity`` (the Athena path): OMOP rows are read valid at its date, see :func:`read_omop`."""
    stats, sf = MappingStats(), SourceFindings()
    cand = _candidates(maps, sources, stats, sf, omop_validity)
    cand = resolve_targets(cand, concepts_active, concepts_known, associations, policy, stats)
    cand = choose(cand, policy)
    direct = cand.filter(cand["chosen"])
    named, universe, cand = _universe(cand, universe, stats)
    direct_keys = set(_keys(direct))
    pending = [k for k in _keys(universe) if k not in direct_keys]
    chain = _table(_chains(pending, direct, _read_gems(sources), policy))
    chained_keys = set(_keys(chain))
    pending = [k for k in pending if k not in chained_keys]
    fb, um, token_terms = _fallback(pending, universe, (direct, chain), fallback, stats)
    all_rows = pa.concat_tables([cand, chain, fb, um])
    token_snomed, tokens = _tokens(all_rows, universe)
    counts = dict(stats.counts)
    counts.update(sf.counts)
    return MappingResult(
        candidates=all_rows,
        token_snomed=token_snomed,
        tokens=tokens,
        token_terms=token_terms,
        coverage=_coverage(all_rows, tokens, universe, named, code_counts),
        counts=counts,
        findings=sf.examples + stats.examples,
        sources_used={k: [str(p) for p in v] for k, v in sources.items()},
    )


def _candidates(
    maps: pa.Table,
    sources: dict[str, list[Path]],
    stats: MappingStats,
    sf: SourceFindings,
    omop_validity: OmopValidity | None = None,
) -> pa.Table:
    """Candidate rows of every source: RF2 extended maps, the tls map, NLM and OMOP."""
    parts = [extended_map_candidates(maps, stats)]
    has_us_rf2 = (
        bool(pc.any(pc.equal(maps["refsetId"], pa.scalar(ICD10CM_MAP_REFSET, pa.int64()))).as_py())
        if maps.num_rows
        else False
    )
    for p in sources.get("tls_icd10cm", []):
        if has_us_rf2:
            stats.add(
                "tls_map_ignored_rf2_present", 1, f"{p}: ignored, the RF2 ICD-10-CM map refset is present"
            )
            continue
        rows = read_tls_map(p)
        rows = rows.filter(pc.equal(rows["active"], pa.scalar(1, pa.int8())))
        rows = rows.append_column("_file", pa.array([str(p)] * rows.num_rows, pa.string()))
        parts.append(extended_map_candidates(rows, stats))
    nlm_files = sources.get("nlm_1to1", []) + sources.get("nlm_1tom", [])
    if nlm_files:
        parts.append(nlm_candidates(read_nlm(nlm_files, sf)))
    if sources.get("omop_concept") and sources.get("omop_relationship"):
        for c, r in zip(sources["omop_concept"], sources["omop_relationship"], strict=False):
            parts.append(omop_candidates(read_omop(c, r, sf, validity=omop_validity)))
    return pa.concat_tables([p for p in parts if p.num_rows] or [CANDIDATE_SCHEMA.empty_table()])


def _universe(
    cand: pa.Table, universe: pa.Table | None, stats: MappingStats
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """``(named, universe, cand)``: the codes sources name, the codes that become tokens, and the
    candidates with chosen rows outside the universe explained (without ``--codes``: every named code)."""
    named = (
        cand.select(["vocabulary", "code"]).group_by(["vocabulary", "code"], use_threads=False).aggregate([])
    )
    if universe is None:
        return named, named.append_column("title", pa.nulls(named.num_rows, pa.string())), cand
    outside = ~_member(cand, universe)
    names = (
        cand.filter(pa.array(outside))
        .select(["vocabulary", "code"])
        .group_by(["vocabulary", "code"], use_threads=False)
        .aggregate([])
    )
    if names.num_rows:
        ex = ", ".join(f"{v} {c}" for v, c in _keys(names.slice(0, 5)))
        stats.add(
            "codes_named_by_sources_outside_universe",
            names.num_rows,
            f"{names.num_rows} code(s) named by mapping sources are not in the --codes list (e.g. {ex}); "
            "they do not become tokens (they can still serve GEM chains)",
        )
    reason = pc.if_else(
        pa.array(outside & cand["chosen"].to_numpy(zero_copy_only=False)),
        pa.scalar("chosen; code not in the --codes universe"),
        cand["reason"],
    )
    return named, universe, cand.set_column(cand.schema.get_field_index("reason"), "reason", reason)


def _read_gems(sources: dict[str, list[Path]]) -> dict[str, pa.Table]:
    """The GEM rows of each direction found (``backward``: I10gem, ``forward``: I9gem)."""
    return {
        d: pa.concat_tables([read_gem(p, d) for p in sources[f"gem_{d}"]])
        for d in ("backward", "forward")
        if sources.get(f"gem_{d}")
    }


def _fallback(
    pending: list[tuple[str, str]],
    universe: pa.Table,
    mapped: tuple[pa.Table, ...],
    fallback: str,
    stats: MappingStats,
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """``(fallback rows, unmapped rows, token terms)`` for the codes still pending after chains.

    With ``fallback="icd"`` a code takes its title words and its nearest mapped ancestor's concepts
    (``mapped``: the direct and chain rows); whatever is left is listed as unmapped.
    """
    titles = dict(zip(_keys(universe), universe["title"].to_pylist(), strict=True))
    mapped_sct: dict[tuple[str, str], list[int]] = {}
    for t in mapped:
        for v, c, s in zip(
            t["vocabulary"].to_pylist(), t["code"].to_pylist(), t["sctid"].to_pylist(), strict=True
        ):
            mapped_sct.setdefault((v, c), []).append(s)
    fb_rows = _columns()
    term_rows: dict[str, list] = {"vocabulary": [], "code": [], "term": []}
    unmapped: list[tuple[str, str]] = []
    for v, c in pending:
        anc = next((a for a in _ancestors(v, c) if (v, a) in mapped_sct), None) if fallback == "icd" else None
        title = titles.get((v, c)) if fallback == "icd" else None
        if anc is None and not title:
            unmapped.append((v, c))
            continue
        for s in mapped_sct[(v, anc)] if anc else [None]:
            _append(
                fb_rows,
                vocabulary=v,
                code=c,
                code_dotted=icd.dotted_code(c, v),
                sctid=s,
                source="icd_fallback",
                kind="fallback",
                via_code=anc,
                chosen=True,
                reason="fallback: title words" + (f" + ancestor {icd.dotted_code(anc, v)}" if anc else ""),
            )
        if title:
            term_rows["vocabulary"].append(v)
            term_rows["code"].append(c)
            term_rows["term"].append(title)
    um_rows = _columns()
    for v, c in unmapped:
        _append(
            um_rows,
            vocabulary=v,
            code=c,
            code_dotted=icd.dotted_code(c, v),
            source="none",
            kind="unmapped",
            chosen=False,
            reason="no usable mapping" + ("" if fallback == "icd" else " (try --fallback icd)"),
        )
    if unmapped:
        ex = ", ".join(f"{v} {icd.dotted_code(c, v)}" for v, c in unmapped[:8])
        stats.add(
            "codes_unmapped",
            len(unmapped),
            f"{len(unmapped)} code(s) of the universe have no mapping (e.g. {ex}); "
            "they are listed in graph/icd_map with kind 'unmapped'",
        )
    token_terms = pa.table(term_rows, schema=TOKEN_TERMS_SCHEMA)
    return _table(fb_rows), _table(um_rows), token_terms


def _tokens(rows: pa.Table, universe: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``(token_snomed, tokens)``: the chosen rows of universe codes, and one token row per code."""
    tok_rows = rows.filter(pa.array(_member(rows, universe) & rows["chosen"].to_numpy(zero_copy_only=False)))
    token_snomed = tok_rows.filter(pc.is_valid(tok_rows["sctid"])).select(["vocabulary", "code", "sctid"])
    first = (
        tok_rows.group_by(["vocabulary", "code"], use_threads=False)
        .aggregate([("code_dotted", "first"), ("source", "first"), ("kind", "first")])
        .rename_columns(["vocabulary", "code", "code_dotted", "mapping_source", "mapping_kind"])
    )
    ut = universe.select(["vocabulary", "code", "title"])
    tokens = first.join(ut, keys=["vocabulary", "code"], join_type="left outer").sort_by(
        [("vocabulary", "ascending"), ("code", "ascending")]
    )
    return token_snomed, tokens


def _columns() -> dict[str, list]:
    """Empty candidate columns, filled row by row with :func:`_append`."""
    return {f.name: [] for f in CANDIDATE_SCHEMA}


def _append(cols: dict[str, list], **values) -> None:
    for name in cols:
        cols[name].append(values.get(name))


def _table(cols: dict[str, list]) -> pa.Table:
    """A candidate table from :func:`_columns` filled by :func:`_append`."""
    return _fill(cols, len(cols["code"])) if cols["code"] else CANDIDATE_SCHEMA.empty_table()


def _keys(t: pa.Table) -> list[tuple[str, str]]:
    return list(zip(t["vocabulary"].to_pylist(), t["code"].to_pylist(), strict=True))


def _member(t: pa.Table, universe: pa.Table) -> np.ndarray:
    k = pc.binary_join_element_wise(t["vocabulary"], t["code"], "|")
    u = pc.binary_join_element_wise(universe["vocabulary"], universe["code"], "|")
    return pc.is_in(k, value_set=u.combine_chunks() if isinstance(u, pa.ChunkedArray) else u).to_numpy(
        zero_copy_only=False
    )


def _ancestors(vocabulary: str, code: str) -> list[str]:
    """Nearest first: ICD codes are prefixes of their descendants
    (E1165 -> E116 -> E11; 25001 -> 2500 -> 250)."""
    floor = 4 if vocabulary == icd.ICD9CM and code.startswith("E") else 3
    return [code[:k] for k in range(len(code) - 1, floor - 1, -1)]


def _chains(pending, direct: pa.Table, gem: dict[str, pa.Table], policy: MapPolicy) -> dict[str, list]:
    """GEM chains for pending codes: returns candidate columns (kind 'chain')."""
    cols = _columns()
    by_code: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for v, c, s, src in zip(
        direct["vocabulary"].to_pylist(),
        direct["code"].to_pylist(),
        direct["sctid"].to_pylist(),
        direct["source"].to_pylist(),
        strict=True,
    ):
        by_code.setdefault((v, c), []).append((s, src))
    plan = {icd.ICD10CM: ("backward", icd.ICD9CM), icd.ICD9CM: ("forward", icd.ICD10CM)}
    for vocab, (direction, other) in plan.items():
        if policy.chain.get(vocab) == "none" or direction not in gem:
            continue
        codes = [c for v, c in pending if v == vocab]
        if not codes:
            continue
        g = gem[direction]
        g = g.filter(pc.is_in(g["source"], value_set=pa.array(codes, pa.string())))
        if not policy.use_approximate:
            g = g.filter(pc.equal(g["approximate"], pa.scalar(0, pa.int8())))
        rows: dict[str, list[dict]] = {}
        for r in g.to_pylist():
            rows.setdefault(r["source"], []).append(r)
        for code, rs in rows.items():
            picks = _gem_pick(rs, other, by_code, policy)
            for r, targets in picks:
                for s, src in targets:
                    _append(
                        cols,
                        vocabulary=vocab,
                        code=code,
                        code_dotted=icd.dotted_code(code, vocab),
                        sctid=s,
                        source=f"gem_{direction}+{src}",
                        kind="chain",
                        via_code=r["target"],
                        gem_flags=r["flags"],
                        file=r["_file"],
                        line=r["_line"],
                        chosen=True,
                        reason=f"chain through {other} {icd.dotted_code(r['target'], other)}",
                    )
    return cols


def _gem_pick(rows: list[dict], other: str, by_code, policy: MapPolicy) -> list[tuple[dict, list]]:
    """Choose GEM rows for one source code, as the flags say.

    Combination rows (flag 3 = 1): a scenario is complete when every choice list has a target with a
    mapping; the first complete scenario gives one target per choice list (all together). Plain rows are
    alternatives: every mapped target (``union``) or the first (``first``). NoDx rows give nothing.
    """
    rows = [r for r in rows if r["target"] is not None and r["no_map"] == 0]
    combo = [r for r in rows if r["combination"] == 1]
    if combo:
        for scen in sorted({r["scenario"] for r in combo}):
            lists: dict[int, list[dict]] = {}
            for r in combo:
                if r["scenario"] == scen:
                    lists.setdefault(r["choice_list"], []).append(r)
            picked = []
            for ch in sorted(lists):
                hit = next((r for r in lists[ch] if (other, r["target"]) in by_code), None)
                if hit is None:
                    break
                picked.append((hit, _dedupe(by_code[(other, hit["target"])])))
            else:
                return picked
        return []
    out = [(r, _dedupe(by_code[(other, r["target"])])) for r in rows if (other, r["target"]) in by_code]
    return out[:1] if policy.one_to_many == "first" else out


def _dedupe(xs: list[tuple[int, str]]) -> list[tuple[int, str]]:
    seen, out = set(), []
    for s, src in xs:
        if s not in seen:
            seen.add(s)
            out.append((s, src))
    return out


def _coverage(rows: pa.Table, tokens: pa.Table, universe: pa.Table, named: pa.Table, code_counts) -> dict:
    kinds = {}
    chosen = rows.filter(rows["chosen"])
    n_sct = chosen.group_by(["vocabulary", "code"], use_threads=False).aggregate(
        [("sctid", "count_distinct")]
    )
    nmap = dict(zip(_keys(n_sct), n_sct["sctid_count_distinct"].to_pylist(), strict=True))
    tok_kind = dict(zip(_keys(tokens), tokens["mapping_kind"].to_pylist(), strict=True))
    tok_src = dict(zip(_keys(tokens), tokens["mapping_source"].to_pylist(), strict=True))
    per_vocab: dict[str, dict[str, int]] = {}
    per_source: dict[str, dict[str, int]] = {}
    for key in _keys(universe):
        kind = tok_kind.get(key)
        if kind is None:
            cat = "unmapped"
        elif kind in ("chain", "fallback", "conditional"):
            cat = kind
        else:
            cat = "one_to_one" if nmap.get(key, 0) == 1 else "one_to_many"
        kinds[key] = cat
        per_vocab.setdefault(key[0], dict.fromkeys(CATEGORIES, 0))[cat] += 1
        src = tok_src.get(key, "none")
        per_source.setdefault(src.split("+")[0], dict.fromkeys(CATEGORIES, 0))[cat] += 1
    out = {
        "codes": int(tokens.num_rows),
        "codes_in_universe": int(universe.num_rows),
        "codes_named_by_any_source": int(named.num_rows),
        "codes_by_vocabulary": {
            v: sum(c for k, c in d.items() if k != "unmapped") for v, d in sorted(per_vocab.items())
        },
        "by_vocabulary": dict(sorted(per_vocab.items())),
        "by_source": dict(sorted(per_source.items())),
        "totals": {c: sum(d[c] for d in per_vocab.values()) for c in CATEGORIES},
    }
    if code_counts is not None:
        total = int(pc.sum(code_counts["count"]).as_py() or 0)
        lost = 0
        for v, c, n in zip(
            code_counts["vocabulary"].to_pylist(),
            code_counts["code"].to_pylist(),
            code_counts["count"].to_pylist(),
            strict=True,
        ):
            if (v, c) not in tok_kind:
                lost += n
        out["occurrences"] = {
            "total": total,
            "lost": lost,
            "lost_share": round(lost / total, 6) if total else 0.0,
        }
    return out
