"""The demo's defaults, in one place (light: the CLI reads them for its ``--help``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.data.tasks import TASKS

DEMO_PATIENTS = 30_000  # synthetic MIMIC-IV-layout cohort size (the eICU hospital gets a quarter of it)
DEMO_EXPERIMENT = {
    "configurations": ("unstructured", "base"),
    "model": "mini",  # 128 wide: HRR compositions of 64 dimensions are too noisy to carry the ontology
    "pretrain_seeds": 1,
    "trials": 1,  # intervals resample test patients; more trials only average out fine-tuning noise
    "tasks": TASKS,
    "workers": 2,  # the two configurations train side by side, one torch thread each (2 cores)
    # each configuration pretrains at its better lr (measured on seeds 0 and 1: docs/demo.md): at 2e-3
    # `unstructured` stalled near the unigram predictor for 1,000 of its 2,000 steps on seed 0 (validation
    # top-1 6.6 % against 11.6 % at 1e-3) and fine-tunes worse on both seeds, a weak control that would
    # inflate every margin; `base` fine-tunes better at 2e-3 on both
    # `gram` and `ancestors` (free vectors, like the control) collapsed to the most frequent code at 2e-3 on
    # the small demo (validation top-1 3.6-4.1 % for all 2,000 steps) and learn at 1e-3 (`ancestors` 6.4 /
    # 9.3 / 9.3 % at steps 270 / 540 / 1,000; `gram` 4.7 % at 270); see docs/demo.md
    "pretrain_by_configuration": {
        "unstructured": {"lr": 1e-3},
        "gram": {"lr": 1e-3},
        "ancestors": {"lr": 1e-3},
    },
    # every composing configuration's heads also read the history's ICD chapters from its code vectors
    # (pooling cls+mean+roles, model.roles), with the atoms kept as pretrained (docs/demo.md; seed 0,
    # chapters F1 test / ROOD-unseen: 50.2 / 48.7 with cls+mean, 55.2 / 54.6 so; the history's chapters
    # regression 52.8 / 54.6)
    "finetune_by_configuration": {
        c: {"pooling": "cls+mean+roles", "freeze_atoms": True} for c in ("base", "freq", "add", "cat")
    },
}
DEMO_RELEASE_SEED = 0  # the demo release (and program) is the same for every --seed
DEMO_PRETRAIN = {"max_steps": 2000, "batch_size": 64, "bucket_batches": 50, "lr": 2e-3, "max_val": 1000,
                 "save_every": 500}  # fmt: skip
# fine-tuning: the validation loss is lowest after 2-3 epochs of 4,000 patients; balanced positives keep the
# rare chapters from being learned as constants (measured: #17 closing note). The heads read [CLS] plus the
# mean state (pooling cls+mean): chapters F1 +0.9 / +1.6 for `base` and +2.5 / +2.6 for `unstructured` on
# seeds 0 / 1; mortality AUROC +0.8 / +1.2 on seed 0 but -1.6 / -2.2 on seed 1 (docs/demo.md)
DEMO_FINETUNE = {"max_steps": 600, "lr": 1e-3, "batch_size": 32, "bucket_batches": 20, "schedule": "linear",
                 "pos_weight": "auto", "select_by": "loss", "pooling": "cls+mean"}  # fmt: skip
# next_visit_epochs: the next-visit head on the frozen encoder (docs/demo.md); measured per configuration,
# alone on one thread: 7.7 s on the small demo's release, 22 s on the default one (2,647 head outputs).
# next_visit_head copy: the history head's softmax mixed with a copy distribution over the history's
# categories; recall@20 of `base` with the linear / history / copy head 55.0 / 60.2 / 61.2 (seed 0), rarest
# quintile 0.0 / 14.1 / 22.5; over cohort seeds 0 / 1 / 2 copy against history: 61.7 vs 61.3 overall, 18.7
# vs 14.8 rarest quintile, 53.3 vs 49.0 ROOD-unseen (docs/demo.md)
DEMO_EVALUATE = {"per_bin": 400, "tsne_points": 1500, "cost_steps": 3, "next_visit_epochs": 100,
                 "next_visit_head": "copy"}  # fmt: skip
DEMO_SIZES = ("default", "small")  # demo release sizes (pipelines.demo.release.SIZES: default ~12k concepts)
# Split sizes of the demo datasets (pipelines.data.splits.SplitOptions fields): enough fine-tuning
# patients for the heads to learn (the paper's sizes scaled to 20k patients leave 470 disease patients).
# 8,000 / 1,000 of 30,000 rather than 4,000 / 600 of 20,000 (measured, seed 0, same steps): `base` chapters
# F1 47.2 -> 49.4, ROOD-unseen 43.7 -> 45.5, and about 19k pretraining patients instead of 14k.
DEMO_SPLITS = {
    "finetune_train": 8000,
    "finetune_val": 1000,
    "disease_train": 8000,
    "disease_val": 1000,
    "test": 1000,
}


def demo_split_sizes(n_patients: int) -> dict[str, int]:
    """:data:`DEMO_SPLITS` scaled down to a cohort of ``n_patients`` (they are sized for
    :data:`DEMO_PATIENTS`)."""
    scale = min(1.0, n_patients / DEMO_PATIENTS)
    return {k: max(1, int(round(v * scale))) for k, v in DEMO_SPLITS.items()}


def demo_configurations(configurations: tuple[str, ...], full: bool) -> tuple[str, ...]:
    """The configurations a demo trains: ``()`` for the demo's own, every mode with ``full``, else the
    list given (checked against the registered modes, the control first)."""
    from hrr_kernel.modes import MODES

    configurations = tuple(configurations)
    if full and configurations:
        raise ValueError("--config and --full choose the configurations twice; give one")
    if full:
        return tuple(MODES)
    bad = [c for c in configurations if c not in MODES]
    if bad:
        raise ValueError(f"--config: unknown {', '.join(bad)}; choose from {', '.join(MODES)}")
    control = DEMO_EXPERIMENT["configurations"][0]  # unstructured, the control
    if configurations and control not in configurations:
        raise ValueError(f"--config must include the control, {control}")
    if configurations and len(set(configurations)) != len(configurations):
        raise ValueError("--config names a configuration twice")
    return tuple(configurations)


@dataclass
class DemoConfig:
    """Options of ``hrrbert demo`` (:func:`pipelines.demo.run.run_demo`; ``carry``: the carry study)."""

    out: str = field(
        default="artifacts",
        metadata={"help": "folder of the demo's releases/, programs/, ehr/, datasets/, runs/"},
    )
    size: str = field(
        default="default",
        metadata={"help": "demo release size: default (~12k concepts) or small (for tests)"},
    )
    patients: int = field(default=DEMO_PATIENTS, metadata={"help": "synthetic cohort size"})
    train_steps: int | None = field(
        default=None,
        metadata={
            "help": "pretraining steps per model (default: the demo's; 0: data steps only, no experiment)"
        },
    )
    trials: int | None = field(
        default=None, metadata={"help": "fine-tuning trials per task (default: the demo's)"}
    )
    seed: int = field(
        default=0,
        metadata={
            "help": "seed of the synthetic cohort and its splits "
            "(the demo release is the same for every seed)"
        },
    )
    full: bool = field(
        default=False,
        metadata={"help": "also train the freq, add and cat configurations (several times longer)"},
    )
    configurations: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "a configuration to train instead of the demo's (repeat: --config unstructured "
            "--config base --config gram --config ancestors reads base against the hierarchy rivals); "
            "--full: every one"
        },
    )
    carry: bool = field(
        default=False,
        metadata={
            "help": "instead: train on the release as of its first date, carry the models to the latest "
            "release (hrrbert carry) and score the codes it added (runs/<name>-carry/carry/)"
        },
    )
    device: str = field(default="cpu", metadata={"help": "cpu, cuda or auto"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads (0: leave torch's default)"})
