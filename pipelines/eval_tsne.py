"""t-SNE of a token embedding matrix coloured by code log frequency (evaluation (e)) and the cost
figures of a model (embedding build time, step time, tokens per second, peak memory).

Dimension legend: N concepts, S sampled codes, D embedding dim, B batch, T codes.
"""

from __future__ import annotations

import resource
import sys
import time
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

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


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory: CUDA max allocated on a GPU, else the process's peak resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


def measure_cost(model, batch: dict[str, torch.Tensor], *, steps: int = 3, device) -> dict[str, float]:
    """Time ``steps`` MLM training steps on ``batch`` (a throw-away optimizer; weights restored)."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.0)
    ids = batch["input_ids"].to(device)
    seg = batch["segment_ids"].to(device)
    att = batch["attention_mask"].to(device)
    mlm = att.clone()
    mlm[:, 0] = False  # every real code but [CLS]
    targets = ids[mlm]
    build, step = [], []
    for _ in range(steps + 1):  # the first is a warm-up
        _sync(device)
        t0 = time.perf_counter()
        e = model.token_matrix()  # (N, D)
        _sync(device)
        t1 = time.perf_counter()
        h = model.encode(ids, seg, att, token_matrix=e)  # (B, T, D)
        loss = torch.nn.functional.cross_entropy(model.mlm(h[mlm], e), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _sync(device)
        t2 = time.perf_counter()
        build.append(t1 - t0)
        step.append(t2 - t0)
    model.load_state_dict(state)
    b, s = float(np.mean(build[1:])), float(np.mean(step[1:]))
    tokens = int(att.sum())
    return {
        "embedding_build_s": b,
        "step_s": s,
        "build_share": b / s if s else float("nan"),
        "tokens_per_s": tokens / s if s else float("nan"),
        "sequences_per_s": ids.shape[0] / s if s else float("nan"),
        "batch": int(ids.shape[0]),
        "peak_memory_mb": peak_memory_mb(device),
        "device": str(device),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
