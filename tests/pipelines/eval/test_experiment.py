"""``hrrbert experiment`` at toy size on the fixture program, and the demo's experiment end to end."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.eval.experiment import ExperimentConfig, run_experiment

TOY = dict(
    model="tiny",
    pretrain_seeds=1,
    trials=2,
    device="cpu",
    progress=False,
    pretrain={"max_steps": 2, "batch_size": 8, "save_every": 1},
    finetune={"epochs": 1, "batch_size": 8},
    evaluate={"tsne_points": 10, "cost_steps": 1, "per_bin": 20},
)


def test_experiment_runs_every_step_and_resumes(tmp_path, dataset_dir, program_dir):  # noqa: F811
    cfg = ExperimentConfig(
        dataset=str(dataset_dir),
        program=str(program_dir),
        transfer_dataset=str(dataset_dir),
        name="toy",
        out=str(tmp_path),
        **TOY,
    )
    r = run_experiment(cfg)
    root = tmp_path / "toy"
    exp = json.loads((root / "experiment.json").read_text())
    assert [(x["configuration"], x["seed"]) for x in exp["runs"]] == [("unstructured", 0), ("base", 0)]
    for x in exp["runs"]:
        assert (root / x["pretrain"] / "model" / "model.safetensors").is_file()
        for task in ("mortality", "chapters"):
            s = json.loads((root / x["finetune"][task] / "summary.json").read_text())
            assert len(s["trials"]) == 2
        ev = json.loads((root / x["evaluation"]).read_text())
        assert {"frequency_bins", "neighbours", "rood", "transfer", "tsne", "cost", "next_visit"} <= set(ev)
    text = r.report.read_text()
    for section in (
        "## Headline",
        "## Masked-code modelling",
        "## Mortality",
        "## Disease chapters",
        "## eICU",
        "## ROOD",
        "## Next-visit diagnoses",
        "## Masked-code accuracy by code frequency",
        "## Nearest neighbours",
        "## Token embeddings",
        "## Cost",
    ):
        assert section in text, section
    assert "| unstructured |" in r.headline and "| base |" in r.headline
    # a second run finds every step done and only rewrites the report
    stamp = (root / "eval" / "base-seed0" / "evaluation.json").stat().st_mtime_ns
    again = run_experiment(cfg)
    assert (root / "eval" / "base-seed0" / "evaluation.json").stat().st_mtime_ns == stamp
    assert again.headline == r.headline
    # a fine-tuning run killed before its summary (trial 1 unfinished) resumes: trial 0 is read back
    ft = root / "finetune" / "mortality-base-seed0"
    summary = json.loads((ft / "summary.json").read_text())
    (ft / "summary.json").unlink()
    (ft / "trial-1" / "results.json").unlink()
    stamp0 = (ft / "trial-0" / "results.json").stat().st_mtime_ns
    (root / "eval" / "base-seed0" / "evaluation.json").unlink()
    run_experiment(cfg)
    assert (ft / "trial-0" / "results.json").stat().st_mtime_ns == stamp0
    resumed = json.loads((ft / "summary.json").read_text())
    assert [t["test"] for t in resumed["trials"]] == [t["test"] for t in summary["trials"]]
    # continuing with another config is refused, naming the difference
    with pytest.raises(PipelineError, match="trials: experiment has 2, now 3"):
        run_experiment(ExperimentConfig(**{**cfg.__dict__, "trials": 3}))


def test_experiment_cli_and_bad_options(tmp_path, dataset_dir, program_dir):  # noqa: F811
    args = [
        "experiment",
        "--dataset",
        str(dataset_dir),
        "--program",
        str(program_dir),
        "--out",
        str(tmp_path),
        "--name",
        "cli",
        "--config",
        "unstructured",
        "--model",
        "tiny",
        "--seeds",
        "1",
        "--trials",
        "1",
        "--max-steps",
        "1",
        "--batch-size",
        "8",
        "--finetune-epochs",
        "1",
        "--finetune-batch-size",
        "8",
        "--tsne-points",
        "0",
        "--per-bin",
        "10",
        "--device",
        "cpu",
        "--no-progress",
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "report.md" in res.output and "| unstructured |" in res.output
    with pytest.raises(ValueError, match="unknown configuration"):
        ExperimentConfig(dataset="d", program="p", configurations=("bogus",))
    with pytest.raises(ValueError, match="unknown task"):
        ExperimentConfig(dataset="d", program="p", tasks=("bogus",))


def test_demo_experiment_at_toy_size(tmp_path):
    args = [
        "demo",
        "--out",
        str(tmp_path),
        "--size",
        "small",
        "--patients",
        "300",
        "--train-steps",
        "2",
        "--trials",
        "1",
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "report    " in res.output and "| unstructured |" in res.output and "| base |" in res.output
    text = (tmp_path / "runs" / "demo-small-n300-s2-t1" / "report.md").read_text()
    assert "## ROOD" in text and "## eICU" in text and "## Cost" in text
    # the next-visit evaluation with the generator's ceiling, its numbers in results.json
    assert "## Next-visit diagnoses" in text and "| ground-truth ceiling | – |" in text
    results = json.loads((tmp_path / "runs" / "demo-small-n300-s2-t1" / "results.json").read_text())
    assert results["next_visit"]["ceiling"] and set(results["next_visit"]["configurations"]) == {
        "unstructured",
        "base",
    }
    # each configuration pretrains with its own overrides on top of the shared ones (the demo's lr per mode)
    from pipelines.demo.defaults import DEMO_EXPERIMENT, DEMO_PRETRAIN

    for conf in ("unstructured", "base"):
        saved = json.loads(
            (
                tmp_path / "runs" / "demo-small-n300-s2-t1" / "pretrain" / f"{conf}-seed0" / "config.json"
            ).read_text()
        )
        want = DEMO_EXPERIMENT["pretrain_by_configuration"].get(conf, {}).get("lr", DEMO_PRETRAIN["lr"])
        assert saved["config"]["lr"] == want
    assert DEMO_EXPERIMENT["pretrain_by_configuration"]["unstructured"]["lr"] != DEMO_PRETRAIN["lr"]


def test_per_configuration_fine_tuning_options():
    cfg = ExperimentConfig(
        dataset="d",
        program="p",
        finetune={"lr": 1e-3, "pooling": "cls+mean"},
        finetune_by_configuration={"base": {"pooling": "cls+mean+roles", "freeze_atoms": True}},
    )
    assert cfg.finetune_options("unstructured") == {"lr": 1e-3, "pooling": "cls+mean"}
    assert cfg.finetune_options("base") == {"lr": 1e-3, "pooling": "cls+mean+roles", "freeze_atoms": True}
    with pytest.raises(ValueError, match=r"finetune_by_configuration names \['cat'\]"):
        ExperimentConfig(dataset="d", program="p", finetune_by_configuration={"cat": {"lr": 1e-3}})
    from pipelines.demo.defaults import DEMO_EXPERIMENT

    composing = {
        c for c, o in DEMO_EXPERIMENT["finetune_by_configuration"].items() if "roles" in o["pooling"]
    }
    assert "base" in composing and "unstructured" not in composing


def test_per_configuration_pretraining_options(tmp_path):
    cfg = ExperimentConfig(
        dataset="d",
        program="p",
        pretrain={"lr": 2e-3, "max_steps": 5},
        pretrain_by_configuration={"unstructured": {"lr": 1e-3}},
    )
    assert cfg.pretrain_options("unstructured") == {"lr": 1e-3, "max_steps": 5}
    assert cfg.pretrain_options("base") == {"lr": 2e-3, "max_steps": 5}
    with pytest.raises(ValueError, match=r"names \['cat'\], which are not among the configurations"):
        ExperimentConfig(dataset="d", program="p", pretrain_by_configuration={"cat": {"lr": 1e-3}})
    # an experiment.json written before the field existed continues when the field is left at its default
    from dataclasses import asdict

    from pipelines.eval.experiment import _check_same_config

    old = {
        k: v
        for k, v in asdict(ExperimentConfig(dataset="d", program="p")).items()
        if k != "pretrain_by_configuration"
    }
    (tmp_path / "experiment.json").write_text(json.dumps({"config": old}))
    _check_same_config(tmp_path, ExperimentConfig(dataset="d", program="p"))
    with pytest.raises(PipelineError, match="pretrain_by_configuration: experiment has {}"):
        _check_same_config(
            tmp_path,
            ExperimentConfig(dataset="d", program="p", pretrain_by_configuration={"base": {"lr": 1e-3}}),
        )


def test_lr_for_gives_each_configuration_its_pretraining_lr(tmp_path):
    from pipelines.eval.experiment import options_to_config

    flat = dict(
        dataset="d",
        program="p",
        epochs=1,
        max_steps=None,
        batch_size=8,
        lr=2e-3,
        bf16=False,
        finetune_epochs=1,
        finetune_lr=1e-3,
        finetune_batch_size=8,
        per_bin=10,
        tsne_points=0,
    )
    cfg = options_to_config(**flat, lr_for=("unstructured=1e-3",))
    assert cfg.pretrain_options("unstructured")["lr"] == 1e-3 and cfg.pretrain_options("base")["lr"] == 2e-3
    assert options_to_config(**flat).pretrain_by_configuration == {}
    for bad in ("unstructured", "=1e-3", "unstructured=fast"):
        with pytest.raises(ValueError, match="expected CONFIG=LR"):
            options_to_config(**flat, lr_for=(bad,))
    with pytest.raises(ValueError, match="not among the configurations"):
        options_to_config(**flat, lr_for=("cat=1e-3",))
    d = str(tmp_path)
    res = CliRunner().invoke(main, ["experiment", "--dataset", d, "--program", d, "--lr-for", "x"])
    assert res.exit_code != 0 and "expected CONFIG=LR" in res.output
    cfg = options_to_config(**flat, roles_for=("base",))
    base = cfg.finetune_options("base")
    assert base["pooling"] == "cls+mean+roles" and base["freeze_atoms"] is True and base["lr"] == 1e-3
    assert "pooling" not in cfg.finetune_options("unstructured")
    with pytest.raises(ValueError, match="not among the configurations"):
        options_to_config(**flat, roles_for=("cat",))
