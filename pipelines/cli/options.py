"""The options every ``hrrbert`` command shares, the options generated from the config dataclasses, the
one logging setup, the one error-to-:class:`click.ClickException` mapping and :func:`echo`, which prints a
command's text with terminal control characters escaped.

Light on purpose: it imports only click and the light config modules (no torch), so ``hrrbert --help``
stays instant. A config field becomes an option as follows (:func:`config_options`):

* name: ``--`` + the field name with ``-`` for ``_`` (``hrr_mode`` -> ``--hrr-mode``);
* default: the field default (a command may override it, listed in its ``defaults=``);
* type: from the annotation: ``bool`` -> ``--x/--no-x``; ``tuple[int, ...]`` -> repeatable;
  ``int | None`` -> ``int`` with no default; a field without a default -> a required option;
* choices: :data:`CHOICES` (``--hrr-mode`` is a :class:`LazyChoice` of ``hrr_kernel.MODES``: read only
  when click parses or shows the options of a command that has it, so building the CLI imports no torch);
* help: the field's ``metadata["help"]``: ``x: int = field(default=1, metadata={"help": "..."})``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from pipelines.data.tasks import TASKS
from pipelines.demo.defaults import DEMO_SIZES, DemoConfig
from pipelines.doctor2vec.config import CRITERIA as D2V_CRITERIA
from pipelines.doctor2vec.config import EMBEDDINGS as D2V_EMBEDDINGS
from pipelines.doctor2vec.config import D2VTrainConfig
from pipelines.eval.config import LABEL_SPLITS, EvaluateConfig, ExperimentConfig
from pipelines.qa.config import EMBEDDINGS as QA_EMBEDDINGS
from pipelines.qa.config import MODELS as QA_MODELS
from pipelines.qa.config import QATrainConfig
from pipelines.train.config import (
    MLM_CACHES,
    MLM_SOFTMAXES,
    MLM_VOCABULARIES,
    POOLINGS,
    SELECT_BY,
    FinetuneConfig,
    PretrainConfig,
)
from pipelines.train.config import MODELS as FINETUNE_MODELS

__all__ = [
    "CHOICES", "INPUT_DIR", "ConfigOption", "LazyChoice", "api_errors", "config_fields", "config_options",
    "device_option", "echo", "force_option", "handle_errors", "name_option", "out_option", "program_option",
    "resume_option", "run_id_option", "seed_option", "threads_option", "verbosity_options",
]  # fmt: skip

F = Callable[..., Any]


class LazyChoice(click.Choice):
    """A :class:`click.Choice` of the names in ``module.attr`` (a tuple, or a dict keyed by name), read when
    click first needs them: parsing, or the ``--help`` of a command with the option. Building the CLI does
    not import ``module``, so the constants of torch modules need no light copy here."""

    def __init__(self, module: str, attr: str, case_sensitive: bool = True) -> None:
        self.source = (module, attr)
        self._choices: tuple[str, ...] | None = None
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        if self._choices is None:
            module, attr = self.source
            self._choices = tuple(getattr(importlib.import_module(module), attr))
        return self._choices

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:
        self._choices = tuple(value)

    def __repr__(self) -> str:
        return f"LazyChoice({'.'.join(self.source)})"


_MODES = LazyChoice("hrr_kernel", "MODES")
_PRESETS = LazyChoice("model.bert", "PRESETS")

# field name -> the values click accepts (``model`` depends on the config: see _choices)
CHOICES: dict[str, click.Choice] = {
    "mode": _MODES,
    "hrr_mode": _MODES,
    "configurations": _MODES,
    "task": click.Choice(TASKS),
    "tasks": click.Choice(TASKS),
    "select_by": click.Choice(SELECT_BY),
    "pooling": click.Choice(POOLINGS),
    "tying": LazyChoice("model.memory_network", "TYINGS"),
    "encoding": LazyChoice("model.memory_network", "ENCODINGS"),
    "doctor": LazyChoice("model.doctor2vec", "DOCTOR_VECTORS"),
    "patient_encoder": LazyChoice("model.doctor2vec", "PATIENT_ENCODERS"),
    "criteria": click.Choice(D2V_CRITERIA),
}
_PER_CONFIG: dict[tuple[type, str], click.Choice] = {
    (PretrainConfig, "model"): _PRESETS,
    (ExperimentConfig, "model"): _PRESETS,
    (FinetuneConfig, "model"): click.Choice(FINETUNE_MODELS),
    (QATrainConfig, "model"): click.Choice(QA_MODELS),
    (QATrainConfig, "embedding"): click.Choice(QA_EMBEDDINGS),
    (D2VTrainConfig, "embedding"): click.Choice(D2V_EMBEDDINGS),
    (EvaluateConfig, "labels_split"): click.Choice(LABEL_SPLITS),
    (PretrainConfig, "mlm_vocabulary"): click.Choice(MLM_VOCABULARIES),
    (PretrainConfig, "mlm_cache"): click.Choice(MLM_CACHES),
    (PretrainConfig, "mlm_softmax"): click.Choice(MLM_SOFTMAXES),
    (DemoConfig, "size"): click.Choice(DEMO_SIZES),
}
INPUT_DIR = click.Path(exists=True, file_okay=False)  # an input folder argument: it must exist
# fields naming an input folder that must exist
_INPUT_DIRS = {"dataset", "program", "pretrained", "mortality", "chapters", "transfer_dataset", "qa", "data",
               "labels_run", "labels_dataset", "labels", "ground_truth"}  # fmt: skip
_OUTPUT_DIRS = {"out"}  # fields naming a folder to write
# fields naming one folder created under --out: a single path component (ontology_compiler.api.safe_component)
_COMPONENTS = {"name", "run_id"}


# --- shared options ---------------------------------------------------------------------------------


def program_option(required: bool = True, help: str = "Compiled program folder.") -> Callable[[F], F]:
    return click.option(
        "--program", required=required, type=click.Path(exists=True, file_okay=False), help=help
    )


def out_option(
    default: str | None = None, *, required: bool = False, help: str | None = None
) -> Callable[[F], F]:
    return click.option(
        "--out",
        type=click.Path(file_okay=False),
        default=default,
        required=required,
        show_default=default is not None,
        help=help,
    )


def seed_option(default: int = 0, help: str | None = None) -> Callable[[F], F]:
    return click.option("--seed", type=int, default=default, show_default=True, help=help)


def _device(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A ``--device`` value: one this machine has (``pipelines.train.runtime.check_device``; torch is
    imported only for a value other than ``auto`` / ``cpu``), else a usage error listing those it has."""
    if value is None or value in ("auto", "cpu"):
        return value
    from pipelines.errors import PipelineError
    from pipelines.train.runtime import check_device

    try:
        return check_device(value, what="")
    except PipelineError as e:
        raise click.BadParameter(str(e).lstrip(), ctx=ctx, param=param) from e


def device_option(default: str = "auto", help: str = "auto, cpu, cuda.") -> Callable[[F], F]:
    return click.option("--device", default=default, show_default=True, callback=_device, help=help)


def threads_option(default: int = 1) -> Callable[[F], F]:
    return click.option(
        "--threads",
        type=int,
        default=default,
        show_default=True,
        help="torch CPU threads (0: leave torch's default).",
    )


def force_option(help: str = "Overwrite the output when it exists.") -> Callable[[F], F]:
    return click.option("--force", is_flag=True, help=help)


def _component(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A ``--name`` / ``--run-id`` value: one folder name under ``--out`` (no ``/``, ``..``,
    absolute path)."""
    if value is None:
        return value
    from ontology_compiler.api import safe_component

    try:
        return safe_component(value, f"--{param.name.replace('_', '-')}" if param.name else "name")
    except ValueError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from e


def run_id_option(help: str = "Run folder name under --out.") -> Callable[[F], F]:
    return click.option("--run-id", default=None, callback=_component, help=help)


def name_option(help: str) -> Callable[[F], F]:
    """``--name``: the output's folder name under ``--out`` (one folder name, checked)."""
    return click.option("--name", default=None, callback=_component, help=help)


def resume_option(f: F) -> F:
    return click.option(
        "--resume", is_flag=True, help="Continue the run from its newest checkpoint (same config)."
    )(f)


def verbosity_options(f: F) -> F:
    """``-v/--verbose`` (DEBUG) and ``-q/--quiet`` (WARNING); neither: INFO. Sets up logging, then
    runs ``f``."""
    from ontology_compiler.api import setup_logging

    @functools.wraps(f)
    def run(*args: Any, verbose: bool, quiet: bool, **kw: Any) -> Any:
        try:
            setup_logging(verbose, quiet)
        except ValueError as e:
            raise click.UsageError(str(e)) from e
        return f(*args, **kw)

    run = click.option("-q", "--quiet", is_flag=True, help="Log only warnings and errors.")(run)
    return click.option("-v", "--verbose", is_flag=True, help="Log debug messages too.")(run)


# --- printing ---------------------------------------------------------------------------------------


def _printable(text: str) -> str:
    from ontology_compiler.api import printable

    return printable(text)


def echo(text: str, err: bool = False) -> None:
    """Print a command's text (summaries and tables that quote data: terms, codes, labels) with the
    characters a terminal would act on (ESC and CSI sequences, other C0/C1 controls) escaped
    (``ontology_compiler.api.printable``); the data itself is not changed."""
    click.echo(_printable(text), err=err)


# --- errors -----------------------------------------------------------------------------------------

# Errors the API raises on purpose; looked up only in modules already imported (an error class of a
# module nobody imported cannot have been raised), so this never imports torch.
_API_ERRORS = (
    ("pipelines.errors", "PipelineError"),
    ("ontology_compiler.errors", "OntologyCompilerError"),
    ("hrr_kernel.errors", "HRRKernelError"),
    ("model.errors", "ModelError"),
)


def api_errors() -> tuple[type[Exception], ...]:
    """The exception classes :func:`handle_errors` turns into a one-line error message."""
    found = [getattr(sys.modules[m], name) for m, name in _API_ERRORS if m in sys.modules]
    return (*found, ValueError)


def handle_errors(f: F) -> F:
    """Run the command ``f``; an API error (:func:`api_errors`) becomes a :class:`click.ClickException`."""

    @functools.wraps(f)
    def run(*args: Any, **kw: Any) -> Any:
        try:
            return f(*args, **kw)
        except click.ClickException:
            raise
        except Exception as e:
            if isinstance(e, api_errors()):
                raise click.ClickException(_printable(str(e))) from e
            raise

    return run


# --- options generated from a config dataclass ------------------------------------------------------


def _base_type(tp: Any) -> tuple[Any, bool, bool]:
    """(element type, optional, repeated) of an annotation: ``int | None`` -> (int, True, False)."""
    optional = False
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        if len(args) != 1:
            raise TypeError(f"no option type for {tp}")
        tp = args[0]
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"no option type for {tp}")
        return args[0], optional, True
    if tp not in (bool, int, float, str):
        raise TypeError(f"no option type for {tp}")
    return tp, optional, False


def _choices(cls: type, name: str) -> click.Choice | None:
    return _PER_CONFIG.get((cls, name), CHOICES.get(name))


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _representable(hints: dict[str, Any], name: str) -> bool:
    try:
        _base_type(hints[name])
    except TypeError:
        return False
    return True


def config_fields(
    cls: type, include: Iterable[str] | None = None, exclude: Iterable[str] = ()
) -> list[dataclasses.Field]:
    """The fields of ``cls`` that :func:`config_options` makes options of, in option order.

    ``include``: these, in this order (each must be representable); else every representable field
    (not ``dict``) but those in ``exclude``, the class's own fields first, then inherited ones.
    """
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    if include is not None:
        unknown = [n for n in include if n not in by_name]
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {unknown}")
        return [by_name[n] for n in include]
    skip = set(exclude)
    unknown = skip - set(by_name)
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
    own = set(getattr(cls, "__annotations__", {}))
    fields = [f for f in by_name.values() if f.name not in skip and _representable(hints, f.name)]
    return sorted(fields, key=lambda f: f.name not in own)  # stable: declaration order within each group


def config_options(
    cls: type,
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    defaults: dict[str, Any] | None = None,
    names: dict[str, str] | None = None,
    help: dict[str, str] | None = None,
    prefix: str = "",
    group: str | None = None,
) -> Callable[[F], F]:
    """Click options for the fields of the config dataclass ``cls`` (see the module docstring).

    ``defaults``: field -> a default other than the field's (a command's own default, kept for its
    users); ``names``: field -> the option's declaration (``"--seeds"``, ``"--hide-x/--show-x"``);
    ``help``: field -> help other than the field's ``metadata["help"]``; ``prefix``: ``"finetune"`` makes
    ``--finetune-epochs`` (parameter ``finetune_epochs``) of ``epochs``. The command receives each
    option under the field's name (with ``prefix_``), or, with ``group``, all of them as one dict
    keyword ``group`` (field name -> value).
    """
    defaults, names, help = dict(defaults or {}), dict(names or {}), dict(help or {})
    chosen = config_fields(cls, include, exclude)
    for given in (defaults, names, help):
        stray = set(given) - {f.name for f in chosen}
        if stray:
            raise ValueError(f"{sorted(stray)} are not options made of {cls.__name__}")
    decorators = [_option(cls, f, defaults, names, help, prefix) for f in chosen]
    params = [f"{prefix}_{f.name}" if prefix else f.name for f in chosen]

    def apply(fn: F) -> F:
        if group is not None:
            fn = _grouped(fn, group, params, prefix)
        for d in reversed(decorators):
            fn = d(fn)
        return fn

    return apply


def _grouped(fn: F, group: str, params: list[str], prefix: str) -> F:
    """``fn`` receiving the options ``params`` as one dict ``group`` (keyed by field name)."""
    cut = len(prefix) + 1 if prefix else 0

    @functools.wraps(fn)
    def run(*args: Any, **kw: Any) -> Any:
        kw[group] = {p[cut:]: kw.pop(p) for p in params}
        return fn(*args, **kw)

    return run


class ConfigOption(click.Option):
    """An option made of a config field by :func:`config_options`; ``config``: ``"Class.field"``."""

    def __init__(self, *args: Any, config: str, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.config = config


def _option(
    cls: type, f: dataclasses.Field, defaults: dict, names: dict, help: dict, prefix: str
) -> Callable[[F], F]:
    tp, optional, repeated = _base_type(typing.get_type_hints(cls)[f.name])
    default = defaults.get(f.name, _default(f))
    required = default is dataclasses.MISSING
    param = f"{prefix}_{f.name}" if prefix else f.name
    decl = names.get(f.name, "--" + param.replace("_", "-"))
    kw: dict[str, Any] = {
        "help": help.get(f.name, f.metadata.get("help")),
        "required": required,
        "cls": ConfigOption,
        "config": f"{cls.__name__}.{f.name}",
    }
    if f.name in _COMPONENTS and tp is str:
        kw["callback"] = _component
    if f.name == "device" and tp is str:
        kw["callback"] = _device
    if not required:
        kw["default"] = default
        kw["show_default"] = default is not None and default != () and (tp is not bool or default)
    if tp is bool:
        if "/" not in decl:
            decl = f"{decl}/--no-{decl.removeprefix('--')}"
        return click.option(decl, param, **kw)
    choices = _choices(cls, f.name)
    if choices is not None:
        kw["type"] = choices
    elif f.name in _INPUT_DIRS:
        kw["type"] = INPUT_DIR
    elif f.name in _OUTPUT_DIRS:
        kw["type"] = click.Path(file_okay=False)
    else:
        kw["type"] = tp
    if repeated:
        kw["multiple"] = True
    return click.option(decl, param, **kw)
