"""Fine-tuning a pretrained HRRBERT on mortality (binary) or ICD-10 chapters (multi-label): :func:`finetune`.

Paper defaults: constant learning rate, AdamW weight decay 4e-6, 10 epochs, batch 80, the best epoch by
validation kept. The input is each patient's visits before the last one (``last_visit_start``); the
chapters task uses the rows flagged ``disease_task`` where the dataset has that column. ``trials``
repeats the whole fine-tuning with seeds ``seed, seed + 1, ...``; each trial writes
``<out>/<run_id>/trial-<k>/`` with ``metrics.jsonl`` (one record per epoch), ``results.json``
(validation and test metrics of the best epoch) and ``model/`` (its weights); ``summary.json`` lists all.
``model="visit-transformer"`` fine-tunes a :class:`model.VisitTransformer` the size of the pretrained BERT
whose code embedding is the BERT's pretrained token embedding, in the same loop and results format.

Dimension legend: B batch, T codes, L labels.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pipelines.data.sequences import Sequences, TokenizedDataset, epoch_order
from pipelines.errors import PipelineError

from .config import FinetuneConfig
from .metrics import binary_metrics, multilabel_metrics
from .runtime import (
    MetricsLog,
    now_iso,
    progress,
    redirect_logging,
    resolve_device,
    seed_everything,
    versions,
    write_json,
)

log = logging.getLogger(__name__)


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


def evaluate(model, seqs: Sequences, task: str, device, cfg: FinetuneConfig) -> dict[str, float]:
    p, loss = predict(model, seqs, task, device, cfg.eval_batch_size, cfg.bf16)
    return {"loss": loss, **score(task, seqs.labels.numpy(), p, cfg.threshold)}


def _better(new: dict[str, float], best: dict[str, float] | None, key: str) -> bool:
    if best is None:
        return True
    a, b = new[key], best[key]
    a = -math.inf if math.isnan(a) else (-a if key == "loss" else a)
    b = -math.inf if math.isnan(b) else (-b if key == "loss" else b)
    return a > b


def finetune(
    pretrained: str | Path | None = None,
    dataset: str | Path | None = None,
    program: str | Path | None = None,
    *,
    config: FinetuneConfig | None = None,
    out: str | Path = "artifacts/runs",
    run_id: str | None = None,
    **options: Any,
) -> FinetuneResult:
    """Fine-tune ``cfg.trials`` times from a pretrained model; returns each trial's results.

    Either pass ``config`` or ``pretrained``, ``dataset``, ``program`` and :class:`FinetuneConfig`
    fields as keywords.
    """
    from hrr_kernel import load_program
    from model import HRRBert

    if config is None:
        bad = sorted(set(options) - {f.name for f in fields(FinetuneConfig)})
        if bad:
            raise TypeError(f"unknown finetune option(s) {bad}")
        config = FinetuneConfig(
            pretrained=str(pretrained), dataset=str(dataset), program=str(program), **options
        )
    cfg = config
    device = resolve_device(cfg.device)
    mdir = model_dir(cfg.pretrained)
    saved = HRRBert.read_config(mdir)
    program_ = load_program(cfg.program, device=device)
    probe = HRRBert.from_pretrained(mdir, program_)  # checks the program id, the files
    mc = probe.config
    ds = TokenizedDataset(cfg.dataset, program_.program_id, program_.n_concepts, probe.pad_id)
    del probe
    kw = dict(max_len=mc.max_len, max_segments=mc.max_segments, task=cfg.task, before_last_visit=True)
    train, val = ds.sequences("finetune_train", **kw), ds.sequences("finetune_val", **kw)
    test = ds.sequences("test", **kw)
    for name, s in (("finetune_train", train), ("finetune_val", val)):
        if len(s) == 0:
            raise PipelineError(f"{ds.patients_path}: split {name!r} has no rows for task {cfg.task!r}")
    suffix = "" if cfg.model == "bert" else f"-{cfg.model}"
    run_id = run_id or f"finetune-{cfg.task}-{Path(cfg.pretrained).name}{suffix}-seed{cfg.seed}"
    run_dir = Path(out) / run_id
    if (run_dir / "summary.json").exists():
        raise PipelineError(f"{run_dir}: fine-tuning run already exists; choose another --run-id")
    run_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "program_id": program_.program_id,
        "dataset_id": ds.dataset_id,
        "pretrained_run": saved.get("run_id"),
        "model_config": asdict(mc),
        "versions": versions(),
    }
    if cfg.model != "bert":
        meta["model"] = cfg.model
        meta["visit_transformer_config"] = asdict(visit_transformer_config(mc, program_))
    results = []
    for k in range(cfg.trials):
        results.append(_trial(k, cfg, mdir, program_, train, val, test, run_dir / f"trial-{k}", device, meta))
    write_json(
        run_dir / "summary.json",
        {
            "kind": "finetune",
            "run_id": run_id,
            "config": asdict(cfg),
            **meta,
            "trials": results,
            "created_at": now_iso(),
        },
    )
    return FinetuneResult(run_dir, results)


def visit_transformer_config(mc, program):
    """A visit Transformer the size of the BERT config ``mc`` (layers, heads, widths, visits)."""
    from model import VisitTransformerConfig

    pad = program.concept_codes.index("[PAD]") if "[PAD]" in program.concept_codes else 0
    return VisitTransformerConfig(
        n_codes=program.n_concepts,
        dim=mc.dim,
        n_layers=mc.n_layers,
        n_heads=mc.n_heads,
        ffn_dim=mc.ffn_dim,
        max_visits=mc.max_segments,
        dropout=mc.dropout,
        pad_id=pad,
        code_mode=mc.mode,
    )


def visit_transformer_from_bert(bert, program):
    """A visit Transformer whose code embedding is the pretrained BERT's token embedding (same program)."""
    from model import VisitTransformer

    return VisitTransformer(visit_transformer_config(bert.config, program), bert.embeddings.token).to(
        program.device
    )


def _trial(
    k, cfg: FinetuneConfig, mdir, program, train, val, test, tdir: Path, device, meta
) -> dict[str, Any]:
    from model import HRRBert

    seed = cfg.seed + k
    seed_everything(seed)
    model = HRRBert.from_pretrained(mdir, program)
    if cfg.model == "visit-transformer":
        model = visit_transformer_from_bert(model, program)
    else:
        model.mlm.requires_grad_(False)  # unused by the tasks
    for name, head in model.heads.tasks.items():
        head.requires_grad_(name == cfg.task)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "metrics.jsonl").unlink(missing_ok=True)
    metrics = MetricsLog(tdir / "metrics.jsonl")
    best, best_state, best_epoch = None, None, -1
    steps = math.ceil(len(train) / cfg.batch_size)
    bar = progress(cfg.epochs * steps, 0, cfg.progress, f"finetune {cfg.task} trial {k}")
    with redirect_logging():
        for epoch in range(cfg.epochs):
            model.train()
            order, total = epoch_order(len(train), seed, epoch), 0.0
            for idx in order.split(cfg.batch_size):
                b = train.batch(idx)
                with torch.autocast(
                    device.type, dtype=torch.bfloat16, enabled=cfg.bf16 and device.type == "cuda"
                ):
                    logits = model(
                        b["input_ids"].to(device),
                        b["segment_ids"].to(device),
                        b["attention_mask"].to(device),
                        task=cfg.task,
                    )  # (B, L)
                loss = F.binary_cross_entropy_with_logits(logits.float(), b["labels"].to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.clip > 0:
                    torch.nn.utils.clip_grad_norm_(params, cfg.clip)
                opt.step()
                total += float(loss.detach()) * len(idx)
                bar.update(1)
            v = evaluate(model, val, cfg.task, device, cfg)
            metrics.write(
                {
                    "epoch": epoch,
                    "train_loss": total / len(train),
                    **{f"val_{key}": x for key, x in v.items()},
                }
            )
            if _better(v, best, cfg.select_by):
                best, best_epoch = v, epoch
                best_state = {n: t.detach().clone() for n, t in model.state_dict().items()}
    bar.close()
    metrics.close()
    model.load_state_dict(best_state)
    model.save_pretrained(
        tdir / "model", extra={"task": cfg.task, "trial": k, "seed": seed, "best_epoch": best_epoch}
    )
    t = evaluate(model, test, cfg.task, device, cfg) if len(test) else {}
    if not len(test):
        log.warning("split 'test' has no rows for task %r; no test metrics", cfg.task)
    result = {
        "trial": k,
        "seed": seed,
        "task": cfg.task,
        "best_epoch": best_epoch,
        "select_by": cfg.select_by,
        "val": best,
        "test": t,
        "config": asdict(cfg),
        **meta,
    }
    write_json(tdir / "results.json", result)
    return result
