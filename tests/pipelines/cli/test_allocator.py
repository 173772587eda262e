"""The ``hrrbert`` command keeps freed memory in the process (``pipelines.cli.allocator``), unless told
not to; each case runs in a fresh interpreter so that the test process's own allocator is left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.cli.allocator import KEEP_FREED_ENV, keep_freed_memory

PROBE = (
    "import json, os; from pipelines.cli.allocator import keep_freed_memory; r = keep_freed_memory(); "
    "print(json.dumps([r, {k: os.environ.get(k) for k in ('MALLOC_MMAP_MAX_', 'MALLOC_TRIM_THRESHOLD_')}]))"
)


def _probe(**env) -> list:
    clean = {k: v for k, v in os.environ.items() if k not in KEEP_FREED_ENV and k != "HRRBERT_MALLOC"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_by_default_and_passed_to_spawned_processes():
    assert _probe() == ["keep", KEEP_FREED_ENV]


def test_turned_off_or_left_to_the_environment():
    assert _probe(HRRBERT_MALLOC="default") == ["default", {k: None for k in KEEP_FREED_ENV}]
    given = _probe(MALLOC_MMAP_MAX_="4")
    assert given == ["environment", {"MALLOC_MMAP_MAX_": "4", "MALLOC_TRIM_THRESHOLD_": None}]


def test_a_bad_value_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="HRRBERT_MALLOC='sometimes': expected one of keep, default"):
        keep_freed_memory({"HRRBERT_MALLOC": "sometimes"})
    res = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv = ['hrrbert', '--version']; "
         "from pipelines.cli import entry; entry()"],
        env={**os.environ, "HRRBERT_MALLOC": "sometimes"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode != 0 and "HRRBERT_MALLOC='sometimes'" in res.stderr
