"""Data commands: ``prepare`` (EHR -> tokenized dataset), ``sql`` (query a program), ``export-owl``,
``export-meds`` (a source as a MEDS dataset)."""

from __future__ import annotations

import click

from pipelines.data.splits import SplitOptions
from pipelines.demo.defaults import DEMO_PATIENTS, DEMO_SIZES, demo_split_sizes

from .options import (
    INPUT_DIR,
    config_options,
    force_option,
    handle_errors,
    name_option,
    out_option,
    program_option,
    seed_option,
    verbosity_options,
)

SCALED = "(default: the paper's {} scaled to the cohort)"


@click.command("prepare")
@click.option("--mimic", type=INPUT_DIR, help="MIMIC-IV root (holding hosp/).")
@click.option("--eicu", type=INPUT_DIR, help="eICU-CRD folder (patient.csv.gz, ...).")
@click.option("--meds", type=INPUT_DIR, help="MEDS root (data/, metadata/).")
@click.option(
    "--demo", is_flag=True, help="Build the demo release, compile it, generate the synthetic cohort."
)
@program_option(required=False)
@out_option("artifacts/datasets")
@name_option("Dataset name: one folder under --out (default: <source kind>-<input folder name>).")
@click.option(
    "--max-len", type=int, default=128, show_default=True, help="Tokens per sequence, [CLS] included."
)
@click.option(
    "--max-visits", type=int, default=100, show_default=True, help="Visits (segments) per sequence."
)
@click.option("--unknown", type=click.Choice(["drop", "unk"]), default="drop", show_default=True,
              help="Codes not in the program: drop them (counted) or map them to [UNK].")  # fmt: skip
@config_options(SplitOptions, exclude=["seed"], group="splits", help={
    "finetune_train": "mortality fine-tuning train patients " + SCALED.format("13k of 190k"),
    "finetune_val": "fine-tuning validation patients " + SCALED.format("2k of 190k"),
    "test": "test patients (default: min(666, 5 %))",
    "disease_train": "subset of --finetune-train flagged for the disease task " + SCALED.format("4.5k of 190k"),
    "disease_val": "subset of --finetune-val flagged for the disease task " + SCALED.format("500 of 190k"),
    "rood_max_patients": "a held-out code occurs in at most this many patients (default: max(3, patients // 1000))",
    "rood_unseen_patients": "hold out the codes of whole patients (codes all rare) until this many ROOD patients "
                            "have mostly held-out codes (default: 100 per 190k patients, at least 1; 0: off)",
})  # fmt: skip
@click.option("--hold-out", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Parquet or CSV file with columns vocabulary, code: hold these codes out (the ROOD split) "
                   "instead of choosing them; --demo: default the cohort's reserved codes.")  # fmt: skip
@seed_option()
@click.option("--demo-size", type=click.Choice(DEMO_SIZES), default="default", show_default=True)
@click.option("--demo-patients", type=int, default=DEMO_PATIENTS, show_default=True)
@click.option("--artifacts", type=click.Path(file_okay=False), default="artifacts", show_default=True,
              help="Where --demo writes releases/, programs/ and ehr/.")  # fmt: skip
@verbosity_options
@handle_errors
def prepare_cmd(splits: dict, demo: bool, demo_size: str, demo_patients: int, artifacts: str, **kw) -> None:
    """Read EHR diagnoses, tokenize them against a program and write a tokenized dataset."""
    from pipelines.data.prepare import describe, prepare

    if demo:  # the demo's split sizes where none is given
        splits = {
            **splits,
            **{k: v for k, v in demo_split_sizes(demo_patients).items() if splits.get(k) is None},
        }
    opts = SplitOptions(seed=kw["seed"], **splits)
    if not demo:
        click.echo(describe(prepare(splits=opts, **kw)))
        return
    if kw["mimic"] or kw["eicu"] or kw["meds"] or kw["program"]:
        raise click.ClickException(
            "--demo builds its own release, program and cohort; drop --mimic/--eicu/--meds/--program"
        )
    from pipelines.demo.prepare import prepare_demo

    results = prepare_demo(artifacts=artifacts, out=kw["out"], size=demo_size, n_patients=demo_patients,
                           seed=kw["seed"], splits=opts, max_len=kw["max_len"], max_visits=kw["max_visits"],
                           unknown=kw["unknown"], hold_out=kw["hold_out"])  # fmt: skip
    click.echo(describe(results))


@click.command("sql")
@click.argument("program", type=INPUT_DIR)
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option("--max-rows", type=int, default=50, show_default=True, help="Rows printed in table format.")
@verbosity_options
@handle_errors
def sql_cmd(program: str, query: str, fmt: str, max_rows: int) -> None:
    """Run read-only DuckDB SQL over a compiled PROGRAM folder.

    Views: atoms, relations, concepts, edges, slices, snomed_concepts, snomed_relationships,
    snomed_descriptions, icd_map (and the other graph/ tables).
    """
    from ontology_compiler.sql import format_result, run_sql

    click.echo(format_result(run_sql(program, query), fmt=fmt, max_rows=max_rows))


@click.command("export-owl")
@click.argument("program", type=INPUT_DIR)
@click.argument("out", type=click.Path(dir_okay=False))
@force_option("Overwrite OUT when it exists.")
@click.option("--scope", type=click.Choice(["program", "all"]), default="program", show_default=True,
              help="program: concepts the program uses and their ancestors; all: every graph concept.")  # fmt: skip
@click.option(
    "--base-iri", default=None, help="Ontology IRI (default https://hrrbert.invalid/program/<id>/)."
)
@verbosity_options
@handle_errors
def export_owl_cmd(program: str, out: str, force: bool, scope: str, base_iri: str | None) -> None:
    """Write a compiled PROGRAM as an OWL ontology (RDF/XML) to OUT, e.g. for Protégé."""
    from ontology_compiler.owl_export import export_owl
    from ontology_compiler.sql import resolve_program

    from .summaries import owl_summary

    r = export_owl(resolve_program(program), out, force=force, scope=scope, base_iri=base_iri)
    click.echo(owl_summary(r))


@click.command("export-meds")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--mimic", type=INPUT_DIR, help="MIMIC-IV root (holding hosp/) to export.")
@click.option("--meds", type=INPUT_DIR, help="MEDS root to export again (normalised diagnosis codes).")
@click.option(
    "--demo", is_flag=True, help="Export the demo's synthetic MIMIC-IV-layout cohort (built if missing)."
)
@click.option(
    "--dataset-name", default=None, help="dataset_name in metadata/dataset.json (default: <kind>-<folder>)."
)
@click.option("--labels/--no-labels", default=True, show_default=True,
              help="Also write the task labels/mortality_6m/ (MEDS label schema) for finetune --labels.")  # fmt: skip
@force_option("Replace OUT when it holds an earlier export (anything else is never replaced).")
@seed_option(help="Seed of the demo release and cohort (--demo).")
@click.option("--demo-size", type=click.Choice(DEMO_SIZES), default="default", show_default=True)
@click.option("--demo-patients", type=int, default=DEMO_PATIENTS, show_default=True)
@click.option("--artifacts", type=click.Path(file_okay=False), default="artifacts", show_default=True,
              help="Where --demo finds or writes releases/, programs/ and ehr/.")  # fmt: skip
@verbosity_options
@handle_errors
def export_meds_cmd(out: str, mimic: str | None, meds: str | None, demo: bool, dataset_name: str | None,
                    labels: bool, force: bool, seed: int, demo_size: str, demo_patients: int,
                    artifacts: str) -> None:  # fmt: skip
    """Write a source as a MEDS 0.4 dataset in OUT (data/, metadata/, labels/), e.g. for MEDS tools or
    `prepare --meds`. eICU has no absolute times and cannot be exported."""
    from pathlib import Path

    from pipelines.data.export_meds import describe, export_meds

    given = [(k, p) for k, p in (("mimic-iv", mimic), ("meds", meds)) if p is not None]
    if len(given) + demo != 1:
        raise click.ClickException("give exactly one of --mimic, --meds or --demo")
    if demo:
        from ontology_compiler import compile_ontology
        from pipelines.demo.prepare import ensure_cohort, ensure_demo_release

        art = Path(artifacts)  # the release, program and cohort prepare --demo uses
        release = ensure_demo_release(
            art / "releases" / f"demo_icd10cm_{demo_size}", size=demo_size, seed=seed
        )
        program = compile_ontology(release, out=art / "programs").path
        given = [("mimic-iv", ensure_cohort(art / "ehr", program, n_patients=demo_patients, seed=seed))]
    ((kind, source),) = given
    click.echo(describe(export_meds(kind, source, out, name=dataset_name, labels=labels, force=force)))


COMMANDS = (prepare_cmd, sql_cmd, export_owl_cmd, export_meds_cmd)
