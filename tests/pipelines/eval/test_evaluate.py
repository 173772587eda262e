"""``hrrbert evaluate`` on the fixture program: every part, the CLI, and bad input naming what differs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir, write_dataset  # noqa: F401

from pipelines.cli import main
from pipelines.eval.frequency import BIN_EDGES, bins_of
from pipelines.eval.neighbours import Ontology, nearest
from pipelines.eval.pretrained import evaluate_pretrained
from pipelines.train.finetune import finetune
from pipelines.train.pretrain import pretrain

FAST = dict(tsne_points=20, cost_steps=1, per_bin=50, device="cpu")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dataset_dir, program_dir):  # noqa: F811
    out = tmp_path_factory.mktemp("eval_runs")
    pre = pretrain(
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
    ft = {
        task: finetune(
            pre,
            dataset_dir,
            program_dir,
            out=out,
            run_id=task,
            task=task,
            trials=2,
            epochs=1,
            batch_size=8,
            device="cpu",
            progress=False,
        ).run_dir
        for task in ("mortality", "chapters")
    }
    return pre, ft


def test_bins_follow_the_paper():
    assert BIN_EDGES == (-14.0, -12.0, -10.0, -8.0, -6.0, -4.0, -2.0, 0.0)
    got = bins_of(np.array([-14.0, -13.9, -12.0, -3.5, -0.1, 0.0, -15.0, 0.5]))
    assert got.tolist() == [0, 0, 1, 5, 6, 6, -1, -1]


def test_nearest_excludes_self_and_specials():
    m = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [1.0, 0.01]])
    assert nearest(m, [0], 2, exclude=[3]).tolist() == [[1, 2]]
    assert nearest(m, [0], 1, exclude=[]).tolist() == [[3]]


def test_ontology_relatedness(program_dir):  # noqa: F811
    onto = Ontology(program_dir)
    mapped = [i for i, s in enumerate(onto.snomed) if s]
    a = mapped[0]
    assert onto.related(a, a)  # the same concept is within zero steps
    special = onto.codes.index("[PAD]")
    assert not onto.related(a, special)  # unmapped tokens are never related
    # two is-a steps reach the parent's parent but not further
    c = next(iter(onto.snomed[a]))
    assert onto.within({c}, 0) == {c} and onto.neigh[c] <= onto.within({c}, 1)


def test_evaluate_all_parts(tmp_path, runs, dataset_dir, program_dir):  # noqa: F811
    pre, ft = runs
    r = evaluate_pretrained(
        pretrained=str(pre),
        dataset=str(dataset_dir),
        program=str(program_dir),
        out=str(tmp_path),
        mortality=str(ft["mortality"]),
        chapters=str(ft["chapters"]),
        transfer_dataset=str(dataset_dir),
        **FAST,
    )
    saved = json.loads((tmp_path / "evaluation.json").read_text())
    assert saved["program_id"] == program_dir.name and saved["mode"] == "base"
    bins = saved["frequency_bins"]
    assert len(bins) == 7 and [b["low"] for b in bins] == list(BIN_EDGES[:-1])
    assert sum(b["probes"] for b in bins) > 0
    for b in bins:
        assert (b["top10"] is None) == (b["probes"] == 0)
        if b["probes"]:
            assert 0 <= b["top10"] <= b["top100"] <= 1
            assert (
                1
                <= b["median_rank"]
                <= b["ranked"]
                == pq.read_metadata(program_dir / "concepts.parquet").num_rows
            )
    groups = saved["neighbours"]["groups"]
    assert set(groups) == {"case_studies", "common", "rare", "random"}
    for g in groups.values():
        assert 0 <= g["related"] <= g["total"] == 4 * len(g["codes"])
    assert len(saved["rood"]) == 2 and saved["rood"][0]["rood"]["n"] == 4
    assert saved["rood"][0]["rood_unseen"] == {"n": 0}  # the fixture flags none
    assert len(saved["transfer"]) == 2 and saved["transfer"][0]["test"]["n"] == 12
    assert (tmp_path / "tsne.png").stat().st_size > 1000
    assert saved["cost"]["step_s"] > 0 and saved["cost"]["peak_memory_mb"] > 0
    assert r["label"] == "base"
    _check_predictions(tmp_path, saved, ft)


def _check_predictions(out, saved, ft):
    """``<out>/predictions.parquet``: per trial the ROOD (the empty rood_unseen has no rows) and transfer
    predictions, at the thresholds kept with each trial's model, scoring as evaluation.json says."""
    from pipelines.train.finetune import read_thresholds
    from pipelines.train.predictions import read_predictions

    blocks = {(b.split, b.trial): b for b in read_predictions(out / "predictions.parquet")}
    assert sorted(blocks) == [("rood", 0), ("rood", 1), ("transfer", 0), ("transfer", 1)]
    for (split, k), b in blocks.items():
        task, n, n_labels = ("chapters", 4, 22) if split == "rood" else ("mortality", 12, 1)
        assert b.model == "base" and b.task == task
        assert b.labels.shape == b.probs.shape == (n, n_labels) and len(set(b.subject_id.tolist())) == n
        assert (
            b.thresholds.tolist()
            == read_thresholds(ft[task] / f"trial-{k}" / "model", task, n_labels).tolist()
        )
        rec = saved["rood"][k]["rood"] if split == "rood" else saved["transfer"][k]["test"]
        assert b.scores()["f1"] == pytest.approx(rec["f1"]) and b.scores()["n"] == rec["n"]


def test_evaluate_cli(tmp_path, runs, dataset_dir, program_dir):  # noqa: F811
    pre, _ = runs
    args = [
        "evaluate",
        str(pre),
        "--dataset",
        str(dataset_dir),
        "--program",
        str(program_dir),
        "--out",
        str(tmp_path / "ev"),
        "--tsne-points",
        "0",
        "--cost-steps",
        "0",
        "--per-bin",
        "20",
        "--device",
        "cpu",
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "bin       [-14, -12)" in res.output and "neighbours rare" in res.output
    assert not (tmp_path / "ev" / "tsne.png").exists()


def _cli(args):
    return CliRunner().invoke(main, ["evaluate", *map(str, args), "--device", "cpu", "--tsne-points", "0"])


def test_dataset_of_another_program_is_refused(tmp_path, runs, program_dir):  # noqa: F811
    pre, _ = runs
    other = write_dataset(tmp_path / "other", program_dir, program_id="0123456789abcdef")
    res = _cli([pre, "--dataset", other, "--program", program_dir, "--out", tmp_path / "ev"])
    assert res.exit_code == 1
    assert "0123456789abcdef" in res.output and program_dir.name in res.output


def test_transfer_dataset_of_another_program_is_refused(tmp_path, runs, dataset_dir, program_dir):  # noqa: F811
    pre, ft = runs
    other = write_dataset(tmp_path / "other", program_dir, program_id="fedcba9876543210")
    res = _cli(
        [
            pre,
            "--dataset",
            dataset_dir,
            "--program",
            program_dir,
            "--out",
            tmp_path / "ev",
            "--mortality",
            ft["mortality"],
            "--transfer-dataset",
            other,
        ]
    )
    assert res.exit_code == 1 and "fedcba9876543210" in res.output


def test_missing_and_corrupt_model(tmp_path, runs, dataset_dir, program_dir):  # noqa: F811
    pre, ft = runs
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _cli([empty, "--dataset", dataset_dir, "--program", program_dir, "--out", tmp_path / "ev"])
    assert res.exit_code == 1 and "config.json" in res.output and "missing" in res.output
    bad = tmp_path / "bad"
    shutil.copytree(pre / "model", bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    res = _cli([bad, "--dataset", dataset_dir, "--program", program_dir, "--out", tmp_path / "ev"])
    assert res.exit_code == 1 and "model.safetensors" in res.output and "corrupt" in res.output
    noft = tmp_path / "noft"
    noft.mkdir()
    res = _cli(
        [
            pre,
            "--dataset",
            dataset_dir,
            "--program",
            program_dir,
            "--out",
            tmp_path / "ev",
            "--chapters",
            noft,
        ]
    )
    assert res.exit_code == 1 and "no fine-tuned model" in res.output and str(noft) in res.output


def test_task_labels_absent(tmp_path, runs, program_dir):  # noqa: F811
    pre, ft = runs
    ds = write_dataset(tmp_path / "nolabels", program_dir, drop_columns=("chapters",))
    res = _cli(
        [
            pre,
            "--dataset",
            ds,
            "--program",
            program_dir,
            "--out",
            tmp_path / "ev",
            "--chapters",
            ft["chapters"],
        ]
    )
    assert res.exit_code == 1 and "'chapters'" in res.output and "patients.parquet" in res.output
    ds2 = write_dataset(tmp_path / "nullmort", program_dir, null_column="mortality_6m")
    res = _cli(
        [
            pre,
            "--dataset",
            ds,
            "--program",
            program_dir,
            "--out",
            tmp_path / "ev",
            "--mortality",
            ft["mortality"],
            "--transfer-dataset",
            ds2,
        ]
    )
    assert res.exit_code == 1 and "mortality_6m" in res.output and "no labels" in res.output


def test_an_existing_out_is_refused_unless_force(tmp_path, runs, dataset_dir, program_dir):  # noqa: F811
    pre, _ = runs
    out = tmp_path / "ev"
    base = [
        "evaluate",
        str(pre),
        "--dataset",
        str(dataset_dir),
        "--program",
        str(program_dir),
        "--out",
        str(out),
        "--cost-steps",
        "0",
        "--per-bin",
        "20",
        "--device",
        "cpu",
    ]
    assert CliRunner().invoke(main, [*base, "--tsne-points", "20"]).exit_code == 0
    (out / "notes.txt").write_text("mine")
    first = (out / "evaluation.json").read_bytes()
    res = CliRunner().invoke(main, [*base, "--tsne-points", "0", "--seed", "1"])
    assert res.exit_code == 1 and "exists and is not empty" in res.output and "--force" in res.output
    assert (out / "evaluation.json").read_bytes() == first and (out / "tsne.png").is_file()
    res = CliRunner().invoke(main, [*base, "--tsne-points", "0", "--seed", "1", "--force"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "evaluation.json").read_text())["config"]["seed"] == 1
    assert not (out / "tsne.png").exists()  # the replaced evaluation's plot does not outlive it
    assert (out / "notes.txt").read_text() == "mine"  # nothing else is touched
    with pytest.raises(Exception, match="not empty"):  # the API refuses too, before any work
        evaluate_pretrained(pretrained="missing", dataset="missing", program="missing", out=str(out))
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="not a folder"):
        evaluate_pretrained(
            pretrained="missing", dataset="missing", program="missing", out=str(tmp_path / "file")
        )
