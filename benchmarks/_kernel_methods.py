"""Methods compared by ``benchmarks/kernel.py``; each runs in its own process (see ``kernel.py --worker``).

(a) ``paper``: faithful re-implementation of the original slice loop, plain autograd.
(b) ``torchhd``: torchhd HRR ``bind`` of every edge pair, then ``index_add`` (PyPI ``torch-hd``).
(c) ``ours``: ``hrr_kernel.compose`` (relation-atom pair table, explicit adjoints, pooled buffers).
(d) ``spectral``: ``compose_spectrum`` of every concept, the half spectrum as its real view ``(N, 2F)``
without the final ``irfft`` (and, backward, without the gradient's ``rfft``): the matrix work of an MLM
step on the spectral path (``HRRBertSettings.spectral_decoder``).
(e) ``batch_rows``: the rows of one fine-tuning batch of ``BATCH x SEQ`` codes, as
``HRREmbedding.forward`` composes them: the distinct ids (``hrr_kernel.lookup.unique_ids``),
``compose(rows=unique)``, then ``gather_rows(inverse)`` back to the batch's order (natively on the CPU,
whose backward sums each row's positions on one thread; else ``torch.unique`` and ``index_select``).
The ids are drawn Zipf-like (:func:`batch_ids`).
(e') ``batch_rows_sparse``: (e) with the atoms' gradient sparse (only the atoms the batch reads, as
``HRREmbedding.sparse_grads`` trains them): no dense ``(A, D)`` gradient is zeroed and written.
(e'') ``batch_rows_spectral``: (e') with the atoms and relations given as half spectra
(``--spectral-atoms``): no transform of the atoms either way, only the rows' inverse transform.
(f) ``spectral_atoms``: (d) with the atoms and relations given as half spectra (``--spectral-atoms``):
no Fourier transform left, forward or backward, only the pair table and the sparse product.
``fft_floor``: only the unavoidable transforms, rfft of the atoms and irfft of the concepts, into reused
buffers (forward), and the same again for backward.

:func:`measure` runs on the CPU (peak extra resident memory) or on a CUDA device (synchronised timings,
peak extra GPU memory).

Dimension legend: N concepts, A atoms, R relations, E edges, D dimension, F = D // 2 + 1, B batch rows.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import Tensor

from hrr_kernel import compose
from hrr_kernel.composer import compose_spectrum
from hrr_kernel.embedding import INIT_STD  # the parameters' scale in training (N(0, 0.02))
from hrr_kernel.lookup import IdMarks, gather_rows, unique_ids
from hrr_kernel.program import Program

# (e): one fine-tuning batch, 32 sequences of 128 codes (the paper's max_len)
BATCH, SEQ = 32, 128
# Zipf exponent of the batch's code frequencies: rank k drawn with P ~ 1 / k^s (s = 1: a few codes in
# most visits, a long tail of rare ones, as in claims and EHR data)
ZIPF_S = 1.0


def rss_kib() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM", "VmRSS")):
                key, val = line.split(":")
                out[key] = int(val.split()[0])
    return out


def reset_peak() -> bool:
    """Reset this process's peak resident memory (VmHWM); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # proc(5): "5" resets the peak RSS
        return True
    except OSError:
        return False


def paper_method(program: Program, dim: int):
    """The original composer: rfft atoms, loop over (relation, slot) slices, irfft (with n=D)."""
    slices = [
        (int(j), program.edge_concept[s : s + n], program.edge_atom[s : s + n])
        for j, s, n in zip(
            program.slice_relation.tolist(),
            program.slice_start.tolist(),
            program.slice_length.tolist(),
            strict=True,
        )
    ]

    def run(atoms, relations):
        d = atoms.shape[1]
        a_hat = torch.fft.rfft(atoms, dim=1)  # (A, F)
        r_hat = torch.fft.rfft(relations, dim=1)  # (R, F)
        c_hat = torch.zeros(program.n_concepts, d // 2 + 1, dtype=a_hat.dtype, device=a_hat.device)  # (N, F)
        for j, dest, src in slices:
            c_hat[dest] += r_hat[j] * a_hat[src]
        return torch.fft.irfft(c_hat, n=d, dim=1)  # (N, D)

    return run


def torchhd_method(program: Program, dim: int):
    import torchhd
    from torchhd.tensors.hrr import HRRTensor

    ec, er, ea = program.edge_concept, program.edge_relation, program.edge_atom

    def run(atoms, relations):
        bound = torchhd.bind(atoms[ea].as_subclass(HRRTensor), relations[er].as_subclass(HRRTensor))  # (E, D)
        out = torch.zeros(
            program.n_concepts, atoms.shape[1], dtype=atoms.dtype, device=atoms.device
        )  # (N, D)
        return out.index_add(0, ec, bound.as_subclass(torch.Tensor))

    return run


def ours_method(program: Program, dim: int):
    def run(atoms, relations):
        return compose(program, atoms, relations)

    return run


def spectral_method(program: Program, dim: int):
    def run(atoms, relations):
        return compose_spectrum(program, atoms, relations)  # (N, 2F)

    return run


def spectral_atoms_method(program: Program, dim: int):
    """``compose_spectrum`` with the atoms and relations given as half spectra (``--spectral-atoms``):
    no Fourier transform left, forward or backward."""

    def run(atoms, relations):
        return compose_spectrum(program, atoms, relations, dim=dim)  # (N, 2F)

    return run


def batch_ids(n_concepts: int, n: int = BATCH * SEQ, seed: int = 0, s: float = ZIPF_S) -> torch.Tensor:
    """``n`` concept ids drawn Zipf-like: a seeded random ranking of ``0..n_concepts-1``, rank ``k``
    drawn with probability proportional to ``1 / k^s`` (``s = 0``: uniform). ``(n,)`` int64."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, n_concepts + 1, dtype=np.float64) ** s
    ranks = rng.choice(n_concepts, size=n, p=w / w.sum())
    return torch.from_numpy(rng.permutation(n_concepts)[ranks].astype(np.int64))


def batch_rows_method(
    program: Program, dim: int, seed: int = 0, sparse: bool = False, spectral_atoms: bool = False
):
    """One batch's rows, the way ``HRREmbedding.forward`` composes them (distinct ids, compose, gather);
    ``sparse``: the atoms' gradient sparse, only the rows read (``HRREmbedding.sparse_grads``);
    ``spectral_atoms``: atoms and relations given as half spectra (``--spectral-atoms``: no transform of
    the atoms, forward or backward; the rows' inverse transform stays)."""
    ids = batch_ids(program.n_concepts, seed=seed).to(program.device)  # (B,)
    spectral_dim = dim if spectral_atoms else None
    marks = IdMarks(program.n_concepts)

    def run(atoms, relations):
        uniq, inv = unique_ids(ids, marks)  # (U,), (B,)
        rows = compose(program, atoms, relations, rows=uniq, sparse_grad=sparse, dim=spectral_dim)  # (U, D)
        return gather_rows(rows, inv)  # (B, D)

    run.ids = ids
    return run


def batch_rows_sparse_method(program: Program, dim: int, seed: int = 0):
    """:func:`batch_rows_method` with the sparse atom gradient."""
    return batch_rows_method(program, dim, seed, sparse=True)


def batch_rows_spectral_method(program: Program, dim: int, seed: int = 0):
    """:func:`batch_rows_method` with the sparse atom gradient and the atoms as half spectra."""
    return batch_rows_method(program, dim, seed, sparse=True, spectral_atoms=True)


def fft_floor_method(program: Program, dim: int):
    bufs: dict[str, torch.Tensor] = {}

    def run(atoms, relations):
        d, f = atoms.shape[1], atoms.shape[1] // 2 + 1
        dev = atoms.device
        a_hat = bufs.setdefault("a", torch.empty(atoms.shape[0], f, dtype=torch.complex64, device=dev))
        c = bufs.setdefault("c", torch.empty(program.n_concepts, d, device=dev))
        with torch.no_grad():
            torch.fft.rfft(atoms, dim=1, out=a_hat)
            c_hat = bufs.setdefault(
                "ch", torch.zeros(program.n_concepts, f, dtype=torch.complex64, device=dev)
            )
            torch.fft.irfft(c_hat, n=d, dim=1, out=c)
        return _FloorOut.apply(atoms, c, bufs)

    return run


class _FloorOut(torch.autograd.Function):
    """Backward floor: rfft of the incoming gradient, irfft into the atoms' gradient."""

    @staticmethod
    def forward(ctx, atoms, c, bufs):
        ctx.bufs, ctx.shape = bufs, atoms.shape
        return c.view_as(c)

    @staticmethod
    def backward(ctx, grad):
        bufs, dev = ctx.bufs, grad.device
        g_hat = bufs.setdefault(
            "gh", torch.empty(grad.shape[0], grad.shape[1] // 2 + 1, dtype=torch.complex64, device=dev)
        )
        torch.fft.rfft(grad, dim=1, out=g_hat)
        ga_hat = bufs.setdefault(
            "gah", torch.zeros(ctx.shape[0], ctx.shape[1] // 2 + 1, dtype=torch.complex64, device=dev)
        )
        ga = torch.fft.irfft(ga_hat, n=ctx.shape[1], dim=1)
        return ga, None, None


METHODS = {
    "paper": paper_method,
    "torchhd": torchhd_method,
    "ours": ours_method,
    "spectral": spectral_method,
    "spectral_atoms": spectral_atoms_method,
    "batch_rows": batch_rows_method,
    "batch_rows_sparse": batch_rows_sparse_method,
    "batch_rows_spectral": batch_rows_spectral_method,
    "fft_floor": fft_floor_method,
}


def output_shape(program: Program, method: str, dim: int) -> tuple[int, int]:
    """The shape of a method's output (and so of the gradient fed to its backward)."""
    rows = BATCH * SEQ if method.startswith("batch_rows") else program.n_concepts
    return rows, 2 * (dim // 2 + 1) if method in ("spectral", "spectral_atoms") else dim


def _median(ts: list[float]) -> float:
    ts = sorted(ts)
    mid = len(ts) // 2
    return ts[mid] if len(ts) % 2 else (ts[mid - 1] + ts[mid]) / 2


def _parameters(program: Program, method: str, dim: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Atoms and relations N(0, INIT_STD) as leaves; for ``spectral_atoms`` their half spectra (real view
    ``(n, 2F)``), which are then the parameters."""
    atoms = torch.randn(program.n_atoms, dim, device=device) * INIT_STD
    relations = torch.randn(program.n_relations, dim, device=device) * INIT_STD
    if method in ("spectral_atoms", "batch_rows_spectral"):
        atoms, relations = (
            torch.view_as_real(torch.fft.rfft(x, dim=1)).reshape(x.shape[0], -1) for x in (atoms, relations)
        )
    return atoms.requires_grad_(), relations.requires_grad_()


def _timed(fn, warmup: int, reps: int, sync) -> list[float]:
    """Seconds of ``reps`` synchronised calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        r = fn()
        sync()
        ts.append(time.perf_counter() - t0)
        del r
    return ts


def measure(
    program: Program,
    method: str,
    dim: int,
    reps: int,
    warmup: int,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict:
    """Median forward and forward+backward times (ms) and peak extra memory (MiB).

    On the CPU the memory is resident memory (VmHWM above the RSS after setup); on a CUDA device it is
    GPU memory (``torch.cuda.max_memory_allocated`` above the memory allocated after setup), and every
    timing is synchronised. The program is moved to ``device`` if it was loaded elsewhere.
    """
    device = torch.device(device)
    cuda = device.type == "cuda"
    if cuda and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if program.edge_concept.device != device:
        program = program.to(device)
    torch.manual_seed(seed)
    atoms, relations = _parameters(program, method, dim, device)
    grad_out = torch.randn(*output_shape(program, method, dim), device=device)
    run = METHODS[method](program, dim)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    sync()
    if cuda:
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        peak_ok = True
    else:
        base = rss_kib()["VmRSS"] * 1024
        peak_ok = reset_peak()

    def fwd_bwd():
        atoms.grad = relations.grad = None
        run(atoms, relations).backward(grad_out)

    times = {}
    for name, fn in (("forward", lambda: run(atoms, relations)), ("forward_backward", fwd_bwd)):
        ts = _timed(fn, warmup, reps, sync)
        times[name] = 1e3 * _median(ts)
        times[name + "_all"] = [round(1e3 * t, 3 if cuda else 2) for t in sorted(ts)]
    sync()
    peak = torch.cuda.max_memory_allocated(device) if cuda else rss_kib()["VmHWM"] * 1024
    out = {
        "method": method,
        **times,
        "peak_extra_mib": (peak - base) / 2**20 if peak_ok else float("nan"),
        "memory": "gpu" if cuda else "rss",
        "device": str(device),
        "threads": torch.get_num_threads(),
        "output_shape": list(grad_out.shape),
        "grad_shapes": [None if x.grad is None else list(x.grad.shape) for x in (atoms, relations)],
    }
    if method.startswith("batch_rows"):
        out["rows"] = int(run.ids.numel())
        out["distinct_rows"] = int(torch.unique(run.ids).numel())
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(device)
    return out
