"""Pretraining: masking rules, schedule, run folder, weights-only checkpoints, exact resume, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.cli import main
from pipelines.data.sequences import epoch_order, step_generator
from pipelines.train.checkpoint import list_checkpoints
from pipelines.train.mlm import mask_tokens
from pipelines.train.pretrain import pretrain
from pipelines.train.runtime import warmup_cosine

TINY = dict(model="tiny", batch_size=8, log_every=1, device="cpu", progress=False, max_val=8)


def losses(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in lines if "loss" in r], [r for r in lines if "val_mlm_acc" in r]


def test_mask_tokens_80_10_10_and_never_special():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (400, 128), generator=g)
    ids[:, 0] = 1  # [CLS]
    ids[:, 100:] = 0  # [PAD]
    att = ids != 0
    special = torch.tensor([0, 1, 2, 3, 4])
    out, chosen, targets = mask_tokens(
        ids, att, mask_id=3, special=special, candidates=torch.arange(5, 1000), prob=0.15, generator=g
    )
    assert not chosen[:, 0].any() and not chosen[:, 100:].any()
    rate = chosen.float().sum() / (att.sum() - 400)
    assert abs(rate - 0.15) < 0.005
    assert torch.equal(targets, ids[chosen])
    n = chosen.sum()
    masked = (out[chosen] == 3).float().sum() / n
    kept = (out[chosen] == ids[chosen]).float().sum() / n
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1) < 0.01  # the rest (~10 %) random
    assert torch.equal(out[~chosen], ids[~chosen])
    assert (out[chosen] >= 3).all()  # random replacements never draw special tokens other than [MASK]
    a = mask_tokens(
        ids,
        att,
        mask_id=3,
        special=special,
        candidates=torch.arange(5, 1000),
        prob=0.15,
        generator=step_generator(0, 5, 0),
    )
    b = mask_tokens(
        ids,
        att,
        mask_id=3,
        special=special,
        candidates=torch.arange(5, 1000),
        prob=0.15,
        generator=step_generator(0, 5, 0),
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_schedule_and_data_order():
    f = warmup_cosine(100, 0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(55) == pytest.approx(0.5) and f(100) == pytest.approx(0.0)
    assert torch.equal(epoch_order(10, 0, 3), epoch_order(10, 0, 3))
    assert not torch.equal(epoch_order(50, 0, 0), epoch_order(50, 0, 1))


def test_pretrain_writes_run_folder(tmp_path, dataset_dir, program_dir):  # noqa: F811
    r = pretrain(
        dataset_dir, program_dir, out=tmp_path, mode="base", max_steps=4, save_every=2, topk=(2, 5), **TINY
    )
    run = r.run_dir
    assert r.completed and r.step == 4 and run.name == "pretrain-base-tiny-seed0"
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["program_id"] == program_dir.name and cfg["dataset_id"] == "testdataset0001"
    assert cfg["config"]["seed"] == 0 and cfg["versions"]["torch"] == torch.__version__
    train, val = losses(run)
    assert [s for s, _ in train] == [1, 2, 3, 4]
    assert val and {"val_mlm_acc", "val_top2", "val_top5", "val_loss"} <= set(val[-1])
    assert val[-1]["val_top5"] >= val[-1]["val_top2"] >= val[-1]["val_mlm_acc"]
    cks = list_checkpoints(run)
    assert [c.name for c in cks] == ["step-00000002.pt", "step-00000004.pt"]
    state = torch.load(cks[-1], weights_only=True)
    assert state["step"] == 4 and isinstance(state["rng"]["torch"], torch.Tensor)
    assert (run / "model" / "model.safetensors").is_file()
    with pytest.raises(Exception, match="already exists"):
        pretrain(dataset_dir, program_dir, out=tmp_path, mode="base", max_steps=4, **TINY)


@pytest.mark.parametrize("mode", ["unstructured", "freq"])
def test_pretrain_other_modes_learn(tmp_path, dataset_dir, program_dir, mode):  # noqa: F811
    r = pretrain(
        dataset_dir,
        program_dir,
        out=tmp_path,
        mode=mode,
        max_steps=30,
        lr=3e-3,
        warmup=0.0,
        dropout=0.0,
        **TINY,
    )
    train, _ = losses(r.run_dir)
    first, last = sum(x for _, x in train[:5]) / 5, sum(x for _, x in train[-5:]) / 5
    assert last < first


def test_resume_after_kill_gives_the_same_loss_curve(tmp_path, dataset_dir, program_dir):  # noqa: F811
    kw = dict(mode="add", max_steps=10, save_every=3, val_every=5, **TINY)
    full = pretrain(dataset_dir, program_dir, out=tmp_path / "a", **kw)
    # "killed" after step 7: the last checkpoint is step 6, step 7 was logged but is lost
    part = pretrain(dataset_dir, program_dir, out=tmp_path / "b", stop_after=7, **kw)
    assert not part.completed and losses(part.run_dir)[0][-1][0] == 7
    resumed = pretrain(dataset_dir, program_dir, out=tmp_path / "b", resume=True, **{**kw, "progress": True})
    assert resumed.completed and resumed.step == 10
    a, b = losses(full.run_dir), losses(resumed.run_dir)
    assert [s for s, _ in b[0]] == list(range(1, 11))  # step 7 logged once
    assert b[0] == a[0]  # exactly equal
    assert b[1] == a[1]  # validation records too
    sa = full.model.state_dict()
    sb = resumed.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_cli_pretrain(tmp_path, dataset_dir, program_dir):  # noqa: F811
    res = CliRunner().invoke(
        main,
        ["pretrain", str(dataset_dir), "--program", str(program_dir), "--out", str(tmp_path), "--model", "tiny",
         "--mode", "cat", "--max-steps", "2", "--batch-size", "8", "--device", "cpu", "--run-id", "r1", "-q"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "steps     2" in res.output and (tmp_path / "r1" / "model" / "config.json").is_file()
