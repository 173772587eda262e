"""Fine-tuning: inputs cut before the last visit, both tasks, trials, best checkpoint, thresholds chosen on
validation and kept with the model, test predictions, steps, class weights, results, CLI."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from train_fixtures import SPLIT_SIZES, dataset_dir, program_dir, write_dataset  # noqa: F401

from hrr_kernel import load_program
from model import HRRBert
from pipelines.cli import main
from pipelines.data.sequences import TokenizedDataset, length_buckets
from pipelines.errors import PipelineError
from pipelines.train.finetune import (
    THRESHOLDS_FILE,
    finetune,
    pos_weights,
    predict,
    read_thresholds,
    warmup_linear,
)
from pipelines.train.metrics import f1_thresholds
from pipelines.train.predictions import read_predictions, score_predictions
from pipelines.train.pretrain import pretrain

FT = dict(epochs=2, batch_size=8, device="cpu", progress=False)


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


def test_sequences_stop_before_the_last_visit(dataset_dir, program_dir):  # noqa: F811
    import pyarrow.parquet as pq

    ds = TokenizedDataset(dataset_dir, program_dir.name, 31)
    s = ds.sequences("finetune_train", max_len=128, max_segments=100, task="chapters", before_last_visit=True)
    t = pq.read_table(dataset_dir / "patients.parquet").to_pylist()
    rows = [r for r in t if r["split"] == "finetune_train"]
    for i, r in enumerate(rows):
        n = r["last_visit_start"]
        assert s.attention_mask[i].sum() == n
        assert s.input_ids[i, :n].tolist() == r["input_ids"][:n]
        assert s.segment_ids[i, :n].tolist() == r["segment_ids"][:n]
        assert sorted(torch.nonzero(s.labels[i]).flatten().add(1).tolist()) == sorted(r["chapters"])
    m = ds.sequences("finetune_val", max_len=128, max_segments=100, task="mortality", before_last_visit=True)
    assert m.labels.shape == (12, 1)


@pytest.mark.parametrize("task", ["mortality", "chapters"])
def test_finetune_trials(tmp_path, pretrained, dataset_dir, program_dir, task):  # noqa: F811
    r = finetune(pretrained, dataset_dir, program_dir, out=tmp_path, task=task, trials=2, **FT)
    assert len(r.trials) == 2 and [t["seed"] for t in r.trials] == [0, 1]
    for k in range(2):
        d = r.run_dir / f"trial-{k}"
        res = json.loads((d / "results.json").read_text())
        assert {"accuracy", "precision", "recall", "f1", "auroc", "auprc"} <= set(res["test"])
        assert res["config"]["weight_decay"] == 4e-6 and res["program_id"] == program_dir.name
        epochs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        assert [e["epoch"] for e in epochs] == [0, 1]
        best = min(epochs, key=lambda e: (e["val_loss"], e["epoch"]))  # select_by loss (the default)
        assert res["best_epoch"] == best["epoch"] and res["val"]["loss"] == best["val_loss"]
        _check_untrained(pretrained, d, task, dataset_dir, program_dir)
        _check_thresholds_and_predictions(d, res, task, dataset_dir, program_dir, trial=k)
    assert r.trials[0]["test"] != r.trials[1]["test"] or r.trials[0]["val"] != r.trials[1]["val"]
    summary = json.loads((r.run_dir / "summary.json").read_text())
    assert summary["config"]["task"] == task and len(summary["trials"]) == 2


def test_pooling_set_at_fine_tuning_is_saved_with_the_model(tmp_path, pretrained, dataset_dir, program_dir):  # noqa: F811
    assert HRRBert.read_config(pretrained / "model")["config"]["pooling"] == "cls"
    r = finetune(
        pretrained, dataset_dir, program_dir, out=tmp_path, task="chapters", pooling="cls+mean", **FT
    )
    d = r.run_dir / "trial-0"
    res = json.loads((d / "results.json").read_text())
    assert res["config"]["pooling"] == res["model_config"]["pooling"] == "cls+mean"
    assert HRRBert.read_config(d / "model")["config"]["pooling"] == "cls+mean"
    # the saved model, loaded back, gives the trial's test predictions (so it pools as it was trained)
    _check_thresholds_and_predictions(d, res, "chapters", dataset_dir, program_dir, trial=0)
    for bad, match in (
        (dict(pooling="max"), "pooling must be one of"),
        (dict(pooling="cls+mean", model="visit-transformer"), "pools visits its own way"),
    ):
        with pytest.raises(ValueError, match=match):
            finetune(pretrained, dataset_dir, program_dir, out=tmp_path / "bad", task="chapters", **FT, **bad)


def test_role_readout_fine_tunes_with_its_own_rate_and_the_atoms_kept(
    tmp_path,
    pretrained,
    dataset_dir,  # noqa: F811
    program_dir,  # noqa: F811
):
    """pooling cls+mean+roles: the readout is added, trains at lr * roles_lr_scale, is saved and read back;
    freeze_atoms leaves every atom and relation as pretrained."""
    from pipelines.train.config import FinetuneConfig
    from pipelines.train.finetune import _trial_model, param_groups

    cfg = FinetuneConfig(
        pretrained=str(pretrained), dataset="d", program="p", task="chapters", pooling="cls+mean+roles",
        roles_lr_scale=10.0, freeze_atoms=True, lr=1e-3,
    )  # fmt: skip
    prog = load_program(program_dir)
    model = _trial_model(cfg, pretrained / "model", prog)
    groups = param_groups(model, cfg)
    assert [g["lr"] for g in groups] == [1e-3, pytest.approx(1e-2)]
    readout = {id(p) for p in model.roles.parameters() if p.requires_grad}
    assert {id(p) for p in groups[1]["params"]} == readout
    assert (
        not model.embeddings.token.atoms.requires_grad and not model.embeddings.token.relations.requires_grad
    )
    r = finetune(
        pretrained, dataset_dir, program_dir, out=tmp_path, task="chapters", pooling="cls+mean+roles",
        freeze_atoms=True, **FT,
    )  # fmt: skip
    d = r.run_dir / "trial-0"
    before = HRRBert.from_pretrained(pretrained / "model", prog)
    after = HRRBert.from_pretrained(d / "model", prog)
    assert after.config.pooling == "cls+mean+roles" and after.roles is not None
    assert float(after.roles.tasks["chapters"].weight.abs().sum()) > 0  # it trained from zero
    assert float(after.roles.tasks["mortality"].weight.abs().sum()) == 0  # another task's readout did not
    trained = set(range(prog.n_atoms)) - set(_settled_atoms(before, after))
    idx = torch.tensor(sorted(trained))
    torch.testing.assert_close(after.embeddings.token.atoms[idx], before.embeddings.token.atoms[idx])
    torch.testing.assert_close(after.embeddings.token.relations, before.embeddings.token.relations)
    res = json.loads((d / "results.json").read_text())
    _check_thresholds_and_predictions(d, res, "chapters", dataset_dir, program_dir, trial=0)
    with pytest.raises(ValueError, match="roles_lr_scale must be > 0"):
        FinetuneConfig(pretrained="x", dataset="d", program="p", roles_lr_scale=0.0)


def _settled_atoms(before, after) -> list[int]:
    """Atoms that differ between two models: only those settling resets (no training reached them)."""
    diff = (after.embeddings.token.atoms - before.embeddings.token.atoms).abs().sum(1)  # (A,)
    return torch.nonzero(diff > 0).flatten().tolist()


def _check_untrained(pretrained, d, task, dataset_dir, program_dir):  # noqa: F811
    """Pretraining recorded the tokens it never saw; fine-tuning strikes those its own data held, and what
    still nobody saw is settled: its rows of the trained model's parameters hold the kind means."""
    program = load_program(program_dir)
    pre = HRRBert.from_pretrained(pretrained / "model", program)
    fin = HRRBert.from_pretrained(d / "model", program)
    assert pre.untrained_tokens  # the fixture's pretraining misses some codes
    ds = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, pre.pad_id)
    mc = pre.config
    held = ds.sequences(
        "finetune_train", max_len=mc.max_len, max_segments=mc.max_segments, task=task, before_last_visit=True
    ).tokens(program.n_concepts)
    assert fin.untrained_tokens == [i for i in pre.untrained_tokens if not held[i]]
    trained = torch.ones(program.n_concepts, dtype=torch.bool)
    trained[fin.untrained_tokens] = False
    from hrr_kernel import trained_parts

    reached, _ = trained_parts(program, trained)
    assert (~reached).any()  # some atoms only untrained codes use
    atoms, kinds = fin.embeddings.token.atoms.detach(), program.atom_kinds
    for i in torch.nonzero(~reached).flatten().tolist():
        if kinds[i] in ("concept", "word"):
            same = [j for j in range(program.n_atoms) if kinds[j] == kinds[i] and reached[j]]
            torch.testing.assert_close(atoms[i], atoms[same].mean(0))


def _check_thresholds_and_predictions(d, res, task, dataset_dir, program_dir, trial):  # noqa: F811
    """The trial's thresholds are the F1-best ones of its kept model on finetune_val, stored with the model,
    and they score its test predictions file, whose metrics are the trial's test results."""
    n_labels = 1 if task == "mortality" else 22
    program = load_program(program_dir)
    model = HRRBert.from_pretrained(d / "model", program)
    ds = TokenizedDataset(dataset_dir, program.program_id, program.n_concepts, model.pad_id)
    kw = dict(
        max_len=model.config.max_len,
        max_segments=model.config.max_segments,
        task=task,
        before_last_visit=True,
    )
    val, test = ds.sequences("finetune_val", **kw), ds.sequences("test", **kw)
    p_val, _ = predict(model, val, task, torch.device("cpu"), 64)
    saved = json.loads((d / "model" / THRESHOLDS_FILE).read_text())
    assert saved["task"] == task and saved["chosen_on"] == "finetune_val" and saved["n"] == len(val)
    t = read_thresholds(d / "model", task, n_labels)
    assert t.shape == (n_labels,) and t.tolist() == res["thresholds"] == saved["thresholds"]
    np.testing.assert_allclose(t, f1_thresholds(val.labels.numpy(), p_val).astype(np.float32), atol=1e-6)
    (block,) = read_predictions(d / "predictions.parquet")
    assert (block.model, block.task, block.split, block.trial) == ("base", task, "test", trial)
    assert block.labels.shape == block.probs.shape == (len(test), n_labels)
    assert block.subject_id.tolist() == test.subject_id.tolist()
    assert block.labels.tolist() == test.labels.numpy().astype(int).tolist()
    p_test, _ = predict(model, test, task, torch.device("cpu"), 64)
    np.testing.assert_allclose(block.probs, p_test, atol=1e-6)
    assert block.thresholds.tolist() == t.tolist()
    again = score_predictions(task, block.labels, block.probs, t)
    assert {k: v for k, v in again.items() if not math.isnan(v)} == {
        k: v for k, v in res["test"].items() if k != "loss" and not (isinstance(v, float) and math.isnan(v))
    }


def test_pos_weights_by_hand():
    y = np.array([[1, 0, 0], [0, 0, 1], [0, 0, 1], [0, 0, 1]])
    # label 0: 3 negatives / 1 positive; label 1: no positives (upper bound); label 2: 1/3 -> at least 1
    assert pos_weights(y).tolist() == [3.0, 50.0, 1.0]
    rare = np.zeros((300, 1))
    rare[0] = 1
    assert pos_weights(rare).tolist() == [50.0] and pos_weights(rare, clip=(1.0, 500.0)).tolist() == [299.0]


def test_length_buckets_partition_the_epoch():
    lengths = torch.tensor([5, 1, 9, 3, 7, 2, 8, 4, 6, 10, 11])
    order = torch.randperm(11, generator=torch.Generator().manual_seed(0))
    batches = length_buckets(order, lengths, 2, 3, torch.Generator().manual_seed(1))
    assert sorted(torch.cat(batches).tolist()) == list(range(11))  # every row once
    assert sorted(len(b) for b in batches) == [1, 2, 2, 2, 2, 2]
    buckets = [set(order[i : i + 6].tolist()) for i in (0, 6)]
    for b in batches:  # each batch lies in one bucket and holds its neighbours in length
        (home,) = [k for k, bucket in enumerate(buckets) if set(b.tolist()) <= bucket]
        ranked = sorted(buckets[home], key=lambda i: int(lengths[i]))
        pos = sorted(ranked.index(int(i)) for i in b)
        assert pos == list(range(pos[0], pos[0] + len(pos)))
    again = length_buckets(order, lengths, 2, 3, torch.Generator().manual_seed(1))
    assert [b.tolist() for b in again] == [b.tolist() for b in batches]  # a pure function of the seeds


def test_warmup_linear_schedule():
    f = warmup_linear(10, 0.2)
    assert [f(s) for s in range(11)] == pytest.approx(
        [0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8, 0]
    )


@pytest.mark.parametrize("select_by", ["loss", "auprc", "auroc", "f1"])
def test_steps_validations_and_selection(tmp_path, pretrained, dataset_dir, program_dir, select_by):  # noqa: F811
    """max_steps overrides epochs; validations every val_every steps, at epoch ends and after the last step;
    the kept checkpoint is the first best by select_by; pos_weight auto weighs the BCE by the train labels;
    length buckets keep the number of batches."""
    r = finetune(
        pretrained,
        dataset_dir,
        program_dir,
        out=tmp_path,
        task="mortality",
        max_steps=7,
        val_every=2,
        epochs=1,
        batch_size=8,
        lr=1e-3,
        schedule="linear",
        pos_weight="auto",
        select_by=select_by,
        bucket_batches=2,
        device="cpu",
        progress=False,
    )
    d = r.run_dir / "trial-0"
    recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    # 24 train patients / batch 8 = 3 steps an epoch: validations at 2, 3 (epoch end), 5, 6 (epoch end), 7
    assert [e["step"] for e in recs] == [2, 3, 5, 6, 7]
    res = r.trials[0]
    assert res["steps"] == 7
    key = f"val_{select_by}"
    sign = 1 if select_by == "loss" else -1
    vals = [sign * e[key] if not math.isnan(e[key]) else math.inf for e in recs]
    assert res["best_step"] == recs[int(np.argmin(vals))]["step"]
    ds = TokenizedDataset(dataset_dir, program_dir.name, 31)
    train = ds.sequences(
        "finetune_train", max_len=128, max_segments=100, task="mortality", before_last_visit=True
    )
    assert res["pos_weight"] == pos_weights(train.labels.numpy()).tolist()


def test_read_thresholds_of_an_older_model_and_a_bad_file(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="pipelines.train.finetune"):
        assert read_thresholds(tmp_path, "chapters", 22).tolist() == [0.5] * 22
    assert THRESHOLDS_FILE in caplog.text and "0.5" in caplog.text
    (tmp_path / THRESHOLDS_FILE).write_text(json.dumps({"task": "mortality", "thresholds": [0.3]}))
    with pytest.raises(PipelineError, match="22 thresholds"):
        read_thresholds(tmp_path, "chapters", 22)
    (tmp_path / THRESHOLDS_FILE).write_text("{not json")
    with pytest.raises(PipelineError, match=THRESHOLDS_FILE):
        read_thresholds(tmp_path, "mortality", 1)


def test_finetune_learns_mortality(tmp_path, program_dir):  # noqa: F811
    """The fixture's mortality is known: a deadly code in the last visit the model sees. A fine-tuned model
    ranks the held-out test patients far above chance (AUROC 0.5); one that ignores its input, its labels
    or its pretrained weights does not."""
    sizes = {**SPLIT_SIZES, "finetune_train": 300, "finetune_val": 40, "test": 120}
    ds = write_dataset(tmp_path / "ds", program_dir, sizes=sizes)
    pre = pretrain(
        ds,
        program_dir,
        out=tmp_path,
        model="tiny",
        mode="base",
        max_steps=3,
        batch_size=8,
        device="cpu",
        progress=False,
    ).run_dir
    r = finetune(
        pre,
        ds,
        program_dir,
        out=tmp_path,
        task="mortality",
        max_steps=200,
        val_every=20,
        lr=1e-3,
        batch_size=16,
        pos_weight="auto",
        device="cpu",
        progress=False,
    )
    d = r.run_dir / "trial-0"
    epochs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    test = r.trials[0]["test"]
    assert test["n"] == 120 and 0 < test["positives"] < 120
    assert test["auroc"] > 0.8, test
    prevalence = test["positives"] / 120
    constant_f1 = 2 * prevalence / (1 + prevalence)  # the best constant: every patient positive
    assert test["f1"] > constant_f1 + 0.2 and test["f1"] > 0.6, test
    assert test["accuracy"] > max(prevalence, 1 - prevalence), test


def test_cli_finetune(tmp_path, pretrained, dataset_dir, program_dir):  # noqa: F811
    res = CliRunner().invoke(
        main,
        [
            "finetune",
            str(pretrained),
            "--dataset",
            str(dataset_dir),
            "--program",
            str(program_dir),
            "--task",
            "chapters",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "trial 0   test: accuracy" in res.output


class _Stop(Exception):
    pass


def _captured_trial(monkeypatch, tmp_path, pretrained, dataset_dir, program_dir, **kw):  # noqa: F811
    """What fine-tuning hands the loop (model, optimizer, task, options), without training."""
    import pipelines.train.finetune as ft

    seen = {}

    def capture(model, optimizer, scheduler, task, options, run_dir, **_):
        seen.update(model=model, opt=optimizer, task=task, options=options)
        raise _Stop

    monkeypatch.setattr(ft, "run_loop", capture)
    with pytest.raises(_Stop):
        finetune(pretrained, dataset_dir, program_dir, out=tmp_path, task="mortality", **{**FT, **kw})
    return seen


def test_finetune_adamw_weight_decay(tmp_path, monkeypatch, pretrained, dataset_dir, program_dir):  # noqa: F811
    """Guards against fine-tuning dropping ``weight_decay`` (AdamW would then decay by its own default
    0.01, or not at all): every param group carries the configured value, and one AdamW step with zero
    gradients shrinks each weight by exactly ``1 - lr * weight_decay`` (decoupled decay); the configured
    ``clip`` reaches the loop too."""
    lr, wd = 1e-2, 0.37
    seen = _captured_trial(
        monkeypatch, tmp_path, pretrained, dataset_dir, program_dir, lr=lr, weight_decay=wd, clip=0.25
    )
    opt = seen["opt"]
    assert [g["weight_decay"] for g in opt.param_groups] == [wd] * len(opt.param_groups)
    assert seen["options"].clip == 0.25
    params = [p for g in opt.param_groups for p in g["params"]]
    assert params
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    for p, b in zip(params, before, strict=True):
        torch.testing.assert_close(p.detach(), b * (1 - lr * wd), rtol=1e-5, atol=1e-9)


def test_finetune_ranks_disjoint_shares(tmp_path, monkeypatch, pretrained, dataset_dir, program_dir):  # noqa: F811
    """Guards against every DDP rank reading the same shard in fine-tuning: under two ranks the batches of
    an epoch split into disjoint halves whose union is the single-process batch."""
    from pipelines.train.runtime import DistContext

    task = _captured_trial(monkeypatch, tmp_path, pretrained, dataset_dir, program_dir, batch_size=4)["task"]
    whole = task.epoch_batches(0)
    shares = []
    for rank in (0, 1):
        task.ctx = DistContext(rank=rank, world_size=2)
        shares.append(task.epoch_batches(0))
    assert len(whole) > 1 and len(shares[0]) == len(shares[1]) == len(whole)
    for w, a, b in zip(whole, shares[0], shares[1], strict=True):
        assert len(a) and len(b) and not set(a.tolist()) & set(b.tolist())
        assert sorted(a.tolist() + b.tolist()) == sorted(w.tolist())
