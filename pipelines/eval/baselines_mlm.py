"""Masked-code baselines, scored on exactly the masked positions of the models' reported MLM accuracy.

The report's MLM accuracy is :func:`pipelines.train.mlm.evaluate_mlm` on ``pretrain_val`` after the last
epoch: batches of ``val_batch_size`` rows (the first ``max_val`` patients), each masked by
:func:`~pipelines.train.mlm.mask_tokens` with the generator ``step_generator(seed, chunk, 0,
SALT_VALIDATION)``. :func:`masked_positions` repeats that loop (one process) and so finds the same
positions and targets. A baseline sees only the codes not chosen for masking (``[MASK]``ed, replaced
or kept alike) and ranks every code:

- ``most_frequent``: codes by their count in ``pretrain_train``, whatever the patient;
- ``copy_from_history``: the patient's visible codes by how often they occur (ties by training count,
  then id), then the remaining codes by training count (an empty history is ``most_frequent``);
- ``cooccurrence``: ``score(c) = sum over visible positions h of P(c | h)``, with ``P(c | h)`` the share
  of ordered pairs of distinct positions (h, c) within a ``pretrain_train`` patient; ties (and codes
  never seen next to the history) by training count, then id.

Dimension legend: P patients, T codes, N concepts, M masked positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from pipelines.data.sequences import SALT_VALIDATION, Sequences, step_generator

from .frequency import BIN_EDGES, bins_of

BASELINES = ("most_frequent", "copy_from_history", "cooccurrence")
TOPK = (1, 10, 100)
ROW_CHUNK = 64  # patients whose scores are densified at once (ROW_CHUNK x N floats)


@dataclass(frozen=True)
class MLMMasking:
    """The options of :func:`~pipelines.train.mlm.evaluate_mlm` that fix the masked positions (a
    pretraining run's ``pretrain_val`` validation)."""

    mask_prob: float = 0.15  # PretrainConfig.mask_prob
    batch_size: int = 256  # PretrainConfig.val_batch_size
    limit: int | None = None  # PretrainConfig.max_val
    max_len: int = 128  # the model's max_len (sequences are read as the model reads them)
    max_segments: int = 100  # the model's max_segments
    split: str = "pretrain_val"  # the validation split of pretraining

    @classmethod
    def of_experiment(cls, model: str, pretrain: dict[str, Any]) -> MLMMasking:
        """The masking of an experiment's pretraining runs (model preset ``model``, PretrainConfig
        overrides ``pretrain``)."""
        from model import preset
        from pipelines.train.config import PretrainConfig

        pc = PretrainConfig(dataset="", program="", model=model, **pretrain)
        mc = preset(model)
        return cls(pc.mask_prob, pc.val_batch_size, pc.max_val, mc.max_len, mc.max_segments)


def masked_positions(
    seqs: Sequences, tok, *, seed: int, mask_prob: float, batch_size: int, limit: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The positions :func:`~pipelines.train.mlm.evaluate_mlm` masks on ``seqs`` (one process).

    Shapes: output rows ``(M,)`` (row of ``seqs``), cols ``(M,)``, targets ``(M,)`` (original ids), in
    evaluate_mlm's order.
    """
    n = len(seqs) if limit is None else min(limit, len(seqs))
    rows, cols, targets = [], [], []
    for chunk, idx in enumerate(torch.arange(n).split(batch_size)):
        b = seqs.batch(idx)
        _, chosen, tg = tok.mask(b, mask_prob, step_generator(seed, chunk, 0, salt=SALT_VALIDATION))
        r, c = chosen.nonzero(as_tuple=True)  # row-major, as targets
        rows.append(idx[r].numpy())
        cols.append(c.numpy())
        targets.append(tg.numpy())
    cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)  # noqa: E731
    return cat(rows), cat(cols), cat(targets)


def code_matrix(seqs: Sequences, special: np.ndarray, hide: np.ndarray | None = None) -> sp.csr_matrix:
    """Counts of each code per patient ``(P, N)``, special tokens and the ``hide`` positions left out.
    Shapes: special ``(N,)`` bool; hide ``(P, T)`` bool."""
    ids = seqs.input_ids.numpy()
    keep = seqs.attention_mask.numpy().copy()  # (P, T)
    if hide is not None:
        keep &= ~hide
    r, c = np.nonzero(keep)
    code = ids[r, c]
    ok = ~special[code]
    n = len(special)
    x = sp.csr_matrix((np.ones(int(ok.sum())), (r[ok], code[ok])), shape=(len(seqs), n))
    x.sum_duplicates()
    return x


def pair_probabilities(x: sp.csr_matrix) -> sp.csr_matrix:
    """``P(c | h)`` ``(N, N)``: the share of c among the codes at the other positions of the patients who
    have h, from code counts ``x (P, N)``."""
    c = (x.T @ x).tocsr()  # ordered position pairs, self-pairs included
    c = c - sp.diags(np.asarray(x.sum(0)).ravel())  # (N, N) pairs of distinct positions
    c.eliminate_zeros()
    tot = np.asarray(c.sum(1)).ravel()
    inv = np.divide(1.0, tot, out=np.zeros_like(tot), where=tot > 0)
    return (sp.diags(inv) @ c).tocsr()


def _ranks_of(scores: np.ndarray, tie: np.ndarray, target_cols: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """0-based rank of ``target_cols[i]`` in row ``rows[i]`` of ``scores (R, N)``: higher scores first, equal
    scores by higher ``tie (N,)`` (distinct per code)."""
    s = scores[rows]  # (m, N)
    st = s[np.arange(len(rows)), target_cols][:, None]  # (m, 1)
    return ((s > st) | ((s == st) & (tie[None, :] > tie[target_cols][:, None]))).sum(1)


def baseline_ranks(
    hist: sp.csr_matrix,
    patient: np.ndarray,
    target: np.ndarray,
    train_counts: np.ndarray,
    cond: sp.csr_matrix,
) -> dict[str, np.ndarray]:
    """0-based rank of each target under each baseline.

    Shapes: hist ``(P, N)`` visible code counts; patient, target ``(M,)``; train_counts ``(N,)``;
    cond ``(N, N)`` :func:`pair_probabilities`. Output: baseline -> ``(M,)``.
    """
    n = len(train_counts)
    # ties: training count, then lower id
    prior = np.argsort(np.argsort(-train_counts, kind="stable"), kind="stable")  # (N,) global rank
    tie = (n - prior).astype(np.float64)  # (N,) distinct, higher for commoner codes
    out = {b: np.zeros(len(target), np.int64) for b in BASELINES}
    out["most_frequent"] = prior[target]
    for lo in range(0, hist.shape[0], ROW_CHUNK):
        sel = np.flatnonzero((patient >= lo) & (patient < lo + ROW_CHUNK))
        if not len(sel):
            continue
        rows = patient[sel] - lo
        h = hist[lo : lo + ROW_CHUNK]
        out["copy_from_history"][sel] = _ranks_of(h.toarray(), tie, target[sel], rows)  # (R, N) counts
        out["cooccurrence"][sel] = _ranks_of((h @ cond).toarray(), tie, target[sel], rows)
    return out


def mlm_baselines(
    seqs: Sequences,
    train: Sequences,
    tok,
    special: np.ndarray,
    log_frequency: np.ndarray,
    *,
    seed: int,
    masking: MLMMasking,
) -> dict[str, Any]:
    """Top-k accuracy of the baselines on the masked positions of ``seqs``, overall and by the
    frequency bin of the target (:mod:`pipelines.eval.frequency`'s bins).

    Shapes: special, log_frequency ``(N,)``.
    """
    rows, cols, target = masked_positions(
        seqs, tok, seed=seed, mask_prob=masking.mask_prob, batch_size=masking.batch_size, limit=masking.limit
    )
    hide = np.zeros(tuple(seqs.input_ids.shape), bool)  # (P, T)
    hide[rows, cols] = True
    hist = code_matrix(seqs, special, hide)  # (P, N)
    x_train = code_matrix(train, special)  # (P_train, N)
    counts = np.asarray(x_train.sum(0)).ravel()  # (N,)
    counts[special] = -1  # special tokens rank last
    ranks = baseline_ranks(hist, rows, target, counts, pair_probabilities(x_train))
    out: dict[str, Any] = {
        "split": masking.split,
        "seed": seed,
        "mask_prob": masking.mask_prob,
        "batch_size": masking.batch_size,
        "patients": len(seqs) if masking.limit is None else min(masking.limit, len(seqs)),
        "n_masked": int(len(target)),
        "empty_history": int((np.asarray(hist.sum(1)).ravel()[rows] == 0).sum()),
    }
    for k in TOPK:
        out[f"top{k}"] = {b: _share(r < k) for b, r in ranks.items()}
    b = bins_of(np.nan_to_num(log_frequency[target], nan=-np.inf))
    out["frequency_bins"] = [
        {
            "low": BIN_EDGES[j],
            "high": BIN_EDGES[j + 1],
            "n_masked": int((b == j).sum()),
            **{f"top{k}": {name: _share(r[b == j] < k) for name, r in ranks.items()} for k in TOPK},
        }
        for j in range(len(BIN_EDGES) - 1)
    ]
    return out


def _share(hit: np.ndarray) -> float | None:
    return float(hit.mean()) if len(hit) else None
