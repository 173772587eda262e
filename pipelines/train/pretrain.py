"""Masked-code pretraining of HRRBERT: :func:`pretrain` (the ``hrrbert pretrain`` command calls it).

Paper defaults: AdamW (no weight decay), lr 1e-4, betas (0.9, 0.999), 10 % linear warm-up then cosine
decay, batch 96, 15 % masking with the 80/10/10 rule, gradient clipping. A run lives in
``<out>/<run_id>/``: ``config.json`` (config, seeds, versions, program and dataset ids),
``metrics.jsonl``, ``checkpoints/step-*.pt`` (resume state, tensors and plain values only) and the
final ``model/`` (``config.json`` + ``model.safetensors``).

Resume is exact: the data order of an epoch depends only on (seed, epoch), masking and dropout are
re-seeded from (seed, step, rank) at every step, and the checkpoint holds the model, optimizer and
scheduler states, the RNG states and the position in the epoch; a killed run resumed from its last
checkpoint writes the same losses as an uninterrupted one. Under ``torchrun`` the same code runs with
DistributedDataParallel (NCCL on GPU, gloo on CPU); the batch size is global and split over ranks.

    hrrbert pretrain DATASET --program PROGRAM --model small --mode base
    torchrun --nproc_per_node 2 $(which hrrbert) pretrain DATASET --program PROGRAM   # DDP

Dimension legend: B batch, T codes, N concepts, M masked positions.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from pipelines.data.sequences import (
    TokenizedDataset,
    epoch_order,
)
from pipelines.errors import PipelineError

from .checkpoint import (
    ConfigMismatchError,
    checkpoint_path,
    config_diff,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from .config import RUNTIME_KEYS, PretrainConfig
from .mlm import evaluate_mlm, tokens_of, train_step
from .runtime import (
    DistContext,
    MetricsLog,
    Timer,
    init_distributed,
    now_iso,
    progress,
    redirect_logging,
    resolve_device,
    seed_everything,
    versions,
    warmup_cosine,
    write_json,
)

log = logging.getLogger(__name__)

RUN_CONFIG = "config.json"
METRICS = "metrics.jsonl"


@dataclass
class PretrainResult:
    run_dir: Path
    model: Any  # the trained HRRBert (unwrapped)
    step: int
    validation: dict[str, float]
    completed: bool  # False when stopped early by ``stop_after``


def build_model(cfg: PretrainConfig, program, ds: TokenizedDataset):
    from model import HRRBert, preset

    bert_cfg = preset(
        cfg.model, mode=cfg.mode, normalize=cfg.normalize, dropout=cfg.dropout, attn_dropout=cfg.dropout
    )
    logf = ds.log_frequency() if cfg.mode == "freq" else None
    return HRRBert(bert_cfg, program, log_frequency=logf)


def _prepare_run(
    run_dir: Path, record: dict[str, Any], resume: bool, ctx: DistContext
) -> dict[str, Any] | None:
    """Create the run folder, or (resume) check the saved config and return the newest checkpoint."""
    cfg_path = run_dir / RUN_CONFIG
    if not resume:
        if cfg_path.exists():
            raise PipelineError(
                f"{run_dir}: run already exists; pass --resume to continue it, or choose another --run-id"
            )
        ctx.barrier()
        if ctx.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_json(cfg_path, record)
        return None
    if not cfg_path.is_file():
        raise PipelineError(f"{cfg_path}: missing; nothing to resume (start the run without --resume)")
    import json

    saved = json.loads(cfg_path.read_text(encoding="utf-8"))
    a = {
        **saved.get("config", {}),
        "program_id": saved.get("program_id"),
        "dataset_id": saved.get("dataset_id"),
    }
    b = {**record["config"], "program_id": record["program_id"], "dataset_id": record["dataset_id"]}
    diffs = config_diff(a, b, ignore=RUNTIME_KEYS)
    if diffs:
        raise ConfigMismatchError(cfg_path, diffs)
    return load_checkpoint(latest_checkpoint(run_dir))


def default_run_id(cfg: PretrainConfig) -> str:
    return f"pretrain-{cfg.mode}-{cfg.model}-seed{cfg.seed}"


def pretrain(
    dataset: str | Path | None = None,
    program: str | Path | None = None,
    *,
    config: PretrainConfig | None = None,
    out: str | Path = "artifacts/runs",
    run_id: str | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    **options: Any,
) -> PretrainResult:
    """Pretrain HRRBERT with masked-code modelling on ``pretrain_train``, validating on ``pretrain_val``.

    Either pass ``config`` or ``dataset``, ``program`` and :class:`PretrainConfig` fields as keywords.
    ``resume=True`` continues ``<out>/<run_id>`` from its newest checkpoint (the config must match,
    apart from :data:`RUNTIME_KEYS`). ``stop_after`` returns right after that global step without
    writing anything more (it simulates a kill; for tests and time-boxed runs).
    """
    from hrr_kernel import load_program

    if config is None:
        known = {f.name for f in fields(PretrainConfig)}
        bad = sorted(set(options) - known)
        if bad:
            raise TypeError(f"unknown pretrain option(s) {bad}")
        config = PretrainConfig(dataset=str(dataset), program=str(program), **options)
    cfg = config
    ctx, device = init_distributed(resolve_device(cfg.device))
    try:
        return _pretrain(
            cfg, ctx, device, Path(out), run_id or default_run_id(cfg), resume, stop_after, load_program
        )
    finally:
        ctx.close()


def _pretrain(cfg, ctx, device, out, run_id, resume, stop_after, load_program) -> PretrainResult:
    if cfg.bf16 and device.type != "cuda":
        log.warning("bf16 autocast is CUDA-only; training in float32 on %s", device)
    seed_everything(cfg.seed)  # identical initial weights on every rank
    program = load_program(cfg.program, device=device)
    ds = TokenizedDataset(cfg.dataset, program.program_id, program.n_concepts, _pad_id(program))
    model = build_model(cfg, program, ds)
    model.heads.requires_grad_(False)  # the pooled task heads are not trained by MLM
    mc = model.config
    train = ds.sequences("pretrain_train", max_len=mc.max_len, max_segments=mc.max_segments)
    val = ds.sequences("pretrain_val", max_len=mc.max_len, max_segments=mc.max_segments)
    if len(train) == 0:
        raise PipelineError(f"{ds.patients_path}: split 'pretrain_train' is empty")
    tok = tokens_of(program)
    per_epoch = max(len(train) // cfg.batch_size, 1)
    total = cfg.max_steps or cfg.epochs * per_epoch
    bs = min(cfg.batch_size, len(train))
    if bs < ctx.world_size:
        raise PipelineError(f"batch size {bs} is smaller than the number of processes {ctx.world_size}")

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(total, cfg.warmup))
    run_dir = out / run_id
    record = {
        "kind": "pretrain",
        "run_id": run_id,
        "config": asdict(cfg),
        "model_config": asdict(mc),
        "program_id": program.program_id,
        "dataset_id": ds.dataset_id,
        "seeds": {
            "seed": cfg.seed,
            "data_order": "randperm(seed*1000003+epoch)",
            "masking_dropout": "per step from (seed, step, rank)",
        },
        "steps": {"total": total, "per_epoch": per_epoch},
        "world_size": ctx.world_size,
        "n_parameters": model.num_parameters(),
        "n_train": len(train),
        "n_val": len(val),
        "versions": versions(),
        "created_at": now_iso(),
    }
    state = _prepare_run(run_dir, record, resume, ctx)
    step, epoch, position = 0, 0, 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        step, epoch, position = int(state["step"]), int(state["epoch"]), int(state["position"])
        log.info("resumed %s at step %d (epoch %d, batch %d)", run_dir, step, epoch, position)
    net = model
    if ctx.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    metrics = MetricsLog(
        run_dir / METRICS if ctx.is_main else None,
        run_dir / "tensorboard" if cfg.tensorboard else None,
        truncate_after_step=step if state is not None else None,
    )
    val_kw = dict(
        topk=cfg.topk,
        batch_size=cfg.val_batch_size,
        seed=cfg.seed,
        ctx=ctx,
        device=device,
        bf16=cfg.bf16,
        limit=cfg.max_val,
        mask_prob=cfg.mask_prob,
    )
    last_val: dict[str, float] = {}
    timer, acc = Timer(), [0.0, 0.0, 0]  # loss sum, masked count, sequences since last record

    def checkpoint() -> None:
        if ctx.is_main:
            save_checkpoint(
                checkpoint_path(run_dir, step),
                {
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                    "rng": rng_state(),
                    "step": step,
                    "epoch": epoch,
                    "position": position,
                    "config": asdict(cfg),
                },
                keep=cfg.keep_checkpoints,
            )
        ctx.barrier()

    bar = progress(total, step, ctx.is_main and cfg.progress, f"pretrain {cfg.mode}")
    with redirect_logging():
        while step < total:
            if position >= per_epoch:
                epoch, position = epoch + 1, 0
            order = epoch_order(len(train), cfg.seed, epoch)
            while position < per_epoch and step < total:
                idx = order[position * bs : (position + 1) * bs][ctx.rank :: ctx.world_size]
                loss_sum, n_masked, gnorm = train_step(
                    net, model, train.batch(idx), tok, cfg, step, ctx, device, opt, sched, params
                )
                step, position = step + 1, position + 1
                acc[0], acc[1], acc[2] = acc[0] + loss_sum, acc[1] + n_masked, acc[2] + len(idx)
                bar.update(1)
                if step % cfg.log_every == 0 or step == total:
                    ls, nm, ns = ctx.all_sum([acc[0], acc[1], float(acc[2])], device)
                    dt = timer.lap()
                    metrics.write(
                        {
                            "step": step,
                            "epoch": epoch,
                            "loss": ls / max(nm, 1.0),
                            "lr": sched.get_last_lr()[0],
                            "grad_norm": gnorm,
                            "masked": int(nm),
                            "seq_per_s": ns / max(dt, 1e-9),
                        }
                    )
                    bar.set_postfix(loss=f"{ls / max(nm, 1.0):.3f}")
                    acc = [0.0, 0.0, 0]
                end_of_epoch = position == per_epoch
                if (
                    (cfg.val_every and step % cfg.val_every == 0)
                    or (not cfg.val_every and end_of_epoch)
                    or step == total
                ):
                    last_val = evaluate_mlm(model, val, tok, **val_kw) if len(val) else {}
                    metrics.write({"step": step, "epoch": epoch, **last_val})
                if step % cfg.save_every == 0 or step == total:
                    checkpoint()
                if stop_after is not None and step >= stop_after:
                    bar.close()
                    metrics.close()
                    return PretrainResult(run_dir, model, step, last_val, completed=False)
    bar.close()
    metrics.close()
    if ctx.is_main:
        model.save_pretrained(
            run_dir / "model", extra={"run_id": run_id, "dataset_id": ds.dataset_id, "step": step}
        )
    ctx.barrier()
    return PretrainResult(run_dir, model, step, last_val, completed=True)


def _pad_id(program) -> int:
    codes = program.concept_codes
    return codes.index("[PAD]") if "[PAD]" in codes else 0
