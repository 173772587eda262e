"""Format-1 artifacts on disk (programs, datasets): hashing, manifests, atomic publication.

An artifact is a folder named by its content id with a ``manifest.json`` listing every file with its
sha256. It is written into a hidden temporary folder beside the target and renamed into place, so a
killed writer never leaves a partial artifact; temporary folders of dead writers are removed later.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import ProgramFormatError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def sha256_file(path: str | Path, bufsize: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


def publish(
    final: Path,
    artifact_id: str,
    write_files: Callable[[Path], list[dict]],
    manifest: dict,
    same_or_raise: Callable[[], bool],
    json_default: Callable | None = None,
) -> bool:
    """Write an artifact atomically: ``write_files(tmp)`` returns the manifest's file list.

    Returns True when written, or ``same_or_raise()`` when ``final`` already exists (False for the same
    artifact; it raises for anything else).
    """
    if final.exists():
        return same_or_raise()
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{artifact_id}-{os.getpid()}-", dir=final.parent))
    try:
        manifest = dict(manifest)
        manifest["files"] = write_files(tmp)
        with open(tmp / "manifest.json", "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False, default=json_default)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.rename(tmp, final)
        except OSError:
            if final.exists():  # another process finished the same artifact first
                shutil.rmtree(tmp, ignore_errors=True)
                return same_or_raise()
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def clean_stale_temps(out_dir: Path) -> None:
    """Remove temporary folders left by killed compiles (their process is gone)."""
    for p in out_dir.glob(".tmp-*"):
        parts = p.name.split("-")
        try:
            pid = int(parts[2])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _pid_alive(pid):
            log.info("removing %s left by an interrupted compile (pid %d)", p, pid)
            shutil.rmtree(p, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_json_manifest(path: str | Path, what: str, error: type[Exception] = ProgramFormatError) -> dict:
    """``path/manifest.json`` of a format-1 artifact (a program, a dataset), version checked."""
    p = Path(path) / "manifest.json"
    if not p.is_file():
        raise error(f"{path}: no manifest.json (not a {what} folder)")
    try:
        manifest = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{p}: not valid JSON: {e}") from e
    version = manifest.get("format_version")
    if not isinstance(version, int) or version != FORMAT_VERSION:
        raise error(f"{p}: format_version {version!r} is not supported (expected {FORMAT_VERSION})")
    return manifest


def verify_manifest_files(path: str | Path, manifest: dict, *, hashes: bool = True,
                          error: type[Exception] = ProgramFormatError) -> dict:  # fmt: skip
    """Every file the manifest lists is present and, with ``hashes``, has the listed sha256."""
    path = Path(path)
    for f in manifest.get("files", []):
        p = path / f["path"]
        if not p.is_file():
            raise error(f"{p}: listed in the manifest but missing")
        if hashes:
            got = sha256_file(p)
            if got != f["sha256"]:
                raise error(f"{p}: sha256 {got} differs from the manifest's {f['sha256']}")
    return manifest
