"""``hrrbert demo``: the whole pipeline on the embedded demo data."""

from __future__ import annotations

import sys

import click

from pipelines.demo.defaults import DemoConfig

from .options import config_options, handle_errors, out_option, verbosity_options


@click.command("demo")
@config_options(DemoConfig, names={"configurations": "--config"})
# --carry's name before "transfer" came to mean only the cross-hospital test: hidden, says so on stderr
@click.option("--transfer", "transfer_alias", is_flag=True, hidden=True, help="Deprecated: --carry.")
@verbosity_options
@handle_errors
def demo_cmd(out: str, carry: bool, transfer_alias: bool, **kw) -> None:
    """Build the demo data, then pretrain, fine-tune, evaluate and report the smallest experiment."""
    if transfer_alias:
        click.echo("'hrrbert demo --transfer' is now 'hrrbert demo --carry'", err=True)
        carry = True
    if carry:
        from pipelines.demo.carry_study import run_carry_demo

        if kw.pop("full") or kw.pop("configurations"):
            raise click.UsageError("--carry compares unstructured and base only; drop --full / --config")
        threads = kw.pop("threads")
        if threads:
            import torch

            torch.set_num_threads(threads)
        run_carry_demo(out, **kw, show=click.echo)
        return
    from pipelines.demo.defaults import demo_configurations
    from pipelines.demo.run import run_demo

    try:
        demo_configurations(kw["configurations"], kw["full"])
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    sys.exit(run_demo(out, **kw, show=click.echo))


@click.command("demo-release")
@out_option(required=True, help="Release folder.")
@config_options(DemoConfig, include=["size", "seed"], help={"seed": "seed of the release's sampled content"})
@verbosity_options
@handle_errors
def demo_release_cmd(out: str, size: str, seed: int) -> None:
    """Build only the demo RF2-format release from public ICD-10-CM text (not SNOMED CT content)."""
    from pipelines.demo.release import build_demo_release, describe_release

    click.echo(describe_release(build_demo_release(out, size=size, seed=seed)))


COMMANDS = (demo_cmd, demo_release_cmd)
