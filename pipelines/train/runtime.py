"""What every training entry point shares: devices, ``torchrun`` / DDP setup, seeding, the learning-rate
schedule, ``metrics.jsonl`` (+ optional TensorBoard), progress bars and run metadata.

Distributed runs are detected from the environment ``torchrun`` sets (``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``): NCCL on CUDA, gloo on CPU. Only rank 0 logs and writes files.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import random
import sys
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from ontology_compiler.api import write_file_atomically
from pipelines.errors import PipelineError

from .run_lock import lock_scope

log = logging.getLogger(__name__)

C = TypeVar("C")


@dataclass
class DistContext:
    """The process's place in a (possibly single-process) run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_sum(self, values: list[float], device: torch.device) -> list[float]:
        """Element-wise sum over ranks (identity when single-process)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    def close(self) -> None:
        if self.initialized_here and dist.is_initialized():
            dist.destroy_process_group()


def available_devices() -> list[str]:
    """The ``--device`` values this machine can run: ``auto``, ``cpu``, and ``cuda``, ``cuda:0``, … when
    CUDA is available (``mps`` on Apple silicon)."""
    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        found += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def check_device(device: str, what: str = "--device") -> str:
    """``device`` when this machine has it; else a :class:`PipelineError` naming ``what``, the value and
    the devices that are available (the one check behind every command's ``--device``)."""
    if device in ("auto", "cpu"):
        return device
    avail = available_devices()
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or (dev.type != "cpu" and str(dev) not in avail):
        reason = "not a device name" if dev is None else "not available on this machine"
        if dev is not None and dev.type == "cuda" and "cuda" not in avail:
            reason += " (torch sees no CUDA device)"
        raise PipelineError(f"{what} {device!r}: {reason}; expected one of: {', '.join(avail)}")
    return device


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; else the named device, which must be available
    (:func:`check_device`)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(check_device(device))


def init_distributed(device: torch.device) -> tuple[DistContext, torch.device]:
    """Join the process group ``torchrun`` describes (if any); pick this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(), device
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    here = False
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        here = True
    return DistContext(rank, world, local, here), device


def seed_everything(seed: int, rank: int = 0) -> int:
    """Seed Python, NumPy and torch (all devices) with ``seed + rank``; returns that value."""
    s = int(seed) + int(rank)
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)
    return s


def warmup_cosine(total_steps: int, warmup_fraction: float):
    """LR multiplier: linear warm-up over ``warmup_fraction`` of the steps, then cosine decay to 0."""
    warm = max(int(round(warmup_fraction * total_steps)), 0)

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(total_steps - warm, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return f


def versions() -> dict[str, str]:
    import numpy
    import pyarrow

    try:
        from importlib.metadata import version

        hrrbert = version("hrrbert")
    except Exception:  # not installed (source checkout)
        hrrbert = "unknown"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
        "hrrbert": hrrbert,
        "cuda": torch.version.cuda or "",
        "platform": platform.platform(),
    }


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def plain(obj: Any) -> Any:
    """``obj`` with NaN/inf floats as None and tuples as lists (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def write_json(path: Path, obj: Any) -> None:
    """Strict JSON of ``obj`` written atomically (a failed write leaves no temporary file behind)."""
    text = json.dumps(plain(obj), indent=2, default=str, allow_nan=False) + "\n"
    write_file_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), what="JSON file")


class MetricsLog:
    """Appends one JSON object per record to ``metrics.jsonl`` (and TensorBoard scalars when asked and
    installed). Inactive on ranks other than 0."""

    def __init__(
        self, path: Path | None, tensorboard_dir: Path | None = None, truncate_after_step: int | None = None
    ) -> None:
        self.path = path
        self.tb = None
        if path is None:
            return
        if truncate_after_step is not None and path.exists():
            kept = [
                ln
                for ln in path.read_text(encoding="utf-8").splitlines()
                if ln.strip() and json.loads(ln).get("step", 0) <= truncate_after_step
            ]
            path.write_text("".join(ln + "\n" for ln in kept), encoding="utf-8")
        if tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(tensorboard_dir))
            except ImportError:
                log.warning(
                    "TensorBoard requested but not installed (pip install 'hrrbert[tensorboard]'); "
                    "logging to "
                    "metrics.jsonl only"
                )

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(plain(record), allow_nan=False) + "\n")
        if self.tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float) and not isinstance(v, bool):
                    self.tb.add_scalar(k, v, record.get("step", 0))

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def progress(total: int, initial: int, enabled: bool, desc: str):
    """A tqdm bar on rank 0 when stderr is a terminal; a no-op object otherwise."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        disable=not (enabled and sys.stderr.isatty()),
        dynamic_ncols=True,
    )


def redirect_logging():
    """Route logging through tqdm while a bar is shown."""
    try:
        from tqdm.contrib.logging import logging_redirect_tqdm

        return logging_redirect_tqdm()
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()


def config_from(cls: type[C], config: C | None, options: dict[str, Any], what: str, **given: Any) -> C:
    """``config`` itself, or a ``cls`` built from ``given`` (positional arguments, as strings when set)
    and the keyword ``options``; an unknown option is a TypeError naming it."""
    if config is not None:
        return config
    bad = sorted(set(options) - {f.name for f in fields(cls)})
    if bad:
        raise TypeError(f"unknown {what} option(s) {bad}")
    return cls(**{k: (str(v) if v is not None else v) for k, v in given.items()}, **options)


@contextlib.contextmanager
def distributed(device: str):
    """``(ctx, device)`` of this process (joining the ``torchrun`` process group if any), closed after."""
    ctx, dev = init_distributed(resolve_device(device))
    try:
        with lock_scope():  # the run folders the block opens stay locked until it ends
            yield ctx, dev
    finally:
        ctx.close()
