"""``hrrbert demo --carry`` at toy size: old program as of the first effective time, the cohort without
the carriers of new codes, both datasets, the old models carried to the new program and scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli import main as hrrbert_main


@pytest.mark.slow  # about 2 minutes on 2 cores: two compiles, a cohort, two datasets, two tiny experiments
def test_demo_carry_at_toy_size(tmp_path):
    args = [
        "demo",
        "--carry",
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
    res = CliRunner().invoke(hrrbert_main, args)
    assert res.exit_code == 0, res.output
    assert "new codes" in res.output and "| MLM top-10 of new codes" in res.output
    study = tmp_path / "runs" / "demo-small-n300-s2-t1-carry" / "carry"
    rec = json.loads((study / "carry.json").read_text())
    assert rec["new_codes"] > 0 and rec["mlm"]["probes"] > 0 and rec["chapters"]["patients"] > 0
    # the like-for-like reference: as many old codes with a twin as the new codes have, the rest without
    n = rec["neighbours"]
    assert 0 <= n["new_with_twin"] <= n["new_codes"] and 0 < n["matched_codes"] <= n["new_codes"]
    assert {"new", "new_all", "old", "old_matched"} <= set(n["base"])
    assert "share of twins" in (study / "carry.md").read_text()
    for mode in ("unstructured", "base"):
        for kind in ("pretrain", "chapters"):
            carried = json.loads((study / "models" / f"{mode}-{kind}" / "config.json").read_text())
            assert carried["program_id"] == rec["new_program_id"]
            assert carried["carried_from"]["new_program_id"] == rec["new_program_id"]
    # the carried base model composes every new code; the unstructured one has them all at [UNK]
    assert rec["carry"]["base"]["tokens"]["carried"] + rec["new_codes"] == rec["carry"]["base"]["new_tokens"]
    # no patient carrying a new code was trained on: the old dataset lacks them all
    old = json.loads((tmp_path / "runs" / "demo-small-n300-s2-t1-carry" / "experiment.json").read_text())
    manifest = json.loads((Path(old["config"]["dataset"]) / "manifest.json").read_text())
    new_manifest = json.loads((Path(rec["dataset_new"]) / "manifest.json").read_text())
    kept_old = manifest["counts"]["patients"]["kept"]
    assert (
        kept_old + new_manifest["counts"]["patients"]["by_split"]["rood"]
        == new_manifest["counts"]["patients"]["kept"]
    )


def test_demo_carry_refuses_full(tmp_path):
    res = CliRunner().invoke(hrrbert_main, ["demo", "--carry", "--full", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "drop --full" in res.output


def test_demo_transfer_is_a_hidden_alias_of_carry(tmp_path):
    """``--transfer``, the option's name before: still the carry study, with one line on stderr."""
    res = CliRunner().invoke(hrrbert_main, ["demo", "--transfer", "--full", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "drop --full" in res.output
    assert res.stderr.startswith("'hrrbert demo --transfer' is now 'hrrbert demo --carry'\n")
    assert "--transfer" not in CliRunner().invoke(hrrbert_main, ["demo", "--help"]).output
