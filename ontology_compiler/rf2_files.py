"""Find RF2 files by the RF2 file-name grammar anywhere under a release folder.

A release folder may hold one package (International) or several (International plus extensions), each
with ``Snapshot/``, ``Full/`` and ``Delta/`` trees; files are recognised by name, not by location. A
package is the files of one namespace and file date (``INT_20220531``). Rules (:func:`select_files`):

- every required kind must be present somewhere (:data:`REQUIRED`);
- every package with terminology files (and the International package always) has its own non-empty
  Concept, Description and Relationship files (:data:`CORE`): without them its rows would be merged
  against concepts that are not there;
- several packages of one namespace with different dates (two International releases in one folder)
  are an error unless ``packages`` (``--package INT_20220531``) chooses one;
- the date in a file name is a calendar date.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InputFileError, MissingInputError, OptionError, PackageError
from .rf2_schema import FILE_NAME_RE, is_calendar_date
from .walk import walk_files

log = logging.getLogger(__name__)

# Content kinds that must be present (the compiler also reads TextDefinition, StatedRelationship,
# RelationshipConcreteValues and Association(Reference) files when there are any).
REQUIRED = ("Concept", "Description", "Relationship", "Language", "ExtendedMap")
# Kinds every package with terminology files must have, each file with at least one row.
CORE = ("Concept", "Description", "Relationship")
# Kinds of the sct2 (terminology) files: a package with any of them is a terminology package.
TERMINOLOGY = (*CORE, "StatedRelationship", "TextDefinition", "RelationshipConcreteValues")
PACKAGE_RE = re.compile(r"^(?P<namespace>[A-Za-z0-9]+)_(?P<date>\d{8})$")


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

    @property
    def package(self) -> str:
        """The package the file belongs to: ``<namespace>_<date>``, e.g. ``INT_20220531``."""
        return f"{self.namespace}_{self.date}"


def scan_release(src: str | Path) -> list[RF2File]:
    """All files under ``src`` whose names follow the RF2 grammar, sorted by path."""
    root = Path(src)
    if not root.is_dir():
        raise MissingInputError(f"{root}: not a folder (expected an RF2 release folder)")
    found: list[RF2File] = []
    # symbolic links to folders followed, each real folder once (ontology_compiler/walk.py)
    for path in walk_files(root, lambda n: FILE_NAME_RE.match(n) is not None):
        g = FILE_NAME_RE.match(path.name).groupdict()
        if not is_calendar_date(g["date"]):
            raise InputFileError(
                path,
                "the date in the RF2 file name is not a calendar date",
                expected="<name>_<namespace>_YYYYMMDD.txt with a real date",
                found=g["date"],
            )
        found.append(
            RF2File(
                path=path,
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
    """Pick ``Snapshot`` or ``Full``: ``--as-of`` needs Full; ``auto`` prefers Snapshot. ``--release
    snapshot`` with ``--as-of`` is an :class:`OptionError` (a Snapshot holds only the release's latest
    state; reading Full instead would ignore the one option or the other)."""
    if requested == "snapshot" and as_of is not None:
        raise OptionError(
            f"--release snapshot and --as-of {as_of} exclude each other: a Snapshot holds only the "
            "release's latest state; give --as-of with --release full (or auto), or drop --as-of"
        )
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
    files: list[RF2File],
    release: str,
    *,
    stated: bool = False,
    src: Path | None = None,
    packages: tuple[str, ...] = (),
) -> dict[str, list[RF2File]]:
    """Group the files of one release type by content kind; raise when a required kind is missing.

    ``packages`` (``NAMESPACE_YYYYMMDD``) chooses, for a namespace with packages of several dates, the
    one to read. See the module docstring for the rules.
    """
    typed = _choose_packages([f for f in files if f.release == release], packages, src)
    by_kind: dict[str, list[RF2File]] = {}
    for f in typed:
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
    _check_core_files(typed, release, src)
    return by_kind


def _package_folder(fs: list[RF2File]) -> str:
    """The folder holding every file of a package (their common parent)."""
    return os.path.commonpath([str(f.path.parent) for f in fs])


def _choose_packages(files: list[RF2File], packages: tuple[str, ...], src: Path | None) -> list[RF2File]:
    """The files of the chosen package of every namespace (see :func:`select_files`)."""
    by_package: dict[str, list[RF2File]] = {}
    for f in files:
        by_package.setdefault(f.package, []).append(f)
    for p in packages:
        if PACKAGE_RE.match(p) is None:
            raise OptionError(f"--package {p!r}: expected NAMESPACE_YYYYMMDD, e.g. INT_20220531")
    found = ", ".join(f"{p} ({_package_folder(fs)})" for p, fs in sorted(by_package.items())) or "none"
    unknown = [p for p in packages if p not in by_package]
    if unknown:
        raise PackageError(
            f"{src or 'release folder'}: --package {', '.join(unknown)}: no such package; "
            f"packages found: {found}"
        )
    dates: dict[str, list[str]] = {}
    for p in sorted(by_package):
        ns, _date = p.rsplit("_", 1)
        dates.setdefault(ns, []).append(p)
    chosen: set[str] = set()
    for ns, ps in dates.items():
        named = [p for p in ps if p in packages]
        if len(named) > 1:
            raise PackageError(
                f"--package names {len(named)} packages of namespace {ns} ({', '.join(named)}); name one"
            )
        if len(ps) > 1 and not named:
            listing = "\n    ".join(f"{p}: {_package_folder(by_package[p])}" for p in ps)
            raise PackageError(
                f"{src or 'release folder'}: {len(ps)} packages of namespace {ns} with different dates would "
                f"be merged:\n    {listing}\n  choose one with --package (e.g. --package {ps[-1]}) or "
                "remove the others"
            )
        chosen.update(named or ps)
    if len(chosen) < len(by_package):
        log.info(
            "reading package(s) %s; ignoring %s",
            ", ".join(sorted(chosen)),
            ", ".join(sorted(set(by_package) - chosen)),
        )
    return [f for f in files if f.package in chosen]


def _check_core_files(files: list[RF2File], release: str, src: Path | None) -> None:
    """Every terminology package (and the International one) has non-empty CORE files."""
    by_package: dict[str, list[RF2File]] = {}
    for f in files:
        by_package.setdefault(f.package, []).append(f)
    for p, fs in sorted(by_package.items()):
        if fs[0].namespace != "INT" and not any(f.content in TERMINOLOGY for f in fs):
            continue  # a refset-only package (maps, language refsets) relies on the others' concepts
        missing = [k for k in CORE if not any(f.content == k for f in fs)]
        if missing:
            raise MissingInputError(
                f"{src or 'release folder'}: package {p} ({_package_folder(fs)}) has no "
                + ", ".join(_example_name(k, release) for k in missing)
                + "; every package with terminology files needs its own Concept, Description and "
                "Relationship files (without them its rows refer to concepts that are not there)\n"
                "  found in this package: " + ", ".join(sorted(f.path.name for f in fs))
            )
        for f in fs:
            if f.content in CORE and _has_no_rows(f.path):
                raise InputFileError(
                    f.path,
                    f"the {f.content} file of package {p} has no rows",
                    expected="a header line and at least one row",
                    found="only the header" if f.path.stat().st_size else "an empty file",
                )


def _has_no_rows(path: Path) -> bool:
    """True when nothing but line breaks follows the header line (reads at most 64 KiB after it)."""
    with open(path, "rb") as fh:
        fh.readline()
        return fh.read(1 << 16).strip(b"\r\n") == b""


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
