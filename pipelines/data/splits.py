"""Splits of a tokenized cohort: the ROOD hold-out, fine-tuning and test sets, pretraining 90/10, and
the code-frequency table (pure numpy, no I/O).

Dimension legend: P patients, U distinct (patient, concept) pairs, N concepts.

ROOD ("really out of distribution", paper 3.2.4): ``k`` codes that occur in few patients (between
``min_patients`` and ``max_patients``) are held out; every patient with any of them forms the ``rood``
split and is removed from pretraining and fine-tuning, so the models never see those codes. Patients
whose distinct codes are mostly (>= half) held-out ones are flagged ``rood_unseen``.

Fine-tuning sets need a visit before the last one (the tasks predict from earlier visits), so only
patients with at least two visits are eligible. Default sizes scale the paper's (13k/2k fine-tuning,
4.5k/500 of them for the disease task, 666 test, of ~190k patients) to the cohort; a split named by
the source (MEDS ``subject_splits``: ``train``, ``tuning``, ``held_out``) is honoured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ontology_compiler.program import SPECIAL_TOKENS

SPLITS = ("pretrain_train", "pretrain_val", "finetune_train", "finetune_val", "test", "rood")
PRETRAIN_TRAIN, PRETRAIN_VAL, FINETUNE_TRAIN, FINETUNE_VAL, TEST, ROOD = range(6)
PAPER = {"patients": 190_000, "finetune_train": 13_000, "finetune_val": 2_000, "test": 666,
         "disease_train": 4_500, "disease_val": 500}  # fmt: skip
N_SPECIAL = len(SPECIAL_TOKENS)  # the program's special tokens are concept ids 0..4 (program format)


@dataclass
class SplitOptions:
    """Sizes and seeds of the splits; ``None`` sizes scale the paper's to the cohort."""

    finetune_train: int | None = None  # mortality fine-tuning train patients
    finetune_val: int | None = None  # fine-tuning validation patients
    test: int | None = None  # test patients (paper: 666)
    disease_train: int | None = None  # subset of finetune_train flagged for the disease task
    disease_val: int | None = None  # subset of finetune_val flagged for the disease task
    pretrain_val_fraction: float = 0.1  # share of the pretraining patients used for validation
    rood_codes: int = 32  # codes held out (ROOD); 0 disables the hold-out
    rood_min_patients: int = 2  # a held-out code occurs in at least this many patients
    rood_max_patients: int | None = None  # ... and at most this many (default max(3, patients // 1000))
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def scaled_sizes(opts: SplitOptions, n_patients: int) -> dict[str, int]:
    """The fine-tuning/test sizes, each ``None`` replaced by the paper's scaled to ``n_patients``."""
    scale = n_patients / PAPER["patients"]
    out = {}
    for k in ("finetune_train", "finetune_val", "disease_train", "disease_val"):
        v = getattr(opts, k)
        out[k] = int(round(PAPER[k] * scale)) if v is None else int(v)
    out["test"] = min(PAPER["test"], int(round(0.05 * n_patients))) if opts.test is None else int(opts.test)
    for k, v in out.items():
        if v < 0:
            raise ValueError(f"split size {k} must be >= 0, got {v}")
    return out


def choose_rood(
    pair_patient: np.ndarray, pair_concept: np.ndarray, n_patients: int, n_concepts: int, opts: SplitOptions
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(held-out concept ids (K,), rood patient mask (P,), rood_unseen mask (P,)).

    Shapes: pair_patient, pair_concept (U,) distinct pairs.
    """
    none = np.zeros(n_patients, dtype=bool)
    if opts.rood_codes <= 0 or len(pair_concept) == 0:
        return np.zeros(0, np.int32), none, none.copy()
    per_code = np.bincount(pair_concept, minlength=n_concepts)  # (N,)
    hi = opts.rood_max_patients if opts.rood_max_patients is not None else max(3, n_patients // 1000)
    cand = np.flatnonzero((per_code >= opts.rood_min_patients) & (per_code <= hi))
    cand = cand[cand >= N_SPECIAL]
    rng = np.random.default_rng([opts.seed, 32])
    held = np.sort(rng.choice(cand, size=min(opts.rood_codes, len(cand)), replace=False)).astype(np.int32)
    is_held = np.zeros(n_concepts, dtype=bool)
    is_held[held] = True
    hit = is_held[pair_concept]  # (U,)
    n_held = np.bincount(pair_patient, weights=hit, minlength=n_patients)
    n_all = np.bincount(pair_patient, minlength=n_patients)
    rood = n_held > 0
    return held, rood, rood & (n_held * 2 >= n_all)


def assign_splits(
    n_visits: np.ndarray, rood: np.ndarray, given: np.ndarray | None, opts: SplitOptions
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(split code per patient (P,) int8 indexing SPLITS, disease-task flag (P,), the sizes used)."""
    n = len(n_visits)
    rng = np.random.default_rng([opts.seed, 90])
    split = np.full(n, -1, dtype=np.int8)
    split[rood] = ROOD
    eligible = (n_visits >= 2) & ~rood
    sizes = scaled_sizes(opts, int((~rood).sum()))
    order = rng.permutation(n)
    given = np.full(n, None, dtype=object) if given is None else given
    held_out = (given == "held_out") & ~rood
    split[held_out] = TEST
    disease = np.zeros(n, dtype=bool)
    disease[held_out] = True
    for code, pool_name, size_key, dis_key in (
        (TEST, None, "test", None),
        (FINETUNE_VAL, "tuning", "finetune_val", "disease_val"),
        (FINETUNE_TRAIN, "train", "finetune_train", "disease_train"),
    ):
        if code == TEST and held_out.any():
            continue
        pool = eligible & (split < 0)
        if pool_name is not None and (given == pool_name).any():
            pool &= given == pool_name
        picked = order[pool[order]][: sizes[size_key]]
        split[picked] = code
        disease[picked[: sizes[dis_key]] if dis_key else picked] = True
    rest = order[split[order] < 0]
    if (given != None).any():  # noqa: E711 (elementwise on an object array)
        val = rest[given[rest] == "tuning"]
        rest_train = rest[given[rest] != "tuning"]
        split[val], split[rest_train] = PRETRAIN_VAL, PRETRAIN_TRAIN
    else:
        n_val = int(round(opts.pretrain_val_fraction * len(rest)))
        split[rest[:n_val]], split[rest[n_val:]] = PRETRAIN_VAL, PRETRAIN_TRAIN
    return split, disease, sizes


def code_counts(
    offsets: np.ndarray, input_ids: np.ndarray, split: np.ndarray, n_concepts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count over pretrain train+val, count over pretrain train only, log frequency), each (N,).

    ``log_frequency`` = ln(count / total code tokens of the pretraining split), special tokens excluded;
    a code never seen gets ln(0.5 / total) so that it sorts below every seen code and stays finite.
    """
    lengths = np.diff(offsets)
    tok_split = np.repeat(split, lengths)  # (T,)
    pre = (tok_split == PRETRAIN_TRAIN) | (tok_split == PRETRAIN_VAL)
    count = np.bincount(input_ids[pre], minlength=n_concepts).astype(np.int64)
    count_train = np.bincount(input_ids[tok_split == PRETRAIN_TRAIN], minlength=n_concepts).astype(np.int64)
    count[:N_SPECIAL] = 0
    count_train[:N_SPECIAL] = 0
    total = max(int(count.sum()), 1)
    return count, count_train, np.log(np.maximum(count, 0.5) / total)
