"""``hrrbert demo``: the whole pipeline on the embedded demo data."""

from __future__ import annotations

import sys

import click

from pipelines.demo.defaults import DEMO_PATIENTS

from .options import device_option, handle_errors, out_option, threads_option, verbosity_options


@click.command("demo")
@out_option("artifacts")
@click.option("--size", type=click.Choice(["small", "default"]), default="default", show_default=True)
@click.option("--patients", type=int, default=DEMO_PATIENTS, show_default=True, help="Synthetic cohort size.")
@click.option("--train-steps", type=int, default=None,
              help="Pretraining steps per model (default: the demo's; 0: data steps only, no experiment).")  # fmt: skip
@click.option("--trials", type=int, default=None, help="Fine-tuning trials per task (default: the demo's).")
@device_option("cpu", help="cpu, cuda or auto.")
@threads_option()
@verbosity_options
@handle_errors
def demo_cmd(out: str, **kw) -> None:
    """Build the demo data, then pretrain, fine-tune, evaluate and report the smallest experiment."""
    from pipelines.demo.run import run_demo

    sys.exit(run_demo(out, **kw))


COMMANDS = (demo_cmd,)
