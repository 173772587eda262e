"""A Transformer encoder that reads a patient as a sequence of visits, each a pooled set of codes.

Everything a forward pass needs is in this file: the config, per-visit pooling of code embeddings (sum,
as in the article's ``EHRTransformer``, or attention pooling), sinusoidal visit positions, pre-LayerNorm
encoder blocks over visits, masked mean pooling over real visits, and one classification head per task
(mortality: 1 logit, chapters: 22). Codes are embedded by any module with ``forward(ids) -> (*, D)`` — a
plain ``nn.Embedding`` or an ``hrr_kernel.HRREmbedding``.

``forward`` takes the flat format the BERT takes (code ids, visit-segment ids, attention mask) and groups
the codes by segment into visits, so the fine-tuning loop serves both models; :meth:`forward_visits`
takes visits directly.

Dimension legend: B batch, T codes per sequence, V visits, C codes per visit, D dim, H heads,
K = D // H head dim, F feed-forward dim, L task labels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .bert import TASKS
from .common import CONFIG_FILE, WEIGHTS_FILE, ConfigDict, check_positive, save_folder
from .errors import PretrainedFileError

__all__ = ["VisitTransformer", "VisitTransformerConfig", "POOLINGS", "group_visits", "masked_mean"]

POOLINGS = ("sum", "attention")
MODEL_KIND = "visit-transformer"
INIT_STD = 0.02  # std of the N(0, std) default code embedding


@dataclass
class VisitTransformerConfig(ConfigDict):
    """Sizes and options of a visit Transformer (saved as ``config.json``)."""

    n_codes: int  # code vocabulary N (program concepts)
    dim: int = 64  # model dimension D (= code embedding dimension)
    n_layers: int = 2  # encoder blocks
    n_heads: int = 2  # attention heads H (D must be divisible by H)
    ffn_dim: int = 128  # feed-forward inner size F
    max_visits: int = 100  # visits per patient V (sinusoidal positions)
    pooling: str = "sum"  # codes -> visit: sum (article) or attention
    dropout: float = 0.1  # dropout on visit inputs, residual branches and the head
    pad_id: int = 0  # code id of padding (never pooled)
    code_mode: str = "unstructured"  # how codes are embedded (recorded): unstructured or an HRR mode

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim ({self.dim}) must be divisible by n_heads ({self.n_heads})")
        check_positive(self, ("n_codes", "dim", "n_layers", "n_heads", "ffn_dim", "max_visits"))


def masked_mean(e: Tensor, mask: Tensor) -> Tensor:
    """Mean over the second-last axis of the real entries (zero when none).
    e ``(*, L, D)``, mask ``(*, L)``."""
    m = mask.unsqueeze(-1).to(e.dtype)  # (*, L, 1)
    return (e * m).sum(-2) / m.sum(-2).clamp(min=1)  # (*, D)


def sinusoidal_positions(n: int, dim: int, device: torch.device | None = None) -> Tensor:
    """Vaswani et al.'s encoding ``PE(p, 2i) = sin(p / 10000^(2i/D))``, ``PE(p, 2i+1) = cos(...)``.
    ``(n, D)``."""
    pos = torch.arange(n, device=device, dtype=torch.float32).unsqueeze(1)  # (n, 1)
    i = torch.arange(dim, device=device)  # (D,)
    rate = torch.exp(-math.log(10000.0) * (2 * (i // 2)).float() / dim)  # (D,)
    angle = pos * rate  # (n, D)
    return torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))  # (n, D)


def group_visits(
    input_ids: Tensor, segment_ids: Tensor, attention_mask: Tensor, pad_id: int = 0
) -> tuple[Tensor, Tensor]:
    """Flat codes with visit-segment ids -> padded visits.

    Shapes:
        - input_ids, segment_ids, attention_mask: ``(B, T)``
        - output: visit codes ``(B, V, C)`` (``pad_id`` where empty) and code mask ``(B, V, C)``
    """
    b, t = input_ids.shape
    mask = attention_mask.bool()
    seg = torch.where(mask, segment_ids.long(), segment_ids.new_zeros(()).long())  # (B, T)
    if bool((seg < 0).any()):
        raise ValueError(f"segment_ids must be >= 0, got min {int(seg.min())}")
    v = int(seg.max()) + 1 if t else 1
    key = torch.where(mask, seg, torch.full_like(seg, v))  # (B, T), padding sorts last
    order = torch.sort(key, dim=1, stable=True).indices  # (B, T)
    key_sorted = key.gather(1, order)  # (B, T)
    counts = F.one_hot(key, v + 1).sum(1)  # (B, V + 1)
    start = counts.cumsum(1) - counts  # (B, V + 1)
    rank = torch.arange(t, device=input_ids.device).unsqueeze(0) - start.gather(1, key_sorted)  # (B, T)
    c = max(int(counts[:, :v].max()), 1) if t else 1
    codes = input_ids.new_full((b, v + 1, c), pad_id)  # (B, V + 1, C)
    keep = key_sorted < v  # (B, T)
    rows = torch.arange(b, device=input_ids.device).unsqueeze(1).expand(b, t)  # (B, T)
    ids_sorted = input_ids.gather(1, order)  # (B, T)
    codes[rows[keep], key_sorted[keep], rank[keep]] = ids_sorted[keep]
    code_mask = torch.zeros_like(codes, dtype=torch.bool)
    code_mask[rows[keep], key_sorted[keep], rank[keep]] = True
    return codes[:, :v], code_mask[:, :v]  # (B, V, C)


class VisitPooling(nn.Module):
    """Codes of a visit -> one vector: masked sum, or attention ``softmax(w . tanh(W e))`` over the codes."""

    def __init__(self, config: VisitTransformerConfig) -> None:
        super().__init__()
        self.kind = config.pooling
        if self.kind == "attention":
            self.proj = nn.Linear(config.dim, config.dim)
            self.score = nn.Linear(config.dim, 1, bias=False)

    def forward(self, e: Tensor, mask: Tensor) -> Tensor:
        """Shapes: e ``(B, V, C, D)``, mask ``(B, V, C)`` -> ``(B, V, D)`` (zero for an empty visit)."""
        m = mask.unsqueeze(-1).to(e.dtype)  # (B, V, C, 1)
        if self.kind == "sum":
            return (e * m).sum(2)  # (B, V, D)
        s = self.score(torch.tanh(self.proj(e))).squeeze(-1)  # (B, V, C)
        s = s.masked_fill(~mask, float("-inf"))
        w = torch.nan_to_num(s.softmax(-1), nan=0.0)  # (B, V, C), empty visits -> 0
        return torch.einsum("bvc,bvcd->bvd", w, e)  # (B, V, D)


class Block(nn.Module):
    """A pre-LayerNorm Transformer block over visits: ``x += attn(LN(x)); x += ffn(LN(x))``."""

    def __init__(self, config: VisitTransformerConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.norm1 = nn.LayerNorm(config.dim)
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.out = nn.Linear(config.dim, config.dim)
        self.norm2 = nn.LayerNorm(config.dim)
        self.ffn = nn.Sequential(
            nn.Linear(config.dim, config.ffn_dim), nn.GELU(), nn.Linear(config.ffn_dim, config.dim)
        )
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, visit_mask: Tensor) -> Tensor:
        b, v, d = x.shape
        q, k, val = self.qkv(self.norm1(x)).split(d, dim=2)  # 3 x (B, V, D)
        q, k, val = (z.view(b, v, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, val))
        y = F.scaled_dot_product_attention(q, k, val, attn_mask=visit_mask[:, None, None, :])  # (B, H, V, K)
        x = x + self.drop(self.out(y.transpose(1, 2).reshape(b, v, d)))  # (B, V, D)
        return x + self.drop(self.ffn(self.norm2(x)))  # (B, V, D)


class VisitTransformer(nn.Module):
    """Visit-level Transformer encoder with per-task classification heads.

    Args:
        config: sizes and pooling.
        code_embedding: a module ``forward(ids) -> (*, D)`` (``nn.Embedding`` or ``HRREmbedding``);
            ``None``: a plain ``nn.Embedding(n_codes, dim)``.
    """

    def __init__(self, config: VisitTransformerConfig, code_embedding: nn.Module | None = None) -> None:
        super().__init__()
        self.config = cfg = config
        if code_embedding is None:
            code_embedding = nn.Embedding(cfg.n_codes, cfg.dim)
            nn.init.normal_(code_embedding.weight, 0.0, INIT_STD)
        self.code = code_embedding
        self.pool = VisitPooling(cfg)
        self.register_buffer("positions", sinusoidal_positions(cfg.max_visits, cfg.dim), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.heads = _Heads(cfg)

    @property
    def pad_id(self) -> int:
        return self.config.pad_id

    def encode_visits(self, visit_codes: Tensor, code_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Contextual visit vectors and the visit mask.

        Shapes:
            - visit_codes, code_mask: ``(B, V, C)``
            - output: ``(B, V, D)`` and visit mask ``(B, V)``
        """
        if visit_codes.dim() != 3:
            raise ValueError(f"visit_codes must be (B, V, C), got shape {tuple(visit_codes.shape)}")
        if code_mask is None:
            code_mask = visit_codes != self.config.pad_id
        if code_mask.shape != visit_codes.shape:
            raise ValueError(
                f"code_mask shape {tuple(code_mask.shape)} != visit_codes shape {tuple(visit_codes.shape)}"
            )
        b, v, _ = visit_codes.shape
        if v > self.config.max_visits:
            raise ValueError(f"{v} visits exceed max_visits {self.config.max_visits}")
        visit_mask = code_mask.any(-1)  # (B, V)
        empty = (~visit_mask.any(-1)).nonzero().flatten()
        if empty.numel():
            raise ValueError(f"batch rows {empty[:5].tolist()} have no codes; drop such patients")
        e = self.code(visit_codes)  # (B, V, C, D)
        x = self.pool(e, code_mask) * math.sqrt(self.config.dim)  # (B, V, D)
        x = self.drop(x + self.positions[:v].unsqueeze(0))  # (B, V, D)
        for block in self.blocks:
            x = block(x, visit_mask)  # (B, V, D)
        return self.norm(x), visit_mask

    def forward_visits(self, visit_codes: Tensor, code_mask: Tensor | None = None, *, task: str) -> Tensor:
        """Task logits from visits. Shapes: visit_codes, code_mask ``(B, V, C)`` -> ``(B, L)``."""
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
        x, visit_mask = self.encode_visits(visit_codes, code_mask)  # (B, V, D), (B, V)
        return self.heads(masked_mean(x, visit_mask), task)  # (B, D) -> (B, L)

    def forward(
        self, input_ids: Tensor, segment_ids: Tensor, attention_mask: Tensor | None = None, *, task: str
    ) -> Tensor:
        """Task logits from the flat BERT format (codes grouped into visits by segment id).

        Shapes:
            - input_ids, segment_ids, attention_mask (True = real code): ``(B, T)``
            - output: ``(B, L)``
        """
        if input_ids.dim() != 2 or segment_ids.shape != input_ids.shape:
            raise ValueError(
                f"input_ids and segment_ids must both be (B, T), got {tuple(input_ids.shape)} and "
                f"{tuple(segment_ids.shape)}"
            )
        if attention_mask is None:
            attention_mask = input_ids != self.config.pad_id
        codes, code_mask = group_visits(input_ids.long(), segment_ids, attention_mask, self.config.pad_id)
        return self.forward_visits(codes, code_mask, task=task)  # (B, L)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # --- persistence -------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write ``config.json`` and ``model.safetensors`` (no pickle)."""
        meta = {"kind": MODEL_KIND, "config": asdict(self.config), **(extra or {})}
        return save_folder(directory, self, meta, {"kind": MODEL_KIND})

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, code_embedding_factory: Callable[[VisitTransformerConfig], nn.Module]
    ) -> VisitTransformer:
        """Load a model saved by :meth:`save_pretrained`; ``code_embedding_factory(config)`` rebuilds the
        code-embedding module the weights belong to."""
        from safetensors.torch import load_file

        d = Path(directory)
        p = d / CONFIG_FILE
        try:
            meta = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise PretrainedFileError(p, f"missing or not valid JSON ({e})") from e
        if meta.get("kind") != MODEL_KIND:
            raise PretrainedFileError(p, f"not a visit-transformer config (kind {meta.get('kind')!r})")
        config = VisitTransformerConfig.from_dict(meta["config"])
        model = cls(config, code_embedding_factory(config))
        try:
            model.load_state_dict(load_file(str(d / WEIGHTS_FILE)))
        except (OSError, RuntimeError) as e:
            raise PretrainedFileError(d / WEIGHTS_FILE, f"weights do not fit the config: {e}") from e
        return model


class _Heads(nn.Module):
    """Dropout then one linear layer per task (``tasks`` mirrors the BERT's pooled heads)."""

    def __init__(self, config: VisitTransformerConfig) -> None:
        super().__init__()
        self.drop = nn.Dropout(config.dropout)
        self.tasks = nn.ModuleDict({name: nn.Linear(config.dim, n) for name, n in TASKS.items()})

    def forward(self, pooled: Tensor, task: str) -> Tensor:
        return self.tasks[task](self.drop(pooled))  # (B, L)
