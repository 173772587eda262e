"""Train Doctor2Vec on a Doctor2Vec data set (:func:`train_doctor2vec`); metrics, scoring and model files.

A run folder ``<out>/<run_id>/`` holds ``metrics.jsonl`` (one record per validation), ``results.json`` (the
best validation's metrics on val, test and the rare-disease trials) and ``model/`` (``config.json``
+ ``model.safetensors``; the config records the program id and the data set's vocabulary fingerprint,
so a model is never silently applied to other data).

Metrics (:func:`ranking_metrics`): ROC-AUC and PR-AUC pooled over the split's (doctor, trial) pairs, and
per trial — rank the doctors by score — precision at k and average precision, averaged over the trials
with at least one enrolling doctor. Training sees the train trials only, with the rare-disease trials'
condition codes removed from every patient history (``hide_held_out``), so those codes are unseen until
the test.

Dimension legend: B pairs, Np pairs of a split, Tr trials, Dn doctors.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ontology_compiler.api import safe_component
from pipelines.errors import PipelineError
from pipelines.train.embeddings import code_embedding
from pipelines.train.loop import (
    LoopOptions,
    LossForward,
    StepOutput,
    finished_results,
    open_run,
    publish_results,
    run_loop,
)
from pipelines.train.metrics import auroc, average_precision
from pipelines.train.model_files import check_meta, read_meta, save_weights
from pipelines.train.runtime import (
    config_from,
    distributed,
    now_iso,
    seed_everything,
    versions,
)

from .config import D2VTrainConfig
from .read import SPLITS
from .tensors import D2VTensors, build_tensors, doctor_batches, make_batch

log = logging.getLogger(__name__)

# config keys that may change when resuming (they do not change the numbers)
RUNTIME_KEYS = ("data", "program", "device", "progress", "tensorboard", "keep_checkpoints")

MODEL_KIND = "hrrbert-doctor2vec"
EVAL_SPLITS = SPLITS[1:]  # every trial split but train: val, test, test_rare


class Doctor2VecMismatchError(PipelineError):
    """A saved Doctor2Vec model belongs to another program or another data set vocabulary."""


# --- metrics ---------------------------------------------------------------------------------------


def ranking_metrics(
    trial: np.ndarray, label: np.ndarray, score: np.ndarray, k: tuple[int, ...] = (5, 10)
) -> dict[str, Any]:
    """Pooled ROC-AUC / PR-AUC and per-trial precision at k and average precision.

    Shapes: ``(Np,)`` each: the trial of each pair, its 0/1 label and the model's score. ``per_trial_ap``
    lists each trial's average precision (trials with an enrolling doctor), keyed by the ``trial`` values.
    """
    y = label.astype(np.float64)
    out: dict[str, Any] = {
        "pairs": int(len(y)),
        "positives": int(y.sum()),
        "trials": int(len(np.unique(trial))),
        "roc_auc": auroc(y, score) if 0 < y.sum() < len(y) else float("nan"),
        "pr_auc": average_precision(y, score) if y.sum() > 0 else float("nan"),
    }
    per_k: dict[int, list[float]] = {kk: [] for kk in k}
    aps, ap_trials = [], []
    for t in np.unique(trial):
        rows = np.flatnonzero(trial == t)
        yt = y[rows]
        if yt.sum() == 0:
            continue
        order = rows[np.argsort(-score[rows], kind="stable")]
        for kk in k:
            per_k[kk].append(float(y[order[:kk]].mean()))
        aps.append(average_precision(yt, score[rows]))
        ap_trials.append(int(t))
    out["trials_with_positives"] = len(aps)
    for kk in k:
        out[f"p_at_{kk}"] = float(np.mean(per_k[kk])) if per_k[kk] else float("nan")
    out["trial_ap"] = float(np.mean(aps)) if aps else float("nan")
    out["per_trial_ap"] = {"trial": ap_trials, "ap": aps}  # for paired comparisons between models
    return out


# --- model -----------------------------------------------------------------------------------------


def build_model(cfg: D2VTrainConfig, manifest: dict[str, Any], program) -> nn.Module:
    from model.doctor2vec import Doctor2Vec, Doctor2VecConfig

    n_codes = int(manifest["n_codes"])
    if program.n_concepts != n_codes:
        raise Doctor2VecMismatchError(
            f"the data set has {n_codes} codes but program {program.program_id} has {program.n_concepts}"
        )
    mc = Doctor2VecConfig(
        n_codes=n_codes,
        n_words=int(manifest["n_words"]),
        dim=cfg.dim,
        patient_encoder=cfg.patient_encoder,
        doctor=cfg.doctor,
        hops=cfg.hops,
        max_memories=cfg.max_memories,
        hidden=cfg.hidden,
        dropout=cfg.dropout,
        code_mode=cfg.hrr_mode if cfg.embedding == "hrr" else "unstructured",
    )
    return Doctor2Vec(
        mc, code_embedding(cfg.embedding, program, n_codes, cfg.dim, cfg.hrr_mode, padding_idx=0)
    )


@torch.no_grad()
def score_pairs(model: nn.Module, t: D2VTensors, rows: np.ndarray, device, doctors_per_batch: int = 32):
    """Scores ``(Np,)`` (probabilities) of pair ``rows``, in that order, from the full patient histories."""
    was = model.training
    model.eval()
    out = np.zeros(len(rows), dtype=np.float64)
    pos = {int(r): i for i, r in enumerate(rows)}
    for b in doctor_batches(t, rows, doctors_per_batch):
        batch = {k: v.to(device) for k, v in make_batch(t, b, "eval").items()}
        logits, _ = model(batch)
        out[[pos[int(r)] for r in b]] = torch.sigmoid(logits.float()).cpu().numpy()
    model.train(was)
    return out


def evaluate_splits(model, t: D2VTensors, device, k, splits=EVAL_SPLITS) -> dict[str, dict[str, Any]]:
    res = {}
    for split in splits:
        rows = t.pairs_of(split)
        if len(rows):
            s = score_pairs(model, t, rows, device)
            res[split] = ranking_metrics(t.trial_ids[t.pair_trial[rows]], t.pair_label[rows], s, k)
    return res


# --- persistence -----------------------------------------------------------------------------------


def _meta(cfg: D2VTrainConfig, manifest: dict[str, Any], model: nn.Module) -> dict[str, Any]:
    return {
        "kind": MODEL_KIND,
        "embedding": cfg.embedding,
        "hrr_mode": cfg.hrr_mode,
        "config": model.config.to_dict(),
        "program_id": manifest["program_id"],
        "data_id": manifest.get("d2v_id", manifest.get("dataset_id")),
        "vocab_fingerprint": manifest.get("vocab_fingerprint"),
        "max_codes": cfg.max_codes,
    }


def save_model(model: nn.Module, directory: Path, meta: dict[str, Any]) -> Path:
    return save_weights(model, directory, meta, MODEL_KIND)


def load_model(directory: str | Path, manifest: dict[str, Any], program) -> tuple[nn.Module, dict[str, Any]]:
    """A saved Doctor2Vec model, checked against the data set's vocabulary and the program."""
    from safetensors.torch import load_file

    from model.doctor2vec import Doctor2Vec, Doctor2VecConfig

    d, p, meta = read_meta(directory, MODEL_KIND, "Doctor2Vec", "hrrbert doctor2vec train", PipelineError)
    check_meta(
        meta,
        manifest,
        ("program_id", "vocab_fingerprint"),
        p,
        "data set",
        "evaluate on data generated with the same program and vocabulary",
        Doctor2VecMismatchError,
    )
    cfg = Doctor2VecConfig.from_dict(meta["config"])
    if cfg.n_codes != int(manifest["n_codes"]) or cfg.n_words != int(manifest["n_words"]):
        raise Doctor2VecMismatchError(
            f"{p}: the model has {cfg.n_codes} codes / {cfg.n_words} words, the data set "
            f"{manifest['n_codes']} / {manifest['n_words']}"
        )
    model = Doctor2Vec(
        cfg, code_embedding(meta["embedding"], program, cfg.n_codes, cfg.dim, meta["hrr_mode"], padding_idx=0)
    )
    try:
        model.load_state_dict(load_file(str(d / "model.safetensors")))
    except (OSError, RuntimeError) as e:
        raise PipelineError(f"{d / 'model.safetensors'}: weights do not fit the config: {e}") from e
    return model.eval(), meta


# --- training --------------------------------------------------------------------------------------


@dataclass
class D2VRunResult:
    run_dir: Path
    results: dict[str, Any]  # results.json


def _load(data_path: str, program_path: str, device):
    from hrr_kernel import load_program

    from .read import read_doctor2vec

    data = read_doctor2vec(data_path)
    prog = load_program(program_path, device=device)
    if prog.program_id != data.manifest["program_id"]:
        raise Doctor2VecMismatchError(
            f"{data_path}: data was generated from program {data.manifest['program_id']!r}, "
            f"but program {prog.program_id!r} was given"
        )
    return data, prog


class D2VTask:
    """Doctor2Vec training as a :class:`~pipelines.train.loop.Task`: batches of doctors (each with every
    train trial; the doctor order of an epoch drawn from one seeded stream, replayed from the start when
    an epoch is asked out of turn, as after a resume), weighted BCE, validation PR-AUC."""

    def __init__(self, cfg: D2VTrainConfig, t: D2VTensors, train_rows: np.ndarray, ctx, device):
        self.cfg, self.t, self.rows, self.ctx, self.device = cfg, t, train_rows, ctx, device
        self._rng, self._next = np.random.default_rng(cfg.seed), 0

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        if epoch < self._next:
            self._rng, self._next = np.random.default_rng(self.cfg.seed), 0
        while True:
            batches = doctor_batches(self.t, self.rows, self.cfg.doctors_per_batch, self._rng)
            self._next += 1
            if self._next > epoch:
                return batches[self.ctx.rank :: self.ctx.world_size] if self.ctx.distributed else batches

    def step(self, net, rows: np.ndarray, step: int) -> StepOutput:
        batch = {k: v.to(self.device) for k, v in make_batch(self.t, rows, "train").items()}
        return StepOutput(net(batch), float(len(rows)), len(rows))

    def validate(self, wrapped) -> dict[str, Any]:
        v = evaluate_splits(wrapped.model, self.t, self.device, self.cfg.k, ("val",))["val"]
        return {f"val_{k}": x for k, x in v.items()}


def train_doctor2vec(
    data: str | Path | None = None,
    program: str | Path | None = None,
    *,
    config: D2VTrainConfig | None = None,
    out: str | Path = "artifacts/runs",
    run_id: str | None = None,
    resume: bool = False,
    **options: Any,
) -> D2VRunResult:
    """Train on the train trials, keep the best validation (PR-AUC), test on the test and rare trials.

    ``resume=True`` continues ``<out>/<run_id>`` from its newest checkpoint (a finished run is read back).
    """
    if run_id is not None:
        safe_component(run_id, "run_id")  # one folder under ``out``, never a path
    cfg = config_from(D2VTrainConfig, config, options, "doctor2vec", data=data, program=program)
    with distributed(cfg.device) as (ctx, device):
        return _train(cfg, ctx, device, Path(out), run_id, resume)


def _optimizer(cfg: D2VTrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """AdamW; the code embedding (table or atoms) learns at ``code_lr_scale`` times the rate."""
    code_params = {id(x) for x in model.code.parameters()}
    rest = [x for x in model.parameters() if id(x) not in code_params]
    return torch.optim.AdamW(
        [{"params": rest}, {"params": list(model.code.parameters()), "lr": cfg.lr * cfg.code_lr_scale}],
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
    )


def _train(cfg: D2VTrainConfig, ctx, device, out: Path, run_id: str | None, resume: bool) -> D2VRunResult:
    t0 = time.perf_counter()
    ds, prog = _load(cfg.data, cfg.program, device)
    t = build_tensors(
        ds,
        max_memories=cfg.max_memories,
        max_codes=cfg.max_codes,
        hide_held_out=cfg.hide_held_out,
        seed=cfg.seed,
    )
    train_rows = t.pairs_of("train")
    if len(train_rows) == 0 or len(t.pairs_of("val")) == 0:
        raise PipelineError(f"{cfg.data}: no train or validation pairs (skipped: {ds.skipped})")
    codes = f"hrr-{cfg.hrr_mode}" if cfg.embedding == "hrr" else cfg.embedding
    run_id = safe_component(
        run_id or f"d2v-{codes}-{cfg.doctor}-{cfg.patient_encoder}-seed{cfg.seed}", "run_id"
    )
    run_dir = out / run_id
    if (done := finished_results(run_dir, resume, "Doctor2Vec run")) is not None:
        return D2VRunResult(run_dir, done)
    record = {"kind": "doctor2vec", "run_id": run_id, "config": asdict(cfg), "program_id": prog.program_id}
    resume_from = open_run(run_dir, record, resume, ctx, runtime_keys=RUNTIME_KEYS, what="Doctor2Vec run")
    seed_everything(cfg.seed)
    model = build_model(cfg, ds.manifest, prog).to(device)
    y = t.pair_label[train_rows]
    pos_weight = cfg.pos_weight or float((len(y) - y.sum()) / max(y.sum(), 1))
    wrapped = LossForward(model, pos_weight)
    n_batches = len(doctor_batches(t, train_rows, cfg.doctors_per_batch))
    opts = LoopOptions(
        total_steps=cfg.epochs * n_batches,
        clip=cfg.clip,
        val_every=cfg.val_every,
        keep_checkpoints=cfg.keep_checkpoints,
        monitor="val_pr_auc",
        patience=cfg.patience,
        progress=cfg.progress,
        tensorboard=cfg.tensorboard,
        desc=f"doctor2vec {cfg.embedding} {cfg.doctor}",
        config=asdict(cfg),
    )
    res = run_loop(
        wrapped,
        _optimizer(cfg, model),
        None,
        D2VTask(cfg, t, train_rows, ctx, device),
        opts,
        run_dir,
        ctx=ctx,
        device=device,
        resume_from=resume_from,
    )
    meta = _meta(cfg, ds.manifest, model)
    results = {
        "kind": "doctor2vec",
        "run_id": run_id,
        "config": asdict(cfg),
        "model": meta,
        "parameters": model.num_parameters(),
        "best_step": res.best_step,
        "steps": res.step,
        "stopped_early": res.stopped_early,
        **evaluate_splits(model, t, device, cfg.k),
        "train_pairs": int(len(train_rows)),
        "pos_weight": pos_weight,
        "data_counts": {**t.counts, **{f"skipped_{k}": v for k, v in ds.skipped.items()}},
        "wall_s": time.perf_counter() - t0,
        "world_size": ctx.world_size,
        "versions": versions(),
        "created_at": now_iso(),
    }
    if ctx.is_main:
        save_model(model, run_dir / "model", meta)
    publish_results(run_dir, results, ctx)
    return D2VRunResult(run_dir, results)
