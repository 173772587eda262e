"""Markdown tables for the reports (experiment, QA and Doctor2Vec comparisons)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["cell", "table"]


def cell(x: Any) -> str:
    """A table cell: floats with 3 decimals, ``n/a`` for None and NaN, anything else as ``str``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: one header row, a rule, then one line per row (cells through :func:`cell`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)
