"""Evaluate one pretrained HRRBERT (and its fine-tuned runs): :func:`evaluate_pretrained` (``hrrbert
evaluate``).

What it runs: every evaluation of the registry (:data:`pipelines.eval.registry.EVALUATIONS`), in its order,
each skipped when its input is not given:

- (a) the frequency-bin MLM test (:mod:`pipelines.eval.frequency`), on the pretrained model;
- (b) ROOD: the chapters fine-tuning run on ``rood`` and ``rood_unseen`` (:mod:`pipelines.eval.finetuned`);
- (c) transfer: the mortality fine-tuning run on another dataset's ``test`` split (eICU layout);
- a MEDS label task: the run of ``finetune --labels`` (``labels_run``) on the rows of the label folder
  ``labels`` placed in ``labels_dataset`` (default ``dataset``) as the fine-tuning placed them, those of
  ``labels_split`` (default ``test``) or all (:mod:`pipelines.eval.label_scores`); a label-task run given as
  the mortality or chapters run, or one of ``labels`` / ``labels_run`` without the other, is refused;
- (d) nearest neighbours with the ontology-relatedness score (:mod:`pipelines.eval.neighbours`);
- (e) a t-SNE plot of the token embedding matrix (:mod:`pipelines.eval.tsne`);
- next-visit diagnoses (:mod:`pipelines.eval.next_visit`): the ICD categories of each patient's last visit
  ranked from the visits before it by a linear softmax head on the frozen encoder, top-k recall on ``test``
  (overall and per frequency quintile) and ``rood_unseen`` beside the frequency prior, the history's
  categories, co-occurrence and (given ``ground_truth``) the generator's ceiling (``next_visit_epochs`` 0:
  off);
- unbinding recall (HRR embeddings only: ``hrr_dim > 0``): a seeded sample of ``unbinding_rows`` ICD
  codes; each code's trained vector (:func:`hrr_kernel.hrr_vectors`) unbound with the relation of each of
  its program edges and cleaned up against all trained atoms; the share of edges whose atom is in the top 1
  / top 5, overall, per relation kind and per relation (:func:`hrr_kernel.unbinding_recall` says exactly
  what counts);
- the cost figures of a training step (embedding build time, step time, tokens/s, peak memory).

The statistics across trials and configurations (f) live in :mod:`pipelines.eval.stats` and are applied by
:mod:`pipelines.eval.report`. Everything lands in ``<out>/evaluation.json`` (each evaluation's typed record,
:mod:`pipelines.eval.records`, under its name; the seconds each took in ``timings_s``; + ``tsne.png``); the
per-patient predictions of (b) and (c) in ``<out>/predictions.parquet`` (:mod:`pipelines.train.predictions`;
splits ``rood``, ``rood_unseen``, ``transfer``, ``labels`` (one row per label row); model = the label; trial =
the fine-tuning trial), each scored at the thresholds kept with the trial's model; the label rows'
predictions also in ``labels_predictions/trial_<k>.parquet`` (meds-evaluation's schema). Every input is
checked against the program first: a dataset tokenized against another program, a missing or corrupt model
folder, or a task without labels raises an error naming the file and what differs. An ``out`` folder that
exists and holds anything is refused before any work, unless ``force`` (then the previous evaluation's
files are replaced).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipelines.data.sequences import TokenizedDataset
from pipelines.errors import PipelineError
from pipelines.train.predictions import PREDICTIONS_FILE, write_predictions
from pipelines.train.runtime import (
    config_from,
    now_iso,
    resolve_device,
    seed_everything,
    versions,
    write_json,
)

from .config import EvaluateConfig
from .label_scores import LABELS_PREDICTIONS_DIR, check_runs
from .registry import EVALUATIONS, TSNE_FILE, Evaluation, RunInputs

log = logging.getLogger(__name__)

EVALUATION_FILE = "evaluation.json"
# what an evaluation writes into its folder
OUTPUTS = (EVALUATION_FILE, TSNE_FILE, PREDICTIONS_FILE, LABELS_PREDICTIONS_DIR)


def check_out(out: Path, force: bool) -> None:
    """Refuse an ``out`` that exists and is not an empty folder, unless ``force``; with ``force`` remove the
    files a previous evaluation wrote there (and nothing else), so no stale plot outlives its record."""
    if not out.exists():
        return
    if not out.is_dir():
        raise PipelineError(f"{out}: exists and is not a folder; choose another --out")
    if not any(out.iterdir()):
        return
    if not force:
        raise PipelineError(
            f"{out}: exists and is not empty; an evaluation is never written over another: choose another "
            "--out, or pass --force to replace the evaluation there"
        )
    for name in OUTPUTS:
        if (out / name).is_dir() and not (out / name).is_symlink():
            shutil.rmtree(out / name)
        else:
            (out / name).unlink(missing_ok=True)


def evaluate_pretrained(
    config: EvaluateConfig | None = None, *, force: bool = False, **options: Any
) -> dict[str, Any]:
    """Run the evaluations of one pretrained model; returns (and writes) the ``evaluation.json`` record.

    ``cfg.out`` must not exist or be an empty folder; ``force`` replaces the evaluation in it.
    """
    cfg = config_from(EvaluateConfig, config, options, "evaluate")
    check_out(Path(cfg.out), force)  # before any work
    check_runs(mortality=cfg.mortality, chapters=cfg.chapters, labels_run=cfg.labels_run)
    from hrr_kernel import load_program
    from model import HRRBert
    from pipelines.train.finetune import model_dir

    device = resolve_device(cfg.device)
    seed_everything(cfg.seed)
    program = load_program(cfg.program, device=device)
    mdir = model_dir(cfg.pretrained)
    meta = HRRBert.read_config(mdir)
    model = HRRBert.from_pretrained(mdir, program)  # checks files and the program id
    model.eval()
    ds = TokenizedDataset(cfg.dataset, program.program_id, program.n_concepts, model.pad_id)
    transfer_ds = None
    if cfg.transfer_dataset:
        transfer_ds = TokenizedDataset(
            cfg.transfer_dataset, program.program_id, program.n_concepts, model.pad_id
        )
    labels_ds = ds
    if cfg.labels_dataset:
        labels_ds = TokenizedDataset(cfg.labels_dataset, program.program_id, program.n_concepts, model.pad_id)
    label = cfg.label or model.config.mode
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "kind": "evaluation",
        "label": label,
        "mode": model.config.mode,
        "model": str(mdir),
        "pretrained_run": meta.get("run_id"),
        "program_id": program.program_id,
        "dataset_id": ds.dataset_id,
        "config": asdict(cfg),
        "versions": versions(),
        "timings_s": {},
    }
    inputs = RunInputs(cfg, model, program, ds, transfer_ds, labels_ds, device, out, label)
    for ev in EVALUATIONS:
        rec = _run(ev, inputs, cfg, record["timings_s"])
        if rec is not None:
            record.update(rec.to_dict())
    if inputs.predictions:  # the per-patient predictions of ROOD, transfer and the label rows
        write_predictions(out / PREDICTIONS_FILE, inputs.predictions)
        record["predictions"] = PREDICTIONS_FILE
    record["created_at"] = now_iso()
    write_json(out / EVALUATION_FILE, record)
    return record


def _run(ev: Evaluation, inputs: RunInputs, cfg: EvaluateConfig, timings: dict[str, float]) -> Any:
    """One evaluation's record (None: skipped), its seconds under ``timings[ev.name]`` when it ran."""
    import torch

    t = time.perf_counter()
    with torch.no_grad() if ev.no_grad else contextlib.nullcontext():
        rec = ev.run(ev.inputs(inputs, cfg))
    if rec is not None:
        timings[ev.name] = time.perf_counter() - t
    return rec


def summary_lines(record: dict[str, Any]) -> list[str]:
    """A short text summary of an ``evaluation.json`` record (what ``hrrbert evaluate`` prints)."""
    lines = [f"model     {record['model']} ({record['mode']})"]
    for b in record.get("frequency_bins", []):
        acc = "empty" if not b["probes"] else f"top-10 {b['top10']:.3f}, top-100 {b['top100']:.3f}"
        lines.append(f"bin       [{b['low']:.0f}, {b['high']:.0f}) {b['probes']} probes: {acc}")
    for g, v in record.get("neighbours", {}).get("groups", {}).items():
        lines.append(f"neighbours {g}: {v['related']}/{v['total']} related")
    u = record.get("unbinding_recall")
    if u:
        kinds = ", ".join(f"{k} {v['recall']['5']:.3f}" for k, v in u["per_kind"].items())
        lines.append(
            f"unbinding {u['rows']} codes, {u['edges']} edges (H={u['dim']}): top-1 {u['recall']['1']:.3f}, "
            f"top-5 {u['recall']['5']:.3f} (top-5 by kind: {kinds})"
        )
    for t in record.get("rood", []):
        u = t["rood_unseen"]
        lines.append(
            f"rood      trial {t['trial']}: F1 {t['rood'].get('f1', float('nan')):.3f}, "
            + ("unseen F1 {:.3f}".format(u["f1"]) if u.get("n") else "unseen empty")
        )
    for t in record.get("transfer", []):
        lines.append(f"transfer  trial {t['trial']}: F1 {t['test'].get('f1', float('nan')):.3f}")
    if record.get("labels"):
        from .label_scores import summary_lines as label_lines

        lines += label_lines(record["labels"])
    for scorer, by in (record.get("next_visit") or {}).get("scores", {}).items():
        r20 = {g: v["recall"].get("20") for g, v in by.items()}
        cells = [f"{g} {100 * r:.1f}" for g, r in r20.items() if r is not None]
        lines.append(f"next visit {scorer} recall@20: {', '.join(cells)}")
    if record.get("tsne"):
        lines.append(f"t-SNE     {Path(record['config']['out']) / record['tsne']['path']}")
    if record.get("cost"):
        c = record["cost"]
        lines.append(
            f"cost      build {1e3 * c['embedding_build_s']:.2f} ms, step {1e3 * c['step_s']:.1f} ms, "
            f"{c['tokens_per_s']:.0f} tokens/s, peak {c['peak_memory_mb']:.0f} MB"
        )
    lines.append(f"written   {Path(record['config']['out']) / EVALUATION_FILE}")
    return lines
