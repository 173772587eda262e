"""Fine-tuning: inputs cut before the last visit, both tasks, trials, best checkpoint, results, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from train_fixtures import SPLIT_SIZES, dataset_dir, program_dir, write_dataset  # noqa: F401

from model import HRRBert
from pipelines.cli import main
from pipelines.data.sequences import TokenizedDataset
from pipelines.train.finetune import finetune
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
        best = max(epochs, key=lambda e: (e["val_f1"], -e["epoch"]))
        assert res["best_epoch"] == best["epoch"] and res["val"]["f1"] == best["val_f1"]
        assert HRRBert.from_pretrained(d / "model", __import__("hrr_kernel").load_program(program_dir))
    assert r.trials[0]["test"] != r.trials[1]["test"] or r.trials[0]["val"] != r.trials[1]["val"]
    summary = json.loads((r.run_dir / "summary.json").read_text())
    assert summary["config"]["task"] == task and len(summary["trials"]) == 2


def test_finetune_learns_mortality(tmp_path, program_dir):  # noqa: F811
    """The fixture's mortality is known: a deadly code in the last visit the model sees. A fine-tuned model
    ranks the held-out test patients far above chance (AUROC 0.5); one that ignores its input, its labels
    or its pretrained weights does not."""
    sizes = {**SPLIT_SIZES, "finetune_train": 300, "finetune_val": 40, "test": 120}
    ds = write_dataset(tmp_path / "ds", program_dir, sizes=sizes)
    pre = pretrain(ds, program_dir, out=tmp_path, model="tiny", mode="base", max_steps=3, batch_size=8,
                   device="cpu", progress=False).run_dir  # fmt: skip
    r = finetune(pre, ds, program_dir, out=tmp_path, task="mortality", epochs=12, lr=1e-3, batch_size=16,
                 device="cpu", progress=False, select_by="loss")  # fmt: skip
    d = r.run_dir / "trial-0"
    epochs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    test = r.trials[0]["test"]
    assert test["n"] == 120 and 0 < test["positives"] < 120
    assert test["auroc"] > 0.8, test
    assert test["f1"] > 0.6 and test["accuracy"] > max(test["positives"], 120 - test["positives"]) / 120, test


def test_cli_finetune(tmp_path, pretrained, dataset_dir, program_dir):  # noqa: F811
    res = CliRunner().invoke(
        main,
        ["finetune", str(pretrained), "--dataset", str(dataset_dir), "--program", str(program_dir), "--task",
         "chapters", "--epochs", "1", "--batch-size", "8", "--device", "cpu", "--out", str(tmp_path), "-q"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "trial 0   test: accuracy" in res.output
