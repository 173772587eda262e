"""``hrrbert``: the user-facing command group.

A thin layer: each command parses its options (shared ones from :mod:`.options`, run options
generated from the config dataclasses), calls one API function and prints its summary. Commands are
grouped by room (:mod:`.data`, :mod:`.train`, :mod:`.eval`, :mod:`.demo`, :mod:`.qa`,
:mod:`.doctor2vec`; :mod:`.carry`, :mod:`.explain` and :mod:`.diff` for the ontology room); heavy
modules (torch, the trainers) are imported inside the command bodies, so ``hrrbert --help`` stays
instant.
"""

from __future__ import annotations

import click

from . import carry, data, demo, diff, doctor2vec, eval, explain, export, mlm_cache, qa, train

__all__ = ["entry", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hrrbert", prog_name="hrrbert")
def main() -> None:
    """hrrbert: ontology-structured (HRR) embeddings for transformers over ICD codes."""


def entry() -> None:
    """The ``hrrbert`` console script: keep freed memory in the process (:mod:`.allocator`; off with
    ``HRRBERT_MALLOC=default``), then :func:`main`."""
    from .allocator import keep_freed_memory

    try:
        keep_freed_memory()
    except ValueError as e:
        raise SystemExit(f"Error: {e}") from None
    main()


_GROUPS = (data, demo, train, mlm_cache, eval, export, carry, explain, diff)
for _command in (c for g in _GROUPS for c in g.COMMANDS):
    main.add_command(_command)
main.add_command(qa.qa_group)
main.add_command(doctor2vec.doctor2vec_group)


def _add_version(command: click.Command) -> None:
    """``--version`` on ``command`` and, in a group, on every subcommand (``hrrbert finetune --version``)."""
    if not any(p.name == "version" for p in command.params):
        click.version_option(package_name="hrrbert", prog_name="hrrbert")(command)
    for sub in getattr(command, "commands", {}).values():
        _add_version(sub)


_add_version(main)
