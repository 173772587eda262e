"""``hrrbert demo``: the whole pipeline on the embedded demo data."""

from __future__ import annotations

import sys

import click

from pipelines.demo.defaults import DEMO_PATIENTS, DEMO_SIZES

from .options import device_option, handle_errors, out_option, seed_option, threads_option, verbosity_options


@click.command("demo")
@out_option("artifacts")
@click.option("--size", type=click.Choice(DEMO_SIZES), default="default", show_default=True)
@click.option("--patients", type=int, default=DEMO_PATIENTS, show_default=True, help="Synthetic cohort size.")
@click.option("--train-steps", type=int, default=None,
              help="Pretraining steps per model (default: the demo's; 0: data steps only, no experiment).")  # fmt: skip
@click.option("--trials", type=int, default=None, help="Fine-tuning trials per task (default: the demo's).")
@seed_option(
    help="Seed of the synthetic cohort and its splits (the demo release is the same for every seed)."
)
@click.option(
    "--full", is_flag=True, help="Also train the freq, add and cat configurations (several times longer)."
)
@click.option(
    "--transfer",
    is_flag=True,
    help="Instead: train on the release as of its first date, carry the models to the latest release "
    "(hrrbert transfer) and score the codes it added (runs/<name>-transfer/transfer/).",
)
@device_option("cpu", help="cpu, cuda or auto.")
@threads_option()
@verbosity_options
@handle_errors
def demo_cmd(out: str, transfer: bool, **kw) -> None:
    """Build the demo data, then pretrain, fine-tune, evaluate and report the smallest experiment."""
    if transfer:
        from pipelines.demo.transfer import run_transfer_demo

        if kw.pop("full"):
            raise click.UsageError("--transfer compares unstructured and base only; drop --full")
        threads = kw.pop("threads")
        if threads:
            import torch

            torch.set_num_threads(threads)
        run_transfer_demo(out, **kw, show=click.echo)
        return
    from pipelines.demo.run import run_demo

    sys.exit(run_demo(out, **kw, show=click.echo))


@click.command("demo-release")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Release folder.")
@click.option("--size", type=click.Choice(DEMO_SIZES), default="default", show_default=True)
@seed_option()
@verbosity_options
@handle_errors
def demo_release_cmd(out: str, size: str, seed: int) -> None:
    """Build only the demo RF2-format release from public ICD-10-CM text (not SNOMED CT content)."""
    from pipelines.demo.release import build_demo_release, describe_release

    click.echo(describe_release(build_demo_release(out, size=size, seed=seed)))


COMMANDS = (demo_cmd, demo_release_cmd)
