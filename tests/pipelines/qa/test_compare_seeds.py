"""``qa compare`` over data seeds and training seeds: one run per (data seed, seed, configuration), the grid
restriction, resuming, and the run-by-run HRR-vs-plain section, at toy size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from train_fixtures import dataset_dir, program_dir  # noqa: F401

from pipelines.cli import main
from pipelines.qa.compare import QA_GRID, compare, run_id, select_grid
from pipelines.qa.data import QAOptions

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

OPTS = QAOptions(max_memories=12, train_patients=0, val_patients=0, test_patients=0, unseen_fraction=0.3)
FAST = dict(epochs=1, dim=8, skip_finetune=True, qa_options=OPTS)
PAIR = ["memn2n-plain-h3-adjacent", "memn2n-hrr-h3-adjacent"]


def test_select_grid_by_run_and_table_names():
    assert [n for _, n, _ in select_grid(None)] == [n for _, n, _ in QA_GRID]
    assert [n for _, n, _ in select_grid(["embedding"])] == PAIR
    assert [n for _, n, _ in select_grid(["memnn-hrr-h2", "embedding"])] == [*PAIR, "memnn-hrr-h2"]
    assert {t for t, _, _ in select_grid(["hops"])} == {"hops"}
    with pytest.raises(ValueError, match="unknown \\['memn2n-gpt'\\]"):
        select_grid(["memn2n-gpt"])


def test_one_run_per_data_seed_seed_and_configuration(tmp_path, dataset_dir, program_dir):  # noqa: F811
    out = tmp_path / "cmp"
    path = compare(dataset_dir, program_dir, out=out, seeds=2, data_seeds="0,3", only=["embedding"], **FAST)
    want = {run_id(n, d, s) for n in PAIR for d in (0, 3) for s in (0, 1)}
    assert {p.name for p in (out / "runs").iterdir()} == want
    assert all((out / "runs" / r / "results.json").is_file() for r in want)
    # each data seed draws its own QA set; each run trains with its own seed on its data seed's set
    sets = sorted(p for p in (out / "qa").glob("*/*") if p.is_dir())
    assert len(sets) == 2
    r = json.loads((out / "runs" / run_id(PAIR[1], 3, 1) / "results.json").read_text())
    assert r["config"]["seed"] == 1 and r["config"]["embedding"] == "hrr"
    assert json.loads((Path(r["config"]["qa"]) / "manifest.json").read_text())["options"]["seed"] == 3
    text = path.read_text()
    assert "data seeds [0, 3] x training seeds [0, 1] = 4 run(s)" in text
    assert "HRR better in" in text and "of 4 (" in text
    assert "| d0/s0 | d0/s1 | d3/s0 | d3/s1 |" in text
    assert "hops 1-3" not in text and "memnn" not in text  # only the runs asked for
    stamp = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/results.json")}
    compare(dataset_dir, program_dir, out=out, seeds=2, data_seeds="0,3", only=["embedding"], **FAST)
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/results.json")} == stamp  # read back


def test_cli_seeds_and_only(tmp_path, dataset_dir, program_dir):  # noqa: F811
    out = tmp_path / "cli"
    args = [
        "qa",
        "compare",
        "--dataset",
        str(dataset_dir),
        "--program",
        str(program_dir),
        "--out",
        str(out),
        "--epochs",
        "1",
        "--skip-finetune",
        "--max-train",
        "50",
    ]
    r = CliRunner().invoke(main, [*args, "--seeds", "5,", "--only", "memn2n-hrr-h3-adjacent"])
    assert r.exit_code == 0, r.output
    assert [p.name for p in (out / "runs").iterdir()] == ["memn2n-hrr-h3-adjacent-data0-seed5"]
    assert "(1 run)" in r.output and "no interval: one run" in r.output
    bad = CliRunner().invoke(main, [*args, "--only", "memn2n-gpt"])
    assert bad.exit_code != 0 and "memn2n-gpt" in bad.output
    bad = CliRunner().invoke(main, [*args, "--seeds", "two"])
    assert bad.exit_code != 0 and "seeds" in bad.output
