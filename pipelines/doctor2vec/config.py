"""Options of a Doctor2Vec training run (light: no torch; the CLI takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.train.config import EMBEDDINGS

__all__ = ["D2VTrainConfig", "EMBEDDINGS"]


@dataclass
class D2VTrainConfig:
    """Options of a Doctor2Vec training run (saved in ``results.json``)."""

    data: str  # Doctor2Vec data folder (pipelines.doctor2vec.data)
    program: str  # the program the data was generated from
    embedding: str = "hrr"  # code embedding: hrr (HRREmbedding; best in the demo comparison) or a plain table
    hrr_mode: str = "base"  # HRREmbedding mode when embedding is hrr
    doctor: str = "dynamic"  # dynamic (trial attends over the patients) or static (mean of patients)
    patient_encoder: str = "pooled"  # pooled code vectors or visit-transformer
    dim: int = 64  # embedding and model dimension
    hops: int = 1  # memory reads of a dynamic doctor
    max_memories: int = 64  # patients per doctor memory (larger panels: seeded sample)
    max_codes: int = 64  # most recent codes per patient
    hidden: int = 128  # compatibility MLP width
    dropout: float = 0.1  # dropout
    epochs: int = 3  # passes over the train pairs
    val_every: int = (
        10  # steps between validations (0: once an epoch); the best validation's weights are kept
    )
    doctors_per_batch: int = 8  # doctors per step (each with every train trial)
    lr: float = 1e-3  # AdamW learning rate
    code_lr_scale: float = 0.1  # learning rate of the code embedding (table or atoms) relative to lr
    weight_decay: float = 1e-4  # AdamW weight decay
    clip: float = 1.0  # max gradient norm (0: off)
    pos_weight: float = 0.0  # BCE weight of positives (0: negatives / positives of the train pairs)
    hide_held_out: bool = True  # remove the rare-disease trials' codes from histories during training
    k: tuple[int, ...] = (5, 10)  # precision at k per trial
    seed: int = 0  # seed
    device: str = "cpu"  # auto, cpu, cuda
    progress: bool = True  # tqdm bar (only on a terminal)
    patience: int = 0  # stop after this many validations without improvement (0: never)
    keep_checkpoints: int = 1  # newest resume checkpoints kept (one is written at every validation)
    tensorboard: bool = False  # also write TensorBoard scalars (if tensorboard is installed)

    def __post_init__(self) -> None:
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {self.embedding!r}")
        if self.epochs < 1 or self.doctors_per_batch < 1:
            raise ValueError(
                f"epochs and doctors_per_batch must be >= 1, got {self.epochs}, {self.doctors_per_batch}"
            )
        self.k = tuple(int(x) for x in self.k)
