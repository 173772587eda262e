"""ICD -> SNOMED mapping: candidate rows from each source, then a precedence policy picks per code.

Every source yields rows of :data:`CANDIDATE_SCHEMA` (one ICD code, one SNOMED concept, where it came
from, whether it is conditional). :func:`choose` applies the policy and marks the chosen rows; the full
candidate table is written to ``graph/icd_map.parquet`` so users can see what was not chosen and why.

Sources today: the SNOMED ICD-10 extended maps (International 447562003, US ICD-10-CM 6011000124106),
read in reverse (code -> concepts). The policy: for each code, unconditional candidates win over
conditional (IFA) ones; among those, the first source in a precedence list of source names wins; an ICD
code mapped to several SNOMED concepts by that source keeps them all (the union of their edges).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import icd
from .rf2_schema import ICD10_MAP_REFSET, ICD10CM_MAP_REFSET

log = logging.getLogger(__name__)

CANDIDATE_SCHEMA = pa.schema(
    [
        ("vocabulary", pa.string()),
        ("code", pa.string()),  # dotless, as MIMIC-IV writes it
        ("code_dotted", pa.string()),
        ("sctid", pa.int64()),
        ("source", pa.string()),
        ("kind", pa.string()),  # unconditional | conditional
        ("map_group", pa.int32()),
        ("map_priority", pa.int32()),
        ("map_rule", pa.string()),
        ("map_advice", pa.string()),
        ("map_category", pa.int64()),
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

DEFAULT_PRECEDENCE: tuple[str, ...] = ("snomed_icd10cm_map", "snomed_icd10_map")

UNCONDITIONAL_RULES = ("TRUE", "OTHERWISE TRUE")


@dataclass
class MappingStats:
    """Counts of what the mapping step kept and dropped, for the manifest."""

    counts: Counter = field(default_factory=Counter)

    def add(self, key: str, n: int) -> None:
        if n:
            self.counts[key] += int(n)


def extended_map_candidates(rows: pa.Table, stats: MappingStats) -> pa.Table:
    """Resolve active extended-map rows statically and reverse them into ICD -> SNOMED candidates.

    Per (refset, concept, group), rows are taken in ascending ``mapPriority``: ``IFA`` rows before the
    first ``TRUE``/``OTHERWISE TRUE`` row are conditional candidates; that row is the unconditional
    candidate; later rows can never fire and are dropped (counted). Empty targets are dropped (counted).
    """
    rows = rows.filter(pc.is_in(rows["refsetId"], value_set=pa.array(list(EXTENDED_MAP_SOURCES), pa.int64())))
    if rows.num_rows == 0:
        return CANDIDATE_SCHEMA.empty_table()
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
    rows = rows.take(order)
    n = rows.num_rows
    ref = rows["refsetId"].to_numpy()
    con = rows["referencedComponentId"].to_numpy()
    grp = rows["mapGroup"].to_numpy()
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (ref[1:] != ref[:-1]) | (con[1:] != con[:-1]) | (grp[1:] != grp[:-1])
    group_id = np.cumsum(new_group) - 1
    uncond = pc.is_in(rows["mapRule"], value_set=pa.array(UNCONDITIONAL_RULES)).to_numpy(zero_copy_only=False)
    is_ifa = pc.starts_with(rows["mapRule"], "IFA").to_numpy(zero_copy_only=False)
    # number of unconditional rows strictly before each row within its group
    uc = np.cumsum(uncond) - uncond
    group_start_uc = uc[np.flatnonzero(new_group)][group_id]
    before_winner = (uc - group_start_uc) == 0
    winner = uncond & before_winner
    conditional = is_ifa & before_winner
    unreachable = ~(winner | conditional)
    stats.add("map_rows_unreachable_after_true", int(unreachable.sum()))
    unknown_rule = ~(uncond | is_ifa)
    stats.add("map_rows_unknown_rule", int(unknown_rule.sum()))
    target = pc.utf8_trim_whitespace(rows["mapTarget"])
    empty = pc.equal(target, "").to_numpy(zero_copy_only=False)
    stats.add("map_groups_without_target", int((winner & empty).sum()))
    stats.add("map_rows_empty_target", int(((winner | conditional) & empty).sum()))
    keep = (winner | conditional) & ~empty
    rows = rows.filter(pa.array(keep))
    kind = np.where(winner[keep], "unconditional", "conditional")
    ref_kept = rows["refsetId"].to_numpy()
    source = np.empty(rows.num_rows, dtype=object)
    vocab = np.empty(rows.num_rows, dtype=object)
    for refset_id, (name, vocabulary) in EXTENDED_MAP_SOURCES.items():
        source[ref_kept == refset_id] = name
        vocab[ref_kept == refset_id] = vocabulary
    tgt = target.filter(pa.array(keep))
    code = icd.dotless(tgt)
    return pa.table(
        {
            "vocabulary": pa.array(vocab, pa.string()),
            "code": code,
            "code_dotted": icd.dotted(code, icd.ICD10CM),
            "sctid": rows["referencedComponentId"],
            "source": pa.array(source, pa.string()),
            "kind": pa.array(kind, pa.string()),
            "map_group": rows["mapGroup"],
            "map_priority": rows["mapPriority"],
            "map_rule": rows["mapRule"],
            "map_advice": rows["mapAdvice"],
            "map_category": rows["mapCategoryId"],
            "chosen": pa.array(np.zeros(rows.num_rows, dtype=bool)),
            "reason": pa.array([""] * rows.num_rows, pa.string()),
        },
        schema=CANDIDATE_SCHEMA,
    )


def choose(candidates: pa.Table, precedence: tuple[str, ...] = DEFAULT_PRECEDENCE) -> pa.Table:
    """Mark the chosen candidate rows (``chosen``, ``reason``) under a source-precedence policy.

    For each (vocabulary, code): unconditional candidates when any source has one, else the conditional
    (IFA) ones; among those, the highest-precedence source's. Duplicate (code, concept) rows collapse.
    """
    n = candidates.num_rows
    if n == 0:
        return candidates
    unknown = set(pc.unique(candidates["source"]).to_pylist()) - set(precedence)
    if unknown:
        raise ValueError(
            f"mapping sources {sorted(unknown)} are not in the precedence list {list(precedence)}"
        )
    src_rank = (
        pc.index_in(candidates["source"], value_set=pa.array(list(precedence))).to_numpy().astype(np.int32)
    )
    cond = pc.equal(candidates["kind"], "conditional").to_numpy(zero_copy_only=False).astype(np.int32)
    t = candidates.append_column("_score", pa.array(cond * len(precedence) + src_rank)).append_column(
        "_row", pa.array(np.arange(n))
    )
    best = t.group_by(["vocabulary", "code"]).aggregate([("_score", "min")])
    t = t.join(best, keys=["vocabulary", "code"]).sort_by("_row")
    chosen = pc.equal(t["_score"], t["_score_min"]).to_numpy(zero_copy_only=False)
    # one chosen row per (code, concept)
    ct = t.filter(pa.array(chosen)).select(["vocabulary", "code", "sctid", "_row"])
    first = ct.group_by(["vocabulary", "code", "sctid"]).aggregate([("_row", "min")])["_row_min"].to_numpy()
    final = np.zeros(n, dtype=bool)
    final[first] = True
    reason = np.where(
        final,
        "chosen",
        np.where(chosen, "duplicate of a chosen row", "a higher-precedence candidate exists"),
    )
    out = candidates.set_column(candidates.schema.get_field_index("chosen"), "chosen", pa.array(final))
    return out.set_column(out.schema.get_field_index("reason"), "reason", pa.array(reason, pa.string()))
