"""The one walk over an input folder's tree (RF2 release files, MEDS shards, MEDS label files).

A folder may reach its files through symbolic links (``data/train -> /scratch/shards/train``, a release's
``Snapshot -> ../SnomedCT_…/Snapshot``): :func:`walk_files` follows linked folders, reading each real
folder once, so a link back up the tree (a loop) or a second link to a folder already read is skipped with
a warning rather than read forever or twice. A link that leads nowhere and a folder that cannot be listed
are errors naming them: a file that is not read is never dropped without a word. :func:`describe_files`
says what a walk found, per top-level folder (a MEDS split), for the log line of the reader.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from .errors import InputFileError

log = logging.getLogger(__name__)

__all__ = ["walk_files", "describe_files"]


def walk_files(
    root: str | Path, keep: Callable[[str], bool], *, error: type[InputFileError] = InputFileError
) -> list[Path]:
    """Every file under ``root`` whose name ``keep`` accepts, following symbolic links to folders (each
    real folder once), sorted by path; the paths are under ``root`` as given (a linked folder's files keep
    the link's path).

    Raises ``error`` (an :class:`InputFileError`) naming a link to nothing, or a folder that cannot be
    listed.
    """
    root = Path(root)
    seen: set[tuple[int, int]] = set()
    found: list[Path] = []

    def listing_failed(e: OSError) -> None:
        where = Path(e.filename) if e.filename else root
        raise error(where, f"cannot be listed ({e.strerror or e}); its files would be missed")

    try:
        st = os.stat(root)
        seen.add((st.st_dev, st.st_ino))
    except OSError as e:
        listing_failed(e)
    for dirpath, dirs, files in os.walk(root, onerror=listing_failed, followlinks=True):
        here = Path(dirpath)
        kept = []
        for d in sorted(dirs):
            p = here / d
            try:
                st = os.stat(p)
            except OSError as e:
                raise error(p, f"cannot be read ({e.strerror or e}); its files would be missed") from e
            key = (st.st_dev, st.st_ino)
            if key in seen:
                log.warning(
                    "%s: a link to %s, a folder already read; skipped (a loop or a second link)",
                    p,
                    p.resolve(),
                )
                continue
            seen.add(key)
            kept.append(d)
        dirs[:] = kept
        for name in files:
            p = here / name
            if p.is_symlink() and not p.exists():
                raise error(
                    p,
                    f"a symbolic link to {os.readlink(p)}, which does not exist; its files would be missed",
                    hint="fix or remove the link",
                )
            if keep(name) and p.is_file():
                found.append(p)
    return sorted(found)


def describe_files(root: str | Path, files: list[Path], what: str = "file") -> str:
    """``3 shards (train 1 (a link to /scratch/t), tuning 1, held_out 1)``: the files a walk found under
    ``root``, counted per top-level folder (``.`` for files right in ``root``), linked folders named."""
    root = Path(root)
    groups: dict[str, int] = {}
    for f in files:
        parts = f.relative_to(root).parts
        key = parts[0] if len(parts) > 1 else "."
        groups[key] = groups.get(key, 0) + 1
    text = f"{len(files)} {what}{'' if len(files) == 1 else 's'}"
    if not groups or list(groups) == ["."]:
        return text
    per = []
    for key, n in groups.items():
        p = root / key
        per.append(f"{key} {n}" + (f" (a link to {p.resolve()})" if key != "." and p.is_symlink() else ""))
    return f"{text} ({', '.join(per)})"
