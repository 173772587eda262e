"""`hrrbert mlm-cache`: choose a model's code cache on validation data (see
pipelines/train/cache_choice.py)."""

from __future__ import annotations

import click

from .options import (
    INPUT_DIR,
    echo,
    force_option,
    handle_errors,
    program_option,
    seed_option,
    verbosity_options,
)


@click.command("mlm-cache")
@click.argument("model", type=INPUT_DIR)
@click.option("--dataset", required=True, type=INPUT_DIR, help="Tokenized dataset folder (hrrbert prepare).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The model folder to write.")
@click.option("--split", default="pretrain_val", show_default=True, help="The split to choose the cache on.")
@click.option(
    "--limit",
    type=int,
    default=1000,
    show_default=True,
    help="Patients of --split to use (the first ones; 0: all).",
)
@program_option(
    required=False,
    help="The program the model was trained with (default: the copy the model folder carries, program/).",
)
@seed_option(help="Seed of the masking the cache is chosen on.")
@force_option("Replace OUT when it holds an earlier mlm-cache output (anything else is never replaced).")
@verbosity_options
@handle_errors
def mlm_cache_cmd(
    model: str, dataset: str, out: str, split: str, limit: int, program: str | None, seed: int, force: bool
) -> None:
    """Choose the code cache of MODEL's masked-code prediction on --dataset and write the model to --out.

    The cache mixes the model's distribution with one over the sequence's visible codes and the codes whose
    vectors are like theirs (model/code_cache.py). Its weight and sharpness are the pair of a small grid,
    weight 0 included, with the lowest masked-code loss on --split; the grid is printed and saved in
    OUT/cache.json.
    """
    from pipelines.train.cache_choice import add_cache

    if limit < 0:
        raise click.BadParameter("must be >= 0", param_hint="--limit")
    result = add_cache(
        model, dataset, out, split=split, limit=limit or None, seed=seed, force=force, program=program
    )
    echo("\n".join(result.summary_lines()))


COMMANDS = (mlm_cache_cmd,)
