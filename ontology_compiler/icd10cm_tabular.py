"""The ICD-10-CM tabular list as a tree of names, read straight from the files ``simple-icd-10-cm`` ships.

Importing ``simple_icd_10_cm`` builds a Python object with every note of all 98,000 nodes (about 2 s);
the compiler needs only each node's name, title and parent. :func:`load_tabular` reads the same two
files (the tabular XML and the code list, found by :func:`ontology_compiler.icd10cm_tree.data_files`)
into that much, in about a fifth of the time, with the package's rules:

- the tree is chapter -> section (block) -> diag (category, subcategories); a section's name is its
  ``id`` attribute, a chapter's and a diag's their ``<name>``;
- a leaf diag with a ``<sevenChrDef>`` of its own, or below one, gets one child per seventh character:
  its name padded with ``X`` to six characters after the dot, then the character, kept only where the
  code list holds the code (the list carries the exclusions the XML does not state);
- a name held by two nodes (a block with a single category, e.g. ``B99``) names the first one finished,
  children before parents: the category; a block's title is asked for with ``prioritize_blocks``;
- a dotless code is found by its dotted form (``E1165`` -> ``E11.65``).

``tests/ontology_compiler/test_icd10cm_tabular.py`` checks every node against the package.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputFileError

CHAPTER, SECTION, CATEGORY, SUBCATEGORY, EXTENDED = (
    "chapter",
    "section",
    "category",
    "subcategory",
    "extended subcategory",
)


@dataclass
class Tabular:
    """Nodes by index: ``name``, ``title``, ``kind``, ``parent`` (-1 for a chapter), ``children``;
    ``index``: a name -> its node (the first finished, as the package)."""

    name: list[str] = field(default_factory=list)
    title: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    children: list[int] = field(default_factory=list)  # how many
    index: dict[str, int] = field(default_factory=dict)

    def _node(self, code: str) -> int | None:
        i = self.index.get(code)
        if i is None and len(code) >= 4 and code[3] != ".":
            i = self.index.get(code[:3] + "." + code[3:])
        return i

    def is_valid_item(self, code: str) -> bool:
        """Whether ``code`` (dotted or dotless) names a node: chapter, block, category or code."""
        return self._node(code) is not None

    def _get(self, code: str) -> int:
        i = self._node(code)
        if i is None:
            raise ValueError(f'The code "{code}" does not exist.')
        return i

    def _block_first(self, i: int, prioritize_blocks: bool) -> int:
        p = self.parent[i]
        return p if prioritize_blocks and p >= 0 and self.name[p] == self.name[i] else i

    def ancestors(self, code: str, prioritize_blocks: bool = False) -> list[str]:
        """The names above ``code``, nearest first, ending with the chapter (ValueError when unknown)."""
        i = self._block_first(self._get(code), prioritize_blocks)
        out = []
        while (i := self.parent[i]) >= 0:
            out.append(self.name[i])
        return out

    def description(self, code: str, prioritize_blocks: bool = False) -> str:
        """The title of ``code``; ``prioritize_blocks``: of the block where a block and its single category
        share the name."""
        return self.title[self._block_first(self._get(code), prioritize_blocks)]

    def is_leaf(self, code: str, prioritize_blocks: bool = False) -> bool:
        """Whether ``code`` has no child (seventh-character children count)."""
        return self.children[self._block_first(self._get(code), prioritize_blocks)] == 0


def load_tabular(xml: str | Path, code_list: str | Path) -> Tabular:
    """Read the tabular XML ``xml`` and the code list ``code_list`` (first field of each line a code,
    dotted or not) into a :class:`Tabular`. A file that is not such XML is an :class:`InputFileError`."""
    xml, code_list = Path(xml), Path(code_list)
    confirmed = {
        line.split(" ", 1)[0].replace(".", "") for line in code_list.read_text(encoding="utf-8").split("\n")
    }
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError as e:
        raise InputFileError(xml, f"not well-formed XML: {e}", line=e.position[0]) from e
    t = Tabular()
    top = list(root)[2:]  # after <version> and <introduction>, as the package reads it
    if not top:
        raise InputFileError(
            xml, "no chapters after <version> and <introduction>", expected="ICD10CM.tabular"
        )
    for chapter in top:
        _walk(t, chapter, -1, None, confirmed)
    return t


def _walk(t: Tabular, el: ET.Element, parent: int, seven: dict[str, str] | None, confirmed: set[str]) -> int:
    """Add ``el`` and everything below it; returns its index. ``seven``: the seventh characters of the
    nearest ancestor that defines them (None when none does)."""
    i = len(t.name)
    t.name.append(el.get("id", ""))
    t.title.append("")
    t.kind.append("")
    t.parent.append(parent)
    t.children.append(0)
    own: dict[str, str] = {}
    inherited = seven
    below = seven
    n_children = 0
    for sub in el:
        tag = sub.tag
        if tag == "section" or tag == "diag":
            _walk(t, sub, i, below, confirmed)
            n_children += 1
        elif tag == "name":
            if sub.text is None:
                raise ValueError(
                    f"a <name> without text below {t.name[parent] if parent >= 0 else 'the root'}"
                )
            t.name[i] = sub.text
        elif tag == "desc":
            if sub.text is not None:
                t.title[i] = sub.text
        elif tag == "sevenChrDef":
            last = None
            for ext in sub:
                if ext.tag == "extension":
                    last = ext.get("char", "")
                    own[last] = ext.text or ""
                elif ext.tag == "note" and last is not None and ext.text is not None:
                    own[last] += "/" + ext.text
            below = own
    name = t.name[i]
    tag = el.tag
    if tag == "chapter":
        kind = CHAPTER
    elif tag == "section":
        kind = SECTION
    elif tag == "diag" and len(name) == 3:
        kind = CATEGORY
    else:
        kind = SUBCATEGORY
    t.kind[i] = kind
    t.index.setdefault(name, i)
    if n_children == 0 and (own or inherited is not None):
        chars = own or inherited or {}
        extended = name + "." if len(name) == 3 else name
        extended = extended + "X" * max(0, 7 - len(extended))
        for ch in chars:
            if extended[:3] + extended[4:] + ch in confirmed:
                j = len(t.name)
                t.name.append(extended + ch)
                t.title.append(f"{t.title[i]}, {chars[ch]}")
                t.kind.append(EXTENDED)
                t.parent.append(i)
                t.children.append(0)
                t.index.setdefault(extended + ch, j)
                n_children += 1
    t.children[i] = n_children
    return i
