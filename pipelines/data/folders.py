"""Output folders written whole or not at all: refuse what may not be replaced, write beside, rename.

Every command that writes a folder of results (``export-embeddings``, ``carry``, ``diff``, ...) follows
one rule: an existing folder is never written over, unless it is empty, or ``--force`` is given and it holds
the record file of an earlier result of the same command (:func:`check_out`); the result is written into a
temporary folder beside the target and renamed into place (:func:`folder_written`, built on
:func:`temp_beside` and :func:`publish`), so a killed command leaves no half-written folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.errors import PipelineError

__all__ = ["check_out", "temp_beside", "publish", "folder_written"]


def check_out(out: Path, force: bool, *, record: str, what: str, option: str = "--out") -> None:
    """Refuse an existing ``out`` unless it is an empty folder, or ``force`` is given and it holds ``record``
    (the record file of an earlier ``what``, e.g. ``"export"``); ``option`` names the command's option in the
    message."""
    a = "an" if what[:1] in "aeiou" else "a"
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise PipelineError(f"{out}: exists and is not a folder; choose another {option}")
    if not any(out.iterdir()):
        return
    if not force:
        raise PipelineError(
            f"{out}: exists; {a} {what} is never written over anything: choose another {option}, or pass "
            f"--force to replace an earlier {what} there"
        )
    if not (out / record).is_file():
        raise PipelineError(
            f"{out}: exists and holds no {record}, so it is not an earlier {what}; it is not replaced, even "
            f"with --force: choose another {option}"
        )


def temp_beside(out: Path) -> Path:
    """A new, empty temporary folder next to ``out`` (same file system, so :func:`publish` is a rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}-{secrets.token_hex(4)}"
    os.mkdir(tmp)
    return tmp


def publish(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an existing ``out`` (allowed by :func:`check_out`) is moved aside first and
    removed after, and put back if the rename fails."""
    old = None
    if out.exists():
        old = out.parent / f".old-{out.name}-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except OSError:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def folder_written(out: Path, what: str) -> Iterator[Path]:
    """A temporary folder beside ``out`` to write into; published as ``out`` when the block ends,
    removed when it fails (an ``OSError`` becomes a :class:`PipelineError` naming ``out`` and the
    ``what`` written)."""
    tmp = None
    try:
        tmp = temp_beside(out)
        yield tmp
        publish(tmp, out)
    except OSError as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise PipelineError(
            f"{out}: could not write the {what} ({type(e).__name__}: {e}); nothing was left"
        ) from e
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
