"""Give freed memory back to the system between the compile's big steps.

A compile holds a few hundred MB of Arrow tables and numpy arrays at a time but frees and allocates far
more; two allocators keep what was freed. Arrow's pool (jemalloc on x86-64 Linux, see ``ontology_compiler``'s
``__init__``; mimalloc elsewhere) keeps freed pages for a while: :func:`tune_pool` shortens jemalloc's
decay, and :func:`give_back` asks the pool to return what it holds (mimalloc: the calling thread's heap;
the compiler allocates Arrow memory on the main thread and the encoder threads, each of which calls
it). glibc keeps numpy's freed blocks in its arenas (one per thread that used numpy): ``malloc_trim(0)``
returns the free pages of all of them.
The compile's use of it, and what it measured: docs/architecture.md, "How a compile uses two cores
and stays under 1 GB".
"""

from __future__ import annotations

import ctypes

import pyarrow as pa

_TRIM = None
_TUNED: list[bool] = []

# jemalloc's decay of freed pages for a compile: Arrow's default keeps them a second, which is most of a
# compile step; 300 ms measured as low a peak as 0 ms without its cost (0 ms: 9.2 s against 7.9 s)
JEMALLOC_DECAY_MS = 300


def tune_pool() -> str:
    """Set the compile's decay of freed pages when Arrow's pool is jemalloc (once per process; a pool
    chosen by the user is left as it is, only its decay is set). Returns the pool's backend name."""
    backend = pa.default_memory_pool().backend_name
    if backend == "jemalloc" and not _TUNED:
        pa.jemalloc_set_decay_ms(JEMALLOC_DECAY_MS)
        _TUNED.append(True)
    return backend


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
