"""Readers for the published ICD <-> SNOMED mapping tables, in their exact layouts.

The layouts are described in ``docs/input-formats.md``, sections "NLM ICD-9-CM maps", "OMOP vocabulary",
"CMS GEMs" and "ICD-10-CM human-readable map".

Every reader is columnar, returns string/int columns plus ``_file`` and ``_line`` so findings can name
where a row came from, and raises :class:`InputFileError` (file, line, expected) on structural problems.

- NLM ICD-9-CM -> SNOMED CT (``ICD9CM_SNOMED_MAP_1TO1_*.txt``, ``..._1TOM_*.txt``): TAB, BOM, ``NULL``.
- OMOP vocabulary (``CONCEPT.csv``, ``CONCEPT_RELATIONSHIP.csv``): TAB, unquoted, ``Maps to`` rows.
- CMS GEMs (``*_I10gem.txt`` backward, ``*_I9gem.txt`` forward): fixed width / white space, 5 flags.
- US ICD-10-CM human-readable map (``tls_Icd10cmHumanReadableMap_*.tsv``): the ExtendedMap + 3 names.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from . import icd
from .errors import InputFileError
from .rf2_read import _locate_problem, read_tsv
from .rf2_schema import COLUMNS

log = logging.getLogger(__name__)

NLM_COLUMNS = (
    "ICD_CODE", "ICD_NAME", "IS_CURRENT_ICD", "IP_USAGE", "OP_USAGE", "AVG_USAGE", "IS_NEC", "SNOMED_CID",
    "SNOMED_FSN", "IS_1-1MAP", "CORE_USAGE", "IN_CORE",
)  # fmt: skip
OMOP_CONCEPT_COLUMNS = (
    "concept_id", "concept_name", "domain_id", "vocabulary_id", "concept_class_id", "standard_concept",
    "concept_code", "valid_start_date", "valid_end_date", "invalid_reason",
)  # fmt: skip
OMOP_RELATIONSHIP_COLUMNS = (
    "concept_id_1", "concept_id_2", "relationship_id", "valid_start_date", "valid_end_date", "invalid_reason",
)  # fmt: skip
TLS_COLUMNS = (
    "id", "effectiveTime", "active", "moduleId", "refsetId", "referencedComponentId",
    "referencedComponentName", "mapGroup", "mapPriority", "mapRule", "mapAdvice", "mapTarget",
    "mapTargetName", "correlationId", "mapCategoryId", "mapCategoryName",
)  # fmt: skip

# File-name patterns of each source (found anywhere under the release folder, or under --omop DIR etc.).
PATTERNS: dict[str, tuple[str, ...]] = {
    "nlm_1to1": ("ICD9CM_SNOMED_MAP_1TO1_*.txt",),
    "nlm_1tom": ("ICD9CM_SNOMED_MAP_1TOM_*.txt",),
    "omop_concept": ("CONCEPT.csv",),
    "omop_relationship": ("CONCEPT_RELATIONSHIP.csv",),
    "gem_backward": ("*_I10gem.txt", "*I10gem*.txt"),
    "gem_forward": ("*_I9gem.txt", "*I9gem*.txt"),
    "tls_icd10cm": ("tls_Icd10cmHumanReadableMap_*.tsv",),
}

ICD9_RE = r"^(?:\d{3}(?:\.\d{1,2})?|V\d{2}(?:\.\d{1,2})?|E\d{3}(?:\.\d)?)$"
ICD9_DOTLESS_RE = r"^(?:\d{3,5}|V\d{2,4}|E\d{3,4})$"
ICD10_RE = r"^[A-Z]\d[0-9A-Z](?:\.?[0-9A-Z]{1,4})?$"
GEM_FLAGS = ("approximate", "no_map", "combination", "scenario", "choice_list")  # the 5 flag digits, in order


@dataclass
class SourceFindings:
    """Data-quality findings of the mapping readers: counted and written to the manifest."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def add(self, key: str, n: int, example: str | None = None) -> None:
        if n:
            self.counts[key] = self.counts.get(key, 0) + int(n)
            if example and len(self.examples) < 50:
                self.examples.append(example)
                log.warning("%s", example)


def find_sources(roots: list[Path]) -> dict[str, list[Path]]:
    """Files of each mapping source found by name under any of ``roots`` (sorted)."""
    found: dict[str, list[Path]] = {}
    for root in roots:
        if root.is_file():
            candidates = [(root.parent, root.name)]
        else:
            candidates = [(Path(d), n) for d, _s, files in os.walk(root) for n in files]
        for d, name in candidates:
            for kind, pats in PATTERNS.items():
                if any(fnmatch.fnmatchcase(name, p) for p in pats):
                    found.setdefault(kind, [])
                    if d / name not in found[kind]:
                        found[kind].append(d / name)
    return {k: sorted(v) for k, v in found.items()}


def _first_bad_line(t: pa.Table, mask_bad: np.ndarray) -> int:
    return int(t["_line"].to_numpy()[np.flatnonzero(mask_bad)[0]])


def read_nlm(paths: list[Path], findings: SourceFindings) -> pa.Table:
    """NLM ICD-9-CM -> SNOMED rows: ``code`` (dotless), ``code_dotted``, ``sctid``, ``one_to_one``,
    ``_file``, ``_line``."""
    parts = []
    for p in paths:
        t = read_tsv(p, NLM_COLUMNS, "an NLM ICD9CM_SNOMED_MAP file", bom_expected=True)
        code = pc.utf8_trim_whitespace(t["ICD_CODE"])
        ok = pc.match_substring_regex(code, ICD9_RE).to_numpy(zero_copy_only=False)
        if not ok.all():
            line = _first_bad_line(t, ~ok)
            raise InputFileError(
                p,
                "ICD_CODE is not an ICD-9-CM diagnosis code",
                line=line,
                expected="e.g. 427.31, V58.61, E879.8",
                found=repr(code.filter(pa.array(~ok))[0].as_py()),
            )
        cid = pc.utf8_trim_whitespace(t["SNOMED_CID"])
        null = pc.equal(cid, "NULL").to_numpy(zero_copy_only=False) | pc.equal(cid, "").to_numpy(
            zero_copy_only=False
        )
        findings.add(
            "nlm_rows_without_snomed_cid",
            int(null.sum()),
            f"{p}: {int(null.sum())} row(s) with SNOMED_CID NULL skipped" if null.any() else None,
        )
        numeric = pc.match_substring_regex(cid, r"^\d{6,18}$").to_numpy(zero_copy_only=False)
        bad = ~numeric & ~null
        if bad.any():
            raise InputFileError(
                p,
                "SNOMED_CID is not an SCTID",
                line=_first_bad_line(t, bad),
                expected="6-18 digits or NULL",
                found=repr(cid.filter(pa.array(bad))[0].as_py()),
            )
        keep = pa.array(numeric)
        t = t.filter(keep)
        one = "_1TO1_" in p.name
        parts.append(
            pa.table(
                {
                    "code": icd.dotless(code.filter(keep)),
                    "code_dotted": code.filter(keep),
                    "sctid": pc.cast(cid.filter(keep), pa.int64()),
                    "one_to_one": pa.array(np.full(t.num_rows, one)),
                    "_file": _file_column(p, t.num_rows),
                    "_line": t["_line"],
                }
            )
        )
    out = pa.concat_tables(parts) if parts else None
    if out is not None:
        _conflicting_one_to_one(out, findings)
    return out


def _conflicting_one_to_one(t: pa.Table, findings: SourceFindings) -> None:
    """A code listed twice in a 1TO1 file with different targets is a conflict: counted, first row kept."""
    one = t.filter(t["one_to_one"])
    g = one.group_by("code", use_threads=False).aggregate(
        [("sctid", "count_distinct"), ("_line", "list"), ("_file", "first")]
    )
    bad = g.filter(pc.greater(g["sctid_count_distinct"], 1))
    for r in bad.to_pylist()[:10]:
        findings.add(
            "nlm_1to1_conflicting_rows",
            1,
            f"{r['_file_first']}, lines {', '.join(map(str, r['_line_list']))}: ICD-9 code {r['code']} "
            "has different SNOMED targets in a one-to-one file; all are kept as candidates",
        )
    if bad.num_rows > 10:
        findings.add("nlm_1to1_conflicting_rows", bad.num_rows - 10)


@dataclass(frozen=True)
class OmopValidity:
    """How the Athena path reads the OMOP files: ``Maps to`` rows and ICD source concepts valid at
    ``as_of`` (``valid_start_date <= as_of <= valid_end_date``; None: ``invalid_reason`` empty), and a
    target that is missing from CONCEPT.csv or not a standard concept counted, warned and dropped."""

    as_of: int | None = None


def read_omop(
    concept: Path, relationship: Path, findings: SourceFindings, *, validity: OmopValidity | None = None
) -> pa.Table:
    """OMOP ``Maps to`` from ICD10CM/ICD9CM source concepts to SNOMED standard concepts.

    Returns ``vocabulary``, ``code`` (dotless), ``code_dotted``, ``sctid``, ``_file``, ``_line`` (of the
    CONCEPT_RELATIONSHIP row). Non-SNOMED targets and invalid rows are counted. Without ``validity`` (a
    mapping source beside an RF2 release) a row is valid when its ``invalid_reason`` is empty and the
    concepts' own validity is not read (the release decides which SNOMED concepts are active).
    """
    c = _omop_concepts(concept, findings, validity)
    r = _omop_maps_to(relationship, findings, validity)
    src = c.filter(pc.is_in(c["vocabulary_id"], value_set=pa.array(["ICD10CM", "ICD9CM"]))).rename_columns(
        ["c1", "vocabulary", "code_dotted", "std1"]
    )
    if validity is not None:
        src = src.filter(pc.field("std1") != "X")  # an ICD concept not valid at the date
    tgt = c.filter(pc.equal(c["vocabulary_id"], "SNOMED")).rename_columns(
        ["c2", "vocab2", "sctid_str", "std2"]
    )
    m = r.join(src, keys="c1", join_type="inner")
    n_src = m.num_rows
    if validity is not None:
        _athena_targets(relationship, m, c, findings)
    m = m.join(tgt, keys="c2", join_type="inner").sort_by("_line")
    findings.add("omop_maps_to_non_snomed_target", n_src - m.num_rows)
    if validity is not None:
        # a target not valid at the date ("X") is the release's inactive concept: its history redirects it
        standard = pc.is_in(m["std2"], value_set=pa.array(["S", "X"])).to_numpy(zero_copy_only=False)
        if not standard.all():
            i = int(np.flatnonzero(~standard)[0])
            findings.add(
                "omop_maps_to_non_standard_target",
                int((~standard).sum()),
                f"{relationship}, line {m['_line'][i].as_py()}: Maps to a concept that is not a standard "
                f"concept (standard_concept {m['std2'][i].as_py()!r}); such rows are dropped",
            )
            m = m.filter(pa.array(standard))
    ok = pc.match_substring_regex(m["sctid_str"], r"^\d{6,18}$").to_numpy(zero_copy_only=False)
    if not ok.all():
        findings.add("omop_snomed_concept_code_not_sctid", int((~ok).sum()))
        m = m.filter(pa.array(ok))
    return pa.table(
        {
            "vocabulary": m["vocabulary"],
            "code": icd.dotless(m["code_dotted"]),
            "code_dotted": m["code_dotted"],
            "sctid": pc.cast(m["sctid_str"], pa.int64()),
            "_file": _file_column(relationship, m.num_rows),
            "_line": m["_line"],
        }
    )


def _athena_targets(relationship: Path, m: pa.Table, c: pa.Table, findings: SourceFindings) -> None:
    """Count and name the ``Maps to`` rows whose target concept is not in CONCEPT.csv."""
    missing = pc.invert(pc.is_in(m["c2"], value_set=c["cid"].combine_chunks())).to_numpy(zero_copy_only=False)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        findings.add(
            "omop_maps_to_missing_concept",
            int(missing.sum()),
            f"{relationship}, line {m['_line'][i].as_py()}: Maps to concept_id {m['c2'][i].as_py()}, "
            "which CONCEPT.csv does not hold; such rows are dropped",
        )


def _omop_concepts(concept: Path, findings: SourceFindings, validity: OmopValidity | None = None) -> pa.Table:
    """ICD10CM, ICD9CM and SNOMED rows of CONCEPT.csv, one per ``cid`` (the first when it repeats). With
    ``validity``, ``standard_concept`` reads ``X`` on a row not valid at its date."""
    from .athena_read import read_athena_file, valid_rows

    if validity is None:
        c = read_tsv(concept, OMOP_CONCEPT_COLUMNS, "an OMOP CONCEPT.csv (TAB-separated, unquoted)")
    else:
        c = read_athena_file(concept, "CONCEPT.csv")
    c = c.filter(pc.is_in(c["vocabulary_id"], value_set=pa.array(["ICD10CM", "ICD9CM", "SNOMED"])))
    _require_integers(concept, c, "concept_id")
    if validity is not None:
        ok = valid_rows(concept, c, validity.as_of)
        std = pc.if_else(pa.array(~ok), pa.scalar("X"), c["standard_concept"])
        # valid at an earlier date but retired since: Athena keeps only today's standard flag, so such a
        # concept counts as the standard concept it was when it was valid
        retired = pc.not_equal(c["invalid_reason"], "").to_numpy(zero_copy_only=False) & ok
        std = pc.if_else(pa.array(retired), pa.scalar("S"), std)
        c = c.set_column(c.column_names.index("standard_concept"), "standard_concept", std)
    c = c.append_column("cid", pc.cast(c["concept_id"], pa.int64()))
    dup = c.group_by("cid", use_threads=False).aggregate(
        [("concept_code", "count_distinct"), ("vocabulary_id", "count_distinct")]
    )
    conflict = dup.filter(
        pc.or_(
            pc.greater(dup["concept_code_count_distinct"], 1),
            pc.greater(dup["vocabulary_id_count_distinct"], 1),
        )
    )
    if conflict.num_rows:
        first = conflict["cid"][0].as_py()
        lines = c.filter(pc.equal(c["cid"], first))["_line"].to_pylist()
        findings.add(
            "omop_conflicting_concept_rows",
            conflict.num_rows,
            f"{concept}, lines {', '.join(map(str, lines))}: concept_id {first} appears with different "
            "codes or vocabularies; the first row is used",
        )
    return (
        c.group_by("cid", use_threads=False)
        .aggregate([("vocabulary_id", "first"), ("concept_code", "first"), ("standard_concept", "first")])
        .rename_columns(["cid", "vocabulary_id", "concept_code", "standard_concept"])
    )


def _omop_maps_to(
    relationship: Path, findings: SourceFindings, validity: OmopValidity | None = None
) -> pa.Table:
    """Valid ``Maps to`` rows of CONCEPT_RELATIONSHIP.csv as ``(c1, c2, _line)``; invalid ones counted."""
    from .athena_read import read_athena_file, valid_rows

    if validity is None:
        r = read_tsv(
            relationship,
            OMOP_RELATIONSHIP_COLUMNS,
            "an OMOP CONCEPT_RELATIONSHIP.csv (TAB-separated, unquoted)",
        )
    else:
        r = read_athena_file(relationship, "CONCEPT_RELATIONSHIP.csv")
    r = r.filter(pc.equal(r["relationship_id"], "Maps to"))
    if validity is None:
        invalid = pc.not_equal(r["invalid_reason"], "")
    else:
        invalid = pa.array(~valid_rows(relationship, r, validity.as_of))
    findings.add("omop_maps_to_invalid", int(pc.sum(invalid).as_py() or 0))
    r = r.filter(pc.invert(invalid))
    for col in ("concept_id_1", "concept_id_2"):
        _require_integers(relationship, r, col)
    return pa.table(
        {
            "c1": pc.cast(r["concept_id_1"], pa.int64()),
            "c2": pc.cast(r["concept_id_2"], pa.int64()),
            "_line": r["_line"],
        }
    )


def _require_integers(path: Path, t: pa.Table, col: str) -> None:
    ok = pc.match_substring_regex(t[col], r"^-?\d+$").to_numpy(zero_copy_only=False)
    if not ok.all():
        raise InputFileError(path, f"{col} is not an integer", line=_first_bad_line(t, ~ok))


def _file_column(path: Path, n: int) -> pa.Array:
    """``_file``: the path on every row."""
    return pa.array([str(path)] * n, pa.string())


def read_gem(path: Path, direction: str) -> pa.Table:
    """A CMS GEM file: ``source``, ``target`` (null for NoDx), the five flags, ``_file``, ``_line``.

    ``direction`` is ``backward`` (I10gem: ICD-10-CM -> ICD-9-CM) or ``forward`` (I9gem). Lines are split on
    white space (fixed width in 2018, tabs in some mirrors); each must hold source, target and 5 flag digits.
    """
    parts, line_no = _gem_fields(path)
    src = pc.list_element(parts, 0)
    tgt = pc.list_element(parts, 1)
    flags = pc.list_element(parts, 2)
    icd10 = ICD10_RE.replace(r"\.?", "")
    src_re, tgt_re = (icd10, ICD9_DOTLESS_RE) if direction == "backward" else (ICD9_DOTLESS_RE, icd10)
    ok = (
        pc.match_substring_regex(flags, r"^[01][01][01]\d\d$").to_numpy(zero_copy_only=False)
        & pc.match_substring_regex(src, src_re).to_numpy(zero_copy_only=False)
        & (
            pc.match_substring_regex(tgt, tgt_re).to_numpy(zero_copy_only=False)
            | pc.equal(tgt, "NoDx").to_numpy(zero_copy_only=False)
        )
    )
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InputFileError(
            path,
            "malformed GEM line",
            line=int(line_no[i]),
            expected=f"{'ICD-10-CM' if direction == 'backward' else 'ICD-9-CM'} source, target or NoDx, "
            "flags of 5 digits (approximate, no map, combination, scenario, choice list)",
            found=repr(" ".join(parts[i].as_py())),
        )
    digits = [pc.cast(pc.utf8_slice_codeunits(flags, k, k + 1), pa.int8()) for k in range(5)]
    return pa.table(
        {
            "source": src,
            "target": pc.if_else(pc.equal(tgt, "NoDx"), pa.scalar(None, pa.string()), tgt),
            "flags": flags,
            **dict(zip(GEM_FLAGS, digits, strict=True)),
            "_file": _file_column(path, len(src)),
            "_line": pa.array(line_no),
        }
    )


def _gem_fields(path: Path) -> tuple[pa.ListArray, np.ndarray]:
    """The white-space separated fields of every non-blank line (3 each, or an error) and their line
    numbers."""
    try:
        raw = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=["line"], block_size=1 << 22),
            parse_options=pacsv.ParseOptions(
                delimiter="\x1f", quote_char=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={"line": pa.string()}, strings_can_be_null=False
            ),
        )
    except pa.ArrowInvalid as e:
        _locate_problem(path, 1)
        raise InputFileError(path, f"cannot read GEM file: {e}") from e
    lines = pc.utf8_rtrim(raw["line"], characters="\r\n \t")
    parts = pc.split_pattern_regex(pc.utf8_trim_whitespace(lines), r"\s+")
    n = pc.list_value_length(parts).to_numpy()
    line_no = np.arange(len(n), dtype=np.int64) + 1
    blank = pc.equal(lines, "").to_numpy(zero_copy_only=False)
    bad = (n != 3) & ~blank
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputFileError(
            path,
            "a GEM line must hold source code, target code and 5 flag digits",
            line=int(line_no[i]),
            expected="e.g. 'E0836   24950 10111' (19 characters, or white-space separated)",
            found=repr(lines[i].as_py()),
        )
    return parts.filter(pa.array(~blank)), line_no[~blank]


def read_tls_map(path: Path) -> pa.Table:
    """The US human-readable ICD-10-CM map (16 columns) as ExtendedMap rows (13 columns, typed)."""
    from .rf2_read import read_rf2_like

    t = read_tsv(path, TLS_COLUMNS, "a tls_Icd10cmHumanReadableMap file")
    return read_rf2_like(path, t.select([*COLUMNS["ExtendedMap"], "_line"]), "ExtendedMap")
