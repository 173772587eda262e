"""Generate a synthetic SNOMED CT RF2 release with International Edition volumes, for benchmarks.

    python benchmarks/synthetic_release.py --out artifacts/releases/synthetic_int --scale 1.0

At ``scale=1.0`` it writes about 360k concepts (95 % active), 1.6M descriptions, 1.2M inferred
relationships (an is-a DAG whose parents always have a smaller index, about 1.5 parents per concept,
plus attribute relationships of ~40 real attribute types in role groups), one US English language
refset row per active description, about 150k ICD-10 ExtendedMap rows (mostly ``TRUE``; some
``IFA``/``OTHERWISE TRUE`` groups, some empty targets), a few thousand concrete values and about 5k
text definitions. With ``full=True`` a Full folder is added: every Snapshot row plus an earlier version
(older effectiveTime, a different value or active flag) for ~10 % of the rows, effective times spread
over ten releases from 20170131 to 20220531.

Everything is vectorised with numpy / pyarrow (no Python loop per row); all SCTIDs carry a correct
Verhoeff check digit, computed with numpy. Terms are 2-8 words drawn Zipf-like from a ~30k synthetic
vocabulary (some words non-ASCII); they are not SNOMED CT text. The output folder is the package root
(``Snapshot/``, ``Full/``, ``release_info.json``). The same seed gives the same release.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from ontology_compiler import rf2_schema as S  # noqa: E402
from ontology_compiler.rf2_write import rf2_file_name, rf2_folder, write_rf2_file  # noqa: E402
from ontology_compiler.sctid import make_sctids, verhoeff_valid  # noqa: E402

log = logging.getLogger("synthetic_release")

RELEASE_DATE = "20220531"
EFFECTIVE_TIMES = np.array(
    [20170131, 20170731, 20180131, 20180731, 20190131, 20190731, 20200131, 20210131, 20210731, 20220531],
    dtype=np.int64,
)
INITIAL_CHAR_INSENSITIVE = S.INITIAL_CHAR_INSENSITIVE

# Volumes at scale 1.0 (SNOMED CT International 2022-05-31 orders of magnitude).
N_CONCEPTS = 360_000
N_DESCRIPTIONS = 1_600_000
N_INFERRED = 1_200_000
N_MAP_ROWS = 150_000
N_CONCRETE = 4_000
N_TEXT_DEFINITIONS = 5_000
ACTIVE_CONCEPT_FRACTION = 0.95
# Active Snapshot rows that also get an earlier version in Full (inactive rows always do): with the
# inactive ones, about 10 % of the rows.
HISTORY_ACTIVE_FRACTION = 0.08
# Item numbers of the generated SCTIDs (partition 00 concepts, 01 descriptions, 02 relationships): blocks
# far from the real SCTIDs of the fixed concepts; text definitions follow the descriptions, concrete
# values the relationships.
CONCEPT_ITEMS = 20_000_000
DESCRIPTION_ITEMS = 30_000_000
RELATIONSHIP_ITEMS = 40_000_000

# Synthetic hierarchies: (key, root SCTID, root FSN, semantic tag of members, share of concepts).
HIERARCHIES: list[tuple[str, int, str, str, float]] = [
    ("finding", 404684003, "Clinical finding (finding)", "disorder", 0.34),
    ("procedure", 71388002, "Procedure (procedure)", "procedure", 0.16),
    ("body", 123037004, "Body structure (body structure)", "body structure", 0.10),
    (
        "morphology",
        0,
        "Morphologically abnormal structure (morphologic abnormality)",
        "morphologic abnormality",
        0.015,
    ),
    ("organism", 410607006, "Organism (organism)", "organism", 0.095),
    ("substance", 105590001, "Substance (substance)", "substance", 0.075),
    ("product", 373873005, "Pharmaceutical / biologic product (product)", "clinical drug", 0.07),
    ("qualifier", 362981000, "Qualifier value (qualifier value)", "qualifier value", 0.03),
    ("observable", 363787002, "Observable entity (observable entity)", "observable entity", 0.025),
    ("situation", 243796009, "Situation with explicit context (situation)", "situation", 0.012),
    ("event", 272379006, "Event (event)", "event", 0.01),
    ("object", 260787004, "Physical object (physical object)", "physical object", 0.015),
    ("specimen", 123038009, "Specimen (specimen)", "specimen", 0.006),
    (
        "environment",
        308916002,
        "Environment or geographical location (environment / location)",
        "environment",
        0.006,
    ),
    ("force", 78621006, "Physical force (physical force)", "physical force", 0.001),
    ("record", 419891008, "Record artifact (record artifact)", "record artifact", 0.002),
    ("social", 48176007, "Social context (social concept)", "social concept", 0.015),
    ("special", 370115009, "Special concept (special concept)", "special concept", 0.001),
    ("staging", 254291000, "Staging and scales (staging scale)", "staging scale", 0.006),
]
_HKEY = [h[0] for h in HIERARCHIES]

# Attribute types: (SCTID, FSN, source hierarchy, destination hierarchy, weight).
ATTRIBUTES: list[tuple[int, str, str, str, float]] = [
    (363698007, "Finding site (attribute)", "finding", "body", 10),
    (116676008, "Associated morphology (attribute)", "finding", "morphology", 8),
    (246075003, "Causative agent (attribute)", "finding", "organism", 3),
    (47429007, "Associated with (attribute)", "finding", "finding", 1),
    (42752001, "Due to (attribute)", "finding", "finding", 1.5),
    (255234002, "After (attribute)", "finding", "finding", 0.8),
    (370135005, "Pathological process (attribute)", "finding", "qualifier", 2),
    (363713009, "Has interpretation (attribute)", "finding", "qualifier", 1.5),
    (363714003, "Interprets (attribute)", "finding", "observable", 1.5),
    (246112005, "Severity (attribute)", "finding", "qualifier", 0.6),
    (263502005, "Clinical course (attribute)", "finding", "qualifier", 1.2),
    (246456000, "Episodicity (attribute)", "finding", "qualifier", 0.3),
    (246454002, "Occurrence (attribute)", "finding", "qualifier", 0.7),
    (418775008, "Finding method (attribute)", "finding", "procedure", 0.6),
    (419066007, "Finding informer (attribute)", "finding", "qualifier", 0.3),
    (363705008, "Has definitional manifestation (attribute)", "finding", "finding", 0.5),
    (272741003, "Laterality (attribute)", "body", "qualifier", 1),
    (260686004, "Method (attribute)", "procedure", "qualifier", 8),
    (363704007, "Procedure site (attribute)", "procedure", "body", 2),
    (405813007, "Procedure site - Direct (attribute)", "procedure", "body", 5),
    (405814001, "Procedure site - Indirect (attribute)", "procedure", "body", 1),
    (405816004, "Procedure morphology (attribute)", "procedure", "morphology", 0.5),
    (363700003, "Direct morphology (attribute)", "procedure", "morphology", 1),
    (424226004, "Using device (attribute)", "procedure", "object", 1),
    (363699004, "Direct device (attribute)", "procedure", "object", 1.5),
    (363701004, "Direct substance (attribute)", "procedure", "substance", 1.5),
    (363589002, "Associated procedure (attribute)", "situation", "procedure", 2),
    (246090004, "Associated finding (attribute)", "situation", "finding", 2),
    (408729009, "Finding context (attribute)", "situation", "qualifier", 1.5),
    (408731000, "Temporal context (attribute)", "situation", "qualifier", 2),
    (408732007, "Subject relationship context (attribute)", "situation", "qualifier", 2),
    (127489000, "Has active ingredient (attribute)", "product", "substance", 4),
    (762949000, "Has precise active ingredient (attribute)", "product", "substance", 3),
    (410675002, "Route of administration (attribute)", "product", "qualifier", 1),
    (411116001, "Has manufactured dose form (attribute)", "product", "qualifier", 3),
    (246093002, "Component (attribute)", "observable", "substance", 3),
    (370130000, "Property (attribute)", "observable", "qualifier", 3),
    (370132008, "Scale type (attribute)", "observable", "qualifier", 2),
    (370134009, "Time aspect (attribute)", "observable", "qualifier", 2),
    (704327008, "Direct site (attribute)", "observable", "body", 1),
]
STRENGTH_NUMERATOR_VALUE = 1142135004

# Metadata concepts (real SCTIDs; FSNs from rf2_schema.METADATA_CONCEPTS), all children of SNOMED CT Model
# Component.
MODEL_COMPONENT = S.MODEL_COMPONENT
CONCEPT_MODEL_ATTRIBUTE = S.CONCEPT_MODEL_ATTRIBUTE
METADATA: list[tuple[int, str]] = [
    (cid, S.metadata_fsn(cid))
    for cid in (
        S.FSN,
        S.SYNONYM,
        S.DEFINITION,
        S.INFERRED,
        S.STATED,
        S.ADDITIONAL,
        S.PREFERRED,
        S.ACCEPTABLE,
        S.US_ENGLISH,
        S.GB_ENGLISH,
        S.CORE_MODULE,
        S.MODEL_MODULE,
        S.ICD10_MAP_MODULE,
        S.PRIMITIVE,
        S.DEFINED,
        S.CASE_INSENSITIVE,
        INITIAL_CHAR_INSENSITIVE,
        S.EXISTENTIAL,
        S.ICD10_MAP_REFSET,
        S.MAP_CORRELATION_NOT_SPECIFIED,
        S.MAP_CATEGORY_PROPERLY_CLASSIFIED,
        S.MAP_CATEGORY_CANNOT_CLASSIFY,
        S.MAP_CATEGORY_CONTEXT_DEPENDENT,
        S.REPLACED_BY,
        S.SAME_AS,
        CONCEPT_MODEL_ATTRIBUTE,
        S.IS_A,
    )
]

IFA_RULES: list[tuple[str, str]] = [
    ("IFA 248152002 | Female (finding) |", "IF FEMALE CHOOSE"),
    ("IFA 248153007 | Male (finding) |", "IF MALE CHOOSE"),
    (
        "IFA 445518008 | Age at onset of clinical finding (observable entity) | < 18.0 years",
        "IF AGE AT ONSET OF CLINICAL FINDING BEFORE 18.0 YEARS CHOOSE",
    ),
    (
        "IFA 445518008 | Age at onset of clinical finding (observable entity) | >= 65.0 years",
        "IF AGE AT ONSET OF CLINICAL FINDING ON OR AFTER 65.0 YEARS CHOOSE",
    ),
    (
        "IFA 424144002 | Current chronological age (observable entity) | < 28.0 days",
        "IF CURRENT CHRONOLOGICAL AGE BEFORE 28.0 DAYS CHOOSE",
    ),
]

_MEDICAL_WORDS = (
    "of and with the in due to without or structure disorder disease acute chronic left right "
    "upper lower anterior posterior lateral medial primary secondary congenital acquired benign "
    "malignant neoplasm injury fracture infection inflammation syndrome deficiency pain lesion "
    "abscess ulcer cyst hemorrhage stenosis obstruction dysfunction insufficiency failure "
    "procedure excision repair biopsy incision drainage removal replacement transplantation "
    "examination measurement assessment therapy injection infusion blood bone skin muscle nerve "
    "artery vein heart lung liver kidney brain spinal cord eye ear nose throat mouth tooth "
    "stomach intestine colon rectum bladder uterus ovary breast prostate thyroid gland joint "
    "knee hip shoulder elbow wrist ankle foot hand finger toe head neck chest abdomen pelvis "
    "back tissue cell fluid mass body entire part region surface wall cavity duct vessel "
    "bacterial viral fungal parasitic allergic traumatic degenerative hereditary neonatal "
    "maternal fetal postoperative recurrent severe mild moderate partial complete open closed "
    "tablet capsule oral solution mg ml dose product containing only"
).split()
_SYLLABLES = (
    "ab ac ad al am an ap ar as at ba be bi bo bra bro ca ce chi co cra cu da de di do dra du "
    "el em en ep er es et ga ge gi go gra ha he hi ho hy id il im in ir is ka ke la le li lo lu "
    "ma me mi mo mu my na ne ni no nu ob oc ol om on op or os ot pa pe phi pi po pra pro pu ra "
    "re ri ro ru sa se si so spa sta ste stro su ta te ti to tra tri tu ul um un ur va ve vi vo "
    "xa xe za ze zo"
).split()


@dataclass
class _Sizes:
    concepts: int
    descriptions: int
    inferred: int
    map_rows: int
    concrete: int
    text_definitions: int


# ----------------------------------------------------------------------------------------------------
# vectorised helpers
# ----------------------------------------------------------------------------------------------------


def sctids(items: np.ndarray, partition: int) -> np.ndarray:
    """Vectorised short-format SCTIDs: ``item || partition(2) || Verhoeff check digit``."""
    return make_sctids(items, f"{partition:02d}")


def uuids(rng: np.random.Generator, n: int) -> pa.Array:
    """``n`` random version-4 UUID strings (deterministic for a seeded generator)."""
    b = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    b[:, 6] = (b[:, 6] & 0x0F) | 0x40  # version 4
    b[:, 8] = (b[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
    hexchars = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    digits = np.empty((n, 32), dtype=np.uint8)
    digits[:, 0::2] = hexchars[b >> 4]
    digits[:, 1::2] = hexchars[b & 0x0F]
    out = np.full((n, 36), ord("-"), dtype=np.uint8)
    # 8-4-4-4-12 hex digits: (position in the string, position in the digits) of each group
    for dst, src in ((0, 0), (9, 8), (14, 12), (19, 16), (24, 20)):
        width = {0: 8, 8: 4, 12: 4, 16: 4, 20: 12}[src]
        out[:, dst : dst + width] = digits[:, src : src + width]
    arr = pa.array(out.reshape(-1).view("S36"), type=pa.binary(36)) if n else pa.array([], pa.binary(36))
    return pc.cast(pc.cast(arr, pa.binary()), pa.string())


def log_uniform_ranks(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """``size`` ranks in [0, n) with P(rank r) ~ 1/(r+1) (Zipf exponent 1)."""
    u = rng.random(size)
    return np.minimum((np.exp(u * np.log(n + 1)) - 1).astype(np.int64), n - 1)


def build_vocabulary(rng: np.random.Generator, size: int = 30_000) -> pa.Array:
    """~30k synthetic words: real medical words first (most frequent), then syllable words."""
    syl = np.array(_SYLLABLES)
    n_cand = size * 3  # candidates: enough left after dropping duplicates and real words
    k = rng.integers(2, 5, n_cand)  # 2-4 syllables per word
    parts = syl[rng.integers(0, len(syl), (n_cand, 4))]
    cand = np.char.add(np.char.add(parts[:, 0], parts[:, 1]), np.where(k >= 3, parts[:, 2], ""))
    cand = np.char.add(cand, np.where(k >= 4, parts[:, 3], ""))
    cand = np.setdiff1d(np.unique(cand), np.array(_MEDICAL_WORDS))
    cand = cand[rng.permutation(len(cand))][: size - len(_MEDICAL_WORDS)]
    words = pa.array(np.concatenate([np.array(_MEDICAL_WORDS), cand]).tolist(), pa.string())
    # ~2 % of the synthetic words carry a non-ASCII letter (é, ö, ü, ç)
    idx = np.arange(len(words))
    for src, dst in (("e", "é"), ("o", "ö"), ("u", "ü"), ("c", "ç")):
        pick = (rng.random(len(words)) < 0.005) & (idx >= len(_MEDICAL_WORDS))
        words = pc.if_else(pa.array(pick), pc.replace_substring(words, src, dst, max_replacements=1), words)
    return words


def random_terms(
    rng: np.random.Generator, vocab: pa.Array, n: int, lo: int = 2, hi: int = 8, capitalize: bool = True
) -> pa.Array:
    """``n`` terms of ``lo``-``hi`` words drawn Zipf-like from ``vocab``."""
    lengths = rng.integers(lo, hi + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    word_ids = log_uniform_ranks(rng, len(vocab), int(offsets[-1]))
    words = vocab.take(pa.array(word_ids))
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), words)
    terms = pc.binary_join(lists, " ")
    return pc.utf8_capitalize(terms) if capitalize else terms


def _col(x: Any, n: int) -> pa.Array:
    """A column from an int scalar (repeated), a numpy array or a pyarrow array."""
    if isinstance(x, int | np.integer):
        return pa.array(np.full(n, x, dtype=np.int64))
    if isinstance(x, pa.Array | pa.ChunkedArray):
        return x
    return pa.array(x)


def _repeat_str(value: str, n: int) -> pa.Array:
    return pa.array([value], pa.string()).take(pa.array(np.zeros(n, dtype=np.int64)))


def _table(kind: str, cols: dict[str, Any], n: int) -> pa.Table:
    return pa.table({c: _col(cols[c], n) for c in S.COLUMNS[kind]})


# ----------------------------------------------------------------------------------------------------
# content generation
# ----------------------------------------------------------------------------------------------------


def _sizes(scale: float) -> _Sizes:
    """Volumes at ``scale``, each with a floor so that a tiny release still has every kind of content."""

    def s(n: int, floor: int) -> int:
        return max(floor, round(n * scale))

    return _Sizes(
        concepts=s(N_CONCEPTS, 2_000),
        descriptions=s(N_DESCRIPTIONS, 9_000),
        inferred=s(N_INFERRED, 7_000),
        map_rows=s(N_MAP_ROWS, 800),
        concrete=s(N_CONCRETE, 40),
        text_definitions=s(N_TEXT_DEFINITIONS, 50),
    )


def _concepts(rng: np.random.Generator, sz: _Sizes) -> dict[str, Any]:
    """Concept table plus the block layout: fixed concepts first, then one block per hierarchy."""
    # fixed concepts: root, model component, metadata, attribute types, hierarchy roots
    fixed_ids = [S.ROOT, MODEL_COMPONENT] + [m[0] for m in METADATA] + [a[0] for a in ATTRIBUTES]
    fixed_fsn = [S.metadata_fsn(S.ROOT), S.metadata_fsn(MODEL_COMPONENT)]
    fixed_fsn += [m[1] for m in METADATA] + [a[1] for a in ATTRIBUTES]
    fixed_parent = (
        [-1, 0] + [1] * len(METADATA) + [fixed_ids.index(CONCEPT_MODEL_ATTRIBUTE)] * len(ATTRIBUTES)
    )
    n_fixed = len(fixed_ids)
    n_syn = sz.concepts - n_fixed
    shares = np.array([h[4] for h in HIERARCHIES])
    block_len = np.maximum(np.floor(shares / shares.sum() * n_syn).astype(np.int64), 3)
    block_len[0] += n_syn - block_len.sum()
    block_start = n_fixed + np.concatenate([[0], np.cumsum(block_len)[:-1]])
    n = n_fixed + int(block_len.sum())

    items = CONCEPT_ITEMS + rng.permutation(n)  # synthetic item ids, disjoint from the real ones used
    ids = sctids(items, 0)
    ids[:n_fixed] = fixed_ids
    block = np.full(n, -1, dtype=np.int64)
    for b, (st, ln) in enumerate(zip(block_start, block_len, strict=True)):
        block[st : st + ln] = b
        root_id = HIERARCHIES[b][1]
        if root_id:
            ids[st] = root_id
    active = rng.random(n) < ACTIVE_CONCEPT_FRACTION
    roots = block_start
    active[:n_fixed] = True
    active[roots] = True
    assert len(np.unique(ids)) == n, "SCTID collision"
    return {
        "n": n,
        "n_fixed": n_fixed,
        "ids": ids,
        "active": active,
        "block": block,
        "block_start": block_start,
        "block_len": block_len,
        "fixed_fsn": fixed_fsn,
        "fixed_parent": np.array(fixed_parent, dtype=np.int64),
        "defined": rng.random(n) < 0.3,  # 30 % sufficiently defined, the rest primitive
    }


def _prev_active(active: np.ndarray) -> np.ndarray:
    """For each index j, the largest active index <= j (block roots are active, so it stays in-block)."""
    idx = np.where(active, np.arange(len(active)), -1)
    return np.maximum.accumulate(idx)


def _isa(rng: np.random.Generator, c: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(source index, parent index) pairs: ~1.5 parents per concept, parents always earlier in-block."""
    n, n_fixed = c["n"], c["n_fixed"]
    prev_act = _prev_active(c["active"])
    src_f = np.arange(1, n_fixed)
    dst_f = c["fixed_parent"][1:]
    # hierarchy roots: children of the root; morphology under body structure
    roots = c["block_start"]
    root_parent = np.zeros(len(roots), dtype=np.int64)
    root_parent[_HKEY.index("morphology")] = roots[_HKEY.index("body")]
    members = np.setdiff1d(np.arange(n_fixed, n), roots)
    start = c["block_start"][c["block"][members]]
    span = members - start
    srcs, dsts = [src_f, roots], [dst_f, root_parent]
    # every member has a first parent, 42 % a second, 8 % a third: about 1.5 on average; the power 1.6
    # skews parents towards the block's start (the general concepts)
    for k, p in enumerate((1.0, 0.42, 0.08)):
        pick = members if k == 0 else members[rng.random(len(members)) < p]
        st = start if k == 0 else c["block_start"][c["block"][pick]]
        sp = span if k == 0 else pick - st
        par = st + np.floor(sp * rng.random(len(pick)) ** 1.6).astype(np.int64)
        srcs.append(pick)
        dsts.append(prev_act[par])
    src = np.concatenate(srcs)
    dst = np.concatenate(dsts)
    key = np.unique(src * (1 << 24) + dst)  # (source, parent) packed into one int (indexes < 2^24): dedup
    return key >> 24, key & ((1 << 24) - 1)


def _attributes(rng: np.random.Generator, c: dict[str, Any], n_attr: int) -> dict[str, np.ndarray]:
    """Attribute relationships of ~40 types in role groups, pointing into their range hierarchies."""
    prev_act = _prev_active(c["active"])
    types = np.array([a[0] for a in ATTRIBUTES], dtype=np.int64)
    src_h = np.array([_HKEY.index(a[2]) for a in ATTRIBUTES])
    dst_h = np.array([_HKEY.index(a[3]) for a in ATTRIBUTES])
    weight = np.array([a[4] for a in ATTRIBUTES])
    source_blocks = np.unique(src_h)
    src_pool = np.concatenate(
        [np.arange(c["block_start"][b] + 1, c["block_start"][b] + c["block_len"][b]) for b in source_blocks]
    )
    per = rng.poisson(n_attr / len(src_pool), len(src_pool))
    per = np.minimum(per, 12)  # at most 12 attributes per concept
    src = np.repeat(src_pool, per)
    # ordinal of the attribute inside its concept -> role group
    first = np.repeat(np.cumsum(per) - per, per)
    ordinal = np.arange(len(src)) - first
    group = 1 + ordinal // 2
    group[rng.random(len(src)) < 0.12] = 0  # 12 % ungrouped (role group 0)
    # attribute type: weighted draw among the types whose domain is the source hierarchy
    sb = c["block"][src]
    typ_idx = np.empty(len(src), dtype=np.int64)
    for b in source_blocks:  # loop over ~5 hierarchies, not rows
        rows = np.nonzero(sb == b)[0]
        cand = np.nonzero(src_h == b)[0]
        w = weight[cand] / weight[cand].sum()
        typ_idx[rows] = cand[rng.choice(len(cand), size=len(rows), p=w)]
    db = dst_h[typ_idx]
    # destination: a heavy-tailed rank folded into the range block (popular targets near its root)
    # (ranks over 2^30, far more than any block, so the fold keeps the heavy tail)
    dst = c["block_start"][db] + log_uniform_ranks(rng, 1 << 30, len(src)) % c["block_len"][db]
    return {"src": src, "dst": prev_act[dst], "type": types[typ_idx], "group": group}


def _icd_codes(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` WHO ICD-10-shaped codes (``A12`` or ``A12.3``), Zipf-like over ~20k distinct codes."""
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTVZ"))
    universe_letter = np.repeat(letters, 100 * 11)
    num = np.tile(np.repeat(np.arange(100), 11), len(letters))
    sub = np.tile(np.arange(11), 100 * len(letters))
    base = np.char.add(universe_letter, np.char.zfill(num.astype(str), 2))
    universe = np.where(sub == 10, base, np.char.add(np.char.add(base, "."), sub.astype(str)))
    universe = universe[rng.permutation(len(universe))][:20_000]
    return universe[log_uniform_ranks(rng, len(universe), n)]


def _map_layout(rng: np.random.Generator, c: dict[str, Any], n_rows: int) -> tuple[np.ndarray, ...]:
    """Which findings get map rows, in how many groups and priorities.

    20 % of the mapped concepts have two map groups; 12 % of the groups have 1-2 IFA rules before their
    last (``TRUE`` / ``OTHERWISE TRUE``) row. Returns per row: source concept index, mapGroup,
    mapPriority, whether it is an IFA row, whether its group has IFA rows.
    """
    b = _HKEY.index("finding")
    st, ln = c["block_start"][b], c["block_len"][b]
    cand = np.arange(st + 1, st + ln)
    cand = cand[c["active"][cand] | (rng.random(len(cand)) < 0.2)]  # a few rows on inactive concepts
    p_two, p_ifa = 0.2, 0.12
    rows_per_concept = (1 + p_two) * (1 + p_ifa * 1.5)  # 1.5: mean IFA rows of a group that has any
    n_src = min(len(cand), int(round(n_rows / rows_per_concept)))
    src = np.sort(rng.choice(cand, n_src, replace=False))
    n_groups = 1 + (rng.random(n_src) < p_two)
    g_src = np.repeat(src, n_groups)
    g_num = 1 + np.arange(len(g_src)) - np.repeat(np.cumsum(n_groups) - n_groups, n_groups)
    n_ifa = np.where(rng.random(len(g_src)) < p_ifa, rng.integers(1, 3, len(g_src)), 0)
    per_group = 1 + n_ifa
    r_src = np.repeat(g_src, per_group)
    r_group = np.repeat(g_num, per_group)
    r_prio = 1 + np.arange(len(r_src)) - np.repeat(np.cumsum(per_group) - per_group, per_group)
    r_last = r_prio == np.repeat(per_group, per_group)
    return r_src, r_group, r_prio, ~r_last, np.repeat(n_ifa > 0, per_group)


def _map_rows(rng: np.random.Generator, c: dict[str, Any], fsn: pa.Array, n_rows: int) -> dict[str, Any]:
    """ICD-10 ExtendedMap rows on findings: targets drawn Zipf-like (3 % empty: cannot classify), IFA rules
    on sex, age or another finding, advice text and map category to match."""
    b = _HKEY.index("finding")
    st, ln = c["block_start"][b], c["block_len"][b]
    r_src, r_group, r_prio, is_ifa, ctx_group = _map_layout(rng, c, n_rows)
    n = len(r_src)
    target = _icd_codes(rng, n)
    empty = (~is_ifa) & (rng.random(n) < 0.03)
    target = np.where(empty, "", target)
    # IFA rules: sex / age templates, or "IFA <finding> | <its FSN> |"
    kind = rng.integers(0, len(IFA_RULES) + 2, n)
    tmpl_rule = np.array([r for r, _ in IFA_RULES] + ["", ""])[kind]
    tmpl_adv = np.array([a for _, a in IFA_RULES] + ["", ""])[kind]
    other = st + 1 + rng.integers(0, ln - 1, n)
    other_rule = pc.binary_join_element_wise(
        "IFA ", pc.cast(pa.array(c["ids"][other]), pa.string()), " | ", fsn.take(pa.array(other)), " |", ""
    )
    generic = kind >= len(IFA_RULES)
    rule = pc.if_else(pa.array(generic), other_rule, pa.array(tmpl_rule))
    rule = pc.if_else(pa.array(is_ifa), rule, pa.array(np.where(ctx_group, "OTHERWISE TRUE", "TRUE")))
    adv_cond = pc.if_else(
        pa.array(generic),
        pc.binary_join_element_wise("IF ", pc.utf8_upper(fsn.take(pa.array(other))), " CHOOSE", ""),
        pa.array(tmpl_adv),
    )
    tgt = pa.array(target, pa.string())
    ifa_adv = pc.binary_join_element_wise(
        pc.binary_join_element_wise(adv_cond, tgt, " "), "MAP OF SOURCE CONCEPT IS CONTEXT DEPENDENT", " | "
    )
    always = pc.binary_join_element_wise("ALWAYS", tgt, " ")
    advice = pc.if_else(pa.array(is_ifa), ifa_adv, always)
    advice = pc.if_else(
        pa.array(empty), pa.scalar("MAP SOURCE CONCEPT CANNOT BE CLASSIFIED WITH AVAILABLE DATA"), advice
    )
    category = np.where(
        empty,
        S.MAP_CATEGORY_CANNOT_CLASSIFY,
        np.where(is_ifa, S.MAP_CATEGORY_CONTEXT_DEPENDENT, S.MAP_CATEGORY_PROPERLY_CLASSIFIED),
    )
    return {
        "id": uuids(rng, n),
        "active": (rng.random(n) > 0.01).astype(np.int64),
        "moduleId": S.ICD10_MAP_MODULE,
        "refsetId": S.ICD10_MAP_REFSET,
        "referencedComponentId": c["ids"][r_src],
        "mapGroup": r_group,
        "mapPriority": r_prio,
        "mapRule": rule,
        "mapAdvice": advice,
        "mapTarget": tgt,
        "correlationId": S.MAP_CORRELATION_NOT_SPECIFIED,
        "mapCategoryId": category.astype(np.int64),
    }


def _lookup(sorted_ids: np.ndarray, order: np.ndarray, values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``values`` of the rows whose id equals each of ``ids`` (every id must be present)."""
    pos = order[np.searchsorted(sorted_ids, ids)]
    return values[pos]


def _date_rows(
    rng: np.random.Generator, kind: str, snap: pa.Table, base: np.ndarray, later_ok: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Release indexes per row: first version ``k_first``, Snapshot version ``k_snap``, ``history`` flag.

    ``base`` is the earliest release at which the row can exist (its concepts exist then); rows with
    ``later_ok`` are created at ``base`` (70 %) or at a later release. Rows that are inactive in the
    Snapshot, plus ~8 % of the others, get an earlier version when one fits before the last release.
    """
    n = snap.num_rows
    last = len(EFFECTIVE_TIMES) - 1
    later = later_ok & (rng.random(n) >= 0.7)
    k_first = np.where(later, base + np.floor(rng.random(n) * (last + 1 - base)).astype(np.int64), base)
    active = np.asarray(snap.column("active")).astype(bool)
    history = (k_first < last) & ((rng.random(n) < HISTORY_ACTIVE_FRACTION) | ~active)
    k_snap = np.where(
        history, k_first + 1 + np.floor(rng.random(n) * (last - k_first)).astype(np.int64), k_first
    )
    return k_first, np.minimum(k_snap, last), history


def _older_versions(
    rng: np.random.Generator,
    kind: str,
    snap: pa.Table,
    history: np.ndarray,
    k_first: np.ndarray,
    root_of_destination: np.ndarray | None = None,
) -> pa.Table:
    """First versions (dated ``k_first``) of the rows flagged in ``history``.

    A row inactive in the Snapshot was active before (an inactivation). An active row had a different
    value before: definition status, term, acceptability, concrete value, map target (another row's),
    or for relationships the root of the destination's hierarchy (the link was refined later).
    """
    idx = np.nonzero(history)[0]
    old = snap.take(pa.array(idx))
    m = len(idx)

    def put(table: pa.Table, name: str, values: Any) -> pa.Table:
        return table.set_column(table.schema.get_field_index(name), name, values)

    old = put(old, "effectiveTime", pa.array(EFFECTIVE_TIMES[k_first[idx]]))
    inactive_now = ~np.asarray(old.column("active")).astype(bool)
    old = put(old, "active", pa.array(np.ones(m, dtype=np.int64)))
    value_col = {
        "Concept": "definitionStatusId",
        "Description": "term",
        "TextDefinition": "term",
        "Relationship": "destinationId",
        "RelationshipConcreteValues": "value",
        "Language": "acceptabilityId",
        "ExtendedMap": "mapTarget",
    }[kind]
    col = old.column(value_col)
    if kind == "Concept":
        cur = np.asarray(col)
        changed = pa.array(np.where(cur == S.PRIMITIVE, S.DEFINED, S.PRIMITIVE))
    elif kind == "Language":
        cur = np.asarray(col)
        changed = pa.array(np.where(cur == S.PREFERRED, S.ACCEPTABLE, S.PREFERRED))
    elif kind == "Relationship":
        assert root_of_destination is not None
        changed = pa.array(root_of_destination[idx])
    else:  # another row's value of the same column
        changed = col.take(pa.array(rng.permutation(m)))
    return put(old, value_col, pc.if_else(pa.array(inactive_now), col, changed))


# ----------------------------------------------------------------------------------------------------
# the release
# ----------------------------------------------------------------------------------------------------


def _concept_rows(c: dict[str, Any]) -> dict[str, Any]:
    """Concept columns: fixed concepts in the model module (the root in the core module), the rest core."""
    n = c["n"]
    concepts = {
        "id": c["ids"],
        "active": c["active"].astype(np.int64),
        "moduleId": np.where(np.arange(n) < c["n_fixed"], S.MODEL_MODULE, S.CORE_MODULE),
        "definitionStatusId": np.where(c["defined"], S.DEFINED, S.PRIMITIVE),
    }
    concepts["moduleId"][0] = S.CORE_MODULE
    return concepts


def _concept_terms(rng: np.random.Generator, c: dict[str, Any], vocab: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Each concept's FSN (``term (tag)``) and preferred term (the FSN without its tag).

    Generated concepts get random terms and their hierarchy's tag (35 % of the findings ``finding``, the
    rest ``disorder``); fixed concepts and hierarchy roots keep their real FSNs.
    """
    n = c["n"]
    base = random_terms(rng, vocab, n)
    fixed_fsn = pa.array(c["fixed_fsn"], pa.string())
    fixed_base = pc.replace_substring_regex(fixed_fsn, r" \([^()]*\)$", "")
    roots = c["block_start"]
    root_fsn = pa.array([h[2] for h in HIERARCHIES], pa.string())
    tags = np.array([h[3] for h in HIERARCHIES])
    tag = tags[np.maximum(c["block"], 0)]
    fin = c["block"] == _HKEY.index("finding")
    tag = np.where(fin & (rng.random(n) < 0.35), "finding", tag)
    tag_close = pc.binary_join_element_wise(pa.array(tag), "", ")")  # tag + ")"
    gen_fsn = pc.binary_join_element_wise(base, tag_close, " (")  # base + " (" + tag + ")"
    root_base = pc.replace_substring_regex(root_fsn, r" \([^()]*\)$", "")
    # fixed concepts and hierarchy roots take their own terms: pick per concept from the concatenation
    sel = np.arange(n)
    sel[: c["n_fixed"]] = n + np.arange(c["n_fixed"])
    sel[roots] = n + c["n_fixed"] + np.arange(len(roots))
    fsn = pa.concat_arrays([gen_fsn, fixed_fsn, root_fsn]).take(pa.array(sel))
    base = pa.concat_arrays([base, fixed_base, root_base]).take(pa.array(sel))
    return fsn, base


def _descriptions(
    rng: np.random.Generator, c: dict[str, Any], sz: _Sizes, vocab: pa.Array, module_ids: np.ndarray
) -> tuple[dict[str, Any], pa.Array, np.ndarray]:
    """Description columns: per concept its FSN, its preferred synonym, then extra synonyms (at most 8).

    Returns the columns, every concept's FSN (map rules quote it) and each description's ordinal within
    its concept (0 FSN, 1 preferred synonym, 2.. extra synonyms, of which 4 % are inactive).
    """
    n, ids = c["n"], c["ids"]
    fsn, base = _concept_terms(rng, c, vocab)
    extra_mean = max(sz.descriptions / n - 2, 0.1)
    n_extra = np.minimum(rng.poisson(extra_mean, n), 8)
    n_extra[: c["n_fixed"]] = 0
    extra_terms = random_terms(rng, vocab, int(n_extra.sum()))
    per = 2 + n_extra
    d_concept = np.repeat(np.arange(n), per)
    d_ord = np.arange(len(d_concept)) - np.repeat(np.cumsum(per) - per, per)
    nd = len(d_concept)
    # term source index into concat(fsn, base, extra_terms)
    extra_pos = n * 2 + np.cumsum(d_ord >= 2) - 1
    src_idx = np.where(d_ord == 0, d_concept, np.where(d_ord == 1, n + d_concept, extra_pos))
    terms = pa.concat_arrays([fsn, base, extra_terms]).take(pa.array(src_idx))
    d_active = ~((d_ord >= 2) & (rng.random(nd) < 0.04))
    case = np.where(rng.random(nd) < 0.05, INITIAL_CHAR_INSENSITIVE, S.CASE_INSENSITIVE)
    descriptions = {
        "id": sctids(DESCRIPTION_ITEMS + np.arange(nd), 1),
        "active": d_active.astype(np.int64),
        "moduleId": module_ids[d_concept],
        "conceptId": ids[d_concept],
        "languageCode": _repeat_str("en", nd),
        "typeId": np.where(d_ord == 0, S.FSN, S.SYNONYM),
        "term": terms,
        "caseSignificanceId": case,
    }
    return descriptions, fsn, d_ord


def _language(rng: np.random.Generator, descriptions: dict[str, Any], d_ord: np.ndarray) -> dict[str, Any]:
    """US English language refset: one row per active description (FSN and first synonym preferred)."""
    la = np.nonzero(descriptions["active"])[0]
    return {
        "id": uuids(rng, len(la)),
        "active": 1,
        "moduleId": descriptions["moduleId"][la],
        "refsetId": S.US_ENGLISH,
        "referencedComponentId": descriptions["id"][la],
        "acceptabilityId": np.where(d_ord[la] <= 1, S.PREFERRED, S.ACCEPTABLE),
    }


def _text_definitions(
    rng: np.random.Generator, c: dict[str, Any], sz: _Sizes, vocab: pa.Array, n_descriptions: int
) -> dict[str, Any]:
    """Text definitions of 8-20 words on distinct active concepts (ids follow the descriptions')."""
    td_c = np.sort(rng.choice(np.nonzero(c["active"])[0], sz.text_definitions, replace=False))
    td_terms = pc.binary_join_element_wise(random_terms(rng, vocab, len(td_c), 8, 20), "", ".")
    return {
        "id": sctids(DESCRIPTION_ITEMS + n_descriptions + np.arange(len(td_c)), 1),
        "active": 1,
        "moduleId": S.CORE_MODULE,
        "conceptId": c["ids"][td_c],
        "languageCode": _repeat_str("en", len(td_c)),
        "typeId": S.DEFINITION,
        "term": td_terms,
        "caseSignificanceId": S.CASE_INSENSITIVE,
    }


def _relationships(
    rng: np.random.Generator, c: dict[str, Any], sz: _Sizes, module_ids: np.ndarray
) -> dict[str, Any]:
    """Inferred relationships: the is-a DAG plus attributes, sorted by (source, role group)."""
    isa_src, isa_dst = _isa(rng, c)
    attrs = _attributes(rng, c, max(sz.inferred - len(isa_src), 0))
    r_src = np.concatenate([isa_src, attrs["src"]])
    r_dst = np.concatenate([isa_dst, attrs["dst"]])
    r_type = np.concatenate([np.full(len(isa_src), S.IS_A), attrs["type"]])
    r_group = np.concatenate([np.zeros(len(isa_src), np.int64), attrs["group"]])
    order = np.lexsort((r_group, r_src))
    r_src, r_dst, r_type, r_group = r_src[order], r_dst[order], r_type[order], r_group[order]
    nr = len(r_src)
    ids = c["ids"]
    return {
        "id": sctids(RELATIONSHIP_ITEMS + np.arange(nr), 2),
        "active": c["active"][r_src].astype(np.int64),
        "moduleId": module_ids[r_src],
        "sourceId": ids[r_src],
        "destinationId": ids[r_dst],
        "relationshipGroup": r_group,
        "typeId": r_type,
        "characteristicTypeId": S.INFERRED,
        "modifierId": S.EXISTENTIAL,
    }


def _concrete_values(
    rng: np.random.Generator, c: dict[str, Any], sz: _Sizes, n_relationships: int
) -> dict[str, Any]:
    """Strength values (``#500``, ...) on products, in role group 1 or 2 (ids follow the relationships')."""
    pb = _HKEY.index("product")
    prod = c["block_start"][pb] + 1 + rng.integers(0, c["block_len"][pb] - 1, sz.concrete)
    strengths = np.array(["#500", "#250", "#0.5", "#1", "#10", "#100", "#20", "#2.5", "#1000", "#5"])
    return {
        "id": sctids(RELATIONSHIP_ITEMS + n_relationships + np.arange(sz.concrete), 2),
        "active": c["active"][prod].astype(np.int64),
        "moduleId": S.CORE_MODULE,
        "sourceId": c["ids"][prod],
        "value": pa.array(strengths[log_uniform_ranks(rng, len(strengths), sz.concrete)]),
        "relationshipGroup": 1 + rng.integers(0, 2, sz.concrete),
        "typeId": STRENGTH_NUMERATOR_VALUE,
        "characteristicTypeId": S.INFERRED,
        "modifierId": S.EXISTENTIAL,
    }


def _snapshot_tables(columns: dict[str, dict[str, Any]]) -> dict[str, pa.Table]:
    """One table per content kind, columns in RF2 order; every row's effectiveTime 0 until dated."""
    out: dict[str, pa.Table] = {}
    for kind, cols in columns.items():
        rows = len(cols["id"])
        cols = dict(cols)
        cols.setdefault("effectiveTime", np.zeros(rows, np.int64))
        out[kind] = _table(kind, cols, rows)
    return out


def _creation_facts(rng: np.random.Generator, c: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per concept: the release index it first appears at (``created``) and its hierarchy root's SCTID."""
    n, ids = c["n"], c["ids"]
    # most concepts (60 %) exist since the first release; sorted within each block
    last = len(EFFECTIVE_TIMES) - 1
    k = np.where(rng.random(n) < 0.6, 0, rng.integers(0, last + 1, n))
    k[: c["n_fixed"]] = 0
    k[c["block_start"]] = 0
    blk = np.where(np.arange(n) < c["n_fixed"], -1, c["block"])
    created = k[np.lexsort((k, blk))]  # blocks are contiguous and in order: per-block ascending
    created[: c["n_fixed"]] = 0
    root = np.where(blk < 0, S.ROOT, ids[c["block_start"][np.maximum(blk, 0)]])
    return {"created": created, "root": root}


def build_tables(scale: float = 1.0, seed: int = 0) -> tuple[dict[str, pa.Table], dict[str, np.ndarray]]:
    """The Snapshot tables of a synthetic release, per RF2 content kind, plus per-concept facts.

    The second result holds, aligned with the Concept table: ``created`` (release index at which the
    concept first appears; non-decreasing along each hierarchy block, so parents are never newer than
    their children) and ``root`` (the SCTID of the concept's hierarchy root).
    """
    # the steps draw from one generator in this order: the same seed gives the same release
    rng = np.random.default_rng(seed)
    sz = _sizes(scale)
    c = _concepts(rng, sz)
    vocab = build_vocabulary(rng)
    concepts = _concept_rows(c)
    descriptions, fsn, d_ord = _descriptions(rng, c, sz, vocab, concepts["moduleId"])
    language = _language(rng, descriptions, d_ord)
    text_definitions = _text_definitions(rng, c, sz, vocab, len(descriptions["id"]))
    relationships = _relationships(rng, c, sz, concepts["moduleId"])
    concrete = _concrete_values(rng, c, sz, len(relationships["id"]))
    maps = _map_rows(rng, c, fsn, sz.map_rows)
    tables = _snapshot_tables(
        {
            "Concept": concepts,
            "Description": descriptions,
            "TextDefinition": text_definitions,
            "Relationship": relationships,
            "RelationshipConcreteValues": concrete,
            "Language": language,
            "ExtendedMap": maps,
        }
    )
    return tables, _creation_facts(rng, c)


class _FirstRelease:
    """The earliest release index at which each row of a content kind can exist (its concepts exist then)."""

    def __init__(self, concepts: pa.Table, facts: dict[str, np.ndarray]) -> None:
        cids = np.asarray(concepts.column("id"))
        self.order = np.argsort(cids)
        self.sorted = cids[self.order]
        self.facts = facts
        self.descriptions: dict[str, np.ndarray] = {}

    def _of(self, fact: str, col: pa.ChunkedArray) -> np.ndarray:
        return _lookup(self.sorted, self.order, self.facts[fact], np.asarray(col))

    def remember_descriptions(self, snap: pa.Table, k_first: np.ndarray) -> None:
        """Record the descriptions' first releases (language rows follow their description)."""
        ids_ = np.asarray(snap.column("id"))
        order = np.argsort(ids_)
        self.descriptions = {"ids": ids_[order], "order": order, "k": k_first}

    def rows(self, kind: str, snap: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(base, later_ok, root_of_destination)``: the earliest release per row, whether the row may be
        created later than that, and (relationships only) the root of each destination's hierarchy."""
        n = snap.num_rows
        if kind == "Concept":
            return self.facts["created"], np.zeros(n, bool), None
        if kind in ("Description", "TextDefinition"):
            return (
                self._of("created", snap.column("conceptId")),
                np.asarray(snap.column("typeId")) != S.FSN,
                None,
            )
        if kind == "Relationship":
            src, dst = snap.column("sourceId"), snap.column("destinationId")
            base = np.maximum(self._of("created", src), self._of("created", dst))
            return base, np.asarray(snap.column("typeId")) != S.IS_A, self._of("root", dst)
        if kind == "Language":  # follows its description
            d = self.descriptions
            dids = np.asarray(snap.column("referencedComponentId"))
            return _lookup(d["ids"], d["order"], d["k"], dids), np.zeros(n, bool), None
        # concrete values, map rows
        col = "sourceId" if kind == "RelationshipConcreteValues" else "referencedComponentId"
        return self._of("created", snap.column(col)), np.ones(n, bool), None


def _write_file(out_dir: Path, kind: str, release: str, table: pa.Table) -> dict[str, Any]:
    """Write one RF2 file; returns its ``release_info`` entry."""
    t1 = time.perf_counter()
    path = out_dir / release / rf2_folder(kind) / rf2_file_name(kind, release, "INT", RELEASE_DATE)
    size = write_rf2_file(path, kind, table)
    dt = time.perf_counter() - t1
    log.info("%-70s %10d rows %12d bytes %6.1f s", path.relative_to(out_dir), table.num_rows, size, dt)
    return {
        "path": str(path.relative_to(out_dir)),
        "content": kind,
        "release": release,
        "rows": table.num_rows,
        "bytes": size,
        "seconds": round(dt, 2),
    }


def _add_detail_counts(totals: dict[str, dict[str, int]], tables: dict[str, pa.Table]) -> None:
    """Is-a relationships, and map rows with an empty target or an IFA rule."""
    rel = tables["Relationship"]
    totals["Relationship"]["is_a"] = int(pc.sum(pc.equal(rel.column("typeId"), S.IS_A)).as_py())
    mp = tables["ExtendedMap"]
    totals["ExtendedMap"]["empty_target"] = int(pc.sum(pc.equal(mp.column("mapTarget"), "")).as_py())
    totals["ExtendedMap"]["ifa_rows"] = int(pc.sum(pc.starts_with(mp.column("mapRule"), "IFA")).as_py())


def generate_release(
    out_dir: str | Path, scale: float = 1.0, seed: int = 0, full: bool = True
) -> dict[str, Any]:
    """Write a synthetic RF2 release into ``out_dir`` (the package root); returns ``release_info``.

    ``scale`` multiplies every volume (1.0 = International Edition size); ``seed`` makes it
    reproducible; ``full`` adds the Full folder with earlier versions of ~10 % of the rows.
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    rng = np.random.default_rng(seed + 1)  # dates and history; the tables draw from their own
    tables, facts = build_tables(scale, seed)
    t_build = time.perf_counter() - t0
    log.info("built tables in %.1f s", t_build)
    first = _FirstRelease(tables["Concept"], facts)
    files: list[dict[str, Any]] = []
    totals: dict[str, dict[str, int]] = {}
    for kind, snap in tables.items():
        n = snap.num_rows
        base, later_ok, root_dst = first.rows(kind, snap)
        k_first, k_snap, history = _date_rows(rng, kind, snap, base, later_ok)
        if not full:
            k_snap, history = np.where(history, k_snap, k_first), np.zeros(n, bool)
        if kind == "Description":
            first.remember_descriptions(snap, k_first)
        snap = snap.set_column(
            snap.schema.get_field_index("effectiveTime"), "effectiveTime", pa.array(EFFECTIVE_TIMES[k_snap])
        )
        releases = [("Snapshot", snap)]
        if full:
            older = _older_versions(rng, kind, snap, history, k_first, root_dst)
            releases.append(("Full", pa.concat_tables([older, snap])))
        files += [_write_file(out_dir, kind, release, table) for release, table in releases]
        active = np.asarray(snap.column("active")).astype(bool)
        totals[kind] = {
            "snapshot_rows": n,
            "snapshot_active": int(active.sum()),
            "full_extra_rows": int(history.sum()),
        }
    _add_detail_counts(totals, tables)
    info = {
        "generator": "benchmarks/synthetic_release.py",
        "scale": scale,
        "seed": seed,
        "full": full,
        "namespace": "INT",
        "release_date": RELEASE_DATE,
        "effective_times": EFFECTIVE_TIMES.tolist(),
        "counts": {kind: t["snapshot_rows"] for kind, t in totals.items()},  # Snapshot rows per content kind
        "counts_detail": totals,
        "files": files,
        "total_bytes": sum(f["bytes"] for f in files),
        "seconds_build": round(t_build, 1),
        "seconds_total": round(time.perf_counter() - t0, 1),
    }
    (out_dir / "release_info.json").write_text(json.dumps(info, indent=1) + "\n")
    log.info(
        "wrote %d files, %.1f MB in %.1f s", len(files), info["total_bytes"] / 1e6, info["seconds_total"]
    )
    return info


def verify_release(out_dir: str | Path) -> dict[str, int]:
    """Parse every RF2 file under ``out_dir`` with pyarrow.csv (TAB, no quoting) and check it.

    Checks: the header equals ``COLUMNS[content]``, lines end in CRLF, SCTID columns pass Verhoeff.
    Returns rows per file name; raises AssertionError on the first problem.
    """
    import pyarrow.csv as pcsv

    rows: dict[str, int] = {}
    for path in sorted(Path(out_dir).rglob("*.txt")):
        m = S.FILE_NAME_RE.match(path.name)
        assert m is not None, f"{path}: name does not match the RF2 grammar"
        kind = m["content"]
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
        assert head.startswith(("\t".join(S.COLUMNS[kind]) + "\r\n").encode()), f"{path}: bad header"
        assert head.count(b"\n") == head.count(b"\r\n"), f"{path}: LF without CR"
        t = pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(block_size=64 << 20),
            parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False, newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(
                column_types={c: pa.string() for c in S.COLUMNS[kind] if c not in S.SCTID_COLUMNS[kind]}
                | {c: pa.int64() for c in S.SCTID_COLUMNS[kind]},
                strings_can_be_null=False,
            ),
        )
        assert tuple(t.column_names) == S.COLUMNS[kind], f"{path}: columns {t.column_names}"
        for col in S.SCTID_COLUMNS[kind]:
            ok = verhoeff_valid(t.column(col).to_numpy())
            assert ok.all(), f"{path}: {int((~ok).sum())} bad SCTIDs in {col}"
        assert not pc.any(pc.ends_with(t.column(t.column_names[-1]).cast(pa.string()), "\r")).as_py()
        rows[str(path.relative_to(out_dir))] = t.num_rows
    return rows


def main(argv: list[str] | None = None) -> None:
    import click

    @click.command(help=__doc__.split("\n\n")[0])
    @click.option(
        "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="package root to write"
    )
    @click.option(
        "--scale", default=1.0, show_default=True, help="volume multiplier (1.0 = International size)"
    )
    @click.option("--seed", default=0, show_default=True)
    @click.option("--full/--no-full", default=True, show_default=True, help="also write the Full folder")
    @click.option("--verify", is_flag=True, help="parse every written file back and check it")
    def cli(out_dir: str, scale: float, seed: int, full: bool, verify: bool) -> None:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        info = generate_release(out_dir, scale=scale, seed=seed, full=full)
        click.echo(f"{'file':72} {'rows':>10} {'bytes':>12} {'s':>6}")
        for f in info["files"]:
            click.echo(f"{f['path']:72} {f['rows']:>10} {f['bytes']:>12} {f['seconds']:>6}")
        click.echo(f"total {info['total_bytes'] / 1e6:.1f} MB in {info['seconds_total']} s -> {out_dir}")
        if verify:
            t0 = time.perf_counter()
            rows = verify_release(out_dir)
            click.echo(f"verified {len(rows)} files in {time.perf_counter() - t0:.1f} s")

    cli.main(args=argv, standalone_mode=True)


if __name__ == "__main__":
    main()
