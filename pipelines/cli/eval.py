"""Evaluation commands: ``evaluate`` (a pretrained run), ``report``, ``experiment`` (the paper's protocol)."""

from __future__ import annotations

import click

from pipelines.eval.config import EvaluateConfig, ExperimentConfig
from pipelines.train.config import FinetuneConfig, PretrainConfig

from .options import INPUT_DIR, config_options, force_option, handle_errors, verbosity_options


@click.command("evaluate")
@click.argument("pretrained", type=INPUT_DIR)
@config_options(EvaluateConfig, exclude=["pretrained"])
@force_option("Replace the evaluation in --out when the folder exists and is not empty (else refused).")
@verbosity_options
@handle_errors
def evaluate_cmd(**kw) -> None:
    """Evaluate a PRETRAINED run: frequency bins, neighbours, t-SNE, ROOD, transfer, cost."""
    from pipelines.eval.pretrained import evaluate_pretrained, summary_lines

    click.echo("\n".join(summary_lines(evaluate_pretrained(**kw))))


@click.command("report")
@click.argument("runs_dir", type=INPUT_DIR)
@verbosity_options
@handle_errors
def report_cmd(runs_dir: str) -> None:
    """Write report.md for the experiment in RUNS_DIR (or each experiment under it)."""
    from pipelines.doctor2vec.compare import report_any

    from .summaries import reports_summary

    click.echo(reports_summary(report_any(runs_dir)))


@click.command("experiment")
@config_options(
    ExperimentConfig, names={"configurations": "--config", "pretrain_seeds": "--seeds", "tasks": "--task"}
)
@config_options(PretrainConfig, include=["epochs", "max_steps", "batch_size", "lr", "bf16"], help={
    "epochs": "pretraining epochs (paper: 100)",
    "max_steps": "pretraining steps (overrides --epochs)",
    "batch_size": "pretraining batch (paper: 96)",
    "lr": "pretraining peak learning rate (paper: 1e-4)",
    "bf16": "bf16 autocast (CUDA only), pretraining and fine-tuning",
})  # fmt: skip
@config_options(FinetuneConfig, include=["epochs", "lr", "batch_size"], prefix="finetune", help={
    "epochs": "fine-tuning epochs (paper: 10)",
    "lr": "fine-tuning constant learning rate",
    "batch_size": "fine-tuning batch (paper: 80)",
})  # fmt: skip
@config_options(EvaluateConfig, include=["per_bin", "tsne_points"])
@verbosity_options
@handle_errors
def experiment_cmd(**kw) -> None:
    """The paper's protocol: configurations x seeds x trials, then evaluation and the report."""
    from pipelines.eval.experiment import describe, options_to_config, run_experiment

    click.echo(describe(run_experiment(options_to_config(**kw))))


COMMANDS = (evaluate_cmd, report_cmd, experiment_cmd)
