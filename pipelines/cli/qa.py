"""``hrrbert qa``: clinical question answering with memory networks (generate, train, evaluate, compare)."""

from __future__ import annotations

import click

from pipelines.qa.config import QACompareConfig, QAOptions, QATrainConfig

from .options import (
    INPUT_DIR,
    config_options,
    device_option,
    echo,
    handle_errors,
    name_option,
    out_option,
    program_option,
    resume_option,
    run_id_option,
    verbosity_options,
)


@click.group("qa")
def qa_group() -> None:
    """Clinical question answering with memory networks over a patient's diagnoses."""


@qa_group.command("generate")
@click.argument("dataset", type=INPUT_DIR)
@program_option()
@out_option("artifacts/qa", help="Parent folder of the QA set.")
@name_option("QA set name: one folder under --out (default: qa-<dataset name>).")
@config_options(QAOptions)
@verbosity_options
@handle_errors
def qa_generate_cmd(dataset: str, program: str, out: str, name: str | None, **kw) -> None:
    """Generate a clinical QA set from a tokenized DATASET and its program."""
    from pipelines.qa.data import describe, generate_qa

    click.echo(describe(generate_qa(dataset, program, out=out, name=name, options=QAOptions(**kw))))


@qa_group.command("train")
@click.argument("qa", type=INPUT_DIR)
@out_option("artifacts/runs", help="Parent folder of the run.")
@run_id_option()
@resume_option
@config_options(QATrainConfig, exclude=["qa"])
@verbosity_options
@handle_errors
def qa_train_cmd(qa: str, out: str, run_id: str | None, resume: bool, **kw) -> None:
    """Train a memory network on a QA set; report test accuracy overall, per type, on unseen codes."""
    from pipelines.qa.train import train_qa

    from .summaries import qa_train_summary

    click.echo(qa_train_summary(train_qa(qa, out=out, run_id=run_id, **kw, resume=resume)))


@qa_group.command("evaluate")
@click.argument("run", type=INPUT_DIR)
@config_options(QATrainConfig, include=["qa", "program"])
@click.option(
    "--split",
    type=click.Choice(["train", "val", "test"]),
    default="test",
    show_default=True,
    help="Questions scored.",
)
@click.option("--patient", type=int, default=None, help="Subject id whose attention is printed.")
@click.option("--threshold", type=float, default=0.05, show_default=True, help="Smallest weight printed.")
@device_option("cpu")
@verbosity_options
@handle_errors
def qa_evaluate_cmd(run: str, qa: str, program: str, **kw) -> None:
    """Evaluate a trained QA RUN (or model folder); print accuracy and one patient's attention per hop."""
    from pipelines.qa.train import evaluate_qa

    from .summaries import qa_metrics

    report, text = evaluate_qa(run, qa, program, **kw)
    echo(f"{qa_metrics(report)}\n\n{text}")


@qa_group.command("compare")
@config_options(QACompareConfig)
@verbosity_options
@handle_errors
def qa_compare_cmd(**kw) -> None:
    """Run the comparison grid on a dataset and write report.md (memory networks, visit Transformer
    vs BERT)."""
    from pipelines.qa.compare import compare

    path = compare(**kw)
    echo(path.read_text(encoding="utf-8"))
    click.echo(f"report    {path}")
