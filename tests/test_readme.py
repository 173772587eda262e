"""Every code block of README.md runs as written.

A block is run unless the line right above its opening fence is ``<!-- readme-test: skip REASON (why) -->``
with REASON one of :data:`SKIP_REASONS` (a block that needs licensed data, a GPU, or is ``make`` itself);
:func:`test_every_block_is_run_or_skipped_for_a_known_reason` checks that on every run of the suite.

:func:`test_readme_blocks_run_as_written` (marker ``readme``, about 40 minutes on 2 cores; ``make
test-readme``, and CI) runs the blocks in README order in a scratch folder that holds what ``make demo``
leaves in a clone: ``.venv`` and ``tests`` (links to the repository's: blocks call ``.venv/bin/...`` and read
``tests/data``) and ``artifacts/`` made by the demo's own job (``.venv/bin/hrrbert demo``, what ``make demo``
runs), or copied from a finished demo's ``artifacts/`` named by ``HRRBERT_README_ARTIFACTS``. ``bash``
blocks run under ``bash -euo pipefail``, ``python`` blocks with ``.venv/bin/python``; every failing block
is reported with its README line and the end of its output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUN_LANGUAGES = ("bash", "python")
SKIP_REASONS = ("make", "gpu", "licensed-data")
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s+(\S+)\s*(.*?)\s*-->")
BLOCK_TIMEOUT_S = 40 * 60


@dataclass
class Block:
    line: int  # README line of the opening fence
    language: str
    code: str
    skip: str | None  # the skip reason, None when the block runs
    why: str


def blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` with their language and skip marker."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        marker = SKIP.search(lines[start - 1]) if start else None
        out.append(
            Block(
                start + 1,
                m.group(1),
                "\n".join(lines[start + 1 : j]) + "\n",
                marker.group(1) if marker else None,
                marker.group(2) if marker else "",
            )
        )
        i = j + 1
    return out


def test_every_block_is_run_or_skipped_for_a_known_reason():
    found = blocks(README.read_text(encoding="utf-8"))
    assert found, "README.md has no code blocks"
    for b in found:
        assert b.language, f"README.md:{b.line}: a code block without a language"
        if b.skip is not None:
            assert b.skip in SKIP_REASONS, f"README.md:{b.line}: unknown skip reason {b.skip!r}"
            assert b.why, f"README.md:{b.line}: a skip says why"
    run = [b for b in found if b.skip is None and b.language in RUN_LANGUAGES]
    # placeholders only in skipped blocks: a block that runs names real paths
    for b in run:
        code = "\n".join(line.split("  #")[0] for line in b.code.splitlines())
        assert not re.search(r"<[a-z_-]+>|path/to/", code), (
            f"README.md:{b.line}: a placeholder in a block that runs"
        )
    assert len(run) >= 10


def _demo_parts(artifacts: Path) -> list[str]:
    """What ``make demo`` leaves under ``artifacts/``, taken from a finished demo there: its release, its
    program, its cohort, its two datasets and its run (nothing another run added beside them)."""
    cfg = json.loads((artifacts / "runs" / "demo-default" / "experiment.json").read_text(encoding="utf-8"))
    tail = lambda p, n: "/".join(Path(p).parts[-n:])  # noqa: E731 - "datasets/demo-mimic/<id>"
    datasets = [tail(cfg["config"][k], 3) for k in ("dataset", "transfer_dataset")]
    manifest = json.loads((artifacts / datasets[0] / "manifest.json").read_text(encoding="utf-8"))
    cohort = "ehr/" + Path(manifest["source"]["path"]).name
    return [
        "releases/demo_icd10cm_default",
        tail(cfg["config"]["program"], 3),
        cohort,
        *datasets,
        "runs/demo-default",
    ]


def _scratch(tmp: Path) -> Path:
    """A folder that looks like a clone after ``make demo``."""
    work = tmp / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    (work / "tests").symlink_to(ROOT / "tests")
    given = os.environ.get("HRRBERT_README_ARTIFACTS")
    if given:
        for part in _demo_parts(Path(given)):
            shutil.copytree(Path(given) / part, work / "artifacts" / part, symlinks=False)
    else:
        subprocess.run(
            [str(work / ".venv" / "bin" / "hrrbert"), "demo"],
            cwd=work,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=BLOCK_TIMEOUT_S,
        )
    return work


def _run(block: Block, work: Path) -> subprocess.CompletedProcess:
    if block.language == "bash":
        cmd = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        cmd = [str(work / ".venv" / "bin" / "python"), "-c", block.code]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # as a user's shell: the project comes from the venv's editable install
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)


@pytest.mark.readme
def test_readme_blocks_run_as_written(tmp_path):
    if not (ROOT / ".venv" / "bin" / "hrrbert").exists():
        pytest.skip("needs the project's .venv (make test creates it)")
    work = _scratch(tmp_path)
    failures = []
    for b in blocks(README.read_text(encoding="utf-8")):
        if b.skip is not None or b.language not in RUN_LANGUAGES:
            continue
        res = _run(b, work)
        print(f"README.md:{b.line} ({b.language}): exit {res.returncode}", file=sys.stderr)
        if res.returncode != 0:
            tail = (res.stdout + res.stderr)[-3000:]
            failures.append(f"README.md:{b.line} ({b.language}) exited {res.returncode}:\n{tail}")
    assert not failures, "\n\n".join(failures)
