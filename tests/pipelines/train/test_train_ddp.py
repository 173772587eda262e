"""Pretraining under ``torchrun`` with two gloo processes: both ranks end with identical weights, and
only rank 0 writes the run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from train_fixtures import dataset_dir, program_dir  # noqa: F401

DRIVER = r"""
import os, sys
import torch
torch.set_num_threads(1)
from safetensors.torch import save_file
from pipelines.train.pretrain import pretrain

dataset, program, out = sys.argv[1:4]
r = pretrain(dataset, program, out=out, model="tiny", mode="base", max_steps=6, batch_size=8, save_every=3,
             log_every=1, device="cpu", progress=False, max_val=8)
state = {k: v.detach().contiguous() for k, v in r.model.state_dict().items()}
save_file(state, os.path.join(out, f"rank{os.environ['RANK']}.safetensors"))
"""


@pytest.mark.distributed
def test_two_gloo_ranks_end_identical(tmp_path, dataset_dir, program_dir):  # noqa: F811
    from safetensors.torch import load_file

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "runs"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(driver),
        str(dataset_dir),
        str(program_dir),
        str(out),
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    a, b = load_file(str(out / "rank0.safetensors")), load_file(str(out / "rank1.safetensors"))
    assert a.keys() == b.keys()
    assert all((a[k] == b[k]).all() for k in a)
    run = out / "pretrain-base-tiny-seed0"
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["world_size"] == 2
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if "loss" in r] == [1, 2, 3, 4, 5, 6]  # written once (rank 0)
    assert [c.name for c in sorted((run / "checkpoints").iterdir())] == [
        "step-00000003.pt",
        "step-00000006.pt",
    ]


RECORDING_DRIVER = r"""
import json, os, sys
import torch
torch.set_num_threads(1)
from pipelines.train import pretrain as pt

dataset, program, out = sys.argv[1:4]
seen = []
step = pt.MLMTask.step


def recording(self, net, idx, s):
    seen.append([s, sorted(int(i) for i in idx)])
    return step(self, net, idx, s)


pt.MLMTask.step = recording
pt.pretrain(dataset, program, out=out, model="tiny", mode="base", max_steps=4, batch_size=8, device="cpu",
            progress=False, max_val=8)
with open(os.path.join(out, f"seen{os.environ['RANK']}.json"), "w") as f:
    json.dump(seen, f)
"""


@pytest.mark.distributed
def test_two_gloo_ranks_step_on_disjoint_rows(tmp_path, dataset_dir, program_dir):  # noqa: F811
    """Guards against every DDP rank reading the same shard (identical final weights do not show it: DDP
    averages whatever each rank saw). Two gloo ranks record the training rows of every step of epoch 0:
    each step's global batch of 8 splits into two disjoint halves of 4, and no row is seen twice."""
    driver = tmp_path / "driver.py"
    driver.write_text(RECORDING_DRIVER)
    out = tmp_path / "runs"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [str(driver), str(dataset_dir), str(program_dir), str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    seen = [json.loads((out / f"seen{r}.json").read_text()) for r in (0, 1)]
    assert [s for s, _ in seen[0]] == [s for s, _ in seen[1]] == [0, 1, 2, 3]
    for (_, a), (_, b) in zip(*seen, strict=True):
        assert len(a) == len(b) == 4 and not set(a) & set(b), (a, b)
    rows = [i for rank in seen for _, idx in rank for i in idx]
    assert len(rows) == len(set(rows)) == 32  # one epoch's rows, each on one rank once
