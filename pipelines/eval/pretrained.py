"""Evaluate one pretrained HRRBERT (and its fine-tuned runs): :func:`evaluate_pretrained` (``hrrbert evaluate``).

What it runs (each part skipped when its input is not given):

- (a) the frequency-bin MLM test (:mod:`pipelines.eval.frequency`), on the pretrained model;
- (b) ROOD: the chapters fine-tuning run on ``rood`` and ``rood_unseen`` (:mod:`pipelines.eval.finetuned`);
- (c) transfer: the mortality fine-tuning run on another dataset's ``test`` split (eICU layout);
- a MEDS label task: the run of ``finetune --labels`` (``labels_run``) on the rows of the label folder
  ``labels`` placed in ``labels_dataset`` (default ``dataset``) as the fine-tuning placed them, those of
  ``labels_split`` (default ``test``) or all (:mod:`pipelines.eval.labels`); a label-task run given as the
  mortality or chapters run, or one of ``labels`` / ``labels_run`` without the other, is refused;
- (d) nearest neighbours with the ontology-relatedness score (:mod:`pipelines.eval.neighbours`);
- (e) a t-SNE plot of the token embedding matrix (:mod:`pipelines.eval.tsne`);
- unbinding recall (HRR modes only): a seeded sample of ``unbinding_rows`` ICD codes; each code's trained
  vector (:func:`hrr_kernel.hrr_vectors`) unbound with the relation of each of its program edges and
  cleaned up against all trained atoms; the share of edges whose atom is in the top 1 / top 5, overall,
  per relation kind and per relation (:func:`hrr_kernel.unbinding_recall` says exactly what counts);
- the cost figures of a training step (embedding build time, step time, tokens/s, peak memory).

The statistics across trials and configurations (f) live in :mod:`pipelines.eval.stats` and are applied by
:mod:`pipelines.eval.report`. Everything lands in ``<out>/evaluation.json`` (+ ``tsne.png``); the
per-patient predictions of (b) and (c) in ``<out>/predictions.parquet`` (:mod:`pipelines.train.predictions`;
splits ``rood``, ``rood_unseen``, ``transfer``, ``labels`` (one row per label row); model = the label; trial =
the fine-tuning trial), each scored at the thresholds kept with the trial's model; the label rows'
predictions also in ``labels_predictions.parquet`` with their ``prediction_time``. Every input is checked against the program first: a
dataset tokenized against another program, a missing or corrupt model folder, or a task without labels
raises an error naming the file and what differs. An ``out`` folder that exists and holds anything is
refused before any work, unless ``force`` (then the previous evaluation's files are replaced).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

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
from .labels import LABELS_PREDICTIONS_FILE, check_runs

log = logging.getLogger(__name__)

EVALUATION_FILE = "evaluation.json"
TSNE_FILE = "tsne.png"
# what an evaluation writes into its folder
OUTPUTS = (EVALUATION_FILE, TSNE_FILE, PREDICTIONS_FILE, LABELS_PREDICTIONS_FILE)


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
    _embedding_studies(record, model, ds, program, cfg, out, device)
    _finetuned_studies(record, ds, transfer_ds, labels_ds, program, cfg, device, out)
    if cfg.cost_steps > 0:
        record["cost"] = _cost(model, ds, cfg, device)
        record["cost"]["training_seq_per_s"] = _training_throughput(Path(cfg.pretrained))
    record["created_at"] = now_iso()
    write_json(out / EVALUATION_FILE, record)
    return record


@contextmanager
def _timed(record: dict[str, Any], key: str) -> Iterator[None]:
    """Record the seconds the block took under ``record["timings_s"][key]``."""
    t = time.perf_counter()
    yield
    record["timings_s"][key] = time.perf_counter() - t


def _embedding_studies(record: dict[str, Any], model, ds: TokenizedDataset, program, cfg: EvaluateConfig,
                       out: Path, device) -> None:  # fmt: skip
    """(a) the frequency-bin MLM test, (d) nearest neighbours and (e) the t-SNE plot, on the pretrained model."""
    import torch

    from .frequency import frequency_bin_test

    with torch.no_grad():
        with _timed(record, "frequency_bins"):
            record["frequency_bins"] = frequency_bin_test(
                model, ds, per_bin=cfg.per_bin, seed=cfg.seed, batch_size=cfg.batch_size, device=device
            )
        with _timed(record, "neighbours"):
            record["neighbours"] = _neighbours(model, ds, cfg)
        if model.config.mode != "unstructured" and cfg.unbinding_rows > 0:
            with _timed(record, "unbinding_recall"):
                record["unbinding_recall"] = unbinding_study(model, cfg.unbinding_rows, cfg.seed)
        if cfg.tsne_points > 0:
            from .tsne import tsne_plot

            with _timed(record, "tsne"):
                record["tsne"] = tsne_plot(
                    model.token_matrix(),
                    _log_frequency(ds, program.n_concepts),
                    program.concept_codes,
                    out / TSNE_FILE,
                    title=f"{record['label']}: token embeddings (t-SNE)",
                    points=cfg.tsne_points,
                    seed=cfg.seed,
                    chapters=program.concept_chapters or None,
                    rare=_rare(_count_train(ds, program.n_concepts)),
                )
                record["tsne"]["path"] = "tsne.png"


def _finetuned_studies(record: dict[str, Any], ds: TokenizedDataset, transfer_ds: TokenizedDataset | None,
                       labels_ds: TokenizedDataset, program, cfg: EvaluateConfig, device, out: Path) -> None:  # fmt: skip
    """(b) ROOD on the chapters fine-tuning run, (c) transfer of the mortality run to another dataset and
    the label-task run on its label rows; their per-patient predictions go to ``<out>/predictions.parquet``
    (when there are any), the label rows' also to ``<out>/labels_predictions.parquet``."""
    import pyarrow.parquet as pq

    from .finetuned import rood_eval, transfer_eval
    from .labels import labels_eval

    label, blocks = record["label"], []
    if cfg.chapters:
        with _timed(record, "rood"):
            record["rood"], rood = rood_eval(cfg.chapters, ds, program, device=device, batch_size=cfg.batch_size,
                                             label=label)  # fmt: skip
            blocks += rood
    if bool(cfg.mortality) != (transfer_ds is not None):
        log.warning("the transfer test needs both a mortality run and a transfer dataset; skipped")
    if cfg.mortality and transfer_ds is not None:
        with _timed(record, "transfer"):
            record["transfer"], transfer = transfer_eval(cfg.mortality, transfer_ds, program, device=device,
                                                         batch_size=cfg.batch_size, label=label)  # fmt: skip
            record["transfer_dataset_id"] = transfer_ds.dataset_id
            blocks += transfer
    if cfg.labels and cfg.labels_run:
        with _timed(record, "labels"):
            record["labels"], lab, table = labels_eval(
                cfg.labels, cfg.labels_run, labels_ds, program, split=cfg.labels_split, device=device,
                batch_size=cfg.batch_size, label=label, seed=cfg.seed,
            )  # fmt: skip
            blocks += lab
            tmp = out / f".{LABELS_PREDICTIONS_FILE}.tmp"
            pq.write_table(table, tmp)
            tmp.replace(out / LABELS_PREDICTIONS_FILE)
            record["labels"]["predictions"] = LABELS_PREDICTIONS_FILE
    if blocks:
        write_predictions(out / PREDICTIONS_FILE, blocks)
        record["predictions"] = PREDICTIONS_FILE


def _log_frequency(ds: TokenizedDataset, n: int) -> np.ndarray:
    import pyarrow.parquet as pq

    p = ds.path / "code_counts.parquet"
    if not p.is_file():
        raise PipelineError(f"{p}: missing; the evaluation needs code frequencies")
    t = pq.read_table(p).to_pydict()
    logf = np.full(n, min(t["log_frequency"]) if t["log_frequency"] else 0.0)
    logf[np.asarray(t["concept_id"], dtype=np.int64)] = t["log_frequency"]
    return logf


def _rare(count: np.ndarray) -> np.ndarray:
    """Which concepts are rare codes (seen 1..RARE_MAX_COUNT times in pretraining), ``(N,)`` bool."""
    from .neighbours import RARE_MAX_COUNT

    return (count >= 1) & (count <= RARE_MAX_COUNT)


def _count_train(ds: TokenizedDataset, n: int) -> np.ndarray:
    import pyarrow.parquet as pq

    t = pq.read_table(ds.path / "code_counts.parquet").to_pydict()
    col = "count_train" if "count_train" in t else "count"
    c = np.zeros(n, dtype=np.int64)
    c[np.asarray(t["concept_id"], dtype=np.int64)] = t[col]
    return c


UNBINDING_KS = (1, 5)


def unbinding_study(model, n_rows: int, seed: int) -> dict[str, Any]:
    """Unbinding recall of an HRR model over a seeded sample of ``n_rows`` ICD codes (all when fewer): the
    :class:`hrr_kernel.UnbindingRecall` record at top-1 and top-5, per relation keyed by its label, with the
    HRR dimension and the sampled rows."""
    import torch

    from hrr_kernel import hrr_vectors, unbinding_recall

    program, token = model.program, model.embeddings.token
    icd = np.flatnonzero([v.upper().startswith("ICD") for v in program.concept_vocabularies])
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(icd, size=min(n_rows, icd.size), replace=False))
    ids = torch.as_tensor(rows, dtype=torch.int64, device=program.device)
    with torch.no_grad():
        vectors = hrr_vectors(token, ids).float()  # (n, H)
        res = unbinding_recall(program, vectors, token.atom_vectors().detach().float(), token.relation_vectors().detach().float(),
                               ids, ks=UNBINDING_KS)  # fmt: skip
    out = res.as_dict()
    out["per_relation"] = {program.relation_labels[int(j)]: v for j, v in out["per_relation"].items()}
    out["dim"] = token.hrr_dim
    out["sample"] = {"vocabularies": "ICD*", "seed": seed, "asked": n_rows}
    return out


def _neighbours(model, ds: TokenizedDataset, cfg: EvaluateConfig) -> dict[str, Any]:
    from .neighbours import Ontology, choose_codes, neighbour_study

    onto = Ontology(model.program.path)
    codes = choose_codes(onto, _count_train(ds, model.n_concepts), per_group=cfg.per_group, seed=cfg.seed)
    return neighbour_study(model.token_matrix(), onto, codes, k=cfg.neighbours)


def _cost(model, ds: TokenizedDataset, cfg: EvaluateConfig, device) -> dict[str, Any]:
    import torch

    from .cost import measure_cost

    mc = model.config
    seqs = ds.sequences("pretrain_val", max_len=mc.max_len, max_segments=mc.max_segments)
    if not len(seqs):
        seqs = ds.sequences("pretrain_train", max_len=mc.max_len, max_segments=mc.max_segments)
    batch = seqs.batch(torch.arange(min(cfg.cost_batch, len(seqs))))
    with torch.enable_grad():
        return measure_cost(model, batch, steps=cfg.cost_steps, device=device)


def _training_throughput(run: Path) -> float | None:
    """Mean ``seq_per_s`` of a pretraining run's ``metrics.jsonl`` (None when absent)."""
    import json

    p = run / "metrics.jsonl"
    if not p.is_file():
        return None
    vals = []
    for ln in p.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(ln)
        except json.JSONDecodeError:
            continue
        if isinstance(r.get("seq_per_s"), int | float):
            vals.append(float(r["seq_per_s"]))
    return float(np.mean(vals[1:] or vals)) if vals else None


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
        from .labels import summary_lines as label_lines

        lines += label_lines(record["labels"])
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
