"""`hrrbert carry`: carry a trained model over to a new program (see pipelines/ontology/carry.py).

`hrrbert transfer`, the command's name before, still works as a hidden alias that says so on stderr."""

from __future__ import annotations

import click

from pipelines.ontology.carry import INIT_RULES

from .options import INPUT_DIR, echo, force_option, handle_errors, seed_option, verbosity_options


@click.command("carry")
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
@force_option("Replace OUT when it holds an earlier carry (anything else is never replaced).")
@verbosity_options
@handle_errors
def carry_cmd(
    model: str, program: str, out: str, init: str, model_program: str | None, seed: int, force: bool
) -> None:
    """Carry the trained model MODEL over to a new program and write it to the folder --out.

    MODEL is a saved model folder (pretrained or fine-tuned) or a pretraining run holding model/. Weights
    that do not depend on the vocabulary are copied; trained atoms and relations are matched by key; a code
    of both programs keeps its trained rows, a new code gets the documented rule's rows (table and freq
    modes: the trained [UNK] row; add: zero; MLM bias: the median). OUT is a normal model folder with
    carry.json (the report): fine-tune or evaluate it with --program the new program.
    """
    from pipelines.ontology.carry import carry

    result = carry(model, program, out, init=init, seed=seed, force=force, model_program=model_program)
    echo("\n".join(result.summary_lines()))


ALIAS_WARNING = "'hrrbert transfer' is now 'hrrbert carry'"


def _transfer_alias(**kw) -> None:
    click.echo(ALIAS_WARNING, err=True)
    carry_cmd.callback(**kw)


# the command's name before "transfer" came to mean only the cross-hospital test: hidden, same options
transfer_alias_cmd = click.Command(
    "transfer",
    callback=_transfer_alias,
    params=carry_cmd.params,
    help=f"Deprecated: {ALIAS_WARNING}.\n\n{carry_cmd.help}",
    hidden=True,
)

COMMANDS = (carry_cmd, transfer_alias_cmd)
