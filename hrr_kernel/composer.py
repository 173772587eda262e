"""The composer: build the HRR concept matrix (or selected rows) with explicit adjoints.

Forward (see :mod:`hrr_kernel.plan` for M, Q, row_map)::

    A_hat = rfft(atoms)                      # (A, F)
    B[u]  = A_hat[atom(u)] * R_hat[rel(u)]   # (P, F), per relation span, R_hat = rfft(relations)
    C_hat = M @ B                            # (U, F), sparse × dense on the real view (U, 2F)
    C     = irfft(C_hat, n=D)[row_map]       # (N, D)

Backward, with G = dL/dC: the adjoint of ``irfft(·, n=D)`` composed with ``rfft`` on the other side
cancels exactly (both only rescale the non-self-conjugate bins, in opposite directions), so::

    G_hat  = rfft(Σ_{i: row_map(i)=u} G[i])             # (U, F)
    gB     = Mᵀ @ G_hat                                 # (P, F)
    gR_hat[j] = Σ_{u ∈ j} conj(A_hat[atom(u)]) * gB[u]  # (R, F)
    gA_hat = Q @ (conj(R_hat[rel(u)]) * gB[u])          # (A, F)
    gA, gR = irfft(gA_hat, n=D), irfft(gR_hat, n=D)     # circular correlations

so backward costs about what forward costs. Scratch buffers come from the program's
:class:`~hrr_kernel.plan.Workspace` and are reused across steps.

Spectral output (:func:`compose_spectrum`): the same forward stops before the ``irfft`` and returns the
half spectrum ``C_hat[row_map]`` as its real view ``(N, 2F)`` (real and imaginary part of each bin,
interleaved). Its adjoint starts from ``dL/dC_hat`` directly: since ``dL/dC_hat_k = (w_k / D) rfft(G)_k``
for a loss of ``C = irfft(C_hat)`` (``w_k`` = 1 at the DC and, for even ``D``, the Nyquist bin, else 2),
the backward above runs unchanged on ``G_hat = dL/dC_hat · D / w_k`` (:func:`bin_weights`), and the
``rfft`` of the gradient disappears with the forward's ``irfft``.

Sparse atom gradients (``sparse_grad=True``, for a plan of selected rows): the atoms' gradient is a
coalesced sparse COO tensor holding only the rows of the atoms those rows read (``plan.atoms_used``), so a
batch's backward writes no dense ``(A, D)`` gradient, and an optimizer that updates only those rows
(:class:`pipelines.train.sparse.LazyAdamW`) leaves the rest alone. The relations' gradient stays dense.

Native kernels (CPU, float32/64, :mod:`hrr_kernel.native`): the pair table and the sparse products above
are replaced by two fused C kernels, one that multiplies each row's entries straight into the row and one
that computes both spectral adjoints in one pass over the pairs grouped by atom; the transforms around
them stay as described. A batch's plan is then built natively too (:func:`hrr_kernel.plan.plan_rows`).

Dimension legend: N output rows, U distinct computed rows, P (relation, atom) pairs, A atoms,
R relations, D dimension, F = D // 2 + 1 frequencies.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import native
from .errors import ShapeError
from .plan import ComposePlan, Workspace

__all__ = ["compose", "compose_plan", "compose_spectrum", "bin_weights"]

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
# Pair-table work runs in blocks of this many bytes: few enough parallel regions that a busy shared CPU
# does not stall every one of them, small enough that the per-block temporaries stay cache-sized.
_CHUNK_BYTES = 16 << 20
# ... but never fewer than this many pairs per block (wide D would otherwise give tiny blocks)
_MIN_BLOCK_ROWS = 256


def _real2d(z: Tensor) -> Tensor:
    """(n, F) complex -> (n, 2F) real view."""
    return torch.view_as_real(z).view(z.shape[0], 2 * z.shape[1])


def _complex2d(x: Tensor) -> Tensor:
    """(n, 2F) real view -> (n, F) complex (a view when ``x`` is contiguous)."""
    return torch.view_as_complex(x.contiguous().view(x.shape[0], x.shape[1] // 2, 2))


def _to_input(g_hat: Tensor, d: int, spectral_in: bool, scale: Tensor | None) -> Tensor:
    """A parameter's gradient from its spectral adjoint: a fresh ``irfft`` (signal-domain parameters), or,
    for parameters given as half spectra, the real view of ``g_hat`` itself, scaled in place by ``scale``
    when given (so ``g_hat`` must not be a buffer the pool hands out again while the gradient lives)."""
    if not spectral_in:
        return torch.fft.irfft(g_hat, n=d, dim=1)  # (n, D)
    if scale is not None:
        g_hat.mul_(scale)
    return _real2d(g_hat)  # (n, 2F)


def _blocks(plan: ComposePlan, f: int, elem: int):
    """``(start, end)`` ranges over the pair table, about ``_CHUNK_BYTES`` of ``(n, F)`` values each."""
    step = max(_MIN_BLOCK_ROWS, _CHUNK_BYTES // max(1, f * elem))
    for b in range(0, plan.n_pairs, step):
        yield b, min(plan.n_pairs, b + step)


def _take_block(plan: ComposePlan, ws: Workspace, like: Tensor) -> Tensor:
    """A pooled ``(n, F)`` scratch buffer, large enough for any block of :func:`_blocks`; give it back
    as ``"block"``."""
    f = like.shape[1]
    rows = min(plan.n_pairs, _CHUNK_BYTES // (f * like.element_size()) + _MIN_BLOCK_ROWS)
    return ws.take("block", (rows, f), like.dtype, like.device)


def _used_atoms(plan: ComposePlan, atoms: Tensor) -> Tensor:
    """The atom rows the plan reads: all of them, or the ``atoms_used`` subset. ``(A', D)``."""
    return atoms if plan.atoms_used is None else atoms.index_select(0, plan.atoms_used)


def _gather_bind(a_hat: Tensor, r_hat: Tensor, plan: ComposePlan, ws: Workspace, out: Tensor) -> None:
    """out[u] = a_hat[atom(u)] * r_hat[rel(u)]  (P, F)."""
    f = out.shape[1]
    tmp = _take_block(plan, ws, out)
    for s, e in _blocks(plan, f, out.element_size()):
        blk, rel = out[s:e], tmp[: e - s]  # (n, F)
        torch.index_select(a_hat, 0, plan.pair_atom[s:e], out=blk)
        torch.index_select(r_hat, 0, plan.pair_relation[s:e], out=rel)
        blk.mul_(rel)
    ws.give("block", tmp)


def _relation_grads(a_hat: Tensor, gb: Tensor, plan: ComposePlan, ws: Workspace, gr_hat: Tensor) -> None:
    """gr_hat[j] += Σ_{u ∈ j} conj(a_hat[atom(u)]) * gb[u]."""
    f = gb.shape[1]
    tmp = _take_block(plan, ws, gb)
    for s, e in _blocks(plan, f, gb.element_size()):
        blk = tmp[: e - s]  # (n, F)
        torch.index_select(a_hat, 0, plan.pair_atom[s:e], out=blk)
        blk.conj_physical_().mul_(gb[s:e])
        gr_hat.index_add_(0, plan.pair_relation[s:e], blk)
    ws.give("block", tmp)


def _scale_by_conj_relation(gb: Tensor, r_hat: Tensor, plan: ComposePlan, ws: Workspace) -> None:
    """gb[u] *= conj(r_hat[rel(u)]) in place."""
    f = gb.shape[1]
    tmp = _take_block(plan, ws, gb)
    r_conj = r_hat.conj_physical()  # (R, F)
    for s, e in _blocks(plan, f, gb.element_size()):
        rel = tmp[: e - s]
        torch.index_select(r_conj, 0, plan.pair_relation[s:e], out=rel)
        gb[s:e].mul_(rel)
    ws.give("block", tmp)


def bin_weights(d: int, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """``w_k`` of the half spectrum of a real length-``d`` signal: 1 at the DC bin and (even ``d``) the
    Nyquist bin, 2 elsewhere, so that ``<x, y> = Σ_k (w_k / d) Re(conj(X_k) Y_k)`` (Parseval).

    Shapes:
        - output: ``(F,)`` with ``F = d // 2 + 1``
    """
    w = torch.full((d // 2 + 1,), 2.0, dtype=dtype, device=device)
    w[0] = 1.0
    if d % 2 == 0:
        w[-1] = 1.0
    return w


def _fused(plan: ComposePlan, like: Tensor) -> bool:
    """Compose with the native fused kernels: float32/64 on the CPU with the kernels loaded (a natively
    built plan always; the whole matrix's plan, built by torch, serves them as well)."""
    return plan.native or native.usable(like)  # like is on the plan's device (_validate)


def _atom_gradient(plan: ComposePlan, values: Tensor, sparse: bool) -> Tensor:
    """The atoms' gradient from the values ``(A', width)`` of the atoms the plan reads: the values
    themselves when it reads every atom in order; else a coalesced sparse ``(A, width)`` tensor holding only
    those rows (``sparse``), or a dense one with zeros elsewhere."""
    if plan.atoms_used is None:
        return values
    shape = (plan.n_atoms, values.shape[1])
    if sparse:
        return torch.sparse_coo_tensor(
            plan.atoms_used.unsqueeze(0),
            values,
            shape,
            is_coalesced=True,  # atoms_used is sorted and distinct
            check_invariants=False,
        )
    out = values.new_zeros(shape)
    if values.shape[0]:
        out.index_copy_(0, plan.atoms_used, values)
    return out


def _fused_backward(ctx, a_hat: Tensor, g_hat: Tensor, scale: Tensor | None, pooled: bool):
    """The backward of a fused plan: both gradients from one native pass over the pairs. The spectral
    scale, when the inputs are half spectra, is ``2 / D`` at every bin but DC and (even ``D``) Nyquist,
    where it is ``1 / D`` (:func:`bin_weights`): those two columns of ``g_hat`` are halved and the kernel
    multiplies its products by ``2 / D`` (both gradients are linear in ``g_hat``), so no pass over the
    whole of ``g_hat`` is made. The atoms' adjoint is fresh, so a sparse or spectral gradient takes it
    without a copy. ``pooled``: ``g_hat`` came from the workspace and goes back to it."""
    plan: ComposePlan = ctx.plan
    ws: Workspace = ctx.ws
    d, spectral_in = ctx.d, ctx.spectral_inputs
    need_a, need_r = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    r_hat, cdt, dev = ctx.r_hat, a_hat.dtype, a_hat.device
    f = g_hat.shape[1]
    factor = 1.0
    if scale is not None:
        factor = 2.0 / d
        g_hat[:, 0].mul_(0.5)  # the DC bin's weight is 1, not 2
        if d % 2 == 0:
            g_hat[:, f - 1].mul_(0.5)  # so is the Nyquist bin's
    gr_hat = torch.empty_like(r_hat) if need_r else None  # (R, F)
    ga_hat = torch.empty((plan.n_atoms_used, f), dtype=cdt, device=dev) if need_a else None  # (A', F)
    atom_row = plan.atoms_used if spectral_in else None
    native.bind_rows_adjoint(
        plan.q_index, plan.mt_index, plan.pair_relation, a_hat, r_hat, g_hat, ga_hat, gr_hat, atom_row, factor
    )
    if pooled:
        ws.give("rows_hat", g_hat)
    grad_r = _to_input(gr_hat, d, spectral_in, None) if need_r else None  # (R, D) or (R, 2F)
    grad_a = None
    if need_a:
        if ga_hat.shape[0]:  # MKL refuses empty transforms
            values = _to_input(ga_hat, d, spectral_in, None)  # (A', D) or (A', 2F), fresh
        else:
            values = torch.zeros((0, 2 * f if spectral_in else d), dtype=r_hat.real.dtype, device=dev)
        grad_a = _atom_gradient(plan, values, ctx.sparse_grad)
    return grad_a, grad_r, None, None, None, None, None, None


class _Compose(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        atoms: Tensor,
        relations: Tensor,
        plan: ComposePlan,
        ws: Workspace,
        spectral: bool = False,
        spectral_inputs: bool = False,
        dim: int = 0,
        sparse_grad: bool = False,
    ) -> Tensor:
        d = dim if spectral_inputs else atoms.shape[1]
        f = d // 2 + 1
        cdt = _COMPLEX[atoms.dtype]
        dev = atoms.device
        fused = _fused(plan, atoms)
        # fused spectral inputs read the parameter's rows in place (atom_row); otherwise the used rows
        src = atoms if fused and spectral_inputs else _used_atoms(plan, atoms)  # (A' or A, D or 2F)
        if spectral_inputs:  # the half spectra are the parameters: no transform at all
            a_hat = _complex2d(src)  # (A', F), a view (of the parameter, or of the selected copy)
            r_hat = _complex2d(relations)  # (R, F)
        else:  # fresh: an FFT's out= is a fresh result copied into it, so a pooled buffer only adds a copy
            a_hat = (
                torch.fft.rfft(src, dim=1)
                if src.shape[0]  # MKL refuses empty transforms
                else torch.empty((0, f), dtype=cdt, device=dev)
            )  # (A', F)
            r_hat = torch.fft.rfft(relations, dim=1)  # (R, F)
        # a spectral output of every row in order is the product itself: fresh, not pooled
        # (the caller owns it)
        direct = spectral and plan.row_map is None
        c_hat = (
            torch.empty((plan.n_rows, f), dtype=cdt, device=dev)
            if direct
            else ws.take("rows_hat", (plan.n_rows, f), cdt, dev)
        )  # (U, F)
        if fused:  # one pass over the rows' entries, no pair table
            atom_row = plan.atoms_used if spectral_inputs else None
            native.bind_rows(plan.m_index, plan.pair_atom, plan.pair_relation, a_hat, r_hat, c_hat, atom_row)
        else:
            m, _, _ = plan.matrices(atoms.dtype)
            b = ws.take("pairs", (plan.n_pairs, f), cdt, dev)  # (P, F)
            _gather_bind(a_hat, r_hat, plan, ws, b)
            torch.addmm(_real2d(c_hat), m, _real2d(b), beta=0, out=_real2d(c_hat))
            ws.give("pairs", b)
        if direct:
            out = _real2d(c_hat)  # (N, 2F)
        elif spectral:  # (N, 2F) real view, fresh: the caller owns it
            out = _real2d(c_hat.index_select(0, plan.row_map))
        elif plan.row_map is None:
            out = torch.fft.irfft(c_hat, n=d, dim=1)  # (N, D), fresh: the caller owns it
        else:
            out = torch.fft.irfft(c_hat, n=d, dim=1).index_select(0, plan.row_map)  # (U, D) -> (N, D)
        if not direct:
            ws.give("rows_hat", c_hat)
        need_a, need_r = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if need_a or need_r:
            ctx.save_for_backward(atoms)  # version-checked: a_hat was computed from it
            ctx.plan, ctx.ws, ctx.d, ctx.spectral = plan, ws, d, spectral
            ctx.spectral_inputs, ctx.sparse_grad, ctx.fused = spectral_inputs, sparse_grad, fused
            # the atoms' spectrum (a view of the parameter for spectral inputs), held with the graph
            ctx.a_hat, ctx.r_hat = a_hat, r_hat
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        plan: ComposePlan = ctx.plan
        ws: Workspace = ctx.ws
        ctx.saved_tensors  # noqa: B018 - raises if the atoms were modified in place since the forward
        a_hat, r_hat, d = ctx.a_hat, ctx.r_hat, ctx.d
        need_a, need_r = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dtype, dev = grad.dtype, grad.device
        cdt, f = a_hat.dtype, a_hat.shape[1]
        spectral_in = ctx.spectral_inputs
        # G_hat below is rfft(dL/dC) (signal-domain inputs: the irfft at the end gives their gradient); with
        # spectral inputs the gradient is dL/dC_hat carried straight through, so scale = w / D turns an
        # rfft(dL/dC) into it, and a spectral output's gradient is used as it comes
        scale = None
        pooled = ctx.spectral  # a pooled (U, F) buffer, or a fresh transform below
        if ctx.spectral:  # dL/dC_hat -> the G_hat of a signal-domain loss (module docstring)
            g_hat = ws.take("rows_hat", (plan.n_rows, f), cdt, dev)  # (U, F)
            g = torch.view_as_complex(grad.reshape(grad.shape[0], f, 2).contiguous())  # (N, F)
            if plan.row_map is not None:
                g_hat.zero_().index_add_(0, plan.row_map, g)
            elif spectral_in:
                g_hat.copy_(g)
            if not spectral_in:  # scaled in place: no (N, F) temporary
                w = d / bin_weights(d, dtype, dev)  # (F,)
                torch.mul(g if plan.row_map is None else g_hat, w, out=g_hat)
        else:
            if plan.row_map is None:
                g_hat = torch.fft.rfft(grad.contiguous(), dim=1)  # (U, F), fresh (an out= only adds a copy)
            else:
                g_u = ws.take("rows", (plan.n_rows, d), dtype, dev).zero_()  # (U, D)
                g_u.index_add_(0, plan.row_map, grad)
                g_hat = torch.fft.rfft(g_u, dim=1)  # (U, F)
                ws.give("rows", g_u)
            if spectral_in:
                scale = bin_weights(d, dtype, dev) / d  # (F,)
        if ctx.fused:  # the backward of the path the forward took
            return _fused_backward(ctx, a_hat, g_hat, scale, pooled)
        _, mt, q = plan.matrices(dtype)
        gb = ws.take("pairs", (plan.n_pairs, f), cdt, dev)  # (P, F)
        torch.addmm(_real2d(gb), mt, _real2d(g_hat), beta=0, out=_real2d(gb))
        if pooled:
            ws.give("rows_hat", g_hat)
        grad_r = grad_a = None
        if need_r:
            gr_hat = torch.zeros_like(r_hat)  # (R, F)
            _relation_grads(a_hat, gb, plan, ws, gr_hat)
            grad_r = _to_input(gr_hat, d, spectral_in, scale)  # (R, D) or (R, 2F)
        if need_a:
            _scale_by_conj_relation(gb, r_hat, plan, ws)
            # spectral inputs, every atom: the adjoint is the gradient itself (fresh, scaled in place)
            own = spectral_in and plan.atoms_used is None
            shape = (plan.n_atoms_used, f)
            ga_hat = (
                torch.empty(shape, dtype=cdt, device=dev) if own else ws.take("atoms_hat", shape, cdt, dev)
            )
            torch.addmm(_real2d(ga_hat), q, _real2d(gb), beta=0, out=_real2d(ga_hat))  # (A', F)
            if plan.atoms_used is None:  # a fresh irfft, or (own) the adjoint itself
                grad_a = _to_input(ga_hat, d, spectral_in, scale)  # (A, D) or (A, 2F)
            elif ga_hat.shape[0]:  # (A', D) fresh, or (A', 2F) pooled: a sparse gradient keeps a copy
                values = _to_input(ga_hat, d, spectral_in, scale)
                grad_a = _atom_gradient(
                    plan, values.clone() if spectral_in and ctx.sparse_grad else values, ctx.sparse_grad
                )
            else:
                values = torch.zeros((0, 2 * f if spectral_in else d), dtype=dtype, device=dev)
                grad_a = _atom_gradient(plan, values, ctx.sparse_grad)
            if not own:
                ws.give("atoms_hat", ga_hat)
        ws.give("pairs", gb)
        return grad_a, grad_r, None, None, None, None, None, None


def _validate(plan: ComposePlan, atoms: Tensor, relations: Tensor, dim: int | None) -> None:
    """Shapes, dtypes and devices; ``dim``: the signal dimension D when the inputs are half spectra."""
    for name, x, n in (("atoms", atoms, plan.n_atoms), ("relations", relations, plan.n_relations)):
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ShapeError(
                f"{name} must be a 2-D tensor ({n}, {'2F' if dim else 'D'}), got shape "
                f"{tuple(getattr(x, 'shape', ()))}"
            )
        if x.shape[0] != n:
            raise ShapeError(f"{name} must have {n} rows (the program's count), got {x.shape[0]}")
        if x.dtype not in _COMPLEX:
            raise ShapeError(f"{name} must be float32 or float64, got {x.dtype}")
    if atoms.shape[1] != relations.shape[1]:
        what = "width " if dim else "D="
        raise ShapeError(f"atoms have {what}{atoms.shape[1]} but relations have {what}{relations.shape[1]}")
    if dim is not None:
        if not isinstance(dim, int) or dim < 1:
            raise ShapeError(f"dim must be an int >= 1 for half-spectrum inputs, got {dim!r}")
        if atoms.shape[1] != 2 * (dim // 2 + 1):
            raise ShapeError(
                f"half-spectrum inputs of D={dim} must be (n, {2 * (dim // 2 + 1)}) real views, "
                f"got width {atoms.shape[1]}"
            )
    elif atoms.shape[1] < 1:
        raise ShapeError(f"D must be at least 1, got {atoms.shape[1]}")
    if atoms.dtype != relations.dtype:
        raise ShapeError(f"atoms are {atoms.dtype} but relations are {relations.dtype}")
    if atoms.device != relations.device or atoms.device != plan.pair_atom.device:
        raise ShapeError(
            f"devices differ: atoms on {atoms.device}, relations on {relations.device}, program on "
            f"{plan.pair_atom.device}"
        )


def compose_plan(
    plan: ComposePlan,
    atoms: Tensor,
    relations: Tensor,
    workspace: Workspace | None = None,
    *,
    spectral: bool = False,
    dim: int | None = None,
    sparse_grad: bool = False,
) -> Tensor:
    """Compose the rows a plan describes (see :func:`compose`; ``spectral``: :func:`compose_spectrum`;
    ``dim``: the inputs are half spectra of signals of this dimension, see :func:`compose`;
    ``sparse_grad``: a plan of selected rows gives the atoms a sparse gradient, module docstring)."""
    _validate(plan, atoms, relations, dim)
    ws = workspace if workspace is not None else Workspace()
    d = atoms.shape[1] if dim is None else dim
    if plan.n_out == 0:
        width = 2 * (d // 2 + 1) if spectral else d
        return atoms.new_zeros((0, width)) + atoms.sum() * 0  # (0, width), still attached to the graph
    return _Compose.apply(
        atoms.contiguous(), relations.contiguous(), plan, ws, spectral, dim is not None, d, sparse_grad
    )


def compose(
    program,
    atoms: Tensor,
    relations: Tensor,
    rows: Tensor | None = None,
    *,
    dim: int | None = None,
    sparse_grad: bool = False,
) -> Tensor:
    """The HRR concept matrix ``C[i] = Σ_{(j,k) ∈ G_i} r_j ⊛ a_k`` of a loaded program.

    Differentiable in ``atoms`` and ``relations`` (custom backward with explicit adjoints); float32 or
    float64; any device the program was loaded on. Concepts without edges give zero rows.

    ``dim``: when given, ``atoms`` and ``relations`` are the half spectra ``rfft(x)`` of signals of that
    dimension, as real views ``(n, 2F)`` (see :func:`compose_spectrum` for the layout), and their
    gradients come back in the same layout (``dL/dRe``, ``dL/dIm`` of each bin); the ``rfft`` of the
    atoms (and the ``irfft`` of their gradients) is then skipped. The imaginary parts of the DC and (even
    ``D``) Nyquist bins of a real signal are zero; inputs that keep them zero give the composition of
    the signals ``irfft(x)``, and the gradient keeps them zero.

    ``sparse_grad``: with ``rows``, the atoms' gradient is sparse, holding only the atoms those rows read
    (module docstring); the full matrix (``rows`` None) reads every atom and keeps a dense gradient.

    Shapes:
        - atoms: ``(A, D)`` or, with ``dim``, ``(A, 2F)``; relations: ``(R, D)`` or ``(R, 2F)``
        - rows: ``(N,)`` concept ids (any order, repeats allowed) or None for all concepts
        - output: ``(N, D)`` (``N = n_concepts`` when ``rows`` is None)
    """
    plan = program.plan_for(rows)
    return compose_plan(plan, atoms, relations, program.workspace, dim=dim, sparse_grad=sparse_grad)


def compose_spectrum(
    program, atoms: Tensor, relations: Tensor, rows: Tensor | None = None, *, dim: int | None = None
) -> Tensor:
    """The half spectrum ``rfft(C, dim=1)`` of :func:`compose`'s rows, as its real view, without the
    ``irfft``: what a decoder that works in the spectral domain reads (``<h, C[i]>`` is
    ``(rfft(h) weighted by bin_weights / D) · C_hat[i]`` on the real views; Parseval).

    Differentiable in ``atoms`` and ``relations`` with the same explicit adjoints as :func:`compose`.
    With ``dim`` the inputs are half spectra too (see :func:`compose`): neither an ``rfft`` nor an
    ``irfft`` is left, forward or backward, only the sparse product.

    Shapes:
        - atoms: ``(A, D)`` or ``(A, 2F)``; relations: ``(R, D)`` or ``(R, 2F)``; rows: ``(N,)`` or None
        - output: ``(N, 2F)``, ``F = D // 2 + 1``: ``[Re C_hat_0, Im C_hat_0, Re C_hat_1, ...]`` per row
    """
    plan = program.plan_for(rows)
    return compose_plan(plan, atoms, relations, program.workspace, spectral=True, dim=dim)
