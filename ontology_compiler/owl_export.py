"""``export_owl``: a compiled program -> an OWL ontology (RDF/XML, via owlready2), e.g. for Protégé.

What is written:

- the ontology concepts (SNOMED CT concepts of an RF2 program as ``http://snomed.info/id/<SCTID>``; the
  original class IRIs of an OWL program) as classes with ``rdfs:label`` (preferred term / label) and
  ``skos:altLabel`` synonyms (OWL programs keep their original synonym properties);
- the is-a hierarchy as ``subClassOf`` between named classes, and the attribute relationships as
  ``subClassOf property some Class`` (role group n > 0: ``subClassOf G some (P1 some A and P2 some B)``
  with ``G`` = SNOMED's Role group 609096000, or the OWL source's group property);
- the object properties with their labels;
- for an OWL program, every other annotation its classes had (``graph/owl_labels``: ``oboInOwl:hasDbXref``,
  comments, definitions, ..., literals with their language tags, IRI values as IRIs), and the source's
  ontology IRI, version IRI and ``owl:versionInfo`` (an RF2 program's ontology is ``<base>``);
- every token (ICD code or OWL code; special tokens are left out) as a class
  ``<base>token/<VOCABULARY>/<code>`` under ``<base>token/<VOCABULARY>`` under ``<base>Token``, with
  ``rdfs:label`` = title and the annotations ``hrrbert:code`` (dotted), ``hrrbert:vocabulary``,
  ``hrrbert:conceptId`` (embedding row), ``hrrbert:mappingSource``, ``hrrbert:mappingKind``.
- the mapping as the annotation ``hrrbert:mappedTo`` (one value per mapped concept's class), not as
  ``subClassOf``: a one-to-many or conditional map lists alternatives, which ``subClassOf`` would read as
  a conjunction, and annotations leave reasoning over the ontology untouched.

``scope="program"`` (default) writes the concepts the program uses (mapped concepts and attribute
targets) and all their is-a ancestors; ``scope="all"`` every concept in the program's graph tables.
"""

from __future__ import annotations

import logging
import re
import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import rf2_schema as S
from .artifact import clean_leftovers, leftover_name, normal_permissions, publish_file
from .errors import OutputExistsError, ProgramFormatError
from .extras import require
from .program import verify_program

log = logging.getLogger(__name__)

SNOMED_BASE = "http://snomed.info/id/"
ROLE_GROUP_SCTID = 609096000
SCHEMA = "https://hrrbert.invalid/schema#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
TOKEN_ANNOTATIONS = ("code", "vocabulary", "conceptId", "mappingSource", "mappingKind", "mappedTo")


@dataclass
class Source:
    """The ontology side of a program, keyed by int64 (SCTID or OWL key)."""

    iri: dict[int, str]
    label: dict[int, str]
    synonyms: dict[int, list[tuple[str, str]]]  # key -> [(annotation property IRI, value)]
    isa: np.ndarray  # (E, 2) child, parent
    attrs: list[tuple[int, int, int, int, int | None]]  # source, property, target, group, group property
    props: dict[int, tuple[str, str]]  # key -> (IRI, label)
    # key -> [(annotation property IRI, value, language or None, value is an IRI)]: the class's other
    # annotations as read (an OWL program's, e.g. oboInOwl:hasDbXref); none for an RF2 program
    annotations: dict[int, list[tuple[str, str, str | None, bool]]] = field(default_factory=dict)


@dataclass
class ExportResult:
    path: Path
    counts: dict = field(default_factory=dict)


def export_owl(
    program: str | Path,
    out: str | Path,
    *,
    force: bool = False,
    scope: str = "program",
    base_iri: str | None = None,
) -> ExportResult:
    """Write the program folder ``program`` as an RDF/XML OWL ontology to ``out`` (temp file + rename).

    Raises:
        OutputExistsError: ``out`` exists and ``force`` is False.
        ProgramFormatError: ``program`` is not an intact format-1 program.
    """
    program, out = Path(program), Path(out)
    if scope not in ("program", "all"):
        raise ValueError(f"scope must be 'program' or 'all', got {scope!r}")
    if out.parent.is_dir():
        clean_leftovers(out.parent)  # the temporary files of killed exports
    if out.exists() and not force:
        raise OutputExistsError(f"{out} exists; it is not overwritten without --force")
    manifest = verify_program(program)
    pid = manifest["program_id"]
    base = base_iri or f"https://hrrbert.invalid/program/{pid}/"
    owl_source = (program / "graph" / "owl_classes.parquet").is_file()
    src = _owl_source(program) if owl_source else _rf2_source(program)
    concepts = pq.read_table(program / "concepts.parquet")
    concepts = concepts.filter(pc.not_equal(concepts["vocabulary"], "SPECIAL"))
    atoms = pq.read_table(program / "atoms.parquet")
    if scope == "all":
        keep = set(src.iri)
    else:
        seeds = set(pc.list_flatten(concepts["snomed_ids"]).to_pylist())
        seeds |= set(atoms.filter(pc.equal(atoms["kind"], "concept"))["sctid"].to_pylist())
        keep = _ancestors(seeds & set(src.iri), src.isa)
    counts = _build_and_save(src, keep, concepts, manifest, base, out, owl_source, force)
    log.info("wrote %s (%s)", out, counts)
    return ExportResult(out, counts)


def _rf2_source(program: Path) -> Source:
    g = program / "graph"
    c = pq.read_table(g / "snomed_concepts.parquet", columns=["id", "fsn", "preferred_term"])
    ids = c["id"].to_pylist()
    label = {
        k: p or f for k, p, f in zip(ids, c["preferred_term"].to_pylist(), c["fsn"].to_pylist(), strict=True)
    }
    d = pq.read_table(g / "snomed_descriptions.parquet", columns=["concept_id", "type", "term"])
    d = d.filter(pc.not_equal(d["type"], "definition"))
    syn: dict[int, list[tuple[str, str]]] = {}
    for k, term in sorted(set(zip(d["concept_id"].to_pylist(), d["term"].to_pylist(), strict=True))):
        if term != label.get(k):
            syn.setdefault(k, []).append((SKOS + "altLabel", term))
    r = pq.read_table(
        g / "snomed_relationships.parquet",
        columns=["source_id", "destination_id", "type_id", "relationship_group"],
    )
    isa_mask = pc.equal(r["type_id"], S.IS_A)
    isa = np.stack(
        [r.filter(isa_mask)["source_id"].to_numpy(), r.filter(isa_mask)["destination_id"].to_numpy()], 1
    )
    a = r.filter(pc.invert(isa_mask))
    attrs = [
        (s, t, d, grp, ROLE_GROUP_SCTID if grp else None)
        for s, t, d, grp in zip(
            a["source_id"].to_pylist(),
            a["type_id"].to_pylist(),
            a["destination_id"].to_pylist(),
            a["relationship_group"].to_pylist(),
            strict=True,
        )
    ]
    prop_ids = {x[1] for x in attrs} | {ROLE_GROUP_SCTID}
    props = {k: (SNOMED_BASE + str(k), label.get(k) or str(k)) for k in prop_ids}
    return Source({k: SNOMED_BASE + str(k) for k in ids}, label, syn, isa, attrs, props)


def _owl_source(program: Path) -> Source:
    g = program / "graph"
    c = pq.read_table(g / "owl_classes.parquet")
    c = c.filter(pc.invert(c["deprecated"]))
    keys = c["key"].to_pylist()
    iri = dict(zip(keys, c["iri"].to_pylist(), strict=True))
    label = dict(zip(keys, c["label"].to_pylist(), strict=True))
    all_labels = pq.read_table(g / "owl_labels.parquet")
    lab = all_labels.filter(pc.equal(all_labels["kind"], "synonym"))
    syn: dict[int, list[tuple[str, str]]] = {}
    for k, p, v in zip(
        lab["key"].to_pylist(), lab["property"].to_pylist(), lab["value"].to_pylist(), strict=True
    ):
        syn.setdefault(k, []).append((p, v))
    # the other annotations, and the code property's values (a code is an annotation of the source too)
    other = all_labels.filter(
        pc.is_in(all_labels["kind"], pa.array(["annotation", "annotation_iri", "code"]))
    )
    annotations: dict[int, list[tuple[str, str, str | None, bool]]] = {}
    for k, p, v, lang, kind in zip(
        *(other[c].to_pylist() for c in ("key", "property", "value", "language", "kind")), strict=True
    ):
        annotations.setdefault(k, []).append((p, v, lang, kind == "annotation_iri"))
    e = pq.read_table(g / "owl_edges.parquet")
    isa_mask = pc.equal(e["relation_key"], S.IS_A)
    i = e.filter(isa_mask)
    isa = np.stack([i["source_key"].to_numpy(), i["target_key"].to_numpy()], 1)
    a = e.filter(pc.invert(isa_mask))
    attrs = list(
        zip(
            a["source_key"].to_pylist(),
            a["relation_key"].to_pylist(),
            a["target_key"].to_pylist(),
            a["role_group"].to_pylist(),
            a["group_property_key"].to_pylist(),
            strict=True,
        )
    )
    p = pq.read_table(g / "owl_properties.parquet")
    props = {
        k: (i_, lb)
        for k, i_, lb in zip(p["key"].to_pylist(), p["iri"].to_pylist(), p["label"].to_pylist(), strict=True)
    }
    return Source(iri, label, syn, isa, attrs, props, annotations)


def _ancestors(seeds: set[int], isa: np.ndarray) -> set[int]:
    """``seeds`` and every is-a ancestor (vectorised breadth-first rounds)."""
    keep = np.array(sorted(seeds), dtype=np.int64)
    frontier = keep
    while len(frontier):
        parents = np.unique(isa[np.isin(isa[:, 0], frontier), 1]) if len(isa) else np.zeros(0, np.int64)
        frontier = np.setdiff1d(parents, keep)
        keep = np.union1d(keep, frontier)
    return set(keep.tolist())


def _parents(keep: set[int], isa: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for child, parent in sorted(set(map(tuple, isa.tolist()))):
        if child in keep and parent in keep:
            out.setdefault(child, []).append(parent)
    return out


def _topological(keep: set[int], parents: dict[int, list[int]]) -> list[int]:
    """``keep`` ordered so that every class comes after its parents (ties by key)."""
    children: dict[int, list[int]] = {}
    waiting = {k: len(parents.get(k, ())) for k in keep}
    for k, ps in parents.items():
        for p in ps:
            children.setdefault(p, []).append(k)
    ready = sorted(k for k, n in waiting.items() if n == 0)
    order = []
    while ready:
        nxt = []
        for k in ready:
            order.append(k)
            for ch in children.get(k, ()):
                waiting[ch] -= 1
                if waiting[ch] == 0:
                    nxt.append(ch)
        ready = sorted(nxt)
    if len(order) != len(keep):
        raise ProgramFormatError(f"is-a cycle among {len(keep) - len(order)} concepts; cannot export")
    return order


def _split(iri: str) -> tuple[str, str]:
    """Namespace and local name of an IRI (after the last ``#`` or ``/``)."""
    m = re.match(r"^(.*[#/])([^#/]+)$", iri)
    if not m:
        raise ProgramFormatError(f"cannot split IRI {iri!r} into namespace and name")
    return m.group(1), m.group(2)


def _safe(code: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", code)


def _build_and_save(
    src: Source, keep: set[int], concepts, manifest: dict, base: str, out: Path, owl_src: bool, force: bool
) -> dict:
    owl = require("owlready2")

    counts: Counter = Counter()
    world = owl.World()
    release = manifest.get("release") or {}
    # an OWL program keeps its source's ontology IRI (and version IRI); the tokens stay under ``base``
    onto = world.get_ontology((owl_src and release.get("ontology_iri")) or base)

    def new(iri: str, parents: tuple, kind=owl.Thing):
        ns, local = _split(iri)
        with onto.get_namespace(ns):
            return types.new_class(local, parents or (kind,))

    try:
        with onto:
            onto.metadata.comment = [
                f"hrrbert program {manifest['program_id']} (format {manifest['format_version']}), "
                "compiled from "
                f"{manifest['release'].get('name')}; exported by hrrbert export-owl"
            ]
            ann = {n: new(SCHEMA + n, (), owl.AnnotationProperty) for n in TOKEN_ANNOTATIONS}
            if owl_src and release.get("version_iri"):
                vi = "http://www.w3.org/2002/07/owl#versionIRI"
                onto._add_obj_triple_spo(
                    onto.storid, world._abbreviate(vi), world._abbreviate(release["version_iri"])
                )
            if owl_src and release.get("version_info"):
                onto.metadata.versionInfo = [release["version_info"]]

            def annotation_property(iri: str):
                return world[iri] or new(iri, (), owl.AnnotationProperty)  # rdfs:comment etc. are built in

            syn_props = {p: annotation_property(p) for k in keep for p, _ in src.synonyms.get(k, ())}
            other_props = {p: annotation_property(p) for k in keep for p, *_ in src.annotations.get(k, ())}
            props = _properties(src, keep, new, owl)
            counts["object_properties"] = len(props)
            log.info("export-owl: %d classes to build (%d object properties)", len(keep), len(props))
            cls = _classes(src, keep, new, syn_props, counts)
            _annotate(src, cls, other_props, onto, world, owl, counts)
            counts["ontology_classes"] = len(cls)
            log.info("export-owl: %d classes built; attribute restrictions next", len(cls))
            _restrictions(src, cls, props, counts)
            log.info("export-owl: %d restrictions; %d tokens next", counts["restrictions"], concepts.num_rows)
            _tokens(concepts, cls, ann, base, new, counts, owl)
        log.info("export-owl: saving RDF/XML to %s", out)
        _save(onto, out, force)
    finally:
        world.close()
    counts["source"] = "owl" if owl_src else "rf2"
    return dict(counts)


def _properties(src: Source, keep: set[int], new, owl) -> dict:
    """The object properties the kept classes use (attributes and role-group properties), labelled."""
    used = {x[1] for x in src.attrs if x[0] in keep} | {
        x[4] for x in src.attrs if x[0] in keep and x[4] is not None
    }
    props = {}
    for k in sorted(used):
        iri, lab = src.props[k]
        props[k] = new(iri, (), owl.ObjectProperty)
        props[k].label = [lab]
    return props


def _classes(src: Source, keep: set[int], new, syn_props: dict, counts: Counter) -> dict:
    """The kept classes, parents first (``new_class`` with its bases, no is_a edits), with labels and
    synonyms."""
    cls = {}
    parents = _parents(keep, src.isa)
    for k in _topological(keep, parents):
        c = cls[k] = new(src.iri[k], tuple(cls[p] for p in parents.get(k, ())))
        counts["is_a"] += len(parents.get(k, ()))
        if src.label.get(k):
            c.label = [src.label[k]]
            counts["labels"] += 1
        for p, v in src.synonyms.get(k, ()):
            syn_props[p][c].append(v)
            counts["synonyms"] += 1
    return cls


def _annotate(src: Source, cls: dict, props: dict, onto, world, owl, counts: Counter) -> None:
    """The classes' other annotations as read (literals with their language; IRI values as IRIs)."""
    for k, c in cls.items():
        for p, v, lang, is_iri in src.annotations.get(k, ()):
            if is_iri:
                onto._add_obj_triple_spo(c.storid, props[p].storid, world._abbreviate(v))
            else:
                props[p][c].append(owl.locstr(v, lang) if lang else v)
            counts["annotations"] += 1


def _save(onto, out: Path, force: bool) -> None:
    """Save as RDF/XML to a temporary file beside ``out`` (``.tmp-<name>-<pid>-…``, removed by a later
    export when its process is gone), then publish it: replacing ``out`` only with ``force``, refused
    when ``out`` appeared meanwhile (:func:`~ontology_compiler.artifact.publish_file`)."""
    tmp = out.parent / leftover_name("tmp", out.name)
    try:
        onto.save(file=str(tmp), format="rdfxml")
        normal_permissions(tmp)  # a normal file of the user's
        publish_file(tmp, out, replace=force)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _restrictions(src: Source, cls: dict, props: dict, counts: Counter) -> None:
    groups: dict[tuple[int, int, int | None], list] = {}
    for s, p, t, grp, gp in src.attrs:
        if s not in cls:
            continue
        if t not in cls:
            counts["restrictions_target_outside_scope_skipped"] += 1
            continue
        r = props[p].some(cls[t])
        if grp:
            groups.setdefault((s, grp, gp), []).append(r)
        else:
            cls[s].is_a.append(r)
            counts["restrictions"] += 1
    owl = require("owlready2")

    for (s, _grp, gp), rs in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        filler = rs[0] if len(rs) == 1 else owl.And(rs)
        cls[s].is_a.append(props[gp].some(filler))
        counts["role_groups"] += 1
        counts["restrictions"] += len(rs)


def _tokens(concepts, cls: dict, ann: dict, base: str, new, counts: Counter, owl) -> None:
    root = new(base + "Token", ())
    root.label = ["Token"]
    vocab_cls, seen = {}, set()
    for row in concepts.to_pylist():
        v = row["vocabulary"]
        if v not in vocab_cls:
            vocab_cls[v] = new(f"{base}token/{_safe(v)}", (root,))
            vocab_cls[v].label = [f"{v} tokens"]
        iri = f"{base}token/{_safe(v)}/{_safe(row['code'])}"
        if iri in seen:
            iri = f"{iri}_{row['concept_id']}"
        seen.add(iri)
        t = new(iri, (vocab_cls[v],))
        t.label = [row["title"] or row["code_dotted"]]
        ann["code"][t] = [row["code_dotted"]]
        ann["vocabulary"][t] = [v]
        ann["conceptId"][t] = [int(row["concept_id"])]
        ann["mappingSource"][t] = [row["mapping_source"]]
        ann["mappingKind"][t] = [row["mapping_kind"]]
        for k in row["snomed_ids"]:
            if k in cls:
                ann["mappedTo"][t].append(cls[k])
                counts["mapped_to"] += 1
        counts["tokens"] += 1
