"""Data commands: ``prepare`` (EHR -> tokenized dataset), ``sql`` (query a program), ``export-owl``,
``export-meds`` (a source as a MEDS dataset)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any

import click

from ontology_compiler.api import SQL_DEFAULT_MEMORY_LIMIT, SQL_DEFAULT_THREADS, SQL_DEFAULT_TIMEOUT
from pipelines.data.config import UNKNOWN_CODES, PrepareConfig
from pipelines.data.readers import READERS, Reader
from pipelines.data.splits import SplitOptions
from pipelines.demo.defaults import DEMO_PATIENTS, DEMO_SIZES

from .options import (
    INPUT_DIR,
    config_options,
    echo,
    force_option,
    handle_errors,
    program_option,
    seed_option,
    verbosity_options,
)

F = Callable[..., Any]
SCALED = "(default: the paper's {} scaled to the cohort)"
EXPORTABLE = tuple(r for r in READERS.values() if r.meds_export)  # the sources export-meds writes


def source_options(
    readers: Iterable[Reader], purpose: str = "", *, reader_options: bool = False
) -> Callable[[F], F]:
    """One folder option per reader of the registry (``--mimic``, ``--eicu``, ...; help: the reader's, with
    ``purpose`` appended), given to the command as one dict ``sources`` (option keyword -> folder or None).
    With ``reader_options``, also each reader's own options (``--omop-codes``, ...; after all the source
    options), in the same dict by their keywords (``omop_codes``)."""
    readers = list(readers)
    extra = [(r, o) for r in readers for o in r.options] if reader_options else []

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kw: Any) -> Any:
            kw["sources"] = {r.param: kw.pop(r.param) for r in readers}
            kw["sources"].update({r.option_param(o): kw.pop(r.option_param(o)) for r, o in extra})
            return fn(*args, **kw)

        for r, o in reversed(extra):
            kind = click.Choice(o.choices) if o.choices else INPUT_DIR if o.path else str
            run = click.option(
                r.option_flag(o),
                r.option_param(o),
                type=kind,
                default=o.default,
                show_default=o.default is not None,
                help=o.help,
            )(run)
        for r in reversed(readers):
            text = f"{r.help.removesuffix('.')} {purpose}." if purpose else r.help
            where = click.Path(exists=True) if r.file_ok else INPUT_DIR
            run = click.option(r.option, r.param, type=where, help=text)(run)
        return run

    return deco


def choice_option(cls: type, name: str, choices: tuple[str, ...]) -> Callable[[F], F]:
    """The option of the config field ``name`` whose values are ``choices``
    (default and help: the field's)."""
    (f,) = (f for f in dataclasses.fields(cls) if f.name == name)
    return click.option(
        "--" + name.replace("_", "-"),
        type=click.Choice(choices),
        default=f.default,
        show_default=True,
        help=f.metadata["help"],
    )


@click.command("prepare")
@source_options(READERS.values(), reader_options=True)
@click.option(
    "--demo", is_flag=True, help="Build the demo release, compile it, generate the synthetic cohort."
)
@program_option(required=False)
@config_options(PrepareConfig, include=["out", "name", "max_len", "max_visits"], group="config")
@choice_option(PrepareConfig, "unknown", UNKNOWN_CODES)
@config_options(
    SplitOptions,
    exclude=["seed"],
    group="splits",
    help={
        "finetune_train": "mortality fine-tuning train patients " + SCALED.format("13k of 190k"),
        "finetune_val": "fine-tuning validation patients " + SCALED.format("2k of 190k"),
        "test": "test patients (default: min(666, 5 %))",
        "disease_train": "subset of --finetune-train flagged for the disease task "
        + SCALED.format("4.5k of 190k"),
        "disease_val": "subset of --finetune-val flagged for the disease task "
        + SCALED.format("500 of 190k"),
        "rood_max_patients": "a held-out code occurs in at most this many patients "
        "(default: max(3, patients // 1000))",
        "rood_unseen_patients": "hold out the codes of whole patients (codes all rare) "
        "until this many ROOD patients "
        "have mostly held-out codes (default: 100 per 190k patients, at least 1; 0: off)",
    },
)
@click.option(
    "--hold-out",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Parquet or CSV file with columns vocabulary, code: hold these codes out (the ROOD split) "
    "instead of choosing them; --demo: default the cohort's reserved codes.",
)
@seed_option(
    help="Seed of the patient splits and of the held-out (ROOD) codes; with --demo also of the cohort."
)
@click.option(
    "--demo-size",
    type=click.Choice(DEMO_SIZES),
    default="default",
    show_default=True,
    help="--demo: the demo release's size (small is for tests).",
)
@click.option(
    "--demo-patients",
    type=int,
    default=DEMO_PATIENTS,
    show_default=True,
    help="--demo: synthetic cohort size.",
)
@click.option(
    "--artifacts",
    type=click.Path(file_okay=False),
    default="artifacts",
    show_default=True,
    help="Where --demo writes releases/, programs/ and ehr/.",
)
@verbosity_options
@handle_errors
def prepare_cmd(
    sources: dict,
    config: dict,
    splits: dict,
    demo: bool,
    program: str | None,
    unknown: str,
    hold_out: str | None,
    seed: int,
    demo_size: str,
    demo_patients: int,
    artifacts: str,
) -> None:
    """Read EHR diagnoses, tokenize them against a program and write a tokenized dataset."""
    from pipelines.data.prepare import describe, prepare

    if not demo:
        echo(
            describe(
                prepare(
                    program=program,
                    seed=seed,
                    splits=SplitOptions(seed=seed, **splits),
                    unknown=unknown,
                    hold_out=hold_out,
                    **config,
                    **sources,
                )
            )
        )
        return
    chosen = [r.option_flag(o) for r in READERS.values() for o in r.options
              if sources[r.option_param(o)] not in (None, o.default)]  # fmt: skip
    if any(sources[r.param] for r in READERS.values()) or chosen or program:
        drop = "/".join([r.option for r in READERS.values()] + ["--program"])
        also = f" (and {', '.join(chosen)})" if chosen else ""
        raise click.ClickException(f"--demo builds its own release, program and cohort; drop {drop}{also}")
    from pipelines.demo.prepare import prepare_demo

    results = prepare_demo(
        artifacts=artifacts,
        out=config["out"],
        size=demo_size,
        n_patients=demo_patients,
        seed=seed,
        splits=splits,
        max_len=config["max_len"],
        max_visits=config["max_visits"],
        unknown=unknown,
        hold_out=hold_out,
    )
    echo(describe(results))


# run_sql's default bounds, from a module without DuckDB (``hrrbert --help`` loads none)
SQL_TIMEOUT, SQL_MEMORY_LIMIT, SQL_THREADS = (
    SQL_DEFAULT_TIMEOUT,
    SQL_DEFAULT_MEMORY_LIMIT,
    SQL_DEFAULT_THREADS,
)


def _memory_limit(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A ``--memory-limit`` DuckDB accepts (``2GB``, ``512MB``, ...), else a usage error naming the option."""
    import duckdb

    try:
        duckdb.connect(":memory:", config={"memory_limit": value}).close()
    except duckdb.Error as e:
        raise click.BadParameter(f"{value!r} is not a DuckDB memory limit (e.g. 2GB, 512MB): {e}") from e
    return value


@click.command("sql")
@click.argument("program", type=INPUT_DIR)
@click.argument("query")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="table (aligned, for reading), csv (a header line, then the rows) "
    "or json (JSON Lines: one object per row).",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="Rows fetched and printed, in every format (0: all); more are not fetched and the cut is reported.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=SQL_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="Interrupt the query after this many seconds (0: no limit).",
)
@click.option(
    "--memory-limit",
    default=SQL_MEMORY_LIMIT,
    show_default=True,
    callback=_memory_limit,
    help="DuckDB memory_limit for the query (e.g. 512MB, 8GB).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=SQL_THREADS,
    show_default=True,
    help="DuckDB threads for the query.",
)
@verbosity_options
@handle_errors
def sql_cmd(
    program: str, query: str, fmt: str, max_rows: int, timeout: float, memory_limit: str, threads: int
) -> None:
    """Run read-only DuckDB SQL over a compiled PROGRAM folder.

    Views: atoms, relations, concepts, edges, slices, snomed_concepts, snomed_relationships,
    snomed_descriptions, icd_map (and the other graph/ tables). JSON prints NaN and infinity as null.
    """
    from ontology_compiler.api import format_result, run_sql

    result = run_sql(
        program, query, max_rows=max_rows, timeout=timeout, memory_limit=memory_limit, threads=threads
    )
    click.echo(format_result(result, fmt=fmt, max_rows=max_rows))
    if result.truncated and fmt != "table":  # the table says it in its last line; CSV/JSON stay clean
        click.echo(
            f"hrrbert sql: output cut at --max-rows {max_rows}; more rows were not fetched "
            "(--max-rows 0 prints all)",
            err=True,
        )


@click.command("export-owl")
@click.argument("program", type=INPUT_DIR)
@click.argument("out", type=click.Path(dir_okay=False))
@force_option("Overwrite OUT when it exists.")
@click.option(
    "--scope",
    type=click.Choice(["program", "all"]),
    default="program",
    show_default=True,
    help="program: concepts the program uses and their ancestors; all: every graph concept.",
)
@click.option(
    "--base-iri", default=None, help="Ontology IRI (default https://hrrbert.invalid/program/<id>/)."
)
@verbosity_options
@handle_errors
def export_owl_cmd(program: str, out: str, force: bool, scope: str, base_iri: str | None) -> None:
    """Write a compiled PROGRAM as an OWL ontology (RDF/XML) to OUT, e.g. for Protégé."""
    from ontology_compiler.api import export_owl, resolve_program

    from .summaries import owl_summary

    r = export_owl(resolve_program(program), out, force=force, scope=scope, base_iri=base_iri)
    echo(owl_summary(r))


@click.command("export-athena")
@click.argument("program", type=INPUT_DIR)
@click.argument("out", type=click.Path(file_okay=False))
@force_option("Replace OUT when it exists.")
@verbosity_options
@handle_errors
def export_athena_cmd(program: str, out: str, force: bool) -> None:
    """Write a compiled PROGRAM's SNOMED release and ICD tokens as an Athena vocabulary download in the
    folder OUT (CONCEPT.csv, CONCEPT_RELATIONSHIP.csv, ...; `compile-ontology OUT` reads it back)."""
    from ontology_compiler.api import export_athena, resolve_program

    r = export_athena(resolve_program(program), out, force=force)
    c = r.counts
    echo(
        f"wrote {r.path}: {c['snomed_concepts']:,} SNOMED and {c['icd_concepts']:,} ICD concepts, "
        f"{c['relationships']:,} relationships, {c['synonyms']:,} synonyms, {c['ancestors']:,} ancestor rows"
        + (
            f"; {c['attribute_rows_not_expressible']:,} relationships of attribute types with no OHDSI id "
            f"({', '.join(map(str, c['attribute_types_not_expressible']))}) not written"
            if c["attribute_rows_not_expressible"]
            else ""
        )
    )


@click.command("export-meds")
@click.argument("out", type=click.Path(file_okay=False))
@source_options(EXPORTABLE, "to export")
@click.option(
    "--demo", is_flag=True, help="Export the demo's synthetic MIMIC-IV-layout cohort (built if missing)."
)
@click.option(
    "--dataset-name", default=None, help="dataset_name in metadata/dataset.json (default: <kind>-<folder>)."
)
@click.option(
    "--labels/--no-labels",
    default=True,
    show_default=True,
    help="Also write the task labels/mortality_6m/ (MEDS label schema) for finetune --labels.",
)
@click.option(
    "--splits-from",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="A dataset prepared from this source: metadata/subject_splits.parquet carries its splits as MEDS's "
    "train / tuning / held_out (default: the source's own, else a random 80/10/10 by --seed; --demo: the "
    "demo's MIMIC-IV dataset).",
)
@force_option("Replace OUT when it holds an earlier export (anything else is never replaced).")
@seed_option(help="Seed of the demo cohort (--demo) and of the random 80/10/10 splits.")
@click.option(
    "--demo-size",
    type=click.Choice(DEMO_SIZES),
    default="default",
    show_default=True,
    help="--demo: the demo release's size (small is for tests).",
)
@click.option(
    "--demo-patients",
    type=int,
    default=DEMO_PATIENTS,
    show_default=True,
    help="--demo: synthetic cohort size.",
)
@click.option(
    "--artifacts",
    type=click.Path(file_okay=False),
    default="artifacts",
    show_default=True,
    help="Where --demo finds or writes releases/, programs/ and ehr/.",
)
@verbosity_options
@handle_errors
def export_meds_cmd(
    out: str,
    sources: dict,
    demo: bool,
    dataset_name: str | None,
    labels: bool,
    splits_from: str | None,
    force: bool,
    seed: int,
    demo_size: str,
    demo_patients: int,
    artifacts: str,
) -> None:
    """Write a source as a MEDS 0.4 dataset in OUT (data/, metadata/, labels/), e.g. for MEDS tools or
    `prepare --meds`. eICU has no absolute times and cannot be exported."""
    from pipelines.data.export_meds import describe, export_meds

    given = [(r.name, sources[r.param]) for r in EXPORTABLE if sources[r.param] is not None]
    if len(given) + demo != 1:
        raise click.ClickException(f"give exactly one of {', '.join(r.option for r in EXPORTABLE)} or --demo")
    if demo and splits_from is not None:
        raise click.ClickException("--demo takes its splits from the demo's dataset: leave out --splits-from")
    options = {"name": dataset_name, "labels": labels, "force": force}
    if demo:
        from pipelines.demo.prepare import export_demo_meds

        result = export_demo_meds(
            out, artifacts=artifacts, size=demo_size, n_patients=demo_patients, seed=seed, **options
        )
    else:
        ((kind, source),) = given
        result = export_meds(kind, source, out, splits_from=splits_from, seed=seed, **options)
    echo(describe(result))


COMMANDS = (prepare_cmd, sql_cmd, export_owl_cmd, export_athena_cmd, export_meds_cmd)
