"""New folders and files follow the user's umask, as ``mkdir`` and ``open`` would: programs and datasets
(atomic publication), checkpoints, and model weights (safetensors creates its files 0600) are readable by
a lab's shared group when the umask says so, and private when it says so."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch
from torch import nn

from ontology_compiler.artifact import current_umask, publish, write_file_atomically


@pytest.fixture(params=[0o022, 0o002, 0o027])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def assert_tree_follows(root: Path, mask: int) -> None:
    paths = [root, *root.rglob("*")]
    assert len(paths) > 1
    for p in paths:
        want = (0o777 if p.is_dir() else 0o666) & ~mask
        assert mode(p) == want, f"{p}: {oct(mode(p))}, umask {oct(mask)} wants {oct(want)}"


def test_current_umask_reads_without_changing_it(umask):
    assert current_umask() == umask
    assert current_umask() == umask


def test_published_artifact_follows_the_umask(tmp_path, umask):
    def write_files(tmp: Path) -> list[dict]:
        (tmp / "graph").mkdir()
        (tmp / "a.parquet").write_bytes(b"x")
        (tmp / "graph" / "b.parquet").write_bytes(b"y")
        return [{"path": "a.parquet"}, {"path": "graph/b.parquet"}]

    final = tmp_path / "programs" / "rel" / "abc123"
    assert publish(final, "abc123", write_files, {"format_version": 1}, lambda: False)
    assert_tree_follows(final, umask)
    assert mode(final.parent) == 0o777 & ~umask


def test_compiled_program_follows_the_umask(tmp_path, umask):
    from train_fixtures import compile_fixture

    assert_tree_follows(compile_fixture(tmp_path / "programs"), umask)


def test_checkpoint_follows_the_umask(tmp_path, umask):
    from pipelines.train.checkpoint import checkpoint_path, save_checkpoint

    p = save_checkpoint(checkpoint_path(tmp_path / "run", 1), {"model": {"w": torch.zeros(2)}})
    assert mode(p) == 0o666 & ~umask


def test_small_model_weights_follow_the_umask(tmp_path, umask):
    from pipelines.train.model_files import save_weights

    d = save_weights(nn.Linear(2, 2), tmp_path / "model", {"kind": "toy"}, "toy")
    assert_tree_follows(d, umask)


def test_hrrbert_save_pretrained_follows_the_umask(tmp_path, umask):
    from model.common import save_folder

    d = save_folder(tmp_path / "model", nn.Linear(2, 2), {"kind": "toy"}, {"kind": "toy"})
    assert_tree_follows(d, umask)


def test_write_file_atomically_follows_the_umask(tmp_path, umask):
    p = write_file_atomically(tmp_path / "f.bin", lambda t: t.write_bytes(b"1"))
    assert mode(p) == 0o666 & ~umask and p.read_bytes() == b"1"
