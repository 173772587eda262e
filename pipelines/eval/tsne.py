"""t-SNE of a token embedding matrix (evaluation (e)): coloured by ICD chapter with the rare codes marked,
or by code log frequency when no chapters are given.

Dimension legend: N concepts, S sampled codes, D embedding dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

MAX_RARE_SHARE = 0.25  # rare codes take at most this share of the sampled points (always included up to it)


def sample_codes(
    codes: list[str], points: int, seed: int, rare: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted rows of up to ``points`` non-special codes (seeded), the rare ones first in line; and which
    of them are rare. Shapes: rare ``(N,)`` bool -> ``(S,)``, ``(S,)``."""
    normal = np.array(
        [i for i, c in enumerate(codes) if not (c.startswith("[") and c.endswith("]"))], dtype=np.int64
    )
    is_rare = np.zeros(len(codes), bool) if rare is None else np.asarray(rare, bool)
    if is_rare.shape != (len(codes),):
        raise ValueError(f"rare has shape {is_rare.shape}, expected ({len(codes)},) like codes")
    rng = np.random.default_rng([seed, 5])
    r, o = normal[is_rare[normal]], normal[~is_rare[normal]]
    n = min(points, len(normal))
    keep_r = rng.choice(r, size=min(len(r), int(MAX_RARE_SHARE * n)), replace=False) if len(r) else r
    keep_o = rng.choice(o, size=min(len(o), n - len(keep_r)), replace=False) if len(o) else o
    pick = np.sort(np.concatenate([keep_r, keep_o]).astype(np.int64))
    return pick, is_rare[pick]


def tsne_plot(
    matrix: torch.Tensor,
    log_frequency: np.ndarray,
    codes: list[str],
    out: str | Path,
    *,
    title: str,
    points: int = 2000,
    seed: int = 0,
    chapters: Sequence[int | None] | None = None,
    rare: np.ndarray | None = None,
) -> dict[str, Any]:
    """Write a PNG of a 2-D t-SNE of up to ``points`` non-special codes (seeded sample).

    ``chapters``: the ICD chapter of each row (None: none), to colour by chapter; without it the points are
    coloured by ``log_frequency``. ``rare`` ``(N,)`` bool: codes drawn as black crosses (sampled first, up
    to a quarter of the points).
    """
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    from ontology_compiler.api import require

    require("matplotlib").use("Agg")
    plt = require("matplotlib.pyplot")

    pick, is_rare = sample_codes(codes, points, seed, rare)
    x = matrix.detach().float().cpu().numpy()[pick]  # (S, D)
    perplexity = float(min(30.0, max(2.0, (len(pick) - 1) / 3)))
    with threadpool_limits(1):  # OpenMP threads spinning beside torch's cost minutes on a busy CPU
        y = TSNE(n_components=2, init="pca", random_state=seed, perplexity=perplexity).fit_transform(
            x
        )  # (S, 2)
    fig, ax = plt.subplots(figsize=(7, 5.5), dpi=110)
    if chapters is not None:
        if len(chapters) != len(codes):
            raise ValueError(f"chapters has {len(chapters)} entries, expected {len(codes)} like codes")
        ch = np.array([0 if chapters[i] is None else int(chapters[i]) for i in pick])  # (S,), 0 = none
        cmap = plt.get_cmap("tab20", 22)
        for c in np.unique(ch):
            sel = (ch == c) & ~is_rare
            if sel.any():
                colour = "0.75" if c == 0 else cmap((c - 1) % 22)
                ax.scatter(
                    y[sel, 0], y[sel, 1], s=5, color=colour, label="no chapter" if c == 0 else f"ch. {c}"
                )
        ax.legend(
            fontsize=6, ncol=2, markerscale=2, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False
        )
    else:
        sc = ax.scatter(y[~is_rare, 0], y[~is_rare, 1], c=log_frequency[pick][~is_rare], s=4, cmap="viridis")
        fig.colorbar(sc, ax=ax, label="log frequency (pretraining)")
    if is_rare.any():
        ax.scatter(
            y[is_rare, 0],
            y[is_rare, 1],
            s=14,
            marker="x",
            color="black",
            linewidths=0.8,
            label=f"rare ({int(is_rare.sum())})",
        )
        if chapters is not None:
            ax.legend(
                fontsize=6, ncol=2, markerscale=2, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False
            )
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return {
        "path": str(out),
        "points": int(len(pick)),
        "perplexity": perplexity,
        "coloured_by": "chapter" if chapters is not None else "log_frequency",
        "rare_marked": int(is_rare.sum()),
    }
