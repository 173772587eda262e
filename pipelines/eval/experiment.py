"""The paper's protocol as one call: :func:`run_experiment` (``hrrbert experiment``).

For every configuration (embedding mode) and pretraining seed: pretrain, fine-tune ``trials`` times on
each task, evaluate (frequency bins, neighbours, t-SNE, ROOD, next-visit diagnoses, eICU transfer, cost;
the experiment's ``ground_truth`` gives the next-visit ceiling); then write the report. The paper ran 3
pretraining seeds x 10 fine-tunes of BERT-base on MIMIC-IV (meant for a GPU); ``hrrbert demo`` runs the
smallest instance on the synthetic cohort.

An experiment lives in ``<out>/<name>/``::

    experiment.json                     the config and the list of runs (written first, updated as runs
                                        finish)
    baselines/                          baselines.json, predictions.parquet (pipelines.eval.baselines), first
    pretrain/<config>-seed<s>/          pretraining runs (pipelines.train.pretrain layout)
    finetune/<task>-<config>-seed<s>/   fine-tuning runs (trial-*/results.json, summary.json)
    eval/<config>-seed<s>/              evaluation.json, tsne.png
    report.md, results.json, plots/     the report, its numbers for tools, its figures (pipelines.eval.report)

Finished steps are kept: running the same experiment again skips every run whose output exists, so a
killed experiment continues where it stopped. ``workers`` > 1 runs the (configuration, seed) pairs side by
side in spawned processes (:mod:`pipelines.eval.parallel`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ontology_compiler.api import safe_component
from pipelines.errors import PipelineError
from pipelines.train.config import ROLE_POOLING
from pipelines.train.runtime import now_iso, versions, write_json

from .config import ExperimentConfig
from .parallel import run_parallel
from .report import EXPERIMENT_FILE

log = logging.getLogger(__name__)

# Fine-tuning trials of pretraining seed s use seeds s * stride + k (k < trials): disjoint for < 1000 trials.
FINETUNE_SEED_STRIDE = 1000

CONTROL = "unstructured"


@dataclass
class ExperimentResult:
    path: Path  # the experiment folder
    report: Path  # report.md
    headline: str  # the report's headline table (Markdown)
    seconds: float  # wall time of this call


def run_experiment(config: ExperimentConfig | None = None, **options: Any) -> ExperimentResult:
    """Run (or continue) an experiment and write its report."""
    cfg = config or ExperimentConfig(**options)
    safe_component(cfg.name, "name")  # one folder under ``out``, never a path
    t0 = time.perf_counter()
    root = Path(cfg.out) / cfg.name
    root.mkdir(parents=True, exist_ok=True)
    _check_same_config(root, cfg)
    runs: list[dict[str, Any]] = []
    record = {
        "kind": "experiment",
        "name": cfg.name,
        "config": asdict(cfg),
        "control": CONTROL,
        "versions": versions(),
        "created_at": now_iso(),
        "runs": runs,
    }
    write_json(root / EXPERIMENT_FILE, record)
    if cfg.baselines:
        record["baselines"] = _baselines(cfg, root)
        write_json(root / EXPERIMENT_FILE, record)
    # bars of several processes would overwrite each other on one terminal: workers log lines instead
    job_cfg = replace(cfg, progress=False) if cfg.workers > 1 else cfg
    jobs = [(job_cfg, root, conf, seed) for conf in cfg.configurations for seed in range(cfg.pretrain_seeds)]
    done: dict[int, dict[str, Any]] = {}

    def finished(i: int, run: dict[str, Any]) -> None:  # experiment.json lists runs in job order
        done[i] = run
        runs[:] = [done[k] for k in sorted(done)]
        write_json(root / EXPERIMENT_FILE, record)

    run_parallel(_one_run, jobs, workers=cfg.workers, threads=1, done=finished)
    record["finished_at"] = now_iso()
    write_json(root / EXPERIMENT_FILE, record)
    from .report import write_report

    rep = write_report(root)
    return ExperimentResult(root, rep.path, rep.headline, time.perf_counter() - t0)


def _check_same_config(root: Path, cfg: ExperimentConfig) -> None:
    p = root / EXPERIMENT_FILE
    if not p.is_file():
        return
    try:
        saved = json.loads(p.read_text(encoding="utf-8")).get("config", {})
    except json.JSONDecodeError as e:
        raise PipelineError(f"{p}: not valid JSON ({e}); remove it or choose another --name") from e
    now = json.loads(json.dumps(asdict(cfg)))
    # a field added since the experiment was written compares as its default
    defaults = {
        f.name: f.default if f.default is not MISSING else f.default_factory()
        for f in fields(ExperimentConfig)
        if f.name in _ADDED
    }
    saved = {**defaults, **saved}
    ignore = {"progress", "device", "out", "workers"}  # none of them changes a result
    diffs = sorted(k for k in set(saved) | set(now) if k not in ignore and saved.get(k) != now.get(k))
    if diffs:
        lines = "\n".join(f"  {k}: experiment has {saved.get(k)!r}, now {now.get(k)!r}" for k in diffs)
        raise PipelineError(
            f"{p}: an experiment with another config exists there; differences:\n{lines}\n"
            "  use the same options to continue it, or choose another --name"
        )


_ADDED = {
    "ground_truth",
    "baselines",
    "workers",
    "pretrain_by_configuration",
    "finetune_by_configuration",
}  # ExperimentConfig fields newer than some experiment.json files


def _baselines(cfg: ExperimentConfig, root: Path) -> str:
    """The baselines and ceilings into ``<root>/baselines/`` (read back when finished); its path."""
    from .baselines import BASELINES_FILE, compute_baselines
    from .baselines_mlm import MLMMasking

    out = root / "baselines"
    t = time.perf_counter()
    compute_baselines(
        cfg.dataset,
        cfg.program,
        out,
        ground_truth=cfg.ground_truth,
        transfer_dataset=cfg.transfer_dataset,
        tasks=cfg.tasks,
        seed=0,
        mlm=MLMMasking.of_experiment(cfg.model, cfg.pretrain),
    )
    log.info("baselines in %.0f s", time.perf_counter() - t)
    return str((out / BASELINES_FILE).relative_to(root))


def _one_run(cfg: ExperimentConfig, root: Path, conf: str, seed: int) -> dict[str, Any]:
    from pipelines.train.finetune import finetune
    from pipelines.train.pretrain import pretrain, resumable

    from .pretrained import EVALUATION_FILE, evaluate_pretrained

    tag = f"{conf}-seed{seed}"
    pre_dir = root / "pretrain" / tag
    if not (pre_dir / "model" / "config.json").is_file():
        t = time.perf_counter()
        resume = resumable(pre_dir)
        pretrain(
            cfg.dataset,
            cfg.program,
            out=root / "pretrain",
            run_id=tag,
            resume=resume,
            model=cfg.model,
            mode=conf,
            seed=seed,
            device=cfg.device,
            progress=cfg.progress,
            **cfg.pretrain_options(conf),
        )
        log.info("pretrained %s in %.0f s", tag, time.perf_counter() - t)
    ft: dict[str, str] = {}
    for task in cfg.tasks:
        ft_id = f"{task}-{tag}"
        ft_dir = root / "finetune" / ft_id
        if not (ft_dir / "summary.json").is_file():
            t = time.perf_counter()
            # a started run (killed) resumes: finished trials are read back, an interrupted one continues
            finetune(
                pre_dir,
                cfg.dataset,
                cfg.program,
                out=root / "finetune",
                run_id=ft_id,
                task=task,
                resume=(ft_dir / "config.json").is_file(),
                trials=cfg.trials,
                seed=FINETUNE_SEED_STRIDE * seed,
                device=cfg.device,
                progress=cfg.progress,
                **cfg.finetune_options(conf),
            )
            log.info("fine-tuned %s in %.0f s", ft_id, time.perf_counter() - t)
        ft[task] = str(ft_dir.relative_to(root))
    ev_dir = root / "eval" / tag
    if not (ev_dir / EVALUATION_FILE).is_file():
        t = time.perf_counter()
        evaluate_pretrained(
            pretrained=str(pre_dir),
            dataset=cfg.dataset,
            program=cfg.program,
            out=str(ev_dir),
            force=True,  # the experiment's own folder: a killed evaluation left it unfinished
            mortality=str(root / ft["mortality"]) if "mortality" in ft else None,
            chapters=str(root / ft["chapters"]) if "chapters" in ft else None,
            transfer_dataset=cfg.transfer_dataset,
            device=cfg.device,
            label=conf,
            **{"ground_truth": cfg.ground_truth, **cfg.evaluate},  # the next-visit ceiling's truth
        )
        log.info("evaluated %s in %.0f s", tag, time.perf_counter() - t)
    return {
        "configuration": conf,
        "seed": seed,
        "pretrain": str(pre_dir.relative_to(root)),
        "finetune": ft,
        "evaluation": str((ev_dir / EVALUATION_FILE).relative_to(root)),
    }


def options_to_config(
    *,
    epochs: int,
    max_steps: int | None,
    batch_size: int,
    lr: float,
    bf16: bool,
    finetune_epochs: int,
    finetune_lr: float,
    finetune_batch_size: int,
    per_bin: int,
    tsne_points: int,
    lr_for: tuple[str, ...] = (),
    roles_for: tuple[str, ...] = (),
    **kw: Any,
) -> ExperimentConfig:
    """An :class:`ExperimentConfig` from the flat options of ``hrrbert experiment`` (``lr_for``: ``CONFIG=LR``
    items, each configuration's own pretraining lr; ``roles_for``: configurations whose heads also read the
    role readout, pooling cls+mean+roles, with their atoms kept as pretrained)."""
    by_conf: dict[str, dict[str, Any]] = {}
    for item in lr_for:
        conf, eq, value = item.partition("=")
        try:
            lr_conf = float(value)
        except ValueError:
            lr_conf = None
        if not eq or not conf.strip() or lr_conf is None:
            raise ValueError(f"--lr-for {item!r}: expected CONFIG=LR, e.g. unstructured=1e-3")
        by_conf[conf.strip()] = {"lr": lr_conf}
    if by_conf:
        kw["pretrain_by_configuration"] = by_conf
    if roles_for:
        kw["finetune_by_configuration"] = {
            c: {"pooling": ROLE_POOLING, "freeze_atoms": True} for c in roles_for
        }
    pre = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "bf16": bf16}
    if max_steps is not None:
        pre["max_steps"] = max_steps
    fin = {"epochs": finetune_epochs, "lr": finetune_lr, "batch_size": finetune_batch_size, "bf16": bf16}
    return ExperimentConfig(
        pretrain=pre, finetune=fin, evaluate={"per_bin": per_bin, "tsne_points": tsne_points}, **kw
    )


def describe(result: ExperimentResult) -> str:
    """What ``hrrbert experiment`` prints: the report, the wall time and the headline table."""
    return f"report    {result.report}\nwall time {result.seconds:.0f} s\n\n{result.headline}"
