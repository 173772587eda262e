"""A full disk while writing (``torch.save`` raises ``RuntimeError: [enforce fail ...] file write failed``,
other writers ``OSError(ENOSPC)``) leaves no temporary file and no partial file under the name, keeps what
was there before, and raises one clean error naming the path (a ``click.ClickException`` in the CLI)."""

from __future__ import annotations

import errno
from pathlib import Path

import click
import pytest
import torch
from torch import nn

from ontology_compiler.artifact import ArtifactWriteError, publish

ENOSPC = OSError(errno.ENOSPC, "No space left on device")
TORCH_FULL = RuntimeError(
    "[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file data/3: "
    "file write failed"
)


def failing_after_some_bytes(exc: BaseException):
    """A writer that starts its file, then fails as a full disk does."""

    def write(obj, f, *a, **kw):
        Path(f).write_bytes(b"partial")
        raise exc

    return write


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name)


@pytest.mark.parametrize("exc", [ENOSPC, TORCH_FULL], ids=["ENOSPC", "torch-enforce-fail"])
def test_checkpoint_on_a_full_disk(tmp_path, monkeypatch, exc):
    from pipelines.cli.options import handle_errors
    from pipelines.train.checkpoint import (
        OutputWriteError,
        checkpoint_path,
        list_checkpoints,
        load_checkpoint,
        save_checkpoint,
    )

    run = tmp_path / "run"
    state = {"model": {"w": torch.zeros(1)}, "optimizer": {}, "scheduler": {}, "rng": {}, "config": {}}
    state |= {"step": 1, "epoch": 0, "position": 0}  # a checkpoint's fields are checked when it is read
    first = save_checkpoint(checkpoint_path(run, 1), state)
    monkeypatch.setattr(torch, "save", failing_after_some_bytes(exc))
    target = checkpoint_path(run, 2)
    with pytest.raises(OutputWriteError) as info:
        save_checkpoint(target, state)
    msg = str(info.value)
    assert str(target) in msg and "disk is full" in msg and "--resume" in msg
    assert leftovers(run) == [] and not target.exists()
    assert list_checkpoints(run) == [first] and load_checkpoint(first)["step"] == 1  # the previous one kept
    with pytest.raises(click.ClickException, match="disk is full"):  # the CLI's one-line error
        handle_errors(lambda: save_checkpoint(target, state))()


def test_a_killed_writers_temp_file_is_removed_by_the_next_checkpoint(tmp_path):
    from pipelines.train.checkpoint import checkpoint_path, save_checkpoint

    run = tmp_path / "run"
    stale = checkpoint_path(run, 3).with_name("step-00000003.pt.tmp")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half")
    save_checkpoint(checkpoint_path(run, 4), {"model": {}})
    assert leftovers(run) == []


def test_small_model_weights_on_a_full_disk(tmp_path, monkeypatch):
    import safetensors.torch

    from pipelines.train.checkpoint import OutputWriteError
    from pipelines.train.model_files import WEIGHTS_FILE, save_weights

    d = save_weights(nn.Linear(2, 2), tmp_path / "model", {"kind": "toy"}, "toy")
    before = (d / WEIGHTS_FILE).read_bytes()
    monkeypatch.setattr(
        safetensors.torch, "save_file", lambda s, f, metadata=None: failing_after_some_bytes(ENOSPC)(s, f)
    )
    with pytest.raises(OutputWriteError, match=f"{WEIGHTS_FILE}.*disk is full"):
        save_weights(nn.Linear(2, 2), d, {"kind": "toy"}, "toy")
    assert leftovers(d) == [] and (d / WEIGHTS_FILE).read_bytes() == before


def test_hrrbert_weights_on_a_full_disk(tmp_path, monkeypatch):
    import safetensors.torch

    from model import ModelWriteError
    from model.common import WEIGHTS_FILE, save_folder

    d = save_folder(tmp_path / "model", nn.Linear(2, 2), {"kind": "toy"}, {"kind": "toy"})
    before = (d / WEIGHTS_FILE).read_bytes()
    monkeypatch.setattr(
        safetensors.torch, "save_file", lambda s, f, metadata=None: failing_after_some_bytes(ENOSPC)(s, f)
    )
    with pytest.raises(ModelWriteError, match=f"{WEIGHTS_FILE}.*disk is full"):
        save_folder(d, nn.Linear(2, 2), {"kind": "toy"}, {"kind": "toy"})
    assert leftovers(d) == [] and (d / WEIGHTS_FILE).read_bytes() == before


def test_artifact_on_a_full_disk(tmp_path):
    def write_files(tmp: Path) -> list[dict]:
        (tmp / "a.parquet").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "a.parquet"))

    final = tmp_path / "datasets" / "x" / "abc"
    with pytest.raises(ArtifactWriteError, match="abc: could not write the artifact .the disk is full"):
        publish(final, "abc", write_files, {"format_version": 1}, lambda: False)
    assert not final.exists() and list((tmp_path / "datasets" / "x").iterdir()) == []


def test_artifact_errors_other_than_io_pass_unchanged(tmp_path):
    def write_files(tmp: Path) -> list[dict]:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        publish(tmp_path / "p" / "abc", "abc", write_files, {"format_version": 1}, lambda: False)
    assert list((tmp_path / "p").iterdir()) == []
