"""The typed records of the evaluations of a pretrained model: what each writes into ``evaluation.json``.

Every record is a dataclass with two methods:

- ``to_dict()``: its entries of ``evaluation.json`` (``{key: value}``), under the keys and in the order the
  file has always had them, so files written before the registry read the same;
- ``from_dict(evaluation)`` (a classmethod): the record read back from a whole ``evaluation.json`` object,
  None when the file has none; a key an older file lacks reads as the field's default (None, 0, empty).

The nested parts (a frequency bin, a neighbour group, a trial) are dataclasses of their own. Metrics of a
fine-tuned head (``accuracy``, ``f1``, ``auroc``, ``n``, ...) stay plain dicts: their keys follow the task.
Light: no torch.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

__all__ = ["CostRecord", "FrequencyBin", "FrequencyBins", "LabelTask", "NeighbourGroup", "Neighbours",
           "NextVisit", "NextVisitScores", "Rood", "RoodTrial", "StudiedCode", "Transfer", "TransferTrial",
           "TSNE", "UnbindingRecall"]  # fmt: skip


def _plain(obj: Any) -> dict[str, Any]:
    """A flat dataclass as its JSON object: its fields in order."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _read(cls: type, d: dict[str, Any]):
    """A flat dataclass from a JSON object; absent keys take the field's default (None without one)."""

    def default(f):
        if f.default is not MISSING:
            return f.default
        return f.default_factory() if f.default_factory is not MISSING else None

    return cls(**{f.name: d[f.name] if f.name in d else default(f) for f in fields(cls)})


# ----------------------------------------------------------------------------- (a) frequency bins


@dataclass
class FrequencyBin:
    """One bin of log frequency: its codes, the masked-code probes drawn from it and their accuracy."""

    low: float
    high: float
    codes_in_bin: int = 0
    probes: int = 0
    top10: float | None = None  # None: no probes
    top100: float | None = None
    median_rank: float | None = None  # the probes' median rank of the masked code (1 = first)
    ranked: int | None = None  # concepts the probes were ranked among


@dataclass
class FrequencyBins:
    """The frequency-bin MLM test (:func:`pipelines.eval.frequency.frequency_bin_test`), bins in order."""

    KEY = "frequency_bins"
    bins: list[FrequencyBin] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: [_plain(b) for b in self.bins]}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> FrequencyBins | None:
        v = evaluation.get(cls.KEY)
        return None if v is None else cls([_read(FrequencyBin, b) for b in v])


# ----------------------------------------------------------------------------- (d) neighbours


@dataclass
class StudiedCode:
    """A studied code with its top-k neighbours (each ``{"code", "title", "related"}``)."""

    code: str
    title: str = ""
    neighbours: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class NeighbourGroup:
    """A group of studied codes (common, rare, random, case studies): related neighbours of scored ones."""

    related: int = 0
    total: int = 0
    codes: list[StudiedCode] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"related": self.related, "total": self.total, "codes": [_plain(c) for c in self.codes]}


@dataclass
class Neighbours:
    """Nearest neighbours scored against the ontology (:func:`pipelines.eval.neighbours.neighbour_study`)."""

    KEY = "neighbours"
    k: int | None = None
    groups: dict[str, NeighbourGroup] = field(default_factory=dict)

    def group(self, name: str) -> NeighbourGroup:
        """The group ``name`` (an empty one when not studied)."""
        return self.groups.get(name) or NeighbourGroup()

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: {"k": self.k, "groups": {g: v.to_dict() for g, v in self.groups.items()}}}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> Neighbours | None:
        v = evaluation.get(cls.KEY)
        if v is None:
            return None
        groups = {
            g: NeighbourGroup(
                x.get("related", 0), x.get("total", 0), [_read(StudiedCode, c) for c in x.get("codes", [])]
            )
            for g, x in (v.get("groups") or {}).items()
        }
        return cls(v.get("k"), groups)


# ----------------------------------------------------------------------------- unbinding recall


@dataclass
class UnbindingRecall:
    """Unbinding recall of an HRR model (:func:`hrr_kernel.unbinding_recall`'s ``as_dict`` with the HRR
    dimension and the sample). ``recall``: ``{"1": share, "5": share}``; ``per_kind`` / ``per_relation``:
    ``{name: {"edges", "recall"}}``."""

    KEY = "unbinding_recall"
    ks: list[int] = field(default_factory=list)
    rows: int = 0
    rows_with_edges: int | None = None
    edges: int = 0
    exact: bool | None = None
    memory: Any = None
    recall: dict[str, float] = field(default_factory=dict)
    per_kind: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_relation: dict[str, dict[str, Any]] = field(default_factory=dict)
    dim: int | None = None
    sample: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: _plain(self)}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> UnbindingRecall | None:
        v = evaluation.get(cls.KEY)
        return _read(cls, v) if v else None  # an empty record counts as none (as the report always read it)


# ----------------------------------------------------------------------------- (e) t-SNE


@dataclass
class TSNE:
    """The t-SNE plot of the token embeddings (:func:`pipelines.eval.tsne.tsne_plot`); ``path`` relative to
    the evaluation folder."""

    KEY = "tsne"
    path: str = ""
    points: int | None = None
    perplexity: float | None = None
    coloured_by: str | None = None  # chapter or log_frequency
    rare_marked: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: _plain(self)}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> TSNE | None:
        v = evaluation.get(cls.KEY)
        return _read(cls, v) if v else None


# ----------------------------------------------------------------------------- (b) ROOD, (c) transfer


@dataclass
class RoodTrial:
    """One chapters fine-tuning trial on ``rood`` and ``rood_unseen`` (metrics; ``{"n": 0}`` when empty)."""

    trial: int
    model: str | None = None
    rood: dict[str, Any] = field(default_factory=dict)
    rood_unseen: dict[str, Any] = field(default_factory=dict)


@dataclass
class Rood:
    """ROOD: the chapters run's trials on patients with held-out codes
    (:func:`pipelines.eval.finetuned.rood_eval`)."""

    KEY = "rood"
    trials: list[RoodTrial] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: [_plain(t) for t in self.trials]}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> Rood | None:
        v = evaluation.get(cls.KEY)
        return None if v is None else cls([_read(RoodTrial, t) for t in v])


@dataclass
class TransferTrial:
    """One mortality fine-tuning trial on the other dataset's ``test`` split."""

    trial: int
    model: str | None = None
    test: dict[str, Any] = field(default_factory=dict)


@dataclass
class Transfer:
    """Transfer: the mortality run's trials on a second dataset
    (:func:`pipelines.eval.finetuned.transfer_eval`), and that dataset's id (its own key,
    ``transfer_dataset_id``)."""

    KEY = "transfer"
    trials: list[TransferTrial] = field(default_factory=list)
    dataset_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: [_plain(t) for t in self.trials], "transfer_dataset_id": self.dataset_id}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> Transfer | None:
        v = evaluation.get(cls.KEY)
        if v is None and "transfer_dataset_id" not in evaluation:
            return None
        return cls([_read(TransferTrial, t) for t in v or []], evaluation.get("transfer_dataset_id"))


# ----------------------------------------------------------------------------- a MEDS label task


@dataclass
class LabelTask:
    """A MEDS label task's rows scored by the run fine-tuned on it
    (:func:`pipelines.eval.label_scores.labels_eval`; its module docstring says what each part holds)."""

    KEY = "labels"
    task: str | None = None
    path: str | None = None
    inputs: Any = None
    run: str | None = None
    trained_on: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    dataset_id: str | None = None
    split: str | None = None
    rows: dict[str, Any] = field(default_factory=dict)
    placed: dict[str, Any] = field(default_factory=dict)
    trials: list[dict[str, Any]] = field(default_factory=list)
    mean: dict[str, float | None] = field(default_factory=dict)
    intervals: dict[str, dict[str, Any]] = field(default_factory=dict)
    interval_method: str | None = None
    # the meds-evaluation prediction files beside evaluation.json, one per trial (older records: one file)
    predictions: list[str] | str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: _plain(self)}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> LabelTask | None:
        v = evaluation.get(cls.KEY)
        return _read(cls, v) if v else None


# ----------------------------------------------------------------------------- next-visit diagnoses


@dataclass
class NextVisitScores:
    """One ranking of the next visit's categories on one group of patients
    (:func:`pipelines.eval.next_visit_scores.scores`): by k (``"10"``, ``"20"``, ``"30"``) the recall
    averaged over patients, the recall pooled over true categories and the five quintiles' pooled recall
    (None: no true category there), and the patient-bootstrap intervals (``recall@k``, ``pooled@k``,
    ``q1@20`` ... ``q5@20``; :meth:`pipelines.eval.stats.Interval.as_dict`)."""

    n: int = 0
    recall: dict[str, float | None] = field(default_factory=dict)
    pooled: dict[str, float | None] = field(default_factory=dict)
    quintiles: dict[str, list[float | None]] = field(default_factory=dict)
    intervals: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class NextVisit:
    """Next-visit diagnosis prediction (:func:`pipelines.eval.next_visit.next_visit_eval`): the head on the
    frozen encoder (``model``), the baselines and, on the demo, the ceiling, each on the ``test`` and
    ``rood_unseen`` patients (``scores[scorer][group]``); the quintiles' category counts and pretraining
    count ranges; ``model - <baseline>`` recall@20 differences (paired bootstrap) per group."""

    KEY = "next_visit"
    ks: list[int] = field(default_factory=list)
    categories: int = 0  # categories of the program's codes
    patients: dict[str, dict[str, int]] = field(default_factory=dict)  # per split: kept, left out by reason
    head: dict[str, Any] = field(default_factory=dict)  # outputs, epochs, validation loss, seconds, ...
    quintiles: list[dict[str, int]] = field(default_factory=list)
    scores: dict[str, dict[str, NextVisitScores]] = field(default_factory=dict)
    differences: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    ceiling: bool = False
    ceiling_note: str | None = None  # why there is no ceiling, when there is none

    def score(self, scorer: str, group: str) -> NextVisitScores | None:
        return (self.scores.get(scorer) or {}).get(group)

    def to_dict(self) -> dict[str, Any]:
        d = _plain(self)
        d["scores"] = {s: {g: _plain(v) for g, v in by.items()} for s, by in self.scores.items()}
        return {self.KEY: d}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> NextVisit | None:
        v = evaluation.get(cls.KEY)
        if not v:
            return None
        rec = _read(cls, v)
        rec.scores = {
            s: {g: _read(NextVisitScores, x) for g, x in (by or {}).items()}
            for s, by in (v.get("scores") or {}).items()
        }
        return rec


# ----------------------------------------------------------------------------- chapters probe


@dataclass
class ChaptersProbe:
    """The chapters probe (:func:`pipelines.eval.probe.chapters_probe`): a linear read-out of the frozen
    pretrained model, ``scores[split]`` (``test``, ``rood_unseen``) the chapters metrics with
    ``f1_interval`` (:meth:`pipelines.eval.stats.Interval.as_dict`)."""

    KEY = "chapters_probe"
    features: dict[str, Any] = field(default_factory=dict)
    choice: dict[str, Any] = field(default_factory=dict)
    patients: dict[str, int] = field(default_factory=dict)
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: _plain(self)}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> ChaptersProbe | None:
        v = evaluation.get(cls.KEY)
        return _read(cls, v) if v else None


# ----------------------------------------------------------------------------- cost


@dataclass
class CostRecord:
    """The cost figures of a training step (:func:`pipelines.eval.cost.measure_cost`) and the pretraining
    log's mean throughput (``training_seq_per_s``, None without a log)."""

    KEY = "cost"
    embedding_build_s: float | None = None
    step_s: float | None = None
    build_share: float | None = None
    tokens_per_s: float | None = None
    sequences_per_s: float | None = None
    batch: int | None = None
    peak_memory_mb: float | None = None
    device: str = ""
    training_seq_per_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {self.KEY: _plain(self)}

    @classmethod
    def from_dict(cls, evaluation: dict[str, Any]) -> CostRecord | None:
        v = evaluation.get(cls.KEY)
        return _read(cls, v) if v else None
