"""``hrrbert evaluate --labels DIR --labels-run RUN``: a model fine-tuned on a MEDS label task scored on the
label rows (placed as the fine-tuning placed them), its numbers against sklearn on the written predictions,
the patient (cluster) bootstrap, and the misuse errors. The MEDS cohort and label helpers are those of the
fine-tuning test (``tests/pipelines/data/test_meds_io.py``)."""

from __future__ import annotations

import importlib.util
import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sklearn.metrics import average_precision_score, f1_score, precision_score, recall_score, roc_auc_score
from train_fixtures import compile_fixture

from pipelines.errors import PipelineError

_spec = importlib.util.spec_from_file_location(
    "meds_io_helpers", Path(__file__).parents[1] / "data" / "test_meds_io.py"
)
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)

FAST = dict(tsne_points=0, cost_steps=0, per_bin=5, per_group=2, unbinding_rows=0, device="cpu")


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return compile_fixture(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return M.write_cohort(tmp_path_factory.mktemp("meds") / "cohort")


@pytest.fixture(scope="module")
def dataset(cohort, program, tmp_path_factory) -> Path:
    from pipelines.data.prepare import prepare

    (r,) = prepare(meds=cohort[0], program=program, out=tmp_path_factory.mktemp("ds"), splits=M.SPLITS)
    return r.path


@pytest.fixture(scope="module")
def labels(cohort, tmp_path_factory) -> Path:
    """Task "i10": at every visit from the second on, was I10 coded so far? (several rows per patient), plus
    one row of a subject the dataset does not hold and one before any visit (both left out)."""
    _, times = cohort
    events = M.cohort_rows(len(times))[0]
    rows = []
    for s, ts in times.items():
        for t in ts[1:]:
            rows.append((s, t, any(c.endswith("//I10") for (s2, t2, c) in events if s2 == s and t2 <= t)))
    rows += [(999_999, ts[0], True), (1, times[1][0] - timedelta(days=1), False)]
    return M.write_labels(tmp_path_factory.mktemp("labels") / "i10", rows, shards=2)


@pytest.fixture(scope="module")
def runs(dataset, program, labels, tmp_path_factory) -> dict[str, Path]:
    from pipelines.train.finetune import finetune
    from pipelines.train.pretrain import pretrain

    out = tmp_path_factory.mktemp("runs")
    pre = pretrain(
        dataset,
        program,
        out=out,
        model="tiny",
        mode="base",
        max_steps=2,
        batch_size=8,
        device="cpu",
        progress=False,
    ).run_dir
    kw = dict(out=out, trials=2, max_steps=3, batch_size=8, device="cpu", progress=False)
    return {
        "pretrained": pre,
        "labels": finetune(pre, dataset, program, labels=str(labels), run_id="lab", **kw).run_dir,
        "mortality": finetune(pre, dataset, program, run_id="mort", **{**kw, "trials": 1}).run_dir,
    }


def _evaluate(out, runs, dataset, program, **kw):
    from pipelines.eval.pretrained import evaluate_pretrained

    return evaluate_pretrained(
        pretrained=str(runs["pretrained"]),
        dataset=str(dataset),
        program=str(program),
        out=str(out),
        **{**FAST, **kw},
    )


def test_evaluate_scores_a_label_task_run_on_its_test_rows(
    tmp_path, runs, dataset, program, labels, one_thread
):
    from pipelines.data.label_tasks import place_labels, read_label_task
    from pipelines.eval.pretrained import summary_lines
    from pipelines.train.predictions import read_predictions

    rec = _evaluate(tmp_path, runs, dataset, program, labels=str(labels), labels_run=str(runs["labels"]))
    saved = json.loads((tmp_path / "evaluation.json").read_text())
    lab = saved["labels"]
    assert lab["task"] == "i10" and lab["split"] == "test" and lab["trained_on"]["same_files"]
    assert rec["labels"]["rows"] == lab["rows"]
    # the rows: placed as the fine-tuning placed them, those of the test split
    placed = place_labels(read_label_task(labels), pq.read_table(dataset / "patients.parquet"), dataset)
    test = placed.split == "test"
    r = lab["rows"]
    assert r["used"] == int(test.sum()) > r["patients"] == M.SPLITS.test  # several rows per patient
    assert r["dropped"] == {
        "subject_not_in_dataset": 1,
        "without_history": 1,
        "cut_by_truncation": 0,
        "other_splits": int((~test).sum()),
    }
    assert r["positives"] == int(placed.label[test].sum())
    # the numbers equal sklearn's on the written predictions, per trial at its kept threshold
    blocks = [b for b in read_predictions(tmp_path / "predictions.parquet") if b.split == "labels"]
    assert [b.trial for b in blocks] == [0, 1] and all(b.task == "mortality" for b in blocks)
    for b, t in zip(blocks, lab["trials"], strict=True):
        y, p = b.labels[:, 0], b.probs[:, 0].astype(np.float64)
        assert y.tolist() == placed.label[test].astype(int).tolist()
        thr = json.loads((runs["labels"] / f"trial-{b.trial}" / "model" / "thresholds.json").read_text())
        assert t["threshold"] == pytest.approx(thr["thresholds"][0]) == pytest.approx(float(b.thresholds[0]))
        pred = p >= b.thresholds[0]
        assert t["auroc"] == pytest.approx(roc_auc_score(y, p))
        assert t["auprc"] == pytest.approx(average_precision_score(y, p))
        assert t["f1"] == pytest.approx(f1_score(y, pred, zero_division=0))
        assert t["precision"] == pytest.approx(precision_score(y, pred, zero_division=0))
        assert t["recall"] == pytest.approx(recall_score(y, pred, zero_division=0))
        assert t["accuracy"] == pytest.approx(np.mean(pred == y)) and t["n"] == r["used"]
    for m in ("auroc", "auprc", "f1"):
        iv = lab["intervals"][m]
        assert (
            iv["estimate"]
            == pytest.approx(lab["mean"][m])
            == pytest.approx(np.mean([t[m] for t in lab["trials"]]))
        )
        assert iv["n"] == r["patients"] and iv["low"] <= iv["estimate"] <= iv["high"]
    # the meds-evaluation files, one per trial: the same rows with their prediction times, in its schema
    files = sorted((tmp_path / "labels_predictions").glob("*.parquet"))
    assert [f.name for f in files] == [f"trial_{t['trial']}.parquet" for t in lab["trials"]]
    assert lab["predictions"] == [f"labels_predictions/{f.name}" for f in files]
    first = pq.read_table(files[0])
    assert_prediction_schema(first)  # meds-evaluation reads it and gets hrrbert's AUROC of the trial
    y0, p0 = first["boolean_value"].to_numpy(zero_copy_only=False), first["predicted_boolean_probability"]
    assert roc_auc_score(y0, p0.to_numpy()) == pytest.approx(lab["trials"][0]["auroc"], abs=1e-6)
    assert (
        first["prediction_time"].to_numpy().astype("datetime64[us]").tolist()
        == placed.prediction_time[test].tolist()
    )
    assert first["predicted_boolean_probability"].to_numpy() == pytest.approx(blocks[0].probs[:, 0])
    lines = "\n".join(summary_lines(rec))
    assert "labels    i10 on test rows" in lines and "patient bootstrap" in lines


def assert_prediction_schema(t) -> None:
    """``t`` is what meds-evaluation 0.0.6 reads as it is: its PredictionSchema validates the table (no
    other column, float32 probabilities) and its binary evaluation scores it with sklearn's AUROC."""
    import polars as pl
    from meds_evaluation.evaluate import evaluate_binary_classification
    from meds_evaluation.schema import PredictionSchema

    PredictionSchema.validate(t)
    assert t.schema.field("predicted_boolean_probability").type == pa.float32()
    got = evaluate_binary_classification(pl.from_arrow(t))
    y, p = t["boolean_value"].to_numpy(zero_copy_only=False), t["predicted_boolean_probability"].to_numpy()
    assert got["samples_equally_weighted"]["roc_auc_score"] == pytest.approx(roc_auc_score(y, p))


def test_the_interval_resamples_patients_with_all_their_rows(runs, dataset, program, labels, one_thread):
    """The bootstrap against a direct computation: patients drawn as ``bootstrap_patients`` draws them, each
    bringing all its rows (sklearn with the draw counts as sample weights), mean over the trials."""
    import torch

    from hrr_kernel import load_program
    from pipelines.data.sequences import TokenizedDataset
    from pipelines.eval.label_scores import labels_eval

    prog = load_program(program)
    ds = TokenizedDataset(dataset, prog.program_id, prog.n_concepts, prog.special_id("[PAD]"))
    n_boot = 60
    rec, blocks, _ = labels_eval(
        labels, runs["labels"], ds, prog, split="all", device=torch.device("cpu"), n_boot=n_boot, seed=3
    )
    subject = blocks[0].subject_id
    uniq, groups = np.unique(subject, return_inverse=True)
    assert len(uniq) < len(subject)  # patients with several rows
    draws = np.random.default_rng(3).integers(0, len(uniq), (n_boot, len(uniq)))
    dist = {"auroc": [], "auprc": []}
    for d in draws:
        w = np.bincount(d, minlength=len(uniq))[groups]
        for b in blocks:
            assert np.array_equal(b.subject_id, subject)
        y = blocks[0].labels[:, 0]
        if (y * w).sum() > 0:  # AUPRC needs positives, AUROC both classes (else the resample is dropped)
            dist["auprc"].append(
                np.mean([average_precision_score(y, b.probs[:, 0], sample_weight=w) for b in blocks])
            )
        if len(set(y[w > 0])) == 2:
            dist["auroc"].append(np.mean([roc_auc_score(y, b.probs[:, 0], sample_weight=w) for b in blocks]))
    for m, v in dist.items():
        low, high = np.quantile(v, [0.025, 0.975])
        assert rec["intervals"][m]["low"] == pytest.approx(low) and rec["intervals"][m][
            "high"
        ] == pytest.approx(high)


def test_misuse_is_a_clear_error(tmp_path, runs, dataset, program, labels):
    from pipelines.eval.config import EvaluateConfig

    base = dict(pretrained="p", dataset="d", program="g", out="o")
    with pytest.raises(ValueError, match="--labels needs --labels-run"):
        EvaluateConfig(**base, labels=str(labels))
    with pytest.raises(ValueError, match="--labels-run needs --labels"):
        EvaluateConfig(**base, labels_run="run")
    with pytest.raises(ValueError, match="labels_split"):
        EvaluateConfig(**base, labels="l", labels_run="r", labels_split="train")
    # a label-task run is no mortality run, and a mortality run no label-task run (refused before any work)
    with pytest.raises(PipelineError, match="label task 'i10'.*--labels-run"):
        _evaluate(
            tmp_path / "a",
            runs,
            dataset,
            program,
            mortality=str(runs["labels"]),
            transfer_dataset=str(dataset),
        )
    with pytest.raises(PipelineError, match="not on a MEDS label task"):
        _evaluate(
            tmp_path / "b", runs, dataset, program, labels=str(labels), labels_run=str(runs["mortality"])
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # a split without label rows (no rood patients here)
    with pytest.raises(PipelineError, match="no label rows in split 'rood'"):
        _evaluate(
            tmp_path / "c",
            runs,
            dataset,
            program,
            labels=str(labels),
            labels_run=str(runs["labels"]),
            labels_split="rood",
        )


def test_evaluate_cli_takes_labels(tmp_path, runs, dataset, program, labels, one_thread):
    from pipelines.cli import main

    args = [
        "evaluate",
        str(runs["pretrained"]),
        "--dataset",
        str(dataset),
        "--program",
        str(program),
        "--tsne-points",
        "0",
        "--cost-steps",
        "0",
        "--per-bin",
        "5",
        "--per-group",
        "2",
        "--unbinding-rows",
        "0",
        "--device",
        "cpu",
    ]
    res = CliRunner().invoke(
        main,
        [
            *args,
            "--out",
            str(tmp_path / "e"),
            "--labels",
            str(labels),
            "--labels-run",
            str(runs["labels"]),
            "--labels-split",
            "all",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "labels    i10 on all rows" in res.output and "trial 1: AUROC" in res.output
    saved = json.loads((tmp_path / "e" / "evaluation.json").read_text())
    assert saved["labels"]["rows"]["dropped"]["other_splits"] == 0
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "f"), "--labels", str(labels)])
    assert res.exit_code != 0 and "--labels needs --labels-run" in res.output
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "g"), "--chapters", str(runs["labels"])])
    assert res.exit_code != 0 and "--labels-run" in res.output
