"""t-SNE of a token embedding matrix coloured by code log frequency (evaluation (e)).

Dimension legend: N concepts, S sampled codes, D embedding dim.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch


def tsne_plot(
    matrix: torch.Tensor,
    log_frequency: np.ndarray,
    codes: list[str],
    out: str | Path,
    *,
    title: str,
    points: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Write a PNG of a 2-D t-SNE of up to ``points`` non-special codes (seeded sample)."""
    from sklearn.manifold import TSNE

    from ontology_compiler.extras import require

    require("matplotlib").use("Agg")
    plt = require("matplotlib.pyplot")

    normal = np.array([i for i, c in enumerate(codes) if not (c.startswith("[") and c.endswith("]"))])
    rng = np.random.default_rng([seed, 5])
    pick = np.sort(rng.choice(normal, size=min(points, len(normal)), replace=False))
    x = matrix.detach().float().cpu().numpy()[pick]  # (S, D)
    perplexity = float(min(30.0, max(2.0, (len(pick) - 1) / 3)))
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # OpenMP threads spinning beside torch's cost minutes on a busy CPU
        y = TSNE(n_components=2, init="pca", random_state=seed, perplexity=perplexity).fit_transform(
            x
        )  # (S, 2)
    fig, ax = plt.subplots(figsize=(6, 5), dpi=110)
    sc = ax.scatter(y[:, 0], y[:, 1], c=log_frequency[pick], s=4, cmap="viridis")
    fig.colorbar(sc, ax=ax, label="log frequency (pretraining)")
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return {"path": str(out), "points": int(len(pick)), "perplexity": perplexity}
