"""The human summaries of a compile, as text (pure functions of a :class:`CompileResult`; no printing).

:func:`summary` picks :func:`owl_summary` for an OWL program and :func:`rf2_summary` otherwise;
:func:`coverage_table` is the per-vocabulary mapping table of the RF2 summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .manifest import CompileResult


def summary(result: CompileResult) -> str:
    """The summary printed after a compile, for either input kind."""
    is_owl = result.manifest["release"].get("type") == "OWL"
    return owl_summary(result) if is_owl else rf2_summary(result)


def rf2_summary(result: CompileResult) -> str:
    """The summary of an RF2 compile: release, tokens, atoms, relations, coverage, what was dropped."""
    m = result.manifest
    c, cov = m["counts"], m["coverage"]
    rel = m["release"]
    tokens = m["options"].get("tokens", "icd")
    lines = [
        f"release   {rel['name']} ({rel['type']}{', as of ' + rel['as_of'] if rel.get('as_of') else ''}; "
        f"package date {rel['date']}; namespaces {', '.join(rel['namespaces'])})",
        _tokens_line(m),
        *_table_lines(c),
        "max multiplicity per relation: "
        + ", ".join(f"{k} {v}" for k, v in sorted(c["max_multiplicity"].items(), key=lambda kv: -kv[1])[:12])
        + (" ..." if len(c["max_multiplicity"]) > 12 else ""),
        (
            f"coverage  {cov['codes']:,} tokens"
            if tokens != "snomed"
            else f"ICD maps  {cov['codes']:,} codes mapped"
        )
        + f" from {cov['codes_in_universe']:,} codes in the universe "
        f"({cov['codes_named_by_any_source']:,} named by a mapping source); "
        f"{cov.get('snomed_concepts_mapped', 0):,} SNOMED concepts",
        *coverage_table(cov),
        f"dropped   {c.get('descriptions_dropped_inactive_concept', 0):,} descriptions and "
        f"{c.get('relationships_dropped_inactive_concept', 0):,} relationships of inactive concepts; "
        f"{c.get('mapping_map_targets_redirected_by_association', 0):,} map targets redirected by "
        f"REPLACED BY / SAME AS, {c.get('mapping_map_targets_inactive_dropped', 0):,} inactive and "
        f"{c.get('mapping_map_targets_unknown_sctid', 0):,} unknown dropped",
    ]
    if c.get("ids_bad_check_digit") or c.get("ids_dropped_non_numeric"):
        lines.append(
            f"warnings  {c.get('ids_bad_check_digit', 0):,} SCTIDs with a bad check digit (kept), "
            f"{c.get('ids_dropped_non_numeric', 0):,} rows with a non-numeric id (dropped)"
        )
    if c.get("rows_effective_after_package_date"):
        lines.append(
            f"warnings  {c['rows_effective_after_package_date']:,} rows with an effectiveTime after their "
            "package's date (used as they are; the manifest's findings name the file and line)"
        )
    lines += release_warnings(c)
    return "\n".join([*lines, *_tail(result)])


def _tokens_line(m: dict) -> str:
    """What the tokens are: ICD codes by vocabulary, SNOMED concepts (``--tokens snomed``), or both."""
    c, cov, tokens = m["counts"], m["coverage"], m["options"].get("tokens", "icd")
    icd = f"{cov['codes']:,} ICD codes: " + ", ".join(
        f"{k} {v:,}" for k, v in cov["codes_by_vocabulary"].items()
    )
    snomed = f"{c.get('mapping_snomed_tokens', 0):,} SNOMED concepts"
    kinds = {"icd": icd, "snomed": snomed, "both": f"{icd}; {snomed}"}[tokens]
    return f"concepts  {c['concepts']:,} tokens ({kinds})"


# Counts of the release step that are printed when not zero: (manifest key, what they count).
RELEASE_WARNINGS = (
    ("descriptions_dropped_unknown_concept", "descriptions of a concept not in the release"),
    ("text_definitions_dropped_unknown_concept", "text definitions of a concept not in the release"),
    ("concrete_values_dropped_unknown_concept", "concrete values of a concept not in the release"),
    ("relationships_dropped_unknown_concept", "relationships from or to a concept not in the release"),
    ("relationships_dropped_unknown_type", "relationships whose type is not a concept of the release"),
    ("relationships_dropped_characteristic_type", "relationship rows of another characteristic type"),
)


def release_warnings(c: dict) -> list[str]:
    """The ``warnings`` lines for what the release step dropped beyond inactive content: every count of
    :data:`RELEASE_WARNINGS` that is not zero, and the identical repeated rows per file kind
    (``rows_duplicate_dropped_<kind>``)."""
    parts = [f"{c[k]:,} {what}" for k, what in RELEASE_WARNINGS if c.get(k)]
    dup = {
        k.removeprefix("rows_duplicate_dropped_"): v
        for k, v in c.items()
        if k.startswith("rows_duplicate_dropped_") and v
    }
    if dup:
        parts.append(
            f"{sum(dup.values()):,} identical repeated rows ("
            + ", ".join(f"{k} {v:,}" for k, v in sorted(dup.items()))
            + ")"
        )
    return [f"warnings  {p} (dropped)" for p in parts]


def coverage_table(cov: dict) -> list[str]:
    """Per ICD version: codes one-to-one, one-to-many, conditional, by chain, by fallback, unmapped.

    The categories are the keys of ``cov["totals"]``, in the order the mapping step wrote them.
    """
    categories = list(cov.get("totals", {}))
    rows = [f"  {'':<10}" + "".join(f"{c:>13}" for c in categories)]
    for v, d in cov.get("by_vocabulary", {}).items():
        rows.append(f"  {v:<10}" + "".join(f"{d.get(c, 0):>13,}" for c in categories))
    occ = cov.get("occurrences")
    if occ:
        rows.append(
            f"  occurrences lost: {occ['lost']:,} of {occ['total']:,} ({100 * occ['lost_share']:.2f} %)"
        )
    return rows


def owl_summary(result: CompileResult) -> str:
    """The summary of an OWL compile: ontology, classes and edges, text, tokens, atoms, relations."""
    m = result.manifest
    c, cov, rel = m["counts"], m["coverage"], m["release"]
    lines = [
        f"ontology  {rel['ontology_iri'] or '(no IRI)'}"
        + (f" version {rel['version_iri']}" if rel.get("version_iri") else "")
        + f" ({rel['format']})",
        f"classes   {cov['classes']:,} live ({c.get('classes_deprecated', 0):,} deprecated dropped); "
        f"is-a {c.get('is_a_edges', 0):,}, attribute edges {c.get('attribute_edges', 0):,} "
        f"({c.get('role_groups', 0):,} role groups), {c.get('object_properties', 0):,} object properties",
        f"text      {c.get('labels', 0):,} labels, {c.get('synonyms', 0):,} synonyms, "
        f"{c.get('classes_without_label', 0):,} classes without a label (IRI fragment used)",
        f"concepts  {cov['codes']:,} tokens ("
        + ", ".join(f"{k} {v:,}" for k, v in cov["codes_by_vocabulary"].items())
        + f") over {cov['classes_as_tokens']:,} classes, + {c['concepts'] - cov['codes']} special tokens",
        *_table_lines(c),
    ]
    if cov.get("codes_unmatched"):
        ex = ", ".join(u["entry"] for u in m.get("codes_unmatched", [])[:5])
        lines.append(f"warnings  {cov['codes_unmatched']:,} --codes entries match no class: {ex}")
    if m.get("findings"):
        lines.append("findings  " + "; ".join(m["findings"][:8]))
    return "\n".join([*lines, *_tail(result)])


def _table_lines(c: dict) -> list[str]:
    """Rows of the program's tables: atoms by kind, relations, edges, slices; the ICD hierarchy."""
    return [
        f"atoms     {c['atoms']:,} (" + ", ".join(f"{k} {v:,}" for k, v in c["atoms_by_kind"].items()) + ")",
        f"relations {c['relations']:,}   edges {c['edges']:,}   slices {c['slices']:,}",
        *_icd_lines(c),
    ]


def _icd_lines(c: dict) -> list[str]:
    """The ICD hierarchy's line: its nodes and edges, and per vocabulary how the tokens got their nodes."""
    h = c.get("icd_hierarchy")
    if not h:
        return []
    per_vocab = [
        f"{v} {d['tokens']:,} tokens ("
        + ", ".join(f"{k.replace('_', ' ')} {n:,}" for k, n in d["sources"].items())
        + ")"
        for v, d in h.items()
        if v != "edges" and d["tokens"]
    ]
    return [
        f"icd       {c['atoms_by_kind'].get('icd', 0):,} ICD nodes, {sum(h['edges'].values()):,} edges"
        + (": " + "; ".join(per_vocab) if per_vocab else "")
    ]


def _tail(result: CompileResult) -> list[str]:
    """The compile time (when known) and where the program is."""
    t = result.manifest.get("timings", {})
    time_line = [f"time      {t['total']:.2f} s"] if "total" in t else []
    written = "" if result.written else "   (up to date: identical inputs, nothing written)"
    return [*time_line, f"program   {result.path}{written}"]
