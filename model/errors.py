"""Errors raised by ``model``: one base class, subclasses carrying context (file, expected, found)."""

from __future__ import annotations


class ModelError(Exception):
    """Base class of every error raised on purpose by ``model``."""


class ProgramMismatchError(ModelError):
    """Weights were trained against one HRR program and are being used with another."""

    def __init__(self, *, path: object, expected: str, found: str) -> None:
        self.path, self.expected, self.found = path, expected, found
        super().__init__(
            f"{path}: the model was trained against program {expected!r} but program {found!r} was given; "
            "load the program the model was trained with (its id is in config.json)"
        )


class PretrainedFileError(ModelError):
    """A saved model folder lacks a file, or a file is unreadable or inconsistent."""

    def __init__(self, path: object, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class ModelWriteError(ModelError, OSError):
    """A model file could not be written (a full disk, no permission); its temporary file is removed and
    nothing is left under its name."""
