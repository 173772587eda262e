"""The MEDS-DEV model entry (integrations/meds-dev/hrrbert/, issue 34 item 7): model.yaml's three commands,
formatted with MEDS-DEV's template variables as its harness formats them, run end to end in demo mode on
the demo cohort's MEDS export; the predictions cover every held-out label row and meds-evaluation
scores them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

ENTRY = Path(__file__).resolve().parents[2] / "integrations" / "meds-dev" / "hrrbert"


def _commands() -> dict:
    import yaml

    return yaml.safe_load((ENTRY / "model.yaml").read_text(encoding="utf-8"))


def test_the_entry_has_what_meds_dev_reads():
    spec = _commands()
    meta = spec["metadata"]
    assert meta["description"] and meta["links"] and meta["contacts"][0]["name"]
    cmds = spec["commands"]
    assert set(cmds) == {"unsupervised", "supervised"} and set(cmds["supervised"]) == {"train", "predict"}
    assert set(cmds["unsupervised"]) == {"train"}
    used = " ".join([cmds["unsupervised"]["train"], *cmds["supervised"].values()])
    for var in ("dataset_dir", "labels_dir", "output_dir", "model_initialization_dir", "split", "demo"):
        assert "{" + var + "}" in used, var
    assert (ENTRY / "README.md").is_file() and "torch==2.13.0" in (ENTRY / "requirements.txt").read_text()


@pytest.mark.slow
def test_the_three_commands_run_on_the_demo_export(tmp_path):
    from meds_evaluation.evaluate import evaluate_binary_classification
    from meds_evaluation.schema import PredictionSchema

    from pipelines.demo.prepare import export_demo_meds

    art = tmp_path / "artifacts"
    meds = export_demo_meds(tmp_path / "meds", artifacts=art, size="small", n_patients=800, seed=3).path
    program = next((art / "programs" / "demo_icd10cm_small").glob("*/manifest.json")).parent
    env = {
        **os.environ,
        "HRRBERT_PROGRAM": str(program),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    cmds = _commands()["commands"]
    common = {"dataset_dir": meds, "model_dir": ENTRY, "demo": True, "split": "held_out"}
    labels = meds / "labels" / "mortality_6m"
    stages = [
        (cmds["unsupervised"]["train"], {"output_dir": tmp_path / "pre"}),
        (cmds["supervised"]["train"], {"output_dir": tmp_path / "ft", "labels_dir": labels,
                                       "model_initialization_dir": tmp_path / "pre"}),
        (cmds["supervised"]["predict"], {"output_dir": tmp_path / "pred", "labels_dir": labels,
                                         "model_initialization_dir": tmp_path / "ft"}),
    ]  # fmt: skip
    for template, extra in stages:
        cmd = template.format(**common, **extra)
        done = subprocess.run(cmd, shell=True, env=env, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, cmd + "\n" + done.stdout[-2000:] + done.stderr[-4000:]
    pred = pq.read_table(tmp_path / "pred" / "predictions.parquet")
    PredictionSchema.validate(pred)
    splits = pq.read_table(meds / "metadata" / "subject_splits.parquet")
    held = splits.filter(pc.equal(splits["split"], "held_out"))["subject_id"]
    rows = pq.read_table(labels)
    want = rows.filter(pc.is_in(rows["subject_id"], held))
    assert pred.num_rows == want.num_rows > 0  # every held-out label row, nothing else
    got = evaluate_binary_classification(__import__("polars").from_arrow(pred))
    assert 0.0 <= got["samples_equally_weighted"]["roc_auc_score"] <= 1.0
    info = json.loads((tmp_path / "pred" / "hrrbert_predict.json").read_text())
    assert info["rows"] == pred.num_rows and info["scored_by_the_model"] > 0
    stage = json.loads((tmp_path / "ft" / "hrrbert_stage.json").read_text())
    assert Path(stage["finetune_run"]).is_dir() and stage["program"] == str(program)
