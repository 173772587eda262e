"""Masked-code pretraining of HRRBERT: :func:`pretrain` (the ``hrrbert pretrain`` command calls it).

Paper defaults: AdamW (no weight decay), lr 1e-4, betas (0.9, 0.999), 10 % linear warm-up then cosine
decay, batch 96, 15 % masking with the 80/10/10 rule, gradient clipping. A run lives in
``<out>/<run_id>/``: ``config.json`` (config, seeds, versions, program and dataset ids),
``metrics.jsonl``, ``checkpoints/step-*.pt`` (resume state, tensors and plain values only) and the
final ``model/`` (``config.json`` + ``model.safetensors``). After training, what no training reached is
settled (:meth:`model.HRRBert.settle_untrained`) and, with ``mlm_cache`` ``auto`` (the default), the
model's code cache is chosen on ``pretrain_val`` (:mod:`pipelines.train.cache_choice`; ``mlm_cache.json``).

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
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ontology_compiler.api import safe_component
from pipelines.data.sequences import SEED_STRIDE, TokenizedDataset, epoch_batches, epoch_order
from pipelines.errors import PipelineError

from .checkpoint import latest_checkpoint, list_checkpoints
from .config import RUNTIME_KEYS, PretrainConfig
from .loop import METRICS_FILE, LoopOptions, StepOutput, open_run, run_loop
from .mlm import SAMPLED_FROM, evaluate_mlm, mlm_step, sampler_of, tokens_of
from .run_lock import run_locked
from .runtime import (
    DistContext,
    MetricsLog,
    config_from,
    distributed,
    now_iso,
    seed_everything,
    versions,
    warmup_cosine,
    write_json,
)
from .sparse import adamw_for

log = logging.getLogger(__name__)

CACHE_FILE = "mlm_cache.json"  # the code cache's grid and choice (pipelines.train.cache_choice)


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
        cfg.model,
        mode=cfg.mode,
        normalize=cfg.normalize,
        spectral_decoder=cfg.spectral_decoder,
        spectral_atoms=cfg.spectral_atoms,
        hrr_width=cfg.hrr_width,
        dropout=cfg.dropout,
        attn_dropout=cfg.dropout,
    )
    logf = ds.log_frequency() if bert_cfg.spec.frequency else None
    return HRRBert(bert_cfg, program, log_frequency=logf)


def resumable(run_dir: Path) -> bool:
    """Whether a started pretraining run can be resumed (``resume=True``); one killed before its first
    checkpoint is removed, so that it starts again."""
    if not (Path(run_dir) / "config.json").is_file():
        return False
    if list_checkpoints(run_dir):
        return True
    with run_locked(run_dir):  # a run another process trains (not checkpointed yet) is refused, not removed
        log.warning("%s: started but never checkpointed; starting it again", run_dir)
        shutil.rmtree(run_dir)
    return False


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

    if run_id is not None:
        safe_component(run_id, "run_id")  # one folder under ``out``, never a path
    cfg = config_from(PretrainConfig, config, options, "pretrain", dataset=dataset, program=program)
    run_id = safe_component(run_id or default_run_id(cfg), "run_id")
    with distributed(cfg.device) as (ctx, device):
        return _pretrain(cfg, ctx, device, Path(out), run_id, resume, stop_after, load_program)


class MLMTask:
    """Masked-code modelling as a :class:`~pipelines.train.loop.Task`: batches of ``pretrain_train``
    (global batch split over ranks; the last partial batch of an epoch dropped), validation on
    ``pretrain_val`` with a fixed masking."""

    def __init__(self, cfg: PretrainConfig, train, val, tok, ctx: DistContext, device, batch_size: int):
        self.cfg, self.train, self.val, self.tok, self.ctx, self.device = cfg, train, val, tok, ctx, device
        self.bs = batch_size
        self.per_epoch = max(len(train) // batch_size, 1)

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        order, bs, ctx = epoch_order(len(self.train), self.cfg.seed, epoch), self.bs, self.ctx
        order = order[: self.per_epoch * bs]  # whole batches only
        lengths = self.train.attention_mask.sum(1)
        batches = epoch_batches(order, lengths, bs, self.cfg.bucket_batches, self.cfg.seed, epoch)
        return [idx[ctx.rank :: ctx.world_size] for idx in batches]

    def step(self, net, idx: torch.Tensor, step: int) -> StepOutput:
        return mlm_step(net, self.train.batch(idx), self.tok, self.cfg, step, self.ctx, self.device)

    def validate(self, model) -> dict[str, float]:
        if not len(self.val):
            return {}
        cfg = self.cfg
        return evaluate_mlm(
            model,
            self.val,
            self.tok,
            topk=cfg.topk,
            batch_size=cfg.val_batch_size,
            seed=cfg.seed,
            ctx=self.ctx,
            device=self.device,
            bf16=cfg.bf16,
            limit=cfg.max_val,
            mask_prob=cfg.mask_prob,
        )


def _run_record(cfg: PretrainConfig, run_id: str, model, program, ds, task: MLMTask, total: int, ctx) -> dict:
    """``config.json`` of a pretraining run: config, ids, seeds, sizes, versions."""
    return {
        "kind": "pretrain",
        "run_id": run_id,
        "config": asdict(cfg),
        "model_config": asdict(model.config),
        "program_id": program.program_id,
        "dataset_id": ds.dataset_id,
        "seeds": {
            "seed": cfg.seed,
            "data_order": f"randperm(seed*{SEED_STRIDE}+epoch)",
            "masking_dropout": "per step from (seed, step, rank)",
        },
        "steps": {"total": total, "per_epoch": task.per_epoch},
        "world_size": ctx.world_size,
        "n_parameters": model.num_parameters(),
        "n_train": len(task.train),
        "mlm_vocabulary": {"scored": cfg.mlm_vocabulary, "codes": len(task.tok.candidates)},
        "mlm_softmax": {
            "asked": cfg.mlm_softmax,
            "used": "full" if task.tok.sampler is None else "sampled",
            "negatives": None if task.tok.sampler is None else task.tok.sampler.negatives,
            "sparse_gradients": bool(model.embeddings.token.sparse_grads),
        },
        "n_val": len(task.val),
        "versions": versions(),
        "created_at": now_iso(),
    }


def _choose_cache(cfg: PretrainConfig, model, task: MLMTask, run_dir: Path, step: int, ctx, device) -> None:
    """Choose the model's code cache on ``pretrain_val`` (:mod:`pipelines.train.cache_choice`); when one is
    taken, validate again with it and append that validation to ``metrics.jsonl`` (``mlm_cache`` set), so the
    run's last validation is the saved model's. The grid goes to ``mlm_cache.json``."""
    from .cache_choice import SALT_CACHE, cache_grid, choose_cache

    grid = cache_grid(
        model,
        task.val,
        task.tok,
        batch_size=cfg.val_batch_size,
        seed=cfg.seed,
        limit=cfg.max_val,
        mask_prob=cfg.mask_prob,
        device=device,
    )
    model.mlm_cache = choose_cache(grid)
    chosen = None if model.mlm_cache is None else model.mlm_cache.to_dict()
    log.info("code cache after pretraining: %s", chosen or "none (the model alone has the lowest loss)")
    val = task.validate(model) if chosen is not None else {}
    if ctx.is_main:
        write_json(
            run_dir / CACHE_FILE,
            {
                "split": "pretrain_val",
                "limit": cfg.max_val,
                "seed": cfg.seed,
                "salt": SALT_CACHE,
                "grid": grid,
                "chosen": chosen,
            },
        )
        if val:
            MetricsLog(run_dir / METRICS_FILE).write({"step": step, **val, "mlm_cache": chosen})


def mlm_softmax(cfg, n_concepts: int) -> str:
    """The training softmax a run uses: ``cfg.mlm_softmax``, ``auto`` resolved by the vocabulary's size
    (sampled above :data:`~pipelines.train.mlm.SAMPLED_FROM` concepts)."""
    if cfg.mlm_softmax != "auto":
        return cfg.mlm_softmax
    return "sampled" if n_concepts > SAMPLED_FROM else "full"


def _pretrain(cfg, ctx, device, out, run_id, resume, stop_after, load_program) -> PretrainResult:
    if cfg.bf16 and device.type != "cuda":
        log.warning("bf16 autocast is CUDA-only; training in float32 on %s", device)
    seed_everything(cfg.seed)  # identical initial weights on every rank
    program = load_program(cfg.program, device=device)
    ds = TokenizedDataset(cfg.dataset, program.program_id, program.n_concepts, program.special_id("[PAD]"))
    model = build_model(cfg, program, ds)
    model.heads.requires_grad_(False)  # the pooled task heads are not trained by MLM
    mc = model.config
    train = ds.sequences("pretrain_train", max_len=mc.max_len, max_segments=mc.max_segments)
    val = ds.sequences("pretrain_val", max_len=mc.max_len, max_segments=mc.max_segments)
    if len(train) == 0:
        raise PipelineError(f"{ds.patients_path}: split 'pretrain_train' is empty")
    bs = min(cfg.batch_size, len(train))
    if bs < ctx.world_size:
        raise PipelineError(f"batch size {bs} is smaller than the number of processes {ctx.world_size}")
    tok = tokens_of(program, train if cfg.mlm_vocabulary == "train" else None)
    if mlm_softmax(cfg, program.n_concepts) == "sampled":
        tok = replace(tok, sampler=sampler_of(tok, train, program.n_concepts, cfg.mlm_negatives))
    if tok.scored is not None:  # the step masks logits on the device: move the mask there once
        tok = replace(tok, scored=tok.scored.to(device))
    task = MLMTask(cfg, train, val, tok, ctx, device, bs)
    total = cfg.max_steps or cfg.epochs * task.per_epoch
    params = [p for p in model.parameters() if p.requires_grad]
    # the sampled softmax composes a batch's rows only: their atoms and table rows get sparse gradients and
    # the optimizer updates just those (lazy AdamW, pipelines.train.sparse); one process (DDP reduces dense)
    sparse = tok.sampler is not None and ctx.world_size == 1
    adam = {"lr": cfg.lr, "betas": (cfg.beta1, cfg.beta2), "weight_decay": cfg.weight_decay}
    opt = adamw_for(model, params, sparse=sparse, **adam)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(total, cfg.warmup))
    run_dir = out / run_id
    record = _run_record(cfg, run_id, model, program, ds, task, total, ctx)
    resume_from = open_run(run_dir, record, resume, ctx, runtime_keys=RUNTIME_KEYS)
    if resume and resume_from is None:
        latest_checkpoint(run_dir)  # raises CheckpointError naming the folder
    opts = LoopOptions(
        total_steps=total,
        clip=cfg.clip,
        val_every=cfg.val_every,
        log_every=cfg.log_every,
        save_every=cfg.save_every,
        keep_checkpoints=cfg.keep_checkpoints,
        monitor="val_loss" if len(val) else None,
        minimize=True,
        keep_best=False,
        patience=cfg.patience,
        bf16=cfg.bf16,
        progress=cfg.progress,
        tensorboard=cfg.tensorboard,
        weight_name="masked",
        desc=f"pretrain {cfg.mode}",
        config=asdict(cfg),
    )
    res = run_loop(
        model,
        opt,
        sched,
        task,
        opts,
        run_dir,
        ctx=ctx,
        device=device,
        resume_from=resume_from,
        stop_after=stop_after,
    )
    if res.completed:
        settled = model.settle_untrained(train.tokens(model.n_concepts))
        log.info("untrained after pretraining: %s", settled)
        if cfg.mlm_cache == "auto" and len(val):
            _choose_cache(cfg, model, task, run_dir, res.step, ctx, device)
        if ctx.is_main:
            model.save_pretrained(
                run_dir / "model", extra={"run_id": run_id, "dataset_id": ds.dataset_id, "step": res.step}
            )
        ctx.barrier()
    return PretrainResult(run_dir, model, res.step, res.last_validation, completed=res.completed)
