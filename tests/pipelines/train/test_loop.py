"""The one training loop on a toy task: exact resume (weights, metrics, best weights), best-weights
selection, patience, schedules of records, validations and checkpoints."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from pipelines.train.checkpoint import list_checkpoints, load_checkpoint
from pipelines.train.loop import LoopOptions, StepOutput, run_loop


class Toy:
    """Regression with dropout (global RNG) on 40 points in batches of 8: 5 steps an epoch."""

    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(40, 4, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + 0.1 * torch.randn(40, generator=g)
        self.seed = seed
        self.validations = 0

    def epoch_batches(self, epoch):
        order = torch.randperm(40, generator=torch.Generator().manual_seed(self.seed * 1000 + epoch))
        return list(order.split(8))

    def step(self, net, idx, step):
        loss = ((net(self.x[idx]).squeeze(1) - self.y[idx]) ** 2).mean()
        return StepOutput(loss, float(len(idx)), len(idx))

    def validate(self, model):
        self.validations += 1
        with torch.no_grad():
            mse = float(((model(self.x).squeeze(1) - self.y) ** 2).mean())
        return {"val_mse": mse, "val_wobble": (self.validations * 7919) % 13}


def build(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Dropout(0.2), nn.Linear(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + 0.01 * s))
    return model, opt, sched


def opts(**kw):
    base = dict(
        total_steps=40,
        log_every=3,
        val_every=4,
        keep_checkpoints=2,
        monitor="val_wobble",
        minimize=False,
        progress=False,
        config={"toy": 1},
    )
    return LoopOptions(**{**base, **kw})


def records(run):
    """metrics.jsonl without the measured speed (a timing)."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "seq_per_s"} for r in rows]


@pytest.mark.parametrize("kill_at", [6, 13, 20])
def test_resume_is_exact(tmp_path, kill_at):
    model, opt, sched = build()
    full = run_loop(model, opt, sched, Toy(), opts(), tmp_path / "a")
    m2, o2, s2 = build()
    part = run_loop(m2, o2, s2, Toy(), opts(save_every=1), tmp_path / "b", stop_after=kill_at)
    assert not part.completed and part.step == kill_at
    # a fresh process: new model, optimiser and task; everything else comes from the checkpoint
    m3, o3, s3 = build(seed=123)
    ck = list_checkpoints(tmp_path / "b")[-1]
    assert int(load_checkpoint(ck)["step"]) == kill_at
    task = Toy()
    task.validations = sum(1 for r in records(tmp_path / "b") if "val_mse" in r)
    res = run_loop(m3, o3, s3, task, opts(save_every=1), tmp_path / "b", resume_from=ck)
    assert res.completed and res.step == 40
    assert records(tmp_path / "b") == records(tmp_path / "a")
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), m3.state_dict().values(), strict=True)
    )
    assert (res.best_step, res.best_epoch) == (full.best_step, full.best_epoch)


def test_best_weights_and_schedules(tmp_path):
    model, opt, sched = build()
    res = run_loop(model, opt, sched, Toy(), opts(), tmp_path)
    rows = records(tmp_path)
    vals = [r for r in rows if "val_mse" in r]
    # validations: every 4 steps since the previous one, at each epoch end (every 5 steps) and the last step
    assert [r["step"] for r in vals] == [4, 5, 9, 10, 14, 15, 19, 20, 24, 25, 29, 30, 34, 35, 39, 40]
    assert [r["step"] for r in rows if "loss" in r] == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 40]
    best = max(vals, key=lambda r: r["val_wobble"])  # the first of the best
    assert res.best_step == best["step"] and res.best_validation["val_wobble"] == best["val_wobble"]
    # checkpoints at every validation (save_every 0), the newest two kept; they hold the best weights
    cks = list_checkpoints(tmp_path)
    assert [c.name for c in cks] == ["step-00000039.pt", "step-00000040.pt"]
    state = load_checkpoint(cks[-1])
    assert all(torch.equal(state["best_model"][k], v) for k, v in model.state_dict().items())


def test_patience_stops_and_keep_last(tmp_path):
    model, opt, sched = build()
    res = run_loop(model, opt, sched, Toy(), opts(patience=2, monitor="val_wobble"), tmp_path / "p")
    vals = [r for r in records(tmp_path / "p") if "val_mse" in r]
    assert res.stopped_early and res.step < 40
    assert len(vals) - 1 - [r["step"] for r in vals].index(res.best_step) == 2
    m2, o2, s2 = build()
    last = run_loop(m2, o2, s2, Toy(), opts(monitor=None, keep_best=False), tmp_path / "l")
    assert last.best_validation is None and last.best_step == -1 and last.step == 40


def test_unknown_monitor_names_the_metrics(tmp_path):
    model, opt, sched = build()
    with pytest.raises(KeyError, match="val_mse"):
        run_loop(model, opt, sched, Toy(), opts(monitor="val_nope"), tmp_path)


class _Steep:
    """One batch whose squared error has a gradient of norm far above 1 at the start."""

    def __init__(self):
        g = torch.Generator().manual_seed(3)
        self.x = 10 * torch.randn(8, 4, generator=g)
        self.y = 50 + torch.randn(8, generator=g)

    def loss(self, net):
        return ((net(self.x).squeeze(1) - self.y) ** 2).mean()

    def epoch_batches(self, epoch):
        return [torch.arange(8)]

    def step(self, net, idx, step):
        return StepOutput(self.loss(net), 8.0, 8)

    def validate(self, model):
        return {}


@pytest.mark.parametrize("clip", [0.0, 0.5, 3.0])
def test_gradient_clipping_bounds_the_update(tmp_path, clip):
    """Guards against the loop ignoring ``LoopOptions.clip`` (max gradient norm): with plain SGD at lr 1
    one step moves the weights by minus the gradient, so the update's norm is ``clip`` when clipping is
    on (and the direction the raw gradient's), and the raw gradient's norm (about 10^3) when it is off."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    task = _Steep()
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    model.zero_grad()
    task.loss(model).backward()
    raw = torch.cat([p.grad.flatten().clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    assert float(raw.norm()) > 100
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    o = LoopOptions(total_steps=1, clip=clip, log_every=1, progress=False)
    run_loop(model, opt, None, task, o, tmp_path)
    update = before - torch.cat([p.detach().flatten() for p in model.parameters()])
    want = raw if clip == 0 else raw * (clip / raw.norm())
    torch.testing.assert_close(update, want, rtol=1e-4, atol=1e-5)
    logged = [r for r in records(tmp_path) if "grad_norm" in r]
    if clip > 0:  # the logged norm is the one before clipping
        assert logged[0]["grad_norm"] == pytest.approx(float(raw.norm()), rel=1e-5)
