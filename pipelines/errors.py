"""Errors raised by the data pipelines (readers, cohort generator, tokenization).

Structural problems in an input (a missing table or column, a date that does not parse) raise a
subclass of :class:`PipelineError` that names the file, the line where known, and what was expected;
data-quality findings (unknown codes, patients without diagnoses) are counted into the manifest.
"""

from __future__ import annotations

from ontology_compiler.api import InputFileError as _CompilerInputFileError


class PipelineError(Exception):
    """Base class of every error the pipelines raise on purpose."""


class InputFileError(PipelineError, _CompilerInputFileError):
    """A problem located in one input file (and, where known, one line of it): file, line, expected, found."""


class MissingTableError(InputFileError):
    """A table the reader needs is not in the input folder."""


class DatasetExistsError(PipelineError):
    """The output folder holds something other than the dataset being written; it is never overwritten."""
