"""ICD-10-CM classification above the code: chapter -> block -> category -> subcategory(ies) -> code.

The tree is the public ICD-10-CM tabular list (FY2026, April 1 2026) that the ``simple-icd-10-cm``
package ships (:data:`PACKAGE`). :func:`data_files` finds its files without importing the package (their
hashes enter the program id), and :func:`icd10cm_tabular` reads them with the package's rules
(:mod:`ontology_compiler.icd10cm_tabular`; importing the package would build every note of every node,
about 2 s), once per process; a compile with the ICD hierarchy on starts reading it on a thread
(:func:`prefetch_tabular`) when it begins.

A code's ancestors come from the tree, nearest first, ending with the block and the chapter; the ones
before the block are the category (3 characters) and, before it, the subcategories. A code the tree does
not know (the SNOMED CT International map targets WHO ICD-10 codes, such as ``E14.9``) takes the
ancestors of its nearest prefix the tree knows, that prefix included (``J45.0`` -> ``J45``, its block and
chapter); with no such prefix, the chapter by range (:data:`ontology_compiler.icd.ICD10_CHAPTERS`, the
``chapter`` of ``concepts.parquet``); with none, nothing.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from . import icd
from .errors import MissingInputError
from .icd10cm_tabular import Tabular, load_tabular

PACKAGE = "simple_icd_10_cm"
DATA_SUFFIXES = (".xml", ".txt")  # the tabular XML and the code list the package reads

# where a code's ancestors came from (the ``source`` of each code; the edges' provenance is derived)
TABULAR = "tabular"  # the code is in the tabular list: its own ancestors
NEAREST = "nearest_ancestor"  # not in it: its nearest known prefix and that prefix's ancestors
CHAPTER_RANGE = "chapter_range"  # no prefix known either: the chapter by range
NONE = "none"  # not even a chapter


def data_files() -> list[Path]:
    """The data files of :data:`PACKAGE` (tabular XML, code list), sorted, found without importing it.

    Raises :class:`MissingInputError` when the package is not installed or ships no such file."""
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(
        p for f in folders for p in (Path(f) / "data").glob("*") if p.is_file() and p.suffix in DATA_SUFFIXES
    )
    if not files:
        raise MissingInputError(
            f"the ICD-10-CM hierarchy needs the tabular list of the {PACKAGE.replace('_', '-')} package, "
            f"which is {'not installed' if spec is None else 'installed without its data files'}; install it "
            "(pip install simple-icd-10-cm, a dependency of hrrbert) or compile with --no-icd-hierarchy"
        )
    return files


_TABULAR_LOCK = threading.Lock()
_TABULAR: Future | None = None  # the tabular list of this process, read or being read


def icd10cm_tabular() -> Tabular:
    """The tabular list of :data:`PACKAGE` (read once per process; waits for :func:`prefetch_tabular`)."""
    global _TABULAR
    with _TABULAR_LOCK:
        if _TABULAR is None:
            _TABULAR = Future()
            mine = True
        else:
            mine = False
        f = _TABULAR
    if mine:
        _fill(f)
    try:
        return f.result()
    except BaseException:
        with _TABULAR_LOCK:  # a failed read is not kept: the next call tries again
            if _TABULAR is f:
                _TABULAR = None
        raise


def prefetch_tabular() -> None:
    """Start reading the tabular list on a background thread (a compile does it while it reads the
    release: the reader is Python, the release reading mostly not) unless it is read or being read."""
    global _TABULAR
    with _TABULAR_LOCK:
        if _TABULAR is not None:
            return
        _TABULAR = f = Future()
    threading.Thread(target=_fill, args=(f,), name="icd10cm-tabular", daemon=True).start()


def _fill(f: Future) -> None:
    try:
        files = data_files()
        xml = [p for p in files if p.suffix == ".xml"]
        codes = [p for p in files if p.suffix == ".txt"]
        if len(xml) != 1 or len(codes) != 1:
            raise MissingInputError(
                f"the {PACKAGE.replace('_', '-')} package should ship one tabular XML and one code list, "
                "found " + ", ".join(p.name for p in files)
            )
        f.set_result(load_tabular(xml[0], codes[0]))
    except BaseException as e:
        f.set_exception(e)


@dataclass
class Icd10Ancestors:
    """The ancestor nodes of each code, as rows: ``code`` (as given), ``level`` (``chapter``, ``block``,
    ``category``, ``subcategory``), ``node`` (the tree's name: ``4``, ``E08-E13``, ``E11``, ``E11.6``),
    ``source`` (how the code got them: :data:`TABULAR`, :data:`NEAREST`, :data:`CHAPTER_RANGE`), plus the
    ``source`` of every code (``sources``) and each node's title (``titles``, by (level, node))."""

    code: list[str] = field(default_factory=list)
    level: list[str] = field(default_factory=list)
    node: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    titles: dict[tuple[str, str], str] = field(default_factory=dict)


def icd10cm_ancestors(codes: Sequence[str]) -> Icd10Ancestors:
    """The ancestors of each distinct dotless code (see the module docstring); one tree walk per code."""
    out = Icd10Ancestors()
    if not codes:
        return out
    cm = icd10cm_tabular()
    by_range = icd.chapters(pa.array(codes, pa.string()), icd.ICD10CM).to_pylist()
    titles = out.titles
    for code, chapter in zip(codes, by_range, strict=True):
        chain, source = _chain(cm, code)
        if chain is None and chapter is not None:
            chain, source = [str(chapter)], CHAPTER_RANGE
        out.sources[code] = source if chain else NONE
        levels = _levels(chain or [])
        out.code += [code] * len(levels)
        out.source += [source] * len(levels)
        for key in levels:
            out.level.append(key[0])
            out.node.append(key[1])
            if key not in titles:
                titles[key] = cm.description(key[1], prioritize_blocks=key[0] == "block")
    return out


def _chain(cm: Tabular, code: str) -> tuple[list[str] | None, str]:
    """The code's ancestors nearest first (to the chapter), or its nearest known prefix and that prefix's;
    ``(None, NONE)`` when neither is in the tree."""
    if not _is_code(code):
        return None, NONE
    try:
        return cm.ancestors(code), TABULAR
    except ValueError:  # not in the tabular list
        pass
    for n in range(len(code) - 1, 2, -1):
        prefix = code[:n]
        if cm.is_valid_item(prefix):
            return [icd.dotted_code(prefix, icd.ICD10CM), *cm.ancestors(prefix)], NEAREST
    return None, NONE


def _is_code(code: str) -> bool:
    """An ICD-10 code's shape (a letter, then at least two more characters, no range): chapter numbers
    (``4``) and block names (``E08-E13``) are names of the tree too, never token codes."""
    return len(code) >= 3 and code[0].isalpha() and "-" not in code


def _levels(chain: list[str]) -> list[tuple[str, str]]:
    """``(level, node)`` of an ancestor chain (nearest first, ending with the block and the chapter)."""
    if len(chain) <= 1:  # nothing, or the chapter by range
        return [("chapter", node) for node in chain]
    *below, block, chapter = chain
    levels = [("chapter", chapter), ("block", block)]
    if below:
        *subcategories, category = below
        levels.append(("category", category))
        levels += [("subcategory", s) for s in reversed(subcategories)]
    return levels
