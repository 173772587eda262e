"""The experiment report from hand-written run files: tables, intervals, p-values, missing files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.eval.report import report, write_report
from pipelines.eval.stats import dunnett_vs_control

F1 = {"unstructured": [0.60, 0.62, 0.61], "base": [0.70, 0.71, 0.72]}


def _w(p: Path, obj) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj))


def _evaluation(conf: str, related: int) -> dict:
    bins = [{"low": lo, "high": lo + 2.0, "codes_in_bin": 5, "probes": 5 if lo < -4 else 0,
             "top10": 0.2 if lo < -4 else None, "top100": 0.6 if lo < -4 else None}
            for lo in range(-14, 0, 2)]  # fmt: skip
    code = {"code": "2724 (ICD-9)", "title": "Lipidemia", "neighbours": [
        {"code": "2721 (ICD-9)", "title": "Other lipidemia", "related": True}]}  # fmt: skip
    groups = {g: {"related": related, "total": 40, "codes": []} for g in ("common", "rare", "random")}
    groups["case_studies"] = {"related": 1, "total": 4, "codes": [code]}
    return {
        "label": conf, "mode": conf, "program_id": "p1", "dataset_id": "d1", "transfer_dataset_id": "d2",
        "frequency_bins": bins, "neighbours": {"k": 4, "groups": groups},
        "rood": [{"trial": k, "rood": {"f1": f, "accuracy": 0.8, "auroc": 0.7, "n": 140}, "rood_unseen": {"n": 0}}
                 for k, f in enumerate(F1[conf])],
        "transfer": [{"trial": k, "test": {"f1": f - 0.1, "accuracy": 0.7}} for k, f in enumerate(F1[conf])],
        "tsne": {"path": "tsne.png"},
        "cost": {"embedding_build_s": 0.002, "step_s": 0.1, "build_share": 0.02, "tokens_per_s": 3000.0,
                 "sequences_per_s": 300.0, "training_seq_per_s": 250.0, "peak_memory_mb": 900.0, "device": "cpu"},
    }  # fmt: skip


@pytest.fixture
def experiment(tmp_path) -> Path:
    root = tmp_path / "exp"
    runs = []
    for conf, related in (("unstructured", 4), ("base", 28)):
        tag = f"{conf}-seed0"
        (root / "pretrain" / tag).mkdir(parents=True)
        acc = 0.33 if conf == "unstructured" else 0.17
        (root / "pretrain" / tag / "metrics.jsonl").write_text(
            json.dumps({"step": 1, "loss": 3.0}) + "\n" + json.dumps({"step": 2, "val_mlm_acc": acc}) + "\n"
        )
        for task in ("mortality", "chapters"):
            trials = [{"trial": k, "test": {"f1": f, "accuracy": 0.8}} for k, f in enumerate(F1[conf])]
            _w(root / "finetune" / f"{task}-{tag}" / "summary.json", {"trials": trials})
        _w(root / "eval" / tag / "evaluation.json", _evaluation(conf, related))
        runs.append({"configuration": conf, "seed": 0, "pretrain": f"pretrain/{tag}",
                     "finetune": {t: f"finetune/{t}-{tag}" for t in ("mortality", "chapters")},
                     "evaluation": f"eval/{tag}/evaluation.json"})  # fmt: skip
    _w(root / "experiment.json", {"name": "exp", "control": "unstructured", "runs": runs,
                                  "config": {"model": "tiny", "pretrain_seeds": 1, "trials": 3}})  # fmt: skip
    return root


def test_report_tables(experiment):
    r = write_report(experiment)
    text = r.path.read_text()
    assert r.path == experiment / "report.md"
    # headline: MLM accuracy (one run: no interval), mortality F1 mean with its bootstrap interval
    assert "| unstructured | 33.0 | 61.0 (60.0–62.0) |" in r.headline
    assert "| base | 17.0 | 71.0 (70.0–72.0) |" in r.headline and "28/40" in r.headline
    p = dunnett_vs_control({"unstructured": F1["unstructured"], "base": F1["base"]}, "unstructured")
    assert f"| base | – | {p['base']['pvalue']:.3g} | – | – | – | –" not in text  # F1 column holds it
    assert f"{p['base']['pvalue']:.3g}" in text
    assert "Two-sided Welch t-test" in text and "| empty |" not in text.split("## ROOD")[0]
    assert "| [-2, 0) | 5 | 0 | empty | empty | empty | empty |" in text
    assert "4.88e-08 / 2.44e-08" in text  # Fisher 28/40 vs 4/40: two-sided / one-sided (the paper)
    assert "**2724 (ICD-9)** Lipidemia: 2721 (ICD-9) Other lipidemia ✓" in text
    assert "![base](eval/base-seed0/tsne.png)" in text
    assert (experiment / "plots" / "frequency_bins.png").is_file()
    assert "| unstructured | 2.00 | 100.0 | 2.0 | 3000 |" in text


def test_report_command_finds_experiments(experiment):
    res = CliRunner().invoke(main, ["report", str(experiment.parent)])
    assert res.exit_code == 0, res.output
    assert "report.md" in res.output and "| configuration | MLM acc |" in res.output
    assert len(report(experiment)) == 1


def test_report_names_missing_files(experiment, tmp_path):
    (experiment / "finetune" / "chapters-base-seed0" / "summary.json").unlink()
    with pytest.raises(PipelineError, match="chapters-base-seed0/summary.json: missing"):
        write_report(experiment)
    empty = tmp_path / "nothing"
    empty.mkdir()
    res = CliRunner().invoke(main, ["report", str(empty)])
    assert res.exit_code == 1 and "no experiment.json" in res.output
