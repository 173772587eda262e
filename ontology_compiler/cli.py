"""``compile-ontology SRC``: parse the options, call :func:`ontology_compiler.front.compile_source`, print
the summary (:func:`ontology_compiler.summary.summary`), terminal control characters escaped
(:func:`ontology_compiler.printable.printable`; errors and log lines too).

Only the options given on the command line are passed on; the others keep the package's defaults
(shown by ``--help``). Which option applies to which format, and the errors for combinations, are the
package's (:mod:`ontology_compiler.front`). ``-v`` logs DEBUG, ``-q`` only warnings and errors and
prints just the program's path (:func:`ontology_compiler.logs.setup_logging`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from click.core import ParameterSource

from .errors import OntologyCompilerError
from .front import DEFAULT_OUT, FALLBACKS, FORMATS, RELEASES, compile_source
from .logs import setup_logging
from .printable import printable
from .rf2_schema import US_ENGLISH
from .snomed_tokens import TOKEN_KINDS
from .summary import summary


def _path_option(*decls: str, help: str, folder_ok: bool = True):
    """An option naming an existing file (or, with ``folder_ok``, a folder); default None."""
    return click.option(*decls, type=click.Path(exists=True, dir_okay=folder_ok), default=None, help=help)


@contextmanager
def _click_errors() -> Iterator[None]:
    """The errors the package raises on purpose (and ValueError: a bad option value) as click errors."""
    try:
        yield
    except (OntologyCompilerError, ValueError) as e:
        raise click.ClickException(printable(str(e))) from e


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("src", metavar="SRC", type=click.Path(exists=True))
@click.option(
    "--format",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="Input kind: rf2 (a release folder), owl (an .owl/.rdf/.owx/.nt file) or athena (an Athena "
    "vocabulary download); auto: owl for a file, athena for a folder with CONCEPT.csv and "
    "CONCEPT_RELATIONSHIP.csv.",
)
@click.option("--out", default=DEFAULT_OUT, show_default=True, help="Programs root folder.")
@click.option("--name", default=None, help="Release name (default: the folder's name).")
@click.option(
    "--as-of",
    default=None,
    metavar="YYYYMMDD",
    help="Resolve a Full release (or an Athena download's validity dates) at this date.",
)
@click.option(
    "--release",
    type=click.Choice(RELEASES),
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
@_path_option("--stopwords", folder_ok=False, help="Replace the stopword list.")
@_path_option(
    "--map-policy",
    folder_ok=False,
    help="Replace the shipped mapping policy (ontology_compiler/data/map_policy.toml).",
)
@_path_option("--omop", help="Folder with OMOP CONCEPT.csv and CONCEPT_RELATIONSHIP.csv.")
@_path_option("--nlm-icd9", help="Folder with NLM ICD9CM_SNOMED_MAP_1TO1/1TOM files.")
@_path_option("--gem", help="Folder with CMS *_I10gem.txt / *_I9gem.txt.")
@_path_option("--icd10cm-map", help="A tls_Icd10cmHumanReadableMap_*.tsv file.")
@_path_option(
    "--codes",
    folder_ok=False,
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
@_path_option(
    "--code-counts",
    folder_ok=False,
    help="CSV icd_version,icd_code,count: report the share of code occurrences lost.",
)
@click.option(
    "--fallback",
    type=click.Choice(FALLBACKS),
    default="none",
    show_default=True,
    help="icd: unmapped codes get their title words and nearest mapped ICD ancestor's concepts.",
)
@click.option(
    "--tokens",
    type=click.Choice(TOKEN_KINDS),
    default="icd",
    show_default=True,
    help="What becomes a token: ICD codes, SNOMED concepts themselves (below --snomed-root, or those "
    "--concept-set names), or both.",
)
@click.option(
    "--snomed-root",
    "snomed_roots",
    multiple=True,
    type=int,
    metavar="SCTID",
    help="With --tokens snomed/both: every active concept below this one becomes a token (repeatable; "
    "default 404684003 Clinical finding).",
)
@_path_option(
    "--concept-set",
    folder_ok=False,
    help="With --tokens snomed/both: a file of SCTIDs (one per line) that become tokens.",
)
@click.option(
    "--package",
    "packages",
    multiple=True,
    metavar="NAMESPACE_YYYYMMDD",
    help="The package to read where SRC holds several of one namespace with different dates, "
    "e.g. INT_20220531 (repeatable).",
)
@click.option(
    "--icd-hierarchy/--no-icd-hierarchy",
    default=True,
    show_default=True,
    help="Bind each ICD token to the ICD-10-CM / ICD-9-CM chapter, block or section, category and "
    "subcategory above its code (atoms of kind icd, relations of kind icd_hierarchy).",
)
@click.option("--stated", is_flag=True, help="Use stated instead of inferred relationships.")
@click.option("--strict", is_flag=True, help="Bad SCTIDs (non-numeric, bad check digit) are fatal.")
@click.option("-v", "--verbose", is_flag=True, help="Log DEBUG (default: INFO).")
@click.option(
    "-q", "--quiet", is_flag=True, help="Log only warnings and errors; print only the program's path."
)
@click.version_option(package_name="hrrbert", prog_name="compile-ontology")
@click.pass_context
def main(ctx: click.Context, src: str, verbose: bool, quiet: bool, **options) -> None:
    """Compile SRC into a versioned Parquet HRR program.

    SRC is a SNOMED CT RF2 release folder (--format rf2), an OWL ontology file (--format owl: RDF/XML,
    OWL/XML or N-Triples; tokens from --codes, --code-property, or every class), or an Athena vocabulary
    download (--format athena: CONCEPT.csv, CONCEPT_RELATIONSHIP.csv, ...; ICD tokens through Maps to).
    """
    defaults = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    given = {k: v for k, v in options.items() if ctx.get_parameter_source(k) not in defaults}
    with _click_errors():
        setup_logging(verbose, quiet)
        result = compile_source(src, **given)
    click.echo(printable(str(result.path) if quiet else summary(result)))
