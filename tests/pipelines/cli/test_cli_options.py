"""The ``hrrbert`` command layer: every command's help, options generated from the config dataclasses
(defaults, choices, help from the field metadata), ``-v``/``-q``, ``--version``, errors, and no torch on
import."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import logging
import subprocess
import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pipelines.cli import main
from pipelines.cli import options as opts
from pipelines.data.splits import SplitOptions
from pipelines.demo.defaults import DemoConfig
from pipelines.doctor2vec.config import D2VCompareConfig, D2VTrainConfig
from pipelines.eval.config import EvaluateConfig, ExperimentConfig
from pipelines.qa.config import QACompareConfig, QATrainConfig
from pipelines.train.config import FinetuneConfig, PretrainConfig

# command -> (config class, option prefix, fields that are arguments or not options, today's defaults
# that differ from the config's: kept for the command's users)
CONFIG_COMMANDS = {
    ("pretrain",): (PretrainConfig, "", {"dataset"}, {}),
    ("finetune",): (FinetuneConfig, "", {"pretrained"}, {}),
    ("evaluate",): (EvaluateConfig, "", {"pretrained"}, {}),
    # pretrain_by_configuration: the --lr-for CONFIG=LR items (test_experiment.py); finetune_by_configuration:
    # the --roles-for CONFIG items
    ("experiment",): (
        ExperimentConfig,
        "",
        {"pretrain", "finetune", "evaluate", "pretrain_by_configuration", "finetune_by_configuration"},
        {},
    ),
    ("qa", "train"): (QATrainConfig, "", {"qa"}, {}),
    ("doctor2vec", "train"): (D2VTrainConfig, "", {"data"}, {}),
    ("prepare",): (SplitOptions, "", set(), {}),
    ("demo",): (DemoConfig, "", set(), {}),
    ("qa", "compare"): (QACompareConfig, "", set(), {}),
    ("doctor2vec", "compare"): (D2VCompareConfig, "", set(), {}),
}


def _commands(group: click.Group = main, path: tuple[str, ...] = ()):
    for name, cmd in sorted(group.commands.items()):
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


def _command(path: tuple[str, ...]) -> click.Command:
    cmd: click.Command = main
    for name in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.commands[name]
    return cmd


def _params(cmd: click.Command) -> dict[str, click.Parameter]:
    return {p.name: p for p in cmd.params}


@pytest.mark.parametrize("path", [p for p, _ in _commands()] + [()], ids=lambda p: " ".join(p) or "hrrbert")
def test_every_help_works(path):
    res = CliRunner().invoke(main, [*path, "--help"])
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.output


def test_every_leaf_command_has_the_same_verbosity_flags():
    for path, cmd in _commands():
        if isinstance(cmd, click.Group):
            continue
        p = _params(cmd)
        assert p["verbose"].opts == ["-v", "--verbose"] and p["quiet"].opts == ["-q", "--quiet"], path


@pytest.mark.parametrize("path", list(CONFIG_COMMANDS), ids=" ".join)
def test_config_option_defaults_are_the_dataclass_defaults(path):
    cls, prefix, not_options, overrides = CONFIG_COMMANDS[path]
    params = _params(_command(path))
    for f in dataclasses.fields(cls):
        if f.name in not_options or (cls is SplitOptions and f.name == "seed"):
            continue
        p = params.get(f"{prefix}_{f.name}" if prefix else f.name)
        assert p is not None, f"{' '.join(path)} has no option for {cls.__name__}.{f.name}"
        assert p.type.name != "boolean" or p.secondary_opts, f"{f.name}: a bool field is an --x/--no-x flag"
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            assert p.required, f.name
            continue
        want = overrides.get(
            f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory()
        )
        assert p.default == want, f"{' '.join(path)} --{f.name}: {p.default!r} != {want!r}"
        if f.name in overrides:
            assert overrides[f.name] != f.default  # an override is only listed where it differs


def test_experiment_takes_the_pretrain_finetune_and_evaluate_defaults():
    params = _params(_command(("experiment",)))
    for name in ("epochs", "max_steps", "batch_size", "lr", "bf16"):
        assert params[name].default == getattr(PretrainConfig, name), name
    for name in ("epochs", "lr", "batch_size"):
        assert params[f"finetune_{name}"].default == getattr(FinetuneConfig, name), name
        assert params[f"finetune_{name}"].opts == [f"--finetune-{name.replace('_', '-')}"]
    for name in ("per_bin", "tsne_points"):
        assert params[name].default == getattr(EvaluateConfig, name), name
    assert params["configurations"].opts == ["--config"] and params["pretrain_seeds"].opts == ["--seeds"]


def test_options_have_the_field_help_and_choices():
    from hrr_kernel import MODES

    p = _params(_command(("pretrain",)))
    assert p["mask_prob"].help.startswith("share of codes chosen for MLM")
    assert p["mask_prob"].help == opts.config_fields(PretrainConfig, ["mask_prob"])[0].metadata["help"]
    assert list(p["mode"].type.choices) == list(MODES)
    assert p["topk"].type.name == "integer" and p["topk"].multiple
    assert p["max_steps"].type.name == "integer" and p["max_steps"].default is None
    d = _params(_command(("doctor2vec", "train")))
    assert d["val_every"].help.startswith("steps between validations")
    assert d["hide_held_out"].opts == ["--hide-held-out"] and d["hide_held_out"].secondary_opts == [
        "--show-held-out"
    ]
    q = _params(_command(("qa", "train")))
    assert list(q["hrr_mode"].type.choices) == list(MODES)
    assert list(q["tying"].type.choices) == ["adjacent", "layerwise", "none"]
    assert list(_params(_command(("finetune",)))["select_by"].type.choices) == [
        "f1",
        "auroc",
        "auprc",
        "accuracy",
        "loss",
    ]


def test_every_generated_option_has_help():
    missing = [
        f"{' '.join(path)} {p.opts[0]} ({p.config})"
        for path, cmd in _commands()
        for p in cmd.params
        if isinstance(p, opts.ConfigOption) and not p.help
    ]
    assert not missing, f"give these fields field(..., metadata={{'help': ...}}): {missing}"
    assert any(isinstance(p, opts.ConfigOption) for p in _command(("demo",)).params)


def test_lazy_choices_are_the_real_constants():
    from hrr_kernel import MODES
    from model.bert import POOLINGS, PRESETS
    from model.doctor2vec import DOCTOR_VECTORS, PATIENT_ENCODERS
    from model.memory_network import ENCODINGS, TYINGS

    assert opts.CHOICES["mode"].choices == tuple(MODES)
    assert opts.CHOICES["tying"].choices == tuple(TYINGS)
    assert opts.CHOICES["encoding"].choices == tuple(ENCODINGS)
    assert opts.CHOICES["doctor"].choices == tuple(DOCTOR_VECTORS)
    assert opts.CHOICES["patient_encoder"].choices == tuple(PATIENT_ENCODERS)
    assert _params(_command(("pretrain",)))["model"].type.choices == tuple(PRESETS)
    assert opts.CHOICES["pooling"].choices == tuple(POOLINGS)  # the light copy FinetuneConfig checks with


def test_pretrain_help_lists_the_modes():
    from hrr_kernel import MODES

    res = CliRunner().invoke(main, ["pretrain", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert f"[{'|'.join(MODES)}]" in res.output


def test_a_bad_choice_is_refused_by_click(tmp_path):
    res = CliRunner().invoke(
        main, ["qa", "train", str(tmp_path), "--program", str(tmp_path), "--hrr-mode", "bogus"]
    )
    assert res.exit_code == 2 and "--hrr-mode" in res.output


@pytest.mark.parametrize(
    ("flags", "level"), [([], logging.INFO), (["-v"], logging.DEBUG), (["-q"], logging.WARNING)]
)
def test_verbosity_means_the_same_everywhere(tmp_path, flags, level):
    logging.getLogger().setLevel(logging.CRITICAL)
    res = CliRunner().invoke(
        main, ["report", str(tmp_path), *flags]
    )  # an empty folder: an error, logged first
    assert res.exit_code == 1, res.output
    assert logging.getLogger().level == level


def test_verbose_and_quiet_exclude_each_other(tmp_path):
    res = CliRunner().invoke(main, ["report", str(tmp_path), "-v", "-q"])
    assert res.exit_code == 2 and "exclude each other" in res.output


def test_version_of_hrrbert():
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0 and importlib.metadata.version("hrrbert") in res.output
    assert "hrrbert" in res.output


def test_version_of_compile_ontology():
    from ontology_compiler.cli import main as compile_main

    res = CliRunner().invoke(compile_main, ["--version"])
    assert res.exit_code == 0 and importlib.metadata.version("hrrbert") in res.output


def test_importing_the_cli_does_not_import_torch():
    code = "import sys, pipelines.cli; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[3]).returncode == 0


def test_help_of_hrrbert_and_its_groups_does_not_import_torch():
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from pipelines.cli import main\n"
        "for args in (['--help'], ['qa', '--help'], ['doctor2vec', '--help']):\n"
        "    assert CliRunner().invoke(main, args).exit_code == 0, args\n"
        "sys.exit(1 if 'torch' in sys.modules or 'hrr_kernel' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[3]).returncode == 0


def test_handle_errors_maps_api_errors_only():
    from pipelines.errors import PipelineError

    @click.command()
    @click.argument("kind")
    @opts.handle_errors
    def cmd(kind: str) -> None:
        raise {
            "pipeline": PipelineError("bad input x"),
            "value": ValueError("bad value y"),
            "other": RuntimeError("a bug"),
        }[kind]

    for kind, text in (("pipeline", "bad input x"), ("value", "bad value y")):
        res = CliRunner().invoke(cmd, [kind])
        assert res.exit_code == 1 and f"Error: {text}" in res.output
    res = CliRunner().invoke(cmd, ["other"])
    assert isinstance(res.exception, RuntimeError)


def _fake_api(monkeypatch, module: str, func: str, result) -> list[dict]:
    """Replace ``module.func`` by a recorder (without importing torch); returns its calls."""
    calls: list[dict] = []

    def record(*args, **kw):
        calls.append({"args": args, **kw})
        return result

    monkeypatch.setitem(sys.modules, module, types.SimpleNamespace(**{func: record}))
    return calls


TRAINERS = {
    "finetune": (
        "pipelines.train.finetune",
        "finetune",
        FinetuneConfig,
        ["--dataset", "{d}", "--program", "{d}"],
    ),
    "qa train": ("pipelines.qa.train", "train_qa", QATrainConfig, ["--program", "{d}"]),
    "doctor2vec train": (
        "pipelines.doctor2vec.train",
        "train_doctor2vec",
        D2VTrainConfig,
        ["--program", "{d}"],
    ),
    "pretrain": ("pipelines.train.pretrain", "pretrain", PretrainConfig, ["--program", "{d}"]),
}


@pytest.mark.parametrize("command", list(TRAINERS))
def test_trainers_pass_the_config_options_and_resume(monkeypatch, tmp_path, command):
    module, func, cls, extra = TRAINERS[command]
    result = types.SimpleNamespace(
        run_dir=tmp_path,
        trials=[],
        step=0,
        validation={},
        results={"parameters": 1, "test": None, "val": None},
    )
    calls = _fake_api(monkeypatch, module, func, result)
    summaries = "pipelines.cli.summaries"
    monkeypatch.setattr(
        f"{summaries}.{'finetune' if command == 'finetune' else 'pretrain'}_summary", lambda r: "ok"
    )
    monkeypatch.setattr(f"{summaries}.qa_train_summary", lambda r: "ok")
    monkeypatch.setattr(f"{summaries}.d2v_train_summary", lambda r: "ok")
    argv = [*command.split(), str(tmp_path), *(a.format(d=tmp_path) for a in extra), "--patience", "3"]
    for resume in (False, True):
        res = CliRunner().invoke(main, [*argv, *(["--resume"] if resume else []), "-q"])
        assert res.exit_code == 0, res.output
        call = calls[-1]
        assert call["resume"] is resume, call
        assert call["patience"] == 3
        fields = {f.name for f in dataclasses.fields(cls)}
        config_kw = {k: v for k, v in call.items() if k in fields}
        assert set(call) - fields <= {"args", "out", "run_id", "resume"}
        positional = call["args"][0]
        first = next(f.name for f in dataclasses.fields(cls) if f.name not in config_kw)
        cls(**{first: positional, **config_kw})  # the options make a valid config


# command -> (module, function, arguments): the API the command calls with the options of its config
GRIDS = {
    "qa compare": ("pipelines.qa.compare", "compare", ["--dataset", "{d}", "--program", "{d}"]),
    "doctor2vec compare": (
        "pipelines.doctor2vec.compare",
        "compare",
        ["--dataset", "{d}", "--program", "{d}"],
    ),
    "demo": ("pipelines.demo.run", "run_demo", []),
}


@pytest.mark.parametrize("command", list(GRIDS))
def test_config_commands_call_their_api_with_its_own_defaults(monkeypatch, tmp_path, command):
    """The options reach the API under its parameter names, and where the API has a default of its own
    it is the config's (the config is the one the CLI shows)."""
    module, func, extra = GRIDS[command]
    api = inspect.signature(getattr(importlib.import_module(module), func))
    calls = _fake_api(monkeypatch, module, func, 0 if command == "demo" else tmp_path / "report.md")
    (tmp_path / "report.md").write_text("report")
    res = CliRunner().invoke(main, [*command.split(), *(a.format(d=tmp_path) for a in extra), "-q"])
    assert res.exit_code == 0, res.output
    (call,) = calls
    args, kw = call.pop("args"), call
    bound = api.bind(*args, **kw)
    cls = CONFIG_COMMANDS[tuple(command.split())][0]
    # the API's own spelling of the same default: seeds 1 (a count) for "1", only None (all) for ()
    same = {("seeds", 1, "1"), ("only", None, ())}
    for f in dataclasses.fields(cls):
        if f.name in api.parameters and f.default is not dataclasses.MISSING:
            assert bound.arguments[f.name] == f.default, f.name
            lib = api.parameters[f.name].default
            if lib is not inspect.Parameter.empty and (f.name, lib, f.default) not in same:
                assert lib == f.default, (
                    f"{func}({f.name}={lib!r}) but {cls.__name__}.{f.name} = {f.default!r}"
                )


@pytest.mark.parametrize("path", [p for p, _ in _commands()], ids=" ".join)
def test_every_command_has_version(path):
    res = CliRunner().invoke(main, [*path, "--version"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"hrrbert, version {importlib.metadata.version('hrrbert')}"


def test_every_option_of_every_command_has_help():
    from ontology_compiler.cli import main as compile_main

    every = [(("compile-ontology",), compile_main), *_commands()]
    missing = [
        f"{' '.join(path)} {p.opts[0]}"
        for path, cmd in every
        for p in cmd.params
        if isinstance(p, click.Option) and not (p.help or "").strip()
    ]
    assert not missing, missing


@pytest.mark.parametrize(
    "path, option",
    [(("finetune",), "labels"), (("evaluate",), "labels"), (("evaluate",), "ground_truth"),
     (("experiment",), "ground_truth")],
)  # fmt: skip
def test_folder_options_are_checked_paths(tmp_path, path, option):
    p = _params(_command(path))[option]
    assert isinstance(p.type, click.Path) and p.type.exists and not p.type.file_okay
    res = CliRunner().invoke(main, [*path, p.opts[0], str(tmp_path / "absent"), str(tmp_path)])
    assert res.exit_code == 2 and "does not exist" in res.output, res.output
