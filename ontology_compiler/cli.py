"""``compile-ontology SRC_DIR``: a thin click layer over :func:`ontology_compiler.compile_ontology`."""

from __future__ import annotations

import logging

import click

US_ENGLISH = 900000000000509007


def summary(result) -> str:
    """The human summary printed after a compile."""
    m = result.manifest
    c, cov = m["counts"], m["coverage"]
    rel = m["release"]
    lines = [
        f"release   {rel['name']} ({rel['type']}{', as of ' + rel['as_of'] if rel.get('as_of') else ''}; "
        f"package date {rel['date']}; namespaces {', '.join(rel['namespaces'])})",
        f"concepts  {c['concepts']:,} tokens ({cov['codes']:,} ICD codes: "
        + ", ".join(f"{k} {v:,}" for k, v in cov["codes_by_vocabulary"].items())
        + ")",
        f"atoms     {c['atoms']:,} (" + ", ".join(f"{k} {v:,}" for k, v in c["atoms_by_kind"].items()) + ")",
        f"relations {c['relations']:,}   edges {c['edges']:,}   slices {c['slices']:,}",
        "max multiplicity per relation: "
        + ", ".join(f"{k} {v}" for k, v in sorted(c["max_multiplicity"].items(), key=lambda kv: -kv[1])[:12])
        + (" ..." if len(c["max_multiplicity"]) > 12 else ""),
        f"coverage  {cov['codes']:,} tokens from {cov['codes_in_universe']:,} codes in the universe "
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
    t = m.get("timings", {})
    if "total" in t:
        lines.append(f"time      {t['total']:.2f} s")
    lines.append(
        f"program   {result.path}"
        + ("" if result.written else "   (up to date: identical inputs, nothing written)")
    )
    return "\n".join(lines)


def coverage_table(cov: dict) -> list[str]:
    """Per ICD version: codes one-to-one, one-to-many, conditional, by chain, by fallback, unmapped."""
    cats = ("one_to_one", "one_to_many", "conditional", "chain", "fallback", "unmapped")
    rows = [f"  {'':<10}" + "".join(f"{c:>13}" for c in cats)]
    for v, d in cov.get("by_vocabulary", {}).items():
        rows.append(f"  {v:<10}" + "".join(f"{d.get(c, 0):>13,}" for c in cats))
    occ = cov.get("occurrences")
    if occ:
        rows.append(
            f"  occurrences lost: {occ['lost']:,} of {occ['total']:,} ({100 * occ['lost_share']:.2f} %)"
        )
    return rows


def owl_summary(result) -> str:
    """The human summary printed after an OWL compile."""
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
        f"atoms     {c['atoms']:,} (" + ", ".join(f"{k} {v:,}" for k, v in c["atoms_by_kind"].items()) + ")",
        f"relations {c['relations']:,}   edges {c['edges']:,}   slices {c['slices']:,}",
    ]
    if cov.get("codes_unmatched"):
        ex = ", ".join(u["entry"] for u in m.get("codes_unmatched", [])[:5])
        lines.append(f"warnings  {cov['codes_unmatched']:,} --codes entries match no class: {ex}")
    if m.get("findings"):
        lines.append("findings  " + "; ".join(m["findings"][:8]))
    t = m.get("timings", {})
    if "total" in t:
        lines.append(f"time      {t['total']:.2f} s")
    lines.append(
        f"program   {result.path}"
        + ("" if result.written else "   (up to date: identical inputs, nothing written)")
    )
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("src_dir", metavar="SRC", type=click.Path(exists=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "rf2", "owl"]),
    default="auto",
    show_default=True,
    help="Input kind: rf2 (a release folder) or owl (an .owl/.rdf/.owx/.nt file); auto: owl for a file.",
)
@click.option("--out", default="artifacts/programs", show_default=True, help="Programs root folder.")
@click.option("--name", default=None, help="Release name (default: the folder's name).")
@click.option(
    "--as-of", "as_of", default=None, metavar="YYYYMMDD", help="Resolve a Full release at this date."
)
@click.option(
    "--release",
    type=click.Choice(["auto", "snapshot", "full"]),
    default="auto",
    show_default=True,
    help="Which release type to read (auto: Snapshot when present).",
)
@click.option(
    "--language",
    "languages",
    multiple=True,
    type=int,
    default=(US_ENGLISH,),
    show_default=True,
    help="Language refset id(s) for synonyms (repeatable; the first gives labels). GB: 900000000000508004.",
)
@click.option(
    "--stopwords",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Replace the stopword list.",
)
@click.option(
    "--map-policy",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Replace the shipped mapping policy (ontology_compiler/data/map_policy.toml).",
)
@click.option(
    "--omop",
    type=click.Path(exists=True),
    default=None,
    help="Folder with OMOP CONCEPT.csv and CONCEPT_RELATIONSHIP.csv.",
)
@click.option(
    "--nlm-icd9",
    type=click.Path(exists=True),
    default=None,
    help="Folder with NLM ICD9CM_SNOMED_MAP_1TO1/1TOM files.",
)
@click.option(
    "--gem", type=click.Path(exists=True), default=None, help="Folder with CMS *_I10gem.txt / *_I9gem.txt."
)
@click.option(
    "--icd10cm-map",
    type=click.Path(exists=True),
    default=None,
    help="A tls_Icd10cmHumanReadableMap_*.tsv file.",
)
@click.option(
    "--codes",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Code universe: MIMIC-IV d_icd_diagnoses.csv[.gz] or a version,code list. "
    "OWL: a file of class IRIs or CURIEs (one per line) that become tokens.",
)
@click.option(
    "--code-property",
    default=None,
    metavar="PROP",
    help="OWL: annotation property (e.g. oboInOwl:hasDbXref) whose PREFIX:CODE values choose the tokens.",
)
@click.option(
    "--code-prefix",
    "code_prefixes",
    multiple=True,
    metavar="PREFIX",
    help="OWL: accept only these --code-property prefixes (repeatable; e.g. ICD10CM, ICD-10, SNOMEDCT_US).",
)
@click.option(
    "--code-counts",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="CSV icd_version,icd_code,count: report the share of code occurrences lost.",
)
@click.option(
    "--fallback",
    type=click.Choice(["none", "icd"]),
    default="none",
    show_default=True,
    help="icd: unmapped codes get their title words and nearest mapped ICD ancestor's concepts.",
)
@click.option("--stated", is_flag=True, help="Use stated instead of inferred relationships.")
@click.option("--strict", is_flag=True, help="Bad SCTIDs (non-numeric, bad check digit) are fatal.")
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def main(src_dir, fmt, out, name, as_of, release, languages, stopwords, map_policy, omop, nlm_icd9, gem,
         icd10cm_map, codes, code_property, code_prefixes, code_counts, fallback, stated, strict, verbose,
         quiet) -> None:  # fmt: skip
    """Compile SRC into a versioned Parquet HRR program.

    SRC is a SNOMED CT RF2 release folder (--format rf2) or an OWL ontology file (--format owl: RDF/XML,
    OWL/XML or N-Triples; tokens from --codes, --code-property, or every class).
    """
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    from pathlib import Path

    from . import OntologyCompilerError, compile_ontology

    is_file = Path(src_dir).is_file()
    if fmt == "auto":
        fmt = "owl" if is_file else "rf2"
    if (fmt == "owl") != is_file:
        raise click.BadParameter(
            f"--format {fmt} needs {'an OWL file' if fmt == 'owl' else 'an RF2 release folder'}",
            param_hint="SRC",
        )
    if fmt == "rf2" and (code_property or code_prefixes):
        raise click.UsageError("--code-property/--code-prefix apply to --format owl only")
    rf2_only = {"--as-of": as_of, "--map-policy": map_policy, "--omop": omop, "--nlm-icd9": nlm_icd9, "--gem": gem,
                "--icd10cm-map": icd10cm_map, "--code-counts": code_counts, "--stated": stated, "--strict": strict,
                "--fallback": fallback != "none"}  # fmt: skip
    if fmt == "owl" and any(rf2_only.values()):
        raise click.UsageError(
            f"{', '.join(k for k, v in rf2_only.items() if v)}: RF2 options, not for --format owl"
        )
    if fmt == "owl":
        from .owl_input import compile_owl

        try:
            result = compile_owl(src_dir, codes=codes, out=out, name=name, stopwords=stopwords,
                                 code_property=code_property, code_prefixes=tuple(code_prefixes) or None)  # fmt: skip
        except (OntologyCompilerError, ValueError) as e:
            raise click.ClickException(str(e)) from e
        click.echo(str(result.path) if quiet else owl_summary(result))
        return
    try:
        result = compile_ontology(
            src_dir,
            out=out,
            name=name,
            as_of=as_of,
            release=release,
            languages=tuple(languages),
            stopwords=stopwords,
            stated=stated,
            strict=strict,
            map_policy=map_policy,
            omop=omop,
            nlm_icd9=nlm_icd9,
            gem=gem,
            icd10cm_map=icd10cm_map,
            codes=codes,
            code_counts=code_counts,
            fallback=fallback,
        )
    except OntologyCompilerError as e:
        raise click.ClickException(str(e)) from e
    if not quiet:
        click.echo(summary(result))
    else:
        click.echo(str(result.path))
