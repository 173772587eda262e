"""ICD -> SNOMED mapping: candidates from every source, a policy that chooses, chains and fallback.

Every source yields rows of :data:`CANDIDATE_SCHEMA` (one ICD code, one SNOMED concept, the source, the
rule, the file and line it came from). The policy (:mod:`map_policy`) decides per code:

1. candidates whose SNOMED concept is inactive follow REPLACED BY / SAME AS; unknown or still inactive
   targets are dropped (counted, with file and line);
2. unconditional candidates beat conditional (IFA) ones; among them the first source in the
   vocabulary's precedence list wins; ``one_to_many`` keeps all its concepts (union) or the first;
3. codes of the universe with no direct mapping follow the GEMs to the other ICD version (combination
   rows need one code from each choice list of a scenario);
4. with ``fallback="icd"`` the rest take their own title words and their nearest mapped ICD ancestor's
   concepts; whatever is left is listed as unmapped. No code is dropped silently.

The full table, chosen or not and why, is ``graph/icd_map.parquet``. The RF2 map refsets read here are
described in ``docs/input-formats.md``, "ICD-10 extended map".
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import icd
from .map_policy import MapPolicy
from .rf2_schema import ICD10_MAP_REFSET, ICD10CM_MAP_REFSET

log = logging.getLogger(__name__)

CANDIDATE_SCHEMA = pa.schema(
    [
        ("vocabulary", pa.string()),
        ("code", pa.string()),  # dotless, as MIMIC-IV writes it
        ("code_dotted", pa.string()),
        ("sctid", pa.int64()),  # null for an unmapped code
        ("source", pa.string()),
        ("kind", pa.string()),  # unconditional | conditional | chain | fallback | unmapped
        ("map_group", pa.int32()),
        ("map_priority", pa.int32()),
        ("map_rule", pa.string()),
        ("map_advice", pa.string()),
        ("map_category", pa.int64()),
        ("via_code", pa.string()),  # chain: the other version's code; fallback: the ancestor
        ("gem_flags", pa.string()),
        ("redirected_from", pa.int64()),  # the inactive concept a historical association replaced
        ("file", pa.string()),
        ("line", pa.int64()),
        ("chosen", pa.bool_()),
        ("reason", pa.string()),
    ]
)

# Extended-map refsets read as ICD sources: refset id -> (source name, vocabulary of the targets).
# WHO ICD-10 targets of the International map are used as ICD-10 tokens, as the original method did.
EXTENDED_MAP_SOURCES: dict[int, tuple[str, str]] = {
    ICD10CM_MAP_REFSET: ("snomed_icd10cm_map", icd.ICD10CM),
    ICD10_MAP_REFSET: ("snomed_icd10_map", icd.ICD10CM),
}
UNCONDITIONAL_RULES = ("TRUE", "OTHERWISE TRUE")


@dataclass
class MappingStats:
    """Counts and examples of what the mapping step kept and dropped, for the manifest."""

    counts: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def add(self, key: str, n: int, example: str | None = None) -> None:
        if n:
            self.counts[key] += int(n)
            if example and len(self.examples) < 50:
                self.examples.append(example)
                log.warning("%s", example)


def _fill(t: dict, n: int) -> pa.Table:
    """A candidate table from the given columns; the rest null (``chosen`` False, ``reason`` '')."""
    cols = {}
    for f in CANDIDATE_SCHEMA:
        if f.name in t:
            cols[f.name] = (
                pa.array(t[f.name], f.type)
                if not isinstance(t[f.name], (pa.Array, pa.ChunkedArray))
                else pc.cast(t[f.name], f.type)
            )
        elif f.name == "chosen":
            cols[f.name] = pa.array(np.zeros(n, dtype=bool))
        elif f.name == "reason":
            cols[f.name] = pa.array([""] * n, pa.string())
        else:
            cols[f.name] = pa.nulls(n, f.type)
    return pa.table(cols, schema=CANDIDATE_SCHEMA)


# ---------------------------------------------------------------------------------------------- sources


def extended_map_candidates(rows: pa.Table, stats: MappingStats) -> pa.Table:
    """Resolve active extended-map rows statically and reverse them into ICD -> SNOMED candidates.

    Per (refset, concept, group), rows are taken in ascending ``mapPriority``: ``IFA`` rows before the
    first ``TRUE``/``OTHERWISE TRUE`` row are conditional candidates; that row is the unconditional
    candidate; later rows can never fire and are dropped (counted). Empty targets are dropped (counted).
    """
    rows = rows.filter(pc.is_in(rows["refsetId"], value_set=pa.array(list(EXTENDED_MAP_SOURCES), pa.int64())))
    if rows.num_rows == 0:
        return CANDIDATE_SCHEMA.empty_table()
    rows, winner = _rules_that_fire(_map_rows(rows), stats)
    ref_kept = rows["refsetId"].to_numpy()
    source = np.empty(rows.num_rows, dtype=object)
    for refset_id, (name, _vocab) in EXTENDED_MAP_SOURCES.items():
        source[ref_kept == refset_id] = name
    code = icd.dotless(pc.utf8_trim_whitespace(rows["mapTarget"]))
    return _fill(
        {
            "vocabulary": pa.array([icd.ICD10CM] * rows.num_rows, pa.string()),
            "code": code,
            "code_dotted": icd.dotted(code, icd.ICD10CM),
            "sctid": rows["referencedComponentId"],
            "source": pa.array(source, pa.string()),
            "kind": pa.array(np.where(winner, "unconditional", "conditional"), pa.string()),
            "map_group": rows["mapGroup"],
            "map_priority": rows["mapPriority"],
            "map_rule": rows["mapRule"],
            "map_advice": rows["mapAdvice"],
            "map_category": rows["mapCategoryId"],
            "file": rows["_file"],
            "line": rows["_line"],
        },
        rows.num_rows,
    )


def _map_rows(rows: pa.Table) -> pa.Table:
    """Map rows with ``_file``/``_line`` (null when unknown), rule and advice unescaped (``&#x7C;`` -> ``|``),
    sorted by refset, concept, group and priority."""
    if "_file" not in rows.column_names:
        rows = rows.append_column("_file", pa.nulls(rows.num_rows, pa.string()))
    if "_line" not in rows.column_names:
        rows = rows.append_column("_line", pa.nulls(rows.num_rows, pa.int64()))
    rule = pc.utf8_trim_whitespace(pc.replace_substring(rows["mapRule"], "&#x7C;", "|"))
    advice = pc.replace_substring(rows["mapAdvice"], "&#x7C;", "|")
    rows = rows.set_column(rows.schema.get_field_index("mapRule"), "mapRule", rule)
    rows = rows.set_column(rows.schema.get_field_index("mapAdvice"), "mapAdvice", advice)
    order = pc.sort_indices(
        rows,
        sort_keys=[
            ("refsetId", "ascending"),
            ("referencedComponentId", "ascending"),
            ("mapGroup", "ascending"),
            ("mapPriority", "ascending"),
        ],
    )
    return rows.take(order)


def _rules_that_fire(rows: pa.Table, stats: MappingStats) -> tuple[pa.Table, np.ndarray]:
    """The sorted map rows that can fire and have a target, and which of them are unconditional."""
    n = rows.num_rows
    ref, con, grp = (rows[c].to_numpy() for c in ("refsetId", "referencedComponentId", "mapGroup"))
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (ref[1:] != ref[:-1]) | (con[1:] != con[:-1]) | (grp[1:] != grp[:-1])
    group_id = np.cumsum(new_group) - 1
    uncond = pc.is_in(rows["mapRule"], value_set=pa.array(UNCONDITIONAL_RULES)).to_numpy(zero_copy_only=False)
    is_ifa = pc.starts_with(rows["mapRule"], "IFA").to_numpy(zero_copy_only=False)
    uc = np.cumsum(uncond) - uncond  # unconditional rows strictly before each row
    before_winner = (uc - uc[np.flatnonzero(new_group)][group_id]) == 0
    winner = uncond & before_winner
    conditional = is_ifa & before_winner
    stats.add("map_rows_unreachable_after_true", int((~(winner | conditional)).sum()))
    stats.add("map_rows_unknown_rule", int((~(uncond | is_ifa)).sum()))
    empty = pc.equal(pc.utf8_trim_whitespace(rows["mapTarget"]), "").to_numpy(zero_copy_only=False)
    stats.add("map_groups_without_target", int((winner & empty).sum()))
    stats.add("map_rows_empty_target", int(((winner | conditional) & empty).sum()))
    keep = (winner | conditional) & ~empty
    return rows.filter(pa.array(keep)), winner[keep]


def nlm_candidates(nlm: pa.Table) -> pa.Table:
    n = nlm.num_rows
    return _fill(
        {
            "vocabulary": pa.array([icd.ICD9CM] * n, pa.string()),
            "code": nlm["code"],
            "code_dotted": icd.dotted(nlm["code"], icd.ICD9CM),
            "sctid": nlm["sctid"],
            "source": pc.if_else(nlm["one_to_one"], pa.scalar("nlm_icd9_1to1"), pa.scalar("nlm_icd9_1tom")),
            "kind": pa.array(["unconditional"] * n, pa.string()),
            "file": nlm["_file"],
            "line": nlm["_line"],
        },
        n,
    )


def omop_candidates(omop: pa.Table) -> pa.Table:
    n = omop.num_rows
    dotted9 = icd.dotted(omop["code"], icd.ICD9CM)
    dotted10 = icd.dotted(omop["code"], icd.ICD10CM)
    return _fill(
        {
            "vocabulary": omop["vocabulary"],
            "code": omop["code"],
            "code_dotted": pc.if_else(pc.equal(omop["vocabulary"], icd.ICD9CM), dotted9, dotted10),
            "sctid": omop["sctid"],
            "source": pa.array(["omop"] * n, pa.string()),
            "kind": pa.array(["unconditional"] * n, pa.string()),
            "file": omop["_file"],
            "line": omop["_line"],
        },
        n,
    )


# ------------------------------------------------------------------------------------- target validity


def resolve_targets(
    cand: pa.Table,
    active: pa.Array,
    known: pa.Array,
    associations: pa.Table,
    policy: MapPolicy,
    stats: MappingStats,
) -> pa.Table:
    """Redirect candidates on inactive concepts through historical associations; mark the unusable."""
    sct = cand["sctid"].to_numpy(zero_copy_only=False)
    is_active = pc.is_in(cand["sctid"], value_set=active).to_numpy(zero_copy_only=False)
    is_known = pc.is_in(cand["sctid"], value_set=known).to_numpy(zero_copy_only=False)
    reason = np.array([""] * len(sct), dtype=object)
    redirected = np.full(len(sct), -1, dtype=np.int64)
    new = sct.copy()
    inactive = ~is_active & is_known
    if inactive.any() and associations.num_rows and policy.follow:
        nxt: dict[int, int] = {}
        for refset in reversed(policy.follow):  # earlier refsets in `follow` win
            a = associations.filter(pc.equal(associations["refsetId"], pa.scalar(refset, pa.int64())))
            a = a.sort_by([("referencedComponentId", "ascending"), ("targetComponentId", "ascending")])
            nxt.update(
                zip(a["referencedComponentId"].to_pylist(), a["targetComponentId"].to_pylist(), strict=True)
            )
        live = set(active.to_pylist())
        for i in np.flatnonzero(inactive):
            cur, hops = int(sct[i]), 0
            while cur not in live and cur in nxt and hops < policy.max_hops:
                cur, hops = nxt[cur], hops + 1
            if cur in live:
                new[i], redirected[i] = cur, sct[i]
    resolved_inactive = inactive & (redirected >= 0)
    still_inactive = inactive & (redirected < 0)
    unknown = ~is_known
    reason[still_inactive] = "SNOMED concept inactive, no REPLACED BY / SAME AS to an active concept"
    reason[unknown] = "SNOMED concept not in the release"
    stats.add("map_targets_redirected_by_association", int(resolved_inactive.sum()))
    for mask, key, what in (
        (still_inactive, "map_targets_inactive_dropped", "an inactive SNOMED concept"),
        (unknown, "map_targets_unknown_sctid", "an SCTID that is not in the release"),
    ):
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            stats.add(
                key,
                int(mask.sum()),
                f"{cand['file'][i].as_py()}, line {cand['line'][i].as_py()}: "
                f"{cand['vocabulary'][i].as_py()} {cand['code_dotted'][i].as_py()} maps to {what} "
                f"({sct[i]}); {int(mask.sum())} such candidate(s) dropped",
            )
    out = cand.set_column(cand.schema.get_field_index("sctid"), "sctid", pa.array(new, pa.int64()))
    out = out.set_column(
        out.schema.get_field_index("redirected_from"),
        "redirected_from",
        pa.array(redirected, pa.int64(), mask=redirected < 0),
    )
    return out.set_column(out.schema.get_field_index("reason"), "reason", pa.array(reason, pa.string()))


# ----------------------------------------------------------------------------------------------- choose


def choose(cand: pa.Table, policy: MapPolicy) -> pa.Table:
    """Mark chosen rows among usable candidates (empty ``reason``) per vocabulary precedence."""
    n = cand.num_rows
    if n == 0:
        return cand
    usable = pc.equal(cand["reason"], "").to_numpy(zero_copy_only=False)
    rank = np.full(n, 10_000, dtype=np.int64)
    vocab = cand["vocabulary"].to_numpy(zero_copy_only=False)
    src = cand["source"]
    for v, order in policy.precedence.items():
        idx = pc.fill_null(pc.index_in(src, value_set=pa.array(list(order), pa.string())), -1).to_numpy()
        sel = (vocab == v) & (idx >= 0)
        rank[sel] = idx[sel]
    not_in_policy = usable & (rank == 10_000)
    reason = cand["reason"].to_numpy(zero_copy_only=False).astype(object)
    reason[not_in_policy] = "source not in the policy's precedence for this vocabulary"
    usable &= ~not_in_policy
    cond = pc.equal(cand["kind"], "conditional").to_numpy(zero_copy_only=False).astype(np.int64)
    score = np.where(usable, cond * 1000 + rank, 1 << 40)
    grp = pc.binary_join_element_wise(cand["vocabulary"], cand["code"], "|")
    t = pa.table(
        {
            "g": grp,
            "score": pa.array(score),
            "row": pa.array(np.arange(n)),
            "mg": pc.fill_null(cand["map_group"], 0),
            "mp": pc.fill_null(cand["map_priority"], 0),
            "line": pc.fill_null(cand["line"], 0),
            "sctid": pc.fill_null(cand["sctid"], -1),
        }
    )
    best = t.group_by("g", use_threads=False).aggregate([("score", "min")])
    t = t.join(best, keys="g").sort_by(
        [
            ("g", "ascending"),
            ("score", "ascending"),
            ("mg", "ascending"),
            ("mp", "ascending"),
            ("line", "ascending"),
            ("row", "ascending"),
        ]
    )
    win = pc.and_(pc.equal(t["score"], t["score_min"]), pc.less(t["score"], 1 << 40)).to_numpy(
        zero_copy_only=False
    )
    rows = t["row"].to_numpy()
    w = t.filter(pa.array(win))  # winning rows, still sorted by code then tie-breakers
    if policy.one_to_many == "first":
        g = w["g"].to_numpy(zero_copy_only=False)
        keep = np.ones(len(g), dtype=bool)
        keep[1:] = g[1:] != g[:-1]
        picked = w["row"].to_numpy()[keep]
    else:  # union: one row per (code, concept)
        first = (
            w.append_column("k", pa.array(np.arange(w.num_rows)))
            .group_by(["g", "sctid"], use_threads=False)
            .aggregate([("k", "min")])
        )
        picked = w["row"].to_numpy()[np.sort(first["k_min"].to_numpy())]
    chosen = np.zeros(n, dtype=bool)
    chosen[picked] = True
    lost = usable & ~chosen
    winners = np.zeros(n, dtype=bool)
    winners[rows[win]] = True
    reason[lost & winners] = (
        "duplicate of a chosen row" if policy.one_to_many == "union" else "one_to_many = first"
    )
    reason[lost & ~winners] = "a higher-precedence candidate exists"
    reason[chosen] = "chosen"
    out = cand.set_column(cand.schema.get_field_index("chosen"), "chosen", pa.array(chosen))
    return out.set_column(out.schema.get_field_index("reason"), "reason", pa.array(reason, pa.string()))
