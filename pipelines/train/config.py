"""Options of pretraining and fine-tuning runs (light: no torch; the CLI takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.data.tasks import TASKS

__all__ = [
    "EMBEDDINGS",
    "LABELS_HEAD",
    "LoopFields",
    "MLM_CACHES",
    "MLM_SOFTMAXES",
    "MLM_VOCABULARIES",
    "FinetuneConfig",
    "GridFields",
    "MODELS",
    "POS_WEIGHTS",
    "PretrainConfig",
    "RUNTIME_KEYS",
    "SCHEDULES",
    "SELECT_BY",
]


EMBEDDINGS = ("plain", "hrr")  # code embeddings of the small models (QA, Doctor2Vec): a table or HRR

# config keys that may change when resuming (they do not affect the numbers)
RUNTIME_KEYS = (
    "dataset", "program", "device", "tensorboard", "progress", "log_every", "save_every", "keep_checkpoints",
    "patience",
)  # fmt: skip


@dataclass(kw_only=True)
class LoopFields:
    """The options of the one training loop that fine-tuning, QA and Doctor2Vec runs share."""

    patience: int = field(
        default=0, metadata={"help": "stop after this many validations without improvement (0: never)"}
    )
    keep_checkpoints: int = field(
        default=1, metadata={"help": "newest resume checkpoints kept (one is written at every validation)"}
    )
    tensorboard: bool = field(
        default=False, metadata={"help": "also write TensorBoard scalars (if tensorboard is installed)"}
    )


@dataclass(kw_only=True)
class GridFields:
    """The options every comparison grid (``qa compare``, ``doctor2vec compare``) has beside its own."""

    seeds: str = field(
        default="1",
        metadata={"help": "training seeds: a count (3: seeds 0, 1, 2) or a list (0,5,7; one seed: 7,)"},
    )
    threads: int = field(default=1, metadata={"help": "torch CPU threads (0: leave torch's default)"})
    device: str = field(
        default="cpu", metadata={"help": "auto, cpu, cuda: where the grid's runs train and are evaluated"}
    )


# what pipelines.train.loop does: validate every val_every steps, at every epoch's end, after the last step
VAL_EVERY_HELP = (
    "steps between extra validations (0: none); every epoch's end and the last step are validated anyway"
)


@dataclass
class PretrainConfig:
    """Options of a pretraining run (saved in the run's ``config.json``)."""

    dataset: str = field(metadata={"help": "tokenized dataset folder (format 1)"})
    program: str = field(metadata={"help": "compiled HRR program folder the dataset was tokenized against"})
    model: str = field(default="small", metadata={"help": "model preset: tiny, mini, small or bert-base"})
    mode: str = field(
        default="base", metadata={"help": "token embedding mode (one spec each in hrr_kernel.MODES)"}
    )
    normalize: bool = field(default=False, metadata={"help": "unit-norm HRR concept vectors"})
    spectral_decoder: bool | None = field(
        default=None, metadata={"help": "MLM decoder on the half spectra (same logits); unset: base only"}
    )
    spectral_atoms: bool = field(
        default=False,
        metadata={"help": "atoms and relations trained as half spectra (no atom rfft in the step)"},
    )
    hrr_width: int | None = field(
        default=None,
        metadata={
            "help": "compose the HRR rows this wide and project them to the model's width by a learned map "
            "(base, freq); unset: the model's width"
        },
    )
    epochs: int = field(default=100, metadata={"help": "passes over pretrain_train (paper: 100)"})
    max_steps: int | None = field(
        default=None, metadata={"help": "total optimizer steps (overrides epochs; sets the schedule length)"}
    )
    batch_size: int = field(default=96, metadata={"help": "global batch (paper: 96), split over ranks"})
    bucket_batches: int = field(
        default=0,
        metadata={"help": ">0: batches of similar lengths, from buckets of this many batches (0: shuffle)"},
    )
    lr: float = field(default=1e-4, metadata={"help": "peak learning rate (paper: 1e-4)"})
    warmup: float = field(
        default=0.1, metadata={"help": "fraction of steps of linear warm-up, then cosine decay (paper: 10 %)"}
    )
    weight_decay: float = field(
        default=0.0, metadata={"help": "AdamW weight decay (paper: none in pretraining)"}
    )
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.999, metadata={"help": "AdamW beta2"})
    clip: float = field(default=1.0, metadata={"help": "max gradient L2 norm (0: no clipping)"})
    mask_prob: float = field(
        default=0.15, metadata={"help": "share of codes chosen for MLM (80 % [MASK], 10 % random, 10 % kept)"}
    )
    mlm_vocabulary: str = field(
        default="all",
        metadata={"help": "codes the MLM softmax trains on: all, or train (those in pretrain_train)"},
    )
    mlm_softmax: str = field(
        default="auto",
        metadata={
            "help": "MLM training softmax: full (every code), sampled (the batch's codes plus "
            "--mlm-negatives drawn by smoothed frequency, logQ-corrected; the step does not grow with the "
            "vocabulary), or auto (sampled above 50,000 concepts); validation is always full"
        },
    )
    mlm_negatives: int = field(
        default=8192, metadata={"help": "sampled softmax: negatives drawn per step (with replacement)"}
    )
    mlm_cache: str = field(
        default="auto",
        metadata={"help": "after training: choose the code cache on pretrain_val (model.code_cache), or off"},
    )
    dropout: float = field(default=0.1, metadata={"help": "dropout of the model"})
    topk: tuple[int, ...] = field(
        default=(10, 100), metadata={"help": "validation top-k accuracies besides top-1"}
    )
    seed: int = field(default=0, metadata={"help": "seed of initialisation, data order, masking and dropout"})
    bf16: bool = field(default=False, metadata={"help": "bf16 autocast (CUDA only)"})
    val_every: int = field(
        default=0,
        metadata={"help": VAL_EVERY_HELP},
    )
    max_val: int | None = field(
        default=None, metadata={"help": "validate on at most this many pretrain_val patients (None: all)"}
    )
    val_batch_size: int = field(default=256, metadata={"help": "validation batch"})
    save_every: int = field(
        default=500, metadata={"help": "steps between checkpoints (one is also written at the end)"}
    )
    keep_checkpoints: int = field(default=2, metadata={"help": "newest checkpoints kept"})
    log_every: int = field(
        default=10, metadata={"help": "steps between training-loss records in metrics.jsonl"}
    )
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda"})
    tensorboard: bool = field(
        default=False, metadata={"help": "also write TensorBoard scalars (if tensorboard is installed)"}
    )
    progress: bool = field(default=True, metadata={"help": "tqdm bar (rank 0, only on a terminal)"})
    patience: int = field(
        default=0, metadata={"help": "stop after this many validations without a better val_loss (0: never)"}
    )

    def __post_init__(self) -> None:
        self.topk = tuple(int(k) for k in self.topk)
        if self.mlm_vocabulary not in MLM_VOCABULARIES:
            raise ValueError(f"mlm_vocabulary must be one of {MLM_VOCABULARIES}, got {self.mlm_vocabulary!r}")
        if self.mlm_softmax not in MLM_SOFTMAXES:
            raise ValueError(f"mlm_softmax must be one of {MLM_SOFTMAXES}, got {self.mlm_softmax!r}")
        if self.mlm_negatives < 1:
            raise ValueError(f"mlm_negatives must be >= 1, got {self.mlm_negatives}")
        if self.mlm_cache not in MLM_CACHES:
            raise ValueError(f"mlm_cache must be one of {MLM_CACHES}, got {self.mlm_cache!r}")
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.batch_size < 1 or self.epochs < 1 or (self.max_steps is not None and self.max_steps < 1):
            raise ValueError(
                "batch_size, epochs and max_steps must be >= 1, "
                f"got {self.batch_size}, {self.epochs}, {self.max_steps}"
            )


MODELS = ("bert", "visit-transformer")
MLM_CACHES = ("auto", "off")  # choose the code cache of masked-code prediction after pretraining, or not
MLM_VOCABULARIES = ("all", "train")  # the MLM training softmax over every code, or the pretrain_train codes
# the MLM training softmax: exact over the vocabulary, sampled (pipelines.train.mlm.sample_candidates), or
# chosen by the program's size (auto: sampled above pipelines.train.mlm.SAMPLED_FROM concepts)
MLM_SOFTMAXES = ("auto", "full", "sampled")


SELECT_BY = ("f1", "auroc", "auprc", "accuracy", "loss")
POS_WEIGHTS = ("none", "auto")  # BCE weight of positive labels: none, or per label n_neg / n_pos (clipped)
ROLE_POOLING = "cls+mean+roles"  # model.bert.ROLE_POOLING: the heads also read the role readout (model.roles)
POOLINGS = (
    "cls",
    "cls+mean",
    ROLE_POOLING,
)  # model.bert.POOLINGS: what the task heads read (HRRBertSettings.pooling)
SCHEDULES = ("constant", "linear")  # fine-tuning learning rate: constant, or warm-up then linear decay to 0
LABELS_HEAD = "mortality"  # the model's binary head, which a task from MEDS label files trains


@dataclass
class FinetuneConfig(LoopFields):
    """Options of a fine-tuning run (saved in each trial's ``results.json``)."""

    pretrained: str = field(
        metadata={"help": "pretraining run folder (holding model/) or a saved model folder"}
    )
    dataset: str = field(metadata={"help": "tokenized dataset folder (format 1)"})
    program: str = field(metadata={"help": "the program the model and dataset were built against"})
    task: str = field(
        default="mortality", metadata={"help": "mortality (binary) or chapters (22 labels, multi-label)"}
    )
    epochs: int = field(default=10, metadata={"help": "passes over finetune_train (paper: 10)"})
    max_steps: int | None = field(
        default=None, metadata={"help": "total optimizer steps (overrides epochs; sets the schedule length)"}
    )
    val_every: int = field(
        default=0,
        metadata={"help": VAL_EVERY_HELP},
    )
    batch_size: int = field(default=80, metadata={"help": "batch (paper: 80)"})
    bucket_batches: int = field(
        default=0,
        metadata={
            "help": ">0: batches of similar lengths, from buckets of this many batches (0: plain shuffle)"
        },
    )
    lr: float = field(default=2e-5, metadata={"help": "peak learning rate"})
    schedule: str = field(
        default="constant",
        metadata={"help": "constant (paper), or linear: warm-up (`warmup`), then decay to 0"},
    )
    warmup: float = field(
        default=0.1, metadata={"help": "fraction of the steps of linear warm-up (schedule linear only)"}
    )
    weight_decay: float = field(default=4e-6, metadata={"help": "AdamW weight decay (paper: 4e-6)"})
    clip: float = field(default=1.0, metadata={"help": "max gradient L2 norm (0: no clipping)"})
    pos_weight: str = field(
        default="none",
        metadata={"help": "BCE weight of positives: none (paper), or auto (n_neg/n_pos, in [1, 50])"},
    )
    seed: int = field(default=0, metadata={"help": "seed of trial 0; trial k uses seed + k"})
    trials: int = field(
        default=1, metadata={"help": "independent fine-tunings from the same pretrained model"}
    )
    select_by: str = field(
        default="loss", metadata={"help": "validation metric choosing the best checkpoint (loss: lowest)"}
    )
    threshold: float = field(
        default=0.5, metadata={"help": "decision threshold of validation F1 in training, and without tuning"}
    )
    tune_thresholds: bool = field(
        default=True,
        metadata={"help": "per-label thresholds maximising finetune_val F1, kept with the model"},
    )
    label: str | None = field(
        default=None,
        metadata={"help": "the model's name in predictions files (default: the pretrained mode)"},
    )
    eval_batch_size: int = field(default=256, metadata={"help": "batch for validation and test"})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda"})
    bf16: bool = field(default=False, metadata={"help": "bf16 autocast (CUDA only)"})
    progress: bool = field(default=True, metadata={"help": "tqdm bar (only on a terminal)"})
    model: str = field(
        default="bert",
        metadata={"help": "bert, or visit-transformer (code embedding initialised from the pretrained BERT)"},
    )
    labels: str | None = field(
        default=None,
        metadata={"help": "MEDS label folder: one binary task (boolean_value), on the binary head"},
    )
    pooling: str | None = field(
        default=None,
        metadata={
            "help": "heads' input: cls, cls+mean ([CLS] + mean state), cls+mean+roles (+ the history's ICD "
            "chapters read from the code vectors by unbinding); None: the model's"
        },
    )
    roles_lr_scale: float = field(
        default=10.0,
        metadata={"help": "the role readout's learning rate as a multiple of lr (pooling cls+mean+roles)"},
    )
    freeze_atoms: bool = field(
        default=False,
        metadata={
            "help": "keep the atoms and relations as pretrained (only the Transformer and heads train)"
        },
    )

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.labels is not None and self.task != LABELS_HEAD:
            raise ValueError(
                f"labels give a binary task, which trains the binary head (task {LABELS_HEAD!r}), "
                f"got task {self.task!r}"
            )
        if self.select_by not in SELECT_BY:
            raise ValueError(f"select_by must be one of {SELECT_BY}, got {self.select_by!r}")
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise ValueError(
                f"pooling must be one of {POOLINGS} (or None: the pretrained model's), got {self.pooling!r}"
            )
        if self.pooling is not None and self.model != "bert":
            raise ValueError(f"pooling is the BERT's; model {self.model!r} pools visits its own way")
        if self.pos_weight not in POS_WEIGHTS:
            raise ValueError(f"pos_weight must be one of {POS_WEIGHTS}, got {self.pos_weight!r}")
        if not self.roles_lr_scale > 0:
            raise ValueError(f"roles_lr_scale must be > 0, got {self.roles_lr_scale}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not 0.0 <= self.warmup < 1.0:
            raise ValueError(f"warmup must be a fraction in [0, 1), got {self.warmup}")
        if (
            self.trials < 1
            or self.epochs < 1
            or self.batch_size < 1
            or (self.max_steps is not None and self.max_steps < 1)
        ):
            raise ValueError(
                f"trials, epochs, batch_size and max_steps must be >= 1, got {self.trials}, {self.epochs}, "
                f"{self.batch_size}, {self.max_steps}"
            )
        if self.val_every < 0 or self.bucket_batches < 0:
            raise ValueError(
                f"val_every and bucket_batches must be >= 0, got {self.val_every}, {self.bucket_batches}"
            )
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
