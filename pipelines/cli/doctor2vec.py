"""``hrrbert doctor2vec``: doctor-trial matching (generate, train, evaluate, compare)."""

from __future__ import annotations

import click

from pipelines.doctor2vec.config import D2VCompareConfig, D2VOptions, D2VTrainConfig

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


@click.group("doctor2vec")
def doctor2vec_group() -> None:
    """Doctor2Vec: match doctors to clinical trials through a memory of their patients."""


@doctor2vec_group.command("generate")
@click.argument("dataset", type=INPUT_DIR)
@program_option()
@out_option("artifacts/doctor2vec", help="Parent folder of the data set.")
@name_option("Data set name: one folder under --out (default: d2v-<dataset name>).")
@config_options(D2VOptions)
@verbosity_options
@handle_errors
def d2v_generate_cmd(dataset: str, program: str, out: str, name: str | None, **kw) -> None:
    """Generate doctors, patient panels, trials and enrollment outcomes from a tokenized DATASET."""
    from pipelines.doctor2vec.data import describe, generate_doctor2vec

    click.echo(describe(generate_doctor2vec(dataset, program, out=out, name=name, options=D2VOptions(**kw))))


@doctor2vec_group.command("train")
@click.argument("data", type=INPUT_DIR)
@out_option("artifacts/runs", help="Parent folder of the run.")
@run_id_option()
@resume_option
@config_options(D2VTrainConfig, exclude=["data"], names={"hide_held_out": "--hide-held-out/--show-held-out"})
@verbosity_options
@handle_errors
def d2v_train_cmd(data: str, out: str, run_id: str | None, resume: bool, **kw) -> None:
    """Train Doctor2Vec on DATA's train trials; report test and rare-disease-trial metrics."""
    from pipelines.doctor2vec.train import train_doctor2vec

    from .summaries import d2v_train_summary

    r = train_doctor2vec(data, out=out, run_id=run_id, **kw, resume=resume)
    click.echo(d2v_train_summary(r))


@doctor2vec_group.command("evaluate")
@click.argument("run", type=INPUT_DIR)
@config_options(D2VTrainConfig, include=["data", "program"])
@click.option(
    "--split",
    type=click.Choice(["train", "val", "test", "test_rare"]),
    default="test_rare",
    show_default=True,
    help="Trials scored.",
)
@click.option("--trial", type=int, default=None, help="Trial id whose top doctors and attention are printed.")
@click.option(
    "--top-doctors", type=int, default=3, show_default=True, help="Best doctors printed for --trial."
)
@click.option(
    "--top-patients",
    type=int,
    default=5,
    show_default=True,
    help="Patients printed per doctor (those its attention weighs most).",
)
@device_option("cpu")
@verbosity_options
@handle_errors
def d2v_evaluate_cmd(run: str, data: str, program: str, split: str, **kw) -> None:
    """Evaluate a trained RUN on a split; print one trial's best doctors and the patients they were
    chosen for."""
    from pipelines.doctor2vec.evaluate import evaluate_doctor2vec

    from .summaries import d2v_metrics

    report, text = evaluate_doctor2vec(run, data, program, split=split, **kw)
    echo(f"{d2v_metrics(split, report)}\n\n{text}")


@doctor2vec_group.command("compare")
@config_options(D2VCompareConfig)
@verbosity_options
@handle_errors
def d2v_compare_cmd(**kw) -> None:
    """Plain vs HRR codes x dynamic vs static doctor, on test and rare-disease trials; writes report.md."""
    from pipelines.doctor2vec.compare import compare

    path = compare(**kw)
    echo(path.read_text(encoding="utf-8"))
    click.echo(f"report    {path}")
