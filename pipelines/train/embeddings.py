"""Code embeddings of the small models (QA memory networks, Doctor2Vec): a plain table or the HRR
embedding of a program, built by one function so that both kinds are made the same way everywhere.
"""

from __future__ import annotations

from torch import nn

from .config import EMBEDDINGS

__all__ = ["EMBEDDINGS", "HRR_INIT_STD", "code_embedding"]

HRR_INIT_STD = 0.02  # the law of HRR atoms and of BERT's tables; a plain table drawn alike is comparable


def code_embedding(
    embedding: str,
    program,
    n_codes: int,
    dim: int,
    hrr_mode: str,
    *,
    std: float = HRR_INIT_STD,
    padding_idx: int | None = None,
) -> nn.Module:
    """A fresh code-embedding module: ``nn.Embedding(n_codes, dim)`` drawn from N(0, ``std``) for
    ``plain``, or ``HRREmbedding(program, dim, hrr_mode)`` for ``hrr``."""
    if embedding not in EMBEDDINGS:
        raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {embedding!r}")
    if embedding == "hrr":
        from hrr_kernel import HRREmbedding

        return HRREmbedding(program, dim, hrr_mode)
    e = nn.Embedding(n_codes, dim, padding_idx=padding_idx)
    nn.init.normal_(e.weight, 0.0, std)
    return e
