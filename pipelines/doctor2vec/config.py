"""Options of the Doctor2Vec generator and of a Doctor2Vec training run (light: no torch; the CLI takes its
defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.train.config import EMBEDDINGS, GridFields, LoopFields

__all__ = ["CRITERIA", "D2VCompareConfig", "D2VOptions", "D2VTrainConfig", "EMBEDDINGS"]


@dataclass
class D2VTrainConfig(LoopFields):
    """Options of a Doctor2Vec training run (saved in ``results.json``)."""

    data: str = field(metadata={"help": "Doctor2Vec data folder (pipelines.doctor2vec.data)"})
    program: str = field(metadata={"help": "the program the data was generated from"})
    embedding: str = field(
        default="hrr",
        metadata={"help": "code embedding: hrr (HRREmbedding; best in the demo comparison) or a plain table"},
    )
    hrr_mode: str = field(default="base", metadata={"help": "HRREmbedding mode when embedding is hrr"})
    doctor: str = field(
        default="dynamic",
        metadata={"help": "dynamic (trial attends over the patients) or static (mean of patients)"},
    )
    patient_encoder: str = field(
        default="pooled", metadata={"help": "pooled code vectors or visit-transformer"}
    )
    dim: int = field(default=64, metadata={"help": "embedding and model dimension"})
    hops: int = field(default=1, metadata={"help": "memory reads of a dynamic doctor"})
    max_memories: int = field(
        default=64, metadata={"help": "patients per doctor memory (larger panels: seeded sample)"}
    )
    max_codes: int = field(default=64, metadata={"help": "most recent codes per patient"})
    hidden: int = field(default=128, metadata={"help": "compatibility MLP width"})
    dropout: float = field(default=0.1, metadata={"help": "dropout"})
    epochs: int = field(default=3, metadata={"help": "passes over the train pairs"})
    val_every: int = field(
        default=10,
        metadata={
            "help": "steps between validations (0: once an epoch); the best validation's weights are kept"
        },
    )
    doctors_per_batch: int = field(
        default=8, metadata={"help": "doctors per step (each with every train trial)"}
    )
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate"})
    code_lr_scale: float = field(
        default=0.1, metadata={"help": "learning rate of the code embedding (table or atoms) relative to lr"}
    )
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW weight decay"})
    clip: float = field(default=1.0, metadata={"help": "max gradient norm (0: off)"})
    pos_weight: float = field(
        default=0.0,
        metadata={"help": "BCE weight of positives (0: negatives / positives of the train pairs)"},
    )
    hide_held_out: bool = field(
        default=True,
        metadata={"help": "remove the rare-disease trials' codes from histories during training"},
    )
    k: tuple[int, ...] = field(default=(5, 10), metadata={"help": "precision at k per trial"})
    seed: int = field(default=0, metadata={"help": "seed"})
    device: str = field(default="cpu", metadata={"help": "auto, cpu, cuda"})
    progress: bool = field(default=True, metadata={"help": "tqdm bar (only on a terminal)"})

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

    doctors: int = field(default=300, metadata={"help": "doctors simulated"})
    panel_median: int = field(default=40, metadata={"help": "median panel volume (lognormal)"})
    panel_sigma: float = field(default=0.5, metadata={"help": "sigma of the log panel volume"})
    panel_min: int = field(
        default=8, metadata={"help": "smallest panel volume; chapters with fewer patients get no specialist"}
    )
    panel_max: int = field(default=150, metadata={"help": "largest panel volume"})
    purity_mean: float = field(
        default=0.75, metadata={"help": "mean share of a panel drawn from the specialty chapter (Beta)"}
    )
    train_trials: int = field(default=120, metadata={"help": "common trials for training"})
    val_trials: int = field(default=30, metadata={"help": "common trials for validation"})
    test_trials: int = field(default=30, metadata={"help": "common trials for testing"})
    rare_trials: int = field(
        default=30, metadata={"help": "test_rare trials, conditions only among rare codes"}
    )
    rare_min_patients: int = field(
        default=3, metadata={"help": "a rare code has rare_min..rare_max patients in the cohort"}
    )
    rare_max_patients: int = field(
        default=40, metadata={"help": "... and at most this many (the manifest records it for the trainer)"}
    )
    common_min_patients: int = field(
        default=60, metadata={"help": "a common trial's seed code has at least this many patients"}
    )
    min_enrolled: int = field(default=1, metadata={"help": "label = enrolled >= min_enrolled"})
    enroll_rate: float = field(
        default=0.5, metadata={"help": "mean per-eligible-patient enrollment probability (Beta over doctors)"}
    )
    concentration: float = field(
        default=10.0, metadata={"help": "a + b of the purity and propensity Beta distributions"}
    )
    criteria: str = field(
        default="category",
        metadata={"help": "eligible: any code of a listed condition's category, or a listed code"},
    )
    listed_max: int = field(
        default=2,
        metadata={"help": "codes a 'category' trial lists (seed, siblings); the category's rest is unlisted"},
    )
    max_family: int = field(
        default=12,
        metadata={"help": "codes of a category that make a patient eligible, at most (the most frequent)"},
    )
    equivalents: bool = field(
        default=True,
        metadata={"help": "also eligible: codes mapped to the same SNOMED concept(s) as a family code"},
    )
    demographics: bool = field(
        default=True,
        metadata={"help": "age and sex from the dataset's source (its patients file); off: unknown"},
    )
    seed: int = field(default=0, metadata={"help": "every draw"})

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


@dataclass
class D2VCompareConfig(GridFields):
    """Options of ``hrrbert doctor2vec compare``: the grid of :func:`pipelines.doctor2vec.compare.compare`."""

    dataset: str = field(metadata={"help": "tokenized dataset the Doctor2Vec data is generated from"})
    program: str = field(metadata={"help": "the program the dataset was tokenized against"})
    data: str | None = field(
        default=None,
        metadata={"help": "an existing Doctor2Vec data folder (default: generated from --dataset)"},
    )
    out: str = field(
        default="artifacts/runs/doctor2vec-compare", metadata={"help": "folder of the runs and report.md"}
    )
    epochs: int = field(default=3, metadata={"help": "training epochs of each run"})
    dim: int = field(default=64, metadata={"help": "embedding and model dimension"})
    data_seeds: str | None = field(
        default=None,
        metadata={
            "help": (
                "seeds of the generated data, a count or a list (default: generate's --seed, 0); "
                "not with --data"
            )
        },
    )
    only: tuple[str, ...] = field(
        default=(),
        metadata={"help": "keep only this configuration (e.g. hrr-base-dynamic); repeat for more"},
    )
    visit_transformer: bool = field(
        default=False, metadata={"help": "also the visit-Transformer patient encoder"}
    )
