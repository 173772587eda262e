"""Memory networks for question answering over a patient's facts: MemN2N (soft, multi-hop) and MemNN (hard).

Everything a forward pass needs is in this file. Facts and questions are sequences of token ids in one
joint id space: ids ``[0, n_words)`` are words (0 = padding, embedded by a word table), ids
``[n_words, n_words + n_codes)`` are ICD codes (concept id = id - n_words), embedded by any module with
``forward(ids) -> (*, D)`` — a plain ``nn.Embedding`` or an ``hrr_kernel.HRREmbedding``. A model that
needs several embedding matrices (A, B, C per hop) calls a ``code_embedding`` factory once per matrix.

- :class:`MemN2N` (Sukhbaatar et al., 2015): bag-of-words or position encoding of facts, temporal encoding
  (most recent memory = time 0), K hops, weight tying ``adjacent`` (A^{k+1} = C^k, B = A^1), ``layerwise``
  (A^k = A^1, C^k = C^1, u^{k+1} = H u^k + o^k) or ``none``; padded memories are masked out of the softmax;
  ``forward`` returns the answer logits and the attention of each hop.
- :class:`MemNN` (Weston et al., 2015): hard (argmax) addressing over the memories plus a learned "no
  more facts" slot, trained with supporting-fact supervision (a margin ranking loss per hop, teacher-forced
  answer loss), as a baseline.

Dimension legend: B batch, M memories (facts), L tokens per fact, Q tokens per question, D dim,
K hops, A answers, W words, N codes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .common import ConfigDict, check_positive

__all__ = [
    "MemN2N",
    "MemN2NConfig",
    "MemNN",
    "MemNNConfig",
    "TokenEmbedding",
    "TYINGS",
    "ENCODINGS",
    "memory_read",
]

TYINGS = ("adjacent", "layerwise", "none")
ENCODINGS = ("bow", "position")
PAD = 0  # word id of padding (facts, questions)

CodeEmbeddingFactory = Callable[[], nn.Module]
# config fields that must be >= 1 (both memory networks)
_SIZES = (
    "n_words",
    "n_codes",
    "n_answers",
    "dim",
    "hops",
    "max_memories",
    "max_fact_len",
    "max_question_len",
)


@dataclass
class MemN2NConfig(ConfigDict):
    """Sizes and options of an End-to-End Memory Network (saved as ``config.json``)."""

    n_words: int  # word vocabulary W, [PAD] = 0 included; code ids follow it
    n_codes: int  # code vocabulary N (program concepts)
    n_answers: int  # closed answer set A
    dim: int = 64  # embedding dimension D
    hops: int = 3  # memory hops K
    tying: str = "adjacent"  # adjacent, layerwise or none
    encoding: str = "position"  # fact / question encoding: bow or position
    temporal: bool = True  # add a learned temporal encoding per memory slot (T_A, T_C)
    max_memories: int = 50  # memory slots M (temporal encoding rows)
    max_fact_len: int = 8  # tokens per fact L
    max_question_len: int = 16  # tokens per question Q
    dropout: float = 0.0  # dropout on the final state before the answer layer
    init_std: float = 0.1  # std of N(0, std) for word, temporal and linear weights
    code_mode: str = "unstructured"  # how codes are embedded (recorded for reports): plain or an HRR mode

    def __post_init__(self) -> None:
        if self.tying not in TYINGS:
            raise ValueError(f"tying must be one of {TYINGS}, got {self.tying!r}")
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {self.encoding!r}")
        check_positive(self, _SIZES)


@dataclass
class MemNNConfig(ConfigDict):
    """Sizes and options of the original (hard-attention) Memory Network (saved as ``config.json``)."""

    n_words: int  # word vocabulary W, [PAD] = 0 included; code ids follow it
    n_codes: int  # code vocabulary N (program concepts)
    n_answers: int  # closed answer set A
    dim: int = 64  # embedding dimension D
    hops: int = 2  # supporting facts retrieved (argmax hops)
    margin: float = 0.1  # margin of the supporting-fact ranking loss
    max_memories: int = 50  # memory slots M
    max_fact_len: int = 8  # tokens per fact L
    max_question_len: int = 16  # tokens per question Q
    init_std: float = 0.1  # std of N(0, std) for word and linear weights
    code_mode: str = "unstructured"  # how codes are embedded (recorded for reports)

    def __post_init__(self) -> None:
        check_positive(self, _SIZES)


class TokenEmbedding(nn.Module):
    """Joint word/code lookup: words from a table (row 0 = padding, zero), codes from ``code``.

    Shapes:
        - ids: ``(*)`` joint ids
        - output: ``(*, D)``
    """

    def __init__(self, n_words: int, n_codes: int, dim: int, code: nn.Module, init_std: float) -> None:
        super().__init__()
        self.n_words, self.n_codes = n_words, n_codes
        self.word = nn.Embedding(n_words, dim, padding_idx=PAD)
        nn.init.normal_(self.word.weight, 0.0, init_std)
        with torch.no_grad():
            self.word.weight[PAD].zero_()
        self.code = code

    def forward(self, ids: Tensor) -> Tensor:
        is_code = ids >= self.n_words  # (*)
        if not bool(is_code.any()):
            return self.word(ids)  # (*, D)
        uniq, inv = torch.unique(ids[is_code], return_inverse=True)  # (U,), (n,)
        rows = self.code(uniq - self.n_words).to(self.word.weight.dtype)  # (U, D), each code composed once
        table = torch.cat([self.word.weight, rows], 0)  # (W + U, D)
        local = ids.masked_scatter(is_code, inv + self.n_words)  # (*), ids into table
        return F.embedding(local, table, padding_idx=PAD)  # (*, D)


def position_weights(mask: Tensor, dim: int) -> Tensor:
    """Sukhbaatar et al.'s position encoding ``l_kj = (1 - j/J) - (k/d)(1 - 2j/J)``, J = each row's length.

    Shapes:
        - mask: ``(*, L)`` bool, True at real tokens (left-aligned)
        - output: ``(*, L, D)``
    """
    length = mask.sum(-1, keepdim=True).clamp(min=1).to(torch.float32)  # (*, 1)
    j = torch.arange(1, mask.shape[-1] + 1, device=mask.device, dtype=torch.float32)  # (L,)
    k = torch.arange(1, dim + 1, device=mask.device, dtype=torch.float32)  # (D,)
    jj = (j / length).unsqueeze(-1)  # (*, L, 1)
    return (1 - jj) - (k / dim) * (1 - 2 * jj)  # (*, L, D)


def encode_sentences(emb: nn.Module, ids: Tensor, encoding: str) -> Tensor:
    """Embed and reduce each token sequence to one vector (bag of words or position-weighted sum).

    Shapes:
        - ids: ``(*, L)``
        - output: ``(*, D)``
    """
    e = emb(ids)  # (*, L, D)
    mask = ids != PAD  # (*, L)
    if encoding == "position":
        e = e * position_weights(mask, e.shape[-1])  # (*, L, D)
    return (e * mask.unsqueeze(-1)).sum(-2)  # (*, D)


def _check_batch(facts: Tensor, question: Tensor, cfg: Any) -> Tensor:
    """Validate the inputs; return the memory mask ``(B, M)`` (True = a real fact)."""
    if facts.dim() != 3:
        raise ValueError(f"facts must be (B, M, L), got shape {tuple(facts.shape)}")
    if question.dim() != 2 or question.shape[0] != facts.shape[0]:
        raise ValueError(
            f"question must be (B, Q) with B = {facts.shape[0]} (from facts), "
            f"got shape {tuple(question.shape)}"
        )
    if facts.dtype.is_floating_point or question.dtype.is_floating_point:
        raise ValueError(f"facts and question must be integer ids, got {facts.dtype} and {question.dtype}")
    b, m, length = facts.shape
    if m > cfg.max_memories:
        raise ValueError(f"{m} memories exceed max_memories {cfg.max_memories}")
    if length > cfg.max_fact_len:
        raise ValueError(f"facts of {length} tokens exceed max_fact_len {cfg.max_fact_len}")
    if question.shape[1] > cfg.max_question_len:
        raise ValueError(
            f"questions of {question.shape[1]} tokens exceed max_question_len {cfg.max_question_len}"
        )
    hi = cfg.n_words + cfg.n_codes
    for name, t in (("facts", facts), ("question", question)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= hi):
            raise ValueError(f"{name} ids must lie in [0, {hi - 1}], got [{int(t.min())}, {int(t.max())}]")
    mask = (facts != PAD).any(-1)  # (B, M)
    empty = (~mask.any(-1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(
            f"batch rows {empty[:5].tolist()} have no memories (all facts padding); skip such examples"
        )
    return mask


def temporal_index(mask: Tensor) -> Tensor:
    """Time of each memory slot counted back from the latest real memory (latest = 0). ``(B, M)``."""
    n = mask.sum(-1, keepdim=True)  # (B, 1)
    idx = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)  # (1, M)
    return (n - 1 - idx).clamp(min=0)  # (B, M)


def memory_read(query: Tensor, keys: Tensor, values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """One soft memory read (a MemN2N hop): ``p = softmax(keys . query)`` over the real memories,
    ``o = p values``.

    Shared by :class:`MemN2N` and :class:`model.doctor2vec.Doctor2Vec`. A row with no real memory gets
    ``o = 0`` and ``p = 0`` (no NaN), so callers that allow empty memories need no special case.

    Shapes:
        - query: ``(B, D)``; keys, values: ``(B, M, D)``; mask: ``(B, M)`` bool, True = a real memory
        - output: ``o`` ``(B, D)`` and attention ``p`` ``(B, M)`` (0 at masked memories)
    """
    if keys.shape[:2] != mask.shape or values.shape[:2] != mask.shape or query.shape[0] != mask.shape[0]:
        raise ValueError(
            f"memory_read: query {tuple(query.shape)}, keys {tuple(keys.shape)}, values "
            f"{tuple(values.shape)} and mask {tuple(mask.shape)} disagree on (B, M)"
        )
    scores = torch.einsum("bmd,bd->bm", keys, query).masked_fill(~mask, float("-inf"))  # (B, M)
    p = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # (B, M), all-masked rows -> 0
    return torch.einsum("bm,bmd->bd", p, values), p  # (B, D), (B, M)


class MemoryEmbedding(nn.Module):
    """One embedding matrix of the MemN2N (A^k, B or C^k): token lookup plus its temporal table."""

    def __init__(self, cfg: MemN2NConfig, code: nn.Module) -> None:
        super().__init__()
        self.tokens = TokenEmbedding(cfg.n_words, cfg.n_codes, cfg.dim, code, cfg.init_std)
        self.temporal = (
            nn.Parameter(torch.randn(cfg.max_memories, cfg.dim) * cfg.init_std) if cfg.temporal else None
        )
        self.encoding = cfg.encoding

    def memories(self, facts: Tensor, time: Tensor) -> Tensor:
        """Shapes: facts ``(B, M, L)``, time ``(B, M)`` -> ``(B, M, D)``."""
        m = encode_sentences(self.tokens, facts, self.encoding)  # (B, M, D)
        if self.temporal is not None:
            m = m + self.temporal[time]  # (B, M, D)
        return m

    def question(self, q: Tensor) -> Tensor:
        """Shapes: q ``(B, Q)`` -> ``(B, D)``."""
        return encode_sentences(self.tokens, q, self.encoding)  # (B, D)


class MemN2N(nn.Module):
    """End-to-End Memory Network over a patient's facts.

    Args:
        config: sizes, hops, tying, encoding.
        code_embedding: factory of a fresh code-embedding module ``forward(ids) -> (*, D)``, called once per
            distinct embedding matrix (``adjacent``: K + 1; ``layerwise``: 3; ``none``: 2K + 1).
    """

    def __init__(self, config: MemN2NConfig, code_embedding: CodeEmbeddingFactory) -> None:
        super().__init__()
        self.config = cfg = config
        k = cfg.hops
        if cfg.tying == "adjacent":
            self.embeddings = nn.ModuleList(MemoryEmbedding(cfg, code_embedding()) for _ in range(k + 1))
            self.a_index, self.c_index, self.b_index = list(range(k)), list(range(1, k + 1)), 0
        elif cfg.tying == "layerwise":
            self.embeddings = nn.ModuleList(MemoryEmbedding(cfg, code_embedding()) for _ in range(3))
            self.a_index, self.c_index, self.b_index = [0] * k, [1] * k, 2
        else:
            self.embeddings = nn.ModuleList(MemoryEmbedding(cfg, code_embedding()) for _ in range(2 * k + 1))
            self.a_index, self.c_index, self.b_index = list(range(k)), list(range(k, 2 * k)), 2 * k
        self.h = nn.Linear(cfg.dim, cfg.dim, bias=False) if cfg.tying == "layerwise" else None
        if self.h is not None:
            nn.init.normal_(self.h.weight, 0.0, cfg.init_std)
        self.drop = nn.Dropout(cfg.dropout)
        self.answer = nn.Linear(cfg.dim, cfg.n_answers, bias=False)
        nn.init.normal_(self.answer.weight, 0.0, cfg.init_std)

    def forward(self, facts: Tensor, question: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Answer logits and the attention of each hop.

        Shapes:
            - facts: ``(B, M, L)`` joint ids, padded facts all 0
            - question: ``(B, Q)`` joint ids
            - output: logits ``(B, A)``, attention: K tensors ``(B, M)`` (0 at padded memories)
        """
        mask = _check_batch(facts, question, self.config)  # (B, M)
        time = temporal_index(mask)  # (B, M)
        u = self.embeddings[self.b_index].question(question)  # (B, D)
        memories: dict[int, Tensor] = {}  # embedding index -> (B, M, D), each matrix encoded once

        def encoded(i: int) -> Tensor:
            if i not in memories:
                memories[i] = self.embeddings[i].memories(facts, time)  # (B, M, D)
            return memories[i]

        attention = []
        for a_i, c_i in zip(self.a_index, self.c_index, strict=True):
            o, p = memory_read(u, encoded(a_i), encoded(c_i), mask)  # (B, D), (B, M)
            u = (self.h(u) if self.h is not None else u) + o  # (B, D)
            attention.append(p)
        return self.answer(self.drop(u)), attention  # (B, A)

    def predict(self, facts: Tensor, question: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Answer logits ``(B, A)`` and attention per hop (K tensors ``(B, M)``); same as ``forward``."""
        return self(facts, question)

    def loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Cross-entropy on the answers; returns ``(loss, logits)``."""
        logits, _ = self(batch["facts"], batch["question"])
        return F.cross_entropy(logits, batch["answer"]), logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class MemNN(nn.Module):
    """The original Memory Network: hard (argmax) addressing supervised on supporting facts.

    Memory slot 0 is a learned "no more facts" memory, so a question with fewer supporting facts than
    hops (or none) still has a target at every hop. Scores are ``s(x, m) = (U x) . (U m)`` with ``x`` the
    question plus the facts retrieved so far; the answer is ``softmax(R (x + retrieved))``.

    Args:
        config: sizes, hops, margin.
        code_embedding: factory of a code-embedding module (called twice: for the O and R embeddings).
    """

    def __init__(self, config: MemNNConfig, code_embedding: CodeEmbeddingFactory) -> None:
        super().__init__()
        self.config = cfg = config
        self.embed_o = TokenEmbedding(cfg.n_words, cfg.n_codes, cfg.dim, code_embedding(), cfg.init_std)
        self.embed_r = TokenEmbedding(cfg.n_words, cfg.n_codes, cfg.dim, code_embedding(), cfg.init_std)
        self.time = nn.Parameter(torch.randn(cfg.max_memories + 1, cfg.dim) * cfg.init_std)
        self.null = nn.Parameter(torch.randn(2, cfg.dim) * cfg.init_std)  # O and R "no more facts"
        self.answer = nn.Linear(cfg.dim, cfg.n_answers, bias=False)
        nn.init.normal_(self.answer.weight, 0.0, cfg.init_std)

    def _memories(self, facts: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """O and R memory vectors with the null slot first; mask ``(B, 1 + M)``."""
        b = facts.shape[0]
        time = temporal_index(mask) + 1  # (B, M)
        mo = encode_sentences(self.embed_o, facts, "bow") + self.time[time]  # (B, M, D)
        mr = encode_sentences(self.embed_r, facts, "bow")  # (B, M, D)
        mo = torch.cat([self.null[0].expand(b, 1, -1), mo], 1)  # (B, 1 + M, D)
        mr = torch.cat([self.null[1].expand(b, 1, -1), mr], 1)  # (B, 1 + M, D)
        full = torch.cat([mask.new_ones(b, 1), mask], 1)  # (B, 1 + M)
        return mo, mr, full

    def forward(
        self, facts: Tensor, question: Tensor, supporting: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor], Tensor]:
        """Answer logits, per-hop scores and the chosen slots.

        With ``supporting`` (``(B, S)`` fact indices, -1 = none) the answer is computed from the gold
        facts (teacher forcing, as in training); otherwise from the argmax of each hop.

        Shapes:
            - facts ``(B, M, L)``, question ``(B, Q)``
            - output: logits ``(B, A)``; scores: K tensors ``(B, 1 + M)`` (slot 0 = no fact);
              chosen ``(B, K)`` slots (0 = no fact, i = fact i - 1)
        """
        mask = _check_batch(facts, question, self.config)  # (B, M)
        enc = self._encode(facts, question, mask)
        gold = self.gold_slots(supporting, facts.shape[0]) if supporting is not None else None
        return self._hops(*enc, gold)

    def _encode(self, facts: Tensor, question: Tensor, mask: Tensor) -> tuple[Tensor, ...]:
        mo, mr, full = self._memories(facts, mask)  # (B, 1 + M, D) x 2, (B, 1 + M)
        xo = encode_sentences(self.embed_o, question, "bow")  # (B, D)
        xr = encode_sentences(self.embed_r, question, "bow")  # (B, D)
        return mo, mr, full, xo, xr

    def _hops(self, mo, mr, full, xo, xr, gold: Tensor | None) -> tuple[Tensor, list[Tensor], Tensor]:
        rows = torch.arange(mo.shape[0], device=mo.device)
        scores, chosen = [], []
        for k in range(self.config.hops):
            s = torch.einsum("bmd,bd->bm", mo, xo).masked_fill(~full, float("-inf"))  # (B, 1 + M)
            pick = gold[:, k] if gold is not None else s.argmax(-1)  # (B,)
            xo = xo + mo[rows, pick]  # (B, D)
            xr = xr + mr[rows, pick]  # (B, D)
            scores.append(s)
            chosen.append(pick)
        return self.answer(xr), scores, torch.stack(chosen, 1)  # (B, A)

    def gold_slots(self, supporting: Tensor, b: int) -> Tensor:
        """Supporting fact indices ``(B, S)`` (-1 = none) -> slots ``(B, K)`` (0 = no more facts)."""
        k = self.config.hops
        s = supporting[:, :k] + 1  # (B, <=K), -1 -> 0
        if s.shape[1] < k:
            s = torch.cat([s, s.new_zeros(b, k - s.shape[1])], 1)  # (B, K)
        return s.clamp(min=0).long()

    def loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Answer cross-entropy (teacher-forced) + hinge ranking loss on the supporting facts."""
        facts, question = batch["facts"], batch["question"]
        enc = self._encode(facts, question, _check_batch(facts, question, self.config))
        gold = self.gold_slots(batch["supporting"], facts.shape[0])  # (B, K)
        logits, scores, _ = self._hops(*enc, gold)
        rank = logits.new_zeros(())
        for k, s in enumerate(scores):
            target = s.gather(1, gold[:, k : k + 1])  # (B, 1)
            hinge = (self.config.margin - target + s).clamp(min=0)  # (B, 1 + M)
            hinge = hinge.masked_fill(torch.isinf(s), 0).scatter(1, gold[:, k : k + 1], 0.0)
            rank = rank + hinge.sum(1).mean()
        with torch.no_grad():
            predicted, _, _ = self._hops(*(t.detach() for t in enc), None)
        return F.cross_entropy(logits, batch["answer"]) + rank, predicted

    def predict(self, facts: Tensor, question: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Answer logits ``(B, A)`` from argmax addressing and the one-hot attention of each hop over the
        facts (K tensors ``(B, M)``, all zero where "no more facts" was chosen)."""
        logits, _, chosen = self(facts, question)
        m = facts.shape[1]
        return logits, [F.one_hot(chosen[:, k], m + 1)[:, 1:].float() for k in range(chosen.shape[1])]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
