"""The cost figures of a model (evaluation (f)): embedding build time, step time, tokens per second,
peak memory.

Dimension legend: B batch, T codes.
"""

from __future__ import annotations

import resource
import sys
import time

import numpy as np
import torch


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
