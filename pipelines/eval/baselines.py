"""Baselines and ceilings, computed on the patients and masked positions the models are scored on:
:func:`compute_baselines` (``hrrbert baselines``; :func:`~pipelines.eval.experiment.run_experiment` runs
it once per experiment into ``<experiment>/baselines/``).

- MLM (:mod:`pipelines.eval.baselines_mlm`): most-frequent code, copy-from-history and patient
  co-occurrence on the masked positions of the pretraining validation.
- Tasks, on what the fine-tuned heads see (the codes before the last visit) and are scored on (``test``;
  chapters also ``rood`` and ``rood_unseen``; mortality also the transfer dataset's ``test`` as
  ``transfer``):

  * ``constant``: the ``finetune_train`` prior of each label as every patient's probability;
  * ``logistic_regression``: one-vs-rest scikit-learn logistic regression on the bag of codes (a code
    present or not), trained on ``finetune_train`` (the chapters task's disease subset, as fine-tuning);
    ``C`` and ``class_weight`` chosen by macro AUROC on ``finetune_val``;
  * ``history_chapters``: the same regression on what the history holds of each chapter (the program's
    ``chapter`` of every code, ICD-10-CM and ICD-9-CM apart: :func:`history_chapter_features`): it reads a
    code it never trained on through the chapter its code string gives, which is public, so it is the
    plain rival of a composed embedding on codes no model saw;
  * ``ceiling``: the generator's true probabilities (``<ground_truth>/task_probabilities.parquet``), an
    oracle on the latent state, so an upper bound no model of the codes can reach.

  With the truth's condition catalog and diagnosis rows, the chapters task also gets its **history
  bound** (:mod:`pipelines.eval.history_bound`, ``history_bound`` in the record, no prediction rows): the
  history's chapters regression refitted with each code's true chronic share added, which shows how far a
  reader of the codes could get above the chapter counts.

  Every model's per-label thresholds are those maximising F1 on ``finetune_val``
  (:func:`pipelines.train.metrics.f1_thresholds`, the rule of the fine-tuned heads).

``<out_dir>/`` holds ``baselines.json`` (written last: its presence marks a finished folder, which is
read back) and ``predictions.parquet`` (:mod:`pipelines.train.predictions`; trial 0)::

    {"kind": "baselines", "mlm": {"split", "n_masked", "top1": {baseline: acc}, "top10", "top100",
     "frequency_bins"}, "tasks": {task: {split: {model: metrics}}}, "logistic_regression": {task: choice},
     "history_chapters": {task: choice} (when the program gives chapters),
     "history_bound": {"chapters": {"choice", "splits": {split: {"counts", "with_truth", "difference"}}}}
     (with the truth's catalog),
     "notes": [...], "inputs": {...}, "timings_s": {...}}

Dimension legend: P patients, N concepts, L labels.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from pipelines.data.readers import HOSPITALS
from pipelines.data.sequences import Sequences, TokenizedDataset
from pipelines.data.tasks import TASK_LABELS, TASKS
from pipelines.errors import InputFileError, PipelineError
from pipelines.train.predictions import PREDICTIONS_FILE, Predictions, read_predictions, write_predictions
from pipelines.train.runtime import now_iso, versions, write_json

from .baselines_mlm import MLMMasking, code_matrix, mlm_baselines
from .history_bound import CATALOG_FILE, CODES_FILE, chronic_shares, truth_features

log = logging.getLogger(__name__)

BASELINES_FILE = "baselines.json"
MODELS = ("constant", "logistic_regression", "history_chapters", "ceiling")
CHAPTERS_PER_VOCABULARY = 23  # chapter numbers 1-22 of a vocabulary's classification (0: none)
# feature slots of history_chapters: 0 (no chapter), ICD-10-CM chapters 1-22, ICD-9-CM chapters 24-45 (each
# vocabulary by the chapter the program gives it; the regression learns how the two line up)
N_CHAPTER_SLOTS = 2 * CHAPTERS_PER_VOCABULARY
GROUND_TRUTH_FILE = "task_probabilities.parquet"
GROUND_TRUTH_COLUMNS = ("hospital", "subject_id", "mortality", "chapters")
LR_GRID = tuple((cw, c) for cw in (None, "balanced") for c in (1.0, 0.1, 0.01))  # (class_weight, C)
NOTES = [
    "MLM baselines see the codes not chosen for masking and are scored on the positions the models' "
    "validation MLM accuracy masks (same split, batches and masking seed as pretraining seed `seed`; "
    "other pretraining seeds mask other positions of the same split).",
    "Task baselines read the codes before each patient's last visit, as the fine-tuned heads do; "
    "thresholds maximise F1 per label on finetune_val for every model.",
    "constant: the finetune_train prior for every patient (its tuned thresholds predict every label "
    "positive or none).",
    "logistic_regression: bag of codes, one-vs-rest, C and class_weight chosen by finetune_val macro AUROC.",
    "history_chapters: the same regression on the history's chapters (per ICD-10-CM or ICD-9-CM chapter: "
    "distinct codes, codes written at two visits or more, codes of the latest visit; and the number of "
    "visits); a code's chapter comes from its code string, so it reads codes no model trained on.",
    "ceiling: the generator's true probabilities given its latent state (an oracle, not a model of the "
    "codes): an upper bound.",
]


@dataclass
class _Split:
    """One task split as the heads see it: subject ids ``(P,)``, bag of codes ``(P, N)``, labels
    ``(P, L)``."""

    name: str
    subject_id: np.ndarray
    x: Any  # scipy.sparse csr (P, N), 1 where the code occurs
    y: np.ndarray
    hospital: str | None
    chapters: Any = None  # scipy.sparse csr (P, 3 * N_CHAPTER_SLOTS + 1): history_chapter_features
    truth: np.ndarray | None = None  # (P, 2 * N_CHAPTER_SLOTS): history_bound.truth_features (demo only)


def chapter_slots(vocabularies: list[str], chapters: list[int | None]) -> np.ndarray:
    """The feature slot of every concept ``(N,)``: its ICD-10-CM chapter (1-22), 23 + its ICD-9-CM chapter,
    or 0 (another vocabulary, no chapter, or a number outside 1-22)."""
    ch = np.array([c or 0 for c in chapters], np.int64)
    ch[(ch < 1) | (ch >= CHAPTERS_PER_VOCABULARY)] = 0
    voc = np.array(vocabularies, dtype=object)
    return np.where(
        voc == "ICD10CM", ch, np.where((voc == "ICD9CM") & (ch > 0), CHAPTERS_PER_VOCABULARY + ch, 0)
    )


def history_chapter_features(seqs: Sequences, special: np.ndarray, chapters: np.ndarray) -> np.ndarray:
    """What a history holds of each chapter, ``(P, 3 * S + 1)``: per chapter slot h (:func:`chapter_slots`)
    ``log1p`` of the distinct codes of slot h, of those written at two visits or more, and of those of the
    history's latest visit; then ``log1p`` of the number of visits. Shapes: ``special`` ``(N,)`` bool,
    ``chapters`` ``(N,)`` int slot per concept in ``[0, S)``, S = :data:`N_CHAPTER_SLOTS`."""
    ids, seg = seqs.input_ids.numpy(), seqs.segment_ids.numpy()  # (P, T)
    keep = seqs.attention_mask.numpy().astype(bool) & ~special[ids]
    r, c = np.nonzero(keep)
    code, visit = ids[r, c].astype(np.int64), seg[r, c].astype(np.int64)
    p, h = len(seqs), N_CHAPTER_SLOTS
    out = np.zeros((p, 3 * h + 1))
    if not len(r):
        return out
    last = np.full(p, -1, np.int64)
    np.maximum.at(last, r, visit)
    rcv = np.unique(np.stack([r, code, visit], 1), axis=0)  # distinct (patient, code, visit)
    rc, first, n_visits = np.unique(rcv[:, :2], axis=0, return_index=True, return_counts=True)
    in_last = np.zeros(len(rc), bool)
    pair = np.searchsorted(first, np.arange(len(rcv)), side="right") - 1  # rcv row -> its (patient, code)
    in_last[pair[rcv[:, 2] == last[rcv[:, 0]]]] = True
    ch = chapters[rc[:, 1]]
    np.add.at(out, (rc[:, 0], ch), 1.0)
    np.add.at(out, (rc[:, 0], h + ch), (n_visits >= 2).astype(float))
    np.add.at(out, (rc[:, 0], 2 * h + ch), in_last.astype(float))
    visits = np.unique(np.stack([r, visit], 1), axis=0)
    out[:, -1] = np.bincount(visits[:, 0], minlength=p)
    return np.log1p(out)


def compute_baselines(
    dataset: str | Path,
    program: str | Path,
    out_dir: str | Path,
    *,
    ground_truth: str | Path | None = None,
    transfer_dataset: str | Path | None = None,
    tasks: tuple[str, ...] = TASKS,
    seed: int = 0,
    mlm: MLMMasking | None = None,
) -> dict[str, Any]:
    """Write (or read back) ``<out_dir>/baselines.json`` and ``predictions.parquet``; returns the record.

    ``seed``: the pretraining seed whose validation masking the MLM baselines reproduce (and the
    logistic regressions' random state); ``mlm``: the pretraining's masking options (default: the
    PretrainConfig and ``tiny`` preset defaults; an experiment passes :meth:`MLMMasking.of_experiment`).
    """
    from hrr_kernel import load_program
    from pipelines.train.mlm import tokens_of

    out = Path(out_dir)
    masking = mlm or MLMMasking()
    bad = [t for t in tasks if t not in TASK_LABELS]
    if bad:
        raise ValueError(f"unknown task(s) {bad}; choose from {TASKS}")
    prog = load_program(program, device="cpu")
    pad = prog.special_id("[PAD]")
    ds = TokenizedDataset(dataset, prog.program_id, prog.n_concepts, pad)
    tds = (
        TokenizedDataset(transfer_dataset, prog.program_id, prog.n_concepts, pad)
        if transfer_dataset
        else None
    )
    inputs = {
        "dataset_id": ds.dataset_id,
        "transfer_dataset_id": tds.dataset_id if tds else None,
        "program_id": prog.program_id,
        "ground_truth": str(ground_truth) if ground_truth else None,
        "tasks": list(tasks),
        "seed": seed,
        "mlm": asdict(masking),
    }
    if (out / BASELINES_FILE).is_file() and (out / PREDICTIONS_FILE).is_file():
        return _read_back(out / BASELINES_FILE, inputs)
    tok = tokens_of(prog)
    special = np.zeros(prog.n_concepts, bool)
    special[tok.special.numpy()] = True
    chapters = None
    if prog.concept_chapters and prog.concept_vocabularies:
        chapters = chapter_slots(prog.concept_vocabularies, prog.concept_chapters)
    record: dict[str, Any] = {"kind": "baselines", "inputs": inputs, "versions": versions(), "timings_s": {}}
    t = time.perf_counter()
    kw = dict(max_len=masking.max_len, max_segments=masking.max_segments)
    val = ds.sequences(masking.split, **kw)
    if len(val):
        record["mlm"] = mlm_baselines(
            val,
            ds.sequences("pretrain_train", **kw),
            tok,
            special,
            ds.log_frequency().numpy(),
            seed=seed,
            masking=masking,
        )
    else:
        log.warning("%s: split %r is empty; no MLM baselines", ds.patients_path, masking.split)
    record["timings_s"]["mlm"] = time.perf_counter() - t
    gt = read_task_probabilities(ground_truth) if ground_truth else None
    shares = None
    if ground_truth and chapters is not None:
        shares = chronic_shares(ground_truth, prog.concept_codes, prog.concept_vocabularies)
    blocks: list[Predictions] = []
    record["tasks"], record["logistic_regression"] = {}, {}
    notes = list(NOTES) + ([] if gt is not None else ["no ground truth given: no ceiling."])
    if gt is not None and shares is None:
        notes.append(
            f"no {CATALOG_FILE} or {CODES_FILE} in the ground truth (or no chapters): no history bound."
        )
    for task in tasks:
        t = time.perf_counter()
        if not (ds.rows("finetune_train", task).size and ds.rows("finetune_val", task).size):
            log.warning(
                "%s: no finetune_train or finetune_val rows for task %r; no baselines of it",
                ds.patients_path,
                task,
            )
            notes.append(f"{task}: no finetune_train or finetune_val patients, no task baselines.")
            continue
        scored, choices, task_blocks = task_baselines(
            ds, tds, task, special, gt, seed=seed, masking=masking, chapters=chapters, shares=shares
        )
        record["tasks"][task] = scored
        record["logistic_regression"][task] = choices["logistic_regression"]
        for key in ("history_chapters", "history_bound"):
            if key in choices:
                record.setdefault(key, {})[task] = choices[key]
        blocks += task_blocks
        record["timings_s"][task] = time.perf_counter() - t
    record["notes"] = notes
    record["created_at"] = now_iso()
    write_predictions(out / PREDICTIONS_FILE, blocks)
    write_json(out / BASELINES_FILE, record)  # last: marks the folder finished
    return json.loads((out / BASELINES_FILE).read_text(encoding="utf-8"))


def _read_back(path: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PipelineError(
            f"{path}: not valid JSON ({e}); remove the folder to compute the baselines again"
        ) from e
    saved = record.get("inputs", {})
    now = json.loads(json.dumps(inputs))
    diffs = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    if diffs:
        lines = "; ".join(f"{k}: folder has {saved.get(k)!r}, now {now.get(k)!r}" for k in diffs)
        raise PipelineError(
            f"{path}: baselines of other inputs ({lines}); remove the folder or choose another"
        )
    return record


def read_task_probabilities(ground_truth: str | Path) -> dict[str, dict[int, np.ndarray]]:
    """``<ground_truth>/task_probabilities.parquet`` as hospital -> task -> (subject_id -> probabilities)."""
    p = Path(ground_truth) / GROUND_TRUTH_FILE
    if not p.is_file():
        raise InputFileError(p, "missing; the ceiling needs the cohort's true task probabilities")
    t = pq.read_table(p)
    missing = [c for c in GROUND_TRUTH_COLUMNS if c not in t.column_names]
    if missing:
        raise InputFileError(p, f"missing column(s) {missing}", expected=", ".join(GROUND_TRUTH_COLUMNS))
    hosp = np.asarray(t.column("hospital").to_pylist(), dtype=object)
    sid = t.column("subject_id").to_numpy().astype(np.int64)
    mort = np.asarray(t.column("mortality").to_numpy(zero_copy_only=False), np.float64)[:, None]
    chap_col = t.column("chapters").combine_chunks()
    n_chap = TASK_LABELS["chapters"][1]
    lens = np.diff(chap_col.offsets.to_numpy())
    if len(lens) and (lens != n_chap).any():
        raise InputFileError(
            p,
            "column 'chapters' has lists of another length",
            expected=str(n_chap),
            found=str(sorted(set(lens.tolist()))[:5]),
        )
    chap = np.asarray(chap_col.flatten().to_numpy(zero_copy_only=False), np.float64).reshape(-1, n_chap)
    out: dict[str, dict[str, Any]] = {}
    for h in sorted(set(hosp.tolist())):
        sel = hosp == h
        out[h] = {"mortality": (sid[sel], mort[sel]), "chapters": (sid[sel], chap[sel]), "path": p}
    return out


def _hospital(ds: TokenizedDataset) -> str | None:
    return HOSPITALS.get(str(ds.manifest.get("source", {}).get("reader", "")))  # the readers' registry


def _ceiling(gt: dict, split: _Split, task: str) -> np.ndarray:
    """True probabilities ``(P, L)`` of the split's patients, aligned by subject id."""
    where = next(iter(gt.values()))["path"] if gt else GROUND_TRUTH_FILE
    if split.hospital is None:
        raise InputFileError(
            where,
            f"cannot tell whose patients split {split.name!r} holds: its dataset's "
            "manifest.json names no source.reader",
            expected=" or ".join(sorted(HOSPITALS)),
        )
    if split.hospital not in gt:
        raise InputFileError(
            where,
            f"no rows of hospital {split.hospital!r} (split {split.name!r})",
            expected=" or ".join(sorted(set(HOSPITALS.values()))),
            found=", ".join(sorted(gt)),
        )
    sid, probs = gt[split.hospital][task]
    order = np.argsort(sid, kind="stable")
    sorted_sid = sid[order]
    pos = np.minimum(np.searchsorted(sorted_sid, split.subject_id), max(len(sid) - 1, 0))
    found = sorted_sid[pos] == split.subject_id if len(sid) else np.zeros(len(pos), bool)
    if not np.all(found):
        miss = split.subject_id[~found]
        raise InputFileError(
            where,
            f"{len(miss)} patient(s) of split {split.name!r} ({split.hospital}) missing, "
            f"e.g. subject_id {miss[:3].tolist()}",
        )
    return probs[order][pos]


def _task_split(
    ds: TokenizedDataset,
    split: str,
    task: str,
    special: np.ndarray,
    masking: MLMMasking,
    name: str | None = None,
    chapters: np.ndarray | None = None,
    shares: np.ndarray | None = None,
) -> _Split | None:
    if not ds.rows(split, task).size:
        return None
    seqs = ds.sequences(
        split, max_len=masking.max_len, max_segments=masking.max_segments, task=task, before_last_visit=True
    )
    return _as_split(seqs, name or split, special, _hospital(ds), chapters, shares)


def _as_split(
    seqs: Sequences,
    name: str,
    special: np.ndarray,
    hospital: str | None,
    chapters: np.ndarray | None = None,
    shares: np.ndarray | None = None,
) -> _Split:
    """``shares`` (the truth's chronic share per concept) adds the history bound's features too."""
    import scipy.sparse as sp

    x = code_matrix(seqs, special)
    x.data[:] = 1.0
    hc = None if chapters is None else sp.csr_matrix(history_chapter_features(seqs, special, chapters))
    truth = None
    if chapters is not None and shares is not None:
        truth = truth_features(seqs, special, chapters, shares, N_CHAPTER_SLOTS)
    return _Split(name, seqs.subject_id.numpy(), x, seqs.labels.numpy().astype(np.int8), hospital, hc, truth)


def _unseen(ds: TokenizedDataset, split: _Split) -> np.ndarray:
    if "rood_unseen" not in ds.table.column_names:
        return np.zeros(len(split.subject_id), bool)
    flag = np.asarray(ds.table.column("rood_unseen").fill_null(False).to_numpy(zero_copy_only=False), bool)
    return np.isin(split.subject_id, ds.table.column("subject_id").to_numpy()[flag])


def scored_splits(
    ds: TokenizedDataset,
    tds: TokenizedDataset | None,
    task: str,
    special: np.ndarray,
    masking: MLMMasking,
    chapters: np.ndarray | None = None,
    shares: np.ndarray | None = None,
) -> list[_Split]:
    """The splits the models of ``task`` are scored on, as the heads see them (with the history's chapter
    features when ``chapters``, the chapter of every concept, is given; the history bound's with
    ``shares``)."""
    out = [_task_split(ds, "test", task, special, masking, chapters=chapters, shares=shares)]
    if task == "chapters":
        rood = _task_split(ds, "rood", task, special, masking, chapters=chapters, shares=shares)
        if rood is not None:
            keep = _unseen(ds, rood)
            hc = None if rood.chapters is None else rood.chapters[keep]
            truth = None if rood.truth is None else rood.truth[keep]
            unseen = _Split(
                "rood_unseen", rood.subject_id[keep], rood.x[keep], rood.y[keep], rood.hospital, hc, truth
            )
            out += [rood, unseen]
    if task == "mortality" and tds is not None:
        out.append(_task_split(tds, "test", task, special, masking, name="transfer", chapters=chapters))
    return [s for s in out if s is not None and len(s.subject_id)]


def task_baselines(
    ds: TokenizedDataset,
    tds: TokenizedDataset | None,
    task: str,
    special: np.ndarray,
    gt: dict | None,
    *,
    seed: int,
    masking: MLMMasking,
    chapters: np.ndarray | None = None,
    shares: np.ndarray | None = None,
) -> tuple[dict, dict, list[Predictions]]:
    """Metrics per split and model, the logistic regressions' choices (``{"logistic_regression": ...,
    "history_chapters": ...}``; the second only with ``chapters``, the chapter of every concept ``(N,)``;
    for chapters with ``shares`` too, ``history_bound``: :func:`_history_bound`), and the prediction
    blocks."""
    from pipelines.train.metrics import f1_thresholds

    shares = shares if task == "chapters" else None
    train = _task_split(ds, "finetune_train", task, special, masking, chapters=chapters, shares=shares)
    val = _task_split(ds, "finetune_val", task, special, masking, chapters=chapters, shares=shares)
    if train is None or val is None:
        raise PipelineError(
            f"{ds.patients_path}: splits finetune_train and finetune_val need rows for task {task!r}"
        )
    prior = train.y.mean(0)  # (L,)
    lr, choice = fit_logistic(train, val, seed=seed)
    choices = {"logistic_regression": choice}
    models: dict[str, Any] = {
        "constant": lambda s: np.tile(prior, (len(s.subject_id), 1)),
        "logistic_regression": lambda s: lr.predict(s.x),
    }
    if chapters is not None:
        as_x = lambda s: _Split(s.name, s.subject_id, s.chapters, s.y, s.hospital)  # noqa: E731
        hc, choices["history_chapters"] = fit_logistic(as_x(train), as_x(val), seed=seed)
        models["history_chapters"] = lambda s: hc.predict(s.chapters)
    if gt is not None:
        models["ceiling"] = lambda s: _ceiling(gt, s, task)
    scored: dict[str, dict[str, Any]] = {}
    blocks = []
    splits = scored_splits(ds, tds, task, special, masking, chapters, shares)
    for name, predict in models.items():
        thr = f1_thresholds(val.y, predict(val).astype(np.float32)).astype(np.float32)  # (L,)
        for s in splits:
            b = Predictions(name, task, s.name, 0, s.subject_id, s.y, predict(s).astype(np.float32), thr)
            blocks.append(b)
            scored.setdefault(s.name, {})[name] = b.scores()
    if train.truth is not None and "history_chapters" in models:
        choices["history_bound"] = _history_bound(train, val, splits, task, scored, seed)
    return scored, choices, blocks


def _history_bound(
    train: _Split, val: _Split, splits: list[_Split], task: str, scored: dict[str, dict[str, Any]], seed: int
) -> dict:
    """The history bound (:mod:`pipelines.eval.history_bound`): the history's chapters regression refitted
    on the chapter counts plus the truth's chronic shares, chosen the same way, against the chapter-counts
    model's own scores (``scored[split]["history_chapters"]``), per scored split: macro AUROC and F1 of
    each (thresholds on ``finetune_val``) and the differences."""
    from pipelines.train.metrics import f1_thresholds

    def with_truth(s: _Split) -> _Split:
        return _Split(s.name, s.subject_id, np.hstack([s.chapters.toarray(), s.truth]), s.y, s.hospital)

    model, choice = fit_logistic(with_truth(train), with_truth(val), seed=seed)
    thr = f1_thresholds(val.y, model.predict(with_truth(val).x).astype(np.float32)).astype(np.float32)
    out: dict[str, Any] = {"choice": choice, "splits": {}}
    for s in splits:
        p = model.predict(with_truth(s).x).astype(np.float32)
        m = Predictions("with_truth", task, s.name, 0, s.subject_id, s.y, p, thr).scores()
        counts = scored[s.name]["history_chapters"]
        row = {k: {"auroc": v["auroc"], "f1": v["f1"]} for k, v in (("counts", counts), ("with_truth", m))}
        row["difference"] = {k: row["with_truth"][k] - row["counts"][k] for k in ("auroc", "f1")}
        out["splits"][s.name] = row
    return out


def _fit_label(x, y: np.ndarray, class_weight, c: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    if y.min() == y.max():  # one class in training: its share is the probability
        return float(y[0])
    m = LogisticRegression(
        C=c, class_weight=class_weight, solver="liblinear", random_state=seed, max_iter=200
    )
    return m.fit(x, y)


@dataclass
class Logistic:
    """One fitted regression (or a constant) per label over the codes seen in training (the other codes'
    weights are 0 under the L2 penalty, so leaving them out changes nothing but the time)."""

    columns: np.ndarray  # (K,) concept ids with a weight
    models: list  # (L,) LogisticRegression or float

    def predict(self, x) -> np.ndarray:
        """Probabilities ``(P, L)`` on the bag of codes ``x (P, N)``."""
        x = x[:, self.columns]  # (P, K)
        cols = [
            np.full(x.shape[0], m) if isinstance(m, float) else m.predict_proba(x)[:, 1] for m in self.models
        ]
        return np.stack(cols, 1)


def fit_logistic(
    train: _Split,
    val: _Split,
    *,
    seed: int,
    grid: tuple[tuple[str | None, float], ...] = LR_GRID,
) -> tuple[Logistic, dict[str, Any]]:
    """One logistic regression per label for each (class_weight, C) of ``grid`` (:data:`LR_GRID`); the
    setting with the best ``val`` macro AUROC (the first on ties or when undefined) is kept."""
    # the columns with a non-zero entry (codes seen in training; every column of dense standardised features)
    nonzero = train.x.getnnz(axis=0) if hasattr(train.x, "getnnz") else np.count_nonzero(train.x, axis=0)
    columns = np.flatnonzero(np.asarray(nonzero).ravel() > 0)
    x = train.x[:, columns]

    def fit(cw: str | None, c: float) -> Logistic:
        return Logistic(columns, [_fit_label(x, train.y[:, j], cw, c, seed) for j in range(train.y.shape[1])])

    lr, choice = select_by_val_auroc(grid, fit, val.x, val.y)
    return lr, {**choice, "features": len(columns)}


def select_by_val_auroc(grid, fit, val_x, val_y: np.ndarray) -> tuple[Any, dict[str, Any]]:
    """``fit(class_weight, C)`` for each setting of ``grid``; the model with the best macro AUROC on
    (``val_x``, ``val_y``) (labels whose AUROC is undefined left out; the first on ties) and the choice:
    ``class_weight``, ``C``, ``val_auroc``, ``grid``."""
    from pipelines.train.metrics import auroc

    best: tuple[float, Any, dict] | None = None
    for cw, c in grid:
        model = fit(cw, c)
        p = model.predict(val_x)
        vals = [auroc(val_y[:, j], p[:, j]) for j in range(val_y.shape[1])]
        vals = [v for v in vals if not math.isnan(v)]
        score = float(np.mean(vals)) if vals else -math.inf
        if best is None or score > best[0]:
            best = (score, model, {"class_weight": cw or "none", "C": c, "val_auroc": score})
    assert best is not None
    return best[1], {**best[2], "grid": [[cw or "none", c] for cw, c in grid]}


def read_baselines(out_dir: str | Path) -> tuple[dict[str, Any], list[Predictions]]:
    """``baselines.json`` and the prediction blocks of a finished baselines folder."""
    p = Path(out_dir) / BASELINES_FILE
    if not p.is_file():
        raise PipelineError(f"{p}: missing; the baselines were not computed (hrrbert baselines)")
    return json.loads(p.read_text(encoding="utf-8")), read_predictions(Path(out_dir) / PREDICTIONS_FILE)


def summary_lines(record: dict[str, Any], out_dir: str | Path) -> list[str]:
    """A short text summary of a ``baselines.json`` record (what ``hrrbert baselines`` prints)."""
    lines = []
    m = record.get("mlm")
    if m:
        accs = ", ".join(f"{b} {100 * v:.1f}" for b, v in m["top1"].items())
        lines.append(f"mlm       {m['split']}, {m['n_masked']} masked codes, top-1 % {accs}")
    for task, splits in record.get("tasks", {}).items():
        key = "auroc" if task == "mortality" else "f1"
        for split, models in splits.items():
            vals = ", ".join(
                f"{k} {v[key]:.3f}" if v.get(key) is not None else f"{k} -" for k, v in models.items()
            )
            lines.append(f"{task:<9} {split} {key}: {vals}")
    lines.append(f"written   {Path(out_dir) / BASELINES_FILE}")
    return lines
