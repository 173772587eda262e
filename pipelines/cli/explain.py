"""``hrrbert explain`` (a code vector taken apart by unbinding) and ``hrrbert query`` (codes found by
composition): see :mod:`pipelines.ontology.explain` and :mod:`pipelines.ontology.query`."""

from __future__ import annotations

import json

import click

from .options import INPUT_DIR, device_option, echo, handle_errors, program_option, verbosity_options

_JSON_HELP = "Print the result as JSON instead of the summary."
_OUT_HELP = "Also write the result as JSON to this file."
_PROGRAM_HELP = (
    "The program the model was trained with (default: the copy the model folder carries, MODEL/program/)."
)


def _emit(result, lines: list[str], as_json: bool, out: str | None) -> None:
    """Print the summary lines (or the JSON; terminal control characters in labels escaped), and write the
    JSON to ``out`` when given."""
    from pipelines.ontology.explain import write_json

    echo(json.dumps(result.as_dict(), indent=2) if as_json else "\n".join(lines))
    if out:
        write_json(result, out)
        if not as_json:
            echo(f"written {out}")


@click.command("explain")
@click.argument("model", type=INPUT_DIR)
@click.argument("code")
@click.option(
    "--relation",
    "relations",
    multiple=True,
    help="Relation to unbind, by label ('finding site') or SCTID; repeatable (default: the code's own).",
)
@click.option("--all-relations", is_flag=True, help="Unbind every relation of the program.")
@click.option(
    "--top", type=click.IntRange(min=1), default=5, show_default=True, help="Atoms listed per relation."
)
@click.option("--drift", is_flag=True, help="Also say how far the trained vector is from its composition.")
@click.option(
    "--exact", is_flag=True, help="Unbind with the exact inverse of the unitary-projected relation."
)
@click.option(
    "--any-atom",
    is_flag=True,
    help="Clean up against every atom (default: the atoms each relation takes anywhere in the program).",
)
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help=_OUT_HELP)
@program_option(required=False, help=_PROGRAM_HELP)
@device_option("cpu", "cpu or cuda.")
@verbosity_options
@handle_errors
def explain_cmd(
    model: str,
    code: str,
    relations: tuple[str, ...],
    all_relations: bool,
    top: int,
    drift: bool,
    exact: bool,
    any_atom: bool,
    as_json: bool,
    out: str | None,
    program: str | None,
    device: str,
) -> None:
    """Explain CODE (E11.9, E119 or ICD10CM:E11.9) in MODEL: its trained vector unbound with each relation
    and cleaned up against the trained atoms (* marks an edge the program holds)."""
    from pipelines.ontology.explain import explain, summary_lines

    result = explain(
        model,
        code,
        relations=relations,
        all_relations=all_relations,
        top=top,
        drift=drift,
        exact=exact,
        any_atom=any_atom,
        device=device,
        program=program,
    )
    _emit(result, summary_lines(result), as_json, out)


@click.command("query")
@click.argument("model", type=INPUT_DIR)
@click.argument("pairs", nargs=-1)
@click.option(
    "--like", default=None, help="Start from this code's trained vector (excluded from the results)."
)
@click.option("--minus", multiple=True, help="RELATION=ATOM to take away from --like; repeatable.")
@click.option("--plus", multiple=True, help="RELATION=ATOM to add; repeatable (same as a PAIR argument).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Codes listed.")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help=_OUT_HELP)
@program_option(required=False, help=_PROGRAM_HELP)
@device_option("cpu", "cpu or cuda.")
@verbosity_options
@handle_errors
def query_cmd(
    model: str,
    pairs: tuple[str, ...],
    like: str | None,
    minus: tuple[str, ...],
    plus: tuple[str, ...],
    top: int,
    as_json: bool,
    out: str | None,
    program: str | None,
    device: str,
) -> None:
    """The codes of MODEL nearest to a composed query: PAIRs "finding site=Kidney" "associated
    morphology=Cyst" ..., or --like CODE --minus PAIR --plus PAIR (the same code, one edge swapped)."""
    from pipelines.ontology.query import query, summary_lines

    result = query(model, pairs, like=like, minus=minus, plus=plus, top=top, device=device, program=program)
    _emit(result, summary_lines(result), as_json, out)


COMMANDS: list = [explain_cmd, query_cmd]
