"""Errors raised by ``hrr_kernel``: one base class, subclasses carrying context."""

from __future__ import annotations


class HRRKernelError(Exception):
    """Base class of every error raised on purpose by ``hrr_kernel``."""


class ProgramError(HRRKernelError):
    """A program folder cannot be used: missing, corrupt or of an unknown format."""

    def __init__(self, message: str, *, path: object = None) -> None:
        self.path = path
        super().__init__(f"{message} (program: {path})" if path is not None else message)


class FormatVersionError(ProgramError):
    """The program's ``format_version`` has a major version this reader does not know."""

    def __init__(self, *, path: object, found: object, supported: tuple[int, ...]) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"unsupported program format_version {found!r}; this hrr_kernel reads major version(s) "
            f"{', '.join(map(str, supported))}. Recompile the program with a matching compiler or "
            "upgrade hrr_kernel",
            path=path,
        )


class HashMismatchError(ProgramError):
    """A program file's sha256 differs from the one recorded in ``manifest.json``."""

    def __init__(self, *, path: object, file: str, expected: str, found: str) -> None:
        self.file = file
        self.expected = expected
        self.found = found
        super().__init__(
            f"sha256 of {file} does not match the manifest: expected {expected}, found {found}. "
            "The file was modified or truncated after compilation; recompile the program",
            path=path,
        )


class ShapeError(HRRKernelError, ValueError):
    """A tensor given to a public function has the wrong shape, dtype or device."""
