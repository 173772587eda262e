"""What an experiment wrote, gathered for the report: :func:`load_experiment`.

Per configuration and pretraining seed (``experiment.json``'s runs):

- the last validation of ``pretrain/<config>-seed<s>/metrics.jsonl`` (MLM accuracy, top-10, top-100);
- the per-patient predictions of every fine-tuning trial, ``finetune/<task>-<config>-seed<s>/trial-<k>/
  predictions.parquet`` (split ``test``), and of the evaluations,
  ``eval/<config>-seed<s>/predictions.parquet`` (``rood``, ``rood_unseen``, ``transfer``), as :class:`Head`
  objects (trials aligned on patients);
- ``evaluation.json`` (frequency bins, neighbours, t-SNE, cost; the per-trial ROOD and transfer scores);
- the fine-tuning ``summary.json`` (per-trial test scores), used only when a run has no predictions
  (an experiment from before per-patient predictions);

and the baselines, ``baselines/baselines.json`` + ``baselines/predictions.parquet`` (models ``constant``,
``logistic_regression``, ``history_chapters``, ``ceiling``), when present.

Dimension legend: P patients, L labels, T fine-tuning trials.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.errors import PipelineError
from pipelines.train.predictions import PREDICTIONS_FILE, Predictions, read_predictions

from .stats import Interval, PatientScorer, bootstrap_patients, trial_mean

EXPERIMENT_FILE = "experiment.json"  # marks an experiment folder (pipelines.eval.experiment writes it)
BASELINES_DIR = "baselines"
BASELINES_FILE = "baselines.json"
BASELINE_MODELS = ("constant", "logistic_regression", "history_chapters", "ceiling")
EVAL_SPLITS = {"rood": "chapters", "rood_unseen": "chapters", "transfer": "mortality"}  # split -> task


@dataclass
class Head:
    """One model's predictions on one (task, split): ``labels (P, L)``, ``probs (T, P, L)``,
    ``thresholds (T, L)``, patients sorted by ``subject_id (P,)``."""

    model: str
    task: str
    split: str
    subject_id: np.ndarray
    labels: np.ndarray
    probs: np.ndarray
    thresholds: np.ndarray
    source: str = ""  # the file(s) it was read from
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return int(self.subject_id.size)

    @property
    def trials(self) -> int:
        return int(self.probs.shape[0])

    @cached_property
    def scorers(self) -> list[PatientScorer]:
        return [PatientScorer(self.labels, p, t) for p, t in zip(self.probs, self.thresholds, strict=True)]

    @property
    def constant_trials(self) -> int:
        """How many trials predict a constant (probabilities constant across patients)."""
        return sum(s.constant for s in self.scorers)

    def metric(self, name: str):
        """``rows -> mean over trials`` of metric ``name`` (for the patient bootstrap)."""
        return trial_mean(self.scorers, name)

    def point(self, name: str) -> float:
        """Metric ``name`` on all patients, mean over trials."""
        return self.metric(name)(np.arange(self.n))

    def interval(self, name: str) -> Interval:
        """Patient-bootstrap interval of metric ``name`` (cached)."""
        if name not in self._cache:
            self._cache[name] = bootstrap_patients(self.metric(name), self.n, vectorized=True)
        return self._cache[name]

    def restrict(self, subject_id: np.ndarray) -> Head:
        """The same head on the patients ``subject_id`` (a subset of its own, sorted)."""
        rows = np.searchsorted(self.subject_id, subject_id)
        return Head(
            self.model,
            self.task,
            self.split,
            self.subject_id[rows],
            self.labels[rows],
            self.probs[:, rows],
            self.thresholds,
            self.source,
        )


def head_of(blocks: list[Predictions], source: str) -> Head:
    """Stack the trials ``blocks`` of one (model, task, split), patients sorted by subject id."""
    b0 = blocks[0]
    order = np.argsort(b0.subject_id, kind="stable")
    sid = np.asarray(b0.subject_id)[order]
    if np.unique(sid).size != sid.size:
        raise PipelineError(f"{source}: {b0.model}/{b0.task}/{b0.split} lists a patient twice")
    probs, thr = [], []
    for b in sorted(blocks, key=lambda b: b.trial):
        o = np.argsort(b.subject_id, kind="stable")
        if not np.array_equal(np.asarray(b.subject_id)[o], sid):
            raise PipelineError(
                f"{source}: trial {b.trial} of {b.model}/{b.task}/{b.split} scored other patients than "
                f"trial {b0.trial} ({len(b.subject_id)} vs {sid.size}); expected the same split"
            )
        probs.append(np.asarray(b.probs, np.float64)[o])
        thr.append(np.broadcast_to(np.asarray(b.thresholds, np.float64).reshape(-1), (b.probs.shape[1],)))
    return Head(
        b0.model, b0.task, b0.split, sid, np.asarray(b0.labels)[order], np.stack(probs), np.stack(thr), source
    )


def _read(path: Path) -> list[Predictions]:
    try:
        return read_predictions(path)
    except (ValueError, OSError) as e:
        raise PipelineError(f"{path}: not a readable predictions file ({e})") from e


def _heads(blocks: list[Predictions], source: str) -> dict[tuple[str, str, str], Head]:
    """``{(model, task, split): Head}`` of blocks from one or more files (trials stacked)."""
    groups: dict[tuple[str, str, str], list[Predictions]] = {}
    for b in blocks:
        groups.setdefault((b.model, b.task, b.split), []).append(b)
    return {k: head_of(v, source) for k, v in groups.items()}


def _read_json(p: Path) -> Any:
    if not p.is_file():
        raise PipelineError(f"{p}: missing; the experiment is incomplete (run `hrrbert experiment` again)")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PipelineError(f"{p}: not valid JSON ({e})") from e


def last_validation(run: Path) -> dict[str, float]:
    """The last record of ``run/metrics.jsonl`` with ``val_mlm_acc`` (empty when none)."""
    p = run / "metrics.jsonl"
    last: dict[str, float] = {}
    if p.is_file():
        for ln in p.read_text(encoding="utf-8").splitlines():
            r = json.loads(ln) if ln.strip() else {}
            if "val_mlm_acc" in r:
                last = r
    return last


@dataclass
class Run:
    """One (configuration, pretraining seed)."""

    seed: int
    mlm: dict[str, float]
    evaluation: dict[str, Any]
    eval_dir: str  # relative to the experiment
    heads: dict[tuple[str, str], Head]  # (task, split) -> the fine-tuned heads' predictions
    trial_scores: dict[tuple[str, str], list[dict]]  # (task, split) -> per-trial metrics (no predictions)


@dataclass
class Baselines:
    path: Path
    record: dict[str, Any]
    heads: dict[tuple[str, str, str], Head]  # (model, task, split)

    @property
    def mlm_top1(self) -> dict[str, float]:
        top = (self.record.get("mlm") or {}).get("top1") or {}
        return {k: float(v) for k, v in top.items() if isinstance(v, int | float) and math.isfinite(v)}

    def mlm(self, key: str) -> dict[str, float]:
        top = (self.record.get("mlm") or {}).get(key) or {}
        return {k: float(v) for k, v in top.items() if isinstance(v, int | float) and math.isfinite(v)}

    def head(self, model: str, task: str, split: str) -> Head | None:
        return self.heads.get((model, task, split))

    @property
    def has_ceiling(self) -> bool:
        return any(k[0] == "ceiling" for k in self.heads) or "ceiling" in self.record


def load_baselines(root: Path) -> Baselines | None:
    d = root / BASELINES_DIR
    if not (d / BASELINES_FILE).is_file():
        return None
    record = _read_json(d / BASELINES_FILE)
    p = d / PREDICTIONS_FILE
    heads = _heads(_read(p), str(p)) if p.is_file() else {}
    return Baselines(d, record, heads)


def _run(root: Path, run: dict[str, Any]) -> Run:
    heads: dict[tuple[str, str], Head] = {}
    trial_scores: dict[tuple[str, str], list[dict]] = {}
    for task, ft in run.get("finetune", {}).items():
        files = sorted((root / ft).glob(f"trial-*/{PREDICTIONS_FILE}"), key=lambda p: int(p.parent.name[6:]))
        blocks = [b for f in files for b in _read(f) if b.task == task and b.split == "test"]
        if blocks:
            heads[(task, "test")] = head_of(blocks, str(root / ft))
        else:
            summary = _read_json(root / ft / "summary.json")
            trial_scores[(task, "test")] = [t.get("test") or {} for t in summary["trials"]]
    ev = _read_json(root / run["evaluation"])
    eval_dir = Path(run["evaluation"]).parent
    p = root / eval_dir / PREDICTIONS_FILE
    if p.is_file():
        for (_, task, split), h in _heads(_read(p), str(p)).items():
            heads[(task, split)] = h
    for t in ev.get("rood", []):  # older evaluations: per-trial scores only
        for split in ("rood", "rood_unseen"):
            if ("chapters", split) not in heads and t.get(split, {}).get("n"):
                trial_scores.setdefault(("chapters", split), []).append(t[split])
    for t in ev.get("transfer", []):
        if ("mortality", "transfer") not in heads:
            trial_scores.setdefault(("mortality", "transfer"), []).append(t.get("test") or {})
    return Run(
        int(run.get("seed", 0)),
        last_validation(root / run["pretrain"]),
        ev,
        str(eval_dir),
        heads,
        trial_scores,
    )


def _synthetic(exp: dict[str, Any], baselines: Baselines | None) -> bool:
    """A demo / synthetic run: the baselines hold a ground-truth ceiling, or the dataset is the demo's."""
    if baselines is not None and baselines.has_ceiling:
        return True
    ds = (exp.get("config") or {}).get("dataset")
    p = Path(ds) / "dataset.json" if ds else None
    if p is not None and p.is_file():
        try:
            return (json.loads(p.read_text(encoding="utf-8")).get("source") or {}).get("kind") == "demo"
        except json.JSONDecodeError:
            return False
    return False


@dataclass
class Experiment:
    root: Path
    record: dict[str, Any]
    configurations: dict[str, list[Run]]  # in the experiment's order
    baselines: Baselines | None
    synthetic: bool

    @property
    def control(self) -> str:
        return self.record.get("control", "unstructured")


def load_experiment(root: str | Path) -> Experiment:
    """Everything the report shows, gathered per configuration (in the experiment's order)."""
    root = Path(root)
    exp = _read_json(root / EXPERIMENT_FILE)
    confs: dict[str, list[Run]] = {}
    for run in exp.get("runs", []):
        confs.setdefault(run["configuration"], []).append(_run(root, run))
    baselines = load_baselines(root)
    return Experiment(root, exp, confs, baselines, _synthetic(exp, baselines))
