"""``compile_owl``: an OWL ontology (RDF/XML, OWL/XML, N-Triples) -> content-addressed HRR program (format 1).

Classes become SNOMED-like concepts with synthetic int64 keys (``owl_read.CLASS_KEY_BASE`` + index by
sorted IRI), object properties become attribute relations (keys from ``PROPERTY_KEY_BASE``; is-a keeps
116680003), label and synonym annotation values become description words by the RF2 word rule.
Which classes become tokens (rows of ``concepts.parquet``):

- ``codes``: a file of class IRIs or CURIEs, one per line (``#`` comments); vocabulary ``OWL``, code =
  the class CURIE. Entries that match no live class are counted and listed in the manifest.
- ``code_property``: an annotation property (e.g. ``oboInOwl:hasDbXref``) whose values ``PREFIX:CODE``
  with a prefix in :data:`CODE_PREFIXES` select classes; the token is the code (vocabulary from the
  table, ICD codes dotless as MIMIC writes them) and maps to every class that names it. A versioned
  prefix (``SNOMEDCT_US_2025_09_01``) counts as its base (``SNOMEDCT_US``). Values that are ranges
  (``ICD10CM:I00-I02``) or not a code of their vocabulary's shape are skipped, counted and warned: a
  range names a block of the classification, not a code, and one class per range member would bind
  the block's codes to the broad class as well as to their own.
- neither: every live class is a token (vocabulary ``OWL``).

``icd_hierarchy`` (on by default) binds the ``ICD10CM`` and ``ICD9CM`` tokens to the classification nodes
above their codes, as for RF2 programs (:mod:`icd_hierarchy`); tokens of the other vocabularies (``OWL``,
WHO ``ICD10``, ``SNOMEDCT``) get none.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import icd
from .errors import HierarchyCycleError, InputFileError, MissingInputError
from .front import DEFAULT_OUT
from .graph import check_is_a_acyclic, word_edges
from .icd_hierarchy import hierarchy_inputs
from .icd_hierarchy import icd_hierarchy as build_icd_hierarchy
from .manifest import (
    CompileResult,
    input_entry,
    manifest_head,
    option_file_input,
    program_id,
    publish_program,
    stopwords_input,
    timed,
    up_to_date,
)
from .owl_read import IS_A_KEY, OwlGraph, expand, fragment, read_owl
from .program import build_tables, table_counts

log = logging.getLogger(__name__)

OWL_VOCABULARY = "OWL"
LABEL_PROPERTIES = ("rdfs:label", "skos:prefLabel")
SYNONYM_PROPERTIES = ("skos:altLabel", "oboInOwl:hasExactSynonym", "oboInOwl:hasRelatedSynonym")
# code-property value prefix (case-insensitive) -> token vocabulary
CODE_PREFIXES = {
    "ICD10CM": icd.ICD10CM, "ICD-10-CM": icd.ICD10CM, "ICD10-CM": icd.ICD10CM,
    "ICD-10": "ICD10", "ICD10": "ICD10", "ICD10WHO": "ICD10",
    "ICD9CM": icd.ICD9CM, "ICD-9-CM": icd.ICD9CM, "ICD9": icd.ICD9CM, "ICD-9": icd.ICD9CM,
    "SNOMEDCT_US": "SNOMEDCT", "SNOMEDCT": "SNOMEDCT", "SNOMED": "SNOMEDCT", "SCTID": "SNOMEDCT",
}  # fmt: skip
ICD_RULES = {icd.ICD10CM: icd.ICD10CM, "ICD10": icd.ICD10CM, icd.ICD9CM: icd.ICD9CM}  # dot + chapter rules
# the shape of a (dotless, upper-case) code per vocabulary; other values are skipped and counted
CODE_SHAPES = {
    icd.ICD10CM: re.compile(r"^[A-Z][0-9][0-9A-Z][0-9A-Z]{0,4}$"),
    "ICD10": re.compile(r"^[A-Z][0-9][0-9A-Z][0-9A-Z]{0,4}$"),
    icd.ICD9CM: re.compile(r"^([0-9]{3}|V[0-9]{2}|E[0-9]{3})[0-9]{0,2}$"),
    "SNOMEDCT": re.compile(r"^[0-9]{6,18}$"),
}
VERSIONED_PREFIX_RE = re.compile(r"^(.+?)[_-](\d{4})[_-]?(\d{2})[_-]?(\d{2})$")  # SNOMEDCT_US_2025_09_01
RANGE_DASHES = ("-", "\u2013")
# enters the program id of code-property programs: what the code values' rules are
CODE_VALUE_RULES = "ranges and malformed codes skipped; PREFIX_<date> is PREFIX"
MAX_LISTED = 1000
MAX_EXAMPLES = 5


def compile_owl(
    path: str | Path,
    *,
    codes: str | Path | None = None,
    out: str | Path = DEFAULT_OUT,
    name: str | None = None,
    label_properties: tuple[str, ...] = LABEL_PROPERTIES,
    synonym_properties: tuple[str, ...] = SYNONYM_PROPERTIES,
    stopwords: str | Path | None = None,
    code_property: str | None = None,
    code_prefixes: tuple[str, ...] | None = None,
    language: str | None = "en",
    icd_hierarchy: bool = True,
) -> CompileResult:
    """Compile the OWL file ``path`` into ``out/<name>/<program_id>/`` (``name``: the file's stem).

    ``codes`` (a file of IRIs/CURIEs) or ``code_property`` (CURIE or IRI; ``code_prefixes`` limits the
    accepted prefixes, default all of :data:`CODE_PREFIXES`, a version suffix allowed) choose the
    tokens; with neither, every class is one. ``label_properties``/``synonym_properties`` are CURIEs
    or IRIs. ``language`` keeps literals without a tag or tagged with it (``None``: all).
    ``icd_hierarchy``: the ICD-10-CM / ICD-9-CM nodes above the ICD tokens' codes (False: none). Identical
    inputs and options give the same ``program_id``; recompiling is then a no-op.

    Raises:
        MissingInputError: ``path`` or ``codes`` does not exist.
        InputFileError: the parser of the file's format rejects it (its message, line and column), or
            the file has no classes.
        ValueError: both ``codes`` and ``code_property``; ``code_prefixes`` without ``code_property``;
            an unknown code prefix.
        HierarchyCycleError: ``subClassOf`` has a cycle (``members``: the class CURIEs).
    """
    t_start = time.perf_counter()
    path = Path(path)
    _check_arguments(path, codes, code_property, code_prefixes)
    label_iris = [expand(x) for x in label_properties]
    synonym_iris = [expand(x) for x in synonym_properties]
    code_iri = expand(code_property) if code_property is not None else None
    prefixes = _prefixes(code_prefixes)
    name = name or path.stem
    out_dir = Path(out) / name
    # ---- inputs and options -> program_id (before parsing, so a recompile is a cheap no-op)
    stop_words, stop_input = stopwords_input(stopwords)
    inputs = [input_entry("owl", path), stop_input]
    inputs += [option_file_input("codes", codes)] if codes is not None else []
    inputs += hierarchy_inputs() if icd_hierarchy else []
    mode = "codes_file" if codes is not None else "code_property" if code_iri else "all_classes"
    options = {
        "format": "owl",
        "tokens": mode,
        "label_properties": label_iris,
        "synonym_properties": synonym_iris,
        "code_property": code_iri,
        "code_prefixes": sorted(prefixes) if code_iri else None,
        "language": language,
        "icd_hierarchy": bool(icd_hierarchy),
        "annotations": "all",  # every class annotation kept in graph/owl_labels (export-owl writes it back)
    }
    if code_iri:
        options["code_value_rules"] = CODE_VALUE_RULES
    pid = program_id(inputs, options)
    if (done := up_to_date(out_dir, pid)) is not None:
        return done
    timings = {"hash_inputs": round(time.perf_counter() - t_start, 3)}
    # ---- read, then choose the tokens and build the graph of their classes
    og, live = _read(path, [*label_iris, *synonym_iris, *([code_iri] if code_iri else [])], language, timings)
    with timed(timings, "graph"):
        counts = Counter(og.counts)
        terms, labels = _terms(og, live, label_iris, synonym_iris, counts)
        notes: list[str] = []
        requested = prefixes if code_prefixes is not None else None
        tokens, token_class, unmatched = _choose_tokens(
            mode, og, live, labels, codes, code_iri, prefixes, counts, requested, notes
        )
        rel_edges, wedges, concept_labels = _graph(og, token_class, terms, labels, stop_words)
    hierarchy = None
    if icd_hierarchy:
        with timed(timings, "icd_hierarchy"):
            hierarchy = build_icd_hierarchy(tokens)
    with timed(timings, "program_tables"):
        icd_edges = hierarchy.edges if hierarchy is not None else None
        tables = build_tables(tokens, rel_edges, wedges, token_class, concept_labels, icd_edges=icd_edges)
        tables["atoms"] = _curie_keys(tables["atoms"], og.classes)
        graph_tables = _graph_tables(og, labels, token_class, label_iris, synonym_iris, code_iri)
    manifest = {
        **manifest_head(pid),
        "release": _release_entry(og, name),
        "inputs": inputs,
        "options": options,
        "counts": _counts(counts, tables, hierarchy.counts if hierarchy is not None else None),
        "coverage": _coverage(tokens, token_class, live, unmatched, counts),
        "codes_unmatched": unmatched[:MAX_LISTED],
        "findings": notes
        + [f"{k}: {v}" for k, v in sorted(counts.items()) if k.startswith(("unsupported", "named_eq"))],
        "timings": timings,
    }
    return publish_program(out_dir, pid, tables, graph_tables, manifest, t_start)


def _check_arguments(path: Path, codes, code_property: str | None, code_prefixes) -> None:
    """The argument rules of :func:`compile_owl` (the file exists; one way of choosing tokens)."""
    if not path.is_file():
        raise MissingInputError(f"{path}: OWL file not found")
    if codes is not None and code_property is not None:
        raise ValueError("give either codes (a file of classes) or code_property, not both")
    if code_prefixes and code_property is None:
        raise ValueError("code_prefixes narrow code_property's values; give code_property too")


def _read(
    path: Path, properties: list[str], language: str | None, timings: dict[str, float]
) -> tuple[OwlGraph, pa.Table]:
    """The ontology read (annotation ``properties`` kept), its live classes; is-a checked for cycles."""
    with timed(timings, "read_owl"):
        og = read_owl(path, list(dict.fromkeys(properties)), language)
    live = og.classes.filter(pc.invert(og.classes["deprecated"]))
    if live.num_rows == 0:
        raise InputFileError(
            path,
            f"no OWL classes found (parsed as {og.format}, {og.triples} triples)",
            expected="owl:Class declarations or rdfs:subClassOf axioms",
        )
    with timed(timings, "is_a_check"):
        _check_cycles(og)
    return og, live


def _choose_tokens(
    mode: str,
    og: OwlGraph,
    live: pa.Table,
    labels: pa.Table,
    codes: str | Path | None,
    code_iri: str | None,
    prefixes: dict[str, str],
    counts: Counter,
    requested: dict[str, str] | None = None,
    notes: list[str] | None = None,
) -> tuple[pa.Table, pa.Table, list[dict]]:
    """``(tokens, token_class, unmatched)`` by ``mode``: the codes file, the code property, every live class.
    ``requested``: the prefixes ``--code-prefix`` gave (None: every known one); ``notes`` collects
    findings."""
    unmatched: list[dict] = []
    if mode == "codes_file":
        tokens, token_class, unmatched = _tokens_from_file(Path(codes), live, labels, counts)
    elif mode == "code_property":
        tokens, token_class = _tokens_from_property(
            og, code_iri, prefixes, labels, counts, requested, notes if notes is not None else []
        )
    else:
        tokens, token_class = _tokens_all(live, labels)
    if tokens.num_rows == 0:
        log.warning("%s: no class became a token (%s); the program holds only special tokens", og.path, mode)
    return tokens, token_class, unmatched


def _graph(
    og: OwlGraph, token_class: pa.Table, terms: pa.Table, labels: pa.Table, stop_words: list[str]
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """``(relationship edges, word edges, concept labels)`` of the token classes, as :func:`build_tables`
    takes them (class keys in place of SCTIDs)."""
    keys = pc.unique(token_class["sctid"])
    e = og.edges.filter(pc.is_in(og.edges["source_key"], value_set=keys))
    rel_edges = pa.table(
        {
            "sctid": e["source_key"],
            "relation_key": e["relation_key"],
            "atom_sctid": e["target_key"],
            "role_group": e["role_group"],
            "provenance": e["axiom"],
        }
    )
    wedges = word_edges(terms.filter(pc.is_in(terms["sctid"], value_set=keys)), stop_words)
    concept_labels = pa.concat_tables(
        [
            pa.table(
                {
                    "sctid": labels["key"],
                    "fsn": pa.nulls(labels.num_rows, pa.string()),
                    "preferred": labels["label"],
                }
            ),
            pa.table(
                {
                    "sctid": og.properties["key"],
                    "fsn": pa.nulls(og.properties.num_rows, pa.string()),
                    "preferred": og.properties["label"],
                }
            ),
            pa.table(
                {
                    "sctid": pa.array([IS_A_KEY], pa.int64()),
                    "fsn": pa.nulls(1, pa.string()),
                    "preferred": pa.array(["is a"]),
                }
            ),
        ]
    )
    return rel_edges, wedges, concept_labels


def _release_entry(og: OwlGraph, name: str) -> dict:
    """The manifest's ``release`` of an OWL program: the ontology's header."""
    return {
        "name": name,
        "type": "OWL",
        "format": og.format,
        "ontology_iri": og.ontology_iri,
        "version_iri": og.version_iri,
        "version_info": og.version_info,
        "imports_not_followed": og.imports,
        "date": None,
        "as_of": None,
        "namespaces": [],
    }


def base_prefix(prefix: str) -> str:
    """A code prefix without its version, upper-cased: ``SNOMEDCT_US_2025_09_01`` -> ``SNOMEDCT_US``."""
    p = prefix.strip().upper()
    m = VERSIONED_PREFIX_RE.match(p)
    return m.group(1) if m else p


def _prefixes(code_prefixes: tuple[str, ...] | None) -> dict[str, str]:
    if code_prefixes is None:
        return dict(CODE_PREFIXES)
    out = {}
    for p in code_prefixes:
        base = base_prefix(p)
        if base not in CODE_PREFIXES:
            raise ValueError(
                f"code prefix {p!r} is not one of {', '.join(CODE_PREFIXES)} (a version suffix such as "
                "_2025_09_01 is allowed)"
            )
        out[base] = CODE_PREFIXES[base]
    return out


def _check_cycles(og: OwlGraph) -> None:
    e = og.edges
    rels = pa.table(
        {"typeId": e["relation_key"], "sourceId": e["source_key"], "destinationId": e["target_key"]}
    )
    try:
        check_is_a_acyclic(rels)
    except HierarchyCycleError as err:
        curie_of = dict(zip(og.classes["key"].to_pylist(), og.classes["curie"].to_pylist(), strict=True))
        raise HierarchyCycleError([curie_of.get(m, m) for m in err.members]) from err


def _terms(
    og: OwlGraph, live: pa.Table, label_iris, synonym_iris, counts: Counter
) -> tuple[pa.Table, pa.Table]:
    """Description terms ``(sctid, type, term)`` and one label per live class ``(key, label, has_label)``."""
    a = og.annotations.filter(pc.is_in(og.annotations["key"], value_set=live["key"]))
    is_label = pc.is_in(a["property"], value_set=pa.array(label_iris, pa.string()))
    is_syn = pc.is_in(a["property"], value_set=pa.array(synonym_iris, pa.string()))
    lab, syn = a.filter(is_label), a.filter(pc.and_(is_syn, pc.invert(is_label)))
    # preferred label: label properties in the given order, untagged/matching language before others
    rank = {p: i for i, p in enumerate(label_iris)}
    lab = lab.append_column("_p", pa.array([rank[p] for p in lab["property"].to_pylist()], pa.int32()))
    lab = lab.append_column("_l", pc.is_valid(lab["language"]))
    first = (
        lab.sort_by([("key", "ascending"), ("_p", "ascending"), ("_l", "ascending"), ("value", "ascending")])
        .group_by("key", use_threads=False)
        .aggregate([("value", "first")])
        .rename_columns(["key", "label"])
    )
    labels = live.select(["key", "iri"]).join(first, keys="key", join_type="left outer").sort_by("key")
    has_label = pc.is_valid(labels["label"])
    missing = labels.filter(pc.invert(has_label))
    counts["classes_without_label"] = missing.num_rows
    counts["labels"], counts["synonyms"] = lab.num_rows, syn.num_rows
    if missing.num_rows:
        log.warning(
            "%d classes have no label; their IRI fragments are used as words (e.g. %s)",
            missing.num_rows,
            missing["iri"][0].as_py(),
        )
    frag = pa.array([fragment(i) for i in missing["iri"].to_pylist()], pa.string())
    labels = pa.table(
        {
            "key": labels["key"],
            "label": pc.coalesce(
                labels["label"], pa.array([fragment(i) for i in labels["iri"].to_pylist()], pa.string())
            ),
            "has_label": has_label,
        }
    )
    terms = pa.concat_tables(
        [
            pa.table(
                {
                    "sctid": lab["key"],
                    "type": pa.array(["label"] * lab.num_rows, pa.string()),
                    "term": lab["value"],
                }
            ),
            pa.table(
                {
                    "sctid": syn["key"],
                    "type": pa.array(["synonym"] * syn.num_rows, pa.string()),
                    "term": syn["value"],
                }
            ),
            pa.table(
                {
                    "sctid": missing["key"],
                    "type": pa.array(["iri"] * missing.num_rows, pa.string()),
                    "term": frag,
                }
            ),
        ]
    )
    return terms, labels


def _token_table(vocab, code, dotted, key_lists, labels: pa.Table, source: str) -> tuple[pa.Table, pa.Table]:
    """Tokens (one per code) and the (vocabulary, code, sctid) table of their classes."""
    label_of = dict(zip(labels["key"].to_pylist(), labels["label"].to_pylist(), strict=True))
    n = len(code)
    chapter = np.zeros(n, dtype=np.int8)
    codes = pa.array(code, pa.string())
    vocabs = pa.array(vocab, pa.string())
    for v, rule in ICD_RULES.items():
        sel = pc.equal(vocabs, v).to_numpy(zero_copy_only=False)
        if sel.any():
            chapter[sel] = icd.chapters(codes.filter(pa.array(sel)), rule).fill_null(0).to_numpy()
    tokens = pa.table(
        {
            "vocabulary": vocabs,
            "code": codes,
            "code_dotted": pa.array(dotted, pa.string()),
            "title": pa.array([label_of.get(k[0]) for k in key_lists], pa.string()),
            "snomed_ids": pa.array(key_lists, pa.list_(pa.int64())),
            "mapping_source": pa.array([source] * n, pa.string()),
            "mapping_kind": pa.array(
                ["one_to_one" if len(k) == 1 else "one_to_many" for k in key_lists], pa.string()
            ),
            "chapter": pa.array(chapter, pa.int8(), mask=chapter == 0),
        }
    )
    lens = [len(k) for k in key_lists]
    token_class = pa.table(
        {
            "vocabulary": pa.array(np.repeat(np.asarray(vocab, dtype=object), lens).tolist(), pa.string()),
            "code": pa.array(np.repeat(np.asarray(code, dtype=object), lens).tolist(), pa.string()),
            "sctid": pa.array([x for k in key_lists for x in k], pa.int64()),
        }
    )
    return tokens, token_class


def _tokens_all(live: pa.Table, labels: pa.Table) -> tuple[pa.Table, pa.Table]:
    cur = live["curie"].to_pylist()
    return _token_table(
        [OWL_VOCABULARY] * len(cur), cur, cur, [[k] for k in live["key"].to_pylist()], labels, "all_classes"
    )


def _tokens_from_file(path: Path, live: pa.Table, labels: pa.Table, counts: Counter):
    """Tokens for the classes a codes file names; unmatched entries as ``{line, entry, reason}``."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputFileError(path, "codes file is not valid UTF-8", expected="UTF-8 text") from e
    by_name = dict(zip(live["iri"].to_pylist(), live["key"].to_pylist(), strict=True))
    by_name.update(zip(live["curie"].to_pylist(), live["key"].to_pylist(), strict=True))
    curie_of = dict(zip(live["key"].to_pylist(), live["curie"].to_pylist(), strict=True))
    chosen, unmatched = {}, []
    for lineno, line in enumerate(text.splitlines(), 1):
        entry = line.strip().strip("<>")
        if not entry or entry.startswith("#"):
            continue
        counts["codes_entries"] += 1
        key = by_name.get(entry)
        if key is None:
            unmatched.append(
                {"line": lineno, "entry": entry, "reason": "no live class with this IRI or CURIE"}
            )
        else:
            chosen.setdefault(key, lineno)
    counts["codes_unmatched"] = len(unmatched)
    if unmatched:
        log.warning(
            "%s: %d entries match no class (listed in the manifest), e.g. %r",
            path,
            len(unmatched),
            unmatched[0]["entry"],
        )
    keys = sorted(chosen)
    cur = [curie_of[k] for k in keys]
    tokens, token_class = _token_table(
        [OWL_VOCABULARY] * len(keys), cur, cur, [[k] for k in keys], labels, "codes_file"
    )
    return tokens, token_class, unmatched


def _tokens_from_property(
    og: OwlGraph,
    code_iri: str,
    prefixes: dict,
    labels: pa.Table,
    counts: Counter,
    requested: dict | None = None,
    notes: list[str] | None = None,
):
    """Tokens for the ``PREFIX:CODE`` values of ``code_iri``. Skipped, counted and warned: values of
    another prefix (``code_values_ignored``), ranges (``code_ranges_skipped``), codes not of their
    vocabulary's shape (``code_values_malformed``); a requested prefix that selects nothing is a
    warning naming the prefixes the property holds."""
    notes = [] if notes is None else notes
    a = og.annotations.filter(pc.equal(og.annotations["property"], code_iri))
    live_keys = set(labels["key"].to_pylist())
    curie_of = dict(zip(og.classes["key"].to_pylist(), og.classes["curie"].to_pylist(), strict=True))
    by_code: dict[tuple[str, str, str], set[int]] = {}
    found: Counter = Counter()  # prefix as written -> values
    used: Counter = Counter()  # base prefix -> values that became tokens
    skipped: dict[str, list[str]] = {"code_ranges_skipped": [], "code_values_malformed": []}
    for key, value in zip(a["key"].to_pylist(), a["value"].to_pylist(), strict=True):
        prefix, sep, code = value.strip().partition(":")
        found[prefix.strip() if sep else "(none)"] += 1
        base = base_prefix(prefix) if sep else ""
        vocab = prefixes.get(base) if sep else None
        if vocab is None or not code.strip():
            counts["code_values_ignored"] += 1
            counts[f"code_values_ignored_prefix:{prefix if sep else '(none)'}"] += 1
            continue
        if key not in live_keys:
            continue
        if base != prefix.strip().upper():
            counts["code_values_versioned_prefix"] += 1
        code = code.strip()
        dotless = icd.dotless_code(code) if vocab in ICD_RULES else code.strip().upper()
        problem = (
            "code_ranges_skipped"
            if any(d in code for d in RANGE_DASHES)
            else None
            if CODE_SHAPES[vocab].match(dotless)
            else "code_values_malformed"
        )
        if problem:
            counts[problem] += 1
            skipped[problem].append(f"{value.strip()} ({curie_of.get(key, key)})")
            continue
        dotted = icd.dotted_code(dotless, ICD_RULES[vocab]) if vocab in ICD_RULES else dotless
        by_code.setdefault((vocab, dotless, dotted), set()).add(key)
        counts["code_values_used"] += 1
        used[base] += 1
    _note_skipped(og, code_iri, skipped, counts, notes)
    _note_unselected(og, code_iri, prefixes, requested, found, used, notes)
    items = sorted(by_code.items())
    return _token_table(
        [k[0] for k, _ in items],
        [k[1] for k, _ in items],
        [k[2] for k, _ in items],
        [sorted(v) for _, v in items],
        labels,
        "code_property",
    )


def _note_skipped(
    og: OwlGraph, code_iri: str, skipped: dict[str, list[str]], counts: Counter, notes: list[str]
) -> None:
    what = {
        "code_ranges_skipped": "ICD ranges (a block of codes, not a code)",
        "code_values_malformed": "values that are not a code of their vocabulary",
    }
    for name, examples in skipped.items():
        if examples:
            text = f"{name}: {counts[name]} {what[name]} skipped, e.g. " + "; ".join(examples[:MAX_EXAMPLES])
            log.warning("%s: %s of %s", og.path, text, code_iri)
            notes.append(text)


def _note_unselected(
    og: OwlGraph,
    code_iri: str,
    prefixes: dict,
    requested: dict | None,
    found: Counter,
    used: Counter,
    notes: list[str],
) -> None:
    """Warn when the property holds no value, or a prefix that was asked for selects nothing."""
    if not found:
        text = f"code property {code_iri}: no class has a value of it"
        log.warning("%s: %s", og.path, text)
        notes.append(text)
        return
    seen = ", ".join(f"{p} ({n:,})" for p, n in found.most_common(12))
    if requested is None:
        texts = (
            []
            if used
            else [
                f"no value of {code_iri} has a known code prefix "
                f"({', '.join(CODE_PREFIXES)}); the prefixes found are: {seen}"
            ]
        )
    else:
        texts = [
            f"--code-prefix {p} selected no value of {code_iri}; the prefixes found are: {seen}"
            for p in sorted(requested)
            if used[p] == 0
        ]
    for text in texts:
        log.warning("%s: %s", og.path, text)
        notes.append(text)


def _curie_keys(atoms: pa.Table, classes: pa.Table) -> pa.Table:
    """Concept atoms keyed by class CURIE (``sctid`` keeps the synthetic key)."""
    idx = pc.index_in(atoms["sctid"], value_set=classes["key"])
    key = pc.if_else(pc.equal(atoms["kind"], "concept"), pc.take(classes["curie"], idx), atoms["key"])
    return atoms.set_column(atoms.column_names.index("key"), "key", key)


def _graph_tables(
    og: OwlGraph,
    labels: pa.Table,
    token_class: pa.Table,
    label_iris: list[str],
    synonym_iris: list[str],
    code_iri: str | None = None,
) -> dict[str, pa.Table]:
    c = og.classes.join(labels, keys="key", join_type="left outer").sort_by("key")
    c = c.append_column("token", pc.is_in(c["key"], value_set=pc.unique(token_class["sctid"])))
    a = og.annotations
    code_iris = [code_iri] if code_iri else []
    other = pc.if_else(a["iri_value"], "annotation_iri", "annotation")
    kind = pc.if_else(
        pc.is_in(a["property"], value_set=pa.array(label_iris, pa.string())),
        "label",
        pc.if_else(
            pc.is_in(a["property"], value_set=pa.array(synonym_iris, pa.string())),
            "synonym",
            pc.if_else(pc.is_in(a["property"], value_set=pa.array(code_iris, pa.string())), "code", other),
        ),
    )
    a = a.drop_columns(["iri_value"])
    code_map = token_class.sort_by(
        [("vocabulary", "ascending"), ("code", "ascending"), ("sctid", "ascending")]
    )
    return {
        "owl_classes": c.select(["key", "iri", "curie", "label", "has_label", "deprecated", "token"]),
        "owl_properties": og.properties,
        "owl_edges": og.edges,
        "owl_labels": a.append_column("kind", kind),
        "owl_code_map": code_map.rename_columns(["vocabulary", "code", "key"]),
    }


def _counts(counts: Counter, tables: dict[str, pa.Table], hierarchy: dict | None) -> dict:
    extra = {"icd_hierarchy": hierarchy} if hierarchy is not None else {}
    return {**{k: int(v) for k, v in sorted(counts.items())}, **extra, **table_counts(tables)}


def _coverage(
    tokens: pa.Table, token_class: pa.Table, live: pa.Table, unmatched: list, counts: Counter
) -> dict:
    v, n = np.unique(tokens["vocabulary"].to_numpy(zero_copy_only=False), return_counts=True)
    return {
        "codes": tokens.num_rows,
        "codes_by_vocabulary": {str(a): int(b) for a, b in zip(v, n, strict=True)},
        "classes": live.num_rows,
        "classes_as_tokens": len(pc.unique(token_class["sctid"])),
        "codes_entries": int(counts.get("codes_entries", 0)),
        "codes_unmatched": len(unmatched),
    }
