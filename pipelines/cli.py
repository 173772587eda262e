"""``hrrbert``: the user-facing command group (thin click layer; imports happen inside commands)."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """hrrbert: ontology-structured (HRR) embeddings for transformers over ICD codes."""


@main.command("sql")
@click.argument("program", type=click.Path(exists=True, file_okay=False))
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option("--max-rows", type=int, default=50, show_default=True, help="Rows printed in table format.")
def sql_cmd(program: str, query: str, fmt: str, max_rows: int) -> None:
    """Run read-only DuckDB SQL over a compiled PROGRAM folder.

    Views: atoms, relations, concepts, edges, slices, snomed_concepts, snomed_relationships,
    snomed_descriptions, icd_map (and the other graph/ tables).
    """
    from ontology_compiler import OntologyCompilerError
    from ontology_compiler.sql import format_result, run_sql

    try:
        result = run_sql(program, query)
    except OntologyCompilerError as e:
        raise click.ClickException(str(e)) from e
    click.echo(format_result(result, fmt=fmt, max_rows=max_rows))


@main.command("demo")
@click.option("--out", type=click.Path(file_okay=False), default="artifacts", show_default=True)
def demo_cmd(out: str) -> None:
    """Compile the bundled fixture release and query it (the full demo arrives with the data issue)."""
    from pipelines.demo import run_demo

    sys.exit(run_demo(out))
