"""Give freed memory back to the system between the compile's big steps.

A compile holds a few hundred MB of Arrow tables and numpy arrays at a time but frees and allocates far
more; two allocators keep what was freed. Arrow's pool (mimalloc) keeps a thread's freed pages in that
thread's heap: :func:`give_back` asks it to return the calling thread's (the compiler allocates Arrow memory
on the main thread and the encoder threads, each of which calls it). glibc keeps numpy's freed blocks in
its arenas (one per thread that used numpy): ``malloc_trim(0)`` returns the free pages of all of them.
The compile's use of it, and what it measured: docs/architecture.md, "How a compile uses two cores
and stays under 1 GB".
"""

from __future__ import annotations

import ctypes

import pyarrow as pa

_TRIM = None


def give_back() -> None:
    """Return freed memory: Arrow's pool (this thread's heap) and glibc's arenas (no-op without glibc)."""
    global _TRIM
    pa.default_memory_pool().release_unused()
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)
