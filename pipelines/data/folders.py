"""Output folders written whole or not at all: refuse what may not be replaced, write beside, rename.

Every command that writes a folder of results (``export-embeddings``, ``carry``, ``diff``, ``export-meds``,
...) follows one rule: an existing folder is never written over, unless it is empty, or ``--force`` is given
and it holds the record file of an earlier result of the same command (:func:`check_out`, before any work);
the result is written into a temporary folder beside the target and renamed into place
(:func:`folder_written`, built on :func:`temp_beside` and :func:`publish`), so a killed command leaves no
half-written folder.

The check and the publication are one step: without ``--force`` the rename itself refuses a target that
appeared while the result was being written (another run into the same folder), and the new result is
removed; with ``--force`` the earlier result is moved aside (``.old-<name>-<pid>-…``), the new one renamed
in, and only then the earlier one deleted, so a kill in between leaves the earlier result, never only a
hidden temporary folder. The hidden folders a killed run left (``.tmp-…``, ``.old-…``; the pid is in the
name) are dealt with on the next run into the same parent (:func:`ontology_compiler.api.clean_leftovers`:
a dead writer's temporary folder removed, an earlier result it had moved aside put back).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ontology_compiler.api import clean_leftovers, leftover_name
from pipelines.errors import PipelineError

__all__ = ["check_out", "temp_beside", "publish", "folder_written"]


def check_out(
    out: Path,
    force: bool,
    *,
    record: str | None,
    what: str,
    option: str = "--out",
    owned: Callable[[Path], bool] | None = None,
) -> None:
    """Refuse an existing ``out`` unless it is an empty folder, or ``force`` is given and it holds ``record``
    (the record file of an earlier ``what``, e.g. ``"export"``; ``owned(out)``, when given, decides instead;
    neither: anything may be replaced); ``option`` names the command's option in the message. The folders a
    killed run left beside ``out`` are cleaned first (:func:`ontology_compiler.api.clean_leftovers`)."""
    clean_leftovers(out.parent)
    _replaceable(out, force, record=record, what=what, option=option, owned=owned)


def _replaceable(
    out: Path,
    force: bool,
    *,
    record: str | None,
    what: str,
    option: str,
    owned: Callable[[Path], bool] | None,
) -> None:
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
    if owned is not None:
        if not owned(out):
            raise PipelineError(
                f"{out}: exists and is not an earlier {what}; it is never replaced, even with --force: "
                f"choose another {option}"
            )
    elif record is not None and not (out / record).is_file():
        raise PipelineError(
            f"{out}: exists and holds no {record}, so it is not an earlier {what}; it is not replaced, even "
            f"with --force: choose another {option}"
        )


def temp_beside(out: Path) -> Path:
    """A new, empty temporary folder next to ``out`` (same file system, so :func:`publish` is a rename),
    named ``.tmp-<name>-<pid>-<8 hex>``; the leftovers of killed runs there are cleaned first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(out.parent)
    tmp = out.parent / leftover_name("tmp", out.name)
    tmp.mkdir()
    return tmp


def publish(
    tmp: Path,
    out: Path,
    *,
    force: bool = False,
    what: str = "output",
    record: str | None = None,
    option: str = "--out",
    owned: Callable[[Path], bool] | None = None,
) -> None:
    """Rename ``tmp`` to ``out`` in one step that refuses what :func:`check_out` refuses, as ``out`` is now.

    Without ``force`` the rename fails when ``out`` appeared meanwhile (a non-empty folder, a file): a
    :class:`PipelineError` naming it (``tmp`` is left to the caller). With ``force`` an ``out`` that may be
    replaced is moved aside (``.old-<name>-<pid>-…``), ``tmp`` renamed in, and the old one removed only
    then; it is put back if the rename fails.
    """
    if not force:
        try:
            tmp.rename(out)  # rename(2): atomic, and it never replaces a non-empty folder or a file
        except OSError as e:
            if out.exists() or out.is_symlink():
                raise PipelineError(
                    f"{out}: appeared while this {what} was being written (another run with the same "
                    f"{option}?); it is not replaced and this {what} was not kept: choose another {option}, "
                    f"or pass --force to replace an earlier {what}"
                ) from e
            raise
        return
    old = None
    if out.exists() or out.is_symlink():
        _replaceable(out, True, record=record, what=what, option=option, owned=owned)
        old = out.parent / leftover_name("old", out.name)
        out.rename(old)
    try:
        tmp.rename(out)
    except BaseException as e:  # an interrupt too: the earlier result goes back under its name
        appeared = isinstance(e, OSError) and (out.exists() or out.is_symlink())
        if old is not None:
            try:
                old.rename(out)
            except OSError:
                raise PipelineError(
                    f"{out}: written by another run meanwhile; this {what} was not kept, and the earlier "
                    f"{what} moved aside is kept as {old}"
                ) from e
        if appeared:
            raise PipelineError(
                f"{out}: appeared while this {what} was being written (another run with the same {option}?); "
                f"this {what} was not kept"
            ) from e
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def folder_written(
    out: Path,
    what: str,
    *,
    force: bool = False,
    record: str | None = None,
    option: str = "--out",
    owned: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """A temporary folder beside ``out`` to write into; published as ``out`` when the block ends
    (:func:`publish`: ``force``, ``record``, ``owned`` as for :func:`check_out`), removed when it fails (an
    ``OSError`` becomes a :class:`PipelineError` naming ``out`` and the ``what`` written)."""
    tmp = None
    try:
        tmp = temp_beside(out)
        yield tmp
        publish(tmp, out, force=force, what=what, record=record, option=option, owned=owned)
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
