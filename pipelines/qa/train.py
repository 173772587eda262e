"""Train and evaluate memory networks on a clinical QA set: :func:`train_qa`, :func:`evaluate_qa`.

A run folder ``<out>/<run_id>/`` holds ``metrics.jsonl`` (one record per epoch), ``results.json``
(validation and test accuracy of the best epoch: overall, per question type, on unseen codes),
and ``model/`` (``config.json`` + ``model.safetensors``; the config records the program id, the QA set's
vocabulary fingerprint and how codes were embedded, so a model is never silently applied to a QA set
with another vocabulary).

Models: ``memn2n`` (:class:`model.MemN2N`) and ``memnn`` (:class:`model.MemNN`, hard attention, trained
on the supporting facts). Code embeddings: ``plain`` (an ``nn.Embedding`` per matrix) or ``hrr``
(an ``HRREmbedding`` of the program per matrix, mode ``hrr_mode``).

Dimension legend: P questions in a split, M memories, L tokens per fact (3), Q question tokens,
S supporting facts (2), B batch, A answers.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor, nn

from ontology_compiler.api import safe_component
from pipelines.data.sequences import epoch_order
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
from pipelines.train.metrics import binary_metrics
from pipelines.train.model_files import check_meta, read_meta, save_weights
from pipelines.train.runtime import (
    config_from,
    distributed,
    now_iso,
    resolve_device,
    seed_everything,
    versions,
)

from .config import QATrainConfig
from .data import QADataError, read_qa

log = logging.getLogger(__name__)

MEMN2N_INIT_STD = 0.1  # plain embedding tables of the memory networks: N(0, 0.1) (Sukhbaatar et al., 2015)
# config keys that may change when resuming (they do not change the numbers)
RUNTIME_KEYS = ("qa", "program", "device", "progress", "tensorboard", "keep_checkpoints")

MODEL_KIND = "hrrbert-qa"
SUPPORT_SLOTS = 2


class QAVocabularyMismatchError(PipelineError):
    """A saved QA model was trained on a QA set with another vocabulary, answer set or program."""


@dataclass
class QASplit:
    """One split of a QA set as padded tensors, plus what was skipped and why."""

    facts: Tensor  # (P, M, L) int64 joint ids
    question: Tensor  # (P, Q) int64
    answer: Tensor  # (P,) int64
    supporting: Tensor  # (P, S) int64, -1 = none
    unseen: np.ndarray  # (P,) bool: a supporting fact holds a held-out code
    qtype: np.ndarray  # (P,) str
    subject_id: np.ndarray  # (P,) int64
    fact_codes: list[list[int]]  # concept id per fact
    skipped: dict[str, int]  # reason -> questions

    def __len__(self) -> int:
        return int(self.answer.shape[0])

    def batch(self, idx: Tensor) -> dict[str, Tensor]:
        facts = self.facts[idx]  # (B, M, L)
        m = max(int((facts != 0).any(-1).sum(-1).max()), 1) if len(idx) else 1
        return {
            "facts": facts[:, :m],
            "question": self.question[idx],
            "answer": self.answer[idx],
            "supporting": self.supporting[idx],
        }


def load_split(
    questions: pa.Table, split: str, *, max_memories: int, max_question_len: int, n_words: int, n_codes: int
) -> QASplit:
    """Tensors of one split; questions with an empty memory, a memory or question over the limits, or a
    code outside the program are skipped and counted (never an error mid-epoch)."""
    t = questions.filter(pa.compute.equal(questions["split"], split))
    rows = t.to_pydict()
    skipped: dict[str, int] = {}
    keep = []
    hi = n_words + n_codes
    for i, (facts, q) in enumerate(zip(rows["facts"], rows["question"], strict=True)):
        reason = None
        if not facts:
            reason = "empty_memory"
        elif len(facts) > max_memories:
            reason = "memory_over_limit"
        elif len(q) > max_question_len:
            reason = "question_over_limit"
        elif any(x < 0 or x >= hi for f in facts for x in f) or any(x < 0 or x >= hi for x in q):
            reason = "code_outside_program"
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            keep.append(i)
    for reason, n in skipped.items():
        log.warning("split %r: %d questions skipped (%s)", split, n, reason.replace("_", " "))
    p = len(keep)
    length = max((len(f) for i in keep for f in rows["facts"][i]), default=1)
    facts_t = torch.zeros(p, max_memories, length, dtype=torch.int64)
    q_t = torch.zeros(p, max_question_len, dtype=torch.int64)
    sup_t = torch.full((p, SUPPORT_SLOTS), -1, dtype=torch.int64)
    for j, i in enumerate(keep):
        f = rows["facts"][i]
        facts_t[j, : len(f), :] = torch.tensor([x + [0] * (length - len(x)) for x in f])
        q_t[j, : len(rows["question"][i])] = torch.tensor(rows["question"][i])
        s = rows["supporting"][i][:SUPPORT_SLOTS]
        sup_t[j, : len(s)] = torch.tensor(s, dtype=torch.int64)
    q_len = max(int((q_t != 0).sum(1).max()), 1) if p else 1
    return QASplit(
        facts=facts_t,
        question=q_t[:, :q_len],
        answer=torch.tensor([rows["answer"][i] for i in keep], dtype=torch.int64),
        supporting=sup_t,
        unseen=np.array([rows["unseen"][i] for i in keep], dtype=bool),
        qtype=np.array([rows["qtype"][i] for i in keep], dtype=object),
        subject_id=np.array([rows["subject_id"][i] for i in keep], dtype=np.int64),
        fact_codes=[rows["fact_codes"][i] for i in keep],
        skipped=skipped,
    )


def code_embedding_factory(embedding: str, program, n_codes: int, dim: int, hrr_mode: str):
    """A factory of fresh code-embedding modules (one per memory-network embedding matrix); plain tables
    start from N(0, :data:`MEMN2N_INIT_STD`) as in Sukhbaatar et al."""
    return functools.partial(code_embedding, embedding, program, n_codes, dim, hrr_mode, std=MEMN2N_INIT_STD)


def build_model(cfg: QATrainConfig, manifest: dict[str, Any], program) -> nn.Module:
    from model import MemN2N, MemN2NConfig, MemNN, MemNNConfig

    n_words, n_codes, n_answers = manifest["n_words"], manifest["n_codes"], manifest["n_answers"]
    if program.n_concepts != n_codes:
        raise QAVocabularyMismatchError(
            f"the QA set has {n_codes} codes but program {program.program_id} has {program.n_concepts}"
        )
    mode = cfg.hrr_mode if cfg.embedding == "hrr" else "unstructured"
    common = dict(
        n_words=n_words,
        n_codes=n_codes,
        n_answers=n_answers,
        dim=cfg.dim,
        hops=cfg.hops,
        max_memories=cfg.max_memories,
        max_question_len=cfg.max_question_len,
        code_mode=mode,
    )
    factory = code_embedding_factory(cfg.embedding, program, n_codes, cfg.dim, cfg.hrr_mode)
    if cfg.model == "memnn":
        return MemNN(MemNNConfig(**common), factory)
    mc = MemN2NConfig(**common, tying=cfg.tying, encoding=cfg.encoding, temporal=cfg.temporal)
    return MemN2N(mc, factory)


@torch.no_grad()
def predict(model: nn.Module, data: QASplit, batch_size: int = 256) -> np.ndarray:
    """Predicted answer ids ``(P,)`` (batches go to the model's device; the answers come back to the CPU)."""
    was = model.training
    model.eval()
    dev = _device_of(model)
    out = []
    for idx in torch.arange(len(data)).split(batch_size):
        b = data.batch(idx)
        logits, _ = model.predict(b["facts"].to(dev), b["question"].to(dev))  # (B, A)
        out.append(logits.argmax(-1).cpu().numpy())
    model.train(was)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _device_of(model: nn.Module) -> torch.device:
    """The device of a model's parameters (where its inputs go)."""
    return next(model.parameters()).device


def accuracy_report(data: QASplit, pred: np.ndarray, yes_id: int = 1) -> dict[str, Any]:
    """Accuracy overall, per question type, on unseen / seen codes, and binary metrics on yes/no questions."""
    y = data.answer.numpy()
    ok = pred == y

    def acc(mask: np.ndarray) -> float:
        return float(ok[mask].mean()) if mask.any() else float("nan")

    report: dict[str, Any] = {
        "n": int(len(y)),
        "accuracy": acc(np.ones(len(y), bool)),
        "accuracy_unseen": acc(data.unseen),
        "n_unseen": int(data.unseen.sum()),
        "accuracy_seen": acc(~data.unseen),
        "by_type": {str(t): acc(data.qtype == t) for t in sorted(set(data.qtype.tolist()))},
        "skipped": dict(data.skipped),
    }
    yn = np.isin(y, [0, 1])
    if yn.any():
        report["yes_no"] = binary_metrics((y[yn] == yes_id).astype(int), (pred[yn] == yes_id).astype(float))
    return report


def _model_meta(cfg: QATrainConfig, manifest: dict[str, Any], model: nn.Module) -> dict[str, Any]:
    return {
        "kind": MODEL_KIND,
        "model": cfg.model,
        "embedding": cfg.embedding,
        "hrr_mode": cfg.hrr_mode,
        "config": model.config.to_dict(),
        "program_id": manifest["program_id"],
        "qa_id": manifest["qa_id"],
        "vocab_fingerprint": manifest["vocab_fingerprint"],
    }


def save_model(model: nn.Module, directory: Path, meta: dict[str, Any]) -> Path:
    return save_weights(model, directory, meta, MODEL_KIND)


def load_model(directory: str | Path, manifest: dict[str, Any], program) -> tuple[nn.Module, dict]:
    """A saved QA model, checked against the QA set's vocabulary and the program."""
    from safetensors.torch import load_file

    from model import MemN2N, MemN2NConfig, MemNN, MemNNConfig

    d, p, meta = read_meta(directory, MODEL_KIND, "QA", "hrrbert qa train", QADataError)
    cfg = meta["config"]
    check_meta(
        meta,
        manifest,
        ("vocab_fingerprint", "program_id"),
        p,
        "QA set",
        "evaluate on a QA set generated with the same program and generator options",
        QAVocabularyMismatchError,
    )
    for key in ("n_words", "n_codes", "n_answers"):
        if cfg[key] != manifest.get(key):
            raise QAVocabularyMismatchError(
                f"{p}: the model has {key} = {cfg[key]} but the QA set has {manifest.get(key)}"
            )
    factory = code_embedding_factory(meta["embedding"], program, cfg["n_codes"], cfg["dim"], meta["hrr_mode"])
    if meta["model"] == "memnn":
        model = MemNN(MemNNConfig.from_dict(cfg), factory)
    else:
        model = MemN2N(MemN2NConfig.from_dict(cfg), factory)
    model.load_state_dict(load_file(str(d / "model.safetensors")))
    return model.eval(), meta


@dataclass
class QARunResult:
    run_dir: Path
    results: dict[str, Any]  # results.json


class QATask:
    """QA training as a :class:`~pipelines.train.loop.Task`: batches of train questions (split over
    ranks), the memory network's loss, validation accuracy."""

    def __init__(self, cfg: QATrainConfig, train: QASplit, val: QASplit, ctx, device):
        self.cfg, self.train, self.val, self.ctx, self.device = cfg, train, val, ctx, device

    def epoch_batches(self, epoch: int) -> list[Tensor]:
        order, ctx = epoch_order(len(self.train), self.cfg.seed, epoch), self.ctx
        return [idx[ctx.rank :: ctx.world_size] for idx in order.split(self.cfg.batch_size)]

    def step(self, net, idx: Tensor, step: int) -> StepOutput:
        b = {k: v.to(self.device) for k, v in self.train.batch(idx).items()}
        return StepOutput(net(b), float(len(idx)), len(idx))

    def validate(self, wrapped) -> dict[str, Any]:
        v = accuracy_report(self.val, predict(wrapped.model, self.val))
        return {"val_accuracy": v["accuracy"], "report": v}


def _qa_splits(cfg: QATrainConfig, manifest: dict[str, Any], questions) -> tuple[QASplit, QASplit, QASplit]:
    """train (at most ``max_train`` questions, a seeded sample), val and test."""
    kw = dict(
        max_memories=cfg.max_memories,
        max_question_len=cfg.max_question_len,
        n_words=manifest["n_words"],
        n_codes=manifest["n_codes"],
    )
    train, val, test = (load_split(questions, s, **kw) for s in ("train", "val", "test"))
    if cfg.max_train and len(train) > cfg.max_train:
        keep = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.seed))[: cfg.max_train]
        train = _subset(train, keep.sort().values)
    if len(train) == 0 or len(val) == 0:
        raise QADataError(f"{cfg.qa}: no usable train or validation questions (skipped {train.skipped})")
    return train, val, test


def train_qa(
    qa: str | Path | None = None,
    program: str | Path | None = None,
    *,
    config: QATrainConfig | None = None,
    out: str | Path = "artifacts/runs",
    run_id: str | None = None,
    resume: bool = False,
    **options: Any,
) -> QARunResult:
    """Train a memory network on a QA set's train split, keep the best validation epoch, test it.

    ``resume=True`` continues ``<out>/<run_id>`` from its newest checkpoint (a finished run is read back).
    """
    if run_id is not None:
        safe_component(run_id, "run_id")  # one folder under ``out``, never a path
    cfg = config_from(QATrainConfig, config, options, "qa", qa=qa, program=program)
    with distributed(cfg.device) as (ctx, device):
        return _train_qa(cfg, ctx, device, Path(out), run_id, resume)


def _train_qa(cfg: QATrainConfig, ctx, device, out: Path, run_id: str | None, resume: bool) -> QARunResult:
    from hrr_kernel import load_program

    t0 = time.perf_counter()
    manifest, questions, _, _ = read_qa(cfg.qa)
    prog = load_program(cfg.program, device=device)
    if prog.program_id != manifest["program_id"]:
        raise QAVocabularyMismatchError(
            f"{cfg.qa}: QA set was generated from program {manifest['program_id']!r}, "
            f"but program {prog.program_id!r} was given"
        )
    train, val, test = _qa_splits(cfg, manifest, questions)
    run_id = safe_component(
        run_id or f"qa-{cfg.model}-{cfg.embedding}-h{cfg.hops}-{cfg.tying}-seed{cfg.seed}", "run_id"
    )
    run_dir = out / run_id
    if (done := finished_results(run_dir, resume, "QA run")) is not None:
        return QARunResult(run_dir, done)
    seed_everything(cfg.seed)
    model = build_model(cfg, manifest, prog).to(device)
    record = {"kind": "qa", "run_id": run_id, "config": asdict(cfg), "program_id": prog.program_id}
    resume_from = open_run(run_dir, record, resume, ctx, runtime_keys=RUNTIME_KEYS, what="QA run")
    wrapped = LossForward(model)
    opts = LoopOptions(
        total_steps=cfg.epochs * math.ceil(len(train) / cfg.batch_size),
        clip=cfg.clip,
        keep_checkpoints=cfg.keep_checkpoints,
        monitor="val_accuracy",
        patience=cfg.patience,
        progress=cfg.progress,
        tensorboard=cfg.tensorboard,
        desc=f"qa {cfg.model} {cfg.embedding}",
        config=asdict(cfg),
    )
    opt = torch.optim.Adam(wrapped.parameters(), lr=cfg.lr)
    res = run_loop(
        wrapped,
        opt,
        None,
        QATask(cfg, train, val, ctx, device),
        opts,
        run_dir,
        ctx=ctx,
        device=device,
        resume_from=resume_from,
    )
    meta = _model_meta(cfg, manifest, model)
    results = {
        "kind": "qa",
        "run_id": run_id,
        "config": asdict(cfg),
        "model": meta,
        "parameters": sum(p.numel() for p in model.parameters()),
        "best_epoch": res.best_epoch,
        "stopped_early": res.stopped_early,
        "val": res.best_validation["report"],
        "test": accuracy_report(test, predict(model, test)) if len(test) else {},
        "train_questions": len(train),
        "wall_s": time.perf_counter() - t0,
        "world_size": ctx.world_size,
        "versions": versions(),
        "created_at": now_iso(),
    }
    if ctx.is_main:
        save_model(model, run_dir / "model", meta)
    publish_results(run_dir, results, ctx)
    return QARunResult(run_dir, results)


def _subset(d: QASplit, idx: Tensor) -> QASplit:
    i = idx.numpy()
    return QASplit(
        d.facts[idx],
        d.question[idx],
        d.answer[idx],
        d.supporting[idx],
        d.unseen[i],
        d.qtype[i],
        d.subject_id[i],
        [d.fact_codes[j] for j in i],
        d.skipped,
    )


def evaluate_qa(
    model_dir: str | Path,
    qa: str | Path,
    program: str | Path,
    *,
    split: str = "test",
    patient: int | None = None,
    threshold: float = 0.05,
    device: str = "cpu",
) -> tuple[dict[str, Any], str]:
    """Accuracy of a saved model on a split, and the attention per hop for one patient (text).

    ``patient`` is a subject id (default: the first patient of the split with an unseen-code question);
    ``device``: where the program and the model go (auto, cpu, cuda).
    """
    from hrr_kernel import load_program

    dev = resolve_device(device)
    manifest, questions, vocab, answers = read_qa(qa)
    prog = load_program(program, device=dev)
    model, meta = load_model(model_dir, manifest, prog)
    model.to(dev)
    cfg = model.config
    data = load_split(
        questions,
        split,
        max_memories=cfg.max_memories,
        max_question_len=cfg.max_question_len,
        n_words=cfg.n_words,
        n_codes=cfg.n_codes,
    )
    if len(data) == 0:
        raise QADataError(f"{qa}: split {split!r} has no usable questions (skipped {data.skipped})")
    report = accuracy_report(data, predict(model, data))
    text = attention_text(model, data, vocab, answers, prog.concept_codes, patient, threshold)
    return report, text


def attention_text(model, data: QASplit, vocab, answers, codes: list[str], patient, threshold) -> str:
    """The article's example printout: the facts, then per hop the facts attended above ``threshold``."""
    if patient is None:
        cand = np.flatnonzero(data.unseen)
        rows = np.flatnonzero(data.subject_id == data.subject_id[cand[0] if len(cand) else 0])
    else:
        rows = np.flatnonzero(data.subject_id == int(patient))
        if not len(rows):
            raise QADataError(f"patient {patient} has no question in this split")
    words = vocab.column("token").to_pylist()
    labels = vocab.column("label").to_pylist()
    ans = answers.column("label").to_pylist()
    n_words = len(words)

    def fact_text(ids: list[int]) -> str:
        parts = [
            codes[x - n_words] if x >= n_words else labels[x]
            for x in ids
            if x != 0 and (x >= n_words or words[x] != "visit")
        ]
        return f"visit {parts[0]}: {' '.join(parts[1:])}" if len(parts) > 1 else " ".join(parts)

    idx = torch.as_tensor(rows)
    b = data.batch(idx)
    dev = _device_of(model)
    with torch.no_grad():
        logits, att = model.predict(b["facts"].to(dev), b["question"].to(dev))
    lines = [f"Patient {int(data.subject_id[rows[0]])}"]
    m = b["facts"].shape[1]
    facts = [fact_text(b["facts"][0, i].tolist()) for i in range(m) if bool((b["facts"][0, i] != 0).any())]
    lines.append("Memory: " + "; ".join(facts))
    for j, r in enumerate(rows):
        q = " ".join(labels[x] for x in b["question"][j].tolist() if x != 0)
        gold, got = ans[int(data.answer[r])], ans[int(logits[j].argmax())]
        flag = " [unseen code]" if data.unseen[r] else ""
        lines += ["", f"Question ({data.qtype[r]}){flag}: {q}", f"Answer: {gold}  (predicted: {got})"]
        lines.append("Attention weights per hop:")
        for h, a in enumerate(att):
            lines.append(f"  Hop {h + 1}:")
            w = a[j]
            for i in torch.argsort(w, descending=True).tolist():
                if float(w[i]) > threshold and i < len(facts):
                    lines.append(f"    [{float(w[i]):.3f}] {facts[i]}")
    return "\n".join(lines)
