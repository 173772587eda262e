"""``hrrbert demo --config``: which configurations a demo trains, and the run folder it names."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hrr_kernel.modes import MODES
from pipelines.cli import main as hrrbert_main
from pipelines.demo.defaults import demo_configurations
from pipelines.demo.run import demo_name


def test_default_full_and_given():
    assert demo_configurations((), False) == ()  # the demo's own list
    assert demo_configurations((), True) == tuple(MODES)
    assert demo_configurations(("unstructured", "base", "add"), False) == ("unstructured", "base", "add")


@pytest.mark.parametrize(
    ("confs", "full", "message"),
    [
        (("base",), False, "must include the control, unstructured"),
        (("unstructured", "base", "base"), False, "names a configuration twice"),
        (("unstructured", "base"), True, "--config and --full"),
    ],
)
def test_refused(confs, full, message):
    with pytest.raises(ValueError, match=message):
        demo_configurations(confs, full)


def test_cli_usage_error_and_run_name(tmp_path):
    res = CliRunner().invoke(hrrbert_main, ["demo", "--config", "base", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "must include the control" in res.output and "Traceback" not in res.output
    assert not any(tmp_path.iterdir())  # refused before anything was written
    assert demo_name("default", 30_000, None, None, 1, False, ("unstructured", "base", "add")) == (
        "demo-default-seed1-unstructured+base+add"
    )
    assert demo_name("default", 30_000, None, None, 0, False, ("unstructured", "base")) == "demo-default"
