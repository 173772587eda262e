"""A code cache for masked-code prediction: the sequence's visible codes, and codes like them, gain mass.

A chronic condition is coded again at later admissions, so the code behind a ``[MASK]`` is often visible
elsewhere in the same sequence. A tied decoder copies such a code only as far as pretraining taught it
to, and it learns that poorly for codes it seldom or never trained on. The cache (after Grave, Joulin and
Usunier, "Improving neural language models with a continuous cache", ICLR 2017, here over code vectors)
mixes the model's distribution over the N codes with one built from the sequence's visible codes:

    p(c) = (1 - weight) * softmax(logits)(c) + weight * mean_j K(c, x_j)
    K(c, j) = exp(sharpness * (cos(E_c, E_j) - 1)) / sum_c' exp(sharpness * (cos(E_c', E_j) - 1))

where x_j runs over the visible codes of the sequence (real, non-special tokens at positions not being
predicted) and E is the model's token matrix. Each visible code spreads one unit of mass over the codes
whose vectors are like its own: itself first (cosine 1), then, in an HRR model, codes composed from the
same atoms (its twin in the other ICD version, its siblings). Rows that are equal share the mass equally,
so a plain table, whose rows of codes no training saw are all alike, spreads a visible unseen code over
all of them. Special tokens receive no mass. A sequence with no visible code keeps the model's
distribution. Nothing is trained: ``weight`` and ``sharpness`` are chosen on validation data
(:func:`pipelines.train.cache_choice.choose_cache`) and saved in the model's ``config.json`` (``mlm_cache``).

Dimension legend: B sequences, T positions, N codes, D embedding dim, M predicted positions, U distinct
visible codes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["CodeCache", "cache_distribution", "mix_log_probs", "visible_codes"]

CODE_CHUNK = 512  # distinct visible codes whose kernels (CODE_CHUNK x N) are built at once


@dataclass(frozen=True)
class CodeCache:
    """The cache's two numbers: its share of the mixture and how sharply it prefers like codes."""

    weight: float  # in [0, 1): the cache's share of the mixture (0: the model alone)
    sharpness: float  # > 0: the kernel's inverse temperature on the cosine

    def __post_init__(self) -> None:
        if not (
            isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and 0 <= self.weight < 1
        ):
            raise ValueError(f"cache weight must be a number in [0, 1), got {self.weight!r}")
        if not (
            isinstance(self.sharpness, (int, float)) and math.isfinite(self.sharpness) and self.sharpness > 0
        ):
            raise ValueError(f"cache sharpness must be a positive number, got {self.sharpness!r}")

    def to_dict(self) -> dict[str, float]:
        return {"weight": float(self.weight), "sharpness": float(self.sharpness)}

    @classmethod
    def from_dict(cls, d: Any) -> CodeCache:
        """From ``{"weight": w, "sharpness": s}``; anything else raises ``ValueError``."""
        if not isinstance(d, dict) or set(d) != {"weight", "sharpness"}:
            raise ValueError(f"expected {{'weight': w, 'sharpness': s}}, got {d!r}")
        return cls(d["weight"], d["sharpness"])


def visible_codes(input_ids: Tensor, attention_mask: Tensor, predicted: Tensor, special: Tensor) -> Tensor:
    """Which positions the cache reads: real tokens, not special, not being predicted.

    Shapes: input_ids, attention_mask, predicted ``(B, T)``; special ``(N,)`` bool -> ``(B, T)`` bool.
    """
    return attention_mask.bool() & ~predicted.bool() & ~special[input_ids.long()]


def cache_distribution(
    token_matrix: Tensor, input_ids: Tensor, visible: Tensor, special: Tensor, sharpness: float
) -> tuple[Tensor, Tensor]:
    """Each sequence's cache distribution over the codes, and whether it has any visible code.

    Shapes: token_matrix ``(N, D)``; input_ids, visible ``(B, T)``; special ``(N,)`` bool ->
    ``(B, N)`` float32 (rows sum to 1, or 0 without visible codes) and ``(B,)`` bool.
    """
    e = F.normalize(token_matrix.detach().float(), dim=1)  # (N, D)
    b, _ = input_ids.shape
    rows, cols = visible.nonzero(as_tuple=True)
    codes, inv = torch.unique(input_ids[rows, cols].long(), return_inverse=True)  # (U,), (V,)
    counts = torch.zeros(b, codes.numel(), dtype=torch.float32, device=e.device)  # (B, U)
    ones = torch.ones(inv.numel(), dtype=torch.float32, device=e.device)
    counts.index_put_((rows.to(e.device), inv.to(e.device)), ones, accumulate=True)
    out = torch.zeros(b, e.shape[0], dtype=torch.float32, device=e.device)  # (B, N)
    keep = ~special.to(e.device)  # (N,)
    for s in range(0, codes.numel(), CODE_CHUNK):
        u = codes[s : s + CODE_CHUNK].to(e.device)
        k = torch.exp(sharpness * (e[u] @ e.t() - 1.0)) * keep  # (u, N)
        k = k / k.sum(1, keepdim=True)
        out += counts[:, s : s + CODE_CHUNK] @ k
    n = counts.sum(1)  # (B,)
    has = n > 0
    out[has] /= n[has, None]
    return out, has


def mix_log_probs(logits: Tensor, cache: Tensor, has: Tensor, weight: float) -> Tensor:
    """Log of ``(1 - weight) * softmax(logits) + weight * cache`` where ``has``, else ``log_softmax``.

    Shapes: logits, cache ``(M, N)``; has ``(M,)`` bool -> ``(M, N)`` float32.
    """
    logp = torch.log_softmax(logits.float(), dim=1)  # (M, N)
    if weight == 0 or not bool(has.any()):
        return logp
    mixed = torch.logaddexp(logp + math.log1p(-weight), torch.log(cache.float() * weight))  # (M, N)
    return torch.where(has[:, None], mixed, logp)
