"""Doctor2Vec training, evaluation, metrics, the comparison report and the CLI, on a tiny generated set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from d2v_fixtures import OPTS, make_dataset
from train_fixtures import program_dir  # noqa: F401

from pipelines.cli import main
from pipelines.doctor2vec.data import generate_doctor2vec
from pipelines.doctor2vec.evaluate import evaluate_doctor2vec
from pipelines.doctor2vec.read import read_doctor2vec
from pipelines.doctor2vec.tensors import build_tensors, doctor_batches, make_batch, pad_lists
from pipelines.doctor2vec.train import Doctor2VecMismatchError, ranking_metrics, train_doctor2vec
from pipelines.errors import PipelineError

FAST = dict(epochs=2, dim=16, hidden=16, doctors_per_batch=4, progress=False, max_memories=48)


@pytest.fixture(scope="module")
def d2v(tmp_path_factory, program_dir):  # noqa: F811
    root = tmp_path_factory.mktemp("d2vtrain")
    ds = make_dataset(root / "ds", program_dir)
    return generate_doctor2vec(ds, program_dir, out=root / "d2v", options=OPTS).path


@pytest.fixture(scope="module")
def run(tmp_path_factory, d2v, program_dir):  # noqa: F811
    torch.set_num_threads(1)
    return train_doctor2vec(d2v, program_dir, out=tmp_path_factory.mktemp("runs"), embedding="hrr", **FAST)


def test_ranking_metrics_against_hand_computed_values():
    trial = np.array([1, 1, 1, 1, 2, 2, 2, 3, 3])
    label = np.array([1, 0, 1, 0, 0, 1, 0, 0, 0])
    score = np.array([0.9, 0.8, 0.1, 0.2, 0.5, 0.4, 0.3, 0.9, 0.1])
    m = ranking_metrics(trial, label, score, k=(1, 2))
    assert m["trials"] == 3 and m["trials_with_positives"] == 2 and m["positives"] == 3
    assert m["p_at_1"] == pytest.approx((1 + 0) / 2)  # trial 1 top = positive; trial 2 top = negative
    assert m["p_at_2"] == pytest.approx((0.5 + 0.5) / 2)
    # AP trial 1: ranks 1 (hit) and 4 (hit) -> (1 + 2/4) / 2; trial 2: rank 2 -> 1/2
    assert m["trial_ap"] == pytest.approx(((1 + 0.5) / 2 + 0.5) / 2)
    assert m["per_trial_ap"]["trial"] == [1, 2]
    assert 0.0 <= m["roc_auc"] <= 1.0 and 0.0 <= m["pr_auc"] <= 1.0


def test_pad_lists_keeps_first_or_last():
    import pyarrow as pa

    col = pa.array([[1, 2, 3], [], [4]], pa.list_(pa.int32()))
    assert pad_lists(col, 2).tolist() == [[1, 2], [0, 0], [4, 0]]
    assert pad_lists(col, 2, keep="last").tolist() == [[2, 3], [0, 0], [4, 0]]
    assert pad_lists(col).shape == (3, 3)


def test_tensors_hide_held_out_codes_in_training_only(d2v):
    data = read_doctor2vec(d2v)
    held = torch.tensor(data.manifest["held_out_codes"])
    assert held.numel()
    t = build_tensors(data, max_memories=48, max_codes=64, hide_held_out=True, seed=0)
    assert not torch.isin(t.codes["train"], held).any()
    assert torch.isin(t.codes["eval"], held).any()
    # every pair of a split is in exactly one doctor batch, and a batch's memories point at its patients
    rows = t.pairs_of("train")
    batches = doctor_batches(t, rows, 4, np.random.default_rng(0))
    assert sorted(np.concatenate(batches).tolist()) == sorted(rows.tolist())
    b = make_batch(t, batches[0], "train")
    assert int(b["memory"].max()) < b["patient_codes"].shape[0]
    assert b["pair_trial"].shape == b["label"].shape and int(b["pair_trial"].max()) < b["conditions"].shape[0]


def test_train_writes_run_and_metrics(run):
    r = run.results
    assert (run.run_dir / "model" / "model.safetensors").is_file()
    records = [json.loads(x) for x in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    # the loop records the 0-based epoch index and the step
    assert records[-1]["epoch"] == FAST["epochs"] - 1 and all("val_pr_auc" in x for x in records)
    assert records[-1]["step"] == r["steps"]
    for split in ("val", "test", "test_rare"):
        assert split in r and r[split]["pairs"] > 0
    assert r["model"]["embedding"] == "hrr" and r["config"]["doctor"] == "dynamic"
    saved = json.loads((run.run_dir / "results.json").read_text())
    assert saved["best_step"] in [x["step"] for x in records] and saved["steps"] == records[-1]["step"]


def _above_chance(metrics: dict) -> None:
    """Ranks the held-out pairs far above chance (ROC AUC 0.5; PR AUC: the positive rate): the generator's
    ground truth (a doctor with no eligible patient never enrolls) makes the answer learnable."""
    assert metrics["roc_auc"] > 0.7, metrics
    assert metrics["pr_auc"] > metrics["positives"] / metrics["pairs"] + 0.1, metrics


def test_dynamic_doctor_learns(run):
    for split in ("test", "test_rare"):
        _above_chance(run.results[split])


def test_same_run_id_is_refused(run, d2v, program_dir):  # noqa: F811
    with pytest.raises(PipelineError, match="already exists"):
        train_doctor2vec(d2v, program_dir, out=run.run_dir.parent, run_id=run.run_dir.name, **FAST)


def test_evaluate_reports_and_explains_a_trial(run, d2v, program_dir):  # noqa: F811
    report, text = evaluate_doctor2vec(run.run_dir, d2v, program_dir, split="test")
    assert report["pairs"] == run.results["test"]["pairs"]
    assert report["pr_auc"] == pytest.approx(run.results["test"]["pr_auc"], abs=1e-9)
    assert text.startswith("Trial ") and "Doctor " in text and "patient " in text
    with pytest.raises(PipelineError, match="not in the data set"):
        evaluate_doctor2vec(run.run_dir, d2v, program_dir, trial=10**6)


def test_model_from_another_data_set_is_refused(run, d2v, program_dir, tmp_path):  # noqa: F811
    other = tmp_path / "other"
    import shutil

    shutil.copytree(d2v, other)
    m = json.loads((other / "manifest.json").read_text())
    m["vocab_fingerprint"] = "0" * 16
    (other / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(Doctor2VecMismatchError, match="vocab_fingerprint"):
        evaluate_doctor2vec(run.run_dir, other, program_dir)


def test_static_doctor_and_visit_encoder_train(d2v, program_dir, tmp_path):  # noqa: F811
    torch.set_num_threads(1)
    r = train_doctor2vec(
        d2v, program_dir, out=tmp_path, **{**FAST, "epochs": 1}, patient_encoder="visit-transformer"
    )
    _above_chance(r.results["test"])
    # the static doctor (the mean of its patients) is the paper's weak baseline: it only has to train
    r = train_doctor2vec(d2v, program_dir, out=tmp_path, **{**FAST, "epochs": 1}, doctor="static")
    assert np.isfinite(r.results["test"]["roc_auc"]) and r.results["val"]["roc_auc"] > 0.5


def test_compare_report_and_cli(d2v, program_dir, tmp_path, monkeypatch):  # noqa: F811
    from pipelines.doctor2vec import compare as dc

    monkeypatch.setattr(
        dc, "GRID", {k: {**v, "hidden": 16, "doctors_per_batch": 4} for k, v in dc.GRID.items()}
    )
    only = ["plain-dynamic", "hrr-cat-dynamic", "plain-static"]
    path = dc.compare(None, program_dir, out=tmp_path / "cmp", data=d2v, epochs=1, dim=16, seeds=2, only=only)
    assert sorted(p.name for p in (tmp_path / "cmp" / "runs").iterdir()) == sorted(
        f"{n}-seed{s}" for n in only for s in (0, 1)
    )  # a given data folder: one data set, runs named by training seed only
    text = path.read_text()
    for needle in (
        "Test trials",
        "Rare-disease trials",
        "hrr-cat-dynamic",
        "plain-static",
        "ceiling: eligible",
        "Differences, run by run",
        "a better in",
        "| s0 | s1 |",
        "Which patients",
    ):
        assert needle in text, needle
    assert "hrr-base-dynamic" not in text.split("## Which patients")[0]  # not asked for
    row = next(line for line in text.splitlines() if line.startswith("| plain-dynamic |"))
    assert row.count(" to ") == 5 and "(1 run)" not in text  # two runs: an interval in every metric cell
    with pytest.raises(ValueError, match="seeds must be"):
        dc.compare(None, program_dir, out=tmp_path / "cmp2", data=d2v, seeds=0)
    with pytest.raises(ValueError, match="existing data folder"):
        dc.compare(None, program_dir, out=tmp_path / "cmp2", data=d2v, data_seeds=2)
    with pytest.raises(ValueError, match="unknown \\['hrr-gpt'\\]"):
        dc.compare(None, program_dir, out=tmp_path / "cmp2", data=d2v, only=["hrr-gpt"])
    # `hrrbert report` rewrites it from the files alone
    path.unlink()
    res = CliRunner().invoke(main, ["report", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert path.is_file() and "| run" in res.output


def test_compare_over_data_seeds(program_dir, tmp_path, monkeypatch):  # noqa: F811
    from pipelines.doctor2vec import compare as dc

    monkeypatch.setattr(
        dc,
        "GRID",
        {k: {**v, "hidden": 16, "doctors_per_batch": 4, "max_memories": 48} for k, v in dc.GRID.items()},
    )
    ds = make_dataset(tmp_path / "ds", program_dir)
    out = tmp_path / "cmp"
    path = dc.compare(
        ds,
        program_dir,
        out=out,
        epochs=1,
        dim=16,
        seeds="1,",
        data_seeds="0,2",
        only=["plain-dynamic", "hrr-base-dynamic"],
        data_options=OPTS,
    )
    want = {f"{n}-data{d}-seed1" for n in ("plain-dynamic", "hrr-base-dynamic") for d in (0, 2)}
    assert {p.name for p in (out / "runs").iterdir()} == want
    sets = [p for p in (out / "data").glob("*/*") if p.is_dir()]
    assert sorted(json.loads((p / "manifest.json").read_text())["options"]["seed"] for p in sets) == [0, 2]
    for rid in want:  # each run trained on its own data seed's set with its training seed
        cfg = json.loads((out / "runs" / rid / "results.json").read_text())["config"]
        assert cfg["seed"] == 1
        seed = json.loads((Path(cfg["data"]) / "manifest.json").read_text())["options"]["seed"]
        assert rid.split("-data")[1].startswith(f"{seed}-")
    text = path.read_text()
    assert "| d0/s1 | d2/s1 |" in text and "a better in" in text and "= 2 run(s)" in text
    assert "HRR base vs plain codes" in text and "dynamic vs static" not in text
    # the CLI takes the same options (bad ones are refused, naming them)
    base = ["doctor2vec", "compare", "--dataset", str(ds), "--program", str(program_dir), "--out", str(out)]
    bad = CliRunner().invoke(main, [*base, "--only", "hrr-gpt"])
    assert bad.exit_code != 0 and "hrr-gpt" in bad.output
    bad = CliRunner().invoke(main, [*base, "--data-seeds", "0,0"])
    assert bad.exit_code != 0 and "data seeds" in bad.output


def test_cli_generate_train_evaluate(tmp_path, d2v, program_dir):  # noqa: F811
    ds = make_dataset(tmp_path / "ds", program_dir, seed=1)
    cli = CliRunner()
    r = cli.invoke(
        main,
        [
            "doctor2vec",
            "generate",
            str(ds),
            "--program",
            str(program_dir),
            "--out",
            str(tmp_path / "d2v"),
            "--doctors",
            "12",
            "--train-trials",
            "6",
            "--val-trials",
            "2",
            "--test-trials",
            "2",
            "--rare-trials",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "doctors   10 " in r.output and "train 6, val 2, test 2, test_rare 2" in r.output
    assert "doctor no patients 2" in r.output
    r = cli.invoke(
        main,
        [
            "doctor2vec",
            "train",
            str(d2v),
            "--program",
            str(program_dir),
            "--out",
            str(tmp_path / "runs"),
            "--run-id",
            "cli",
            "--embedding",
            "plain",
            "--epochs",
            "1",
            "--dim",
            "16",
            "--doctors-per-batch",
            "4",
            "--no-progress",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "test_rare" in r.output and "PR-AUC" in r.output
    r = cli.invoke(
        main,
        [
            "doctor2vec",
            "evaluate",
            str(tmp_path / "runs" / "cli"),
            "--data",
            str(d2v),
            "--program",
            str(program_dir),
            "--split",
            "test",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "Trial " in r.output
    r = cli.invoke(
        main,
        ["doctor2vec", "evaluate", str(tmp_path / "ds"), "--data", str(d2v), "--program", str(program_dir)],
    )
    assert r.exit_code != 0 and "not a saved Doctor2Vec model" in r.output


def test_epoch_batches_replay_for_resume(d2v, program_dir):  # noqa: F811
    """The doctor order of each epoch comes from one seeded stream; asked out of turn (as after a resume)
    it is replayed from the start, so a resumed run sees the uninterrupted run's batches."""
    from pipelines.doctor2vec.config import D2VTrainConfig
    from pipelines.doctor2vec.train import D2VTask
    from pipelines.train.runtime import DistContext

    torch.set_num_threads(1)
    ds = read_doctor2vec(d2v)
    t = build_tensors(ds, max_memories=48, max_codes=64, hide_held_out=True, seed=0)
    cfg = D2VTrainConfig(data=str(d2v), program=str(program_dir), **FAST)
    rows = t.pairs_of("train")
    ctx = DistContext()
    walked = D2VTask(cfg, t, rows, ctx, "cpu")
    seq = [walked.epoch_batches(e) for e in range(3)]
    jump = D2VTask(cfg, t, rows, ctx, "cpu")
    for e in (2, 0, 1):
        assert [b.tolist() for b in jump.epoch_batches(e)] == [b.tolist() for b in seq[e]]
