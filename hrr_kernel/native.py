"""Native CPU kernels for plans of selected rows: the fused bind of a batch's rows and its plan.

The torch path of :mod:`hrr_kernel.composer` writes a ``(P, F)`` pair table forward and backward and
builds a batch's plan with five sorts. For the rows of one batch (a few thousand codes) that bookkeeping
costs several times the arithmetic; the C sources in ``hrr_kernel/_native/`` do the same work in one pass
over the batch's count-matrix entries:

- ``hrr_bind_rows``: ``C_hat[u] = Σ_e val[e] · A_hat[atom(e)] · R_hat[rel(e)]``, nothing written but the
  rows;
- ``hrr_bind_rows_adjoint``: the atoms' and relations' spectral gradients in one pass;

the forward kernel gives each thread whole rows; the adjoint gives each thread whole atoms (their pairs,
and the rows each pair feeds) and sums the relations' gradient in per-thread buffers;
- ``hrr_plan_select`` / ``hrr_plan_build``: a batch's plan in time linear in its entries (mark arrays
  instead of sorts; only the used atoms are sorted, by a radix sort);
- ``hrr_unique_first``, ``hrr_gather_rows``, ``hrr_scatter_rows`` (``lookup.c``): an embedding lookup's
  distinct ids (a mark array, no sort), the gather of their rows to the batch's positions, and its
  adjoint, each row's positions summed by one thread (:mod:`hrr_kernel.lookup`).

The library is compiled on first use with the system C compiler (``$CC``, else ``cc``; about a second)
into ``$HRRBERT_NATIVE_CACHE`` (default ``~/.cache/hrrbert/native``), under a name that hashes the
sources, the compiler, the flags and the CPU, written to a temporary file and renamed, so concurrent
first uses are safe. ``HRRBERT_NATIVE=0`` turns it off; without a compiler, or when the build fails, the
torch path runs and :func:`status` says why. Results agree with the torch path to rounding (tests).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor

__all__ = [
    "available",
    "status",
    "usable",
    "disabled",
    "bind_rows",
    "bind_rows_adjoint",
    "plan_select",
    "plan_build",
    "unique_first",
    "gather_rows",
    "scatter_rows",
]

SOURCES = Path(__file__).resolve().parent / "_native"
_FILES = ("compose.c", "bind_impl.h", "plan.c", "lookup.c")
_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c11") + (
    # x86 compilers' own loops at the full AVX-512 width where the CPU has it (an x86-only option)
    ("-mprefer-vector-width=512",) if platform.machine().lower() in ("x86_64", "amd64") else ()
)
_ABI = 5
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}

_lock = threading.Lock()
_state: dict = {"lib": None, "why": None, "tried": False}


def _cache_dir() -> Path:
    env = os.environ.get("HRRBERT_NATIVE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "hrrbert" / "native"


def _cpu_key() -> str:
    """What -march=native depends on: the CPU's model and flags (Linux), else the platform."""
    try:
        with open("/proc/cpuinfo") as f:
            keep = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return "".join(keep) or platform.processor()
    except OSError:
        return platform.processor() + platform.machine()


def _compiler() -> str | None:
    cc = os.environ.get("CC", "cc")
    return shutil.which(cc)


def _build(cc: str) -> Path:
    """Compile the sources (once per hash) and return the library's path."""
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False).stdout
    h = hashlib.sha256()
    for name in _FILES:
        h.update((SOURCES / name).read_bytes())
    h.update("\0".join((version, *_FLAGS, _cpu_key(), str(_ABI))).encode())
    target = _cache_dir() / f"hrr_native-{h.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        cmd = [
            cc,
            *_FLAGS,
            "-I",
            str(SOURCES),
            str(SOURCES / "compose.c"),
            str(SOURCES / "plan.c"),
            str(SOURCES / "lookup.c"),
            "-o",
            tmp,
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {(res.stderr or res.stdout).strip()[-400:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    for suf in _SUFFIX.values():
        f = getattr(lib, f"hrr_bind_rows_{suf}")
        f.argtypes, f.restype = [i64, i64, p, p, p, p, p, p, p, p, p, c_int], c_int
        f = getattr(lib, f"hrr_bind_rows_adjoint_{suf}")
        real = ctypes.c_float if suf == "f32" else ctypes.c_double
        f.argtypes, f.restype = [i64, i64, i64, p, p, p, p, p, p, p, p, p, p, p, p, real, c_int], c_int
    lib.hrr_plan_select.argtypes, lib.hrr_plan_select.restype = [i64, p, p, p, p, p, p, p], i64
    lib.hrr_plan_build.argtypes, lib.hrr_plan_build.restype = [i64, i64] + [p] * 21, None
    lib.hrr_native_abi.argtypes, lib.hrr_native_abi.restype = [], c_int
    lib.hrr_unique_first.argtypes, lib.hrr_unique_first.restype = [i64, p, p, p, p], i64
    lib.hrr_gather_rows.argtypes, lib.hrr_gather_rows.restype = [i64, i64, p, p, p, c_int], None
    for suf in _SUFFIX.values():
        f = getattr(lib, f"hrr_scatter_rows_{suf}")
        f.argtypes, f.restype = [i64, i64, i64, p, p, p, c_int], c_int


def _load():
    """The library, built and loaded on first call; None (with the reason in ``status()``) if not."""
    if _state["tried"]:
        return _state["lib"]
    with _lock:
        if _state["tried"]:
            return _state["lib"]
        try:
            if os.environ.get("HRRBERT_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
                raise RuntimeError("turned off by HRRBERT_NATIVE")
            cc = _compiler()
            if cc is None:
                raise RuntimeError(f"no C compiler ({os.environ.get('CC', 'cc')!r} not on PATH)")
            lib = ctypes.CDLL(str(_build(cc)))
            _declare(lib)
            if lib.hrr_native_abi() != _ABI:
                raise RuntimeError("the compiled library's ABI does not match this module")
            _state["lib"], _state["why"] = lib, None
        except (OSError, RuntimeError) as exc:
            _state["lib"], _state["why"] = None, str(exc)
        _state["tried"] = True
    return _state["lib"]


def available() -> bool:
    """Whether the native kernels are loaded (building them on first call)."""
    return _load() is not None


def status() -> str:
    """One line: the library in use, or why the torch path runs instead."""
    lib = _load()
    return f"native kernels: {lib._name}" if lib is not None else f"native kernels off: {_state['why']}"


@contextmanager
def disabled() -> Iterator[None]:
    """Inside the block the torch path runs (plans built inside it are torch plans, and compose them
    on the torch path wherever they are used): for comparisons and benchmarks in one process."""
    _load()
    saved = dict(_state)
    _state.update(lib=None, why="disabled by hrr_kernel.native.disabled()", tried=True)
    try:
        yield
    finally:
        _state.clear()
        _state.update(saved)


def usable(*tensors: Tensor) -> bool:
    """The native kernels apply: loaded, and every tensor on the CPU in float32 or float64 (complex
    tensors are judged by their real type)."""
    if not tensors or any(t.device.type != "cpu" for t in tensors):
        return False
    real = {_real_dtype(t) for t in tensors}
    return len(real) == 1 and real.pop() in _SUFFIX and available()


def _ptr(t: Tensor | None):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _check(*tensors: Tensor | None) -> None:
    for t in tensors:
        if t is not None and not t.is_contiguous():
            raise ValueError("native kernels need contiguous tensors")


def _real_dtype(t: Tensor) -> torch.dtype:
    return t.real.dtype if t.is_complex() else t.dtype


def bind_rows(
    m_index: tuple[Tensor, Tensor, Tensor],
    pair_atom: Tensor,
    pair_rel: Tensor,
    a_hat: Tensor,
    r_hat: Tensor,
    out: Tensor,
    atom_row: Tensor | None = None,
) -> Tensor:
    """``out[u] = Σ_{entries (u, p)} val · a_hat[atom(p)] · r_hat[rel(p)]`` (complex, overwritten); a
    run of a row's entries under one relation is summed before its one product with the relation.

    Shapes:
        - m_index: crow ``(U + 1,)``, col ``(nnz,)``, val ``(nnz,)`` float64 (``M``, columns index pairs)
        - pair_atom, pair_rel: ``(P,)`` int64, each pair's used atom and relation
        - a_hat: ``(A, F)`` complex, used atom ``i`` in row ``atom_row[i]`` (or row ``i`` when
          ``atom_row`` is None); r_hat: ``(R, F)``; out: ``(U, F)``
    """
    lib = _load()
    crow, col, val = m_index
    _check(crow, col, val, pair_atom, pair_rel, a_hat, r_hat, out, atom_row)
    fn = getattr(lib, f"hrr_bind_rows_{_SUFFIX[_real_dtype(out)]}")
    rc = fn(
        out.shape[0], out.shape[1], _ptr(crow), _ptr(col), _ptr(val), _ptr(pair_atom), _ptr(pair_rel),
        _ptr(atom_row), _ptr(a_hat), _ptr(r_hat), _ptr(out), torch.get_num_threads(),
    )  # fmt: skip
    if rc != 0:
        raise MemoryError("hrr_bind_rows could not allocate its per-thread run buffer")
    return out


def bind_rows_adjoint(
    q_index: tuple[Tensor, Tensor],
    mt_index: tuple[Tensor, Tensor, Tensor],
    pair_rel: Tensor,
    a_hat: Tensor,
    r_hat: Tensor,
    g_hat: Tensor,
    ga_hat: Tensor | None,
    gr_hat: Tensor | None,
    atom_row: Tensor | None = None,
    scale: float = 1.0,
) -> None:
    """The adjoint of :func:`bind_rows`: ``ga_hat[a] = scale · Σ_{p of a} conj(r_hat[rel p]) · gb[p]``
    and ``gr_hat[j] = scale · Σ_{p of j} conj(a_hat[atom p]) · gb[p]`` with ``gb = Mᵀ g_hat``; either
    output may be None (not computed); both are overwritten.

    Shapes:
        - q_index: crow ``(A' + 1,)``, col ``(P,)`` (the pairs of each used atom); mt_index: crow
          ``(P + 1,)``, rows ``(nnz,)``, val ``(nnz,)`` float64 (``Mᵀ``); pair_rel: ``(P,)``
        - a_hat, atom_row: as :func:`bind_rows`; r_hat, gr_hat: ``(R, F)``; g_hat: ``(U, F)``;
          ga_hat: ``(A', F)``
    """
    lib = _load()
    q_crow, q_col = q_index
    mt_crow, mt_row, mt_val = mt_index
    _check(q_crow, q_col, mt_crow, mt_row, mt_val, pair_rel, a_hat, r_hat, g_hat, ga_hat, gr_hat, atom_row)
    fn = getattr(lib, f"hrr_bind_rows_adjoint_{_SUFFIX[_real_dtype(g_hat)]}")
    rc = fn(
        q_crow.numel() - 1, r_hat.shape[0], g_hat.shape[1], _ptr(q_crow), _ptr(q_col), _ptr(mt_crow),
        _ptr(mt_row), _ptr(mt_val), _ptr(pair_rel), _ptr(atom_row), _ptr(a_hat), _ptr(r_hat), _ptr(g_hat),
        _ptr(ga_hat), _ptr(gr_hat), scale, torch.get_num_threads(),
    )  # fmt: skip
    if rc != 0:
        raise MemoryError("hrr_bind_rows_adjoint could not allocate its per-thread scratch")


class Marks:
    """The mark arrays of one base plan (one slot per distinct row, pair and atom, all -1 between
    calls) and a lock: a plan is built by one thread at a time."""

    def __init__(self, n_rows: int, n_pairs: int, n_atoms: int) -> None:
        self.row = torch.full((max(n_rows, 1),), -1, dtype=torch.int64)
        self.pair = torch.full((max(n_pairs, 1),), -1, dtype=torch.int64)
        self.atom = torch.full((max(n_atoms, 1),), -1, dtype=torch.int64)
        self.lock = threading.Lock()


def plan_select(
    rows: Tensor, base_row_map: Tensor, row_crow: Tensor, marks: Marks
) -> tuple[Tensor, Tensor, int]:
    """The distinct base rows of ``rows`` in order of first appearance.

    Returns ``(uniq (U,), row_map (N,), nnz)``: ``row_map[i]`` is the position of ``rows[i]``'s base row
    in ``uniq``; ``nnz`` the count-matrix entries of the U rows. ``rows`` must be valid concept ids.
    """
    lib = _load()
    _check(rows, base_row_map, row_crow)
    n = rows.numel()
    row_map = torch.empty(n, dtype=torch.int64)
    uniq = torch.empty(n, dtype=torch.int64)
    nnz = ctypes.c_int64(0)
    with marks.lock:
        n_u = lib.hrr_plan_select(
            n, _ptr(rows), _ptr(base_row_map), _ptr(row_crow), _ptr(marks.row), _ptr(row_map), _ptr(uniq),
            ctypes.byref(nnz),
        )  # fmt: skip
    return uniq[:n_u], row_map, int(nnz.value)


def plan_build(
    uniq: Tensor,
    nnz: int,
    row_crow: Tensor,
    row_col: Tensor,
    row_val: Tensor,
    pair_atom_all: Tensor,
    pair_rel_all: Tensor,
    marks: Marks,
) -> dict:
    """The count matrix of the rows ``uniq`` with its pairs renumbered (first appearance), the pairs'
    atoms (positions in the sorted ``atoms_used``) and relations, ``Mᵀ`` and ``Q``; see
    :class:`hrr_kernel.plan.ComposePlan` for each field."""
    lib = _load()
    _check(uniq, row_crow, row_col, row_val, pair_atom_all, pair_rel_all)
    n_u = uniq.numel()
    i64 = torch.int64

    def buf(n, dtype=i64):
        return torch.empty(max(n, 1), dtype=dtype)

    crow, col, val = buf(n_u + 1), buf(nnz), buf(nnz, torch.float64)
    pair_prog, pair_atom, pair_rel, atoms_used = buf(nnz), buf(nnz), buf(nnz), buf(nnz)
    mt_crow, mt_row, mt_val = buf(nnz + 1), buf(nnz), buf(nnz, torch.float64)
    q_crow, q_col, sizes = buf(nnz + 1), buf(nnz), buf(2)
    with marks.lock:
        lib.hrr_plan_build(
            marks.atom.numel(), n_u, _ptr(uniq), _ptr(row_crow), _ptr(row_col), _ptr(row_val),
            _ptr(pair_atom_all),
            _ptr(pair_rel_all), _ptr(marks.pair), _ptr(marks.atom), _ptr(crow), _ptr(col), _ptr(val),
            _ptr(pair_prog), _ptr(pair_atom), _ptr(pair_rel), _ptr(atoms_used), _ptr(mt_crow), _ptr(mt_row),
            _ptr(mt_val), _ptr(q_crow), _ptr(q_col), _ptr(sizes),
        )  # fmt: skip
    n_p, n_a = int(sizes[0]), int(sizes[1])
    return {
        "m_index": (crow[: n_u + 1], col[:nnz], val[:nnz]),
        "pair_atom": pair_atom[:n_p],
        "pair_relation": pair_rel[:n_p],
        "atoms_used": atoms_used[:n_a],
        "mt_index": (mt_crow[: n_p + 1], mt_row[:nnz], mt_val[:nnz]),
        "q_index": (q_crow[: n_a + 1], q_col[:n_p]),
    }


def unique_first(ids: Tensor, mark: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct values of ``ids`` in order of first appearance, and each position's number among
    them. ``mark`` (one int64 slot per possible id, all -1) is left as it was; the caller holds it alone.

    Shapes: ids ``(N,)`` int64 in ``[0, mark.numel())`` -> uniq ``(U,)``, inverse ``(N,)``
    """
    lib = _load()
    _check(ids, mark)
    n = ids.numel()
    uniq = torch.empty(max(n, 1), dtype=torch.int64)
    inverse = torch.empty(n, dtype=torch.int64)
    n_u = lib.hrr_unique_first(n, _ptr(ids), _ptr(mark), _ptr(uniq), _ptr(inverse))
    return uniq[:n_u], inverse


def gather_rows(rows: Tensor, index: Tensor) -> Tensor:
    """``rows[index]``, a fresh ``(N, W)`` tensor copied on the intra-op threads (any dtype).

    Shapes: rows ``(U, W)``, index ``(N,)`` int64 in ``[0, U)`` -> ``(N, W)``
    """
    lib = _load()
    _check(rows, index)
    out = torch.empty((index.numel(), rows.shape[1]), dtype=rows.dtype)
    bytes_per_row = rows.shape[1] * rows.element_size()
    lib.hrr_gather_rows(
        index.numel(), bytes_per_row, _ptr(index), _ptr(rows), _ptr(out), torch.get_num_threads()
    )
    return out


def scatter_rows(grad: Tensor, index: Tensor, n_rows: int) -> Tensor:
    """The adjoint of :func:`gather_rows`: ``out[u] = Σ_{i: index[i] = u} grad[i]`` (zero where no
    position reads ``u``), each row summed in position order by one thread; float32 or float64.

    Shapes: grad ``(N, W)``, index ``(N,)`` -> ``(n_rows, W)``
    """
    lib = _load()
    _check(grad, index)
    out = torch.empty((n_rows, grad.shape[1]), dtype=grad.dtype)
    fn = getattr(lib, f"hrr_scatter_rows_{_SUFFIX[grad.dtype]}")
    rc = fn(index.numel(), n_rows, grad.shape[1], _ptr(index), _ptr(grad), _ptr(out), torch.get_num_threads())
    if rc != 0:
        raise MemoryError("hrr_scatter_rows could not allocate its grouping scratch")
    return out
