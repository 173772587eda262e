"""The experiment report from hand-written run files: per-patient predictions and baselines (patient
bootstrap, t over seeds, paired ROOD difference, constant heads, results.json) and an older experiment
without them (per-trial scores only)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps
from sklearn.metrics import roc_auc_score

from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.eval.report import report, write_report
from pipelines.train.predictions import Predictions, score_predictions, write_predictions

F1 = {"unstructured": [0.60, 0.62, 0.61], "base": [0.70, 0.71, 0.72]}
TRIALS = 3
P = {"test": 80, "rood": 50, "rood_unseen": 40, "transfer": 60}  # patients per split
SKILL = {"unstructured": 0.0, "base": 0.4, "logistic_regression": 0.25, "ceiling": 0.5}


def _w(p: Path, obj) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj))


def _evaluation(conf: str, related: int) -> dict:
    bins = [
        {
            "low": lo,
            "high": lo + 2.0,
            "codes_in_bin": 5,
            "probes": 40 if lo < -4 else 0,
            "top10": 0.2 if lo < -4 else None,
            "top100": (0.5 if conf == "base" else 0.1) if lo < -4 else None,
            "median_rank": (120.0 if conf == "base" else 9000.0) if lo < -4 else None,
            "ranked": 20000,
        }
        for lo in range(-14, 0, 2)
    ]
    code = {"code": "2724 (ICD-9)", "title": "Lipidemia", "neighbours": [
        {"code": "2721 (ICD-9)", "title": "Other lipidemia", "related": True}]}  # fmt: skip
    groups = {g: {"related": related, "total": 40, "codes": []} for g in ("common", "rare", "random")}
    groups["case_studies"] = {"related": 1, "total": 4, "codes": [code]}
    return {
        "label": conf,
        "mode": conf,
        "program_id": "p1",
        "dataset_id": "d1",
        "transfer_dataset_id": "d2",
        "frequency_bins": bins,
        "neighbours": {"k": 4, "groups": groups},
        "rood": [
            {"trial": k, "rood": {"f1": f, "accuracy": 0.8, "auroc": 0.7, "n": 140}, "rood_unseen": {"n": 0}}
            for k, f in enumerate(F1[conf])
        ],
        "transfer": [{"trial": k, "test": {"f1": f - 0.1, "accuracy": 0.7}} for k, f in enumerate(F1[conf])],
        "tsne": {"path": "tsne.png", "coloured_by": "chapter"},
        "cost": {
            "embedding_build_s": 0.002,
            "step_s": 0.1,
            "build_share": 0.02,
            "tokens_per_s": 3000.0,
            "sequences_per_s": 300.0,
            "training_seq_per_s": 250.0,
            "peak_memory_mb": 900.0,
            "device": "cpu",
        },
    }


def _truth(split: str, task: str) -> tuple[np.ndarray, np.ndarray]:
    """Subject ids and labels of a split (the same for every model)."""
    n, width = P[split], 1 if task == "mortality" else 22
    rng = np.random.default_rng([len(split), width])
    return np.arange(1000, 1000 + n) * 7, (rng.random((n, width)) < 0.3).astype(np.int8)


def _block(model: str, task: str, split: str, trial: int, seed: int = 0) -> Predictions:
    sid, y = _truth(split, task)
    rng = np.random.default_rng([len(model), trial, seed, len(split), y.shape[1]])
    skill = SKILL.get(model, 0.0)
    if model == "constant" or (model == "unstructured" and task == "mortality" and split == "test"):
        probs = np.tile(y.mean(0, keepdims=True), (len(y), 1))  # a head that predicts a constant
    else:
        probs = np.clip(skill * y + (1 - skill) * rng.random(y.shape), 0, 1)
    order = rng.permutation(len(sid))  # files list patients in any order
    return Predictions(
        model,
        task,
        split,
        trial,
        sid[order],
        y[order],
        probs[order].astype(np.float32),
        np.full(y.shape[1], 0.5, np.float32),
    )


def _experiment(
    root: Path, seeds: int = 1, predictions: bool = True, baselines: bool = True, mlm: dict | None = None
) -> Path:
    runs = []
    for conf, related in (("unstructured", 4), ("base", 28)):
        for seed in range(seeds):
            tag = f"{conf}-seed{seed}"
            (root / "pretrain" / tag).mkdir(parents=True)
            acc = (mlm or {}).get(conf, (0.33 if conf == "unstructured" else 0.17) + 0.01 * seed)
            (root / "pretrain" / tag / "metrics.jsonl").write_text(
                json.dumps({"step": 1, "loss": 3.0})
                + "\n"
                + json.dumps({"step": 2, "val_mlm_acc": acc})
                + "\n"
            )
            for task in ("mortality", "chapters"):
                ft = root / "finetune" / f"{task}-{tag}"
                trials = [{"trial": k, "test": {"f1": f, "accuracy": 0.8}} for k, f in enumerate(F1[conf])]
                _w(ft / "summary.json", {"trials": trials})
                if predictions:
                    for k in range(TRIALS):
                        write_predictions(
                            ft / f"trial-{k}" / "predictions.parquet", [_block(conf, task, "test", k, seed)]
                        )
            _w(root / "eval" / tag / "evaluation.json", _evaluation(conf, related))
            if predictions:
                blocks = [
                    _block(conf, t, s, k, seed)
                    for s, t in (("rood", "chapters"), ("rood_unseen", "chapters"), ("transfer", "mortality"))
                    for k in range(TRIALS)
                ]
                write_predictions(root / "eval" / tag / "predictions.parquet", blocks)
            runs.append(
                {
                    "configuration": conf,
                    "seed": seed,
                    "pretrain": f"pretrain/{tag}",
                    "finetune": {t: f"finetune/{t}-{tag}" for t in ("mortality", "chapters")},
                    "evaluation": f"eval/{tag}/evaluation.json",
                }
            )
    if baselines:
        _w(
            root / "baselines" / "baselines.json",
            {
                "mlm": {
                    "top1": {"most_frequent": 0.02, "copy_from_history": 0.12, "cooccurrence": 0.08},
                    "frequency_bins": [
                        {
                            "low": lo,
                            "high": lo + 2,
                            "n_masked": 30,
                            "top100": {"most_frequent": 0.1, "copy_from_history": 0.3, "cooccurrence": None},
                        }
                        for lo in range(-14, 0, 2)
                    ],
                },
                "history_bound": {
                    "chapters": {
                        "splits": {
                            sp: {"counts": {"auroc": a, "f1": f}, "with_truth": {"auroc": a + d, "f1": f - d}}
                            for sp, a, f, d in (
                                ("test", 0.766, 0.528, 0.002),
                                ("rood_unseen", 0.754, 0.546, -0.002),
                            )
                        }
                    }
                },  # fmt: skip
            },
        )
        write_predictions(
            root / "baselines" / "predictions.parquet",
            [
                _block(m, t, s, 0)
                for m in ("constant", "logistic_regression", "ceiling")
                for s, t in (
                    ("test", "mortality"),
                    ("test", "chapters"),
                    ("rood_unseen", "chapters"),
                    ("transfer", "mortality"),
                )
            ],
        )
    _w(
        root / "experiment.json",
        {
            "name": "exp",
            "control": "unstructured",
            "runs": runs,
            "config": {"model": "tiny", "pretrain_seeds": seeds, "trials": TRIALS},
        },
    )
    return root


def _mean_score(model: str, task: str, split: str, metric: str, seed: int = 0) -> float:
    """The metric by pipelines.train.predictions (scikit-learn), mean over the trials."""
    vals = []
    for k in range(TRIALS if model in SKILL and model not in ("logistic_regression", "ceiling") else 1):
        b = _block(model, task, split, k, seed)
        vals.append(score_predictions(task, b.labels, b.probs, b.thresholds)[metric])
    return float(np.mean(vals))


def _row(text: str, first: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.fixture
def experiment(tmp_path) -> Path:
    return _experiment(tmp_path / "exp")


def test_report_patient_bootstrap_against_scipy(experiment):
    r = write_report(experiment)
    text = r.path.read_text()
    # base's mortality AUROC: the mean over its 3 trials on each resample of the test patients
    blocks = [_block("base", "mortality", "test", k) for k in range(TRIALS)]
    order = [np.argsort(b.subject_id) for b in blocks]
    y = blocks[0].labels[order[0], 0]
    probs = [b.probs[o, 0] for b, o in zip(blocks, order, strict=True)]

    def auroc(yy, pp):  # Mann-Whitney from average ranks (scipy), one AUROC per resample (row)
        pos = yy.sum(-1)
        return ((sps.rankdata(pp, axis=-1) * yy).sum(-1) - pos * (pos + 1) / 2) / (pos * (yy.shape[-1] - pos))

    def stat(rows, axis=-1):
        return np.mean([auroc(y[rows], p[rows]) for p in probs], axis=0)

    assert stat(np.arange(P["test"])) == pytest.approx(np.mean([roc_auc_score(y, p) for p in probs]))
    ref = sps.bootstrap(
        (np.arange(P["test"]),), stat, n_resamples=2000, method="percentile", rng=np.random.default_rng(0)
    )
    est = _mean_score("base", "mortality", "test", "auroc")
    lo, hi = ref.confidence_interval
    cell = f"{100 * est:.1f} ({100 * lo:.1f}–{100 * hi:.1f})"
    assert _row(r.headline, "base")[4] == cell
    res = json.loads((experiment / "results.json").read_text())
    got = res["configurations"]["base"]["mortality_auroc"]
    assert got["estimate"] == pytest.approx(est) and (got["low"], got["high"]) == pytest.approx((lo, hi))
    assert got["method"] == "patient bootstrap (percentile, 2000 resamples, 95 %)" and got["n"] == P["test"]
    assert "patient bootstrap (percentile, 2000 resamples, 95 %)" in text.split("## Headline")[1]
    assert "| base | 1 |" in text and "1 seed per configuration, n too small for a test" in text


def test_report_baselines_constant_heads_and_rood_difference(experiment):
    r = write_report(experiment)
    text = r.path.read_text()
    first = text.split("\n\n")[1]
    assert (
        first.startswith("**This is a synthetic (demo) run.**")
        and "hrrbert experiment` on MIMIC-IV/eICU" in first
    )
    # the unstructured mortality head predicts a constant: AUROC 50.0, said in words, no zero-width interval
    assert _row(r.headline, "unstructured")[4] == "50.0 (predicts a constant)"
    assert "50.0 (50.0–50.0)" not in text
    # baseline rows beside the model rows, scored the same way
    ceiling = _row(r.headline, "baseline: ground-truth ceiling")
    assert ceiling[3].startswith(f"{100 * _mean_score('ceiling', 'chapters', 'test', 'f1'):.1f} (")
    lr = _row(r.headline, "baseline: logistic regression")
    assert lr[4].startswith(f"{100 * _mean_score('logistic_regression', 'mortality', 'test', 'auroc'):.1f} (")
    assert _row(r.headline, "baseline: constant")[4] == "50.0 (same on every resample)"  # it is one
    assert "| unstructured — predicts a constant | 1 | 67.5 | 0.0 | 0.0 | 0.0 | 50.0 |" in text
    assert _row(r.headline, "best MLM baseline (copy from history)")[2] == "12.0"
    # the history bound under the ROOD table: counts -> with the truth's shares, per split
    assert "| test | 76.6 → 76.8 (+0.2) | 52.8 → 52.6 (-0.2) |" in text
    assert "| rood_unseen | 75.4 → 75.2 (-0.2) | 54.6 → 54.8 (+0.2) |" in text
    assert (
        json.loads((experiment / "results.json").read_text())["history_bound"]["test"]["counts"]["f1"]
        == 0.528
    )
    assert "| baseline: copy from history | – | 12.0 | – | – |" in text
    assert "| [-14, -12) | 5 | 40 |" in text and "| 30.0 (copy from history; 30 masked) |" in text
    # ROOD-unseen: base - unstructured on the same patients, paired bootstrap interval above zero
    diff = _mean_score("base", "chapters", "rood_unseen", "f1") - _mean_score(
        "unstructured", "chapters", "rood_unseen", "f1"
    )
    res = json.loads((experiment / "results.json").read_text())
    d = res["configurations"]["base"]["rood_unseen_f1_minus_control"]
    assert d["estimate"] == pytest.approx(diff) and 0 < d["low"] < diff < d["high"]
    assert d["method"].startswith("paired patient bootstrap")
    assert _row(r.headline, "base")[7].startswith(f"{100 * diff:+.1f} (")
    assert _row(r.headline, "unstructured")[7] == "(control)"
    assert _row(r.headline, "unstructured")[6] == "(control: one row for every unseen code)"
    # the best non-oracle rival of base per column (never the ceiling), and unseen F1 − that rival, paired
    rivals = {"unstructured": _mean_score("unstructured", "chapters", "rood_unseen", "f1")}
    for m in ("constant", "logistic_regression"):  # the fixture's baselines besides the ceiling
        rivals["baseline:" + m] = _mean_score(m, "chapters", "rood_unseen", "f1")
    best = max(rivals, key=rivals.get)
    got = res["configurations"]["base"]["best_rival"]
    assert got["rood_unseen_chapters_f1"]["rival"] == best
    assert got["rood_unseen_chapters_f1"]["value"]["estimate"] == pytest.approx(rivals[best])
    d2 = got["rood_unseen_f1_minus_best_rival"]
    base_unseen = _mean_score("base", "chapters", "rood_unseen", "f1")
    assert (
        d2["estimate"] == pytest.approx(base_unseen - rivals[best])
        and d2["low"] < d2["estimate"] < d2["high"]
    )
    assert d2["method"].startswith("paired patient bootstrap")
    assert _row(r.headline, "base")[6].startswith(f"{100 * (base_unseen - rivals[best]):+.1f} (")
    rival_row = _row(r.headline, "↳ best rival of base")
    assert rival_row[5].startswith(f"{100 * rivals[best]:.1f} (") and "ceiling" not in "".join(rival_row)
    assert f"| base − unstructured | seed 0 | {100 * diff:+.1f}" in text
    # results.json: numbers, methods, baselines
    assert res["synthetic"] is True and res["control"] == "unstructured"
    assert set(res["methods"]) >= {"one_seed", "over_seeds", "difference", "rarest_bin"}
    assert res["baselines"]["mlm"]["best"] == "copy_from_history"
    assert res["baselines"]["ceiling"]["chapters_f1"]["estimate"] == pytest.approx(
        _mean_score("ceiling", "chapters", "test", "f1")
    )
    assert res["configurations"]["base"]["rare_neighbours"] == {"related": 28, "total": 40}
    rb = res["configurations"]["base"]["rarest_bin_top100"]
    ref = sps.binomtest(20, 40).proportion_ci(method="exact")
    assert (rb["estimate"], rb["low"], rb["high"]) == pytest.approx((0.5, ref.low, ref.high))
    assert res["configurations"]["base"]["rarest_bin_median_rank"] == 120.0
    assert "a random ranking of the 20,000 codes would find 0.50 %" in text  # the headline's chance level
    assert "| unstructured median rank | base median rank |" in text
    assert "| [-14, -12) | 5 | 40 |" in text and "| 9,000 | 120 |" in text
    assert "unstructured seed 0: mortality/test" in res["constant_heads"][0]
    assert res["collapsed_pretraining"] == [] and "did not learn to use the context" not in text
    assert "Collapsed pretraining" not in text
    # plots and the t-SNE by chapter
    assert (experiment / "plots" / "rood.png").is_file() and (
        experiment / "plots" / "frequency_bins.png"
    ).is_file()
    assert "coloured by ICD chapter" in text and "![base](eval/base-seed0/tsne.png)" in text
    assert "4.88e-08 / 2.44e-08" in text  # Fisher 28/40 vs 4/40: two-sided / one-sided (the paper)


def test_report_over_seeds_t_interval_and_paired_test(tmp_path):
    exp = _experiment(tmp_path / "exp2", seeds=2, baselines=False)
    r = write_report(exp)
    text = r.path.read_text()
    per = [_mean_score("base", "chapters", "test", "f1", seed=s) for s in (0, 1)]
    lo, hi = sps.t.interval(0.95, 1, loc=np.mean(per), scale=sps.sem(per))
    assert _row(r.headline, "base")[3] == f"{100 * np.mean(per):.1f} ({100 * lo:.1f}–{100 * hi:.1f})"
    res = json.loads((exp / "results.json").read_text())
    assert res["configurations"]["base"]["chapters_f1"]["method"] == "t interval over seeds (95 %)"
    ctrl = [_mean_score("unstructured", "chapters", "test", "f1", seed=s) for s in (0, 1)]
    p = sps.ttest_rel(per, ctrl).pvalue
    assert f"| base | F1 | paired t | {p:.3g} |" in text
    assert "No baselines in this experiment" in r.headline and "Note: no baselines" in text
    assert "**This is a synthetic" not in text


def test_report_of_an_older_experiment(tmp_path):
    exp = _experiment(tmp_path / "old", predictions=False, baselines=False)
    r = write_report(exp)
    text = r.path.read_text()
    assert _row(r.headline, "unstructured")[2:4] == ["33.0", "61.0*"]
    assert "Note: no per-patient predictions for base seed 0, unstructured seed 0" in text
    assert "| [-2, 0) | 5 | 0 | empty | empty | empty | empty |" in text
    res = json.loads((exp / "results.json").read_text())
    assert res["configurations"]["base"]["chapters_f1"]["note"].startswith("no per-patient predictions")
    assert math.isclose(res["configurations"]["base"]["chapters_f1"]["estimate"], 0.71)


def test_report_command_finds_experiments(experiment):
    res = CliRunner().invoke(main, ["report", str(experiment.parent)])
    assert res.exit_code == 0, res.output
    assert "report.md" in res.output and "| model | seeds | MLM top-1 |" in res.output
    assert len(report(experiment)) == 1


def test_report_names_missing_and_bad_files(tmp_path):
    exp = _experiment(tmp_path / "old", predictions=False, baselines=False)
    (exp / "finetune" / "chapters-base-seed0" / "summary.json").unlink()
    with pytest.raises(PipelineError, match="chapters-base-seed0/summary.json: missing"):
        write_report(exp)
    exp = _experiment(tmp_path / "new")
    (exp / "eval" / "base-seed0" / "predictions.parquet").write_text("not parquet")
    with pytest.raises(
        PipelineError, match="base-seed0/predictions.parquet: not a readable predictions file"
    ):
        write_report(exp)
    empty = tmp_path / "nothing"
    empty.mkdir()
    res = CliRunner().invoke(main, ["report", str(empty)])
    assert res.exit_code == 1 and "no experiment.json" in res.output


def test_tsne_by_chapter_marks_rare_codes(tmp_path):
    import torch

    from pipelines.eval.tsne import sample_codes, tsne_plot

    codes = ["[PAD]", "[MASK]"] + [f"C{i}" for i in range(80)]
    rare = np.zeros(len(codes), bool)
    rare[[2, 5, 9, 40, 41]] = True
    chapters = [None, None] + [1 + i % 22 if i % 7 else None for i in range(80)]
    pick, is_rare = sample_codes(codes, 40, 0, rare)
    assert len(pick) == 40 and 0 not in pick and 1 not in pick and set(pick[is_rare]) == {2, 5, 9, 40, 41}
    assert np.array_equal(sample_codes(codes, 40, 0)[0], sample_codes(codes, 40, 0)[0])  # seeded
    m = torch.randn(len(codes), 8, generator=torch.Generator().manual_seed(0))
    rec = tsne_plot(
        m, np.zeros(len(codes)), codes, tmp_path / "t.png", title="t", points=40, chapters=chapters, rare=rare
    )
    assert (tmp_path / "t.png").is_file() and rec["coloured_by"] == "chapter" and rec["rare_marked"] == 5
    rec = tsne_plot(m, np.linspace(-9, -3, len(codes)), codes, tmp_path / "f.png", title="f", points=30)
    assert rec["coloured_by"] == "log_frequency" and rec["rare_marked"] == 0
    with pytest.raises(ValueError, match="chapters has 3 entries"):
        tsne_plot(
            m, np.zeros(len(codes)), codes, tmp_path / "x.png", title="x", points=30, chapters=[1, 2, 3]
        )


def test_report_flags_a_pretraining_run_no_better_than_the_most_frequent_code(tmp_path):
    exp = _experiment(tmp_path / "exp", mlm={"unstructured": 0.021})  # baseline most_frequent: 0.02
    text = write_report(exp).path.read_text()
    res = json.loads((exp / "results.json").read_text())
    assert res["collapsed_pretraining"] == ["unstructured seed 0"]
    assert (
        "Note: no better than the most-frequent-code baseline (2.0 %): unstructured seed 0 (MLM top-1 2.1 %)"
        in text
    )


def test_report_names_the_fine_tuning_that_differs_per_configuration(experiment):
    text = write_report(experiment).path.read_text()
    assert "Fine-tuning per configuration" not in text  # one recipe for all: nothing to say
    rec = json.loads((experiment / "experiment.json").read_text())
    rec["config"]["finetune"] = {"lr": 0.001, "pooling": "cls+mean"}
    rec["config"]["finetune_by_configuration"] = {"base": {"pooling": "cls+mean+roles", "freeze_atoms": True}}
    (experiment / "experiment.json").write_text(json.dumps(rec))
    text = write_report(experiment).path.read_text()
    assert (
        "Fine-tuning per configuration, on top of the common recipe (lr 0.001, pooling cls+mean): "
        "`base`: freeze_atoms True, pooling cls+mean+roles." in text
    )
