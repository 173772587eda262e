"""What the RF2 and OWL front ends share: content addressing, the manifest's common parts, publication.

Identical inputs (by role and sha256) and options give the identical ``program_id``
(:func:`program_id`); a program already there with that id is reused (:func:`up_to_date`); a new one is
written atomically with its manifest (:func:`publish_program`). The manifest layout is described in
``docs/program-format.md``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from .artifact import sha256_file
from .errors import MissingInputError
from .program import FORMAT_VERSION, verify_program, write_program
from .words import default_stopwords_path, load_stopwords

log = logging.getLogger(__name__)

SHIPPED_STOPWORDS = "ontology_compiler/data/stopwords.txt (shipped)"


@dataclass
class CompileResult:
    """Where the program is and what it holds."""

    path: Path
    program_id: str
    written: bool  # False when an identical program already existed
    manifest: dict


def compiler_version() -> str:
    try:
        from importlib.metadata import version

        return version("hrrbert")
    except Exception:  # not installed (running from a checkout)
        return "0.1.0"


def program_id(inputs: list[dict], options: dict) -> str:
    """16 hex digits of sha256 over format version, compiler version, input (role, sha256) and options."""
    payload = {
        "format_version": FORMAT_VERSION,
        "compiler_version": compiler_version(),
        "inputs": sorted((i["role"], i["sha256"]) for i in inputs),
        "options": options,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def existing_program(final: Path, pid: str) -> dict | None:
    """The manifest of an intact program ``pid`` already at ``final`` (recompile = no-op), else None.

    Anything else at ``final`` is left for :func:`program.write_program` to refuse.
    """
    if not final.exists():
        return None
    try:
        manifest = verify_program(final)
    except Exception:
        return None
    return manifest if manifest.get("program_id") == pid else None


def up_to_date(out_dir: Path, pid: str) -> CompileResult | None:
    """The result for program ``pid`` when ``out_dir`` already holds it intact (nothing to do), else None."""
    final = out_dir / pid
    manifest = existing_program(final, pid)
    if manifest is None:
        return None
    log.info("%s is up to date (identical inputs and options); nothing written", final)
    return CompileResult(final, pid, False, manifest)


def input_entry(role: str, path: Path, shown: str | None = None) -> dict:
    """One entry of the manifest's ``inputs``: role, path (``shown`` instead when given), sha256, bytes."""
    return {
        "role": role,
        "path": str(path) if shown is None else shown,
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
    }


def option_file_input(role: str, path: str | Path) -> dict:
    """The ``inputs`` entry of a file given by an option (``--codes``, ...); it must exist."""
    return input_entry(role, option_file_input_exists(role, path))


def option_file_input_exists(role: str, path: str | Path) -> Path:
    """``path`` of the option ``--<role>``, a :class:`MissingInputError` when it is not a file."""
    p = Path(path)
    if not p.is_file():
        raise MissingInputError(f"{p}: --{role.replace('_', '-')} file not found")
    return p


def holds_programs(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds anything but hidden temporary folders: a program there may be the one a
    compile would write (then the inputs are hashed before anything is read)."""
    try:
        return any(not p.name.startswith(".") for p in out_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


def stopwords_input(stopwords: str | Path | None) -> tuple[list[str], dict]:
    """The stopword list (``stopwords``, or the shipped one when None) and its ``inputs`` entry."""
    path = Path(stopwords) if stopwords is not None else default_stopwords_path()
    words = load_stopwords(path)
    return words, input_entry("stopwords", path, None if stopwords is not None else SHIPPED_STOPWORDS)


def manifest_head(pid: str) -> dict:
    """The first keys of every program manifest."""
    return {
        "format_version": FORMAT_VERSION,
        "program_id": pid,
        "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "compiler_version": compiler_version(),
    }


@contextmanager
def timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """Record the seconds the block takes as ``timings[key]`` (3 decimals)."""
    t = time.perf_counter()
    yield
    timings[key] = round(time.perf_counter() - t, 3)


def publish_program(
    out_dir: Path,
    pid: str,
    tables: dict[str, pa.Table],
    graph_tables: dict[str, pa.Table],
    manifest: dict,
    t_start: float,
) -> CompileResult:
    """Write the program (see :func:`program.write_program`), add the write and total times."""
    with timed(manifest["timings"], "write"):
        final, written = write_program(out_dir, pid, tables, graph_tables, manifest)
    manifest["timings"]["total"] = round(time.perf_counter() - t_start, 3)
    if written:
        log.info("wrote program %s", final)
    return CompileResult(final, pid, written, manifest if written else verify_program(final, hashes=False))
