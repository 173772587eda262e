"""Errors raised by the ontology compiler.

Structural problems in the input raise a subclass of :class:`OntologyCompilerError` that carries the
file, the line and what was expected; data-quality findings are counted and written to the manifest.
"""

from __future__ import annotations

import errno
from pathlib import Path


class OntologyCompilerError(Exception):
    """Base class of every error the compiler raises on purpose."""


class InputFileError(OntologyCompilerError):
    """A problem located in one input file (and, where known, one line of it)."""

    def __init__(
        self,
        path: str | Path,
        message: str,
        *,
        line: int | None = None,
        expected: str | None = None,
        found: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.line = line
        self.expected = expected
        self.found = found
        self.hint = hint
        where = f"{self.path}" + (f", line {line}" if line is not None else "")
        parts = [f"{where}: {message}"]
        if expected is not None:
            parts.append(f"expected: {expected}")
        if found is not None:
            parts.append(f"found: {found}")
        if hint:
            parts.append(hint)
        super().__init__("\n  ".join(parts))


class MissingInputError(OntologyCompilerError):
    """A required RF2 file (or mapping source) was not found under the release folder."""


class DuplicateRowError(InputFileError):
    """Two rows of one component (same id and effectiveTime) that differ: the release is inconsistent.

    ``path``/``line`` locate the first row, ``other_path``/``other_line`` the second.
    """

    def __init__(
        self,
        path: str | Path,
        line: int,
        other_path: str | Path,
        other_line: int,
        message: str,
        *,
        expected: str | None = None,
        found: str | None = None,
    ) -> None:
        self.other_path = Path(other_path)
        self.other_line = other_line
        super().__init__(path, message, line=line, expected=expected, found=found)


class PackageError(OntologyCompilerError):
    """A release folder holds several packages of one namespace with different dates (e.g. two
    International releases) and ``--package`` does not choose one; or ``--package`` names none found."""


class HierarchyCycleError(OntologyCompilerError):
    """The is-a hierarchy contains a cycle; ``members`` lists the concepts of one cycle."""

    def __init__(self, members: list[int]) -> None:
        self.members = members
        chain = " -> ".join(str(m) for m in [*members, members[0]])
        super().__init__(f"is-a hierarchy has a cycle through {len(members)} concept(s): {chain}")


class AsOfError(OntologyCompilerError):
    """``--as-of`` asks for a date the release cannot provide."""


class OptionError(OntologyCompilerError):
    """Options that do not apply to the input's format, or that exclude each other."""


class OutputExistsError(OntologyCompilerError):
    """The output folder already holds a different program; it is never overwritten."""


class ProgramFormatError(OntologyCompilerError):
    """A compiled program on disk does not match format 1 (version, hashes, files)."""


class ProgramWriteError(OntologyCompilerError, OSError):
    """Writing a program failed (disk full, no permission, a Parquet writer error); nothing was published
    and the temporary folder was removed. ``path`` is the program folder that was to be written, ``file``
    the file being written when it failed, ``cause`` the underlying error. An ``OSError`` too, so code
    that handles failed writes as such keeps working."""

    def __init__(self, path: str | Path, file: str | None, cause: BaseException) -> None:
        self.path = Path(path)
        self.file = file
        self.cause = cause
        root = cause
        while isinstance(root, OntologyCompilerError) and root.__cause__ is not None:
            root = root.__cause__  # the OS or writer error under a wrapping one
        full = getattr(root, "errno", None) == errno.ENOSPC
        why = f"the disk is full ({root})" if full else f"{type(root).__name__}: {root}"
        where = f" (writing {file})" if file else ""
        super().__init__(
            f"{self.path}: could not write the program{where}: {why}\n"
            "  nothing was published and the temporary folder was removed; free space or fix the output "
            "folder, then compile again"
        )
