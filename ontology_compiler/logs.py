"""One logging setup for both console commands (``compile-ontology`` and ``hrrbert``).

The same flags mean the same everywhere: no flag logs INFO (progress lines, summaries of what was
counted), ``-v/--verbose`` adds DEBUG, ``-q/--quiet`` keeps only warnings and errors. Library code
only calls ``logging.getLogger(__name__)``; only a command calls :func:`setup_logging`. Log lines quote data
text (terms, codes, file names), so each one is passed through :func:`ontology_compiler.printable.printable`
(terminal control characters escaped).
"""

from __future__ import annotations

import logging

from .printable import printable

__all__ = ["FORMAT", "level_for", "setup_logging"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"


def level_for(verbose: bool, quiet: bool) -> int:
    """The logging level the ``-v`` / ``-q`` flags ask for; both at once is an error."""
    if verbose and quiet:
        raise ValueError("--verbose and --quiet exclude each other; give one of them")
    return logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO


class PrintableFormatter(logging.Formatter):
    """The commands' log format, each line made safe for a terminal (:func:`printable`)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def setup_logging(verbose: bool = False, quiet: bool = False) -> int:
    """Configure the root logger for a command; returns the level set."""
    level = level_for(verbose, quiet)
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter(FORMAT, DATE_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    return level
