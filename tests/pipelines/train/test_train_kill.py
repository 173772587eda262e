"""Resume after a real SIGKILL of ``hrrbert pretrain``: the loss curve equals an uninterrupted run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_fixtures import dataset_dir, program_dir  # noqa: F401


def cmd(dataset, program, out, *extra):
    return [
        str(Path(sys.executable).parent / "hrrbert"),
        "pretrain",
        str(dataset),
        "--program",
        str(program),
        "--out",
        str(out),
        "--model",
        "tiny",
        "--mode",
        "base",
        "--max-steps",
        "120",
        "--batch-size",
        "8",
        "--save-every",
        "5",
        "--log-every",
        "1",
        "--val-every",
        "40",
        "--max-val",
        "8",
        "--device",
        "cpu",
        "--no-progress",
        "-q",
        *extra,
    ]


def train_losses(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r], [r for r in rows if "val_loss" in r]


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path, dataset_dir, program_dir):  # noqa: F811
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd(dataset_dir, program_dir, tmp_path / "a"), env=env, check=True, timeout=300)
    p = subprocess.Popen(cmd(dataset_dir, program_dir, tmp_path / "b"), env=env)
    ck = tmp_path / "b" / "pretrain-base-tiny-seed0" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not (ck.is_dir() and any(ck.glob("step-00000015.pt"))):
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    run = tmp_path / "b" / "pretrain-base-tiny-seed0"
    killed_at = train_losses(run)[0][-1][0]
    assert 15 <= killed_at < 120, "the run should have been killed part-way"
    subprocess.run(
        cmd(dataset_dir, program_dir, tmp_path / "b", "--resume"), env=env, check=True, timeout=300
    )
    assert train_losses(run) == train_losses(tmp_path / "a" / "pretrain-base-tiny-seed0")
