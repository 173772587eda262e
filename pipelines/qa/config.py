"""Options of the QA generator and of a QA training run (light: no torch; the CLI takes its defaults from
here)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.train.config import EMBEDDINGS, LoopFields

__all__ = ["EMBEDDINGS", "MODELS", "QAOptions", "QATrainConfig"]


MODELS = ("memn2n", "memnn")


@dataclass
class QATrainConfig(LoopFields):
    """Options of a QA training run (saved in ``results.json``)."""

    qa: str  # QA set folder (pipelines.qa.data)
    program: str  # the program the QA set was generated from
    model: str = "memn2n"  # memn2n (soft attention) or memnn (hard attention)
    embedding: str = "plain"  # code embedding: plain table or hrr (HRREmbedding)
    hrr_mode: str = "base"  # HRREmbedding mode when embedding is hrr
    dim: int = 32  # embedding dimension
    hops: int = 3  # memory hops (MemNN: argmax hops = supporting facts)
    tying: str = "adjacent"  # MemN2N tying: adjacent, layerwise, none
    encoding: str = "position"  # MemN2N fact encoding: bow or position
    temporal: bool = True  # MemN2N temporal encoding
    max_memories: int = 30  # memory slots (longer memories: question skipped, counted)
    max_question_len: int = 12  # question tokens (longer: question skipped, counted)
    epochs: int = 8  # passes over the train questions
    batch_size: int = 64  # batch
    lr: float = 0.01  # Adam learning rate
    clip: float = 40.0  # max gradient norm (Sukhbaatar et al.: 40)
    seed: int = 0  # seed
    max_train: int = 0  # use at most this many train questions (0: all)
    device: str = "cpu"  # auto, cpu, cuda
    progress: bool = True  # tqdm bar (only on a terminal)

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {self.embedding!r}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}")


@dataclass
class QAOptions:
    """Options of the QA generator (hashed into the QA set's id)."""

    max_memories: int = 30  # most recent diagnosis events kept per patient
    train_patients: int = 2000  # patients sampled for train (0: all)
    val_patients: int = 300  # patients sampled for validation (0: all)
    test_patients: int = 800  # patients sampled for test (0: all)
    unseen_fraction: float = 0.15  # share of the occurring codes held out of train/val
    seed: int = 0  # sampling and question seed

    def __post_init__(self) -> None:
        if self.max_memories < 1:
            raise ValueError(f"max_memories must be >= 1, got {self.max_memories}")
        if not 0.0 <= self.unseen_fraction < 1.0:
            raise ValueError(f"unseen_fraction must be in [0, 1), got {self.unseen_fraction}")
