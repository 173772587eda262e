"""Options of an evaluation and of an experiment (light: no torch; the CLI takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.data.splits import SPLITS
from pipelines.data.tasks import TASKS

__all__ = ["EvaluateConfig", "ExperimentConfig", "LABEL_SPLITS"]

LABEL_SPLITS = (*SPLITS, "all")  # the label rows scored: those of one split, or all (another hospital)


# the next-visit head (pipelines.eval.next_visit): the encoder's pooled states only; those plus the history's
# categories in the logits; that softmax mixed with a copy distribution over the history's categories; or
# that mixture with the pretrained decoder's prediction in the softmax
NEXT_VISIT_HEADS = ("linear", "history", "copy", "decoder")


@dataclass
class EvaluateConfig:
    """Options of an evaluation (saved in ``evaluation.json``)."""

    pretrained: str = field(
        metadata={"help": "pretraining run folder (holding model/) or a saved model folder"}
    )
    dataset: str = field(metadata={"help": "the tokenized dataset the model was pretrained on (format 1)"})
    program: str = field(metadata={"help": "the program of the model and the datasets"})
    out: str = field(metadata={"help": "folder for evaluation.json and the plot"})
    mortality: str | None = field(
        default=None, metadata={"help": "fine-tuning run (trial-*/model) on mortality, for transfer"}
    )
    chapters: str | None = field(default=None, metadata={"help": "fine-tuning run on chapters, for ROOD"})
    transfer_dataset: str | None = field(
        default=None, metadata={"help": "dataset of another layout (eICU) for the transfer test"}
    )
    per_bin: int = field(default=400, metadata={"help": "codes probed per frequency bin (paper: 400)"})
    neighbours: int = field(default=4, metadata={"help": "top-k neighbours scored (paper: 4)"})
    per_group: int = field(
        default=10, metadata={"help": "common / rare / random codes studied (paper: 10 rare)"}
    )
    tsne_points: int = field(default=2000, metadata={"help": "codes in the t-SNE plot (0: no plot)"})
    unbinding_rows: int = field(
        default=500, metadata={"help": "ICD codes sampled for the unbinding recall (HRR modes; 0: none)"}
    )
    cost_steps: int = field(
        default=3, metadata={"help": "timed training steps for the cost figures (0: none)"}
    )
    cost_batch: int = field(default=32, metadata={"help": "sequences per timed step"})
    chapters_probe: bool = field(
        default=True,
        metadata={
            "help": "the chapters probe: the history's chapters regression's learner on the frozen model's "
            "states and code vectors"
        },
    )
    next_visit_epochs: int = field(
        default=100,
        metadata={
            "help": "most epochs of the next-visit head on the frozen encoder, early-stopped on finetune_val "
            "(0: no next-visit evaluation)"
        },
    )
    next_visit_head: str = field(
        default="linear",
        metadata={
            "help": "the next-visit head: linear (the frozen encoder's pooled states only), history (also "
            "the history's categories, through a pair of weights per frequency band, ranking every category "
            "pretraining saw), copy (history's softmax mixed with a copy distribution over the history's "
            "categories, the share set by a gate on the encoder's states) or decoder (copy, its softmax also "
            "reading the pretrained MLM decoder's prediction at a [MASK] opening a new visit)"
        },
    )
    ground_truth: str | None = field(
        default=None,
        metadata={"help": "cohort ground_truth/ folder (next_visit_probabilities.parquet): the ceiling"},
    )
    batch_size: int = field(default=128, metadata={"help": "evaluation batch"})
    seed: int = field(default=0, metadata={"help": "seed of the code samples and the probes"})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda"})
    label: str | None = field(
        default=None, metadata={"help": "configuration name shown in plots (default: the embedding mode)"}
    )
    labels: str | None = field(
        default=None,
        metadata={"help": "MEDS label folder (one binary task) to score the --labels-run model on"},
    )
    labels_run: str | None = field(
        default=None, metadata={"help": "fine-tuning run made with `finetune --labels` (trial-*/model)"}
    )
    labels_dataset: str | None = field(
        default=None, metadata={"help": "dataset the label rows are placed in (default: --dataset)"}
    )
    labels_split: str = field(
        default="test",
        metadata={"help": "label rows scored: those of this split, or all (a dataset never trained on)"},
    )

    def __post_init__(self) -> None:
        if self.next_visit_head not in NEXT_VISIT_HEADS:
            raise ValueError(
                f"--next-visit-head must be one of {list(NEXT_VISIT_HEADS)}, got {self.next_visit_head!r}"
            )
        if (self.labels is None) != (self.labels_run is None):
            given, missing = ("--labels", "--labels-run") if self.labels else ("--labels-run", "--labels")
            raise ValueError(
                f"{given} needs {missing}: a MEDS label task is scored with both the label folder (--labels "
                "DIR) and the run fine-tuned on it (--labels-run RUN, made by `hrrbert finetune --labels`)"
            )
        if self.labels_dataset is not None and self.labels is None:
            raise ValueError(
                "--labels-dataset places the rows of --labels; give --labels and --labels-run too"
            )
        if self.labels_split not in LABEL_SPLITS:
            raise ValueError(f"labels_split must be one of {LABEL_SPLITS}, got {self.labels_split!r}")


@dataclass
class ExperimentConfig:
    """Options of an experiment (saved in ``experiment.json``)."""

    dataset: str = field(
        metadata={"help": "tokenized dataset (MIMIC layout) for pretraining and fine-tuning"}
    )
    program: str = field(metadata={"help": "the program the datasets were tokenized against"})
    transfer_dataset: str | None = field(
        default=None, metadata={"help": "dataset of another layout (eICU) for the transfer test"}
    )
    name: str = field(default="experiment", metadata={"help": "folder name under ``out``"})
    out: str = field(default="artifacts/runs", metadata={"help": "parent folder of the experiment"})
    configurations: tuple[str, ...] = field(
        default=("unstructured", "base"), metadata={"help": "embedding modes; unstructured = control"}
    )
    model: str = field(default="bert-base", metadata={"help": "model preset: tiny, mini, small, bert-base"})
    pretrain_seeds: int = field(default=3, metadata={"help": "pretraining runs per configuration (paper: 3)"})
    trials: int = field(
        default=10, metadata={"help": "fine-tunings per pretraining run and task (paper: 10)"}
    )
    tasks: tuple[str, ...] = field(default=TASKS, metadata={"help": "fine-tuning tasks"})
    pretrain: dict[str, Any] = field(default_factory=dict)  # PretrainConfig overrides (epochs, lr, ...)
    # per configuration, on top of ``pretrain`` (e.g. {"unstructured": {"lr": 1e-3}}); recorded in
    # experiment.json
    pretrain_by_configuration: dict[str, dict[str, Any]] = field(default_factory=dict)
    finetune: dict[str, Any] = field(default_factory=dict)  # FinetuneConfig overrides
    # per configuration, on top of ``finetune`` (e.g. {"base": {"pooling": "cls+mean+roles"}})
    finetune_by_configuration: dict[str, dict[str, Any]] = field(default_factory=dict)
    evaluate: dict[str, Any] = field(default_factory=dict)  # EvaluateConfig overrides
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda"})
    progress: bool = field(default=True, metadata={"help": "tqdm bars (only on a terminal)"})
    ground_truth: str | None = field(
        default=None,
        metadata={"help": "cohort ground_truth/ folder (task_probabilities.parquet): the ceiling"},
    )
    baselines: bool = field(
        default=True,
        metadata={"help": "compute the baselines and ceilings once, into <experiment>/baselines/"},
    )
    workers: int = field(
        default=1,
        metadata={
            "help": "(configuration, seed) runs side by side in this many processes, one torch thread each"
        },
    )

    def pretrain_options(self, configuration: str) -> dict[str, Any]:
        """The PretrainConfig overrides of one configuration: ``pretrain``, then its own entries."""
        return {**self.pretrain, **self.pretrain_by_configuration.get(configuration, {})}

    def finetune_options(self, configuration: str) -> dict[str, Any]:
        """The FinetuneConfig overrides of one configuration: ``finetune``, then its own entries."""
        return {**self.finetune, **self.finetune_by_configuration.get(configuration, {})}

    def __post_init__(self) -> None:
        from hrr_kernel import MODES

        self.configurations = tuple(self.configurations)
        self.tasks = tuple(self.tasks)
        bad = [c for c in self.configurations if c not in MODES]
        if bad:
            raise ValueError(f"unknown configuration(s) {bad}; choose from {MODES}")
        if len(set(self.configurations)) != len(self.configurations):
            raise ValueError(f"configurations repeat: {self.configurations}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.pretrain_seeds < 1 or self.trials < 1:
            raise ValueError(
                f"pretrain_seeds and trials must be >= 1, got {self.pretrain_seeds}, {self.trials}"
            )
        for name in ("pretrain_by_configuration", "finetune_by_configuration"):
            extra = sorted(set(getattr(self, name)) - set(self.configurations))
            if extra:
                raise ValueError(
                    f"{name} names {extra}, which are not among the configurations {self.configurations}"
                )
        bad_tasks = [t for t in self.tasks if t not in TASKS]
        if bad_tasks:
            raise ValueError(f"unknown task(s) {bad_tasks}; choose from ('mortality', 'chapters')")
