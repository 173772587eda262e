"""Fine-tuning a pretrained HRRBERT on mortality (binary) or ICD-10 chapters (multi-label): :func:`finetune`.

Paper defaults: constant learning rate, AdamW weight decay 4e-6, 10 epochs, batch 80, the best epoch by
validation kept. The input is each patient's visits before the last one (``last_visit_start``); the
chapters task uses the rows flagged ``disease_task`` where the dataset has that column. With ``labels``
(a MEDS label folder, :mod:`pipelines.data.labels`) the task is the folder's binary ``boolean_value``
instead: each label row's input is its patient's sequence up to its ``prediction_time``, the row follows
the patient's split, and it trains the model's binary head (``task`` stays ``mortality``); the run's
``config.json``, ``results.json`` and ``summary.json`` record the label files and their counts. ``trials``
repeats the whole fine-tuning with seeds ``seed, seed + 1, ...``; each trial writes
``<out>/<run_id>/trial-<k>/`` with ``metrics.jsonl`` (one record per epoch), ``results.json``
(validation and test metrics of the best epoch) and ``model/`` (its weights); ``summary.json`` lists all.
``model="visit-transformer"`` fine-tunes a :class:`model.VisitTransformer` the size of the pretrained BERT
whose code embedding is the BERT's pretrained token embedding, in the same loop and results format.

Each trial runs on the one training loop (:mod:`pipelines.train.loop`): a checkpoint at every validation
(resume continues an interrupted trial exactly; a finished trial keeps ``model/`` and drops its
checkpoints), ``patience`` for early stopping, DDP under ``torchrun``, bf16 on CUDA.

Dimension legend: B batch, T codes, L labels.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ontology_compiler.artifact import safe_component
from pipelines.data.labels import read_label_task
from pipelines.data.sequences import Sequences, TokenizedDataset, epoch_order
from pipelines.errors import PipelineError

from .checkpoint import list_checkpoints
from .config import FinetuneConfig
from .loop import LoopOptions, StepOutput, finished_results, open_run, publish_results, run_loop
from .metrics import binary_metrics, multilabel_metrics
from .runtime import (
    config_from,
    distributed,
    now_iso,
    seed_everything,
    versions,
    write_json,
)

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"
# config keys that may change when resuming (they do not change the numbers)
RUNTIME_KEYS = ("dataset", "program", "pretrained", "device", "progress", "tensorboard", "keep_checkpoints")


@dataclass
class FinetuneResult:
    run_dir: Path
    trials: list[dict[str, Any]]  # results.json of each trial


def model_dir(pretrained: str | Path) -> Path:
    """``<run>/model`` for a pretraining run folder, else the folder itself."""
    p = Path(pretrained)
    return p / "model" if (p / "model" / "config.json").is_file() else p


@torch.no_grad()
def predict(
    model, seqs: Sequences, task: str, device: torch.device, batch_size: int, bf16: bool = False
) -> tuple[np.ndarray, float]:
    """Probabilities ``(P, L)`` and the mean BCE loss on ``seqs``."""
    was = model.training
    model.eval()
    probs, loss = [], 0.0
    for idx in torch.arange(len(seqs)).split(batch_size):
        b = seqs.batch(idx)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and device.type == "cuda"):
            logits = model(
                b["input_ids"].to(device),
                b["segment_ids"].to(device),
                b["attention_mask"].to(device),
                task=task,
            ).float()  # (B, L)
        loss += float(F.binary_cross_entropy_with_logits(logits, b["labels"].to(device), reduction="sum"))
        probs.append(torch.sigmoid(logits).cpu().numpy())
    model.train(was)
    n = max(seqs.labels.numel() if seqs.labels is not None else 0, 1)
    return (np.concatenate(probs) if probs else np.zeros((0, 1))), loss / n


def score(task: str, y: np.ndarray, p: np.ndarray, threshold: float) -> dict[str, float]:
    if task == "mortality":
        return binary_metrics(y[:, 0], p[:, 0], threshold)
    return multilabel_metrics(y, p, threshold)


def task_metrics(model, seqs: Sequences, task: str, device, cfg: FinetuneConfig) -> dict[str, float]:
    """Loss and classification metrics of ``model`` on ``seqs`` (validation and test)."""
    p, loss = predict(model, seqs, task, device, cfg.eval_batch_size, cfg.bf16)
    return {"loss": loss, **score(task, seqs.labels.numpy(), p, cfg.threshold)}


def finetune(
    pretrained: str | Path | None = None,
    dataset: str | Path | None = None,
    program: str | Path | None = None,
    *,
    config: FinetuneConfig | None = None,
    out: str | Path = "artifacts/runs",
    run_id: str | None = None,
    resume: bool = False,
    **options: Any,
) -> FinetuneResult:
    """Fine-tune ``cfg.trials`` times from a pretrained model; returns each trial's results.

    Either pass ``config`` or ``pretrained``, ``dataset``, ``program`` and :class:`FinetuneConfig`
    fields as keywords. ``resume=True`` continues ``<out>/<run_id>``: finished trials are read back, an
    interrupted one continues from its newest checkpoint (the config must match). Under ``torchrun`` the
    trials run with DistributedDataParallel (the batch is global and split over ranks).
    """
    if run_id is not None:
        safe_component(run_id, "run_id")  # one folder under ``out``, never a path
    cfg = config_from(FinetuneConfig, config, options, "finetune", pretrained=pretrained, dataset=dataset,
                      program=program)  # fmt: skip
    with distributed(cfg.device) as (ctx, device):
        return _finetune(cfg, ctx, device, Path(out), run_id, resume)


def _task_splits(
    cfg: FinetuneConfig, ds: TokenizedDataset, mc
) -> tuple[Sequences, Sequences, Sequences, dict | None]:
    """finetune_train, finetune_val and test for the task, each ending before the last visit; with
    ``cfg.labels``, the MEDS label task's rows of those splits, each cut at its prediction time, and what
    the run records about the labels (else None)."""
    if cfg.labels is not None:
        task = read_label_task(cfg.labels)
        placed = ds.place_labels(task)
        kw = dict(max_len=mc.max_len, max_segments=mc.max_segments)
        train, val, test = (
            ds.label_sequences(placed, s, **kw) for s in ("finetune_train", "finetune_val", "test")
        )
        what = f"label task {task.name!r} ({cfg.labels})"
        record = {**task.record(), "placed": placed.counts}
    else:
        kw = dict(max_len=mc.max_len, max_segments=mc.max_segments, task=cfg.task, before_last_visit=True)
        train, val, test = (ds.sequences(s, **kw) for s in ("finetune_train", "finetune_val", "test"))
        what, record = f"task {cfg.task!r}", None
    for name, s in (("finetune_train", train), ("finetune_val", val)):
        if len(s) == 0:
            raise PipelineError(f"{ds.patients_path}: split {name!r} has no rows for {what}")
    return train, val, test, record


def _finetune(
    cfg: FinetuneConfig, ctx, device, out: Path, run_id: str | None, resume: bool
) -> FinetuneResult:
    from hrr_kernel import load_program
    from model import HRRBert

    mdir = model_dir(cfg.pretrained)
    saved = HRRBert.read_config(mdir)
    program_ = load_program(cfg.program, device=device)
    probe = HRRBert.from_pretrained(mdir, program_)  # checks the program id, the files
    mc = probe.config
    ds = TokenizedDataset(cfg.dataset, program_.program_id, program_.n_concepts, probe.pad_id)
    del probe
    train, val, test, labels = _task_splits(cfg, ds, mc)
    suffix = "" if cfg.model == "bert" else f"-{cfg.model}"
    task_name = cfg.task if labels is None else "labels-" + re.sub(r"[^A-Za-z0-9_.-]", "_", labels["name"])
    run_id = safe_component(
        run_id or f"finetune-{task_name}-{Path(cfg.pretrained).name}{suffix}-seed{cfg.seed}", "run_id"
    )
    run_dir = out / run_id
    if (run_dir / SUMMARY_FILE).exists() and not resume:
        raise PipelineError(f"{run_dir}: fine-tuning run already exists; choose another --run-id")
    meta = {
        "program_id": program_.program_id,
        "dataset_id": ds.dataset_id,
        "pretrained_run": saved.get("run_id"),
        "model_config": asdict(mc),
        "world_size": ctx.world_size,
        "versions": versions(),
    }
    if labels is not None:
        meta["labels"] = labels
        if resume:
            _same_labels(run_dir, labels)
    if cfg.model != "bert":
        meta["model"] = cfg.model
        meta["visit_transformer_config"] = asdict(visit_transformer_config(mc, program_))
    open_run(run_dir, {"kind": "finetune", "run_id": run_id, "config": asdict(cfg), **meta}, resume, ctx,
             runtime_keys=RUNTIME_KEYS, what="fine-tuning run")  # fmt: skip
    data = (train, val, test)
    results = [_trial(k, cfg, mdir, program_, data, run_dir / f"trial-{k}", ctx, device, meta, resume)
               for k in range(cfg.trials)]  # fmt: skip
    if ctx.is_main:
        summary = {"kind": "finetune", "run_id": run_id, "config": asdict(cfg), **meta, "trials": results}
        write_json(run_dir / SUMMARY_FILE, {**summary, "created_at": now_iso()})
    return FinetuneResult(run_dir, results)


def _same_labels(run_dir: Path, labels: dict) -> None:
    """On resume: the label files must be the ones the run started with (same paths and hashes)."""
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        return
    saved = (json.loads(cfg_path.read_text(encoding="utf-8")).get("labels") or {}).get("inputs")
    if saved != labels["inputs"]:
        raise PipelineError(
            f"{cfg_path}: the run was started with other label files than {labels['path']} holds now "
            "(paths or sha256 differ); start a new run, or restore the label files"
        )


def visit_transformer_config(mc, program):
    """A visit Transformer the size of the BERT config ``mc`` (layers, heads, widths, visits)."""
    from model import VisitTransformerConfig

    return VisitTransformerConfig(
        n_codes=program.n_concepts,
        dim=mc.dim,
        n_layers=mc.n_layers,
        n_heads=mc.n_heads,
        ffn_dim=mc.ffn_dim,
        max_visits=mc.max_segments,
        dropout=mc.dropout,
        pad_id=program.special_id("[PAD]"),
        code_mode=mc.mode,
    )


def visit_transformer_from_bert(bert, program):
    """A visit Transformer whose code embedding is the pretrained BERT's token embedding (same program)."""
    from model import VisitTransformer

    return VisitTransformer(visit_transformer_config(bert.config, program), bert.embeddings.token).to(
        program.device
    )


class FinetuneTask:
    """Fine-tuning as a :class:`~pipelines.train.loop.Task`: batches of ``finetune_train`` (split over
    ranks), binary cross-entropy on the task's head, validation metrics on ``finetune_val``."""

    def __init__(self, cfg: FinetuneConfig, train: Sequences, val: Sequences, seed: int, ctx, device):
        self.cfg, self.train, self.val, self.seed, self.ctx, self.device = cfg, train, val, seed, ctx, device

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        order, ctx = epoch_order(len(self.train), self.seed, epoch), self.ctx
        return [idx[ctx.rank :: ctx.world_size] for idx in order.split(self.cfg.batch_size)]

    def step(self, net, idx: torch.Tensor, step: int) -> StepOutput:
        b, dev = self.train.batch(idx), self.device
        logits = net(
            b["input_ids"].to(dev), b["segment_ids"].to(dev), b["attention_mask"].to(dev), task=self.cfg.task
        )  # (B, L)
        loss = F.binary_cross_entropy_with_logits(logits.float(), b["labels"].to(dev))
        return StepOutput(loss, float(len(idx)), len(idx))

    def validate(self, model) -> dict[str, float]:
        v = task_metrics(model, self.val, self.cfg.task, self.device, self.cfg)
        return {f"val_{k}": x for k, x in v.items()}


def _trial_model(cfg: FinetuneConfig, mdir: Path, program):
    """The pretrained model set up for the task: only the task's head and the encoder train."""
    from model import HRRBert

    model = HRRBert.from_pretrained(mdir, program)
    if cfg.model == "visit-transformer":
        model = visit_transformer_from_bert(model, program)
    else:
        model.mlm.requires_grad_(False)  # unused by the tasks
    for name, head in model.heads.tasks.items():
        head.requires_grad_(name == cfg.task)
    return model


def _trial(
    k, cfg: FinetuneConfig, mdir, program, data, tdir: Path, ctx, device, meta, resume
) -> dict[str, Any]:
    """Trial ``k``: fine-tune with seed ``cfg.seed + k`` (resumed from its newest checkpoint when asked),
    keep the best validation epoch, test it, write ``results.json``."""
    if resume and (done := finished_results(tdir, resume)) is not None:
        return done
    train, val, test = data
    seed = cfg.seed + k
    seed_everything(seed)
    model = _trial_model(cfg, mdir, program)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    tdir.mkdir(parents=True, exist_ok=True)
    opts = LoopOptions(
        total_steps=cfg.epochs * math.ceil(len(train) / cfg.batch_size), clip=cfg.clip,
        keep_checkpoints=cfg.keep_checkpoints, monitor=f"val_{cfg.select_by}", minimize=cfg.select_by == "loss",
        patience=cfg.patience, bf16=cfg.bf16, progress=cfg.progress, tensorboard=cfg.tensorboard,
        desc=f"finetune {cfg.task} trial {k}", config=asdict(cfg),
    )  # fmt: skip
    ckpts = list_checkpoints(tdir) if resume else []
    res = run_loop(model, opt, None, FinetuneTask(cfg, train, val, seed, ctx, device), opts, tdir, ctx=ctx,
                   device=device, resume_from=ckpts[-1] if ckpts else None)  # fmt: skip
    best = {key.removeprefix("val_"): x for key, x in (res.best_validation or {}).items()}
    if ctx.is_main:
        model.save_pretrained(
            tdir / "model", extra={"task": cfg.task, "trial": k, "seed": seed, "best_epoch": res.best_epoch}
        )
    t = task_metrics(model, test, cfg.task, device, cfg) if len(test) else {}
    if not len(test):
        log.warning("split 'test' has no rows for task %r; no test metrics", cfg.task)
    result = {"trial": k, "seed": seed, "task": cfg.task, "best_epoch": res.best_epoch, "select_by": cfg.select_by,
              "stopped_early": res.stopped_early, "val": best, "test": t, "config": asdict(cfg), **meta}  # fmt: skip
    publish_results(tdir, result, ctx)
    return result
