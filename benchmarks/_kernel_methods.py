"""Methods compared by ``benchmarks/kernel.py``; each runs in its own process (see ``kernel.py --worker``).

(a) ``paper``: faithful re-implementation of the original slice loop, plain autograd.
(b) ``torchhd``: torchhd HRR ``bind`` of every edge pair, then ``index_add`` (PyPI ``torch-hd``).
(c) ``ours``: ``hrr_kernel.compose`` (relation-atom pair table, explicit adjoints, pooled buffers).
``fft_floor``: only the unavoidable transforms, rfft of the atoms and irfft of the concepts, into reused
buffers (forward), and the same again for backward.

Dimension legend: N concepts, A atoms, R relations, E edges, D dimension, F = D // 2 + 1.
"""

from __future__ import annotations

import time

import torch

from hrr_kernel import compose
from hrr_kernel.embedding import INIT_STD  # the parameters' scale in training (N(0, 0.02))
from hrr_kernel.program import Program


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


def paper_method(program: Program):
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
        c_hat = torch.zeros(program.n_concepts, d // 2 + 1, dtype=a_hat.dtype)  # (N, F)
        for j, dest, src in slices:
            c_hat[dest] += r_hat[j] * a_hat[src]
        return torch.fft.irfft(c_hat, n=d, dim=1)  # (N, D)

    return run


def torchhd_method(program: Program):
    import torchhd
    from torchhd.tensors.hrr import HRRTensor

    ec, er, ea = program.edge_concept, program.edge_relation, program.edge_atom

    def run(atoms, relations):
        bound = torchhd.bind(atoms[ea].as_subclass(HRRTensor), relations[er].as_subclass(HRRTensor))  # (E, D)
        out = torch.zeros(program.n_concepts, atoms.shape[1], dtype=atoms.dtype)  # (N, D)
        return out.index_add(0, ec, bound.as_subclass(torch.Tensor))

    return run


def ours_method(program: Program):
    def run(atoms, relations):
        return compose(program, atoms, relations)

    return run


def fft_floor_method(program: Program):
    bufs: dict[str, torch.Tensor] = {}

    def run(atoms, relations):
        d, f = atoms.shape[1], atoms.shape[1] // 2 + 1
        a_hat = bufs.setdefault("a", torch.empty(atoms.shape[0], f, dtype=torch.complex64))
        c = bufs.setdefault("c", torch.empty(program.n_concepts, d))
        with torch.no_grad():
            torch.fft.rfft(atoms, dim=1, out=a_hat)
            c_hat = bufs.setdefault("ch", torch.zeros(program.n_concepts, f, dtype=torch.complex64))
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
        bufs = ctx.bufs
        g_hat = bufs.setdefault(
            "gh", torch.empty(grad.shape[0], grad.shape[1] // 2 + 1, dtype=torch.complex64)
        )
        torch.fft.rfft(grad, dim=1, out=g_hat)
        ga_hat = bufs.setdefault(
            "gah", torch.zeros(ctx.shape[0], ctx.shape[1] // 2 + 1, dtype=torch.complex64)
        )
        ga = torch.fft.irfft(ga_hat, n=ctx.shape[1], dim=1)
        return ga, None, None


METHODS = {
    "paper": paper_method,
    "torchhd": torchhd_method,
    "ours": ours_method,
    "fft_floor": fft_floor_method,
}


def measure(program: Program, method: str, dim: int, reps: int, warmup: int, seed: int = 0) -> dict:
    """Median forward and forward+backward times (ms) and peak extra resident memory (MiB)."""
    torch.manual_seed(seed)
    atoms = (torch.randn(program.n_atoms, dim) * INIT_STD).requires_grad_()
    relations = (torch.randn(program.n_relations, dim) * INIT_STD).requires_grad_()
    grad_out = torch.randn(program.n_concepts, dim)
    run = METHODS[method](program)
    base = rss_kib()["VmRSS"]
    peak_ok = reset_peak()

    def fwd():
        return run(atoms, relations)

    def fwd_bwd():
        atoms.grad = relations.grad = None
        out = run(atoms, relations)
        out.backward(grad_out)

    times = {}
    for name, fn in (("forward", fwd), ("forward_backward", fwd_bwd)):
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            r = fn()
            ts.append(time.perf_counter() - t0)
            del r
        ts.sort()
        times[name] = (
            1e3 * ts[len(ts) // 2] if len(ts) % 2 else 1e3 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2]) / 2
        )
        times[name + "_all"] = [round(1e3 * t, 1) for t in ts]
    peak = rss_kib()["VmHWM"]
    return {
        "method": method,
        **times,
        "peak_extra_mib": (peak - base) / 1024 if peak_ok else float("nan"),
        "threads": torch.get_num_threads(),
    }
