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
    t = Tabular()
    try:
        _read(t, xml, confirmed)
    except ET.ParseError as e:
        raise InputFileError(xml, f"not well-formed XML: {e}", line=e.position[0]) from e
    if not t.name:
        raise InputFileError(
            xml, "no chapters after <version> and <introduction>", expected="ICD10CM.tabular"
        )
    return t


@dataclass
class _Open:
    """A node being read: its index, depth in the document, seventh characters (its own, those it
    inherits, those its children inherit), node children so far, the last seventh character read."""

    i: int
    depth: int
    inherited: dict[str, str] | None
    own: dict[str, str] = field(default_factory=dict)
    below: dict[str, str] | None = None
    children: int = 0
    last_char: str | None = None


def _read(t: Tabular, xml: Path, confirmed: set[str]) -> None:
    """Stream the XML, each element cleared at its end (the document is never whole in memory); a node is
    finished at its end tag, so children before parents, as the package registers them."""
    path: list[str] = []  # tags from the root to the current element
    stack: list[_Open] = []
    top_seen = 0  # elements under the root so far: the first two are <version> and <introduction>
    for event, el in ET.iterparse(xml, events=("start", "end")):
        if event == "start":
            path.append(el.tag)
            depth = len(path)
            opens = False
            if depth == 2:
                top_seen += 1
                opens = top_seen > 2
            elif stack and depth == stack[-1].depth + 1 and el.tag in ("section", "diag"):
                opens = True
            if opens:
                parent = stack[-1] if stack else None
                inherited = parent.below if parent else None
                stack.append(_Open(len(t.name), depth, inherited, below=inherited))
                t.name.append(el.get("id", ""))
                t.title.append("")
                t.kind.append(el.tag)
                t.parent.append(parent.i if parent else -1)
                t.children.append(0)
                if parent:
                    parent.children += 1
            continue
        depth = len(path)
        node = stack[-1] if stack else None
        if node is not None:
            if depth == node.depth + 1:  # a direct child of the open node
                if el.tag == "name":
                    if el.text is None:
                        raise InputFileError(xml, "a <name> element without text", expected="a code")
                    t.name[node.i] = el.text
                elif el.tag == "desc" and el.text is not None:
                    t.title[node.i] = el.text
                elif el.tag == "sevenChrDef":
                    node.below = node.own  # the children after it inherit it
            elif depth == node.depth + 2 and path[-2] == "sevenChrDef":
                if el.tag == "extension":
                    node.last_char = el.get("char", "")
                    node.own[node.last_char] = el.text or ""
                elif el.tag == "note" and node.last_char is not None and el.text is not None:
                    node.own[node.last_char] += "/" + el.text
            elif depth == node.depth:
                _finish(t, stack.pop(), confirmed)
        path.pop()
        if depth > 1:
            el.clear()


def _finish(t: Tabular, node: _Open, confirmed: set[str]) -> None:
    """Name the node's kind, register its name (the first finished keeps it) and, for a leaf with seventh
    characters, add the extended codes the code list holds."""
    i = node.i
    name, tag = t.name[i], t.kind[i]
    if tag == "chapter":
        t.kind[i] = CHAPTER
    elif tag == "section":
        t.kind[i] = SECTION
    elif tag == "diag" and len(name) == 3:
        t.kind[i] = CATEGORY
    else:
        t.kind[i] = SUBCATEGORY
    t.index.setdefault(name, i)
    n_children = node.children
    if n_children == 0 and (node.own or node.inherited is not None):
        chars = node.own or node.inherited or {}
        extended = name + "." if len(name) == 3 else name
        extended = extended + "X" * max(0, 7 - len(extended))
        for ch, text in chars.items():
            if extended[:3] + extended[4:] + ch in confirmed:
                j = len(t.name)
                t.name.append(extended + ch)
                t.title.append(f"{t.title[i]}, {text}")
                t.kind.append(EXTENDED)
                t.parent.append(i)
                t.children.append(0)
                t.index.setdefault(extended + ch, j)
                n_children += 1
    t.children[i] = n_children
