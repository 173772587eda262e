"""Format-1 artifacts on disk (programs, datasets): hashing, manifests, atomic publication.

An artifact is a folder named by its content id with a ``manifest.json`` listing every file with its
sha256. It is written into a hidden temporary folder beside the target and renamed into place, so a
killed writer never leaves a partial artifact; temporary folders of dead writers are removed later.
The published folder and its files get the user's normal permissions (``0777``/``0666`` less the umask),
as any folder the user creates would, so that a lab's shared storage can read them.

Also here, because every package writes outputs (and ``ontology_compiler`` imports nothing heavy):
:func:`safe_component`, the one check of a name that becomes a folder under an output folder
(``--name``, ``--run-id``), and :func:`write_file_atomically`, the one way to write a single file
(a checkpoint, a model's weights) so that a failure leaves nothing under its name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath

from .errors import OntologyCompilerError, OutputExistsError, ProgramFormatError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
TEMP_PREFIX = ".tmp-"  # hidden temporary folders beside an artifact being written
_UMASK_LOCK = threading.Lock()


class ArtifactWriteError(OntologyCompilerError, OSError):
    """An output could not be written (disk full, no permission); nothing is left under its name."""


def safe_component(value: str, what: str = "name") -> str:
    """``value`` when it is one plain folder name to create under an output folder, else ``ValueError``.

    Refused: empty, ``.``/``..``, a separator (``/`` or ``\\``), an absolute path or a drive, a NUL
    character, and a leading ``.`` (hidden names are the temporary folders of writers, removed as stale
    by :func:`clean_stale_temps`). ``what`` names the option in the message (``--run-id``).
    """
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a folder name (a string), got {type(value).__name__} {value!r}")
    bad = None
    if not value.strip():
        bad = "is empty"
    elif value in (".", ".."):
        bad = "names the output folder or its parent"
    elif PurePosixPath(value).is_absolute() or PureWindowsPath(value).drive:
        bad = "is an absolute path" if value[:1] in "/\\" else "names a drive"
    elif "/" in value or "\\" in value:
        bad = "contains a path separator"
    elif "\0" in value:
        bad = "contains a NUL character"
    elif value.startswith("."):
        bad = "starts with '.' (hidden names are reserved for temporary folders)"
    if bad:
        raise ValueError(
            f"{what} {value!r} {bad}; it must be a single folder name (no '/', '..', absolute path), "
            "created under the output folder (--out)"
        )
    return value


def current_umask() -> int:
    """The process's umask, read without changing it where the system tells it (Linux ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # os.umask can only be read by setting it; 0o077 meanwhile errs on the safe side
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def normal_permissions(root: str | Path) -> None:
    """Give ``root`` (and, for a folder, everything under it) the permissions a new file or folder of the
    user has: ``0666``/``0777`` less the umask (temporary files and folders are made ``0600``/``0700``)."""
    mask = current_umask()
    root = Path(root)
    paths = [root, *root.rglob("*")] if root.is_dir() else [root]
    for p in paths:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        os.chmod(p, (0o777 if stat.S_ISDIR(st.st_mode) else 0o666) & ~mask)


def write_file_atomically(
    path: str | Path,
    write: Callable[[Path], object],
    *,
    what: str = "file",
    hint: str = "",
    error: Callable[[str], Exception] = ArtifactWriteError,
) -> Path:
    """Write ``path`` through ``write(tmp)`` on a temporary file beside it, flush it to disk, give it the
    user's normal permissions and rename it into place.

    A failed write (``OSError``; ``RuntimeError``, which torch's writer raises on a full disk) removes the
    temporary file and raises ``error`` naming ``path``, ``what`` it is and the cause (then ``hint``); any
    other exception or an interrupt removes the temporary file and propagates unchanged.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        normal_permissions(tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        _unlink_quietly(tmp)
        raise error(_write_failure(path, what, e, hint)) from e
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return path


def publish_file(tmp: str | Path, out: str | Path, *, replace: bool) -> None:
    """Put the finished file ``tmp`` under the name ``out`` in one step. With ``replace`` (``--force``):
    ``os.replace``, so a reader sees the old file or the new one. Without: a hard link, which fails when
    ``out`` appeared while ``tmp`` was written (another run with the same output): :class:`OutputExistsError`
    naming it, ``tmp`` removed; where the file system has no hard links, a rename after a last check."""
    tmp, out = Path(tmp), Path(out)
    if replace:
        os.replace(tmp, out)
        return
    appeared = OutputExistsError(
        f"{out}: appeared while it was being written (another run with the same output?); it is not "
        "replaced without --force, and this one was not kept"
    )
    try:
        os.link(tmp, out)
    except FileExistsError:
        _unlink_quietly(tmp)
        raise appeared from None
    except OSError:  # no hard links here (some network or FUSE file systems)
        if out.exists() or out.is_symlink():
            _unlink_quietly(tmp)
            raise appeared from None
        os.rename(tmp, out)
        return
    _unlink_quietly(tmp)


def _unlink_quietly(p: Path) -> None:
    try:
        p.unlink(missing_ok=True)
    except OSError:
        pass


def _write_failure(path: Path, what: str, e: BaseException, hint: str) -> str:
    full = getattr(e, "errno", None) == errno.ENOSPC or "write failed" in str(e) or "No space" in str(e)
    cause = "the disk is full" if full else f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}"
    return f"{path}: could not write the {what} ({cause}); nothing was left under this name" + (
        f"; {hint}" if hint else ""
    )


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
    artifact; it raises for anything else). The temporary folder is created with the user's normal
    permissions (not ``tempfile.mkdtemp``'s 0700), and every file in it gets them before the rename. A
    failed write (disk full) removes the temporary folder and raises :class:`ArtifactWriteError`.
    """
    final = Path(final)
    if final.exists():
        return same_or_raise()
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ArtifactWriteError(_write_failure(final, "artifact's folder", e, "")) from e
    clean_stale_temps(final.parent)
    tmp = final.parent / leftover_name("tmp", artifact_id)
    try:
        os.mkdir(tmp)  # 0777 less the umask, as any folder the user makes
        manifest = dict(manifest)
        manifest["files"] = write_files(tmp)
        with open(tmp / "manifest.json", "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False, default=json_default)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        normal_permissions(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if final.exists():  # another process finished the same artifact first
                shutil.rmtree(tmp, ignore_errors=True)
                return same_or_raise()
            raise
    except ArtifactWriteError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactWriteError(_write_failure(final, "artifact", e, "")) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


LEFTOVER_RE = re.compile(r"^\.(?P<kind>tmp|old)-(?P<name>.+)-(?P<pid>\d+)-[0-9a-f]{8}$")  # leftover_name's


def leftover_name(kind: str, name: str) -> str:
    """The hidden name of a writer's temporary (``kind`` ``tmp``) or moved-aside (``old``) folder for the
    output ``name``: ``.tmp-<name>-<pid>-<8 hex>``; :func:`clean_leftovers` reads the pid back from it."""
    return f".{kind}-{name}-{os.getpid()}-{secrets.token_hex(4)}"


def clean_leftovers(parent: Path) -> list[str]:
    """Find the folders a killed writer left in ``parent`` and deal with each; returns what was done, one
    line each (also logged).

    ``.tmp-<name>-<pid>-…`` (an output being written) of a process that is gone is removed: it was never
    published. ``.old-<name>-<pid>-…`` (an earlier output moved aside by ``--force``) of a process that is
    gone is removed when ``<name>`` is there (the new output was published), else renamed back to
    ``<name>``: the kill came between moving it aside and publishing the new one, so it is the only copy.
    Those of a live process (another writer at work) are left alone; a hidden ``.tmp-``/``.old-`` folder
    not named as :func:`leftover_name` names them (another tool's, or an older writer's) is reported and
    left.
    """
    parent = Path(parent)
    done: list[str] = []
    try:
        entries = sorted(p for p in parent.iterdir() if p.name.startswith((".tmp-", ".old-")))
    except OSError:
        return done
    for p in entries:
        m = LEFTOVER_RE.match(p.name)
        if m is None:
            if p.is_dir():
                line = (
                    f"{p}: a hidden folder not named as this project's writers name theirs "
                    "(.tmp-<name>-<pid>-<8 hex>); left as it is: remove it if no run writes there"
                )
                log.warning("%s", line)
                done.append(line)
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or _pid_alive(pid):
            continue
        target = parent / m["name"]
        if m["kind"] == "old" and not target.exists() and not target.is_symlink():
            try:
                os.rename(p, target)
            except OSError as e:
                line = (
                    f"{p}: the earlier {target.name}, moved aside by a killed run (pid {pid}); not restored "
                    f"({type(e).__name__}: {e}): rename it to {target.name} or remove it"
                )
                log.warning("%s", line)
            else:
                line = f"{target}: restored from {p.name}, where a killed run (pid {pid}) had moved it aside"
                log.warning("%s", line)
            done.append(line)
            continue
        what = "an unfinished output" if m["kind"] == "tmp" else f"an earlier {target.name}, replaced since"
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            _unlink_quietly(p)
        line = f"{p}: removed, {what} left by a killed run (pid {pid})"
        log.info("%s", line)
        done.append(line)
    return done


def clean_stale_temps(out_dir: Path) -> None:
    """Remove temporary folders left by killed compiles (their process is gone): :func:`clean_leftovers`."""
    clean_leftovers(out_dir)


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


def verify_manifest_files(
    path: str | Path, manifest: dict, *, hashes: bool = True, error: type[Exception] = ProgramFormatError
) -> dict:
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
