"""Evaluation commands: ``evaluate`` (a pretrained run), ``report``, ``experiment`` (the paper's protocol)."""

from __future__ import annotations

import click

from pipelines.eval.config import EvaluateConfig, ExperimentConfig
from pipelines.train.config import FinetuneConfig, PretrainConfig

from .options import (
    INPUT_DIR,
    config_options,
    echo,
    force_option,
    handle_errors,
    out_option,
    verbosity_options,
)


@click.command("evaluate")
@click.argument("pretrained", type=INPUT_DIR)
@config_options(EvaluateConfig, exclude=["pretrained"])
@force_option("Replace the evaluation in --out when the folder exists and is not empty (else refused).")
@verbosity_options
@handle_errors
def evaluate_cmd(**kw) -> None:
    """Evaluate a PRETRAINED run: frequency bins, neighbours, t-SNE, ROOD, next-visit diagnoses, transfer,
    cost, and a MEDS label task (--labels DIR --labels-run RUN of `finetune --labels`)."""
    from pipelines.eval.pretrained import evaluate_pretrained, summary_lines

    echo("\n".join(summary_lines(evaluate_pretrained(**kw))))


@click.command("report")
@click.argument("runs_dir", type=INPUT_DIR)
@verbosity_options
@handle_errors
def report_cmd(runs_dir: str) -> None:
    """Write report.md for the experiment in RUNS_DIR (or each experiment under it)."""
    from pipelines.doctor2vec.compare import report_any

    from .summaries import reports_summary

    echo(reports_summary(report_any(runs_dir)))


@click.command("experiment")
@config_options(
    ExperimentConfig, names={"configurations": "--config", "pretrain_seeds": "--seeds", "tasks": "--task"}
)
@config_options(
    PretrainConfig,
    include=["epochs", "max_steps", "batch_size", "lr", "bf16"],
    help={
        "epochs": "pretraining epochs (paper: 100)",
        "max_steps": "pretraining steps (overrides --epochs)",
        "batch_size": "pretraining batch (paper: 96)",
        "lr": "pretraining peak learning rate (paper: 1e-4)",
        "bf16": "bf16 autocast (CUDA only), pretraining and fine-tuning",
    },
)
@config_options(
    FinetuneConfig,
    include=["epochs", "lr", "batch_size"],
    prefix="finetune",
    help={
        "epochs": "fine-tuning epochs (paper: 10)",
        "lr": "fine-tuning constant learning rate",
        "batch_size": "fine-tuning batch (paper: 80)",
    },
)
@config_options(EvaluateConfig, include=["per_bin", "tsne_points"])
@click.option(
    "--lr-for",
    "lr_for",
    multiple=True,
    metavar="CONFIG=LR",
    help="Pretraining peak learning rate of one configuration instead of --lr (repeatable), e.g. "
    "unstructured=1e-3: ExperimentConfig.pretrain_by_configuration.",
)
@click.option(
    "--roles-for",
    "roles_for",
    multiple=True,
    metavar="CONFIG",
    help="A composing configuration whose task heads also read the history's ICD chapters from its code "
    "vectors (fine-tuning pooling cls+mean+roles, atoms kept as pretrained; repeatable): "
    "ExperimentConfig.finetune_by_configuration.",
)
@verbosity_options
@handle_errors
def experiment_cmd(**kw) -> None:
    """The paper's protocol: configurations x seeds x trials, then evaluation and the report."""
    from pipelines.eval.experiment import describe, options_to_config, run_experiment

    click.echo(describe(run_experiment(options_to_config(**kw))))


@click.command("baselines")
@config_options(ExperimentConfig, include=["dataset"], help={"dataset": "tokenized dataset (MIMIC layout)"})
@out_option(
    required=True, help="Folder for baselines.json and predictions.parquet (a finished one is read back)."
)
@click.option(
    "--ground-truth",
    type=INPUT_DIR,
    default=None,
    help="The cohort's ground_truth/ folder (task_probabilities.parquet): the ceiling.",
)
@config_options(
    ExperimentConfig,
    include=["transfer_dataset", "tasks"],
    names={"tasks": "--task"},
    help={"tasks": "tasks whose baselines and ceilings are computed"},
)
@config_options(
    PretrainConfig,
    include=["program", "model", "mask_prob", "max_val", "val_batch_size", "seed"],
    group="pretrain",
    help={
        "model": "model preset of the pretraining (its max_len, max_segments)",
        "seed": "pretraining seed whose validation masking is reproduced",
    },
)
@verbosity_options
@handle_errors
def baselines_cmd(
    dataset: str,
    out: str,
    ground_truth: str | None,
    transfer_dataset: str | None,
    tasks: tuple[str, ...],
    pretrain: dict,
) -> None:
    """Baselines and ceilings on the patients and masked codes the models are scored on."""
    from pipelines.eval.baselines import compute_baselines, summary_lines
    from pipelines.eval.baselines_mlm import MLMMasking

    program, model, seed = pretrain.pop("program"), pretrain.pop("model"), pretrain.pop("seed")
    record = compute_baselines(
        dataset,
        program,
        out,
        ground_truth=ground_truth,
        transfer_dataset=transfer_dataset,
        tasks=tasks,
        seed=seed,
        mlm=MLMMasking.of_experiment(model, pretrain),
    )
    echo("\n".join(summary_lines(record, out)))


COMMANDS = (evaluate_cmd, report_cmd, experiment_cmd, baselines_cmd)
