"""The report's figures (matplotlib, Agg): frequency-bin accuracy and ROOD seen vs unseen, with intervals.

Each function takes plain numbers (no experiment files), writes one PNG and returns its path; without
matplotlib (the ``eval`` extra) it logs a warning and returns None, and the report is written without it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from .stats import Interval

log = logging.getLogger(__name__)

__all__ = ["pyplot", "frequency_plot", "rood_plot"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None (warned) when matplotlib is missing."""
    from ontology_compiler.api import MissingExtraError, require

    try:
        require("matplotlib").use("Agg")
        return require("matplotlib.pyplot")
    except MissingExtraError as e:
        log.warning("%s", e)
        return None


def _err(ivs: Sequence[Interval]) -> tuple[list[float], list[list[float]]]:
    """Estimates in % and the asymmetric error bars (0 where an interval has no bounds)."""
    y = [100 * iv.estimate for iv in ivs]
    lo = [100 * (iv.estimate - iv.low) if math.isfinite(iv.low) else 0.0 for iv in ivs]
    hi = [100 * (iv.high - iv.estimate) if math.isfinite(iv.high) else 0.0 for iv in ivs]
    return y, [lo, hi]


def _save(fig, plt, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.tight_layout()
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)
    return out


def frequency_plot(
    bins: Sequence[tuple[float, float, int, int]],
    series: Mapping[str, Sequence[Interval | None]],
    out: str | Path,
    *,
    metric: str = "top-100",
    reference: Sequence[float | None] | None = None,
    reference_label: str = "best MLM baseline",
) -> Path | None:
    """Accuracy per log-frequency bin with intervals, one line per configuration; under it the number of
    codes in each bin (bars, log scale) and the probes scored.

    ``bins``: ``(low, high, codes_in_bin, probes)`` per bin; ``series``: per configuration one interval
    per bin (None for an empty bin); ``reference``: a value per bin drawn dashed (the best baseline).
    """
    plt = pyplot()
    if plt is None:
        return None
    x = [(lo + hi) / 2 for lo, hi, _, _ in bins]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(6.5, 5), dpi=110, sharex=True, height_ratios=(3, 1.2))
    for k, (name, ivs) in enumerate(series.items()):
        pts = [
            (xi, iv) for xi, iv in zip(x, ivs, strict=True) if iv is not None and math.isfinite(iv.estimate)
        ]
        if not pts:
            continue
        y, err = _err([iv for _, iv in pts])
        shift = 0.12 * (k - (len(series) - 1) / 2)  # side by side within a bin
        ax.errorbar([p[0] + shift for p in pts], y, yerr=err, marker="o", capsize=3, label=name)
    if reference is not None:
        ref = [
            (xi, 100 * v) for xi, v in zip(x, reference, strict=True) if v is not None and math.isfinite(v)
        ]
        if ref:
            ax.plot(
                [r[0] for r in ref],
                [r[1] for r in ref],
                ls="--",
                color="0.4",
                marker=".",
                label=reference_label,
            )
    ax.set_ylabel(f"{metric} accuracy (%)")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.grid(alpha=0.3)
    counts = [c for _, _, c, _ in bins]
    bx.bar(x, [max(c, 0) for c in counts], width=1.6, color="0.7")
    for xi, (_, _, c, probes) in zip(x, bins, strict=True):
        bx.annotate(f"{c} codes\n{probes} probes", (xi, max(c, 1)), ha="center", va="bottom", fontsize=6)
    if any(c > 0 for c in counts):
        bx.set_yscale("log")
    bx.set_ylabel("codes")
    bx.set_xlabel("log frequency bin (ln of the code's share of pretraining tokens)")
    return _save(fig, plt, Path(out))


def rood_plot(
    rows: Mapping[str, Mapping[str, Interval | None]],
    out: str | Path,
    *,
    splits: Sequence[tuple[str, str]] = (
        ("test", "seen (test)"),
        ("rood", "ROOD"),
        ("rood_unseen", "ROOD unseen"),
    ),
) -> Path | None:
    """Chapter macro-F1 per model (configurations and baselines) on seen and unseen patients, bars with
    intervals. ``rows``: model -> split -> interval (None or missing: not scored)."""
    plt = pyplot()
    if plt is None:
        return None
    names = list(rows)
    width = 0.8 / max(len(splits), 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(names) + 2), 3.8), dpi=110)
    for j, (split, label) in enumerate(splits):
        xs, ivs = [], []
        for i, name in enumerate(names):
            iv = rows[name].get(split)
            if iv is not None and math.isfinite(iv.estimate):
                xs.append(i + (j - (len(splits) - 1) / 2) * width)
                ivs.append(iv)
        if ivs:
            y, err = _err(ivs)
            ax.bar(xs, y, width=width, yerr=err, capsize=3, label=label)
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylabel("chapters macro-F1 (%)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, plt, Path(out))
