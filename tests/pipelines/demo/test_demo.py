"""``hrrbert demo`` data steps at toy size: demo release -> program -> cohort -> datasets -> SQL (the
demo's experiment at toy size is tested in ``test_experiment.py``)."""

from __future__ import annotations

from click.testing import CliRunner

from pipelines.cli import main as hrrbert_main


def test_demo_runs(tmp_path):
    res = CliRunner().invoke(
        hrrbert_main,
        ["demo", "--out", str(tmp_path), "--size", "small", "--patients", "300", "--train-steps", "0"],
    )
    assert res.exit_code == 0, res.output
    assert "atoms composing E11.9" in res.output and "multiplicity histogram" in res.output
    assert res.output.count("dataset   ") == 2 and "patients kept" in res.output
