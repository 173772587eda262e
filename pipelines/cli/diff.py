"""`hrrbert diff`: compare two programs (and a model's vectors under each); see pipelines/ontology/diff.py."""

from __future__ import annotations

import click

from .options import INPUT_DIR, echo, force_option, handle_errors, verbosity_options


@click.command("diff")
@click.argument("old", type=INPUT_DIR)
@click.argument("new", type=INPUT_DIR)
@click.option(
    "--model",
    type=INPUT_DIR,
    default=None,
    help="A saved model folder (or its pretraining run) of OLD or NEW: also compare the vectors it composes "
    "under each program (vectors.parquet).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder to write the diff to (default: artifacts/diffs/<old_id>__<new_id>).",
)
@force_option("Replace --out when it holds an earlier diff (anything else is never replaced).")
@click.option(
    "--top", type=click.IntRange(min=0), default=10, show_default=True, help="Tokens to list in the summary."
)
@verbosity_options
@handle_errors
def diff_cmd(old: str, new: str, model: str | None, out: str | None, force: bool, top: int) -> None:
    """Compare the programs OLD and NEW (program or release folders) by key, never by id.

    Writes tokens.parquet (added, removed, changed, unchanged), edges.parquet (edges gained and lost),
    atoms.parquet, relations.parquet, mappings.parquet and diff.json (docs/diff-format.md). With --model,
    also the cosine per token between the vectors the model's trained atoms and relations compose under
    OLD and under NEW (the other program's new atoms and relations are zero), lowest first.
    """
    from pipelines.ontology.diff import diff_programs, summary_lines

    result = diff_programs(old, new, out=out, model=model, force=force)
    echo("\n".join(summary_lines(result, top=top)))


COMMANDS = (diff_cmd,)
