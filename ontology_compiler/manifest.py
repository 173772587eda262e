"""Content addressing shared by the RF2 and OWL front ends: compiler version, program id, up-to-date check.

Moved verbatim out of ``compiler.py`` so both front ends give ids the same way: identical inputs (by
role and sha256) and options give the identical ``program_id``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .program import FORMAT_VERSION, verify_program


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
