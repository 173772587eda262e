"""Fine-tuning on the one loop: resume after a real SIGKILL gives the uninterrupted run's numbers, and
two gloo ranks under ``torchrun`` fine-tune with rank 0 alone writing the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.train.pretrain import pretrain

DRIVER = r"""
import sys
import torch
torch.set_num_threads(1)
from pipelines.train.finetune import finetune

pre, dataset, program, out, resume = sys.argv[1:6]
finetune(pre, dataset, program, out=out, task="mortality", trials=2, epochs=12, batch_size=4, device="cpu",
         progress=False, resume=resume == "1")
"""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, dataset_dir, program_dir):  # noqa: F811
    out = tmp_path_factory.mktemp("runs")
    return pretrain(
        dataset_dir,
        program_dir,
        out=out,
        model="tiny",
        mode="base",
        max_steps=3,
        batch_size=8,
        device="cpu",
        progress=False,
    ).run_dir


def _run_outputs(run):
    """Per trial: results (validation, test, best epoch) and the metrics records."""
    out = {}
    for k in range(2):
        res = json.loads((run / f"trial-{k}" / "results.json").read_text())
        rows = [json.loads(x) for x in (run / f"trial-{k}" / "metrics.jsonl").read_text().splitlines()]
        out[k] = (res["val"], res["test"], res["best_epoch"], rows)
    return out


@pytest.mark.slow
def test_finetune_sigkill_then_resume(tmp_path, pretrained, dataset_dir, program_dir):  # noqa: F811
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [str(pretrained), str(dataset_dir), str(program_dir)]
    subprocess.run(
        [sys.executable, str(driver), *args, str(tmp_path / "a"), "0"], env=env, check=True, timeout=300
    )
    p = subprocess.Popen([sys.executable, str(driver), *args, str(tmp_path / "b"), "0"], env=env)
    run = tmp_path / "b" / f"finetune-mortality-{pretrained.name}-seed0"
    ck = run / "trial-0" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not (ck.is_dir() and any(ck.glob("step-*.pt"))):
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (run / "summary.json").exists(), "the run should have been killed part-way"
    subprocess.run(
        [sys.executable, str(driver), *args, str(tmp_path / "b"), "1"], env=env, check=True, timeout=300
    )
    assert _run_outputs(run) == _run_outputs(tmp_path / "a" / run.name)
    assert not (
        run / "trial-0" / "checkpoints"
    ).exists()  # a finished trial keeps its model, not its checkpoints


@pytest.mark.distributed
def test_finetune_two_gloo_ranks(tmp_path, pretrained, dataset_dir, program_dir):  # noqa: F811
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "runs"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(driver),
        str(pretrained),
        str(dataset_dir),
        str(program_dir),
        str(out),
        "0",
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    run = out / f"finetune-mortality-{pretrained.name}-seed0"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and len(summary["trials"]) == 2
    for k in range(2):
        rows = [json.loads(x) for x in (run / f"trial-{k}" / "metrics.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in rows] == list(range(12))  # one record an epoch: written by rank 0 only
        assert (run / f"trial-{k}" / "model" / "model.safetensors").is_file()
