"""Training commands: ``pretrain`` (masked-code modelling) and ``finetune`` (mortality, chapters)."""

from __future__ import annotations

import os

import click

from pipelines.train.config import FinetuneConfig, PretrainConfig

from .options import (
    INPUT_DIR,
    config_options,
    handle_errors,
    out_option,
    resume_option,
    run_id_option,
    verbosity_options,
)


@click.command("pretrain")
@click.argument("dataset", type=INPUT_DIR)
@out_option("artifacts/runs", help="Parent folder of the run.")
@run_id_option("Run folder name (default: pretrain-<mode>-<model>-seed<seed>).")
@resume_option
@config_options(PretrainConfig, exclude=["dataset"])
@verbosity_options
@handle_errors
def pretrain_cmd(dataset: str, out: str, run_id: str | None, resume: bool, **kw) -> None:
    """Pretrain HRRBERT (masked-code modelling) on a tokenized DATASET; runs under torchrun too."""
    from pipelines.train.pretrain import pretrain

    from .summaries import pretrain_summary

    r = pretrain(dataset, out=out, run_id=run_id, **kw, resume=resume)
    if int(os.environ.get("RANK", "0")) == 0:
        click.echo(pretrain_summary(r))


@click.command("finetune")
@click.argument("pretrained", type=INPUT_DIR)
@out_option("artifacts/runs", help="Parent folder of the run.")
@run_id_option("Run folder name (default: finetune-<task>-<pretrained>-seed<seed>).")
@resume_option
@config_options(FinetuneConfig, exclude=["pretrained"])
@verbosity_options
@handle_errors
def finetune_cmd(pretrained: str, out: str, run_id: str | None, resume: bool, **kw) -> None:
    """Fine-tune a PRETRAINED run (or model folder) on mortality or ICD-10 chapters."""
    from pipelines.train.finetune import finetune

    from .summaries import finetune_summary

    click.echo(finetune_summary(finetune(pretrained, out=out, run_id=run_id, **kw, resume=resume)))


COMMANDS = (pretrain_cmd, finetune_cmd)
