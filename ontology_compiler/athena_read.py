"""Read an Athena vocabulary download into the resolved state the RF2 path works on (:class:`Release`).

The SNOMED concepts valid at ``as_of`` (without it: those whose ``invalid_reason`` is empty) become the
release's active concepts, keyed by SCTID (``concept_code``); ``concept_name`` becomes the preferred
synonym and the English rows of CONCEPT_SYNONYM the other descriptions (one ending in a SNOMED semantic
tag, ``(disorder)``, is taken as the FSN); CONCEPT_RELATIONSHIP rows between two such concepts whose
relationship id :data:`athena_schema.RELATIONSHIPS` lists become relationships of that attribute type
(Athena keeps no role groups: every attribute is in group 0), ``Concept replaced by`` / ``Concept
same_as to`` rows become historical associations. ICD codes reach SNOMED through ``Maps to``, read by the
OMOP mapping source (:func:`map_sources.read_omop`) from the same two files.

Everything that is dropped is counted (``Release.counts``); relationship ids the table does not know are
counted per id and listed. Structural problems (a missing file, a comma-separated file, a wrong header, a
repeated ``concept_id``, a date that is not a calendar date) raise :class:`InputFileError` or
:class:`MissingInputError` naming the file and line.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import athena_schema as A
from . import rf2_schema as S
from .errors import InputFileError, MissingInputError
from .release import Release, parse_as_of
from .rf2_read import read_header, read_tsv

log = logging.getLogger(__name__)


@dataclass
class AthenaFiles:
    """The files of a download found under its folder (name -> path)."""

    src: Path
    paths: dict[str, Path] = field(default_factory=dict)


def find_athena(src: str | Path) -> AthenaFiles:
    """The Athena files directly under ``src``; :class:`MissingInputError` when a required one is absent."""
    src = Path(src)
    found = AthenaFiles(src, {n: src / n for n in A.FILES if (src / n).is_file()})
    missing = [n for n in A.REQUIRED if n not in found.paths]
    if missing:
        raise MissingInputError(
            f"{src}: not an Athena vocabulary download: {', '.join(missing)} missing "
            f"(expected the TAB-separated files {', '.join(A.REQUIRED)}, and optionally "
            f"{', '.join(n for n in A.FILES if n not in A.REQUIRED)})"
        )
    return found


def is_athena_folder(src: str | Path) -> bool:
    """True when ``src`` is a folder holding CONCEPT.csv and CONCEPT_RELATIONSHIP.csv at its top."""
    p = Path(src)
    return p.is_dir() and all((p / n).is_file() for n in A.REQUIRED)


def read_athena_file(path: Path, name: str) -> pa.Table:
    """One Athena file as string columns plus ``_line``: TAB-separated with the v5.4 header. A field that a
    tool wrote in double quotes (``"..."``, with ``""`` inside) is unquoted; other quotes are text."""
    columns = A.FILES[name]
    header = read_header(path)
    if len(header) == 1 and "," in header[0]:
        raise InputFileError(
            path,
            "comma-separated, but an Athena vocabulary file is TAB-separated",
            line=1,
            expected="\t".join(columns).replace("\t", " <TAB> "),
            found=header[0][:200],
            hint="re-download from Athena, or convert the file to TAB-separated",
        )
    t = read_tsv(path, columns, f"an Athena {name} (TAB-separated, OMOP CDM v5.4 columns)")
    return pa.table({c: (_unquote(t[c]) if c != "_line" else t[c]) for c in t.column_names})


def _unquote(col: pa.ChunkedArray) -> pa.ChunkedArray:
    quoted = pc.match_substring_regex(col, r'^".*"$')
    if not pc.any(quoted).as_py():
        return col
    inner = pc.replace_substring(pc.utf8_slice_codeunits(col, 1, -1), '""', '"')
    return pc.if_else(quoted, inner, col)


def _dates(path: Path, t: pa.Table, col: str) -> np.ndarray:
    """``col`` as int YYYYMMDD; a value that is not a calendar date raises, naming the line."""
    v = t[col]
    ok = pc.match_substring_regex(v, r"^\d{8}$").to_numpy(zero_copy_only=False)
    if ok.all():
        ints = pc.cast(v, pa.int64()).to_numpy()
        ok = _calendar(ints)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InputFileError(
            path,
            f"{col} is not a calendar date",
            line=int(t["_line"][i].as_py()),
            expected="YYYYMMDD, e.g. 20220531",
            found=repr(v[i].as_py()),
        )
    return ints


def _calendar(ints: np.ndarray) -> np.ndarray:
    """Whether each YYYYMMDD integer is a real date."""
    y, m, d = ints // 10000, ints // 100 % 100, ints % 100
    days = np.array([31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
    ok = (m >= 1) & (m <= 12) & (d >= 1) & (y >= 1)
    dim = days[np.clip(m - 1, 0, 11)]
    leap = (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
    dim = np.where((m == 2) & ~leap, 28, dim)
    return ok & (d <= dim)


def _integers(path: Path, t: pa.Table, col: str) -> np.ndarray:
    v = t[col]
    ok = pc.match_substring_regex(v, r"^-?\d{1,18}$").to_numpy(zero_copy_only=False)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InputFileError(
            path, f"{col} is not an integer", line=int(t["_line"][i].as_py()), found=repr(v[i].as_py())
        )
    return pc.cast(v, pa.int64()).to_numpy()


def valid_rows(path: Path, t: pa.Table, as_of: int | None) -> np.ndarray:
    """Rows valid at ``as_of`` (start <= as_of <= end), or now (``invalid_reason`` empty) without it."""
    start, end = _dates(path, t, "valid_start_date"), _dates(path, t, "valid_end_date")
    bad = end < start
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputFileError(
            path,
            "valid_end_date before valid_start_date",
            line=int(t["_line"][i].as_py()),
            found=f"{start[i]} .. {end[i]}",
        )
    if as_of is None:
        return pc.equal(t["invalid_reason"], "").to_numpy(zero_copy_only=False)
    return (start <= as_of) & (as_of <= end)


def load_athena(src: str | Path, *, as_of: str | int | None = None) -> tuple[Release, dict]:
    """``(release, info)`` of the Athena download in ``src``, resolved at ``as_of`` (YYYYMMDD; None: now).

    ``info``: the files read, the SNOMED vocabulary version (VOCABULARY.csv, when present) and the
    unknown relationship ids with their row counts.
    """
    t0 = time.perf_counter()
    files = find_athena(src)
    at = parse_as_of(as_of)
    counts: Counter = Counter()
    cpath = files.paths["CONCEPT.csv"]
    concept = read_athena_file(cpath, "CONCEPT.csv")
    counts["athena_concept_rows"] = concept.num_rows
    cid = _integers(cpath, concept, "concept_id")
    _no_repeats(cpath, concept, cid)
    valid = valid_rows(cpath, concept, at)
    vocab = concept["vocabulary_id"].to_numpy(zero_copy_only=False)
    is_snomed = vocab == A.SNOMED
    code = concept["concept_code"]
    digits = pc.match_substring_regex(code, r"^\d{6,18}$").to_numpy(zero_copy_only=False)
    counts["snomed_concept_code_not_sctid"] = int((is_snomed & ~digits).sum())
    is_snomed &= digits
    sctid = np.zeros(len(cid), dtype=np.int64)
    sctid[is_snomed] = pc.cast(code.filter(pa.array(is_snomed)), pa.int64()).to_numpy()
    live = is_snomed & valid
    reason = concept["invalid_reason"].to_numpy(zero_copy_only=False)
    counts["concepts_active"] = int(live.sum())
    counts["concepts_inactive"] = int((is_snomed & ~valid).sum())
    counts["concepts_deprecated"] = int((is_snomed & ~valid & (reason == "D")).sum())
    counts["concepts_upgraded"] = int((is_snomed & ~valid & (reason == "U")).sum())
    for v in A.ICD_VOCABULARIES:
        counts[f"athena_{v.lower()}_concepts"] = int(((vocab == v) & valid).sum())
    start = _dates(cpath, concept, "valid_start_date")
    id_to_sctid = dict(zip(cid[is_snomed].tolist(), sctid[is_snomed].tolist(), strict=True))
    live_ids = cid[live]
    concepts = pa.table(
        {
            "id": pa.array(sctid[live]),
            "effectiveTime": pa.array(start[live].astype(np.int32)),
            "active": pa.array(np.ones(int(live.sum()), dtype=np.int8)),
            "moduleId": pa.array(np.zeros(int(live.sum()), dtype=np.int64)),  # Athena carries no module
            "definitionStatusId": pa.nulls(int(live.sum()), pa.int64()),  # nor primitive / defined
        }
    )
    known = pa.array(np.unique(sctid[is_snomed]))
    inactive = pa.table({"id": pa.array(np.unique(sctid[is_snomed & ~valid]))})
    names = concept["concept_name"].filter(pa.array(live))
    desc, lang = _descriptions(files, live_ids, sctid[live], start[live], names, counts)
    rel, assoc, unknown = _relationships(files, at, cid, id_to_sctid, set(live_ids.tolist()), counts)
    release = Release(
        src=Path(src),
        release_type="Athena",
        as_of=at,
        files={},
        concepts=concepts,
        descriptions=desc,
        text_definitions=desc.schema.empty_table(),
        relationships=rel,
        concrete_values=pa.table({}),
        language=lang,
        maps=_empty_maps(),
        associations=assoc,
        inactive_concepts=inactive,
        known_concepts=known,
        counts=counts,
    )
    release.timings["load_release"] = round(time.perf_counter() - t0, 3)
    info = {
        "files": sorted(files.paths),
        "snomed_version": _snomed_version(files),
        "unknown_relationship_ids": unknown,
    }
    return release, info


def _no_repeats(path: Path, t: pa.Table, ids: np.ndarray) -> None:
    order = np.argsort(ids, kind="stable")
    same = ids[order][1:] == ids[order][:-1]
    if same.any():
        k = int(np.flatnonzero(same)[0])
        a, b = int(order[k]), int(order[k + 1])
        line_a, line_b = int(t["_line"][a].as_py()), int(t["_line"][b].as_py())
        raise InputFileError(
            path,
            f"concept_id {ids[a]} appears twice (lines {line_a} and {line_b}); "
            f"{int(same.sum())} repeated id(s) in all",
            line=line_b,
            expected="one row per concept_id",
        )


def _descriptions(
    files: AthenaFiles,
    ids: np.ndarray,
    sctids: np.ndarray,
    start: np.ndarray,
    names: pa.ChunkedArray,
    counts: Counter,
) -> tuple[pa.Table, pa.Table]:
    """Descriptions (RF2 columns; synthetic ids) and their US English language rows: ``concept_name`` as
    the preferred synonym, English synonyms as acceptable synonyms, a synonym with a semantic tag as the
    preferred FSN."""
    by_id = dict(zip(ids.tolist(), range(len(ids)), strict=True))
    terms: list[pa.Array] = [names.combine_chunks()]
    owner = [np.arange(len(ids))]
    kind = [np.zeros(len(ids), dtype=np.int8)]  # 0 name, 1 synonym, 2 FSN
    if (p := files.paths.get("CONCEPT_SYNONYM.csv")) is not None:
        syn = read_athena_file(p, "CONCEPT_SYNONYM.csv")
        sid = _integers(p, syn, "concept_id")
        langs = _integers(p, syn, "language_concept_id")
        pos = np.array([by_id.get(x, -1) for x in sid.tolist()], dtype=np.int64)
        counts["synonyms_read"] = syn.num_rows
        counts["synonyms_not_english"] = int(((pos >= 0) & (langs != A.ENGLISH)).sum())
        keep = (pos >= 0) & (langs == A.ENGLISH)
        text = syn["concept_synonym_name"].filter(pa.array(keep)).combine_chunks()
        own = pos[keep]
        same_as_name = pc.equal(text, pc.take(terms[0], pa.array(own))).to_numpy(zero_copy_only=False)
        counts["synonyms_same_as_concept_name"] = int(same_as_name.sum())
        text, own = text.filter(pa.array(~same_as_name)), own[~same_as_name]
        tag = pc.utf8_lower(pc.extract_regex(text, r"\((?P<tag>[^()]*)\)\s*$").field("tag"))
        fsn = pc.fill_null(pc.is_in(tag, value_set=pa.array(sorted(A.SEMANTIC_TAGS))), False)
        terms.append(text)
        owner.append(own)
        kind.append(np.where(fsn.to_numpy(zero_copy_only=False), 2, 1).astype(np.int8))
    term = pa.concat_arrays(terms)
    own = np.concatenate(owner)
    k = np.concatenate(kind)
    n = len(own)
    did = np.arange(1, n + 1, dtype=np.int64)
    counts["descriptions_active"] = n
    desc = pa.table(
        {
            "id": pa.array(did),
            "effectiveTime": pa.array(start[own].astype(np.int32)),
            "active": pa.array(np.ones(n, dtype=np.int8)),
            "moduleId": pa.array(np.zeros(n, dtype=np.int64)),
            "conceptId": pa.array(sctids[own]),
            "languageCode": pa.array(["en"] * n, pa.string()),
            "typeId": pa.array(np.where(k == 2, S.FSN, S.SYNONYM).astype(np.int64)),
            "term": term,
            "caseSignificanceId": pa.array(np.full(n, S.CASE_INSENSITIVE, dtype=np.int64)),
        }
    )
    lang = pa.table(
        {
            "id": pa.array([str(x) for x in did.tolist()], pa.string()),
            "effectiveTime": desc["effectiveTime"],
            "active": desc["active"],
            "moduleId": desc["moduleId"],
            "refsetId": pa.array(np.full(n, S.US_ENGLISH, dtype=np.int64)),
            "referencedComponentId": desc["id"],
            "acceptabilityId": pa.array(np.where(k == 1, S.ACCEPTABLE, S.PREFERRED).astype(np.int64)),
        }
    )
    return desc, lang


def _relationships(
    files: AthenaFiles,
    at: int | None,
    cid: np.ndarray,
    id_to_sctid: dict[int, int],
    live: set[int],
    counts: Counter,
) -> tuple[pa.Table, pa.Table, dict[str, int]]:
    """Attribute relationships (RF2 columns), historical associations, and unknown relationship ids."""
    path = files.paths["CONCEPT_RELATIONSHIP.csv"]
    r = read_athena_file(path, "CONCEPT_RELATIONSHIP.csv")
    counts["athena_relationship_rows"] = r.num_rows
    c1, c2 = _integers(path, r, "concept_id_1"), _integers(path, r, "concept_id_2")
    valid = valid_rows(path, r, at)
    counts["relationship_rows_not_valid"] = int((~valid).sum())
    rid = r["relationship_id"].to_numpy(zero_copy_only=False)
    known_ids = set(cid.tolist())
    has1 = np.fromiter((x in known_ids for x in c1.tolist()), bool, len(c1))
    has2 = np.fromiter((x in known_ids for x in c2.tolist()), bool, len(c2))
    missing = valid & ~(has1 & has2)
    counts["relationships_dropped_unknown_concept"] = int(missing.sum())
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        log.warning(
            "%s, line %d: concept_id %d or %d is not in CONCEPT.csv (%d such rows dropped)",
            path, int(r["_line"][i].as_py()), c1[i], c2[i], int(missing.sum()),
        )  # fmt: skip
    reverses = A.REVERSES | _reverse_ids(files)
    attr = np.fromiter((x in A.RELATIONSHIPS for x in rid), bool, len(rid))
    hist = np.fromiter((x in A.HISTORICAL for x in rid), bool, len(rid))
    other = np.fromiter((x in reverses or x in A.NOT_ATTRIBUTES for x in rid), bool, len(rid))
    unknown_rows = valid & ~missing & ~attr & ~hist & ~other
    unknown = dict(Counter(rid[unknown_rows].tolist()).most_common())
    counts["relationship_rows_unknown_id"] = int(unknown_rows.sum())
    if unknown:
        listed = ", ".join(f"{k!r} ({v})" for k, v in list(unknown.items())[:10])
        log.warning("%s: relationship ids not in the table (rows skipped): %s", path, listed)
    s1 = np.array([id_to_sctid.get(x, 0) for x in c1.tolist()], dtype=np.int64)
    s2 = np.array([id_to_sctid.get(x, 0) for x in c2.tolist()], dtype=np.int64)
    on_live = np.fromiter((x in live for x in c1.tolist()), bool, len(c1)) & np.fromiter(
        (x in live for x in c2.tolist()), bool, len(c2)
    )
    use = valid & ~missing & attr & on_live
    counts["relationships_dropped_inactive_concept"] = int((valid & ~missing & attr & ~on_live).sum())
    type_id = np.array([A.RELATIONSHIPS[x][0] if x in A.RELATIONSHIPS else 0 for x in rid], dtype=np.int64)
    key = np.stack([s1[use], type_id[use], s2[use]], axis=1)
    uniq = np.unique(key, axis=0) if len(key) else key.reshape(0, 3)
    counts["relationships_duplicate_rows"] = int(len(key) - len(uniq))
    n = len(uniq)
    counts["relationships_active"] = n
    counts["relationships_is_a"] = int((uniq[:, 1] == S.IS_A).sum()) if n else 0
    rel = pa.table(
        {
            "id": pa.array(np.arange(1, n + 1, dtype=np.int64)),
            "effectiveTime": pa.array(np.zeros(n, dtype=np.int32)),
            "active": pa.array(np.ones(n, dtype=np.int8)),
            "moduleId": pa.array(np.zeros(n, dtype=np.int64)),
            "sourceId": pa.array(uniq[:, 0].copy()),
            "destinationId": pa.array(uniq[:, 2].copy()),
            "relationshipGroup": pa.array(np.zeros(n, dtype=np.int32)),  # Athena keeps no role groups
            "typeId": pa.array(uniq[:, 1].copy()),
            "characteristicTypeId": pa.array(np.full(n, S.INFERRED, dtype=np.int64)),
            "modifierId": pa.array(np.full(n, S.EXISTENTIAL, dtype=np.int64)),
        }
    )
    h = valid & ~missing & hist & (s1 > 0) & (s2 > 0)
    refset = np.array([A.HISTORICAL.get(x, 0) for x in rid], dtype=np.int64)
    counts["historical_associations"] = int(h.sum())
    m = int(h.sum())
    assoc = pa.table(
        {
            "id": pa.array([f"athena-{i}" for i in range(m)], pa.string()),
            "effectiveTime": pa.array(np.zeros(m, dtype=np.int32)),
            "active": pa.array(np.ones(m, dtype=np.int8)),
            "moduleId": pa.array(np.zeros(m, dtype=np.int64)),
            "refsetId": pa.array(refset[h]),
            "referencedComponentId": pa.array(s1[h]),
            "targetComponentId": pa.array(s2[h]),
        }
    )
    return rel, assoc, unknown


def _reverse_ids(files: AthenaFiles) -> set[str]:
    """The reverse ids RELATIONSHIP.csv gives for the relationships of the table (when the file is there)."""
    if (p := files.paths.get("RELATIONSHIP.csv")) is None:
        return set()
    t = read_athena_file(p, "RELATIONSHIP.csv")
    fwd = t["relationship_id"].to_pylist()
    rev = t["reverse_relationship_id"].to_pylist()
    return {b for a, b in zip(fwd, rev, strict=True) if a in A.RELATIONSHIPS or a in A.NOT_ATTRIBUTES}


def _snomed_version(files: AthenaFiles) -> str | None:
    if (p := files.paths.get("VOCABULARY.csv")) is None:
        return None
    t = read_athena_file(p, "VOCABULARY.csv")
    hit = t.filter(pc.equal(t["vocabulary_id"], A.SNOMED))
    return hit["vocabulary_version"][0].as_py() if hit.num_rows else None


def _empty_maps() -> pa.Table:
    """An ExtendedMap table with no rows (Athena holds SNOMED's ICD maps only as ``Maps to``)."""
    return pa.schema(
        [
            ("id", pa.string()),
            ("effectiveTime", pa.int32()),
            ("active", pa.int8()),
            ("moduleId", pa.int64()),
            ("refsetId", pa.int64()),
            ("referencedComponentId", pa.int64()),
            ("mapGroup", pa.int32()),
            ("mapPriority", pa.int32()),
            ("mapRule", pa.string()),
            ("mapAdvice", pa.string()),
            ("mapTarget", pa.string()),
            ("correlationId", pa.int64()),
            ("mapCategoryId", pa.int64()),
            ("_line", pa.int64()),
            ("_file", pa.string()),
        ]
    ).empty_table()
