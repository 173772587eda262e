"""Load an RF2 release folder into its resolved, active state (one Arrow table per component kind).

Steps: find files by name; pick Snapshot, or Full resolved at ``as_of``; read every file of a kind
(International plus extensions) and merge; drop identical repeats of a row (same id and effectiveTime;
repeats that differ are an error); keep the latest row per id; keep active rows; drop, and count,
descriptions, relationships, language and map rows whose concept (or description) is inactive, and
separately those whose concept is not in the release at all. The relationship view keeps only its
characteristic type (inferred, or stated with ``stated``); other rows in the file are counted and dropped.
A ``languages`` refset that no Language file holds is an error.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import rf2_schema as S
from .errors import AsOfError, OptionError
from .memory import give_back
from .rf2_files import RF2File, choose_release_type, scan_release, select_files
from .rf2_read import ReadReport, read_rf2_file
from .rf2_schema import is_calendar_date
from .snapshot import (
    SOURCE_COLUMNS,
    active,
    all_distinct,
    concat,
    drop_duplicates,
    latest_per_id,
    resolve_at,
)

log = logging.getLogger(__name__)


# The columns a Release keeps of the big tables (all are read and checked; these are used afterwards).
KEPT = {
    "Description": ["id", "effectiveTime", "conceptId", "languageCode", "typeId", "term"],
    "Language": ["referencedComponentId", "refsetId", "acceptabilityId"],
    "Relationship": [
        "id", "effectiveTime", "moduleId", "sourceId", "destinationId", "relationshipGroup", "typeId",
        "characteristicTypeId",
    ],
}  # fmt: skip
_GRAPH_INPUTS = ("descriptions", "text_definitions", "language", "relationships", "concrete_values")


@dataclass(frozen=True)
class MappingInputs:
    """What the mapping step reads of a release: active map rows, active and known concept ids, active
    historical associations (as in :class:`Release`)."""

    maps: pa.Table
    live: pa.Array
    known: pa.Array
    associations: pa.Table


@dataclass
class Release:
    """The resolved active state of a release, plus what was read and counted on the way."""

    src: Path
    release_type: str  # Snapshot or Full
    as_of: int | None
    files: dict[str, list[RF2File]]
    concepts: pa.Table  # active concepts
    descriptions: pa.Table  # active descriptions of active concepts (columns: KEPT["Description"])
    text_definitions: pa.Table  # as descriptions
    relationships: pa.Table  # active relationships, source, destination and type active (KEPT)
    concrete_values: pa.Table
    language: pa.Table  # active rows of the chosen language refsets, on active descriptions (KEPT)
    maps: pa.Table  # active ExtendedMap rows (with _file, _line)
    associations: pa.Table  # active historical association rows
    inactive_concepts: pa.Table  # id of concepts present but inactive at the date
    known_concepts: pa.Array  # every concept id of the release at the date, active or not
    counts: Counter = field(default_factory=Counter)
    reports: list[ReadReport] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def drop_graph_inputs(self, *names: str) -> None:
        """Free the named tables (descriptions, text_definitions, language, relationships,
        concrete_values), replaced by empty tables of their schemas, once the graph and the ``graph/``
        tables are built from them."""
        for name in names:
            if name not in _GRAPH_INPUTS:
                raise ValueError(f"{name!r} is not one of {', '.join(_GRAPH_INPUTS)}")
            setattr(self, name, getattr(self, name).schema.empty_table())

    @property
    def release_date(self) -> str:
        return max(f.date for fs in self.files.values() for f in fs)

    @property
    def namespaces(self) -> list[str]:
        return sorted({f.namespace for f in self.files.get("Concept", [])})


def load_release(
    src: str | Path,
    *,
    as_of: str | int | None = None,
    release: str = "auto",
    languages: tuple[int, ...] = (S.US_ENGLISH,),
    stated: bool = False,
    strict: bool = False,
    packages: tuple[str, ...] = (),
    early: Callable[[MappingInputs], None] | None = None,
) -> Release:
    """Read and resolve a release folder. See the module docstring; ``packages`` as in
    :func:`rf2_files.select_files`. ``early`` is called with the :class:`MappingInputs` as soon as they are
    read (concepts, map and association refsets come first), before the descriptions, relationships and
    language refsets: the compiler maps the ICD codes on a thread meanwhile."""
    t0 = time.perf_counter()
    src = Path(src)
    as_of_int = parse_as_of(as_of)
    all_files = scan_release(src)
    rtype = choose_release_type(all_files, release, None if as_of_int is None else str(as_of_int))
    files = select_files(all_files, rtype, stated=stated, src=src, packages=packages)
    r = _Reader(files, as_of_int if rtype == "Full" else None, strict)
    concept_all = _all_concepts(r, as_of_int)
    concepts = active(concept_all)
    inactive_ids = pc.filter(concept_all["id"], pc.equal(concept_all["active"], pa.scalar(0, pa.int8())))
    live = concepts["id"].combine_chunks()
    known = concept_all["id"].combine_chunks()
    r.counts["concepts_active"] = concepts.num_rows
    r.counts["concepts_inactive"] = len(inactive_ids)
    maps = active(r.load("ExtendedMap"))  # rows on inactive concepts are resolved by the mapping step
    r.counts["map_rows_active"] = maps.num_rows
    r.counts["map_rows_on_inactive_concept"] = _n(
        pc.invert(pc.is_in(maps["referencedComponentId"], value_set=live))
    )
    assoc = r.load("Association")
    assoc = active(assoc) if assoc is not None else pa.table({})
    if early is not None:  # what the mapping needs is read: it may start while the rest is read
        early(MappingInputs(maps, live, known, assoc))
    desc = _of_live_concepts(
        _active_kept(r.load("Description"), "Description"), "conceptId", live, known, r.counts, "descriptions"
    )
    tdef = r.load("TextDefinition")
    if tdef is not None:
        tdef = _active_kept(tdef, "Description")
        tdef = _of_live_concepts(tdef, "conceptId", live, known, r.counts, "text_definitions")
    rel = _relationships(r, "StatedRelationship" if stated else "Relationship", live, known)
    cv = r.load("RelationshipConcreteValues")
    if cv is not None:
        cv = _of_live_concepts(active(cv), "sourceId", live, known, r.counts, "concrete_values")
    lang = _language(r, languages, [desc] + ([tdef] if tdef is not None else []))
    give_back()
    r.timings["load_release"] = round(time.perf_counter() - t0, 3)
    return Release(
        src=src,
        release_type=rtype,
        as_of=as_of_int,
        files=files,
        concepts=concepts,
        descriptions=desc,
        text_definitions=tdef if tdef is not None else desc.schema.empty_table(),
        relationships=rel,
        concrete_values=cv if cv is not None else pa.table({}),
        language=lang,
        maps=maps,
        associations=assoc,
        inactive_concepts=pa.table({"id": inactive_ids}),
        known_concepts=known,
        counts=r.counts,
        reports=r.reports,
        timings=r.timings,
    )


class _Reader:
    """Reads every file of a kind (International plus extensions) and merges them; keeps what it found."""

    def __init__(self, files: dict[str, list[RF2File]], as_of: int | None, strict: bool) -> None:
        self.files, self.as_of, self.strict = files, as_of, strict  # as_of: resolve a Full release there
        self.counts: Counter = Counter()
        self.reports: list[ReadReport] = []
        self.timings: dict[str, float] = {}

    def load(self, kind: str, resolve: bool = True) -> pa.Table | None:
        """The rows of ``kind`` (None when it has no file); ``resolve``: the latest row per id."""
        fs = self.files.get(kind)
        if not fs:
            return None
        t = time.perf_counter()
        tables = []
        for i, f in enumerate(fs):
            table, report = read_rf2_file(f.path, kind, strict=self.strict)
            self.reports.append(report)
            self.counts[f"rows_read_{kind}"] += report.rows
            self.counts["ids_dropped_non_numeric"] += report.dropped_non_numeric_id
            self.counts["ids_bad_check_digit"] += report.bad_check_digit
            self.counts["rows_effective_after_package_date"] += _after_package_date(f, table, report)
            tables.append(table.append_column("_src", pa.array(np.full(table.num_rows, i, dtype=np.int32))))
        merged = concat(tables)
        if resolve and self.as_of is not None:  # a Full release at a date: ids repeat, one sort resolves
            merged, dropped = resolve_at(merged, [f.path for f in fs], self.as_of)
        else:
            distinct = all_distinct(merged["id"])
            merged, dropped = drop_duplicates(merged, [f.path for f in fs], distinct=distinct)
        if dropped:
            self.counts[f"rows_duplicate_dropped_{kind}"] = dropped
            log.warning(
                "%s: %d row(s) repeated with the same id, effectiveTime and content; repeats dropped",
                kind,
                dropped,
            )
        if resolve and self.as_of is None:  # a Snapshot: a repeated id still keeps its latest row
            merged = latest_per_id(merged, None, distinct=distinct or None)
        if kind == "ExtendedMap":  # map rows keep where they came from, for findings
            paths = pa.array([str(f.path) for f in fs], pa.string())
            file_of_row = pc.take(paths, merged["_src"])
            merged = merged.drop_columns(["_src"]).append_column("_file", file_of_row)
        else:
            merged = merged.drop_columns(list(SOURCE_COLUMNS))
        self.timings[f"read_{kind}"] = round(time.perf_counter() - t, 3)
        give_back()  # the file's text columns are gone: give their pages back
        return merged


def _after_package_date(f: RF2File, table: pa.Table, report: ReadReport) -> int:
    """How many rows of ``f`` have an effectiveTime after its package's date (the date in the file name; a
    release holds nothing newer than itself). They are used as they are; warned with the first one's line,
    which also becomes a finding of the manifest."""
    after = pc.greater(table["effectiveTime"], pa.scalar(int(f.date), pa.int32()))
    n = _n(after)
    if n:
        first = table.filter(after).slice(0, 1)
        line, shown = first["_line"][0].as_py(), f"{first['effectiveTime'][0].as_py():08d}"
        what = f"effectiveTime {shown} is after the package date {f.date} ({n} row(s) of the file are)"
        report.note(f"{f.path}, line {line}: {what}")
        log.warning("%s, line %d: %s; used as they are", f.path, line, what)
    return n


def _all_concepts(r: _Reader, as_of: int | None) -> pa.Table:
    """Every concept at the date, active or not; ``as_of`` before the release's first date is an error."""
    concept_raw = r.load("Concept", resolve=False)
    if as_of is not None:
        first = pc.min(concept_raw["effectiveTime"]).as_py()
        if first is None or as_of < first:
            raise AsOfError(
                f"--as-of {as_of} is before the first effective time of the release ({first}) in "
                + ", ".join(str(f.path) for f in r.files["Concept"])
            )
    return latest_per_id(concept_raw, r.as_of)


def _active_kept(t: pa.Table, kind: str) -> pa.Table:
    """The active rows of ``t``, only the columns the compile uses afterwards (:data:`KEPT`; all were read
    and checked): fewer columns to copy in each filter from here on."""
    t = t.select([*KEPT[kind], "active"])
    return active(t).drop_columns(["active"])


def _n(mask: pa.Array | pa.ChunkedArray) -> int:
    """How many values of a boolean mask are true."""
    return int(pc.sum(mask).as_py() or 0)


def _of_live_concepts(
    t: pa.Table, column: str, live: pa.Array, known: pa.Array, counts: Counter, what: str
) -> pa.Table:
    """The rows whose ``column`` is an active concept. Counts ``<what>_dropped_inactive_concept`` (the
    concept is inactive), ``<what>_dropped_unknown_concept`` (no such concept in the release, warned with
    an example) and ``<what>_active``."""
    ok = pc.is_in(t[column], value_set=live)
    unknown = pc.invert(pc.is_in(t[column], value_set=known))
    n_unknown = _n(unknown)
    counts[f"{what}_dropped_inactive_concept"] = _n(pc.invert(ok)) - n_unknown
    counts[f"{what}_dropped_unknown_concept"] = n_unknown
    if n_unknown:
        ex = t.filter(unknown).slice(0, 1)
        log.warning(
            "%d %s refer to a concept that is not in the release (e.g. %s %s: %s %s); dropped",
            n_unknown,
            what.replace("_", " "),
            what.rstrip("s").replace("_", " "),
            ex["id"][0].as_py(),
            column,
            ex[column][0].as_py(),
        )
    t = t.filter(ok)
    counts[f"{what}_active"] = t.num_rows
    return t


# Which characteristic types a relationship view keeps (additional rows are then dropped, uncounted).
VIEW_TYPES = {"Relationship": (S.INFERRED, S.ADDITIONAL), "StatedRelationship": (S.STATED,)}


def _relationships(r: _Reader, kind: str, live: pa.Array, known: pa.Array) -> pa.Table:
    """Active relationships of the view's characteristic type (additional ones left out) whose source,
    destination and type are active concepts. Dropped and counted: other characteristic types
    (``relationships_dropped_characteristic_type``), an unknown source or destination
    (``relationships_dropped_unknown_concept``), an unknown type (``relationships_dropped_unknown_type``),
    and the rest with an inactive end or type (``relationships_dropped_inactive_concept``)."""
    rel = _active_kept(r.load(kind), "Relationship")
    rel = _of_view_type(rel, kind, r.counts)
    rel = rel.filter(pc.not_equal(rel["characteristicTypeId"], pa.scalar(S.ADDITIONAL, pa.int64())))
    ok = pc.and_(
        pc.and_(pc.is_in(rel["sourceId"], value_set=live), pc.is_in(rel["destinationId"], value_set=live)),
        pc.is_in(rel["typeId"], value_set=live),
    )
    unknown_end = pc.invert(
        pc.and_(pc.is_in(rel["sourceId"], value_set=known), pc.is_in(rel["destinationId"], value_set=known))
    )
    unknown_type = pc.invert(pc.is_in(rel["typeId"], value_set=known))
    n_unknown_end, n_unknown_type = _n(unknown_end), _n(unknown_type)
    r.counts["relationships_dropped_inactive_concept"] = _n(pc.invert(ok)) - _n(
        pc.or_(unknown_end, unknown_type)
    )
    r.counts["relationships_dropped_unknown_concept"] = n_unknown_end
    if n_unknown_end:
        ex = rel.filter(unknown_end).slice(0, 1)
        log.warning(
            "%d relationship(s) have a source or destination that is not a concept of the release "
            "(e.g. relationship %s: %s -> %s); dropped",
            n_unknown_end,
            ex["id"][0].as_py(),
            ex["sourceId"][0].as_py(),
            ex["destinationId"][0].as_py(),
        )
    if n_unknown_type:
        types = pc.unique(rel["typeId"].filter(unknown_type)).to_pylist()
        log.warning(
            "%d relationship(s) have a type that is not a concept of the release (%s%s); dropped",
            n_unknown_type,
            ", ".join(map(str, types[:5])),
            " ..." if len(types) > 5 else "",
        )
        r.counts["relationships_dropped_unknown_type"] = n_unknown_type
    rel = rel.filter(ok)
    r.counts["relationships_active"] = rel.num_rows
    r.counts["relationships_is_a"] = _n(pc.equal(rel["typeId"], pa.scalar(S.IS_A, pa.int64())))
    return rel


def _of_view_type(rel: pa.Table, kind: str, counts: Counter) -> pa.Table:
    """The rows whose characteristic type belongs in the ``kind`` file (e.g. no stated rows among the
    inferred); the others are counted as ``relationships_dropped_characteristic_type`` and warned."""
    keep = pc.is_in(rel["characteristicTypeId"], value_set=pa.array(VIEW_TYPES[kind], pa.int64()))
    n_other = _n(pc.invert(keep))
    counts["relationships_dropped_characteristic_type"] = n_other
    if n_other:
        other = rel.filter(pc.invert(keep))
        types = pc.unique(other["characteristicTypeId"]).to_pylist()
        log.warning(
            "%d active row(s) of the %s file have characteristic type %s, not %s (e.g. relationship %s); "
            "not used as edges",
            n_other,
            kind,
            ", ".join(map(str, types[:5])),
            " or ".join(map(str, VIEW_TYPES[kind])),
            other["id"][0].as_py(),
        )
    return rel.filter(keep)


LANGUAGE_NAMES = {S.US_ENGLISH: "US English", S.GB_ENGLISH: "GB English"}


def _language(r: _Reader, languages: tuple[int, ...], described: list[pa.Table]) -> pa.Table:
    """Active rows of the chosen language refsets on the active descriptions (and text definitions).

    A chosen refset that no Language file holds is an :class:`OptionError` listing the refsets found."""
    lang = r.load("Language")
    found = sorted(pc.unique(lang["refsetId"]).to_pylist())
    absent = [x for x in languages if x not in found]
    if absent:
        listing = ", ".join(
            f"{x}" + (f" ({LANGUAGE_NAMES[x]})" if x in LANGUAGE_NAMES else "") for x in found
        )
        raise OptionError(
            f"--language {', '.join(map(str, absent))}: no language refset file holds this refset; "
            f"refsets found: {listing or 'none'} (in "
            + ", ".join(str(f.path) for f in r.files["Language"])
            + ")"
        )
    lang = _active_kept(lang, "Language")
    lang = lang.filter(pc.is_in(lang["refsetId"], value_set=pa.array(list(languages), pa.int64())))
    ids = pa.concat_arrays([t["id"].combine_chunks() for t in described])
    ok = pc.is_in(lang["referencedComponentId"], value_set=ids)
    r.counts["language_rows_dropped_inactive_description"] = _n(pc.invert(ok))
    lang = lang.filter(ok)
    r.counts["language_rows_active"] = lang.num_rows
    return lang


def parse_as_of(as_of: str | int | None) -> int | None:
    """``--as-of`` as an int YYYYMMDD (None stays None); anything but a calendar date is an AsOfError."""
    if as_of is None:
        return None
    s = str(as_of)
    if len(s) != 8 or not s.isdigit():
        raise AsOfError(f"--as-of must be a date YYYYMMDD, got {as_of!r}")
    if not is_calendar_date(s):
        raise AsOfError(
            f"--as-of {s} is not a calendar date (YYYYMMDD with month 01-12 and a day that month has)"
        )
    return int(s)
