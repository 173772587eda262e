"""`hrrbert transfer`: carry a trained model over to a new program (see pipelines/ontology/transfer.py)."""

from __future__ import annotations

import click

from pipelines.ontology.transfer import INIT_RULES

from .options import INPUT_DIR, force_option, handle_errors, seed_option, verbosity_options


@click.command("transfer")
@click.argument("model", type=INPUT_DIR)
@click.option(
    "--program",
    required=True,
    type=INPUT_DIR,
    help="The new program folder, or a release folder (its newest program).",
)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The new model folder to write.")
@click.option(
    "--init",
    type=click.Choice(INIT_RULES),
    default="parents",
    show_default=True,
    help="New atoms: the mean of their is-a parents (words and the rest: zero), zero, the mean of the "
    "trained ones of their kind, or random.",
)
@click.option(
    "--model-program",
    type=INPUT_DIR,
    default=None,
    help="The program MODEL was trained with, when the folder carries no program/ copy.",
)
@seed_option(help="Seed of --init random.")
@force_option("Replace OUT when it holds an earlier transfer (anything else is never replaced).")
@verbosity_options
@handle_errors
def transfer_cmd(
    model: str, program: str, out: str, init: str, model_program: str | None, seed: int, force: bool
) -> None:
    """Carry the trained model MODEL over to a new program and write it to the folder --out.

    MODEL is a saved model folder (pretrained or fine-tuned) or a pretraining run holding model/. Weights
    that do not depend on the vocabulary are copied; trained atoms and relations are matched by key; a code
    of both programs keeps its trained rows, a new code gets the documented rule's rows (table and freq
    modes: the trained [UNK] row; add: zero; MLM bias: the median). OUT is a normal model folder with
    transfer.json (the report): fine-tune or evaluate it with --program the new program.
    """
    from pipelines.ontology.transfer import transfer

    result = transfer(model, program, out, init=init, seed=seed, force=force, model_program=model_program)
    click.echo("\n".join(result.summary_lines()))


COMMANDS = (transfer_cmd,)
