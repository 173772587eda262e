"""Fine-tuning a pretrained HRRBERT on mortality (binary) or ICD-10 chapters (multi-label): :func:`finetune`.

Paper defaults: constant learning rate, AdamW weight decay 4e-6, 10 epochs, batch 80, the best epoch by
validation kept. ``max_steps`` sets the run's length in optimizer steps instead of epochs (validation every
``val_every`` steps, at each epoch end and after the last step); ``schedule="linear"`` warms the learning rate
up over ``warmup`` of the steps, then decays it linearly to 0. ``bucket_batches`` > 0 batches patients of
similar length together (:func:`pipelines.data.sequences.length_buckets`: a batch is padded to its longest
sequence, so on short-sequence data a step costs a fraction of a shuffled one). ``pos_weight="auto"`` weighs
each label's positives in the binary cross-entropy by n_neg / n_pos of ``finetune_train`` (clipped to
:data:`POS_WEIGHT_RANGE`; rare labels would otherwise be learned as constants), in training and in the
validation loss. The checkpoint kept is the best by ``select_by`` on ``finetune_val`` (default the loss, the
one metric defined for every label of a small validation split and independent of any threshold).

The input is each patient's visits before the last one (``last_visit_start``); the chapters task uses the
rows flagged ``disease_task`` where the dataset has that column. With ``labels`` (a MEDS label folder,
:mod:`pipelines.data.label_tasks`) the task is the folder's binary ``boolean_value`` instead: each label row's
input is its patient's sequence up to its ``prediction_time``, the row follows the patient's split, and it
trains the model's binary head (``task`` stays ``mortality``); the run's ``config.json``, ``results.json``
and ``summary.json`` record the label files and their counts.

``trials`` repeats the whole fine-tuning with seeds ``seed, seed + 1, ...``; each trial writes
``<out>/<run_id>/trial-<k>/`` with ``metrics.jsonl`` (one record per validation), ``results.json``
(validation and test metrics of the kept checkpoint), ``model/`` (its weights, and
:data:`THRESHOLDS_FILE`) and ``predictions.parquet`` (its per-patient ``test`` predictions,
:mod:`pipelines.train.predictions`, under the model name ``label``, default the pretrained model's mode);
``summary.json`` lists all.

Decision thresholds: after training, per label the threshold maximising F1 on ``finetune_val``
(:func:`pipelines.train.metrics.f1_thresholds`; ``tune_thresholds=False``: ``threshold`` for every label)
is written to ``model/thresholds.json`` and used by every later scoring (the trial's test metrics, the
ROOD and transfer evaluations): :func:`read_thresholds` reads them back, 0.5 for a model without the file.
The validation metrics during training (``val_f1`` ...) are at ``threshold``.

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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ontology_compiler.api import safe_component
from pipelines.data.label_tasks import read_label_task
from pipelines.data.sequences import Sequences, TokenizedDataset, epoch_batches, epoch_order
from pipelines.errors import PipelineError

from .checkpoint import list_checkpoints
from .config import FinetuneConfig
from .loop import LoopOptions, StepOutput, finished_results, open_run, publish_results, run_loop
from .metrics import f1_thresholds, undefined_metrics
from .predictions import PREDICTIONS_FILE, Predictions, score_predictions, write_predictions
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
THRESHOLDS_FILE = "thresholds.json"  # in a fine-tuned model folder: the decision thresholds of its task
DEFAULT_THRESHOLD = 0.5  # of a fine-tuned model without thresholds.json (older runs)
POS_WEIGHT_RANGE = (1.0, 50.0)  # pos_weight "auto": n_neg / n_pos clipped to this range
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
    model,
    seqs: Sequences,
    task: str,
    device: torch.device,
    batch_size: int,
    bf16: bool = False,
    pos_weight: torch.Tensor | None = None,
) -> tuple[np.ndarray, float]:
    """Probabilities ``(P, L)`` and the mean BCE loss on ``seqs`` (positives weighted by ``pos_weight (L,)``
    when given)."""
    was = model.training
    model.eval()
    probs, loss = [], 0.0
    w = None if pos_weight is None else pos_weight.to(device)
    for idx in torch.arange(len(seqs)).split(batch_size):
        b = seqs.batch(idx)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16 and device.type == "cuda"):
            logits = model(
                b["input_ids"].to(device),
                b["segment_ids"].to(device),
                b["attention_mask"].to(device),
                task=task,
            ).float()  # (B, L)
        loss += float(
            F.binary_cross_entropy_with_logits(logits, b["labels"].to(device), pos_weight=w, reduction="sum")
        )
        probs.append(torch.sigmoid(logits).cpu().numpy())
    model.train(was)
    n = max(seqs.labels.numel() if seqs.labels is not None else 0, 1)
    n_labels = seqs.labels.shape[1] if seqs.labels is not None else 1
    return (np.concatenate(probs) if probs else np.zeros((0, n_labels), np.float32)), loss / n


def score(task: str, y: np.ndarray, p: np.ndarray, threshold: float | np.ndarray) -> dict[str, float]:
    """The task's metrics of probabilities ``p (P, L)`` against ``y (P, L)`` at one threshold or per label."""
    return score_predictions(task, y, p, threshold)


def task_metrics(
    model, seqs: Sequences, task: str, device, cfg: FinetuneConfig, pos_weight: torch.Tensor | None = None
) -> dict[str, float]:
    """Loss and classification metrics (at ``cfg.threshold``) of ``model`` on ``seqs`` (validation)."""
    p, loss = predict(model, seqs, task, device, cfg.eval_batch_size, cfg.bf16, pos_weight)
    return {"loss": loss, **score(task, seqs.labels.numpy(), p, cfg.threshold)}


def pos_weights(labels: np.ndarray, clip: tuple[float, float] = POS_WEIGHT_RANGE) -> np.ndarray:
    """Per label n_neg / n_pos of the multi-hot ``labels (P, L)``, clipped to ``clip`` (a label without
    positives gets the upper bound: it has no positive term to weigh). Shape ``(L,)``."""
    y = np.asarray(labels, dtype=np.float64)
    if y.ndim != 2:
        raise ValueError(f"labels must be (P, L), got shape {y.shape}")
    pos = y.sum(0)
    ratio = (len(y) - pos) / np.maximum(pos, 1.0)
    return np.clip(np.where(pos > 0, ratio, clip[1]), clip[0], clip[1])


def warmup_linear(total_steps: int, warmup_fraction: float):
    """LR multiplier: linear warm-up over ``warmup_fraction`` of the steps, then linear decay to 0."""
    warm = max(int(round(warmup_fraction * total_steps)), 0)

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total_steps - step) / max(total_steps - warm, 1))

    return f


def write_thresholds(model_folder: Path, task: str, thresholds: np.ndarray, record: dict[str, Any]) -> Path:
    """``<model_folder>/thresholds.json``: the task's per-label decision thresholds, how they were chosen."""
    t = np.asarray(thresholds, dtype=np.float32).reshape(-1)
    path = Path(model_folder) / THRESHOLDS_FILE
    write_json(path, {"task": task, "thresholds": [float(x) for x in t], **record})
    return path


def read_thresholds(model_folder: str | Path, task: str, n_labels: int) -> np.ndarray:
    """The decision thresholds ``(n_labels,)`` kept with a fine-tuned model (:data:`THRESHOLDS_FILE`); a
    model without the file (fine-tuned before thresholds were tuned) gets :data:`DEFAULT_THRESHOLD`."""
    p = Path(model_folder) / THRESHOLDS_FILE
    if not p.is_file():
        log.info(
            "%s: no %s (an older fine-tuned model); scoring at threshold %.1f",
            model_folder,
            THRESHOLDS_FILE,
            DEFAULT_THRESHOLD,
        )
        return np.full(n_labels, DEFAULT_THRESHOLD, dtype=np.float32)
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
        t = np.asarray(rec["thresholds"], dtype=np.float32)
        saved_task = rec["task"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
        raise PipelineError(
            f"{p}: not a thresholds file (expected 'task' and a 'thresholds' list): {e}"
        ) from e
    if saved_task != task or t.shape != (n_labels,) or not np.all((t >= 0) & (t <= 1)):
        raise PipelineError(
            f"{p}: expected {n_labels} thresholds in [0, 1] of task {task!r}, got {t.shape[0]} of task "
            f"{saved_task!r}"
        )
    return t


def configuration_label(cfg: FinetuneConfig, mode: str) -> str:
    """The model's name in predictions files: ``cfg.label``, else the pretrained embedding mode (with the
    model kind when it is not the BERT)."""
    if cfg.label:
        return cfg.label
    return mode if cfg.model == "bert" else f"{mode}-{cfg.model}"


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
    cfg = config_from(
        FinetuneConfig, config, options, "finetune", pretrained=pretrained, dataset=dataset, program=program
    )
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
    for name, s in (("finetune_val", val), ("test", test)):
        note = undefined_metrics(s.labels.numpy()) if len(s) and s.labels is not None else None
        if note:
            pick = (
                f"; --select-by {cfg.select_by} cannot rank the validations (the first one's weights kept)"
                if name == "finetune_val" and cfg.select_by in ("auroc", "auprc")
                else ""
            )
            log.warning("%s, split %r: %s; shown as n/a (null in the JSON files)%s", what, name, note, pick)
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
    mc = probe.config if cfg.pooling is None else replace(probe.config, pooling=cfg.pooling)
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
    open_run(
        run_dir,
        {"kind": "finetune", "run_id": run_id, "config": asdict(cfg), **meta},
        resume,
        ctx,
        runtime_keys=RUNTIME_KEYS,
        what="fine-tuning run",
    )
    data = (train, val, test)
    results = [
        _trial(k, cfg, mdir, program_, data, run_dir / f"trial-{k}", ctx, device, meta, resume)
        for k in range(cfg.trials)
    ]
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
    ranks), binary cross-entropy on the task's head (positives weighted by ``pos_weight (L,)`` when given),
    validation metrics on ``finetune_val``."""

    def __init__(
        self,
        cfg: FinetuneConfig,
        train: Sequences,
        val: Sequences,
        seed: int,
        ctx,
        device,
        pos_weight: torch.Tensor | None = None,
    ) -> None:
        self.cfg, self.train, self.val, self.seed, self.ctx, self.device = cfg, train, val, seed, ctx, device
        self.pos_weight = None if pos_weight is None else pos_weight.to(device)

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        order, ctx, cfg = epoch_order(len(self.train), self.seed, epoch), self.ctx, self.cfg
        lengths = self.train.attention_mask.sum(1)
        batches = epoch_batches(order, lengths, cfg.batch_size, cfg.bucket_batches, self.seed, epoch)
        return [idx[ctx.rank :: ctx.world_size] for idx in batches]

    def step(self, net, idx: torch.Tensor, step: int) -> StepOutput:
        b, dev = self.train.batch(idx), self.device
        logits = net(
            b["input_ids"].to(dev), b["segment_ids"].to(dev), b["attention_mask"].to(dev), task=self.cfg.task
        )  # (B, L)
        loss = F.binary_cross_entropy_with_logits(
            logits.float(), b["labels"].to(dev), pos_weight=self.pos_weight
        )
        return StepOutput(loss, float(len(idx)), len(idx))

    def validate(self, model) -> dict[str, float]:
        v = task_metrics(model, self.val, self.cfg.task, self.device, self.cfg, self.pos_weight)
        return {f"val_{k}": x for k, x in v.items()}


def _trial_model(cfg: FinetuneConfig, mdir: Path, program):
    """The pretrained model set up for the task: only the task's head and the encoder train."""
    from model import HRRBert

    model = HRRBert.from_pretrained(mdir, program)
    if cfg.pooling is not None:  # the heads read what cfg asks; the saved config.json records it
        model.set_pooling(cfg.pooling)
    if cfg.model == "visit-transformer":
        model = visit_transformer_from_bert(model, program)
    else:
        model.mlm.requires_grad_(False)  # unused by the tasks
    for name, head in model.heads.tasks.items():
        head.requires_grad_(name == cfg.task)
    roles = getattr(model, "roles", None)  # the BERT's role readout (a visit Transformer has none)
    if roles is not None:
        for name, head in roles.tasks.items():
            head.requires_grad_(name == cfg.task)
    if cfg.freeze_atoms:
        token = model.embeddings.token if cfg.model == "bert" else model.code
        frozen = [
            getattr(token, n, None) for n in ("atoms", "relations", "atoms_spectrum", "relations_spectrum")
        ]
        frozen = [p for p in frozen if p is not None]
        if not frozen:
            mode = getattr(token, "mode", "a plain table")
            raise PipelineError(
                f"freeze_atoms: the code embedding ({mode}) has no atoms or relations to keep"
            )
        for p in frozen:
            p.requires_grad_(False)
    return model


def param_groups(model, cfg: FinetuneConfig) -> list[dict]:
    """The optimizer's groups: every trainable parameter at ``lr``, the role readout's (pooling
    cls+mean+roles: a linear layer that starts at zero) at ``lr * roles_lr_scale``."""
    roles = getattr(model, "roles", None)
    own = {id(p) for p in roles.parameters()} if roles is not None else set()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if id(p) not in own], "lr": cfg.lr}]
    if own:
        groups.append({"params": [p for p in params if id(p) in own], "lr": cfg.lr * cfg.roles_lr_scale})
    return [g for g in groups if g["params"]]


def total_steps(cfg: FinetuneConfig, n_train: int) -> int:
    """Optimizer steps of a trial: ``max_steps``, else ``epochs`` passes over ``n_train`` rows."""
    return cfg.max_steps if cfg.max_steps is not None else cfg.epochs * math.ceil(n_train / cfg.batch_size)


def _trial(
    k, cfg: FinetuneConfig, mdir, program, data, tdir: Path, ctx, device, meta, resume
) -> dict[str, Any]:
    """Trial ``k``: fine-tune with seed ``cfg.seed + k`` (resumed from its newest checkpoint when asked),
    keep the best validation checkpoint, choose its thresholds on validation, test it, write
    ``results.json`` and the test ``predictions.parquet``."""
    if resume and (done := finished_results(tdir, resume)) is not None:
        return done
    train, val, test = data
    seed = cfg.seed + k
    seed_everything(seed)
    model = _trial_model(cfg, mdir, program)
    opt = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps = total_steps(cfg, len(train))
    sched = (
        torch.optim.lr_scheduler.LambdaLR(opt, warmup_linear(steps, cfg.warmup))
        if cfg.schedule == "linear"
        else None
    )
    pw_values = pos_weights(train.labels.numpy()) if cfg.pos_weight == "auto" else None
    pw = None if pw_values is None else torch.from_numpy(pw_values).float()
    tdir.mkdir(parents=True, exist_ok=True)
    opts = LoopOptions(
        total_steps=steps,
        clip=cfg.clip,
        val_every=cfg.val_every,
        keep_checkpoints=cfg.keep_checkpoints,
        monitor=f"val_{cfg.select_by}",
        minimize=cfg.select_by == "loss",
        patience=cfg.patience,
        bf16=cfg.bf16,
        progress=cfg.progress,
        tensorboard=cfg.tensorboard,
        desc=f"finetune {cfg.task} trial {k}",
        config=asdict(cfg),
    )
    ckpts = list_checkpoints(tdir) if resume else []
    res = run_loop(
        model,
        opt,
        sched,
        FinetuneTask(cfg, train, val, seed, ctx, device, pw),
        opts,
        tdir,
        ctx=ctx,
        device=device,
        resume_from=ckpts[-1] if ckpts else None,
    )
    best = {key.removeprefix("val_"): x for key, x in (res.best_validation or {}).items()}
    if getattr(model, "untrained_tokens", None) is not None:  # a BERT whose pretraining recorded its tokens
        log.info("untrained after fine-tuning: %s", model.settle_untrained(train.tokens(model.n_concepts)))
    # thresholds of the kept checkpoint (untrained parts settled), chosen on finetune_val
    p_val, _ = predict(model, val, cfg.task, device, cfg.eval_batch_size, cfg.bf16)
    y_val = val.labels.numpy()
    if cfg.tune_thresholds:
        thresholds = f1_thresholds(y_val, p_val, default=cfg.threshold).astype(np.float32)
    else:
        thresholds = np.full(y_val.shape[1], cfg.threshold, dtype=np.float32)
    val_tuned = score(cfg.task, y_val, p_val, thresholds)
    label = configuration_label(cfg, meta["model_config"]["mode"])
    if ctx.is_main:
        model.save_pretrained(
            tdir / "model",
            extra={
                "task": cfg.task,
                "trial": k,
                "seed": seed,
                "best_epoch": res.best_epoch,
                "best_step": res.best_step,
            },
        )
        write_thresholds(
            tdir / "model",
            cfg.task,
            thresholds,
            {
                "chosen_on": "finetune_val",
                "tuned": cfg.tune_thresholds,
                "criterion": "f1",
                "n": int(len(y_val)),
                "val_f1": val_tuned["f1"],
                "val_f1_at_default": score(cfg.task, y_val, p_val, cfg.threshold)["f1"],
            },
        )
    t: dict[str, Any] = {}
    if len(test):
        p_test, loss = predict(model, test, cfg.task, device, cfg.eval_batch_size, cfg.bf16)
        block = Predictions(
            label, cfg.task, "test", k, test.subject_id.numpy(), test.labels.numpy(), p_test, thresholds
        )
        t = {"loss": loss, **block.scores()}
        if ctx.is_main:
            write_predictions(tdir / PREDICTIONS_FILE, [block])
    else:
        log.warning("split 'test' has no rows for task %r; no test metrics", cfg.task)
    result = {
        "trial": k,
        "seed": seed,
        "task": cfg.task,
        "label": label,
        "steps": res.step,
        "best_step": res.best_step,
        "best_epoch": res.best_epoch,
        "select_by": cfg.select_by,
        "stopped_early": res.stopped_early,
        "val": best,
        "val_tuned": val_tuned,
        "thresholds": [float(x) for x in thresholds],
        "pos_weight": None if pw_values is None else pw_values.tolist(),
        "test": t,
        "config": asdict(cfg),
        **meta,
    }
    publish_results(tdir, result, ctx)
    return result
