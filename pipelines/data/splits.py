"""Splits of a tokenized cohort: the ROOD hold-out, fine-tuning and test sets, pretraining 90/10, and
the code-frequency table (pure numpy, no I/O).

Dimension legend: P patients, U distinct (patient, concept) pairs, N concepts.

ROOD ("really out of distribution", paper 3.2.4): codes are held out and every patient with any of them
forms the ``rood`` split, removed from pretraining and fine-tuning, so the models never see those codes.
Patients whose distinct codes are at least half held-out ones are flagged ``rood_unseen``. The held-out
codes are either a given list (:func:`rood_masks`, the ``hold_out`` file of ``prepare``) or chosen by
:func:`choose_rood`: ``rood_codes`` random codes that occur in few patients (between ``rood_min_patients``
and ``rood_max_patients``), then, until ``rood_unseen_patients`` patients are ``rood_unseen``, all the
codes of patients whose codes are all rare (patients with a visit before the last one first, then those
whose codes reach the fewest other patients), so that the unseen-code evaluation is never empty when the
cohort allows it.

Fine-tuning sets need a visit before the last one (the tasks predict from earlier visits), so only
patients with at least two visits are eligible. Default sizes scale the paper's (13k/2k fine-tuning,
4.5k/500 of them for the disease task, 666 test, of ~190k patients) to the cohort; a split named by
the source (MEDS ``subject_splits``: ``train``, ``tuning``, ``held_out``) is honoured.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

import numpy as np

from ontology_compiler.api import SPECIAL_TOKENS

SPLITS = ("pretrain_train", "pretrain_val", "finetune_train", "finetune_val", "test", "rood")
PRETRAIN_TRAIN, PRETRAIN_VAL, FINETUNE_TRAIN, FINETUNE_VAL, TEST, ROOD = range(6)
PAPER = {"patients": 190_000, "finetune_train": 13_000, "finetune_val": 2_000, "test": 666,
         "disease_train": 4_500, "disease_val": 500}  # fmt: skip
log = logging.getLogger(__name__)

N_SPECIAL = len(SPECIAL_TOKENS)  # the program's special tokens are concept ids 0..4 (program format)


@dataclass
class SplitOptions:
    """Sizes and seeds of the splits; ``None`` sizes scale the paper's to the cohort."""

    finetune_train: int | None = field(
        default=None, metadata={"help": "mortality fine-tuning train patients"}
    )
    finetune_val: int | None = field(default=None, metadata={"help": "fine-tuning validation patients"})
    test: int | None = field(default=None, metadata={"help": "test patients (paper: 666)"})
    disease_train: int | None = field(
        default=None, metadata={"help": "subset of finetune_train flagged for the disease task"}
    )
    disease_val: int | None = field(
        default=None, metadata={"help": "subset of finetune_val flagged for the disease task"}
    )
    pretrain_val_fraction: float = field(
        default=0.1, metadata={"help": "share of the pretraining patients used for validation"}
    )
    rood_codes: int = field(default=32, metadata={"help": "codes held out (ROOD); 0 disables the hold-out"})
    rood_min_patients: int = field(
        default=2, metadata={"help": "a held-out code occurs in at least this many patients"}
    )
    rood_max_patients: int | None = field(
        default=None, metadata={"help": "... and at most this many (default max(3, patients // 1000))"}
    )
    rood_unseen_patients: int | None = field(
        default=None, metadata={"help": "rood_unseen patients to reach (default 100 per 190k, >= 1)"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the hold-out and the split draws"})

    def __post_init__(self) -> None:
        """Each value in its range; the message names the option (``--pretrain-val-fraction``, ...)."""

        def bad(name: str, expected: str) -> ValueError:
            option = "--" + name.replace("_", "-")
            return ValueError(f"{option} must be {expected}, got {getattr(self, name)!r}")

        for name in ("finetune_train", "finetune_val", "test", "disease_train", "disease_val"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise bad(name, "a count >= 0")
        if not 0.0 <= self.pretrain_val_fraction < 1.0:
            raise bad("pretrain_val_fraction", "a fraction in [0, 1)")
        if self.rood_codes < 0:
            raise bad("rood_codes", "a count >= 0")
        if self.rood_min_patients < 1:
            raise bad("rood_min_patients", "a count >= 1")
        if self.rood_max_patients is not None and self.rood_max_patients < self.rood_min_patients:
            raise bad("rood_max_patients", f"at least --rood-min-patients ({self.rood_min_patients})")
        if self.rood_unseen_patients is not None and self.rood_unseen_patients < 0:
            raise bad("rood_unseen_patients", "a count >= 0")

    def to_dict(self) -> dict:
        return asdict(self)


def scaled_sizes(opts: SplitOptions, n_patients: int) -> dict[str, int]:
    """The requested fine-tuning/test sizes, each ``None`` replaced by the paper's scaled to ``n_patients``.

    A size may exceed the patients eligible for it: :func:`assign_splits` takes what there is and returns
    the sizes it used.
    """
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


def unseen_target(opts: SplitOptions, n_patients: int) -> int:
    """``rood_unseen`` patients :func:`choose_rood` aims at: the option, or 100 per 190k patients (the
    paper's cohort size), at least 1."""
    if opts.rood_unseen_patients is not None:
        if opts.rood_unseen_patients < 0:
            raise ValueError(f"rood_unseen_patients must be >= 0, got {opts.rood_unseen_patients}")
        return int(opts.rood_unseen_patients)
    return max(1, int(round(100 * n_patients / PAPER["patients"])))


def rood_masks(
    pair_patient: np.ndarray, pair_concept: np.ndarray, n_patients: int, held: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(rood mask (P,), rood_unseen mask (P,)) for the held-out concept ids ``held`` (K,).

    rood: the patient has a held-out code; rood_unseen: at least half of its distinct codes are held out.
    Shapes: pair_patient, pair_concept (U,) distinct pairs.
    """
    n_concepts = int(max(pair_concept.max(initial=-1), held.max(initial=-1))) + 1
    is_held = np.zeros(n_concepts, dtype=bool)
    is_held[held] = True
    n_held = np.bincount(pair_patient, weights=is_held[pair_concept], minlength=n_patients)
    n_all = np.bincount(pair_patient, minlength=n_patients)
    rood = n_held > 0
    return rood, rood & (n_held * 2 >= n_all)


def choose_rood(
    pair_patient: np.ndarray,
    pair_concept: np.ndarray,
    n_patients: int,
    n_concepts: int,
    opts: SplitOptions,
    n_visits: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(held-out concept ids (K,), rood patient mask (P,), rood_unseen mask (P,)).

    ``rood_codes`` random rare codes, then the codes of whole patients until :func:`unseen_target`
    patients are ``rood_unseen`` (see the module docstring); ``rood_codes <= 0`` holds nothing out.
    Special tokens are never held out. Shapes: pair_patient, pair_concept (U,) distinct pairs;
    n_visits (P,) (patients with a visit before the last one are preferred; None: no preference).
    """
    none = np.zeros(n_patients, dtype=bool)
    if opts.rood_codes <= 0 or len(pair_concept) == 0:
        return np.zeros(0, np.int32), none, none.copy()
    per_code = np.bincount(pair_concept, minlength=n_concepts)  # (N,)
    hi = opts.rood_max_patients if opts.rood_max_patients is not None else max(3, n_patients // 1000)
    cand = np.flatnonzero((per_code >= opts.rood_min_patients) & (per_code <= hi))
    cand = cand[cand >= N_SPECIAL]
    rng = np.random.default_rng([opts.seed, 32])
    held = rng.choice(cand, size=min(opts.rood_codes, len(cand)), replace=False)
    rare = per_code <= hi
    rare[:N_SPECIAL] = False
    extra = _unseen_codes(
        pair_patient,
        pair_concept,
        n_patients,
        held,
        rare,
        unseen_target(opts, n_patients),
        n_visits,
        np.random.default_rng([opts.seed, 33]),
    )
    held = np.unique(np.concatenate([held, extra])).astype(np.int32)
    return (held, *rood_masks(pair_patient, pair_concept, n_patients, held))


def _unseen_codes(
    pair_patient: np.ndarray,
    pair_concept: np.ndarray,
    n_patients: int,
    held: np.ndarray,
    rare: np.ndarray,
    target: int,
    n_visits: np.ndarray | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Concept ids to hold out beyond ``held`` so that ``target`` patients are rood_unseen (fewer when the
    cohort has too few patients whose codes are all ``rare`` (N,)): greedily all codes of such patients,
    those with a visit before the last one first, then those whose codes occur in the fewest patients in
    all (the fewest patients removed with them), ties at random."""
    is_held = np.zeros(len(rare), dtype=bool)
    is_held[held] = True
    n_all = np.bincount(pair_patient, minlength=n_patients)  # (P,)
    n_held = np.bincount(pair_patient, weights=is_held[pair_concept], minlength=n_patients).astype(np.int64)
    unseen = (n_held > 0) & (n_held * 2 >= n_all)
    count = int(unseen.sum())
    if count >= target:
        return np.zeros(0, np.int32)
    not_rare = np.bincount(pair_patient, weights=~rare[pair_concept], minlength=n_patients)
    cand = np.flatnonzero((not_rare == 0) & (n_all > 0) & ~unseen)
    one_visit = np.zeros(len(cand), bool) if n_visits is None else np.asarray(n_visits)[cand] < 2
    per_code = np.bincount(pair_concept, minlength=len(rare))
    reach = np.bincount(pair_patient, weights=per_code[pair_concept], minlength=n_patients)[cand]
    cand = cand[np.lexsort((rng.random(len(cand)), reach, one_visit))]
    by_patient = np.argsort(pair_patient, kind="stable")  # pair rows grouped by patient, then by concept
    p_ptr = np.searchsorted(pair_patient[by_patient], np.arange(n_patients + 1))
    by_concept = np.argsort(pair_concept, kind="stable")
    c_ptr = np.searchsorted(pair_concept[by_concept], np.arange(len(rare) + 1))
    extra = []
    for p in cand:
        if count >= target:
            break
        if unseen[p]:
            continue
        for c in pair_concept[by_patient[p_ptr[p] : p_ptr[p + 1]]]:
            if is_held[c]:
                continue
            is_held[c] = True
            extra.append(c)
            pats = pair_patient[by_concept[c_ptr[c] : c_ptr[c + 1]]]
            n_held[pats] += 1
            new = pats[~unseen[pats] & (n_held[pats] * 2 >= n_all[pats])]
            unseen[new] = True
            count += len(new)
    return np.array(extra, dtype=np.int32)


def assign_splits(
    n_visits: np.ndarray, rood: np.ndarray, given: np.ndarray | None, opts: SplitOptions
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(split code per patient (P,) int8 indexing SPLITS, disease-task flag (P,), the sizes used).

    A requested size larger than the eligible patients left takes them all; the sizes returned are the
    ones used (``<key>_requested`` added where fewer than requested were available).
    """
    n = len(n_visits)
    rng = np.random.default_rng([opts.seed, 90])
    split = np.full(n, -1, dtype=np.int8)
    split[rood] = ROOD
    eligible = (n_visits >= 2) & ~rood
    sizes = scaled_sizes(opts, int((~rood).sum()))
    used = dict(sizes)
    order = rng.permutation(n)
    given = np.full(n, None, dtype=object) if given is None else given
    held_out = (given == "held_out") & ~rood
    split[held_out] = TEST
    disease = np.zeros(n, dtype=bool)
    disease[held_out] = True
    if held_out.any():
        used["test"] = int(held_out.sum())
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
        used[size_key] = len(picked)
        if dis_key:
            disease[picked[: sizes[dis_key]]] = True
            used[dis_key] = min(sizes[dis_key], len(picked))
        else:
            disease[picked] = True
    for k, v in sizes.items():
        if used[k] < v and not (k == "test" and held_out.any()):
            used[f"{k}_requested"] = v
    # pretraining: everyone left, validation drawn at random from all of them (an independent draw, so
    # pretrain_train and pretrain_val have the same make-up, e.g. of visit counts)
    rest = np.flatnonzero(split < 0)
    if (given != None).any():  # noqa: E711 (elementwise on an object array)
        val = given[rest] == "tuning"
        split[rest[val]], split[rest[~val]] = PRETRAIN_VAL, PRETRAIN_TRAIN
    else:
        n_val = int(round(opts.pretrain_val_fraction * len(rest)))
        val = np.random.default_rng([opts.seed, 91]).choice(rest, size=n_val, replace=False)
        split[rest] = PRETRAIN_TRAIN
        split[val] = PRETRAIN_VAL
    if not (split == PRETRAIN_TRAIN).any():
        taken = ", ".join(f"{k} {v}" for k, v in used.items() if not k.endswith("_requested"))
        log.warning(
            "no patient is left for pretraining (pretrain_train is empty): the fine-tuning and test splits "
            "took all %d patients (%s); lower --test / --finetune-train / --finetune-val to pretrain",
            n,
            taken,
        )
    return split, disease, used


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
