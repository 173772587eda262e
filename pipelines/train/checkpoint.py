"""Resume checkpoints: tensors and plain values only (``torch.load(weights_only=True)`` reads them).

A checkpoint is ``<run>/checkpoints/step-<step>.pt`` holding ``model`` (state dict), ``optimizer``,
``scheduler``, ``rng`` (Python, NumPy, torch CPU and CUDA generator states, all as tensors), ``step``,
``epoch``, ``position`` (batches of the epoch already consumed) and ``config`` (the run config). It is
written to a temporary file and renamed, so a kill never leaves a half-written checkpoint under its name;
a failed write (a full disk) removes the temporary file and raises :class:`OutputWriteError` naming the
checkpoint, and the previous checkpoints are kept.
"""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ontology_compiler.api import write_file_atomically
from pipelines.errors import InputFileError, PipelineError

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_RE = re.compile(r"^step-(\d+)\.pt$")
REQUIRED_KEYS = ("model", "optimizer", "scheduler", "rng", "step", "epoch", "position", "config")


class CheckpointError(InputFileError):
    """A checkpoint is missing, unreadable or incomplete."""


class OutputWriteError(PipelineError, OSError):
    """A run's file (a checkpoint, a model's weights) could not be written, e.g. on a full disk; its
    temporary file is removed and nothing is left under its name."""


class ConfigMismatchError(PipelineError):
    """A run is being resumed with a config that differs from the one it was started with."""

    def __init__(self, path: Path, diffs: dict[str, tuple[Any, Any]]) -> None:
        self.path, self.diffs = path, diffs
        lines = [f"  {k}: run has {a!r}, now {b!r}" for k, (a, b) in sorted(diffs.items())]
        super().__init__(
            f"{path}: cannot resume, the config differs in {sorted(diffs)}:\n"
            + "\n".join(lines)
            + "\n  resume with the original options, or start a new run (another --run-id)"
        )


def config_diff(
    saved: dict[str, Any], new: dict[str, Any], ignore: tuple[str, ...] = ()
) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ between two flat configs (missing keys count as ``None``)."""
    keys = (set(saved) | set(new)) - set(ignore)
    norm = {k: (_plain(saved.get(k)), _plain(new.get(k))) for k in keys}
    return {k: v for k, v in norm.items() if v[0] != v[1]}


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def rng_state() -> dict[str, torch.Tensor]:
    """Every global random generator's state, as tensors."""
    py = random.getstate()
    np_state = np.random.get_state()
    state = {
        "python_version": torch.tensor(py[0]),
        "python": torch.tensor(py[1], dtype=torch.int64),
        "python_gauss": torch.tensor(float("nan") if py[2] is None else py[2], dtype=torch.float64),
        "numpy_keys": torch.from_numpy(np_state[1].astype(np.int64)),
        "numpy_pos": torch.tensor([np_state[2], np_state[3]], dtype=torch.int64),
        "numpy_gauss": torch.tensor(np_state[4], dtype=torch.float64),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    """Restore the states saved by :func:`rng_state`."""
    g = float(state["python_gauss"])
    random.setstate(
        (int(state["python_version"]), tuple(int(x) for x in state["python"]), None if g != g else g)
    )
    pos, has_gauss = (int(x) for x in state["numpy_pos"])
    np.random.set_state(
        (
            "MT19937",
            state["numpy_keys"].numpy().astype(np.uint32),
            pos,
            has_gauss,
            float(state["numpy_gauss"]),
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"step-{step:08d}.pt"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoints, oldest first."""
    d = Path(run_dir) / CHECKPOINT_DIR
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def save_checkpoint(path: Path, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` atomically to ``path``; keep the newest ``keep`` checkpoints of the folder.

    A failed write (torch raises ``RuntimeError: ... file write failed`` on a full disk) removes the
    temporary file and raises :class:`OutputWriteError` naming ``path``; older checkpoints stay.
    """
    path = Path(path)
    write_file_atomically(
        path,
        lambda tmp: torch.save(state, tmp),
        what="checkpoint",
        error=OutputWriteError,
        hint="free some space (older checkpoints are kept) and continue with --resume",
    )
    for stale in path.parent.glob("step-*.pt.tmp"):  # left by a killed writer
        stale.unlink(missing_ok=True)
    if keep > 0:
        for old in list_checkpoints(path.parent.parent)[:-keep]:
            old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; a missing, corrupt or incomplete file names itself."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "checkpoint missing")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises several types for a truncated or foreign file
        raise CheckpointError(path, f"checkpoint unreadable or corrupt ({type(e).__name__}: {e})") from e
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(path, f"checkpoint incomplete, missing {missing}")
    check_fields(path, state)
    return state


def check_fields(path: Path, state: dict[str, Any]) -> None:
    """Refuse a checkpoint whose fields are not what :func:`save_checkpoint` writes, naming the field:
    ``step``, ``epoch`` and ``position`` whole numbers >= 0 (``step`` the one in the file's name
    ``step-<step>.pt``), the state dicts and ``rng``, ``config``, ``loop`` dictionaries."""
    for key in ("step", "epoch", "position"):
        v = state[key]
        if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point():
            v = state[key] = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise CheckpointError(path, f"checkpoint field {key!r} is {v!r}; expected a whole number >= 0")
        if v < 0:
            raise CheckpointError(path, f"checkpoint field {key!r} is {v}; expected a whole number >= 0")
    m = CHECKPOINT_RE.match(path.name)
    if m is not None and int(m.group(1)) != state["step"]:
        named = int(m.group(1))
        step = state["step"]
        raise CheckpointError(path, f"checkpoint field 'step' is {step}; the file is named for step {named}")
    for key in ("model", "optimizer", "scheduler", "rng", "config", "loop", "best_model"):
        if key in state and not isinstance(state[key], dict):
            raise CheckpointError(
                path, f"checkpoint field {key!r} is a {type(state[key]).__name__}; expected a dictionary"
            )


def latest_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint of a run; names the folder when there is none."""
    found = list_checkpoints(run_dir)
    if not found:
        raise CheckpointError(Path(run_dir) / CHECKPOINT_DIR, "no checkpoint to resume from (step-*.pt)")
    return found[-1]
