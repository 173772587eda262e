"""Next-visit diagnosis prediction (GRAM's task) on a pretrained model: :func:`next_visit_eval`.

The task: from the visits before a patient's last one, predict the set of ICD categories of the last visit
(:mod:`pipelines.data.next_visit`: three-character ICD-10-CM categories, ICD-9-CM codes in their own
categories, kept as separate labels), scored by top-k recall for k = 10, 20, 30 (:mod:`pipelines.eval.
next_visit_scores` defines recall averaged over patients, pooled recall and the per-quintile recall).

The model: a **linear softmax layer on the frozen pretrained encoder**. Each patient's history (the
fine-tuning tasks' input, ``input_ids[:last_visit_start]``) is encoded once; its features are the final
[CLS] state and the mean final state over the real positions ([CLS] included), concatenated (the two parts
the fine-tuning heads' ``cls+mean`` pooling adds, kept apart so that the layer weighs them), standardised
with the training patients' means and deviations. One linear layer maps them to the categories that occur
in some ``finetune_train`` patient's last visit (a category no training target holds is never ranked by
the head); its softmax is trained with Adam against the patient's true set as a uniform distribution
(cross-entropy with the target ``y / |y|``, as GRAM's softmax output is), on the ``finetune_train`` patients,
one pass over them per epoch in seeded batches, the epoch with the lowest loss on the ``finetune_val``
patients kept (patience :data:`PATIENCE` epochs, at most ``epochs``). Why this design: it reads what
pretraining put into the encoder and nothing else (no encoder weight moves), it costs one forward pass
per patient plus a convex fit of seconds, and a softmax ranks: top-k recall depends only on the order of
the scores, and the softmax spends the layer on that order rather than on calibrating thousands of
independent rare-label sigmoids.

With ``head_kind="history"`` (``--next-visit-head history``) the head also reads the history's own
categories: each category's logit adds ``w_visits[b] · log1p(history visits holding it) + w_latest[b] · [the
latest history visit holds it]``, where ``b`` is the category's frequency band (:data:`HISTORY_BANDS` bands of
equal size by the head's log prior, rarest first). A linear layer on the pooled states cannot rank a rare
category the patient already has (its bias sits at its low prior), and one weight shared by every category
is set by the common ones; a weight per band lets the fit learn how much a history entry outweighs the prior
at each frequency. The history head ranks every category with a training target **or** a pretraining
occurrence (a category of the rarest quintile often has no training target, and the linear head never ranks
one), its biases starting at a prior smoothed with the pretraining counts (:func:`smoothed_prior`). It is fit
in two stages, each with its own early stop: the biases and the band weights alone (what copying from the
history gives with no encoder), then everything from there with the layer (so the layer's early stop cannot
leave the band weights short of their fit). The band weights learn at :data:`HISTORY_LR_SCALE` times the
layer's rate (a few scalars would otherwise move 0.003 a step).

With ``head_kind="copy"`` (``--next-visit-head copy``, the demo's default) the head is a mixture of two
distributions: ``(1 − g) · softmax(the history head's logits) + g · copy``, where ``copy`` spreads over the
history's categories only (its logits ``c_visits[b] · log1p(visits) + c_latest[b] · latest + c_prior[b] · log
prior``, one triple per band) and ``g = sigmoid(gate(features))`` is each patient's copy share, a linear gate
on the same pooled states (starting at :data:`COPY_GATE_START`). A softmax over every category cannot give a
history category of the rarest band much mass without lifting its whole band; the copy distribution puts the
mass on the patient's own categories, so a rare category the patient already has competes with a handful of
others rather than with the vocabulary (the pointer-generator idea of summarisation models). A patient with
no history category gets the softmax alone. The copy head is fit in one stage (the band and copy weights at
the band rate, the layer and the gate at the layer's).

``head_kind="decoder"`` is the copy head whose softmax logits also add ``w_decoder[b] · log p_decoder(c)``:
the log probability the pretrained MLM decoder gives category ``c`` at a ``[MASK]`` opening a new visit
after the history (:func:`decoded_categories`). It is where a composed output vector could rank a rare
category the patient does not hold; it costs a second encoder pass per patient.

The same patients are ranked by the baselines of :mod:`pipelines.eval.next_visit_baselines` (frequency
prior, the history's categories, co-occurrence over the pretraining patients' consecutive visits) and, given
the cohort's ``ground_truth/`` folder, by the generator's true probabilities (the ceiling). Scored: the
``test`` patients (overall and per frequency quintile) and the ``rood_unseen`` patients (ROOD patients at
least half of whose codes are held out, as the chapters task's ROOD evaluation reads them); patients with a
single visit have no history and are left out (counted). Every recall has a patient-bootstrap interval;
the model minus each baseline at recall@20 is a paired bootstrap on the same patients.

Dimension legend: P patients, D model width, F = 2D features, C categories, L the head's categories,
K ranked categories.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from pipelines.data.next_visit import CategorySpace, NextVisitSet, next_visit_set, visit_categories
from pipelines.data.readers import HOSPITALS
from pipelines.data.sequences import Sequences, TokenizedDataset
from pipelines.errors import InputFileError

from . import next_visit_baselines as B
from .config import NEXT_VISIT_HEADS
from .finetuned import subset
from .next_visit_scores import KS, QUINTILE_K, frequency_quintiles, hits, paired_difference, scores

__all__ = ["BASELINES", "GROUPS", "HEADS", "PATIENCE", "fit_head", "history_features", "next_visit_eval",
           "pooled_histories", "smoothed_prior"]  # fmt: skip

log = logging.getLogger(__name__)

HEAD_BATCH = 256  # patients per Adam step of the head
HEAD_LR = 3e-3
HISTORY_LR_SCALE = 30  # the history head's band weights learn at this multiple of HEAD_LR
HISTORY_BANDS = 5  # frequency bands of the history head's weights
COPY_GATE_START = -1.0  # the copy head's gate starts at a copy share of sigmoid(-1) = 0.27
PRETRAIN_SMOOTHING = 0.1  # share of the history head's prior taken from the pretraining counts (+1 each)
PATIENCE = 5  # epochs without a lower validation loss before the head stops
GROUPS = ("test", "rood_unseen")
BASELINES = ("frequency_prior", "history", "cooccurrence")  # the rankings without a model, in table order
MODEL = "model"
CEILING = "ceiling"
HEADS = (
    NEXT_VISIT_HEADS  # the head's inputs: the encoder's pooled states only, or plus the history's categories
)


def history_features(
    s: NextVisitSet, idx: np.ndarray | None = None, columns: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """What the ``history`` head reads of the patients ``idx`` of ``s`` (all when None), per category of
    ``columns`` (all when None): ``log1p`` of the history visits holding it, and 1 where the latest history
    visit holds it (the latest visit over every category).

    Shapes: ``idx (B,)``, ``columns (L,)``; outputs ``(B, L)`` float32 each."""
    visits = s.history_visits if idx is None else s.history_visits[idx]
    last = s.history_last if idx is None else s.history_last[idx]  # 1 + visit, 0 where absent
    latest_visit = last.max(axis=1).toarray()  # (B, 1)
    if columns is not None:
        visits, last = visits[:, columns], last[:, columns]
    last = last.toarray()
    latest = (last > 0) & (last == latest_visit)
    return np.log1p(visits.toarray()).astype(np.float32), latest.astype(np.float32)


def _frozen_batches(model, seqs: Sequences, device, batch_size: int) -> Iterator[tuple[Tensor, dict]]:
    """``(idx, batch)`` of ``seqs`` in batches of similar lengths (shortest first, so that a batch is padded
    to little more than its own sequences), the batch's tensors on ``device``, with ``model`` in eval mode
    and no gradient; the model's mode is restored afterwards."""
    was = model.training
    model.eval()
    order = torch.argsort(seqs.attention_mask.sum(1), stable=True)  # (P,) shortest first
    try:
        with torch.no_grad():
            for idx in order.split(batch_size):
                b = seqs.batch(idx)
                yield idx, {k: b[k].to(device) for k in ("input_ids", "segment_ids", "attention_mask")}
    finally:
        model.train(was)


def pooled_histories(model, seqs: Sequences, device, batch_size: int) -> np.ndarray:
    """``(P, 2D)`` float32: the final [CLS] state and the mean final state over the real positions of each
    sequence, concatenated, from the frozen encoder (token embeddings composed once; batches of similar
    lengths, so that a batch is padded to little more than its own sequences)."""
    width = 2 * int(model.config.dim)
    out = np.zeros((len(seqs), width), np.float32)
    e = None
    for idx, b in _frozen_batches(model, seqs, device, batch_size):
        e = model.token_matrix() if e is None else e  # (N, D), composed once
        mask = b["attention_mask"]
        h = model.encode(b["input_ids"], b["segment_ids"], mask, token_matrix=e).float()  # (B, T, D)
        m = mask.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
        mean = (h * m).sum(1) / m.sum(1).clamp_min(1.0)  # (B, D)
        out[idx.numpy()] = torch.cat([h[:, 0], mean], 1).cpu().numpy()
    return out


def decoded_categories(model, seqs: Sequences, space: CategorySpace, device, batch_size: int) -> np.ndarray:
    """``(P, C)`` float32: for each sequence, the log probability the pretrained MLM decoder gives each
    category at a ``[MASK]`` appended as the first code of a new visit (the sequence's last segment plus
    one), summed over the category's codes (with the code cache when the model has one). Where a sequence
    already fills ``max_len`` its last position is replaced."""
    codes = list(model.program.concept_codes)
    mask_id, pad_id = codes.index("[MASK]"), codes.index("[PAD]")
    of = torch.from_numpy(space.of_concept).to(device)  # (N,)
    held = of >= 0
    out = np.zeros((len(seqs), len(space)), np.float32)
    max_len, top_segment = int(model.config.max_len), int(model.config.max_segments) - 1
    for idx, b in _frozen_batches(model, seqs, device, batch_size):
        ids, seg, mask = b["input_ids"], b["segment_ids"], b["attention_mask"]
        n = mask.sum(1).long()  # (B,) real positions
        if int(n.max()) >= ids.shape[1] and ids.shape[1] < max_len:  # room for one more position
            ids = F.pad(ids, (0, 1), value=pad_id)
            seg, mask = F.pad(seg, (0, 1)), F.pad(mask, (0, 1))
        rows = torch.arange(ids.shape[0], device=device)
        at = n.clamp(max=ids.shape[1] - 1)  # (B,)
        new_visit = (seg[rows, (n - 1).clamp_min(0)] + 1).clamp(max=top_segment)
        ids[rows, at], seg[rows, at], mask[rows, at] = mask_id, new_visit, 1
        predicted = torch.zeros_like(ids, dtype=torch.bool)
        predicted[rows, at] = True
        p = model.masked_log_probs(ids, seg, mask, predicted).float().exp()  # (B, N)
        cat = torch.zeros(ids.shape[0], len(space), device=device).index_add_(1, of[held], p[:, held])
        out[idx.numpy()] = cat.clamp_min(1e-12).log().cpu().numpy()
    return out


def _targets(s: NextVisitSet, labels: np.ndarray, device) -> torch.Tensor:
    """``(P, L)`` each patient's true set among ``labels`` as a distribution (zero rows where it has none)."""
    y = s.target[:, labels].toarray().astype(np.float32)
    y /= np.maximum(y.sum(1, keepdims=True), 1.0)
    return torch.from_numpy(y).to(device)


def smoothed_prior(train_count: np.ndarray, pretrain_count: np.ndarray | None) -> np.ndarray:
    """``(L,)`` float64 log probabilities: the training targets' shares, mixed (``PRETRAIN_SMOOTHING``) with
    the pretraining visits' shares plus one each where ``pretrain_count`` is given, so that a category no
    training target holds has a finite prior."""
    p = train_count.astype(np.float64)
    p = p / max(p.sum(), 1.0)
    if pretrain_count is not None:
        q = pretrain_count.astype(np.float64) + 1.0
        p = (1.0 - PRETRAIN_SMOOTHING) * p + PRETRAIN_SMOOTHING * q / q.sum()
    return np.log(p)


def _bands(log_prior: np.ndarray, n: int) -> np.ndarray:
    """``(L,)`` int64 each category's band, 0 the rarest: ``n`` bands of about equal size by log prior."""
    if log_prior.size == 0:
        return np.zeros(0, np.int64)
    edges = np.quantile(log_prior, np.linspace(0.0, 1.0, n + 1)[1:-1])
    return np.searchsorted(edges, log_prior, side="right").astype(np.int64)


class _Head(torch.nn.Module):
    """The softmax head of one kind over ``L`` categories (module docstring); :meth:`log_probs` gives each
    category's log probability. ``log_prior (L,)``: the biases' start; ``band (L,)``: each category's
    frequency band (``history`` and ``copy``)."""

    def __init__(self, kind: str, n_features: int, log_prior: np.ndarray, band: Tensor) -> None:
        super().__init__()
        self.kind, self.band = kind, band
        self.linear = torch.nn.Linear(n_features, log_prior.size)
        rows = 3 if kind == "decoder" else 2  # w_visits, w_latest (and w_decoder) per band
        self.history = torch.nn.Parameter(torch.zeros(rows, HISTORY_BANDS))
        self.copy = torch.nn.Parameter(torch.zeros(3, HISTORY_BANDS))  # the copy logits' weights per band
        self.gate = torch.nn.Linear(n_features, 1)
        self.register_buffer("log_prior", torch.from_numpy(log_prior).float())
        self.use_layer = True
        with torch.no_grad():  # the layer starts at the prior: zero weights, log-frequency biases
            self.linear.weight.zero_()
            self.linear.bias.copy_(self.log_prior)
            self.gate.weight.zero_()
            self.gate.bias.fill_(COPY_GATE_START)

    def band_parameters(self) -> list[torch.nn.Parameter]:
        return {"linear": [], "history": [self.history]}.get(self.kind, [self.history, self.copy])

    def layer_parameters(self) -> list[torch.nn.Parameter]:
        gated = self.kind in ("copy", "decoder")
        return list(self.linear.parameters()) + (list(self.gate.parameters()) if gated else [])

    def log_probs(self, x: Tensor, hist: tuple[Tensor, ...] | None) -> Tensor:
        """``(B, L)`` log probabilities of the patients ``x (B, F)`` with history features ``hist``
        (visits, latest, and for ``decoder`` the decoder's category log probabilities; ``(B, L)`` each)."""
        z = self.linear(x) if self.use_layer else self.linear.bias.expand(x.shape[0], -1)  # (B, L)
        if self.kind == "linear":
            return F.log_softmax(z, 1)
        visits, latest = hist[0], hist[1]
        w = self.history[:, self.band]  # (2 or 3, L)
        z = z + w[0] * visits + w[1] * latest
        if self.kind == "decoder":
            z = z + w[2] * hist[2]
        lz = F.log_softmax(z, 1)
        if self.kind == "history":
            return lz
        c = self.copy[:, self.band]  # (3, L)
        held = visits > 0  # (B, L) the history's categories
        q = torch.where(held, c[0] * visits + c[1] * latest + c[2] * self.log_prior, -torch.inf)
        lq = F.log_softmax(torch.where(held.any(1, keepdim=True), q, 0.0), 1)  # uniform where none held
        g = self.gate(x)  # (B, 1) the copy share's logit
        g = torch.where(held.any(1, keepdim=True), g, -torch.inf)  # nothing to copy: the softmax alone
        return torch.logaddexp(F.logsigmoid(-g) + lz, F.logsigmoid(g) + lq)


def fit_head(
    x_train: np.ndarray,
    train: NextVisitSet,
    x_val: np.ndarray,
    val: NextVisitSet,
    *,
    epochs: int,
    seed: int,
    device,
    head_kind: str = "linear",
    pretrain_count: np.ndarray | None = None,
    decoded: dict[str, np.ndarray] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Train the softmax head (module docstring); returns ``scores(x (P, F), s) -> (P, C)`` numpy scores of
    the patients of ``s`` over every category (-inf where the head has no output) and what the fit recorded.

    ``head_kind``: ``linear``, ``history``, ``copy`` or ``decoder`` (module docstring); all but ``linear``
    also rank the categories with a pretraining occurrence (``pretrain_count (C,)``, pretraining visits
    holding each).
    ``decoder`` also reads ``decoded[s.split] (P, C)``, :func:`decoded_categories` of each set's patients."""
    if head_kind not in HEADS:
        raise ValueError(f"next-visit head {head_kind!r} is not one of {list(HEADS)}")
    if head_kind == "decoder" and decoded is None:
        raise ValueError("the decoder head needs the decoder's category log probabilities (decoded=)")
    reads_history = head_kind != "linear"
    seen, labels, log_prior = _head_outputs(train, pretrain_count if reads_history else None)
    mu = x_train.mean(0)
    sd = np.maximum(x_train.std(0), 1e-6)

    def standard(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((x - mu) / sd).float().to(device)

    xt, xv = standard(x_train), standard(x_val)
    yt, yv = _targets(train, labels, device), _targets(val, labels, device)
    band = torch.from_numpy(_bands(log_prior, HISTORY_BANDS)).to(device)
    head = _Head(head_kind, xt.shape[1], log_prior, band).to(device)
    gen = torch.Generator().manual_seed(seed)

    def history(s: NextVisitSet, idx: np.ndarray | None = None) -> tuple[torch.Tensor, ...] | None:
        """``(B, L)`` visits and latest-visit features of the head's categories (None: linear head)."""
        if not reads_history:
            return None
        feats = history_features(s, idx, labels)
        if head_kind == "decoder":
            d = decoded[s.split]
            feats = (*feats, (d if idx is None else d[idx])[:, labels])
        return tuple(torch.from_numpy(np.ascontiguousarray(h)).to(device) for h in feats)

    def loss_of(x: torch.Tensor, y: torch.Tensor, hist: tuple[torch.Tensor, ...] | None) -> torch.Tensor:
        return -(y * head.log_probs(x, hist)).sum(1).mean()

    hist_val = history(val)  # read once; every epoch's validation uses it

    def train_loss(idx: Tensor) -> Tensor:
        return loss_of(xt[idx.to(device)], yt[idx.to(device)], history(train, idx.numpy()))

    stages = _fit_stages(
        head,
        lambda groups: _adam_until_stalled(
            head, groups, epochs, xt.shape[0], gen, train_loss, lambda: float(loss_of(xv, yv, hist_val))
        ),
    )
    n_categories = train.target.shape[1]

    def score(x: np.ndarray, s: NextVisitSet) -> np.ndarray:
        out = np.full((x.shape[0], n_categories), -np.inf, dtype=np.float64)
        if x.shape[0]:
            with torch.no_grad():
                out[:, labels] = head.log_probs(standard(x), history(s)).double().cpu().numpy()
        return out

    info = _fit_info(head, stages, labels, seen, xt, xv)
    return score, info


def _head_outputs(
    train: NextVisitSet, pretrain_count: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(seen (C,), labels (L,), log_prior (L,))``: the training targets' count of every category, the
    categories the head ranks (those with a training target, or with a pretraining occurrence where
    ``pretrain_count`` is given) and their :func:`smoothed_prior`."""
    seen = np.asarray(train.target.sum(0)).ravel()
    pre = None if pretrain_count is None else np.asarray(pretrain_count)
    labels = np.flatnonzero((seen > 0) | (pre > 0)) if pre is not None else np.flatnonzero(seen > 0)
    return seen, labels, smoothed_prior(seen[labels], None if pre is None else pre[labels])


def _fit_stages(
    head: _Head, fit: Callable[[list[dict]], tuple[int, int, float]]
) -> list[tuple[int, int, float]]:
    """The head's fit, stage by stage (``fit(groups)``: one early-stopped Adam run): for ``history`` first
    the biases and the band weights with the layer's weights held at zero, then (every kind) the layer,
    with the band weights at :data:`HISTORY_LR_SCALE` times its rate. Returns each stage's record."""
    bands = {"params": head.band_parameters(), "lr": HEAD_LR * HISTORY_LR_SCALE}
    stages = []
    if head.kind == "history":
        head.use_layer = False
        stages.append(fit([{"params": [head.linear.bias], "lr": HEAD_LR}, bands]))
        head.use_layer = True
    layer = {"params": head.layer_parameters(), "lr": HEAD_LR}
    stages.append(fit([layer, bands] if head.kind != "linear" else [layer]))
    return stages


def _adam_until_stalled(
    head: torch.nn.Module,
    groups: list[dict],
    epochs: int,
    n_train: int,
    gen: torch.Generator,
    train_loss: Callable[[Tensor], Tensor],
    val_loss: Callable[[], float],
) -> tuple[int, int, float]:
    """Adam on ``groups``, one pass over the ``n_train`` patients per epoch in seeded batches
    (``train_loss(idx)``: the loss of those patients), until ``val_loss()`` has not fallen for
    :data:`PATIENCE` epochs; the best epoch's state is kept. Returns ``(epochs run, best epoch, best
    loss)``."""
    opt = torch.optim.Adam(groups)
    with torch.no_grad():
        best, best_epoch = val_loss(), 0
    state = {k: v.detach().clone() for k, v in head.state_dict().items()}
    epoch, wait = 0, 0
    for epoch in range(1, epochs + 1):
        for idx in torch.randperm(n_train, generator=gen).split(HEAD_BATCH):
            opt.zero_grad(set_to_none=True)
            train_loss(idx).backward()
            opt.step()
        with torch.no_grad():
            v = val_loss()
        if v < best - 1e-6:
            best, best_epoch, wait = v, epoch, 0
            state = {k: t.detach().clone() for k, t in head.state_dict().items()}
        else:
            wait += 1
            if wait >= PATIENCE:
                break
    head.load_state_dict(state)
    return epoch, best_epoch, best


def _fit_info(
    head: _Head, stages: list[tuple[int, int, float]], labels: np.ndarray, seen: np.ndarray, xt: Tensor,
    xv: Tensor,
) -> dict[str, Any]:  # fmt: skip
    """What :func:`fit_head` records: the head's outputs, the last stage's early stop, the patients, and
    for a history-reading head :func:`_band_info`."""
    epoch, best_epoch, best = stages[-1]
    info = {
        "kind": head.kind,
        "outputs": int(labels.size),
        "outputs_without_training_target": int((seen[labels] == 0).sum()),
        "features": int(xt.shape[1]),
        "epochs_run": epoch,
        "best_epoch": best_epoch,
        "val_loss": best,
        "train_patients": int(xt.shape[0]),
        "val_patients": int(xv.shape[0]),
    }
    if head.kind != "linear":
        info.update(_band_info(head, stages, xv))
    return info


def _band_info(head: _Head, stages: list[tuple[int, int, float]], xv: Tensor) -> dict[str, Any]:
    """What a history-reading head learned: its band weights (rarest band first), and for ``copy`` and
    ``decoder`` the copy logits' weights and the mean copy share of the validation patients."""

    def rows(t: Tensor) -> list[list[float]]:
        return [[round(float(v), 4) for v in r] for r in t.detach().cpu().double()]

    w = rows(head.history)
    info: dict[str, Any] = {"history_weights": dict(zip(("visits", "latest", "decoder"), w, strict=False))}
    info["history_bands"] = HISTORY_BANDS
    if len(stages) > 1:
        e1, b1, v1 = stages[0]
        info["history_only"] = {"epochs_run": e1, "best_epoch": b1, "val_loss": v1}
    if head.kind in ("copy", "decoder"):
        c = rows(head.copy)
        info["copy_weights"] = {"visits": c[0], "latest": c[1], "log_prior": c[2]}
        with torch.no_grad():
            info["copy_share_val"] = round(float(torch.sigmoid(head.gate(xv)).mean()), 4)
    return info


def _set(
    ds: TokenizedDataset, split: str, space: CategorySpace, rows: np.ndarray | None = None
) -> NextVisitSet:
    return next_visit_set(ds.table, ds.rows(split) if rows is None else rows, space, split)


def _unseen_rows(ds: TokenizedDataset) -> np.ndarray:
    rows = ds.rows("rood")
    if "rood_unseen" not in ds.table.column_names or not rows.size:
        return rows[:0]
    flag = np.asarray(ds.table.column("rood_unseen").fill_null(False).to_numpy(zero_copy_only=False), bool)
    return rows[flag[rows]]


def _histories(model, ds: TokenizedDataset, s: NextVisitSet, rows_split: str, rows=None) -> Sequences:
    """The histories of the patients of ``s`` (the rows of ``rows_split``, or ``rows`` of it), cut before
    their last visit."""
    mc = model.config
    seqs = ds.sequences(rows_split, max_len=mc.max_len, max_segments=mc.max_segments, before_last_visit=True)
    if rows is not None:  # a subset of the split's rows, in its order
        seqs = subset(seqs, np.isin(ds.rows(rows_split), rows))
    return subset(seqs, s.keep)


def next_visit_eval(
    model,
    ds: TokenizedDataset,
    program,
    *,
    device,
    batch_size: int = 128,
    seed: int = 0,
    epochs: int = 100,
    ground_truth: str | None = None,
    head_kind: str = "linear",
) -> dict[str, Any] | None:
    """The next-visit evaluation of one pretrained model (module docstring): the record
    :class:`pipelines.eval.records.NextVisit` holds, or None when a split it needs is empty."""
    t0 = time.perf_counter()
    k_max = max(KS)
    space = CategorySpace.of_program(program.concept_vocabularies, program.concept_codes)
    train, val, test = (_set(ds, sp, space) for sp in ("finetune_train", "finetune_val", "test"))
    unseen_rows = _unseen_rows(ds)
    unseen = _set(ds, "rood", space, unseen_rows)
    empty = [s.split for s in (train, val, test) if s.n == 0]
    if empty:
        log.warning("next-visit evaluation skipped: no patient with two visits in %s", ", ".join(empty))
        return None
    pre = visit_categories(ds.table, ds.rows("pretrain_train"), space)
    count = np.bincount(pre.category, minlength=len(space))  # pretraining visits holding each category
    transitions = B.transition_matrix(pre, len(space))
    prior = B.prior_counts(train.target)
    t_data = time.perf_counter()
    sets = {"train": (train, "finetune_train", None), "val": (val, "finetune_val", None),
            "test": (test, "test", None), "rood_unseen": (unseen, "rood", unseen_rows)}  # fmt: skip
    # one history build per set (train, val and test hold patients: checked above), read by both passes
    histories = {key: _histories(model, ds, st, split, r) for key, (st, split, r) in sets.items() if st.n}
    x = {key: pooled_histories(model, seqs, device, batch_size) for key, seqs in histories.items()}
    decoded = None
    if head_kind == "decoder":  # a second pass: the decoder at a [MASK] opening the next visit
        decoded = {
            sets[key][0].split: decoded_categories(model, seqs, space, device, batch_size)
            for key, seqs in histories.items()
        }
    t_encode = time.perf_counter()
    score, head = fit_head(
        x["train"], train, x["val"], val, epochs=epochs, seed=seed, device=device, head_kind=head_kind,
        pretrain_count=count, decoded=decoded,
    )  # fmt: skip
    t_head = time.perf_counter()
    quint = frequency_quintiles(test.target, count)
    hospital = HOSPITALS.get(str(ds.manifest.get("source", {}).get("reader", "")))
    groups: dict[str, dict[str, Any]] = {}
    differences: dict[str, dict[str, Any]] = {}
    ceiling_note = None if ground_truth else "no ground truth given (a real cohort has none)"
    for name, s in (("test", test), ("rood_unseen", unseen)):
        if s.n == 0:
            continue
        ranked = {
            MODEL: B.rank(score(x[name], s), prior, k_max),
            "frequency_prior": B.prior_ranking(prior, s.n, k_max),
            "history": B.history_ranking(s, prior, k_max),
            "cooccurrence": B.cooccurrence_ranking(s, transitions, prior, k_max),
        }
        if ground_truth:
            try:
                ranked[CEILING] = B.ceiling_ranking(ground_truth, hospital, s.subject_id, space, k_max)
            except InputFileError as e:
                ceiling_note = str(e)
                log.warning("next-visit ceiling left out: %s", e)
        h = {k: hits(r, s.target, quint) for k, r in ranked.items()}
        for scorer, hv in h.items():
            groups.setdefault(scorer, {})[name] = scores(hv)
        differences[name] = {
            f"{MODEL} - {b}": paired_difference(h[MODEL], h[b], QUINTILE_K).as_dict() for b in BASELINES
        }
    t_end = time.perf_counter()
    head["seconds"] = {
        "labels_and_baseline_data": round(t_data - t0, 3),
        "encode": round(t_encode - t_data, 3),
        "head": round(t_head - t_encode, 3),
        "rank_and_score": round(t_end - t_head, 3),
    }
    return {
        "ks": list(KS),
        "categories": len(space),
        "patients": {
            "finetune_train": train.counts,
            "finetune_val": val.counts,
            "test": test.counts,
            "rood_unseen": unseen.counts,
        },
        "head": head,
        "quintiles": quint.as_list(),
        "scores": groups,
        "differences": differences,
        "ceiling": CEILING in groups,
        "ceiling_note": None if CEILING in groups else ceiling_note,
    }
