"""Results over seeds: which seeds to run, and how often one model beats another.

A comparison repeated over data seeds and training seeds gives one value per run (a run: one data seed, one
training seed). The mean with its two-sided Student-t interval over those runs (the runs taken as
independent draws; fewer than two: no interval) is :func:`pipelines.eval.stats.t_interval`, written in a
cell by :func:`pipelines.eval.markdown.format_cell`. :func:`wins` pairs two models run by run and counts
where the first is better; :func:`claim` writes a sentence only when the difference has the same sign in
every run (and there are at least two). NaN values are dropped (and not counted).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Wins", "claim", "parse_seeds", "wins"]


def parse_seeds(seeds: int | str | Sequence[int], what: str = "seeds") -> list[int]:
    """Seeds from a count (``3``: 0, 1, 2) or a comma-separated list (``"0,5,7"``; one seed: ``"7,"``).

    Raises ``ValueError`` naming ``what`` on a count below 1, a negative or repeated seed, or text that is
    neither."""
    if isinstance(seeds, str):
        text = seeds.strip()
        try:
            if "," not in text:
                return parse_seeds(int(text), what)
            out = [int(s) for s in text.split(",") if s.strip()]
        except ValueError:
            raise ValueError(
                f"{what}: expected a count (3) or a comma-separated list (0,5,7), got {seeds!r}"
            ) from None
    elif isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"{what} must be >= 1 (a count), got {seeds}")
        return list(range(seeds))
    else:
        out = [int(s) for s in seeds]
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise ValueError(f"{what}: expected distinct seeds >= 0, got {seeds!r}")
    return out


@dataclass(frozen=True)
class Wins:
    """Run-by-run comparison of a with b: runs where a is better, worse, tied; the differences a - b."""

    better: int
    worse: int
    ties: int
    diffs: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.diffs)

    def cell(self) -> str:
        """``3 of 4`` and the range of the differences: ``3 of 4 (-0.060 to +0.120)``."""
        if not self.n:
            return "n/a"
        return f"{self.better} of {self.n} ({min(self.diffs):+.3f} to {max(self.diffs):+.3f})"


def wins(a: Mapping[Hashable, float], b: Mapping[Hashable, float], higher_is_better: bool = True) -> Wins:
    """Pair ``a`` and ``b`` by run key (e.g. ``(data seed, seed)``) over the keys both have with finite
    values, and count where a is better (higher, or lower with ``higher_is_better=False``)."""
    keys = [k for k in a if k in b and math.isfinite(a[k]) and math.isfinite(b[k])]
    d = [float(a[k] - b[k]) for k in keys]
    sign = 1.0 if higher_is_better else -1.0
    better = sum(sign * x > 0 for x in d)
    worse = sum(sign * x < 0 for x in d)
    return Wins(better, worse, len(d) - better - worse, tuple(d))


def claim(a: str, b: str, metric: str, w: Wins) -> str | None:
    """A sentence when ``a`` is better (or worse) than ``b`` on ``metric`` in every one of at least two runs;
    None when the runs disagree, tie, or there are fewer than two."""
    if w.n < 2 or (w.better != w.n and w.worse != w.n):
        return None
    verb = "better than" if w.better == w.n else "worse than"
    return (
        f"{a} is {verb} {b} on {metric} in all {w.n} runs "
        f"(differences {min(w.diffs):+.3f} to {max(w.diffs):+.3f})."
    )
