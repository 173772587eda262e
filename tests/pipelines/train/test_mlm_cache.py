"""The code cache of masked-code prediction: chosen on pretrain_val after pretraining (grid, choice and the
validation with it recorded), carried by the saved model, and added to a saved model by
``hrrbert mlm-cache`` (never over another folder)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from train_fixtures import program_dir, write_dataset  # noqa: F401

from model import HRRBert
from pipelines.cli import main
from pipelines.errors import PipelineError
from pipelines.train.cache_choice import GRID_SHARPNESS, GRID_WEIGHTS, REPORT_FILE, add_cache
from pipelines.train.pretrain import pretrain

TINY = dict(model="tiny", batch_size=8, log_every=1, device="cpu", progress=False, max_val=None)
SIZES = {
    "pretrain_train": 64,
    "pretrain_val": 48,
    "finetune_train": 4,
    "finetune_val": 4,
    "test": 4,
    "rood": 4,
}


@pytest.fixture(scope="module")
def chronic_dataset(tmp_path_factory, program_dir):  # noqa: F811
    """Patients who hold two codes each, written again and again (chronic conditions re-coded): a masked
    code is nearly always visible elsewhere in its sequence, which the cache reads and a barely trained
    model does not."""
    ds = write_dataset(tmp_path_factory.mktemp("chronic") / "ds", program_dir, sizes=SIZES)
    codes = pq.read_table(program_dir / "concepts.parquet").column("code").to_pylist()
    normal = np.array([i for i, c in enumerate(codes) if not c.startswith("[")])
    t = pq.read_table(ds / "patients.parquet")
    rng = np.random.default_rng(0)
    ids = [
        [r[0]] + rng.choice(rng.choice(normal, 2, replace=False), size=len(r) - 1).tolist()
        for r in t["input_ids"].to_pylist()
    ]
    t = t.set_column(t.column_names.index("input_ids"), "input_ids", pa.array(ids, pa.list_(pa.int32())))
    pq.write_table(t, ds / "patients.parquet")
    return ds


def _validations(run):
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if "val_mlm_acc" in r]


def test_pretraining_chooses_the_cache(tmp_path, chronic_dataset, program_dir):  # noqa: F811
    r = pretrain(chronic_dataset, program_dir, out=tmp_path, mode="base", max_steps=3, **TINY)
    run = r.run_dir
    rec = json.loads((run / "mlm_cache.json").read_text())
    assert len(rec["grid"]) == 1 + len(GRID_SHARPNESS) * sum(w > 0 for w in GRID_WEIGHTS)
    best = min(rec["grid"], key=lambda g: g["loss"])
    assert best["weight"] > 0 and rec["chosen"] == {"weight": best["weight"], "sharpness": best["sharpness"]}
    alone = rec["grid"][0]
    assert alone["weight"] == 0 and best["loss"] < alone["loss"] and best["top10"] >= alone["top10"]
    model = HRRBert.from_pretrained(run / "model")
    assert model.mlm_cache.to_dict() == rec["chosen"]
    before, after = _validations(run)[-2:]
    assert after["step"] == before["step"] == 3 and after["mlm_cache"] == rec["chosen"]
    assert "mlm_cache" not in before and after["val_loss"] < before["val_loss"]


def test_cache_off_and_added_afterwards(tmp_path, chronic_dataset, program_dir):  # noqa: F811
    r = pretrain(
        chronic_dataset, program_dir, out=tmp_path, mode="unstructured", max_steps=3, mlm_cache="off", **TINY
    )
    assert not (r.run_dir / "mlm_cache.json").exists() and r.model.mlm_cache is None
    assert "mlm_cache" not in _validations(r.run_dir)[-1]
    out = tmp_path / "cached"
    res = CliRunner().invoke(
        main,
        ["mlm-cache", str(r.run_dir), "--dataset", str(chronic_dataset), "--out", str(out), "--limit", "0"],
    )
    assert res.exit_code == 0, res.output
    rec = json.loads((out / REPORT_FILE).read_text())
    assert rec["chosen"] is not None and "cache weight" in res.output and rec["grid"][0]["masked"] > 0
    cached = HRRBert.from_pretrained(out)
    assert cached.mlm_cache.to_dict() == rec["chosen"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["run_id"] == r.run_dir.name  # the source's own keys travel
    with pytest.raises(PipelineError, match="exists"):
        add_cache(r.run_dir, chronic_dataset, out)
    again = add_cache(r.run_dir, chronic_dataset, out, force=True, limit=None)
    assert again.chosen == rec["chosen"]  # the same masking stream, the same choice
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(PipelineError, match="not an earlier"):
        add_cache(r.run_dir, chronic_dataset, tmp_path / "other", force=True)
    with pytest.raises(PipelineError, match="inside it"):
        add_cache(r.run_dir, chronic_dataset, r.run_dir / "model" / "x")
    with pytest.raises(PipelineError, match="unknown split 'no_such_split'"):
        add_cache(r.run_dir, chronic_dataset, tmp_path / "none", split="no_such_split")
