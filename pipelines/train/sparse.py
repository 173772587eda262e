"""Training with sparse gradients: an AdamW that updates only the rows a sparse gradient holds, and
gradient clipping that reads sparse gradients.

A batch composed by rows (the sampled MLM softmax, :mod:`pipelines.train.mlm`) touches a few thousand of
the atoms; with ``HRREmbedding.sparse_grads`` their gradient is a sparse COO tensor of those rows only
(:func:`hrr_kernel.composer.compose`), and :class:`LazyAdamW` updates just those rows, so neither the
backward nor the optimizer step scans the whole ``(A, D)`` atom table (the cost that grows with the
vocabulary).

:class:`LazyAdamW` is ``torch.optim.AdamW`` (decoupled weight decay, bias-corrected moments, the same
operations in the same order) for dense gradients, and *lazy* for sparse ones (as TensorFlow's LazyAdam
and ``torch.optim.SparseAdam``): a row's moments and weight decay are updated only at the steps whose
gradient holds that row. The rows a step touches are updated exactly as AdamW would update them if
every earlier step had touched them too; a row a step leaves out keeps its value and moments instead of
drifting on its decaying momentum. So the two agree exactly when every step touches the same rows
(tested), and otherwise differ only in the rows a step skips.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = ["LazyAdamW", "adamw_for", "clip_grad_norm"]


class LazyAdamW(torch.optim.Optimizer):
    """AdamW, lazy for sparse gradients (module docstring). Arguments as ``torch.optim.AdamW``'s."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(
                f"invalid LazyAdamW settings: lr {lr}, betas {betas}, eps {eps}, wd {weight_decay}"
            )
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                t = float(state["step"])
                step_size = lr / (1 - b1**t)
                bc2_sqrt = math.sqrt(1 - b2**t)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                if p.grad.is_sparse:
                    _lazy_rows(p, p.grad.coalesce(), m, v, lr, b1, b2, eps, wd, step_size, bc2_sqrt)
                    continue
                g = p.grad
                p.mul_(1 - lr * wd)
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                p.addcdiv_(m, (v.sqrt() / bc2_sqrt).add_(eps), value=-step_size)
        return loss


def adamw_for(model, params: list[Tensor], *, sparse: bool, **kwargs) -> torch.optim.Optimizer:
    """The optimizer of ``params`` (``kwargs``: AdamW's): with ``sparse``, ``model``'s token embedding
    gives batch rows sparse gradients (``HRREmbedding.sparse_grads``) and :class:`LazyAdamW` updates them;
    else ``torch.optim.AdamW`` and dense gradients."""
    model.embeddings.token.sparse_grads = sparse
    return (LazyAdamW if sparse else torch.optim.AdamW)(params, **kwargs)


def _lazy_rows(
    p: Tensor,
    g: Tensor,
    m: Tensor,
    v: Tensor,
    lr: float,
    b1: float,
    b2: float,
    eps: float,
    wd: float,
    step_size: float,
    bc2_sqrt: float,
) -> None:
    """The AdamW update of the rows a coalesced sparse gradient ``g`` holds (the others untouched).
    Shapes: p, m, v ``(n, ...)``; g sparse ``(n, ...)`` with ``k`` rows."""
    rows, grad = g.indices()[0], g.values()  # (k,), (k, ...)
    if rows.numel() == 0:
        return
    pr, mr, vr = p.index_select(0, rows), m.index_select(0, rows), v.index_select(0, rows)
    pr.mul_(1 - lr * wd)
    mr.lerp_(grad, 1 - b1)
    vr.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    pr.addcdiv_(mr, (vr.sqrt() / bc2_sqrt).add_(eps), value=-step_size)
    p.index_copy_(0, rows, pr)
    m.index_copy_(0, rows, mr)
    v.index_copy_(0, rows, vr)


def clip_grad_norm(params: list[Tensor], max_norm: float) -> Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (L2) over dense and sparse gradients alike: a sparse gradient is
    coalesced first (its repeated rows summed, as the update will see them), its norm is that of its
    values, and clipping scales its values. Returns the total norm before clipping."""
    grads = [p for p in params if p.grad is not None]
    if not any(p.grad.is_sparse for p in grads):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    for p in grads:
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
    parts = [p.grad.values() if p.grad.is_sparse else p.grad for p in grads]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(x.float()) for x in parts]))
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for x in parts:
        x.mul_(coef.to(x.dtype))
    return total
