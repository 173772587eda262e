"""The demo release as an in-memory model: concepts, terms, defining relationships and ICD-10-CM maps.

Built from the ICD-10-CM tree (:mod:`pipelines.demo.release_icd`) and the lexicons
(:mod:`pipelines.demo.release_lexicon`). Deterministic: every choice is a pure function of the seed and
a code (:func:`unit`), and every collection is walked in a fixed order.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from . import release_lexicon as L
from .release_icd import Icd10Tree

ET1 = 20200131
ET2 = 20220131

ICD_KINDS = ("category", "sub", "ext")


def unit(seed: int, salt: str, key: str) -> float:
    """A uniform number in [0, 1) from (seed, salt, key); stable across runs and platforms."""
    h = hashlib.blake2b(f"{seed}|{salt}|{key}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0**64


@dataclass
class Concept:
    key: str
    name: str  # preferred term
    tag: str  # semantic tag
    parents: list[str] = field(default_factory=list)
    attrs: list[tuple[int, str, str]] = field(default_factory=list)  # (group, attribute key, target key)
    synonyms: list[str] = field(default_factory=list)  # acceptable synonyms
    sctid: int = 0
    et: int = ET1  # effective time of creation
    retired: bool = False  # inactivated at ET2
    icd: str | None = None  # ICD-10-CM node key
    fsn_suffix: str = ""  # disambiguates duplicate FSNs

    @property
    def fsn(self) -> str:
        return f"{self.name}{self.fsn_suffix} ({self.tag})"


@dataclass
class MapRow:
    concept: str
    group: int
    priority: int
    rule: str
    advice: str
    target: str  # dotted ICD-10-CM code or ""
    category: int
    et: int = ET1
    retired: bool = False  # inactivated at ET2


@dataclass
class SizeSpec:
    """Knobs of one release size."""

    blocks: tuple[str, ...] | None  # None: every block
    p_sub: tuple[float, float, float, float]  # keep a subcategory of level 1..4 (its parent kept)
    p_ext: float  # keep a 7th-character code (its parent kept)
    p_second_group: float  # concepts with a second map group
    p_ifa: float  # concepts with an IFA map group
    p_empty: float  # non-leaf concepts with no free code: empty target instead of a shared one
    p_retire: float  # concepts inactivated in the second release
    p_rel_change: float  # attribute relationships whose destination changed in the second release
    p_term_change: float  # preferred terms changed in the second release
    nlm_drop: float  # ICD-9 codes the NLM-format map leaves out
    omop_share: float  # codes of the maps also in the OMOP tables
    omop_extra: float  # further ICD-10-CM codes (nearest concept ancestor) only in OMOP
    omop_disagree: float  # OMOP rows mapping to the parent concept instead
    p_icd9_synonym: float  # ICD-9-CM titles added as synonyms of the concept their code maps to


class DemoRelease:
    """The demo release being built: concepts in registration order (which fixes their ids), plus map rows."""

    def __init__(self, tree: Icd10Tree, size: SizeSpec, seed: int) -> None:
        self.tree, self.size, self.seed = tree, size, seed
        self.concepts: dict[str, Concept] = {}
        self.fixed_ids: dict[str, int] = {}
        self.maps: list[MapRow] = []
        self.value_parent: dict[str, str | None] = {}  # lexicon value key -> parent key (for suppression)
        self._rx: dict[str, re.Pattern[str]] = {}

    # ------------------------------------------------------------------ registration
    def add(self, key: str, name: str, tag: str, parents: list[str], **kw) -> Concept:
        if key in self.concepts:
            raise ValueError(f"duplicate concept key {key!r}")
        c = Concept(key=key, name=name, tag=tag, parents=parents, **kw)
        self.concepts[key] = c
        return c

    def rx(self, pattern: str) -> re.Pattern[str]:
        r = self._rx.get(pattern)
        if r is None:
            r = self._rx[pattern] = re.compile(pattern, re.IGNORECASE)
        return r

    def build_vocabulary(self) -> None:
        """Metadata, attribute types and the value hierarchies (body, morphology, organism, ...)."""
        for key, sctid, name, tag, parent in L.METADATA:
            self.add(key, name, tag, [parent] if parent else [])
            self.fixed_ids[key] = sctid
        for akey, (sctid, name) in L.ATTRIBUTES.items():
            self.add(f"attr:{akey}", name, "attribute", ["attribute"])
            self.fixed_ids[f"attr:{akey}"] = sctid
        self.add("morph_root", "Morphologically abnormal structure", "morphologic abnormality", ["body"])
        self.add("physical_root", "Physical object", "physical object", ["root"])
        tables = [
            ("body", L.BODY),
            ("morph", L.MORPH),
            ("organism", L.ORGANISM),
            ("substance", L.SUBSTANCE),
            ("qualifier", L.QUALIFIER),
            ("grouper", L.GROUPER),
        ]
        for table, rows in tables:
            root, tag = L.HIERARCHY_TAG[table]
            for key, name, parent, _rx in rows:
                self.add(key, name, tag, [parent or root])
                self.value_parent[key] = parent
        root, tag = L.HIERARCHY_TAG["physical"]
        for key, name, parent in L.PHYSICAL:
            self.add(key, name, tag, [parent or root])
        for key, name, parent, _rx, attrs in L.PROCEDURE:
            c = self.add(key, name, "procedure", [parent or "procedure"])
            c.attrs = [(1, a, v) for a, v in attrs]
            self.value_parent[key] = parent
        for key, name, ingredient, route in L.PRODUCT:
            c = self.add(key, name, "product", ["product"])
            c.attrs = [(1, "has_active_ingredient", ingredient), (0, "route", route)]
        for key, name, _rx, component, site in L.OBSERVABLE:
            c = self.add(key, name, "observable entity", ["observable"])
            c.attrs = [(0, "scale_type", "quantitative"), (0, "time_aspect", "single_point")]
            if component:
                c.attrs += [(1, "component", component), (1, "property", "concentration")]
            if site:
                c.attrs.append((1, "inheres_in", site))

    # ------------------------------------------------------------------ ICD-10-CM selection
    def select_icd(self) -> list[str]:
        """Node keys of the ICD-10-CM tree that become concepts (closed under parents), pre-order."""
        t, s = self.tree, self.size
        in_scope: set[str] = set()
        if s.blocks is not None:
            for b in s.blocks:
                k: str | None = f"blk:{b}"
                while k is not None:
                    in_scope.add(k)
                    k = t.parent[k]
        keep: set[str] = set()
        out = []
        for key in t.keys:
            kind = t.kind[key]
            parent = t.parent[key]
            if kind in ("chapter", "block"):
                ok = s.blocks is None or key in in_scope
            elif kind == "category":
                ok = parent in keep
            else:
                p = s.p_ext if kind == "ext" else s.p_sub[min(t.level[key], 4) - 1]
                ok = parent in keep and unit(self.seed, "select", key) < p
            if ok:
                keep.add(key)
                out.append(key)
        return out

    def add_icd_concepts(self, selected: list[str], new_codes: set[str]) -> None:
        t = self.tree
        for key in selected:
            kind = t.kind[key]
            ch = t.chapter[key]
            parent = t.parent[key]
            tag = L.CHAPTER_TAG.get(ch, L.DEFAULT_CHAPTER_TAG)
            parents = [f"icd:{parent}"] if parent is not None else ["finding"]
            c = self.add(f"icd:{key}", t.title[key], tag, parents, icd=key)
            if kind not in ("chapter", "block"):
                seen = {c.name.lower()}
                for term in t.inclusion.get(key, []):
                    if term.lower() not in seen:
                        seen.add(term.lower())
                        c.synonyms.append(term)
            if key in new_codes:
                c.et = ET2
        # unique FSNs: a duplicate title gets its ICD code in the FSN only
        by_fsn: dict[str, list[Concept]] = {}
        for c in self.concepts.values():
            by_fsn.setdefault(c.fsn.lower(), []).append(c)
        for group in by_fsn.values():
            for c in group[1:]:
                c.fsn_suffix = f" [{t.code[c.icd]}]" if c.icd else f" [{c.key}]"

    # ------------------------------------------------------------------ lexicon matching
    def _matches(self, text: str, rows, cap: int) -> list[str]:
        hits = []
        for row in rows:
            key, pattern = row[0], row[3]
            if pattern:
                m = self.rx(pattern).search(text)
                if m:
                    hits.append((m.start(), key))
        keys = [k for _pos, k in sorted(hits)]
        ancestors = set()
        for k in keys:
            p = self.value_parent.get(k)
            while p is not None:
                ancestors.add(p)
                p = self.value_parent.get(p)
        return [k for k in keys if k not in ancestors][:cap]

    def _substance(self, title: str, chapter_code: str) -> str | None:
        low = title.lower()
        for pattern in L.SUBSTANCE_EXTRACT:
            m = self.rx(pattern).match(low)
            if not m:
                continue
            name = re.sub(r"^(?:other and unspecified|other specified|other|unspecified) ", "", m.group(1))
            name = re.sub(r"\s*\(.*$", "", name).strip(" ,")
            if not name or len(name) > 80:
                return None
            key = "sx:" + re.sub(r"[^a-z0-9]+", "_", name).strip("_")
            if key not in self.concepts:
                parent = "drug" if chapter_code < "T51" else "substance"
                self.add(key, name[0].upper() + name[1:], "substance", [parent])
                self.value_parent[key] = parent if parent != "substance" else None
            return key
        return None

    def _own_attributes(self, c: Concept) -> dict[str, list[str]]:
        t = self.tree
        title = c.name
        low = title.lower()
        ch = t.chapter[c.icd]
        a: dict[str, list[str]] = {}

        def put(attr: str, value: str) -> None:
            if value and value not in a.setdefault(attr, []):
                a[attr].append(value)

        for v in self._matches(low, L.BODY, 3):
            put("finding_site", v)
        for v in self._matches(low, L.MORPH, 2):
            put("morphology", v)
        for v in self._matches(low, L.ORGANISM, 2):
            put("causative_agent", v)
        code = t.code[c.icd]
        if ch == 19 or "poison" in low or "toxic" in low or "adverse effect" in low or ch == 5:
            sx = self._substance(title, code[:3])
            for v in ([sx] if sx else []) + self._matches(low, L.SUBSTANCE, 2):
                put("causative_agent", v)
        for attr, pattern, value in L.QUALIFIER_RULES:
            if attr not in a and self.rx(pattern).search(low):
                if attr == "laterality" and "unspecified side" in low:
                    continue
                put(attr, value)
        if ch != 18:
            a.pop("has_interpretation", None)
        else:
            for key, _name, pattern, _comp, _site in L.OBSERVABLE:
                if self.rx(pattern).search(low):
                    put("interprets", key)
                    break
        procedure = None
        for key, _name, _parent, pattern, _attrs in L.PROCEDURE:
            if pattern and self.rx(pattern).search(low):
                procedure = key
                break
        for attr, pattern, value in L.FINDING_RULES:
            if attr in a:
                continue
            if value == "__procedure__":
                if ch == 21 and procedure and self.rx(pattern).search(low):
                    put(attr, procedure)
            elif pattern and self.rx(pattern).search(low):
                put(attr, value)
        if ch == 21 or "history of" in low:
            for pattern, pairs in L.CONTEXT_RULES:
                if self.rx(pattern).search(low):
                    for attr, value in pairs:
                        if attr not in a:
                            put(attr, value)
            m = self.rx(L.ASSOCIATED_FINDING_RE).search(low)
            if m:
                g = self._matches(m.group(1), L.GROUPER, 1)
                if g:
                    put("associated_finding", g[0])
        return a

    def add_attributes(self) -> None:
        """Defining relationships of ICD concepts: own lexicon matches, the rest inherited from the parent."""
        effective: dict[str, dict[str, list[str]]] = {}
        groupers: dict[str, set[str]] = {}
        for c in list(self.concepts.values()):
            if c.icd is None or self.tree.kind[c.icd] not in ICD_KINDS:
                continue
            own = self._own_attributes(c)
            parent = c.parents[0]
            inherited = effective.get(parent, {})
            eff = {k: list(v) for k, v in inherited.items()}
            eff.update(own)
            effective[c.key] = eff
            c.attrs = _role_groups(eff)
            # second parent: a finding grouper named by the title, unless the ICD parent already has it
            up = set(groupers.get(parent, set()))
            match = self._matches(c.name.lower(), L.GROUPER, 1)
            if match and match[0] not in up:
                c.parents.append(match[0])
                g: str | None = match[0]
                while g is not None:
                    up.add(g)
                    g = self.value_parent.get(g)
            groupers[c.key] = up

    def prune(self) -> None:
        """Drop vocabulary concepts that nothing refers to (keeps metadata, attribute types, ICD concepts)."""
        keep = {k for k, *_ in L.METADATA} | {k for k in self.concepts if k.startswith("attr:")}
        stack = [k for k, c in self.concepts.items() if c.icd is not None]
        while stack:
            k = stack.pop()
            if k in keep and self.concepts[k].icd is None and k not in {m for m, *_ in L.METADATA}:
                continue
            keep.add(k)
            c = self.concepts[k]
            stack.extend(p for p in c.parents if p not in keep)
            stack.extend(t for _g, _a, t in c.attrs if t not in keep)
        self.concepts = {k: c for k, c in self.concepts.items() if k in keep}

    def add_icd9_synonyms(self, links, titles: dict[str, str]) -> None:
        """ICD-9-CM titles as extra acceptable synonyms of the single concept an ICD-9 code maps to."""
        for link in links:
            if len(link.concepts) != 1 or unit(self.seed, "syn9", link.code) >= self.size.p_icd9_synonym:
                continue
            c = self.concepts[link.concepts[0]]
            title = titles[link.code]
            if len(c.synonyms) < 4 and title.lower() not in {
                c.name.lower(),
                *(s.lower() for s in c.synonyms),
            }:
                c.synonyms.append(title)

    # ------------------------------------------------------------------ history
    def plan_history(self) -> None:
        """Concepts inactivated in the second release (leaf concepts of the first one)."""
        has_child = {p for c in self.concepts.values() for p in c.parents}
        for c in self.concepts.values():
            if (
                c.icd
                and self.tree.kind[c.icd] in ("sub", "ext")
                and c.key not in has_child
                and c.et == ET1
                and unit(self.seed, "retire", c.key) < self.size.p_retire
            ):
                c.retired = True

    # ------------------------------------------------------------------ ICD-10-CM map
    def owned_codes(self) -> dict[str, list[str]]:
        """Billable codes (leaves) under each ICD concept whose nearest concept ancestor it is."""
        t = self.tree
        owned: dict[str, list[str]] = {}
        for key in t.keys:
            if key not in t.leaf:
                continue
            k: str | None = key
            while k is not None and t.kind[k] in ICD_KINDS and f"icd:{k}" not in self.concepts:
                k = t.parent[k]
            if k is not None and t.kind[k] in ICD_KINDS and k != key:
                owned.setdefault(f"icd:{k}", []).append(key)
        return owned

    def build_maps(self) -> dict[str, list[str]]:
        """The ICD-10-CM map rows of the ICD concepts; the codes each concept owns (:meth:`owned_codes`)."""
        t = self.tree
        owned = self.owned_codes()
        for c in self.concepts.values():
            if c.icd is None or t.kind[c.icd] not in ICD_KINDS:
                continue
            rows = self._map_rows(c, sorted(owned.get(c.key, []), key=lambda k: (_preference(t, k), k)))
            for r in rows:
                r.et = c.et
                r.retired = c.retired
            self.maps.extend(rows)
            if c.retired:  # the parent takes over the code in the second release
                parent = self.concepts[c.parents[0]]
                for r in rows:
                    if r.target and parent.icd and t.kind[parent.icd] in ICD_KINDS:
                        n = 1 + max(m.group for m in self.maps if m.concept == parent.key)
                        self.maps.append(
                            MapRow(
                                parent.key, n, 1, "TRUE", f"ALWAYS {r.target}", r.target, 447637006, et=ET2
                            )
                        )
        return owned

    def _map_rows(self, c: Concept, codes: list[str]) -> list[MapRow]:
        """A concept's map groups: its own code, else the first of the codes it owns (``codes``, preferred
        first), else an empty target or its first leaf; an IFA rule and a second group for a share."""
        t, s = self.tree, self.size
        if c.icd in t.leaf:
            primary: str | None = c.icd
        elif codes:
            primary = codes.pop(0)
        elif unit(self.seed, "empty", c.key) < s.p_empty:
            primary = None
        else:
            primary = _first_leaf(t, c.icd)
        rows = []
        if primary is None:
            rows.append(
                MapRow(
                    c.key,
                    1,
                    1,
                    "TRUE",
                    "MAP SOURCE CONCEPT CANNOT BE CLASSIFIED WITH AVAILABLE DATA",
                    "",
                    447638001,
                )
            )
        elif codes and unit(self.seed, "ifa", c.key) < s.p_ifa:
            rows += self._ifa_rows(c, codes.pop(0), primary)
        else:
            rows.append(MapRow(c.key, 1, 1, "TRUE", f"ALWAYS {primary}", primary, 447637006))
        if codes and unit(self.seed, "group2", c.key) < s.p_second_group:
            second = codes.pop(0)
            rows.append(
                MapRow(
                    c.key,
                    2,
                    1,
                    "TRUE",
                    f"ALWAYS {second} | POSSIBLE REQUIREMENT FOR ADDITIONAL CODE TO FULLY DESCRIBE "
                    "DISEASE OR CONDITION",
                    second,
                    447637006,
                )
            )
        return rows

    def _ifa_rows(self, c: Concept, alt: str, primary: str) -> list[MapRow]:
        """An IFA rule (sex or age at onset) choosing ``alt``, otherwise ``primary`` (some '|' escaped)."""
        if unit(self.seed, "ifa-kind", c.key) < 0.5:
            rule = "IFA 248152002 | Female (finding) |"
            advice = f"IF FEMALE CHOOSE {alt} | MAP OF SOURCE CONCEPT IS CONTEXT DEPENDENT"
        else:
            rule = "IFA 445518008 | Age at onset of clinical finding (observable entity) | < 18.0 years"
            advice = (
                f"IF AGE AT ONSET OF CLINICAL FINDING BEFORE 18.0 YEARS CHOOSE {alt} | "
                "MAP OF SOURCE CONCEPT IS CONTEXT DEPENDENT"
            )
        if unit(self.seed, "escape", c.key) < 0.3:
            rule, advice = rule.replace("|", "&#x7C;"), advice.replace("|", "&#x7C;")
        return [
            MapRow(c.key, 1, 1, rule, advice, alt, 447639009),
            MapRow(c.key, 1, 2, "OTHERWISE TRUE", f"ALWAYS {primary}", primary, 447637006),
        ]


def _preference(t: Icd10Tree, key: str) -> int:
    """Primary map target order: the unspecified '.9' code, then other unspecified codes, then the rest."""
    unspecified = "unspecified" in t.title[key].lower()
    return 0 if unspecified and key.rstrip("A").endswith("9") else 1 if unspecified else 2


def _first_leaf(t: Icd10Tree, key: str) -> str:
    while t.children[key]:
        key = t.children[key][0]
    return key


# Attributes written ungrouped (group 0); the others get role groups from 1.
UNGROUPED = ("clinical_course", "severity", "episodicity", "occurrence", "onset", "finding_method",
             "finding_informer", "has_intent")  # fmt: skip
PAIRED_GROUPS: list[tuple[str, ...]] = [
    ("associated_finding", "finding_context", "temporal_context", "subject_context"),
    ("associated_procedure", "procedure_context", "has_focus"),
    ("has_interpretation", "interprets"),
]
SINGLE_GROUPS = ("due_to", "after", "manifestation", "associated_with", "during", "temporally_related_to",
                 "before", "precondition")  # fmt: skip


def _role_groups(eff: dict[str, list[str]]) -> list[tuple[int, str, str]]:
    out: list[tuple[int, str, str]] = []
    for attr in UNGROUPED:
        for v in eff.get(attr, [])[:1]:
            out.append((0, attr, v))
    g = 1
    sites, morphs = eff.get("finding_site", []), eff.get("morphology", [])
    for i in range(max(len(sites), len(morphs))):
        if i < len(sites):
            out.append((g, "finding_site", sites[i]))
        if i < len(morphs):
            out.append((g, "morphology", morphs[i]))
        if i == 0 and eff.get("laterality"):
            out.append((g, "laterality", eff["laterality"][0]))
        g += 1
    if not sites and not morphs and eff.get("laterality"):
        out.append((g, "laterality", eff["laterality"][0]))
        g += 1
    agents = eff.get("causative_agent", [])
    process = eff.get("pathological_process", [])
    for i, agent in enumerate(agents):
        out.append((g, "causative_agent", agent))
        if i == 0 and process:
            out.append((g, "pathological_process", process[0]))
        g += 1
    if process and not agents:
        out.append((g, "pathological_process", process[0]))
        g += 1
    for attrs in PAIRED_GROUPS:
        pair = [(a, eff[a][0]) for a in attrs if eff.get(a)]
        if pair:
            out.extend((g, a, v) for a, v in pair)
            g += 1
    for attr in SINGLE_GROUPS:
        for v in eff.get(attr, [])[:1]:
            out.append((g, attr, v))
            g += 1
    return out
