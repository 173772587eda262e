"""The evaluations of a pretrained model, each declared once: :data:`EVALUATIONS`.

An :class:`Evaluation` names

- ``name``: its key in ``evaluation.json`` (and in ``timings_s``);
- ``fields``: the :class:`~pipelines.eval.config.EvaluateConfig` fields it reads (the fields themselves
  stay in the config, so the CLI options are generated from them); its run sees only those;
- ``record``: its typed record (:mod:`pipelines.eval.records`: ``to_dict`` / ``from_dict``);
- ``run``: :class:`RunInputs` -> the record, or None when its inputs are not given (then it is skipped);
- ``section``: its part of the experiment report, :class:`~pipelines.eval.sections.SectionInputs` ->
  Markdown lines (None: no section), placed by ``position`` among the others.

:func:`pipelines.eval.pretrained.evaluate_pretrained` runs them in the order of :data:`EVALUATIONS` (the
order of ``evaluation.json``'s keys); :func:`pipelines.eval.report.write_report` writes their sections in
the order of ``position``: after the fixed masked-code (10) and test-split task (20) sections, before the
provenance.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.data.sequences import TokenizedDataset
from pipelines.errors import PipelineError

from . import records as R
from . import sections as S
from .config import EvaluateConfig
from .gather import Experiment
from .next_visit_report import next_visit_section

__all__ = ["EVALUATIONS", "Evaluation", "RunInputs", "TSNE_FILE", "records", "unbinding_study"]

log = logging.getLogger(__name__)

TSNE_FILE = "tsne.png"
UNBINDING_KS = (1, 5)


@dataclass
class RunInputs:
    """What an evaluation runs on; ``cfg`` shows it only the config fields it declared."""

    cfg: Any  # EvaluateConfig (seen through the evaluation's fields)
    model: Any  # the pretrained HRRBert, in eval mode, on ``device``
    program: Any  # its loaded program
    ds: TokenizedDataset  # the dataset it was pretrained on
    transfer_ds: TokenizedDataset | None  # the second dataset (cfg.transfer_dataset)
    labels_ds: TokenizedDataset  # where the label rows are placed (cfg.labels_dataset, else ds)
    device: Any  # torch.device every model and batch goes to
    out: Path  # the evaluation folder
    label: str  # the configuration name (plots, predictions)
    predictions: list = field(default_factory=list)  # per-patient blocks, written to predictions.parquet


class _Fields:
    """An :class:`EvaluateConfig` seen through the fields one evaluation declared."""

    def __init__(self, cfg: EvaluateConfig, names: tuple[str, ...], evaluation: str) -> None:
        self._cfg, self._names, self._evaluation = cfg, names, evaluation

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(
                f"evaluation {self._evaluation!r} reads {name!r}, not among its fields {self._names}"
            )
        return getattr(self._cfg, name)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a pretrained model (module docstring)."""

    name: str
    fields: tuple[str, ...]
    record: type
    run: Callable[[RunInputs], Any]
    section: Callable[[S.SectionInputs], list[str]] | None = None
    position: int = 100  # where its section goes in the report (sorted; ties keep the registry's order)
    no_grad: bool = False  # runs under torch.no_grad() (the pretrained model's embedding studies)

    def inputs(self, base: RunInputs, cfg: EvaluateConfig) -> RunInputs:
        """``base`` with the config narrowed to this evaluation's fields."""
        return RunInputs(**{**base.__dict__, "cfg": _Fields(cfg, self.fields, self.name)})


def records(exp: Experiment, name: str) -> dict[str, list[Any]]:
    """Configuration -> the typed record of evaluation ``name`` of each of its runs (None where absent)."""
    ev = next(e for e in EVALUATIONS if e.name == name)
    return {k: [ev.record.from_dict(r.evaluation) for r in runs] for k, runs in exp.configurations.items()}


# ----------------------------------------------------------------------------- the runs


def _frequency_bins(x: RunInputs) -> R.FrequencyBins:
    from .frequency import frequency_bin_test

    bins = frequency_bin_test(
        x.model, x.ds, per_bin=x.cfg.per_bin, seed=x.cfg.seed, batch_size=x.cfg.batch_size, device=x.device
    )
    return R.FrequencyBins([R.FrequencyBin(**b) for b in bins])


def _neighbours(x: RunInputs) -> R.Neighbours:
    from .neighbours import Ontology, choose_codes, neighbour_study

    onto = Ontology(x.model.program.path)
    codes = choose_codes(
        onto, _count_train(x.ds, x.model.n_concepts), per_group=x.cfg.per_group, seed=x.cfg.seed
    )
    return R.Neighbours.from_dict(
        {"neighbours": neighbour_study(x.model.token_matrix(), onto, codes, k=x.cfg.neighbours)}
    )


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
        res = unbinding_recall(
            program,
            vectors,
            token.atom_vectors().detach().float(),
            token.relation_vectors().detach().float(),
            ids,
            ks=UNBINDING_KS,
        )
    out = res.as_dict()
    out["per_relation"] = {program.relation_labels[int(j)]: v for j, v in out["per_relation"].items()}
    out["dim"] = token.hrr_dim
    out["sample"] = {"vocabularies": "ICD*", "seed": seed, "asked": n_rows}
    return out


def _unbinding(x: RunInputs) -> R.UnbindingRecall | None:
    if x.model.embeddings.token.hrr_dim <= 0 or x.cfg.unbinding_rows <= 0:  # a table has nothing to unbind
        return None
    return R.UnbindingRecall(**unbinding_study(x.model, x.cfg.unbinding_rows, x.cfg.seed))


def _tsne(x: RunInputs) -> R.TSNE | None:
    if x.cfg.tsne_points <= 0:
        return None
    from .tsne import tsne_plot

    rec = tsne_plot(
        x.model.token_matrix(),
        _log_frequency(x.ds, x.program.n_concepts),
        x.program.concept_codes,
        x.out / TSNE_FILE,
        title=f"{x.label}: token embeddings (t-SNE)",
        points=x.cfg.tsne_points,
        seed=x.cfg.seed,
        chapters=x.program.concept_chapters or None,
        rare=_rare(_count_train(x.ds, x.program.n_concepts)),
    )
    return R.TSNE(**{**rec, "path": TSNE_FILE})


def _rood(x: RunInputs) -> R.Rood | None:
    if not x.cfg.chapters:
        return None
    from .finetuned import rood_eval

    trials, blocks = rood_eval(
        x.cfg.chapters, x.ds, x.program, device=x.device, batch_size=x.cfg.batch_size, label=x.label
    )
    x.predictions += blocks
    return R.Rood([R.RoodTrial(**t) for t in trials])


def _transfer(x: RunInputs) -> R.Transfer | None:
    if bool(x.cfg.mortality) != (x.transfer_ds is not None):
        log.warning("the transfer test needs both a mortality run and a transfer dataset; skipped")
    if not (x.cfg.mortality and x.transfer_ds is not None):
        return None
    from .finetuned import transfer_eval

    trials, blocks = transfer_eval(
        x.cfg.mortality, x.transfer_ds, x.program, device=x.device, batch_size=x.cfg.batch_size, label=x.label
    )
    x.predictions += blocks
    return R.Transfer([R.TransferTrial(**t) for t in trials], x.transfer_ds.dataset_id)


def _labels(x: RunInputs) -> R.LabelTask | None:
    if not (x.cfg.labels and x.cfg.labels_run):
        return None
    from .label_scores import labels_eval, write_meds_predictions

    rec, blocks, tables = labels_eval(
        x.cfg.labels,
        x.cfg.labels_run,
        x.labels_ds,
        x.program,
        split=x.cfg.labels_split,
        device=x.device,
        batch_size=x.cfg.batch_size,
        label=x.label,
        seed=x.cfg.seed,
    )
    x.predictions += blocks
    return R.LabelTask(**rec, predictions=write_meds_predictions(tables, x.out))


def _chapters_probe(x: RunInputs) -> R.ChaptersProbe | None:
    if not x.cfg.chapters_probe:
        return None
    from .probe import chapters_probe

    rec = chapters_probe(x.model, x.ds, device=x.device, batch_size=x.cfg.batch_size)
    return None if rec is None else R.ChaptersProbe.from_dict({R.ChaptersProbe.KEY: rec})


def _next_visit(x: RunInputs) -> R.NextVisit | None:
    if x.cfg.next_visit_epochs <= 0:
        return None
    from .next_visit import next_visit_eval

    rec = next_visit_eval(
        x.model,
        x.ds,
        x.program,
        device=x.device,
        batch_size=x.cfg.batch_size,
        seed=x.cfg.seed,
        epochs=x.cfg.next_visit_epochs,
        ground_truth=x.cfg.ground_truth,
        head_kind=x.cfg.next_visit_head,
    )
    return None if rec is None else R.NextVisit.from_dict({R.NextVisit.KEY: rec})


def _cost(x: RunInputs) -> R.CostRecord | None:
    if x.cfg.cost_steps <= 0:
        return None
    import torch

    from .cost import measure_cost

    mc = x.model.config
    seqs = x.ds.sequences("pretrain_val", max_len=mc.max_len, max_segments=mc.max_segments)
    if not len(seqs):
        seqs = x.ds.sequences("pretrain_train", max_len=mc.max_len, max_segments=mc.max_segments)
    batch = seqs.batch(torch.arange(min(x.cfg.cost_batch, len(seqs))))
    with torch.enable_grad():
        cost = measure_cost(x.model, batch, steps=x.cfg.cost_steps, device=x.device)
    return R.CostRecord(**cost, training_seq_per_s=_training_throughput(Path(x.cfg.pretrained)))


# ----------------------------------------------------------------------------- helpers of the runs


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


def _training_throughput(run: Path) -> float | None:
    """Mean ``seq_per_s`` of a pretraining run's ``metrics.jsonl`` (None when absent)."""
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


# ----------------------------------------------------------------------------- the registry

EVALUATIONS: tuple[Evaluation, ...] = (
    Evaluation(
        "frequency_bins",
        ("per_bin", "seed", "batch_size"),
        R.FrequencyBins,
        _frequency_bins,
        S.frequency_section,
        position=50,
        no_grad=True,
    ),
    Evaluation(
        "neighbours",
        ("per_group", "neighbours", "seed"),
        R.Neighbours,
        _neighbours,
        S.neighbour_section,
        position=60,
        no_grad=True,
    ),
    Evaluation(
        "unbinding_recall",
        ("unbinding_rows", "seed"),
        R.UnbindingRecall,
        _unbinding,
        S.unbinding_section,
        position=70,
        no_grad=True,
    ),
    Evaluation("tsne", ("tsne_points", "seed"), R.TSNE, _tsne, S.tsne_section, position=80, no_grad=True),
    Evaluation("rood", ("chapters", "batch_size"), R.Rood, _rood, S.rood_section, position=40),
    Evaluation(
        "transfer",
        ("mortality", "transfer_dataset", "batch_size"),
        R.Transfer,
        _transfer,
        S.transfer_section,
        position=30,
    ),
    Evaluation(
        "labels",
        ("labels", "labels_run", "labels_dataset", "labels_split", "batch_size", "seed"),
        R.LabelTask,
        _labels,
    ),
    Evaluation(
        "chapters_probe",
        ("chapters_probe", "batch_size"),
        R.ChaptersProbe,
        _chapters_probe,
        S.probe_section,
        position=42,
        no_grad=True,
    ),
    Evaluation(
        "next_visit",
        ("next_visit_epochs", "next_visit_head", "ground_truth", "batch_size", "seed"),
        R.NextVisit,
        _next_visit,
        next_visit_section,
        position=45,
    ),
    Evaluation(
        "cost", ("cost_steps", "cost_batch", "pretrained"), R.CostRecord, _cost, S.cost_section, position=90
    ),
)
