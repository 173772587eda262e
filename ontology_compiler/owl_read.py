"""Read an OWL file through owlready2's quadstore into Arrow tables (no per-class Python objects).

The file is parsed into a fresh in-memory owlready2 ``World``; the triples are then read in bulk with
SQL from its SQLite quadstore (``resources``, ``objs``, ``datas``) and resolved with numpy and dicts.
Imports (``owl:imports``) are not followed; they are listed.

Reading rules (grammar as data below):

- classes: named resources typed ``owl:Class`` (or used as a named superclass / ``some`` filler),
  minus ``owl:Thing``/``owl:Nothing``; ``owl:deprecated true`` classes are kept in the class table but
  dropped from edges and tokens. Keys: ``CLASS_KEY_BASE`` + the index of the IRI in sorted order.
- object properties: keys ``PROPERTY_KEY_BASE`` + index by sorted IRI; is-a keeps 116680003.
- ``C subClassOf D`` (D named) -> is-a; ``C subClassOf``/``equivalentClass`` an expression: named
  conjuncts of an intersection -> is-a, ``P some D`` (D named) -> attribute edge group 0, and
  ``G some (P1 some D1 and P2 some D2 ...)`` (a ``some`` whose filler is a restriction or an
  intersection of restrictions: SNOMED's role group) -> attribute edges with group 1, 2, ... per class
  (groups ordered by content, identical groups merged), ``G`` kept as ``group_property_key``.
  Anything else (``only``, unions, complements, cardinalities, ``value``, deeper nesting) is counted.
- ``C equivalentClass D`` with both named is skipped (counted): it would make an is-a cycle.
"""

from __future__ import annotations

import io
import logging
import re
import sys
import xml.parsers.expat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from . import rf2_schema as S
from .errors import InputFileError

log = logging.getLogger(__name__)

NAMESPACES = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "owl": "http://www.w3.org/2002/07/owl#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "oboInOwl": "http://www.geneontology.org/formats/oboInOwl#",
    "obo": "http://purl.obolibrary.org/obo/",
    "dc": "http://purl.org/dc/elements/1.1/",
    "dcterms": "http://purl.org/dc/terms/",
}
FORMATS = {"rdfxml": "RDF/XML", "owlxml": "OWL/XML", "ntriples": "N-Triples"}
CLASS_KEY_BASE = 10**12
PROPERTY_KEY_BASE = 2 * 10**12
IS_A_KEY = S.IS_A
_V = {
    k: NAMESPACES["rdf" if k in ("type", "first", "rest", "nil") else "owl"] + k
    for k in (
        "type",
        "first",
        "rest",
        "nil",
        "Class",
        "Thing",
        "Nothing",
        "ObjectProperty",
        "AnnotationProperty",
        "Ontology",
        "Restriction",
        "onProperty",
        "someValuesFrom",
        "intersectionOf",
        "equivalentClass",
        "deprecated",
        "versionIRI",
        "versionInfo",
        "imports",
        "allValuesFrom",
        "unionOf",
        "complementOf",
        "hasValue",
        "oneOf",
        "cardinality",
        "minCardinality",
        "maxCardinality",
        "qualifiedCardinality",
        "minQualifiedCardinality",
        "maxQualifiedCardinality",
    )
}
_V["subClassOf"] = NAMESPACES["rdfs"] + "subClassOf"
_V["label"] = NAMESPACES["rdfs"] + "label"
_V["oboId"] = NAMESPACES["oboInOwl"] + "id"
UNSUPPORTED = ("allValuesFrom", "unionOf", "complementOf", "hasValue", "oneOf", "cardinality",
               "minCardinality", "maxCardinality", "qualifiedCardinality", "minQualifiedCardinality",
               "maxQualifiedCardinality")  # fmt: skip
OBO_LOCAL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)_([0-9]+)$")


def expand(name: str) -> str:
    """``oboInOwl:hasDbXref`` -> its IRI; a full IRI is returned unchanged."""
    if "://" in name or name.startswith("urn:"):
        return name
    prefix, sep, local = name.partition(":")
    if not sep or prefix not in NAMESPACES:
        raise ValueError(
            f"{name!r} is neither an IRI nor a CURIE with a known prefix ({', '.join(NAMESPACES)})"
        )
    return NAMESPACES[prefix] + local


def fragment(iri: str) -> str:
    """The part after the last ``#`` or ``/``."""
    return re.split(r"[#/]", iri.rstrip("/#"))[-1]


def curie(iri: str) -> str:
    """OBO-style ``.../HP_0001250`` -> ``HP:0001250``; otherwise the IRI fragment."""
    frag = fragment(iri)
    m = OBO_LOCAL_RE.match(frag)
    return f"{m.group(1)}:{m.group(2)}" if m else frag


@dataclass
class OwlGraph:
    """The ontology as read: header, classes, properties, edges and annotation values."""

    path: Path
    format: str
    ontology_iri: str | None
    version_iri: str | None
    version_info: str | None
    imports: list[str]
    classes: pa.Table  # key, iri, curie, deprecated
    properties: pa.Table  # key, iri, curie, label
    edges: pa.Table  # source_key, relation_key, target_key, role_group, group_property_key, axiom
    annotations: pa.Table  # key, property (IRI), value, language, iri_value (the value is an IRI)
    triples: int
    counts: Counter = field(default_factory=Counter)


def detect_format(path: Path) -> str:
    """``rdfxml``, ``owlxml`` or ``ntriples``, from the content: an XML document by its root element
    (``owl:Ontology`` without ``rdf:about`` is OWL/XML, any other root RDF/XML), anything else N-Triples
    (owlready2's own test). An XML document that breaks before its root element is an error naming the
    line and column."""
    import owlready2

    with open(path, "rb") as f:
        guessed = owlready2.driver._guess_format(f)
    if guessed == "ntriples":
        return guessed
    parser = xml.parsers.expat.ParserCreate(namespace_separator=" ")
    root: list[tuple[str, dict]] = []

    def start(name, attrs):
        root.append((name, attrs))
        raise _RootFound

    parser.StartElementHandler = start
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 16):
                parser.Parse(chunk, False)
            parser.Parse(b"", True)
    except _RootFound:
        pass
    except xml.parsers.expat.ExpatError as e:
        raise _parse_error(path, "XML", e.lineno, e.offset, f"{type(e).__name__}: {e}") from None
    if not root:
        raise InputFileError(
            path, "no root element", expected="an OWL ontology (RDF/XML, OWL/XML or N-Triples)"
        )
    name, attrs = root[0]
    if name == NAMESPACES["owl"] + " Ontology" and NAMESPACES["rdf"] + " about" not in attrs:
        return "owlxml"
    return "rdfxml"


class _RootFound(Exception):
    """Stops the XML sniff at the root element."""


def parse(path: Path) -> tuple[object, str, int]:
    """Parse ``path`` into a fresh World with the parser of its format (:func:`detect_format`).

    Raises:
        InputFileError: the parser rejects the file: its own message, with the line (and column) it
            stopped at, the text of that line and, for a file that is not RDF/XML, OWL/XML or
            N-Triples (Turtle, OBO), what to convert it to. No other parser is tried: one that accepts
            the file by accident would hide the real error behind an empty ontology.
    """
    fmt = detect_format(path)
    try:
        return _parse_as(path, fmt, parallel=True)
    except _ParserFailed as first:
        failure = first
    if failure.cause is None:  # a large file parsed in a child process: parse again here for the cause
        try:
            return _parse_as(path, fmt, parallel=False)
        except _ParserFailed as again:
            failure = again if again.cause is not None else failure
    line, column = _position(failure.message)
    if line is None and fmt == "ntriples":  # owlready2's compiled N-Triples parser names no line
        line = _first_bad_ntriples_line(path)
    cause = _message(failure.cause) if failure.cause is not None else failure.message
    if failure.cause is not None:
        cause = f"{type(failure.cause).__name__}: {cause}"
    raise _parse_error(path, FORMATS[fmt], line, column, cause, fmt=fmt) from None


class _ParserFailed(Exception):
    def __init__(self, message: str, cause: BaseException | None) -> None:
        super().__init__(message)
        self.message, self.cause = message, cause


class _Unnamed(io.BufferedReader):
    """A file whose size owlready2 cannot look up, so that it parses in this process."""

    @property
    def name(self):  # noqa: D102
        raise AttributeError("name")


def _parse_as(path: Path, fmt: str, *, parallel: bool) -> tuple[object, str, int]:
    import owlready2

    caught: list[BaseException] = []
    hook = sys.excepthook
    sys.excepthook = lambda _t, value, _tb: caught.append(value)  # owlready2 reports parser errors here
    world = owlready2.World()
    try:
        onto = world.get_ontology("http://hrrbert.invalid/unnamed/")
        with open(path, "rb") if parallel else _Unnamed(io.FileIO(path, "rb")) as f:
            onto.graph.parse(f, format=fmt, default_base=onto.base_iri)
        return world, fmt, onto.graph.c
    except Exception as e:  # owlready2 raises several types
        world.close()
        found = [x.__cause__ or x.__context__ for x in [*caught, e]]
        raise _ParserFailed(_message(e), next((x for x in found if x is not None), None)) from None
    finally:
        sys.excepthook = hook


_POSITION_RE = re.compile(r"line (\d+)(?:, column (\d+))?")
_NTRIPLE_RE = re.compile(
    r'^\s*(<[^>]*>|_:\S+)\s+<[^>]*>\s+(<[^>]*>|_:\S+|"(?:[^"\\]|\\.)*"(?:\^\^<[^>]*>|@[A-Za-z0-9-]+)?)\s*\.\s*(#.*)?$'
)
_EXPECTED = {
    "owlxml": "OWL/XML (the root element is owl:Ontology)",
    "rdfxml": "RDF/XML (an XML file whose root element is not an OWL/XML owl:Ontology)",
    "ntriples": "N-Triples (the file is not XML)",
}
# what to convert to, by the file's first non-blank text
_NOT_READ = (("@prefix", "Turtle"), ("@base", "Turtle"), ("prefix ", "Turtle"), ("format-version:", "OBO"),
             ("prefix(", "OWL functional syntax"), ("ontology(", "OWL functional syntax"),
             ("prefix:", "Manchester syntax"), ("ontology:", "Manchester syntax"))  # fmt: skip


def _position(message: str) -> tuple[int | None, int | None]:
    m = _POSITION_RE.search(message)
    return (int(m.group(1)), int(m.group(2)) if m.group(2) else None) if m else (None, None)


def _parse_error(
    path: Path, parser: str, line: int | None, column: int | None, cause: str, fmt: str | None = None
) -> InputFileError:
    """The error of a rejected file: the parser, where it stopped, its message, the line's text, a hint."""
    where = ", ".join(
        x for x in (f"line {line}" if line else "", f"column {column}" if column is not None else "") if x
    )
    text = _line_text(path, line) if line else None
    found = (f"{where}: " if where else "") + cause + (f"\n  at: {text}" if text else "")
    hint = None
    head = _head(path).lower()
    kind = next((k for prefix, k in _NOT_READ if head.startswith(prefix)), None)
    if fmt == "ntriples" and kind:
        hint = (
            f"This looks like {kind}, which owlready2 does not read; "
            "convert it to RDF/XML (e.g. robot convert)."
        )
    elif fmt == "owlxml" and "KeyError" in cause:
        hint = "OWL/XML: an abbreviatedIRI prefix without its <Prefix name=... IRI=.../> declaration?"
    what = (
        f"owlready2's {parser} parser rejects this file"
        if fmt
        else "not well-formed XML before the root element"
    )
    return InputFileError(
        path,
        what,
        line=line,
        expected=f"{_EXPECTED.get(fmt, 'well-formed XML')}; owlready2 reads {', '.join(FORMATS.values())}",
        found=found,
        hint=hint,
    )


def _first_bad_ntriples_line(path: Path) -> int | None:
    """The first line that is neither blank, a comment, nor one N-Triples statement."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            text = raw.decode("utf-8", "replace").strip()
            if text and not text.startswith("#") and not _NTRIPLE_RE.match(text):
                return n
    return None


def _head(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(4096).decode("utf-8", "replace").lstrip("\ufeff \t\r\n")


def _line_text(path: Path, line: int) -> str | None:
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if n == line:
                text = raw.decode("utf-8", "replace").strip()
                return text[:160] + (" ..." if len(text) > 160 else "")
    return None


def _message(e: BaseException) -> str:
    a = e.args
    while isinstance(a, tuple) and a and not isinstance(a[-1], str):
        a = a[-1]
    return str(a[-1] if isinstance(a, tuple) and a else e).strip()[:300]


def read_owl(path: str | Path, annotation_properties: list[str], language: str | None) -> OwlGraph:
    """Parse ``path`` and read classes, properties, edges and the given annotation properties' values.

    ``annotation_properties`` are IRIs; literal values are kept when ``language`` is None, when they
    carry no language tag, or when their tag is ``language`` or starts with ``language-``. Every other
    annotation on a class is read too (any literal-valued property, and the IRI values of declared
    annotation properties), e.g. ``oboInOwl:hasDbXref``, for ``export-owl`` to write back.
    """
    path = Path(path)
    world, fmt, c = parse(path)
    try:
        return _read(world.graph, c, path, fmt, annotation_properties, language)
    finally:
        world.close()


def _read(g, c: int, path: Path, fmt: str, ann_props: list[str], language: str | None) -> OwlGraph:
    t = _Triples(g, c)
    counts: Counter = Counter()
    counts["triples"] = len(t.s)
    # ---- header
    onto_ids = t.s[(t.p == t.sid["type"]) & (t.o == t.sid["Ontology"]) & (t.s > 0)]
    onto_sid = int(onto_ids[0]) if len(onto_ids) else None
    ontology_iri = t.iri_of[onto_sid] if onto_sid else None
    version_iri = t.object_of(onto_sid, "versionIRI") if onto_sid else None
    imports = (
        [t.iri_of[int(x)] for x in t.o[(t.s == onto_sid) & (t.p == t.sid["imports"])]] if onto_sid else []
    )
    if imports:
        log.warning("%s imports %d ontologies; imports are not followed: %s", path, len(imports), imports)
    # ---- classes and properties
    class_ids, prop_ids = _class_ids(t), _property_ids(t)
    datas = g.execute(
        "SELECT s, p, o, d FROM datas WHERE c = ? AND p IN (?, ?, ?, ?)",
        (c, t.sid["deprecated"], t.sid["versionInfo"], t.sid["oboId"], t.sid["label"]),
    ).fetchall()
    deprecated = {r[0] for r in datas if r[1] == t.sid["deprecated"] and str(r[2]).lower() in ("true", "1")}
    version_info = next((str(r[2]) for r in datas if r[1] == t.sid["versionInfo"] and r[0] == onto_sid), None)
    classes, key_of = _class_table(
        t, class_ids, deprecated, {r[0]: str(r[2]) for r in datas if r[1] == t.sid["oboId"]}
    )
    properties, pkey_of = _property_table(t, prop_ids, [r for r in datas if r[1] == t.sid["label"]])
    counts["classes"] = len(class_ids)
    counts["classes_deprecated"] = len(deprecated & class_ids)
    counts["object_properties"] = len(prop_ids)
    # ---- axioms -> edges
    edge_table = _axiom_edges(t, class_ids, deprecated, counts).table(key_of, pkey_of)
    # ---- annotation values
    ann = _annotations(g, c, t, ann_props, key_of, language, counts)
    return OwlGraph(
        path,
        fmt,
        ontology_iri,
        version_iri,
        version_info,
        imports,
        classes,
        properties,
        edge_table,
        ann,
        len(t.s),
        counts,
    )


class _Triples:
    """The resource triples of graph ``c`` as numpy columns ``s``, ``p``, ``o`` of storids (< 0: blank)."""

    def __init__(self, g, c: int) -> None:
        self.res = dict(g.execute("SELECT iri, storid FROM resources").fetchall())
        self.iri_of = {v: k for k, v in self.res.items()}
        self.sid = {k: self.res.get(v, 0) for k, v in _V.items()}  # vocabulary name -> storid
        objs = np.array(
            g.execute("SELECT s, p, o FROM objs WHERE c = ?", (c,)).fetchall() or np.zeros((0, 3)), np.int64
        )
        self.s, self.p, self.o = objs[:, 0], objs[:, 1], objs[:, 2]
        self.sub = (self.p == self.sid["subClassOf"]) & (self.s > 0)
        self.nonclass = {self.sid["Thing"], self.sid["Nothing"], 0}

    def object_of(self, subject: int, pred: str) -> str | None:
        hit = self.o[(self.s == subject) & (self.p == self.sid[pred])]
        return self.iri_of.get(int(hit[0])) if len(hit) else None


def _class_ids(t: _Triples) -> set[int]:
    """Named classes: declared ``owl:Class``, named superclasses, named ``some`` fillers."""
    declared = set(t.s[(t.p == t.sid["type"]) & (t.s > 0) & (t.o == t.sid["Class"])].tolist())
    fillers = t.o[(t.p == t.sid["someValuesFrom"]) & (t.o > 0)]
    return (declared | set(t.o[t.sub & (t.o > 0)].tolist()) | set(fillers.tolist())) - t.nonclass


def _property_ids(t: _Triples) -> set[int]:
    """Named object properties: declared, or used in a restriction."""
    typed = (t.p == t.sid["type"]) & (t.s > 0)
    ids = set(t.s[typed & (t.o == t.sid["ObjectProperty"])].tolist()) | set(
        t.o[t.p == t.sid["onProperty"]].tolist()
    )
    return {x for x in ids if x > 0}


def _class_table(
    t: _Triples, class_ids: set[int], deprecated: set[int], obo_id: dict[int, str]
) -> tuple[pa.Table, dict[int, int]]:
    """``(key, iri, curie, deprecated)`` by sorted IRI, and storid -> key."""
    class_sids = sorted(class_ids, key=lambda x: t.iri_of[x])
    key_of = {x: CLASS_KEY_BASE + i for i, x in enumerate(class_sids)}
    class_iris = [t.iri_of[x] for x in class_sids]
    classes = pa.table(
        {
            "key": pa.array([key_of[x] for x in class_sids], pa.int64()),
            "iri": pa.array(class_iris, pa.string()),
            "curie": pa.array(
                [obo_id.get(x) or curie(i) for x, i in zip(class_sids, class_iris, strict=True)], pa.string()
            ),
            "deprecated": pa.array([x in deprecated for x in class_sids], pa.bool_()),
        }
    )
    return classes, key_of


def _property_table(t: _Triples, prop_ids: set[int], label_rows: list) -> tuple[pa.Table, dict[int, int]]:
    """``(key, iri, curie, label)`` by sorted IRI (label: the first ``rdfs:label`` in text order, else the
    IRI fragment), and storid -> key."""
    prop_sids = sorted(prop_ids, key=lambda x: t.iri_of[x])
    pkey_of = {x: PROPERTY_KEY_BASE + i for i, x in enumerate(prop_sids)}
    plabel = {}
    for r in sorted((r for r in label_rows if r[0] in pkey_of), key=lambda r: str(r[2])):
        plabel.setdefault(r[0], str(r[2]))
    properties = pa.table(
        {
            "key": pa.array([pkey_of[x] for x in prop_sids], pa.int64()),
            "iri": pa.array([t.iri_of[x] for x in prop_sids], pa.string()),
            "curie": pa.array([curie(t.iri_of[x]) for x in prop_sids], pa.string()),
            "label": pa.array([plabel.get(x) or fragment(t.iri_of[x]) for x in prop_sids], pa.string()),
        }
    )
    return properties, pkey_of


def _axiom_edges(t: _Triples, class_ids: set[int], deprecated: set[int], counts: Counter) -> _Edges:
    """The ``subClassOf`` and ``equivalentClass`` axioms of live classes, walked into edges."""
    live = {x for x in class_ids if x not in deprecated}
    edges = _Edges(t.s, t.p, t.o, t.sid, live, counts)
    eq = (t.p == t.sid["equivalentClass"]) & (t.s > 0)
    for axiom, mask in (("subClassOf", t.sub), ("equivalentClass", eq)):
        for cls, e in zip(t.s[mask].tolist(), t.o[mask].tolist(), strict=True):
            if cls not in live:
                counts[f"axioms_of_{'deprecated' if cls in deprecated else 'non_class'}_dropped"] += 1
            elif axiom == "equivalentClass" and e > 0:
                counts["named_equivalences_skipped"] += 1
            elif e not in t.nonclass:
                edges.walk(cls, e, axiom)
    return edges


class _Edges:
    """Walks class expressions (blank nodes) and collects is-a and attribute edges."""

    def __init__(self, s, p, o, sid, live, counts) -> None:
        bn = s < 0

        def m(name):
            k = bn & (p == sid[name])
            return dict(zip(s[k].tolist(), o[k].tolist(), strict=True))

        self.onprop, self.some, self.inter = m("onProperty"), m("someValuesFrom"), m("intersectionOf")
        self.first, self.rest, self.nil = m("first"), m("rest"), sid["nil"]
        self.other = {}
        for name in UNSUPPORTED:
            for x in s[bn & (p == sid[name])].tolist():
                self.other[x] = name
        self.live, self.counts = live, counts
        self.isa: set[tuple[int, int, str]] = set()
        self.attr: set[tuple[int, int, int, str]] = set()
        self.groups: dict[int, list[tuple[int, frozenset, str]]] = {}

    def members(self, head: int) -> list[int]:
        out, seen = [], set()
        while head in self.first and head not in seen:
            seen.add(head)
            out.append(self.first[head])
            head = self.rest.get(head, self.nil)
        return out

    def conjuncts(self, e: int) -> list[int]:
        return [x for m in self.members(self.inter[e]) for x in self.conjuncts(m)] if e in self.inter else [e]

    def target_ok(self, t: int) -> bool:
        if t in self.live:
            return True
        self.counts["edges_to_deprecated_or_unknown_dropped"] += 1
        return False

    def walk(self, c: int, e: int, axiom: str) -> None:
        for x in self.conjuncts(e):
            if x > 0:
                if self.target_ok(x):
                    self.isa.add((c, x, axiom))
            elif x in self.some and x in self.onprop:
                v = self.some[x]
                if v > 0:
                    if self.target_ok(v):
                        self.attr.add((c, self.onprop[x], v, axiom))
                elif v in self.inter or v in self.some:
                    self.group(c, self.onprop[x], v, axiom)
                else:
                    self.counts["unsupported_" + self.other.get(v, "expression")] += 1
            else:
                self.counts["unsupported_" + self.other.get(x, "expression")] += 1

    def group(self, c: int, gprop: int, v: int, axiom: str) -> None:
        pairs = []
        for x in self.conjuncts(v):
            if x < 0 and x in self.some and x in self.onprop and self.some[x] > 0:
                if self.target_ok(self.some[x]):
                    pairs.append((self.onprop[x], self.some[x]))
            else:
                self.counts["unsupported_in_role_group"] += 1
        if pairs:
            self.groups.setdefault(c, []).append((gprop, frozenset(pairs), axiom))

    def table(self, key_of: dict, pkey_of: dict) -> pa.Table:
        rows = [(key_of[c], IS_A_KEY, key_of[t], 0, None, ax) for c, t, ax in self.isa]
        rows += [(key_of[c], pkey_of[r], key_of[t], 0, None, ax) for c, r, t, ax in self.attr]
        for c, gs in self.groups.items():
            uniq = {}
            for gp, pairs, ax in gs:
                content = tuple(sorted((pkey_of[r], key_of[t]) for r, t in pairs))
                uniq.setdefault((pkey_of[gp], content), ax)
            for n, ((gp, content), ax) in enumerate(sorted(uniq.items()), 1):
                rows += [(key_of[c], r, t, n, gp, ax) for r, t in content]
        self.counts["role_groups"] = sum(len({(g[0], g[1]) for g in gs}) for gs in self.groups.values())
        rows.sort(key=lambda r: (r[0], r[1], r[3], r[2], r[5]))
        cols = list(zip(*rows, strict=True)) if rows else [()] * 6
        t = pa.table(
            {
                "source_key": pa.array(cols[0], pa.int64()),
                "relation_key": pa.array(cols[1], pa.int64()),
                "target_key": pa.array(cols[2], pa.int64()),
                "role_group": pa.array(cols[3], pa.int32()),
                "group_property_key": pa.array(cols[4], pa.int64()),
                "axiom": pa.array(cols[5], pa.string()),
            }
        )
        # the same edge from subClassOf and equivalentClass stays once (subClassOf first)
        t = t.group_by(
            ["source_key", "relation_key", "target_key", "role_group"], use_threads=False
        ).aggregate([("group_property_key", "first"), ("axiom", "min")])
        t = t.rename_columns(
            ["source_key", "relation_key", "target_key", "role_group", "group_property_key", "axiom"]
        )
        self.counts["is_a_edges"] = sum(1 for r in t["relation_key"].to_pylist() if r == IS_A_KEY)
        self.counts["attribute_edges"] = t.num_rows - self.counts["is_a_edges"]
        return t.sort_by(
            [
                ("source_key", "ascending"),
                ("relation_key", "ascending"),
                ("role_group", "ascending"),
                ("target_key", "ascending"),
            ]
        )


def _annotations(
    g, c: int, t: _Triples, props: list[str], key_of: dict, language: str | None, counts: Counter
) -> pa.Table:
    """``(key, property, value, language, iri_value)`` for every annotation on a class (see
    :func:`read_owl`): every literal value, and the IRI values of ``props`` and of the declared annotation
    properties."""
    iri_of = t.iri_of
    rows = []
    for s, p, o, d in g.execute("SELECT s, p, o, d FROM datas WHERE c = ?", (c,)).fetchall():
        if s not in key_of:
            continue
        lang = d[1:] if isinstance(d, str) and d.startswith("@") else None
        if (
            language is not None
            and lang is not None
            and lang != language
            and not lang.startswith(language + "-")
        ):
            counts["annotations_other_language_dropped"] += 1
            continue
        rows.append((key_of[s], iri_of[p], str(o), lang, False))
    declared = (t.p == t.sid["type"]) & (t.o == t.sid["AnnotationProperty"]) & (t.s > 0)
    iri_props = {t.res[x] for x in props if x in t.res} | set(t.s[declared].tolist())
    if iri_props:
        q = "SELECT s, p, o FROM objs WHERE c = ? AND o > 0 AND p IN ({})".format(
            ",".join("?" * len(iri_props))
        )
        rows += [
            (key_of[s], iri_of[p], iri_of[o], None, True)
            for s, p, o in g.execute(q, (c, *sorted(iri_props))).fetchall()
            if s in key_of
        ]
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[3] or ""))
    cols = list(zip(*rows, strict=True)) if rows else [()] * 5
    return pa.table(
        {
            "key": pa.array(cols[0], pa.int64()),
            "property": pa.array(cols[1], pa.string()),
            "value": pa.array(cols[2], pa.string()),
            "language": pa.array(cols[3], pa.string()),
            "iri_value": pa.array(cols[4], pa.bool_()),
        }
    )
