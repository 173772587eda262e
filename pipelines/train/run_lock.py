"""A run folder is trained by one process at a time: an advisory lock on ``<run>/.lock``.

:func:`~pipelines.train.loop.open_run` (every trainer starts or resumes its run folder there) takes the
lock with :func:`lock_run`: ``fcntl.flock`` on ``.lock`` in the run folder, which then holds the pid of the
process. A second process that opens the same run (two ``pretrain --resume`` of one run, which trained side
by side and wrote every step twice into ``metrics.jsonl``) is refused at once with
:class:`RunInUseError` naming the folder and that pid. The lock is held until the trainer's
:func:`~pipelines.train.runtime.distributed` block ends (:func:`lock_scope`; without one, for the life of
the process) and the system releases it when the process exits or is killed, so a killed run never leaves
its folder locked. Within one process the lock is re-entrant (a run opened twice, as an experiment resumes
it). Under ``torchrun`` only rank 0 takes it. Where the file system has no locks (some network mounts) a
warning says so and the run goes on unlocked.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.errors import PipelineError

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows: no flock; runs are not locked)
    fcntl = None

__all__ = ["LOCK_FILE", "RunInUseError", "lock_run", "lock_scope", "run_locked", "lock_holder"]

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
_HELD: dict[str, list[int]] = {}  # real path of a run folder -> [fd of its .lock, times taken]
_SCOPES: list[list[str]] = []  # the runs locked in each open lock_scope (innermost last)


class RunInUseError(PipelineError):
    """Another process holds the run folder's lock: it trains that run now."""


def lock_holder(run_dir: str | Path) -> int | None:
    """The pid written in ``run_dir``'s lock file (the last process that took it), or None."""
    try:
        text = (Path(run_dir) / LOCK_FILE).read_text(encoding="ascii").strip()
        return int(text) if text else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _acquire(run_dir: Path) -> str | None:
    """Take the lock (or one more hold of it, in this process); the key to release it, None if unlocked."""
    key = os.path.realpath(run_dir)
    if key in _HELD:
        _HELD[key][1] += 1
        return key
    if fcntl is None:  # pragma: no cover
        return None
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise PipelineError(
            f"{run_dir / LOCK_FILE}: cannot be created ({e.strerror or e}); a run folder must be writable"
        ) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            pid = lock_holder(run_dir)
            by = f"pid {pid}" if pid is not None else "another process"
            raise RunInUseError(
                f"run folder {run_dir} is in use by {by}, which trains it now; two processes never train "
                "one run side by side: wait for it to end (or stop it), then --resume"
            ) from e
        log.warning(
            "%s: cannot be locked (%s); nothing stops a second process from training this run meanwhile",
            run_dir / LOCK_FILE,
            e.strerror or e,
        )
        return None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    _HELD[key] = [fd, 1]
    return key


def _release(key: str | None) -> None:
    if key is None or key not in _HELD:
        return
    held = _HELD[key]
    held[1] -= 1
    if held[1] > 0:
        return
    del _HELD[key]
    try:
        fcntl.flock(held[0], fcntl.LOCK_UN)
    finally:
        os.close(held[0])


def lock_run(run_dir: str | Path) -> None:
    """Lock ``run_dir`` (created if missing) until the innermost :func:`lock_scope` ends, or for the life of
    the process outside one; :class:`RunInUseError` when another process holds it."""
    key = _acquire(Path(run_dir))
    if _SCOPES:
        _SCOPES[-1].append(key)


@contextmanager
def lock_scope() -> Iterator[None]:
    """The runs locked by :func:`lock_run` within the block are released when it ends."""
    _SCOPES.append([])
    try:
        yield
    finally:
        for key in reversed(_SCOPES.pop()):
            _release(key)


@contextmanager
def run_locked(run_dir: str | Path) -> Iterator[None]:
    """``run_dir`` locked for the block only (e.g. to remove a run no process trains)."""
    key = _acquire(Path(run_dir))
    try:
        yield
    finally:
        _release(key)
