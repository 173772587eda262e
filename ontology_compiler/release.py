"""Load an RF2 release folder into its resolved, active state (one Arrow table per component kind).

Steps: find files by name; pick Snapshot, or Full resolved at ``as_of``; read every file of a kind
(International plus extensions) and merge; keep the latest row per id; keep active rows; drop, and
count, descriptions, relationships, language and map rows whose concept (or description) is inactive.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from . import rf2_schema as S
from .errors import AsOfError
from .rf2_files import RF2File, choose_release_type, scan_release, select_files
from .rf2_read import ReadReport, read_rf2_file
from .snapshot import active, concat, latest_per_id

log = logging.getLogger(__name__)


@dataclass
class Release:
    """The resolved active state of a release, plus what was read and counted on the way."""

    src: Path
    release_type: str  # Snapshot or Full
    as_of: int | None
    files: dict[str, list[RF2File]]
    concepts: pa.Table  # active concepts
    descriptions: pa.Table  # active descriptions of active concepts
    text_definitions: pa.Table
    relationships: pa.Table  # active relationships, source, destination and type active
    concrete_values: pa.Table
    language: pa.Table  # active rows of the chosen language refsets, on active descriptions
    maps: pa.Table  # active ExtendedMap rows (with _file, _line)
    associations: pa.Table  # active historical association rows
    inactive_concepts: pa.Table  # id of concepts present but inactive at the date
    known_concepts: pa.Array  # every concept id of the release at the date, active or not
    counts: Counter = field(default_factory=Counter)
    reports: list[ReadReport] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

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
) -> Release:
    """Read and resolve a release folder. See the module docstring."""
    t0 = time.perf_counter()
    src = Path(src)
    as_of_int = _parse_as_of(as_of)
    all_files = scan_release(src)
    rtype = choose_release_type(all_files, release, None if as_of_int is None else str(as_of_int))
    files = select_files(all_files, rtype, stated=stated, src=src)
    r = _Reader(files, as_of_int if rtype == "Full" else None, strict)
    concept_all = _all_concepts(r, as_of_int)
    concepts = active(concept_all)
    inactive_ids = pc.filter(concept_all["id"], pc.equal(concept_all["active"], pa.scalar(0, pa.int8())))
    live = concepts["id"].combine_chunks()
    r.counts["concepts_active"] = concepts.num_rows
    r.counts["concepts_inactive"] = len(inactive_ids)
    desc = _of_live_concepts(active(r.load("Description")), "conceptId", live, r.counts, "descriptions")
    tdef = r.load("TextDefinition")
    if tdef is not None:
        tdef = _of_live_concepts(active(tdef), "conceptId", live, r.counts, "text_definitions")
    rel = _relationships(r, "StatedRelationship" if stated else "Relationship", live, concept_all)
    cv = r.load("RelationshipConcreteValues")
    if cv is not None:
        cv = _of_live_concepts(active(cv), "sourceId", live, r.counts, "concrete_values")
    lang = _language(r, languages, [desc] + ([tdef] if tdef is not None else []))
    maps = active(r.load("ExtendedMap"))  # rows on inactive concepts are resolved by the mapping step
    r.counts["map_rows_active"] = maps.num_rows
    r.counts["map_rows_on_inactive_concept"] = _n(
        pc.invert(pc.is_in(maps["referencedComponentId"], value_set=live))
    )
    assoc = r.load("Association")
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
        associations=active(assoc) if assoc is not None else pa.table({}),
        inactive_concepts=pa.table({"id": inactive_ids}),
        known_concepts=concept_all["id"].combine_chunks(),
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
        for f in fs:
            table, report = read_rf2_file(f.path, kind, strict=self.strict)
            self.reports.append(report)
            self.counts[f"rows_read_{kind}"] += report.rows
            self.counts["ids_dropped_non_numeric"] += report.dropped_non_numeric_id
            self.counts["ids_bad_check_digit"] += report.bad_check_digit
            if kind == "ExtendedMap":  # map rows keep where they came from, for findings
                tables.append(
                    table.append_column("_file", pa.array([str(f.path)] * table.num_rows, pa.string()))
                )
            else:
                tables.append(table.drop_columns(["_line"]))
        merged = concat(tables)
        if resolve:
            merged = latest_per_id(merged, self.as_of)
        self.timings[f"read_{kind}"] = round(time.perf_counter() - t, 3)
        return merged


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


def _n(mask: pa.Array | pa.ChunkedArray) -> int:
    """How many values of a boolean mask are true."""
    return int(pc.sum(mask).as_py() or 0)


def _of_live_concepts(t: pa.Table, column: str, live: pa.Array, counts: Counter, what: str) -> pa.Table:
    """The rows whose ``column`` is an active concept; counts ``<what>_dropped_inactive_concept`` and
    ``<what>_active``."""
    ok = pc.is_in(t[column], value_set=live)
    counts[f"{what}_dropped_inactive_concept"] = _n(pc.invert(ok))
    t = t.filter(ok)
    counts[f"{what}_active"] = t.num_rows
    return t


def _relationships(r: _Reader, kind: str, live: pa.Array, concept_all: pa.Table) -> pa.Table:
    """Active relationships (additional ones left out) whose source, destination and type are active."""
    rel = active(r.load(kind))
    rel = rel.filter(pc.not_equal(rel["characteristicTypeId"], pa.scalar(S.ADDITIONAL, pa.int64())))
    ok = pc.and_(
        pc.and_(pc.is_in(rel["sourceId"], value_set=live), pc.is_in(rel["destinationId"], value_set=live)),
        pc.is_in(rel["typeId"], value_set=live),
    )
    r.counts["relationships_dropped_inactive_concept"] = _n(pc.invert(ok))
    unknown_type = pc.invert(pc.is_in(rel["typeId"], value_set=concept_all["id"].combine_chunks()))
    n_unknown = _n(unknown_type)
    if n_unknown:
        types = pc.unique(rel["typeId"].filter(unknown_type)).to_pylist()
        log.warning(
            "%d relationship(s) have a type that is not a concept of the release (%s%s); dropped",
            n_unknown,
            ", ".join(map(str, types[:5])),
            " ..." if len(types) > 5 else "",
        )
        r.counts["relationships_dropped_unknown_type"] = n_unknown
    rel = rel.filter(ok)
    r.counts["relationships_active"] = rel.num_rows
    r.counts["relationships_is_a"] = _n(pc.equal(rel["typeId"], pa.scalar(S.IS_A, pa.int64())))
    return rel


def _language(r: _Reader, languages: tuple[int, ...], described: list[pa.Table]) -> pa.Table:
    """Active rows of the chosen language refsets on the active descriptions (and text definitions)."""
    lang = active(r.load("Language"))
    lang = lang.filter(pc.is_in(lang["refsetId"], value_set=pa.array(list(languages), pa.int64())))
    ids = pa.concat_arrays([t["id"].combine_chunks() for t in described])
    ok = pc.is_in(lang["referencedComponentId"], value_set=ids)
    r.counts["language_rows_dropped_inactive_description"] = _n(pc.invert(ok))
    lang = lang.filter(ok)
    r.counts["language_rows_active"] = lang.num_rows
    return lang


def _parse_as_of(as_of: str | int | None) -> int | None:
    if as_of is None:
        return None
    s = str(as_of)
    if len(s) != 8 or not s.isdigit():
        raise AsOfError(f"--as-of must be a date YYYYMMDD, got {as_of!r}")
    return int(s)
