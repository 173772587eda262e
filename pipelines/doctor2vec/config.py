"""Options of the Doctor2Vec generator and of a Doctor2Vec training run (light: no torch; the CLI takes its
defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.train.config import EMBEDDINGS, LoopFields

__all__ = ["CRITERIA", "D2VOptions", "D2VTrainConfig", "EMBEDDINGS"]


@dataclass
class D2VTrainConfig(LoopFields):
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

    def __post_init__(self) -> None:
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {self.embedding!r}")
        if self.epochs < 1 or self.doctors_per_batch < 1:
            raise ValueError(
                f"epochs and doctors_per_batch must be >= 1, got {self.epochs}, {self.doctors_per_batch}"
            )
        self.k = tuple(int(x) for x in self.k)


CRITERIA = ("category", "listed")  # what makes a patient eligible (D2VOptions.criteria)


@dataclass
class D2VOptions:
    """Options of the Doctor2Vec generator (hashed into the data's id)."""

    doctors: int = 300  # doctors simulated
    panel_median: int = 40  # median panel volume (lognormal)
    panel_sigma: float = 0.5  # sigma of the log panel volume
    panel_min: int = 8  # smallest panel volume; chapters with fewer patients get no specialist
    panel_max: int = 150  # largest panel volume
    purity_mean: float = 0.75  # mean share of a panel drawn from the specialty chapter (Beta)
    train_trials: int = 120  # common trials for training
    val_trials: int = 30  # common trials for validation
    test_trials: int = 30  # common trials for testing
    rare_trials: int = 30  # test_rare trials, conditions only among rare codes
    rare_min_patients: int = 3  # a rare code has rare_min..rare_max patients in the cohort
    rare_max_patients: int = 40  # ... and at most this many (the manifest records it for the trainer)
    common_min_patients: int = 60  # a common trial's seed code has at least this many patients
    min_enrolled: int = 1  # label = enrolled >= min_enrolled
    enroll_rate: float = 0.5  # mean per-eligible-patient enrollment probability (Beta over doctors)
    concentration: float = 10.0  # a + b of the purity and propensity Beta distributions
    criteria: str = "category"  # eligible: any code of a listed condition's category, or a listed code
    listed_max: int = 2  # codes a 'category' trial lists (seed, siblings); the category's rest is unlisted
    max_family: int = 12  # codes of a category that make a patient eligible, at most (the most frequent)
    equivalents: bool = True  # also eligible: codes mapped to the same SNOMED concept(s) as a family code
    demographics: bool = True  # age and sex from the dataset's source (its patients file); off: unknown
    seed: int = 0  # every draw

    def __post_init__(self) -> None:
        o = self
        rules = {  # field -> (holds, what it needs)
            "doctors": (o.doctors >= 1, ">= 1"),
            "panel_min": (o.panel_min >= 1, ">= 1"),
            "panel_median": (o.panel_min <= o.panel_median <= o.panel_max, "in [panel_min, panel_max]"),
            "panel_sigma": (o.panel_sigma >= 0, ">= 0"),
            "purity_mean": (0.0 < o.purity_mean < 1.0, "in (0, 1)"),
            "train_trials": (o.train_trials >= 1, ">= 1"),
            "val_trials": (o.val_trials >= 0, ">= 0"),
            "test_trials": (o.test_trials >= 0, ">= 0"),
            "rare_trials": (o.rare_trials >= 0, ">= 0"),
            "rare_min_patients": (
                1 <= o.rare_min_patients <= o.rare_max_patients,
                "in [1, rare_max_patients]",
            ),
            "common_min_patients": (o.common_min_patients > o.rare_max_patients, "> rare_max_patients"),
            "min_enrolled": (o.min_enrolled >= 1, ">= 1"),
            "enroll_rate": (0.0 < o.enroll_rate < 1.0, "in (0, 1)"),
            "concentration": (o.concentration > 0, "> 0"),
            "criteria": (o.criteria in CRITERIA, f"one of {CRITERIA}"),
            "listed_max": (o.listed_max >= 1, ">= 1"),
            "max_family": (o.max_family >= o.listed_max, ">= listed_max"),
        }
        for name, (ok, need) in rules.items():
            if not ok:
                raise ValueError(f"D2VOptions.{name} = {getattr(o, name)!r}: must be {need}")
