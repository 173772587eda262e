"""Find RF2 files by the RF2 file-name grammar anywhere under a release folder.

A release folder may hold one package (International) or several (International plus extensions), each
with ``Snapshot/``, ``Full/`` and ``Delta/`` trees; files are recognised by name, not by location.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import MissingInputError
from .rf2_schema import FILE_NAME_RE

log = logging.getLogger(__name__)

# Content kinds that must be present (the compiler also reads TextDefinition, StatedRelationship,
# RelationshipConcreteValues and Association(Reference) files when there are any).
REQUIRED = ("Concept", "Description", "Relationship", "Language", "ExtendedMap")


@dataclass(frozen=True)
class RF2File:
    """One RF2 file recognised by name."""

    path: Path
    content: str  # Concept, Description, Language, ExtendedMap, ...
    release: str  # Full, Snapshot or Delta
    namespace: str  # INT, US1000124, ...
    date: str  # YYYYMMDD of the package
    lang: str | None
    pattern: str | None  # refset column pattern, e.g. "iissscc"


def scan_release(src: str | Path) -> list[RF2File]:
    """All files under ``src`` whose names follow the RF2 grammar, sorted by path."""
    root = Path(src)
    if not root.is_dir():
        raise MissingInputError(f"{root}: not a folder (expected an RF2 release folder)")
    found: list[RF2File] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            m = FILE_NAME_RE.match(name)
            if m is None:
                continue
            g = m.groupdict()
            found.append(
                RF2File(
                    path=Path(dirpath) / name,
                    content=g["content"],
                    release=g["release"],
                    namespace=g["namespace"],
                    date=g["date"],
                    lang=g["lang"],
                    pattern=g["pattern"],
                )
            )
    found.sort(key=lambda f: str(f.path))
    return found


def choose_release_type(files: list[RF2File], requested: str, as_of: str | None) -> str:
    """Pick ``Snapshot`` or ``Full``: ``--as-of`` needs Full; ``auto`` prefers Snapshot."""
    kinds = {f.release for f in files if f.content == "Concept"}
    if as_of is not None or requested == "full":
        if "Full" not in kinds:
            raise MissingInputError(
                "a Full release is needed (for --as-of or --release full) but no "
                "sct2_Concept_Full_*.txt was found; found Concept files for: "
                + (", ".join(sorted(kinds)) or "none")
            )
        return "Full"
    if requested == "snapshot" or "Snapshot" in kinds:
        if "Snapshot" not in kinds:
            raise MissingInputError("--release snapshot given but no sct2_Concept_Snapshot_*.txt was found")
        return "Snapshot"
    if "Full" in kinds:
        return "Full"
    return "Snapshot"  # nothing found; select_files reports it


def select_files(
    files: list[RF2File], release: str, *, stated: bool = False, src: Path | None = None
) -> dict[str, list[RF2File]]:
    """Group the files of one release type by content kind; raise when a required kind is missing."""
    by_kind: dict[str, list[RF2File]] = {}
    for f in files:
        if f.release == release:
            by_kind.setdefault(f.content, []).append(f)
    # The association refset was once named AssociationReference; both are the same layout.
    if "AssociationReference" in by_kind:
        by_kind.setdefault("Association", []).extend(by_kind.pop("AssociationReference"))
    required = list(REQUIRED)
    if stated:
        required.append("StatedRelationship")
    missing = [k for k in required if k not in by_kind]
    if missing:
        listing = "\n    ".join(str(f.path) for f in files[:40]) or "(no file matching the RF2 name grammar)"
        more = f"\n    ... and {len(files) - 40} more" if len(files) > 40 else ""
        raise MissingInputError(
            f"{src or 'release folder'}: required RF2 {release} file(s) missing: "
            + ", ".join(_example_name(k, release) for k in missing)
            + f"\n  found {len(files)} RF2 file(s):\n    {listing}{more}"
        )
    return by_kind


def _example_name(kind: str, release: str) -> str:
    names = {
        "Concept": f"sct2_Concept_{release}_*.txt",
        "Description": f"sct2_Description_{release}-*_*.txt",
        "Relationship": f"sct2_Relationship_{release}_*.txt",
        "StatedRelationship": f"sct2_StatedRelationship_{release}_*.txt",
        "Language": f"der2_cRefset_Language{release}-*_*.txt",
        "ExtendedMap": f"der2_iisssccRefset_ExtendedMap{release}_*.txt (ICD-10 map)",
    }
    return names.get(kind, kind)
