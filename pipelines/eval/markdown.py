"""The Markdown of every report (experiment, QA and Doctor2Vec comparisons): one cell formatter,
:func:`format_cell`, and one table writer, :func:`table`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .stats import CONSTANT, NO_PREDICTIONS, Interval

__all__ = ["format_cell", "table"]


def format_cell(x: Any, *, percent: bool = False, signed: bool = False) -> str:
    """One table cell.

    An :class:`~pipelines.eval.stats.Interval` over runs (QA and Doctor2Vec comparisons):
    ``0.688 (0.650 to 0.720)``, ``0.688 (1 run)`` with one value, ``n/a`` with none. With ``percent`` (the
    experiment report): ``61.0 (60.0–62.0)`` in %, ``+1.5 (-0.5 to +3.0)`` when ``signed``; the reason
    instead of the bounds when there are none or no spread (``predicts a constant``, ``*`` for a mean
    without per-patient predictions, ``same on every resample``); ``–`` for None or no estimate.
    Anything else: floats with 3 decimals, ``n/a`` for None and NaN, the rest as ``str``.
    """
    if percent:
        return _percent(x, signed)
    if isinstance(x, Interval):
        if x.n == 0:
            return "n/a"
        if x.n < 2:
            return f"{x.estimate:.3f} (1 run)"
        return f"{x.estimate:.3f} ({x.low:.3f} to {x.high:.3f})"
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def _percent(iv: Interval | None, signed: bool) -> str:
    if iv is None or not math.isfinite(iv.estimate):
        return "–"
    f = "{:+.1f}" if signed else "{:.1f}"
    est = f.format(100 * iv.estimate)
    if iv.note == CONSTANT:
        return f"{est} (predicts a constant)"
    if iv.note == NO_PREDICTIONS:
        return f"{est}*"
    extra = f"; {iv.note}" if iv.note and "trials predict a constant" in iv.note else ""
    if not (math.isfinite(iv.low) and math.isfinite(iv.high)):
        return est + (f" ({iv.note})" if extra else "")
    if iv.high - iv.low == 0:
        return f"{est} (same on every resample{extra})"
    sep = " to " if signed else "–"
    return f"{est} ({f.format(100 * iv.low)}{sep}{f.format(100 * iv.high)}{extra})"


def _escape(text: str) -> str:
    """A cell's text that keeps its row: ``|`` escaped, line breaks as ``<br>``."""
    return text.replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>").replace("\r", "<br>")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: one header row, a rule, then one line per row (cells through :func:`format_cell`,
    so a row may hold intervals, numbers and text; ``|`` and line breaks in a cell are escaped)."""
    lines = ["| " + " | ".join(_escape(str(h)) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_escape(format_cell(x)) for x in r) + " |" for r in rows]
    return "\n".join(lines)
