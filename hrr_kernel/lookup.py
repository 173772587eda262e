"""An embedding lookup of composed rows: the batch's distinct ids, and their rows gathered to its positions.

``HRREmbedding`` composes each distinct id of a batch once and then gathers the rows to the batch's
positions. With torch alone that is ``torch.unique`` (a sort of the batch) and ``index_select``, whose
backward (``index_add``) zeroes the rows' gradient and adds the positions one at a time on one thread.
On the CPU, with the native kernels loaded (:mod:`hrr_kernel.native`), :func:`unique_ids` finds the
distinct ids with a mark array in one pass (in order of first appearance, not sorted), and
:func:`gather_rows`' backward groups the positions by row and sums each row on one thread, in position
order: the same values as ``index_add`` up to the order of the sums, bitwise the same from call to call.
Elsewhere (CUDA, other dtypes, ``HRRBERT_NATIVE=0``) both fall back to the torch operations.
"""

from __future__ import annotations

import threading

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import native

__all__ = ["IdMarks", "unique_ids", "gather_rows"]


class IdMarks:
    """The mark array :func:`unique_ids` needs for ids below ``n_ids`` (one int64 slot each, built on
    first use) and its lock: one lookup at a time uses it."""

    def __init__(self, n_ids: int) -> None:
        self.n_ids = n_ids
        self._mark: Tensor | None = None
        self.lock = threading.Lock()

    def __getstate__(self) -> dict:  # a copy (deepcopy, pickle) gets fresh scratch and its own lock
        return {"n_ids": self.n_ids}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["n_ids"])

    def mark(self) -> Tensor:
        if self._mark is None:
            self._mark = torch.full((max(self.n_ids, 1),), -1, dtype=torch.int64)
        return self._mark


def unique_ids(ids: Tensor, marks: IdMarks) -> tuple[Tensor, Tensor]:
    """The distinct ids of a batch and each position's number among them: natively (order of first
    appearance) for a CPU batch, else ``torch.unique`` (sorted). ``ids`` must lie in
    ``[0, marks.n_ids)`` (the caller checks).

    Shapes: ids ``(N,)`` int64 -> uniq ``(U,)``, inverse ``(N,)``
    """
    if ids.device.type == "cpu" and native.available():
        ids = ids.contiguous()
        with marks.lock:
            return native.unique_first(ids, marks.mark())
    return torch.unique(ids, return_inverse=True)


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        ctx.n_rows = rows.shape[0]
        return native.gather_rows(rows.contiguous(), index)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        (index,) = ctx.saved_tensors
        return native.scatter_rows(grad.contiguous(), index, ctx.n_rows), None


def gather_rows(rows: Tensor, index: Tensor) -> Tensor:
    """``rows.index_select(0, index)``, differentiable in ``rows``; on the CPU in float32/64 with the
    native kernels loaded, gathered and (backward) summed by them (module docstring).

    Shapes: rows ``(U, D)``, index ``(N,)`` int64 in ``[0, U)`` -> ``(N, D)``
    """
    if rows.dim() == 2 and native.usable(rows) and index.device.type == "cpu":
        return _GatherRows.apply(rows, index.contiguous())
    return rows.index_select(0, index)
