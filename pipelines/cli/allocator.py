"""How the ``hrrbert`` process asks glibc to treat freed memory (``docs/kernel.md``, "The C allocator").

glibc serves blocks above its mmap threshold with fresh ``mmap`` memory and hands them back when freed,
so every training step pays the page faults of touching its large tensors (logits, gradients, the
optimizer's temporaries) again. Keeping freed memory in the process removes that cost at the price of a
resident set that stays at its peak. Measured in one run of ``benchmarks/train_step.py --vocab-sizes
25493 350000 --allocators default keep`` on the 2-core VM (tiny model, 32 x 128 codes): the full-softmax
pretraining step 278 -> 210 ms at 25,493 concepts (peak RSS 969 -> 1,111 MB), 2,947 -> 1,573 ms at
350,000 (4.7 -> 8.2 GB); the sampled-softmax step 123 -> 113 ms and 162 -> 166 ms (nothing large left to
fault in).

So the ``hrrbert`` command keeps freed memory by default (:func:`entry`, the console script; the
:func:`~pipelines.cli.main` group itself, which tests invoke in-process, changes nothing):
``mallopt(M_MMAP_MAX, 0)`` and ``mallopt(M_TRIM_THRESHOLD, 2 GiB - 1)`` in this process, and the same as
``MALLOC_MMAP_MAX_`` / ``MALLOC_TRIM_THRESHOLD_`` in the environment for the processes it spawns (the
experiment's side-by-side workers). ``HRRBERT_MALLOC=default`` leaves glibc as it is; ``MALLOC_*``
variables already in the environment win (glibc read them at start-up); a C library without ``mallopt``
(not glibc) is left alone.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["ENV", "KEEP_FREED_ENV", "keep_freed_memory"]

ENV = "HRRBERT_MALLOC"  # keep (default) or default
CHOICES = ("keep", "default")
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h>
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: the largest, 2 GiB - 1
KEEP_FREED_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def keep_freed_memory(environ: dict | None = None) -> str:
    """Apply the policy of the module docstring to this process; returns what happened: ``keep``,
    ``default`` (``HRRBERT_MALLOC=default``), ``environment`` (``MALLOC_*`` given) or ``unavailable``
    (no glibc ``mallopt``). ``environ``: the environment to read and extend (default ``os.environ``)."""
    env = os.environ if environ is None else environ
    choice = env.get(ENV, "keep").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"{ENV}={env.get(ENV)!r}: expected one of {', '.join(CHOICES)}")
    if choice == "default":
        return "default"
    if any(k in env for k in KEEP_FREED_ENV):
        return "environment"
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return "unavailable"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_MAX, 0) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "unavailable"
    env.update(KEEP_FREED_ENV)
    return "keep"
