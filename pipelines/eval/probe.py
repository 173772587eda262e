"""The chapters probe: what a pretrained model's frozen encoder and code vectors hold of the chapters task.

The fine-tuned heads mix two things: what pretraining put into the model and how well one fine-tuning
recipe gets it out. The probe takes the second away. Every ``finetune_train`` patient's history (the codes
before its last visit, as the heads read them) goes once through the *frozen* pretrained model. Its features
(:func:`probe_features`) are concatenated: the final ``[CLS]`` state, the mean final state over the real
positions, the mean code vector of the history and that of its latest visit (code vectors as the embedding
mode builds them, before positions, segments and layers). They are standardised on ``finetune_train``.
Then the learner of the history's chapters regression is fitted on them: one L2 logistic regression
per chapter (sklearn's objective, :func:`fit_dense_logistic`, solved for the 22 chapters at once by one
preconditioned L-BFGS: 12 s for the grid on 2 cores, where sklearn's liblinear took 250 s), the setting of
:data:`PROBE_GRID` with the best ``finetune_val`` macro AUROC.

Thresholds are chosen per chapter on ``finetune_val``, as for every model and baseline. The probe is scored
on ``test`` and ``rood_unseen``, with a patient-bootstrap interval. It is a linear read-out, so it says what
a linear head could take from the pretrained model without changing it: the same protocol as the next-visit
head (:mod:`pipelines.eval.next_visit`), here with the rival's own learner.

Dimension legend: P patients, T positions, D model width, L chapters (22).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from pipelines.data.sequences import Sequences, TokenizedDataset
from pipelines.train.metrics import f1_thresholds
from pipelines.train.predictions import score_predictions

from .baselines import select_by_val_auroc
from .stats import PatientScorer, bootstrap_patients

__all__ = [
    "PROBE_GRID",
    "PROBE_SPLITS",
    "DenseLogistic",
    "fit_dense_logistic",
    "probe_features",
    "chapters_probe",
]

# (class_weight, C): the history's chapters regression's grid with its class weight (balanced, chosen on
# the demo)
PROBE_GRID: tuple[tuple[str | None, float], ...] = (("balanced", 1.0), ("balanced", 0.1), ("balanced", 0.01))
PROBE_SPLITS = ("test", "rood_unseen")  # what the probe is scored on
FEATURES = ("[CLS] state", "mean state", "mean code vector", "mean code vector of the latest visit")


@torch.no_grad()
def probe_features(model, seqs: Sequences, *, batch_size: int, device: torch.device) -> np.ndarray:
    """``(P, 4D)``: per patient the final [CLS] state, the mean final state over the real positions ([CLS]
    included), the mean code vector of its codes (no special token) and of its latest visit's codes (zeros
    where there is none)."""
    special = model.special_tokens().to(device)  # (N,)
    out = []
    for idx in torch.arange(len(seqs)).split(batch_size):
        b = seqs.batch(idx)
        ids, seg = b["input_ids"].to(device).long(), b["segment_ids"].to(device).long()
        att = b["attention_mask"].to(device).bool()
        tokens = model.embeddings.token(ids)  # (B, T, D)
        h = model.encode(ids, seg, att, tokens=tokens)  # (B, T, D)
        code = att & ~special[ids]  # (B, T)
        last = torch.where(code, seg, -1).max(1, keepdim=True).values  # (B, 1)
        parts = [h[:, 0]]
        for w, x in ((att, h), (code, tokens), (code & (seg == last), tokens)):
            wf = w.to(x.dtype).unsqueeze(-1)  # (B, T, 1)
            parts.append((x * wf).sum(1) / wf.sum(1).clamp_min(1.0))  # (B, D)
        out.append(torch.cat(parts, 1).float().cpu().numpy())
    width = 4 * model.config.dim
    return np.concatenate(out) if out else np.zeros((0, width), np.float32)


class DenseLogistic:
    """One L2 logistic regression per label on dense features: weights ``(F, L)``, intercepts ``(L,)``; a
    label with one class in training predicts its share (``constant`` not NaN), as the regression does."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray, constant: np.ndarray) -> None:
        self.weight, self.bias, self.constant = weight, bias, constant

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Probabilities ``(P, L)`` of the features ``x (P, F)``."""
        p = 1.0 / (1.0 + np.exp(-(np.asarray(x, np.float64) @ self.weight + self.bias)))
        return np.where(np.isnan(self.constant), p, self.constant)


def fit_dense_logistic(
    x: np.ndarray, y: np.ndarray, *, c: float, balanced: bool, max_iter: int = 1000, tol: float = 1e-6
) -> DenseLogistic:
    """The minimiser, per label ``j``, of sklearn's L2 logistic objective ``C * sum_i w_ij * logloss_ij +
    |beta_j|^2 / 2`` (intercept not penalised; ``balanced``: ``w_ij = n / (2 n_{y_ij})``, else 1), for
    all labels at once: the objectives are separate and strictly convex, so one float64 L-BFGS over the
    ``(F + 1, L)`` parameters finds each label's minimiser. The probe's features are nearly collinear
    (condition number ~1e14), so the weights are solved in preconditioned coordinates ``beta = P gamma``,
    ``P = (X'X / 4n + I / Cn)^(-1/2)`` (the objective's curvature bound): on the demo's 8,000 x 512
    features the three grid points take about 12 s on 2 cores, logits within 1e-4 of sklearn's lbfgs
    (which needs up to 1,900 iterations per chapter there). ``x (n, F)``, ``y (n, L)`` in {0, 1};
    ``tol``: L-BFGS's gradient tolerance."""
    x = np.asarray(x, np.float64)
    n, f = x.shape
    xc = x - x.mean(0)
    lam, vec = np.linalg.eigh(xc.T @ xc / max(n, 1))  # (F,), (F, F)
    scale = 1.0 / np.sqrt(np.clip(lam, 0.0, None) / 4 + 1.0 / (c * n))  # (F,)
    precond = vec * scale  # (F, F): beta = precond @ gamma, and |beta|^2 = sum scale^2 gamma^2
    xt = torch.as_tensor(x @ precond)
    yt = torch.as_tensor(np.asarray(y, np.float64))
    pos = yt.sum(0)  # (L,)
    constant = np.where((pos == 0) | (pos == n), (pos / max(n, 1)).numpy(), np.nan)  # one class: its share
    if balanced:
        w = torch.where(yt > 0, n / (2 * pos.clamp_min(1)), n / (2 * (n - pos).clamp_min(1)))  # (n, L)
    else:
        w = torch.ones_like(yt)
    penalty = torch.as_tensor(scale**2).unsqueeze(1)  # (F, 1)
    gamma = torch.zeros(f, yt.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(yt.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [gamma, bias], max_iter=max_iter, tolerance_grad=tol, tolerance_change=1e-12, history_size=20,
        line_search_fn="strong_wolfe",
    )  # fmt: skip

    def closure() -> torch.Tensor:
        opt.zero_grad()
        z = xt @ gamma + bias
        # the objective divided by C * n (the same minimiser, better scaled)
        loss = (w * torch.nn.functional.binary_cross_entropy_with_logits(z, yt, reduction="none")).sum() / n
        loss = loss + (penalty * gamma * gamma).sum() / (2 * c * n)
        loss.backward()
        return loss

    opt.step(closure)
    return DenseLogistic(precond @ gamma.detach().numpy(), bias.detach().numpy(), constant)


def _unseen_rows(ds: TokenizedDataset, subject_id: np.ndarray) -> np.ndarray:
    if "rood_unseen" not in ds.table.column_names:
        return np.zeros(len(subject_id), bool)
    flag = np.asarray(ds.table.column("rood_unseen").fill_null(False).to_numpy(zero_copy_only=False), bool)
    return np.isin(subject_id, ds.table.column("subject_id").to_numpy()[flag])


def chapters_probe(
    model, ds: TokenizedDataset, *, device: torch.device, batch_size: int
) -> dict[str, Any] | None:
    """The probe's record (module docstring), or None when ``finetune_train`` or ``finetune_val`` has no
    chapters rows. ``scores[split]``: the chapters metrics and ``f1_interval``; ``choice``: the grid point
    kept; ``features``: their width and parts; ``seconds``."""
    t0 = time.perf_counter()
    mc = model.config
    if not (ds.rows("finetune_train", "chapters").size and ds.rows("finetune_val", "chapters").size):
        return None

    def split(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if not ds.rows(name, "chapters").size:
            return None
        seqs = ds.sequences(
            name, max_len=mc.max_len, max_segments=mc.max_segments, task="chapters", before_last_visit=True
        )
        x = probe_features(model, seqs, batch_size=batch_size, device=device)
        return seqs.subject_id.numpy(), x, seqs.labels.numpy().astype(np.int8)

    train, val = split("finetune_train"), split("finetune_val")
    assert train is not None and val is not None
    scored = {"test": split("test")}
    rood = split("rood")
    if rood is not None:
        keep = _unseen_rows(ds, rood[0])
        scored["rood_unseen"] = (rood[0][keep], rood[1][keep], rood[2][keep])
    mu, sd = train[1].mean(0), train[1].std(0) + 1e-6  # (4D,)
    z = lambda s: (s[1] - mu) / sd  # noqa: E731 (standardised features)
    xt, yt = z(train), train[2]
    fit = lambda cw, c: fit_dense_logistic(xt, yt, c=c, balanced=cw == "balanced")  # noqa: E731
    lr, choice = select_by_val_auroc(PROBE_GRID, fit, z(val), val[2])
    thr = f1_thresholds(val[2], lr.predict(z(val)).astype(np.float32))  # (L,)
    scores: dict[str, Any] = {}
    for name, s in scored.items():
        if s is None or not len(s[0]):
            continue
        y, p = s[2], lr.predict(z(s)).astype(np.float32)  # (P, L)
        m = score_predictions("chapters", y, p, thr)
        f1 = PatientScorer(y, p, thr).metric("f1")  # the same macro F1, from per-patient counts
        iv = bootstrap_patients(f1, len(y), vectorized=True)
        scores[name] = {**m, "n": len(y), "f1_interval": iv.as_dict()}
    return {
        "features": {"width": int(train[1].shape[1]), "parts": list(FEATURES)},
        "choice": {**choice, "solver": "torch L-BFGS"},
        "patients": {"finetune_train": len(train[0]), "finetune_val": len(val[0])},
        "scores": scores,
        "seconds": time.perf_counter() - t0,
    }
