"""The one training loop: every trainer (pretraining, fine-tuning, QA, Doctor2Vec) is a :class:`Task`
that says what a batch is, what its loss is and how to validate; :func:`run_loop` does the rest.

It owns the optimiser step (zero, backward, clipping, step, schedule), bf16 autocast on CUDA,
DistributedDataParallel under ``torchrun``, the progress bar (a terminal) or a plain progress log line
at most every :data:`LOG_INTERVAL_S` seconds (no terminal), ``metrics.jsonl`` (and TensorBoard),
validation on a schedule, best-weights selection, early stopping (``patience``), atomic checkpoints and
exact resume after a kill.

Schedule, in steps (one step = one optimiser update on one batch of the epoch's list):

- a *training record* every ``log_every`` steps (0: none): ``step, epoch, loss, lr, grad_norm,
  <weight_name>, seq_per_s`` (the loss averaged over the weight of the steps since the last record);
- a *validation* ``val_every`` steps after the previous one (0: never by count), at the end of every epoch
  and after the last step; its record is ``step, epoch, train_loss`` (since the previous validation)
  and the task's validation metrics;
- a *checkpoint* every ``save_every`` steps (0: at every validation) and after the last step.

Resume is exact: the epoch's batches depend only on (the task's seed, epoch), the checkpoint holds the
model, optimiser, schedule, global RNG states, the position in the epoch, the loop's running sums and
the best weights so far; ``metrics.jsonl`` is cut back to the checkpoint's step.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from model.common import shape_mismatch
from pipelines.errors import PipelineError

from .checkpoint import (
    CHECKPOINT_DIR,
    CheckpointError,
    ConfigMismatchError,
    checkpoint_path,
    config_diff,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from .run_lock import lock_run
from .runtime import DistContext, MetricsLog, progress, redirect_logging, write_json
from .sparse import clip_grad_norm

log = logging.getLogger(__name__)

__all__ = [
    "LOG_INTERVAL_S",
    "LossForward",
    "METRICS_FILE",
    "LoopOptions",
    "LoopResult",
    "StepOutput",
    "Task",
    "finished_results",
    "open_run",
    "publish_results",
    "run_loop",
]

METRICS_FILE = "metrics.jsonl"
RESULTS_FILE = "results.json"  # a finished run's results (its presence marks the run finished)
LOG_INTERVAL_S = 30.0  # off a terminal, at most one progress log line this often


@dataclass
class StepOutput:
    """What one training batch gives the loop."""

    loss: Tensor  # scalar to back-propagate (this rank's)
    weight: float  # what the loss is an average over (masked codes, sequences, pairs): the log average weight
    sequences: int  # sequences in the batch (for seq/s)


class Task(Protocol):
    """A trainer as the loop sees it."""

    def epoch_batches(self, epoch: int) -> Sequence[Any]:
        """The batches of one epoch, in order; a pure function of (seed, epoch)."""

    def step(self, net: nn.Module, batch: Any, step: int) -> StepOutput:
        """Forward one batch through ``net`` (the DDP wrapper, or the model) in training mode."""

    def validate(self, model: nn.Module) -> dict[str, Any]:
        """Validation metrics, named as they go into ``metrics.jsonl`` (e.g. ``val_f1``)."""


class LossForward(nn.Module):
    """A model whose training loss is a method (``model.loss(batch, *args) -> (loss, ...)``) seen through
    its forward pass, so that the loop's DDP wrapper synchronises its gradients."""

    def __init__(self, model: nn.Module, *args: Any) -> None:
        super().__init__()
        self.model, self.args = model, args

    def forward(self, batch: Any) -> Tensor:
        return self.model.loss(batch, *self.args)[0]


@dataclass
class LoopOptions:
    """How the loop runs (a trainer fills it from its config)."""

    total_steps: int  # optimiser steps of the whole run
    clip: float = 1.0  # max gradient L2 norm (0: no clipping)
    val_every: int = 0  # steps between validations (0: only at epoch ends and after the last step)
    log_every: int = 0  # steps between training records (0: none)
    save_every: int = 0  # steps between checkpoints (0: at every validation)
    keep_checkpoints: int = 1  # newest checkpoints kept
    monitor: str | None = None  # validation metric for best weights and patience (None: keep the last)
    minimize: bool = False  # the monitored metric is better when lower (a loss)
    keep_best: bool = True  # load the best validation's weights at the end (else keep the last)
    patience: int = 0  # stop after this many validations without improvement (0: never)
    bf16: bool = False  # bf16 autocast (CUDA only)
    progress: bool = True  # tqdm bar on a terminal (rank 0)
    tensorboard: bool = False  # TensorBoard scalars next to metrics.jsonl
    weight_name: str = "weight"  # name of the weight sum in training records (e.g. masked)
    desc: str = "train"  # progress bar / log line label
    config: dict[str, Any] = field(default_factory=dict)  # stored in every checkpoint (resume checks it)


@dataclass
class LoopResult:
    step: int  # optimiser steps done
    completed: bool  # False when stopped by ``stop_after`` (a simulated kill)
    stopped_early: bool  # True when patience ended the run
    last_validation: dict[str, Any]
    best_validation: dict[str, Any] | None  # the monitored best (None without a monitor)
    best_step: int  # step of the best validation (-1 without one)
    best_epoch: int  # epoch of the best validation (-1 without one)


@dataclass
class _State:
    """Everything that changes as the loop runs; all of it is in a checkpoint."""

    step: int = 0
    epoch: int = 0
    position: int = 0  # batches of the current epoch already done
    since_val: int = 0  # steps since the previous validation
    val_loss: float = 0.0  # weighted loss sum since the previous validation
    val_weight: float = 0.0
    log_loss: float = 0.0  # ... and since the previous training record
    log_weight: float = 0.0
    log_seqs: float = 0.0
    bad: int = 0  # validations since the best one
    best: dict[str, Any] | None = None
    best_step: int = -1
    best_epoch: int = -1
    last: dict[str, Any] = field(default_factory=dict)

    def plain(self) -> dict[str, Any]:
        return _python(dict(self.__dict__))


def _python(obj: Any) -> Any:
    """``obj`` with NumPy scalars as Python numbers and tuples as lists: what
    ``torch.load(weights_only=True)`` reads back."""
    if isinstance(obj, dict):
        return {k: _python(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_python(v) for v in obj]
    return obj.item() if hasattr(obj, "item") and not isinstance(obj, Tensor) else obj


def _score(value: Any, minimize: bool) -> float:
    """Higher is better; NaN (a metric undefined on this split) ranks below everything."""
    v = float(value)
    return -math.inf if math.isnan(v) else (-v if minimize else v)


def _improved(new: dict[str, Any], best: dict[str, Any] | None, key: str, minimize: bool) -> bool:
    return best is None or _score(new[key], minimize) > _score(best[key], minimize)


class _Progress:
    """The bar on a terminal; else an INFO line at most every LOG_INTERVAL_S seconds (rank 0)."""

    def __init__(self, total: int, initial: int, enabled: bool, main: bool, desc: str) -> None:
        self.bar = progress(total, initial, enabled and main, desc)
        self.enabled, self.desc, self.total = main, desc, total
        self.t0 = self.last = time.perf_counter()
        self.start = initial

    def update(self, step: int) -> None:
        self.bar.update(1)
        now = time.perf_counter()
        if not self.enabled or not self.bar.disable or now - self.last < LOG_INTERVAL_S:
            return
        self.last = now
        rate = (step - self.start) / max(now - self.t0, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else math.inf
        log.info("%s: step %d/%d, %.2f steps/s, ETA %.0f s", self.desc, step, self.total, rate, eta)

    def close(self) -> None:
        self.bar.close()


class _Loop:
    """One run of the loop; the methods are its steps."""

    def __init__(
        self, model, optimizer, scheduler, task: Task, opts: LoopOptions, run_dir: Path, ctx, device
    ):
        self.model, self.opt, self.sched, self.task, self.o = model, optimizer, scheduler, task, opts
        self.run_dir, self.ctx, self.device = Path(run_dir), ctx, device
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.s = _State()
        self.best_weights: dict[str, Tensor] | None = None
        self.net = model
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.net = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    # --- resume and checkpoints ---------------------------------------------------------------------

    def restore(self, state: dict[str, Any], path: Path | None = None) -> None:
        where = Path(path) if path is not None else self.run_dir / CHECKPOINT_DIR
        step, total = int(state["step"]), self.o.total_steps
        if step > total:
            msg = f"checkpoint field 'step' is {step}, beyond the {total} steps this run trains (max_steps)"
            raise CheckpointError(where, msg)
        stray = sorted(set(state.get("loop") or {}) - set(_State.__dataclass_fields__))
        if stray:
            raise CheckpointError(where, f"checkpoint field 'loop' has keys {stray} this loop does not know")
        saved = state["model"]
        differs = shape_mismatch(
            {k: tuple(v.shape) for k, v in self.model.state_dict().items()},
            {k: tuple(getattr(v, "shape", ())) for k, v in saved.items()} if isinstance(saved, dict) else {},
        )
        if differs:
            raise CheckpointError(where, f"checkpoint does not match the run's model ({differs})")
        try:
            self.model.load_state_dict(saved)
            self.opt.load_state_dict(state["optimizer"])
            if self.sched is not None and state["scheduler"]:
                self.sched.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError, TypeError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise CheckpointError(where, f"checkpoint does not match the run ({msg})") from e
        set_rng_state(state["rng"])
        self.s = _State(**state.get("loop", {}))
        self.s.step, self.s.epoch, self.s.position = (
            int(state["step"]),
            int(state["epoch"]),
            int(state["position"]),
        )
        self.best_weights = state.get("best_model") or None
        log.info(
            "resumed %s at step %d (epoch %d, batch %d)",
            self.run_dir,
            self.s.step,
            self.s.epoch,
            self.s.position,
        )

    def checkpoint(self) -> None:
        if self.ctx.is_main:
            state = {
                "model": self.model.state_dict(),
                "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict() if self.sched is not None else {},
                "rng": rng_state(),
                "step": self.s.step,
                "epoch": self.s.epoch,
                "position": self.s.position,
                "config": self.o.config,
                "loop": self.s.plain(),
                "best_model": self.best_weights or {},
            }
            save_checkpoint(checkpoint_path(self.run_dir, self.s.step), state, keep=self.o.keep_checkpoints)
        self.ctx.barrier()

    # --- one step -----------------------------------------------------------------------------------

    def train_step(self, batch: Any) -> float:
        """One optimiser update; returns the gradient norm."""
        dev = self.device
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.o.bf16 and dev.type == "cuda"):
            out = self.task.step(self.net, batch, self.s.step)
        self.opt.zero_grad(set_to_none=True)
        out.loss.float().backward()
        gnorm = clip_grad_norm(self.params, self.o.clip) if self.o.clip > 0 else torch.zeros(())
        self.opt.step()
        if self.sched is not None:
            self.sched.step()
        loss = float(out.loss.detach()) * out.weight
        s = self.s
        s.step, s.position, s.since_val = s.step + 1, s.position + 1, s.since_val + 1
        s.val_loss, s.val_weight = s.val_loss + loss, s.val_weight + out.weight
        s.log_loss, s.log_weight, s.log_seqs = (
            s.log_loss + loss,
            s.log_weight + out.weight,
            s.log_seqs + out.sequences,
        )
        return float(gnorm)

    # --- records ------------------------------------------------------------------------------------

    def log_record(self, metrics: MetricsLog, gnorm: float, timer: list[float]) -> None:
        s = self.s
        loss, weight, seqs = self.ctx.all_sum([s.log_loss, s.log_weight, s.log_seqs], self.device)
        now = time.perf_counter()
        dt, timer[0] = now - timer[0], now
        rec = {"step": s.step, "epoch": s.epoch, "loss": loss / max(weight, 1e-12)}
        if self.sched is not None:
            rec["lr"] = self.sched.get_last_lr()[0]
        weight = int(weight) if float(weight).is_integer() else weight
        rec.update({"grad_norm": gnorm, self.o.weight_name: weight, "seq_per_s": seqs / max(dt, 1e-9)})
        metrics.write(rec)
        s.log_loss = s.log_weight = s.log_seqs = 0.0

    def validate(self, metrics: MetricsLog) -> None:
        s = self.s
        loss, weight = self.ctx.all_sum([s.val_loss, s.val_weight], self.device)
        v = self.task.validate(self.model)
        scalars = {k: x for k, x in v.items() if isinstance(x, int | float) and not isinstance(x, bool)}
        metrics.write({"step": s.step, "epoch": s.epoch, "train_loss": loss / max(weight, 1e-12), **scalars})
        s.last, s.since_val, s.val_loss, s.val_weight = v, 0, 0.0, 0.0
        key = self.o.monitor
        if key is None:
            return
        if key not in v:
            raise KeyError(f"validation gave {sorted(v)}; the monitored metric {key!r} is not among them")
        log.info(
            "%s step %d (epoch %d): train loss %.4f, %s %.4f",
            self.o.desc,
            s.step,
            s.epoch,
            loss / max(weight, 1e-12),
            key,
            float(v[key]),
        )
        if _improved(v, s.best, key, self.o.minimize):
            s.best, s.best_step, s.best_epoch, s.bad = v, s.step, s.epoch, 0
            if self.o.keep_best:
                self.best_weights = {n: t.detach().clone() for n, t in self.model.state_dict().items()}
        else:
            s.bad += 1

    # --- the run ------------------------------------------------------------------------------------

    def due(self, end_of_epoch: bool) -> tuple[bool, bool, bool]:
        """(training record, validation, checkpoint) due after the step just taken."""
        s, o, last = self.s, self.o, self.s.step >= self.o.total_steps
        rec = o.log_every > 0 and (s.step % o.log_every == 0 or last)
        val = (o.val_every > 0 and s.since_val >= o.val_every) or end_of_epoch or last
        ckpt = (o.save_every > 0 and (s.step % o.save_every == 0 or last)) or (o.save_every == 0 and val)
        return rec, val, ckpt

    def run(self, truncate: bool, stop_after: int | None) -> LoopResult:
        s, o = self.s, self.o
        metrics = MetricsLog(
            self.run_dir / METRICS_FILE if self.ctx.is_main else None,
            self.run_dir / "tensorboard" if o.tensorboard else None,
            truncate_after_step=s.step if truncate else None,
        )
        bar = _Progress(o.total_steps, s.step, o.progress, self.ctx.is_main, o.desc)
        timer, stopped = [time.perf_counter()], False
        try:
            with redirect_logging():
                batches, batches_epoch = (), -1
                while s.step < o.total_steps and not stopped:
                    if batches_epoch != s.epoch:
                        batches, batches_epoch = self.task.epoch_batches(s.epoch), s.epoch
                    if s.position >= len(batches):
                        s.epoch, s.position = s.epoch + 1, 0
                        continue
                    self.model.train()
                    gnorm = self.train_step(batches[s.position])
                    bar.update(s.step)
                    rec, val, ckpt = self.due(s.position >= len(batches))
                    if rec:
                        self.log_record(metrics, gnorm, timer)
                    if val:
                        self.validate(metrics)
                        stopped = o.patience > 0 and s.bad >= o.patience
                    if ckpt or stopped:
                        self.checkpoint()
                    if stop_after is not None and s.step >= stop_after:
                        return self.result(completed=False, stopped=False)
        finally:
            bar.close()
            metrics.close()
        if stopped:
            log.info(
                "%s: no better %s for %d validations; stopped at step %d",
                o.desc,
                o.monitor,
                o.patience,
                s.step,
            )
        if o.keep_best and self.best_weights is not None:
            self.model.load_state_dict(self.best_weights)
        return self.result(completed=True, stopped=stopped)

    def result(self, completed: bool, stopped: bool) -> LoopResult:
        s = self.s
        return LoopResult(s.step, completed, stopped, s.last, s.best, s.best_step, s.best_epoch)


def run_loop(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    task: Task,
    options: LoopOptions,
    run_dir: str | Path,
    *,
    ctx: DistContext | None = None,
    device: torch.device | None = None,
    resume_from: str | Path | None = None,
    stop_after: int | None = None,
) -> LoopResult:
    """Train ``model`` on ``task`` for ``options.total_steps`` steps; metrics and checkpoints go to
    ``run_dir``.

    ``resume_from`` continues from a checkpoint this loop wrote (the model, optimiser and schedule must be
    built the same way first). ``stop_after`` returns right after that step without writing anything
    more (a simulated kill, for tests and time-boxed runs). At the end the best validation's weights are
    loaded into ``model`` when ``options.keep_best`` and a monitor are set.
    """
    device = device or next(model.parameters()).device
    ctx = ctx or DistContext()
    if ctx.is_main:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        if resume_from is None:
            (Path(run_dir) / METRICS_FILE).unlink(missing_ok=True)
    loop = _Loop(model, optimizer, scheduler, task, options, Path(run_dir), ctx, device)
    if resume_from is not None:
        loop.restore(load_checkpoint(resume_from, map_location=device), resume_from)
    return loop.run(truncate=resume_from is not None, stop_after=stop_after)


def open_run(
    run_dir: str | Path,
    record: dict[str, Any],
    resume: bool,
    ctx: DistContext | None = None,
    *,
    runtime_keys: tuple[str, ...] = (),
    config_file: str = "config.json",
    what: str = "run",
) -> Path | None:
    """Start a run folder, or check it for a resume.

    The folder is locked for this process first (:func:`~pipelines.train.run_lock.lock_run`, rank 0): a run
    another process trains is refused with :class:`~pipelines.train.run_lock.RunInUseError` naming its pid.
    Without ``resume`` the folder must not hold ``config_file`` yet; it is created and ``record`` written.
    With ``resume`` the saved record's ``config`` (plus ``program_id`` / ``dataset_id``) must equal the new
    one apart from ``runtime_keys``; returns the newest checkpoint, or None when none was written yet.
    """
    ctx = ctx or DistContext()
    run_dir = Path(run_dir)
    cfg_path = run_dir / config_file
    if ctx.is_main and (not resume or run_dir.is_dir()):  # (a resume of nothing creates nothing)
        lock_run(run_dir)  # one process trains a run: a second is refused naming the pid (run_lock.py)
    if not resume:
        if cfg_path.exists():
            raise PipelineError(
                f"{run_dir}: {what} already exists; pass --resume to continue it, or choose another --run-id"
            )
        ctx.barrier()
        if ctx.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_json(cfg_path, record)
        return None
    if not cfg_path.is_file():
        raise PipelineError(f"{cfg_path}: missing; nothing to resume (start the {what} without --resume)")
    saved = json.loads(cfg_path.read_text(encoding="utf-8"))
    ids = ("program_id", "dataset_id")
    a = {**saved.get("config", {}), **{k: saved.get(k) for k in ids}}
    b = {**record["config"], **{k: record.get(k) for k in ids}}
    diffs = config_diff(a, b, ignore=runtime_keys)
    if diffs:
        raise ConfigMismatchError(cfg_path, diffs)
    return latest_checkpoint(run_dir) if list_checkpoints(run_dir) else None


def finished_results(run_dir: str | Path, resume: bool, what: str = "run") -> dict[str, Any] | None:
    """The ``results.json`` of a finished run: read back when resuming, refused otherwise (the folder is
    taken); None while the run is unfinished."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists():
        return None
    if resume:
        return json.loads(path.read_text(encoding="utf-8"))
    raise PipelineError(f"{run_dir}: {what} already exists; choose another --run-id")


def publish_results(run_dir: str | Path, results: dict[str, Any], ctx: DistContext | None = None) -> None:
    """Write a finished run's ``results.json`` (rank 0) and drop its resume checkpoints: the run folder
    keeps its ``model/``, ``metrics.jsonl`` and results."""
    if ctx is None or ctx.is_main:
        write_json(Path(run_dir) / RESULTS_FILE, results)
        shutil.rmtree(Path(run_dir) / CHECKPOINT_DIR, ignore_errors=True)
