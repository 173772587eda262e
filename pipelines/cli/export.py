"""Export commands: ``export-embeddings`` (code vectors of a model or a program as Parquet and
projector TSVs)."""

from __future__ import annotations

import click

from pipelines.eval.export import MAX_PROGRAM_DIM, ExportConfig

from .options import INPUT_DIR, config_options, echo, force_option, handle_errors, verbosity_options


@click.command("export-embeddings")
@click.argument("source", metavar="MODEL_OR_PROGRAM", type=INPUT_DIR)
@click.argument("out", type=click.Path(file_okay=False))
@config_options(
    ExportConfig,
    exclude=["source", "out"],
    names={"vocabularies": "--vocabulary", "projector": "--projector/--no-projector"},
)
@force_option("Replace OUT when it holds an earlier export (anything else is never replaced).")
@verbosity_options
@handle_errors
def export_embeddings_cmd(source: str, out: str, force: bool, **kw) -> None:
    """Write the code vectors of MODEL_OR_PROGRAM to the folder OUT (embeddings.parquet).

    MODEL_OR_PROGRAM is a saved model folder (or the pretraining run holding model/; its program comes
    from --program or the model's program/ copy), or a program or release folder: a program exports its
    untrained base HRR composition (--dim, --seed; unit-length rows). --projector adds vectors.tsv,
    metadata.tsv and projector_config.pbtxt for TensorBoard's embedding projector.
    """
    dim = kw.get("dim")
    if dim is not None and not 1 <= dim <= MAX_PROGRAM_DIM:
        raise click.BadParameter(
            f"{dim} is not a dimension of a program's composition; expected 1 to {MAX_PROGRAM_DIM}",
            param_hint="'--dim'",
        )
    from pipelines.eval.export import export_embeddings, summary_lines

    echo("\n".join(summary_lines(export_embeddings(source=source, out=out, force=force, **kw))))


COMMANDS = (export_embeddings_cmd,)
