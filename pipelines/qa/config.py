"""Options of the QA generator and of a QA training run (light: no torch; the CLI takes its defaults from
here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.train.config import EMBEDDINGS, GridFields, LoopFields

__all__ = ["EMBEDDINGS", "MODELS", "QACompareConfig", "QAOptions", "QATrainConfig"]


MODELS = ("memn2n", "memnn")


@dataclass
class QATrainConfig(LoopFields):
    """Options of a QA training run (saved in ``results.json``)."""

    qa: str = field(metadata={"help": "QA set folder (pipelines.qa.data)"})
    program: str = field(metadata={"help": "the program the QA set was generated from"})
    model: str = field(
        default="memn2n", metadata={"help": "memn2n (soft attention) or memnn (hard attention)"}
    )
    embedding: str = field(
        default="plain", metadata={"help": "code embedding: plain table or hrr (HRREmbedding)"}
    )
    hrr_mode: str = field(default="base", metadata={"help": "HRREmbedding mode when embedding is hrr"})
    dim: int = field(default=32, metadata={"help": "embedding dimension"})
    hops: int = field(default=3, metadata={"help": "memory hops (MemNN: argmax hops = supporting facts)"})
    tying: str = field(default="adjacent", metadata={"help": "MemN2N tying: adjacent, layerwise, none"})
    encoding: str = field(default="position", metadata={"help": "MemN2N fact encoding: bow or position"})
    temporal: bool = field(default=True, metadata={"help": "MemN2N temporal encoding"})
    max_memories: int = field(
        default=30, metadata={"help": "memory slots (longer memories: question skipped, counted)"}
    )
    max_question_len: int = field(
        default=12, metadata={"help": "question tokens (longer: question skipped, counted)"}
    )
    epochs: int = field(default=8, metadata={"help": "passes over the train questions"})
    batch_size: int = field(default=64, metadata={"help": "batch"})
    lr: float = field(default=0.01, metadata={"help": "Adam learning rate"})
    clip: float = field(default=40.0, metadata={"help": "max gradient norm (Sukhbaatar et al.: 40)"})
    seed: int = field(default=0, metadata={"help": "seed"})
    max_train: int = field(default=0, metadata={"help": "use at most this many train questions (0: all)"})
    device: str = field(default="cpu", metadata={"help": "auto, cpu, cuda"})
    progress: bool = field(default=True, metadata={"help": "tqdm bar (only on a terminal)"})

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

    max_memories: int = field(default=30, metadata={"help": "most recent diagnosis events kept per patient"})
    train_patients: int = field(default=2000, metadata={"help": "patients sampled for train (0: all)"})
    val_patients: int = field(default=300, metadata={"help": "patients sampled for validation (0: all)"})
    test_patients: int = field(default=800, metadata={"help": "patients sampled for test (0: all)"})
    unseen_fraction: float = field(
        default=0.15, metadata={"help": "share of the occurring codes held out of train/val"}
    )
    seed: int = field(default=0, metadata={"help": "sampling and question seed"})

    def __post_init__(self) -> None:
        if self.max_memories < 1:
            raise ValueError(f"max_memories must be >= 1, got {self.max_memories}")
        if not 0.0 <= self.unseen_fraction < 1.0:
            raise ValueError(f"unseen_fraction must be in [0, 1), got {self.unseen_fraction}")


@dataclass
class QACompareConfig(GridFields):
    """Options of ``hrrbert qa compare``: the grid of :func:`pipelines.qa.compare.compare`."""

    dataset: str = field(metadata={"help": "tokenized dataset the QA sets are generated from"})
    program: str = field(metadata={"help": "the program the dataset was tokenized against"})
    out: str = field(
        default="artifacts/runs/qa-compare", metadata={"help": "folder of the runs and report.md"}
    )
    epochs: int = field(default=4, metadata={"help": "memory-network training epochs"})
    max_train: int = field(
        default=3000, metadata={"help": "train questions per memory network, at most (0: all)"}
    )
    finetune_epochs: int = field(
        default=3, metadata={"help": "fine-tuning epochs of BERT and the visit Transformer"}
    )
    pretrain_steps: int = field(
        default=60, metadata={"help": "pretraining steps of the tiny BERT both start from"}
    )
    skip_finetune: bool = field(default=False, metadata={"help": "only the memory-network tables"})
    data_seeds: str | None = field(
        default=None,
        metadata={
            "help": "seeds of the generated QA sets, a count or a list (default: --seed of qa generate, 0)"
        },
    )
    only: tuple[str, ...] = field(
        default=(),
        metadata={"help": "keep only this run or table (embedding, hops, tying, attention); repeat for more"},
    )
