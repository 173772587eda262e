"""``--name`` and ``--run-id`` are one folder under ``--out``: a path (``../x``, ``/x``, ``a/b``) is refused
by the click option and by every API function that creates the folder, before anything is written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ontology_compiler.artifact import safe_component
from pipelines.cli import main

BAD = ["../../x", "..", ".", "/tmp/x", "a/b", "a\\b", "", ".hidden", "C:x"]


@pytest.mark.parametrize("value", BAD)
def test_safe_component_refuses_paths(value):
    with pytest.raises(ValueError, match="--run-id .*single folder name"):
        safe_component(value, "--run-id")


@pytest.mark.parametrize("value", ["run1", "pretrain-base-tiny-seed0", "a.b", "x..y", "exp:1", "ünï"])
def test_safe_component_keeps_names(value):
    assert safe_component(value, "name") == value


def _api_calls(tmp_path, bad):
    """Every API function that creates ``<out>/<name or run_id>``, called with ``bad``."""
    from pipelines.doctor2vec.data import generate_doctor2vec
    from pipelines.doctor2vec.train import train_doctor2vec
    from pipelines.eval.experiment import run_experiment
    from pipelines.qa.data import generate_qa
    from pipelines.qa.train import train_qa
    from pipelines.train.finetune import finetune
    from pipelines.train.pretrain import pretrain

    x, out = str(tmp_path / "in"), tmp_path / "out" / "deep"
    return {
        "pretrain": lambda: pretrain(x, x, out=out, run_id=bad),
        "finetune": lambda: finetune(x, x, x, out=out, run_id=bad),
        "train_qa": lambda: train_qa(x, x, out=out, run_id=bad),
        "train_doctor2vec": lambda: train_doctor2vec(x, x, out=out, run_id=bad),
        "generate_qa": lambda: generate_qa(x, x, out=out, name=bad),
        "generate_doctor2vec": lambda: generate_doctor2vec(x, x, out=out, name=bad),
        "run_experiment": lambda: run_experiment(dataset=x, program=x, out=str(out), name=bad),
    }


@pytest.mark.parametrize(
    "api",
    [
        "pretrain",
        "finetune",
        "train_qa",
        "train_doctor2vec",
        "generate_qa",
        "generate_doctor2vec",
        "run_experiment",
    ],
)
@pytest.mark.parametrize("bad", ["../../escaped", "/abs/escaped", "sub/escaped"])
def test_api_refuses_a_path_before_writing(tmp_path, api, bad):
    (tmp_path / "in").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ValueError, match="single folder name"):
        _api_calls(tmp_path, bad)[api]()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere
    assert not (tmp_path.parent / "escaped").exists()


def _cli(tmp_path, args):
    d = tmp_path / "d"
    d.mkdir(exist_ok=True)
    return CliRunner().invoke(main, [a.replace("DIR", str(d)) for a in args])


CLI = {
    "pretrain": ["pretrain", "DIR", "--program", "DIR", "--out", "DIR", "--run-id", "BAD"],
    "finetune": [
        "finetune",
        "DIR",
        "--dataset",
        "DIR",
        "--program",
        "DIR",
        "--out",
        "DIR",
        "--run-id",
        "BAD",
    ],
    "qa train": ["qa", "train", "DIR", "--program", "DIR", "--out", "DIR", "--run-id", "BAD"],
    "doctor2vec train": ["doctor2vec", "train", "DIR", "--program", "DIR", "--out", "DIR", "--run-id", "BAD"],
    "prepare": ["prepare", "--mimic", "DIR", "--program", "DIR", "--out", "DIR", "--name", "BAD"],
    "qa generate": ["qa", "generate", "DIR", "--program", "DIR", "--out", "DIR", "--name", "BAD"],
    "doctor2vec generate": [
        "doctor2vec",
        "generate",
        "DIR",
        "--program",
        "DIR",
        "--out",
        "DIR",
        "--name",
        "BAD",
    ],
    "experiment": ["experiment", "--dataset", "DIR", "--program", "DIR", "--out", "DIR", "--name", "BAD"],
}


@pytest.mark.parametrize("command", sorted(CLI))
def test_cli_refuses_a_path_as_name_or_run_id(tmp_path, command):
    args = CLI[command]
    option = args[args.index("BAD") - 1]
    res = _cli(tmp_path, [a if a != "BAD" else "../../escaped" for a in args])
    assert res.exit_code == 2, res.output  # a usage error, before the command runs
    assert f"Invalid value for '{option}'" in res.output and "single folder name" in res.output
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "escaped").exists()
